"""Argument parsing shared by the command groups.

A malformed command line is a usage error: the sub-command's usage line, then
``fatbinkit COMMAND: error: ...``, exit status 2. Argument types raise :class:`UsageError` (an
``argparse.ArgumentTypeError``, so argparse reports it with the option's name); handlers raise it
for what only the parsed arguments together show, and :func:`fatbinkit.cli.main` reports it the
same way through the sub-command's parser.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..driver import FUTURE, CudaVersion, as_device, parse_driver
from ..errors import InvalidArgumentError
from ..formats.arch import Arch

if TYPE_CHECKING:
    from ..binary import ArchFilter, KernelFilter

T = TypeVar("T")

# Exit statuses, the same for every command (README "Exit status"), so that CI tells a verdict
# from a run that could not read its input. As diff(1), cmp(1) and `git diff --exit-code`: 0
# nothing to report, 1 the answer is "no"; as argparse, 2 a usage error; then 3 for trouble (the
# 2 of diff(1), taken by usage here), and the shell's 128 + signal for SIGINT and SIGPIPE.
EXIT_OK = 0
EXIT_FAILS = 1  # check: an arch fails; gate: a rule is broken; diff --exit-code: a change
EXIT_USAGE = 2
EXIT_ERROR = 3  # any FatbinkitError: an input unreadable, malformed or without device code...
EXIT_INTERRUPTED = 130  # 128 + SIGINT (Ctrl-C)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (`fatbinkit ls big.so | head`)
_SIZE_RE = re.compile(r"^([0-9]{1,15})([KMGT]?)(i?B)?$", re.I)


class UsageError(argparse.ArgumentTypeError):
    """The command line is malformed: reported with the sub-command's usage, exit status 2."""


def byte_size(text: str) -> int:
    """``4G``, ``512MiB``, ``1000000``: a size in bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a size like 4G, 512M or 1000000")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


def alignment(text: str) -> int:
    """A power of two, e.g. ``16`` (a blob alignment)."""
    try:
        value = int(text, 0)
    except ValueError:
        value = 0
    if value <= 0 or value & (value - 1):
        raise UsageError(f"{text!r} is not a power of two like 1, 8 or 16")
    return value


def _usage(parse: Callable[[str], T], text: str) -> T:
    """``parse(text)``, its InvalidArgumentError turned into a usage error."""
    try:
        return parse(text)
    except InvalidArgumentError as e:
        raise UsageError(str(e)) from e


def arch(text: str) -> Arch:
    """The arch of a GPU (``check --arch``, ``prune --for``, ``gate --require-arch``):
    ``sm_90``, ``sm_90a``, ``compute_100f``, ``90``, one NVIDIA's device table knows, or
    ``future:sm_130`` (:func:`fatbinkit.driver.as_device`); anything else is a usage error."""
    return _usage(as_device, text)


def gpu(text: str, what: str = "device") -> Any:
    """A GPU (``check --arch``, ``gate --require-arch``): what a vendor names one by
    (:func:`fatbinkit.vendors.device`: CUDA's ``sm_90``, ``90``, ``future:sm_130``, the suffix
    dropped); anything else is a usage error, in CUDA's words."""
    from .. import vendors

    return _usage(lambda t: vendors.device(t, what)[1], text)


def image_arch(text: str) -> Arch:
    """The arch label of an image (``build --cubin sm_90=k.cubin``): any name
    :meth:`~fatbinkit.formats.arch.Arch.parse` reads."""
    return _usage(Arch.parse, text)


def driver(text: str) -> CudaVersion:
    """A driver: its CUDA version (``13.0``) or driver version (``580.65.06``)."""
    return _usage(parse_driver, text)


def positive(text: str) -> int:
    """A whole number from 1 up (``--top N``)."""
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"expected a positive number, got {text!r}")
    return int(text)


def add_everywhere(p: argparse.ArgumentParser) -> None:
    """``--everywhere``: the deep scan's images too (:func:`fatbinkit.scan.scan`)."""
    p.add_argument("--everywhere", action="store_true",
                   help="also device code outside .nv_fatbin that cuobjdump does not list: "
                   "fatbin containers and compressed or bare cubins in any other section, which "
                   "the library loads itself (cuBLASLt, cuFFT, cuRAND); marked 'hidden' "
                   "(docs/hidden.md)")


