"""LLD-linked libraries (issue 26, point 2): the wrapper's data pointer read where the loader
reads it.

LLD leaves the slot of a ``RELATIVE`` RELA relocation 0 and keeps the target in the addend (GNU
ld, and LLD with ``--apply-dynamic-relocs``, also store it in place); a packed ``RELR``
relocation has no addend: the value in place is the target. Checked with tools that are not
fatbinkit: cuobjdump lists and extracts the kept images (byte-identical to the original's) and
reads each container a wrapper points at; pyelftools reads the relocations, the RELR table and
the slots; the container starts are walked with the header layout NVIDIA's ``fatbinary.h``
documents (magic, version, header size, body size); the dynamic loader loads the library and
the pointers it relocated are read from memory. On x86-64 (the library of
``tests/gpu/lld_library.py``, four link forms, an ``ld.lld -r`` object and a static library),
on AArch64 (a library with nvcc's wrapper layout linked by ``ld.lld``), and on the three
libraries with device code of the public wheel jax-cuda12-plugin 0.10.2 (clang + LLD 18).
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from fatbin_kernels import cuobjdump_extract, system_tool
from gpu.lld_library import LINKS, compile_objects, link
from test_slim import SYNTH_C, listed_archs, readelf_ok
from thirdparty import JAX_CUDA12_LINALG, JAX_CUDA12_PRNG, JAX_CUDA12_SOLVER, fetch

from fatbinkit.errors import UnsupportedError
from fatbinkit.formats.arch import Arch
from fatbinkit.slim import prune

NVCC = system_tool("nvcc")
FATBIN_MAGIC = 0xBA55ED50  # fatbinary.h: FATBIN_CONTROL_MAGIC
WRAPPER_SIZE = 24  # {int magic; int version; const void *data; void *filename_or_fatbins}
R_RELATIVE = {"x86_64": 8, "aarch64": 1027}  # the psABIs' R_X86_64_RELATIVE, R_AARCH64_RELATIVE
# what each link form does with a wrapper's pointer: (relocation kind, value also in the slot)
HOW = {"lld": ("RELA", False), "lld-apply": ("RELA", True), "lld-relr": ("RELR", True),
       "bfd-relr": ("RELR", True)}


def need(*tools: str) -> None:
    missing = [t for t in tools if not shutil.which(t)]
    if missing:  # as the other cross-linker tests: .ci/run installs them
        pytest.skip(f"{', '.join(missing)} missing (.ci/run installs lld and "
                    "gcc-aarch64-linux-gnu)")


# -- oracles --------------------------------------------------------------------------------------


def pointers(path: Path) -> list[tuple[int, str, int, int, int]]:
    """Per wrapper record of ``.nvFatBinSegment``, in order, as pyelftools reads the file:
    (slot address, "RELA"/"RELR"/"none", relocation type, the address the loader stores there
    for a load base of 0, the eight bytes the file holds in the slot)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection, RelrRelocationSection

    data = path.read_bytes()
    with open(path, "rb") as f:
        e = ELFFile(f)
        seg = e.get_section_by_name(".nvFatBinSegment")
        slots = [seg["sh_addr"] + WRAPPER_SIZE * k + 8 for k in range(seg["sh_size"] // 24)]
        rela: dict[int, tuple[int, int]] = {}
        relr: set[int] = set()
        for sec in e.iter_sections():
            if isinstance(sec, RelrRelocationSection):
                relr.update(r["r_offset"] for r in sec.iter_relocations())
            elif isinstance(sec, RelocationSection) and sec.is_RELA():
                for r in sec.iter_relocations():
                    if r["r_offset"] in slots:
                        assert r["r_offset"] not in rela
                        rela[r["r_offset"]] = (r["r_info_type"], r["r_addend"])
        out = []
        for slot in slots:
            stored = struct.unpack_from("<Q", data, next(e.address_offsets(slot)))[0]
            if slot in rela:
                out.append((slot, "RELA", rela[slot][0], rela[slot][1], stored))
            else:
                out.append((slot, "RELR" if slot in relr else "none", 0, stored, stored))
        return out


def fatbin_section(path: Path) -> tuple[int, bytes]:
    """Address and bytes of ``.nv_fatbin`` (pyelftools)."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        sec = ELFFile(f).get_section_by_name(".nv_fatbin")
        return sec["sh_addr"], sec.data()


def container_spans(section: bytes) -> list[tuple[int, int]]:
    """(offset, size) of each container in a fatbin section, walked by its header: u32 magic,
    u16 version, u16 header size, u64 body size; containers 8-byte aligned."""
    spans, at = [], 0
    while at + 16 <= len(section):
        magic, _version, head, body = struct.unpack_from("<IHHQ", section, at)
        if magic != FATBIN_MAGIC:
            break
        spans.append((at, head + body))
        at = (at + head + body + 7) & ~7
    return spans


def container_images(blob: bytes, tmp: Path) -> Counter[tuple[str, bytes]]:
    """What cuobjdump extracts from one container (as a raw fatbin file): (arch.kind, bytes)."""
    tmp.mkdir(parents=True)
    (tmp / "c.fatbin").write_bytes(blob)
    files = cuobjdump_extract(tmp / "c.fatbin", tmp / "x", all=True)
    return Counter((name.split(".", 2)[2], data) for name, data in files.items())


def at(path: Path, section: tuple[int, bytes], addr: int) -> bytes:
    """The container at ``addr`` in ``section`` of ``path``."""
    base, data = section
    spans = dict(container_spans(data))
    assert addr - base in spans, f"{path.name}: {addr:#x} is not a container start"
    return data[addr - base : addr - base + spans[addr - base]]


def assert_pointers_follow(src: Path, out: Path, tmp: Path, keep: str = "sm_90") -> None:
    """Each wrapper of ``out`` points, where the loader takes its pointer from, at a container
    of its ``.nv_fatbin`` (every container is pointed at), holding what ``src``'s wrapper of the
    same index held for ``keep`` and PTX, byte for byte; the relocation kind is unchanged and
    the slot holds the value where it did, 0 where it held 0."""
    before, after = pointers(src), pointers(out)
    assert len(before) == len(after) >= 2
    old, new = fatbin_section(src), fatbin_section(out)
    assert {p[3] for p in after} == {new[0] + off for off, _ in container_spans(new[1])}
    for k, (b, a) in enumerate(zip(before, after, strict=True)):
        assert a[:3] == b[:3]
        assert a[4] == (a[3] if b[4] == b[3] else b[4])  # applied stays applied, 0 stays 0
        wanted = Counter({key: n for key, n in container_images(
            at(src, old, b[3]), tmp / f"in{k}").items()
            if key[0].startswith(f"{keep}.") or key[0].endswith(".ptx")})
        assert container_images(at(out, new, a[3]), tmp / f"out{k}") == wanted


def assert_loaded_pointers(lib_path: Path) -> None:
    """dlopen the library (its host side: the CUDA runtime registers its fatbins, no GPU
    needed) and read each wrapper's pointer from memory as the loader relocated it: it is the
    load base plus the target pyelftools reads, and the bytes there are the file's container."""
    lib = ctypes.CDLL(str(lib_path))
    assert lib.lld_answer() == 42 and lib.slim_version() == 42

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    info = DlInfo()
    libc = ctypes.CDLL(None)
    address = ctypes.cast(lib.lld_answer, ctypes.c_void_p).value
    assert libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info))
    base = info.fbase
    section = fatbin_section(lib_path)
    for slot, _how, _kind, target, _stored in pointers(lib_path):
        loaded = struct.unpack("<Q", ctypes.string_at(base + slot, 8))[0]
        assert loaded == base + target
        blob = at(lib_path, section, target)
        assert ctypes.string_at(loaded, len(blob)) == blob


