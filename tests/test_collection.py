"""``fatbinkit ls`` of a wheel or a folder: each library with device code, then the total.

The oracle is cuobjdump over the unpacked files (what a user would otherwise script: unzip, then
``cuobjdump -lelf -lptx`` on each file): per library the same listing lines, and the summary's
counts per kind equal to its ELF and PTX lines. The real wheel is CuPy for CUDA 13 (dozens of
extension modules with fatbins), fetched from the registry into the cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import jsonschema
import pytest
from cudabuild import NVCC, res_usage_blocks, run
from fatbin_kernels import cuobjdump, cuobjdump_extract, system_tool
from thirdparty import BITSANDBYTES, CACHE, CUPY13_RANDOM, CURAND11, CURAND13, fetch

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())


def fatbinkit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def validate(doc: Any, what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})
    jsonschema.validate(doc, SCHEMA)


def _listing(path: Path) -> list[str]:
    return [line for line in cuobjdump("-lelf", "-lptx", path).splitlines()
            if re.match(r"^(ELF|PTX) file", line)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real libraries in a tree, a host-only ELF beside them and a symbolic link."""
    root = tmp_path_factory.mktemp("folder")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "libcurand.so.10").write_bytes(fetch(CURAND13).read_bytes())
    (root / "a" / "b" / "_generator_api.so").write_bytes(fetch(CUPY13_RANDOM).read_bytes())
    (root / "a" / "libcurand.so").symlink_to("libcurand.so.10")
    (root / "README.txt").write_text("not a binary\n")
    (root / "host.so").write_bytes(b"\x7fELF" + bytes(60))  # ELF magic, not a loadable file
    return root


def test_folder_listing_equals_cuobjdump_per_file(folder: Path) -> None:
    proc = fatbinkit("ls", folder)
    assert proc.returncode == 0, proc.stderr
    sections = re.split(r"^== (.+) ==\n", proc.stdout, flags=re.M)[1:]
    got = dict(zip(sections[::2], sections[1::2], strict=True))
    assert list(got) == ["a/b/_generator_api.so", "a/libcurand.so.10"]  # the link not twice
    for name, text in got.items():
        assert text.splitlines() == _listing(folder / name), name
    doc = json.loads(fatbinkit("ls", folder, "--json").stdout)
    validate(doc, "listings")
    for row in doc["files"]:
        assert [f"{'ELF' if e['kind'] == 'sass' else 'PTX'} file {e['number']:4d}: {e['name']}"
                for e in row["entries"]] == _listing(folder / row["file"])


def test_folder_summary_per_file_and_total(folder: Path) -> None:
    proc = fatbinkit("ls", folder, "--summary", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "summaries")
    for s in doc["files"]:
        alone = json.loads(fatbinkit("ls", folder / s["file"], "--summary", "--json").stdout)
        assert s == {**alone, "file": s["file"]}
        kinds = Counter(line.split()[0] for line in _listing(folder / s["file"]))
        assert kinds == Counter({"ELF": sum(a["entries"] for a in s["archs"]
                                            if a["kind"] == "sass"),
                                 "PTX": sum(a["entries"] for a in s["archs"]
                                            if a["kind"] == "ptx")})
    total = doc["total"]
    for key in ("entries", "stored", "uncompressed", "modules"):
        assert total[key] == sum(s[key] for s in doc["files"]), key
    for d in total["devices"]:
        rows = [x for s in doc["files"] for x in s["devices"] if x["device"] == d["device"]]
        assert d["sass"] == sum(x["sass"] for x in rows) and d["none"] == sum(
            x["none"] for x in rows)
    text = fatbinkit("ls", folder, "--summary").stdout
    assert "== a/libcurand.so.10 ==" in text and f"{folder} (total of 2 files)" in text


@pytest.fixture(scope="module")
def cupy_wheel() -> Path:
    fetch(CUPY13_RANDOM)  # downloads the wheel into the cache
    return next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))


