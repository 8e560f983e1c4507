"""The ``fatbinkit`` command line: a thin layer over the public API.

Exit status: 0 success; 1 failure: one ``fatbinkit: error: FILE: ...`` line on stderr naming the
file it is about; 2 usage error (an unknown option, a malformed ``KEY=PATH``, arch, size or number,
options that conflict): the sub-command's usage line, then ``fatbinkit COMMAND: error: ...``.
Each command group lives in its own module and adds its sub-commands through ``register``.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import FatbinkitError
from . import check, demo, diff, embed, fatbin, load, slim
from .args import CommandParser, HelpFormatter, UsageError, examples

_GROUPS = (embed, fatbin, check, diff, slim, load, demo)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fatbinkit",
        description="Build, embed, inspect, check and load GPU kernel binaries. "
        "`fatbinkit COMMAND --help` describes a command. Exit status: 0 success, 1 failure "
        "(one 'fatbinkit: error:' line naming the file), 2 usage error.",
        epilog=examples("fatbinkit ls libfoo.so", "fatbinkit check libfoo.so --arch sm_90",
                        "fatbinkit build -o k.fatbin --cubin sm_90=k.cubin --ptx sm_90=k.ptx"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fatbinkit {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=CommandParser)
    for group in _GROUPS:
        group.register(sub)
    for command in sub.choices.values():  # handlers report usage errors through their parser
        command.set_defaults(parser=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the console entry point)."""
    if isinstance(sys.stdout, io.TextIOWrapper):  # file names that are not UTF-8 print as
        sys.stdout.reconfigure(errors="surrogateescape")  # their bytes, as ls and cuobjdump do
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except UsageError as exc:
        args.parser.error(str(exc))  # exits 2
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
