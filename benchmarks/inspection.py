"""Inspection benchmark, side by side in one run: per-function resources (cuobjdump -res-usage vs
fatbinkit), listing (cuobjdump -lelf -lptx vs fatbinkit ls), ``fatbinkit check`` for three archs
and ``fatbinkit ls --summary``, on libtorch_cuda.so (torch 2.14.1's CUDA wheel) and
libcublasLt.so.13 (nvidia-cublas 13.1.0.3), with ratios and peak memory (ru_maxrss of each child
process). Both come from the package registry into the fixtures cache (benchmarks/inputs.py).

Usage: python benchmarks/inspection.py [--write docs/benchmarks-inspect.md] [--library PATH ...]

Targets (issue 11, on a 2-core machine): ``ls --resources`` on libtorch_cuda.so at least 2x
faster than ``cuobjdump -res-usage``; ``check`` of libtorch_cuda.so for three archs within 2 s;
``ls --summary`` within 0.5 s; memory below 1/10 of cuobjdump's. ``check`` and ``--summary`` have
no cuobjdump equivalent: the ratio is to the listing a user would otherwise script from.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbin import median, report, versus  # noqa: E402  (benchmarks/fatbin.py)
from inputs import member, torch_cuda  # noqa: E402  (benchmarks/inputs.py: registry -> cache)
from thirdparty import CUBLASLT131  # noqa: E402

from fatbinkit.toolchain import find_tool  # noqa: E402

RUNS = 3
ARCHS = ("sm_80", "sm_90", "sm_120")


def cell(t: float, m: int) -> str:
    return f"{t:.2f} s, {m / 2**20:.0f} MiB"


def bench(lib: Path, cuobjdump: str) -> list[tuple[str, str, str]]:
    py = sys.executable
    fk = [py, "-m", "fatbinkit"]
    name = lib.name
    rows = []
    c_t, c_m = median([cuobjdump, "-res-usage", str(lib)], RUNS)
    rows.append((f"{name}: resources, cuobjdump -res-usage", cell(c_t, c_m), ""))
    for label, argv in (
        ("resources, fatbinkit ls --resources", [*fk, "ls", "--resources", str(lib)]),
        ("resources, fatbinkit ls --resources --json", [*fk, "ls", "--resources", "--json",
                                                        str(lib)]),
        ("20 most registers, fatbinkit ls --resources --top 20", [
            *fk, "ls", "--resources", "--top", "20", str(lib)]),
    ):
        t, m = median(argv, RUNS)
        rows.append((f"{name}: {label}", cell(t, m),
                     f"{versus('fatbinkit', t, c_t)}, 1/{c_m / m:.0f} of the memory"))
    c_t, c_m = median([cuobjdump, "-lelf", "-lptx", str(lib)], RUNS)
    rows.append((f"{name}: list, cuobjdump -lelf -lptx", cell(c_t, c_m), ""))
    for label, argv in (
        ("list, fatbinkit ls", [*fk, "ls", str(lib)]),
        ("summary, fatbinkit ls --summary", [*fk, "ls", "--summary", str(lib)]),
        (f"fatbinkit check --arch {' --arch '.join(ARCHS)}",
         [*fk, "check", str(lib), *(a for arch in ARCHS for a in ("--arch", arch))]),
    ):
        t, m = median(argv, RUNS)
        rows.append((f"{name}: {label}", cell(t, m),
                     f"{versus('fatbinkit', t, c_t)} than the listing, 1/{c_m / m:.0f} of its "
                     "memory"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--library", type=Path, action="append",
                        help="libraries to measure (default: libtorch_cuda.so, cuBLASLt)")
    args = parser.parse_args()
    libs = args.library
    if not libs:
        libs = [torch_cuda(), member(CUBLASLT131)]
    cuobjdump = str(find_tool("cuobjdump"))
    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "fatbinkit")], check=True)
    rows = [row for lib in libs for row in bench(lib, cuobjdump)]
    head = [
        "# Inspection benchmark",
        "",
        f"`python benchmarks/inspection.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; cuobjdump {cuobjdump}. Each figure is the median of "
        f"{RUNS} runs in a new process (Python start-up included) and the highest peak RSS "
        "(GNU time: the largest of the process and the pool workers it waited for), warm page "
        "cache. Libraries: "
        + ", ".join(f"`{lib.name}` ({lib.stat().st_size / 2**20:.0f} MiB)" for lib in libs)
        + ".",
        "",
    ]
    report(head, rows, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
