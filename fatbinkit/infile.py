"""Input files: open or read one by path, turning ``OSError`` into an :class:`InputError` that
names the file (``cannot read k.cubin: No such file or directory``)."""

from __future__ import annotations

import os
from typing import IO

from .errors import InputError


def open_input(path: os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for binary reading."""
    try:
        return open(path, "rb")
    except IsADirectoryError as e:
        raise InputError(f"cannot read {os.fspath(path)}: it is a directory") from e
    except OSError as e:
        raise InputError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from e


def read_input(path: os.PathLike[str]) -> bytes:
    """The whole content of ``path``."""
    with open_input(path) as f:
        try:
            return f.read()
        except OSError as e:  # EISDIR surfaces here on some systems, EIO on bad media
            raise InputError(f"cannot read {os.fspath(path)}: {e.strerror or e}") from e


