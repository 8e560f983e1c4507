"""One exception hierarchy for everything fatbinkit refuses or fails to do.

Every error a user can provoke with bad input derives from :class:`FatbinkitError`; messages carry
the numbers (offset, size, limit) needed to find the problem without a debugger.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import difflib
import os
from collections.abc import Iterable, Iterator
from typing import TypeVar

__all__ = [
    "CompatibilityError",
    "CudaError",
    "CudaUnavailableError",
    "DecompressionError",
    "EmptiedError",
    "FatbinkitError",
    "FormatError",
    "InjectError",
    "InputError",
    "InvalidArgumentError",
    "JitError",
    "NoBinaryForGpuError",
    "NoDeviceCodeError",
    "NotFoundError",
    "OutputError",
    "ToolError",
    "ToolNotFoundError",
    "TruncatedError",
    "UnsupportedError",
    "UnsupportedPtxVersionError",
    "cuda_error_class",
    "naming",
    "option",
    "spelled_for_cli",
]


class FatbinkitError(Exception):
    """Root of every error raised by fatbinkit."""


E = TypeVar("E", bound="FatbinkitError")


def naming(error: E, path: os.PathLike[str] | str) -> E:
    """A copy of ``error`` whose message starts with ``path`` (``k.so: .nv_fatbin: bad magic``):
    the same class and attributes (``offset``, ``code``...), for ``raise naming(e, path) from e``.
    """
    named = copy.copy(error)
    named.args = (f"{os.fspath(path)}: {error}", *error.args[1:])
    return named


#: how :func:`option` spells an option: "python" (``allow_empty=True``) or "cli" (``--allow-empty``)
_SPELLING: contextvars.ContextVar[str] = contextvars.ContextVar("fatbinkit_spelling",
                                                                default="python")
#: the command line's name for an option where it is not the keyword argument's, dashed
_FLAGS = {"archs": "for", "require_archs": "require-arch", "require_sass": "require-sass-arch",
          "max_size": "max-size"}


def option(name: str, value: object = True) -> str:
    """An option as the caller gave it, for an error message or a report's advice: the keyword
    argument ``allow_empty=True`` when the API is called, the flag ``--allow-empty`` inside the
    command line (:func:`spelled_for_cli`). ``value`` True is a flag without a value; an
    upper-case string is a placeholder (``option("max_decompressed", "SIZE")``)."""
    if _SPELLING.get() == "cli":
        flag = "--" + _FLAGS.get(name, name.replace("_", "-"))
        return flag if value is True else f"{flag} {value}"
    shown = value if isinstance(value, str) and value.isupper() else repr(value)
    return f"{name}={shown}"


@contextlib.contextmanager
def spelled_for_cli() -> Iterator[None]:
    """Within the block (the command line's handlers), :func:`option` names flags. A context
    variable: other threads, and other calls of the API, keep the Python spelling."""
    token = _SPELLING.set("cli")
    try:
        yield
    finally:
        _SPELLING.reset(token)


class InvalidArgumentError(FatbinkitError, ValueError):
    """A caller-supplied value is not acceptable (bad symbol name, duplicate, unknown arch...)."""


class NotFoundError(FatbinkitError, KeyError):
    """A name (a function, a kernel) is not in the object asked; a :class:`KeyError` too, so
    ``except KeyError`` keeps working. ``name`` is what was asked, ``close`` the nearest names."""

    def __init__(self, message: str, *, name: str | None = None,
                 close: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.name = name
        self.close = close

    def __str__(self) -> str:  # KeyError's own str() would quote the message
        return str(self.args[0]) if self.args else ""

    @classmethod
    def among(cls, what: str, name: str, names: Iterable[str], where: str = "") -> NotFoundError:
        """``no kernel 'axpy' in k.fatbin; close: axpy2, saxpy`` (or the first few names held)."""
        known = list(dict.fromkeys(names))
        close = tuple(difflib.get_close_matches(name, known, n=3, cutoff=0.6))
        inside = f" in {where}" if where else ""
        if close:
            hint = f"; close: {', '.join(close)}"
        elif known:
            more = f", ... ({len(known)} in all)" if len(known) > 5 else ""
            hint = f"; it has {', '.join(known[:5])}{more}"
        else:
            hint = f"; it has no {what}s"
        return cls(f"no {what} {name!r}{inside}{hint}", name=name, close=close)


class InputError(FatbinkitError, OSError):
    """An input file cannot be read (missing, a directory, no permission)."""


class OutputError(FatbinkitError, OSError):
    """An output cannot be written (missing folder, no permission); nothing partial is left."""


class FormatError(FatbinkitError):
    """Bytes do not follow the expected layout.

    ``offset`` is where in the input the problem was seen, when known.
    """

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        if offset is not None:
            message = f"{message} (at offset {offset:#x})"
        super().__init__(message)
        self.offset = offset


class NoDeviceCodeError(FormatError):
    """A wheel, folder or file holds no device code (no binary, or binaries without any): a
    fact about the input rather than a fault, which a survey records as such."""


class TruncatedError(FormatError):
    """A header, table or payload extends past the end of its input."""


class DecompressionError(FormatError):
    """A compressed payload is corrupt, or inflates to a size other than recorded."""


class UnsupportedError(FatbinkitError):
    """The input is valid, but this operation cannot handle it safely (refused, not guessed)."""


class ToolNotFoundError(FatbinkitError):
    """An NVIDIA tool or library is needed and not installed; the message names the package."""


class ToolError(FatbinkitError):
    """An external tool ran and failed; the message carries its command line and stderr."""


class InjectError(FatbinkitError):
    """The native editor (LIEF) crashed, ran out of its memory or time limit, or failed in an
    unexpected way, in its own process: the caller's process and files are untouched."""


class CompatibilityError(FatbinkitError):
    """No image in a set can load on the requested device/driver; the message says why."""


class EmptiedError(CompatibilityError):
    """Pruning would leave a library no image at all: no requested arch loads any of its
    modules (``prune`` writes it only when allowed to empty it). ``reason`` says why, without
    the advice (what a wheel's error lists per library)."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class CudaError(FatbinkitError):
    """A CUDA driver call failed; ``code`` is the CUresult name, e.g. ``CUDA_ERROR_INVALID_PTX``."""

    def __init__(self, message: str, *, code: str | None = None, log: str = "") -> None:
        text = f"{code}: {message}" if code else message
        if log:
            text = f"{text}\n{log}"
        super().__init__(text)
        self.code = code
        self.log = log


class CudaUnavailableError(CudaError):
    """cuda-python, the driver library or a GPU is missing."""


class NoBinaryForGpuError(CudaError):
    """CUDA_ERROR_NO_BINARY_FOR_GPU, with the archs present and the device's."""


class UnsupportedPtxVersionError(CudaError):
    """CUDA_ERROR_UNSUPPORTED_PTX_VERSION, with the PTX ISA and the driver it needs."""


class JitError(CudaError):
    """CUDA_ERROR_INVALID_PTX or another JIT failure; ``log`` holds the JIT error log."""


#: CUresult names that map to a more specific exception than :class:`CudaError`
_CUDA_ERROR_CLASSES: dict[str, type[CudaError]] = {
    "CUDA_ERROR_NO_BINARY_FOR_GPU": NoBinaryForGpuError,
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": UnsupportedPtxVersionError,
    "CUDA_ERROR_INVALID_PTX": JitError,
    "CUDA_ERROR_JIT_COMPILER_NOT_FOUND": JitError,
    "CUDA_ERROR_INVALID_IMAGE": JitError,
    "CUDA_ERROR_NO_DEVICE": CudaUnavailableError,
    "CUDA_ERROR_NOT_INITIALIZED": CudaUnavailableError,
    "CUDA_ERROR_INSUFFICIENT_DRIVER": CudaUnavailableError,
}


def cuda_error_class(name: str) -> type[CudaError]:
    """The exception class for the CUresult ``name`` (``"CUDA_ERROR_INVALID_PTX"`` ->
    :class:`JitError`); :class:`CudaError` itself for a name with no more specific class."""
    return _CUDA_ERROR_CLASSES.get(name, CudaError)