@pytest.fixture(scope="module")
def unpacked(cupy_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The oracle's side: the wheel's shared libraries unzipped, those in which cuobjdump finds
    device code, by their path inside."""
    root = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(cupy_wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".so")]
        z.extractall(root, names)
    found = {n: root / n for n in names if _listing(root / n)}
    assert len(found) >= 3
    return found


def test_wheel_summary_equals_cuobjdump_over_the_unpacked_files(
        cupy_wheel: Path, unpacked: dict[str, Path]) -> None:
    """CuPy for CUDA 13's wheel, read without unpacking it; the oracle unpacks it."""
    proc = fatbinkit("ls", cupy_wheel, "--summary", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    files = {s["file"]: s for s in doc["files"]}
    expected = {n: Counter(line.split()[0] for line in _listing(p)) for n, p in unpacked.items()}
    assert set(files) == set(expected)
    for n, kinds in expected.items():
        s = files[n]
        assert kinds == Counter({k: v for k, v in (
            ("ELF", sum(a["entries"] for a in s["archs"] if a["kind"] == "sass")),
            ("PTX", sum(a["entries"] for a in s["archs"] if a["kind"] == "ptx"))) if v}), n
    assert doc["total"]["entries"] == sum(sum(c.values()) for c in expected.values())


def test_wheel_listing_names_images_after_each_library(
        cupy_wheel: Path, unpacked: dict[str, Path]) -> None:
    """Images of a wheel member are named after its file, as cuobjdump names them after the
    unpacked file (``_generator_api.cpython-311-x86_64-linux-gnu.1.sm_75.cubin``)."""
    proc = fatbinkit("ls", cupy_wheel)
    assert proc.returncode == 0, proc.stderr
    sections = re.split(r"^== (.+) ==\n", proc.stdout, flags=re.M)[1:]
    got = dict(zip(sections[::2], sections[1::2], strict=True))
    assert list(got) == sorted(unpacked)
    for name, path in unpacked.items():
        assert got[name].splitlines() == _listing(path), name


def _fields(f: dict[str, Any]) -> dict[str, int]:
    """A function of ``ls --resources --json`` in cuobjdump -res-usage's fields."""
    fields = {"REG": f["registers"], "STACK": f["stack"], "SHARED": f["shared"],
              "LOCAL": f["local"]}
    fields.update({f"CONSTANT[{b}]": n for b, n in f["constant"].items()})
    fields.update({"TEXTURE": f["texture"], "SURFACE": f["surface"], "SAMPLER": f["sampler"]})
    return fields


def test_wheel_resources_equal_cuobjdump_res_usage_per_library(
        cupy_wheel: Path, unpacked: dict[str, Path]) -> None:
    proc = fatbinkit("ls", cupy_wheel, "--resources", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "listings")
    oracle = {n: res_usage_blocks(p) for n, p in unpacked.items()}
    assert [row["file"] for row in doc["files"]] == sorted(oracle)
    for row in doc["files"]:
        elves = [e for e in row["entries"] if e["kind"] == "sass"]
        blocks = oracle[row["file"]]
        assert len(elves) == len(blocks) > 0
        for entry, (arch, usage) in zip(elves, blocks, strict=True):
            assert entry["arch"].rstrip("f") == arch.rstrip("f")
            assert [(f["name"], _fields(f)) for f in entry["functions"]] == usage.functions
    # the text: each library's listing with cuobjdump's figures under each cubin
    text = fatbinkit("ls", cupy_wheel, "--resources").stdout
    sections = re.split(r"^== (.+) ==\n", text, flags=re.M)[1:]
    for name, body in zip(sections[::2], sections[1::2], strict=True):
        lines = [line.split(": ", 1) for line in body.splitlines()
                 if line.startswith("    ") and not line.startswith("    Common: ")]
        expected = [(n, " ".join(f"{k}:{v}" for k, v in fields.items()))
                    for _, usage in oracle[name] for n, fields in usage.functions]
        assert len(lines) == len(expected)
        for (head, figures), (n, fields) in zip(lines, expected, strict=True):
            assert head.strip().split(" ", 1)[1] == n and figures.startswith(fields)


def test_wheel_top_functions_over_every_library(
        cupy_wheel: Path, unpacked: dict[str, Path]) -> None:
    """``--sort shared --top 25``: the 25 largest of every library's functions, each naming
    its library; the figures and the order are cuobjdump's."""
    proc = fatbinkit("ls", cupy_wheel, "--resources", "--sort", "shared", "--top", "25",
                     "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "function_table")
    every = sorted((fields["SHARED"], n, name, arch.rstrip("f"))
                   for n, p in unpacked.items() for arch, usage in res_usage_blocks(p)
                   for name, fields in usage.functions)
    rows = doc["functions"]
    assert len(rows) == 25
    assert [r["shared"] for r in rows] == [s for s, *_ in reversed(every)][:25]
    ours = Counter((r["shared"], r["library"], r["name"], r["arch"].rstrip("f")) for r in rows)
    assert not ours - Counter(every)  # each row is one of cuobjdump's functions
    text = fatbinkit("ls", cupy_wheel, "--resources", "--top", "3").stdout.splitlines()
    assert len(text) == 4 and all(".so: " in line for line in text[1:])


def _entries_per_arch(path: Path) -> dict[str, set[str]]:
    """The kernels (``FUNC GLOBAL ... ENTRY`` symbols) of each cubin arch, by
    ``cuobjdump -symbols``."""
    found: dict[str, set[str]] = {}
    for block in cuobjdump("-symbols", path).split("Fatbin ")[1:]:
        arch = re.search(r"^arch = (\S+)", block, re.M)
        if block.startswith("elf code:") and arch:
            found.setdefault(arch.group(1), set()).update(
                line.split()[-1] for line in block.splitlines()
                if re.match(r"FUNC +GLOBAL +\S+ +ENTRY ", line))
    return found


def test_wheel_summary_kernels(cupy_wheel: Path, unpacked: dict[str, Path]) -> None:
    """``--summary --kernels``: each library's distinct kernels per cubin arch, as the entry
    symbols ``cuobjdump -symbols`` lists."""
    proc = fatbinkit("ls", cupy_wheel, "--summary", "--kernels", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "summaries")
    for s in doc["files"]:
        oracle = _entries_per_arch(unpacked[s["file"]])
        ours = {a["arch"]: a["kernels"] for a in s["archs"] if a["kind"] == "sass"}
        assert ours == {arch: len(names) for arch, names in oracle.items()}, s["file"]
        assert all(ours.values())


def test_wheel_extract_equals_cuobjdump_per_library(
        cupy_wheel: Path, unpacked: dict[str, Path], tmp_path: Path) -> None:
    """Each library into OUT/<its path inside>/, files and bytes as cuobjdump -xelf all -xptx
    all writes them from the unpacked library."""
    out = tmp_path / "out"
    proc = fatbinkit("extract", cupy_wheel, "-o", out)
    assert proc.returncode == 0, proc.stderr
    written = {Path(line) for line in proc.stdout.splitlines()}
    assert written == {p for p in out.rglob("*") if p.is_file()}
    for name, path in unpacked.items():
        oracle = cuobjdump_extract(path, tmp_path / "oracle" / name)
        ours = {p.name: p.read_bytes() for p in (out / name).iterdir()}
        assert ours == oracle, name
    # a selection: only the libraries that hold it get a folder
    sel = tmp_path / "sel"
    proc = fatbinkit("extract", cupy_wheel, "-o", sel, "--arch", "sm_90", "--kernel",
                     "*DeviceHistogram*")
    assert proc.returncode == 0, proc.stderr
    folders = {p.parent.relative_to(sel).as_posix() for p in sel.rglob("*.cubin")}
    assert folders and folders < set(unpacked)
    assert {p.relative_to(sel).as_posix() for p in sel.rglob("*") if p.is_dir()} == {
        "/".join(f.split("/")[:i]) for f in folders for i in range(1, f.count("/") + 2)}


def test_empty_folder(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    proc = fatbinkit("ls", empty)
    assert proc.returncode == 3 and f"{empty}: this folder holds no ELF" in proc.stderr


# -- check and extract of a folder of libraries built here ------------------------------------

# What loads where, from the CUDA C++ Programming Guide ("Binary Compatibility": a cubin built
# for compute capability X.y runs on X.z with z >= y only; "Application Compatibility": PTX is
# JIT-compiled for any later compute capability), written apart from fatbinkit.compat:
# a/sass80.fatbin holds SASS for sm_80 only, b/jit80.fatbin SASS for sm_80 and PTX compute_80.
# Per library: works, fails (a picked image cannot load) or none (no image for the arch).
EXPECTED = {
    "sm_75": {"a/sass80.fatbin": "none", "b/jit80.fatbin": "none"},  # older than both
    "sm_80": {"a/sass80.fatbin": "works", "b/jit80.fatbin": "works"},  # SASS
    "sm_86": {"a/sass80.fatbin": "works", "b/jit80.fatbin": "works"},  # sm_80 SASS on 8.6
    "sm_90": {"a/sass80.fatbin": "none", "b/jit80.fatbin": "works"},  # b by PTX JIT only
}
# The total, from the rule documented for users (docs/inspect.md): a library is loaded on its
# own, and one built for other GPUs only (a wheel's per-arch extensions) fails only where it is
# used: the total is partial (fails with --strict); a library that cannot load what the driver
# picks, or no library loading at all, fails.
TOTAL = {"sm_75": "fails", "sm_80": "works", "sm_86": "works", "sm_90": "partial"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("built")
    for name, code in (("a/sass80.fatbin", "sm_80"), ("b/jit80.fatbin", "[sm_80,compute_80]")):
        (root / name).parent.mkdir()
        run([NVCC, "-fatbin", "-gencode", f"arch=compute_80,code={code}",
             DATA / "axpy.cu", "-o", root / name])
    return root


def test_folder_check_totals_each_library(built: Path) -> None:
    archs = [a for arch in EXPECTED for a in ("--arch", arch)]
    proc = fatbinkit("check", built, *archs, "--json")
    assert proc.returncode == 1, proc.stderr  # sm_75 fails
    doc = json.loads(proc.stdout)
    validate(doc, "checks")
    assert [f["file"] for f in doc["files"]] == sorted(EXPECTED["sm_80"])
    for arch, files in EXPECTED.items():
        for f in doc["files"]:
            v = f["verdicts"][arch]
            assert ("none" if v["status"] == "fails" and not v["loading"] and not v["failed"]
                    else v["status"]) == files[f["file"]], (arch, f["file"])
        total = doc["verdicts"][arch]
        assert total["status"] == TOTAL[arch], arch
        assert total["works"] == sorted(n for n, s in files.items() if s == "works")
        assert total["other_gpus_only"] == sorted(n for n, s in files.items() if s == "none")
    sm90 = doc["verdicts"]["sm_90"]
    assert (sm90["sass"], sm90["jit"], sm90["other_gpus"]) == (0, 1, 1)
    assert not doc["ok"]
    for arch, strict, rc in (("sm_90", False, 0), ("sm_90", True, 1), ("sm_86", True, 0)):
        proc = fatbinkit("check", built, "--arch", arch, *(["--strict"] if strict else []))
        assert proc.returncode == rc, (arch, strict, proc.stdout + proc.stderr)
    text = fatbinkit("check", built, *archs, "--verbose").stdout
    assert re.search(r"^  sm_75 +FAILS .*\n +no library holds an image for sm_75", text, re.M)
    assert re.search(r"^  sm_90 +partial .*\n +1/2 libraries hold no image for sm_90 .*: "
                     r"a/sass80.fatbin", text, re.M)
    assert re.search(r"^  a/sass80.fatbin +none +works +works +none$", text, re.M)
    assert re.search(r"^  b/jit80.fatbin +none +works +works +works$", text, re.M)
    # each library's own report under its name, naming itself
    assert re.search(r"^== a/sass80.fatbin ==\na/sass80.fatbin: 1 module", text, re.M)


def test_folder_check_with_a_driver_floor(built: Path) -> None:
    """CUDA 13.0's cubins and PTX ISA 9.0 need a CUDA 13 driver (CUDA Toolkit release notes:
    the driver of each toolkit; PTX ISA 9.0 is CUDA 13.0's): with 12.4 nothing loads."""
    proc = fatbinkit("check", built, "--arch", "sm_80", "--arch", "sm_90", "--driver", "12.4",
                     "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert {a: v["status"] for a, v in doc["verdicts"].items()} == {"sm_80": "fails",
                                                                    "sm_90": "fails"}
    assert doc["verdicts"]["sm_80"]["fails"] == sorted(EXPECTED["sm_80"])
    assert doc["verdicts"]["sm_90"]["fails"] == ["b/jit80.fatbin"]  # a holds nothing for it


def test_folder_min_driver_is_the_highest_of_its_libraries(built: Path, tmp_path: Path) -> None:
    """cuRAND for CUDA 11 beside a library built by CUDA 13.0 (which needs a CUDA 13 driver):
    the folder needs 13.0 on sm_80, set by that library."""
    folder = tmp_path / "in"
    shutil.copytree(built, folder)
    (folder / "lib").mkdir()
    os.link(fetch(CURAND11), folder / "lib" / "libcurand.so.10")  # not a symbolic link
    proc = fatbinkit("check", folder, "--min-driver", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "min_drivers")
    assert doc["files"] == ["a/sass80.fatbin", "b/jit80.fatbin", "lib/libcurand.so.10"]
    sm80 = doc["min_driver"]["sm_80"]
    assert (sm80["min_driver"], sm80["min_driver_file"]) == ("13.0", "a/sass80.fatbin")
    alone = json.loads(fatbinkit("check", folder / "lib" / "libcurand.so.10", "--min-driver",
                                 "--json").stdout)["min_driver"]["sm_80"]["min_driver"]
    assert alone.startswith("11.")
    text = fatbinkit("check", folder, "--min-driver").stdout
    assert re.search(r"^  sm_80 +CUDA 13\.0 .*; set by a/sass80.fatbin$", text, re.M)


def test_extract_is_all_or_nothing_over_a_folder(built: Path, tmp_path: Path) -> None:
    """The second library's payload is corrupt: nothing of the first is left behind."""
    folder = tmp_path / "in"
    shutil.copytree(built, folder)
    bad = folder / "c" / "zstd.fatbin"
    bad.parent.mkdir()
    run([NVCC, "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-Xfatbin=-compress-all",
         DATA / "axpy.cu", "-o", bad])
    data = bytearray(bad.read_bytes())
    at = data.find(b"\x28\xb5\x2f\xfd")  # the zstd frame's magic
    assert at > 0
    data[at:at + 4] = bytes(4)
    bad.write_bytes(data)
    out = tmp_path / "out"
    proc = fatbinkit("extract", folder, "-o", out)
    assert proc.returncode == 3 and f"{bad}: corrupt zstd payload" in proc.stderr
    assert not out.exists()
    (out / "keep").mkdir(parents=True)
    proc = fatbinkit("extract", folder, "-o", out)
    assert proc.returncode == 3
    assert [p.relative_to(out).as_posix() for p in out.rglob("*")] == ["keep"]


@pytest.mark.parametrize("name", ["../evil.fatbin", "/abs/evil.fatbin", "a/../../evil.fatbin",
                                  "zz/../../evil.fatbin", "a/b\nc.fatbin"])
def test_extract_refuses_wheel_members_outside_the_folder(built: Path, tmp_path: Path,
                                                          name: str) -> None:
    """A name that leaves the folder (or holds a control character, which would forge the
    one-path-per-line output), whether it comes before or after a good library."""
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(name, (built / "a" / "sass80.fatbin").read_bytes())
        z.writestr("pkg/ok.fatbin", (built / "b" / "jit80.fatbin").read_bytes())
    out = tmp_path / "out"
    proc = fatbinkit("extract", wheel, "-o", out)
    assert proc.returncode == 3
    assert "refusing to write" in proc.stderr and proc.stdout == ""
    assert not out.exists() and not (tmp_path / "evil.fatbin").exists()
    assert fatbinkit("ls", wheel).returncode == 0  # reading it is harmless


@pytest.mark.parametrize("case", ["nested", "long"])
def test_extract_refuses_names_it_cannot_write(built: Path, tmp_path: Path, case: str) -> None:
    """``lib/a.fatbin``'s image ``a.1.sm_80.cubin`` and a member ``lib/a.fatbin/a.1.sm_80.cubin``
    want one path as a file and as a folder; a name longer than the file system takes. Either
    is one error, and the output folder is left as it was."""
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    data = (built / "a" / "sass80.fatbin").read_bytes()
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("lib/a.fatbin", data)
        z.writestr("lib/a.fatbin/a.1.sm_80.cubin" if case == "nested" else
                   f"lib/{'x' * 300}.fatbin", data)
    out = tmp_path / "out"
    (out / "keep").mkdir(parents=True)
    proc = fatbinkit("extract", wheel, "-o", out)
    assert proc.returncode == 3 and proc.stderr.startswith("fatbinkit: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert [p.relative_to(out).as_posix() for p in out.rglob("*")] == ["keep"]


def test_json_listing_is_all_or_nothing(built: Path, tmp_path: Path) -> None:
    """A corrupt payload in the second library: an error, and no half JSON document."""
    folder = tmp_path / "in"
    shutil.copytree(built, folder)
    bad = folder / "c.fatbin"
    run([NVCC, "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-Xfatbin=-compress-all",
         DATA / "axpy.cu", "-o", bad])
    data = bytearray(bad.read_bytes())
    at = data.find(b"\x28\xb5\x2f\xfd")
    data[at:at + 4] = bytes(4)
    bad.write_bytes(data)
    proc = fatbinkit("ls", folder, "--resources", "--json")
    assert proc.returncode == 3 and "corrupt zstd payload" in proc.stderr
    assert proc.stdout == ""


def test_folder_all_as_cuobjdump_all(tmp_path: Path) -> None:
    """``--all`` over a folder reads each file's ``__nv_relfatbin`` too (an -rdc executable),
    listing and extracting what ``cuobjdump -all`` does."""
    (tmp_path / "main.cu").write_text("int main() { return 0; }\n")
    exe = tmp_path / "in" / "bin" / "app"
    exe.parent.mkdir(parents=True)
    run([NVCC, "-rdc=true", "-gencode", "arch=compute_80,code=sm_80", DATA / "axpy.cu",
         tmp_path / "main.cu", "-o", exe])
    for flags in ([], ["--all"]):
        proc = fatbinkit("ls", tmp_path / "in", *flags)
        assert proc.returncode == 0, proc.stderr
        listing = cuobjdump(*(["-all"] if flags else []), "-lelf", "-lptx", exe)
        oracle = [line for line in listing.splitlines() if re.match("^(ELF|PTX) file", line)]
        assert proc.stdout.splitlines() == ["== bin/app ==", *oracle]
    assert len(oracle) == 3  # the relocatable fatbins too
    proc = fatbinkit("extract", tmp_path / "in", "-o", tmp_path / "out", "--all")
    assert proc.returncode == 0, proc.stderr
    ours = {p.name: p.read_bytes() for p in (tmp_path / "out" / "bin" / "app").iterdir()}
    assert ours == cuobjdump_extract(exe, tmp_path / "oracle", all=True)


# -- alternatives: one library built per CUDA version, the package loads one ----------------------


@pytest.mark.parametrize(("name", "build"), [
    ("bitsandbytes/libbitsandbytes_cuda118.so", (11, 8)),
    ("bitsandbytes/libbitsandbytes_cuda132.so", (13, 2)),
    ("torch_cu121/lib/x.so", (12, 1)),
    ("cupy_cuda12x/_core.so", (12, -1)),
    ("jax_cuda13_plugin/xla_cuda_plugin.so", (13, -1)),
    ("lib/libfoo_cuda92.so", (9, 2)),
    ("lib/libfoo_CUDA100.dll", (10, 0)),
    ("cu13/lib/libx_cuda13.so.13", (13, -1)),  # one version named twice
    ("nvidia/cuda_runtime/lib/libcudart.so.12", None),  # no version: words, not builds
    ("lib/libcuda.so.1", None),
    ("lib/cuda_fp16_kernels.so", None),
    ("lib/libcudnn_cu.so", None),
    ("cu121/libx_cuda118.so", None),  # two different versions: not a build of either
])
def test_cuda_build_of_a_path(name: str, build: tuple[int, int] | None) -> None:
    from fatbinkit.collection import cuda_build

    assert cuda_build(name) == build


def test_alternatives_are_paths_equal_but_for_the_cuda_version() -> None:
    from fatbinkit.collection import alternatives

    names = ["bnb/libbitsandbytes_cuda121.so", "bnb/libbitsandbytes_cuda118.so",
             "bnb/libbitsandbytes_cuda121_nocublaslt.so",
             "bnb/libbitsandbytes_cuda118_nocublaslt.so",
             "bnb/libbitsandbytes_cuda130.so", "bnb/libbitsandbytes_cpu.so",
             "x/_C_cuda12.cpython-311-x86_64-linux-gnu.so",
             "x/_C_cuda13.cpython-312-x86_64-linux-gnu.so",
             "lib/libtwin_cuda12.so.12", "lib/libtwin_cuda13.so.13",
             "alone/libonly_cuda12.so", "same/liba_cu12.so", "same/liba_cu12x.so",
             "other/libz_cu121.so", "other/libz_cuda124.so"]  # fmt: skip
    assert alternatives(names) == [
        ("bnb/libbitsandbytes_cuda*.so", ("bnb/libbitsandbytes_cuda118.so",
                                         "bnb/libbitsandbytes_cuda121.so",
                                         "bnb/libbitsandbytes_cuda130.so")),
        ("bnb/libbitsandbytes_cuda*_nocublaslt.so", ("bnb/libbitsandbytes_cuda118_nocublaslt.so",
                                                    "bnb/libbitsandbytes_cuda121_nocublaslt.so")),
        ("lib/libtwin_cuda*.so", ("lib/libtwin_cuda12.so.12", "lib/libtwin_cuda13.so.13")),
        ("x/_C_cuda*.so", ("x/_C_cuda12.cpython-311-x86_64-linux-gnu.so",
                           "x/_C_cuda13.cpython-312-x86_64-linux-gnu.so")),
    ]  # one build alone, one version twice (cu12, cu12x), cu and cuda apart: no group


#: PTX ISA version of each twin's PTX and the CUDA version that introduced it (NVIDIA, PTX ISA
#: "Release Notes": ISA 7.8 is CUDA 11.8's, 8.7 is CUDA 12.8's); the third twin is nvcc 13.0's SASS
TWIN_PTX = {"cuda118": ("7.8", "11.8"), "cuda128": ("8.7", "12.8")}


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``lib/libaxpy_cuda118.fatbin``, ``_cuda128`` (PTX of axpy.cu for compute_80 written as ISA
    7.8 and 8.7, which ptxas accepts, stored uncompressed: a floor of 11.8 and 12.8) and
    ``_cuda130`` (sm_80 and sm_90 SASS by nvcc 13.0: a CUDA 13 driver)."""
    root = tmp_path_factory.mktemp("twins")
    lib = root / "lib"
    lib.mkdir()
    ptx = root / "axpy.ptx"
    run([NVCC, "-ptx", "-arch=compute_80", DATA / "axpy.cu", "-o", ptx])
    text = ptx.read_text()
    assert re.search(r"^\.version 9\.0$", text, re.M)
    for build, (isa, _) in TWIN_PTX.items():
        edited = root / f"{build}.ptx"
        edited.write_text(re.sub(r"^\.version 9\.0$", f".version {isa}", text, flags=re.M))
        run([system_tool("ptxas"), "-arch=sm_80", edited, "-o", root / "x.cubin"])  # valid
        run([NVCC, "-fatbin", "-Xfatbin", "-compress=false", "-gencode",
             "arch=compute_80,code=compute_80", edited, "-o", lib / f"libaxpy_{build}.fatbin"])
    run([NVCC, "-fatbin", "-gencode", "arch=compute_80,code=sm_80", "-gencode",
         "arch=compute_90,code=sm_90", DATA / "axpy.cu", "-o", lib / "libaxpy_cuda130.fatbin"])
    return lib


def _twin(build: str) -> str:
    return f"libaxpy_{build}.fatbin"


@pytest.mark.parametrize(("driver", "serving", "status", "counts"), [
    (None, "cuda130", "works", (1, 0, 0)),  # the newest that loads: SASS
    ("12.8", "cuda128", "works", (0, 1, 0)),  # 13.0's SASS needs a CUDA 13 driver: ISA 8.7 JIT
    ("12.4", "cuda118", "works", (0, 1, 0)),  # ISA 8.7 needs 12.8
    ("11.4", "cuda118", "fails", (0, 0, 1)),  # nothing loads: the build needing least is named
])
def test_twins_count_as_the_build_that_serves(twins: Path, driver: str | None, serving: str,
                                              status: str, counts: tuple[int, int, int]) -> None:
    """Per-CUDA-version twins are one library: the total is the serving build's verdict (before,
    the worst twin's: "FAILS" with a CUDA 12 driver), its driver floor the lowest twin's."""
    proc = fatbinkit("check", twins, "--arch", "sm_80", "--json",
                     *(["--driver", driver] if driver else []))
    doc = json.loads(proc.stdout)
    validate(doc, "checks")
    assert proc.returncode == (0 if status == "works" else 1), proc.stderr
    group = "libaxpy_cuda*.fatbin"
    builds = [_twin(b) for b in ("cuda118", "cuda128", "cuda130")]
    assert doc["alternatives"] == [{"group": group, "files": builds}]
    v = doc["verdicts"]["sm_80"]
    assert v["status"] == status and (v["sass"], v["jit"], v["cannot"]) == counts
    assert v["works" if status == "works" else "fails"] == [_twin(serving)]
    (alt,) = v["alternatives"]
    assert alt["serving"] == _twin(serving) and alt["group"] == group
    assert (alt["min_driver"], alt["min_driver_file"]) == ("11.8", _twin("cuda118"))
    assert v["min_driver"] == "11.8" and v["min_driver_file"] == _twin("cuda118")
    # each twin's own verdict is kept, and is what its file's own check says
    own = {f["file"]: f["verdicts"]["sm_80"]["status"] for f in doc["files"]}
    assert {f["file"]: f["status"] for f in alt["files"]} == own
    text = fatbinkit("check", twins, "--arch", "sm_80", *(["--driver", driver] if driver else []))
    assert re.search(rf"^    sm_80 +served by {re.escape(_twin(serving))}; lowest driver CUDA "
                     rf"11\.8 .*: {re.escape(_twin('cuda118'))}$", text.stdout, re.M), text.stdout
    idle = [b for b in builds if b != _twin(serving)]
    for name in idle:  # shown in parentheses: not counted
        assert re.search(rf"^  {re.escape(name)} +\(\w+\)$", text.stdout, re.M), text.stdout
    why = text.stdout.partition("\nwhy:\n")[2]
    assert all(name not in why for name in idle)


def test_twins_min_driver_is_the_lowest_build(twins: Path) -> None:
    """--min-driver: the group needs what its least demanding build needs (11.8: ISA 7.8), not
    the 13.0 its newest build needs."""
    proc = fatbinkit("check", twins, "--min-driver", "--arch", "sm_80", "--arch", "sm_90",
                     "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "min_drivers")
    for arch in ("sm_80", "sm_90"):
        v = doc["min_driver"][arch]
        assert (v["min_driver"], v["min_driver_file"]) == ("11.8", _twin("cuda118")), arch
    text = fatbinkit("check", twins, "--min-driver", "--arch", "sm_80").stdout
    assert re.search(r"^  sm_80 +CUDA 11\.8 .*; set by libaxpy_cuda118\.fatbin$", text, re.M), text
    assert "libaxpy_cuda*.fatbin: 3 builds (CUDA 11.8, 12.8, 13.0)" in text


def test_bitsandbytes_wheel_is_one_library_per_cuda_version() -> None:
    """bitsandbytes 0.50.2 (manylinux x86_64, 43 MB): seven builds, CUDA 11.8 to 13.2, one
    group. With a 12.8 driver libbitsandbytes_cuda128.so serves (the 13.x builds' CUDA 13
    cubins cannot load, the older ones load but are older) and the wheel works on Turing and
    Hopper; its minimum driver on each arch is the lowest any build needs, the same as that
    build's own check."""
    fetch(BITSANDBYTES)
    (wheel,) = sorted((CACHE / "wheels").glob("bitsandbytes-0.50.2-*linux*_x86_64.whl"))
    proc = fatbinkit("check", wheel, "--arch", "sm_75", "--arch", "sm_90", "--driver", "12.8",
                     "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "checks")
    builds = [f"bitsandbytes/libbitsandbytes_cuda{v}.so"
              for v in ("118", "121", "124", "126", "128", "130", "132")]
    assert doc["alternatives"] == [{"group": "bitsandbytes/libbitsandbytes_cuda*.so",
                                    "files": builds}]
    own = {f["file"]: f["verdicts"] for f in doc["files"]}
    for arch in ("sm_75", "sm_90"):
        v = doc["verdicts"][arch]
        assert v["status"] == "works" and v["works"] == [builds[4]], arch
        assert v["alternatives"][0]["serving"] == builds[4]
        # the newest build whose own verdict with driver 12.8 works
        assert [b for b in builds if own[b][arch]["status"] == "works"][-1] == builds[4]
        assert {own[b][arch]["status"] for b in builds[5:]} == {"fails"}
    proc = fatbinkit("check", wheel, "--min-driver", "--arch", "sm_75", "--json")
    low = json.loads(proc.stdout)["min_driver"]["sm_75"]
    assert low["min_driver_file"] == builds[0]
    with zipfile.ZipFile(wheel) as z, TemporaryDirectory() as tmp:
        alone = Path(z.extract(builds[0], tmp))
        doc = json.loads(fatbinkit("check", alone, "--min-driver", "--arch", "sm_75",
                                   "--json").stdout)
    assert low["min_driver"] == doc["min_driver"]["sm_75"]["min_driver"]
    assert low["min_driver"].startswith("11.")  # not the CUDA 13 driver the 13.x builds need
    # the text of every GPU, AMD's too (whose verdicts hold no CUDA builds: it stopped with a
    # KeyError on the group): the group's lines name CUDA GPUs only
    text = fatbinkit("check", wheel, "--min-driver")
    assert text.returncode in (0, 1) and not text.stderr, text.stderr[-2000:]
    group = text.stdout.split("alternatives (one library built per CUDA version")[1]
    assert re.search(r"^ {4}sm_75 +lowest driver CUDA 11\.", group, re.M)
    assert not re.search(r"^ {4}gfx", group, re.M)


def test_inventory_lists_every_file_as_zipfile_and_os_walk(cupy_wheel: Path,
                                                          folder: Path) -> None:
    """inventory(): the binaries members() lists, and every file with its size, from one walk:
    a wheel's as zipfile lists them, a folder's as os.walk finds them (symbolic links left
    out, as members leaves them)."""
    from fatbinkit.collection import inventory, members

    held = inventory(cupy_wheel)
    with zipfile.ZipFile(cupy_wheel) as z:
        assert list(held.files) == sorted((i.filename, i.file_size) for i in z.infolist()
                                          if not i.is_dir())
    assert list(held.members) == members(cupy_wheel)
    held = inventory(folder)
    walked = sorted((p.relative_to(folder).as_posix(), p.stat().st_size)
                    for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    assert list(held.files) == walked and len(walked) == 4
    assert [m.name for m in held.members] == ["a/b/_generator_api.so", "a/libcurand.so.10",
                                              "host.so"]
    lib = fetch(CURAND13)
    assert inventory(lib).files == ((lib.name, lib.stat().st_size),)


def test_binaries_largest_first(cupy_wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """binaries(largest_first=True) yields the same libraries, the largest first; given the
    inventory, it does not list the input again."""
    from fatbinkit import collection
    from fatbinkit.collection import binaries, inventory

    by_name = [m for m, _ in binaries(cupy_wheel)]
    held = inventory(cupy_wheel)
    calls: list[object] = []

    def listing(source: Path) -> collection.Inventory:
        calls.append(source)
        return inventory(source)

    monkeypatch.setattr(collection, "inventory", listing)
    largest = [m for m, _ in binaries(cupy_wheel, largest_first=True, listed=held)]
    assert not calls
    assert sorted(largest, key=lambda m: m.name) == by_name and largest != by_name
    assert [m.size for m in largest] == sorted((m.size for m in by_name), reverse=True)


def test_binaries_opened_on_threads_keep_the_callers_spelling(
        cupy_wheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Members are opened on the prefetch threads, in the caller's context: an error raised
    while opening one still gives its advice as the command line spells it
    (``--everywhere``) when the command line called, and names the member."""
    from fatbinkit import binary
    from fatbinkit.collection import binaries
    from fatbinkit.errors import FormatError, option, spelled_for_cli

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise FormatError(f"cannot read it; try {option('everywhere')}")

    monkeypatch.setattr(binary, "open", refuse)
    with spelled_for_cli(), pytest.raises(FormatError) as caught:
        list(binaries(cupy_wheel))
    assert "try --everywhere" in str(caught.value) and ".so" in str(caught.value)
    with pytest.raises(FormatError) as caught:
        list(binaries(cupy_wheel))
    assert "try everywhere=True" in str(caught.value)


def test_report_tells_skipped_files_in_name_order(tmp_path: Path) -> None:
    """The report reads the largest library first, and still tells the files it passes over
    (32-bit ELF files here, the larger one last by name) in name order, as ls does."""
    import struct

    from fatbinkit.report import report

    def elf32(n: int) -> bytes:
        return b"\x7fELF\x01\x01\x01" + bytes(9) + struct.pack("<HHI", 3, 3, 1) + bytes(n)

    (tmp_path / "sub").mkdir()
    shutil.copy(fetch(CURAND13), tmp_path / "libcurand.so.10")
    (tmp_path / "e32.so").write_bytes(elf32(100))
    (tmp_path / "sub" / "f32.so").write_bytes(elf32(5000))
    seen: list[str] = []
    report(tmp_path, skipped=lambda m, e: seen.append(m.name))
    assert seen == ["e32.so", "sub/f32.so"]
    listed = fatbinkit("ls", "--summary", tmp_path)
    made = fatbinkit("report", tmp_path, "-o", tmp_path / "page.html")
    notes = [line for line in made.stderr.splitlines() if "note: skipped" in line]
    assert notes == [line for line in listed.stderr.splitlines() if "note: skipped" in line]
    assert len(notes) == 2


_OPENING_ONLY = """
import importlib
import sys

sys.path.insert(0, {tests!r})
from thirdparty import ALL_TEST_MEMBERS, ROCM_TEST_MEMBERS, fetch
from xpubuild import DPNP_TENSOR

from fatbinkit import collection
from fatbinkit.binary import open as open_binary  # as binaries() imports it

for module in collection.OPENING_MODULES:
    importlib.import_module(module, "fatbinkit")
paths = [fetch(m) for m in (*ALL_TEST_MEMBERS, *ROCM_TEST_MEMBERS, DPNP_TENSOR)]
before = set(sys.modules)
for path in paths:
    for everywhere in (False, True):
        open_binary(path, everywhere=everywhere).close()  # what a prefetch thread does
print(sorted(set(sys.modules) - before))
"""


def test_opening_imports_nothing_beyond_opening_modules() -> None:
    """binaries() imports OPENING_MODULES before its threads open members: opening the suite's
    CUDA, ROCm and Intel libraries (the deep scan too) then imports no other module, so no
    prefetch thread is ever part-way through an import when a process pool forks (a child
    needing that module would wait for its lock forever). A new import on the opening path
    fails this test: add it to OPENING_MODULES."""
    script = _OPENING_ONLY.format(tests=str(ROOT / "tests"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
