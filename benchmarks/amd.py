"""AMD benchmark, side by side in one run: fatbinkit ``ls``, ``ls --resources --json`` and
``prune --for gfx942`` against the LLVM tools a user runs on a HIP library, on cupy-rocm-7-0's
cub library (``tests/thirdparty.CUPY_ROCM7_CUB``, ~153 MB), as ratios, with peak memory.

The LLVM side (LLVM 22, tests/llvm.py) is the script a user writes: ``llvm-objcopy
--dump-section .hip_fatbin`` (the bundler reads no ``.hip_fatbin`` of a shared library), then
for each bundle of the section (one per translation unit, 4096-aligned: cut apart here in
Python, outside the timing, since no LLVM tool splits them) ``clang-offload-bundler --list``,
``--unbundle`` of every target it lists, and ``llvm-readelf --notes`` on each code object
unbundled. Its time is the sum of those commands' wall times (the median of 3 runs of the
whole chain), its memory the largest peak RSS among them.

Pruning, the LLVM way: ``llvm-objcopy --dump-section .hip_fatbin``, ``clang-offload-bundler
--unbundle`` of the kept target from each bundle, the bundler again to bundle it with the host
entry, and ``llvm-objcopy --update-section .hip_fatbin=...``, which keeps the section's size in a
linked file (the file stays as large: fatbinkit's ``--same-size``); fatbinkit's own ``prune``
also cuts the freed bytes out.

Usage: python benchmarks/amd.py [--write docs/benchmarks-amd.md] [--library PATH]
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fatbin import child, median, report, versus  # noqa: E402
from llvm import llvm_path  # noqa: E402

RUNS = 3
BUNDLE = b"__CLANG_OFFLOAD_BUNDLE__"


def _bundles(section: bytes) -> list[bytes]:
    """The bundles of a ``.hip_fatbin``: a non-zero byte at a 4096-aligned offset starts one,
    which runs to the next such start (zeros after it are padding the bundler ignores)."""
    starts = [at for at in range(0, len(section), 4096)
              if section[at:at + 4] == b"CCOB" or section[at:at + 24] == BUNDLE]
    return [section[a:b] for a, b in zip(starts, [*starts[1:], len(section)], strict=True)]


def _env() -> dict[str, str]:
    lib = llvm_path(22, "clang").parents[3]  # usr/lib/llvm-22/bin/clang -> usr/
    return {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
        [str(lib / "lib" / "x86_64-linux-gnu"), str(lib / "lib" / "llvm-22" / "lib")])}


def llvm_chain(lib: Path, work: Path) -> tuple[float, int, int, int]:
    """One run of the user's LLVM script: (seconds, peak RSS, bundles, code objects)."""
    bundler = str(llvm_path(22, "clang-offload-bundler"))
    readelf = str(llvm_path(22, "llvm-readelf"))
    section = work / "hip_fatbin"
    os.environ.update(_env())  # child() runs the tools with this environment
    total, peak = child([str(llvm_path(22, "llvm-objcopy")),
                         f"--dump-section=.hip_fatbin={section}", str(lib),
                         str(work / "scratch")])
    (work / "scratch").unlink()
    pieces = _bundles(section.read_bytes())
    objects = 0
    for i, piece in enumerate(pieces):
        path = work / f"b{i}"
        path.write_bytes(piece)
        t, m = child([bundler, "--list", "--type=o", f"--input={path}"])
        total, peak = total + t, max(peak, m)
        ids = subprocess.run([bundler, "--list", "--type=o", f"--input={path}"],
                             capture_output=True, text=True, check=True).stdout.split()
        targets = [x for x in ids if not x.startswith("host-")]
        outs = [work / f"b{i}.{j}.hsaco" for j in range(len(targets))]
        t, m = child([bundler, "--unbundle", "--type=o", f"--input={path}",
                      f"--targets={','.join(targets)}", *(f"--output={o}" for o in outs)])
        total, peak = total + t, max(peak, m)
        for out in outs:
            t, m = child([readelf, "--notes", str(out)])
            total, peak = total + t, max(peak, m)
            out.unlink()
            objects += 1
        path.unlink()
    section.unlink()
    return total, peak, len(pieces), objects


