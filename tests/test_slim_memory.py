"""prune/recompress memory (issue 32): kept bytes held once, images inflated within a bound.

Structural checks, no RSS threshold (memory figures vary with the allocator and the machine;
benchmarks/speed.py measures them):

- Each module's new bytes go to a mapped temporary file as planned: the rewrite gets views of
  that mapping, in pieces, never the device code joined into one buffer.
- A zstd payload kept as stored is checked in steps: a frame that inflates to fewer or more
  bytes than its entry records is refused, nothing written, as the whole inflation refused it.
- Images read on several threads: no more submitted at once than inflate to the bound
  together, one larger image alone; results in order.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from resident import mapped_kib, needs_smaps
from thirdparty import CUPY13_RANDOM, fetch

import fatbinkit
from fatbinkit import slim as slim_module
from fatbinkit.errors import DecompressionError
from fatbinkit.formats import elf, elf_edit
from fatbinkit.formats.fatbin import EntryKind, FatbinEntry
from fatbinkit.slim import recompress, slim


def test_module_bytes_reach_the_rewrite_as_views_of_a_file(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """CuPy 14.2's random module for CUDA 13 (zstd SASS and PTX): recompressed at a level, every
    entry is encoded anew; the rewrite receives each container as a view of the spill file's
    mapping, one piece per container, and nothing joins them."""
    lib = fetch(CUPY13_RANDOM)
    seen: list[elf_edit.Resize] = []
    rewrite = elf_edit.rewrite

    def spy(source: Any, output: Any, resizes: Any, *args: Any, **kw: Any) -> Any:
        seen.extend(resizes)
        return rewrite(source, output, resizes, *args, **kw)

    def joined(self: elf_edit.Pieces) -> bytes:
        raise AssertionError("the section's contents were joined")

    monkeypatch.setattr(elf_edit, "rewrite", spy)
    monkeypatch.setattr(elf_edit.Pieces, "joined", joined)
    report = slim(lib, tmp_path / "out.so", codec="zstd", level=6)
    assert report.recompressed > 0
    assert seen and all(isinstance(r.data, elf_edit.Pieces) for r in seen)
    parts = [data for r in seen if isinstance(r.data, elf_edit.Pieces) for _, data in r.data.parts]
    assert len(parts) == report.modules
    assert all(isinstance(p, memoryview) and isinstance(p.obj, mmap.mmap) for p in parts)
    with fatbinkit.open(tmp_path / "out.so") as out:
        assert {c.entry.compression for c in out.codes} <= {"zstd", None}


def test_zstd_payload_of_another_size_is_refused(tmp_path: Path) -> None:
    """The PTX entry (zstd; every image left as stored, and no arch of the file picks the PTX
    over its SASS, so only the check inflates it) records 8 bytes more, or fewer, than its
    frame holds: refused, nothing written."""
    lib = fetch(CUPY13_RANDOM)
    data = bytearray(lib.read_bytes())
    with fatbinkit.open(lib) as binary:
        entry = next(c.entry for c in binary.codes
                     if isinstance(c.entry, FatbinEntry) and c.entry.header.kind == EntryKind.PTX)
    head = entry.header
    assert entry.compression == "zstd"
    at = data.find(head.pack())
    assert at > 0 and data.find(head.pack(), at + 1) < 0
    for lie in (8, -8):
        bad = bytearray(data)
        wrong = dataclasses.replace(head, uncompressed_size=head.uncompressed_size + lie)
        bad[at : at + len(head.pack())] = wrong.pack()
        src = tmp_path / f"bad{lie}.so"
        src.write_bytes(bad)
        with pytest.raises(DecompressionError, match=r"zstd payload inflates to \d+\+? bytes"):
            recompress(src, tmp_path / "out.so", codec="zstd")
        assert not (tmp_path / "out.so").exists()
    recompress(lib, tmp_path / "out.so", codec="zstd")  # the intact one


@pytest.mark.parametrize(("sizes", "most"), [
    ([48 << 20] * 4, 1),  # each near the bound: one at a time
    ([1 << 20, 100 << 20, 1 << 20], 1),  # one larger than the bound: alone
    ([1 << 20] * 12, 4),  # small ones: several (as many as the pool runs)
])
def test_images_inflated_at_once_are_bounded(sizes: list[int], most: int) -> None:
    running = 0
    peak = 0
    lock = threading.Lock()

    def read(e: Any) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        return int(e.index)

    entries = [SimpleNamespace(data_size=n, index=i) for i, n in enumerate(sizes)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(slim_module._bounded(pool, read, entries))  # type: ignore[arg-type]
    assert got == list(range(len(sizes)))
    assert peak <= most
    if most > 1:
        assert peak > 1  # the bound still lets small images share the cores


def _mapped_file(tmp_path: Path, size: int) -> tuple[Path, memoryview]:
    path = tmp_path / "mapped.bin"
    path.write_bytes(bytes(range(256)) * (size // 256))
    with path.open("rb") as f:
        view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    assert bytes(view) == path.read_bytes()  # every page mapped
    return path, view


@needs_smaps
def test_a_read_payload_leaves_memory_alone_and_at_once(tmp_path: Path) -> None:
    """A worker done with a large payload (a view of part of the mapped input) gives back
    that payload's pages, not the rest of the mapping, even when its reader fails; the bytes
    read again are the same. Small payloads, and views of anything but a read-only mapping,
    are left as they are."""
    path, view = _mapped_file(tmp_path, 32 << 20)
    full = mapped_kib(path)
    assert full >= 31 << 10
    part = view[(8 << 20) + 100 : 24 << 20]

    def fails(e: Any) -> int:
        raise DecompressionError("corrupt")

    with pytest.raises(DecompressionError):
        slim_module._given_back(fails)(SimpleNamespace(stored=part, data_size=0))  # type: ignore[arg-type]
    left = mapped_kib(path)
    assert full - left >= 15 << 10  # the payload's 16 MiB went
    assert left >= 15 << 10  # the others stayed
    assert bytes(part[:256]) == bytes(view[(8 << 20) + 100 : (8 << 20) + 356])
    slim_module._give_back_payload(view[: 1 << 19])  # under 1 MiB: given back with the others
    slim_module._give_back_payload(bytearray(4 << 20))  # not mapped: nothing to do
    assert mapped_kib(path) >= left


@needs_smaps
def test_the_check_of_the_output_gives_back_the_spilled_pages(tmp_path: Path) -> None:
    """The output's check reads each spilled module once: the pages it read of the spill
    file's mapping leave the process as it goes, not once the module is done."""
    path, view = _mapped_file(tmp_path, 24 << 20)
    with path.open("rb") as f:
        assert slim_module._holds(elf.FileSource(f.fileno(), len(view)), 0, view)
    assert mapped_kib(path) < 4 << 10


