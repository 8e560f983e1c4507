"""The deep scan (``scan(path, everywhere=True)``, issue 31) against cuobjdump.

What a library keeps outside ``.nv_fatbin`` (fatbin containers in ``.data``/``.ldata``/
``.cask_resource``, raw zstd frames of cubins), handed to cuobjdump as bytes alone:

- real libraries (cuRAND 13 for Linux and Windows, cuFFT 10.9 for CUDA 11, cuFFT 12.0, cuBLASLt
  13.1.1.3): every hidden container's stored bytes written back to back into one ``.fatbin``;
  ``cuobjdump -lelf -lptx`` lists the SASS and PTX the deep scan found, ``-res-usage`` every
  image (LTO-IR as ``Fatbin nvvm code``) and each cubin's functions and figures as fatbinkit
  reads them. cuFFT 10.9 carries sm_35 cubins, which cuobjdump 13 refuses: its oracle is
  cuobjdump 11.8 (Debian's package, as in tests/test_old_eras.py);
- cuBLASLt's raw zstd cubins: each frame inflates to its recorded size and ends where the scan
  says (python-zstandard), and each cubin alone goes to cuobjdump; the ones it refuses are
  exactly those whose SHT_RELA section does not link to a symbol table (pyelftools);
- host-only binaries (the interpreter, libc, zstandard's and lz4's extension modules, every ELF
  of pyelftools' test files): nothing hidden, and no error that the plain scan does not raise;
- a host library built with gcc holding valid and broken device code in ``.data``: only the
  valid ones, at the offsets of their symbols (readelf).

Per-library figures: docs/hidden-figures.md.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import zstandard
from cudabuild import CUOBJDUMP, NVCC, _parse_res_usage, need, run
from elftools.elf.elffile import ELFFile
from fatbin_kernels import SOURCE, cuobjdump_list
from thirdparty import (
    CACHE,
    CUBLASLT131,
    CUDA_TOOLKIT_118,
    CUFFT11,
    CUFFT12,
    CURAND13,
    CURAND13_WIN,
    WheelMember,
    debian_tool,
    fetch,
)

from fatbinkit.device_code import DeviceCode
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.cubin import Cubin, CubinFunction
from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry
from fatbinkit.scan import scan

FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SHT_SYMTAB, SHT_RELA = 2, 4
EM_CUDA = struct.pack("<H", 190)
# (library, whose cuobjdump is the oracle: "13" the pip wheel's 13.5, "11.8" Debian's)
LIBRARIES = {"curand": (CURAND13, "13"), "curand-win": (CURAND13_WIN, "13"),
             "cufft11": (CUFFT11, "11.8"), "cufft12": (CUFFT12, "13"),
             "cublaslt": (CUBLASLT131, "13")}
# cuobjdump's words for DeviceCode.kind in -res-usage's block titles
_BLOCK = {"sass": "elf", "ptx": "ptx", "ltoir": "nvvm"}
_BLOCK_RE = re.compile(r"^Fatbin (elf|ptx|nvvm) code:$", re.M)
_LISTED_RE = re.compile(r"^(ELF|PTX) file +\d+: .*\.(sm_\d+[a-z]?)\.(?:cubin|ptx)$")


@cache
def _hidden(member: WheelMember) -> tuple[Path, tuple[DeviceCode, ...]]:
    """The library's file and what the deep scan finds outside cuobjdump's view, read once."""
    path = fetch(member)
    return path, tuple(c for c in scan(path, everywhere=True) if c.hidden)


@pytest.fixture(scope="module", autouse=True)
def _forget_scans() -> Iterator[None]:
    yield
    _hidden.cache_clear()


def _tool(which: str) -> Path:
    return need(CUOBJDUMP) if which == "13" else debian_tool(CUDA_TOOLKIT_118, "cuobjdump")


def _is_raw(data: bytes | mmap.mmap, code: DeviceCode) -> bool:
    """A find that is a zstd frame of its own (its offset is the frame's start), not an entry."""
    return bytes(data[code.offset : code.offset + 4]) == ZSTD_MAGIC


def _function_fields(fn: CubinFunction) -> dict[str, int]:
    """A function's figures under ``cuobjdump -res-usage``'s names (as tests/test_cubin.py)."""
    return {"REG": fn.registers, "STACK": fn.stack, "SHARED": fn.shared, "LOCAL": fn.local,
            **{f"CONSTANT[{b}]": size for b, size in fn.constant.items()},
            "TEXTURE": fn.texture, "SURFACE": fn.surface, "SAMPLER": fn.sampler}


def _common_fields(cubin: Cubin) -> dict[str, int]:
    return {"GLOBAL": cubin.global_size,
            **{f"CONSTANT[{b}]": size for b, size in cubin.constant.items()}}


@dataclass(frozen=True)
class Library:
    """A library's hidden containers as one fatbin file, and cuobjdump's two reports of it."""

    name: str
    codes: tuple[DeviceCode, ...]  # the hidden images inside containers, in scan order
    listing: list[str]  # cuobjdump -lelf -lptx lines
    usage: list[tuple[str, str, str]]  # cuobjdump -res-usage: (block kind, arch, block text)


@pytest.fixture(scope="module", params=sorted(LIBRARIES))
def library(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Library]:
    member, which = LIBRARIES[request.param]
    tool = _tool(which)
    path, found = _hidden(member)
    fatbin = tmp_path_factory.mktemp("hidden") / f"{request.param}.fatbin"
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data, \
            fatbin.open("wb") as out:
        codes = tuple(c for c in found if not _is_raw(data, c))
        # A container starts 16 bytes (its header) before its first entry and says its size.
        starts: dict[int, int] = {}
        for c in codes:
            starts[c.container] = min(starts.get(c.container, c.offset), c.offset)
        for container in sorted(starts):
            at = starts[container] - 16
            magic, _, header, payload = struct.unpack_from("<4sHHQ", data, at)
            assert magic == FATBIN_MAGIC and header == 16, (request.param, hex(at))
            out.write(data[at : at + header + payload])
            out.write(bytes(-out.tell() % 8))
    with ThreadPoolExecutor(2) as pool:  # the two reports at once
        listed = pool.submit(cuobjdump_list, fatbin, tool=tool)
        report = pool.submit(run, [tool, "-res-usage", fatbin])
        listing, text = listed.result(), report.result().stdout
    parts = _BLOCK_RE.split(text)[1:]
    usage = []
    for kind, body in zip(parts[::2], parts[1::2], strict=True):
        arch = re.search(r"^arch = (\S+)$", body, re.M)
        assert arch, body[:200]
        usage.append((kind, arch[1], body))
    yield Library(request.param, codes, listing, usage)
    fatbin.unlink()


def test_listing_equals_cuobjdumps(library: Library) -> None:
    """``cuobjdump -lelf -lptx`` on the hidden containers alone lists the deep scan's SASS and PTX
    images, in order (file names carry the arch without the ``f`` suffix, PTX as ``sm_NN``)."""
    theirs = []
    for line in library.listing:
        m = _LISTED_RE.match(line)
        assert m, line
        theirs.append(("sass" if m[1] == "ELF" else "ptx", m[2]))
    ours = [(c.kind, c.target.removesuffix("f").replace("compute_", "sm_"))
            for c in library.codes if c.kind != "ltoir"]
    assert len(theirs) > 0 and ours == theirs


def test_res_usage_kinds_and_archs_equal_cuobjdumps(library: Library) -> None:
    """``cuobjdump -res-usage`` names every hidden image, LTO-IR included (``Fatbin nvvm code``),
    with its exact arch (``sm_100f``)."""
    theirs = [(kind, arch) for kind, arch, _ in library.usage]
    ours = [(_BLOCK[c.kind], c.target.replace("compute_", "sm_")) for c in library.codes]
    assert len(theirs) == len(library.codes) > 0 and ours == theirs


def test_functions_equal_cuobjdump_res_usage(library: Library) -> None:
    """Every hidden cubin's functions, with REG/STACK/SHARED/LOCAL/CONSTANT/... and the Common
    figures, as ``cuobjdump -res-usage`` prints them (all of them: the slowest, cuFFT 10.9's
    18,909 cubins, takes a few seconds)."""
    cubins = [c for c in library.codes if c.kind == "sass"]
    blocks = [body for kind, _, body in library.usage if kind == "elf"]
    assert len(cubins) == len(blocks) > 0
    functions = 0
    for code, body in zip(cubins, blocks, strict=True):
        usage = _parse_res_usage(body)
        cubin = Cubin.from_bytes(code.data())
        ours = [(f.name, _function_fields(f)) for f in cubin.functions]
        assert ours == usage.functions, (library.name, hex(code.offset))
        assert _common_fields(cubin) == usage.common, (library.name, hex(code.offset))
        functions += len(ours)
    assert functions >= len(cubins)


def _spans(data: mmap.mmap, codes: tuple[DeviceCode, ...]) -> list[tuple[int, int]]:
    """The file ranges ``codes`` occupy: a container's (header and payload), a raw frame's."""
    spans: list[tuple[int, int]] = []
    starts: dict[tuple[str, int], int] = {}
    for c in codes:
        if _is_raw(data, c) or data[c.offset : c.offset + 4] == b"\x7fELF":  # no container
            spans.append((c.offset, c.offset + c.stored))
        else:
            key = (c.source, c.container)
            starts[key] = min(starts.get(key, c.offset), c.offset)
    for at in starts.values():
        assert data[at - 16 : at - 12] == FATBIN_MAGIC, hex(at)
        spans.append((at - 16, at + struct.unpack_from("<Q", data, at - 8)[0]))
    return sorted(spans)


def _hits(data: mmap.mmap, magic: bytes) -> Iterator[int]:
    at = data.find(magic)
    while at >= 0:
        yield at
        at = data.find(magic, at + 1)


def test_every_magic_outside_the_finds_is_no_device_code(library: Library,
                                                         tmp_path: Path) -> None:
    """Completeness, as far as an oracle reaches: every fatbin, zstd and EM_CUDA ELF magic number
    in the file (``bytes.find``, every section, not only those the deep scan reads) lies inside
    a container cuobjdump lists (``scan(all=True)``: ``.nv_fatbin``, ``__nv_relfatbin``) or a
    hidden find, or the bytes there are no device code: cuobjdump lists nothing from a fatbin
    magic, python-zstandard inflates no cubin from a zstd one, cuobjdump refuses an ELF one."""
    member, which = LIBRARIES[library.name]
    path, hidden = _hidden(member)
    loose: dict[str, list[int]] = {}
    covered: dict[str, int] = {}
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        spans = _spans(data, scan(path, all=True) + hidden)
        ends = [start for start, _ in spans]

        def inside(at: int) -> bool:
            i = bisect.bisect_right(ends, at) - 1
            return i >= 0 and at < spans[i][1]

        for name, magic in (("fatbin", FATBIN_MAGIC), ("zstd", ZSTD_MAGIC), ("elf", b"\x7fELF")):
            hits = list(_hits(data, magic))
            loose[name] = [at for at in hits if not inside(at)]
            covered[name] = len(hits) - len(loose[name])
        for at in loose["fatbin"]:
            payload = struct.unpack_from("<Q", data, at + 8)[0]
            blob = tmp_path / f"{at:x}.fatbin"
            blob.write_bytes(data[at : min(at + 16 + payload, len(data))])
            proc = subprocess.run([_tool(which), "-lelf", "-lptx", blob], capture_output=True,
                                  text=True, check=False)  # refused, or nothing listed
            assert proc.returncode != 0 or not re.search(r"^(ELF|PTX) file", proc.stdout,
                                                         re.M), hex(at)
        for at in loose["zstd"]:
            try:
                head = zstandard.ZstdDecompressor().decompressobj().decompress(
                    data[at : at + (1 << 20)])[:20]
            except zstandard.ZstdError:
                continue
            assert head[:4] != b"\x7fELF" or head[18:20] != EM_CUDA, hex(at)
        for at in loose["elf"]:
            if data[at + 18 : at + 20] == EM_CUDA:
                cubin = tmp_path / f"{at:x}.cubin"
                cubin.write_bytes(data[at : min(at + (64 << 20), len(data))])
                proc = subprocess.run([CUOBJDUMP, "-lelf", cubin], capture_output=True,
                                      text=True, check=False)
                assert proc.returncode != 0, hex(at)
    assert covered["fatbin"] >= len({c.container for c in library.codes}) > 0


def _rela_links_not_a_symtab(image: bytes) -> bool:
    """Whether a SHT_RELA section of the cubin ``image`` links to a section that is not a symbol
    table, read with ``struct`` from its section headers (ELF64: ``sh_type`` at +4, ``sh_link`` at
    +40): what the 92 cubins cuobjdump refuses have (``.rela.debug_frame`` -> ``.nv.info``). The
    SHT_REL ``.rel.debug_frame`` of 99 of the sm_75/80/86 ones links there too, and cuobjdump
    reads those. (pyelftools says the same, in 4 s instead of 0.1 s.)"""
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    size, count = struct.unpack_from("<HH", image, 0x3A)
    headers = [struct.unpack_from("<4xI32xI", image, shoff + i * size) for i in range(count)]
    return any(kind == SHT_RELA and headers[link][0] != SHT_SYMTAB for kind, link in headers)


def test_raw_zstd_cubins_against_zstandard_and_cuobjdump(tmp_path: Path) -> None:
    """cuBLASLt's 393 raw zstd frames (.ldata, .data): each inflates (python-zstandard) to the
    size its frame records, ends exactly where the scan says, and is a cubin; cuobjdump reads
    each alone (``-res-usage``: its functions as fatbinkit's; ``-lelf`` on every 8th: its arch)
    except 92 sm_90 ABI v7 ones (e_flags 0x5a055a, like the 2 it reads): exactly those whose
    ``.rela.debug_frame`` (SHT_RELA) links to ``.nv.info``, not to the symbol table. fatbinkit
    parses those too."""
    path, found = _hidden(CUBLASLT131)
    refused, flagged, read = [], [], 0
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        raw = [c for c in found if _is_raw(data, c)]
        assert {c.source for c in raw} == {".ldata", ".data"}
        for i, c in enumerate(raw):
            stored = bytes(c.view)
            assert stored == data[c.offset : c.offset + c.stored]
            inflate = zstandard.ZstdDecompressor().decompressobj()
            image = inflate.decompress(stored)
            assert inflate.eof and not inflate.unused_data, hex(c.offset)  # the frame ends there
            assert len(image) == zstandard.get_frame_parameters(stored).content_size
            assert len(image) == c.uncompressed and c.data() == image
            if _rela_links_not_a_symtab(image):
                flagged.append(c.offset)
            cubin = tmp_path / f"{c.offset:x}.cubin"
            cubin.write_bytes(image)
            usage = subprocess.run([CUOBJDUMP, "-res-usage", cubin], capture_output=True,
                                   text=True, check=False)
            parsed = Cubin.from_bytes(image)
            if usage.returncode != 0:
                assert "does not contain device code" in usage.stderr
                lelf = subprocess.run([CUOBJDUMP, "-lelf", cubin], capture_output=True,
                                      text=True, check=False)
                assert lelf.returncode != 0 and "does not contain device code" in lelf.stderr
                with cubin.open("rb") as elf:
                    header = ELFFile(elf).header
                    assert (c.target, header["e_ident"]["EI_ABIVERSION"],
                            header["e_flags"]) == ("sm_90", 7, 0x5A055A)
                assert parsed.arch.sm == "sm_90" and parsed.functions
                refused.append(c.offset)
            else:
                theirs = _parse_res_usage(usage.stdout)
                assert [(f.name, _function_fields(f)) for f in parsed.functions] == \
                    theirs.functions
                assert _common_fields(parsed) == theirs.common
                if i % 8 == 0:
                    lelf = run([CUOBJDUMP, "-lelf", cubin])
                    assert lelf.stdout.strip() == f"ELF file    1: {cubin.stem}.{c.target}.cubin"
                read += 1
            cubin.unlink()
    assert refused == flagged and len(refused) == 92 and read == len(raw) - 92 > 290


# -- nothing where there is nothing -----------------------------------------------------------

def _no_hidden(path: Path) -> None:
    """The deep scan finds nothing hidden in ``path`` and raises what the plain scan raises."""
    def attempt(everywhere: bool) -> tuple[list[DeviceCode], str | None]:
        try:
            return list(scan(path, everywhere=everywhere)), None
        except Exception as e:  # the error is what is compared
            return [], f"{type(e).__name__}: {e}"

    plain, plain_error = attempt(False)
    deep, deep_error = attempt(True)
    assert [c for c in deep if c.hidden] == [], path
    assert deep_error == plain_error, path
    assert deep == plain, path


def test_nothing_hidden_in_host_binaries() -> None:
    """The interpreter, libc and the compression modules (which hold zstd and LZ4 magic numbers
    and tables) hold no device code."""
    import lz4
    import zstandard as zstd

    libc = run(["gcc", "-print-file-name=libc.so.6"]).stdout.strip()
    modules = [p for m in (zstd, lz4) for p in sorted(Path(str(m.__file__)).parent.rglob("*.so"))]
    files = [Path(os.path.realpath(sys.executable)), Path(os.path.realpath(libc)), *modules]
    assert any(ZSTD_MAGIC in p.read_bytes() for p in modules)
    assert any(b"\x04\x22\x4d\x18" in p.read_bytes() for p in modules)  # an LZ4 frame's magic
    for path in files:
        _no_hidden(path)


def _sdist(package: str, version: str) -> Path:
    """The cached source distribution of ``package`` (pip download, on first use)."""
    folder = CACHE / "sdists"
    found = sorted(folder.glob(f"{package}-{version}.tar.gz"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               "--no-binary", ":all:", "-d", str(folder),
                               f"{package}=={version}"], capture_output=True, text=True,
                              check=False)
        found = sorted(folder.glob(f"{package}-{version}.tar.gz"))
        if proc.returncode != 0 or not found:
            pytest.fail(f"could not download {package}=={version}: {proc.stderr[-2000:]}")
    return found[0]


def test_nothing_hidden_in_pyelftools_test_files(tmp_path: Path) -> None:
    """Every ELF file of pyelftools' own tests (the installed version's sdist): 32-bit and
    big-endian ones, cores, objects, corrupt headers. Unsupported or broken ones raise the same
    error with and without the deep scan."""
    import elftools

    sdist = _sdist("pyelftools", elftools.__version__)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers()
                   if m.isfile() and "/test/testfiles_for_unittests/" in m.name]
        tar.extractall(tmp_path, members=members, filter="data")
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file()
                   and p.read_bytes()[:4] == b"\x7fELF")
    assert len(files) >= 60  # 63 in pyelftools 0.33
    for path in files:
        _no_hidden(path)


