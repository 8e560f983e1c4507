"""The floor of ``prune``'s and ``recompress``'s memory on one library: what reading its images
holds, with nothing else.

Pruning reads the kernel names of every image of a module it drops images from, and a large
image is read in steps (``codec.zstd_steps``: 1 MiB at a time). A zstd decoder still holds the
frame's window: RFC 8878, 3.1.1.1.2, calls ``Window_Size`` "the minimum memory buffer required to
decompress a frame" (a Single_Segment frame's window is its whole content). So no reader of a
library's images peaks below the command's imports plus its largest window and one step. This
child measures that, and the same one image at a time over the whole library (GNU time's peak
in ``benchmarks/speed.py``):

- ``frame LIB``: the imports of ``fatbinkit prune``, then the zstd frame of ``LIB``'s
  ``.nv_fatbin`` with the largest window (of those, the largest content) inflated in steps as
  prune inflates it (the pages the search for it read given back first), and nothing else;
  prints the window and content sizes.
- ``images LIB``: the same imports, then every SASS and PTX image of ``LIB``'s ``.nv_fatbin``
  read once, in order, one at a time, as prune reads it (``image_from_entry(streamed=True)``),
  the input's pages given back every 4 MiB and the heap trimmed after each image over 4 MiB,
  as prune does; nothing is kept.

Usage: python benchmarks/slim_floor.py frame|images LIB
"""

from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Iterator
from typing import Any


def _entries(path: str) -> Iterator[Any]:
    """Every entry of the ``.nv_fatbin`` containers of ``path``, read as prune reads them (the
    headers from the file, the payloads from a read-only mapping)."""
    from fatbinkit.formats import elf
    from fatbinkit.formats.fatbin import FatbinContainer, Reader, iter_containers

    fd = os.open(path, os.O_RDONLY)
    view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
    fat = next(s for s in elf.sections(view, elf.file_header(view)) if s.name == ".nv_fatbin")
    src = Reader(view[fat.header.offset : fat.header.offset + fat.header.size], fd,
                 fat.header.offset)
    for off, head in iter_containers(src):
        yield from FatbinContainer.parse(src, off, head).entries


def largest_frame(path: str) -> tuple[Any, str]:
    """The entry of ``path`` whose zstd frame has the largest window (of those, the largest
    content), with what it is (``SASS: window 8.0 MiB, 15.9 MiB inflated``); the pages the
    search read are given back as it goes."""
    import zstandard

    from fatbinkit.formats.fatbin import EntryKind
    from fatbinkit.memory import give_back

    best: tuple[tuple[int, int], Any] | None = None
    for k, e in enumerate(e for e in _entries(path) if e.compression == "zstd"):
        p = zstandard.get_frame_parameters(bytes(e.stored[:18]))
        key = (p.window_size or p.content_size, p.content_size)
        if best is None or key > best[0]:
            best = key, e
        if k % 16 == 15:
            give_back(e.stored)  # the pages the search read: the whole mapping's
    assert best is not None, "no zstd payload"
    (size, content), largest = best
    give_back(largest.stored)
    kind = {EntryKind.PTX: "PTX", EntryKind.ELF: "SASS"}.get(largest.header.kind,
                                                             f"kind {largest.header.kind}")
    return largest, f"{kind}: window {size / 2**20:.1f} MiB, {content / 2**20:.1f} MiB inflated"


def frame(path: str) -> str:
    from fatbinkit.formats.codec import zstd_steps

    largest, what = largest_frame(path)
    stored = largest.stored[: largest.header.compressed_size]
    for _ in zstd_steps(stored, largest.data_size, largest.offset):
        pass
    return what


def images(path: str) -> str:
    from fatbinkit.formats.fatbin import EntryKind
    from fatbinkit.memory import give_back, trim_heap
    from fatbinkit.vendors.cuda.loading import image_from_entry

    read = count = 0
    for e in _entries(path):
        if e.header.kind not in (EntryKind.ELF, EntryKind.PTX):  # the images prune reads
            continue
        image_from_entry(e, streamed=True)
        count += 1
        read += len(e.stored)
        if read >= 4 << 20:
            give_back(e.stored)
            read = 0
        if e.data_size > 4 << 20:
            trim_heap()
    return f"{count} images"


def main() -> None:
    import fatbinkit.cli  # the command's imports
    import fatbinkit.slim  # noqa: F401

    mode, path = sys.argv[1:3]
    print({"frame": frame, "images": images}[mode](path))


if __name__ == "__main__":
    main()
