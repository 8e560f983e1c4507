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

from ..infile import FilePath, as_path
from ..outfile import atomic_path
from .elf_writer import (
    DEFAULT_ALIGN,
    Blob,
    Style,
    _check,
    _Checked,
    _machine,
    _Output,
    _put_blobs,
)
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

__all__ = [
    "MACHINES",
    "MAX_ALIGN",
    "align_flag",
    "object_bytes",
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
