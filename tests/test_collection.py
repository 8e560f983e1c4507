"""``fatbinkit ls`` of a wheel or a folder: each library with device code, then the total.

The oracle is cuobjdump over the unpacked files (what a user would otherwise script: unzip, then
``cuobjdump -lelf -lptx`` on each file): per library the same listing lines, and the summary's
counts per kind equal to its ELF and PTX lines. The real wheel is CuPy for CUDA 13 (dozens of
extension modules with fatbins), fetched from the registry into the cache.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fatbin_kernels import cuobjdump
from thirdparty import CACHE, CUPY13_RANDOM, CURAND13, fetch

ROOT = Path(__file__).resolve().parent.parent
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


def test_wheel_summary_equals_cuobjdump_over_the_unpacked_files(tmp_path: Path) -> None:
    """CuPy for CUDA 13's wheel, read without unpacking it; the oracle unpacks it."""
    fetch(CUPY13_RANDOM)  # downloads the wheel into the cache
    wheel = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*.whl"))
    proc = fatbinkit("ls", wheel, "--summary", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    files = {s["file"]: s for s in doc["files"]}
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".so")]
        z.extractall(tmp_path, names)
    expected = {}
    for n in names:
        lines = _listing(tmp_path / n)
        if lines:
            expected[n] = Counter(line.split()[0] for line in lines)
    assert set(files) == set(expected) and len(files) >= 3
    for n, kinds in expected.items():
        s = files[n]
        assert kinds == Counter({k: v for k, v in (
            ("ELF", sum(a["entries"] for a in s["archs"] if a["kind"] == "sass")),
            ("PTX", sum(a["entries"] for a in s["archs"] if a["kind"] == "ptx"))) if v}), n
    assert doc["total"]["entries"] == sum(sum(c.values()) for c in expected.values())


def test_resources_and_errors(folder: Path, tmp_path: Path) -> None:
    proc = fatbinkit("ls", folder, "--resources")
    assert proc.returncode == 2 and "one file at a time" in proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    proc = fatbinkit("ls", empty)
    assert proc.returncode == 1 and f"{empty}: this folder holds no ELF" in proc.stderr
