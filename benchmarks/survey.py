"""Survey benchmark (issue 34), side by side in one run on real CUDA wheels: ``fatbinkit.survey``
with the ``local`` engine (a process pool, ``jobs=2``) and with ``dask://`` on a 2-worker
``distributed.LocalCluster`` (processes, one thread each), next to the shell loop a user without
fatbinkit writes for the same wheels (unzip, then ``cuobjdump --list-elf --list-ptx`` on every
shared library); and, from the rates measured, an estimate of what surveying every CUDA wheel of
PyPI takes on N workers (``ESTIMATE``; its sources are in the document).

- **The wheels** (:data:`WHEELS`): the suite's cached wheels with CUDA device code, pinned by
  package and version, each from the package registry into the fixtures cache
  (``benchmarks/inputs.py``: ``pip download`` of cp311 manylinux x86_64 on first use), so another
  machine reads the same files. Their SHA-256 are checked against the ones recorded here.
- **local**: a child process runs ``plan(WHEELS)`` then ``survey(wheels, OUT, engine="local",
  jobs=2)``; under GNU time (wall, CPU of the process and of the pool's processes it waited for,
  peak RSS); the child also says the plan's and the survey's wall, and its own and its workers'
  peak RSS apart (``getrusage``).
- **dask**: a ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)`` started anew
  for each run in a process of its own (its start time measured there, and reported apart), then
  a child running ``plan`` and ``survey(wheels, OUT, engine="dask://ADDRESS")`` under GNU time.
  CPU: the child's (GNU time) plus the cluster's processes' (scheduler and nannies, and each
  worker: ``utime + stime`` of ``/proc/PID/stat``, before and after); workers' peak RSS:
  ``VmHWM`` of ``/proc/PID/status``, reset before each run (``clear_refs``).
- A wheel whose survey is an ``input`` error row (fatbinkit could not read it) is counted and
  named in the document; an ``engine`` error, or a wheel without its row, fails the benchmark.
- **the shell loop** (one core): for each wheel, ``unzip -q`` into a new temporary folder,
  ``cuobjdump --list-elf --list-ptx`` on each ``*.so*`` file (it fails on those without device
  code, and on old archs that it no longer reads; the loop goes on, as a user's ``|| true``
  does; its messages are kept), the folder removed. It gives each
  library's list of ELF (SASS) and PTX images, hence the archs; not the minimum driver per GPU,
  the verdicts, the what-if of pruning, sizes per arch, or a table. Its archs are compared with
  the survey's ``wheels`` table.

The three are interleaved run after run (``--runs``, default 3): wall and CPU are medians, memory
the highest peak; the page cache is warm (each wheel read before); the 1-minute load average is
recorded before each measurement (other jobs on the machine show there). Rates: wheels per
minute, and wheel bytes per second per core, of the wall (2 cores for local and dask, 1 for the
loop) and of the CPU.

Usage: python benchmarks/survey.py [--write docs/benchmarks-survey.md] [--runs N] [--wheels N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))  # this checkout's fatbinkit, as in the children

from hidden import child  # noqa: E402  (benchmarks/hidden.py: GNU time of a child)
from inputs import wheel  # noqa: E402  (benchmarks/inputs.py: registry -> fixtures cache)
from revision import prepared  # noqa: E402

from fatbinkit.toolchain import find_tool  # noqa: E402

RUNS = 3
JOBS = 2  # local's processes, dask's workers: the cores used
MB = 10**6
#: (package, version, SHA-256 of the cp311 manylinux x86_64 wheel), smallest first
WHEELS: tuple[tuple[str, str, str], ...] = (
    ("jax-cuda12-plugin", "0.10.2",
     "76bbfece2f6effb4e8908eb8a5fbf1abbc1125de667683ec2ffba51c63dc57af"),
    ("bitsandbytes", "0.50.2",
     "55348a9a4a21bfd99cf8c7b32fe67b4030ae5c2a05738e03c1747f65fa6ec283"),
    ("nvidia-curand-cu11", "10.3.0.86",
     "cd4cffbf78bb06580206b4814d5dc696d1161c902aae37b2bba00056832379e6"),
    ("nvidia-curand", "10.4.0.35",
     "1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc"),
    ("cupy-cuda102", "12.3.0",
     "98a620184c03837e6b50a523c9c80899696c447cd11c82d8cd13763c56ba97a3"),
    ("cupy-cuda13x", "14.2.0",
     "f94843e54500a9c8c169135f79572bfaba946efe4f7178e834c227280c1b0c12"),
    ("nvidia-curand", "10.4.5.25",
     "22bb226a857e5888fe6b54ae465fc4371296bcff13a35f79e19691bcf454f529"),
    ("cupy-cuda11x", "13.6.0",
     "6fbbc042580d3c6170a449a2643235bef16e74cc997a143767c47d4d6ce95ed2"),
    ("cupy-cuda12x", "14.2.0",
     "5fe2366cc5c61a7ee4a527ce1e8951cb89092d0fb0b5830623cf114d1942c585"),
    ("nvidia-cufft-cu11", "10.9.0.58",
     "e21037259995243cc370dd63c430d77ae9280bedb68d5b5a18226bfc92e5d748"),
    ("nvidia-cufft", "12.0.0.61",
     "6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3"),
)

# The child of the local and dask runs: plan, then survey; its figures as JSON into argv[1].
SURVEY_CHILD = r"""
import json, resource, sys, time
from fatbinkit.survey import plan, survey
a = json.loads(sys.argv[2])
t0 = time.perf_counter()
wheels = plan(a["sources"])
t1 = time.perf_counter()
r = survey(wheels, a["out"], engine=a["engine"], jobs=a["jobs"])
t2 = time.perf_counter()
s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as f:
    json.dump({"plan": t1 - t0, "survey": t2 - t1, "wheels": len(wheels),
               "outcomes": len(r.outcomes), "errors": r.errors, "bytes": r.bytes_read,
               "self_cpu": s.ru_utime + s.ru_stime, "children_cpu": c.ru_utime + c.ru_stime,
               "self_rss": s.ru_maxrss * 1024, "children_rss": c.ru_maxrss * 1024,
               "failed": [[o.wheel.filename, o.kind, o.error] for o in r.outcomes
                          if o.error]}, f)
