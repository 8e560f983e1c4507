"""Large zstd cubins read in steps (issue 32): ``compact_cubin`` and ``streamed_cubin``.

prune and recompress read each image's kernel names and driver-floor facts; NCCL 2.28's zstd
cubins inflate to 105-133 MiB each, so those of more than ``STREAM_ABOVE`` bytes are inflated in
steps into a compact ELF of the sections the readers read. Oracle: the same readers on the whole
inflated cubin.

- Every SASS image of the suite's real libraries, stored as zstd (re-encoded where it is not),
  read streamed (threshold 0) gives the CubinOutline and toolkit of the whole bytes, with the C
  walk and with the pure reader; so does image_from_entry and slim's driver-floor read.
- A corrupt, truncated, or other-size zstd payload, and a cubin the readers refuse, give the
  errors (and the ``unread`` image) that the whole read gives.
- The traced memory of a streamed read of a 48 MiB cubin is its compact ELF plus a few MiB.
"""

from __future__ import annotations

import dataclasses
import struct
import tracemalloc
from collections.abc import Iterator

import pytest
import zstandard
from thirdparty import ALL_TEST_MEMBERS, fetch

import fatbinkit
from fatbinkit import slim
from fatbinkit.compat import ImageInfo
from fatbinkit.errors import FatbinkitError
from fatbinkit.formats import cubin, elf
from fatbinkit.formats.codec import DecompressionBudget
from fatbinkit.formats.cubin import compact_cubin, cubin_outline, cubin_toolkit
from fatbinkit.formats.fatbin import EntryFlags, EntryKind, FatbinEntry
from fatbinkit.vendors.cuda import loading
from fatbinkit.vendors.cuda.loading import image_from_entry, streamed_cubin


def _sass() -> Iterator[FatbinEntry]:
    """Every SASS entry of the suite's real libraries (detached from their files)."""
    for member in ALL_TEST_MEMBERS:
        with fatbinkit.open(fetch(member)) as binary:
            for code in binary.codes:
                e = code.entry
                if isinstance(e, FatbinEntry) and e.header.kind == EntryKind.ELF:
                    yield e.detached()


@pytest.fixture(scope="module")
def sass() -> list[FatbinEntry]:
    entries = list(_sass())
    assert len(entries) > 500
    return entries


def _zstd(entry: FatbinEntry, data: bytes | None = None) -> FatbinEntry:
    """``entry`` (or ``data`` as its payload) stored as one zstd frame, whatever it compresses
    to (level 1: fast)."""
    data = entry.data() if data is None else data
    packed = zstandard.ZstdCompressor(level=1).compress(data)
    stored = packed + bytes(-len(packed) % 8)
    h = entry.header
    header = dataclasses.replace(h, size=len(stored), compressed_size=len(packed),
                                 uncompressed_size=len(data),
                                 flags=h.flags & ~int(EntryFlags.COMPRESSED_LZ4)
                                 | int(EntryFlags.COMPRESSED_ZSTD))
    out = FatbinEntry(header, entry.extra, stored)
    assert out.compression == "zstd"
    return out


def _read(f: object, data: bytes) -> object:
    try:
        return f(data)  # type: ignore[operator]
    except FatbinkitError as e:
        return type(e), str(e)


def _steps(data: bytes, step: int) -> object:
    return lambda: (memoryview(data)[i : i + step] for i in range(0, len(data), step))


