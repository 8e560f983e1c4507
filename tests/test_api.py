"""The Python API a newcomer guesses (issue 11, point 6): ``__all__`` everywhere, one-line
``str()`` of every model object, paths as ``str``/``os.PathLike``, drivers and archs in every
usual spelling, the library's own errors for wrong types and unknown names, one name per concept.

The objects come from a real build (nvcc 13.0 PTX for compute_90, ptxas sm_90a), wrapped in a
fatbin by :func:`fatbinkit.build.build` and embedded in an object by :func:`write_object`.
"""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from fatbin_kernels import SOURCE, system_tool

import fatbinkit
import fatbinkit.formats
import fatbinkit.vendors
from fatbinkit import compat
from fatbinkit.build import Image, build
from fatbinkit.compat import ImageInfo, ImageSet, decide, file_verdict, image_sets
from fatbinkit.diagnose import preflight_check
from fatbinkit.driver import as_cuda_version, release_for
from fatbinkit.errors import (
    CompatibilityError,
    FatbinkitError,
    InputError,
    InvalidArgumentError,
    NotFoundError,
)
from fatbinkit.formats.arch import Arch, as_arch
from fatbinkit.formats.cubin import Cubin
from fatbinkit.formats.elf_writer import Blob, write_object
from fatbinkit.formats.fatbin import EntryKind, Fatbin
from fatbinkit.formats.ptx import Ptx
from fatbinkit.infile import as_content, as_input, as_path
from fatbinkit.inject import inject
from fatbinkit.runtime import _image_bytes
from fatbinkit.scan import scan
from fatbinkit.slim import SlimReport, prune, recompress

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted([m.name for m in pkgutil.iter_modules(fatbinkit.__path__)
                  if not m.name.startswith("_") and m.name not in ("cli", "formats")]
                 + [f"formats.{m.name}" for m in pkgutil.iter_modules(fatbinkit.formats.__path__)
                    if not m.name.startswith("_")]  # _cubin: the C walk behind cubin.py
                 + [m.name.removeprefix("fatbinkit.") for m in pkgutil.walk_packages(
                     fatbinkit.vendors.__path__, "fatbinkit.vendors.")])

# modules that keep the names the README documents for what moved under fatbinkit.vendors (issue
# 28): each re-exports only from these
FACADES = {"compat": {"fatbinkit.decision", "fatbinkit.imagesets", "fatbinkit.verdict",
                      "fatbinkit.vendors.cuda.loading"},
           "driver": {"fatbinkit.decision", "fatbinkit.vendors.cuda.driver"}}


class BytesPath:
    """An ``os.PathLike[bytes]``, the form ``os.fsencode``'d paths take."""

    def __init__(self, path: Path) -> None:
        self.path = os.fsencode(path)

    def __fspath__(self) -> bytes:
        return self.path


@dataclass(frozen=True)
class Built:
    cubin: bytes  # sm_90a, ptxas 13.0
    ptx: bytes  # compute_90, nvcc 13.0
    cubin_path: Path
    fatbin: bytes  # [cubin, ptx], no compression
    fatbin_path: Path
    toolkit: str  # "13.0": nvcc --version's release
    ptx_isa: str  # the PTX text's .version


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("api")
    src = root / "k.cu"
    src.write_text(SOURCE)
    nvcc, ptxas = system_tool("nvcc"), system_tool("ptxas")
    ptx, cubin = root / "k.ptx", root / "k.cubin"
    subprocess.run([nvcc, "-ptx", "-arch=compute_90", str(src), "-o", str(ptx)], check=True)
    subprocess.run([ptxas, "-arch=sm_90a", str(ptx), "-o", str(cubin)], check=True)
    release = re.search(r"release (\d+\.\d+)", subprocess.run(
        [ptxas, "--version"], capture_output=True, text=True, check=True).stdout)
    isa = re.search(r"^\.version (\S+)", ptx.read_text(), re.M)
    assert release and isa
    blob = build([Image.from_file(EntryKind.ELF, "sm_90a", str(cubin)),
                  Image.from_file(EntryKind.PTX, "compute_90", ptx)])
    fatbin_path = root / "k.fatbin"
    fatbin_path.write_bytes(blob)
    return Built(cubin.read_bytes(), ptx.read_bytes(), cubin, blob, fatbin_path,
                 release.group(1), isa.group(1))