"""
# The cluster's process: a LocalCluster, its address and workers' PIDs as JSON into argv[2],
# alive until its stdin closes (its stdout and stderr go nowhere: a pipe nobody reads would
# stall it once full).
CLUSTER = r"""
import json, os, sys, time
t0 = time.perf_counter()
from distributed import Client, LocalCluster
t1 = time.perf_counter()
cluster = LocalCluster(n_workers=int(sys.argv[1]), threads_per_worker=1, processes=True,
                       dashboard_address=None)
t2 = time.perf_counter()
with Client(cluster) as client:
    pids = client.run(os.getpid)
with open(sys.argv[2] + ".tmp", "w") as f:
    json.dump({"address": cluster.scheduler_address, "import": t1 - t0, "start": t2 - t1,
               "workers": sorted(pids.values()), "pid": os.getpid()}, f)
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
sys.stdin.read()
cluster.close()
"""
LOOP = r"""
for w in "$@"; do
  d=$(mktemp -d)
  unzip -q "$w" -d "$d"
  echo "== $(basename "$w") =="
  find "$d" -name '*.so*' -type f | sort | while read -r f; do
    echo "-- ${f#"$d"/}"
    "$CUOBJDUMP" --list-elf --list-ptx "$f" 2>&1 || true
  done
  rm -rf "$d"
done > "$LIST"
"""
IMAGE = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[a-z]?|compute_\d+[a-z]?)\.(?:cubin|ptx)$",
                   re.M)


@dataclass
class Run:
    """One measurement: wall, CPU, peak RSS (the largest of its processes), the load before it,
    and what else the method said."""

    wall: float
    cpu: float
    rss: int
    load: float
    extra: dict[str, Any] = field(default_factory=dict)


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def ticks(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hwm(pid: int) -> int:
    """Peak RSS (``VmHWM``) of ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise SystemExit(f"no VmHWM for process {pid}")


