"""``fatbinkit report INPUT [OLD] -o report.html``: one self-contained HTML page of an input.

A thin layer over :mod:`fatbinkit.report`: the page (Plotly inside, the ``report`` extra), or
with ``--json`` its document on stdout. Exits 0, 2 on a usage error, 3 when an input cannot be
read or the page cannot be written (:mod:`fatbinkit.cli`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .args import UsageError, add_budget, add_everywhere, driver, examples, gpu
from .fatbin import dump, progress, progress_done, skipped


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report``."""
    p = sub.add_parser(
        "report", help="one HTML page: where the bytes go, which GPUs load what, what pruning "
        "would save, what changed",
        description="Read INPUT (a library, a wheel or a folder), and OLD to compare with, and "
        "write one self-contained HTML page (no network: Plotly's JavaScript is inside): a "
        "treemap of the bytes (library, arch, module, kernel; stored or uncompressed), a "
        "library x GPU coverage matrix with the minimum driver per GPU, what prune would keep "
        "for sets of GPUs, and with OLD what diff reports. The page holds its data as JSON "
        "(<script id=\"fatbinkit-report\">); --json prints that document instead.",
        epilog=examples(
            "fatbinkit report torch-2.14.1-*.whl -o torch.html",
            "fatbinkit report torch-2.14.1-*.whl torch-2.13.0-*.whl -o changes.html",
            "fatbinkit report site-packages/nvidia/ -o nvidia.html --keep sm_90,sm_120 "
            "--driver 12.8"))
    p.add_argument("input", type=Path, help="a library, a wheel or a folder")
    p.add_argument("old", type=Path, nargs="?",
                   help="an earlier build of the same kind, to compare INPUT with")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="the HTML page to write (whole or not at all)")
    p.add_argument("--json", action="store_true",
                   help="print the report's JSON document instead of writing a page")
    p.add_argument("--driver", type=driver, metavar="VERSION",
                   help="judge coverage with this driver: its CUDA version (12.8) or driver "
                   "version (570.124.06); without, floors are shown as minimum drivers")
    p.add_argument("--keep", action="append", metavar="ARCHS", type=_gpu_set,
                   help="a GPU set for the what-if view, comma-separated (sm_90,sm_120); "
                   "repeat for several (default: each SASS arch of INPUT alone)")
    add_everywhere(p)
    add_budget(p)
    p.set_defaults(func=_report, parser=p)


def _gpu_set(text: str) -> list[str]:
    archs = [t.strip() for t in text.split(",") if t.strip()]
    if not archs:
        raise argparse.ArgumentTypeError(f"no GPU arch in {text!r}")
    return [str(gpu(a)) for a in archs]


def _report(args: argparse.Namespace) -> int:
    from ..report import report

    if args.json == (args.output is not None):
        raise UsageError("give -o FILE (the page) or --json (the document), one of them")
    try:
        made = report(args.input, args.old, driver=args.driver, keep=args.keep,
                      everywhere=args.everywhere, progress=progress, skipped=skipped,
                      max_decompressed=args.max_decompressed)
    finally:
        progress_done()
    if args.json:
        dump(made.to_dict())
    else:
        made.write(args.output)
        sys.stderr.write(f"wrote {args.output}: {made}\n")
    return 0