def test_a_module_reaches_the_rewrite_in_steps() -> None:
    """A module's new bytes larger than a few MiB (NCCL 2.28's largest: 56 MiB) are given to
    the rewrite as several views, none over the bytes it writes between two give-backs of
    their pages, laid end to end where the module goes."""
    data = memoryview(bytes(range(256)) * ((10 << 20) // 256 + 3))
    m = slim_module._Module("s", 0, 0, None, [], data=data)
    contents, moved = slim_module._pack([(1, "s", len(data))], {1: [m]}, False, 8, {1: {0}})
    parts = contents[1].parts
    assert len(parts) == 3 and moved == {1: {}}
    assert all(len(p) <= slim_module._SPILL_HELD and isinstance(p, memoryview)
               for _, p in parts)
    assert [at for at, _ in parts] == [0, 4 << 20, 8 << 20]
    assert b"".join(bytes(p) for _, p in parts) == bytes(data)


@pytest.mark.parametrize(("size", "trims"), [(5 << 20, 1), (1 << 20, 0)])
def test_the_heap_is_trimmed_after_a_large_image(size: int, trims: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An image that inflates to more than 4 MiB read, the heap's free pages go back
    (glibc keeps a thread's freed buffers in its arena); smaller ones trim nothing."""
    calls = []
    monkeypatch.setattr(slim_module, "trim_heap", lambda: calls.append(1))
    got = slim_module._given_back(lambda e: 7)(SimpleNamespace(stored=b"", data_size=size))  # type: ignore[arg-type]
    assert got == 7 and len(calls) == trims


@needs_smaps
def test_a_payload_kept_as_stored_leaves_memory_once_spilled(tmp_path: Path) -> None:
    """A payload kept as stored is a view of the mapped input: once planning has written it
    to the spill file, its pages leave the process (a module's may be tens of MiB)."""
    path, view = _mapped_file(tmp_path, 16 << 20)
    new = SimpleNamespace(parts=lambda: [b"head", view], entries=(), version=1,
                          header_extra=b"", tail=b"")
    m = SimpleNamespace(old=SimpleNamespace(entries=()))
    with (tmp_path / "spill").open("w+b") as f:
        spill = slim_module._Spill(f)
        spill.add(m, new)  # type: ignore[arg-type]
        assert mapped_kib(path) < 1 << 10
        assert os.pread(f.fileno(), 16, 4) == bytes(view[:16])
