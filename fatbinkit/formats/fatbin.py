"""NVIDIA fatbin containers: read, round-trip and write them without any NVIDIA tool.

A fatbin is a sequence of containers (16-byte header, magic ``0xBA55ED50``), each holding entries
(a 64-byte header, an identifier/options area, then the payload: a cubin, NUL-terminated PTX, or
LTO-IR, optionally LZ4- or zstd-compressed). Each on-disk record is one :class:`struct.Struct`
plus a frozen dataclass, used both to parse and to pack. Unknown kinds, flags and header words are
kept as raw integers and written back unchanged, so ``Fatbin.from_bytes(b).to_bytes() == b``.

Headers are parsed eagerly; payloads stay memoryviews into the caller's buffer (or mmap) and are
decompressed only by :meth:`FatbinEntry.data`, with size limits against decompression bombs
(:mod:`~fatbinkit.formats.codec`).
See ``docs/fatbin.md`` for the layout and what was verified against NVIDIA's tools.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import ClassVar, TypeVar

from ..errors import (
    DecompressionError,
    FormatError,
    InvalidArgumentError,
    TruncatedError,
)
from ..infile import as_content
from . import elf
from .arch import Arch
from .codec import (
    BUDGET_FLOOR,
    BUDGET_RATIO,
    COMPRESSIONS,
    DEFAULT_LEVELS,
    LEVELS,
    MAX_DATA_SIZE,
    decompress,
)

# DecompressionBudget and compress: re-exported for the modules and tests that import them from
# here; not in ``__all__``, which lists the classes and functions this module defines
from .codec import DecompressionBudget as DecompressionBudget
from .codec import compress as compress
from .elf import Buffer
from .reader import Reader as Reader

__all__ = [
    "ALIGN",
    "BUDGET_FLOOR",
    "BUDGET_RATIO",
    "COMPRESSIONS",
    "CONTAINER_HEADER_SIZE",
    "DEFAULT_LEVELS",
    "ENTRY_HEADER_SIZE",
    "ENTRY_VERSION",
    "FATBIN_MAGIC",
    "FATBIN_VERSION",
    "LEVELS",
    "MAX_DATA_SIZE",
    "OPTIONS_PAIR",
    "ContainerHeader",
    "EntryFlags",
    "EntryHeader",
    "EntryKind",
    "Fatbin",
    "FatbinContainer",
    "FatbinEntry",
    "align8",
    "build_fatbin",
    "container_entries",
    "entry_flags",
    "is_fatbin",
    "iter_container_entries",
    "iter_containers",
    "iter_entries",
    "kind_name",
    "make_entry",
]

FATBIN_MAGIC = 0xBA55ED50
FATBIN_VERSION = 1
_MAGIC_BYTES = FATBIN_MAGIC.to_bytes(4, "little")
ENTRY_VERSION = 0x0101
ALIGN = 8
_HEADER_READ = 256


class EntryKind(enum.IntEnum):
    """Payload kind of an entry; values not listed here are kept as plain ints."""

    PTX = 1
    ELF = 2
    LTOIR = 8


class EntryFlags(enum.IntFlag):
    """Entry flag bits; unknown bits are kept (``IntFlag`` preserves them)."""

    ADDR64 = 0x1
    DEBUG = 0x2
    PRODUCER_CUDA = 0x4
    PRODUCER_OPENCL = 0x8
    HOST_LINUX = 0x10
    HOST_MAC = 0x20
    HOST_WINDOWS = 0x40
    COMPRESSED_LZ4 = 0x2000
    COMPRESSED_ZSTD = 0x8000
    LTOIR_UNKNOWN = 0x10000
    ARCH_SPECIFIC = 0x100000
    FAMILY_SPECIFIC = 0x200000
    COMPAT = 0x1000000


# Plain int masks for the per-entry paths (listing thousands of entries): IntFlag arithmetic
# costs a microsecond per operation.
_LZ4, _ZSTD = int(EntryFlags.COMPRESSED_LZ4), int(EntryFlags.COMPRESSED_ZSTD)
_ARCH_SPECIFIC, _FAMILY_SPECIFIC = int(EntryFlags.ARCH_SPECIFIC), int(EntryFlags.FAMILY_SPECIFIC)
_COMPRESSION_FLAGS = {"lz4": EntryFlags.COMPRESSED_LZ4, "zstd": EntryFlags.COMPRESSED_ZSTD}


def align8(n: int) -> int:
    """Round ``n`` up to the fatbin alignment (8)."""
    return (n + ALIGN - 1) & ~(ALIGN - 1)


_R = TypeVar("_R")


def _record(cls: type[_R], names: tuple[str, ...], values: tuple[object, ...]) -> _R:
    """The frozen dataclass ``cls(*values)``, made without calling its ``__init__``.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``: 1.3 us for
    an entry header, a third of the time of listing a library's thousands of entries. Filling
    the instance ``__dict__`` directly gives the same value (equality, hash, repr) in half the
    time; it is used only where the parser has checked what ``__post_init__`` would.
    """
    obj = cls.__new__(cls)
    obj.__dict__.update(zip(names, values, strict=False))  # same lengths by construction
    return obj


def _need(raw: Buffer, size: int, what: str, at: int) -> None:
    if len(raw) < size:
        raise TruncatedError(f"{what} needs {size} bytes, only {len(raw)} left", offset=at)


@dataclass(frozen=True)
class ContainerHeader:
    """The 16-byte container header."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IHHQ")

    magic: int
    version: int
    header_size: int
    payload_size: int

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> ContainerHeader:
        """Parse ``raw`` (the header's bytes); ``offset`` locates it in error messages."""
        _need(raw, cls.FORMAT.size, "fatbin container header", offset)
        header = _record(cls, _CONTAINER_FIELDS, cls.FORMAT.unpack_from(raw, 0))
        if header.magic != FATBIN_MAGIC:
            raise FormatError(
                f"bad fatbin magic {header.magic:#010x} (expected {FATBIN_MAGIC:#010x})",
                offset=offset,
            )
        if header.header_size < cls.FORMAT.size:
            raise FormatError(
                f"fatbin container header size {header.header_size} < {cls.FORMAT.size}",
                offset=offset,
            )
        return header

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.magic, self.version, self.header_size, self.payload_size)


