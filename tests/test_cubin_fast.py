"""The cubin walk in C (``fatbinkit/formats/_cubin.c``) reads what the pure reader reads.

Oracle: the pure-Python reader (``cubin.py``'s ``_Reader``), itself held to ``cuobjdump
-res-usage`` by test_cubin.py, test_cubin_toolkit.py and test_resources.py, which run on both
readers (the ``cubin_reader`` fixture). Here: every cubin of the suite's real libraries (cuRAND
13 and 11, CuPy's CUDA 10.2 and 12 builds, our own nvcc builds) is accepted by the walk and read
equal, field by field and attribute record by record; and fuzzed cubins are either read equal
or left to the pure reader (the walk never accepts what the pure reader refuses, never raises).
"""

from __future__ import annotations

import shutil
import struct
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from cudabuild import Builds, builds  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from thirdparty import CUPY12_CUB, CUPY102_RANDOM, CURAND11, CURAND13, fetch

import fatbinkit
from fatbinkit.errors import FatbinkitError
from fatbinkit.formats import cubin
from fatbinkit.formats.cubin import Cubin, cubin_outline, cubin_profile

_WALK = cubin._compiled


#: the walk's modes, by the public reader that uses each: functions (Cubin.from_bytes), the
#: outline (cubin_outline), the rows diff compares (cubin_profile)
_READERS = (Cubin.from_bytes, cubin_outline, cubin_profile)
MODES = range(len(_READERS))


def _read(data: bytes, mode: int) -> object:
    """What the public reader returns, or the type and text of its error."""
    try:
        return _READERS[mode](data)
    except FatbinkitError as e:
        return type(e), str(e)


def _pure(data: bytes, mode: int = 0) -> object:
    """What the pure reader returns, or the type and text of its error."""
    saved, cubin._compiled = cubin._compiled, None
    try:
        return _read(data, mode)
    finally:
        cubin._compiled = saved


def _walked(data: bytes, mode: int = 0) -> object | None:
    """What the public reader gives with the walk (a ``.nv.compat`` is parsed after it, and
    may raise); None where the walk left the cubin to the pure reader."""
    assert _WALK is not None
    if _WALK.walk(data, mode, cubin.KernelParam, cubin.CubinFunction) is None:
        return None
    return _read(data, mode)


def _same(a: object, b: object) -> None:
    """Equal, and equal in every stored field (the dataclasses' __dict__, raw records too)."""
    assert a == b and repr(a) == repr(b)
    if isinstance(a, Cubin) and isinstance(b, Cubin):
        for f, g in zip(a.functions, b.functions, strict=True):
            assert vars(f) == vars(g) and list(vars(f)) == list(vars(g))
            assert f.attributes == g.attributes
            for p, q in zip(f.params, g.params, strict=True):
                assert vars(p) == vars(q)


needs_walk = pytest.mark.skipif(_WALK is None, reason="the cubin walk in C is not built here")


