"""PE and COFF files (Windows DLL, ``.pyd``, EXE and ``.obj``), read bounds-checked: the headers and
the section table, from Microsoft's "PE Format" specification (learn.microsoft.com, Windows
docs, win32/debug/pe-format).

An image (DLL, ``.pyd``, EXE) starts with the MS-DOS stub: ``MZ``, and at 0x3C the offset of the
``PE\\0\\0`` signature, which the COFF file header follows, then the optional header (PE32 or PE32+)
and the section table. An object file (``.obj``) starts with the COFF file header, with no
optional header. A section whose name is longer than eight bytes is named ``/N`` in an object,
``N`` the offset of its name in the string table that follows the symbol table; images truncate
names to eight bytes, which is why nvcc's ``.nv_fatbin`` reads ``.nv_fatb`` in a DLL (and the
wrapper records' ``.nvFatBinSegment`` reads ``.nvFatBi``).

Each record is a ``struct.Struct`` and a frozen dataclass, as in :mod:`fatbinkit.formats.elf`;
:func:`read` checks that every header and every section's raw data lies inside the file, so a
caller slices the file with the offsets it gets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from ..errors import FormatError, TruncatedError
from .elf import Buffer

__all__ = [
    "IMAGE_FILE_MACHINE_AMD64",
    "IMAGE_FILE_MACHINE_ARM64",
    "IMAGE_FILE_MACHINE_I386",
    "IMAGE_SCN_CNT_INITIALIZED_DATA",
    "IMAGE_SCN_MEM_READ",
    "IMAGE_SYM_CLASS_EXTERNAL",
    "MACHINE_NAMES",
    "PE32",
    "PE32_PLUS",
    "ImageFileHeader",
    "ImageOptionalHeader",
    "ImageSectionHeader",
    "ImageSymbol",
    "PeFile",
    "PeSection",
    "is_coff_object",
    "is_pe",
    "read",
    "symbols",
]

IMAGE_FILE_MACHINE_I386 = 0x14C
IMAGE_FILE_MACHINE_AMD64 = 0x8664
IMAGE_FILE_MACHINE_ARM64 = 0xAA64
IMAGE_SCN_CNT_INITIALIZED_DATA = 0x40
IMAGE_SCN_MEM_READ = 0x40000000
IMAGE_SYM_CLASS_EXTERNAL = 2
#: the machines fatbinkit reads, by ``IMAGE_FILE_MACHINE_*`` value
MACHINE_NAMES: dict[int, str] = {IMAGE_FILE_MACHINE_I386: "i386",
                                 IMAGE_FILE_MACHINE_AMD64: "x86-64",
                                 IMAGE_FILE_MACHINE_ARM64: "arm64"}
PE32, PE32_PLUS = 0x10B, 0x20B  # optional header magic
_DOS_MAGIC = b"MZ"
_SIGNATURE = b"PE\0\0"
_LFANEW = struct.Struct("<I")  # e_lfanew, at 0x3C of the MS-DOS header
_LFANEW_AT = 0x3C
_MAX_SECTIONS = 96  # the loader's limit (the specification: "Windows limits ... to 96")


@dataclass(frozen=True)
class ImageFileHeader:
    """``IMAGE_FILE_HEADER`` (the COFF file header; the whole header of an object file)."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<HHIIIHH")

    machine: int
    number_of_sections: int
    time_date_stamp: int
    pointer_to_symbol_table: int
    number_of_symbols: int
    size_of_optional_header: int
    characteristics: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.machine, self.number_of_sections, self.time_date_stamp,
            self.pointer_to_symbol_table, self.number_of_symbols, self.size_of_optional_header,
            self.characteristics,
        )  # fmt: skip

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int) -> ImageFileHeader:
        _need(data, offset, cls.FORMAT.size, "COFF file header")
        return cls(*cls.FORMAT.unpack_from(data, offset))