@dataclass(frozen=True)
class EntryHeader:
    """The fixed 64-byte part of an entry header, every field raw."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<HHIQIIHHIIIQQQ")

    kind: int
    version: int
    header_size: int
    size: int
    compressed_size: int
    options_offset: int
    minor: int
    major: int
    sm: int
    identifier_offset: int
    identifier_size: int
    flags: int
    reserved: int
    uncompressed_size: int

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> EntryHeader:
        """Parse ``raw`` (the header's bytes); ``offset`` locates it in error messages."""
        _need(raw, cls.FORMAT.size, "fatbin entry header", offset)
        return _record(cls, _ENTRY_FIELDS, cls.FORMAT.unpack_from(raw, 0))

    def __str__(self) -> str:
        """``ELF sm_90a entry header: 1024 bytes stored (lz4 of 4096), header 80 bytes``."""
        codec = ("zstd" if self.flags & _ZSTD else "lz4" if self.flags & _LZ4 else None)
        stored = f"{self.size} bytes stored" + (
            f" ({codec} of {self.uncompressed_size})" if codec else "")
        return f"{_entry_name(self)} entry header: {stored}, header {self.header_size} bytes"

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.kind, self.version, self.header_size, self.size, self.compressed_size,
            self.options_offset, self.minor, self.major, self.sm, self.identifier_offset,
            self.identifier_size, self.flags, self.reserved, self.uncompressed_size,
        )


def _entry_name(h: EntryHeader) -> str:
    """``ELF sm_90a``, ``PTX compute_90``, ``LTOIR lto_100f``, ``kind 7 sm_90``: what an entry
    header says, never raising (the SM number is not validated)."""
    suffix = "a" if h.flags & _ARCH_SPECIFIC else "f" if h.flags & _FAMILY_SPECIFIC else ""
    prefix = {int(EntryKind.PTX): "compute", int(EntryKind.LTOIR): "lto"}.get(h.kind, "sm")
    try:
        kind = EntryKind(h.kind).name
    except ValueError:
        kind = f"kind {h.kind}"
    return f"{kind} {prefix}_{h.sm}{suffix}"


