"""ELF64 little-endian records (file header, section header, symbol), the constants we use, and a
small bounds-checked section table reader.

Each record is one ``struct.Struct`` plus a frozen dataclass whose ``pack``/``unpack`` share it, so
the object writer (:mod:`fatbinkit.formats.elf_writer`), the injection checks
(:mod:`fatbinkit.inject`), the device code scanner (:mod:`fatbinkit.scan`) and the cubin reader
(:mod:`fatbinkit.formats.cubin`) read and write the same layout. :func:`sections` reads only
headers and names (through a :class:`Source`, so a scanner can ``pread`` them without mapping
payload pages); every malformation raises
:class:`~fatbinkit.errors.FormatError` or :class:`~fatbinkit.errors.TruncatedError` with the
offset of the offending record.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..errors import FormatError, TruncatedError, UnsupportedError

__all__ = [
    "ABS64",
    "EI_ABIVERSION",
    "ELFCLASS64",
    "ELFDATA2LSB",
    "ELFMAG",
    "EM_AARCH64",
    "EM_CUDA",
    "EM_X86_64",
    "ET_DYN",
    "ET_EXEC",
    "ET_REL",
    "EV_CURRENT",
    "PT_LOAD",
    "PT_NULL",
    "PT_PHDR",
    "RELATIVE",
    "R_AARCH64_ABS64",
    "R_AARCH64_RELATIVE",
    "R_X86_64_64",
    "R_X86_64_RELATIVE",
    "SHF_ALLOC",
    "SHN_ABS",
    "SHN_LORESERVE",
    "SHN_UNDEF",
    "SHN_XINDEX",
    "SHT_DYNSYM",
    "SHT_NOBITS",
    "SHT_NOTE",
    "SHT_NULL",
    "SHT_PROGBITS",
    "SHT_REL",
    "SHT_RELA",
    "SHT_RELR",
    "SHT_STRTAB",
    "SHT_SYMTAB",
    "STB_GLOBAL",
    "STB_LOCAL",
    "STT_FUNC",
    "STT_NOTYPE",
    "STT_SECTION",
    "FileHeader",
    "FileSource",
    "NoteHeader",
    "ProgramHeader",
    "Rela",
    "Section",
    "SectionHeader",
    "Source",
    "StringTable",
    "Symbol",
    "check_span",
    "file_header",
    "find_section",
    "machine",
    "program_headers",
    "section_data",
    "section_table",
    "sections",
    "st_info",
]

ELFMAG = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
EV_CURRENT = 1

ET_REL = 1
ET_EXEC = 2
ET_DYN = 3

EM_X86_64 = 62
EM_AARCH64 = 183
EM_CUDA = 190

EI_ABIVERSION = 8

SHT_NULL = 0
SHT_PROGBITS = 1
SHT_SYMTAB = 2
SHT_STRTAB = 3
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_RELA = 4
SHT_DYNSYM = 11
SHT_REL = 9
SHT_RELR = 19

PT_NULL = 0
PT_LOAD = 1
PT_PHDR = 6

R_X86_64_RELATIVE = 8
R_AARCH64_RELATIVE = 1027
#: the relocation type that stores ``base + addend`` (no symbol), per machine
RELATIVE = {EM_X86_64: R_X86_64_RELATIVE, EM_AARCH64: R_AARCH64_RELATIVE}
R_X86_64_64 = 1
R_AARCH64_ABS64 = 257
#: the relocation type that stores ``S + A`` in 64 bits, per machine (a wrapper's pointer in a
#: relocatable object)
ABS64 = {EM_X86_64: R_X86_64_64, EM_AARCH64: R_AARCH64_ABS64}

SHF_ALLOC = 0x2

SHN_UNDEF = 0
SHN_LORESERVE = 0xFF00
SHN_ABS = 0xFFF1
SHN_XINDEX = 0xFFFF

STB_LOCAL = 0
STB_GLOBAL = 1
STT_NOTYPE = 0
STT_FUNC = 2
STT_SECTION = 3

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True)
class FileHeader:
    """``Elf64_Ehdr``; ``ident`` is the 16-byte ``e_ident`` kept verbatim."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<16sHHIQQQIHHHHHH")

    ident: bytes
    type: int
    machine: int
    version: int
    entry: int
    phoff: int
    shoff: int
    flags: int
    ehsize: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.ident, self.type, self.machine, self.version, self.entry, self.phoff, self.shoff,
            self.flags, self.ehsize, self.phentsize, self.phnum, self.shentsize, self.shnum,
            self.shstrndx,
        )  # fmt: skip

    @classmethod
    def unpack(cls, data: Buffer) -> FileHeader:
        """Parse the first 64 bytes of an ELF64 little-endian file."""
        if len(data) < cls.FORMAT.size:
            raise TruncatedError(
                f"ELF file of {len(data)} bytes is shorter than an ELF64 header "
                f"({cls.FORMAT.size})",
                offset=0,
            )
        return cls(*cls.FORMAT.unpack_from(data, 0))

    @property
    def abi_version(self) -> int:
        """``EI_ABIVERSION`` (for cubins: 7 or 8, which decides how ``flags`` encode the SM)."""
        return self.ident[EI_ABIVERSION]

    @property
    def is_elf64_le(self) -> bool:
        return (
            self.ident[:4] == ELFMAG
            and self.ident[4] == ELFCLASS64
            and self.ident[5] == ELFDATA2LSB
        )


