"""Fatbin benchmark, side by side in one run: building (pure writer vs fatbinary process vs
nvFatbin vs AOTInductor's nvcc recipe) and listing/extracting a large real library
(libcublasLt.so.13, nvidia-cublas wheel) with fatbinkit vs cuobjdump, with ratios and peak memory
(ru_maxrss of each child process).

Usage: python benchmarks/fatbin.py [--write docs/benchmarks-fatbin.md] [--library PATH]
       python benchmarks/fatbin.py --old [--write docs/benchmarks-old-eras.md]

``--old`` lists and extracts a CUDA 11 library instead (libcufft.so.10 of nvidia-cufft-cu11,
279 MB) beside its era's cuobjdump, 11.8 (Debian's non-free package; cuobjdump 13 refuses it),
and skips the build measurements.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbinkit.build import Image, build, nvcc_command  # noqa: E402
from fatbinkit.formats.arch import Arch  # noqa: E402
from fatbinkit.formats.fatbin import EntryKind  # noqa: E402
from fatbinkit.scan import scan  # noqa: E402
from fatbinkit.toolchain import find_tool  # noqa: E402

SOURCE = r"""
extern "C" __global__ void add1(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""
CUBIN_ARCHS = ("sm_75", "sm_80", "sm_90", "sm_100", "sm_120")
LIST_RUNS, CUOBJDUMP_RUNS = 7, 3


def child(argv: list[str], cwd: Path | None = None) -> tuple[float, int]:
    """Run ``argv``; return (wall seconds, peak RSS in bytes) of that child alone.

    The command runs under GNU time, which forks it from a small process: a child forked from
    this (large) Python process would report this process's RSS as its own peak.
    """
    report = Path(tempfile.mkstemp(prefix="fatbinkit-rss-")[1])
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-o", str(report), "-f", "%M", *argv], cwd=cwd,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    kib = int(report.read_text().split()[-1])
    report.unlink()
    return wall, kib * 1024


def median(argv: list[str], runs: int) -> tuple[float, int]:
    """Median wall seconds and highest peak RSS of ``runs`` runs of ``argv`` (:func:`child`)."""
    found = [child(argv) for _ in range(runs)]
    return statistics.median(t for t, _ in found), max(m for _, m in found)


def report(head: list[str], rows: list[tuple[str, str, str]], write: Path | None) -> None:
    """Print ``head`` and the ``| measurement | result | ratio |`` rows as markdown (also to
    the file ``write``)."""
    table = "\n".join([*head, "| measurement | result | ratio |", "|---|---|---|",
                       *(f"| {a} | {b} | {c} |" for a, b, c in rows)]) + "\n"
    print(table)
    if write:
        write.parent.mkdir(parents=True, exist_ok=True)
        write.write_text(table)


def versus(name: str, ours: float, theirs: float) -> str:
    """``name`` N x faster (or slower) than the other measurement."""
    if ours <= theirs:
        return f"{name} {theirs / ours:.1f}x faster"
    return f"{name} {ours / theirs:.1f}x slower"


def best(fn: Callable[[], object], reps: int) -> float:
    """Median wall seconds of ``fn`` over ``reps`` runs."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def kernels(tmp: Path) -> tuple[list[Image], Path]:
    nvcc = str(find_tool("nvcc"))  # the tool the report names (PATH, CUDA home, pip wheels)
    src = tmp / "k.cu"
    src.write_text(SOURCE)
    images = []
    for arch in CUBIN_ARCHS:
        out = tmp / f"k_{arch}.cubin"
        subprocess.run([nvcc, "-cubin", f"-arch={arch}", str(src), "-o", str(out)], check=True)
        images.append(Image.from_file(EntryKind.ELF, Arch.parse(arch), out))
    ptx = tmp / "k.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=compute_90", str(src), "-o", str(ptx)], check=True)
    images.append(Image.from_file(EntryKind.PTX, Arch(90), ptx))
    return images, ptx


def bench_build(tmp: Path) -> list[tuple[str, str, str]]:
    images, ptx = kernels(tmp)
    rows = []
    for compression in (None, "zstd"):
        pure = best(lambda c=compression: build(images, compression=c), 50)
        nvf = best(lambda c=compression: build(images, backend="nvfatbin", compression=c), 50)
        fbin = best(lambda c=compression: build(images, backend="fatbinary", compression=c), 5)
        label = compression or "none"
        rows.append((f"build {len(images)} images, {label}: pure", f"{pure * 1e3:.2f} ms", ""))
        rows.append((f"build {label}: nvFatbin (in-process)", f"{nvf * 1e3:.2f} ms",
                     versus("pure", pure, nvf)))
        rows.append((f"build {label}: fatbinary process", f"{fbin * 1e3:.1f} ms",
                     versus("pure", pure, fbin)))
    nvcc = str(find_tool("nvcc"))
    out = tmp / "aoti.fatbin"
    t = best(lambda: subprocess.run([nvcc, *nvcc_command(ptx, out, [Arch(90)])], check=True), 3)
    rows.append(("build: nvcc AOTI recipe (PTX -> compute_90 + sm_90, runs ptxas)",
                 f"{t * 1e3:.0f} ms", ""))
    return rows


def bench_library(lib: Path, tmp: Path, cuobjdump: str) -> list[tuple[str, str, str]]:
    py = sys.executable
    rows = []
    # Byte-compile fatbinkit as `pip install` does: with PYTHONDONTWRITEBYTECODE set (as in some
    # CI images) and no __pycache__, every child would recompile the sources (~13 ms).
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "fatbinkit")], check=True)
    o_t, o_m = median([py, "-m", "fatbinkit", "ls", str(lib)], LIST_RUNS)
    ours_json = child([py, "-m", "fatbinkit", "ls", "--json", str(lib)])
    c_t, c_m = median([cuobjdump, "-lelf", "-lptx", str(lib)], CUOBJDUMP_RUNS)
    rows.append(("list: cuobjdump -lelf -lptx", f"{c_t:.2f} s, {c_m / 2**20:.0f} MiB", ""))
    rows.append(("list: fatbinkit ls (new process, incl. Python start-up)",
                 f"{o_t:.3f} s, {o_m / 2**20:.0f} MiB",
                 f"{versus('fatbinkit', o_t, c_t)}, 1/{c_m / o_m:.0f} of the memory"))
    bare = statistics.median(child([py, "-c", "pass"])[0] for _ in range(LIST_RUNS))
    start_up = statistics.median(
        child([py, "-c", "import fatbinkit.cli"])[0] for _ in range(LIST_RUNS)
    )
    rows.append(("list: of which Python start-up + `import fatbinkit.cli` (all CLI groups)",
                 f"{start_up:.3f} s", f"bare `python -c pass`: {bare:.3f} s"))
    scan_t = best(lambda: scan(lib), 5)
    rows.append(("list: fatbinkit.scan.scan() in-process (the API, no start-up)",
                 f"{scan_t:.3f} s", versus("scan()", scan_t, c_t)))
    rows.append(("list: fatbinkit ls --json", f"{ours_json[0]:.3f} s, "
                 f"{ours_json[1] / 2**20:.0f} MiB", ""))

    r_t, r_m = median([py, "-m", "fatbinkit", "ls", "--resources", str(lib)], CUOBJDUMP_RUNS)
    cr_t, cr_m = median([cuobjdump, "-res-usage", str(lib)], CUOBJDUMP_RUNS)
    rows.append(("resources: cuobjdump -res-usage", f"{cr_t:.2f} s, {cr_m / 2**20:.0f} MiB", ""))
    rows.append(("resources: fatbinkit ls --resources", f"{r_t:.2f} s, {r_m / 2**20:.0f} MiB",
                 f"{versus('fatbinkit', r_t, cr_t)}, 1/{cr_m / r_m:.0f} of the memory"))

    cdir, odir = tmp / "cuobjdump", tmp / "ours"
    cdir.mkdir()
    e1 = child([cuobjdump, "-xelf", "all", str(lib)], cwd=cdir)
    e2 = child([cuobjdump, "-xptx", "all", str(lib)], cwd=cdir)
    ours_x = child([py, "-m", "fatbinkit", "extract", str(lib), "-o", str(odir)])
    n_files = len(list(odir.iterdir()))
    size = sum(p.stat().st_size for p in odir.iterdir())
    c_xt, c_xm = e1[0] + e2[0], max(e1[1], e2[1])
    rows.append((f"extract all ({n_files} files, {size / 2**30:.2f} GiB): cuobjdump -xelf + -xptx",
                 f"{c_xt:.2f} s, {c_xm / 2**20:.0f} MiB", ""))
    rows.append(("extract all: fatbinkit extract", f"{ours_x[0]:.2f} s, "
                 f"{ours_x[1] / 2**20:.0f} MiB",
                 f"{versus('fatbinkit', ours_x[0], c_xt)}, 1/{c_xm / ours_x[1]:.0f} of the memory"))
    same = all((cdir / p.name).read_bytes() == p.read_bytes() for p in odir.iterdir())
    rows.append(("extract all: files identical to cuobjdump's", "yes" if same else "NO", ""))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--library", type=Path, help="library to list/extract (default cuBLASLt)")
    parser.add_argument("--old", action="store_true",
                        help="a CUDA 11 library beside cuobjdump 11.8, no build measurements")
    args = parser.parse_args()
    lib = args.library
    cuobjdump = str(find_tool("cuobjdump"))
    oracle = "the nvidia-cuda-cuobjdump wheel"
    if args.old:
        from inputs import member, tool
        from thirdparty import CUDA_TOOLKIT_118, CUFFT11

        lib = lib or member(CUFFT11)
        cuobjdump = str(tool(CUDA_TOOLKIT_118, "cuobjdump"))
        oracle = f"Debian's {CUDA_TOOLKIT_118.name} {CUDA_TOOLKIT_118.version} (11.8)"
    if lib is None:
        from inputs import member
        from thirdparty import CUBLASLT13

        lib = member(CUBLASLT13)
    with tempfile.TemporaryDirectory(prefix="fatbinkit-bench-") as t:
        tmp = Path(t)
        rows = [] if args.old else bench_build(tmp)
        rows += bench_library(lib, tmp, cuobjdump)
    head = [
        "# Fatbin benchmark",
        "",
        f"`python benchmarks/fatbin.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"library `{lib.name}` ({lib.stat().st_size / 2**20:.0f} MiB). Times are medians; memory "
        f"is the peak RSS of the child process (`ru_maxrss`). cuobjdump from {oracle}"
        + ("" if args.old else ", fatbinary/nvcc from " + str(find_tool("fatbinary").parent)
           + ", nvFatbin via cuda.bindings. Build times: median of 50 in-process / 5 process "
           "runs") + f"; listing: median of {LIST_RUNS} (cuobjdump: {CUOBJDUMP_RUNS}) runs, "
        f"resources: median of {CUOBJDUMP_RUNS} runs each, fatbinkit "
        "byte-compiled first (as pip installs it); extraction: one run each, warm page cache.",
        "",
    ]
    report(head, rows, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
