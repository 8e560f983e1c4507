"""The ``fatbinkit`` command line: a thin layer over the public API.

Exit status, the same for every command (README "Exit status", each command's ``--help``):
0 success; 1 the verdict is "no" (``check``: an arch fails; ``gate``: a rule is broken;
``diff --exit-code``: something changed); 2 usage error (an unknown option, a malformed
``KEY=PATH``, arch, size or number, options that conflict): the sub-command's usage line, then
``fatbinkit COMMAND: error: ...``; 3 the command could not do its work (any
:class:`~fatbinkit.errors.FatbinkitError`: an input unreadable, malformed or without device
code, an output not writable, a tool or the driver failed): one ``fatbinkit: error: FILE: ...``
line on stderr naming the file it is about; 130 interrupted; 141 stdout closed early.
Each command group lives in its own module and adds its sub-commands through ``register``; a
command imports only its own group (:data:`_GROUPS`).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
from collections.abc import Sequence

from .. import __version__
from ..errors import FatbinkitError, spelled_for_cli
from .args import (
    EXIT_BROKEN_PIPE,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    CommandParser,
    HelpFormatter,
    UsageError,
    examples,
    exit_status,
)

# Each group (a module of this package, in the order `fatbinkit --help` lists them) and the
# commands it registers. `fatbinkit COMMAND ...` imports only COMMAND's group, not the others and
# what they import (embed's object writers, the report's, the survey's...): 20 ms of each
# command's start, a tenth of what a check of libtorch_cuda.so spends before reading. Help, a
# version or an unknown command builds the whole parser. tests/test_cli_contract.py holds this
# table to what the groups register.
_GROUPS: dict[str, tuple[str, ...]] = {
    "embed": ("embed", "inject"),
    "fatbin": ("ls", "extract", "build"),
    "check": ("check",),
    "diff": ("diff", "gate"),
    "report": ("report",),
    "survey": ("survey",),
    "slim": ("prune", "recompress"),
    "load": ("load",),
    "demo": ("demo",),
}
# The commands that read and print only. Run as the process's own command (``main()`` without
# ``argv``: the console script, ``python -m fatbinkit``), each leaves through ``os._exit`` once
# its output is flushed, as mypy's does: the hundreds of thousands of records it made are not
# freed one by one (0.18 s of a diff of two libtorch_cuda.so). By then its worker pools are
# joined, its files written and closed; no exit handler of theirs has anything left to do.
_LEAVE_AT_ONCE = frozenset({"ls", "check", "diff", "gate"})
# When each command exits 1 (args.EXIT_FAILS); the others never do.
_FAILS = {
    "check": "an arch fails (with --strict: also a module that cannot load for it)",
    "diff": "with --exit-code: something changed (after the filters)",
    "gate": "a rule is broken or the baseline regressed (each violation printed)",
    "demo": "a step of the demo failed",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command``'s group alone when it names one (the
    commands of the other groups are then unknown to it)."""
    parser = argparse.ArgumentParser(
        prog="fatbinkit",
        description="Build, embed, inspect, check and load GPU kernel binaries. "
        "`fatbinkit COMMAND --help` describes a command. Exit status: 0 success, 1 the verdict "
        "is no (check: an arch fails; gate: a rule is broken; diff --exit-code: a change), "
        "2 usage error, 3 could not do it (an input unreadable or malformed, an output not "
        "writable: one 'fatbinkit: error:' line naming the file), 130 interrupted.",
        epilog=examples("fatbinkit ls libfoo.so", "fatbinkit check libfoo.so --arch sm_90",
                        "fatbinkit build -o k.fatbin --cubin sm_90=k.cubin --ptx sm_90=k.ptx"),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fatbinkit {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=CommandParser)
    own = [g for g, commands in _GROUPS.items() if command in commands]
    for group in own or _GROUPS:
        importlib.import_module(f"{__name__}.{group}").register(sub)
    for name, each in sub.choices.items():  # handlers report usage errors through their
        each.set_defaults(parser=each)  # parser; every --help ends with the exit statuses
        each.epilog = exit_status(_FAILS.get(name)) + "\n" + (each.epilog or "")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the console entry point)."""
    if isinstance(sys.stdout, io.TextIOWrapper):  # file names that are not UTF-8 print as
        sys.stdout.reconfigure(errors="surrogateescape")  # their bytes, as ls and cuobjdump do
    given = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(given[0] if given else None)  # the command, where it comes first
    args = parser.parse_args(given)
    try:
        with spelled_for_cli():  # advice in errors and reports names flags, not keywords
            status: int = args.func(args)
        if argv is None and args.command in _LEAVE_AT_ONCE:
            sys.stdout.flush()  # a closed pipe raises here, and is handled below
            sys.stderr.flush()
            os._exit(status)
    except UsageError as exc:
        args.parser.error(str(exc))  # exits 2
    except FatbinkitError as exc:
        # one line: the message, then (for JIT failures) the driver's log folded onto it
        message = " | ".join(" ".join(line.split()) for line in str(exc).splitlines() if line)
        print(f"fatbinkit: error: {message}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `fatbinkit ls big.so | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":
    sys.exit(main())