def python_child(args: dict[str, Any], tmp: Path
                 ) -> tuple[tuple[float, float, int], dict[str, Any]]:
    """:data:`SURVEY_CHILD` under GNU time; (wall, CPU, peak RSS) and the child's own JSON."""
    report = tmp / "child.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    timed = child([sys.executable, "-c", SURVEY_CHILD, str(report), json.dumps(args)], ROOT, env)
    found: dict[str, Any] = json.loads(report.read_text())
    report.unlink()
    engine = [f for f in found["failed"] if f[1] != "input"]
    if engine or found["outcomes"] != len(args["sources"]):
        raise SystemExit(f"{args['engine']}: {found['outcomes']} wheels surveyed of "
                         f"{len(args['sources'])}, errors: {found['failed']}")
    return timed, found


def run_local(paths: list[Path], tmp: Path) -> Run:
    out = tmp / "local-out"
    load = os.getloadavg()[0]
    (wall, cpu, rss), found = python_child(
        {"sources": [str(p) for p in paths], "out": str(out), "engine": "local", "jobs": JOBS},
        tmp)
    keep(out, tmp)
    return Run(wall, cpu, rss, load, {**found, "workers_rss": found["children_rss"]})


def keep(out: Path, tmp: Path) -> None:
    """The last run's output kept as ``tmp/last-out`` (the archs are compared with it)."""
    last = tmp / "last-out"
    shutil.rmtree(last, ignore_errors=True)
    out.rename(last)


