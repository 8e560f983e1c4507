"""Argument parsing shared by the command groups."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..binary import ArchFilter, KernelFilter

_SIZE_RE = re.compile(r"^([0-9]{1,15})([KMGT]?)(i?B)?$", re.I)


def byte_size(text: str) -> int:
    """``4G``, ``512MiB``, ``1000000``: a size in bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 4G, 512M or 1000000")
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


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
        raise InvalidArgumentError(f"{where}expected {key}=PATH, got {spec!r}{hint}")
    return name, Path(path)


def arch_filter(text: str) -> ArchFilter:
    """``--arch`` of ls, extract and check: see :class:`fatbinkit.binary.ArchFilter`."""
    from ..binary import ArchFilter

    try:
        return ArchFilter.parse(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def kernel_filter(text: str) -> KernelFilter:
    """``--kernel PATTERN``: a glob, or ``re:REGEX``."""
    from ..binary import KernelFilter

    try:
        return KernelFilter.parse(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
