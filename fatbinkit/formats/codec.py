"""Compressed payloads of device code: LZ4, zstd and zlib, with guards against decompression bombs.

Vendor-neutral: whichever container records a payload's codec and sizes (NVIDIA's fatbin
entries, LZ4 or zstd; AMD's compressed offload bundles, zlib or zstd) calls :func:`decompress`
with the size its header records, and :func:`compress` to write one (LZ4 or zstd).

Two limits keep a small hostile file from inflating without bound: one per payload (the caller's
``max_size``, :data:`MAX_DATA_SIZE` by default) and one per operation over all its payloads
(:class:`DecompressionBudget`). A recorded size is checked before anything is allocated, and no
codec is asked for more than one byte beyond it, so a lying size is detected, never trusted.
``lz4`` and ``zstandard`` are imported only when a payload is (de)compressed.
"""

from __future__ import annotations

import io
import mmap
import threading
import zlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import DecompressionError, InvalidArgumentError, option
from ..memory import ReleasedBehind

if TYPE_CHECKING:
    from .elf import Buffer
    from .reader import Reader

__all__ = [
    "BUDGET_FLOOR",
    "BUDGET_RATIO",
    "COMPRESSIONS",
    "DEFAULT_LEVELS",
    "LEVELS",
    "MAX_DATA_SIZE",
    "ZSTD_MAGIC",
    "DecompressionBudget",
    "compress",
    "decompress",
    "inflated_head",
    "zstd_frame",
    "zstd_steps",
]

#: The first four bytes of a zstd frame (RFC 8878, 3.1.1: 0xFD2FB528 little-endian).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK_MAX = 128 << 10  # RFC 8878 3.1.1.2.3: Block_Maximum_Size is at most 128 KiB
_ZSTD_FCS_SIZES = (0, 2, 4, 8)  # by Frame_Content_Size_Flag (0: 1 byte for a single segment)
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)

#: Largest uncompressed payload one read produces by default (1 GiB): the biggest images measured
#: in NVIDIA's libraries (cubins) are tens of MiB, a recorded size above this is a bomb.
MAX_DATA_SIZE = 1 << 30
# the default decompression budget of one operation: this many times its input, plus a floor
BUDGET_RATIO = 64
BUDGET_FLOOR = 256 << 20
_LZ4_MAX_RATIO = 255
#: the codecs :func:`compress` and :func:`decompress` take
COMPRESSIONS = ("lz4", "zstd")
#: default levels: slightly smaller output than NVIDIA's tools (measured on cuRAND's and CuPy's
#: entries) at a fraction of the time of the maximum levels
DEFAULT_LEVELS = {"lz4": 3, "zstd": 6}
#: the levels each codec takes (LZ4 high-compression mode; zstd's regular levels)
LEVELS = {"lz4": range(1, 13), "zstd": range(1, 23)}


class DecompressionBudget:
    """How many bytes one operation (a listing, an extraction, a check) may decompress in total.

    The per-payload limit (``MAX_DATA_SIZE``) does not stop a small file of many payloads that
    each inflate to it; this does. The default, :meth:`for_input`, is ``BUDGET_RATIO`` times the
    input plus ``BUDGET_FLOOR``: far above what real device code inflates to (CUDA's zstd and LZ4
    payloads shrink cubins a few times), far below what a bomb asks for.
    """

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise InvalidArgumentError(f"a decompression budget of {limit} bytes is negative")
        self.limit = limit
        self.used = 0
        self._charged: set[int] = set()
        self._lock = threading.Lock()  # one budget may be shared by threads

    @classmethod
    def of(cls, value: int | DecompressionBudget | None, size: int) -> DecompressionBudget:
        """What an entry point's ``max_decompressed`` gives, for an input of ``size`` bytes:
        None, the default (:meth:`for_input`); a number of bytes, a budget of its own for this
        call; a budget, that budget, shared with the other calls given it."""
        if isinstance(value, DecompressionBudget):
            return value
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidArgumentError(f"max_decompressed is a number of bytes, a "
                                       f"DecompressionBudget or None, not {value!r}")
        return cls.for_input(size, value)

    @classmethod
    def for_input(cls, size: int, limit: int | None = None) -> DecompressionBudget:
        """The budget of an operation on ``size`` input bytes (``limit`` overrides it)."""
        return cls(BUDGET_FLOOR + BUDGET_RATIO * size if limit is None else limit)

    def charge(self, size: int, offset: int, key: int | None = None) -> None:
        """Take ``size`` bytes from the budget before inflating them, or raise. ``key`` names
        what is inflated (``id()`` of the record that holds the payload): charged once, however
        often it is read (a command that selects images by kernel reads them again to write
        them)."""
        with self._lock:
            if key is not None and key in self._charged:
                return
            if self.used + size > self.limit:
                raise DecompressionError(
                    f"inflating {size} more bytes would exceed this operation's decompression "
                    f"budget of {self.limit} bytes ({self.used} used); raise it if the input is "
                    f"trusted ({option('max_decompressed', 'SIZE')})",
                    offset=offset,
                )
            self.used += size
            if key is not None:
                self._charged.add(key)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DecompressionBudget(limit={self.limit}, used={self.used})"

    __str__ = __repr__