# -- a host library with valid and broken device code in .data --------------------------------

def _c_array(name: str, data: bytes | bytearray, const: bool = False) -> str:
    body = ",".join(str(b) for b in data)
    return (f"__attribute__((aligned(64), used)) {'const ' if const else ''}unsigned char "
            f"{name}[{len(data)}] = {{{body}}};\n")


def _symbol_offsets(path: Path) -> dict[str, tuple[str, int]]:
    """``name -> (section, file offset)`` of every ``hid_*`` object symbol (``readelf -SW -sW``)."""
    sections: dict[str, tuple[str, int, int]] = {}
    for m in re.finditer(r"^\s*\[\s*(\d+)\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s",
                         run(["readelf", "-SW", path]).stdout, re.M):
        sections[m[1]] = (m[2], int(m[3], 16), int(m[4], 16))
    out: dict[str, tuple[str, int]] = {}
    for m in re.finditer(r"^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+OBJECT\s+\S+\s+\S+\s+(\d+)\s+(hid_\w+)$",
                         run(["readelf", "-sW", path]).stdout, re.M):
        name, addr, offset = sections[m[2]]
        out[m[3]] = (name, int(m[1], 16) - addr + offset)
    return out


def test_synthetic_host_library_only_valid_code_is_found(tmp_path: Path) -> None:
    """gcc builds a library whose ``.data`` holds, each in its own array: a fatbin container (two
    LZ4 cubins and PTX, fatbinkit.formats.fatbin.build_fatbin), a copy cut inside its first
    entry (then 0xff bytes), a copy whose first entry has kind 3, a zstd frame of random bytes, a
    zstd frame of an nvcc cubin, a bare cubin, a cubin header whose section table lies past the
    end; ``.rodata`` a second copy of the container. Found: the container (its listing is
    cuobjdump's), the zstd frame of the cubin, the bare cubin and the .rodata copy, at their
    symbols' file offsets; nothing else."""
    nvcc = need(NVCC)
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    sm80, sm90, ptx = tmp_path / "k80.cubin", tmp_path / "k90.cubin", tmp_path / "k90.ptx"
    run([nvcc, "-cubin", "-arch=sm_80", "-o", sm80, src])
    run([nvcc, "-cubin", "-arch=sm_90", "-o", sm90, src])
    run([nvcc, "-ptx", "-arch=compute_90", "-o", ptx, src])
    cubin80, cubin90 = sm80.read_bytes(), sm90.read_bytes()
    container = build_fatbin([
        make_entry(EntryKind.ELF, Arch(80), cubin80, compression="lz4"),
        make_entry(EntryKind.ELF, Arch(90), cubin90, compression="lz4"),
        make_entry(EntryKind.PTX, Arch(90), ptx.read_bytes(), compression="lz4")])
    fatbin = tmp_path / "valid.fatbin"
    fatbin.write_bytes(container)
    listed = [(("sass" if line.startswith("ELF") else "ptx"), m[2])
              for line in cuobjdump_list(fatbin) if (m := _LISTED_RE.match(line))]
    assert listed == [("sass", "sm_80"), ("sass", "sm_90"), ("ptx", "sm_90")]
    # the first entry's header: kind u16, version u16, header size u32, payload size u64
    entry_header_size, entry_size = struct.unpack_from("<IQ", container, 16 + 4)
    cut = 16 + entry_header_size + entry_size // 2
    bad_kind = bytearray(container)
    struct.pack_into("<H", bad_kind, 16, 3)
    bad_elf = bytearray(cubin80[:64])
    struct.pack_into("<Q", bad_elf, 0x28, 1 << 40)  # e_shoff: far past the end
    noise = zstandard.ZstdCompressor().compress(
        bytes((i * 2654435761 >> 13) & 0xFF for i in range(4096)))
    frame = zstandard.ZstdCompressor(level=19).compress(cubin90)
    assert zstandard.get_frame_parameters(frame).content_size == len(cubin90)
    code = "".join([
        _c_array("hid_valid", container), _c_array("hid_truncated", container[:cut]),
        _c_array("hid_guard", b"\xff" * len(container)), _c_array("hid_bad_kind", bad_kind),
        _c_array("hid_noise", noise), _c_array("hid_zstd_cubin", frame),
        _c_array("hid_bare", cubin80), _c_array("hid_bad_elf", bytes(bad_elf) + b"\1" * 64),
        _c_array("hid_readonly", container, const=True)])
    (tmp_path / "host.c").write_text(code)
    lib = tmp_path / "libhost.so"
    run(["gcc", "-shared", "-fPIC", "-fno-toplevel-reorder", "-o", lib, tmp_path / "host.c"])
    symbols = _symbol_offsets(lib)
    assert symbols["hid_valid"][0] == ".data" and symbols["hid_readonly"][0] == ".rodata"
    assert scan(lib) == ()  # no .nv_fatbin: the plain scan sees nothing
    found = scan(lib, everywhere=True)
    assert all(c.hidden for c in found)
    modules: dict[int, list[DeviceCode]] = {}
    for c in found:
        modules.setdefault(c.container, []).append(c)
    got = {}
    for codes in modules.values():
        start = min(c.offset for c in codes)
        if len(codes) == 3:  # a container: its entries start after its 16-byte header
            start -= 16
        got[start] = (codes[0].source, [(c.kind, c.target) for c in codes], codes)
    want = {symbols[n][1]: n for n in ("hid_valid", "hid_zstd_cubin", "hid_bare", "hid_readonly")}
    assert sorted(got) == sorted(want), {hex(k): v[:2] for k, v in got.items()}
    entries = [("sass", "sm_80"), ("sass", "sm_90"), ("ptx", "compute_90")]
    for start, name in want.items():
        source, kinds, codes = got[start]
        assert source == symbols[name][0]
        if name in ("hid_valid", "hid_readonly"):
            assert kinds == entries and [c.data() for c in codes[:2]] == [cubin80, cubin90]
        elif name == "hid_zstd_cubin":
            assert kinds == [("sass", "sm_90")] and codes[0].compression == "zstd"
            assert codes[0].stored == len(frame) and codes[0].data() == cubin90
        else:
            assert kinds == [("sass", "sm_80")] and codes[0].data() == cubin80
