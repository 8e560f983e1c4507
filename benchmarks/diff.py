"""Diff benchmark, side by side in one run: ``fatbinkit diff OLD NEW`` (text and ``--json``)
against the pipeline a user would otherwise script, ``cuobjdump -res-usage`` on both files and a
text ``diff`` of the two listings, with ratios and peak memory (GNU time: the largest RSS of the
command and the processes it waited for).

Pairs: cuRAND 10.4.0.35 -> 10.4.5.25 (nvidia-curand wheels, CUDA 13.0 -> 13.4 builds, ~100-130
MB each) and libtorch_cuda.so of torch 2.13.0 -> 2.14.1 (~450-480 MB each); with ``--wheels``,
the two torch wheels themselves (``fatbinkit diff`` reads every ELF member of each wheel in
memory) against unzip + cuobjdump on every shared library + a recursive diff. Every input comes
from the package registry into the fixtures cache (benchmarks/inputs.py), each library unzipped
once from its wheel. Every command writes its output to a file, as a user would keep it.

Usage: python benchmarks/diff.py [--write docs/benchmarks-diff.md] [--wheels] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbin import median, report, versus  # noqa: E402  (benchmarks/fatbin.py)
from inputs import TORCH, TORCH_OLD, member, torch_cuda, torch_wheel  # noqa: E402
from thirdparty import CURAND13, CURAND130  # noqa: E402

from fatbinkit.toolchain import find_tool  # noqa: E402

# In-process phases of one diff (a child process, so that this one's memory does not count).
PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
from fatbinkit.diff import diff, snapshot
t1 = time.perf_counter()
old = snapshot(sys.argv[1]); t2 = time.perf_counter()
new = snapshot(sys.argv[2], like=old); t3 = time.perf_counter()
d = diff(old, new); t4 = time.perf_counter()
text = "\n".join(d.lines()); t5 = time.perf_counter()
doc = json.dumps(d.to_dict()); t6 = time.perf_counter()  # as dump_rows: the C encoder
n = [sum(len(lib.kernels) for lib in s.libraries) for s in (old, new)]
print(json.dumps({"import": t1 - t0, "snapshot old": t2 - t1, "snapshot new": t3 - t2,
                  "compare": t4 - t3, "text": t5 - t4, "json": t6 - t5, "images": n,
                  "text_bytes": len(text), "json_bytes": len(doc)}))
"""


def cell(t: float, m: int) -> str:
    return f"{t:.2f} s, {m / 2**20:.0f} MiB"


def _in(cwd: Path, script: str, runs: int) -> tuple[float, int]:
    return median(["bash", "-c", f"cd {shlex.quote(str(cwd))} && {script}"], runs)


def size(path: Path) -> str:
    n = path.stat().st_size
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def warm(*paths: Path) -> None:
    """Read ``paths`` once, so that every measured command finds them in the page cache."""
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def bench_pair(name: str, old: Path, new: Path, runs: int, cuobjdump: str,
               tmp: Path) -> list[tuple[str, str, str]]:
    q = shlex.quote
    warm(old, new)
    fk = f"{q(sys.executable)} -m fatbinkit diff {q(str(old))} {q(str(new))}"
    pipeline = (f"{q(cuobjdump)} -res-usage {q(str(old))} > a.txt && "
                f"{q(cuobjdump)} -res-usage {q(str(new))} > b.txt && "
                "{ diff a.txt b.txt > d.txt; [ $? -le 1 ]; }")
    p_t, p_m = _in(tmp, pipeline, runs)
    lines = (tmp / "d.txt").read_bytes().count(b"\n")
    rows = [(f"{name}: cuobjdump -res-usage x2 + diff ({runs} runs; {lines} diff lines)",
             cell(p_t, p_m), "")]
    for label, script, out in (("fatbinkit diff", f"{fk} > diff.txt", "diff.txt"),
                               ("fatbinkit diff --json", f"{fk} --json > diff.json",
                                "diff.json")):
        t, m = _in(tmp, script, runs)
        rows.append((f"{name}: {label} ({runs} runs; {size(tmp / out)} out)", cell(t, m),
                     f"{versus('fatbinkit', t, p_t)}, {p_m / m:.1f}x less memory"
                     if m <= p_m else f"{versus('fatbinkit', t, p_t)}, {m / p_m:.1f}x more "
                     "memory"))
    return rows


