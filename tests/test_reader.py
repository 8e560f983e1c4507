"""fatbinkit.formats.reader.Reader.holds: a search of part of an input, in place with the C
extension's ``find`` (memmem) and by windows read with ``pread`` without it. Oracle:
``bytes.find`` over the same bytes, on both paths, on bytes and on a mapped file; and the
mapped file's pages are not left in memory by the search."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from resident import mapped_kib, needs_smaps

from fatbinkit.formats import native, reader
from fatbinkit.formats.reader import Reader


@pytest.fixture(params=["c", "python"])
def path_taken(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(native, "compiled", None)
    elif native.compiled is None:
        pytest.skip("the C extension is not built here")
    return str(request.param)


@settings(max_examples=400, deadline=None)
@given(before=st.binary(max_size=100), needle=st.binary(min_size=1, max_size=6),
       after=st.binary(max_size=100), offset=st.integers(-5, 220), size=st.integers(-5, 220),
       window=st.sampled_from([1, 3, 64]))
def test_holds_is_bytes_find(before: bytes, needle: bytes, after: bytes, offset: int,
                             size: int, window: int) -> None:
    """Bytes that hold the needle somewhere, any range of them, both paths (the pure one with
    windows of a few bytes, so that needles across a window's edge are found): equal to
    ``needle in`` the range."""
    hay = before + needle + after
    expected = offset >= 0 and needle in hay[offset : max(offset, offset + size)]
    saved_c, saved_w = native.compiled, reader.SEARCH_WINDOW
    try:
        for c in {saved_c, None}:
            native.compiled, reader.SEARCH_WINDOW = c, window
            assert Reader(memoryview(hay)).holds(needle, offset, size) == expected
    finally:
        native.compiled, reader.SEARCH_WINDOW = saved_c, saved_w


def test_the_c_find_is_bytes_find() -> None:
    if native.compiled is None:
        pytest.skip("the C extension is not built here")
    find = native.compiled.find
    for hay, needle in [(b"", b""), (b"", b"a"), (b"a", b""), (b"abc", b"abcd"),
                        (b"x_start\0y_end\0", b"_end\0"), (b"aaab", b"aab"),
                        (bytes(range(256)) * 3, b"\xff\x00\x01")]:
        assert find(hay, needle) == hay.find(needle)
        assert find(memoryview(hay), memoryview(needle)) == hay.find(needle)
    assert find(memoryview(b"xxab")[1:], b"ab") == 1
    with pytest.raises(TypeError):
        find("text", b"t")


@needs_smaps
def test_a_mapped_file_is_searched_in_place_and_its_pages_given_back(
        tmp_path: Path, path_taken: str) -> None:
    """A 32 MiB file, mapped: the needle near its end is found, in the file and not before its
    range's end, and the search leaves none of its pages resident (the pure path reads by
    ``pread``; the C one touches the pages and gives them back)."""
    path = tmp_path / "big"
    size = 32 << 20
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(size - 100)
        f.write(b"__blob_end\0")
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        try:
            src = Reader(memoryview(m), os.dup(f.fileno()))
            assert src.holds(b"_end\0", 0, size)
            assert src.holds(b"_end\0", size - 100, 100)
            assert not src.holds(b"_end\0", 0, size - 95)  # cut one byte before its NUL
            assert not src.holds(b"_start\0", 0, size)
            assert mapped_kib(path) < 1024
            os.close(src.fd)  # type: ignore[arg-type]
            del src
        finally:
            m.close()