# -- the suite's LLD-linked library ---------------------------------------------------------------


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return compile_objects(tmp_path_factory.mktemp("lld-obj"), NVCC)


@pytest.mark.parametrize("form", LINKS)
def test_lld_library_pruned(objects: list[Path], tmp_path: Path, form: str) -> None:
    """Linked by LLD (0 in the slot, the target in the RELATIVE addend: refused before), by LLD
    with the value applied, and packed as RELR by LLD and GNU ld: pruned for sm_90, the file
    shrinks, cuobjdump finds the sm_90 SASS and the PTX byte for byte, every wrapper points at
    its own module's container where the loader reads it, and the library loads."""
    flags, tool = LINKS[form]
    need(tool)
    src, out = tmp_path / "liblld.so", tmp_path / "pruned.so"
    link(objects, src, flags, NVCC)
    assert {p[1] for p in pointers(src)} == {HOW[form][0]}
    assert all((p[4] == p[3]) == HOW[form][1] for p in pointers(src))
    report = prune(src, out, [Arch(90)])
    assert report.archs[0].same and report.archs[0].modules == 2
    assert out.stat().st_size == report.output_size < src.stat().st_size - 100_000
    assert listed_archs(out) == {"ELF sm_90": 2, "PTX sm_90": 2}
    kept = Counter(data for name, data in cuobjdump_extract(src, tmp_path / "in").items()
                   if ".sm_90." in name)
    assert Counter(cuobjdump_extract(out, tmp_path / "out").values()) == kept
    readelf_ok(out)
    if HOW[form][0] == "RELA":
        assert all(p[2] == R_RELATIVE["x86_64"] for p in pointers(out))
    assert_pointers_follow(src, out, tmp_path)
    if form == "lld-relr":  # LLD 14 adds no GLIBC_ABI_DT_RELR need (LLD 15's
        # -z pack-relative-relocs does): glibc 2.36 refuses the original as the output
        for path in (src, out):
            with pytest.raises(OSError, match="DT_RELR without GLIBC_ABI_DT_RELR"):
                ctypes.CDLL(str(path))
        return
    assert_loaded_pointers(out)


