"""Find device code in any input: a fatbin, a cubin, PTX, or a host ELF file (.so, .o, executable).

In a host ELF, device code lives in ``.nv_fatbin`` (what ``cuobjdump`` lists), ``__nv_relfatbin``
(relocatable device code; listed with ``all=True`` as ``cuobjdump -all`` does, or when the file
has no ``.nv_fatbin``, as ``cuobjdump`` also does) and in blobs between ``__<name>_start`` /
``__<name>_end`` symbol pairs (AOTInductor's model.so, fatbinkit's own objects; invisible to
cuobjdump). Files are memory-mapped: listing reads headers only, payloads stay views.

Every image comes back as a :class:`DeviceCode` holding a :class:`~fatbinkit.fatbin.FatbinEntry`;
a bare cubin or PTX file becomes a synthetic entry of kind ELF/PTX with its exact bytes.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .arch import Arch
from .elf import SHT_SYMTAB, FileHeader, SectionHeader, Symbol
from .errors import FormatError, InputError, InvalidArgumentError, TruncatedError, UnsupportedError
from .fatbin import (
    ENTRY_VERSION,
    Buffer,
    EntryFlags,
    EntryHeader,
    EntryKind,
    Fatbin,
    FatbinEntry,
    Reader,
    elf_section,
    is_fatbin,
)

EM_CUDA = 190
FATBIN_SECTION = ".nv_fatbin"
RELFATBIN_SECTION = "__nv_relfatbin"
_PAIR_RE = re.compile(rb"^__(.+)_start$")
_SHN_LORESERVE = 0xFF00
_SHT_NOBITS, _SHT_DYNSYM = 8, 11  # not in fatbinkit.elf (the object writer needs neither)


@dataclass(frozen=True)
class DeviceCode:
    """One image found in an input.

    ``source`` is the ELF section (``.nv_fatbin``, ``__nv_relfatbin``), the start symbol of an
    embedded blob (``__name_start``), or ``""`` for a bare fatbin/cubin/PTX file. ``container`` is
    the index of the fatbin container across the whole input (file order; -1 for a bare
    cubin/PTX), ``offset`` the file offset of the entry header (of the image for bare code).
    """

    source: str
    container: int
    entry: FatbinEntry
    offset: int


def _elf_machine(data: Buffer) -> int | None:
    if len(data) < 20 or bytes(data[:4]) != b"\x7fELF":
        return None
    order = "<" if data[5] == 1 else ">"
    return int(struct.unpack_from(order + "H", data, 18)[0])


def is_cubin(data: Buffer) -> bool:
    """Whether ``data`` is an NVIDIA cubin (ELF with e_machine EM_CUDA)."""
    return _elf_machine(data) == EM_CUDA


def is_ptx(data: Buffer) -> bool:
    """Whether ``data`` looks like PTX text (a ``.version`` directive near the start)."""
    head = bytes(data[:4096])
    if b"\0" in head.rstrip(b"\0"):
        return False
    return re.search(rb"^\s*\.version\s+\d+\.\d+", head, re.M) is not None


def cubin_arch(data: Buffer) -> Arch:
    """The SM of a cubin from its ELF header (ABI v1: e_flags bits 0-7, v2: bits 8-15)."""
    if len(data) < 64:
        raise FormatError("cubin shorter than an ELF header", offset=0)
    abi = data[8]
    (flags,) = struct.unpack_from("<I", data, 48)
    if abi >= 8:
        sm, specific = (flags >> 8) & 0xFF, bool(flags & 0x8) or _compat_arch_specific(data)
    else:
        sm, specific = flags & 0xFF, bool(flags & 0x800)
    try:
        return Arch(sm, "a" if specific else "")
    except InvalidArgumentError as e:
        raise FormatError(f"cubin e_flags {flags:#x} hold no valid SM", offset=48) from e


def _compat_arch_specific(cubin: Buffer) -> bool:
    """Attribute 0x09 of ``.nv.compat`` (ptxas 13 ABI v2): 1 for an ``a`` target."""
    compat = elf_section(cubin, b".nv.compat") or b""
    pos = 0
    while pos + 4 <= len(compat):
        fmt, attr = compat[pos], compat[pos + 1]
        if fmt == 2 and attr == 0x09:
            return compat[pos + 2] == 1
        if fmt == 4:
            pos += 4 + int.from_bytes(compat[pos + 2 : pos + 4], "little")
        else:
            pos += 4
    return False


def ptx_arch(data: Buffer) -> Arch:
    """The first ``.target`` of a PTX text."""
    m = re.search(rb"^\s*\.target\s+(\w+)", bytes(data[:65536]), re.M)
    if not m:
        raise FormatError("PTX has no .target directive", offset=0)
    try:
        return Arch.parse(m.group(1).decode())
    except InvalidArgumentError as e:
        raise FormatError(f"PTX .target {m.group(1)!r} is not an arch", offset=m.start()) from e


def bare_entry(kind: EntryKind, data: Buffer) -> FatbinEntry:
    """A synthetic entry for a bare cubin or PTX image; ``data()`` returns it unchanged."""
    if kind == EntryKind.ELF:
        arch = cubin_arch(data)
        major, minor = 1, int(data[8])
    else:
        arch = ptx_arch(data)
        m = re.search(rb"^\s*\.version\s+(\d+)\.(\d+)", bytes(data[:65536]), re.M)
        major, minor = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    flags = EntryFlags.ADDR64 | EntryFlags.HOST_LINUX
    if arch.suffix == "a":
        flags |= EntryFlags.ARCH_SPECIFIC
    elif arch.suffix == "f":
        flags |= EntryFlags.FAMILY_SPECIFIC
    header = EntryHeader(
        kind=int(kind), version=ENTRY_VERSION, header_size=64, size=len(data), compressed_size=0,
        options_offset=0, minor=minor, major=major, sm=arch.number, identifier_offset=0,
        identifier_size=0, flags=int(flags), reserved=0, uncompressed_size=0,
    )
    return FatbinEntry(header, b"", data)


def _fatbin_codes(
    source: str, view: memoryview, base: int, first: int, fd: int | None
) -> list[DeviceCode]:
    fb = Fatbin.from_bytes(Reader(view, fd, base))
    out: list[DeviceCode] = []
    for i, c in enumerate(fb.containers):
        for e in c.entries:
            out.append(DeviceCode(source, first + i, e, base + e.offset))
    return out


def _blob_codes(
    source: str, view: memoryview, base: int, first: int, fd: int | None
) -> list[DeviceCode]:
    """Device code in one blob (fatbin, cubin or PTX); [] when it is none of these."""
    if is_fatbin(view):
        try:
            return _fatbin_codes(source, view, base, first, fd)
        except FormatError as e:
            raise type(e)(f"{source}: {e}") from e
    if is_cubin(view):
        return [DeviceCode(source, -1, bare_entry(EntryKind.ELF, view), base)]
    if is_ptx(view):
        end = len(bytes(view).rstrip(b"\0"))
        return [DeviceCode(source, -1, bare_entry(EntryKind.PTX, view[:end]), base)]
    return []


def _count_containers(codes: list[DeviceCode], first: int) -> int:
    return max((c.container + 1 for c in codes), default=first)


@dataclass(frozen=True)
class _Section:
    """A section header with its name resolved."""

    name: str
    header: SectionHeader


def _elf_sections(src: Reader) -> list[_Section]:
    """Section headers of a 64-bit little-endian ELF file, read through ``src`` (headers only,
    no payload pages), with :mod:`fatbinkit.elf`'s record layouts. Not pyelftools: listing must
    not pay for importing it (tests compare this reader with pyelftools on real libraries)."""
    head = FileHeader.unpack(src.read(0, FileHeader.FORMAT.size))
    if not head.is_elf64_le:
        raise UnsupportedError("only 64-bit little-endian ELF host files are scanned")
    size = SectionHeader.FORMAT.size
    if head.shoff == 0:
        return []
    if head.shentsize < size:
        raise FormatError(f"ELF section header size {head.shentsize} < {size}", offset=0x3A)
    first = src.read(head.shoff, size)
    if len(first) < size:
        raise TruncatedError(
            "ELF section header table lies past the end of the file", offset=head.shoff
        )
    zero = SectionHeader(*SectionHeader.FORMAT.unpack(first))
    shnum = head.shnum or zero.size  # extended numbering keeps the count in section 0
    shstrndx = zero.link if head.shstrndx == 0xFFFF else head.shstrndx
    table = src.read(head.shoff, shnum * head.shentsize)
    if len(table) < shnum * head.shentsize:
        raise TruncatedError(
            f"ELF section header table ({shnum} x {head.shentsize} bytes) ends past the end of "
            "the file",
            offset=head.shoff,
        )
    headers = [
        SectionHeader(*SectionHeader.FORMAT.unpack_from(table, i * head.shentsize))
        for i in range(shnum)
    ]
    names = b""
    if 0 < shstrndx < shnum:
        names = src.read(headers[shstrndx].offset, headers[shstrndx].size)
    sections = []
    for h in headers:
        end = names.find(b"\0", h.name)
        name = names[h.name : end if end >= 0 else len(names)].decode("utf-8", "replace")
        sections.append(_Section(name, h))
    return sections


def _symbol_pairs(src: Reader, sections: list[_Section]) -> list[tuple[str, int, int]]:
    """``(start symbol, file offset, size)`` for every ``__X_start``/``__X_end`` pair.

    Symbol values are section-relative in a ``.o`` (section address 0) and virtual addresses in
    linked files; both map to ``section offset + value - section address``.
    """
    found: dict[bytes, tuple[int, int]] = {}
    sym = Symbol.FORMAT
    for sec in (s.header for s in sections):
        if sec.type not in (SHT_SYMTAB, _SHT_DYNSYM) or sec.entsize != sym.size:
            continue
        if not 0 <= sec.link < len(sections):
            continue
        strtab = sections[sec.link].header
        names = src.read(strtab.offset, strtab.size)
        if not (b"_start\0" in names and b"_end\0" in names):
            continue
        raw = src.read(sec.offset, sec.size)
        raw = raw[: len(raw) - len(raw) % sym.size]
        for st_name, _info, _other, shndx, value, _size in sym.iter_unpack(raw):
            if not 0 < shndx < min(_SHN_LORESERVE, len(sections)):
                continue
            end = names.find(b"\0", st_name)
            name = names[st_name:end]
            if not (name.startswith(b"__") and name.endswith((b"_start", b"_end"))):
                continue
            target = sections[shndx].header
            if target.type != _SHT_NOBITS:
                found[name] = (target.offset + value - target.addr, shndx)
    pairs: list[tuple[str, int, int]] = []
    for name, (start, shndx) in found.items():
        m = _PAIR_RE.match(name)
        if not m:
            continue
        end_entry = found.get(b"__" + m.group(1) + b"_end")
        if end_entry is None or end_entry[1] != shndx:
            continue
        size = end_entry[0] - start
        if size <= 0 or start < 0 or start + size > len(src):
            continue
        pairs.append((name.decode("utf-8", "replace"), start, size))
    pairs.sort(key=lambda p: p[1])
    return pairs


def _scan_elf(view: memoryview, fd: int | None, all: bool) -> list[DeviceCode]:
    src = Reader(view, fd)
    sections = _elf_sections(src)
    present = {s.name for s in sections}
    wanted = {FATBIN_SECTION}
    if all or FATBIN_SECTION not in present:
        wanted.add(RELFATBIN_SECTION)
    codes: list[DeviceCode] = []
    first = 0
    for sec in sections:
        if sec.name not in wanted or sec.header.type == _SHT_NOBITS or sec.header.size == 0:
            continue
        off, size = sec.header.offset, sec.header.size
        if off + size > len(view):
            raise TruncatedError(f"section {sec.name} ends past the end of the file", offset=off)
        try:
            found = _fatbin_codes(sec.name, view[off : off + size], off, first, fd)
        except FormatError as e:
            where = None if e.offset is None else off + e.offset
            msg = str(e).rsplit(" (at offset", 1)[0]
            raise type(e)(f"{sec.name}: {msg}", offset=where) from e
        codes += found
        first = _count_containers(codes, first)
    for sym, off, size in _symbol_pairs(src, sections):
        found = _blob_codes(sym, view[off : off + size], off, first, fd)
        codes += found
        first = _count_containers(codes, first)
    return codes


def _open(path: Path) -> IO[bytes]:
    try:
        return open(path, "rb")
    except IsADirectoryError as e:
        raise InputError(f"{path} is a directory") from e
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def _map(file: IO[bytes]) -> memoryview:
    """The whole file, memory-mapped (payload views stay valid after ``file`` is closed)."""
    try:
        if os.fstat(file.fileno()).st_size == 0:
            return memoryview(b"")
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise InputError(f"cannot map {file.name}: {e.strerror or e}") from e
    mapped.madvise(mmap.MADV_RANDOM)  # payloads are read on demand, not ahead
    return memoryview(mapped)


def scan(source: os.PathLike[str] | Buffer, *, all: bool = False) -> tuple[DeviceCode, ...]:
    """Every fatbin entry, cubin or PTX image in ``source`` (a path, or the bytes of a file)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _scan(memoryview(source).cast("B"), None, all)
    if not isinstance(source, os.PathLike):
        raise InvalidArgumentError(
            f"scan() takes a path (os.PathLike) or bytes, not {type(source).__name__}"
        )
    with _open(Path(source)) as file:
        return _scan(_map(file), file, all)