@dataclass(frozen=True)
class ImageOptionalHeader:
    """The fields of ``IMAGE_OPTIONAL_HEADER32``/``64`` that locate things in the file: the
    preferred base, alignments, sizes, the checksum and the data directories (RVA, size)."""

    magic: int
    image_base: int
    section_alignment: int
    file_alignment: int
    size_of_image: int
    size_of_headers: int
    checksum: int
    directories: tuple[tuple[int, int], ...]

    _PE32: ClassVar[struct.Struct] = struct.Struct("<H2B9I6H4I2H6I")  # through NumberOfRvaAndSizes
    _PE32_PLUS: ClassVar[struct.Struct] = struct.Struct("<H2B5IQ2I6H4I2H4QII")
    _DIRECTORY: ClassVar[struct.Struct] = struct.Struct("<II")

    @classmethod
    def unpack_from(cls, data: Buffer, offset: int, size: int) -> ImageOptionalHeader:
        """The optional header at ``offset``, ``size`` bytes long (the file header's)."""
        _need(data, offset, 2, "optional header")
        magic = int.from_bytes(data[offset:offset + 2], "little")
        if magic == PE32:
            fmt = cls._PE32
        elif magic == PE32_PLUS:
            fmt = cls._PE32_PLUS
        else:
            raise FormatError(f"optional header magic {magic:#x} is neither PE32 nor PE32+",
                              offset=offset)
        if size < fmt.size:
            raise FormatError(f"optional header of {size} bytes is shorter than its fixed "
                              f"fields ({fmt.size})", offset=offset)
        _need(data, offset, size, "optional header")
        f = fmt.unpack_from(data, offset)
        if magic == PE32:  # BaseOfData sits between BaseOfCode and ImageBase
            image_base, sect_align, file_align = f[9], f[10], f[11]
            size_of_image, size_of_headers, checksum, count = f[19], f[20], f[21], f[-1]
        else:
            image_base, sect_align, file_align = f[8], f[9], f[10]
            size_of_image, size_of_headers, checksum, count = f[18], f[19], f[20], f[-1]
        room = (size - fmt.size) // cls._DIRECTORY.size
        if count > room:
            raise FormatError(f"{count} data directories do not fit the optional header "
                              f"({room} do)", offset=offset)
        directories = tuple(cls._DIRECTORY.iter_unpack(
            bytes(data[offset + fmt.size:offset + fmt.size + count * cls._DIRECTORY.size])))
        return cls(magic, image_base, sect_align, file_align, size_of_image, size_of_headers,
                   checksum, directories)


@dataclass(frozen=True)
class ImageSectionHeader:
    """``IMAGE_SECTION_HEADER``; ``name`` is the 8-byte field as stored."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<8sIIIIIIHHI")

    name: bytes
    virtual_size: int
    virtual_address: int
    size_of_raw_data: int
    pointer_to_raw_data: int
    pointer_to_relocations: int
    pointer_to_linenumbers: int
    number_of_relocations: int
    number_of_linenumbers: int
    characteristics: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.name, self.virtual_size, self.virtual_address, self.size_of_raw_data,
            self.pointer_to_raw_data, self.pointer_to_relocations, self.pointer_to_linenumbers,
            self.number_of_relocations, self.number_of_linenumbers, self.characteristics,
        )  # fmt: skip


@dataclass(frozen=True)
class ImageSymbol:
    """``IMAGE_SYMBOL``; ``name`` is the 8-byte field as stored: the name itself when it fits,
    else four zero bytes and the name's offset in the string table. ``section_number`` is
    1-based (0 undefined, -1 absolute, -2 debug); ``value`` is section-relative in an object."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<8sIhHBB")

    name: bytes
    value: int
    section_number: int
    type: int
    storage_class: int
    number_of_aux_symbols: int


@dataclass(frozen=True)
class PeSection:
    """A section: its name (a long name resolved in an object) and header. ``offset`` and
    ``size`` are the bytes of the file that hold its data: the raw data, without the file
    alignment's padding when the virtual size is smaller (zero-filled tails are not in the
    file)."""

    name: str
    header: ImageSectionHeader

    @property
    def offset(self) -> int:
        return self.header.pointer_to_raw_data

    @property
    def size(self) -> int:
        h = self.header
        if h.pointer_to_raw_data == 0:
            return 0  # no data in the file (uninitialised)
        raw = h.size_of_raw_data
        return min(raw, h.virtual_size) if h.virtual_size else raw


@dataclass(frozen=True)
class PeFile:
    """A PE image or COFF object: ``optional`` is None for an object."""

    header_offset: int  # of the COFF file header
    file: ImageFileHeader
    optional: ImageOptionalHeader | None
    sections: tuple[PeSection, ...]

    @property
    def machine(self) -> str:
        return MACHINE_NAMES.get(self.file.machine, f"machine {self.file.machine:#x}")

    def find(self, name: str) -> Iterator[PeSection]:
        """The sections named ``name``, in table order."""
        return (s for s in self.sections if s.name == name)

    def __str__(self) -> str:
        kind = "COFF object" if self.optional is None else (
            "PE32+ image" if self.optional.magic == PE32_PLUS else "PE32 image")
        return f"{kind} ({self.machine}), {len(self.sections)} sections"


