"""The floor of a command's time on this machine: the images it reads, inflated and nothing else.

``check`` and ``diff`` of libtorch_cuda.so spend most of their CPU time inflating images
(zstd), which no reader can skip: a cubin's section table, which says where its kernel names and
attribute records are, is at its end, behind its code, and a zstd frame is read from its start.
:func:`images_read` records which images a command reads (fatbinkit's own choice, made by
running the command's engine once in this process); the child (``python benchmarks/floor.py
LIST JOBS``) inflates exactly those payloads with ``zstandard`` on ``JOBS`` forked processes,
each given about the same bytes (largest first to the least loaded), and does nothing else: no
fatbinkit, no parsing, no output. Its wall time under GNU time, Python's start-up included, is
what any implementation that reads those images with the same library and cores needs at least;
the goals of issue 32 (``check`` under 1 s, ``diff`` 3x cuobjdump) are set against it in
``benchmarks/speed.py``.

Usage (the child): python benchmarks/floor.py LIST.json JOBS
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: one payload: the file, where its stored bytes start, how many, its codec and inflated size
Payload = tuple[str, int, int, str | None, int]


@contextmanager
def _recording(target: Any, name: str, codes_of: Callable[..., Any],
               into: list[Any]) -> Iterator[None]:
    """``target.name`` wrapped so that each call's codes (``codes_of(*args, **kwargs)``) are
    added to ``into`` before the original runs."""
    original = getattr(target, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        into.extend(codes_of(*args, **kwargs))
        return original(*args, **kwargs)

    setattr(target, name, wrapper)
    try:
        yield
    finally:
        setattr(target, name, original)


def _payloads(path: Path, read: list[Any]) -> list[Payload]:
    codes = [getattr(c, "code", c) for c in read]  # DeviceCode, or a Binary.select() item
    return [(str(path), c.offset + c.entry.header.header_size, c.entry.header.compressed_size
             if c.compression else c.stored, c.compression, c.uncompressed or c.stored)
            for c in codes]


def images_read(command: str, libs: list[Path], archs: tuple[str, ...] = ()) -> list[Payload]:
    """The payloads ``command`` reads: ``check`` of ``libs[0]`` for ``archs`` (the images those
    GPUs could load, as ``fatbinkit check --arch ...`` reads them), or ``diff`` of ``libs[0]``
    and ``libs[1]`` (every loadable image of the first; of the second, those whose stored
    payload the first does not hold), each as the child reads it."""
    import fatbinkit
    from fatbinkit import diff, parallel
    from fatbinkit.binary import Binary

    if command == "check":
        codes: list[Any] = []
        with _recording(parallel, "iter_codes", lambda fn, c, **_: c, codes), \
                fatbinkit.open(libs[0]) as binary:
            binary.check(list(archs), jobs=1)
        return _payloads(libs[0], _seen(codes, "check"))
    assert command == "diff"
    found: list[Payload] = []
    old = None
    for lib in libs:
        read: list[Any] = []
        with _recording(Binary, "imap", lambda self, fn, c, **_: c, read):
            old = diff.snapshot(lib, jobs=1, like=old)
        found += _payloads(lib, _seen(read, "diff"))
    return found


def _seen(read: list[Any], command: str) -> list[Any]:
    """``read``, which holds something: an empty record means the recorder no longer sees
    how ``command`` reads its images (the engine changed), not a floor of nothing."""
    if not read:
        raise SystemExit(f"benchmarks/floor.py: no image seen read by {command}: the function "
                         "recorded is no longer the one that reads them")
    return read


def _inflate(payloads: list[Payload]) -> None:
    import lz4.block
    import zstandard

    inflater = zstandard.ZstdDecompressor()
    files: dict[str, int] = {}
    for path, offset, size, codec, expected in payloads:
        fd = files.get(path)
        if fd is None:
            fd = files[path] = os.open(path, os.O_RDONLY)
        stored = os.pread(fd, size, offset)
        if codec == "zstd":
            out = inflater.decompress(stored)
        elif codec == "lz4":
            out = lz4.block.decompress(stored, uncompressed_size=expected)
        else:
            out = stored
        if len(out) != expected:
            raise SystemExit(f"{path} at {offset:#x}: {len(out)} bytes, not {expected}")


def _shares(payloads: list[Payload], jobs: int) -> list[list[Payload]]:
    """``payloads`` dealt to ``jobs`` processes, largest first to the least loaded."""
    shares: list[list[Payload]] = [[] for _ in range(jobs)]
    loads = [0] * jobs
    for p in sorted(payloads, key=lambda p: -p[4]):
        least = loads.index(min(loads))
        shares[least].append(p)
        loads[least] += p[4]
    return shares


def main(argv: list[str]) -> int:
    payloads = [tuple(p) for p in json.loads(Path(argv[0]).read_text())]
    jobs = int(argv[1])
    children = []
    for share in _shares(payloads, jobs):  # type: ignore[arg-type]
        pid = os.fork()
        if pid == 0:  # the child leaves here, whatever happens: never back into the loop
            status = 1
            try:
                _inflate(share)
                status = 0
            except BaseException as e:  # said here; the exit status says it to the parent
                print(f"floor.py: {e}", file=sys.stderr)
            finally:
                os._exit(status)
        children.append(pid)
    failed = [pid for pid in children if os.waitpid(pid, 0)[1] != 0]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