def _scan(view: memoryview, file: IO[bytes] | None, all: bool) -> tuple[DeviceCode, ...]:
    fd = None if file is None else file.fileno()
    if is_fatbin(view):
        return tuple(_fatbin_codes("", view, 0, 0, fd))
    machine = _elf_machine(view)
    if machine == EM_CUDA:
        return (DeviceCode("", -1, bare_entry(EntryKind.ELF, view), 0),)
    if machine is not None:
        return tuple(_scan_elf(view, fd, all))
    if is_ptx(view):
        end = len(bytes(view).rstrip(b"\0"))
        return (DeviceCode("", -1, bare_entry(EntryKind.PTX, view[:end]), 0),)
    raise FormatError("no device code: not a fatbin, cubin, PTX or ELF file", offset=0)


def listed(codes: tuple[DeviceCode, ...], *, all: bool = False) -> tuple[DeviceCode, ...]:
    """The images ``cuobjdump -lelf -lptx`` lists: ELF and PTX; other kinds too with ``all``."""
    if all:
        return codes
    return tuple(c for c in codes if c.entry.header.kind in (EntryKind.ELF, EntryKind.PTX))


def kind_name(kind: int) -> str:
    """``"elf"``, ``"ptx"``, ``"ltoir"``, or ``"kind_0x..."`` for unknown kinds."""
    try:
        return EntryKind(kind).name.lower()
    except ValueError:
        return f"kind_{kind:#x}"


