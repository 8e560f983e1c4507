"""Deep-scan benchmark (issue 31), side by side in one run: the plain listing (``fatbinkit ls``,
the API ``scan(path)``, ``cuobjdump -lelf -lptx``) against the deep scan
(``scan(path, everywhere=True)``, and ``fatbinkit ls --everywhere`` where the CLI has it), the
plain ``scan(path)`` of this checkout against that of the commit before the deep scan (a git
worktree of ``--baseline``, default 5cd55fd), with ratios, and a profile of the deep scan.

Libraries: cuBLASLt 13.1.1.3 (``.cask_resource`` containers, raw zstd cubins in ``.ldata`` and
``.data``), cuFFT 12.0.0.61 (~24,000 containers in ``.ldata``) and libtorch_cuda.so of torch
2.14.1's CUDA wheel, each fetched through the package registry into the fixtures cache
(``$FATBINKIT_FIXTURES``). torch comes with ``pip download --isolated``: a machine's pip
configuration may prefer a local CPU-only torch, whose wheel has no libtorch_cuda.so.

Each command runs in a new process under GNU time (Python start-up included): wall and CPU
(user + system) seconds are medians of ``--runs``, memory the highest peak RSS. Each Python child
runs with its tree first on ``sys.path`` (working directory and ``PYTHONPATH``) and checks that
it imported fatbinkit from there. The profile (cProfile, in this process) is of the deep scan of
cuBLASLt, with the share of the time spent inflating the raw zstd cubins of ABI v2 whose SM's
``a`` suffix is recorded only in ``.nv.compat`` (the whole image is decompressed to read it).

Usage: python benchmarks/hidden.py [--write docs/benchmarks-hidden.md] [--library PATH ...]
       [--baseline COMMIT] [--runs N]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import mmap
import os
import platform
import pstats
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))  # this checkout's fatbinkit, as in the children

from fatbin import best, report  # noqa: E402  (benchmarks/fatbin.py)
from inputs import member, torch_cuda  # noqa: E402  (benchmarks/inputs.py)
from thirdparty import CUBLASLT131, CUFFT12  # noqa: E402

from fatbinkit.device_code import DeviceCode  # noqa: E402
from fatbinkit.formats import elf  # noqa: E402
from fatbinkit.formats.codec import ZSTD_MAGIC, decompress, inflated_head  # noqa: E402
from fatbinkit.formats.cubin import ABI_V2, EF_V2_ARCH_SPECIFIC, cubin_arch  # noqa: E402
from fatbinkit.scan import scan  # noqa: E402
from fatbinkit.toolchain import find_tool  # noqa: E402

RUNS = 3
BASELINE = "5cd55fd"  # main just before the deep scan (f4f638c)
# A Python child: import fatbinkit from the tree given (refuse any other), then run ``CALL``.
API = ("import sys, fatbinkit; from fatbinkit.scan import scan\n"
       "if not fatbinkit.__file__.startswith(sys.argv[2]):\n"
       "    raise SystemExit(f'fatbinkit from {{fatbinkit.__file__}}, not {{sys.argv[2]}}')\n"
       "{call}")
Row = tuple[str, str, str]


@dataclass(frozen=True)
class Figure:
    """Median wall and CPU seconds of a command's runs, and their highest peak RSS in bytes."""

    wall: float
    cpu: float
    rss: int

    def __str__(self) -> str:
        return f"{self.wall:.2f} s wall, {self.cpu:.2f} s CPU, {self.rss / 2**20:.0f} MiB"