@dataclass(frozen=True)
class SectionHeader:
    """``Elf64_Shdr``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IIQQQQIIQQ")

    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.name, self.type, self.flags, self.addr, self.offset, self.size, self.link,
            self.info, self.addralign, self.entsize,
        )  # fmt: skip

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> SectionHeader:
        """The section header at ``offset`` of ``buf`` (which must hold all 64 bytes)."""
        return cls(*cls.FORMAT.unpack_from(buf, offset))


# Positions of the fields :func:`find_section` reads in a raw ``SectionHeader.FORMAT`` tuple.
_SH_NAME, _SH_TYPE, _SH_OFFSET, _SH_SIZE = 0, 1, 4, 5


@dataclass(frozen=True)
class Symbol:
    """``Elf64_Sym``; ``info`` is ``bind << 4 | type``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IBBHQQ")

    name: int
    info: int
    other: int
    shndx: int
    value: int
    size: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.name, self.info, self.other, self.shndx, self.value, self.size)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> Symbol:
        """The symbol at ``offset`` of ``buf`` (which must hold all 24 bytes)."""
        return cls(*cls.FORMAT.unpack_from(buf, offset))


@dataclass(frozen=True)
class ProgramHeader:
    """``Elf64_Phdr``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IIQQQQQQ")

    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.type, self.flags, self.offset, self.vaddr, self.paddr,
                                self.filesz, self.memsz, self.align)

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> ProgramHeader:
        """The program header at ``offset`` of ``buf`` (which must hold all 56 bytes)."""
        return cls(*cls.FORMAT.unpack_from(buf, offset))


@dataclass(frozen=True)
class Rela:
    """``Elf64_Rela``; ``info`` is ``symbol << 32 | type``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<QQq")

    offset: int
    info: int
    addend: int

    @property
    def type(self) -> int:
        return self.info & 0xFFFFFFFF

    @property
    def symbol(self) -> int:
        return self.info >> 32

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.offset, self.info, self.addend)


@dataclass(frozen=True)
class NoteHeader:
    """``Elf64_Nhdr``: the name (padded to 4) and descriptor follow it."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<III")

    namesz: int
    descsz: int
    type: int

    @classmethod
    def unpack_from(cls, buf: Buffer, offset: int = 0) -> NoteHeader:
        """The note header at ``offset`` of ``buf`` (which must hold all 12 bytes)."""
        return cls(*cls.FORMAT.unpack_from(buf, offset))

    @property
    def desc_offset(self) -> int:
        """Where the descriptor starts, from the start of this header."""
        return self.FORMAT.size + (self.namesz + 3) // 4 * 4


def st_info(bind: int, kind: int) -> int:
    """Combine a symbol binding and type into ``st_info``."""
    return (bind << 4) | kind


def machine(data: Buffer) -> int | None:
    """``e_machine`` of an ELF file of either byte order, or None when ``data`` is not ELF."""
    if len(data) < 20 or bytes(data[:4]) != ELFMAG:
        return None
    return int.from_bytes(data[18:20], "little" if data[5] == ELFDATA2LSB else "big")


class Source(Protocol):
    """What the reader reads from: up to ``size`` bytes at ``offset`` (fewer at the end), and
    the total length. :class:`fatbinkit.formats.fatbin.Reader` is one (``pread`` on a file)."""

    def read(self, offset: int, size: int) -> bytes: ...

    def __len__(self) -> int: ...


class _BufferSource:
    """A :class:`Source` over bytes in memory."""

    def __init__(self, data: Buffer) -> None:
        self._data = data

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self._data[offset : offset + size])

    def __len__(self) -> int:
        return len(self._data)


class FileSource:
    """A :class:`Source` over an open file: ``pread`` of the bytes asked for, so checking a
    library's tables reads those tables, not the library."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._size = size

    def read(self, offset: int, size: int) -> bytes:
        size = min(size, self._size - offset)
        return os.pread(self._fd, size, offset) if size > 0 else b""

    def __len__(self) -> int:
        return self._size


