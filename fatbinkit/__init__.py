"""fatbinkit: GPU kernel binaries (fatbin, cubin, PTX) built, embedded, inspected, loaded.

The front door is :func:`open`: ``fatbinkit.open("libfoo.so")`` returns a
:class:`~fatbinkit.binary.Binary` that lists, filters, summarises, extracts and checks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import FatbinkitError
from .formats.arch import Arch

if TYPE_CHECKING:
    from .binary import Binary

__all__ = ["Arch", "FatbinkitError", "open"]
__version__ = "0.1.0"


def open(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *,
         all: bool = False, name: str = "input") -> Binary:
    """Read a fatbin, cubin, PTX, ELF or PE file (a path, or its bytes): see
    :func:`fatbinkit.binary.open`. Imported on first use, so ``import fatbinkit`` stays light."""
    from .binary import open as open_binary

    return open_binary(source, all=all, name=name)
