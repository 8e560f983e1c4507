"""Speed at the limit (issue 32), side by side in one run: fatbinkit against the tool a user would
otherwise run (cuobjdump), and this checkout against ``--baseline`` (a git worktree of the commit
before the work; default 79c2914), with ratios, and the profile of the per-function resource path
before and after. Each fatbinkit command runs with the cubin walk in C
(``fatbinkit/formats/_cubin.c``) and with the pure-Python reader alone
(``FATBINKIT_PURE_PYTHON=1``, what an install without a compiler reads with).

- **resources**: ``cuobjdump -res-usage`` against ``fatbinkit ls --resources`` (text and
  ``--json``) of libtorch_cuda.so (torch 2.14.1, 144,640 functions);
- **check**: ``fatbinkit check --arch sm_80 --arch sm_90 --arch sm_120`` of that library;
- **diff**: ``cuobjdump -res-usage`` of libtorch_cuda.so 2.13.0 and 2.14.1 and a text ``diff``
  of the two listings, against ``fatbinkit diff`` of the two libraries;
- **prune** and **recompress**: ``fatbinkit prune --for sm_90`` and ``fatbinkit recompress
  --codec zstd`` of cuBLASLt 13.1.1.3 and NCCL 2.28.9 (CUDA 13), their peak memory against the
  largest container (module) of each and against the goal, 1.2x that plus a constant: the same
  command's peak on a library with next to no device code (JAX's CUDA 12 plugin's _prng.so: 24
  KiB in one module), which takes the command's whole path (its imports, threads and zstd
  contexts) with almost no data;
- **floors**: the images ``check`` and ``diff`` read, inflated by ``zstandard`` alone on every
  core and nothing else (``benchmarks/floor.py``): what any reader of those images with the same
  library and cores needs at least, beside the command and its goal.

Inputs come through the package registry into the fixtures cache (``benchmarks/inputs.py``).
Each command runs in a new process under GNU time (Python start-up included): wall and CPU (user
+ system) seconds are medians of ``--runs``, memory the highest peak RSS of the process and the
workers it waited for; the page cache is warm (each input was read before). The commands of
one comparison (this checkout, its pure-Python reader, the baseline, cuobjdump, the floor) run in
rounds, one run of each per round, so that a machine whose speed drifts slows them alike (on this
2-core VM the same floor took 0.59-0.73 s within one hour). The profile is
cProfile's (Python calls slowed) of the resource path in one process (``FATBINKIT_JOBS=1``):
every cubin of libtorch_cuda.so inflated, parsed and rendered as ``ls --resources`` renders it.

Usage: python benchmarks/speed.py [--write docs/benchmarks-speed.md] [--baseline COMMIT]
       [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))  # this checkout's fatbinkit, as in the children

from floor import images_read  # noqa: E402  (benchmarks/floor.py)
from hidden import Figure, measure, together, worktree  # noqa: E402  (benchmarks/hidden.py)
from inputs import TORCH, TORCH_OLD, member, torch_cuda  # noqa: E402
from slim_floor import largest_frame  # noqa: E402  (benchmarks/slim_floor.py)
from thirdparty import CUBLASLT131, JAX_CUDA12_PRNG, NCCL13  # noqa: E402

from fatbinkit.parallel import default_jobs  # noqa: E402
from fatbinkit.toolchain import find_tool  # noqa: E402

RUNS = 3
BASELINE = "79c2914"  # main before issue 32
ARCHS = ("sm_80", "sm_90", "sm_120")
#: a library with next to no device code (24 KiB, one module): what prune and recompress take
#: whatever the input (the constant of their memory goal)
SMALL = JAX_CUDA12_PRNG
Row = tuple[str, str, str]
# A child that profiles the resource path of one library in one process and prints pstats' top
# functions by own time, with fatbinkit from the tree on its path (refused otherwise).
PROFILE = """
import cProfile, pstats, sys, fatbinkit
if not fatbinkit.__file__.startswith(sys.argv[2]):
    raise SystemExit(f"fatbinkit from {fatbinkit.__file__}, not {sys.argv[2]}")
from fatbinkit.cli import fatbin as cli
binary = fatbinkit.open(sys.argv[1])
items = [it for it in binary.select() if it.kind == "sass"]
render = lambda code: cli._render(False, False, None, code)
prof = cProfile.Profile()
prof.enable()
for it in items:
    render(it.code)
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(int(sys.argv[3]))
"""


def ratio(a: Figure, b: Figure) -> str:
    """``a`` against ``b``: how many times faster in wall time, and CPU and memory as
    fractions."""
    return (f"{b.wall / a.wall:.2f}x faster (wall), {a.cpu / b.cpu:.2f}x the CPU, "
            f"{a.rss / b.rss:.2f}x the memory")


def fk(*args: object) -> list[str]:
    return [sys.executable, "-m", "fatbinkit", *map(str, args)]


def sh(*argv: object, out: Path) -> list[str]:
    """A shell running ``argv`` with its output to ``out``."""
    return ["bash", "-c", f"{shlex.join(map(str, argv))} > {shlex.quote(str(out))}"]


def bench(cuobjdump: str, old: Path, baseline: str, runs: int, libs: dict[str, Path],
          tmp: Path) -> list[Row]:
    rows: list[Row] = []
    torch = libs[TORCH]
    out = tmp / "out"

    def both(label: str, argv: list[str], versus: list[str] | None = None,
             versus_label: str = "", floor: list[str] | None = None, note: str = "",
             ) -> tuple[Figure, Figure | None, Figure | None]:
        """``argv`` with this checkout (with the cubin walk in C, and with the pure-Python
        reader alone) and with the baseline, in rounds with the command it is measured against
        (``versus``: cuobjdump, its row first) and its floor; the rows of the four commands.
        Returns the figures of this checkout's command, of ``versus`` and of the floor."""
        commands: list[tuple[list[str], Path | None]] = [
            (sh(*argv, out=out), ROOT),
            (["env", "FATBINKIT_PURE_PYTHON=1", *sh(*argv, out=out)], ROOT),
            (sh(*argv, out=out), old)]
        if versus is not None:
            commands.append((versus, None))
        if floor is not None:
            commands.append((floor, None))
        now, pure, then, *more = together(commands, runs)
        them = more.pop(0) if versus is not None else None
        lowest = more.pop(0) if floor is not None else None
        if them is not None:
            rows.append((versus_label, str(them), f"in rounds with {label.split(': ', 1)[1]}"))
        rows.append((label, str(now), "; ".join(
            ([f"{ratio(now, them)} than cuobjdump"] if them else [])
            + ([note] if note else []))))
        rows.append((f"{label}, pure-Python reader (FATBINKIT_PURE_PYTHON=1)", str(pure),
                     "; ".join(([f"{ratio(pure, them)} than cuobjdump"] if them else [])
                               + [f"the C walk {ratio(now, pure)}"])))
        rows.append((f"{label} at {baseline}", str(then), "; ".join(
            ([f"{ratio(then, them)} than cuobjdump"] if them else [])
            + [f"now {ratio(now, then)}"])))
        return now, them, lowest

    # resources
    res = sh(cuobjdump, "-res-usage", torch, out=out)
    both("libtorch_cuda.so: fatbinkit ls --resources", fk("ls", "--resources", torch), res,
         "libtorch_cuda.so: cuobjdump -res-usage")
    both("libtorch_cuda.so: fatbinkit ls --resources --json",
         fk("ls", "--resources", "--json", torch), res, "libtorch_cuda.so: cuobjdump -res-usage")
    # check
    arch_args = [x for a in ARCHS for x in ("--arch", a)]
    payloads = images_read("check", [torch], ARCHS)
    checked, _, floor = both(f"libtorch_cuda.so: fatbinkit check {' '.join(arch_args)}",
                             fk("check", *arch_args, torch),
                             floor=floor_argv(payloads, tmp / "check.json"),
                             note="goal: under 1 s")
    assert floor is not None
    rows.append(floor_row(f"libtorch_cuda.so: the floor of check {' '.join(arch_args)}",
                          payloads, floor, checked, 1.0))
    # diff
    a, b = libs[TORCH_OLD], torch
    listed = [tmp / "old.txt", tmp / "new.txt"]
    listings = [sh(cuobjdump, "-res-usage", lib, out=to)[2]
                for lib, to in zip((a, b), listed, strict=True)]
    text_diff = shlex.join(["diff", *map(str, listed)])
    payloads = images_read("diff", [a, b])
    diffed, pipeline, floor = both(
        f"libtorch_cuda.so {TORCH_OLD} -> {TORCH}: fatbinkit diff", fk("diff", a, b),
        ["bash", "-c", f"{'; '.join(listings)}; {text_diff} > {shlex.quote(str(out))}; true"],
        f"libtorch_cuda.so {TORCH_OLD} -> {TORCH}: cuobjdump -res-usage x2 + diff",
        floor_argv(payloads, tmp / "diff.json"), "goal: 3x faster")
    assert pipeline is not None and floor is not None
    rows.append(floor_row(f"libtorch_cuda.so {TORCH_OLD} -> {TORCH}: the floor of diff",
                          payloads, floor, diffed, pipeline.wall / 3))
    # prune and recompress: peak memory against the largest container, and the constant of the
    # goal (1.2x the largest container plus a constant): the same command on a library with 24
    # KiB of device code in one module, which takes the command's whole path (its imports, its
    # threads, its zstd contexts) with next to no data (its recompression raises the driver
    # floor of its LZ4 images: allowed)
    commands = (["prune", "--for", "sm_90"], ["recompress", "--codec", "zstd"])
    constant: dict[str, Figure] = {}
    small = libs["small"]
    for what in commands:
        allow = ["--allow-newer-driver"] if what[0] == "recompress" else []
        constant[what[0]] = measure(fk(what[0], small, *what[1:], *allow, "-o",
                                       tmp / "slim.so"), runs, ROOT)
        rows.append((f"{SMALL.member.rsplit('/', 1)[-1]} {SMALL.package} {SMALL.version} (24 KiB "
                     f"of device code): fatbinkit {' '.join([*what, *allow])}",
                     str(constant[what[0]]), "the constant: the command's whole path, next to "
                     "no data"))
    # and against their floors (benchmarks/slim_floor.py): the library's largest zstd window
    # read alone (what any reader of that image holds), every image read once, one at a time
    floor_py = [sys.executable, str(ROOT / "benchmarks" / "slim_floor.py")]
    for key, name in (("cublaslt", "libcublasLt.so.13 13.1.1.3"), ("nccl", "libnccl.so.2 2.28.9")):
        lib = libs[key]
        largest = largest_container(lib)
        frame = largest_frame(str(lib))[1]
        window = measure([*floor_py, "frame", str(lib)], runs, ROOT)
        one_by_one = measure([*floor_py, "images", str(lib)], runs, ROOT)
        goal = 1.2 * largest + constant["prune"].rss
        gap = (window.rss - goal) / 2**20
        rows.append((f"{name}: the floor of its memory: its largest zstd frame ({frame}) "
                     "read in 1 MiB steps after the command's imports, nothing else",
                     str(window), f"the prune goal ({goal / 2**20:.0f} MiB) is "
                     f"{abs(gap):.0f} MiB {'under' if gap > 0 else 'above'} it"))
        rows.append((f"{name}: every image read once, one at a time, as prune reads it, "
                     "nothing kept", str(one_by_one), "the floor of prune's reading on one core"))
        for what in commands:
            argv = fk(what[0], lib, *what[1:], "-o", tmp / "slim.so")
            now = measure(argv, runs, ROOT)
            then = measure(argv, runs, old)
            goal = 1.2 * largest + constant[what[0]].rss
            label = f"{name}: fatbinkit {' '.join(what)}"
            rows.append((label, str(now), f"{now.rss / largest:.1f}x its largest container "
                         f"({largest / 2**20:.1f} MiB); {now.rss / goal:.2f}x the goal "
                         f"(1.2x it + the constant: {goal / 2**20:.0f} MiB); "
                         f"{now.rss / one_by_one.rss:.2f}x the images read one at a time"))
            rows.append((f"{label} at {baseline}", str(then), f"now {ratio(now, then)}"))
    return rows