def kind_name(kind: int) -> str:
    """``"elf"``, ``"ptx"``, ``"ltoir"``, or ``"kind_0x..."`` for unknown kinds."""
    try:
        return EntryKind(kind).name.lower()
    except ValueError:
        return f"kind_{kind:#x}"


def _names(entries: Sequence[FatbinEntry], shown: int = 6) -> str:
    names = [_entry_name(e.header) for e in entries[:shown]]
    more = f", ... ({len(entries)} entries)" if len(entries) > shown else ""
    return ", ".join(names) + more


OPTIONS_PAIR = struct.Struct("<II")
ENTRY_HEADER_SIZE = EntryHeader.FORMAT.size
CONTAINER_HEADER_SIZE = ContainerHeader.FORMAT.size
_CONTAINER_FIELDS = tuple(f.name for f in fields(ContainerHeader))
_ENTRY_FIELDS = tuple(f.name for f in fields(EntryHeader))


@dataclass(frozen=True)
class FatbinEntry:
    """One image in a fatbin container: its raw header, header tail and stored payload.

    ``extra`` is the header past the fixed 64 bytes (identifier, options pair and data), ``stored``
    the payload as stored (``header.size`` bytes, compressed and/or padded). ``offset`` is where
    the entry started in the parsed input (0 for built entries); it is not part of equality.
    """

    header: EntryHeader
    extra: bytes
    stored: Buffer = field(repr=False)
    offset: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        h = self.header
        at = self.offset
        if h.header_size < ENTRY_HEADER_SIZE:
            raise FormatError(f"entry header size {h.header_size} < {ENTRY_HEADER_SIZE}", offset=at)
        if len(self.extra) != h.header_size - ENTRY_HEADER_SIZE:
            raise FormatError("entry header tail does not match its header size", offset=at)
        if len(self.stored) != h.size:
            raise FormatError("entry payload does not match its recorded size", offset=at)
        self._check_fields()

    def __str__(self) -> str:
        """``ELF sm_90a at 0x50: 4096 bytes (lz4, 1024 stored), "k.cu"``."""
        h = self.header
        codec = self.compression
        size = (f"{h.uncompressed_size} bytes ({codec}, {h.size} stored)" if codec else
                f"{h.size} bytes")
        ident = f", {self.identifier!r}" if h.identifier_size else ""
        return f"{_entry_name(h)} at {self.offset:#x}: {size}{ident}"

    @property
    def name(self) -> str:
        """``ELF sm_90a``, ``PTX compute_90``: what the header says the image is."""
        return _entry_name(self.header)

    #: the vendor whose format this is (:attr:`fatbinkit.device_code.DeviceCode.vendor`)
    vendor: ClassVar[str] = "cuda"

    @property
    def image_kind(self) -> str:
        """``sass`` (cuobjdump's "ELF"), ``ptx``, ``ltoir`` or ``kind_0x..``: fatbinkit's word
        for the entry's kind (:attr:`fatbinkit.device_code.DeviceCode.kind`)."""
        return "sass" if self.header.kind == EntryKind.ELF else kind_name(self.header.kind)

    @property
    def target(self) -> str:
        """``compute_90a`` for PTX, ``sm_90a`` for every other kind: NVIDIA's names, with the
        header's ``a``/``f`` (:attr:`fatbinkit.device_code.DeviceCode.target`)."""
        return self.arch.compute if self.header.kind == EntryKind.PTX else self.arch.sm

    def detached(self) -> FatbinEntry:
        """This entry over a copy of its payload (``bytes``), checked again: what crosses a
        process boundary. ``ValueError`` where the view it holds was released."""
        return FatbinEntry(self.header, self.extra, bytes(self.stored), self.offset)

    def _check_fields(self) -> None:
        """The payload is not empty, the identifier and options lie inside the header, a
        compressed size inside the payload (the sizes themselves are checked by
        ``__post_init__`` or the parser)."""
        h = self.header
        at = self.offset
        if not h.size:  # cuobjdump refuses it too ("Invalid fatbin header"/"Invalid ELF"); it
            # also keeps a listing's memory from growing with entries that hold nothing
            raise FormatError("entry with an empty payload (0 bytes): not an image", offset=at)
        header_size = h.header_size
        if h.identifier_size and not (
            h.identifier_offset >= ENTRY_HEADER_SIZE
            and h.identifier_offset + h.identifier_size <= header_size
        ):
            raise FormatError(
                f"identifier [{h.identifier_offset:#x}, +{h.identifier_size}) lies outside the "
                f"{header_size}-byte entry header",
                offset=at,
            )
        if h.options_offset:
            if not (
                h.options_offset >= ENTRY_HEADER_SIZE
                and h.options_offset + OPTIONS_PAIR.size <= header_size
            ):
                raise FormatError(
                    f"options pair at {h.options_offset:#x} lies outside the {header_size}-byte "
                    "entry header",
                    offset=at,
                )
            start, size = self._options_pair()
            if size and not (start >= ENTRY_HEADER_SIZE and start + size <= header_size):
                raise FormatError(
                    f"options data [{start:#x}, +{size}) lies outside the {header_size}-byte "
                    "entry header",
                    offset=at,
                )
        if h.flags & (_ZSTD | _LZ4) and h.compressed_size > h.size:
            raise FormatError(
                f"compressed size {h.compressed_size} exceeds stored size {h.size}", offset=at
            )

    def _options_pair(self) -> tuple[int, int]:
        start: int
        size: int
        start, size = OPTIONS_PAIR.unpack_from(
            self.extra, self.header.options_offset - ENTRY_HEADER_SIZE
        )
        return start, size

    # -- decoded view -------------------------------------------------------------------------
    @property
    def kind(self) -> int:
        """:class:`EntryKind` when known, else the raw int."""
        try:
            return EntryKind(self.header.kind)
        except ValueError:
            return self.header.kind

    @property
    def flags(self) -> EntryFlags:
        return EntryFlags(self.header.flags)

    @property
    def arch(self) -> Arch:
        """SM number from the header, ``a``/``f`` from the flags."""
        flags = self.header.flags
        suffix = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
        try:
            return _arch(self.header.sm, suffix)
        except InvalidArgumentError as e:
            raise FormatError(
                f"entry SM number {self.header.sm} is not valid", offset=self.offset
            ) from e

    @property
    def code_version(self) -> tuple[int, int]:
        """``(major, minor)`` as cuobjdump prints it: PTX ISA version, or ``(1, ABI)`` for ELF."""
        return self.header.major, self.header.minor

    @property
    def identifier(self) -> str:
        h = self.header
        if not h.identifier_size:
            return ""
        start = h.identifier_offset - ENTRY_HEADER_SIZE
        return self.extra[start : start + h.identifier_size].decode("utf-8", "replace")

    @property
    def options_data(self) -> bytes:
        """The bytes the options pair points at: ptxas/NVVM options, or ``.nv.compat`` for ELF."""
        if not self.header.options_offset:
            return b""
        start, size = self._options_pair()
        if not size:  # CUDA 10/11 PTX headers: a pair (0, 0) after the fixed part
            return b""
        start -= ENTRY_HEADER_SIZE
        return self.extra[start : start + size]

    @property
    def options(self) -> str:
        """The ptxas (PTX) or NVVM (LTO-IR) options string; ``""`` for ELF entries."""
        if self.header.kind == EntryKind.ELF:
            return ""
        return self.options_data.split(b"\0", 1)[0].decode("utf-8", "replace")

    @property
    def compression(self) -> str | None:
        """``"lz4"``, ``"zstd"`` or ``None``."""
        flags = self.header.flags  # plain int masks: this runs for every entry listed
        if flags & _ZSTD:
            return "zstd"
        if flags & _LZ4:
            return "lz4"
        return None

    @property
    def size(self) -> int:
        """Stored payload size (padded to 8)."""
        return self.header.size

    @property
    def data_size(self) -> int:
        """Size of :meth:`data`: the uncompressed size when compressed, else the stored size."""
        if self.compression is not None:
            return self.header.uncompressed_size
        return self.header.size

    def data(self, max_size: int = MAX_DATA_SIZE,
             budget: DecompressionBudget | None = None) -> bytes:
        """The payload, decompressed; refuses recorded sizes above ``max_size`` or above what is
        left of ``budget`` (bomb guards: one entry, and one operation over many entries).

        Uncompressed payloads come back as stored (with their padding); compressed ones at
        exactly the recorded uncompressed size, or :class:`DecompressionError`.
        """
        h = self.header
        codec = self.compression
        if isinstance(self.stored, memoryview):
            try:
                self.stored.nbytes  # noqa: B018 (raises on a view released by Binary.close)
            except ValueError:
                raise InvalidArgumentError(
                    f"the image at offset {self.offset:#x} belongs to a closed Binary: "
                    "fatbinkit.open reads the input again") from None
        if codec is None:
            return bytes(self.stored)
        expected = h.uncompressed_size
        if expected > max_size:
            raise DecompressionError(
                f"{codec} payload records an uncompressed size of {expected} bytes, above the "
                f"limit of {max_size}",
                offset=self.offset,
            )
        if budget is not None:
            budget.charge(expected, self.offset, id(self))
        src = self.stored[: h.compressed_size]
        try:
            out = decompress(codec, src, expected, self.offset)
        except DecompressionError:
            raise
        except Exception as e:  # the codec libraries raise their own, unrelated types
            raise DecompressionError(f"corrupt {codec} payload: {e}", offset=self.offset) from e
        if len(out) != expected:
            raise DecompressionError(
                f"{codec} payload inflates to {len(out)}{'+' if len(out) > expected else ''} "
                f"bytes, header records {expected}",
                offset=self.offset,
            )
        return out

    def to_bytes(self) -> bytes:
        return self.header.pack() + self.extra + bytes(self.stored)

    def __len__(self) -> int:
        return self.header.header_size + self.header.size


