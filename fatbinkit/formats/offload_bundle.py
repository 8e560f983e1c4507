"""Clang offload bundles: the containers of HIP (AMD) device code, plain and compressed.

A plain bundle (``clang/lib/Driver/OffloadBundler.cpp``, the comment above ``BinaryFileHandler``
and its ``ReadHeader``/``WriteHeader``) is the magic ``__CLANG_OFFLOAD_BUNDLE__``, a ``u64``
entry count, then per entry ``{u64 offset, u64 size, u64 id length, id}`` back to back, then the
entries' bytes at their offsets, relative to the bundle's start; all integers little-endian. The
HIP driver aligns every entry to 4096 (``HIPCodeObjectAlign``, ``clang/lib/Driver/ToolChains/
HIPUtility.cpp``) and writes a host entry of size 0 first.

A compressed bundle (``CompressedOffloadBundle`` in the same file; ``RawCompressedBundleHeader``)
is ``CCOB``, a version (1, 2 or 3), a method (``llvm::compression::Format``: 0 zlib, 1 zstd),
sizes and the low 64 bits of the MD5 of the plain bundle it inflates to, then the compressed
bytes. Version 1 records no total size: like ``OffloadBundler::ListBundleIDsInFile`` this reader
bounds it by the next ``CCOB`` magic or the end of the region.

In a host library, ``.hip_fatbin`` holds one bundle per translation unit, each at a 4096-aligned
offset (``CGCUDANV.cpp``, ``makeModuleCtorFunction``), plain and compressed mixed:
:func:`read_bundles` walks them. A relocatable object written by the bundler's object-file
handler instead holds one section per entry named ``__CLANG_OFFLOAD_BUNDLE__<id>``
(:func:`object_section_id`).

Each on-disk record is one :class:`struct.Struct` with a frozen dataclass that parses and packs
it. Plain entries' bytes are views of the caller's buffer; a compressed bundle is inflated once,
exactly to its recorded size and within a :class:`~fatbinkit.formats.codec.DecompressionBudget`.
Every inconsistency LLVM's reader silently turns into "no bundles" is an error here, with its
offset.
"""

from __future__ import annotations

import hashlib
import mmap
import re
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import DecompressionError, FormatError, InvalidArgumentError, TruncatedError
from .codec import MAX_DATA_SIZE, DecompressionBudget, decompress
from .elf import Buffer
from .reader import Reader

__all__ = [
    "BUNDLE_ALIGNMENT",
    "BUNDLE_MAGIC",
    "CCOB_MAGIC",
    "CCOB_VERSIONS",
    "COMPRESSION_METHODS",
    "HOST_ID",
    "MAX_ID_LENGTH",
    "RUNTIME_HEADER_WINDOW",
    "Bundle",
    "BundleEntry",
    "BundleId",
    "CompressedHeader",
    "compress_bundle",
    "is_bundle",
    "object_section_id",
    "read_bundle",
    "read_bundles",
    "truncated_md5",
    "write_bundle",
]

#: the plain bundle's magic (``OFFLOAD_BUNDLER_MAGIC_STR``, no NUL)
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
#: the compressed bundle's magic (``CompressedOffloadBundle::MagicNumber``)
CCOB_MAGIC = b"CCOB"
#: where the HIP driver puts each entry and each bundle (``HIPCodeObjectAlign``)
BUNDLE_ALIGNMENT = 4096
#: how much of a plain bundle's header the HIP runtime reads: ``amd_comgr_set_data(data, 4096,
#: image)`` in ROCm/clr ``hipamd/src/hip_fatbin.cpp``; entries described past it are not seen
RUNTIME_HEADER_WINDOW = 4096
#: the longest entry id accepted (real ids are under 64 characters)
MAX_ID_LENGTH = 1024
#: ``CompressedBundleHeader`` method numbers (``llvm::compression::Format``) and their codecs
COMPRESSION_METHODS = {0: "zlib", 1: "zstd"}
#: the compressed bundle versions :func:`compress_bundle` writes (version 1 records no total size)
CCOB_VERSIONS = (2, 3)
#: the host entry current ROCm clang writes (``-targets=host-x86_64-unknown-linux-gnu,...`` as
#: ``HIP::constructHIPFatbinCommand`` passes it, normalised with an empty environment)
HOST_ID = "host-x86_64-unknown-linux-gnu-"
#: ``CompressedOffloadBundle::compress``'s defaults: zstd level 3 with long-distance matching,
#: zlib level 6 (``llvm::compression::Params``)
_DEFAULT_LEVELS = {"zstd": 3, "zlib": 6}