def floor_argv(payloads: list[Any], listed: Path) -> list[str]:
    """The floor of a command that reads ``payloads`` (benchmarks/floor.py): the images
    inflated and nothing else, on as many processes as the command's own reading uses."""
    listed.write_text(json.dumps(payloads))
    return [sys.executable, str(ROOT / "benchmarks" / "floor.py"), str(listed),
            str(default_jobs())]


def floor_row(label: str, payloads: list[Any], floor: Figure, ours: Figure, goal: float) -> Row:
    """A row: the floor of a command (:func:`floor_argv`), beside the command (``ours``) and
    the goal (``goal`` seconds)."""
    return (f"{label}: {len(payloads):,} images inflated "
            f"({sum(p[4] for p in payloads) / 2**30:.2f} GiB), nothing else, on "
            f"{default_jobs()} processes", str(floor),
            f"the command takes {ours.wall - floor.wall:.2f} s more; the goal "
            f"({goal:.2f} s) leaves {goal - floor.wall:.2f} s for everything else")


def largest_container(lib: Path) -> int:
    """The stored bytes of ``lib``'s largest fatbin container (module)."""
    from collections import Counter

    import fatbinkit

    sizes: Counter[tuple[str, int]] = Counter()
    with fatbinkit.open(lib) as binary:
        for code in binary.codes:
            sizes[code.source, code.container] += code.stored
    return max(sizes.values())