def start_cluster(tmp: Path) -> tuple[subprocess.Popen[str], dict[str, Any], float]:
    """A LocalCluster in a process of its own: the process, what it said, the wall seconds from
    the process's start to its address written (Python and distributed imported)."""
    said = tmp / "cluster.json"
    said.unlink(missing_ok=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CLUSTER, str(JOBS), str(said)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    end = time.monotonic() + 120
    while not said.exists():
        if proc.poll() is not None or time.monotonic() > end:
            proc.kill()
            raise SystemExit(f"the LocalCluster did not start (exit {proc.wait()})")
        time.sleep(0.01)
    started = time.perf_counter() - start
    return proc, json.loads(said.read_text()), started


def run_dask(paths: list[Path], tmp: Path) -> Run:
    proc, info, started = start_cluster(tmp)
    try:
        pids = [info["pid"], *info["workers"]]
        for pid in info["workers"]:
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak RSS counts from now
        before = {pid: ticks(pid) for pid in pids}
        out = tmp / "dask-out"
        load = os.getloadavg()[0]
        (wall, cpu, rss), found = python_child(
            {"sources": [str(p) for p in paths], "out": str(out),
             "engine": f"dask://{info['address'].removeprefix('tcp://')}", "jobs": None}, tmp)
        after = {pid: ticks(pid) for pid in pids}
        workers_rss = max(hwm(pid) for pid in info["workers"])
        scheduler = after[info["pid"]] - before[info["pid"]]
        workers = sum(after[p] - before[p] for p in info["workers"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    keep(out, tmp)
    return Run(wall, cpu + scheduler + workers, max(rss, workers_rss), load,
               {**found, "client_cpu": cpu, "scheduler_cpu": scheduler, "workers_cpu": workers,
                "workers_rss": workers_rss, "cluster_start": info["start"],
                "cluster_import": info["import"], "cluster_process": started})


def run_loop(paths: list[Path], tmp: Path, cuobjdump: str) -> Run:
    listing = tmp / "loop.txt"
    env = {**os.environ, "CUOBJDUMP": cuobjdump, "LIST": str(listing), "TMPDIR": str(tmp)}
    load = os.getloadavg()[0]
    wall, cpu, rss = child(["bash", "-c", LOOP, "loop", *map(str, paths)], tmp, env)
    return Run(wall, cpu, rss, load, {"listing": listing.read_text()})


Listed = tuple[set[str], set[str], int, list[str]]


def loop_archs(text: str) -> dict[str, Listed]:
    """Per wheel of the loop's listing: the archs of its ELF images, of its PTX images, the
    count of libraries cuobjdump listed an image of, and its fatal messages (once each)."""
    found: dict[str, Listed] = {}
    for block in re.split(r"^== ", text, flags=re.M)[1:]:
        name, _, body = block.partition(" ==\n")
        elf: set[str] = set()
        ptx: set[str] = set()
        libs = 0
        fatal = list(dict.fromkeys(re.findall(r"^cuobjdump fatal\s*: (.*)$", body, re.M)))
        for lib in re.split(r"^-- ", body, flags=re.M)[1:]:
            images = IMAGE.findall(lib)
            libs += bool(images)
            for kind, arch in images:
                (elf if kind == "ELF" else ptx).add(arch.replace("compute_", "sm_"))
        found[name] = elf, ptx, libs, fatal
    return found


def survey_archs(out: Path) -> dict[str, tuple[set[str], set[str], int]]:
    """Per wheel of the survey's ``wheels`` table: its native archs, its PTX archs, its files."""
    import pyarrow.parquet as pq

    table = pq.read_table(out / "wheels", columns=["filename", "native", "jit", "files"])
    return {r["filename"]: ({a for a in r["native"] if a.startswith("sm_")},
                            {a.replace("compute_", "sm_") for a in r["jit"]}, r["files"])
            for r in table.to_pylist()}


def checked(paths: list[Path]) -> list[Path]:
    """The wheels, their SHA-256 compared with :data:`WHEELS` where one is recorded."""
    for path, (package, version, digest) in zip(paths, WHEELS, strict=False):
        if digest:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 24):
                    h.update(chunk)
            if h.hexdigest() != digest:
                raise SystemExit(f"{path}: SHA-256 {h.hexdigest()}, not the {digest} recorded "
                                 f"for {package} {version}")
    return paths


# -- the estimate --------------------------------------------------------------------------------

#: Assumptions of the estimate (see the document's section for the sources): PyPI's CUDA wheels,
#: (low, high) each.
CUDA_BYTES = (2e12, 6e12)
CUDA_WHEELS = (10_000, 40_000)
WORKERS = (10, 100, 1000)
#: a worker's download from files.pythonhosted.org, bytes/s (low, high)
DOWNLOAD = (50 * MB, 200 * MB)


def hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def estimate(cpu_rate: float, wheel_seconds: float) -> list[str]:
    """The estimate's table from the measured CPU rate (bytes per CPU second) of the survey."""
    rows = ["| workers | CPU only, low (2 TB) | CPU only, high (6 TB) | with the download, low | "
            "with the download, high |", "|---|---|---|---|---|"]
    for n in WORKERS:
        cells = []
        for b in CUDA_BYTES:
            cells.append(hours(b / (cpu_rate * n)))
        # each worker downloads then reads; the two add up per wheel (no overlap assumed)
        low = CUDA_BYTES[0] / n * (1 / cpu_rate + 1 / DOWNLOAD[1])
        high = CUDA_BYTES[1] / n * (1 / cpu_rate + 1 / DOWNLOAD[0])
        cells += [hours(low), hours(high)]
        rows.append(f"| {n:,} | " + " | ".join(cells) + " |")
    del wheel_seconds
    return rows


# -- the document --------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", type=Path, help="also write the document (markdown) here")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs each (default {RUNS})")
    parser.add_argument("--wheels", type=int, default=len(WHEELS),
                        help=f"the first N wheels of the list only (default all {len(WHEELS)})")
    args = parser.parse_args()
    paths = checked([wheel(p, v) for p, v, _ in WHEELS[: args.wheels]])
    cuobjdump = str(find_tool("cuobjdump"))
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-2]
    measured = prepared()
    started = time.gmtime()
    runs: dict[str, list[Run]] = {"loop": [], "local": [], "dask": []}
    with tempfile.TemporaryDirectory(prefix="fatbinkit-survey-bench-") as t:
        tmp = Path(t)
        for p in paths:  # a warm page cache for every method
            subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)
        for i in range(args.runs):
            for key in runs:
                if key == "loop":
                    r = run_loop(paths, tmp, cuobjdump)
                elif key == "local":
                    r = run_local(paths, tmp)
                else:
                    r = run_dask(paths, tmp)
                runs[key].append(r)
                print(f"run {i + 1}/{args.runs} {key}: {r.wall:.2f} s wall, {r.cpu:.2f} s CPU, "
                      f"{r.rss / 2**20:.0f} MiB (load {r.load:.2f})", file=sys.stderr)
        compared = compare(loop_archs(runs["loop"][-1].extra["listing"]),
                           survey_archs(tmp / "last-out"))
    load = os.getloadavg()
    lines = document(args, paths, runs, compared, started,
                     measured, load, version)
    print("\n".join(lines))
    if args.write:
        args.write.write_text("\n".join(lines) + "\n")
    return 0