#: version 2 records both sizes in 32 bits (``CompressedOffloadBundle::compress``: "exceeds
#: version 2 limit")
_V2_LIMIT = 1 << 32
_COUNT = struct.Struct("<Q")
_PLAIN_PREFIX = len(BUNDLE_MAGIC) + _COUNT.size  # magic and entry count: 32 bytes
_CCOB_SEARCH = re.compile(re.escape(CCOB_MAGIC))
_ID_CHARS = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space


def truncated_md5(data: Buffer) -> int:
    """``llvm::MD5(data).low()``: the first 8 bytes of the MD5 digest, little-endian, as a
    compressed bundle records it (``CompressedOffloadBundle::compress``, "Truncated MD5 hash")."""
    value: int = _COUNT.unpack(hashlib.md5(data).digest()[:8])[0]
    return value


def _view(buf: Buffer | mmap.mmap) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _bounds(view: memoryview, offset: int, end: int | None) -> int:
    stop = len(view) if end is None else end
    if not 0 <= offset <= stop <= len(view):
        raise InvalidArgumentError(f"region {offset:#x}..{stop:#x} is not inside the "
                                   f"{len(view)}-byte input")
    return stop


@dataclass(frozen=True)
class BundleId:
    """A bundle entry id, ``<kind>-<arch>-<vendor>-<os>-<env>[-<target-id>]``, kept verbatim.

    Split as ``OffloadTargetInfo::OffloadTargetInfo`` does (on ``-``, at most 5 times; 5 or 6
    parts, ``clang::checkOffloadBundleID``), so a target id keeps its dashes
    (``gfx9-4-generic:xnack-``). Shorter forms seen in real files are read as
    ``<kind>-<triple>`` with no target id: ROCm 5.0's host entry ``host-x86_64-unknown-linux``
    and the SYCL ids of Intel's bundler (``sycl-spir64``, ``sycl-spir64_gen``; intel/llvm's
    ``OffloadTargetInfo`` splits the kind off at the first ``-``). Any kind is kept (``host``,
    ``hip``, ``hipv4``, ``hcc``, ``openmp``, ``sycl``...). An id without a ``-``, with an empty
    kind or arch, or with other than printable ASCII is a :class:`FormatError`.
    """

    text: str
    kind: str = field(init=False)
    triple: str = field(init=False)
    target_id: str = field(init=False)

    def __post_init__(self) -> None:
        parts = self.text.split("-", 5)
        if not _ID_CHARS.fullmatch(self.text) or len(parts) < 2 or not parts[0] or not parts[1]:
            raise FormatError(f"malformed bundle entry id {self.text!r} (expected "
                              "<kind>-<arch>-<vendor>-<os>-<env>[-<target-id>])")
        object.__setattr__(self, "kind", parts[0])
        object.__setattr__(self, "triple", "-".join(parts[1:5]))
        object.__setattr__(self, "target_id", parts[5] if len(parts) == 6 else "")

    @property
    def is_host(self) -> bool:
        """The host entry (``OffloadTargetInfo::hasHostKind``); clang writes it empty."""
        return self.kind == "host"

    @property
    def processor(self) -> str:
        """The target id without its features: ``gfx942`` for ``gfx942:sramecc+:xnack-``."""
        return self.target_id.split(":", 1)[0]

    def __str__(self) -> str:
        return self.text


