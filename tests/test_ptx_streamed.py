"""Large PTX texts read in steps (issue 32): ``ptx_in_steps`` and ``streamed_ptx``.

prune reads the kernel names of every image of a module that keeps some images and drops others;
cuBLASLt 13.1's PTX texts reach 16 MiB, which cost about 62 MiB each to parse whole (bytes, a
decoded copy, the copy without comments), on two threads at once. Those longer than one step are
read in steps and parsed as they come. Oracle: the whole read, ``image_from_ptx(entry.data(),
...)`` (and ``Ptx.from_bytes``): the same value, or the same error.

- Every PTX image of the suite's real libraries and of cuBLASLt 13.1, stored as zstd (re-encoded
  where it is not), read streamed gives the ImageInfo of the whole read; given in small steps of
  odd sizes, ptx_in_steps gives the Ptx of the whole bytes.
- Made-up texts, stored as zstd, LZ4 and uncompressed: block comments, comments holding
  ``.entry``, CRLF, entries and variables cut by a 1 MiB step, an unclosed parameter list, a
  parameter with no name, no ``.version``, a late ``.address_size``, NULs inside and trailing,
  a corrupt or truncated frame, a size other than recorded: the value or error of the whole read,
  and read in steps (not handed back to the whole read) where the rules cover the text.
- Random texts in random steps: ptx_in_steps gives the whole read's Ptx or declines.
- The traced memory of a streamed read of a 24 MiB text is a few MiB.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tracemalloc
from collections.abc import Callable, Iterator

import lz4.block
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thirdparty import ALL_TEST_MEMBERS, CUBLASLT131, WheelMember, fetch

import fatbinkit
from fatbinkit import slim
from fatbinkit.decision import ImageInfo
from fatbinkit.errors import FatbinkitError
from fatbinkit.formats.codec import ZSTD_STEP, DecompressionBudget
from fatbinkit.formats.fatbin import EntryFlags, EntryKind, FatbinEntry
from fatbinkit.formats.ptx import Ptx, ptx_in_steps
from fatbinkit.vendors.cuda import loading
from fatbinkit.vendors.cuda.loading import image_from_entry, image_from_ptx, streamed_ptx

_CODEC_FLAGS = int(EntryFlags.COMPRESSED_LZ4) | int(EntryFlags.COMPRESSED_ZSTD)


def _ptx_entries(members: tuple[WheelMember, ...]) -> list[FatbinEntry]:
    """Every PTX entry of ``members`` (detached from their files), each payload once."""
    seen: set[bytes] = set()
    out = []
    for member in members:
        with fatbinkit.open(fetch(member)) as binary:
            for code in binary.codes:
                e = code.entry
                if isinstance(e, FatbinEntry) and e.header.kind == EntryKind.PTX:
                    key = hashlib.sha256(e.stored).digest()
                    if key not in seen:
                        seen.add(key)
                        out.append(e.detached())
    return out


@pytest.fixture(scope="module")
def suite_ptx() -> list[FatbinEntry]:
    entries = _ptx_entries(ALL_TEST_MEMBERS)
    assert len(entries) >= 100
    return entries


def _stored(entry: FatbinEntry, data: bytes, codec: str | None = "zstd",
            packed: bytes | None = None, size: int | None = None) -> FatbinEntry:
    """``entry``'s header over ``data`` stored as ``codec`` (``packed``: that payload instead;
    ``size``: that uncompressed size recorded instead)."""
    if packed is None:
        packed = (data if codec is None else
                  zstandard.ZstdCompressor(level=1).compress(data) if codec == "zstd" else
                  lz4.block.compress(data, store_size=False))
    stored = packed + bytes(-len(packed) % 8)
    flags = entry.header.flags & ~_CODEC_FLAGS | (
        0 if codec is None else int(EntryFlags.COMPRESSED_ZSTD if codec == "zstd"
                                    else EntryFlags.COMPRESSED_LZ4))
    header = dataclasses.replace(
        entry.header, size=len(stored), flags=flags,
        compressed_size=0 if codec is None else len(packed),
        uncompressed_size=0 if codec is None else len(data) if size is None else size)
    out = FatbinEntry(header, entry.extra, stored, offset=0x4560)
    assert out.compression == codec
    return out


def _outcome(f: Callable[[], object]) -> object:
    try:
        return f()
    except FatbinkitError as e:
        return type(e), str(e), getattr(e, "offset", None)


def _whole(entry: FatbinEntry) -> object:
    """The whole read: image_from_ptx of the inflated payload, or its error."""
    return _outcome(lambda: image_from_ptx(entry.data(), "x", entry.arch, entry.compression))


def _streamed(entry: FatbinEntry, monkeypatch: pytest.MonkeyPatch) -> object:
    """image_from_entry's streamed read of any size, or its error."""
    monkeypatch.setattr(loading, "STREAM_PTX_ABOVE", 0)
    return _outcome(lambda: image_from_entry(entry, "x", streamed=True))


