"""``fatbinkit.cli.fatbin.write_lines`` (issue 32): a large text (``diff``'s: 64 MB for two torch
releases) written by a thread while the next lines are made. The oracle is the text joined in
this process (what ``sys.stdout.write`` printed before): every byte, in order, around what the
caller writes through ``sys.stdout`` before and after; a closed pipe is raised and stops the
making of lines; ``fatbinkit diff`` of two real cuRAND releases (tests/thirdparty.py) into a pipe
closed after one line exits 141 (``EXIT_BROKEN_PIPE``) with nothing on stderr, as ``ls | head``;
an encoding with a byte-order mark, or a text stream over something other than an OS file, gets
the same text through ``sys.stdout``; lines that raise leave the chunks not yet written.
"""

from __future__ import annotations

import gzip
import io
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from thirdparty import CURAND13, CURAND130, fetch

from fatbinkit.cli.args import EXIT_BROKEN_PIPE
from fatbinkit.cli.fatbin import write_lines


def _lines(n: int) -> Iterator[str]:
    # lines of many lengths, one undecodable byte (as a file name is printed: surrogateescape)
    yield "name \udcff"
    for i in range(n):
        yield f"line {i} " + "x" * (i % 997)


def test_a_file_gets_every_line_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.txt"
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as out:
        monkeypatch.setattr(sys, "stdout", out)
        out.write("before\n")  # still in the buffer: written before the lines
        write_lines(_lines(30_000), chunk=1000)
        out.write("after\n")
    want = "before\n" + "".join(f"{line}\n" for line in _lines(30_000)) + "after\n"
    assert path.read_bytes() == want.encode("utf-8", "surrogateescape")


def test_a_closed_pipe_is_raised_and_stops_the_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    os.close(read)
    made = 0

    def many() -> Iterator[str]:
        nonlocal made
        for _ in range(10**6):
            made += 1
            yield "x" * 100

    with os.fdopen(write, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(BrokenPipeError):
            write_lines(many(), chunk=100)
    assert made < 10**4  # a few chunks at most after the first failed write


def test_a_stdout_that_is_no_file_gets_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    write_lines(_lines(100))
    assert out.getvalue() == "".join(f"{line}\n" for line in _lines(100))


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_an_encoding_with_a_byte_order_mark_writes_it_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str) -> None:
    path = tmp_path / "out.txt"
    with open(path, "w", encoding=encoding) as out:
        monkeypatch.setattr(sys, "stdout", out)
        write_lines((f"line {i}" for i in range(5000)), chunk=100)
    assert path.read_bytes() == "".join(f"line {i}\n" for i in range(5000)).encode(encoding)


def test_a_text_file_over_a_compressor_gets_the_text(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "out.txt.gz"
    # a fileno() that is not where the text goes
    with gzip.open(path, "wt", encoding="utf-8", errors="surrogateescape") as out:
        monkeypatch.setattr(sys, "stdout", out)
        write_lines(_lines(3000), chunk=100)
    assert gzip.decompress(path.read_bytes()) == \
        "".join(f"{line}\n" for line in _lines(3000)).encode("utf-8", "surrogateescape")


def test_lines_that_raise_leave_the_chunks_not_yet_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Making the lines raises while the writer waits on a pipe nobody reads yet: the error is
    raised, and of the five chunks made only the one being written reaches the pipe."""
    read, write = os.pipe()
    line = "y" * 999  # 100 lines a chunk: 100,000 bytes, more than the pipe holds

    def five_chunks_then_an_error() -> Iterator[str]:
        yield from [line] * 500
        raise KeyError("made up")

    got = b""
    with os.fdopen(write, "w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        with pytest.raises(KeyError, match="made up"):
            write_lines(five_chunks_then_an_error(), chunk=100)
        (writer,) = [t for t in threading.enumerate() if t.name == "fatbinkit stdout"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if select.select([read], [], [], 0.05)[0]:
                got += os.read(read, 1 << 16)
            elif not writer.is_alive():
                break
        assert not writer.is_alive()
    os.close(read)
    assert len(got) <= 100 * 1000  # the chunk being written at most: the others were dropped
    assert set(got) <= set(b"y\n")


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_diff_into_a_pipe_closed_early_exits_141(unbuffered: str) -> None:
    """Buffered or not (``PYTHONUNBUFFERED``): unbuffered, a text stream over the bare file
    dropped the error of a large write that the pipe's closing cut short, and ``diff`` exited
    0."""
    old, new = fetch(CURAND130), fetch(CURAND13)  # about 1 MB of text: more than a pipe holds
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    proc = subprocess.Popen([sys.executable, "-m", "fatbinkit", "diff", str(old), str(new)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert first.endswith(b"libcurand.so.10\n") and err == b""