def object_section_id(name: str) -> BundleId | None:
    """The entry id of an object-file-handler section ``__CLANG_OFFLOAD_BUNDLE__<id>`` (one
    section per entry, ``ObjectFileHandler`` in ``OffloadBundler.cpp``; Intel's SYCL compiler
    writes ``__CLANG_OFFLOAD_BUNDLE__sycl-spir64``), None for any other section name."""
    if not name.startswith(BUNDLE_MAGIC.decode()):
        return None
    return BundleId(name[len(BUNDLE_MAGIC):])


_CCOB_FORMATS = {
    1: struct.Struct("<4sHHIQ"),  # V1Header: magic, version, method, uncompressed, hash
    2: struct.Struct("<4sHHIIQ"),  # V2Header: ..., u32 total file size, u32 uncompressed, hash
    3: struct.Struct("<4sHHQQQ"),  # V3Header: ..., u64 total file size, u64 uncompressed, hash
}
_CCOB_COMMON = struct.Struct("<4sHH")


@dataclass(frozen=True)
class CompressedHeader:
    """The header of a compressed bundle (``RawCompressedBundleHeader``, one struct per
    version). ``total_size`` counts header and payload (versions 2 and 3; None in version 1);
    ``hash`` is :func:`truncated_md5` of the inflated bundle."""

    FORMATS: ClassVar[dict[int, struct.Struct]] = _CCOB_FORMATS

    version: int
    method: int
    total_size: int | None
    uncompressed_size: int
    hash: int

    @property
    def header_size(self) -> int:
        """20, 24 or 32 bytes (``getHeaderSize``)."""
        return self.FORMATS[self.version].size

    @property
    def codec(self) -> str:
        """``"zlib"`` or ``"zstd"``."""
        return COMPRESSION_METHODS[self.method]

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> CompressedHeader:
        """Parse the header at the start of ``raw``; ``offset`` locates it in error messages.
        A version or method LLVM does not know is refused, as ``tryParse`` refuses it."""
        if len(raw) < _CCOB_COMMON.size:
            raise TruncatedError(f"compressed bundle header needs {_CCOB_COMMON.size} bytes, "
                                 f"only {len(raw)} left", offset=offset)
        magic, version, method = _CCOB_COMMON.unpack_from(raw, 0)
        if magic != CCOB_MAGIC:
            raise FormatError(f"bad compressed bundle magic {bytes(magic)!r}", offset=offset)
        form = cls.FORMATS.get(version)
        if form is None:
            raise FormatError(f"unknown compressed bundle version {version} (known: 1, 2, 3)",
                              offset=offset)
        if method not in COMPRESSION_METHODS:
            raise FormatError(f"unknown compressed bundle method {method} (0 zlib, 1 zstd)",
                              offset=offset)
        if len(raw) < form.size:
            raise TruncatedError(f"compressed bundle v{version} header needs {form.size} bytes, "
                                 f"only {len(raw)} left", offset=offset)
        if version == 1:
            _, _, _, uncompressed, digest = form.unpack_from(raw, 0)
            total = None
        else:
            _, _, _, total, uncompressed, digest = form.unpack_from(raw, 0)
            if total < form.size:
                raise FormatError(f"compressed bundle v{version} records a total size of "
                                  f"{total} bytes, less than its {form.size}-byte header",
                                  offset=offset)
        return cls(version, method, total, uncompressed, digest)

    def pack(self) -> bytes:
        form = self.FORMATS[self.version]
        if self.total_size is None:
            return form.pack(CCOB_MAGIC, self.version, self.method, self.uncompressed_size,
                             self.hash)
        return form.pack(CCOB_MAGIC, self.version, self.method, self.total_size,
                         self.uncompressed_size, self.hash)

    def __str__(self) -> str:
        total = "" if self.total_size is None else f", {self.total_size} bytes stored"
        return (f"CCOB v{self.version} {self.codec}{total}, inflates to "
                f"{self.uncompressed_size} bytes, hash {self.hash:#018x}")


@dataclass(frozen=True)
class BundleEntry:
    """One entry of a bundle: its id, where its bytes lie in the (inflated) bundle, and those
    bytes as a view (of the caller's buffer for a plain bundle, of the inflated bytes for a
    compressed one)."""

    #: the fixed part of an entry descriptor: offset, size, id length; the id follows
    DESCRIPTOR: ClassVar[struct.Struct] = struct.Struct("<QQQ")

    id: str
    offset: int
    size: int
    data: memoryview = field(repr=False, compare=False)

    @property
    def bundle_id(self) -> BundleId:
        return BundleId(self.id)

    def pack_descriptor(self) -> bytes:
        """The entry's descriptor as ``WriteHeader`` writes it."""
        name = self.id.encode("ascii")
        return self.DESCRIPTOR.pack(self.offset, self.size, len(name)) + name

    def __str__(self) -> str:
        return f"{self.id} @{self.offset:#x} ({self.size} bytes)"


@dataclass(frozen=True)
class Bundle:
    """One bundle as read from a buffer.

    ``offset`` is where it starts in the input and ``stored_size`` how many bytes it occupies
    there: a compressed bundle's recorded total size (version 1: up to the next ``CCOB`` magic
    or the region's end); a plain one's furthest entry end, or its header's end. ``header_size``
    is the plain header (magic, count, descriptors), of the inflated bundle if compressed; the
    HIP runtime reads only :data:`RUNTIME_HEADER_WINDOW` bytes of it (:attr:`header_fits_window`).
    ``data`` is the whole plain bundle: a view of the input, or the inflated bytes.
    """

    offset: int
    stored_size: int
    compressed: CompressedHeader | None
    entries: tuple[BundleEntry, ...]
    header_size: int
    data: memoryview = field(repr=False, compare=False)

    @property
    def header_fits_window(self) -> bool:
        """Whether the runtime's 4096-byte read of the header sees every descriptor."""
        return self.header_size <= RUNTIME_HEADER_WINDOW

    @property
    def ids(self) -> tuple[str, ...]:
        """The entry ids in header order (the order the runtime tries them)."""
        return tuple(entry.id for entry in self.entries)

    def __str__(self) -> str:
        kind = str(self.compressed) if self.compressed else "plain"
        lines = [f"bundle at {self.offset:#x}, {self.stored_size} bytes, {kind}, "
                 f"{len(self.entries)} entries, header {self.header_size} bytes"]
        lines += [f"  {entry}" for entry in self.entries]
        return "\n".join(lines)


def is_bundle(buf: Buffer | mmap.mmap, offset: int = 0) -> bool:
    """Whether a plain or compressed bundle's magic is at ``offset``."""
    view = _view(buf)
    return (view[offset:offset + len(BUNDLE_MAGIC)] == BUNDLE_MAGIC
            or view[offset:offset + len(CCOB_MAGIC)] == CCOB_MAGIC)