def add_budget(p: argparse.ArgumentParser) -> None:
    """``--max-decompressed SIZE``: the decompression budget of the command."""
    p.add_argument("--max-decompressed", type=byte_size, metavar="SIZE",
                   help="bytes this command may decompress in total (default: 64x the input "
                   "+ 256 MiB, a bomb guard); e.g. 16G for a trusted input")


def key_path(spec: str, key: str, *, option: str = "", example: str = "") -> tuple[str, Path]:
    """Split a ``KEY=PATH`` argument (``NAME=PATH``, ``ARCH=PATH``); both halves must be given."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        where = f"{option} " if option else ""
        hint = f", e.g. {example}" if example else ""
        raise UsageError(f"{where}expected {key}=PATH, got {spec!r}{hint}")
    return name, Path(path)


def arch_filter(text: str) -> ArchFilter:
    """``--arch`` of ls, extract and diff: see :class:`fatbinkit.binary.ArchFilter`; it must
    name a GPU a vendor knows, as for :func:`gpu` (a typo would silently match nothing),
    ``future:`` before the name accepts one the device table does not know."""
    from .. import vendors
    from ..binary import ArchFilter

    spelled = text.strip()
    if spelled.lower().startswith(FUTURE):
        spelled = spelled[len(FUTURE):]
    else:
        _usage(lambda t: vendors.device(t, "device"), text)
    return _usage(ArchFilter.parse, spelled)


def kernel_filter(text: str) -> KernelFilter:
    """``--kernel PATTERN``: a glob, or ``re:REGEX``."""
    from ..binary import KernelFilter

    return _usage(KernelFilter.parse, text)


def image_arg(option: str, example: str) -> Callable[[str], tuple[Arch, Path]]:
    """The argument type of ``build --cubin``/``--ptx ARCH=PATH``: a cubin holds SASS, so its
    label is ``sm_XY`` (or ``XY``), never a virtual ``compute_XY``; neither takes ``lto_XY``.
    Whether the label fits the file is :func:`fatbinkit.build.check_label`'s question."""

    def parse(spec: str) -> tuple[Arch, Path]:
        label, path = key_path(spec, "ARCH", example=example)
        word = label.strip().lower()
        wrong = ("compute_", "lto_") if option == "--cubin" else ("lto_",)
        if word.startswith(wrong):
            kind = "a virtual (PTX) arch" if word.startswith("compute_") else "an LTO-IR arch"
            right = ("sm_" if option == "--cubin" else "compute_") + word.split("_", 1)[1]
            raise UsageError(f"{label} is {kind}, not the arch of a {option[2:]}: "
                             f"give {right}={path}")
        return image_arch(label), path

    return parse


def exit_status(fails: str | None) -> str:
    """The ``exit status:`` epilog paragraph of a command; ``fails`` says when it exits 1 (None:
    never)."""
    rows = [(EXIT_OK, "success")]
    if fails:
        rows.append((EXIT_FAILS, fails))
    rows += [(EXIT_USAGE, "usage error (bad option or value): the usage line, then the error"),
             (EXIT_ERROR, "could not do it: an input unreadable, malformed or without device "
              "code, an output not writable, a tool or the driver failed (one "
              "'fatbinkit: error:' line naming the file)"),
             (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
             (EXIT_BROKEN_PIPE, "stdout closed early (`| head`)")]
    return "exit status:\n" + "".join(
        textwrap.fill(text, 79, initial_indent=f"  {code:<3}  ", subsequent_indent=" " * 7) + "\n"
        for code, text in rows)


def examples(*lines: str) -> str:
    """An ``examples:`` epilog (kept as written by :class:`HelpFormatter`)."""
    return "examples:\n" + "".join(f"  {line}\n" for line in lines)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Wraps one-line paragraphs (descriptions) to the terminal and keeps paragraphs written on
    several lines (the ``examples:`` epilog) as they are."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        raw = super()._fill_text
        wrap = argparse.HelpFormatter._fill_text
        return "\n\n".join(raw(p, width, indent) if "\n" in p.strip("\n") else
                           wrap(self, p, width, indent) for p in text.split("\n\n"))


class CommandParser(argparse.ArgumentParser):
    """A sub-command's parser: it reports arguments it does not know itself, with its own usage
    line (argparse leaves them to the top-level parser, whose usage says nothing of the
    sub-command's options)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras
