"""Device code found in host ELF files: nvcc objects and executables (cuobjdump is the oracle) and
blobs between ``__X_start``/``__X_end`` symbols in objects and shared libraries made with gcc."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fatbin_kernels import (
    Kernels,
    cuobjdump_extract,
    cuobjdump_list,
    kernels_in,
    system_tool,
)

from fatbinkit.cli import main
from fatbinkit.errors import FormatError, InputError, InvalidArgumentError
from fatbinkit.formats.cubin import is_cubin
from fatbinkit.formats.fatbin import EntryKind
from fatbinkit.formats.ptx import is_ptx
from fatbinkit.scan import scan

GENCODE = ["-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]
MAIN = 'extern "C" __global__ void add1(float *x, int n);\nint main() { add1<<<1, 1>>>(0, 0); }\n'


@pytest.fixture(scope="session")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    return kernels_in(tmp_path_factory)


@pytest.fixture(scope="session")
def hosts(kernels: Kernels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """nvcc-made host files: a plain object, a relocatable-device-code object and executable."""
    root = tmp_path_factory.mktemp("hosts")
    nvcc = system_tool("nvcc")
    main_cu = root / "main.cu"
    main_cu.write_text(MAIN)
    out = {"obj": root / "k.o", "rdc_obj": root / "krdc.o", "rdc_exe": root / "exe"}
    subprocess.run([nvcc, "-c", *GENCODE, str(kernels.source), "-o", str(out["obj"])], check=True)
    subprocess.run(
        [nvcc, "-rdc=true", "-c", *GENCODE, str(kernels.source), "-o", str(out["rdc_obj"])],
        check=True,
    )
    subprocess.run(
        [nvcc, "-rdc=true", *GENCODE, str(kernels.source), str(main_cu), "-o", str(out["rdc_exe"])],
        check=True,
    )
    return out


@pytest.mark.parametrize("name", ["obj", "rdc_obj", "rdc_exe"])
@pytest.mark.parametrize("all_", [False, True])
def test_nvcc_hosts_match_cuobjdump(
    name: str, all_: bool, hosts: dict[str, Path], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = hosts[name]
    flag = ["--all"] if all_ else []
    assert main(["ls", *flag, str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == cuobjdump_list(path, all=all_)
    expected = cuobjdump_extract(path, tmp_path / "c", all=all_)
    assert main(["extract", *flag, str(path), "-o", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    assert {p.name: p.read_bytes() for p in (tmp_path / "o").iterdir()} == expected


def test_other_vendors_readers_stay_unimported(hosts: dict[str, Path]) -> None:
    """An NVIDIA-only file's scan asks AMD and Intel whether a section could be theirs by its
    name alone: their readers (``finding``, with the bundle and OffloadBinary formats, 12 ms of
    imports) stay unimported. (tests/test_hip_read.py and tests/test_xpu.py read their files
    through the same scan.)"""
    import sys

    program = ("import sys, fatbinkit; fatbinkit.open(sys.argv[1], all=True)\n"
               "print(*(f'fatbinkit.vendors.{v}.finding' in sys.modules for v in "
               "('cuda', 'hip', 'xpu')))")
    got = subprocess.run([sys.executable, "-c", program, str(hosts["rdc_exe"])],
                         capture_output=True, text=True, check=True).stdout.split()
    assert got == ["True", "False", "False"]


def test_the_demangler_loads_only_for_a_kernel_filter(hosts: dict[str, Path]) -> None:
    """Importing cxxfilt runs ``ldconfig`` twice (25 ms): a check, or a read on forked
    workers, without a kernel filter never loads it; a filter does as it is made (before any
    worker forks: the workers' matching demangles)."""
    import sys

    program = ("import os, sys, fatbinkit; from fatbinkit.binary import KernelFilter\n"
               "fatbinkit.parallel.PARALLEL_MIN_BYTES = 0  # workers fork, however small\n"
               "b = fatbinkit.open(sys.argv[1]); b.check(['sm_90'])\n"
               "pids = b.map(lambda c: os.getpid(), list(b.select()) * 2, jobs=2)\n"
               "assert os.getpid() not in pids, 'read in place'\n"
               "print('cxxfilt' in sys.modules, end=' '); KernelFilter('*k*')\n"
               "print('cxxfilt' in sys.modules)")
    got = subprocess.run([sys.executable, "-c", program, str(hosts["rdc_exe"])],
                         capture_output=True, text=True, check=True).stdout.split()
    assert got == ["False", "True"]


def test_relfatbin_only_with_all(hosts: dict[str, Path]) -> None:
    default = scan(hosts["rdc_exe"])
    every = scan(hosts["rdc_exe"], all=True)
    assert {c.source for c in default} == {".nv_fatbin"}
    assert {c.source for c in every} == {".nv_fatbin", "__nv_relfatbin"}
    assert [c.container for c in every] == sorted(c.container for c in every)


ASM = """
    .section .rodata
    .balign 8
    .globl __kfat_start, __kfat_end, __kcubin_start, __kcubin_end, __kptx_start, __kptx_end
    .globl __other_start, __other_end
__kfat_start:
    .incbin "{fatbin}"
__kfat_end:
    .balign 8
__kcubin_start:
    .incbin "{cubin}"
__kcubin_end:
__kptx_start:
    .incbin "{ptx}"
    .byte 0
__kptx_end:
__other_start:
    .ascii "not device code"
__other_end:
"""


@pytest.fixture(scope="session")
def blobs(kernels: Kernels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """AOTInductor-style embedding: a gcc object and a shared library with symbol-bounded blobs."""
    root = tmp_path_factory.mktemp("blobs")
    fatbin = root / "k.fatbin"
    subprocess.run(
        [system_tool("nvcc"), "-fatbin", *GENCODE, str(kernels.source), "-o", str(fatbin)],
        check=True,
    )
    asm = root / "blobs.s"
    asm.write_text(
        ASM.format(fatbin=fatbin, cubin=kernels.cubins["sm_100"], ptx=kernels.ptx["sm_120"])
    )
    obj, lib = root / "blobs.o", root / "libblobs.so"
    subprocess.run(["gcc", "-c", str(asm), "-o", str(obj)], check=True)
    subprocess.run(["gcc", "-shared", str(obj), "-o", str(lib)], check=True)
    return {"fatbin": fatbin, "obj": obj, "lib": lib}


@pytest.mark.parametrize("name", ["obj", "lib"])
def test_symbol_pair_blobs(
    name: str, blobs: dict[str, Path], kernels: Kernels, tmp_path: Path, cubin_reader: str
) -> None:
    """Section-relative (.o) and virtual-address (.so) symbol values both find the blobs; the
    entries are those cuobjdump extracts from the raw fatbin, plus the bare cubin and PTX (the
    string table searched in place in C, and read without it)."""
    codes = scan(blobs[name])
    assert cuobjdump_list(blobs[name]) == []  # invisible to cuobjdump
    assert [c.source for c in codes] == ["__kfat_start"] * 2 + ["__kcubin_start", "__kptx_start"]
    from_fatbin = cuobjdump_extract(blobs["fatbin"], tmp_path / "x")
    assert sorted(from_fatbin.values()) == sorted(
        c.entry.data().rstrip(b"\0") if c.entry.kind == EntryKind.PTX else c.entry.data()
        for c in codes[:2]
    )
    cubin, ptx = codes[2].entry, codes[3].entry
    assert (cubin.kind, cubin.arch.sm, cubin.data()) == (
        EntryKind.ELF, "sm_100", kernels.cubins["sm_100"].read_bytes()
    )
    assert (ptx.kind, ptx.arch.sm, ptx.data()) == (
        EntryKind.PTX, "sm_120", kernels.ptx["sm_120"].read_bytes()
    )
    raw = blobs[name].read_bytes()
    assert raw[codes[2].offset : codes[2].offset + 4] == b"\x7fELF"
    assert [c.entry for c in scan(raw)] == [c.entry for c in codes]


def test_bare_inputs(kernels: Kernels, capsys: pytest.CaptureFixture[str]) -> None:
    for cubin in kernels.cubins.values():  # the arch (a suffix too) read from the cubin
        assert is_cubin(cubin.read_bytes()) and not is_ptx(cubin.read_bytes())
        assert main(["ls", str(cubin)]) == 0
        assert capsys.readouterr().out.splitlines() == cuobjdump_list(cubin)
    (code,) = scan(kernels.ptx["sm_100f"])
    assert (code.entry.kind, code.entry.arch.sm, code.container) == (EntryKind.PTX, "sm_100f", -1)
    assert code.entry.data() == kernels.ptx["sm_100f"].read_bytes()


def test_bad_sources(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="directory"):
        scan(tmp_path)
    with pytest.raises(InputError):
        scan(tmp_path / "missing")
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello world\n")
    with pytest.raises(FormatError, match="no device code"):
        scan(junk)
    with pytest.raises(FormatError, match="no device code"):
        scan(str(junk))  # a str is a path
    with pytest.raises(InvalidArgumentError):
        scan(12)  # type: ignore[arg-type]