def program_headers(src: Source | Buffer, head: FileHeader) -> tuple[ProgramHeader, ...]:
    """Every program header of an ELF64 little-endian file, bounds-checked."""
    src = _source(src)
    size = ProgramHeader.FORMAT.size
    if head.phnum == 0:
        return ()
    if head.phentsize < size:
        raise FormatError(f"ELF program header size {head.phentsize} < {size}", offset=0x36)
    check_span(src, head.phoff, head.phnum * head.phentsize, "program header table")
    table = src.read(head.phoff, head.phnum * head.phentsize)
    return tuple(ProgramHeader.unpack_from(table, i * head.phentsize) for i in range(head.phnum))


def _source(src: Source | Buffer) -> Source:
    return _BufferSource(src) if isinstance(src, (bytes, bytearray, memoryview)) else src


def file_header(src: Source | Buffer) -> FileHeader:
    """The header of a 64-bit little-endian ELF file; anything else is refused."""
    head = FileHeader.unpack(_source(src).read(0, FileHeader.FORMAT.size))
    if head.ident[:4] != ELFMAG:
        raise FormatError("not an ELF file (bad magic)", offset=0)
    if not head.is_elf64_le:
        raise UnsupportedError("only 64-bit little-endian ELF files are supported")
    return head


@dataclass(frozen=True)
class Section:
    """A section header with its index and resolved name."""

    index: int
    name: str
    header: SectionHeader


def check_span(src: Source | Buffer, offset: int, size: int, what: str) -> None:
    """Raise :class:`TruncatedError` unless ``size`` bytes at ``offset`` lie inside ``src``."""
    end = len(src)
    if offset + size > end:
        raise TruncatedError(
            f"{what} ({size} bytes at {offset:#x}) runs {offset + size - end} bytes past the end "
            f"of the {end}-byte file",
            offset=offset,
        )


def sections(src: Source | Buffer, head: FileHeader | None = None) -> tuple[Section, ...]:
    """Every section header of an ELF64 little-endian file, names resolved, index 0 included.

    Reads the section header table and the name table only. Extended numbering (more than
    0xFF00 sections) is followed; every section's contents (``SHT_NOBITS`` aside) must lie
    inside the file and every name inside the name table.
    """
    src = _source(src)
    rows, names = _section_table(src, head if head is not None else file_header(src))
    return tuple(Section(i, name, SectionHeader(*row))
                 for i, (row, name) in enumerate(zip(rows, names, strict=True)))


def section_table(
    src: Source | Buffer, head: FileHeader | None = None
) -> tuple[list[tuple[int, ...]], list[str]]:
    """What :func:`sections` gives, checked the same way, as raw ``SectionHeader.FORMAT`` tuples
    and names: for readers of many small files (a library's thousands of cubins), where making a
    :class:`Section` and a :class:`SectionHeader` per section is a tenth of the parse."""
    src = _source(src)
    return _section_table(src, head if head is not None else file_header(src))


def _section_table(
    src: Source, head: FileHeader
) -> tuple[list[tuple[int, ...]], list[str]]:
    """The raw fields of every section header and each section's name ("" when the file has no
    name table), with what :func:`sections` promises checked.

    Raw tuples, not :class:`SectionHeader` objects: :func:`find_section` (the writer, for each
    cubin) needs one section of a table of dozens.
    """
    size = SectionHeader.FORMAT.size
    if head.shoff == 0:
        return [], []
    if head.shentsize < size:
        raise FormatError(f"ELF section header size {head.shentsize} < {size}", offset=0x3A)
    check_span(src, head.shoff, size, "section header table")
    zero = SectionHeader.unpack_from(src.read(head.shoff, size))
    shnum = head.shnum or zero.size  # extended numbering keeps the count in section 0
    shstrndx = zero.link if head.shstrndx == SHN_XINDEX else head.shstrndx
    check_span(src, head.shoff, shnum * head.shentsize, "section header table")
    table = src.read(head.shoff, shnum * head.shentsize)
    fmt = SectionHeader.FORMAT
    rows: list[tuple[int, ...]] = (
        list(fmt.iter_unpack(table)) if head.shentsize == size
        else [fmt.unpack_from(table, i * head.shentsize) for i in range(shnum)]
    )  # fmt: skip
    if shstrndx >= max(shnum, 1):
        raise FormatError(
            f"section name table index {shstrndx} is not below the section count {shnum}",
            offset=0x3E,
        )
    names = b""
    names_at = 0
    if shstrndx:
        names_at, names_size = rows[shstrndx][_SH_OFFSET], rows[shstrndx][_SH_SIZE]
        check_span(src, names_at, names_size, "section name table")
        names = src.read(names_at, names_size)
    # Names by the offset each string starts at, from one split of the table (names almost
    # always start a string; one that points inside another is looked up with the table's
    # linear-time search, once per index). The part after the last NUL is not a string: it has
    # no end. ASCII tables (every one the toolchains write) are split as text, decoding once.
    # Rows are judged in order, a row's name before its bounds, as one loop over them would.
    out: list[str] = [""] * len(rows)
    file_size = len(src)
    bad = [i for i, row in enumerate(rows) if row[_SH_OFFSET] + row[_SH_SIZE] > file_size
           and row[_SH_TYPE] not in (SHT_NULL, SHT_NOBITS)]
    if names:
        text = names.decode("ascii") if names.isascii() else None
        parts = text.split("\0") if text is not None else names.split(b"\0")
        starts: dict[int, str | bytes] = {}
        pos = 0
        for part in parts[:-1]:
            starts[pos] = part
            pos += len(part) + 1
        found = [starts.get(row[_SH_NAME]) for row in rows]
        lookup = StringTable(names)
        inner = 0  # bytes of names that start inside another: bounded, as the table is
        first_bad = bad[0] if bad else len(rows)
        for i in (i for i, raw in enumerate(found) if raw is None):
            if i > first_bad:
                break  # an earlier row's section runs past the end: that is the error
            index = rows[i][_SH_NAME]
            raw = starts.get(index)
            if raw is None:
                end = lookup.end(index)
                if end < 0:
                    lookup.string(index, "section name", names_at)  # raises the precise error
                inner += end - index
                if inner > len(names) + _NAME_SLACK:
                    raise FormatError("section names overlap more than the name table holds",
                                      offset=names_at)
                raw = starts[index] = text[index:end] if text is not None else names[index:end]
            found[i] = raw
        out = [raw if isinstance(raw, str) else "" if raw is None else
               raw.decode("utf-8", "replace") for raw in found]
    for i in bad:
        check_span(src, rows[i][_SH_OFFSET], rows[i][_SH_SIZE], f"section {out[i] or i}")
    return rows, out


