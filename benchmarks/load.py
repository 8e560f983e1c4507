"""Cold-load cost of one Triton matmul kernel, packaged three ways (needs a CUDA GPU).

Each load runs in a fresh process with ``CUDA_CACHE_DISABLE=1``, so nothing is cached: the time is
that of ``cuModuleLoadDataEx`` alone (context creation excluded), median over ``--loads`` runs.

- bare cubin (what Triton itself loads),
- SASS + PTX fatbin (fatbinkit's pure writer),
- PTX-only fatbin (AOTInductor's 2025 recipe: the driver JIT-compiles at every cold start).

Target: the SASS fatbin within 1.5x of the bare cubin; the PTX-only ratio is reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_CHILD = """
import sys, time
from fatbinkit.runtime import Module, Device
data = open(sys.argv[1], "rb").read()
Device.get(0)
from fatbinkit.runtime import _activate
_activate(0)  # context creation stays outside the timing
with Module.load(data) as m:
    k = m.kernel(sys.argv[2])
    print(m.load_seconds, k.binary_version, k.ptx_version)
"""


def _cold_loads(path: Path, kernel: str, n: int) -> tuple[list[float], str]:
    env = dict(os.environ, CUDA_CACHE_DISABLE="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    times, picked = [], ""
    for _ in range(n):
        out = subprocess.run([sys.executable, "-c", _CHILD, str(path), kernel], env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        times.append(float(out[0]))
        picked = f"sm_{out[1]} from compute_{out[2]}"
    return times, picked


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=10)
    ap.add_argument("--min-driver", default="12.9",
                    help="oldest CUDA driver the kernel must load on (caps Triton's PTX ISA)")
    ap.add_argument("--triton-dir", type=Path,
                    help="use kernels compiled ahead by tests/gpu/triton_artifacts.py")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-load.md")
    args = ap.parse_args()

    import fatbinkit.demo.kernels as tk
    from fatbinkit.runtime import Device
    from fatbinkit.triton import TritonKernel, compile_kernel

    dev = Device.get(0)
    if args.triton_dir:  # compiled on another machine by tests/gpu/triton_artifacts.py
        from tests.gpu.triton_artifacts import read

        target = f"sm_{dev.arch.number}a" if dev.arch.number >= 90 else dev.arch.sm
        image = read(args.triton_dir, "matmul_kernel", target)
    else:
        image = compile_kernel(tk.matmul_kernel, tk.MATMUL_SIGNATURE, [dev.arch],
                               constexprs=tk.MATMUL_CONSTEXPRS, num_warps=8,
                               min_driver=args.min_driver, floor=False).images[0]
    one = TritonKernel(image.name, (image,), None)
    variants = {
        "bare cubin": image.cubin,
        "SASS+PTX fatbin": one.fatbin(ptx="all"),
        "SASS+PTX fatbin, zstd": one.fatbin(ptx="all", compression="zstd"),
        "PTX-only fatbin": one.fatbin(sass=False, ptx="all"),
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, data in variants.items():
            path = Path(tmp) / label.replace(" ", "_").replace(",", "")
            path.write_bytes(data)
            times, picked = _cold_loads(path, image.name, args.loads)
            rows.append((label, len(data), statistics.median(times), min(times), picked))
    base = rows[0][2]
    lines = [
        f"# Cold load of a Triton matmul kernel ({dev.name}, {dev.arch}, driver CUDA "
        f"{dev.driver_version[0]}.{dev.driver_version[1]}, {date.today().isoformat()})",
        "",
        f"`python benchmarks/load.py`: {args.loads} loads each, one fresh process per load, "
        "CUDA_CACHE_DISABLE=1, time of cuModuleLoadDataEx only. Kernel "
        f"`{image.name}` compiled by Triton{' on the CPU machine' if args.triton_dir else ''} "
        f"for {image.arch} (PTX ISA "
        f"{image.ptx_version[0]}.{image.ptx_version[1]}).",
        "",
        "| image | bytes | median ms | min ms | ratio to bare cubin | driver ran |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, size, med, low, picked in rows:
        lines.append(f"| {label} | {size} | {med * 1e3:.3f} | {low * 1e3:.3f} | "
                     f"{med / base:.2f}x | {picked} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