def decompress(codec: str, src: Buffer, expected: int, offset: int) -> bytes:
    """Decompress at most ``expected + 1`` bytes (so a lying size is detected, never trusted).

    ``codec`` is ``"lz4"`` (a block without its size), ``"zstd"`` (a frame) or ``"zlib"`` (a
    stream, inflated with an output limit; one that ends before its checksum is corrupt);
    ``offset`` is where the payload's record starts, for the error. LZ4 needs its output buffer
    up front, so a size beyond LZ4's maximum ratio (255:1) for the input is refused before
    allocating. A zstd frame whose header declares exactly ``expected`` bytes (what nvcc and
    fatbinkit write) is decompressed in one call into one buffer of that size; any other is read
    in 1 MiB steps, so its own header is never trusted either. The caller compares the length
    with ``expected``.
    """
    if codec == "lz4":
        import lz4.block

        if expected == 0:
            return b""
        if expected > _LZ4_MAX_RATIO * len(src) + 64:
            raise DecompressionError(
                f"lz4 payload of {len(src)} bytes cannot inflate to the recorded {expected}",
                offset=offset,
            )
        out: bytes = lz4.block.decompress(bytes(src), uncompressed_size=expected)
        return out
    if codec == "zlib":
        inflater = zlib.decompressobj()
        inflated = inflater.decompress(src, expected + 1)
        if len(inflated) <= expected and not inflater.eof:
            raise DecompressionError(
                f"zlib stream of {len(src)} bytes ends before its end marker", offset=offset
            )
        return inflated
    import zstandard

    data = src  # read where it lies (zstandard takes any buffer): no copy of the payload
    if zstandard.frame_content_size(data) == expected:
        whole: bytes = zstandard.ZstdDecompressor().decompress(data)
        return whole
    # one growing buffer, not a list of chunks joined at the end: that held the output twice
    # (a 256 MiB bomb within the budget peaked at 512 MiB); BytesIO.getvalue() hands over its
    # buffer without a copy
    sink = io.BytesIO()
    total = 0
    dctx = zstandard.ZstdDecompressor()
    with dctx.stream_reader(data, read_across_frames=False) as reader:
        while total <= expected:
            chunk = reader.read(min(1 << 20, expected + 1 - total))
            if not chunk:
                break
            sink.write(chunk)
            total += len(chunk)
    return sink.getvalue()


ZSTD_STEP = 1 << 20  # what zstd_steps inflates at a time


def zstd_steps(src: Buffer, expected: int, offset: int,
               step: int = ZSTD_STEP) -> Iterator[memoryview]:
    """The zstd frame ``src`` inflated in steps of at most ``step`` bytes, never held whole: each
    step a view of one buffer that the next step overwrites (NCCL 2.28's cubins inflate to
    133 MiB). Read to its end, the frame is checked as :meth:`FatbinEntry.data
    <fatbinkit.formats.fatbin.FatbinEntry.data>` checks a payload: a corrupt frame, or one that
    inflates to another size than the ``expected`` its header records, raises
    :class:`~fatbinkit.errors.DecompressionError` (``offset``: the record's, for the error), after
    the steps read so far; at most one byte beyond ``expected`` is inflated. A reader that stops
    early checks nothing more."""
    import zstandard

    buffer = memoryview(bytearray(max(1, min(step, expected + 1))))
    total = 0
    # a view of a mapped file is read through a source that gives its pages back as the frame
    # is read (the stepped cubin read makes three passes over a payload of up to tens of MiB)
    source: Any = ReleasedBehind(src) if isinstance(src, memoryview) and \
        isinstance(src.obj, mmap.mmap) else src
    try:
        with zstandard.ZstdDecompressor().stream_reader(source,
                                                        read_across_frames=False) as reader:
            while total <= expected:
                n = reader.readinto(buffer[: min(len(buffer), expected + 1 - total)])
                if not n:
                    break
                total += n
                yield buffer[:n]
    except zstandard.ZstdError as e:
        raise DecompressionError(f"corrupt zstd payload: {e}", offset=offset) from e
    if total != expected:
        raise DecompressionError(f"zstd payload inflates to {total}"
                                 f"{'+' if total > expected else ''} bytes, header records "
                                 f"{expected}", offset=offset)


def compress(codec: str, data: Buffer, level: int | None = None) -> bytes:
    """A payload compressed deterministically: an LZ4 block without its size (high-compression
    mode) or a zstd frame with its content size, as :func:`decompress` reads them."""
    if codec not in COMPRESSIONS:
        raise InvalidArgumentError(f"compression {codec!r} is not one of {COMPRESSIONS}")
    if level is None:
        level = DEFAULT_LEVELS[codec]
    if level not in LEVELS[codec]:
        raise InvalidArgumentError(f"{codec} level {level} is not in {LEVELS[codec].start}.."
                                   f"{LEVELS[codec].stop - 1}")
    if codec == "lz4":
        import lz4.block

        out: bytes = lz4.block.compress(
            data, mode="high_compression", compression=level, store_size=False
        )
        return out
    import zstandard

    z: bytes = zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)
    return z


def zstd_frame(src: Reader, offset: int) -> tuple[int, int | None] | None:
    """The length of the zstd frame at ``offset`` of ``src`` and the content size its header
    records (None where it records none), found by walking its header and block headers only
    (RFC 8878, 3.1.1: the frame header descriptor's reserved bit clear, a window of at most
    2 GiB, blocks of a defined type no larger than 128 KiB, the last block and the checksum
    inside ``src``); None where the bytes there are not such a frame. Nothing is
    decompressed."""
    head = src.read(offset, 18)  # magic, descriptor, window, dictionary ID, content size
    if len(head) < 6 or head[:4] != ZSTD_MAGIC:
        return None
    descriptor = head[4]
    fcs_flag, single = descriptor >> 6, descriptor >> 5 & 1
    if descriptor & 0x08:  # Reserved_Bit
        return None
    pos = 5
    if not single:
        if 10 + (head[5] >> 3) > 31:  # Window_Log above 31: no decoder takes it
            return None
        pos += 1
    pos += _ZSTD_DICT_ID_SIZES[descriptor & 3]
    n = _ZSTD_FCS_SIZES[fcs_flag] or single
    content = None
    if n:
        if pos + n > len(head):
            return None
        content = int.from_bytes(head[pos : pos + n], "little") + (256 if n == 2 else 0)
    at = offset + pos + n
    while True:
        block = src.read(at, 3)
        if len(block) < 3:
            return None
        value = int.from_bytes(block, "little")
        kind, size = value >> 1 & 3, value >> 3
        if kind == 3 or size > _ZSTD_BLOCK_MAX:
            return None
        at += 3 + (1 if kind == 1 else size)  # an RLE block stores its byte once
        if value & 1:  # Last_Block
            break
    at += 4 * (descriptor >> 2 & 1)  # Content_Checksum
    return (at - offset, content) if at <= len(src) else None


def inflated_head(src: Buffer, size: int) -> bytes:
    """The first ``size`` bytes (fewer where there are fewer) that the zstd frame ``src``
    inflates to: what tells what a compressed image is, without inflating the rest."""
    import zstandard

    try:
        with zstandard.ZstdDecompressor().stream_reader(
                src, read_across_frames=False) as reader:
            out: bytes = reader.read(size)
            return out
    except zstandard.ZstdError:
        return b""