def compare(loop: dict[str, Listed], table: dict[str, tuple[set[str], set[str], int]]
            ) -> list[str]:
    """A row per wheel: the loop's archs against the survey's, and cuobjdump's fatal messages
    where they differ."""
    rows = []
    for name in sorted(loop):
        elf, ptx, libs, fatal = loop[name]
        if name not in table:
            rows.append(f"| {name} | - / {libs} | no `wheels` row: an `errors` row | | "
                        f"SASS {' '.join(sorted_archs(elf)) or '-'}; PTX "
                        f"{' '.join(sorted_archs(ptx)) or '-'} |")
            continue
        native, jit, files = table[name]
        same = elf == native and ptx == jit
        said = f" (cuobjdump: \"{'; '.join(fatal)}\")" if fatal and not same else ""
        rows.append(f"| {name} | {files} / {libs} | {' '.join(sorted_archs(native))} | "
                    f"{' '.join(sorted_archs(jit)) or '-'} | "
                    f"{'same' if same else diff_archs(elf, native, ptx, jit) + said} |")
    return rows


def sorted_archs(archs: set[str]) -> list[str]:
    return sorted(archs, key=lambda a: (int(re.sub(r"\D", "", a) or 0), a))


def diff_archs(elf: set[str], native: set[str], ptx: set[str], jit: set[str]) -> str:
    parts = []
    for label, a, b in (("SASS", elf, native), ("PTX", ptx, jit)):
        if a != b:
            only_loop, only_survey = sorted_archs(a - b), sorted_archs(b - a)
            parts.append(f"{label}: cuobjdump only {' '.join(only_loop) or '-'}, survey only "
                         f"{' '.join(only_survey) or '-'}")
    return "; ".join(parts)


