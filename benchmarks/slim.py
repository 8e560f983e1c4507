"""Slimming benchmark, side by side in one run: ``fatbinkit prune`` on real libraries beside
``cp`` of the same file (the I/O floor: nothing else prunes a linked library; nvprune refuses
one, "not relocatable"), torch's CUDA wheel beside ``unzip`` of it, ``fatbinkit prune`` beside
``nvprune`` (CUDA 11.8, Debian's non-free package) on an nvcc object, and codec/level against size
and time for recompression.

Usage: python benchmarks/slim.py [--write docs/benchmarks-slim.md]

Times are the median of 3 runs of a new process (Python start-up included), peak memory its
``ru_maxrss`` (GNU time); the page cache is warm.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbin import median  # noqa: E402  (benchmarks/fatbin.py: time and peak RSS)
from inputs import TORCH, member, tool, torch_wheel  # noqa: E402  (benchmarks/inputs.py)
from thirdparty import (  # noqa: E402
    CUBLASLT13,
    CUDA_TOOLKIT_118,
    CUFFT11,
    CUPY12_RANDOM,
    CURAND13,
)

from fatbinkit.slim import Codec, SlimReport  # noqa: E402
from fatbinkit.toolchain import find_tool  # noqa: E402

RUNS = 3
FATBINKIT = [sys.executable, "-m", "fatbinkit"]
LIBRARIES = (CUPY12_RANDOM, CURAND13, CUFFT11, CUBLASLT13)
GENCODE = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ("75", "80", "86", "89", "90")]
LEVELS: list[tuple[Codec, int]] = [("lz4", 1), ("lz4", 3), ("lz4", 9), ("zstd", 1), ("zstd", 3),
                                   ("zstd", 6), ("zstd", 9), ("zstd", 15), ("zstd", 19)]


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def libraries(work: Path) -> list[str]:
    rows = ["| library | size | pruned `--for sm_90` | smaller by | prune time, memory | "
            "cp time | prune / cp |", "|---|---:|---:|---:|---:|---:|---:|"]
    for item in LIBRARIES:
        src = member(item)
        out = work / src.name
        t, mem = median([*FATBINKIT, "prune", str(src), "-o", str(out), "--for", "sm_90"], RUNS)
        cp, _ = median(["cp", str(src), str(work / "copy")], RUNS)
        before, after = src.stat().st_size, out.stat().st_size
        rows.append(f"| {src.name} ({item.package} {item.version}) | {mib(before)} | "
                    f"{mib(after)} | {100 * (before - after) / before:.1f} % | "
                    f"{t:.2f} s, {mib(mem)} | {cp:.2f} s | {t / cp:.1f}x |")
        print(rows[-1], flush=True)
    return rows


def wheel(work: Path) -> list[str]:
    src = torch_wheel(TORCH)  # from the registry into the cache
    out = work / "dist"
    t, mem = median([*FATBINKIT, "prune", str(src), "-o", str(out), "--for", "sm_90"], RUNS)
    unzip, _ = median(["unzip", "-q", "-o", str(src), "-d", str(work / "unz")], RUNS)
    before, after = src.stat().st_size, (out / src.name).stat().st_size
    return ["| wheel | size | pruned `--for sm_90` | prune time, memory | `unzip -q` alone |",
            "|---|---:|---:|---:|---:|",
            f"| {src.name} | {mib(before)} | {mib(after)} "
            f"(-{100 * (before - after) / before:.1f} %) | {t:.1f} s, {mib(mem)} | "
            f"{unzip:.1f} s |"]


def levels(work: Path) -> list[str]:
    from fatbinkit.slim import recompress

    src = member(CUFFT11)
    rows = [f"Recompressing every entry of {src.name} ({CUFFT11.package} {CUFFT11.version}, "
            "LZ4 as shipped), in-process, on all cores of this machine:", "",
            "| codec, level | device code | of the input's | time |", "|---|---:|---:|---:|"]
    for codec, level in LEVELS:
        t = time.perf_counter()
        report = recompress(src, work / "r.so", codec=codec, level=level,
                            allow_newer_driver=True)
        t = time.perf_counter() - t
        assert isinstance(report, SlimReport)
        rows.append(f"| {codec} {level} | {mib(report.device_after)} | "
                    f"{100 * report.device_after / report.device_before:.0f} % | {t:.2f} s |")
        print(rows[-1], flush=True)
    return rows


def objects(work: Path) -> list[str]:
    nvprune = tool(CUDA_TOOLKIT_118, "nvprune")
    obj = work / "k.o"
    subprocess.run([str(find_tool("nvcc")), "-c", "-o", str(obj),
                    str(ROOT / "fatbinkit" / "demo" / "library.cu"), *GENCODE], check=True)
    ours, our_mem = median([*FATBINKIT, "prune", str(obj), "-o", str(work / "a.o"), "--for",
                            "sm_90", "--ptx", "none"], RUNS)
    theirs, their_mem = median([str(nvprune), "-arch", "sm_90", str(obj), "-o",
                                str(work / "b.o")], RUNS)
    return ["| object (nvcc -c, SASS for 5 archs) | tool | time, memory | output |",
            "|---|---|---:|---:|",
            f"| {mib(obj.stat().st_size)} | nvprune 11.8 `-arch sm_90` | {theirs * 1e3:.0f} ms, "
            f"{mib(their_mem)} | {(work / 'b.o').stat().st_size:,} B |",
            f"| | fatbinkit prune `--for sm_90 --ptx none` | {ours * 1e3:.0f} ms, "
            f"{mib(our_mem)} | {(work / 'a.o').stat().st_size:,} B |"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        body = [*libraries(work), "", *wheel(work), "", *objects(work), "", *levels(work)]
    head = (f"# Slimming benchmark\n\n`python benchmarks/slim.py`, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.machine()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}. Process times are "
            f"medians of {RUNS} runs (Python start-up included), memory the peak RSS; warm page "
            "cache.\n\n")
    text = head + "\n".join(body) + "\n"
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
