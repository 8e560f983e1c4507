"""Input files: open or read one by path, turning ``OSError`` into an :class:`InputError` that
names the file (``cannot read k.cubin: No such file or directory``).

Only regular files are accepted: a FIFO or a device would block the open (or the read) forever
waiting for a writer, and cannot be memory-mapped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, TypeAlias

from .errors import InputError, InvalidArgumentError

__all__ = ["ARCHIVE_SUFFIXES", "Content", "FilePath", "as_content", "as_input", "as_path",
           "is_collection", "open_input", "read_input"]

#: a path to a file: ``str`` (always a path, never content), ``os.PathLike`` of str or bytes
FilePath: TypeAlias = str | os.PathLike[str] | os.PathLike[bytes]
#: the bytes of a file
Content: TypeAlias = bytes | bytearray | memoryview

# O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)


#: zip archives of many binaries: wheels, and PyTorch's ``.pt2`` packages (AOTInductor's
#: model ``.so`` and its kernels' ``.cubin`` files under ``data/aotinductor/``)
ARCHIVE_SUFFIXES = (".whl", ".pt2")


def is_collection(path: Path) -> bool:
    """Whether ``path`` names a folder (a Triton cache folder too), a wheel or a ``.pt2``
    package (:data:`ARCHIVE_SUFFIXES`): an input of many binaries (:mod:`fatbinkit.collection`
    reads them)."""
    return path.is_dir() or (path.suffix in ARCHIVE_SUFFIXES and path.is_file())


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


def as_path(value: object, what: str = "the file") -> Path:
    """``value`` (a ``str``, an ``os.PathLike`` of str or bytes) as a :class:`Path`; content
    (``bytes``...) or anything else is an :class:`InvalidArgumentError` naming ``what``."""
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if not path:
            raise InvalidArgumentError(f"{what}: the path is empty")
        return Path(os.fsdecode(path))
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(
            f"{what} is a path (str or os.PathLike), not {type(value).__name__} content: write "
            "the bytes to a file first, or pass the path")
    raise InvalidArgumentError(
        f"{what} is a path (str or os.PathLike), not {type(value).__name__}")


def as_input(value: object, what: str = "the input") -> Path | Content:
    """A file given as its path (``str``, ``os.PathLike``: see :func:`as_path`) or as its bytes
    (``bytes``, ``bytearray``, ``memoryview``, returned as they are)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    if isinstance(value, (str, os.PathLike)):
        return as_path(value, what)
    raise InvalidArgumentError(
        f"{what} is a path (str or os.PathLike) or bytes, not {type(value).__name__}")


def as_content(value: object, what: str = "the input") -> Content:
    """``value`` if it is bytes (``bytes``, ``bytearray``, ``memoryview``); a path or anything
    else is an :class:`InvalidArgumentError` saying what ``what`` expects."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value
    if isinstance(value, os.PathLike):
        raise InvalidArgumentError(
            f"{what} takes the bytes of the file, not a path ({type(value).__name__} "
            f"{os.fsdecode(os.fspath(value))!r}): read it first, e.g. Path(...).read_bytes()")
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise InvalidArgumentError(
            f"{what} takes bytes, not str {shown!r}: read a file first (Path(...).read_bytes()), "
            "encode text (.encode())")
    raise InvalidArgumentError(
        f"{what} takes bytes, bytearray or memoryview, not {type(value).__name__}")
