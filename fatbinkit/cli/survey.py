"""``fatbinkit survey SOURCE... -o OUT``: many wheels read on an engine, Parquet tables out;
``fatbinkit survey summarize OUT`` and ``fatbinkit survey regressions OUT`` read them back.

A thin layer over :mod:`fatbinkit.survey` and :mod:`fatbinkit.survey_summary` (the ``survey``
extra). A wheel that cannot be read is an ``errors`` row, not a failure: the command exits 0 when
every planned wheel has its rows or its error row, 2 on a usage error, 3 when the sources cannot
be listed, the engine cannot be reached or OUT cannot be written (:mod:`fatbinkit.cli`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .args import UsageError, examples
from .fatbin import dump, progress_done, progress_line
from .report import _gpu_set

_READS = ("summarize", "regressions")  # SOURCE words that read a survey instead


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``survey``."""
    p = sub.add_parser(
        "survey", help="many wheels on an engine (local or Dask) into Parquet tables; "
        "summarize and regressions read them",
        description="Plan the wheels of SOURCE (folders, globs, wheels, fsspec URLs such as "
        "s3://bucket/wheels/, or a PEP 691 index with --package), then read each on ENGINE "
        "(local: a process pool; dask://HOST:PORT: a Dask scheduler, with retries) and write "
        "its rows as Parquet parts named by its SHA-256 under OUT/wheels, OUT/files, "
        "OUT/kernels (--kernels) and OUT/errors. A wheel that cannot be read is an errors row. "
        "'fatbinkit survey summarize OUT' prints per package and version the archs, minimum "
        "drivers and sizes; 'fatbinkit survey regressions OUT --package P' what each version "
        "dropped or raised against the one before.",
        epilog=examples(
            "fatbinkit survey wheelhouse/ -o survey/",
            "fatbinkit survey https://pypi.org/simple/ --package nvidia-curand "
            "--versions '>=10.4' -o survey/ --engine dask://scheduler:8786",
            "fatbinkit survey 's3://bucket/wheels/*.whl' -o s3://bucket/survey/ --resume "
            "--engine dask://scheduler:8786 --keep sm_90,sm_120",
            "fatbinkit survey summarize survey/",
            "fatbinkit survey regressions survey/ --package torch --json"))
    p.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a folder, glob, wheel, fsspec URL or PEP 691 index (or 'summarize OUT' "
                   "/ 'regressions OUT')")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="the folder (or fsspec URL) the tables are written to")
    p.add_argument("--engine", default="local", metavar="ENGINE",
                   help="local (a process pool on this machine, the default) or "
                   "dask://HOST:PORT (a Dask scheduler)")
    p.add_argument("--resume", action="store_true",
                   help="leave the wheels OUT already holds rows for")
    p.add_argument("--keep", action="append", metavar="ARCHS", type=_gpu_set,
                   help="a GPU set whose prune savings each wheel records, comma-separated "
                   "(sm_90,sm_120); repeat for several (default: each native arch alone)")
    p.add_argument("--kernels", action="store_true",
                   help="the kernels table too: every kernel with its resources and image digest")
    p.add_argument("--package", metavar="NAME",
                   help="only this package's wheels (needed for an index; regressions: only it)")
    p.add_argument("--versions", metavar="SPEC",
                   help="only versions a PEP 440 specifier set admits ('>=2.13,<2.15')")
    p.add_argument("--retries", type=_count, default=2, metavar="N",
                   help="times a failed task is run again (default 2)")
    p.add_argument("--jobs", type=_count, default=None, metavar="N",
                   help="processes of the local engine (default: one per core)")
    p.add_argument("--json", action="store_true",
                   help="print the outcome (or the summary, the regressions) as JSON")
    p.set_defaults(func=_survey, parser=p)


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"not a count: {text!r}")
    return n


def _survey(args: argparse.Namespace) -> int:
    if args.sources[0] in _READS:
        return _read_back(args)
    if args.output is None:
        raise UsageError("say where the tables go: -o OUT")
    if args.engine != "local" and not args.engine.startswith("dask://"):
        raise UsageError(f"--engine is local or dask://HOST:PORT, not {args.engine!r}")
    from ..survey import plan, survey

    wheels = plan(args.sources, package=args.package, versions=args.versions,
                  progress=lambda step: progress_line(step, "hashed", "wheels"))
    progress_done()
    done = survey(wheels, args.output, engine=args.engine, resume=args.resume, keep=args.keep,
                  kernels=args.kernels, jobs=args.jobs, retries=args.retries,
                  progress=lambda step: progress_line(step, "surveyed", "wheels"))
    progress_done()
    if args.json:
        dump({"out": done.out, "planned": done.planned, "skipped": done.skipped,
              "read": [{"filename": o.wheel.filename, "sha256": o.wheel.sha256,
                        "rows": dict(o.rows), "error": o.error, "kind": o.kind,
                        "attempts": o.attempts} for o in done.outcomes]})
    for o in done.outcomes:
        if o.error is not None:
            print(f"fatbinkit: note: {o}", file=sys.stderr)
    print(done, file=sys.stderr)
    return 0


def _read_back(args: argparse.Namespace) -> int:
    action, rest = args.sources[0], args.sources[1:]
    if len(rest) != 1:
        raise UsageError(f"survey {action} reads one survey: fatbinkit survey {action} OUT")
    given = [f for f, v in (("-o", args.output), ("--resume", args.resume),
                            ("--kernels", args.kernels), ("--keep", args.keep),
                            ("--versions", args.versions), ("--jobs", args.jobs))
             if v not in (None, False)]
    if args.engine != "local":
        given.append("--engine")
    if action == "summarize" and args.package is not None:
        given.append("--package")
    if given:
        raise UsageError(f"survey {action} does not take {', '.join(given)}")
    from ..survey_summary import regressions, summarize

    found: Any = summarize(rest[0]) if action == "summarize" else \
        regressions(rest[0], package=args.package)
    if args.json:
        dump(found.to_dict())
    else:
        print(found)
    return 0
