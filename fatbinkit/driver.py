"""CUDA versions, NVIDIA's driver releases and the GPUs each drives: the names the README documents,
kept where they were. The tables and their sources live in :mod:`fatbinkit.vendors.cuda.driver`.
"""

from __future__ import annotations

from .decision import dotted
from .vendors.cuda import driver as _cuda
from .vendors.cuda.driver import *  # noqa: F403  (every name of _cuda.__all__)

__all__ = ["dotted"]
__all__ += _cuda.__all__