def prune_chain(lib: Path, work: Path, target: str) -> tuple[float, int, int]:
    """One run of the user's LLVM pruning script for one ``target``: (seconds, peak RSS,
    output size)."""
    bundler = str(llvm_path(22, "clang-offload-bundler"))
    objcopy = str(llvm_path(22, "llvm-objcopy"))
    section = work / "hip_fatbin"
    os.environ.update(_env())
    total, peak = child([objcopy, f"--dump-section=.hip_fatbin={section}", str(lib),
                         str(work / "scratch")])
    (work / "scratch").unlink()
    kept = b""
    for i, piece in enumerate(_bundles(section.read_bytes())):
        path, co, new = work / f"b{i}", work / f"b{i}.co", work / f"b{i}.new"
        path.write_bytes(piece)
        entry = f"hipv4-amdgcn-amd-amdhsa--{target}"
        t, m = child([bundler, "--unbundle", "--type=o", f"--input={path}",
                      f"--targets={entry}", f"--output={co}"])
        total, peak = total + t, max(peak, m)
        t, m = child([bundler, "--type=o", "-bundle-align=4096",
                      f"--targets=host-x86_64-unknown-linux-gnu,{entry}", "--input=/dev/null",
                      f"--input={co}", f"--output={new}"])
        total, peak = total + t, max(peak, m)
        data = new.read_bytes()
        kept += data + bytes(-len(data) % 4096)
        for f in (path, co, new):
            f.unlink()
    section.write_bytes(kept)
    out = work / "pruned.so"
    t, m = child([objcopy, f"--update-section=.hip_fatbin={section}", str(lib), str(out)])
    size = out.stat().st_size
    out.unlink()
    section.unlink()
    return total + t, max(peak, m), size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="also write the table (markdown) here")
    parser.add_argument("--library", type=Path, help="the HIP library (default: cupy's cub)")
    args = parser.parse_args()
    if args.library is None:
        from inputs import member
        from thirdparty import CUPY_ROCM7_CUB

        args.library = member(CUPY_ROCM7_CUB)
    lib: Path = args.library
    py = sys.executable
    fk = [py, "-m", "fatbinkit"]
    subprocess.run([py, "-m", "compileall", "-q", str(ROOT / "fatbinkit")], check=True)
    chains = []
    with tempfile.TemporaryDirectory(prefix="fatbinkit-amd-") as tmp:
        for _ in range(RUNS):
            chains.append(llvm_chain(lib, Path(tmp)))
    l_t = statistics.median(c[0] for c in chains)
    l_m = max(c[1] for c in chains)
    bundles, objects = chains[0][2], chains[0][3]
    rows = [(f"{lib.name}: LLVM 22: bundler --list, --unbundle, llvm-readelf --notes "
             f"({bundles} bundle(s), {objects} code objects)", f"{l_t:.2f} s, "
             f"{l_m / 2**20:.0f} MiB", "")]
    for label, argv in (("fatbinkit ls", [*fk, "ls", str(lib)]),
                        ("fatbinkit ls --resources --json",
                         [*fk, "ls", "--resources", "--json", str(lib)])):
        t, m = median(argv, RUNS)
        rows.append((f"{lib.name}: {label}", f"{t:.2f} s, {m / 2**20:.0f} MiB",
                     f"{versus('fatbinkit', t, l_t)}, {m / l_m:.2f}x the LLVM tools' peak "
                     "memory"))
    with tempfile.TemporaryDirectory(prefix="fatbinkit-amd-") as tmp:
        prunes = [prune_chain(lib, Path(tmp), "gfx942") for _ in range(RUNS)]
        p_t = statistics.median(c[0] for c in prunes)
        p_m = max(c[1] for c in prunes)
        rows.append((f"{lib.name}: LLVM 22: objcopy --dump-section, bundler --unbundle gfx942, "
                     "bundler, objcopy --update-section", f"{p_t:.2f} s, {p_m / 2**20:.0f} MiB, "
                     f"file {prunes[0][2] / 2**20:.1f} MiB", ""))
        out = Path(tmp, "out.so")
        for label, extra in (("fatbinkit prune --for gfx942 --same-size", ["--same-size"]),
                             ("fatbinkit prune --for gfx942", [])):
            t, m = median([*fk, "prune", str(lib), "-o", str(out), "--for", "gfx942", *extra],
                          RUNS)
            rows.append((f"{lib.name}: {label}", f"{t:.2f} s, {m / 2**20:.0f} MiB, file "
                         f"{out.stat().st_size / 2**20:.1f} MiB",
                         f"{versus('fatbinkit', t, p_t)}, {m / p_m:.2f}x the LLVM tools' peak "
                         "memory"))
    head = [
        "# AMD benchmark: inspecting and pruning", "",
        f"`python benchmarks/amd.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}. "
        f"`{lib.name}` ({lib.stat().st_size / 2**20:.0f} MiB). fatbinkit: the median of {RUNS} "
        "runs in a new process (Python start-up included) and the highest peak RSS. LLVM 22: "
        f"the median of {RUNS} runs of the chain (the sum of its commands' wall times) and the "
        "largest peak RSS of any of its commands.", ""]
    report(head, rows, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
