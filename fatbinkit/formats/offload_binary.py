"""LLVM's OffloadBinary: the device images of clang's new offload driver (``.llvm.offloading``).

Layout from ``llvm/include/llvm/Object/OffloadBinary.h`` and ``llvm/lib/Object/
OffloadBinary.cpp`` (``extractHeader``, ``create``, ``write``), all little-endian:

* header: magic ``10 FF 10 AD``, ``u32 version``, ``u64 size`` (the whole blob), ``u64
  entries offset``, then a ``u64`` that is the entry size (40) in version 1, whose blob holds
  one entry, and the entry count from version 2 on; version 3 adds ``u64 inflated size``
  (40-byte header), non-zero when what follows the header is compressed;
* entry (40 bytes): ``u16 image kind, u16 offload kind, u32 flags, u64 string offset, u64
  string count, u64 image offset, u64 image size``;
* string entry: ``{u64 key offset, u64 value offset}`` to NUL-terminated strings in version 1
  (``StringEntryV1``), plus ``u64 value size`` from version 2 (``StringEntry``).

Offsets are from the blob's start. A section holds blobs back to back, each padded to 8
(``extractOffloadFiles``). The offload kind changed encoding while the format stayed at version
1: LLVM up to 20 numbered it (none 0, OpenMP 1, CUDA 2, HIP 3), LLVM 21 made it a bit mask
(llvm/llvm-project PR #135809: OpenMP 1, CUDA 2, HIP 4, SYCL 8). The values differ only for HIP,
so :func:`offload_kind_name` reads 3 as HIP in version 1 and as a mask afterwards.

A compressed version 3 blob (``decompressOffloadBinary``) keeps its header and compresses the
rest, zstd if it starts with zstd's magic, else zlib; it inflates, through
:mod:`~fatbinkit.formats.codec` and a :class:`~fatbinkit.formats.codec.DecompressionBudget`,
to ``inflated size - entries offset`` bytes, after which the offsets apply.
"""

from __future__ import annotations

import enum
import mmap
import re
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import (
    DecompressionError,
    FormatError,
    InvalidArgumentError,
    TruncatedError,
    UnsupportedError,
)
from .codec import MAX_DATA_SIZE, DecompressionBudget, decompress
from .elf import Buffer

__all__ = [
    "OFFLOADING_SECTION",
    "OFFLOAD_BINARY_ALIGNMENT",
    "OFFLOAD_BINARY_MAGIC",
    "OFFLOAD_BINARY_VERSIONS",
    "SHT_LLVM_OFFLOADING",
    "ImageKind",
    "OffloadBinary",
    "OffloadBinaryHeader",
    "OffloadEntry",
    "image_kind_name",
    "is_offload_binary",
    "offload_kind_name",
    "read_offload_binaries",
]

OFFLOAD_BINARY_MAGIC = b"\x10\xff\x10\xad"
#: every blob starts at a multiple of 8 (``OffloadBinary::getAlignment``)
OFFLOAD_BINARY_ALIGNMENT = 8
#: the versions this reader knows (``OffloadBinary::Version`` is 3)
OFFLOAD_BINARY_VERSIONS = (1, 2, 3)
#: the ELF section of the blobs and its type (``llvm/BinaryFormat/ELF.h``)
OFFLOADING_SECTION = ".llvm.offloading"
SHT_LLVM_OFFLOADING = 0x6FFF4C0B

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_NUL = re.compile(b"\0")


class ImageKind(enum.IntEnum):
    """``llvm::object::ImageKind``; other values are kept as plain ints."""

    NONE = 0
    OBJECT = 1
    BITCODE = 2
    CUBIN = 3
    FATBINARY = 4
    PTX = 5
    SPIRV = 6


