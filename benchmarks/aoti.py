"""AOTInductor with fatbinkit's switch against torch's own multi-arch path, on a GPU machine:
compile time of the same model, the processes each started, and the cold load of the produced
kernels (SASS from the ``.so``) against the PTX-only path (every kernel JIT-compiled).

    python benchmarks/aoti.py OUT [--write docs/benchmarks-aoti.md]      # runs tests/gpu/aoti_model
    python benchmarks/aoti.py --report OUT/aoti-report.json [--write ...]   # renders a past run
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fatbin import report  # noqa: E402

TOOLS = ("ld", "objcopy", "nvcc", "fatbinary", "gcc", "g++", "ptxas", "ptxas-blackwell")


def _tools(step: dict[str, Any]) -> str:
    counts = collections.Counter(Path(argv[0]).name for argv in step["processes"])
    return ", ".join(f"{tool} x{counts[tool]}" for tool in TOOLS if counts[tool])


def render(r: dict[str, Any], write: Path | None) -> None:
    torch_, switch = r["compile_torch"], r["compile_switch"]
    sass = [s["load_ms"] for s in r["kernels_switch"]["symbols"]]
    jit_torch = r["kernels_torch"]["ptx_only_load_ms"]
    jit_floor = r["kernels_switch"]["ptx_only_load_ms"]
    head = [
        "# AOTInductor: fatbinkit's switch against torch's own path",
        "",
        f"`python benchmarks/aoti.py` on the device tool's H200 (torch {torch_['torch']}, its "
        f"Triton; 16 cores): tests/gpu/aoti_model.py's MLP (layer norm, GELU, softmax: "
        f"{len(sass)} Triton kernels), cold caches, one process per step. torch's path: "
        "`embed_kernel_binary` + `emit_multi_arch_kernel` (the build GPU's SASS + PTX). The "
        f"switch: `fatbinkit.aoti.packaging(archs={r['archs']})`, SASS for all four plus the "
        "compute_80 floor. Loads: `CUDA_CACHE_DISABLE=1`, medians over the model's kernels.",
        "",
    ]
    rows = [
        ("compile, torch's path (sm_90 SASS + PTX)", f"{torch_['seconds']:.1f} s",
         _tools(torch_)),
        (f"compile, the switch ({len(r['archs'])} archs + floor)", f"{switch['seconds']:.1f} s",
         f"{switch['seconds'] / torch_['seconds']:.2f}x torch's time; " + _tools(switch)),
        ("cold load, SASS from the .so symbol (the switch)",
         f"{statistics.median(sass):.2f} ms", "1.0x"),
        ("cold load, PTX only: torch's compute_90 PTX JIT",
         f"{statistics.median(jit_torch):.1f} ms",
         f"{statistics.median(jit_torch) / statistics.median(sass):.0f}x the SASS load"),
        ("cold load, PTX only: the switch's compute_80 floor JIT",
         f"{statistics.median(jit_floor):.1f} ms",
         f"{statistics.median(jit_floor) / statistics.median(sass):.0f}x the SASS load"),
    ]
    report(head, rows, write)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", help="folder for a new run (on a GPU machine)")
    ap.add_argument("--report", type=Path, help="render this aoti-report.json instead")
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    if args.report is None:
        if args.out is None:
            ap.error("give OUT (a new run) or --report")
        subprocess.run([sys.executable, "-m", "tests.gpu.aoti_model", str(args.out)],
                       cwd=ROOT, check=True)
        args.report = args.out / "aoti-report.json"
    render(json.loads(args.report.read_text()), args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
