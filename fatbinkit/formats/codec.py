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
import threading
import zlib
from typing import TYPE_CHECKING, Any

from ..errors import DecompressionError, InvalidArgumentError, option

if TYPE_CHECKING:
    from .elf import Buffer

__all__ = [
    "BUDGET_FLOOR",
    "BUDGET_RATIO",
    "COMPRESSIONS",
    "DEFAULT_LEVELS",
    "LEVELS",
    "MAX_DATA_SIZE",
    "DecompressionBudget",
    "compress",
    "decompress",
]

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

    data = bytes(src)
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
