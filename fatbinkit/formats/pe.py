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

import dataclasses
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..errors import FormatError, TruncatedError, UnsupportedError
from .elf import Buffer

__all__ = [
    "IMAGE_DIRECTORY_ENTRY_BASERELOC",
    "IMAGE_DIRECTORY_ENTRY_DEBUG",
    "IMAGE_DIRECTORY_ENTRY_EXPORT",
    "IMAGE_DIRECTORY_ENTRY_SECURITY",
    "IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY",
    "IMAGE_FILE_MACHINE_AMD64",
    "IMAGE_FILE_MACHINE_ARM64",
    "IMAGE_FILE_MACHINE_I386",
    "IMAGE_REL_BASED_ABSOLUTE",
    "IMAGE_REL_BASED_DIR64",
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
    "base_relocations",
    "checksum",
    "export_rvas",
    "is_coff_object",
    "is_pe",
    "read",
    "rva_offset",
    "shrink",
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
_U32 = struct.Struct("<I")  # e_lfanew (at 0x3C of the MS-DOS header), a string table's size
_LFANEW_AT = 0x3C
_MAX_SECTIONS = 0xFEFF  # section numbers above are special (IMAGE_SYM_DEBUG...): the format's limit


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
    strings = _strings(data, head)
    i = 0
    while i < count:
        sym = ImageSymbol(*ImageSymbol.FORMAT.unpack_from(data, at + i * size))
        if sym.name[:4] == b"\0\0\0\0":  # a long name: its offset in the string table
            name = _string(strings, int.from_bytes(sym.name[4:], "little"),
                           f"symbol {i}'s name", at + i * size)
        else:
            name = sym.name.rstrip(b"\0")
        yield name.decode("utf-8", "replace"), sym
        i += 1 + sym.number_of_aux_symbols


def is_pe(data: Buffer) -> bool:
    """Whether ``data`` starts like a PE image: ``MZ`` and the ``PE\\0\\0`` signature where
    ``e_lfanew`` points (``data`` may be just the file's first bytes)."""
    if bytes(data[:2]) != _DOS_MAGIC or len(data) < _LFANEW_AT + 4:
        return False
    (at,) = _U32.unpack_from(data, _LFANEW_AT)
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
        (at,) = _U32.unpack_from(data, _LFANEW_AT)
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
    strings: bytes | None = None
    sections = []
    for i in range(count):
        h = ImageSectionHeader(*ImageSectionHeader.FORMAT.unpack_from(data, table + i * size))
        name = h.name.rstrip(b"\0")
        if name.startswith(b"/") and name[1:].isdigit() and head.pointer_to_symbol_table:
            strings = _strings(data, head) if strings is None else strings
            name = _string(strings, int(name[1:]), f"section {i}'s name", table + i * size)
        s = PeSection(name.decode("utf-8", "replace"), h)
        if s.size:
            shown = "".join(c if c.isprintable() else "?" for c in s.name)
            _need(data, s.offset, s.size, f"section {shown}'s data")
        sections.append(s)
    return PeFile(at, head, optional, tuple(sections))


def _strings(data: Buffer, head: ImageFileHeader) -> bytes:
    """The COFF string table after the symbol table (its first four bytes hold its size)."""
    at = head.pointer_to_symbol_table + head.number_of_symbols * ImageSymbol.FORMAT.size
    _need(data, at, 4, "string table")
    (size,) = _U32.unpack_from(data, at)
    if size < 4:
        raise FormatError(f"string table of {size} bytes (at least its 4-byte size)", offset=at)
    _need(data, at, size, "string table")
    return bytes(data[at:at + size])


def _string(strings: bytes, offset: int, what: str, where: int) -> bytes:
    """The NUL-terminated name at ``offset`` of a string table."""
    end = strings.find(b"\0", offset) if 4 <= offset < len(strings) else -1
    if end < 0:
        raise FormatError(f"{what} is past the string table", offset=where)
    return strings[offset:end]


def _need(data: Buffer, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise TruncatedError(f"{what} ({size} bytes at {offset:#x}) runs past the end of the "
                             f"{len(data)}-byte file", offset=offset)


# -- editing: shrink sections' raw data ------------------------------------------------------------

IMAGE_DIRECTORY_ENTRY_EXPORT = 0
IMAGE_DIRECTORY_ENTRY_SECURITY = 4  # its "address" is a file offset (the certificate table)
IMAGE_DIRECTORY_ENTRY_BASERELOC = 5
IMAGE_DIRECTORY_ENTRY_DEBUG = 6
IMAGE_REL_BASED_ABSOLUTE = 0  # padding entry
IMAGE_REL_BASED_DIR64 = 10  # a 64-bit address
_DEBUG_DIRECTORY = struct.Struct("<IIHHIIII")  # IMAGE_DEBUG_DIRECTORY: PointerToRawData last
_EXPORT_DIRECTORY = struct.Struct("<IIHHIIIIIII")  # IMAGE_EXPORT_DIRECTORY
_CHECKSUM_AT = 64  # CheckSum's offset in the optional header (PE32 and PE32+)
_SIZE_OF_INITIALIZED_DATA_AT = 8
_DLL_CHARACTERISTICS_AT = 70  # in the optional header (PE32 and PE32+)
IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY = 0x80


def rva_offset(image: PeFile, rva: int, size: int = 1) -> int | None:
    """The file offset of ``size`` bytes at ``rva`` (None: not in one section's file data)."""
    for s in image.sections:
        start = s.header.virtual_address
        if start <= rva and rva + size <= start + s.size:
            return s.offset + rva - start
    return None


def base_relocations(data: Buffer, image: PeFile) -> list[tuple[int, int]]:
    """The base relocations, ``(RVA of the slot, type)`` (``IMAGE_REL_BASED_*``), padding
    entries left out; a :class:`~fatbinkit.errors.FormatError` for a malformed table."""
    rva, size = _directory(image, IMAGE_DIRECTORY_ENTRY_BASERELOC)
    if not size:
        return []
    at = rva_offset(image, rva, size)
    if at is None:
        raise FormatError(f"the base relocation table ({size} bytes at RVA {rva:#x}) is not in "
                          "a section's data")
    out = []
    end = at + size
    while at + 8 <= end:
        page, block = struct.unpack_from("<II", data, at)
        if block < 8 or block % 2 or at + block > end:
            raise FormatError(f"base relocation block of {block} bytes at {at:#x}", offset=at)
        for (entry,) in struct.iter_unpack("<H", bytes(data[at + 8:at + block])):
            if entry >> 12 != IMAGE_REL_BASED_ABSOLUTE:
                out.append((page + (entry & 0xFFF), entry >> 12))
        at += block
    return out


def export_rvas(data: Buffer, image: PeFile) -> list[int]:
    """The RVAs of the export address table (every exported function or datum, forwarders
    included): ``IMAGE_EXPORT_DIRECTORY``'s ``AddressOfFunctions``, ``NumberOfFunctions`` long."""
    rva, size = _directory(image, IMAGE_DIRECTORY_ENTRY_EXPORT)
    if not size:
        return []
    at = rva_offset(image, rva, _EXPORT_DIRECTORY.size)
    if at is None:
        raise FormatError(f"the export directory (RVA {rva:#x}) is not in a section's data")
    fields = _EXPORT_DIRECTORY.unpack_from(data, at)
    count, table = fields[6], fields[8]
    where = rva_offset(image, table, 4 * count) if count else None
    if count and where is None:
        raise FormatError(f"the export address table ({count} entries at RVA {table:#x}) is "
                          "not in a section's data")
    return [] if where is None else [
        r for (r,) in struct.iter_unpack("<I", bytes(data[where:where + 4 * count]))]


def _directory(image: PeFile, index: int) -> tuple[int, int]:
    """``(address, size)`` of a data directory; (0, 0) where the header has none."""
    dirs = image.optional.directories if image.optional is not None else ()
    return dirs[index] if index < len(dirs) else (0, 0)


def checksum(data: Buffer, checksum_offset: int) -> int:
    """The PE image checksum (``CheckSumMappedFile``'s): the file's 16-bit little-endian words
    added with end-around carry (a one's-complement sum: the sum modulo 0xFFFF, 0xFFFF for a
    non-zero multiple), the CheckSum field read as zero, plus the file's length. Computed on
    the whole file as one integer (``2**16`` is 1 modulo 0xFFFF): no copy, no Python loop."""
    whole = int.from_bytes(data, "little")
    field = int.from_bytes(data[checksum_offset:checksum_offset + 4], "little")
    folded = (whole - (field & 0xFFFF) - (field >> 16)) % 0xFFFF
    if folded == 0 and whole - field * (1 << (8 * checksum_offset)):
        folded = 0xFFFF  # a one's-complement sum of words, not all zero, is never 0
    return folded + len(data)


def shrink(data: Buffer, image: PeFile, contents: dict[int, bytes],
           writes: Sequence[tuple[int, bytes]] = (), *, strip_signature: bool = False
           ) -> bytearray:
    """A copy of the image where the raw data of each section ``i`` in ``contents`` (0-based) is
    those bytes, padded to the file alignment and no longer than before; the sections' virtual
    layout (addresses, virtual sizes, the image size) stays as it was: the loader zero-fills a
    section past its raw data. The file data after a shrunk section moves down, and everything
    that holds a file offset follows: the section table, the debug directory's entries, the COFF
    symbol table's pointer; ``SizeOfInitializedData`` and a non-zero CheckSum are made anew.
    ``writes`` are ``(offset in the input, bytes)`` patched in after the move, outside the shrunk
    sections. An Authenticode signature (the certificate table) is refused, as a rewrite
    invalidates it, or with ``strip_signature`` left out (its directory entry zeroed)."""
    opt = image.optional
    if opt is None:
        raise UnsupportedError("a COFF object is not an image: its sections are not shrunk here")
    align = opt.file_alignment
    if not (0x200 <= align <= 0x10000 and align & (align - 1) == 0
            and opt.section_alignment >= 0x1000):
        raise UnsupportedError(f"file alignment {align:#x}, section alignment "
                               f"{opt.section_alignment:#x}: only images whose file data can "
                               "move (file alignment a power of two from 0x200 to 0x10000, "
                               "section alignment at least 0x1000) are rewritten")
    optional_at = image.header_offset + ImageFileHeader.FORMAT.size
    cert_at, cert_size = _directory(image, IMAGE_DIRECTORY_ENTRY_SECURITY)
    end = len(data)
    if cert_size:
        if not strip_signature:
            raise UnsupportedError("the file is Authenticode-signed: any rewrite invalidates "
                                   "the signature (strip it to go on, and sign the output anew)")
        (flags,) = struct.unpack_from("<H", data, optional_at + _DLL_CHARACTERISTICS_AT)
        if flags & IMAGE_DLLCHARACTERISTICS_FORCE_INTEGRITY:
            raise UnsupportedError("the image requires a valid signature to load "
                                   "(FORCE_INTEGRITY): it cannot go unsigned")
        if cert_at + cert_size != end or cert_at < max(s.offset + s.header.size_of_raw_data
                                                      for s in image.sections):
            raise UnsupportedError("the certificate table is not at the end of the file: it "
                                   "cannot be left out safely")
        end = cert_at
    moves: list[tuple[int, int, int]] = []  # (old start, old end, shift) of kept file ranges
    pieces: list[bytes | memoryview] = []
    shift = 0
    at = 0
    new_raw: dict[int, int] = {}
    for i, s in sorted(((i, s) for i, s in enumerate(image.sections) if i in contents),
                       key=lambda p: p[1].offset):
        h = s.header
        raw = -(-len(contents[i]) // align) * align
        if len(contents[i]) > s.size or h.pointer_to_raw_data % align or \
                h.size_of_raw_data % align:
            raise UnsupportedError(f"section {s.name}: {len(contents[i])} bytes for its "
                                   f"{s.size}, raw data at {h.pointer_to_raw_data:#x} of "
                                   f"{h.size_of_raw_data:#x} bytes: not shrunk (it cannot "
                                   "grow, and its raw data must follow the file alignment)")
        if s.offset < at or any(
                o is not s and o.header.size_of_raw_data and o.offset < s.offset + s.size
                and s.offset < o.offset + o.header.size_of_raw_data for o in image.sections):
            raise UnsupportedError(f"section {s.name}'s raw data overlaps another section's")
        pieces += [memoryview(data)[at:s.offset], contents[i], bytes(raw - len(contents[i]))]
        moves += [(at, s.offset, shift), (s.offset, s.offset + raw, shift)]
        shift -= h.size_of_raw_data - raw
        at = s.offset + h.size_of_raw_data
        new_raw[i] = raw
    pieces.append(memoryview(data)[at:end])
    moves.append((at, end, shift))
    out = bytearray().join(pieces)

    def moved(offset: int) -> int:
        for lo, hi, d in moves:
            if lo <= offset < hi or offset == hi == end:
                return offset + d
        raise UnsupportedError(f"file offset {offset:#x} lies in the part of a section that is "
                               "cut out")

    table = image.header_offset + ImageFileHeader.FORMAT.size + image.file.size_of_optional_header
    for i, s in enumerate(image.sections):
        h = s.header
        if not h.size_of_raw_data:
            continue  # no file data: nothing to move (a stale pointer stays as it was)
        raw = new_raw.get(i, h.size_of_raw_data)
        new = dataclasses.replace(
            h, size_of_raw_data=raw, pointer_to_raw_data=moved(h.pointer_to_raw_data) if raw else 0,
            # the loader takes the raw size for a virtual size of 0: the old one keeps the layout
            virtual_size=h.virtual_size or (h.size_of_raw_data if i in new_raw else 0),
            pointer_to_relocations=moved(h.pointer_to_relocations)
            if h.pointer_to_relocations else 0,
            pointer_to_linenumbers=moved(h.pointer_to_linenumbers)
            if h.pointer_to_linenumbers else 0)
        at = table + i * ImageSectionHeader.FORMAT.size
        out[at:at + ImageSectionHeader.FORMAT.size] = new.pack()
    if image.file.pointer_to_symbol_table:
        struct.pack_into("<I", out, image.header_offset + 8,
                         moved(image.file.pointer_to_symbol_table))
    cut = sum(s.header.size_of_raw_data - new_raw[i] for i, s in enumerate(image.sections)
              if i in new_raw and s.header.characteristics & IMAGE_SCN_CNT_INITIALIZED_DATA)
    (initialised,) = struct.unpack_from("<I", out, optional_at + _SIZE_OF_INITIALIZED_DATA_AT)
    struct.pack_into("<I", out, optional_at + _SIZE_OF_INITIALIZED_DATA_AT,
                     max(0, initialised - cut))
    rva, size = _directory(image, IMAGE_DIRECTORY_ENTRY_DEBUG)
    if size:
        at_old = rva_offset(image, rva, size)
        if at_old is None:
            raise UnsupportedError("the debug directory is not in a section's data")
        at_new = moved(at_old)
        for k in range(size // _DEBUG_DIRECTORY.size):
            entry = list(_DEBUG_DIRECTORY.unpack_from(out, at_new + k * _DEBUG_DIRECTORY.size))
            if entry[7]:  # PointerToRawData
                entry[7] = moved(entry[7])
                _DEBUG_DIRECTORY.pack_into(out, at_new + k * _DEBUG_DIRECTORY.size, *entry)
    if cert_size:  # the signature left out: no certificate table
        directory_at = optional_at + (96 if opt.magic == PE32 else 112)
        struct.pack_into("<II", out, directory_at + 8 * IMAGE_DIRECTORY_ENTRY_SECURITY, 0, 0)
    for offset, patch in writes:
        to = moved(offset)
        out[to:to + len(patch)] = patch
    if opt.checksum:
        struct.pack_into("<I", out, optional_at + _CHECKSUM_AT,
                         checksum(out, optional_at + _CHECKSUM_AT))
    return out