def test_slot_holding_neither_value_nor_zero_is_refused(objects: list[Path],
                                                        tmp_path: Path) -> None:
    """A slot holding something else than its RELATIVE relocation's target or 0 (no linker
    writes that; a prelinked library would be read from it): refused, nothing written;
    ``--same-size``, which moves nothing, still prunes it."""
    need("ld.lld")
    src, bad, out = tmp_path / "liblld.so", tmp_path / "bad.so", tmp_path / "out.so"
    link(objects, src, LINKS["lld"][0], NVCC)
    from elftools.elf.elffile import ELFFile

    data = bytearray(src.read_bytes())
    slot = pointers(src)[1][0]
    with open(src, "rb") as f:
        where = next(ELFFile(f).address_offsets(slot))
    struct.pack_into("<Q", data, where, 0x1000)
    bad.write_bytes(data)
    with pytest.raises(UnsupportedError, match="holds 0x1000 in place"):
        prune(bad, out, [Arch(90)])
    assert not out.exists()
    prune(bad, out, [Arch(90)], same_size=True)
    assert listed_archs(out) == {"ELF sm_90": 2, "PTX sm_90": 2}


def test_rel_relocations_are_refused(objects: list[Path], tmp_path: Path) -> None:
    """``ld.lld -z rel``: REL dynamic relocations, the value in place (glibc's x86-64 and
    AArch64 loaders apply RELA only): refused, naming the section, nothing written."""
    need("ld.lld")
    src, out = tmp_path / "librel.so", tmp_path / "out.so"
    link(objects, src, [*LINKS["lld"][0], "-Wl,-z,rel"], NVCC)
    with pytest.raises(UnsupportedError, match=r"\.rel\.dyn: REL relocations"):
        prune(src, out, [Arch(90)])
    assert not out.exists()


