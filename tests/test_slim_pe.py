"""Pruning fatbins inside Windows PE files (DLL, .pyd), proved by Windows' own loader as Wine
implements it: a pruned DLL still loads, is relocated, and the wrapper records the CUDA runtime
reads point at the kept containers.

The DLL is shaped like nvcc's Windows output: mingw gcc puts two real fatbin containers (nvcc
``-fatbin`` of tests/data/axpy.cu, several archs each) back to back in a section ``.nv_fatb`` and
one 24-byte ``__fatbinwrap`` record per container in ``.nvFatBi`` (magic, version, the
container's absolute address, 0), so the only references into ``.nv_fatb`` are the records' data
pointers and their DIR64 base relocations. It exports ``count`` and ``container``, which read the
records at run time. The DLL and the test program want the same base, so Wine moves the DLL and
applies its relocations. The program prints the DLL's load address and each container the records
point at (its RVA and bytes); the oracles for those bytes are pefile (the containers found in the
file's ``.nv_fatb``) and cuobjdump (the images of the section pefile dumps). The real CuPy 13
``.pyd`` is mapped with ``DONT_RESOLVE_DLL_REFERENCES`` (its imports, python311.dll and the CUDA
DLLs, are not there) and its in-memory ``.nvFatBi`` records are read the same way.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pefile
import pytest
from cudabuild import NVCC, run
from fatbin_kernels import cuobjdump_extract, cuobjdump_list
from test_coff import BASE, MINGW, readobj, tool, wine  # noqa: F401
from test_pe import dumped, section, walk
from thirdparty import CUPY13_RANDOM_WIN, CURAND13_WIN, fetch

from fatbinkit.formats.arch import Arch
from fatbinkit.slim import prune, recompress

AXPY = Path(__file__).resolve().parent / "data" / "axpy.cu"
#: nvcc -gencode arguments of each container, in section order
GENCODES = (
    ["-gencode", "arch=compute_80,code=[sm_80,compute_80]",
     "-gencode", "arch=compute_90,code=sm_90"],
    ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_86,code=sm_86",
     "-gencode", "arch=compute_120,code=sm_120"],
)  # fmt: skip
#: what cuobjdump lists of the two containers (numbered across the section, ELF and PTX apart)
LISTING = ["ELF file    1: nvdll.1.sm_80.cubin", "PTX file    1: nvdll.1.sm_80.ptx",
           "ELF file    2: nvdll.2.sm_90.cubin", "ELF file    3: nvdll.3.sm_75.cubin",
           "ELF file    4: nvdll.4.sm_86.cubin", "ELF file    5: nvdll.5.sm_120.cubin"]  # fmt: skip
WRAPPER_MAGIC = 0x466243B1
DLL_NAME = "nvdll.dll"
PYD_INIT = "PyInit__generator_api"

DLL = r"""/* two fatbin containers and their __fatbinwrap records, laid out as nvcc's on Windows */
struct fatbin_wrapper {
  unsigned int magic, version;
  const void *data;
  void *filename_or_fatbins;
};
#define FATBIN __attribute__((section(".nv_fatb"), aligned(8), used))
FATBIN static const unsigned char fat0[] = {%s};
FATBIN static const unsigned char fat1[] = {%s};
__attribute__((section(".nvFatBi"), aligned(8), used))
static const struct fatbin_wrapper wrappers[] = {
  {0x466243b1, 1, fat0, 0},
  {0x466243b1, 1, fat1, 0},
};
__declspec(dllexport) int count(void) { return sizeof wrappers / sizeof *wrappers; }
/* read through the record at run time (volatile: not folded into &fat0 at compile time) */
__declspec(dllexport) const unsigned char *container(int i) {
  const volatile struct fatbin_wrapper *w = &wrappers[i];
  return (const unsigned char *)w->data;
}
"""

PROBE = r"""/* probe dump DLL: load DLL, print its address, then per container its RVA and bytes;
   probe map FILE SYMBOL: map FILE without resolving its imports, print its address and SYMBOL's
   RVA, then the same for every record of its .nvFatBi section, read in memory */
#include <windows.h>
#include <stdio.h>
#include <string.h>

