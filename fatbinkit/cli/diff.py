"""``fatbinkit diff OLD NEW`` and ``fatbinkit gate FILE...``: what changed, and the CI verdict.

A thin layer over :mod:`fatbinkit.diff` and :mod:`fatbinkit.gate`. ``diff`` exits 0 (with
``--exit-code``, 1 when something changed, as ``git diff --exit-code``); ``gate`` exits 0 when
every rule holds, 1 when one fails (each violation printed), 2 on a usage error; both exit 3
when an input cannot be read (:mod:`fatbinkit.cli`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ..outfile import atomic_path
from .args import (
    UsageError,
    add_budget,
    add_everywhere,
    arch_filter,
    byte_size,
    driver,
    examples,
    gpu,
    kernel_filter,
    positive,
)
from .fatbin import (
    dump,
    dump_rows,
    progress,
    progress_done,
    skipped,
    without_cyclic_gc,
    write_lines,
)

if TYPE_CHECKING:
    from ..gate import SizeLimit


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``diff`` and ``gate``."""
    p = sub.add_parser(
        "diff", help="what changed between two builds: kernels, resources, archs, drivers",
        description="Compare the device code of OLD and NEW: two files, two wheels or two "
        "folders (libraries matched by path, then by name without its soname version or Python "
        "ABI tag). Reports kernels added, removed and changed per arch (registers, stack, "
        "spills, shared, local, constant, SASS size: as cuobjdump -res-usage, plus ptxas' "
        "spills), archs a library or module gained or lost, what each GPU loads, and per arch "
        "the minimum driver, toolkit, codec and bytes. Text first summarises (counts, the worst "
        "regressions), then lists the changes, largest first.",
        epilog=examples(
            "fatbinkit diff old/libfoo.so new/libfoo.so",
            "fatbinkit diff torch-2.13.0-*.whl torch-2.14.1-*.whl --only regressions",
            "fatbinkit diff a.so b.so --arch sm_90 --kernel '*gemm*' --json"))
    p.add_argument("old", type=Path, help="the earlier build: a file, a wheel or a folder")
    p.add_argument("new", type=Path, help="the later build, of the same kind")
    p.add_argument("--arch", action="append", type=arch_filter, metavar="ARCH",
                   help="only changes about ARCH (as ls --arch: sm_90 any a/f, sm_90a, "
                   "compute_90 PTX only); repeat for several")
    p.add_argument("--kernel", type=kernel_filter, metavar="PATTERN",
                   help="only kernels matching PATTERN (a glob on the mangled or demangled name, "
                   "or re:REGEX)")
    p.add_argument("--only", choices=("regressions",),
                   help="only regressions: resources that rose, archs lost, GPUs that lost "
                   "SASS, higher minimum drivers")
    p.add_argument("--mangled", action="store_true",
                   help="print kernel names mangled (text is demangled by default)")
    p.add_argument("--top", type=positive, default=5, metavar="N",
                   help="worst regressions shown in the summary (default 5)")
    p.add_argument("--json", action="store_true", help="machine-readable output (docs/json.md)")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when something changed (after the filters), as git diff does")
    add_everywhere(p)
    add_budget(p)
    p.set_defaults(func=_diff, parser=p)

    p = sub.add_parser(
        "gate", help="fail CI when kernels break rules or regress from a baseline",
        description="Read FILEs (libraries, wheels, folders) and check every kernel against the "
        "rules given, and against a baseline snapshot (--baseline) written earlier with "
        "--write-baseline. Exit 0 when all hold, 1 when one fails (each violation printed with "
        "file, kernel, arch, value and limit), 2 on a usage error.",
        epilog=examples(
            "fatbinkit gate dist/*.whl --require-arch sm_80 --require-arch sm_90 --no-spills",
            "fatbinkit gate libfoo.so --max-registers 128 --max-min-driver 12.8",
            "fatbinkit gate libfoo.so --max-size 200M --max-size sm_90=64M",
            "fatbinkit gate libfoo.so --write-baseline base.json      # on main",
            "fatbinkit gate libfoo.so --baseline base.json --tolerance registers=8 "
            "--format github"))
    p.add_argument("files", type=Path, nargs="+", metavar="FILE",
                   help="a library, executable, object, fatbin, wheel or folder")
    p.add_argument("--max-registers", type=positive, metavar="N",
                   help="no kernel uses more than N registers per thread")
    p.add_argument("--no-spills", action="store_true",
                   help="no kernel spills registers to local memory (as ptxas -v reports)")
    p.add_argument("--require-arch", action="append", type=gpu, default=[], metavar="ARCH",
                   help="every module loads on a GPU of ARCH (SASS it runs, or PTX it JITs): "
                   "fails where `fatbinkit check --strict` does; repeat for several")
    p.add_argument("--require-sass-arch", action="append", type=gpu, default=[],
                   metavar="ARCH",
                   help="every kernel has SASS a GPU of ARCH runs (for ARCH, or an older arch of "
                   "its major): no PTX JIT; repeat for several")
    p.add_argument("--driver", type=driver, metavar="VERSION",
                   help="with --require-arch or --require-sass-arch: the driver (13.0, "
                   "580.65.06) whose floors apply")
    p.add_argument("--max-min-driver", type=driver, metavar="VERSION",
                   help="no arch's images need a driver newer than VERSION (CUDA 12.8 or a "
                   "driver version)")
    p.add_argument("--max-size", action="append", type=_size_limit, default=[],
                   metavar="[ARCH=]SIZE",
                   help="device code of each library (stored bytes) at most SIZE, in total or "
                   "for ARCH's images (sm_90=64M); repeatable")
    p.add_argument("--baseline", type=Path, metavar="BASE.json",
                   help="fail when a kernel's registers, spills, stack, local or shared memory "
                   "rise over this snapshot, or it loses an arch")
    p.add_argument("--tolerance", action="append", default=[], metavar="FIELD=N[%]",
                   help="with --baseline: how much FIELD may rise (registers=8, stack=10%%); "
                   "default 0")
    p.add_argument("--write-baseline", type=Path, metavar="BASE.json",
                   help="write the snapshot of FILEs, for a later --baseline")
    p.add_argument("--format", choices=("text", "github", "json"), default="text",
                   help="github: GitHub Actions error annotations (one per violation)")
    add_everywhere(p)
    add_budget(p)
    p.set_defaults(func=_gate, parser=p)


