"""``python -m fuzz``: run fuzz campaigns, print what they saw, keep reproducers of failures.

Exit status 0 when no target failed, 1 otherwise. ``--replay FILE`` runs one reproducer in this
process, so its traceback (or the crash) shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .runner import Report, campaign, replay
from .seeds import corpus
from .targets import TARGETS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__.splitlines()[0])
    p.add_argument("--target", action="append", choices=sorted(TARGETS),
                   help="a target (repeat; default: all)")
    p.add_argument("--seconds", type=float, help="time per target")
    p.add_argument("--inputs", type=int, help="inputs per target")
    p.add_argument("--seed", type=int, default=0, help="campaign seed (mutant i is fixed by it)")
    p.add_argument("--jobs", type=int, default=1, help="targets run at once")
    p.add_argument("--out", type=Path, default=Path("out/fuzz"), help="reproducers go here")
    p.add_argument("--json", type=Path, help="write the reports here")
    p.add_argument("--replay", type=Path, metavar="FILE", help="run one reproducer")
    args = p.parse_args(argv)
    names = args.target or sorted(TARGETS)
    if args.replay:
        if len(names) != 1:
            p.error("--replay needs one --target")
        print(replay(TARGETS[names[0]], args.replay))
        return 0
    if args.seconds is None and args.inputs is None:
        p.error("give --seconds or --inputs")
    seeds = corpus()
    tty = sys.stderr.isatty()

    def show(r: Report) -> None:
        if tty:
            print(f"\r  {r.target}: {r.inputs} inputs, {r.rate:.0f}/s, "
                  f"{len(r.failures)} failure(s)   ", end="", file=sys.stderr, flush=True)

    def run(name: str) -> Report:
        t = TARGETS[name]
        pool = [s for family in t.families for s in seeds[family]]
        r = campaign(t, pool, args.out, seed=args.seed, inputs=args.inputs,
                     seconds=args.seconds, progress=show)
        print(("\r" if tty else "") + str(r), flush=True)
        for f in r.failures:
            print(f"    {f}", flush=True)
        return r

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        reports = list(pool.map(run, names))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.to_dict() for r in reports], indent=2) + "\n")
    return 1 if any(r.failures for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