def child(argv: list[str], cwd: Path | None, env: dict[str, str] | None
          ) -> tuple[float, float, int]:
    """Run ``argv`` under GNU time: (wall seconds, CPU seconds, peak RSS in bytes) of that child
    and the processes it waited for (a child forked from this large process would report this
    one's RSS as its own)."""
    fd, name = tempfile.mkstemp(prefix="fatbinkit-time-")
    os.close(fd)
    out = Path(name)
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-o", str(out), "-f", "%M %U %S", *argv], cwd=cwd,
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed ({proc.returncode}): {proc.stderr.decode()[-800:]}")
    kib, user, system = out.read_text().split()[-3:]
    out.unlink()
    return wall, float(user) + float(system), int(kib) * 1024


def measure(argv: list[str], runs: int, tree: Path | None = None) -> Figure:
    """:class:`Figure` of ``runs`` runs of ``argv``; a Python command with ``tree`` first on
    its path."""
    return together([(argv, tree)], runs)[0]


def together(commands: list[tuple[list[str], Path | None]], runs: int) -> list[Figure]:
    """:func:`measure` of each ``(argv, tree)``, in ``runs`` rounds of one run of each, in the
    order given: a machine whose speed drifts in the minutes a row takes slows each of its
    commands alike, and their ratios hold."""
    found: list[list[tuple[float, float, int]]] = [[] for _ in commands]
    for _ in range(runs):
        for each, (argv, tree) in zip(found, commands, strict=True):
            env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
            each.append(child(argv, tree, env))
    return [Figure(statistics.median(w for w, _, _ in each),
                   statistics.median(c for _, c, _ in each), max(m for _, _, m in each))
            for each in found]


def api(lib: Path, tree: Path, everywhere: bool) -> list[str]:
    """A child running ``scan(lib)`` (deep with ``everywhere``) with fatbinkit from ``tree``."""
    call = "scan(sys.argv[1], everywhere=True)" if everywhere else "scan(sys.argv[1])"
    return [sys.executable, "-c", API.format(call=call), str(lib), str(tree / "fatbinkit")]


def ratio(a: Figure, b: Figure) -> str:
    """``a`` against ``b``: wall and CPU ratios, and memory."""
    return (f"{a.wall / b.wall:.2f}x the wall, {a.cpu / b.cpu:.2f}x the CPU, "
            f"{a.rss / b.rss:.2f}x the memory")


def is_raw_frame(code: DeviceCode, mm: mmap.mmap) -> bool:
    """Whether ``code`` is a zstd frame found outside any container (its offset is the frame's
    start; a container entry's offset is its entry header, which begins with the kind)."""
    return mm[code.offset : code.offset + 4] == ZSTD_MAGIC


def content(lib: Path) -> tuple[tuple[DeviceCode, ...], str]:
    """The deep scan's images of ``lib`` and a line counting them: per section, and the raw
    zstd frames among the hidden ones."""
    codes = scan(lib, everywhere=True)
    hidden = [c for c in codes if c.hidden]
    with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        raw = sum(is_raw_frame(c, mm) for c in hidden)
    per = Counter(c.source for c in hidden)
    stored = sum(c.stored for c in hidden)
    listed = len(codes) - len(hidden)
    line = (f"`{lib.name}` ({lib.stat().st_size / 2**20:.0f} MiB): {listed:,} "
            f"image{'' if listed == 1 else 's'} listed, {len(hidden):,} hidden "
            f"({stored / 2**20:.1f} MiB stored"
            + (": " + ", ".join(f"{s} {n:,}" for s, n in sorted(per.items())) if per else "")
            + (f"; {raw:,} of them raw zstd cubins" if raw else "") + ")")
    return codes, line