def profile(lib: Path, tree: Path, top: int = 14, pure: bool = False) -> list[str]:
    """pstats' top ``top`` functions by own time of the resource path in ``tree``'s
    fatbinkit (``pure``: with the pure-Python cubin reader alone)."""
    out = subprocess.run(
        [sys.executable, "-c", PROFILE, str(lib), str(tree / "fatbinkit"), str(top)],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree), "FATBINKIT_JOBS": "1",
                       "FATBINKIT_PURE_PYTHON": "1" if pure else ""},
        capture_output=True, text=True, check=True).stdout
    out = re.sub(re.escape(str(tree) + os.sep), "", out)
    out = re.sub(r"\S*/lib/python3\.\d+/", "", out)
    lines = out.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if "function calls" in line)
    return ["```", *(line.rstrip() for line in lines[start:]), "```"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the tables (markdown) here")
    parser.add_argument("--baseline", default=BASELINE,
                        help=f"the commit compared with (default {BASELINE})")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs each (default {RUNS})")
    args = parser.parse_args()
    libs = {TORCH: torch_cuda(TORCH), TORCH_OLD: torch_cuda(TORCH_OLD),
            "cublaslt": member(CUBLASLT131), "nccl": member(NCCL13), "small": member(SMALL)}
    cuobjdump = str(find_tool("cuobjdump"))
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-2]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "fatbinkit")],
                   check=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", "--",
                             "fatbinkit"], capture_output=True, text=True, check=True).stdout
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds: the worktree goes
    with tempfile.TemporaryDirectory(prefix="fatbinkit-speed-") as t:
        old = worktree(args.baseline, Path(t) / "tree")
        try:
            for lib in libs.values():  # a warm page cache for every command
                subprocess.run(["cat", str(lib)], stdout=subprocess.DEVNULL, check=True)
            rows = bench(cuobjdump, old, args.baseline, args.runs, libs, Path(t))
            before = profile(libs[TORCH], old)
            after = profile(libs[TORCH], ROOT)
            after_pure = profile(libs[TORCH], ROOT, pure=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False)
    load = os.getloadavg()
    lines = [
        "# Speed benchmark (issue 32)",
        "",
        f"`python benchmarks/speed.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores (load average at the end "
        f"{load[0]:.1f}), Python {platform.python_version()}, fatbinkit at {commit.strip()} "
        f"against {args.baseline}; cuobjdump {version}. Each figure: median wall and CPU "
        f"(user + system) seconds of {args.runs} runs in a new process (Python start-up "
        "included), highest peak RSS (GNU time), warm page cache; every command writes its "
        "output to a file; the commands of one comparison run in rounds, one run of each per "
        "round. Ratios: how many times faster in wall time, then CPU time and memory as "
        "fractions of the other's.",
        "",
        "| measurement | result | ratio |",
        "|---|---|---|",
        *(f"| {a} | {b} | {c} |" for a, b, c in rows),
        "",
        f"## The resource path's profile at {args.baseline} (before)",
        "",
        "Every SASS image of libtorch_cuda.so inflated, parsed and rendered as `ls --resources` "
        "does, in one process under cProfile; top functions by own time:",
        "",
        *before,
        "",
        f"## The same at {commit.strip()} (after), with the cubin walk in C",
        "",
        *after,
        "",
        f"## The same at {commit.strip()}, with the pure-Python reader alone",
        "",
        *after_pure,
        "",
    ]
    print("\n".join(lines))
    if args.write:
        args.write.write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
