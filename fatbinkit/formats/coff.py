"""Write COFF relocatable objects (Windows x64 and arm64) that embed blobs in ``.rdata``, with no
toolchain: the Windows counterpart of :mod:`fatbinkit.formats.elf_writer`, with its API.

The object has one section, ``.rdata`` (initialized data, read-only, aligned to the largest blob
alignment and at least 8), holding every blob at its own alignment and, after the last one, one
8-byte little-endian size per blob. Each blob gets three external symbols, all defined in
``.rdata``: ``__<name>_start`` and ``__<name>_end`` (style ``"aoti"``) or ld's
``_binary_<mangled>_start``/``_end`` (style ``"ld"``), and ``..._size``, the address of its size.
C reads them as::

    extern const unsigned char __k_start[], __k_end[];
    extern const unsigned long long __k_size;   /* a value, not an address */

``_size`` is a data symbol, not the absolute symbol (section number ``IMAGE_SYM_ABSOLUTE``, value
the size) that ELF objects and ``objcopy -I binary -O pe-x86-64`` use: MSVC and clang-cl address
an ``extern`` array with a 32-bit RIP-relative ``lea``, which cannot reach an absolute address
near 0 from an image at 0x140000000; GNU ld refuses the link ("relocation truncated to fit") and
lld-link writes a wrong value without a word (``tests/test_coff.py`` shows both).

The header has no time stamp (``TimeDateStamp`` 0) and the tables follow the input order, so the
same blobs give the same bytes. Blobs are written as the ELF writer writes them (each file opened
once, big ones streamed), then the size table and the symbol and string tables, then the headers
over the room left for them at the start.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from ..errors import InvalidArgumentError
from ..infile import Content, FilePath, as_path
from ..outfile import atomic_path
from .elf_writer import (
    DEFAULT_ALIGN,
    HIP_FATBIN_SECTION,
    HIP_WRAPPER_SYMBOL,
    Blob,
    Style,
    _bundle_bytes,
    _check,
    _Checked,
    _machine,
    _Output,
    _put_blobs,
)
from .offload_bundle import BUNDLE_ALIGNMENT
from .pe import (
    IMAGE_FILE_MACHINE_AMD64,
    IMAGE_FILE_MACHINE_ARM64,
    IMAGE_SCN_CNT_INITIALIZED_DATA,
    IMAGE_SCN_MEM_READ,
    IMAGE_SYM_CLASS_EXTERNAL,
    ImageFileHeader,
    ImageSectionHeader,
    ImageSymbol,
)
from .wrapper import HIP_WRAPPER_MAGIC, HIP_WRAPPER_SECTION, HIP_WRAPPER_VERSION, HipWrapper

__all__ = [
    "MACHINES",
    "MAX_ALIGN",
    "align_flag",
    "hip_object_bytes",
    "object_bytes",
    "write_hip_object",
    "write_object",
]

#: Machines this writer targets, by the names ``uname -m`` uses (as :mod:`.elf_writer`'s).
MACHINES: dict[str, int] = {"x86_64": IMAGE_FILE_MACHINE_AMD64, "aarch64": IMAGE_FILE_MACHINE_ARM64}
#: The largest section alignment COFF can state (``IMAGE_SCN_ALIGN_8192BYTES``).
MAX_ALIGN = 8192


_HEADERS = ImageFileHeader.FORMAT.size + ImageSectionHeader.FORMAT.size  # then the section's data
_SIZE = 8  # bytes of one blob's size in the table (``unsigned long long``)
_THREE = struct.Struct("<" + ImageSymbol.FORMAT.format.lstrip("<") * 3)  # a blob's three symbols
_LIMIT = 0xFFFF_FFFF  # section sizes and file offsets are 32-bit


def align_flag(align: int) -> int:
    """``IMAGE_SCN_ALIGN_<align>BYTES``: a power of two from 1 to :data:`MAX_ALIGN`."""
    return align.bit_length() << 20


def _head_tail(
    checked: Sequence[_Checked],
    offsets: Sequence[int],
    sizes: Sequence[int],
    section_align: int,
    machine: int,
) -> tuple[bytes, bytes]:
    """The headers (before the blobs) and what follows them: padding, the size table, the
    symbol table and the string table."""
    end = offsets[-1] + sizes[-1]
    table = (end + _SIZE - 1) & -_SIZE
    section_size = table + _SIZE * len(sizes)
    strings = bytearray(4)  # the string table: its size, then the names longer than 8 bytes
    rows = []
    external = IMAGE_SYM_CLASS_EXTERNAL
    for i, (entry, offset, size) in enumerate(zip(checked, offsets, sizes, strict=True)):
        fields = []
        for symbol in entry.symbols:
            name = symbol.encode("ascii")
            if len(name) > 8:
                fields.append(b"\0\0\0\0" + len(strings).to_bytes(4, "little"))
                strings += name + b"\0"
            else:
                fields.append(name)
        start, stop, size_at = fields
        rows.append(_THREE.pack(
            start, offset, 1, 0, external, 0,
            stop, offset + size, 1, 0, external, 0,
            size_at, table + _SIZE * i, 1, 0, external, 0,
        ))  # fmt: skip
    strings[:4] = len(strings).to_bytes(4, "little")
    section = ImageSectionHeader(
        b".rdata", 0, 0, section_size, _HEADERS, 0, 0, 0, 0,
        IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ | align_flag(section_align),
    )  # fmt: skip
    header = ImageFileHeader(machine, 1, 0, _HEADERS + section_size, 3 * len(rows), 0, 0)
    tail = b"".join((
        bytes(table - end),
        struct.pack(f"<{len(sizes)}Q", *sizes),
        *rows,
        strings,
    ))  # fmt: skip
    return header.pack() + section.pack(), tail


def _prepare(
    blobs: Iterable[Blob], machine: str | None, style: Style, align: int
) -> tuple[list[_Checked], int, int]:
    """Validated blobs, the section alignment and the COFF machine code."""
    code = _machine(machine, MACHINES)
    checked, section_align = _check(blobs, style, align, MAX_ALIGN)
    return checked, max(section_align, _SIZE), code


def _emit(file: BinaryIO, checked: list[_Checked], section_align: int, machine: int) -> None:
    """Write the object to ``file``: room for the headers, the blobs, the tables, the headers."""
    out = _Output(file)
    out.put(bytes(_HEADERS))
    # the size table and the symbol table's 32-bit offset must fit behind the last blob
    limit = (_LIMIT - _HEADERS - _SIZE * len(checked)) & -_SIZE
    offsets, sizes = _put_blobs(out, checked, limit)
    head, tail = _head_tail(checked, offsets, sizes, section_align, machine)
    out.put(tail)
    out.rewrite_start(head)


def object_bytes(
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> bytes:
    """The COFF object embedding ``blobs``, in memory (see :func:`write_object`)."""
    checked, section_align, code = _prepare(blobs, machine, style, align)
    buffer = io.BytesIO()
    _emit(buffer, checked, section_align, code)
    return buffer.getvalue()


def write_object(
    path: FilePath,
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> None:
    """Write a COFF object embedding ``blobs`` to ``path``, atomically.

    ``machine`` is a key of :data:`MACHINES` (default: the host's); ``align`` applies to blobs
    without their own, a power of two up to :data:`MAX_ALIGN`. Names and alignments are checked
    before the output is created; any later failure (an unreadable input, more than 4 GiB of
    blobs, a full disk) leaves no file behind.
    """
    path = as_path(path, "write_object() output")
    checked, section_align, code = _prepare(blobs, machine, style, align)
    with atomic_path(path) as tmp, open(tmp, "r+b", buffering=0) as file:
        _emit(file, checked, section_align, code)


#: the 64-bit address relocation clang writes at a HIP record's ``binary`` slot, per machine
#: (``IMAGE_REL_AMD64_ADDR64``, ``IMAGE_REL_ARM64_ADDR64``)
_ADDR64 = {IMAGE_FILE_MACHINE_AMD64: 0x1, IMAGE_FILE_MACHINE_ARM64: 0xE}
_IMAGE_SYM_CLASS_STATIC = 3
_RELOCATION = struct.Struct("<IIH")  # IMAGE_RELOCATION: VirtualAddress, SymbolTableIndex, Type
_AUX_SECTION = struct.Struct("<IHHIHB3x")  # IMAGE_AUX_SYMBOL's section definition


def hip_object_bytes(bundles: Sequence[Content | FilePath], *,
                     machine: str | None = None) -> bytes:
    """A COFF object holding ``bundles`` as clang's HIP codegen does for a Windows target
    (``clang -x hip --target=x86_64-pc-windows-msvc -c``), the counterpart of
    :func:`fatbinkit.formats.elf_writer.hip_object_bytes`:

    - ``.hip_fatbin`` (initialized data, read, ``IMAGE_SCN_ALIGN_4096BYTES``): the bundles,
      each at a multiple of 4096;
    - ``.hipFatBinSegment`` (initialized data, read, 8-byte aligned, as clang marks it): one
      24-byte ``HIPF`` version 1 record per bundle, its ``binary`` slot holding the bundle's
      offset and relocated (``IMAGE_REL_AMD64_ADDR64``, ``IMAGE_REL_ARM64_ADDR64``) against
      ``.hip_fatbin``'s section symbol; a static ``__hip_fatbin_wrapper`` on each record.

    Both names are longer than 8 bytes, so they are stored in the string table (``/<offset>``);
    a linked image truncates them to ``.hip_fat`` and ``.hipFatB``. As in the ELF object there
    is no module constructor. No time stamp: the same bundles give the same bytes.
    """
    code = _machine(machine, MACHINES)
    if not bundles:
        raise InvalidArgumentError("no bundles to embed")
    datas = [_bundle_bytes(n, b) for n, b in enumerate(bundles)]
    offsets: list[int] = []
    cursor = 0
    for data in datas:
        cursor = (cursor + BUNDLE_ALIGNMENT - 1) & -BUNDLE_ALIGNMENT
        offsets.append(cursor)
        cursor += len(data)
    fatbin = bytearray(cursor)
    for data, offset in zip(datas, offsets, strict=True):
        fatbin[offset:offset + len(data)] = data
    records = b"".join(HipWrapper(HIP_WRAPPER_MAGIC, HIP_WRAPPER_VERSION, offset, 0).pack()
                       for offset in offsets)  # the relocation's addend is stored in place
    relocations = b"".join(
        _RELOCATION.pack(n * HipWrapper.FORMAT.size + HipWrapper.BINARY_OFFSET, 0, _ADDR64[code])
        for n in range(len(datas)))  # symbol 0: .hip_fatbin's section symbol

    strings = bytearray(4)

    def name(text: str) -> int:
        at = len(strings)
        strings.extend(text.encode("ascii") + b"\0")
        return at

    fatbin_name, segment_name = name(HIP_FATBIN_SECTION), name(HIP_WRAPPER_SECTION)
    wrapper_name = name(HIP_WRAPPER_SYMBOL)
    data_at = _HEADERS + ImageSectionHeader.FORMAT.size
    segment_at = data_at + len(fatbin)
    relocations_at = segment_at + len(records)
    symbols_at = relocations_at + len(relocations)
    if symbols_at > _LIMIT:
        raise InvalidArgumentError(f"{len(fatbin)} bytes of bundles do not fit a COFF object's "
                                   "32-bit offsets")
    read = IMAGE_SCN_CNT_INITIALIZED_DATA | IMAGE_SCN_MEM_READ
    sections = [
        ImageSectionHeader(f"/{fatbin_name}".encode(), 0, 0, len(fatbin), data_at, 0, 0, 0, 0,
                           read | align_flag(BUNDLE_ALIGNMENT)),
        ImageSectionHeader(f"/{segment_name}".encode(), 0, 0, len(records), segment_at,
                           relocations_at, 0, len(datas), 0, read | align_flag(8)),
    ]
    long_name = b"\0\0\0\0" + wrapper_name.to_bytes(4, "little")
    sym = ImageSymbol.FORMAT.pack
    rows = [
        sym(b"\0\0\0\0" + fatbin_name.to_bytes(4, "little"), 0, 1, 0,
            _IMAGE_SYM_CLASS_STATIC, 1),
        _AUX_SECTION.pack(len(fatbin), 0, 0, 0, 1, 0),
        sym(b"\0\0\0\0" + segment_name.to_bytes(4, "little"), 0, 2, 0,
            _IMAGE_SYM_CLASS_STATIC, 1),
        _AUX_SECTION.pack(len(records), len(datas), 0, 0, 2, 0),
        *(sym(long_name, n * HipWrapper.FORMAT.size, 2, 0, _IMAGE_SYM_CLASS_STATIC, 0)
          for n in range(len(datas))),
    ]
    strings[:4] = len(strings).to_bytes(4, "little")
    header = ImageFileHeader(code, len(sections), 0, symbols_at, len(rows), 0, 0)
    return b"".join((header.pack(), *(s.pack() for s in sections), fatbin, records, relocations,
                     *rows, strings))


def write_hip_object(path: FilePath, bundles: Sequence[Content | FilePath], *,
                     machine: str | None = None) -> None:
    """Write :func:`hip_object_bytes` to ``path``, atomically (nothing is left on failure)."""
    path = as_path(path, "write_hip_object() output")
    data = hip_object_bytes(bundles, machine=machine)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
