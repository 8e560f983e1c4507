"""``fatbinkit ls --duplicates`` (issue 31): images and functions stored more than once.

Oracles: the files ``cuobjdump -xelf all -xptx all`` writes, hashed with SHA-256 (images), and
pyelftools' reading of those cubins' ``.text.<name>`` sections (functions). cuRAND 10.4.5.25
stores 37 images more than once (the same PTX in six containers); bitsandbytes 0.50.2 builds
one library per CUDA version, so its kernels repeat across libraries of the wheel.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
from elftools.elf.elffile import ELFFile
from fatbin_kernels import cuobjdump
from thirdparty import CACHE, CURAND13, fetch

from fatbinkit.duplicates import duplicates

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
_NAME = re.compile(r"^(?P<stem>.+)\.(?P<arch>(?:sm|compute)_\d+a?)\.(?P<ext>cubin|ptx)$")


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def _extracted(lib: Path, out: Path) -> dict[str, bytes]:
    """cuobjdump's extracted files of ``lib`` by name."""
    out.mkdir(parents=True)
    cuobjdump("-xelf", "all", "-xptx", "all", lib.resolve(), cwd=out)
    return {p.name: p.read_bytes() for p in out.iterdir()}


def test_images_grouped_as_cuobjdump_files_hash(tmp_path: Path) -> None:
    lib = fetch(CURAND13)
    files = _extracted(lib, tmp_path / "x")
    rows = json.loads(_cli("ls", lib, "--json").stdout)["entries"]
    assert sorted(files) == sorted(r["name"] for r in rows)  # every image has its own file
    by_key: dict[tuple[str, str, str], set[str]] = {}
    for name, data in files.items():
        m = _NAME.match(name)
        assert m is not None, name
        key = (m["ext"], m["arch"], hashlib.sha256(data).hexdigest())
        by_key.setdefault(key, set()).add(name)
    expected = {frozenset(names) for names in by_key.values() if len(names) > 1}
    found = duplicates(lib)
    name_at = {r["offset"]: r["name"] for r in rows}
    assert {frozenset(name_at[c.offset] for c in g.copies) for g in found.groups} == expected
    stored = {r["name"]: r["stored"] for r in rows}
    assert found.wasted == sum(sum(stored[n] for n in g) - min(stored[n] for n in g)
                               for g in expected)
    assert found.images == len(rows) and found.stored == sum(stored.values())
    assert found.functions is None
    doc = json.loads(_cli("ls", lib, "--duplicates", "--json").stdout)
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/duplicates"})
    assert doc["wasted"] == found.wasted and len(doc["groups"]) == len(expected)
    text = _cli("ls", lib, "--duplicates", "--top", "1").stdout
    assert f"{len(expected)} images stored more than once" in text.splitlines()[0]
    assert f"... {len(expected) - 1} more" in text


def test_hidden_copies_are_counted_with_everywhere() -> None:
    lib = fetch(CURAND13)
    plain, deep = duplicates(lib), duplicates(lib, everywhere=True)
    assert deep.images > plain.images and deep.wasted >= plain.wasted
    assert any(c.hidden for g in deep.groups for c in g.copies)
    assert not any(c.hidden for g in plain.groups for c in g.copies)


@pytest.fixture(scope="module")
def bitsandbytes() -> Path:
    fetch(__import__("thirdparty").BITSANDBYTES)  # downloads the wheel into the cache
    (wheel,) = sorted((CACHE / "wheels").glob("bitsandbytes-0.50.2-*linux*_x86_64.whl"))
    return wheel


def test_functions_repeated_across_a_wheels_libraries(bitsandbytes: Path,
                                                      tmp_path: Path) -> None:
    """The wheel's CUDA libraries that cuobjdump 13 extracts (it stops with "Invalid ELF" on
    the CUDA 12.1 and 12.4 builds' cubins), in one folder: the oracle's functions against
    fatbinkit's over that folder."""
    folder = tmp_path / "wheel"
    with zipfile.ZipFile(bitsandbytes) as z:
        libs = [n for n in z.namelist() if re.search(r"_cuda\d+\.so$", n)]
        z.extractall(folder, libs)
    cubins: dict[str, tuple[str, Path]] = {}  # sha256 -> (arch, one file): distinct images
    kept = 0
    for i, name in enumerate(libs):
        out = tmp_path / f"x{i}"
        lib = folder / name
        try:
            files = _extracted(lib, out)
        except AssertionError as e:  # cuobjdump 13 on an older toolkit's cubins
            assert "Invalid ELF" in str(e)
            lib.unlink()
            continue
        kept += 1
        sass = [r for r in json.loads(_cli("ls", lib, "--json").stdout)["entries"]
                if r["kind"] == "sass"]
        assert len([n for n in files if n.endswith(".cubin")]) == len(sass)  # no name clash
        for n, data in files.items():
            m = _NAME.match(n)
            if m and m["ext"] == "cubin":
                cubins.setdefault(hashlib.sha256(data).hexdigest(), (m["arch"], out / n))
    assert kept >= 3
    images: dict[tuple[str, str, str], int] = {}
    size: dict[tuple[str, str, str], int] = {}
    for arch, path in cubins.values():
        with path.open("rb") as f:
            for s in ELFFile(f).iter_sections():
                if s.name.startswith(".text.") and s.header.sh_type != "SHT_NOBITS":
                    text = s.data()
                    key = (s.name[6:], arch, hashlib.sha256(text).hexdigest())
                    images[key] = images.get(key, 0) + 1
                    size[key] = len(text)
    expected = {(k[0], k[1], n) for k, n in images.items() if n > 1}
    assert expected  # the libraries repeat kernels: the test can fail
    found = duplicates(folder, kernels=True)
    assert found.functions is not None
    assert {(f.name, f.arch, f.images) for f in found.functions} == expected
    assert found.functions_wasted == sum(size[k] * (n - 1) for k, n in images.items() if n > 1)