def test_wrapper_relocated_by_a_symbol_is_refused(objects: list[Path], tmp_path: Path) -> None:
    """A wrapper's pointer relocated by ``R_X86_64_64`` against a dynamic symbol (S + A at its
    container): only a RELATIVE one is rewritten; refused, naming the relocation type."""
    need("ld.lld")
    from elftools.elf.elffile import ELFFile

    src, bad = tmp_path / "liblld.so", tmp_path / "bad.so"
    link(objects, src, LINKS["lld"][0], NVCC)
    data = bytearray(src.read_bytes())
    slot, _how, _kind, target, _stored = pointers(src)[0]
    with open(src, "rb") as f:
        e = ELFFile(f)
        dynsym = e.get_section_by_name(".dynsym")
        index, sym = next((i, s) for i, s in enumerate(dynsym.iter_symbols())
                          if s.name == "lld_answer")
        rela = e.get_section_by_name(".rela.dyn")
        row = next(i for i, r in enumerate(rela.iter_relocations()) if r["r_offset"] == slot)
        at = rela["sh_offset"] + 24 * row
    struct.pack_into("<QQq", data, at, slot, index << 32 | 1, target - sym["st_value"])
    bad.write_bytes(data)
    with pytest.raises(UnsupportedError, match="relocation type 1, not RELATIVE"):
        prune(bad, tmp_path / "out.so", [Arch(90)])
    assert not (tmp_path / "out.so").exists()


def test_lld_relocatable_object_and_static_library(objects: list[Path], tmp_path: Path) -> None:
    """``ld.lld -r`` joins the two objects (one ``.nv_fatbin``, the wrappers' ``R_X86_64_64``
    addends 0 and the second container's offset, 0 in the slots); pruned, each addend points at
    its container; the object in a static library pruned and linked by LLD into a library
    whose wrappers point, once loaded, at the sm_90 images of the same modules."""
    need("ld.lld")
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection

    merged, out = tmp_path / "merged.o", tmp_path / "pruned.o"
    subprocess.run(["ld.lld", "-r", "-o", str(merged), *map(str, objects)], check=True)
    prune(merged, out, [Arch(90)])
    assert out.stat().st_size < merged.stat().st_size
    assert listed_archs(out, all=True) == {"ELF sm_90": 2, "PTX sm_90": 2}

    def addends(path: Path) -> list[tuple[int, int]]:
        """(target offset in .nv_fatbin, bytes in the slot) of each wrapper relocation."""
        with open(path, "rb") as f:
            e = ELFFile(f)
            rel = e.get_section_by_name(".rela.nvFatBinSegment")
            assert isinstance(rel, RelocationSection)
            seg = e.get_section_by_name(".nvFatBinSegment").data()
            symtab = e.get_section(rel["sh_link"])
            fat = e.get_section_by_name(".nv_fatbin")
            rows = []
            for r in rel.iter_relocations():
                sym = symtab.get_symbol(r["r_info_sym"])
                assert e.get_section(sym["st_shndx"]).name == ".nv_fatbin"
                rows.append((sym["st_value"] + r["r_addend"],
                             struct.unpack_from("<Q", seg, r["r_offset"])[0]))
            return sorted(rows), fat.data()

    (old, old_fat), (new, new_fat) = addends(merged), addends(out)
    assert [s for _, s in old] == [s for _, s in new] == [0, 0]
    assert [t for t, _ in new] == [off for off, _ in container_spans(new_fat)]
    for k, ((o, _), (n, _)) in enumerate(zip(old, new, strict=True)):
        spans_old, spans_new = dict(container_spans(old_fat)), dict(container_spans(new_fat))
        want = Counter({key: c for key, c in container_images(
            old_fat[o : o + spans_old[o]], tmp_path / f"o{k}").items()
            if key[0].startswith("sm_90.") or key[0].endswith(".ptx")})
        assert container_images(new_fat[n : n + spans_new[n]], tmp_path / f"n{k}") == want

    archive, pruned_archive = tmp_path / "liblld.a", tmp_path / "libpruned.a"
    subprocess.run(["ar", "rcs", str(archive), str(merged)], check=True)
    prune(archive, pruned_archive, [Arch(90)], ptx="none")
    assert pruned_archive.stat().st_size < archive.stat().st_size
    ref, lib = tmp_path / "ref.so", tmp_path / "fromarchive.so"
    link(objects, ref, LINKS["lld"][0], NVCC)
    link(["-Wl,--whole-archive", pruned_archive, "-Wl,--no-whole-archive"], lib,
         LINKS["lld"][0], NVCC)
    assert listed_archs(lib) == {"ELF sm_90": 2}
    before, after = pointers(ref), pointers(lib)
    old_sec, new_sec = fatbin_section(ref), fatbin_section(lib)
    for k, (b, a) in enumerate(zip(before, after, strict=True)):
        want = Counter({key: c for key, c in container_images(
            at(ref, old_sec, b[3]), tmp_path / f"r{k}").items() if key[0] == "sm_90.cubin"})
        assert container_images(at(lib, new_sec, a[3]), tmp_path / f"l{k}") == want
    assert_loaded_pointers(lib)


