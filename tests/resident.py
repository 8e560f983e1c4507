"""What of a file this test process holds in memory: the resident KiB of its mappings of the
file, from Linux's /proc/self/smaps (tests of fatbinkit.memory and slim's pages)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

needs_smaps = pytest.mark.skipif(not Path("/proc/self/smaps").exists() or
                                 not hasattr(mmap, "MADV_DONTNEED"),
                                 reason="reads Linux's /proc/self/smaps")


def mapped_kib(path: Path) -> int:
    """The resident KiB of this process's mappings of ``path``. Read as bytes: another
    mapping's name need not be UTF-8 (the suite maps files whose names are not)."""
    name = os.fsencode(path)
    total, ours = 0, False
    for line in Path("/proc/self/smaps").read_bytes().splitlines():
        head = line.split()
        if head and b"-" in head[0] and len(head) >= 5 and not head[0].endswith(b":"):
            ours = line.endswith(name)
        elif ours and line.startswith(b"Rss:"):
            total += int(head[1])
    return total