static unsigned long long image_size(HMODULE h) {
  const unsigned char *b = (const unsigned char *)h;
  const IMAGE_NT_HEADERS64 *nt = (const void *)(b + ((const IMAGE_DOS_HEADER *)b)->e_lfanew);
  return nt->OptionalHeader.SizeOfImage;
}

/* "RVA hex" of the container at p, "- " when p is outside the image, its header alone when the
   magic is wrong */
static void show(HMODULE h, const unsigned char *p) {
  const unsigned char *b = (const unsigned char *)h;
  unsigned long long n = 16;
  if (p < b || p + 16 > b + image_size(h)) { printf("- %p\n", (const void *)p); return; }
  if (*(const unsigned int *)p == 0xBA55ED50u)
    n = *(const unsigned short *)(p + 6) + *(const unsigned long long *)(p + 8);
  if (p + n > b + image_size(h)) n = 16;
  printf("%llu ", (unsigned long long)(p - b));
  for (unsigned long long i = 0; i < n; i++) printf("%02x", p[i]);
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "dump")) {
    HMODULE h = LoadLibraryA(argv[2]);
    if (!h) { fprintf(stderr, "LoadLibraryA: error %lu\n", GetLastError()); return 2; }
    int (*count)(void) = (int (*)(void))GetProcAddress(h, "count");
    const unsigned char *(*container)(int) =
      (const unsigned char *(*)(int))GetProcAddress(h, "container");
    if (!count || !container) { fprintf(stderr, "GetProcAddress failed\n"); return 3; }
    printf("%llu\n", (unsigned long long)(ULONG_PTR)h);
    for (int i = 0, n = count(); i < n; i++) show(h, container(i));
    return 0;
  }
  if (argc == 4 && !strcmp(argv[1], "map")) {
    HMODULE h = LoadLibraryExA(argv[2], NULL, DONT_RESOLVE_DLL_REFERENCES);
    if (!h) { fprintf(stderr, "LoadLibraryExA: error %lu\n", GetLastError()); return 2; }
    const unsigned char *b = (const unsigned char *)h;
    FARPROC f = GetProcAddress(h, argv[3]);
    printf("%llu\n%llu\n", (unsigned long long)(ULONG_PTR)h,
           f ? (unsigned long long)((const unsigned char *)f - b) : 0ull);
    const IMAGE_NT_HEADERS64 *nt = (const void *)(b + ((const IMAGE_DOS_HEADER *)b)->e_lfanew);
    const IMAGE_SECTION_HEADER *s = IMAGE_FIRST_SECTION(nt);
    for (int i = 0; i < nt->FileHeader.NumberOfSections; i++, s++) {
      if (memcmp(s->Name, ".nvFatBi", 8)) continue;
      const unsigned char *r = b + s->VirtualAddress;
      for (DWORD at = 0; at + 24 <= s->Misc.VirtualSize; at += 24) {
        if (*(const unsigned int *)(r + at) != 0x466243b1u) continue;
        show(h, *(const unsigned char *const *)(r + at + 8));
      }
    }
    return 0;
  }
  if (argc == 3 && !strcmp(argv[1], "curand")) {  /* load it whole and call into it */
    HMODULE h = LoadLibraryA(argv[2]);
    if (!h) { fprintf(stderr, "LoadLibraryA: error %lu\n", GetLastError()); return 2; }
    int (*version)(int *) = (int (*)(int *))GetProcAddress(h, "curandGetVersion");
    int v = 0;
    if (!version || version(&v)) { fprintf(stderr, "curandGetVersion failed\n"); return 3; }
    printf("%llu\n%d\n", (unsigned long long)(ULONG_PTR)h, v);
    return 0;
  }
  fprintf(stderr, "usage: probe dump DLL | probe map FILE SYMBOL | probe curand DLL\n");
  return 1;
}
"""


# -- helpers ------------------------------------------------------------------------------------


def c_bytes(data: bytes) -> str:
    return ",".join(str(b) for b in data)


def mingw_gcc(cwd: Path, out: str, source: str, *flags: str) -> Path:
    """mingw gcc with its C runtime, stripped (no COFF symbol table: as MSVC links), at the
    preferred base every image here shares."""
    src = cwd / (Path(out).stem + ".c")
    src.write_text(source)
    run([tool(MINGW + "gcc"), "-O1", "-s", "-D__USE_MINGW_ANSI_STDIO=1",
         f"-Wl,--image-base,{BASE:#x}", *flags, "-o", cwd / out, src])  # fmt: skip
    return cwd / out


def wine_probe(env: dict[str, str], exe: Path, *args: str) -> list[str]:
    """The lines ``exe args`` prints under Wine, run in its folder (output to files: see
    test_coff's ``wine`` fixture); a non-zero exit status fails the test."""
    out, err = exe.parent / "probe.out", exe.parent / "probe.err"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        code = subprocess.run([tool("wine"), exe.name, *args], cwd=exe.parent, env=env,
                              stdout=stdout, stderr=stderr, timeout=120).returncode  # fmt: skip
    assert code == 0, f"{exe.name} {args} under Wine: exit status {code}\n{err.read_text()}"
    return out.read_text().splitlines()


def printed(lines: list[str]) -> list[tuple[int, bytes]]:
    """``(RVA, bytes)`` of each container line the probe printed."""
    out = []
    for line in lines:
        rva, data = line.split(" ", 1)
        assert rva != "-", f"a record points outside the image: {data}"
        out.append((int(rva), bytes.fromhex(data)))
    return out


def containers(path: Path) -> list[tuple[int, bytes]]:
    return walk(path)[0]


def fatbinkit_ls(path: Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "ls", str(path)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def by_image(files: dict[str, bytes]) -> dict[str, bytes]:
    """cuobjdump's extracted files by name without the image number (``nvdll.sm_80.cubin``):
    pruning renumbers the images; names stay unique here (one image per kind and arch)."""
    out = {re.sub(r"\.\d+\.", ".", name, count=1): data for name, data in files.items()}
    assert len(out) == len(files)
    return out


def layout_ok(path: Path) -> None:
    """llvm-readobj reads the headers and sections without a warning; every section's raw data
    lies inside the file and the sections follow one another in memory inside SizeOfImage."""
    out = readobj(path, "--file-headers", "--sections")
    size = path.stat().st_size
    rows = re.findall(r"Name: (\S+) .*?VirtualSize: 0x([0-9A-F]+)\s+VirtualAddress: "
                      r"0x([0-9A-F]+)\s+RawDataSize: (\d+)\s+PointerToRawData: 0x([0-9A-F]+)",
                      out.split("Sections [", 1)[1], re.S)  # fmt: skip
    assert rows
    end = 0
    for name, vsize, va, raw, at in rows:
        assert int(at, 16) + int(raw) <= size, f"{name}'s raw data runs past the file"
        assert int(va, 16) >= end, f"{name} overlaps the section before it"
        end = int(va, 16) + int(vsize, 16)
    image = re.search(r"SizeOfImage: (\d+)", out)
    assert image is not None and end <= int(image[1])


def pefile_problems(path: Path, control: Path) -> list[str]:
    """pefile's warnings on ``path`` (everything parsed, base relocations included) that it does
    not give on ``control`` (CuPy's .pyd already draws unwind-info warnings), and any about
    sections or relocations; not its guess from the share of zero bytes ("Byte 0x00 makes up
    59.9% of the file's contents": the mingw DLL's padding)."""
    known = set(pefile.PE(str(control)).get_warnings())
    return [w for w in pefile.PE(str(path)).get_warnings()
            if not w.startswith("Byte 0x") and (w not in known or re.search("section|reloc", w,
                                                                            re.I))]  # fmt: skip


def dir64_targets(path: Path) -> dict[int, int]:
    """RVA of each DIR64 base-relocation slot: the RVA its stored address stands for."""
    image = pefile.PE(str(path))
    base = image.OPTIONAL_HEADER.ImageBase
    out = {}
    for block in image.DIRECTORY_ENTRY_BASERELOC:
        for entry in block.entries:
            if entry.type == pefile.RELOCATION_TYPE["IMAGE_REL_BASED_DIR64"]:
                out[entry.rva] = image.get_qword_at_rva(entry.rva) - base
    return out


# -- the DLL and the probe ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with nvdll.dll, probe.exe and the two fatbins (fat0.fatbin, fat1.fatbin)."""
    root = tmp_path_factory.mktemp("slim_pe")
    fats = []
    for i, gencode in enumerate(GENCODES):
        run([NVCC, "-fatbin", *gencode, "-o", root / f"fat{i}.fatbin", AXPY])
        fats.append((root / f"fat{i}.fatbin").read_bytes())
    # -fno-toplevel-reorder: the containers in the order defined (gcc emits them reversed)
    mingw_gcc(root, DLL_NAME, DLL % tuple(map(c_bytes, fats)), "-shared", "-fno-toplevel-reorder")
    mingw_gcc(root, "probe.exe", PROBE)
    return root


def probe_dll(env: dict[str, str], built: Path, dll: Path) -> tuple[int, list[tuple[int, bytes]]]:
    """The probe run on ``dll`` (copied beside it as nvdll.dll): where the DLL was loaded, and
    what its wrapper records point at."""
    if dll.parent != built:
        shutil.copy(built / "probe.exe", dll.parent / "probe.exe")
        assert dll.name == DLL_NAME
    lines = wine_probe(env, dll.parent / "probe.exe", "dump", DLL_NAME)
    return int(lines[0]), printed(lines[1:])


def test_harness_reads_the_unpruned_dll(built: Path, wine: dict[str, str],  # noqa: F811
                                        tmp_path: Path) -> None:  # fmt: skip
    dll = built / DLL_NAME
    fats = [(built / f"fat{i}.fatbin").read_bytes() for i in range(2)]
    image = pefile.PE(str(dll))
    names = [s.Name.rstrip(b"\0").decode() for s in image.sections]
    assert names.count(".nv_fatb") == names.count(".nvFatBi") == 1, names
    assert image.OPTIONAL_HEADER.ImageBase == BASE
    assert image.FILE_HEADER.PointerToSymbolTable == 0
    fat, wrap = section(image, b".nv_fatb"), section(image, b".nvFatBi")
    # both containers in one section, in order, 8-byte aligned, nothing else there
    found = containers(dll)
    assert [data for _, data in found] == fats
    assert all(rva % 8 == 0 for rva, _ in found) and found[0][0] == fat.VirtualAddress
    # the records: magic, version 1, the containers' addresses, 0; each address a DIR64 slot,
    # and no other relocated address points into .nv_fatb
    records = wrap.get_data()[: wrap.Misc_VirtualSize]
    assert len(records) == 48
    slots = {}
    for i, (rva, _) in enumerate(found):
        rec = records[24 * i : 24 * i + 24]
        assert int.from_bytes(rec[:4], "little") == WRAPPER_MAGIC
        assert int.from_bytes(rec[4:8], "little") == 1 and rec[16:] == bytes(8)
        assert int.from_bytes(rec[8:16], "little") == BASE + rva
        slots[wrap.VirtualAddress + 24 * i + 8] = rva
    fat_end = fat.VirtualAddress + fat.Misc_VirtualSize
    into_fat = {at: to for at, to in dir64_targets(dll).items()
                if fat.VirtualAddress <= to < fat_end}  # fmt: skip
    assert into_fat == slots
    # what cuobjdump and fatbinkit see
    whole = dumped(dll, tmp_path)  # the section's containers, as test_pe takes them out
    assert whole.read_bytes() == b"".join(fats)
    assert cuobjdump_list(whole) == fatbinkit_ls(dll) == LISTING
    # what the loaded, relocated DLL's records point at
    base, seen = probe_dll(wine, built, dll)
    assert base != BASE  # moved: the probe sits at the preferred base
    assert seen == found


def _prune_80(src: Path, out: Path) -> object:
    return prune(src, out, [Arch(80)])


def _prune_86_120(src: Path, out: Path) -> object:
    return prune(src, out, [Arch(86), Arch(120)])


def _zstd(src: Path, out: Path) -> object:
    return recompress(src, out, codec="zstd")


@pytest.mark.parametrize(
    ("slim", "must_keep"),
    [
        (_prune_80, {"nvdll.sm_80.cubin"}),
        (_prune_86_120, {"nvdll.sm_86.cubin", "nvdll.sm_120.cubin"}),
        (_zstd, {re.sub(r"\.\d+\.", ".", line.split(": ")[1]) for line in LISTING}),
    ],
    ids=["prune-sm_80", "prune-sm_86-sm_120", "recompress-zstd"],
)
def test_pruned_dll_loads_and_points_at_the_kept_images(
    built: Path, wine: dict[str, str], tmp_path: Path,  # noqa: F811
    slim: Callable[[Path, Path], object], must_keep: set[str],
) -> None:  # fmt: skip
    dll = built / DLL_NAME
    out = tmp_path / DLL_NAME
    slim(dll, out)
    assert out.stat().st_size < dll.stat().st_size
    layout_ok(out)
    assert pefile_problems(out, dll) == []
    # the images: a subset of the original's, byte for byte, the requested ones among them
    old_fat = dumped(dll, tmp_path / "old")
    new_fat = dumped(out, tmp_path / "new")
    assert cuobjdump_list(new_fat) == fatbinkit_ls(out)
    old = by_image(cuobjdump_extract(old_fat, tmp_path / "old" / "x"))
    new = by_image(cuobjdump_extract(new_fat, tmp_path / "new" / "x"))
    assert len(new) == len(cuobjdump_list(new_fat))
    assert must_keep <= set(new) <= set(old)
    assert {name: old[name] for name in new} == new
    # the loader: the DLL moved, its records point at the containers in the pruned section
    found = containers(out)
    assert len(found) == 2
    base, seen = probe_dll(wine, built, out)
    assert base != BASE
    assert seen == found


def test_pruned_cupy_pyd_maps_under_wine(built: Path, wine: dict[str, str],  # noqa: F811
                                         tmp_path: Path) -> None:  # fmt: skip
    pyd = fetch(CUPY13_RANDOM_WIN)
    shutil.copy(built / "probe.exe", tmp_path / "probe.exe")
    shutil.copy(pyd, tmp_path / "original.pyd")

    def mapped(name: str) -> tuple[int, int, list[tuple[int, bytes]]]:
        lines = wine_probe(wine, tmp_path / "probe.exe", "map", name, PYD_INIT)
        return int(lines[0]), int(lines[1]), printed(lines[2:])

    def exported(path: Path) -> int:
        image = pefile.PE(str(path))
        (sym,) = [s for s in image.DIRECTORY_ENTRY_EXPORT.symbols if s.name == PYD_INIT.encode()]
        return int(sym.address)

    # the control: CuPy's own .pyd maps, moved off its preferred base, its record read in memory
    assert pefile.PE(str(pyd), fast_load=True).OPTIONAL_HEADER.ImageBase == BASE
    base, init, seen = mapped("original.pyd")
    assert base != BASE and init == exported(pyd) != 0
    assert seen == containers(pyd) and len(seen) == 1
    out = tmp_path / "pruned.pyd"
    prune(pyd, out, [Arch(80)])
    assert out.stat().st_size < pyd.stat().st_size
    layout_ok(out)
    assert pefile_problems(out, pyd) == []
    base, init, seen = mapped("pruned.pyd")
    assert base != BASE and init == exported(out) != 0
    assert seen == containers(out) and len(seen) == 1
    listing = cuobjdump_list(dumped(out, tmp_path))
    assert any(re.match(r"ELF file .*\.sm_80\.cubin$", line) for line in listing), listing


def test_pruned_signed_curand_dll_loads_and_runs_under_wine(
        built: Path, wine: dict[str, str], tmp_path: Path) -> None:  # noqa: F811
    """NVIDIA's cuRAND DLL (it imports kernel32 only), pruned to sm_90 with its signature left
    out: LoadLibrary runs its start-up code, GetProcAddress finds every export, and
    ``curandGetVersion`` answers as the original's does; its wrapper records, read in the mapped
    image, point at the containers the file holds."""
    dll = fetch(CURAND13_WIN)
    shutil.copy(built / "probe.exe", tmp_path / "probe.exe")
    shutil.copy(dll, tmp_path / "original.dll")
    out = tmp_path / "pruned.dll"
    prune(dll, out, [Arch(90)], strip_signature=True)
    assert out.stat().st_size < dll.stat().st_size
    layout_ok(out)
    before = wine_probe(wine, tmp_path / "probe.exe", "curand", "original.dll")
    after = wine_probe(wine, tmp_path / "probe.exe", "curand", "pruned.dll")
    assert after[1] == before[1] and int(after[1]) >= 10000  # the version, e.g. 10405
    lines = wine_probe(wine, tmp_path / "probe.exe", "map", "pruned.dll", "curandCreateGenerator")
    assert int(lines[1]) != 0  # the export is found
    assert printed(lines[2:]) == containers(out) and len(containers(out)) == 13


# -- relocatable device code (-rdc): __nv_relfatbin, "__nv_rel" in an image ----------------------

#: what nvcc -rdc puts in a DLL, mimicked: the device-linked fatbin in .nv_fatbin with its
#: version-2 wrapper (whose last field names the array crt/link.stub's __cudaRegisterLinkedBinary
#: fills at start-up with each object's wrapper's data pointer) and each object's relocatable
#: fatbin in __nv_relfatbin (fatbinary_section.h's FATBIN_PRELINK_DATA_SECTION_NAME) with its
#: version-1 wrapper, as the .fatbin.c nvcc -rdc writes (``__CUDAFATBINDATASECTION
#: "__nv_relfatbin"``); the linker cuts both names to eight bytes
RDC_DLL = r"""/* a linked fatbin, two relocatable ones and their wrapper records, as nvcc -rdc's */
struct fatbin_wrapper {
  unsigned int magic, version;
  const void *data;
  void *filename_or_fatbins;
};
__attribute__((section(".nv_fatbin"), aligned(8), used))
static const unsigned char linked[] = {%s};
#define RELFATBIN __attribute__((section("__nv_relfatbin"), aligned(8), used))
RELFATBIN static const unsigned char rel0[] = {%s};
RELFATBIN static const unsigned char rel1[] = {%s};
static void *prelinked[3];
__attribute__((section(".nvFatBinSegment"), aligned(8), used))
static const struct fatbin_wrapper wrappers[] = {
  {0x466243b1, 2, linked, prelinked},
  {0x466243b1, 1, rel0, 0},
  {0x466243b1, 1, rel1, 0},
};
__declspec(dllexport) int count(void) { return sizeof wrappers / sizeof *wrappers; }
__declspec(dllexport) const unsigned char *container(int i) {
  const volatile struct fatbin_wrapper *w = &wrappers[i];
  return (const unsigned char *)w->data;
}
"""
#: nvcc arguments of the linked fatbin and of each relocatable one (-rdc), in section order
RDC_GENCODES = (
    ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90"],
    ["-rdc=true", "-gencode", "arch=compute_80,code=[sm_80,compute_80]",
     "-gencode", "arch=compute_90,code=sm_90"],
    ["-rdc=true", "-gencode", "arch=compute_75,code=sm_75", "-gencode",
     "arch=compute_80,code=[sm_86,compute_80]"],
)  # fmt: skip
BOTH = (b".nv_fatb", b"__nv_rel")


@pytest.fixture(scope="module")
def rdc_built(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """nvdll.dll (RDC_DLL) and probe.exe in a folder of their own."""
    root = tmp_path_factory.mktemp("slim_pe_rdc")
    fats = []
    for i, args in enumerate(RDC_GENCODES):
        run([NVCC, "-fatbin", *args, "-o", root / f"fat{i}.fatbin", AXPY])
        fats.append((root / f"fat{i}.fatbin").read_bytes())
    mingw_gcc(root, DLL_NAME, RDC_DLL % tuple(map(c_bytes, fats)), "-shared",
              "-fno-toplevel-reorder")
    shutil.copy(built / "probe.exe", root / "probe.exe")
    return root


def rdc_containers(path: Path) -> list[tuple[int, bytes]]:
    """The containers of ``.nv_fatb`` then ``__nv_rel``: the wrapper records' order."""
    return [c for name in BOTH for c in walk(path, name)[0]]


def fatbinkit_cli(*args: str | Path) -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_rdc_dll_lists_and_extracts_nv_rel_with_all(rdc_built: Path, tmp_path: Path) -> None:
    """The image holds ``__nv_rel`` (the linker's cut of ``__nv_relfatbin``): ``ls``/``extract``
    read ``.nv_fatb`` only, as cuobjdump reads an ELF file's ``.nv_fatbin``; with ``--all`` the
    relocatable containers too, numbered across both sections, as cuobjdump ``-all`` lists and
    extracts the sections pefile dumps one after the other."""
    dll = rdc_built / DLL_NAME
    fats = [(rdc_built / f"fat{i}.fatbin").read_bytes() for i in range(3)]
    names = [s.Name.rstrip(b"\0") for s in pefile.PE(str(dll)).sections]
    assert b"__nv_rel" in names and b".nv_fatb" in names  # no long name kept in the image
    assert [data for _, data in rdc_containers(dll)] == fats
    linked = dumped(dll, tmp_path / "linked")
    assert fatbinkit_cli("ls", dll) == cuobjdump_list(linked)
    every = dumped(dll, tmp_path / "all", BOTH)
    listing = cuobjdump_list(every, all=True)
    assert len(listing) == 8 and sum(line.startswith("PTX") for line in listing) == 2
    assert fatbinkit_cli("ls", dll, "--all") == listing
    fatbinkit_cli("extract", dll, "--all", "-o", tmp_path / "ours")
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    assert ours == cuobjdump_extract(every, tmp_path / "theirs", all=True)
    # with no .nv_fatb, __nv_rel is what there is: listed without --all (as an -rdc -c object's
    # __nv_relfatbin is, by cuobjdump)
    data = bytearray(dll.read_bytes())
    at = data.index(b".nv_fatb")  # its name in the section table
    data[at:at + 8] = b".rdata2\0"
    alone = tmp_path / "alone" / DLL_NAME
    alone.parent.mkdir()
    alone.write_bytes(bytes(data))
    assert fatbinkit_cli("ls", alone) == cuobjdump_list(
        dumped(dll, tmp_path / "rel", (b"__nv_rel",)))


def test_pruned_rdc_dll_prunes_nv_rel_and_loads(rdc_built: Path, wine: dict[str, str],  # noqa: F811
                                                tmp_path: Path) -> None:  # fmt: skip
    """``prune --for sm_80`` prunes the relocatable containers like the linked ones: both
    sections' raw data shrink, every kept image is one of the original's, byte for byte, and
    under Wine the moved DLL's version-1 wrappers point at the pruned ``__nv_rel`` containers
    (the version-2 one at the linked container, its array pointer left as it was)."""
    dll = rdc_built / DLL_NAME
    out = tmp_path / DLL_NAME
    prune(dll, out, [Arch(80)])
    assert out.stat().st_size < dll.stat().st_size
    layout_ok(out)
    assert pefile_problems(out, dll) == []
    old, new = pefile.PE(str(dll)), pefile.PE(str(out))
    for name in BOTH:
        assert section(new, name).SizeOfRawData < section(old, name).SizeOfRawData, name
        assert section(new, name).Misc_VirtualSize == section(old, name).Misc_VirtualSize
    def images(path: Path, folder: Path) -> Counter[tuple[str, bytes]]:
        """cuobjdump's images of both sections, by arch and kind (``sm_80.cubin``) and bytes:
        pruning numbers them anew."""
        files = cuobjdump_extract(dumped(path, folder, BOTH), folder / "x", all=True)
        return Counter((".".join(n.split(".")[-2:]), data) for n, data in files.items())

    before, after = images(dll, tmp_path / "a"), images(out, tmp_path / "b")
    assert not after - before  # each kept image one of the original's, byte for byte
    # the linked sm_80 SASS, the first object's sm_80 SASS and both objects' compute_80 PTX
    assert sorted(arch for arch, _ in after.elements()) == [
        "sm_80.cubin", "sm_80.cubin", "sm_80.ptx", "sm_80.ptx"]
    assert fatbinkit_cli("ls", out, "--all") == cuobjdump_list(
        dumped(out, tmp_path / "c", BOTH), all=True)
    found = rdc_containers(out)
    assert len(found) == 3
    base, seen = probe_dll(wine, rdc_built, out)
    assert base != BASE
    assert seen == found
    wrap = section(new, b".nvFatBi").get_data()[:72]
    prelinked = int.from_bytes(wrap[16:24], "little")
    assert prelinked == int.from_bytes(section(old, b".nvFatBi").get_data()[16:24], "little") != 0
