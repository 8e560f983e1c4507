"""Fatbins inside Windows PE files (DLL, .pyd) read as cuobjdump reads them.

Linux cuobjdump does not read PE files ("does not contain device code"). The oracle therefore
takes the ``.nv_fatb`` section out with an independent PE parser (``pefile``, from PyPI), writes
it to a file named after the PE file's stem (so that cuobjdump names the images as it would name
them from the DLL), and runs cuobjdump on that: the listing, the extracted bytes and the
``-res-usage`` figures must equal fatbinkit's on the PE file itself. The binaries are the real
Windows builds from the registry: CuPy's ``_generator_api`` extension for CUDA 12 and 13 and
NVIDIA's cuRAND DLL for CUDA 13 (Authenticode-signed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pefile
import pytest
from cudabuild import res_usage_blocks
from fatbin_kernels import cuobjdump, cuobjdump_extract, cuobjdump_list
from test_coff import tool
from thirdparty import (
    CACHE,
    CUPY12_RANDOM_WIN,
    CUPY13_RANDOM_WIN,
    CURAND13_WIN,
    WheelMember,
    fetch,
)

from fatbinkit.errors import FormatError, TruncatedError
from fatbinkit.formats import pe
from fatbinkit.scan import scan

REAL = {"cupy12": CUPY12_RANDOM_WIN, "cupy13": CUPY13_RANDOM_WIN, "curand13": CURAND13_WIN}


def fatbinkit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


FATBIN_MAGIC = 0xBA55ED50


def section(image: pefile.PE, name: bytes) -> pefile.SectionStructure:
    (found,) = [s for s in image.sections if s.Name.rstrip(b"\0") == name]
    return found


def walk(path: Path, name: bytes = b".nv_fatb") -> tuple[list[tuple[int, bytes]], bytes]:
    """``(RVA, bytes)`` of every container in the file's section ``name`` as pefile reads
    it, walked from its start (a container where the magic is, zeros skipped 8 bytes at a time,
    anything else fails the test), and the section's bytes up to the last container's end (its
    virtual size, the raw data's file-alignment padding left out; a pruned section, which keeps
    its virtual size, ends in zero fill after the last container)."""
    image = pefile.PE(str(path), fast_load=True)
    sec = section(image, name)
    data = sec.get_data()[: sec.Misc_VirtualSize or sec.SizeOfRawData]  # 0: the raw size
    out, at, end = [], 0, 0
    while at < len(data):
        if int.from_bytes(data[at : at + 4], "little") == FATBIN_MAGIC:
            size = (int.from_bytes(data[at + 6 : at + 8], "little")
                    + int.from_bytes(data[at + 8 : at + 16], "little"))  # fmt: skip
            assert at + size <= len(data), f"container at {at:#x} runs past the section"
            out.append((sec.VirtualAddress + at, data[at : at + size]))
            end = at + size
            at += (size + 7) & -8
        else:
            assert data[at : at + 8].strip(b"\0") == b"", f"not a container at {at:#x}"
            at += 8
    return out, data[:end]


def dumped(path: Path, folder: Path, names: tuple[bytes, ...] = (b".nv_fatb",)) -> Path:
    """The containers of the sections ``names`` (:func:`walk`), taken out by pefile, one after
    another in ``folder/<stem>.fatbin``: named so that cuobjdump names the images as from the
    DLL, and numbers them across the sections as it numbers an ELF file's with ``-all``."""
    parts = [walk(path, name)[1] for name in names]
    assert all(len(p) % 8 == 0 for p in parts[:-1])  # the next section's containers aligned
    data = b"".join(parts)
    assert data
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{path.stem}.fatbin"
    out.write_bytes(data)
    return out


@pytest.fixture(scope="module", params=sorted(REAL))
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         ) -> tuple[Path, Path]:
    """(the PE file, its .nv_fatb section dumped by pefile)."""
    member: WheelMember = REAL[request.param]
    path = fetch(member)
    return path, dumped(path, tmp_path_factory.mktemp(request.param))