def bench(lib: Path, cuobjdump: str, old: Path, baseline: str, runs: int, cli_deep: bool
          ) -> list[Row]:
    py = sys.executable
    name = lib.name
    c = measure([cuobjdump, "-lelf", "-lptx", str(lib)], runs)
    ls = measure([py, "-m", "fatbinkit", "ls", str(lib)], runs, ROOT)
    ls_old = measure([py, "-m", "fatbinkit", "ls", str(lib)], runs, old)
    plain = measure(api(lib, ROOT, False), runs, ROOT)
    plain_old = measure(api(lib, old, False), runs, old)
    deep = measure(api(lib, ROOT, True), runs, ROOT)
    rows = [
        (f"{name}: cuobjdump -lelf -lptx", str(c), ""),
        (f"{name}: fatbinkit ls", str(ls), f"{ratio(ls, c)} of cuobjdump"),
        (f"{name}: fatbinkit ls at {baseline}", str(ls_old), f"now {ratio(ls, ls_old)}"),
        (f"{name}: scan(path)", str(plain), f"{ratio(plain, c)} of cuobjdump"),
        (f"{name}: scan(path) at {baseline}", str(plain_old),
         f"now {ratio(plain, plain_old)} (plain listing: before/after the deep scan)"),
        (f"{name}: scan(path, everywhere=True)", str(deep),
         f"deep/plain: {ratio(deep, plain)}; deep/cuobjdump: {ratio(deep, c)}"),
    ]
    if cli_deep:
        ls_deep = measure([py, "-m", "fatbinkit", "ls", "--everywhere", str(lib)], runs, ROOT)
        rows.append((f"{name}: fatbinkit ls --everywhere", str(ls_deep),
                     f"deep/plain: {ratio(ls_deep, ls)}; deep/cuobjdump: {ratio(ls_deep, c)}"))
    return rows


@dataclass(frozen=True)
class Parts:
    """The deep scan's work on one library, redone piece by piece in this process (medians)."""

    plain: float  # scan(path)
    deep: float  # scan(path, everywhere=True)
    spans: int  # bytes of the sections searched
    read: float  # reading them once, window by window (pread), no search
    magics: float  # the three magic searches (Reader.find), one pass each, as the scan does
    raw: int  # raw zstd cubins found
    peek: float  # the 64-byte peek of each
    whole: int  # of them inflated whole (ABI v2, no arch-specific flag: SM's `a` in .nv.compat)
    inflated: int  # bytes they inflate to
    archs: str  # the SMs cubin_arch reads for those
    decompress: float  # inflating them
    compat: float  # cubin_arch of the inflated images
    lean: float  # the same SMs through elf.find_section(".nv.compat") (raw section table)


def spans(view: memoryview) -> list[tuple[int, int]]:
    """(offset, size) of the sections the deep scan searches in the ELF file ``view``:
    allocated, with contents, not one a vendor reads (``.nv_fatbin``, ``__nv_relfatbin``)."""
    from fatbinkit.vendors.cuda.finding import sections as cuda_sections

    found = elf.sections(view)
    known = cuda_sections({s.name for s in found}, True, pe=False)
    return [(s.header.offset, s.header.size) for s in found
            if s.header.flags & elf.SHF_ALLOC and s.header.type != elf.SHT_NOBITS
            and s.header.size and s.name not in known]


