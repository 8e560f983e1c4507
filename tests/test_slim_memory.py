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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from thirdparty import CUPY13_RANDOM, fetch

import fatbinkit
from fatbinkit import slim as slim_module
from fatbinkit.errors import DecompressionError
from fatbinkit.formats import elf_edit
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