@functools.cache
def _arch(number: int, suffix: str) -> Arch:
    """``Arch(number, suffix)``, made once per value (at most 990 * 3 valid ones; invalid numbers
    raise and are not cached): listing names an arch per entry."""
    return Arch(number, suffix)


@dataclass(frozen=True)
class FatbinContainer:
    """One container: header fields, its entries, and any bytes after the last entry."""

    entries: tuple[FatbinEntry, ...]
    version: int = FATBIN_VERSION
    header_extra: bytes = b""
    tail: bytes = b""
    offset: int = field(default=0, compare=False)

    @property
    def header_size(self) -> int:
        return CONTAINER_HEADER_SIZE + len(self.header_extra)

    def __str__(self) -> str:
        """``fatbin container at 0x0: 3 entries (ELF sm_80, ELF sm_90, PTX compute_90)``."""
        n = len(self.entries)
        return (f"fatbin container at {self.offset:#x}: {n} entr{'y' if n == 1 else 'ies'}"
                + (f" ({_names(self.entries)})" if n else ""))

    def to_bytes(self) -> bytes:
        return b"".join(self.parts())

    def parts(self) -> list[Buffer]:
        """The pieces :meth:`to_bytes` joins, in order: the header, then each entry's header,
        extra bytes and stored payload as it holds them (not copied), then the tail. A writer
        that streams a container (prune's spill file) writes these."""
        body: list[Buffer] = [p for e in self.entries for p in (e.header.pack(), e.extra,
                                                                  e.stored)]
        body.append(self.tail)
        size = sum(memoryview(p).nbytes for p in body)
        head = ContainerHeader(FATBIN_MAGIC, self.version, self.header_size, size)
        return [head.pack(), self.header_extra, *body]

    @classmethod
    def parse(
        cls, source: Buffer | Reader, offset: int = 0, head: ContainerHeader | None = None
    ) -> FatbinContainer:
        """Parse the container at ``offset`` (``head``: its header, when already read); entries
        keep memoryviews of the input."""
        src = source if isinstance(source, Reader) else Reader(_view(source))
        if head is None:
            head = ContainerHeader.unpack(src.read(offset, CONTAINER_HEADER_SIZE), offset)
        entries, pos = _entries(src, offset, head)
        end = offset + head.header_size + head.payload_size
        return cls(
            tuple(entries),
            head.version,
            src.read(offset + CONTAINER_HEADER_SIZE, head.header_size - CONTAINER_HEADER_SIZE),
            src.read(pos, end - pos),
            offset,
        )

    def __len__(self) -> int:
        return self.header_size + sum(len(e) for e in self.entries) + len(self.tail)


