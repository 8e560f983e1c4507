"""Atomic output: write to a temporary file next to the target, then ``os.replace`` it.

A failure at any point removes the temporary file, so the target is either the complete new file
or untouched; a reader never sees a half-written object or library. :func:`atomic_files` does the
same for a set of files (``fatbinkit extract``): none replaces its target before all are written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import FatbinkitError, OutputError

__all__ = [
    "OutputBatch",
    "atomic_files",
    "atomic_path",
]


def _temporary_beside(
    target: os.PathLike[str] | os.PathLike[bytes], mode: int
) -> tuple[Path, Path]:
    """Check ``target``'s folder and create an empty temporary file beside it: (tmp, target)."""
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
    return tmp, path


@contextlib.contextmanager
def atomic_path(target: os.PathLike[str] | os.PathLike[bytes], mode: int = 0o666) -> Iterator[Path]:
    """Yield an empty temporary file beside ``target``; on success it replaces ``target``.

    ``mode`` is filtered by the umask, as for any newly created file.
    """
    tmp, path = _temporary_beside(target, mode)
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


class OutputBatch:
    """Many files written under temporary names and renamed into place only once every one of
    them is complete (see :func:`atomic_files`): a failure half-way changes no existing file."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def write(self, target: os.PathLike[str], data: bytes) -> None:
        """Write ``data`` for ``target`` (renamed into place at commit; a later write of the same
        target wins)."""
        tmp, path = _temporary_beside(target, 0o666)
        self._pending.append((tmp, path))
        try:
            tmp.write_bytes(data)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from e

    @property
    def targets(self) -> list[Path]:
        return [path for _, path in self._pending]

    def rollback(self, count: int) -> None:
        """Forget (and remove) the files written after the first ``count``: a writer that
        fails half-way leaves the batch as it found it."""
        for tmp, _ in self._pending[count:]:
            with contextlib.suppress(OSError):
                tmp.unlink()
        del self._pending[count:]

    def _commit(self) -> None:
        for _, path in self._pending:  # every target checked before any is replaced
            try:
                problem = ("it is a directory" if path.is_dir() else None if
                           path.parent.is_dir() else f"folder {path.parent} does not exist")
            except OSError as e:
                problem = e.strerror or str(e)
            if problem:
                raise OutputError(f"cannot write {path}: {problem}")
        for tmp, path in self._pending:
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise OutputError(f"cannot write {path}: {e.strerror or e}") from e

    def _discard(self) -> None:
        for tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                tmp.unlink()


@contextlib.contextmanager
def atomic_files() -> Iterator[OutputBatch]:
    """Yield an :class:`OutputBatch`; its files replace their targets only if the block ends
    without an exception, otherwise every temporary file is removed."""
    batch = OutputBatch()
    try:
        yield batch
        batch._commit()
    finally:
        batch._discard()  # after a commit nothing is left to remove
