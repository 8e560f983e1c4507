"""Explain why an image did not (or would not) load on a device, in the words the user needs.

Turns a bare CUresult into a sentence: the images the buffer holds against the device's arch, the
PTX ISA against what the driver can JIT, the JIT log. Also the optional preflight that refuses an
image the compatibility engine says cannot load, before the driver is called.
"""

from __future__ import annotations

from typing import Protocol

from .compat import UNSUPPORTED_PTX, Decision, predict_load
from .driver import DriverLike
from .errors import CompatibilityError, CudaError, FatbinkitError, cuda_error_class
from .formats.arch import Arch, ArchLike
from .formats.ptx import max_ptx_isa_for_driver, min_driver_for_ptx_isa

__all__ = [
    "explain_load_error",
    "preflight_check",
]


class _Device(Protocol):
    """What an explanation reads of a device. The loader's ``Device`` has these; a protocol, so
    that this module does not import the loader, which imports it."""

    @property
    def name(self) -> str: ...

    @property
    def arch(self) -> Arch: ...

    @property
    def driver_version(self) -> tuple[int, int]: ...


def _version(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def explain_load_error(code: str, image: bytes | memoryview, device: _Device,
                       log: str) -> CudaError:
    """Build the library's exception for a failed load of ``image`` on ``device``."""
    cls = cuda_error_class(code)
    where = (f"cannot load on {device.name} ({device.arch.sm}, driver for CUDA "
             f"{_version(device.driver_version)})")
    try:
        decision = predict_load(image, device.arch, device.driver_version)
    except FatbinkitError as exc:
        return cls(f"{where}; the image is unreadable as device code: {exc}", code=code, log=log)
    held = ", ".join(v.image.name for v in decision.verdicts) or "nothing loadable"
    parts = [where, f"image holds {held}"]
    if code == UNSUPPORTED_PTX:
        newest = max_ptx_isa_for_driver(device.driver_version)
        for v in decision.verdicts:
            isa = v.image.ptx_version
            if isa is None or (newest is not None and isa <= newest):
                continue
            try:
                needs = f"a driver for CUDA {_version(min_driver_for_ptx_isa(isa))} or newer"
            except FatbinkitError:
                needs = "a driver newer than any CUDA release fatbinkit knows"
            limit = f"; this one JITs PTX ISA up to {_version(newest)}" if newest else ""
            parts.append(f"PTX ISA {_version(isa)} needs {needs}{limit}")
    elif decision.reason:
        parts.append(decision.reason)
    return cls("; ".join(parts), code=code, log=log)


def preflight_check(image: bytes | memoryview, arch: ArchLike, driver: DriverLike) -> Decision:
    """Return the compatibility engine's decision, raising CompatibilityError when no image of
    ``image`` can load on ``arch`` with ``driver`` (the driver is then never called). ``arch``
    and ``driver`` take any form :func:`~fatbinkit.compat.decide` takes (``"sm_90"``,
    ``"12.4"``, ``12040``...)."""
    decision = predict_load(image, arch, driver)
    if not decision.loadable:
        raise CompatibilityError(
            f"refused before loading: {decision.error or 'no image fits'}: {decision.reason}"
        )
    return decision