def parts(lib: Path, codes: tuple[DeviceCode, ...], runs: int) -> Parts:
    """:class:`Parts` of ``lib``, whose deep scan found ``codes``."""
    from fatbinkit.formats.cubin import _arch, _header  # for the lean lookup, a what-if
    from fatbinkit.formats.nvinfo import parse_records
    from fatbinkit.formats.reader import Reader

    fd = os.open(lib, os.O_RDONLY)
    mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    where = spans(view)

    def read() -> None:
        for off, size in where:
            for at in range(0, size, 16 << 20):
                os.pread(fd, min(16 << 20, size - at), off + at)

    def magics() -> None:
        for off, size in where:
            for magic in (b"\x50\xed\x55\xba", ZSTD_MAGIC, elf.ELFMAG):
                for _ in Reader(view[off : off + size], fd, off).find(magic):
                    pass

    def lean(image: bytes) -> object:
        compat = elf.find_section(image, ".nv.compat")
        return _arch(_header(image), parse_records(compat, compat=True) if compat else ())

    try:
        raw = [c for c in codes if c.hidden and is_raw_frame(c, mm)]
        heads: list[elf.FileHeader] = []
        peek = best(lambda: heads.__setitem__(slice(None), [
            elf.FileHeader.unpack(inflated_head(c.view, 64)) for c in raw]), runs)
        whole = [c for c, h in zip(raw, heads, strict=True)
                 if h.abi_version == ABI_V2 and not h.flags & EF_V2_ARCH_SPECIFIC]
        images: list[bytes] = []
        inflate = best(lambda: images.__setitem__(slice(None), [
            decompress("zstd", c.view, c.uncompressed, c.offset) for c in whole]), runs)
        archs = Counter(str(cubin_arch(i)) for i in images)
        return Parts(
            plain=best(lambda: scan(lib), runs),
            deep=best(lambda: scan(lib, everywhere=True), runs),
            spans=sum(size for _, size in where), read=best(read, runs),
            magics=best(magics, runs), raw=len(raw), peek=peek, whole=len(whole),
            inflated=sum(map(len, images)),
            archs=", ".join(f"{a} x{n}" for a, n in sorted(archs.items())),
            decompress=inflate, compat=best(lambda: [cubin_arch(i) for i in images], runs),
            lean=best(lambda: [lean(i) for i in images], runs),
        )
    finally:
        view.release()
        mm.close()
        os.close(fd)


def profile(lib: Path, codes: tuple[DeviceCode, ...], runs: int) -> list[str]:
    """Markdown: where the deep scan of ``lib`` spends its time: its parts redone one by one
    (:func:`parts`), and cProfile's top 15 by own time."""
    prof = cProfile.Profile()
    prof.enable()
    scan(lib, everywhere=True)
    prof.disable()
    text = io.StringIO()
    stats = pstats.Stats(prof, stream=text)
    stats.sort_stats("tottime").print_stats(15)
    table = re.sub(re.escape(str(ROOT) + os.sep), "", text.getvalue())
    table = re.sub(r"\S*/lib/python3\.\d+/", "", table)
    total = stats.total_tt  # type: ignore[attr-defined]  # (pstats keeps it, untyped)

    def cumulative(name: str, module: str, caller: str | None = None) -> float:
        """Cumulative seconds of the function ``name`` of ``module`` (a file name), or of its
        calls from the function ``caller``."""
        seconds = 0.0
        for (path, _, fn), (_, _, _, ct, callers) in \
                stats.stats.items():  # type: ignore[attr-defined]
            if fn == name and path.endswith(module):
                seconds += ct if caller is None else sum(
                    c[3] for (_, _, by), c in callers.items() if by == caller)
        return seconds

    zstd = cumulative("_zstd_cubin", "finding.py")
    whole = (cumulative("decompress", "codec.py", "_zstd_cubin")
             + cumulative("cubin_arch", "cubin.py", "_zstd_cubin"))
    find = cumulative("find", "reader.py")
    p = parts(lib, codes, runs)

    def share(t: float) -> str:
        return f"{t:.2f} s, {t / p.deep:.0%}"

    return [
        "",
        f"## Where the deep scan of `{lib.name}` spends its time",
        "",
        f"Its parts redone one by one in this process (median of {runs} each; share of the deep "
        "scan):",
        "",
        "| part | time |",
        "|---|---|",
        f"| `scan(path)` (the plain listing) | {p.plain:.2f} s |",
        f"| `scan(path, everywhere=True)` | {p.deep:.2f} s ({p.deep - p.plain:.2f} s more) |",
        f"| reading the {p.spans / 2**20:.0f} MiB of sections searched once (`pread`, 16 MiB "
        f"windows, no search) | {share(p.read)} |",
        "| the three magic searches as the scan runs them (`Reader.find`, one pass each: "
        f"fatbin, zstd, ELF) | {share(p.magics)} |",
        f"| 64-byte peek of the {p.raw} raw zstd cubins | {share(p.peek)} |",
        f"| inflating whole the {p.whole} of them of ABI v2 without the arch-specific flag "
        f"({p.inflated / 2**20:.0f} MiB) | {share(p.decompress)} |",
        f"| `cubin_arch` of those (`.nv.compat` through `elf.sections`), giving {p.archs} "
        f"| {share(p.compat)} |",
        "| the same SMs through `elf.find_section` (raw section table): what `cubin_arch` "
        f"could cost | {share(p.lean)} |",
        "",
        f"Under cProfile ({total:.2f} s in all, Python calls slowed): `_zstd_cubin` "
        f"{zstd:.2f} s ({zstd / total:.0%}), of which `decompress` + `cubin_arch` of whole "
        f"images {whole:.2f} s ({whole / total:.0%}); `Reader.find` {find:.2f} s "
        f"({find / total:.0%}).",
        "",
        "cProfile, top 15 by own time:",
        "",
        "```",
        *(line.rstrip() for line in table.strip().splitlines()),
        "```",
    ]