_NAME_SLACK = 1 << 20  # names inside other names may add this much beyond the table's size


class StringTable:
    """An ELF string table whose lookups stay linear in its size, whatever the indexes.

    ``bytes.find`` from each index alone is quadratic on hostile input: many names that start
    inside one long unterminated run each scan it to its end. A lookup here scans at most
    ``WINDOW`` bytes itself; past that it uses the first-NUL-at-or-after position of each
    ``WINDOW``-byte block, computed once per table (one pass, ``len / WINDOW`` entries).
    """

    WINDOW = 4096

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._next: list[int] | None = None

    def end(self, index: int) -> int:
        """The position of the NUL that ends the string at ``index`` (-1: none, or ``index`` is
        past the table)."""
        if not 0 <= index < len(self.data):
            return -1
        stop = (index // self.WINDOW + 1) * self.WINDOW  # the end of index's block
        end = self.data.find(b"\0", index, stop)
        if end >= 0 or stop >= len(self.data):
            return end
        if self._next is None:
            self._next = self._blocks()
        return self._next[stop // self.WINDOW]

    def _blocks(self) -> list[int]:
        data, w = self.data, self.WINDOW
        count = (len(data) + w - 1) // w
        out = [-1] * (count + 1)
        for k in range(count - 1, -1, -1):
            hit = data.find(b"\0", k * w, (k + 1) * w)
            out[k] = hit if hit >= 0 else out[k + 1]
        return out

    def string(self, index: int, what: str, table_offset: int) -> str:
        """The string at ``index``; a bad index or a missing NUL is a FormatError naming
        ``what`` at its file offset."""
        if index >= len(self.data):
            raise FormatError(
                f"{what} index {index} outside its {len(self.data)}-byte string table",
                offset=table_offset,
            )
        end = self.end(index)
        if end < 0:
            raise FormatError(
                f"{what} at {table_offset + index:#x} is not NUL-terminated",
                offset=table_offset + index,
            )
        return self.data[index:end].decode("utf-8", "replace")


def section_data(src: Source | Buffer, section: Section) -> bytes:
    """The contents of ``section`` (empty for ``SHT_NOBITS``), bounds-checked."""
    h = section.header
    if h.type == SHT_NOBITS:
        return b""
    src = _source(src)
    check_span(src, h.offset, h.size, f"section {section.name or section.index}")
    return src.read(h.offset, h.size)


def find_section(data: Source | Buffer, name: str) -> bytes | None:
    """The contents of the first section called ``name`` in an ELF64 little-endian file, or None
    when it has none (the file checked as :func:`sections` checks it)."""
    src = _source(data)
    rows, names = _section_table(src, file_header(src))
    for row, found in zip(rows, names, strict=True):
        if found == name:
            if row[_SH_TYPE] == SHT_NOBITS:
                return b""
            return src.read(row[_SH_OFFSET], row[_SH_SIZE])
    return None
