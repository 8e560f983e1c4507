"""Write an object embedding blobs for a target: ELF for Linux, COFF for Windows.

One front door over the two writers (:mod:`fatbinkit.formats.elf_writer`,
:mod:`fatbinkit.formats.coff`), which share their API: a target triple picks the format and the
machine, and no target means the running host's (``x86_64-pc-windows-msvc`` on 64-bit Windows,
``x86_64-linux-gnu`` on Linux). ``fatbinkit embed --target`` and :mod:`fatbinkit.aoti` use it.
:func:`write_hip_object` writes HIP's own form instead (``.hip_fatbin`` and its
``.hipFatBinSegment`` records, as clang writes them).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from .errors import InvalidArgumentError
from .formats import coff, elf_writer
from .formats.elf_writer import DEFAULT_ALIGN, Blob, Style, host_machine
from .infile import Content, FilePath

__all__ = ["TARGETS", "host_target", "is_windows", "write_hip_object", "write_object"]

#: target triple -> (the writer module, its machine name)
TARGETS: dict[str, tuple[ModuleType, str]] = {
    "x86_64-linux-gnu": (elf_writer, "x86_64"),
    "aarch64-linux-gnu": (elf_writer, "aarch64"),
    "x86_64-pc-windows-msvc": (coff, "x86_64"),
    "aarch64-pc-windows-msvc": (coff, "aarch64"),
}


def host_target() -> str:
    """The running host's triple in :data:`TARGETS`."""
    system = "pc-windows-msvc" if sys.platform == "win32" else "linux-gnu"
    return f"{host_machine()}-{system}"


def is_windows(target: str | None) -> bool:
    """Whether ``target`` (None: the host) gets COFF objects."""
    return _lookup(target)[0] is coff


def write_object(path: str | os.PathLike[str], blobs: Sequence[Blob], *, target: str | None = None,
                 style: Style = "aoti", align: int = DEFAULT_ALIGN) -> None:
    """:func:`fatbinkit.formats.elf_writer.write_object` or
    :func:`fatbinkit.formats.coff.write_object`, as ``target`` (None: the host) says."""
    writer, machine = _lookup(target)
    writer.write_object(Path(path), blobs, machine=machine, style=style, align=align)


def write_hip_object(path: str | os.PathLike[str], bundles: Sequence[Content | FilePath], *,
                     target: str | None = None) -> None:
    """:func:`fatbinkit.formats.elf_writer.write_hip_object` or
    :func:`fatbinkit.formats.coff.write_hip_object`, as ``target`` (None: the host) says:
    ``.hip_fatbin`` and ``.hipFatBinSegment`` as clang writes them for that target."""
    writer, machine = _lookup(target)
    writer.write_hip_object(Path(path), bundles, machine=machine)


def _lookup(target: str | None) -> tuple[ModuleType, str]:
    name = host_target() if target is None else target
    if name not in TARGETS:
        raise InvalidArgumentError(f"unknown target {name!r}; use one of {', '.join(TARGETS)}")
    return TARGETS[name]