# -- AArch64 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("relr", [False, True], ids=["rela", "relr"])
def test_lld_aarch64(objects: list[Path], tmp_path: Path, relr: bool) -> None:
    """nvcc's wrapper layout compiled for AArch64 (the containers of the two x86-64 objects)
    and linked by ``ld.lld`` (``R_AARCH64_RELATIVE`` with 0 in the slot, or packed RELR):
    pruned for sm_90, the file shrinks (64 KiB pages) and every pointer follows its module."""
    need("aarch64-linux-gnu-gcc", "ld.lld")
    blobs = []
    for k, obj in enumerate(objects):
        raw = tmp_path / f"c{k}.bin"
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", str(obj),
                        str(raw)], check=True)
        blobs.append(",".join(map(str, raw.read_bytes())))
    c, o, src, out = (tmp_path / n for n in ("synth.c", "synth.o", "lib.so", "pruned.so"))
    c.write_text(SYNTH_C % tuple(blobs))
    subprocess.run(["aarch64-linux-gnu-gcc", "-c", "-fPIC", "-O1", "-o", str(o), str(c)],
                   check=True)
    subprocess.run(["ld.lld", "-shared", *(["--pack-dyn-relocs=relr"] if relr else []),
                    "-o", str(src), str(o)], check=True)
    got = pointers(src)
    if relr:
        assert {p[1] for p in got} == {"RELR"}
    else:
        assert {(p[1], p[2], p[4]) for p in got} == {("RELA", R_RELATIVE["aarch64"], 0)}
    report = prune(src, out, [Arch(90)])
    assert report.archs[0].same and out.stat().st_size < src.stat().st_size
    assert listed_archs(out) == {"ELF sm_90": 2, "PTX sm_90": 2}
    readelf_ok(out)
    assert_pointers_follow(src, out, tmp_path)


# -- jax-cuda12-plugin 0.10.2 (clang + LLD 18.1.8) ------------------------------------------------

JAX = {"_linalg": JAX_CUDA12_LINALG, "_prng": JAX_CUDA12_PRNG, "_solver": JAX_CUDA12_SOLVER}


@pytest.mark.parametrize("name", JAX)
def test_jax_cuda12_plugin(name: str, tmp_path: Path) -> None:
    """The three libraries with device code of the jax-cuda12-plugin 0.10.2 wheel (8.1 MB;
    the others and jax-cuda12-pjrt hold none here): refused before, now pruned for sm_90, the
    file shrinks, and cuobjdump lists and extracts of it exactly the original's sm_90 SASS
    and PTX, byte for byte; every wrapper's RELATIVE addend points at its container, and the
    slot still holds LLD's 0."""
    src, out = fetch(JAX[name]), tmp_path / f"{name}.so"
    report = prune(src, out, [Arch(90)])
    assert out.stat().st_size == report.output_size < src.stat().st_size
    want = Counter(data for n, data in cuobjdump_extract(src, tmp_path / "in").items()
                   if ".sm_90." in n or n.endswith(".ptx"))
    assert want and Counter(cuobjdump_extract(out, tmp_path / "out").values()) == want
    readelf_ok(out)
    assert {(p[1], p[2], p[4]) for p in pointers(src)} == {("RELA", R_RELATIVE["x86_64"], 0)}
    old, new = fatbin_section(src), fatbin_section(out)
    for k, (b, a) in enumerate(zip(pointers(src), pointers(out), strict=True)):
        assert a[4] == 0
        wanted = Counter({key: c for key, c in container_images(
            at(src, old, b[3]), tmp_path / f"i{k}").items()
            if key[0].startswith("sm_90.") or key[0].endswith(".ptx")})
        assert container_images(at(out, new, a[3]), tmp_path / f"o{k}") == wanted
