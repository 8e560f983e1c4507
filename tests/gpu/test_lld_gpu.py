"""An LLD-linked library pruned for this GPU loads and its kernels run (issue 26, point 2).

The library of tests/gpu/lld_library.py: the demo library and tests/data/lld_kernels.cu (five
kernels in two modules; SASS sm_75, sm_80, sm_90 and PTX compute_90) linked by ``ld.lld``, whose
wrapper slots hold 0 (the target only in each ``RELATIVE`` relocation's addend), with the static
CUDA runtime. It is built here when ``ld.lld`` and nvcc are on PATH; else it is read from
``FATBINKIT_LLD_LIBRARY``, built on the CPU machine by
``python tests/gpu/lld_library.py .artifacts/lld`` (``.artifacts/lld/liblld.so``).

Pruned for this GPU, a host program (Python through ctypes, in a child process) calls the
library's exported functions, which launch the kernels through the CUDA runtime: results equal
the unpruned library's and the values computed here. Pruned for sm_80 alone, the runtime finds
no image for this GPU (``cudaErrorNoKernelImageForDevice``): the kernels that ran came from the
pruned containers the rewritten relocations point at.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lld_library import LINKS, compile_objects, link

from fatbinkit.formats import elf
from fatbinkit.formats.arch import Arch
from fatbinkit.runtime import Device
from fatbinkit.slim import prune

N, A = 1000, 2.0
CUDA_ERROR_NO_KERNEL_IMAGE = 209  # cudaErrorNoKernelImageForDevice
RUN = """
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
n, a = int(sys.argv[2]), float(sys.argv[3])
y, total, fill = (ctypes.c_float * n)(), ctypes.c_float(), (ctypes.c_float * n)()
rc = lib.lld_run(n, ctypes.c_float(a), y, ctypes.byref(total))
rc2 = lib.slim_run(fill, n, ctypes.c_float(a))
print(json.dumps({"lld_run": rc, "slim_run": rc2, "y": list(y), "total": total.value,
                  "fill": list(fill)}))
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("FATBINKIT_LLD_LIBRARY")
    if given:
        return Path(given)
    nvcc = shutil.which("nvcc")
    if not (shutil.which("ld.lld") and nvcc):
        pytest.skip("no ld.lld here: build the library on the CPU machine (python "
                    "tests/gpu/lld_library.py .artifacts/lld), carry .artifacts/lld and set "
                    "FATBINKIT_LLD_LIBRARY=.artifacts/lld/liblld.so")
    root = tmp_path_factory.mktemp("lld")
    return link(compile_objects(root, nvcc), root / "liblld.so", LINKS["lld"][0], nvcc)


def _slots(path: Path) -> list[tuple[int, int]]:
    """(bytes in the slot, RELATIVE addend) of each wrapper (pyelftools is a CPU test
    dependency, not installed on the GPU machine: read with fatbinkit's section table)."""
    data = path.read_bytes()
    sections = {s.name: s.header for s in elf.sections(data)}
    seg, rela = sections[".nvFatBinSegment"], sections[".rela.dyn"]
    slots = [seg.addr + 24 * k + 8 for k in range(seg.size // 24)]
    addends = {offset: addend for offset, _info, addend in elf.Rela.FORMAT.iter_unpack(
        data[rela.offset : rela.offset + rela.size]) if offset in slots}
    shift = seg.addr - seg.offset
    return [(struct.unpack_from("<Q", data, slot - shift)[0], addends[slot]) for slot in slots]


def _run(lib: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", RUN, str(lib), str(N), str(A)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _record(key: str, row: dict[str, Any]) -> None:
    print(key, row)
    target = os.environ.get("FATBINKIT_GPU_REPORT")
    if not target:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    doc.setdefault("lld_gpu", {})[key] = row
    path.write_text(json.dumps(doc, indent=2) + "\n")


@pytest.mark.parametrize("ptx", ["none", "keep"])
def test_pruned_lld_library_runs(gpu: Device, library: Path, tmp_path: Path, ptx: str) -> None:
    slots = _slots(library)
    assert len(slots) == 2 and all(stored == 0 and addend for stored, addend in slots)
    out = tmp_path / "liblld.so"
    prune(library, out, [Arch(gpu.arch.number)], ptx=ptx)
    assert out.stat().st_size < library.stat().st_size
    assert [stored for stored, _ in _slots(out)] == [0, 0]
    before, after = _run(library), _run(out)
    assert after["lld_run"] == after["slim_run"] == 0
    assert after["y"] == [((A + 1) * i) ** 2 for i in range(N)]
    assert after["total"] == pytest.approx(sum(((A + 1) * i) ** 2 for i in range(N)), rel=1e-3)
    assert after["fill"] == [A * i + 1 for i in range(N)]
    assert (after["y"], after["fill"]) == (before["y"], before["fill"])
    _record(f"sm_{gpu.arch.number} ptx={ptx}", {
        "size_before": library.stat().st_size, "size_after": out.stat().st_size,
        "addends_before": [a for _, a in slots], "addends_after": [a for _, a in _slots(out)],
        "lld_run": after["lld_run"], "slim_run": after["slim_run"], "total": after["total"]})


def test_pruned_for_another_gpu_finds_no_image(gpu: Device, library: Path,
                                               tmp_path: Path) -> None:
    if gpu.arch.number // 10 == 8:
        pytest.skip("sm_80 SASS runs on this GPU")
    out = tmp_path / "liblld.so"
    prune(library, out, [Arch(80)], ptx="none")
    result = _run(out)
    assert result["lld_run"] == result["slim_run"] == CUDA_ERROR_NO_KERNEL_IMAGE
    _record("sm_80 only", {"lld_run": result["lld_run"], "slim_run": result["slim_run"]})