def bench_wheels(old: Path, new: Path, cuobjdump: str, tmp: Path) -> list[tuple[str, str, str]]:
    q = shlex.quote
    warm(old, new)
    steps = []
    for side, wheel in (("old", old), ("new", new)):
        steps.append(f"unzip -q -o -d {side} {q(str(wheel))} '*.so*'")
        # every shared library: cuobjdump fails on those without device code (no listing kept)
        steps.append(
            f"(cd {side} && find . -name '*.so*' -type f | sort | while read -r f; do "
            f"mkdir -p ../res-{side}/$(dirname \"$f\"); {q(cuobjdump)} -res-usage \"$f\" "
            f"> ../res-{side}/\"$f\".txt 2>/dev/null || rm -f ../res-{side}/\"$f\".txt; done)")
    steps.append("{ diff -r res-old res-new > d.txt; [ $? -le 1 ]; }")
    p_t, p_m = _in(tmp, " && ".join(steps), 1)
    listed = len(list((tmp / "res-new").rglob("*.txt")))
    name = f"torch wheels {old.name.split('-')[1]} -> {new.name.split('-')[1]}"
    rows = [(f"{name}: unzip *.so* x2 + cuobjdump -res-usage each ({listed} with device code) + "
             "diff -r (1 run)", cell(p_t, p_m), "")]
    fk = f"{q(sys.executable)} -m fatbinkit diff {q(str(old))} {q(str(new))}"
    t, m = _in(tmp, f"{fk} --json > wheels.json", 1)
    rows.append((f"{name}: fatbinkit diff --json on the wheels (1 run; "
                 f"{size(tmp / 'wheels.json')} out)", cell(t, m),
                 f"{versus('fatbinkit', t, p_t)}, {p_m / m:.1f}x less memory"
                 if m <= p_m else f"{versus('fatbinkit', t, p_t)}, {m / p_m:.1f}x more memory"))
    return rows


def phases(name: str, old: Path, new: Path) -> list[tuple[str, str, str]]:
    import json

    out = subprocess.run([sys.executable, "-c", PHASES, str(old), str(new)], check=True,
                         capture_output=True, text=True).stdout
    doc = json.loads(out.splitlines()[-1])
    total = sum(doc[k] for k in ("import", "snapshot old", "snapshot new", "compare", "text",
                                 "json"))
    rows = [(f"{name}: in one process, {k}", f"{doc[k]:.2f} s", f"{doc[k] / total:.0%}")
            for k in ("import", "snapshot old", "snapshot new", "compare", "text", "json")]
    rows.append((f"{name}: kernel images old / new; text / JSON size",
                 f"{doc['images'][0]} / {doc['images'][1]}",
                 f"{doc['text_bytes'] / 2**20:.0f} MiB / {doc['json_bytes'] / 2**20:.0f} MiB"))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--runs", type=int, default=3, help="runs of the cuRAND pair (3)")
    parser.add_argument("--torch-runs", type=int, default=2, help="runs of libtorch_cuda (2)")
    parser.add_argument("--wheels", action="store_true", help="also diff the two torch wheels")
    args = parser.parse_args()
    cuobjdump = str(find_tool("cuobjdump"))
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-2]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "fatbinkit")],
                   check=True)
    curand = (member(CURAND130), member(CURAND13))
    torch = (torch_cuda(TORCH_OLD), torch_cuda(TORCH))
    wheels = (torch_wheel(TORCH_OLD), torch_wheel(TORCH))
    pair = f"libtorch_cuda.so {TORCH_OLD} -> {TORCH}"
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="fatbinkit-diff-bench-") as d:
        tmp = Path(d)
        rows += bench_pair("libcurand.so.10 10.4.0.35 -> 10.4.5.25", *curand, args.runs,
                           cuobjdump, tmp)
        rows += bench_pair(pair, *torch, args.torch_runs, cuobjdump, tmp)
        rows += phases(pair, *torch)
        if args.wheels:
            for f in tmp.iterdir():
                if f.is_file():
                    f.unlink()
            rows += bench_wheels(*wheels, cuobjdump, tmp)
    libs = [("libcurand.so.10 10.4.0.35", curand[0]), ("10.4.5.25", curand[1]),
            (f"libtorch_cuda.so {TORCH_OLD}", torch[0]), (TORCH, torch[1])]
    head = [
        "# Diff benchmark",
        "",
        f"`python benchmarks/diff.py{' --wheels' if args.wheels else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}; cuobjdump {cuobjdump} "
        f"({version}). Each figure is the median of the runs stated, each in a new process "
        "(Python start-up included), and the highest peak RSS (GNU time: the largest of the "
        "shell, the commands and the pool workers they waited for); warm page cache; every "
        "command writes its output to a file. Libraries: "
        + ", ".join(f"{label} ({size(lib)})" for label, lib in libs)
        + ".",
        "",
    ]
    report(head, rows, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
