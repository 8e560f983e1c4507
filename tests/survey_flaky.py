"""Filesystems that fail on purpose, for tests/test_survey.py: a survey's task whose first read of
a wheel fails (``flaky://``: a ``ConnectionError``, as a dropped download) or whose worker dies
in it (``crashy://``: the process exits at once, as the kernel's OOM killer or a lost node).

Both are fsspec's local filesystem under another protocol. Only opens inside a Dask worker
or a process of the local engine's pool count (the test process hashes the wheels while
planning): each is one attempt, recorded as a
marker file ``<name>.<n>`` in the folder ``attempts`` beside the wheels' folder (workers are
separate processes: the count lives on disk), and the first attempt of each file fails.

Workers import this module (it is on their ``sys.path``: the nanny spawns them with the test
process's) to unpickle :class:`Register`, the worker plugin that registers both protocols; the
local engine's processes import it at start-up, from a ``sitecustomize`` module the test puts
on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fsspec
from distributed import WorkerPlugin
from fsspec.implementations.local import LocalFileSystem

#: the folder, beside the wheels' folder, that holds one marker file per attempt
ATTEMPTS = "attempts"


def _in_worker() -> bool:
    """In a Dask worker, or a process of the local engine's pool (a child process: the test
    process is none)."""
    import multiprocessing

    from distributed import get_worker

    if multiprocessing.parent_process() is not None:
        return True
    try:
        get_worker()
    except ValueError:  # "No worker found": the test process
        return False
    return True


def attempt(path: str) -> int:
    """Record one attempt at reading ``path``; its number (1 for the first, across processes:
    the marker file is created exclusively)."""
    folder = Path(path).parent.parent / ATTEMPTS
    folder.mkdir(exist_ok=True)
    n = 1
    while True:
        try:
            fd = os.open(folder / f"{Path(path).name}.{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            n += 1
            continue
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        return n


def attempts(wheels: Path, filename: str) -> int:
    """How many attempts workers made at reading ``wheels/filename``."""
    return len(list((wheels.parent / ATTEMPTS).glob(f"{filename}.*")))


class FlakyFileSystem(LocalFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """``flaky://PATH``: the local file PATH, whose first open in a Dask worker raises
    ``ConnectionError``."""

    protocol = ("flaky",)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None,
              **kwargs: Any) -> Any:
        if "r" in mode and _in_worker() and attempt(self._strip_protocol(path)) == 1:
            self._fail(path)
        return super()._open(path, mode, block_size, **kwargs)

    def _fail(self, path: str) -> None:
        raise ConnectionError(f"{path}: connection reset (the first attempt fails on purpose)")


class CrashyFileSystem(FlakyFileSystem):
    """``crashy://PATH``: the local file PATH, whose first open in a Dask worker ends the
    worker's process there and then (no exception, no cleanup: a kill)."""

    protocol = ("crashy",)

    def _fail(self, path: str) -> None:
        os._exit(1)


def register() -> None:
    """Register ``flaky://`` and ``crashy://`` with fsspec in this process."""
    fsspec.register_implementation("flaky", FlakyFileSystem, clobber=True)
    fsspec.register_implementation("crashy", CrashyFileSystem, clobber=True)


class Register(WorkerPlugin):
    """A worker plugin: each worker (a restarted one too) registers both protocols."""

    name = "fatbinkit-tests-survey-flaky"

    def setup(self, worker: Any) -> None:
        register()
