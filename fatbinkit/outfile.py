"""Atomic output: write to a temporary file next to the target, then ``os.replace`` it.

A failure at any point removes the temporary file, so the target is either the complete new file
or untouched; a reader never sees a half-written object or library.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import FatbinkitError, OutputError


@contextlib.contextmanager
def atomic_path(target: os.PathLike[str] | os.PathLike[bytes], mode: int = 0o666) -> Iterator[Path]:
    """Yield an empty temporary file beside ``target``; on success it replaces ``target``.

    ``mode`` is filtered by the umask, as for any newly created file.
    """
    path = Path(os.fsdecode(os.fspath(target)))
    parent = path.parent
    try:  # is_dir() raises what is not "no such file" (ENAMETOOLONG, ELOOP...)
        if not parent.is_dir():
            raise OutputError(f"cannot write {path}: folder {parent} does not exist")
        if path.is_dir():
            raise OutputError(f"cannot write {path}: it is a directory")
    except OSError as e:
        if isinstance(e, OutputError):
            raise
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    # the name shortened (in bytes) so that the temporary name stays under NAME_MAX (255)
    stem = os.fsdecode(os.fsencode(path.name)[:128])
    tmp = parent / f".{stem}.{os.urandom(4).hex()}.tmp"  # not `secrets`: ~4 ms to import
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except FatbinkitError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
