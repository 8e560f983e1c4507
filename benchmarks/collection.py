"""Collection benchmark, side by side in one run: reading a whole wheel with fatbinkit (``ls``,
``ls --summary`` and its ``--json``, ``extract``, ``check``) against what a user would otherwise
script, unzip and then cuobjdump on every shared library unpacked, with ratios and peak memory (GNU
time: the largest RSS of the command and the processes it waited for).

The wheel: torch 2.14.1's CUDA wheel (~900 MB; libtorch_cuda.so and a few other libraries with
device code), from the package registry into the fixtures cache (benchmarks/inputs.py), or
``--wheel PATH`` (CuPy's for a quick check). The target: ``ls --summary`` of the wheel in less
time than unzip alone. cuobjdump fails on a library without device code; the loops go on, as a
user's ``|| true`` would. ``extract`` is checked against cuobjdump's files (paths and bytes);
``check`` has no cuobjdump counterpart. Every command writes its output to a file, as a user
would keep it.

Usage: python benchmarks/collection.py [--write docs/benchmarks-collection.md] [--wheel PATH]
       [--runs N]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbin import median, report, versus  # noqa: E402  (benchmarks/fatbin.py)
from inputs import TORCH, torch_wheel  # noqa: E402  (benchmarks/inputs.py: registry -> cache)

from fatbinkit.toolchain import find_tool  # noqa: E402

ARCHS = ("sm_80", "sm_90", "sm_120")
# Each unpacked shared library in turn (cuobjdump takes one file at a time, and fails on those
# without device code).
EACH = "(cd tree && find . -name '*.so*' -type f | sort | while read -r f; do {}; done)"
Row = tuple[str, str, str]


def cell(t: float, m: int) -> str:
    return f"{t:.2f} s, {m / 2**20:.0f} MiB"


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"


def _in(cwd: Path, script: str, runs: int) -> tuple[float, int]:
    """Median seconds and highest peak RSS of the shell ``script`` run ``runs`` times in ``cwd``."""
    return median(["bash", "-c", f"cd {shlex.quote(str(cwd))} && {script}"], runs)


def against(t: float, m: int, their_t: float, their_m: int) -> str:
    """fatbinkit N x faster (slower), M x less (more) memory than the other measurement."""
    memory = (f"{their_m / m:.1f}x less memory" if m <= their_m
              else f"{m / their_m:.1f}x more memory")
    return f"{versus('fatbinkit', t, their_t)}, {memory}"


def listed(text: str) -> tuple[int, int]:
    """(files with images, images) of a listing: ``== FILE ==`` headers, each followed by the
    ``ELF file``/``PTX file`` lines of ``cuobjdump -lelf -lptx`` (``fatbinkit ls`` of a wheel
    prints the same)."""
    counts = [len(re.findall(r"^(?:ELF|PTX) file", block, flags=re.M))
              for block in re.split(r"^== .* ==$", text, flags=re.M)[1:]]
    return sum(1 for n in counts if n), sum(counts)


def files(folder: Path) -> dict[Path, int]:
    """The size of each file under ``folder``, by its path relative to ``folder``."""
    return {p.relative_to(folder): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def bench(wheel: Path, runs: int, cuobjdump: str, tmp: Path) -> tuple[list[Row], list[str], int]:
    """The table's rows, the notes read from them and the wheel's members with device code."""
    q = shlex.quote
    n_runs = f"{runs} run{'s' if runs > 1 else ''}"
    with open(wheel, "rb") as f:  # into the page cache, for every measured command alike
        while f.read(1 << 24):
            pass
    with zipfile.ZipFile(wheel) as z:
        members = z.infolist()
    w = q(str(wheel))
    unzip = f"unzip -q -o {w} -d tree"
    fk = f"{q(sys.executable)} -m fatbinkit"

    u_t, u_m = _in(tmp, unzip, runs)
    libraries = sum(1 for p in (tmp / "tree").rglob("*.so*") if p.is_file())
    rows = [(f"unzip -q -o WHEEL -d tree: the whole wheel ({n_runs}; {len(members)} files, "
             f"{mib(sum(i.file_size for i in members))})", cell(u_t, u_m), "")]

    body = f'echo "== ${{f#./}} =="; {q(cuobjdump)} -lelf -lptx "$f" 2>/dev/null || true'
    p_t, p_m = _in(tmp, f"{unzip} && {EACH.format(body)} > list.txt", runs)
    c_files, c_images = listed((tmp / "list.txt").read_text())
    rows.append((f"unzip + cuobjdump -lelf -lptx on each of the {libraries} *.so* files "
                 f"({n_runs}; {c_images} images in {c_files} files)", cell(p_t, p_m), ""))

    l_t, l_m = _in(tmp, f"{fk} ls {w} > ls.txt", runs)
    f_files, f_images = listed((tmp / "ls.txt").read_text())
    rows.append((f"fatbinkit ls WHEEL ({n_runs}; {f_images} images in {f_files} members)",
                 cell(l_t, l_m), against(l_t, l_m, p_t, p_m)))
    summary: dict[str, tuple[float, int]] = {}
    for label, script, out in (("fatbinkit ls WHEEL --summary", f"{fk} ls {w} --summary",
                                "summary.txt"),
                               ("fatbinkit ls WHEEL --summary --json",
                                f"{fk} ls {w} --summary --json", "summary.json")):
        t, m = _in(tmp, f"{script} > {out}", runs)
        summary[label] = t, m
        rows.append((f"{label} ({n_runs}; {mib((tmp / out).stat().st_size)} out)", cell(t, m),
                     f"{versus('fatbinkit', t, u_t)} than unzip alone; against unzip + "
                     f"cuobjdump: {against(t, m, p_t, p_m)}"))
    device = len(json.loads((tmp / "summary.json").read_text())["files"])

    s_t, s_m = summary["fatbinkit ls WHEEL --summary"]
    notes = [
        f"- **The target.** `ls --summary` of the wheel took {s_t:.2f} s against {u_t:.2f} s "
        f"for unzip alone ({versus('fatbinkit', s_t, u_t)}): the target is "
        f"{'met' if s_t < u_t else 'not met'} in this run. Peak RSS {s_m / 2**20:.0f} MiB "
        f"against unzip's {u_m / 2**20:.0f} MiB.",
        f"- **Listing.** {versus('`fatbinkit ls`', l_t, p_t)} than unzip + cuobjdump "
        f"on each of the {libraries} unpacked *.so* files ({l_t:.2f} s against {p_t:.2f} s), "
        f"peak RSS {l_m / 2**20:.0f} MiB against {p_m / 2**20:.0f} MiB. "
        + (f"Both list {f_images} images in {f_files} files."
           if (f_files, f_images) == (c_files, c_images) else
           f"They differ: fatbinkit lists {f_images} images in {f_files} members, cuobjdump "
           f"{c_images} in {c_files} files."),
    ]

    body = (f'(mkdir -p "../xc/$f" && cd "../xc/$f" && {q(cuobjdump)} -xelf all -xptx all '
            f'{q(str(tmp / "tree"))}/"$f") 2>/dev/null || true')
    x_t, x_m = _in(tmp, f"{unzip} && {EACH.format(body)} > xc.txt", runs)
    theirs = files(tmp / "xc")
    shutil.rmtree(tmp / "tree")
    rows.append((f"unzip + cuobjdump -xelf all -xptx all on each *.so* file, into a folder per "
                 f"file ({n_runs}; {len(theirs)} files, {mib(sum(theirs.values()))})",
                 cell(x_t, x_m), ""))
    t, m = _in(tmp, f"{fk} extract {w} -o xf > extract.txt", runs)
    ours = files(tmp / "xf")
    same = ours == theirs and all(filecmp.cmp(tmp / "xf" / p, tmp / "xc" / p, shallow=False)
                                  for p in ours)
    rows.append((f"fatbinkit extract WHEEL -o DIR ({n_runs}; {len(ours)} files, "
                 f"{mib(sum(ours.values()))})", cell(t, m), against(t, m, x_t, x_m)))
    rows.append(("extract: the same files as cuobjdump's (paths and bytes)",
                 "yes" if same else "NO", ""))
    notes.append(f"- **Extraction.** `fatbinkit extract` took {t:.2f} s against {x_t:.2f} s "
                 f"for unzip + cuobjdump ({versus('fatbinkit', t, x_t)}), and wrote "
                 + ("the same files." if same else
                    f"{len(ours)} files where cuobjdump wrote {len(theirs)}, not all the same "
                    "(paths or bytes)."))
    shutil.rmtree(tmp / "xc")
    shutil.rmtree(tmp / "xf")

    arch = " ".join(f"--arch {a}" for a in ARCHS)
    label = f"fatbinkit check WHEEL {arch}"
    # exit 1 is an answer (an arch fails), not an error
    t, m = _in(tmp, f"{fk} check {w} {arch} > check.txt; echo $? > check.status", runs)
    status = int((tmp / "check.status").read_text())
    if status not in (0, 1):
        raise SystemExit(f"fatbinkit check failed (exit {status})")
    verdict = "every arch works" if status == 0 else "an arch fails"
    rows.append((f"{label} ({n_runs}; exit {status}: {verdict})", cell(t, m), ""))
    notes.append(f"- **check** of the wheel on {', '.join(ARCHS)} took {t:.2f} s, "
                 f"{m / 2**20:.0f} MiB (exit {status}: {verdict}).")
    return rows, notes, device


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--wheel", type=Path,
                        help=f"the wheel to read (default: torch {TORCH}'s CUDA wheel, from the "
                        "registry into the fixtures cache)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (3)")
    args = parser.parse_args()
    # the commands run in a temporary folder
    args.wheel = (args.wheel or torch_wheel(TORCH)).resolve()
    cuobjdump = str(find_tool("cuobjdump"))
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-2]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "fatbinkit")],
                   check=True)
    with tempfile.TemporaryDirectory(prefix="fatbinkit-collection-bench-") as d:
        rows, notes, device = bench(args.wheel, args.runs, cuobjdump, Path(d))
    head = [
        "# Collection benchmark",
        "",
        f"`python benchmarks/collection.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"cuobjdump {cuobjdump} ({version}). Wheel: {args.wheel.name} "
        f"({mib(args.wheel.stat().st_size)}), {device} members with device code. Each figure is "
        "the median of the runs stated, each in a new process (Python start-up included), and "
        "the highest peak RSS (GNU time: the largest of the shell, the commands and the pool "
        "workers they waited for); warm page cache; every command writes its output to a file, "
        "the unzip commands all into one folder (`-o`: every run but the first overwrites it).",
        "",
    ]
    report(head, rows, args.write)
    tail = "\n".join(["", "## Reading these figures", "", *notes]) + "\n"
    print(tail)
    if args.write:
        with args.write.open("a") as f:
            f.write(tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
