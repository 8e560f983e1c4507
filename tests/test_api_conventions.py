"""The reader's part of the API conventions (issue 27, points 5 to 7): ``Binary``'s reading
methods take ``max_decompressed``, ``jobs`` and ``progress`` as every entry point does; results
name bytes by the name given; reprs stay short on libtorch-size inputs; ``fatbinkit.open`` of a
wheel or folder points to :mod:`fatbinkit.collection`; ``import fatbinkit`` reaches every public
submodule lazily, and mypy sees them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from thirdparty import CUPY12_RANDOM, fetch

import fatbinkit
from fatbinkit import parallel
from fatbinkit.binary import Binary, Item
from fatbinkit.diff import Snapshot
from fatbinkit.errors import (
    DecompressionError,
    FormatError,
    InvalidArgumentError,
    UnsupportedError,
)
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import DecompressionBudget, EntryKind, build_fatbin, make_entry
from fatbinkit.progress import Step
from fatbinkit.scan import DeviceCode

ROOT = Path(__file__).resolve().parent.parent
#: what ``import fatbinkit`` reaches as attributes, imported on first use
SUBMODULES = ("aoti", "binary", "build", "collection", "compat", "diagnose", "diff", "driver",
              "embed", "errors", "formats", "gate", "inject", "outfile", "parallel", "progress",
              "runtime", "scan", "slim", "triton", "wheel")


@pytest.fixture(scope="module")
def lib() -> Binary:
    """CuPy 14.2's random module for CUDA 12: 12 cubins and a PTX, LZ4-compressed."""
    return fatbinkit.open(fetch(CUPY12_RANDOM))


def _kind(code: DeviceCode) -> int:
    return code.entry.header.kind


# Each reading method, called with the conventions' keywords ``kw``.
READERS: dict[str, Callable[[Binary, Path, dict[str, Any]], object]] = {
    "select": lambda b, _, kw: b.select("sm_80", "*", **kw),
    "summary": lambda b, _, kw: b.summary(kernels=True, **kw),
    "functions": lambda b, _, kw: b.functions(**kw),
    "map": lambda b, _, kw: b.map(_kind, b.select(), **kw),
    "extract": lambda b, out, kw: b.extract(out, kernel="*", **kw),
    "check": lambda b, _, kw: b.check(["sm_80", "sm_90"], every_image=True, **kw),
}


@pytest.mark.parametrize("method", READERS)
def test_max_decompressed_bounds_each_reading_method(lib: Binary, tmp_path: Path,
                                                     method: str) -> None:
    """``max_decompressed`` (not ``budget=``) takes a number of bytes or a shared budget; going
    over says how to raise it in the API's words."""
    read = READERS[method]
    with pytest.raises(DecompressionError, match=r"max_decompressed=SIZE") as err:
        read(lib, tmp_path / "a", {"max_decompressed": 0})
    assert "--max-decompressed" not in str(err.value)
    read(lib, tmp_path / "b", {"max_decompressed": 1 << 30})
    shared = DecompressionBudget(1 << 30)
    read(lib, tmp_path / "c", {"max_decompressed": shared})
    assert 0 < shared.used <= sum(c.entry.header.uncompressed_size for c in lib.codes)
    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        read(lib, tmp_path / "d", {"max_decompressed": "1G"})
    with pytest.raises(TypeError):
        read(lib, tmp_path / "e", {"budget": shared})


