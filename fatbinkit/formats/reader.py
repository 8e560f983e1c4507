"""A bounds-checked reader over an input: header bytes read through a window (with ``pread`` on a
file, so that listing a memory-mapped file never maps its payload pages), payloads as views. The
container parsers (ELF sections, fatbin containers, and the vendors' formats) read through it.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Iterator

from ..memory import give_back_range
from . import native

__all__ = ["SEARCH_WINDOW", "Reader"]

#: What :meth:`Reader.find` holds at once (16 MiB): one window of the input.
SEARCH_WINDOW = 16 << 20

_ZERO_BLOCK_SIZE = 4 << 20  # padding is compared with zeros in blocks of this size


@functools.cache
def _zero_block() -> bytes:
    return bytes(_ZERO_BLOCK_SIZE)


class Reader:
    """What the parser reads: header bytes through :meth:`read`, payloads as views of ``view``.

    Given a file descriptor, headers are read with ``os.pread`` so that listing a memory-mapped
    file never maps its payload pages (the kernel maps whole neighbourhoods of a touched page);
    ``base`` is where ``view`` starts in that file.
    """

    WINDOW = 4096

    def __init__(self, view: memoryview, fd: int | None = None, base: int = 0) -> None:
        self.view = view
        self.fd = fd
        self.base = base
        self._size = len(view)
        self._buf = b""
        self._at = 0
        self._seek_data = hasattr(os, "SEEK_DATA")

    def __len__(self) -> int:
        return self._size

    def skip_zeros(self, offset: int) -> int:
        """The first position at or after ``offset`` whose byte is not zero (the size: none).

        Holes of a sparse file are jumped with ``SEEK_DATA`` before each block where the file
        system supports it; the rest is read in blocks that double from 4 KiB to 4 MiB, each
        compared with zeros in C: gigabytes of padding cost a memory scan, not a million 4 KiB
        steps.
        """
        step = self.WINDOW
        while (offset := self._next_data(offset)) < self._size:
            n = min(step, self._size - offset)
            block = (os.pread(self.fd, n, self.base + offset) if self.fd is not None  # read-
                     else self.view[offset : offset + n].tobytes())  # ahead, not random faults
            if n != _ZERO_BLOCK_SIZE or block != _zero_block():
                rest = len(block.lstrip(b"\0"))
                if rest:
                    return offset + n - rest
            offset += n
            step = min(step * 2, _ZERO_BLOCK_SIZE)
        return self._size

    def _next_data(self, offset: int) -> int:
        """``offset``, or past the hole of a sparse file that starts there."""
        if self.fd is None or not self._seek_data:
            return offset
        try:
            data = os.lseek(self.fd, self.base + offset, os.SEEK_DATA) - self.base
        except OSError as e:
            if e.errno != errno.ENXIO:  # EINVAL: the file system cannot tell; read it all
                self._seek_data = False
                return offset
            data = self._size  # ENXIO: only a hole to the end of the file
        return max(offset, min(data, self._size))

    def find(self, magic: bytes, start: int = 0, stop: int | None = None) -> Iterator[int]:
        """Every position at or after ``start`` where ``magic`` begins and ends by ``stop``
        (None: the end of the input), in order, overlapping hits too. The input is searched in
        windows of :data:`SEARCH_WINDOW` bytes, read with ``pread`` from a file (a search of a
        gigabyte maps none of it) and dropped after use: memory stays one window whatever the
        input's size."""
        step = SEARCH_WINDOW
        pos = start
        end = self._size if stop is None else min(stop, self._size)
        while pos <= end - len(magic):
            n = min(step + len(magic) - 1, end - pos)
            block = (os.pread(self.fd, n, self.base + pos) if self.fd is not None
                     else self.view[pos : pos + n].tobytes())
            hit = block.find(magic)
            while hit >= 0:
                yield pos + hit
                hit = block.find(magic, hit + 1)
            pos += step

    def holds(self, needle: bytes, offset: int, size: int) -> bool:
        """Whether ``needle`` lies within the ``size`` bytes at ``offset``. With the C extension
        (:mod:`~fatbinkit.formats.native`) they are searched where they are (``memmem``): a
        mapped file's pages are not copied, and are given back after
        (:func:`fatbinkit.memory.give_back_range`); libtorch_cuda.so's 72 MB string table takes
        0.02 s, not the 0.08 s of reading and searching it. Else as :meth:`find` searches."""
        stop = min(offset + size, self._size)
        if offset < 0 or stop - offset < len(needle):
            return False
        if native.compiled is None:
            return next(self.find(needle, offset, stop), -1) >= 0
        part = self.view[offset:stop]
        try:
            return bool(native.compiled.find(part, needle) >= 0)
        finally:
            give_back_range(part)

    def read(self, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes at ``offset`` (fewer at the end); file reads go by 4 KiB windows."""
        start = offset - self._at
        if start >= 0 and size >= 0 and start + size <= len(self._buf):  # inside the window
            return self._buf[start : start + size]
        size = min(size, self._size - offset)
        if size <= 0:
            return b""
        if self.fd is None:
            return bytes(self.view[offset : offset + size])
        self._buf = os.pread(
            self.fd, max(size, min(self.WINDOW, self._size - offset)), self.base + offset
        )
        self._at = offset
        return self._buf[:size]
