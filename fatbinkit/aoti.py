"""Drop-in replacements for PyTorch AOTInductor's kernel embedding.

AOTInductor (``torch/_inductor/codecache.py``) turns each cubin into an object with three
subprocesses: ``ld -r -b binary``, ``objcopy --rename-section .data=.rodata,...`` and ``objcopy
--redefine-sym`` to ``__<kernel>_{start,end,size}``. These functions write the same symbols
directly, for the host machine, with no ld or objcopy and nothing lost to path mangling.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .elfobj import DEFAULT_ALIGN, Blob, write_object

__all__ = [
    "convert_cubin_to_obj",
    "convert_cubins_to_obj",
]


def convert_cubin_to_obj(
    cubin_file: str | os.PathLike[str],
    kernel_name: str,
    ld: str | None = None,
    objcopy: str | None = None,
) -> str:
    """Write ``<cubin_file>.o`` embedding the cubin as ``__<kernel_name>_{start,end,size}``.

    Same arguments and return value (the object's path) as AOTInductor's function; ``ld`` and
    ``objcopy`` are accepted for that and ignored. The blob is 16-byte aligned in ``.rodata``.
    """
    del ld, objcopy  # same signature as AOTInductor's; no tool is run
    obj_file = os.fspath(cubin_file) + ".o"
    write_object(Path(obj_file), [Blob(kernel_name, Path(cubin_file))])
    return obj_file


def convert_cubins_to_obj(
    kernels: Iterable[tuple[str | os.PathLike[str], str]],
    obj_file: str | os.PathLike[str],
    *,
    align: int = DEFAULT_ALIGN,
) -> str:
    """Write one object embedding every ``(cubin path, kernel name)`` pair; return its path.

    The batch form of :func:`convert_cubin_to_obj`: one file to link instead of one per kernel,
    written in one pass (about the cost of copying the cubins).
    """
    write_object(
        Path(obj_file), [Blob(name, Path(path), align) for path, name in kernels], align=align
    )
    return os.fspath(obj_file)