def test_linux_cuobjdump_sees_nothing_in_a_pe_file() -> None:
    """Why a PE reader is needed at all (the issue's starting point)."""
    proc = subprocess.run([*_cuobjdump(), "-lelf", "-lptx", str(fetch(CUPY13_RANDOM_WIN))],
                          capture_output=True, text=True, check=False)
    assert "does not contain device code" in proc.stderr


def _cuobjdump() -> list[str]:
    from fatbinkit.toolchain import find_tool

    return [str(find_tool("cuobjdump"))]


def test_listing_equals_cuobjdump_on_the_section(real: tuple[Path, Path]) -> None:
    path, section = real
    proc = fatbinkit("ls", path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == cuobjdump_list(section)
    assert len(proc.stdout.splitlines()) >= 8


def test_extracted_bytes_equal_cuobjdump(real: tuple[Path, Path], tmp_path: Path) -> None:
    path, section = real
    proc = fatbinkit("extract", path, "-o", tmp_path / "ours")
    assert proc.returncode == 0, proc.stderr
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    assert ours == cuobjdump_extract(section, tmp_path / "theirs")


def test_resources_equal_cuobjdump(real: tuple[Path, Path]) -> None:
    path, section = real
    proc = fatbinkit("ls", path, "--resources", "--json")
    assert proc.returncode == 0, proc.stderr
    elves = [e for e in json.loads(proc.stdout)["entries"] if e["kind"] == "sass"]
    oracle = res_usage_blocks(section)
    assert len(elves) == len(oracle) > 0
    for entry, (arch, usage) in zip(elves, oracle, strict=True):
        assert entry["arch"].rstrip("f") == arch.rstrip("f")
        assert [f["name"] for f in entry["functions"]] == [n for n, _ in usage.functions]
        assert [f["registers"] for f in entry["functions"]] == [
            fields["REG"] for _, fields in usage.functions]


def test_sections_equal_pefile(real: tuple[Path, Path]) -> None:
    """fatbinkit's own PE reader against pefile: every section's name, addresses and sizes."""
    path, _ = real
    data = path.read_bytes()
    ours = pe.read(data)
    theirs = pefile.PE(str(path), fast_load=True)
    assert ours.optional is not None
    assert ours.optional.image_base == theirs.OPTIONAL_HEADER.ImageBase
    assert ours.optional.checksum == theirs.OPTIONAL_HEADER.CheckSum
    assert [d for d in ours.optional.directories] == [
        (d.VirtualAddress, d.Size) for d in theirs.OPTIONAL_HEADER.DATA_DIRECTORY]
    assert [(s.name, s.header.virtual_address, s.header.virtual_size,
             s.header.pointer_to_raw_data, s.header.size_of_raw_data) for s in ours.sections] == [
        (s.Name.rstrip(b"\0").decode(), s.VirtualAddress, s.Misc_VirtualSize,
         s.PointerToRawData, s.SizeOfRawData) for s in theirs.sections]


def test_check_a_windows_library(real: tuple[Path, Path]) -> None:
    """check and --min-driver read the DLL as they read a .so (the decisions are
    fatbinkit.compat's, tested on the GPU): CuPy 12 and 13 and cuRAND 13 hold sm_80 SASS."""
    path, _ = real
    proc = fatbinkit("check", path, "--arch", "sm_80", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdicts"]["sm_80"]["status"] == "works"
    assert all(m["section"] == ".nv_fatb" for m in doc["modules"])


def test_windows_wheel_lists_each_extension(tmp_path: Path) -> None:
    """CuPy 13's Windows wheel: the .pyd files with device code, each listed as cuobjdump lists
    its dumped section."""
    fetch(CUPY13_RANDOM_WIN)
    wheel = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*win_amd64.whl"))
    proc = fatbinkit("ls", wheel, "--json")
    assert proc.returncode == 0, proc.stderr
    files = {f["file"]: f["entries"] for f in json.loads(proc.stdout)["files"]}
    assert "cupy/random/_generator_api.cp311-win_amd64.pyd" in files and len(files) >= 3
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        for name, entries in files.items():
            z.extract(name, tmp_path)
            section = dumped(tmp_path / name, tmp_path)
            assert [f"{'ELF' if e['kind'] == 'sass' else 'PTX'} file {e['number']:4d}: "
                    f"{e['name']}" for e in entries] == cuobjdump_list(section), name


# -- malformed PE files: one clear error each, never a crash -----------------------------------

@pytest.fixture(scope="module")
def small() -> bytes:
    return fetch(CUPY13_RANDOM_WIN).read_bytes()


def _lfanew(data: bytes) -> int:
    return int.from_bytes(data[0x3C:0x40], "little")


def test_truncated_and_malformed_pe(small: bytes, tmp_path: Path) -> None:
    image = pe.read(small)
    fat = next(image.find(".nv_fatb"))
    table = image.header_offset + 20 + image.file.size_of_optional_header
    cases = {
        # cut inside the section table
        "table": (small[: table + 40 * 2 + 7], TruncatedError, "section table"),
        # cut inside the fatbin section's data
        "data": (small[: fat.offset + fat.size // 2], TruncatedError, "section .nv_fatb"),
        # e_lfanew points past the end: not a PE at all
        "lfanew": (small[:0x3C] + (len(small) + 8).to_bytes(4, "little") + small[0x40:],
                   FormatError, "not a fatbin, cubin, PTX, ELF or PE file"),
        # more sections than the format numbers
        "count": (small[: image.header_offset + 2] + (0xFFFF).to_bytes(2, "little")
                  + small[image.header_offset + 4:], FormatError, "65535 sections"),
        # a section table of 4000: the table runs into the sections' data, which runs past
        # the end (names with control characters shown as "?")
        "table4000": (small[: image.header_offset + 2] + (4000).to_bytes(2, "little")
                      + small[image.header_offset + 4:], TruncatedError, "runs past the end"),
        # a bad optional header magic
        "magic": (small[: image.header_offset + 20] + b"\x07\x01"
                  + small[image.header_offset + 22:], FormatError, "optional header magic"),
    }
    for name, (data, error, message) in cases.items():
        path = tmp_path / f"{name}.pyd"
        path.write_bytes(data)
        with pytest.raises(error, match=message):
            scan(path)
        proc = fatbinkit("ls", path)
        assert proc.returncode == 3 and proc.stderr.startswith(f"fatbinkit: error: {path}: ")
        assert "Traceback" not in proc.stderr, name
    assert _lfanew(small) < 0x200


# -- prune and recompress PE files: independent readers check the result ------------------------

def _readobj_clean(path: Path, original: Path) -> None:
    """llvm-readobj reads the headers and sections with no warning, pefile has nothing to say
    that it did not say of the original (it finds fault with some unwind data of both), and
    every section's raw data lies inside the file."""
    proc = subprocess.run([tool("llvm-readobj"), "--file-headers", "--sections", str(path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "warning" not in (proc.stdout + proc.stderr).lower()
    def warnings(p: Path) -> set[str]:  # pefile's guess at truncation from the zeros aside
        return {w for w in pefile.PE(str(p)).get_warnings() if not w.startswith("Byte 0x00")}

    assert warnings(path) <= warnings(original)
    image = pefile.PE(str(path))
    size = path.stat().st_size
    assert all(s.PointerToRawData + s.SizeOfRawData <= size for s in image.sections)


def _kept_images_identical(before: Path, after: Path, tmp_path: Path) -> list[str]:
    """The archs (``sm_80.cubin``, ``sm_90.ptx``) of cuobjdump's images of the pruned section,
    each image byte-identical to one of the original's of that arch (both sections dumped by
    pefile; images are numbered anew, so matched by arch and bytes)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()

    def by_arch(files: dict[str, bytes]) -> Counter[tuple[str, bytes]]:
        return Counter((".".join(name.split(".")[-2:]), data) for name, data in files.items())

    old = by_arch(cuobjdump_extract(dumped(before, tmp_path / "a"), tmp_path / "xa"))
    new = by_arch(cuobjdump_extract(dumped(after, tmp_path / "b"), tmp_path / "xb"))
    assert new and not new - old  # every kept image is one of the original's
    return sorted({arch for arch, _ in new})


@pytest.mark.parametrize("which", ["cupy12", "cupy13"])
def test_prune_a_pyd(which: str, tmp_path: Path) -> None:
    src = fetch(REAL[which])
    out = tmp_path / src.name
    proc = fatbinkit("prune", src, "--for", "sm_80", "--ptx", "none", "-o", out, "--json")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size < src.stat().st_size * 0.4  # the file, not only the section
    assert _kept_images_identical(src, out, tmp_path) == ["sm_80.cubin"]
    _readobj_clean(out, src)
    theirs, ours = pefile.PE(str(src)), pefile.PE(str(out))
    assert [(s.Name, s.VirtualAddress, s.Misc_VirtualSize) for s in ours.sections] == [
        (s.Name, s.VirtualAddress, s.Misc_VirtualSize) for s in theirs.sections]  # the image
    assert ours.OPTIONAL_HEADER.SizeOfImage == theirs.OPTIONAL_HEADER.SizeOfImage
    assert [e.name for e in ours.DIRECTORY_ENTRY_EXPORT.symbols] == [
        e.name for e in theirs.DIRECTORY_ENTRY_EXPORT.symbols]


def test_prune_a_signed_dll_strips_its_signature_only_when_asked(tmp_path: Path) -> None:
    """cuRAND's DLL is Authenticode-signed: refused, nothing written; with --strip-signature
    the certificate table is left out, the checksum made anew (pefile's generate_checksum
    agrees), and every kept image is the original's."""
    src = fetch(CURAND13_WIN)
    out = tmp_path / src.name
    proc = fatbinkit("prune", src, "--for", "sm_90", "-o", out)
    assert proc.returncode == 3 and "Authenticode-signed" in proc.stderr and not out.exists()
    proc = fatbinkit("prune", src, "--for", "sm_90", "-o", out, "--strip-signature")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size < src.stat().st_size
    image = pefile.PE(str(out))
    assert image.OPTIONAL_HEADER.DATA_DIRECTORY[4].Size == 0  # no certificate table
    assert image.OPTIONAL_HEADER.CheckSum == image.generate_checksum() != 0
    _readobj_clean(out, src)
    kept = _kept_images_identical(src, out, tmp_path)
    assert "sm_90.cubin" in kept and "sm_80.cubin" not in kept


def test_recompress_same_size_keeps_the_layout(tmp_path: Path) -> None:
    """--same-size: each container rewritten where it was, the file keeps its size and every
    section its place; the images decompress to the same bytes."""
    src = fetch(CUPY12_RANDOM_WIN)  # LZ4 entries
    out = tmp_path / src.name
    proc = fatbinkit("recompress", src, "--codec", "zstd", "--same-size",
                     "--allow-newer-driver", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size == src.stat().st_size
    _readobj_clean(out, src)
    assert [(s.Name, s.PointerToRawData) for s in pefile.PE(str(out)).sections] == [
        (s.Name, s.PointerToRawData) for s in pefile.PE(str(src)).sections]
    assert {c.entry.compression for c in scan(out)} == {"zstd"}  # what was asked
    theirs = cuobjdump_extract(dumped(src, tmp_path / "a"), tmp_path / "xa")
    assert theirs and cuobjdump_extract(dumped(out, tmp_path / "b"), tmp_path / "xb") == theirs


def test_refusals_leave_nothing(tmp_path: Path, small: bytes) -> None:
    """A wrapper record pointing inside the device code but not at a container, and a COFF
    object: one clear refusal each, nothing written."""
    image = pe.read(small)
    wrap = next(image.find(".nvFatBi"))
    bad = bytearray(small)
    at = wrap.offset + 8
    bad[at:at + 8] = (int.from_bytes(bad[at:at + 8], "little") + 16).to_bytes(8, "little")
    path = tmp_path / "bad.pyd"
    path.write_bytes(bytes(bad))
    proc = fatbinkit("prune", path, "--for", "sm_80", "-o", tmp_path / "o.pyd")
    assert proc.returncode == 3 and "not at a container" in proc.stderr
    # a base relocation block whose size runs past its table
    reloc = next(image.find(".reloc"))
    bogus = bytearray(small)
    bogus[reloc.offset + 4:reloc.offset + 8] = (1 << 20).to_bytes(4, "little")
    path.write_bytes(bytes(bogus))
    proc = fatbinkit("prune", path, "--for", "sm_80", "-o", tmp_path / "o.pyd")
    assert proc.returncode == 3 and "base relocation block" in proc.stderr
    assert "Traceback" not in proc.stderr
    from fatbinkit.formats.coff import write_object
    from fatbinkit.formats.elf_writer import Blob

    write_object(tmp_path / "k.obj", [Blob("k", b"x" * 64)], machine="x86_64")
    proc = fatbinkit("prune", tmp_path / "k.obj", "--for", "sm_80", "-o", tmp_path / "o.obj")
    assert proc.returncode == 3 and "COFF object" in proc.stderr
    assert not (tmp_path / "o.pyd").exists() and not (tmp_path / "o.obj").exists()


def test_cuobjdump_oracle_is_sound(real: tuple[Path, Path]) -> None:
    """The dumped section is a fatbin cuobjdump reads in full (so the comparisons above compare
    something): as many images as the .nvFatBi wrapper records point at containers."""
    path, section = real
    assert cuobjdump("-lelf", section)
    image = pefile.PE(str(path), fast_load=True)
    wrappers = b"".join(s.get_data()[: s.Misc_VirtualSize] for s in image.sections
                        if s.Name.rstrip(b"\0") == b".nvFatBi")
    assert len(wrappers) % 24 == 0 and wrappers[:4] == bytes.fromhex("b1436246")
    containers = {c.container for c in scan(path)}
    assert len(containers) == len(wrappers) // 24


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_coff_embedding_objects_are_read(machine: str, tmp_path: Path) -> None:
    """A COFF object fatbinkit writes for Windows (AOTInductor's embedding, issue 15) is read
    back through its __X_start/__X_end symbols: a fatbin blob lists as cuobjdump lists the
    fatbin file (the object named after it: the same image names), a cubin blob is that cubin,
    byte for byte."""
    from fatbinkit.formats.coff import write_object
    from fatbinkit.formats.elf_writer import Blob
    from fatbinkit.formats.fatbin import EntryKind

    fat = dumped(fetch(CUPY13_RANDOM_WIN), tmp_path)
    obj = fat.with_suffix(".obj")
    write_object(obj, [Blob("model", fat)], machine=machine)
    proc = fatbinkit("ls", obj)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == cuobjdump_list(fat)
    assert {c.source for c in scan(obj)} == {"__model_start"}
    cubin = next(c for c in scan(fat) if c.entry.header.kind == EntryKind.ELF).entry.data()
    write_object(obj, [Blob("model", fat), Blob("one", cubin, 128)], machine=machine)
    (one,) = [c for c in scan(obj) if c.source == "__one_start"]
    assert bytes(one.entry.data()) == bytes(cubin) and one.container == -1


def test_prune_a_windows_wheel(tmp_path: Path) -> None:
    """CuPy 13's Windows wheel: its three .pyd with device code pruned, the others copied;
    Info-ZIP finds every CRC right, the wheel package every RECORD hash; each pruned .pyd holds
    only sm_80 SASS, by cuobjdump on its dumped section."""
    from wheel.wheelfile import WheelFile

    from fatbinkit.formats.arch import Arch
    from fatbinkit.slim import prune

    fetch(CUPY13_RANDOM_WIN)
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*win_amd64.whl"))
    report = prune(src, tmp_path / "dist", [Arch(80)], ptx="none")
    out = tmp_path / "dist" / src.name
    assert report.output_size == out.stat().st_size < src.stat().st_size * 0.6
    assert len(report.files) == 3 and all(not isinstance(r, str) for _, r in report.files)
    subprocess.run(["unzip", "-tq", str(out)], check=True)
    with WheelFile(out) as wf:
        for name in wf.namelist():
            wf.read(name)
    import zipfile

    with zipfile.ZipFile(out) as z:
        for name, _ in report.files:
            z.extract(name, tmp_path / "site")
            lines = cuobjdump_list(dumped(tmp_path / "site" / name, tmp_path))
            assert [line.rsplit(".", 2)[-2] for line in lines] == ["sm_80"], name


# -- shrink's bookkeeping on a hand-built image: every file offset followed ---------------------

def _image(fats: list[bytes], virtual_zero: bool) -> bytes:
    """A PE32+ DLL laid out after Microsoft's PE Format specification, with what a rewrite must
    follow: ``.rdata`` holding a debug directory entry whose data lies in ``.dbg``, after
    ``.nv_fatb``; ``.nvFatBi`` wrapper records pointing at the containers; a COFF symbol table
    and string table after the sections; an overlay after that; a non-zero CheckSum."""
    import struct

    fa, sa, base = 0x200, 0x1000, 0x180000000

    def up(n: int, a: int) -> int:
        return -(-n // a) * a

    fat = bytearray()
    starts = []
    for f in fats:
        fat += bytes(up(len(fat), 8) - len(fat))
        starts.append(len(fat))
        fat += f
    payload = b"RSDS" + bytes(range(60))
    names = [(b".rdata", 28), (b".nv_fatb", len(fat)), (b".nvFatBi", 24 * len(fats)),
             (b".dbg", len(payload))]
    headers = up(0x40 + 4 + 20 + 240 + 40 * len(names), fa)
    layout, raw_at, va = [], headers, sa
    for name, size in names:
        layout.append((name, size, va, raw_at, up(size, fa)))
        raw_at += up(size, fa)
        va += up(size, sa)
    rdata, fatsec, _, dbg = layout
    data = {
        b".rdata": struct.pack("<IIHHIIII", 0, 0, 0, 0, 2, len(payload), dbg[2], dbg[3]),
        b".nv_fatb": bytes(fat),
        b".nvFatBi": b"".join(struct.pack("<IiQQ", 0x466243B1, 1, base + fatsec[2] + s, 0)
                              for s in starts),
        b".dbg": payload,
    }
    symbols = struct.pack("<8sIhHBB", b"\0\0\0\0\x04\0\0\0", 0, 1, 0, 2, 0)
    strings = b"__long_symbol_name\0"
    tail = symbols + (4 + len(strings)).to_bytes(4, "little") + strings
    coff = struct.pack("<HHIIIHH", 0x8664, len(names), 0, raw_at, 1, 240, 0x2022)
    dirs = [(0, 0)] * 16
    dirs[6] = (rdata[2], 28)
    opt = struct.pack("<H2B5IQ2I6H4I2H4QII", 0x20B, 14, 0, 0, 0, 0, 0, 0, base, sa, fa,
                      6, 0, 0, 0, 6, 0, 0, va, headers, 0x12345, 2, 0x160,
                      1 << 20, 1 << 12, 1 << 20, 1 << 12, 0, 16)
    opt += b"".join(struct.pack("<II", *d) for d in dirs)
    table = b"".join(struct.pack("<8sIIIIIIHHI", name, 0 if virtual_zero and name == b".nv_fatb"
                                 else size, v, raw, at, 0, 0, 0, 0, 0x40000040)
                     for name, size, v, at, raw in layout)
    out = bytearray((b"MZ".ljust(0x3C, b"\0") + (0x40).to_bytes(4, "little")).ljust(0x40, b"\0")
                    + b"PE\0\0" + coff + opt + table).ljust(headers, b"\0")
    for name, _, _, _, raw in layout:
        out += data[name].ljust(raw, b"\0")
    return bytes(out + tail + b"overlay!" * 16)


@pytest.mark.parametrize("virtual_zero", [False, True])
def test_shrink_follows_every_file_offset(virtual_zero: bool, tmp_path: Path) -> None:
    from cudabuild import NVCC, run

    fats = []
    for i, code in enumerate(("[sm_80,compute_80]", "sm_86")):
        out = tmp_path / f"f{i}.fatbin"
        run([NVCC, "-fatbin", "-gencode", f"arch=compute_80,code={code}", "-gencode",
             "arch=compute_90,code=sm_90", str(Path(__file__).parent / "data" / "axpy.cu"),
             "-o", out])
        fats.append(out.read_bytes())
    src = tmp_path / "lib.dll"
    src.write_bytes(_image(fats, virtual_zero))
    out = tmp_path / "out" / "lib.dll"
    out.parent.mkdir()
    proc = fatbinkit("prune", src, "--for", "sm_80", "--ptx", "none", "-o", out)
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size < src.stat().st_size
    _readobj_clean(out, src)
    old, new = pefile.PE(str(src)), pefile.PE(str(out))

    def mapped(p: pefile.PE) -> list[tuple[bytes, int, int]]:
        return [(s.Name, s.VirtualAddress, s.Misc_VirtualSize or s.SizeOfRawData)
                for s in p.sections]

    assert mapped(new) == mapped(old) and new.OPTIONAL_HEADER.SizeOfImage == \
        old.OPTIONAL_HEADER.SizeOfImage
    (entry,) = new.DIRECTORY_ENTRY_DEBUG
    dbg = section(new, b".dbg")
    assert entry.struct.PointerToRawData == dbg.PointerToRawData < section(old, b".dbg") \
        .PointerToRawData
    assert out.read_bytes()[dbg.PointerToRawData:][:4] == b"RSDS"
    table = old.FILE_HEADER.PointerToSymbolTable
    moved = new.FILE_HEADER.PointerToSymbolTable
    assert moved < table and out.read_bytes()[moved:] == src.read_bytes()[table:]  # + overlay
    assert new.OPTIONAL_HEADER.CheckSum == new.generate_checksum()
    assert _kept_images_identical(src, out, tmp_path) == ["sm_80.cubin"]
    records = section(new, b".nvFatBi").get_data()[:48]
    pointers = [int.from_bytes(records[k + 8:k + 16], "little") for k in (0, 24)]
    rvas = [rva + new.OPTIONAL_HEADER.ImageBase for rva, _ in walk(out)[0]]
    assert pointers == rvas  # each wrapper at its container's new place


def test_hostile_symbol_and_string_tables(small: bytes, tmp_path: Path) -> None:
    """A COFF object whose long section name, or symbol name, points past its string table, and
    one whose string table claims more bytes than the file has: one error each."""
    from fatbinkit.formats.coff import object_bytes
    from fatbinkit.formats.elf_writer import Blob

    obj = bytearray(object_bytes([Blob("a_rather_long_kernel_name", b"x" * 64)],
                                 machine="x86_64"))
    image = pe.read(bytes(obj))
    strings = image.file.pointer_to_symbol_table + 18 * image.file.number_of_symbols
    cases = {}
    bad = bytearray(obj)  # the first symbol's long-name offset past the table
    at = image.file.pointer_to_symbol_table
    bad[at:at + 8] = bytes(4) + (1 << 30).to_bytes(4, "little")
    cases["symbol"] = (bytes(bad), "past the string table")
    bad = bytearray(obj)
    bad[strings:strings + 4] = (1 << 30).to_bytes(4, "little")
    cases["size"] = (bytes(bad), "string table")
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.obj"
        path.write_bytes(data)
        proc = fatbinkit("ls", path)
        assert proc.returncode == 3 and message in proc.stderr, (name, proc.stderr)
        assert "Traceback" not in proc.stderr