def _parse_plain(
    view: memoryview, base: int, end: int, where: str, at: int | None
) -> tuple[tuple[BundleEntry, ...], int, int]:
    """Entries, header size and extent of the plain bundle at ``view[base:end]``.

    ``where`` names the bytes in messages (the input, or the inflated bundle of a CCOB) and
    ``at`` is the input offset reported (None: ``base`` plus the offset inside). Stricter than
    ``BinaryFileHandler::ReadHeader``: a truncated header, an entry offset of 0 or an entry
    past the end is an error, not an empty bundle.
    """
    avail = end - base

    def err(cls: type[FormatError], message: str, inner: int) -> FormatError:
        return cls(f"{message} ({where} at {base + inner:#x})",
                   offset=base + inner if at is None else at)

    if avail < _PLAIN_PREFIX:
        raise err(TruncatedError, f"bundle header needs {_PLAIN_PREFIX} bytes, only {avail} "
                  "left", 0)
    (count,) = _COUNT.unpack_from(view, base + len(BUNDLE_MAGIC))
    smallest = BundleEntry.DESCRIPTOR.size + 1  # a descriptor with a one-character id
    if count > (avail - _PLAIN_PREFIX) // smallest:
        raise err(TruncatedError, f"bundle records {count} entries: at least "
                  f"{count * smallest} header bytes, only {avail - _PLAIN_PREFIX} left", 0)
    raw: list[tuple[str, int, int]] = []
    pos = _PLAIN_PREFIX
    for index in range(count):
        if pos + BundleEntry.DESCRIPTOR.size > avail:
            raise err(TruncatedError, f"descriptor of entry {index} runs past the end", pos)
        offset, size, length = BundleEntry.DESCRIPTOR.unpack_from(view, base + pos)
        if not 0 < length <= MAX_ID_LENGTH:
            raise err(FormatError, f"entry {index} has an id of {length} bytes (1.."
                      f"{MAX_ID_LENGTH})", pos)
        name_at = pos + BundleEntry.DESCRIPTOR.size
        if name_at + length > avail:
            raise err(TruncatedError, f"id of entry {index} ({length} bytes) runs past the "
                      "end", name_at)
        try:
            name = str(BundleId(bytes(view[base + name_at:base + name_at + length]).decode()))
        except (UnicodeDecodeError, FormatError) as e:
            raise err(FormatError, f"entry {index}: {e}", name_at) from e
        if offset == 0:  # ReadHeader: "if (!Offset || ...)" drops the whole header
            raise err(FormatError, f"entry {index} ({name}) has offset 0", pos)
        if offset > avail or size > avail - offset:
            raise err(TruncatedError, f"entry {index} ({name}: {size} bytes at {offset:#x}) "
                      f"runs past the end of the {avail} bytes available", pos)
        raw.append((name, offset, size))
        pos = name_at + length
    extent = pos
    for index, (name, offset, size) in enumerate(raw):
        if size and offset < pos:
            raise err(FormatError, f"entry {index} ({name}: {size} bytes at {offset:#x}) "
                      f"overlaps the {pos}-byte header", offset)
        extent = max(extent, offset + size)
    entries = tuple(BundleEntry(name, offset, size, view[base + offset:base + offset + size])
                    for name, offset, size in raw)
    return entries, pos, extent


def _read_compressed(view: memoryview, offset: int, end: int,
                     budget: DecompressionBudget, verify_hash: bool) -> Bundle:
    header = CompressedHeader.unpack(view[offset:end], offset)
    if header.total_size is None:
        found = _CCOB_SEARCH.search(view, offset + len(CCOB_MAGIC), end)
        stop = found.start() if found else end
    else:
        if header.total_size > end - offset:
            raise TruncatedError(f"compressed bundle records {header.total_size} bytes, only "
                                 f"{end - offset} left", offset=offset)
        stop = offset + header.total_size
    expected = header.uncompressed_size
    if expected > MAX_DATA_SIZE:
        raise DecompressionError(f"compressed bundle records an inflated size of {expected} "
                                 f"bytes, above the limit of {MAX_DATA_SIZE}", offset=offset)
    budget.charge(expected, offset)
    payload = view[offset + header.header_size:stop]
    try:
        inflated = decompress(header.codec, payload, expected, offset)
    except DecompressionError:
        raise
    except Exception as e:  # the codec libraries raise their own, unrelated types
        raise DecompressionError(f"corrupt {header.codec} payload of {len(payload)} bytes: {e}",
                                 offset=offset) from e
    if len(inflated) != expected:
        more = "+" if len(inflated) > expected else ""
        raise DecompressionError(f"{header.codec} payload inflates to {len(inflated)}{more} "
                                 f"bytes, header records {expected}", offset=offset)
    if verify_hash and (digest := truncated_md5(inflated)) != header.hash:
        raise FormatError(f"compressed bundle hash mismatch: header records "
                          f"{header.hash:#018x}, inflated bytes hash to {digest:#018x}",
                          offset=offset)
    inner = memoryview(inflated)
    if inner[:len(BUNDLE_MAGIC)] != BUNDLE_MAGIC:
        raise FormatError(f"compressed bundle inflates to {bytes(inner[:8])!r}..., not a plain "
                          "bundle", offset=offset)
    where = f"inflated bundle of the CCOB at {offset:#x}"
    entries, header_size, _ = _parse_plain(inner, 0, len(inner), where, offset)
    return Bundle(offset, stop - offset, header, entries, header_size, inner)


