"""fatbinkit.memory: pages of a read-only mapping given back (all of it, part of it, behind a
reader), glibc's heap trimmed; never a change to what is read. Resident pages are read from
Linux's /proc/self/smaps, for the test's own file only."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
import zstandard
from resident import mapped_kib, needs_smaps

from fatbinkit import memory
from fatbinkit.formats.codec import zstd_steps


def _mapped(path: Path, data: bytes) -> memoryview:
    path.write_bytes(data)
    with path.open("rb") as f:
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


@needs_smaps
def test_a_range_and_a_whole_mapping_are_given_back(tmp_path: Path) -> None:
    """give_back_range drops the pages under a view and no others; give_back drops them all;
    the bytes read again are the same."""
    data = bytes(range(256)) * ((8 << 20) // 256)
    path = tmp_path / "m.bin"
    view = _mapped(path, data)
    assert bytes(view) == data and mapped_kib(path) >= 8 << 10 - 4
    memory.give_back_range(view[(2 << 20) + 5 : 6 << 20])
    left = mapped_kib(path)
    assert 3 << 10 <= left <= (4 << 10) + 8
    memory.give_back(view)
    assert mapped_kib(path) == 0
    assert bytes(view) == data


def test_a_private_mapping_keeps_its_changes(tmp_path: Path) -> None:
    """Only a read-only mapping's pages are given back: a private one's may hold changes,
    which dropping its pages would lose; anything but a mapping is left alone."""
    path = tmp_path / "copy.bin"
    path.write_bytes(bytes(4 << 20))
    with path.open("rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(mapped)
    view[: 2 << 20] = b"\x01" * (2 << 20)
    memory.give_back_range(view[: 2 << 20])
    assert bytes(view[:8]) == b"\x01" * 8
    memory.give_back_range(memoryview(bytearray(16)))
    memory.give_back_range(b"not a view")


@needs_smaps
def test_a_frame_read_in_steps_leaves_its_input_behind(tmp_path: Path) -> None:
    """zstd_steps reads a frame that lies in a mapped file through ReleasedBehind: once read
    to its end, none of its 12 MiB of input pages stay resident (without it, all of them do),
    and what it inflates is the frame's content."""
    import os

    content = os.urandom(12 << 20)  # incompressible: the frame is as large as its content
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(content)
    path = tmp_path / "frame.bin"
    view = _mapped(path, frame)
    out = bytearray()
    for step in zstd_steps(view, len(content), 0):
        out += step
        assert mapped_kib(path) <= (2 << 10) + 256  # behind the reader: about one step
    assert out == content
    assert mapped_kib(path) < 256
    reader = memory.ReleasedBehind(view, step=1 << 20)
    assert reader.read(5) == frame[:5] and reader.read() == frame[5:] and reader.read() == b""


def test_trimming_the_heap_is_harmless() -> None:
    """glibc's malloc_trim where there is one, nothing elsewhere; either way no error."""
    memory.trim_heap()


_ARENAS = """
import ctypes, sys, threading
from fatbinkit import memory
if sys.argv[1] == "shared":
    memory.share_one_arena()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
together = threading.Barrier(4)

def work():
    block = libc.malloc(4096)  # each thread's first: glibc gives it an arena
    together.wait()  # all four hold theirs at once
    libc.free(block)

threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
sys.stderr.flush()
libc.malloc_stats()  # glibc: one "Arena N:" block per arena, on stderr
"""


@pytest.mark.skipif(memory._glibc() is None, reason="glibc's mallopt and malloc_stats")
def test_threads_share_one_arena() -> None:
    """With share_one_arena (prune's and recompress's command), threads started after it
    allocate from glibc's main arena: its malloc_stats lists one arena; four threads holding
    blocks at once otherwise get arenas of their own (each keeps what its thread frees)."""
    import subprocess
    import sys

    def arenas(mode: str) -> int:
        err = subprocess.run([sys.executable, "-c", _ARENAS, mode], capture_output=True,
                             text=True, check=True).stderr
        return sum(line.startswith("Arena ") for line in err.splitlines())

    assert arenas("shared") == 1
    assert arenas("own") > 1
