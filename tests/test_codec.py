"""The payload codecs apart from any container: what :func:`compress` writes is what the codec
libraries themselves read, what they write :func:`decompress` reads, and no lying size is trusted.
The fatbin reader's use of them is tested in test_fatbin_format.py."""

from __future__ import annotations

import pickle

import lz4.block
import pytest
import zstandard

from fatbinkit.errors import DecompressionError, InvalidArgumentError
from fatbinkit.formats import codec, fatbin
from fatbinkit.formats.codec import (
    COMPRESSIONS,
    LEVELS,
    DecompressionBudget,
    compress,
    decompress,
)

DATA = b"".join(b"ld.global.f32 %%f%d, [%%rd%d];\n" % (i, i) for i in range(2000))


@pytest.mark.parametrize("level", [1, 3, 12])
def test_lz4_block_read_by_the_lz4_library(level: int) -> None:
    packed = compress("lz4", DATA, level)
    assert lz4.block.decompress(packed, uncompressed_size=len(DATA)) == DATA
    assert compress("lz4", DATA, level) == packed  # deterministic


@pytest.mark.parametrize("level", [1, 6, 22])
def test_zstd_frame_read_by_the_zstandard_library(level: int) -> None:
    packed = compress("zstd", DATA, level)
    assert zstandard.frame_content_size(packed) == len(DATA)
    assert zstandard.ZstdDecompressor().decompress(packed) == DATA


def test_what_the_libraries_write_is_read() -> None:
    block = lz4.block.compress(DATA, store_size=False)
    assert decompress("lz4", memoryview(block), len(DATA), 0) == DATA
    assert decompress("lz4", b"", 0, 0) == b""
    frame = zstandard.ZstdCompressor().compress(DATA)
    assert decompress("zstd", frame, len(DATA), 0) == DATA
    # a frame without its content size is read in steps, never past the recorded size + 1
    unsized = zstandard.ZstdCompressor(write_content_size=False).compress(DATA)
    assert zstandard.frame_content_size(unsized) == -1
    assert decompress("zstd", unsized, len(DATA), 0) == DATA
    assert decompress("zstd", unsized, 100, 0) == DATA[:101]


def test_a_size_lz4_cannot_reach_is_refused_with_the_offset() -> None:
    block = lz4.block.compress(DATA, store_size=False)
    with pytest.raises(DecompressionError, match="cannot inflate") as info:
        decompress("lz4", block, 255 * len(block) + 65, 0x40)
    assert info.value.offset == 0x40


def test_codecs_and_levels_are_checked() -> None:
    assert COMPRESSIONS == ("lz4", "zstd")
    with pytest.raises(InvalidArgumentError, match="compression 'zlib' is not one of"):
        compress("zlib", DATA)
    for name in COMPRESSIONS:
        top = LEVELS[name].stop
        with pytest.raises(InvalidArgumentError, match=f"{name} level {top} is not in 1\\.\\."):
            compress(name, DATA, top)


def test_a_budget_charges_each_key_once_and_survives_pickling() -> None:
    budget = DecompressionBudget(100)
    budget.charge(60, 0, key=1)
    budget.charge(60, 0, key=1)  # the same payload read again
    with pytest.raises(DecompressionError, match=r"budget of 100 bytes \(60 used\)") as info:
        budget.charge(41, 0x10)
    assert info.value.offset == 0x10
    copy = pickle.loads(pickle.dumps(budget))
    assert (copy.limit, copy.used) == (100, 60)
    assert repr(copy) == "DecompressionBudget(limit=100, used=60)"
    copy.charge(40, 0)
    assert DecompressionBudget.for_input(10).limit == codec.BUDGET_FLOOR + codec.BUDGET_RATIO * 10
    assert DecompressionBudget.of(budget, 10) is budget
    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        DecompressionBudget.of(True, 10)


def test_fatbin_keeps_the_names_it_exported() -> None:
    for name in ("DecompressionBudget", "compress", "MAX_DATA_SIZE", "BUDGET_RATIO", "BUDGET_FLOOR",
                 "LEVELS", "DEFAULT_LEVELS", "COMPRESSIONS"):
        assert getattr(fatbin, name) is getattr(codec, name), name