def read_bundle(
    buf: Buffer | mmap.mmap,
    offset: int = 0,
    end: int | None = None,
    *,
    budget: DecompressionBudget | None = None,
    verify_hash: bool = True,
) -> Bundle:
    """The plain or compressed bundle at ``offset``, within ``buf[offset:end]``.

    A compressed bundle is inflated once, charged to ``budget`` (by default one of its own,
    :meth:`DecompressionBudget.for_input` of the region), to exactly its recorded size, and its
    hash checked unless ``verify_hash`` is False. Every problem is one
    :class:`~fatbinkit.errors.FormatError` (:class:`TruncatedError`,
    :class:`DecompressionError`) carrying the offset.
    """
    view = _view(buf)
    stop = _bounds(view, offset, end)
    if view[offset:offset + len(CCOB_MAGIC)] == CCOB_MAGIC:
        if budget is None:
            budget = DecompressionBudget.for_input(stop - offset)
        return _read_compressed(view, offset, stop, budget, verify_hash)
    head = bytes(view[offset:min(stop, offset + len(BUNDLE_MAGIC))])
    if head != BUNDLE_MAGIC:
        if len(head) < len(BUNDLE_MAGIC) and BUNDLE_MAGIC.startswith(head):
            raise TruncatedError(f"bundle magic needs {len(BUNDLE_MAGIC)} bytes, only "
                                 f"{len(head)} left", offset=offset)
        raise FormatError(f"no offload bundle magic: {head[:8]!r}...", offset=offset)
    entries, header_size, extent = _parse_plain(view, offset, stop, "bundle", None)
    return Bundle(offset, extent, None, entries, header_size, view[offset:offset + extent])


def read_bundles(
    buf: Buffer | mmap.mmap,
    start: int = 0,
    end: int | None = None,
    *,
    budget: DecompressionBudget | None = None,
) -> list[Bundle]:
    """Every bundle in ``buf[start:end]``, such as a ``.hip_fatbin`` section: bundles one after
    the other, each at a multiple of :data:`BUNDLE_ALIGNMENT` from ``start``, zeros between
    (how clang and lld lay out one bundle per translation unit). A non-zero byte that does not
    start a bundle at such an offset is a :class:`FormatError`. One ``budget`` (by default
    for the region) covers all the compressed bundles.
    """
    view = _view(buf)
    stop = _bounds(view, start, end)
    if budget is None:
        budget = DecompressionBudget.for_input(stop - start)
    zeros = Reader(view[:stop])
    bundles: list[Bundle] = []
    pos = start
    while (pos := zeros.skip_zeros(pos)) < stop:
        if (pos - start) % BUNDLE_ALIGNMENT:
            raise FormatError(f"non-zero byte {pos - start:#x} bytes into the region, not at a "
                              f"{BUNDLE_ALIGNMENT}-aligned bundle start", offset=pos)
        if not is_bundle(view, pos):
            raise FormatError(f"bytes {bytes(view[pos:pos + 8])!r}... are not an offload "
                              "bundle", offset=pos)
        bundle = read_bundle(view, pos, stop, budget=budget)
        bundles.append(bundle)
        pos += bundle.stored_size
    return bundles


