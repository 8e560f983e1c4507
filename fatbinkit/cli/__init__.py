"""The ``fatbinkit`` command line: a thin layer over the public API.

Exit status: 0 success, 1 failure (one ``fatbinkit: error: ...`` line on stderr), 2 usage error.
Each command group lives in its own module and adds its sub-commands through ``register``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence

from ..errors import FatbinkitError
from . import check, embed, fatbin, load, slim

_GROUPS = (embed, fatbin, check, slim, load)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fatbinkit",
        description="Build, embed, inspect, check and load GPU kernel binaries.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for group in _GROUPS:
        group.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the console entry point)."""
    if isinstance(sys.stdout, io.TextIOWrapper):  # file names that are not UTF-8 print as
        sys.stdout.reconfigure(errors="surrogateescape")  # their bytes, as ls and cuobjdump do
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except FatbinkitError as exc:
        # one line: the message, then (for JIT failures) the driver's log folded onto it
        message = " | ".join(" ".join(line.split()) for line in str(exc).splitlines() if line)
        print(f"fatbinkit: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `fatbinkit ls big.so | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return status


if __name__ == "__main__":
    sys.exit(main())