# llvm-objdump's names (OffloadDump.cpp, getImageName), and SPIR-V, which it prints as <none>
_IMAGE_NAMES = {1: "elf", 2: "llvm ir", 3: "cubin", 4: "fatbinary", 5: "ptx", 6: "spir-v"}
_KIND_BITS = {1: "openmp", 2: "cuda", 4: "hip", 8: "sycl"}  # OFK_* from LLVM 21
_KIND_V1 = {1: "openmp", 2: "cuda", 3: "hip", 4: "hip", 8: "sycl"}  # LLVM <= 20, and 21's mask


def image_kind_name(kind: int) -> str:
    """``llvm-objdump --offloading``'s name of an image kind (``<none>`` when unknown)."""
    return _IMAGE_NAMES.get(kind, "<none>")


def offload_kind_name(kind: int, version: int) -> str:
    """The producer (``getOffloadKindName``): ``hip``, ``openmp``, ``cuda``, ``sycl``,
    ``none``, names joined by ``+`` for a mask of several, ``unknown(0x..)`` otherwise."""
    if kind == 0:
        return "none"
    if version == 1 and kind in _KIND_V1:
        return _KIND_V1[kind]
    if kind & ~sum(_KIND_BITS):
        return f"unknown({kind:#x})"
    return "+".join(name for bit, name in _KIND_BITS.items() if kind & bit)


@dataclass(frozen=True)
class OffloadBinaryHeader:
    """The blob header, as stored. ``entries_word`` is the entry size (40) in version 1 and the
    entry count afterwards (:attr:`entries_count`); ``inflated_size`` is 0 before version 3."""

    V1: ClassVar[struct.Struct] = struct.Struct("<4sIQQQ")  # versions 1 and 2: 32 bytes
    V3: ClassVar[struct.Struct] = struct.Struct("<4sIQQQQ")  # version 3: 40 bytes

    magic: bytes
    version: int
    size: int
    entries_offset: int
    entries_word: int
    inflated_size: int = 0

    @property
    def header_size(self) -> int:
        return (self.V3 if self.version >= 3 else self.V1).size

    @property
    def entries_count(self) -> int:
        return 1 if self.version == 1 else self.entries_word

    @property
    def compressed(self) -> bool:
        """Version 3 with an inflated size (``isCompressed``)."""
        return self.version >= 3 and self.inflated_size != 0

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> OffloadBinaryHeader:
        """Parse the header at the start of ``raw`` (the blob's bytes to the region's end);
        ``offset`` locates it in error messages."""
        if len(raw) < cls.V1.size:
            raise TruncatedError(f"offload binary header needs {cls.V1.size} bytes, only "
                                 f"{len(raw)} left", offset=offset)
        magic, version, *rest = cls.V1.unpack_from(raw, 0)
        if magic != OFFLOAD_BINARY_MAGIC:
            raise FormatError(f"bad offload binary magic {bytes(magic).hex()}", offset=offset)
        if version == 0:
            raise FormatError("offload binary version 0", offset=offset)
        if version not in OFFLOAD_BINARY_VERSIONS:
            raise UnsupportedError(f"offload binary version {version} at {offset:#x} is newer "
                                   f"than this reader knows ({OFFLOAD_BINARY_VERSIONS[-1]})")
        if version < 3:
            return cls(magic, version, *rest)
        if len(raw) < cls.V3.size:
            raise TruncatedError(f"offload binary v3 header needs {cls.V3.size} bytes, only "
                                 f"{len(raw)} left", offset=offset)
        return cls(*cls.V3.unpack_from(raw, 0))

    def pack(self) -> bytes:
        if self.version >= 3:
            return self.V3.pack(self.magic, self.version, self.size, self.entries_offset,
                                self.entries_word, self.inflated_size)
        return self.V1.pack(self.magic, self.version, self.size, self.entries_offset,
                            self.entries_word)