_FATBIN_ENTRY_FIELDS = tuple(f.name for f in fields(FatbinEntry))


def _entries(src: Reader, offset: int, head: ContainerHeader) -> tuple[list[FatbinEntry], int]:
    """The entries of the container at ``offset`` (header ``head``) and where the last one ends.

    The loop every listing runs thousands of times: one window read per entry header, entries
    made by :func:`_record` after the size checks of ``FatbinEntry.__post_init__``, then the
    rest of its checks.
    """
    body = offset + head.header_size
    end = body + head.payload_size
    if end > len(src):
        raise TruncatedError(
            f"fatbin container of {head.payload_size} payload bytes ends "
            f"{end - len(src)} bytes past the input",
            offset=offset,
        )
    read, view, unpack = src.read, src.view, EntryHeader.FORMAT.unpack_from
    entries: list[FatbinEntry] = []
    pos = body
    while end - pos >= ENTRY_HEADER_SIZE:  # so ``raw`` holds the 64-byte header (end <= len)
        raw = read(pos, _HEADER_READ)  # one read covers the usual identifier/options
        eh = _record(EntryHeader, _ENTRY_FIELDS, unpack(raw))
        header_size = eh.header_size
        if header_size < ENTRY_HEADER_SIZE:
            raise FormatError(f"entry header size {header_size} < {ENTRY_HEADER_SIZE}", offset=pos)
        stop = pos + header_size + eh.size
        if stop > end:
            raise TruncatedError(
                f"entry of {header_size}+{eh.size} bytes ends {stop - end} bytes past its "
                "container",
                offset=pos,
            )
        extra = (
            raw[ENTRY_HEADER_SIZE:header_size]
            if header_size <= len(raw)
            else read(pos + ENTRY_HEADER_SIZE, header_size - ENTRY_HEADER_SIZE)
        )
        entry = _record(
            FatbinEntry, _FATBIN_ENTRY_FIELDS, (eh, extra, view[pos + header_size : stop], pos)
        )
        entry._check_fields()
        entries.append(entry)
        pos = stop
    return entries, pos