def document(args: argparse.Namespace, paths: list[Path], runs: dict[str, list[Run]],
             compared: list[str], started: time.struct_time, commit: str,
             load: tuple[float, float, float], version: str) -> list[str]:
    n = len(paths)
    total = sum(p.stat().st_size for p in paths)
    cores = {"loop": 1, "local": JOBS, "dask": JOBS}
    labels = {
        "loop": "shell loop: unzip + `cuobjdump --list-elf --list-ptx` on each `*.so*` (1 core)",
        "local": f"`survey(..., engine=\"local\", jobs={JOBS})` (plan included)",
        "dask": f"`survey(..., engine=\"dask://...\")`, LocalCluster of {JOBS} workers x 1 "
                "thread (plan included, cluster start not)"}

    def fig(key: str) -> tuple[float, float, int]:
        rs = runs[key]
        return med([r.wall for r in rs]), med([r.cpu for r in rs]), max(r.rss for r in rs)

    rows = []
    for key in ("local", "dask", "loop"):
        wall, cpu, rss = fig(key)
        rs = runs[key]
        workers = (f"{max(r.extra['workers_rss'] for r in rs) / 2**20:.0f} MiB"
                   if key != "loop" else "-")
        rows.append(
            f"| {labels[key]} | {wall:.1f} s | {cpu:.1f} s | {n / wall * 60:.1f} | "
            f"{total / wall / cores[key] / MB:.1f} MB/s | {total / cpu / MB:.1f} MB/s | "
            f"{rss / 2**20:.0f} MiB | {workers} | "
            f"{', '.join(f'{r.wall:.1f} s ({r.load:.2f})' for r in rs)} |")
    local, dask = runs["local"], runs["dask"]
    busy = [r.load for rs in runs.values() for r in rs if r.load > 1.5]
    lw, lc, _ = fig("local")
    dw, dc, _ = fig("dask")
    pw, pc, _ = fig("loop")
    plan_s = med([r.extra["plan"] for r in local + dask])
    cpu_rate = total / lc
    out = [
        "# Survey benchmark (issue 34)",
        "",
        f"`python benchmarks/survey.py --runs {args.runs}"
        + (f" --wheels {args.wheels}`" if args.wheels < len(WHEELS) else "`") + ", "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', started)}, {platform.machine()} "
        f"({cpu_model()}), {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"fatbinkit at {commit}, {version_of('distributed')} "
        f"distributed, {version}. Load average (1, 5, 15 min) at the end: "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}; before each measurement in the table "
        "(in brackets). "
        + (f"**{len(busy)} of {sum(len(v) for v in runs.values())} measurements began with a "
           "load above 1.5** (other jobs shared the 2 cores; their figures are slower than an "
           "idle machine's, and a method that runs 2 processes then gets less than 2 cores: "
           "its wall time suffers more than the 1-process loop's, so compare CPU seconds, "
           "wheel bytes / CPU s, which other jobs disturb less)." if busy
           else "No measurement began with a load above 1.5."),
        "",
        f"The input: {n} wheels with CUDA device code, {total / MB:,.0f} MB "
        f"({total:,} bytes), from the fixtures cache (`benchmarks/inputs.py`, pinned in "
        "`benchmarks/survey.py`'s `WHEELS`). Medians of "
        f"{args.runs} runs, the three methods interleaved run after run; warm page cache; each "
        "run's output in a new folder (no resume). Peak RSS: the highest of the run's processes "
        "(GNU time; for dask the workers' `VmHWM`).",
        "",
        "| method | wall | CPU | wheels / min | wheel bytes / s / core (wall) | wheel bytes / "
        "CPU s | peak RSS | workers' peak RSS | wall of each run (load before it) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"- **local against the loop**: {pw / lw:.2f}x the loop's speed in wall time on 2 cores "
        f"against its 1, {pc / lc:.2f}x in CPU (the loop's CPU over the survey's); per core, "
        f"{(total / lw / JOBS) / (total / pw):.2f}x.",
        f"- **dask against local**: {dw / lw:.2f}x local's wall, {dc / lc:.2f}x its CPU. Of "
        f"dask's CPU (median run): client {med([r.extra['client_cpu'] for r in dask]):.1f} s "
        f"(the plan's hashing is there), scheduler and nannies "
        f"{med([r.extra['scheduler_cpu'] for r in dask]):.1f} s, workers "
        f"{med([r.extra['workers_cpu'] for r in dask]):.1f} s.",
        f"- **cluster start** (not in dask's figures): `LocalCluster(n_workers={JOBS}, "
        f"threads_per_worker=1, processes=True)` "
        f"{med([r.extra['cluster_start'] for r in dask]):.2f} s (runs: "
        f"{', '.join(f'{x:.2f}' for x in (r.extra['cluster_start'] for r in dask))}); with Python "
        f"and "
        f"distributed's import, from the process's start to the address written, "
        f"{med([r.extra['cluster_process'] for r in dask]):.2f} s.",
        f"- **the plan** (each wheel's SHA-256, hashed from the file: a local folder has no "
        f"index to say it) took {plan_s:.2f} s of the survey's wall (median of local's and "
        f"dask's runs); the survey itself {med([r.extra['survey'] for r in local]):.1f} s "
        f"(local) and {med([r.extra['survey'] for r in dask]):.1f} s (dask).",
        "",
        "## What each method computes",
        "",
        "- **The survey** writes four Parquet tables (`wheels`, `files`, `kernels` left empty "
        "here, `errors`): per wheel and per library, the archs with their sizes (stored and "
        "uncompressed) and entries, the PTX versions, per GPU the verdict and the minimum "
        "driver (`check --min-driver`), and the what-if of pruning (what `prune` would keep "
        "for the default GPU sets). A wheel it cannot read is an `errors` row (`input`); "
        "an `engine` error or a missing wheel fails the benchmark.",
        *failed_text(local + dask),
        "- **The shell loop** computes, per library, the names of its ELF (SASS) and PTX images "
        "(`cuobjdump --list-elf --list-ptx`), i.e. the arch list, and nothing else: no sizes "
        "per arch, no minimum driver, no verdict per GPU, no what-if, no table (its output is "
        "text, to be parsed). It runs on one core; `xargs -P` would spread it, with the same "
        "CPU.",
        "",
        "The loop's archs against the survey's `wheels` table (the last run of each): "
        "`files / libraries` is the survey's count of libraries with device code against the "
        "loop's count of libraries cuobjdump listed an image of; PTX archs are written as the "
        "`sm_` of their `compute_` target.",
        "",
        "| wheel | files / libraries | SASS archs (survey) | PTX archs (survey) | the loop's |",
        "|---|---|---|---|---|",
        *compared,
        "",
        "Where they differ: cuobjdump (of CUDA 13) stops on a library that holds an image for "
        "an arch CUDA 13 dropped (sm_30, sm_35: \"Support for ... has been removed\") and lists "
        "nothing of it, so the loop needs an older cuobjdump for older wheels; the file names "
        "of `--list-elf` drop the `f` of CUDA 12.9's family-specific SASS (`sm_100f` is listed "
        "as `...sm_100.cubin`, while `cuobjdump -elf` says `arch = sm_100f`), so the loop "
        "cannot tell an sm_100f image (any sm_10x GPU) from an sm_100 one.",
        "",
        "## Estimate: every CUDA wheel of PyPI",
        "",
        *estimate_text(cpu_rate, lc, lw, n, total),
    ]
    return out


