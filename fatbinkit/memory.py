"""The process's memory while it reads large inputs: pages of a mapped file given back once
read, and glibc's heap trimmed or kept.

An input is memory-mapped (read-only) and read once, in order: the pages read stay in this
process's resident memory until they are given back (``madvise(MADV_DONTNEED)``), although the
kernel keeps them in its page cache, and reading them again maps them again. glibc keeps what a
thread frees in its arena, so a command that inflates large images one after another peaks at
the largest ones it held, unless the heap is trimmed; a short-lived worker that inflates image
after image does better the other way, keeping what it frees instead of faulting fresh pages in
for each image. Everything here is a no-op where it does not apply (a buffer that is not a
read-only mapping, a C library other than glibc, an interpreter other than CPython): it changes
how much memory a process holds, never what it computes.

ctypes is used here only: glibc's ``malloc_trim`` and ``mallopt``, and CPython's buffer protocol
(where a view's bytes lie in memory, so that the pages under part of a mapping can be named).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
from typing import Any

__all__ = ["ReleasedBehind", "give_back", "give_back_range", "keep_freed_heap", "prepare",
           "share_one_arena", "trim_heap"]


def give_back(view: object) -> None:
    """The pages of the whole file mapped under ``view`` (a memoryview of an mmap; anything
    else: a no-op) leave this process's memory: they stay in the page cache, and whatever reads
    them again maps them again."""
    mapped = view.obj if isinstance(view, memoryview) else None
    if isinstance(mapped, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        mapped.madvise(mmap.MADV_DONTNEED)


def give_back_range(view: object) -> None:
    """The pages under ``view`` alone (a memoryview of part of a read-only mmap; anything else:
    a no-op) leave this process's memory, as :func:`give_back` gives back a whole mapping's:
    one large payload's pages, at once, while other threads read other parts of the file. A
    writable mapping's pages are never given back (a private one may hold changes)."""
    mapped = view.obj if isinstance(view, memoryview) else None
    if not isinstance(mapped, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
        return
    with contextlib.suppress(ValueError, OSError):  # closed: nothing mapped
        whole = memoryview(mapped)
        if not whole.readonly:
            return
        start, base = _address(view), _address(whole)
        if start is None or base is None or not base <= start < base + len(whole):
            return
        at = start - base
        first = at - at % mmap.PAGESIZE
        mapped.madvise(mmap.MADV_DONTNEED, first, at + len(view) - first)  # type: ignore[arg-type]


class ReleasedBehind:
    """A read-only view read in order through ``read(n)`` (what ``zstandard``'s stream reader
    takes as its source), its pages given back (:func:`give_back_range`) every ``step`` bytes
    read: a payload of a mapped file inflated in steps holds only the part being read (NCCL's
    13 MiB stored cubins, read three times over by prune's stepped cubin reader)."""

    def __init__(self, view: memoryview, step: int = 1 << 20) -> None:
        self._view = view
        self._at = 0  # read so far
        self._given = 0  # given back so far
        self._step = step

    def read(self, size: int = -1) -> bytes:
        end = len(self._view) if size < 0 else min(len(self._view), self._at + size)
        chunk = bytes(self._view[self._at : end])
        self._at = end
        if self._at - self._given >= self._step or self._at == len(self._view):
            give_back_range(self._view[self._given : self._at])
            self._given = self._at
        return chunk


def trim_heap() -> None:
    """Give the heap's free pages back (glibc's ``malloc_trim(0)``; elsewhere nothing): glibc
    keeps what a thread freed of a large image's buffers in its arena (cuBLASLt's 15 MiB PTX
    texts, the 8 MiB windows of NCCL's zstd frames), so each thread's arena would stay at its
    largest image."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


# glibc's mallopt(3) parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def share_one_arena() -> None:
    """From now on, threads that have no arena yet share the ones that exist (in a process
    that has started no thread: glibc's main arena alone; ``mallopt(M_ARENA_MAX, 1)``;
    elsewhere nothing). By default glibc gives each thread that allocates an arena of its own
    (up to eight per core), and what it frees stays there: prune of cuBLASLt on two threads
    held two worker arenas of about 16 MiB resident each, while glibc counted 7 MiB in use in
    all its arenas together. Process-wide and never undone (glibc fixes its limit the next
    time a thread wants an arena; where more than eight were made, it fixed it then), so it is
    for a command's own process, called before its threads start, not for a library call
    inside someone else's."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_ARENA_MAX, 1)


def keep_freed_heap(limit: int) -> None:
    """From now on, this process's allocations up to ``limit`` bytes come from the heap and
    what it frees stays there up to ``limit`` (glibc's ``mallopt``: mmap and trim thresholds;
    elsewhere nothing). For a short-lived worker that inflates image after image: by default
    glibc gives each image larger than its mmap threshold (128 KiB to 32 MiB, moving) fresh
    pages from the kernel and returns them when it is freed, so the next image faults its
    pages in again (libtorch_cuda.so, ``check`` of three archs: 2.5 GiB inflated, 110,000 page
    faults and 0.27 s of system time in one process; 34,000 and 0.11 s with the heap kept).
    A worker forked from a process that called :func:`prepare` finds glibc without a lookup."""
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, limit)
        libc.mallopt(_M_TRIM_THRESHOLD, limit)


def prepare() -> None:
    """Look glibc up now (before a fork: a forked worker then imports and loads nothing)."""
    _glibc()


@functools.cache
def _glibc() -> Any:
    """glibc, with ``malloc_trim`` and ``mallopt`` typed, or None (another C library)."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.malloc_trim.argtypes = (ctypes.c_size_t,)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError):
        return None
    return libc


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (the stable ABI's since 3.11): where a buffer's bytes lie."""

    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


def _address(buffer: object) -> int | None:
    """Where ``buffer``'s bytes start in this process's memory (None: not known here)."""
    api = getattr(ctypes, "pythonapi", None)
    if api is None:  # not CPython
        return None
    view = _PyBuffer()
    try:
        if api.PyObject_GetBuffer(ctypes.py_object(buffer), ctypes.byref(view), 0) != 0:
            return None
    except (AttributeError, ValueError, BufferError):
        return None
    try:
        return int(view.buf or 0)
    finally:
        api.PyBuffer_Release(ctypes.byref(view))