def test_the_walk_is_built_where_a_compiler_is() -> None:
    """An install with a C compiler and Python's headers builds the walk (pyproject.toml's
    optional extension): CI's does, so its tests run both readers."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    if shutil.which(cc) is None or not headers.is_file():
        pytest.skip(f"no C compiler ({cc}) or no Python.h: the pure reader alone")
    assert _WALK is not None


def _real_cubins(builds: Builds) -> Iterator[tuple[str, bytes]]:  # noqa: F811
    for path in builds.cubins:
        yield path.name, path.read_bytes()
    for member in (CURAND13, CURAND11, CUPY102_RANDOM, CUPY12_CUB):
        with fatbinkit.open(fetch(member)) as b:
            for it in (it for it in b.select() if it.kind == "sass"):
                yield f"{member.member}:{it}", it.code.data()


@needs_walk
def test_every_real_cubin_is_walked_and_read_the_same(builds: Builds) -> None:  # noqa: F811
    cubins = functions = 0
    for name, data in _real_cubins(builds):
        fast = _walked(data)
        assert fast is not None, f"the walk left {name} to the pure reader"
        _same(fast, _pure(data))
        _same(_walked(data, 1), _pure(data, 1))
        profile = _walked(data, 2)
        _same(profile, _pure(data, 2))
        assert isinstance(profile, tuple) and len(profile.rows) == len(fast.functions)  # type: ignore[attr-defined,union-attr]
        cubins += 1
        functions += len(fast.functions) if isinstance(fast, Cubin) else 0
    assert cubins >= 240 and functions >= 8000, (cubins, functions)


@pytest.fixture(scope="module")
def sm90(builds: Builds) -> bytes:  # noqa: F811
    return (builds.root / "nvcc_sm90a.cubin").read_bytes()


def _agree(data: bytes) -> None:
    for mode in MODES:
        fast = _walked(data, mode)
        if fast is not None:  # accepted: the pure reader reads it, and the same
            _same(fast, _pure(data, mode))


@needs_walk
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_cubins_are_read_the_same_or_left(sm90: bytes, data: st.DataObject) -> None:
    """Bytes changed anywhere (most often in the headers, the section table and the records,
    where the walk decides), or the file cut short."""
    buf = bytearray(sm90)
    head = struct.unpack_from("<Q", buf, 0x28)[0]  # e_shoff: the section table
    for _ in range(data.draw(st.integers(1, 8))):
        where = data.draw(st.one_of(st.integers(0, 63), st.integers(head, len(buf) - 1),
                                    st.integers(0, len(buf) - 1)))
        buf[where] = data.draw(st.sampled_from([0, 1, 0xFF, 0x7F, 0x80, buf[where] ^ 1,
                                                data.draw(st.integers(0, 255))]))
    if data.draw(st.booleans()):
        buf = buf[: data.draw(st.integers(0, len(buf)))]
    _agree(bytes(buf))


@needs_walk
def test_records_changed_one_by_one(sm90: bytes) -> None:
    """Each attribute record's format, attribute and size bytes set to values that change what
    it means (another format, KPARAM_INFO, ANNOTATIONS, a size past its section)."""
    from fatbinkit.formats.elf import sections

    checked = 0
    for s in sections(sm90):
        if s.header.type != cubin.SHT_CUDA_INFO:
            continue
        pos, end = s.header.offset, s.header.offset + s.header.size
        while pos + 4 <= end:
            fmt, size = sm90[pos], struct.unpack_from("<H", sm90, pos + 2)[0]
            for at, values in ((pos, (1, 2, 3, 4, 5)), (pos + 1, (0x17, 0x55, 0x37, 0x05, 0x2F)),
                               (pos + 2, (0, 3, 12, 0xFF))):
                for v in values:
                    buf = bytearray(sm90)
                    buf[at] = v
                    _agree(bytes(buf))
                    checked += 1
            pos += 4 + (size if fmt == 4 else 0)
    assert checked > 500


@needs_walk
def test_what_the_walk_leaves_to_the_pure_reader(sm90: bytes) -> None:
    """Files it does not cover are read by the pure reader, with the same result or error."""
    from fatbinkit.formats.elf import sections

    shstrndx = struct.unpack_from("<H", sm90, 0x3E)[0]
    names = next(s for s in sections(sm90) if s.index == shstrndx)
    cases = {
        "no section names": sm90[:0x3E] + b"\0\0" + sm90[0x40:],
        "a name that is not ASCII": bytearray(sm90),
        "short": sm90[:40],
        "not ELF": b"\0" * 64,
    }
    bad = cases["a name that is not ASCII"]
    assert isinstance(bad, bytearray)
    bad[names.header.offset + 1] = 0xE9  # the first name's first letter
    for what, data in cases.items():
        data = bytes(data)
        assert _WALK is not None
        assert _WALK.walk(data, 0, cubin.KernelParam, cubin.CubinFunction) is None, what
        assert _read(data, False) == _pure(data), what
    # the table is checked eight bytes at a time, then the tail: a high byte anywhere in it
    # (each place within a word, the middle, the last byte) leaves the file to the pure reader
    start, size = names.header.offset, names.header.size
    for at in (*range(1, 10), size // 2, size - 2, size - 1):
        one = bytearray(sm90)
        one[start + at] |= 0x80
        for mode in (0, 1, 2):
            assert _WALK.walk(bytes(one), mode, cubin.KernelParam, cubin.CubinFunction) is None, at


def test_the_environment_can_turn_the_walk_off() -> None:
    """FATBINKIT_PURE_PYTHON=1: the pure reader alone (what the ``python`` side of the
    ``cubin_reader`` fixture gives the CLI it runs as a child)."""
    import os
    import subprocess
    import sys

    code = "from fatbinkit.formats import cubin; print(cubin._compiled is None)"
    for env, expected in (({"FATBINKIT_PURE_PYTHON": "1"}, "True"),
                          ({"FATBINKIT_PURE_PYTHON": ""}, str(_WALK is None))):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == expected, env