# -- 1. __all__ ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MODULES)
def test_every_module_lists_its_public_api(name: str) -> None:
    """``__all__`` exists, names only what exists and is defined here, and lists every public
    class and function the module defines (anything else is ``_private``)."""
    mod = importlib.import_module(f"fatbinkit.{name}")
    exported = mod.__dict__.get("__all__")
    assert isinstance(exported, list), f"fatbinkit.{name} has no __all__"
    assert len(set(exported)) == len(exported), f"fatbinkit.{name}.__all__ repeats a name"
    assert [n for n in exported if not hasattr(mod, n)] == []
    borrowed = [n for n in exported if getattr(getattr(mod, n), "__module__", mod.__name__)
                not in (mod.__name__, "typing", "builtins", "types")
                and callable(getattr(mod, n))]
    if name in FACADES:  # the README's names for what moved: from the modules it moved to
        assert {getattr(mod, n).__module__ for n in borrowed} <= FACADES[name]
    else:
        assert borrowed == [], f"fatbinkit.{name} exports names defined elsewhere"
    assert mod.__file__ is not None
    tree = ast.parse(Path(mod.__file__).read_text())
    defined = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))]
    unlisted = [n for n in defined if not n.startswith("_") and n not in exported]
    assert unlisted == [], f"fatbinkit.{name}: public but not in __all__ (or not _private)"


def test_one_name_per_class() -> None:
    """No two modules export different classes under one name (compat.Image was build.Image's
    namesake)."""
    owners: dict[str, set[str]] = {}
    for name in MODULES:
        mod = importlib.import_module(f"fatbinkit.{name}")
        for n in mod.__all__:
            obj = getattr(mod, n)
            if isinstance(obj, type):
                owners.setdefault(n, set()).add(f"{obj.__module__}.{obj.__qualname__}")
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    assert not hasattr(compat, "Image") and ImageInfo.__module__ != Image.__module__
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            if "fatbinkit.compat import" in line:
                assert not re.search(r"\bImage\b", line), f"{doc.name}: {line}"


# -- 2. str() ------------------------------------------------------------------------------------

def _short(text: str, limit: int = 160) -> str:
    assert "\n" not in text and len(text) <= limit, text
    return text


def test_str_of_cubin_and_ptx(built: Built) -> None:
    cubin = Cubin.from_bytes(built.cubin)
    assert _short(str(cubin)) == (f"cubin sm_90a, ABI {cubin.abi_version}, CUDA {built.toolkit}, "
                                  "2 functions (2 kernels)")
    add1 = cubin.function("add1")
    text = _short(str(add1))
    assert text.startswith("kernel add1: ") and f"{add1.registers} registers" in text
    assert "2 params (12 bytes)" in text  # float *x, int n
    n = next(p for p in add1.params if p.ordinal == 1)
    assert str(n) == "param 1: 4 bytes at 0x8"
    ptx = Ptx.from_bytes(built.ptx)
    assert _short(str(ptx)) == f"PTX {built.ptx_isa} compute_90, 64-bit, 2 entries (add1, scale)"
    assert str(ptx.entries[0]).startswith(".entry add1(.") and "add1_param_1" in str(
        ptx.entries[0])


def test_str_of_fatbin_objects(built: Built, tmp_path: Path) -> None:
    fb = Fatbin.from_bytes(built.fatbin)
    assert _short(str(fb)) == "fatbin: 1 container, 2 entries (ELF sm_90a, PTX compute_90)"
    (container,) = fb.containers
    assert str(container) == "fatbin container at 0x0: 2 entries (ELF sm_90a, PTX compute_90)"
    elf_entry, ptx_entry = container.entries
    assert _short(str(elf_entry)) == (f"ELF sm_90a at {elf_entry.offset:#x}: "
                                      f"{elf_entry.header.size} bytes")
    assert elf_entry.header.size >= len(built.cubin)
    assert _short(str(elf_entry.header)).startswith("ELF sm_90a entry header: ")
    assert str(ptx_entry).startswith("PTX compute_90 at ")
    zstd = Fatbin.from_bytes(build([Image(EntryKind.ELF, Arch(90, "a"), built.cubin)],
                                   compression="zstd")).entries[0]
    assert f"(zstd, {zstd.header.size} stored)" in _short(str(zstd))
    # embedded in an object: scan() names the blob's start symbol
    obj = tmp_path / "k.o"
    write_object(str(obj), [Blob("k", built.fatbin_path)])
    codes = scan(str(obj))
    assert [str(c).split(" at ")[0] for c in codes] == [
        "__k_start container 0: ELF sm_90a", "__k_start container 0: PTX compute_90"]
    assert str(Image(EntryKind.ELF, "sm_90a", built.cubin)) == (  # type: ignore[arg-type]
        f"cubin sm_90a, {len(built.cubin)} bytes")
    assert str(release_for((12, 4))) == "CUDA 12.4 (Linux driver >= 550.54.14)"


