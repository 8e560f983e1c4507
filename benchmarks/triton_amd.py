"""Multi-target Triton compile for AMD GPUs: the bundled matmul for six gfx targets, one after
another (what a loop over ``triton.compile`` does) against
:func:`fatbinkit.triton.compile_kernel` on every core, Triton's cache off
(``TRITON_ALWAYS_COMPILE=1``); medians of alternating runs, and the size of the one offload
bundle against the code objects it holds.

    python benchmarks/triton_amd.py [--runs 3] [--write docs/benchmarks-triton.md]

``--write`` replaces the file's "AMD targets" section (or appends it), keeping the rest.
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

TARGETS = ["gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1201"]
SECTION = "## AMD targets"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()

    import triton

    import fatbinkit.demo.kernels as tk
    from fatbinkit.parallel import default_jobs
    from fatbinkit.triton import compile_kernel
    from fatbinkit.triton_amd import AmdKernel

    def run(jobs: int) -> tuple[float, float, AmdKernel]:
        """Wall and CPU seconds (every thread) of one compile of every target."""
        t, c = time.perf_counter(), time.process_time()
        kernel = compile_kernel(tk.matmul_kernel, tk.MATMUL_SIGNATURE, TARGETS,
                                constexprs=tk.MATMUL_CONSTEXPRS, num_warps=8, jobs=jobs)
        assert isinstance(kernel, AmdKernel)
        return time.perf_counter() - t, time.process_time() - c, kernel

    cores = default_jobs()
    *_, kernel = run(1)  # warm-up: Triton's and LLVM's first-use costs are not per target
    load = os.getloadavg()[0]
    serial, parallel, busy = [], [], []
    for _ in range(args.runs):
        serial.append(run(1)[0])
        wall, cpu, _ = run(cores)
        parallel.append(wall)
        busy.append(cpu / wall)
    s, p = statistics.median(serial), statistics.median(parallel)
    plain, objects = kernel.bundle(), sum(len(i.hsaco) for i in kernel.images)
    try:
        packed = f"{len(kernel.bundle(compression='zstd')):,} B"
        ratio = f"{len(kernel.bundle(compression='zstd')) / objects:.2f}x"
    except ImportError:  # no zstandard module here
        packed = ratio = "n/a"
    lines = [
        SECTION, "",
        f"`python benchmarks/triton_amd.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f"): the bundled matmul (128x128x64 tiles, 8 warps) for {', '.join(TARGETS)}; Triton "
        f"{triton.__version__}, its cache off; {cores} cores, Python "
        f"{platform.python_version()}; median of {args.runs} alternating runs after a warm-up; "
        f"load average {load:.1f} before, {os.getloadavg()[0]:.1f} after (the machine's other "
        f"users); the parallel runs kept {statistics.median(busy):.2f} cores busy (CPU / wall).",
        "",
        "| measurement | result | ratio |", "|---|---|---|",
        f"| serial: one target after another (jobs=1) | {s:.2f} s | 1.0x |",
        f"| fatbinkit.triton.compile_kernel, {cores} threads | {p:.2f} s | {s / p:.2f}x faster |",
        f"| the {len(TARGETS)} code objects | {objects:,} B | |",
        f"| one offload bundle (4096-aligned) | {len(plain):,} B | "
        f"{len(plain) / objects:.2f}x |",
        f"| the bundle as CCOB v3, zstd | {packed} | {ratio} |",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        old = args.write.read_text() if args.write.exists() else ""
        keep = old.split(SECTION, 1)[0].rstrip("\n")
        args.write.write_text(f"{keep}\n\n{text}" if keep else text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
