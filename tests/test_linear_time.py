"""Parsers of untrusted text run in linear time: adversarial shapes at two sizes, by scaling.

Each shape is parsed at 4 KiB and at 32 KiB (8x): a linear parser takes about 8x as long, a
quadratic one 64x. The assertion is on that ratio (best of several runs), not on wall time, so
a slow machine does not fail it and a quadratic regression cannot pass it. Each shape is then
parsed once at 1 MiB, which a quadratic parser would not finish in minutes. The first shape is
the one a mutation campaign found: a whitespace run inside an ``.entry`` parameter list (0.15 s
at 10 k spaces, 55 s at 200 k, through ``re.sub(r"\\s+\\[", ...)``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fatbinkit.compat import image_from_ptx
from fatbinkit.errors import FatbinkitError
from fatbinkit.formats.elf import StringTable
from fatbinkit.formats.ptx import Ptx, is_ptx, ptx_header

HEAD = ".version 8.0\n.target sm_80\n.address_size 64\n"

# name -> text of about n bytes
SHAPES: dict[str, Callable[[int], str]] = {
    "whitespace in a parameter list": lambda n: (
        HEAD + ".visible .entry k(.param .u64 p0," + " " * n + ".param .u32 p1)\n{\nret;\n}\n"),
    "unclosed parameter list": lambda n: HEAD + ".visible .entry k(.param .u64 p0," + " " * n,
    "many parameters": lambda n: HEAD + ".visible .entry k(" + ",".join(
        f".param .u32 p{i}" for i in range(n // 16)) + ")\n{\nret;\n}\n",
    "brackets after a name": lambda n: HEAD + ".visible .entry k(.param .b8 p" + " [" * (n // 2)
    + ")\n",
    "unclosed block comments": lambda n: HEAD + "/*" * (n // 2),
    "line comments": lambda n: HEAD + "//" * (n // 2),
    "entries without parameter lists": lambda n: HEAD + ".entry k " * (n // 9),
    "whitespace after .entry": lambda n: HEAD + ".entry" + " " * n + "k(.param .u32 a)",
    "newlines before the header": lambda n: "\n" * n + HEAD,
    "whitespace in .version": lambda n: ".version" + " " * n + "8.0\n.target sm_80\n",
    "whitespace in .target": lambda n: ".version 8.0\n.target" + " " * n + "sm_80\n",
    "nested parentheses": lambda n: HEAD + ".entry k" + "(" * n,
    "commas": lambda n: HEAD + ".entry k(" + "," * n + ")",
    "module variables": lambda n: HEAD + ".global .u32 g;\n" * (n // 16),
    # shapes for the declaration regex (fatbinkit.formats.ptx._DECL_RE): its lazy modifier run
    "whitespace around a name": lambda n: HEAD + ".entry k(.param .u32" + " " * (n // 2) + "p"
    + " " * (n // 2) + "q)",
    "a long name then another": lambda n: HEAD + ".entry k(.param .u32 " + "k" * n + " x)",
    "many short tokens in a declaration": lambda n: HEAD + ".entry k(.param " + "a " * (n // 2)
    + "[)",
    "whitespace before variables": lambda n: HEAD + " " * n + ".global .u32 g;\n",
}
READERS: dict[str, Callable[[bytes], object]] = {
    "Ptx.from_bytes": Ptx.from_bytes,
    "ptx_header": ptx_header,
    "is_ptx": is_ptx,
    "image_from_ptx": image_from_ptx,
}


def _best(read: Callable[[bytes], object], data: bytes, runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        with contextlib.suppress(FatbinkitError):  # a malformed shape may be refused: what
            read(data)  # matters is how long that takes
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_linear_in_the_input(shape: str, reader: str) -> None:
    read, make = READERS[reader], SHAPES[shape]
    small, large = make(4096).encode(), make(32768).encode()
    ratio = _best(read, large) / max(_best(read, small), 1e-6)
    assert ratio < 24, f"{reader} on {shape}: 8x the input took {ratio:.0f}x the time"
    _best(read, make(1 << 20).encode(), runs=1)  # 1 MiB finishes (minutes if quadratic)


# -- ELF string tables (section names, cubin and host symbols) -------------------------------


def _lookups_in_one_run(n: int) -> Callable[[bytes], object]:
    """n names starting at 0, 1, 2, ... inside one n-byte unterminated run: each plain
    ``find`` from its index scans to the run's end (n * n / 2 bytes)."""
    def read(table: bytes) -> object:
        lookup = StringTable(table)
        return [lookup.end(i) for i in range(n)]
    return read


def test_string_table_lookups_are_linear() -> None:
    small, large = 1 << 12, 1 << 16  # 16x: linear ~16x the time, quadratic ~256x
    t_small = _best(_lookups_in_one_run(small), b"a" * small * 4 + b"\0", runs=3)
    t_large = _best(_lookups_in_one_run(large), b"a" * large * 4 + b"\0", runs=3)
    assert t_large / max(t_small, 1e-6) < 64


@given(st.binary(max_size=3 * StringTable.WINDOW), st.lists(st.integers(-2, 13000), max_size=50))
def test_string_table_agrees_with_find(table: bytes, indexes: list[int]) -> None:
    """The reference: the NUL at or after ``index`` as ``bytes.find`` gives it."""
    lookup = StringTable(table)
    for i in indexes:
        assert lookup.end(i) == (table.find(b"\0", i) if 0 <= i < len(table) else -1)
