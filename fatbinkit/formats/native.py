"""The optional C extension (``fatbinkit/formats/_cubin.c``: the per-function walk of a cubin,
and a search of a buffer in place), or None where the install could not build it (no C
compiler) or ``FATBINKIT_PURE_PYTHON=1`` is set: every use of it has a pure-Python path that
gives the same, and the tests run both (tests/conftest.py's ``cubin_reader``)."""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType

__all__ = ["compiled"]

compiled: ModuleType | None = None
if not os.environ.get("FATBINKIT_PURE_PYTHON"):
    with contextlib.suppress(ImportError):  # an install without a C compiler
        compiled = importlib.import_module("._cubin", __package__)
