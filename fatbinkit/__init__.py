"""fatbinkit: GPU kernel binaries (fatbin, cubin, PTX) built, embedded, inspected, loaded.

The front door is :func:`open`: ``fatbinkit.open("libfoo.so")`` returns a
:class:`~fatbinkit.binary.Binary` that lists, filters, summarises, extracts and checks.

``import fatbinkit`` stays light (no compression codec, no progress bar, no CUDA): each
submodule is imported on first use, so ``fatbinkit.slim.prune(...)`` or
``fatbinkit.collection.check(...)`` work after ``import fatbinkit`` alone.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import FatbinkitError
from .formats.arch import Arch

if TYPE_CHECKING:
    from types import ModuleType

    from . import aoti as aoti
    from . import binary as binary
    from . import build as build
    from . import collection as collection
    from . import compat as compat
    from . import diagnose as diagnose
    from . import diff as diff
    from . import driver as driver
    from . import duplicates as duplicates
    from . import embed as embed
    from . import errors as errors
    from . import formats as formats
    from . import gate as gate
    from . import inject as inject
    from . import outfile as outfile
    from . import parallel as parallel
    from . import progress as progress
    from . import runtime as runtime
    from . import scan as scan
    from . import slim as slim
    from . import triton as triton
    from . import wheel as wheel
    from .binary import Binary

__all__ = ["Arch", "FatbinkitError", "open"]
__version__ = "0.1.0"

#: the submodules ``fatbinkit.NAME`` imports on first access (PEP 562)
_SUBMODULES = frozenset({
    "aoti", "binary", "build", "collection", "compat", "diagnose", "diff", "driver", "duplicates",
    "embed",
    "errors", "formats", "gate", "inject", "outfile", "parallel", "progress", "runtime", "scan",
    "slim", "triton", "wheel",
})


def open(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *,
         all: bool = False, name: str = "input", everywhere: bool = False) -> Binary:
    """Read a fatbin, cubin, PTX, ELF or PE file (a path, or its bytes): see
    :func:`fatbinkit.binary.open`. Imported on first use, so ``import fatbinkit`` stays light."""
    from .binary import open as open_binary

    return open_binary(source, all=all, name=name, everywhere=everywhere)


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBMODULES})


if not TYPE_CHECKING:  # mypy sees the imports above: a typo stays an error there

    def __getattr__(name: str) -> ModuleType:
        """``fatbinkit.slim`` and the other submodules in ``_SUBMODULES``, imported when first
        asked for (the import binds it here: later lookups do not come back)."""
        if name in _SUBMODULES:
            import importlib

            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
