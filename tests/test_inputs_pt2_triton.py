"""Two more inputs of many binaries (issue 31): a Triton cache folder and an AOTInductor ``.pt2``.

- Triton's own cache (``TRITON_CACHE_DIR``), after ``triton.compile`` for sm_90 and sm_80 (no
  GPU): ``fatbinkit ls`` of the folder lists each kernel's ``.cubin`` and ``.ptx``, with the
  arch Triton's metadata records beside them; the functions ``ls --resources`` reads from each
  cubin are the ones ``cuobjdump -res-usage`` prints.
- A ``.pt2`` written by torch's own ``package_aoti`` holding a cubin and a host library with an
  embedded fatbin: its listing is the listing of each file on its own, and cuobjdump's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cudabuild import NVCC, need, run
from fatbin_kernels import SOURCE, cuobjdump, cuobjdump_list


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_a_triton_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fatbinkit.demo import kernels as tk

    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    for arch in (90, 80):
        triton.compile(ASTSource(fn=tk.add_kernel, signature=dict(tk.ADD_SIGNATURE),
                                 constexprs=dict(tk.ADD_CONSTEXPRS)),
                       target=GPUTarget("cuda", arch, 32))
    cubins = sorted(cache.rglob("*.cubin"))
    ptxs = sorted(cache.rglob("*.ptx"))
    assert len(cubins) == len(ptxs) == 2
    doc = json.loads(_cli("ls", cache, "--json").stdout)
    listed = {f["file"]: [(e["kind"], e["arch"]) for e in f["entries"]] for f in doc["files"]}
    for path in cubins + ptxs:
        # what Triton compiled for: its metadata's arch, with the suffix its PTX targets
        meta = json.loads((path.parent / f"{path.stem}.json").read_text())
        target = re.search(r"^\.target (sm_\d+a?)", (path.parent / f"{path.stem}.ptx")
                           .read_text(), re.M)
        assert target is not None and target[1].startswith(f"sm_{meta['target']['arch']}")
        sm = target[1]
        want = ("sass", sm) if path.suffix == ".cubin" else ("ptx", sm.replace("sm_", "compute_"))
        assert listed[path.relative_to(cache).as_posix()] == [want]
    resources = json.loads(_cli("ls", cache, "--resources", "--json").stdout)
    for f in resources["files"]:
        for e in f["entries"]:
            if e["kind"] != "sass":
                continue
            names = {fn["name"] for fn in e["functions"]}
            out = cuobjdump("-res-usage", cache / f["file"])
            assert names == set(re.findall(r"Function (\S+):", out)) and names


def test_a_pt2_package(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from torch._inductor.package import package_aoti

    nvcc = need(NVCC)
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    cubin = tmp_path / "k.cubin"
    run([nvcc, "-cubin", "-arch=sm_90", "-o", cubin, src])
    host = tmp_path / "host.cu"
    host.write_text(SOURCE + "\nextern \"C\" int touch() { return 1; }\n")
    lib = tmp_path / "libmodel.so"
    run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
         "-gencode", "arch=compute_90,code=compute_90", "-o", lib, host])
    pt2 = tmp_path / "model.pt2"
    package_aoti(str(pt2), [str(lib), str(cubin)])
    doc = json.loads(_cli("ls", pt2, "--json").stdout)
    by_name = {Path(f["file"]).name: f["entries"] for f in doc["files"]}
    assert set(by_name) == {"libmodel.so", "k.cubin"}
    for name, path in (("libmodel.so", lib), ("k.cubin", cubin)):
        alone = json.loads(_cli("ls", path, "--json").stdout)["entries"]
        assert [(e["kind"], e["arch"], e["stored"]) for e in by_name[name]] == \
            [(e["kind"], e["arch"], e["stored"]) for e in alone]
    assert [line.split(": ")[1] for line in cuobjdump_list(lib)] == \
        [e["name"] for e in by_name["libmodel.so"]]
    summary = _cli("ls", pt2, "--summary")
    assert summary.returncode == 0 and "sm_80" in summary.stdout