def write_bundle(entries: Iterable[tuple[str | BundleId, Buffer]], *,
                 align: int = BUNDLE_ALIGNMENT, host: str | None = HOST_ID) -> bytes:
    """A plain bundle of ``entries`` (id, bytes), as ``clang-offload-bundler -type=o
    -bundle-align=<align>`` writes it (``BinaryFileHandler::WriteHeader``): the entries in the
    order given, each at the next multiple of ``align`` after the header and the entries before
    it, zeros between, nothing after the last. Where no entry is a host entry, ``host`` (an empty
    host entry, as the HIP driver bundles ``/dev/null``) comes first; None writes none. Ids must
    be unique and valid (:class:`BundleId`)."""
    if isinstance(align, bool) or not isinstance(align, int) or align < 1:
        raise InvalidArgumentError(f"align is a positive whole number, not {align!r}")
    items = [(str(BundleId(str(name))), memoryview(data).cast("B")) for name, data in entries]
    if host is not None and not any(BundleId(name).is_host for name, _ in items):
        items.insert(0, (str(BundleId(host)), memoryview(b"")))
    names = [name for name, _ in items]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InvalidArgumentError(f"bundle entry id(s) given twice: {', '.join(twice)}")
    at = _PLAIN_PREFIX + sum(BundleEntry.DESCRIPTOR.size + len(n) for n in names)
    header = bytearray(BUNDLE_MAGIC + _COUNT.pack(len(items)))
    places = []
    for name, data in items:
        at = -(-at // align) * align
        header += BundleEntry.DESCRIPTOR.pack(at, len(data), len(name)) + name.encode("ascii")
        places.append(at)
        at += len(data)
    out = bytearray(at)
    out[:len(header)] = header
    for (_, data), place in zip(items, places, strict=True):
        out[place:place + len(data)] = data
    return bytes(out)


def compress_bundle(plain: Buffer, *, version: int = 3, codec: str = "zstd",
                    level: int | None = None) -> bytes:
    """``plain`` (a plain bundle) as a compressed bundle of ``version`` (2 or 3), as
    ``CompressedOffloadBundle::compress`` writes it: the header, then one zstd frame (level 3
    with long-distance matching, unless ``level``) or zlib stream (level 6) of the whole bundle,
    hashed with :func:`truncated_md5`. Version 2 records sizes in 32 bits: a bundle of 4 GiB or
    more needs version 3 (the writer's "exceeds version 2 limit")."""
    view = _view(plain)
    if view[:len(BUNDLE_MAGIC)] != BUNDLE_MAGIC:
        raise InvalidArgumentError("compress_bundle() takes a plain bundle (it starts with "
                                   f"{BUNDLE_MAGIC.decode()})")
    if version not in CCOB_VERSIONS:
        raise InvalidArgumentError(f"compressed bundle version {version!r} is not one of "
                                   f"{CCOB_VERSIONS}")
    method = {v: k for k, v in COMPRESSION_METHODS.items()}.get(codec)
    if method is None:
        raise InvalidArgumentError(f"codec {codec!r} is not one of "
                                   f"{tuple(COMPRESSION_METHODS.values())}")
    if version == 2 and len(view) >= _V2_LIMIT:  # refused before a byte is compressed
        raise InvalidArgumentError(f"a bundle of {len(view)} bytes exceeds compressed bundle "
                                   "version 2's 32-bit sizes: use version 3")
    if level is None:
        level = _DEFAULT_LEVELS[codec]
    if codec == "zstd":
        import zstandard

        params = zstandard.ZstdCompressionParameters.from_level(
            level, source_size=len(view), enable_ldm=True)
        payload = zstandard.ZstdCompressor(compression_params=params).compress(view)
    else:
        payload = zlib.compress(view, level)
    form = _CCOB_FORMATS[version]
    total = form.size + len(payload)
    if version == 2 and total >= _V2_LIMIT:  # an incompressible bundle just under the limit
        raise InvalidArgumentError(f"a bundle of {len(view)} bytes compresses to {total} bytes "
                                   "with its header, past compressed bundle version 2's 32-bit "
                                   "sizes: use version 3")
    head = CompressedHeader(version, method, total, len(view), truncated_md5(view))
    return head.pack() + payload