def container_entries(src: Reader, offset: int
                      ) -> tuple[ContainerHeader, list[FatbinEntry], int]:
    """The header of the container at ``offset``, its entries, and where the last entry ends
    (the container's own end is ``offset + header_size + payload_size``); a
    :class:`~fatbinkit.errors.FormatError` where the bytes there are not a container whose
    entries lie inside it."""
    head = ContainerHeader.unpack(src.read(offset, CONTAINER_HEADER_SIZE), offset)
    entries, pos = _entries(src, offset, head)
    return head, entries, pos


def iter_entries(source: Buffer | Reader) -> Iterator[tuple[int, FatbinEntry]]:
    """Yield ``(container index, entry)`` for every entry, checked as :meth:`Fatbin.from_bytes`
    checks them but without making the container objects (what listing needs)."""
    for i, _, entries in iter_container_entries(source):
        for entry in entries:
            yield i, entry


def iter_container_entries(source: Buffer | Reader
                           ) -> Iterator[tuple[int, int, list[FatbinEntry]]]:
    """Yield ``(container index, offset, entries)`` for every container, those with no entry
    too (what ``prune`` leaves of a module no kept arch loads), checked as :func:`iter_entries`
    checks them."""
    src = source if isinstance(source, Reader) else Reader(_view(source))
    _check_magic(src)
    for i, (off, head) in enumerate(iter_containers(src)):
        yield i, off, _entries(src, off, head)[0]