@dataclass(frozen=True)
class OffloadEntry:
    """One 40-byte entry record (``OffloadBinary::Entry``), every field raw."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<HHIQQQQ")

    image_kind: int
    offload_kind: int
    flags: int
    string_offset: int
    string_count: int
    image_offset: int
    image_size: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.image_kind, self.offload_kind, self.flags,
                                self.string_offset, self.string_count, self.image_offset,
                                self.image_size)


_STRING_V1 = struct.Struct("<QQ")  # StringEntryV1: key offset, value offset
_STRING = struct.Struct("<QQQ")  # StringEntry: ..., value size


@dataclass(frozen=True)
class OffloadBinary:
    """One image of a blob, as LLVM's ``OffloadBinary::create`` returns one per entry.

    ``offset`` is where the blob starts in the input, ``index`` the entry's place in it;
    ``strings`` its key/value map (``triple``, ``arch``...); ``image`` a view of the input, or
    of the inflated bytes of a compressed blob.
    """

    offset: int
    header: OffloadBinaryHeader
    index: int
    entry: OffloadEntry
    strings: dict[str, str] = field(hash=False)
    image: memoryview = field(repr=False, compare=False)

    @property
    def version(self) -> int:
        return self.header.version

    @property
    def image_kind(self) -> str:
        return image_kind_name(self.entry.image_kind)

    @property
    def offload_kind(self) -> str:
        return offload_kind_name(self.entry.offload_kind, self.header.version)

    @property
    def triple(self) -> str:
        return self.strings.get("triple", "")

    @property
    def arch(self) -> str:
        return self.strings.get("arch", "")

    def __str__(self) -> str:
        packed = ", compressed" if self.header.compressed else ""
        return (f"offload binary v{self.version} at {self.offset:#x} [{self.index}]: "
                f"{self.image_kind}, {self.arch or '-'}, {self.triple or '-'}, producer "
                f"{self.offload_kind}, {len(self.image)} bytes{packed}")


def _view(buf: Buffer | mmap.mmap) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def is_offload_binary(buf: Buffer | mmap.mmap, offset: int = 0) -> bool:
    """Whether an OffloadBinary's magic is at ``offset``."""
    return _view(buf)[offset:offset + 4] == OFFLOAD_BINARY_MAGIC


def _inflate(blob: memoryview, header: OffloadBinaryHeader, at: int,
             budget: DecompressionBudget) -> memoryview:
    """The blob with its body inflated (``decompressOffloadBinary``)."""
    if not header.header_size <= header.entries_offset <= header.size:
        raise FormatError(f"compressed offload binary: entries offset {header.entries_offset} "
                          f"outside {header.header_size}..{header.size}", offset=at)
    if header.inflated_size < header.entries_offset:
        raise FormatError(f"compressed offload binary: inflated size {header.inflated_size} "
                          f"below its entries offset {header.entries_offset}", offset=at)
    expected = header.inflated_size - header.entries_offset
    if expected > MAX_DATA_SIZE:
        raise DecompressionError(f"offload binary records an inflated size of {expected} "
                                 f"bytes, above the limit of {MAX_DATA_SIZE}", offset=at)
    budget.charge(expected, at)
    body = blob[header.entries_offset:header.size]
    codec = "zstd" if body[:4] == _ZSTD_MAGIC else "zlib"
    try:
        inflated = decompress(codec, body, expected, at)
    except DecompressionError:
        raise
    except Exception as e:  # the codec libraries raise their own, unrelated types
        raise DecompressionError(f"corrupt {codec} offload binary body: {e}", offset=at) from e
    if len(inflated) != expected:
        more = "+" if len(inflated) > expected else ""
        raise DecompressionError(f"{codec} offload binary body inflates to {len(inflated)}"
                                 f"{more} bytes, header records {expected}", offset=at)
    return memoryview(bytes(blob[:header.entries_offset]) + inflated)