def _size_limit(text: str) -> SizeLimit:
    from ..gate import SizeLimit

    label, sep, size = text.rpartition("=")
    return SizeLimit(byte_size(size), arch_filter(label) if sep else None)


@without_cyclic_gc
def _diff(args: argparse.Namespace) -> int:
    from ..diff import diff, snapshot

    try:
        old = snapshot(args.old, max_decompressed=args.max_decompressed, progress=progress,
                       skipped=skipped, everywhere=args.everywhere)
        new = snapshot(args.new, max_decompressed=args.max_decompressed, progress=progress,
                       like=old, skipped=skipped, everywhere=args.everywhere)
    finally:
        progress_done()
    changes = diff(old, new).filter(args.arch, args.kernel,
                                    regressions=args.only == "regressions")
    if args.json:
        dump_rows(changes.to_dict())
    else:
        write_lines(changes.lines(demangled=not args.mangled, top=args.top))
    return 1 if args.exit_code and not changes.empty else 0


@without_cyclic_gc
def _gate(args: argparse.Namespace) -> int:
    from ..diff import Snapshot, snapshot
    from ..gate import Gate, Rules, escape, gate

    if args.tolerance and not args.baseline:
        raise UsageError("--tolerance goes with --baseline")
    try:
        rules = Rules(max_registers=args.max_registers, no_spills=args.no_spills,
                      require_archs=args.require_arch, require_sass=args.require_sass_arch,
                      driver=args.driver, max_min_driver=args.max_min_driver,
                      max_size=args.max_size, tolerance=args.tolerance)
    except InvalidArgumentError as e:
        raise UsageError(str(e)) from e
    if not (rules.any or args.baseline or args.write_baseline):
        raise UsageError("nothing to check: give a rule (--max-registers, --no-spills, "
                         "--require-arch, --require-sass-arch, --max-min-driver, --max-size), "
                         "--baseline or --write-baseline")
    baseline = None
    if args.baseline:
        from ..errors import FormatError, InputError

        try:
            doc = json.loads(args.baseline.read_bytes())
        except OSError as e:
            raise InputError(f"cannot read {args.baseline}: {e.strerror or e}") from e
        except (ValueError, RecursionError) as e:
            raise FormatError(f"{args.baseline}: not JSON: {e}") from e
        baseline = Snapshot.from_dict(doc, str(args.baseline))
    try:
        if rules.any or baseline is not None:
            result = gate(args.files, rules, baseline=baseline,
                          max_decompressed=args.max_decompressed, progress=progress,
                          skipped=skipped, everywhere=args.everywhere)
        else:  # --write-baseline alone: a snapshot, nothing judged
            result = Gate(Snapshot(" ".join(map(str, args.files)), tuple(
                lib for f in args.files for lib in snapshot(
                    f, max_decompressed=args.max_decompressed, progress=progress,
                    skipped=skipped, everywhere=args.everywhere).libraries)), ())
    finally:
        progress_done()
    if args.write_baseline:
        with atomic_path(args.write_baseline) as tmp:
            tmp.write_text(json.dumps(result.snapshot.to_dict(), separators=(",", ":")) + "\n")
    if args.format == "json":
        dump(result.to_dict())
    elif args.format == "github":
        sys.stdout.write("".join(f"{v.github()}\n" for v in result.violations))
        sys.stdout.write("".join(f"::notice::{escape(n)}\n" for n in result.notes))
        print(str(result).splitlines()[-1])
    else:
        print(result)
    return 0 if result.ok else 1