def _steps(data: bytes, sizes: list[int]) -> Iterator[memoryview]:
    """``data`` in steps of the ``sizes`` in turn, each step a view of one buffer that the next
    overwrites (as zstd_steps gives them)."""
    buffer = bytearray(max(sizes))
    at = i = 0
    while at < len(data):
        n = sizes[i % len(sizes)]
        buffer[:n] = data[at : at + n].ljust(n, b"?")
        yield memoryview(buffer)[: min(n, len(data) - at)]
        at += n
        i += 1


def test_every_real_ptx_reads_equal_streamed(suite_ptx: list[FatbinEntry],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Each PTX image of the suite's libraries, stored as zstd, read streamed (no threshold):
    the ImageInfo of the whole read, taken in steps (not handed back to the whole read); given
    in steps of 4 KiB and of odd sizes, the Ptx of the whole bytes."""
    for n, entry in enumerate(suite_ptx):
        data = entry.data()
        packed = entry if entry.compression == "zstd" else _stored(entry, data)
        whole = _whole(packed)
        assert isinstance(whole, ImageInfo) and whole.kernels is not None
        assert _streamed(packed, monkeypatch) == whole
        assert streamed_ptx(packed, "x", above=0) == whole
        if n % 4 == 0:
            ptx = Ptx.from_bytes(data)
            assert ptx_in_steps(_steps(data, [4096])) == ptx
            assert ptx_in_steps(_steps(data, [1000, 77, 5003])) == ptx


def test_cublaslt_ptx_reads_equal_streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuBLASLt 13.1's 288 PTX images (zstd as nvcc stores them, up to 16 MiB with 362k line
    comments): streamed, the ImageInfo of the whole read, taken in steps; and prune's driver-floor
    read (slim._floor_image) gives it too, charged to the budget as the whole read charges."""
    entries = _ptx_entries((CUBLASLT131,))
    assert len(entries) > 200 and max(e.data_size for e in entries) > 15 << 20
    for entry in entries:
        whole = _whole(entry)
        assert streamed_ptx(entry, "x", above=0) == whole, entry.offset
    big = [e for e in entries if e.data_size > 4 << 20]
    budget = DecompressionBudget(1 << 40)
    monkeypatch.setattr(loading, "STREAM_PTX_ABOVE", 1 << 40)
    whole_floors = [slim._floor_image(e, budget) for e in big]
    used = budget.used
    monkeypatch.setattr(loading, "STREAM_PTX_ABOVE", 0)
    budget = DecompressionBudget(1 << 40)
    assert [slim._floor_image(e, budget) for e in big] == whole_floors and budget.used == used


_HEAD = b"//\n// Generated\n//\n\n.version 8.4\n.target sm_90a\n.address_size 64\n\n"
_BODY = b"{\n.reg .b32 %r<4>;\n// .entry not_a_kernel(\nret;\n}\n"
_FILLER = b"// " + b"f" * 60 + b"\n"


def _kernel(name: str, params: str = ".param .u64 p0, .param .align 8 .b8 p1[48]") -> bytes:
    return f".visible .entry {name}(\n{params}\n)\n".encode() + _BODY


def _at(offset: int, text: bytes) -> bytes:
    """Line comments from the header on, so that ``text`` starts near byte ``offset``."""
    pad = max(0, offset - len(_HEAD)) // len(_FILLER)
    return _HEAD + _FILLER * pad + text


_STEP = ZSTD_STEP
# made-up texts: (name, text, whether the stepped read covers it)
_TEXTS: list[tuple[str, bytes, bool]] = [
    ("plain", _HEAD + _kernel("a") + _kernel("b"), True),
    ("entry in line comments", _HEAD + b"// .entry ghost(.param .u32 g)\n" + _kernel("a")
     + b"x; // .entry ghost2(\n" + _kernel("b"), True),
    ("block comment", _HEAD + b"/* .entry ghost(\n.param .u32 g) */\n" + _kernel("a"), False),
    ("unterminated block comment", _HEAD + _kernel("a") + b"/* .entry ghost(", False),
    ("crlf", (_HEAD + _kernel("a") + _kernel("b")).replace(b"\n", b"\r\n"), True),
    ("entry across a step", _at(_STEP - 40, _kernel("cut_in_params", ", ".join(
        f".param .u32 p{i}" for i in range(40)))) + _kernel("after"), True),
    ("name across a step", _at(_STEP - 30, b".entry\n\n" + b"\n" * 60 + b"late_name\n(\n"
                                          b".param .u32 p)\n" + _BODY), True),
    ("open paren across a step", _at(_STEP - 30, b".entry k" + b" \n" * 40 + b"(.param .u32 "
                                                 b"p)\n" + _BODY) + _kernel("z"), True),
    ("every step ends in a parameter list", _HEAD + b"".join(
        b".entry e%d(.param .u32 p\n" % i + (b" " * 63 + b"\n") * 1000 + b")\n" + _BODY
        for i in range(96)), True),
    ("no parameters", _at(_STEP - 100, b".entry bare\n" + _BODY + b".entry bare2\n" + _BODY),
     True),
    ("variables across a step", _at(_STEP - 10, b".visible .global .align 4 .u32 v;\n")
     + _kernel("a"), True),
    ("variable only in a comment", _HEAD + b"// .global .u32 v;\n" + _kernel("a"), True),
    ("utf-8 and bad bytes", _HEAD + _kernel("a\xc3\xa9".encode("latin-1").decode())
     + "// caf\u00e9 \u2028\n".encode() + b"\xe2\x82\n\xff\xfe\n" + _kernel("b"), True),
    ("trailing NULs", _HEAD + _kernel("a") + bytes(9), True),
    ("trailing NULs after a step", _at(_STEP + 100, _kernel("a")) + bytes(_STEP + 3), True),
    ("NUL inside", _HEAD + _kernel("a") + b"\0" + _kernel("b"), False),
    ("NUL inside after a step", _at(_STEP + 100, _kernel("a")) + bytes(_STEP) + b"x", False),
    ("unclosed parameter list", _HEAD + _kernel("a") + b".entry open(.param .u32 p\n", False),
    ("unclosed parameter list across a step", _at(_STEP - 20, b".entry open(.param .u32 p"
                                                              + b"\n" * 100), False),
    ("parameter with no name", _HEAD + _kernel("a", ".param .u32 [4]"), False),
    ("entry inside a parameter list", _HEAD + b".entry outer(.param .u32 p,\n"
     + _FILLER * 20000 + b".entry inner(.param .u32 q)\n" + _BODY + _kernel("z"), True),
    ("parameter list longer than the carry", _HEAD + b".entry outer(.param .u32 p,\n"
     + (b"x" * 63 + b"\n") * 90000 + b".param .u32 q)\n" + _BODY + _kernel("z"), False),
    ("no .version", _HEAD.replace(b".version 8.4", b"") + _kernel("a"), False),
    ("bad .version", _HEAD.replace(b"8.4", b"8.x") + _kernel("a"), False),
    ("late .address_size", _HEAD.replace(b".address_size 64", b"") + _FILLER * 20000
     + b".address_size 32\n" + _kernel("a"), True),
    ("very late .address_size", _HEAD.replace(b".address_size 64", b"") + _kernel("a")
     + _FILLER * 70000 + b".address_size 48\n" + _kernel("b"), False),
    ("no .address_size", _HEAD.replace(b".address_size 64", b"") + _kernel("a"), False),
    ("address size 48", _HEAD.replace(b"64", b"48") + _kernel("a"), False),
    ("long line", _HEAD + b"// " + b"x" * (5 << 20) + b"\n" + _kernel("a"), False),
]


@pytest.mark.parametrize(("text", "covered"), [(t, c) for _, t, c in _TEXTS],
                         ids=[name for name, _, _ in _TEXTS])
@pytest.mark.parametrize("codec", ["zstd", "lz4", None])
def test_made_up_texts_give_the_whole_read(suite_ptx: list[FatbinEntry], text: bytes,
                                           covered: bool, codec: str | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Each made-up text, stored as zstd, LZ4 and uncompressed: the streamed read gives the
    whole read's ImageInfo or error; the texts the rules cover are read in steps (streamed_ptx
    gives an image), the others are handed back to the whole read (None)."""
    entry = _stored(suite_ptx[0], text, codec)
    whole = _whole(entry)
    assert _streamed(entry, monkeypatch) == whole
    got = streamed_ptx(entry, "x", above=0)
    assert (got is not None) == covered, (got, whole)
    if got is not None:
        assert got == whole
    assert ptx_in_steps(_steps(text, [65536, 4099])) in ((None, Ptx.from_bytes(text)) if covered
                                                      else (None,))


def test_made_up_values() -> None:
    """What the whole read gives for a few made-up texts, so that equality with it means
    something: names from code only, variables from code only, the CRLF header read."""
    texts = {name: text for name, text, _ in _TEXTS}
    entry = ptx_in_steps(_steps(texts["entry across a step"], [_STEP]))
    assert entry is not None and [e.name for e in entry.entries] == ["cut_in_params", "after"]
    assert len(entry.entries[0].params) == 40
    ghosts = ptx_in_steps(_steps(texts["entry in line comments"], [_STEP]))
    assert ghosts is not None and [e.name for e in ghosts.entries] == ["a", "b"]
    crlf = ptx_in_steps(_steps(texts["crlf"], [64]))
    assert crlf is not None and (crlf.version, crlf.address_size) == ((8, 4), 64)
    found: list[bytes] = []
    assert ptx_in_steps(_steps(texts["variables across a step"], [_STEP]), found.append)
    assert any(loading._ptx_variables(b) for b in found)
    found = []
    assert ptx_in_steps(_steps(texts["variable only in a comment"], [_STEP]), found.append)
    assert found and not any(loading._ptx_variables(b) for b in found)


def test_bad_payloads_give_the_whole_read_errors(suite_ptx: list[FatbinEntry],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A zstd frame cut short, one with a corrupt block, one that inflates to 8 bytes more or
    fewer than its header records, and an LZ4 block cut short: the errors of the whole read,
    streamed or not; streamed_ptx declines the zstd ones (the caller reads whole)."""
    text = _at(3 * _STEP, _kernel("a"))
    packed = zstandard.ZstdCompressor(level=1).compress(text)
    corrupt = bytearray(packed)
    for i in range(len(packed) // 3, len(packed) // 3 + 64):
        corrupt[i] ^= 0x5A
    template = suite_ptx[0]
    bad = [_stored(template, text, packed=packed[: len(packed) // 2]),
           _stored(template, text, packed=bytes(corrupt)),
           _stored(template, text, packed=packed, size=len(text) + 8),
           _stored(template, text, packed=packed, size=len(text) - 8)]
    for entry in bad:
        whole = _whole(entry)
        assert isinstance(whole, tuple) and "zstd" in whole[1], whole
        assert _streamed(entry, monkeypatch) == whole
        assert streamed_ptx(entry, above=0) is None
    lz4_packed = lz4.block.compress(text, store_size=False)
    cut = _stored(template, text, "lz4", packed=lz4_packed[:-100])
    whole = _whole(cut)
    assert isinstance(whole, tuple) and "lz4" in whole[1], whole
    assert _streamed(cut, monkeypatch) == whole


def test_small_and_other_entries_are_read_whole(suite_ptx: list[FatbinEntry]) -> None:
    """At or below the threshold (one step by default), streamed_ptx gives None: those keep the
    whole read."""
    text = _at(_STEP + 1, _kernel("a"))
    entry = _stored(suite_ptx[0], text)
    assert streamed_ptx(_stored(suite_ptx[0], _HEAD + _kernel("a"))) is None
    assert streamed_ptx(entry, above=len(text)) is None
    assert streamed_ptx(entry, above=len(text) - 1) is not None
    assert streamed_ptx(entry) is not None


_LINES = st.sampled_from([
    ".version 8.4", ".target sm_90", ".address_size 64", ".entry k(", ".entry k2", ".entry",
    "(", ")", ".param .u32 p", ".param .u32 [4]", ",", "// .entry c(", "/*", "*/", "{", "}",
    ".global .u32 g;", "\t.const .u8 c;", "", " ", "\r", "\0", "\xe9", "a", "// x", ".entry (",
])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_LINES, max_size=4).map(" ".join), max_size=30),
       st.lists(st.integers(1, 40), min_size=1, max_size=5), st.booleans())
def test_random_texts_in_random_steps(lines: list[str], sizes: list[int], header: bool) -> None:
    """Random texts of PTX-like lines given in steps of random sizes: ptx_in_steps gives the
    Ptx of the whole read, or declines (where the whole read raises, it declines); the lines it
    hands out hold the whole text's variables."""
    text = "\n".join(([".version 8.4", ".target sm_90", ".address_size 64"] if header else [])
                     + lines).encode()
    try:
        whole: object = Ptx.from_bytes(text)
    except FatbinkitError:
        whole = None
    found: list[bytes] = []
    got = ptx_in_steps(_steps(text, sizes), found.append)
    assert got is None or got == whole
    if got is not None:
        assert any(map(loading._ptx_variables, found)) == loading._ptx_variables(text)


def test_streamed_memory_is_bounded(suite_ptx: list[FatbinEntry]) -> None:
    """A zstd PTX text of 24 MiB (3000 entries, 390k line comments): read streamed, the
    traced memory peaks at a few MiB (steps of 1 MiB and their decoded copies), where the whole
    read holds the text, its decoded copy and the copy without comments; the image is the whole
    read's."""
    kernel = _FILLER * 130 + _kernel("k")
    text = _HEAD + b"".join(kernel.replace(b"k(", b"k%d(" % i) for i in range(3000))
    entry = _stored(suite_ptx[0], text)
    whole = _whole(entry)
    del text
    tracemalloc.start()
    try:
        img = streamed_ptx(entry, "x")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert img == whole and isinstance(img, ImageInfo) and img.kernels
    assert len(img.kernels) == 3000
    assert peak < 8 << 20, peak