@pytest.mark.parametrize("walk", [True, False], ids=["walk", "pure"])
def test_every_real_cubin_reads_equal_streamed(sass: list[FatbinEntry], walk: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each SASS image, its bytes given in steps of 4 KiB and of 1 MiB, then stored as zstd and
    streamed: the compact ELF gives the outline and toolkit of the whole bytes."""
    if not walk:
        monkeypatch.setattr(cubin, "_compiled", None)
    zstd = 0
    for entry in sass:
        data = entry.data()
        whole = _read(cubin_outline, data), _read(cubin_toolkit, data)
        zstd += entry.compression == "zstd"
        for step in (4096, 1 << 20):
            compact = compact_cubin(_steps(data, step), len(data))  # type: ignore[arg-type]
            assert compact is not None
            assert (_read(cubin_outline, compact), _read(cubin_toolkit, compact)) == whole
        packed = entry if entry.compression == "zstd" else _zstd(entry)
        compact = streamed_cubin(packed, above=0)
        assert compact is not None and len(compact) <= len(data) + 4096  # alignment only
        assert (_read(cubin_outline, compact), _read(cubin_toolkit, compact)) == whole
    assert zstd > 0  # CuPy's CUDA 13 builds: zstd as nvcc stores it


def test_entry_reads_equal_streamed(sass: list[FatbinEntry],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """image_from_entry and prune's driver-floor read (slim._floor_image) of zstd entries: the
    same ImageInfo streamed (threshold 0) as whole, charged to the budget the same."""
    entries = [e if e.compression == "zstd" else _zstd(e) for e in sass[::7]]
    budget = DecompressionBudget(1 << 40)

    def read() -> list[object]:
        return [(image_from_entry(e, "x", streamed=True), slim._floor_image(e, budget))
                for e in entries]

    monkeypatch.setattr(loading, "STREAM_ABOVE", 1 << 40)
    whole, used = read(), budget.used
    monkeypatch.setattr(loading, "STREAM_ABOVE", 0)
    budget = DecompressionBudget(1 << 40)
    assert read() == whole and budget.used == used


def _entry_errors(entry: FatbinEntry, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What image_from_entry and slim._floor_image give for ``entry``, or their errors."""
    out: list[object] = []
    for floor in (False, True):
        try:
            out.append(slim._floor_image(entry, DecompressionBudget(1 << 40)) if floor
                       else image_from_entry(entry, streamed=True))
        except FatbinkitError as e:
            out.append((type(e), str(e), getattr(e, "offset", None)))
    return out


def _same_streamed(entry: FatbinEntry, monkeypatch: pytest.MonkeyPatch) -> list[object]:
    monkeypatch.setattr(loading, "STREAM_ABOVE", 1 << 40)
    whole = _entry_errors(entry, monkeypatch)
    monkeypatch.setattr(loading, "STREAM_ABOVE", 0)
    assert _entry_errors(entry, monkeypatch) == whole
    return whole


def _payload(entry: FatbinEntry, stored: bytes, uncompressed: int,
             compressed: int | None = None) -> FatbinEntry:
    h = entry.header
    header = dataclasses.replace(h, size=len(stored), uncompressed_size=uncompressed,
                                 compressed_size=len(stored) if compressed is None
                                 else compressed)
    return FatbinEntry(header, entry.extra, stored, offset=0x1230)


def test_bad_payloads_give_the_whole_read_errors(sass: list[FatbinEntry],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A zstd frame cut short, one with a corrupt block, and a frame that inflates to 8 bytes
    more or fewer than its header records: the errors of the whole read, streamed or not; and
    streamed_cubin declines them (the caller reads whole)."""
    big = max(sass, key=lambda e: e.data_size)
    good = _zstd(big)
    packed = bytes(good.stored[: good.header.compressed_size])
    size = good.header.uncompressed_size
    cut = packed[: len(packed) // 2]
    corrupt = bytearray(packed)
    for i in range(len(packed) // 3, len(packed) // 3 + 64):
        corrupt[i] ^= 0x5A
    bad = [
        _payload(good, cut + bytes(-len(cut) % 8), size, len(cut)),
        _payload(good, bytes(corrupt) + bytes(-len(corrupt) % 8), size, len(corrupt)),
        _payload(good, bytes(good.stored), size + 8, len(packed)),
        _payload(good, bytes(good.stored), size - 8, len(packed)),
    ]
    for entry in bad:
        got = _same_streamed(entry, monkeypatch)
        assert all(isinstance(g, tuple) and "zstd" in g[1] for g in got), got
        assert streamed_cubin(entry, above=0) is None


def test_refused_cubin_gives_the_same_unread_image(sass: list[FatbinEntry],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A cubin whose ELF ABI is neither 7 nor 8, one whose e_flags name no SM, and one whose
    symbol table links to a missing section, stored as zstd: the unread image (and error text)
    of the whole read, streamed or not."""
    data = bytearray(next(e for e in sass if len(e.data()) > 4096).data())
    head = elf.FileHeader.unpack(bytes(data[:64]))
    abi = bytearray(data)
    abi[elf.EI_ABIVERSION] = 9
    flags = bytearray(data)
    struct.pack_into("<I", flags, 48, 0)
    link = bytearray(data)
    rows, _names = elf.section_table(bytes(data))
    symtab = next(i for i, r in enumerate(rows) if r[1] == elf.SHT_SYMTAB)
    struct.pack_into("<I", link, head.shoff + 64 * symtab + 40, head.shnum + 5)
    entry = sass[0]
    for broken in (abi, flags, link):
        got = _same_streamed(_zstd(entry, bytes(broken)), monkeypatch)
        img = got[0]
        assert isinstance(img, ImageInfo) and img.unread, got


def _padded(data: bytes, pad: int) -> bytes:
    """The cubin ``data`` with ``pad`` zero bytes before a copy of its section header table,
    which ``e_shoff`` then names: as large as NCCL's, its table at the end as ptxas puts it."""
    head = elf.FileHeader.unpack(data[:64])
    table = data[head.shoff : head.shoff + head.shnum * head.shentsize]
    out = bytearray(data) + bytes(pad) + table
    struct.pack_into("<Q", out, 40, len(data) + pad)
    return bytes(out)


def test_streamed_memory_is_bounded(sass: list[FatbinEntry]) -> None:
    """A zstd cubin inflating to 48 MiB (a real one padded): read streamed, the traced memory
    peaks at its compact ELF plus a few MiB (the 1 MiB steps, the section table), not at its
    size; the outline is that of the whole bytes."""
    entry = max(sass, key=lambda e: e.data_size)
    data = _padded(entry.data(), 48 << 20)
    big = _zstd(entry, data)
    whole = cubin_outline(data), cubin_toolkit(data)
    del data
    tracemalloc.start()
    try:
        compact = streamed_cubin(big)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert compact is not None
    assert (cubin_outline(compact), cubin_toolkit(compact)) == whole
    assert peak < len(compact) + (4 << 20), (peak, len(compact))


def test_small_and_other_entries_are_read_whole(sass: list[FatbinEntry]) -> None:
    """At or below the threshold, and for LZ4 or uncompressed payloads, streamed_cubin gives
    None: those keep the whole read."""
    entry = _zstd(sass[0])
    assert streamed_cubin(entry) is None  # far below STREAM_ABOVE
    assert streamed_cubin(entry, above=entry.header.uncompressed_size) is None
    assert streamed_cubin(entry, above=entry.header.uncompressed_size - 1) is not None
    plain = next(e for e in sass if e.compression is None)
    assert streamed_cubin(plain, above=0) is None
