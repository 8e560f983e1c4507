"""Where HIP device code lives, and that fatbinkit finds it there (../shared/ROCM.md §1.3, §5):
``.hip_fatbin`` modules through their ``.hipFatBinSegment`` wrapper records (HIPF, rocm-kpack's
HIPK), Windows PE files (``.hip_fat``/``.hipFatB``), static archives, AOTInductor-style blobs
between ``__<kernel>_start``/``_end`` and bare files (a bundle, a CCOB, a code object).

The oracles: pyelftools for relocations and section offsets, clang-offload-bundler 19
(``--unbundle``, ``--type=a``) for the bytes of each image, mingw-w64's objdump for PE section
names, GNU ld/objcopy for the AOTI embedding (torch's ``convert_cubin_to_obj``).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from hipbuild import TARGETS, build
from llvm import run_llvm
from thirdparty import ROCM_TEST_MEMBERS, WheelMember, fetch

import fatbinkit
from fatbinkit.errors import FormatError
from fatbinkit.formats import pe
from fatbinkit.formats.wrapper import HIP_KPACK_MAGIC, HIP_WRAPPER_MAGIC
from fatbinkit.scan import scan, scan_modules
from fatbinkit.vendors.hip.finding import KPACK
from fatbinkit.vendors.hip.wrappers import elf_wrappers, pe_wrappers

HIPV4 = "hipv4-amdgcn-amd-amdhsa--"
R_X86_64_64 = 1
R_X86_64_RELATIVE = 8
MINGW_GCC = "x86_64-w64-mingw32-gcc"
MINGW_OBJDUMP = "x86_64-w64-mingw32-objdump"


def unbundle(bundle: Path, target: str, tmp_path: Path) -> bytes:
    """The entry for ``target`` of a bundle file (plain or CCOB v2), by clang-offload-bundler
    19."""
    out = tmp_path / f"{bundle.name}.{target.replace(':', '_')}.co"
    proc = run_llvm(19, "clang-offload-bundler", "--unbundle", "--type=o", f"--input={bundle}",
                    f"--targets={HIPV4}{target}", f"--output={out}")
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def section_of(elf: ELFFile, name: str) -> tuple[int, int, int]:
    """(file offset, size, address) of section ``name``."""
    s = elf.get_section_by_name(name)
    assert s is not None, name
    return s["sh_offset"], s["sh_size"], s["sh_addr"]


def oracle_targets(path: Path) -> list[int]:
    """The file offset each ``.hipFatBinSegment`` record's ``binary`` points to, as pyelftools
    reads the relocations: RELATIVE addends in a library, R_X86_64_64 symbol + addend in an
    object."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        _, seg_size, seg_addr = section_of(elf, ".hipFatBinSegment")
        slots = {k * 24 + 8: k for k in range(seg_size // 24)}
        out: dict[int, int] = {}
        if elf["e_type"] == "ET_REL":
            rela = elf.get_section_by_name(".rela.hipFatBinSegment")
            assert isinstance(rela, RelocationSection)
            symtab = elf.get_section(rela["sh_link"])
            for r in rela.iter_relocations():
                assert r["r_info_type"] == R_X86_64_64
                sym = symtab.get_symbol(r["r_info_sym"])  # type: ignore[attr-defined]
                target = elf.get_section(sym["st_shndx"])
                out[slots[r["r_offset"]]] = target["sh_offset"] + sym["st_value"] + r["r_addend"]
        else:
            for sec in elf.iter_sections():
                if not isinstance(sec, RelocationSection) or not sec["sh_flags"] & 2:
                    continue
                for r in sec.iter_relocations():
                    k = slots.get(r["r_offset"] - seg_addr)
                    if k is not None:
                        assert r["r_info_type"] == R_X86_64_RELATIVE
                        fat_off, _, fat_addr = section_of(elf, ".hip_fatbin")
                        out[k] = fat_off + r["r_addend"] - fat_addr
        return [out[k] for k in sorted(out)]


def bundle_starts(path: Path) -> list[int]:
    """File offsets of the bundles (plain or CCOB) at 4096-aligned offsets of `.hip_fatbin`."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        off, size, _ = section_of(elf, ".hip_fatbin")
        data = elf.get_section_by_name(".hip_fatbin").data()  # type: ignore[union-attr]
    return [off + k for k in range(0, size, 4096)
            if data[k:k + 4] == b"CCOB" or data[k:k + 24] == b"__CLANG_OFFLOAD_BUNDLE__"]


# -- 1. the wrapper walk ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "modules"), [
    ("obj19", 1), ("obj19z", 1), ("obj22z", 1), ("lib19mix", 2), ("lib22zz", 2)])
def test_wrapper_targets_are_the_bundles(name: str, modules: int) -> None:
    """Each record's pointer, resolved through its relocation, is the start of one bundle of
    `.hip_fatbin` (pyelftools's relocations, the section's bytes); scan lists one container
    per module."""
    path = build(name)
    refs = elf_wrappers(memoryview(path.read_bytes()))
    assert refs is not None
    assert [r.target for r in refs] == oracle_targets(path) == bundle_starts(path)
    assert all(r.record.magic == HIP_WRAPPER_MAGIC and r.record.version == 1 for r in refs)
    codes, entryless = scan_modules(path)
    assert len({c.container for c in codes}) == modules and not entryless
    assert len(codes) == modules * len(TARGETS)


@pytest.mark.parametrize("member", ROCM_TEST_MEMBERS, ids=str)
def test_wheel_wrapper_targets(member: WheelMember) -> None:
    """The same in the ROCm wheels' libraries (ROCm 5 and 7 lld, jax's two-module
    _solver.so)."""
    path = fetch(member)
    refs = elf_wrappers(memoryview(path.read_bytes()))
    assert refs is not None
    assert [r.target for r in refs] == oracle_targets(path) == bundle_starts(path)
    codes, entryless = scan_modules(path)
    assert len({c.container for c in codes}) == len(refs) and not entryless


def _slot_relocation(path: Path, record: int) -> int:
    """The file offset of the RELA entry that gives ``record``'s pointer."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        _, _, seg_addr = section_of(elf, ".hipFatBinSegment")
        rel = elf.get_section_by_name(".rela.hipFatBinSegment")
        want = record * 24 + 8
        if rel is None:
            rel = elf.get_section_by_name(".rela.dyn")
            want += seg_addr
        assert isinstance(rel, RelocationSection)
        for i, r in enumerate(rel.iter_relocations()):
            if r["r_offset"] == want:
                return int(rel["sh_offset"]) + i * 24
    raise AssertionError(f"no relocation for record {record}")


def _record(path: Path, record: int) -> int:
    with path.open("rb") as f:
        return section_of(ELFFile(f), ".hipFatBinSegment")[0] + 24 * record


def _patched(src: Path, tmp_path: Path, patches: list[tuple[int, bytes]]) -> Path:
    data = bytearray(src.read_bytes())
    for at, raw in patches:
        data[at:at + len(raw)] = raw
    out = tmp_path / src.name
    out.write_bytes(data)
    return out


def test_kpack_record_is_an_entryless_module(tmp_path: Path) -> None:
    """A HIPK record (rocm-kpack) is a module whose code is elsewhere: an entryless container
    numbered after the bundles, at the record; the bundle it pointed to, no longer registered
    through a HIPF record, is still listed."""
    lib = build("lib19mix")
    one = _patched(lib, tmp_path, [(_record(lib, 0), struct.pack("<I", HIP_KPACK_MAGIC))])
    assert one.read_bytes()[_record(lib, 0):_record(lib, 0) + 4] == b"HIPK"
    codes, entryless = scan_modules(one)
    assert [(c.container, c.offset) for c in codes] == [
        (c.container, c.offset) for c in scan(lib)]
    assert [(e.source, e.container, e.offset, e.vendor, e.moved) for e in entryless] == [
        (".hip_fatbin", 2, _record(lib, 0), "hip", KPACK)]
    check = fatbinkit.open(one).check(["gfx942"])
    assert [str(s.label) for s, _ in check.rows] == [".hip_fatbin container 0",
                                                   ".hip_fatbin container 1"]


def test_kpack_zero_paged(tmp_path: Path) -> None:
    """What rocm-kpack leaves: both records HIPK, `.hip_fatbin` zeroed: no image, two
    modules with none."""
    lib = build("lib22zz")
    with lib.open("rb") as f:
        off, size, _ = section_of(ELFFile(f), ".hip_fatbin")
    magic = struct.pack("<I", HIP_KPACK_MAGIC)
    out = _patched(lib, tmp_path, [(off, bytes(size)), (_record(lib, 0), magic),
                                   (_record(lib, 1), magic)])
    codes, entryless = scan_modules(out)
    assert codes == ()
    assert [(e.container, e.offset, e.moved) for e in entryless] == [
        (0, _record(lib, 0), KPACK), (1, _record(lib, 1), KPACK)]
    # what a user sees: two modules moved out, not judged (no "no image" verdicts)
    binary = fatbinkit.open(out)
    assert (len(binary.moved), binary.entryless) == (2, ())
    summary = binary.summary()
    assert (summary.modules, summary.moved, summary.to_dict()["moved"]) == (0, 2, 2)
    assert "2 modules more whose device code was moved out" in str(summary)
    assert "2 modules moved to a .kpack file (rocm-kpack)" in str(binary)


@pytest.mark.parametrize("name", ["lib19mix", "obj19"])
def test_pointer_past_the_section(name: str, tmp_path: Path) -> None:
    src = build(name)
    with src.open("rb") as f:
        _, size, addr = section_of(ELFFile(f), ".hip_fatbin")
    record = 1 if name == "lib19mix" else 0
    rel = _slot_relocation(src, record)
    addend = (addr if name == "lib19mix" else 0) + size + 0x1000
    bad = _patched(src, tmp_path, [(rel + 16, struct.pack("<q", addend))])
    with pytest.raises(FormatError, match=rf"wrapper record {record} .*points outside "
                                          r"\.hip_fatbin") as e:
        scan(bad)
    assert e.value.offset == _record(src, record)


def test_pointer_inside_a_bundle(tmp_path: Path) -> None:
    src = build("lib19mix")
    rel = _slot_relocation(src, 0)
    (addend,) = struct.unpack_from("<q", src.read_bytes(), rel + 16)
    bad = _patched(src, tmp_path, [(rel + 16, struct.pack("<q", addend + 0x40))])
    with pytest.raises(FormatError, match=r"wrapper record 0 .*at a bundle's inside, not at a "
                                          r"bundle start \(0x0, 0xa000\)"):
        scan(bad)


@pytest.mark.parametrize(("at", "raw", "words"), [
    (4, struct.pack("<I", 2), r"wrapper record 1: .*version 2"),
    (0, b"FPIX", r"wrapper record 1: .*magic 0x58495046")])
def test_bad_record(at: int, raw: bytes, words: str, tmp_path: Path) -> None:
    src = build("lib19mix")
    bad = _patched(src, tmp_path, [(_record(src, 1) + at, raw)])
    with pytest.raises(FormatError, match=words) as e:
        scan(bad)
    assert e.value.offset == _record(src, 1)


# -- 2. Windows PE ------------------------------------------------------------------------------


def _mingw(tmp_path: Path, bundle: Path) -> tuple[Path, Path, Path]:
    """A COFF object holding ``bundle`` in `.hip_fatbin` with one HIPF record, and DLLs linked
    from it with eight-byte section names (as MSVC's link writes them) and long ones (GNU ld's
    default)."""
    if shutil.which(MINGW_GCC) is None:
        pytest.skip(f"{MINGW_GCC} is not installed (.ci/run installs gcc-mingw-w64-x86-64)")
    src = tmp_path / "k.S"
    src.write_text(f""".section .hip_fatbin,"dr"
    .p2align 12
fatbin:
    .incbin "{bundle}"
    .section .hipFatBinSegment,"dw"
    .p2align 3
    .long {HIP_WRAPPER_MAGIC}, 1
    .quad fatbin, 0
    .text
    .globl hello
hello:
    ret
""")
    obj, short, long = tmp_path / "k.obj", tmp_path / "k8.dll", tmp_path / "k.dll"
    subprocess.run([MINGW_GCC, "-c", src, "-o", obj], check=True)
    subprocess.run([MINGW_GCC, "-shared", "-Wl,--disable-long-section-names", "-o", short, obj],
                   check=True)
    subprocess.run([MINGW_GCC, "-shared", "-o", long, obj], check=True)
    return obj, short, long


def _objdump_sections(path: Path) -> dict[str, tuple[int, int]]:
    """name -> (file offset, size), by mingw-w64's objdump -h."""
    out = subprocess.run([MINGW_OBJDUMP, "-h", path], check=True, capture_output=True,
                         text=True).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[0].isdigit():
            found[parts[1]] = (int(parts[5], 16), int(parts[2], 16))
    return found


def test_pe_sections(tmp_path: Path) -> None:
    """`.hip_fat`/`.hipFatB` in a DLL with short names, the long names in the object and in a
    DLL that keeps them: each lists the bundle's three code objects at their file offsets
    (the bytes there are clang-offload-bundler's), through the one wrapper record."""
    bundle = build("bundle19")
    want = {t: unbundle(bundle, t, tmp_path) for t in TARGETS}
    for path, fat, seg in zip(_mingw(tmp_path, bundle),
                              (".hip_fatbin", ".hip_fat", ".hip_fatbin"),
                              (".hipFatBinSegment", ".hipFatB", ".hipFatBinSegment"), strict=True):
        sections = _objdump_sections(path)
        assert fat in sections and seg in sections, sections
        data = path.read_bytes()
        codes = scan(path)
        assert sorted(c.target for c in codes) == sorted(TARGETS)
        for c in codes:
            assert c.source == fat and c.container == 0
            assert data[c.offset:c.offset + c.stored] == want[c.target]
        view = memoryview(data)
        refs = pe_wrappers(view, pe.read(view))
        assert refs is not None and [r.target for r in refs] == [sections[fat][0]]


def test_pe_pointer_past_the_section(tmp_path: Path) -> None:
    _, dll, _ = _mingw(tmp_path, build("bundle19"))
    seg_off, _ = _objdump_sections(dll)[".hipFatB"]
    data = dll.read_bytes()
    (binary,) = struct.unpack_from("<Q", data, seg_off + 8)
    bad = tmp_path / "bad.dll"
    bad.write_bytes(data[:seg_off + 8] + struct.pack("<Q", binary + 0x20000) + data[seg_off + 16:])
    with pytest.raises(FormatError, match=r"\.hip_fat: wrapper record 0 .*points outside"):
        scan(bad)


# -- 3. static archives -------------------------------------------------------------------------


def test_archive_members_list_apart(tmp_path: Path) -> None:
    """ar19: each member's images under its name, at the member's offsets plus what the member
    alone gives, containers numbered across the archive."""
    archive = build("ar19")
    proc = run_llvm(19, "llvm-ar", "x", archive, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    codes = scan(archive)
    data = archive.read_bytes()
    assert [c.member for c in codes] == ["kernels.o"] * 3 + ["second.o"] * 3
    assert [c.container for c in codes] == [0, 0, 0, 1, 1, 1]
    for member in ("kernels.o", "second.o"):
        alone = scan(tmp_path / member)
        mine = [c for c in codes if c.member == member]
        start = data.find((tmp_path / member).read_bytes())
        assert [(c.target, c.offset - start) for c in mine] == [
            (c.target, c.offset) for c in alone]


def test_rdc_archive_as_the_bundler_unbundles(tmp_path: Path) -> None:
    """ar19rdc: the bitcode images fatbinkit lists per member are what
    `clang-offload-bundler --type=a` unbundles per member, byte for byte."""
    archive = build("ar19rdc")
    codes = scan(archive, all=True)
    assert {(c.member, c.target) for c in codes} == {
        (m, t) for m in ("kernels.o", "second.o") for t in TARGETS}
    for target in TARGETS:
        out = tmp_path / f"{target.replace(':', '_')}.a"
        proc = run_llvm(19, "clang-offload-bundler", "--unbundle", "--type=a",
                        f"--input={archive}", f"--targets={HIPV4}{target}", f"--output={out}")
        assert proc.returncode == 0, proc.stderr
        work = tmp_path / out.stem
        work.mkdir()
        assert run_llvm(19, "llvm-ar", "x", out, cwd=work).returncode == 0
        for c in codes:
            if c.target != target:
                continue
            stem = c.member.removesuffix(".o")
            name = f"{stem}-hip-amdgcn-amd-amdhsa--{target.replace(':', '_')}{stem}.bc"
            assert bytes(c.view) == (work / name).read_bytes()


# -- 4. AOTInductor-style blobs -----------------------------------------------------------------


def _aoti_object(blob: Path, kernel: str, tmp_path: Path) -> Path:
    """torch's ``convert_cubin_to_obj``: ``ld -r -b binary``, `.data` renamed `.rodata`, the
    ``_binary_*`` symbols renamed ``__<kernel>_start/_end/_size``."""
    if shutil.which("ld") is None or shutil.which("objcopy") is None:
        pytest.skip("GNU ld/objcopy not installed")
    local = tmp_path / f"{kernel}.hsaco"
    shutil.copyfile(blob, local)
    obj = tmp_path / f"{kernel}.o"
    subprocess.run(["ld", "-r", "-b", "binary", "-z", "noexecstack", "-o", obj, local.name],
                   check=True, cwd=tmp_path)
    sym = f"_binary_{kernel}_hsaco"
    subprocess.run(["objcopy", "--rename-section",
                    ".data=.rodata,alloc,load,readonly,data,contents",
                    f"--redefine-sym={sym}_start=__{kernel}_start",
                    f"--redefine-sym={sym}_end=__{kernel}_end",
                    f"--redefine-sym={sym}_size=__{kernel}_size", obj], check=True)
    return obj


def test_aoti_blobs(tmp_path: Path) -> None:
    """A bundle and a bare code object embedded as AOTInductor embeds a `.hsaco`: both list
    under their start symbol, at `.rodata`'s offset plus the image's place in the blob."""
    bundle = build("bundle19")
    want = {t: unbundle(bundle, t, tmp_path) for t in TARGETS}
    bare = tmp_path / "bare.co"
    bare.write_bytes(want["gfx942"])
    for blob, kernel in ((bundle, "kbundle"), (bare, "kbare")):
        obj = _aoti_object(blob, kernel, tmp_path)
        with obj.open("rb") as f:
            rodata, size, _ = section_of(ELFFile(f), ".rodata")
        assert size == blob.stat().st_size
        data = obj.read_bytes()
        codes = scan(obj)
        assert {c.source for c in codes} == {f"__{kernel}_start"}
        targets = list(TARGETS) if blob is bundle else ["gfx942"]
        assert sorted(c.target for c in codes) == sorted(targets)
        for c in codes:
            assert data[c.offset:c.offset + c.stored] == want[c.target]
        if blob is bare:
            assert [(c.offset, c.container) for c in codes] == [(rodata, -1)]


# -- 5. bare files ------------------------------------------------------------------------------


def test_bare_files(tmp_path: Path) -> None:
    """A `.hsaco` that is a bundle, a `.co` that is a CCOB (obj19z's `.hip_fatbin`) and a bare
    code object list as one module (the code object: no container) at their own offsets."""
    bundle = build("bundle19")
    hsaco = tmp_path / "k.hsaco"
    shutil.copyfile(bundle, hsaco)
    data = hsaco.read_bytes()
    want = {t: unbundle(bundle, t, tmp_path) for t in TARGETS}
    codes = scan(hsaco)
    assert sorted(c.target for c in codes) == sorted(TARGETS)
    assert all(c.source == "" and c.container == 0 for c in codes)
    assert all(data[c.offset:c.offset + c.stored] == want[c.target] for c in codes)

    with build("obj19z").open("rb") as f:
        fat = ELFFile(f).get_section_by_name(".hip_fatbin")
        assert fat is not None
        ccob = fat.data()
    co = tmp_path / "k.co"
    co.write_bytes(ccob.rstrip(b"\0"))
    assert co.read_bytes()[:4] == b"CCOB"
    zipped = {t: unbundle(co, t, tmp_path) for t in TARGETS}
    codes = scan(co)
    assert sorted(c.target for c in codes) == sorted(TARGETS)
    for c in codes:
        assert (c.source, c.container, c.offset, c.compression) == ("", 0, 0, "zstd")
        assert c.data() == zipped[c.target]

    bare = tmp_path / "k942.hsaco"
    bare.write_bytes(want["gfx942"])
    (code,) = scan(bare)
    assert (code.source, code.container, code.offset, code.target, code.stored) == (
        "", -1, 0, "gfx942", len(want["gfx942"]))