def worktree(commit: str, where: Path) -> Path:
    """A detached git worktree of ``commit`` at ``where``, byte-compiled."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(where),
                    commit], check=True)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(where / "fatbinkit")],
                   check=True)
    return where


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", type=Path, help="also write the tables (markdown) here")
    parser.add_argument("--library", type=Path, action="append",
                        help="libraries to measure (default: cuBLASLt 13.1.1.3, cuFFT "
                        "12.0.0.61, libtorch_cuda.so); the first one is profiled")
    parser.add_argument("--baseline", default=BASELINE,
                        help=f"the commit whose plain scan is compared (default {BASELINE})")
    parser.add_argument("--runs", type=int, default=RUNS, help=f"runs each (default {RUNS})")
    args = parser.parse_args()
    libs = args.library or [member(CUBLASLT131), member(CUFFT12), torch_cuda()]
    cuobjdump = str(find_tool("cuobjdump"))
    py = sys.executable
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "fatbinkit")], check=True)
    helps = subprocess.run([py, "-m", "fatbinkit", "ls", "--help"], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    cli_deep = "--everywhere" in helps.stdout
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h", "--",
                             "fatbinkit"], capture_output=True, text=True, check=True).stdout
    lines = []
    # A kill (SIGTERM) unwinds, so that the baseline's worktree is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="fatbinkit-baseline-") as t:
        old = worktree(args.baseline, Path(t) / "tree")
        try:
            rows = []
            found = []
            for lib in libs:
                codes, line = content(lib)
                found.append((lib, codes))
                lines.append(f"- {line}")
                rows += bench(lib, cuobjdump, old, args.baseline, args.runs, cli_deep)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
                           check=False)
    tail = profile(found[0][0], found[0][1], args.runs)
    load = os.getloadavg()
    head = [
        "# Deep scan benchmark (issue 31)",
        "",
        f"`python benchmarks/hidden.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores (load average at the end "
        f"{load[0]:.1f}), Python {platform.python_version()}, fatbinkit at {commit.strip()} "
        f"against {args.baseline}; cuobjdump {cuobjdump}. Each figure: median wall and CPU "
        f"(user + system) seconds of {args.runs} runs in a new process (Python start-up "
        "included), highest peak RSS (GNU time), warm page cache. `scan(...)` is a "
        "`python -c` child calling the API. "
        + ("" if cli_deep else "The CLI has no `ls --everywhere` yet: the deep scan is the "
           "API's. ")
        + "What the deep scan finds:",
        "",
        *lines,
        "",
    ]
    report(head, rows, None)
    print("\n".join(tail))
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        table = "\n".join([*head, "| measurement | result | ratio |", "|---|---|---|",
                           *(f"| {a} | {b} | {c} |" for a, b, c in rows)])
        args.write.write_text(table + "\n" + "\n".join(tail) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
