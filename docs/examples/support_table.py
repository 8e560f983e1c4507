"""Which GPUs each library of a wheel (or a folder) loads on: one row per library, one column
per GPU arch, and the wheel's total.

    python docs/examples/support_table.py torch-2.9.0-cp311-manylinux_2_28_x86_64.whl [ARCH...]

A cell is ``SASS`` (every module of the library loads code built for that GPU), ``JIT`` (every
module loads, some only by compiling PTX at load time: slow cold starts), ``partial`` (some
modules hold nothing for that GPU: they fail only if used there) or ``-`` (the library cannot
run there). Exit status 1 when the wheel as a whole fails on one of the archs (``TotalCheck.ok``;
``strict_ok`` would fail ``partial`` too).
"""

from __future__ import annotations

import sys

import fatbinkit.collection
from fatbinkit.compat import ArchVerdict, TotalVerdict

ARCHS = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]


def cell(verdict: ArchVerdict | TotalVerdict) -> str:
    """One verdict as a table cell."""
    if verdict.status == "fails":
        return "-"
    if verdict.status == "partial":
        return "partial"
    if isinstance(verdict, ArchVerdict):
        return "JIT" if verdict.jit else "SASS"
    return "works"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: support_table.py WHEEL_OR_FOLDER [ARCH...]", file=sys.stderr)
        return 2
    archs = argv[1:] or ARCHS
    total = fatbinkit.collection.check(argv[0], archs)
    width = max(len("total"), *(len(c.file) for c in total.checks))
    print(f"{'library':<{width}}  " + "  ".join(f"{a.sm:>7}" for a in total.archs))
    for check in total.checks:
        print(f"{check.file:<{width}}  " + "  ".join(f"{cell(v):>7}" for v in check.verdicts))
    print(f"{'total':<{width}}  " + "  ".join(f"{cell(v):>7}" for v in total.verdicts))
    return 0 if total.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
