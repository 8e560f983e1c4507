"""Multi-target Triton compile: the bundled matmul for six GPU targets, one after another (what
a loop over ``triton.compile`` does) against :func:`fatbinkit.triton.compile_kernel` on every
core, in one run, Triton's cache off (``TRITON_ALWAYS_COMPILE=1``); medians of alternating runs.

    python benchmarks/triton_compile.py [--runs 3] [--write docs/benchmarks-triton.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["TRITON_ALWAYS_COMPILE"] = "1"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from fatbin import report  # noqa: E402

TARGETS = ["sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()

    import triton

    import fatbinkit.demo.kernels as tk
    from fatbinkit.parallel import default_jobs
    from fatbinkit.triton import compile_kernel

    def run(jobs: int) -> float:
        t = time.perf_counter()
        compile_kernel(tk.matmul_kernel, tk.MATMUL_SIGNATURE, TARGETS,
                       constexprs=tk.MATMUL_CONSTEXPRS, num_warps=8, jobs=jobs)
        return time.perf_counter() - t

    cores = default_jobs()
    run(1)  # warm-up: Triton's and LLVM's first-use costs are not a per-target cost
    serial, parallel = [], []
    for _ in range(args.runs):
        serial.append(run(1))
        parallel.append(run(cores))
    s, p = statistics.median(serial), statistics.median(parallel)
    head = [
        f"# Triton multi-target compile ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
        "",
        f"`python benchmarks/triton_compile.py`: the bundled matmul (fatbinkit/demo/kernels.py, "
        f"128x128x64 tiles, 8 warps) for {', '.join(TARGETS)}, plus its PTX floor; Triton "
        f"{triton.__version__}, its cache off; {cores} cores, Python "
        f"{platform.python_version()}; median of {args.runs} alternating runs after a warm-up.",
        "",
    ]
    rows = [
        ("serial: one target after another (jobs=1)", f"{s:.2f} s", "1.0x"),
        (f"fatbinkit.triton.compile_kernel, {cores} threads", f"{p:.2f} s",
         f"{s / p:.2f}x faster"),
    ]
    report(head, rows, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