def _string(blob: memoryview, start: int, size: int | None, what: str, at: int) -> str:
    """The string at ``start``: ``size`` bytes, or up to its NUL (``size`` None)."""
    if size is None:
        nul = _NUL.search(blob, start) if start < len(blob) else None
        if nul is None:
            raise TruncatedError(f"{what} at {start:#x} has no NUL before the blob's end",
                                 offset=at)
        size = nul.start() - start
    elif start > len(blob) or size > len(blob) - start:
        raise TruncatedError(f"{what} ({size} bytes at {start:#x}) runs past the "
                             f"{len(blob)}-byte blob", offset=at)
    try:
        return bytes(blob[start:start + size]).decode()
    except UnicodeDecodeError as e:
        raise FormatError(f"{what} at {start:#x} is not UTF-8: {e}", offset=at) from e


def _read_blob(view: memoryview, at: int, end: int,
               budget: DecompressionBudget) -> tuple[list[OffloadBinary], int]:
    """The images of the blob at ``view[at:end]`` and the blob's stored size."""
    header = OffloadBinaryHeader.unpack(view[at:end], at)
    if not header.header_size <= header.size <= end - at:
        raise TruncatedError(f"offload binary records {header.size} bytes (header "
                             f"{header.header_size}), {end - at} left", offset=at)
    blob = view[at:at + header.size]
    if header.compressed:
        blob = _inflate(blob, header, at, budget)
    count, entries_at = header.entries_count, header.entries_offset
    table = OffloadEntry.FORMAT.size
    if entries_at < header.header_size or count > (len(blob) - min(entries_at, len(blob))) // table:
        raise TruncatedError(f"offload binary: {count} entries at {entries_at:#x} do not fit "
                             f"its {len(blob)} bytes after the {header.header_size}-byte header",
                             offset=at)
    pair = _STRING_V1 if header.version == 1 else _STRING
    images: list[OffloadBinary] = []
    for index in range(count):
        entry = OffloadEntry(*OffloadEntry.FORMAT.unpack_from(blob, entries_at + index * table))
        where = f"entry {index}"
        start, n = entry.string_offset, entry.string_count
        if start > len(blob) or n > (len(blob) - start) // pair.size:
            raise TruncatedError(f"{where}: {n} strings at {start:#x} run past the "
                                 f"{len(blob)}-byte blob", offset=at)
        if (entry.image_offset > len(blob)
                or entry.image_size > len(blob) - entry.image_offset):
            raise TruncatedError(f"{where}: image ({entry.image_size} bytes at "
                                 f"{entry.image_offset:#x}) runs past the {len(blob)}-byte blob",
                                 offset=at)
        strings: dict[str, str] = {}
        for i in range(n):
            key_at, value_at, *size = pair.unpack_from(blob, start + i * pair.size)
            key = _string(blob, key_at, None, f"{where} key {i}", at)
            strings[key] = _string(blob, value_at, size[0] if size else None,
                                   f"{where} value {key!r}", at)
        image = blob[entry.image_offset:entry.image_offset + entry.image_size]
        images.append(OffloadBinary(at, header, index, entry, strings, image))
    return images, header.size


def read_offload_binaries(
    buf: Buffer | mmap.mmap,
    start: int = 0,
    end: int | None = None,
    *,
    budget: DecompressionBudget | None = None,
) -> list[OffloadBinary]:
    """Every image of the blobs in ``buf[start:end]`` (a ``.llvm.offloading`` section, or an
    OffloadBinary file): blob after blob, each at the previous one's end rounded up to 8 from
    ``start``, as ``extractOffloadFiles`` walks them. Compressed blobs inflate within
    ``budget`` (by default :meth:`DecompressionBudget.for_input` of the region)."""
    view = _view(buf)
    stop = len(view) if end is None else end
    if not 0 <= start <= stop <= len(view):
        raise InvalidArgumentError(f"region {start:#x}..{stop:#x} is not inside the "
                                   f"{len(view)}-byte input")
    if budget is None:
        budget = DecompressionBudget.for_input(stop - start)
    images: list[OffloadBinary] = []
    pos = start
    while pos < stop:
        found, size = _read_blob(view, pos, stop, budget)
        images += found
        pos += -(-size // OFFLOAD_BINARY_ALIGNMENT) * OFFLOAD_BINARY_ALIGNMENT
    return images