@pytest.mark.parametrize("method", READERS)
def test_jobs_and_progress_of_each_reading_method(lib: Binary, tmp_path: Path, method: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``jobs`` processes give what one gives; ``progress`` (a callable) hears of every image
    read; bad values are refused at the call, naming the keyword."""
    read = READERS[method]
    one = read(lib, tmp_path / "one", {"jobs": 1})
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)  # a pool even for this small file
    steps: list[Step] = []
    two = read(lib, tmp_path / "two", {"jobs": 2, "progress": steps.append})
    if method == "extract":
        assert [p.name for p in one] == [p.name for p in two]  # type: ignore[attr-defined]
    elif method == "check":
        assert str(one) == str(two)
    else:
        assert one == two
    assert steps and steps[-1].done == steps[-1].total and steps[-1].unit == "image"
    for bad in ({"jobs": 0}, {"jobs": "2"}, {"progress": "yes"}):
        with pytest.raises(InvalidArgumentError, match=next(iter(bad))):
            read(lib, tmp_path / "bad", bad)


def test_bad_jobs_refused_where_nothing_is_read(lib: Binary) -> None:
    """Validated at the call, not when (or if) a pool starts."""
    for call in (lambda: lib.select(jobs=0), lambda: lib.summary(jobs=-1),
                 lambda: lib.functions([], jobs=True), lambda: lib.map(len, [], jobs=0)):
        with pytest.raises(InvalidArgumentError, match="jobs"):
            call()


def test_kinds_and_fn_are_checked_at_the_call(lib: Binary, tmp_path: Path) -> None:
    """``kinds`` is some of sass, ptx, ltoir (one str: one kind); anything else was a silent
    empty extraction, or charged as PTX."""
    assert {p.suffix for p in lib.extract(tmp_path / "ptx", kinds="ptx")} == {".ptx"}
    for bad in ("elf", ["cubin"], [], 3):
        with pytest.raises(InvalidArgumentError, match="kinds"):
            lib.extract(tmp_path / "bad", kinds=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="kinds"):
            lib.map(_kind, lib.select(), kinds=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "bad").exists()
    with pytest.raises(InvalidArgumentError, match="not callable"):
        lib.map("len", lib.select())  # type: ignore[arg-type]


def test_results_name_bytes_by_the_name_given(lib: Binary) -> None:
    assert lib.path is not None
    data = lib.path.read_bytes()
    named = fatbinkit.open(data, name="libx.so")
    assert named.summary().file == "libx.so" == named.file
    assert str(named).startswith("libx.so: ")
    assert named.check(["sm_80"]).file == "libx.so"
    assert fatbinkit.open(data).summary().file == "input"
    assert lib.summary().file == str(lib.path) == lib.file


def _large() -> Binary:
    """A libtorch-size listing: 4,000 images over many archs, each with a long options string
    (the header tail), in a static library of 5,000 objects."""
    ptx = b".version 8.0\n.target sm_50\n.address_size 64\n"
    numbers = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 120]
    entries = [make_entry(EntryKind.PTX, Arch(numbers[i % len(numbers)]), ptx,
                          options="-O3 --extra-device-vectorization " * 20, identifier="k.cu")
               for i in range(4000)]
    big = fatbinkit.open(build_fatbin(entries), name="libtorch_cuda.so")
    return dataclasses.replace(big, members=tuple(f"obj{i:05d}.o" for i in range(5000)))


def test_reprs_stay_short_on_large_inputs() -> None:
    big = _large()
    item = big.select()[-1]
    summary = big.summary()
    for obj in (big, item, item.code, summary, *summary.archs, *summary.devices):
        assert len(repr(obj)) < 400, (type(obj).__name__, len(repr(obj)))
    assert "codes=4000" in repr(big) and "members=5000" in repr(big)
    assert repr(item).startswith("Item(number=4000, name=") and "arch='compute_120'" in repr(item)
    assert "entries=4000" in repr(summary)


def test_item_repr_names_the_image(lib: Binary) -> None:
    item = lib.select()[0]
    assert isinstance(item, Item)
    assert repr(item).startswith(f"Item(number=1, name={item.name!r}, kind='sass'")


def test_open_of_a_wheel_or_folder_points_to_collection(lib: Binary, tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    assert lib.path is not None
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(lib.path, "pkg/_k.so")
    for given in (wheel, str(tmp_path), tmp_path):
        with pytest.raises(UnsupportedError, match=r"fatbinkit\.collection") as err:
            fatbinkit.open(given)
        assert ("a wheel" if given == wheel else "a folder") in str(err.value)
    # what it points to reads it
    from fatbinkit.collection import binaries

    assert [m.name for m, _ in binaries(wheel)] == ["pkg/_k.so"]
    # a zip that is not a wheel is one file fatbinkit does not read, as before
    other = tmp_path / "k.zip"
    other.write_bytes(wheel.read_bytes())
    with pytest.raises(FormatError, match="no device code"):
        fatbinkit.open(other)


def _python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                          check=False, cwd=ROOT)


def test_import_fatbinkit_reaches_every_submodule_lazily() -> None:
    proc = _python("import fatbinkit", "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    heavy = {m for m in imported if m.split(".")[0] in ("tqdm", "zstandard", "lz4", "numpy")}
    assert heavy == set()
    assert not {m for m in imported if m.startswith("fatbinkit.")} - {
        "fatbinkit.errors", "fatbinkit.formats", "fatbinkit.formats.arch"}
    proc = _python(
        "import sys, types, fatbinkit\n"
        f"names = {SUBMODULES!r}\n"
        "assert set(names) <= set(dir(fatbinkit)), set(names) - set(dir(fatbinkit))\n"
        "assert 'fatbinkit.slim' not in sys.modules\n"
        "assert fatbinkit.slim.prune is sys.modules['fatbinkit.slim'].prune\n"
        "for n in names:\n"
        "    assert isinstance(getattr(fatbinkit, n), types.ModuleType), n\n"
        "try:\n"
        "    fatbinkit.nope\n"
        "except AttributeError as e:\n"
        "    print(e)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "module 'fatbinkit' has no attribute 'nope'"


@pytest.mark.slow
def test_mypy_sees_the_submodules(tmp_path: Path) -> None:
    """``import fatbinkit; fatbinkit.slim.prune`` type-checks under ``mypy --strict``; a name
    that is no submodule is still an error."""
    from mypy import api

    script = tmp_path / "script.py"
    script.write_text("import fatbinkit\n\n"
                      "prune = fatbinkit.slim.prune\n"
                      "check = fatbinkit.collection.check\n"
                      "reveal_type(fatbinkit.binary.Binary.summary)\n"
                      "fatbinkit.nope\n")
    out, err, _ = api.run(["--strict", "--cache-dir", str(tmp_path / "cache"),
                           "--python-version", "3.10", str(script)])
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and '"nope"' in errors[0], out + err
    assert "max_decompressed" in out


def test_snapshot_format_error_speaks_python(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"Snapshot\.to_dict\(\)"):
        Snapshot.from_dict({}, "base.json")