def _check_magic(src: Reader) -> None:
    if src.read(0, 4) != _MAGIC_BYTES:
        raise FormatError("not a fatbin (no 0xBA55ED50 magic)", offset=0)


def is_fatbin(data: Buffer) -> bool:
    """Whether ``data`` starts with a fatbin container header."""
    return len(data) >= CONTAINER_HEADER_SIZE and bytes(data[:4]) == _MAGIC_BYTES


def _view(data: Buffer) -> memoryview:
    return data if isinstance(data, memoryview) else memoryview(data).cast("B")


def iter_containers(source: Buffer | Reader) -> Iterator[tuple[int, ContainerHeader]]:
    """Yield the offset and header of each container, skipping zero padding between them."""
    src = source if isinstance(source, Reader) else Reader(_view(source))
    pos, size = 0, len(src)
    while pos < size:
        raw = src.read(pos, CONTAINER_HEADER_SIZE)
        if raw[:4] == _MAGIC_BYTES:
            head = ContainerHeader.unpack(raw, pos)
            yield pos, head
            pos += head.header_size + head.payload_size
            continue
        if raw[:1] != b"\0":
            raise FormatError("expected a fatbin container or zero padding", offset=pos)
        pos = src.skip_zeros(pos)


@dataclass(frozen=True)
class Fatbin:
    """A sequence of fatbin containers, as found in a ``.fatbin`` file or an ELF section.

    ``gaps`` holds the number of zero bytes before each container and ``trailing`` the zeros after
    the last one, so that :meth:`to_bytes` reproduces the input exactly.
    """

    containers: tuple[FatbinContainer, ...]
    gaps: tuple[int, ...] = ()
    trailing: int = 0

    @classmethod
    def from_bytes(cls, data: Buffer | Reader) -> Fatbin:
        """Parse every container in ``data`` (payloads stay views into it)."""
        if not isinstance(data, Reader):
            as_content(data, "Fatbin.from_bytes()")
        src = data if isinstance(data, Reader) else Reader(_view(data))
        _check_magic(src)
        containers: list[FatbinContainer] = []
        gaps: list[int] = []
        pos = 0
        for off, head in iter_containers(src):
            gaps.append(off - pos)
            containers.append(FatbinContainer.parse(src, off, head))
            pos = off + head.header_size + head.payload_size
        return cls(tuple(containers), tuple(gaps), len(src) - pos)

    @property
    def entries(self) -> tuple[FatbinEntry, ...]:
        return tuple(e for c in self.containers for e in c.entries)

    def __str__(self) -> str:
        """``fatbin: 2 containers, 5 entries (ELF sm_80, ELF sm_90, ...)``."""
        entries = self.entries
        n, m = len(self.containers), len(entries)
        return (f"fatbin: {n} container{'' if n == 1 else 's'}, {m} entr{'y' if m == 1 else 'ies'}"
                + (f" ({_names(entries)})" if m else ""))

    def validate(self, max_size: int = MAX_DATA_SIZE) -> None:
        """Decode every entry (arch, strings, payload): raise the first :class:`FormatError`.

        Parsing checks the layout only; this also inflates each compressed payload once.
        """
        for e in self.entries:
            _ = (e.arch, e.identifier, e.options)
            e.data(max_size)

    def to_bytes(self) -> bytes:
        parts: list[bytes] = []
        for i, c in enumerate(self.containers):
            if i < len(self.gaps):
                parts.append(bytes(self.gaps[i]))
            parts.append(c.to_bytes())
        parts.append(bytes(self.trailing))
        return b"".join(parts)


# -- writer ---------------------------------------------------------------------------------------


def entry_flags(arch: Arch, *, debug: bool = False) -> EntryFlags:
    """The flags NVIDIA's tools give a 64-bit Linux entry for ``arch``: ``a`` is ARCH_SPECIFIC,
    ``f`` FAMILY_SPECIFIC (what :attr:`FatbinEntry.arch` reads back)."""
    flags = EntryFlags.ADDR64 | EntryFlags.HOST_LINUX
    if debug:
        flags |= EntryFlags.DEBUG
    if arch.suffix == "a":
        flags |= EntryFlags.ARCH_SPECIFIC
    elif arch.suffix == "f":
        flags |= EntryFlags.FAMILY_SPECIFIC
    return flags


