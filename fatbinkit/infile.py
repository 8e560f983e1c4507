"""Input files: open or read one by path, turning ``OSError`` into an :class:`InputError` that
names the file (``cannot read k.cubin: No such file or directory``).

Only regular files are accepted: a FIFO or a device would block the open (or the read) forever
waiting for a writer, and cannot be memory-mapped.
"""

from __future__ import annotations

import os
import stat
from typing import IO

from .errors import InputError

# O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


def open_input(path: os.PathLike[str]) -> IO[bytes]:
    """``path``, a regular file, opened for binary reading."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except IsADirectoryError as e:
        raise InputError(f"cannot read {os.fspath(path)}: it is a directory") from e
    except OSError as e:
        raise InputError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "it is a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise InputError(f"cannot read {os.fspath(path)}: {kind}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: os.PathLike[str]) -> bytes:
    """The whole content of ``path``."""
    with open_input(path) as f:
        try:
            return f.read()
        except OSError as e:  # EIO on bad media
            raise InputError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from e