def test_str_of_compat_objects(built: Built) -> None:
    (s,) = image_sets(str(built.fatbin_path))
    assert _short(str(s)) == (f"file container 0: sm_90a, compute_90 (PTX {built.ptx_isa}); "
                              "2 kernels")
    sass, _ = s.images
    assert str(sass) == f"SASS sm_90a, built by CUDA {built.toolkit}"
    loads = str(s.decide("sm_90", "13.0"))
    assert loads.startswith("sm_90 (driver 13.0): SASS sm_90a (entry at 0x") and loads.endswith(
        ") loads")
    jit = _short(str(s.decide("sm_120", "13.0")))
    assert jit.startswith(f"sm_120 (driver 13.0): PTX compute_90 (PTX {built.ptx_isa}) (entry at ")
    assert jit.endswith(f"JIT (driver >= {built.ptx_isa.replace('9.', '13.')})")
    none = _short(str(s.decide("sm_75")))
    assert none.startswith("sm_75: no image: CUDA_ERROR_NO_BINARY_FOR_GPU (SASS sm_90a ")
    old = s.decide("sm_90", "12.0")  # a CUDA 13 cubin on a CUDA 12 driver
    assert old.floor is not None
    assert _short(str(old)) == f"sm_90 (driver 12.0): no image: {old.error} ({old.floor})"
    assert "needs a CUDA 13.x driver" in str(old.floor)
    verdict = file_verdict([s], "sm_90", 13000)
    assert _short(str(verdict)) == "sm_90 with driver 13.0: works: 1/1 module loads"
    for obj in (s, sass, old, old.floor, verdict):
        assert len(str(obj)) < len(repr(obj))


# -- 3. paths ------------------------------------------------------------------------------------

def test_a_file_is_a_path_or_its_bytes(built: Built, tmp_path: Path) -> None:
    p = built.fatbin_path
    want = [(c.container, c.offset) for c in scan(p)]
    for source in (str(p), p, BytesPath(p), built.fatbin, bytearray(built.fatbin),
                   memoryview(built.fatbin)):
        assert [(c.container, c.offset) for c in scan(source)] == want
        assert len(image_sets(source)[0].images) == 2  # type: ignore[arg-type]
    assert bytes(_image_bytes(str(p))) == built.fatbin == bytes(_image_bytes(BytesPath(p)))
    assert Image.from_file(EntryKind.ELF, "90a", BytesPath(built.cubin_path)).data == built.cubin
    out = tmp_path / "b.o"
    write_object(BytesPath(out), [Blob("k", str(built.cubin_path))])
    assert len(scan(out)) == 1
    assert as_path(BytesPath(out)) == out and as_input(b"x") == b"x"
    for bad in (b"k.fatbin", 12, None, ""):
        with pytest.raises(InvalidArgumentError):
            as_path(bad)
    with pytest.raises(InvalidArgumentError, match="not int"):
        scan(12)  # type: ignore[arg-type]


def test_slim_inject_take_str_paths(built: Built, tmp_path: Path) -> None:
    out = tmp_path / "z.fatbin"
    report = recompress(str(built.fatbin_path), str(out), "zstd")
    assert isinstance(report, SlimReport)
    assert [e.compression for e in Fatbin.from_bytes(out.read_bytes()).entries] == ["zstd"] * 2
    pruned = tmp_path / "p.fatbin"
    prune(str(built.fatbin_path), BytesPath(pruned), ["sm_90"], ptx="none")
    assert [e.arch for e in Fatbin.from_bytes(pruned.read_bytes()).entries] == [Arch(90, "a")]
    missing = str(tmp_path / "missing.so")
    with pytest.raises(InputError, match=r"missing\.so"):
        prune(missing, str(out), ["sm_90"])
    with pytest.raises(InputError, match=r"missing\.so"):
        inject(missing, str(tmp_path / "o.so"), [Blob("k", b"x")])
    with pytest.raises(InvalidArgumentError, match=r"inject\(\) library is a path"):
        inject(b"lib.so", tmp_path / "o.so", [])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="list of archs"):
        prune(built.fatbin_path, out, "sm_90")


# -- 4. drivers and archs ------------------------------------------------------------------------