def make_entry(
    kind: int,
    arch: Arch,
    data: Buffer,
    *,
    identifier: str = "",
    options: str = "",
    compression: str | None = None,
    debug: bool = False,
) -> FatbinEntry:
    """Build one entry as nvFatbin 13.x lays it out (byte-identical when uncompressed).

    ``kind`` is :data:`EntryKind.ELF` (``data`` a cubin) or :data:`EntryKind.PTX` (``data`` PTX
    text; a terminating NUL is added when missing, as the driver requires).
    """
    payload = bytes(data)
    if compression is not None and compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"compression {compression!r} is not one of {COMPRESSIONS}")
    flags = entry_flags(arch, debug=debug)
    opt_data: bytes | None = None
    if kind == EntryKind.ELF:
        from .cubin import cubin_arch

        try:
            major, minor = 1, elf.file_header(payload).abi_version
        except FormatError as e:
            raise InvalidArgumentError(f"cubin does not start with an ELF header: {e}") from e
        try:
            own = cubin_arch(payload)  # refuses a host ELF (e_machine not EM_CUDA)
        except FormatError as e:
            raise InvalidArgumentError(f"not a cubin: {e}") from e
        if own.number != arch.number:  # as fatbinary and nvFatbin refuse it ("elf mismatch")
            raise InvalidArgumentError(f"the cubin is for {own.sm}, not {arch.sm}")
        if arch.number >= 100:
            flags |= EntryFlags.COMPAT
            compat = elf.find_section(payload, ".nv.compat") or b""
            opt_data = (b"\0" + compat[:-1]) if compat else b""
        if options:
            raise InvalidArgumentError("ELF entries carry no options string")
    elif kind == EntryKind.PTX:
        from .ptx import ptx_header

        try:
            (major, minor), _ = ptx_header(payload)
        except FormatError as e:
            raise InvalidArgumentError(f"PTX argument: {e}") from e
        if not payload.endswith(b"\0"):
            payload += b"\0"
        opt_data = options.encode()
    else:
        raise InvalidArgumentError(f"the writer makes ELF and PTX entries, not kind {kind}")
    ident = identifier.encode()
    if b"\0" in ident:
        raise InvalidArgumentError("identifier contains a NUL byte")
    tail = bytearray()
    ident_off = 0
    if ident:
        ident_off = ENTRY_HEADER_SIZE
        tail += ident + b"\0"
        tail += bytes(align8(len(tail)) - len(tail))
    opt_off = 0
    if opt_data is not None:
        opt_off = ENTRY_HEADER_SIZE + len(tail)
        data_off = opt_off + OPTIONS_PAIR.size
        tail += OPTIONS_PAIR.pack(data_off, len(opt_data)) + opt_data + b"\0"
        tail += bytes(align8(len(tail)) - len(tail))
    compressed_size = uncompressed_size = 0
    if compression is not None:
        flags |= _COMPRESSION_FLAGS[compression]
        uncompressed_size = len(payload)
        payload = compress(compression, payload)
        compressed_size = len(payload)
    stored = payload + bytes(align8(len(payload)) - len(payload))
    header = EntryHeader(
        kind=int(kind), version=ENTRY_VERSION, header_size=ENTRY_HEADER_SIZE + len(tail),
        size=len(stored), compressed_size=compressed_size, options_offset=opt_off,
        minor=minor, major=major, sm=arch.number, identifier_offset=ident_off,
        identifier_size=len(ident), flags=int(flags), reserved=0,
        uncompressed_size=uncompressed_size,
    )
    return FatbinEntry(header, bytes(tail), stored)


def build_fatbin(entries: Sequence[FatbinEntry]) -> bytes:
    """Bytes of one container holding ``entries`` in order."""
    return FatbinContainer(tuple(entries)).to_bytes()