def extract_names(codes: tuple[DeviceCode, ...], input_name: str) -> list[str]:
    """File names ``cuobjdump -xelf all`` / ``-xptx all`` give ``codes`` (one per code).

    cuobjdump's rules, observed: ``<stem>.<n>.<arch>.<ext>`` with ``stem`` the input's name minus
    its last suffix and ``n`` counting per kind from 1; an entry with an identifier is named
    ``<identifier's stem>.<arch>.<ext>`` instead (so equal identifiers collide: the last file
    wins, as with cuobjdump; the identifier's directories are dropped, ``../x.cu`` gives
    ``x.sm_90.cubin``); a bare cubin is ``<stem>.<arch>.cubin``. ELF names show an ``a`` suffix
    but not ``f``; PTX names show both. Names never contain a path separator.
    """
    stem = _safe(Path(input_name).stem)
    counters: dict[int, int] = {}
    names: list[str] = []
    for c in codes:
        e = c.entry
        kind = e.header.kind
        n = counters[kind] = counters.get(kind, 0) + 1
        arch = e.arch
        if kind == EntryKind.ELF:
            arch_name = f"sm_{arch.number}{'a' if arch.suffix == 'a' else ''}"
            ext = "cubin"
        elif kind == EntryKind.PTX:
            arch_name, ext = arch.sm, "ptx"
        else:
            arch_name, ext = arch.sm, kind_name(kind)
        if c.container < 0 and not c.source:
            names.append(f"{stem}.{arch_name}.{ext}")
        elif e.identifier:
            base = e.identifier.rsplit("/", 1)[-1]
            dot = base.rfind(".")
            names.append(f"{_safe(base[:dot] if dot > 0 else base)}.{arch_name}.{ext}")
        else:
            names.append(f"{stem}.{n}.{arch_name}.{ext}")
    return names


def _safe(stem: str) -> str:
    """``stem`` without path separators or control characters (names get ``.arch.ext`` appended,
    so they are never ``.`` or ``..``)."""
    return "".join("_" if ch == "/" or ord(ch) < 32 else ch for ch in stem)