def failed_text(runs: list[Run]) -> list[str]:
    """A bullet naming the wheels whose survey was an ``input`` error row (in any run)."""
    found: dict[str, str] = {}
    for r in runs:
        for filename, _, error in r.extra["failed"]:
            found[filename] = error
    if not found:
        return []
    return [f"- **{len(found)} of the wheels gave an `errors` row (`input`) instead of their "
            "rows**, in every run: " + "; ".join(f"{n}: \"{e}\"" for n, e in sorted(
                found.items())) + ". fatbinkit read their libraries (the error comes from the "
            "totals made after the reading), so their time is in the figures, but their "
            "`wheels` and `files` rows are missing: a bug of `fatbinkit report`'s totals on "
            "wheels whose libraries are checked for different GPU lists (a library with "
            "sm_35 code, libraries of several vendors), reported to the lead."]


def estimate_text(cpu_rate: float, lc: float, lw: float, n: int, total: int) -> list[str]:
    per_wheel = lc / n
    return [
        "**The rate.** The survey read these wheels at "
        f"{cpu_rate / MB:.1f} MB of wheel per CPU second (local, median: {total / MB:,.0f} MB "
        f"in {lc:.1f} s of CPU, {per_wheel:.2f} s of CPU per wheel, {total / lw / JOBS / MB:.1f} "
        "MB/s per core of wall; wheels that ended in an `errors` row are in it, their reading "
        "done). The CPU rate is the one that scales: a worker with one "
        "thread uses one core, and the tasks share nothing but the output folder. It is "
        "measured on a warm page cache: a survey of PyPI must also download each wheel.",
        "",
        "**The input (assumptions).** PyPI does not publish a count of wheels that hold CUDA "
        "device code; what is published is the size of the whole index and of its largest "
        "projects:",
        "",
        "- PyPI as a whole: about 7 TB in February 2021 "
        "(https://discuss.python.org/t/what-to-do-about-gpus-and-the-built-distributions-that-"
        "support-them/7125), 14 TB of releases in March 2023 "
        "(https://discuss.python.org/t/enabling-large-scale-exploration-of-published-pypi-code/"
        "24566), \"effectively doubled to ~24TB\" in about two years by late 2024 "
        "(https://discuss.python.org/t/removing-quota-limits-on-pypi/69713/5).",
        "- The largest CUDA projects, from their limit requests on pypi/support: torch at "
        "139.7 GiB in April 2024, asking for 300-500 GB at ~6 GB a release "
        "(https://github.com/pypi/support/issues/3836; 100 GB in January 2023: "
        "https://github.com/pytorch/pytorch/issues/92089); nvidia-cudnn-cu12 granted 100 GiB "
        "in July 2025 and asking for 150 GB in August 2026 at ~2.5 GB a month "
        "(https://github.com/pypi/support/issues/7035, "
        "https://github.com/pypi/support/issues/11815); nvidia-cudnn-cu11 50 GB "
        "(https://github.com/pypi/support/issues/3402), nvidia-cudnn-cu13 50 GiB "
        "(https://github.com/pypi/support/issues/6116); nvidia-cublas-cu12 30 GiB, 400-450 MB "
        "a wheel (https://github.com/pypi/support/issues/3420); CuPy's organisation 30 GiB, "
        "15 wheels of ~100 MiB a release (https://github.com/pypi/support/issues/7216); "
        "paddlepaddle-gpu \"the 9th largest project on PyPI\", near a 180 GB limit in 2020 "
        "(https://github.com/pypi/support/issues/663); TensorFlow ~8 GB a release with its "
        "release candidates (https://github.com/pypi/support/issues/1870).",
        "- torch's CUDA builds other than the default one (cu118, cu126, cu128...) and their "
        "CUDA-bundling (\"hermetic\") wheels are on download.pytorch.org, not on PyPI "
        "(https://github.com/pytorch/pytorch/issues/113972): they are not in this count; a "
        "survey of that index is another source of the same kind (`--package torch` on its "
        "simple index, if it answers PEP 691's JSON).",
        "",
        "Summing the projects above gives about 1 TB (torch ~0.3-0.5, the cuDNN projects "
        "~0.25, paddlepaddle-gpu ~0.2, TensorFlow ~0.1-0.3, cuBLAS, CuPy; a limit is a "
        "ceiling, a project's use is at or below it); the other nvidia-* "
        "projects (cuFFT, cuSPARSE, cuSOLVER, NCCL, cuRAND... for cu11, cu12 and cu13), "
        "jaxlib's CUDA plugins, vLLM, xformers, bitsandbytes, onnxruntime-gpu, TensorRT, "
        "RAPIDS and the long tail of projects with a few CUDA kernels are not in it. This "
        "estimate assumes **2 to 6 TB of CUDA wheels (8 to 25% of ~24 TB)** and, at a mean "
        "wheel of 150-200 MB (a torch or cuDNN wheel is 600-900 MB, a CuPy or cuRAND wheel "
        "60-140 MB, as measured here, a plugin 8 MB), **10,000 to 40,000 wheels**. Both are "
        "assumptions, not counts: a survey's plan step (`plan()` of each project's PEP 691 page) "
        "is what gives the count and the bytes, before anything is read.",
        "",
        "**The arithmetic.** CPU time = bytes / rate: "
        f"2 TB / {cpu_rate / MB:.1f} MB/s = {2e12 / cpu_rate / 3600:,.0f} CPU hours; 6 TB: "
        f"{6e12 / cpu_rate / 3600:,.0f} CPU hours. On N workers of one core each, wall = CPU "
        "time / N (the tasks are independent; the largest wheel, ~1 GB, bounds the tail to "
        f"about {hours(1e9 / cpu_rate)}). With the download: each worker fetches its "
        "wheel before reading it, at 50-200 MB/s (an assumption: a cloud VM's download from "
        "files.pythonhosted.org's CDN; not measured here), without overlap, so a wheel costs "
        "size x (1 / rate + 1 / bandwidth). At 1000 workers the index's CDN would serve 50-200 "
        "GB/s: a polite survey at that scale reads a mirror (an object store: `s3://...`) "
        "rather than PyPI.",
        "",
        *estimate(cpu_rate, per_wheel),
        "",
        "What the table leaves out: the scheduler's overhead per task (well under a second "
        "against seconds to minutes per wheel here), the output (a few kB of Parquet per "
        "wheel, a few hundred MB in all), retries, and a cluster's start (seconds for a "
        "LocalCluster, minutes for a batch system's queue).",
    ]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.processor() or "unknown CPU"


def version_of(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    sys.exit(main())