def symbols(data: Buffer, image: PeFile) -> Iterator[tuple[str, ImageSymbol]]:
    """The symbols of a COFF symbol table (an object's; images rarely keep one), in order, each
    with its name resolved through the string table; auxiliary records are skipped."""
    head = image.file
    count, at = head.number_of_symbols, head.pointer_to_symbol_table
    if not at or not count:
        return
    size = ImageSymbol.FORMAT.size
    _need(data, at, count * size, f"symbol table of {count} symbols")
    strings = at + count * size
    i = 0
    while i < count:
        sym = ImageSymbol(*ImageSymbol.FORMAT.unpack_from(data, at + i * size))
        if sym.name[:4] == b"\0\0\0\0":  # a long name: its offset in the string table
            start = strings + int.from_bytes(sym.name[4:], "little")
            end = bytes(data[start:start + 4096]).find(b"\0") if start < len(data) else -1
            if end < 0:
                raise FormatError(f"symbol {i}'s name is past the string table",
                                  offset=at + i * size)
            name = bytes(data[start:start + end])
        else:
            name = sym.name.rstrip(b"\0")
        yield name.decode("utf-8", "replace"), sym
        i += 1 + sym.number_of_aux_symbols


def is_pe(data: Buffer) -> bool:
    """Whether ``data`` starts like a PE image: ``MZ`` and the ``PE\\0\\0`` signature where
    ``e_lfanew`` points (``data`` may be just the file's first bytes)."""
    if bytes(data[:2]) != _DOS_MAGIC or len(data) < _LFANEW_AT + 4:
        return False
    (at,) = _LFANEW.unpack_from(data, _LFANEW_AT)
    return bytes(data[at:at + 4]) == _SIGNATURE


def is_coff_object(data: Buffer) -> bool:
    """Whether ``data`` starts like a COFF object of a machine fatbinkit reads: a known machine,
    a plausible section count and no optional header."""
    if len(data) < ImageFileHeader.FORMAT.size:
        return False
    h = ImageFileHeader.unpack_from(data, 0)
    return (h.machine in MACHINE_NAMES and 0 < h.number_of_sections <= _MAX_SECTIONS
            and h.size_of_optional_header == 0)


def read(data: Buffer) -> PeFile:
    """The headers and section table of a PE image or COFF object; a
    :class:`~fatbinkit.errors.FormatError` (:class:`~fatbinkit.errors.TruncatedError` when
    something runs past the end) for anything malformed."""
    if is_pe(data):
        (at,) = _LFANEW.unpack_from(data, _LFANEW_AT)
        at += len(_SIGNATURE)
    elif is_coff_object(data):
        at = 0
    else:
        raise FormatError("not a PE image or COFF object", offset=0)
    head = ImageFileHeader.unpack_from(data, at)
    count = head.number_of_sections
    if not 0 < count <= _MAX_SECTIONS:
        raise FormatError(f"{count} sections (a PE file has 1 to {_MAX_SECTIONS})", offset=at)
    optional = None
    if at:  # an image
        optional = ImageOptionalHeader.unpack_from(data, at + ImageFileHeader.FORMAT.size,
                                                   head.size_of_optional_header)
    table = at + ImageFileHeader.FORMAT.size + head.size_of_optional_header
    size = ImageSectionHeader.FORMAT.size
    _need(data, table, count * size, f"section table of {count} sections")
    sections = []
    for i in range(count):
        h = ImageSectionHeader(*ImageSectionHeader.FORMAT.unpack_from(data, table + i * size))
        s = PeSection(_name(data, head, h.name, optional is None, table + i * size), h)
        if s.size:
            _need(data, s.offset, s.size, f"section {s.name}'s data")
        sections.append(s)
    return PeFile(at, head, optional, tuple(sections))


def _name(data: Buffer, head: ImageFileHeader, raw: bytes, obj: bool, where: int) -> str:
    """A section's name: the eight bytes without NULs, or in an object ``/N``, the name at
    offset ``N`` of the string table after the symbol table."""
    name = raw.rstrip(b"\0")
    if obj and name.startswith(b"/") and name[1:].isdigit():
        table = (head.pointer_to_symbol_table
                 + head.number_of_symbols * ImageSymbol.FORMAT.size)
        start = table + int(name[1:])
        _need(data, table, 4, "string table")
        end = bytes(data[start:start + 4096]).find(b"\0")
        if start >= len(data) or end < 0:
            raise FormatError(f"section name {name.decode()} is past the string table",
                              offset=where)
        name = bytes(data[start:start + end])
    return name.decode("utf-8", "replace")


def _need(data: Buffer, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise TruncatedError(f"{what} ({size} bytes at {offset:#x}) runs past the end of the "
                             f"{len(data)}-byte file", offset=offset)