@pytest.mark.parametrize(("given", "want"), [
    ("12.4", (12, 4)), ("12", (12, 0)), ((12, 4), (12, 4)), (12040, (12, 4)), (13000, (13, 0)),
    ("580.65.06", (13, 0)), ("550", (12, 4)), (" 13.1 ", (13, 1)),
])
def test_driver_forms(given: object, want: tuple[int, int]) -> None:
    assert as_cuda_version(given) == want


@pytest.mark.parametrize("bad", ["abc", -1, 0, 12, (12,), (12, 4, 1), 1.5, 12.4, True, None,
                                 "12.4.1", (12, "4"), [12, 4], "999.1"])
def test_driver_nonsense(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="driver"):
        as_cuda_version(bad)


def test_driver_and_arch_forms_everywhere(built: Built) -> None:
    (s,) = image_sets(built.fatbin)
    base = s.decide(Arch(90), (13, 0))
    for device in ("sm_90", "90", 90, "compute_90", Arch(90)):
        for driver in ("13.0", "580.65.06", (13, 0), 13000):
            d = s.decide(device, driver)
            assert (d.device, d.driver, d.image) == (base.device, base.driver, base.image)
    assert decide(s.images, "sm_90a", 13000).image is base.image
    assert [d.driver for _, d in s.decisions("sm_90", "13.0")] == [(13, 0), (13, 0)]
    assert file_verdict([s], "90", "13.0").status == "works"
    assert compat.ArchVerdict.of("sm_90", 13000, [(s, [base])]).driver == (13, 0)
    assert preflight_check(built.fatbin, "sm_90", "580.65.06").image == base.image
    with pytest.raises(CompatibilityError):
        preflight_check(built.fatbin, "sm_90", 12040)
    with pytest.raises(InvalidArgumentError, match="device"):
        s.decide("tpu90a", "13.0")
    with pytest.raises(InvalidArgumentError, match="driver"):
        s.decide("sm_90", "abc")
    assert as_arch("compute_100f") == Arch(100, "f") and as_arch(" SM_90A ") == Arch(90, "a")
    for bad in ("abc", 9.0, None, (9, 0), "sm_9"):
        with pytest.raises(InvalidArgumentError):
            as_arch(bad)


# -- 5. errors -----------------------------------------------------------------------------------

def test_unknown_names_raise_not_found(built: Built) -> None:
    cubin = Cubin.from_bytes(built.cubin)
    with pytest.raises(NotFoundError) as info:
        cubin.function("add2")
    err = info.value
    assert isinstance(err, KeyError) and isinstance(err, FatbinkitError)
    assert str(err) == "no function 'add2' in this sm_90a cubin; close: add1"
    assert err.name == "add2" and err.close == ("add1",)
    try:
        cubin.function("scal")
    except KeyError as e:  # what callers of the old KeyError catch
        assert "close: scale" in str(e)
    with pytest.raises(InvalidArgumentError):
        cubin.function(b"add1")  # type: ignore[arg-type]
    (s,) = image_sets(built.fatbin)
    with pytest.raises(NotFoundError, match=r"no kernel 'nope' in file container 0; it has "
                                            r"add1, scale"):
        s.decide("sm_75", "13.0", kernel="nope")  # not "no binary for GPU"
    assert s.decide("sm_75", "13.0", kernel="add1").error == compat.NO_BINARY
    # a kernel some image lacks is the driver's CUDA_ERROR_NOT_FOUND, not an exception
    partial = ImageSet("m", (ImageInfo(compat.SASS, Arch(90), kernels=frozenset({"a"})),
                             ImageInfo(compat.PTX, Arch(80), (8, 0), kernels=frozenset("ab"))))
    assert partial.decide("sm_90", kernel="b").error == compat.NOT_FOUND


def test_a_path_where_bytes_are_expected(built: Built, tmp_path: Path) -> None:
    path = built.cubin_path
    for call in (lambda: Cubin.from_bytes(path), lambda: Ptx.from_bytes(path),  # type: ignore
                 lambda: Fatbin.from_bytes(path),  # type: ignore[arg-type]
                 lambda: compat.predict_load(path, "sm_90"),  # type: ignore[arg-type]
                 lambda: Image(EntryKind.ELF, Arch(90), path)):  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=r"not a path \(PosixPath"):
            call()
    with pytest.raises(InvalidArgumentError, match="takes bytes, not str"):
        Cubin.from_bytes(str(path))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="from_bytes"):
        Ptx.from_text(built.ptx)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not bytes"):
        write_object(tmp_path / "o.o", [built.cubin])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="not int"):
        write_object(tmp_path / "o.o", [Blob("k", 3)])  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
    assert as_content(memoryview(b"ab")) == b"ab"
