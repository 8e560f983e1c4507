"""The neutral records of what a runtime does with device code: an image (:class:`ImageInfo`), a
runtime floor it needs (:class:`Floor`), why one image can or cannot serve a device
(:class:`Verdict`), the pick of one load (:class:`Decision`), and a module, the images a runtime
chooses among in one load (:class:`~fatbinkit.imagesets.ImageSet`).

Which image a device loads and what it needs are the vendor's rules (:mod:`fatbinkit.vendors`;
CUDA's: :mod:`fatbinkit.vendors.cuda.loading`); these records are what the rules answer with.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .driver import (
    MINOR_COMPAT_DRIVER,
    CudaVersion,
    Driver,
    Release,
    cuda_name,
    dotted,
    driver_name,
    drivers_text,
    release_for,
    version_tuple,
)
from .errors import InvalidArgumentError
from .formats.arch import Arch
from .formats.ptx import NEWEST_KNOWN_CUDA

__all__ = [
    "FAILED",
    "INVALID_IMAGE",
    "INVALID_PTX",
    "LOADS",
    "NOT_FOUND",
    "NO_BINARY",
    "NO_DEVICE",
    "PTX",
    "RESTRICTED",
    "SASS",
    "UNSUPPORTED_PTX",
    "Decision",
    "Floor",
    "ImageInfo",
    "Verdict",
    "highest_release",
    "module_outcome",
]

SASS = "sass"
PTX = "ptx"

NO_BINARY = "CUDA_ERROR_NO_BINARY_FOR_GPU"
UNSUPPORTED_PTX = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
INVALID_PTX = "CUDA_ERROR_INVALID_PTX"
INVALID_IMAGE = "CUDA_ERROR_INVALID_IMAGE"
NO_DEVICE = "CUDA_ERROR_NO_DEVICE"
NOT_FOUND = "CUDA_ERROR_NOT_FOUND"



@dataclass(frozen=True)
class ImageInfo:
    """One loadable image: SASS or PTX for an arch; ``kernels`` None when not known.

    ``arch`` is what the driver selects by (a fatbin entry's header); ``target`` is set when a PTX
    text's own ``.target`` says more than that label (Triton's ``sm_90a`` PTX stored as plain
    ``compute_90``): the JIT compiles for ``target``. ``toolkit`` is the CUDA release that built
    a cubin (None: not recorded), ``abi_version`` its ELF ABI, ``compression`` the fatbin entry's
    codec, ``variables`` whether the image declares module-scope variables the host can reach,
    ``host`` the OS of the file it is in (:data:`~fatbinkit.driver.LINUX` for ELF,
    :data:`~fatbinkit.driver.WINDOWS` for PE/COFF, None for a bare fatbin/cubin/PTX): whose
    driver numbers its floors name.
    """

    kind: str
    arch: Arch
    ptx_version: tuple[int, int] | None = None
    label: str = ""
    kernels: frozenset[str] | None = field(default=None, repr=False)  # thousands, at times
    target: Arch | None = None
    toolkit: CudaVersion | None = None
    abi_version: int | None = None
    compression: str | None = None
    variables: bool = False
    unread: str = ""  # why a cubin's ELF could not be read (its kernels and toolkit unknown)
    offset: int | None = None  # file offset of the fatbin entry header, when read from a file
    host: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in (SASS, PTX):
            raise InvalidArgumentError(f"image kind {self.kind!r} is not 'sass' or 'ptx'")
        if self.kind == PTX and self.ptx_version is None:
            raise InvalidArgumentError("a PTX image needs its PTX ISA version")

    @property
    def arch_name(self) -> str:
        """``sm_90a`` for SASS, ``compute_90a`` for PTX: what the image's header says."""
        return self.arch.sm if self.kind == SASS else self.arch.compute

    @property
    def name(self) -> str:
        """``sm_90a`` for SASS, ``compute_90a (PTX 8.4)`` for PTX."""
        if self.kind == SASS:
            return self.arch.sm
        assert self.ptx_version is not None
        target = f", .target {self.target.sm}" if self.target else ""
        return f"{self.arch.compute} (PTX {self.ptx_version[0]}.{self.ptx_version[1]}{target})"

    def __str__(self) -> str:
        built = f", built by CUDA {dotted(self.toolkit)}" if self.toolkit else ""
        codec = f", {self.compression}" if self.compression else ""
        return f"{'SASS' if self.kind == SASS else 'PTX'} {self.name}{built}{codec}"


@dataclass(frozen=True)
class Floor:
    """A minimum CUDA version the driver must implement for an image (or a device) to load.

    ``what`` names the rule: "device" (the driver drives this GPU), "toolkit" (the cubin's
    producer), "variant" (``a``/``f`` targets), "compression", "ptx-isa". ``need`` None means
    newer than any release known here. ``error`` is the CUresult a driver below the floor gives.
    ``built`` is the toolkit of a ``family`` floor's cubin, ``host`` the input's OS
    (:attr:`ImageInfo.host`): whose driver numbers :attr:`release` gives.
    """

    what: str
    need: CudaVersion | None
    why: str
    error: str
    family: bool = False  # any driver of need's major (minor-version compatibility) or newer
    built: CudaVersion | None = None
    host: str | None = None

    @property
    def release(self) -> Release | None:
        """The minimum driver versions that meet the floor: Table 3's row for :attr:`need`, or
        for a family floor whose cubin is newer than its major's first release, the minor-version
        compatibility row (Table 2: a CUDA 11.7 cubin needs 450.80.02, not the 11.0 driver)."""
        if self.need is None:
            return None
        compat = MINOR_COMPAT_DRIVER.get(self.need[0]) if self.family else None
        if compat is not None and self.built is not None and self.built >= compat.cuda:
            return Release(self.need, compat.linux, compat.windows)
        return release_for(self.need)

    @property
    def needs(self) -> str:
        """``CUDA 12.9 (Linux driver >= 575.51.03)``, or for a family ``a CUDA 13.x driver
        (Linux >= 580.65.06)``."""
        if self.need is None:
            return "a CUDA release newer than any known"
        if self.family:
            rel = self.release
            numbers = f" ({drivers_text(rel, self.host, '')})" if rel else ""
            return f"a CUDA {self.need[0]}.x driver{numbers}"
        return cuda_name(self.need, self.host)

    def met_by(self, driver: CudaVersion) -> bool:
        """Whether ``driver`` meets the floor: its CUDA version, and for a :class:`Driver`
        (named by its version) whose CUDA version is the floor's own or, for a family floor,
        below the cubin's toolkit (minor-version compatibility), the minimum driver version of
        :attr:`release` in the column of :attr:`host` (Linux where the input's OS is not
        known): every R450 driver implements CUDA 11.0, only 450.80.02 and later run 11.1+
        cubins."""
        if self.need is None:
            return driver > NEWEST_KNOWN_CUDA  # beyond the tables: assumed to know it
        if driver < self.need:
            return False
        rel = self.release
        if not isinstance(driver, Driver) or rel is None:
            return True
        if driver > self.need and (not self.family or driver >= (self.built or self.need)):
            return True
        number = rel.driver(self.host)
        return number is None or driver.version >= version_tuple(number)

    def refusal(self, driver: CudaVersion) -> str:
        """``cubin built by CUDA 13.2 needs CUDA 13.0 (Linux driver >= 580.65.06); driver
        12.8 refuses it``."""
        return f"{self.why} needs {self.needs}; driver {driver_name(driver)} refuses it"

    def __str__(self) -> str:
        return f"{self.why} needs {self.needs}"


@dataclass(frozen=True)
class Verdict:
    """Why one image can or cannot serve the device; ``floor`` is the driver floor it fails."""

    image: ImageInfo
    usable: bool
    reason: str
    error: str | None = None
    floor: Floor | None = None

    def __str__(self) -> str:
        return f"{self.image.name}: {'usable' if self.usable else 'no'} ({self.reason})"


@dataclass(frozen=True)
class Decision:
    """What the driver would do with an image set on ``device`` (with ``driver``, if given).

    ``floors`` are the minimums of the image the driver picks (device included), whether or not
    ``driver`` meets them; ``floor`` is the one that failed; ``warnings`` name what could not be
    checked (a device or toolkit the tables do not know).
    """

    device: Arch
    driver: CudaVersion | None
    image: ImageInfo | None
    how: str  # "sass", "ptx-jit" or "none"
    reason: str
    error: str | None
    verdicts: tuple[Verdict, ...] = field(repr=False)
    floors: tuple[Floor, ...] = field(default=(), repr=False)
    floor: Floor | None = None
    warnings: tuple[str, ...] = ()

    @property
    def loadable(self) -> bool:
        return self.image is not None

    @property
    def restricted(self) -> bool:
        """No image for this arch (not a floor), or the image loaded lacks the kernel: built for
        other GPUs."""
        return not self.loadable and self.floor is None and self.error in (NO_BINARY, NOT_FOUND)

    @property
    def min_driver(self) -> CudaVersion | None:
        """The lowest CUDA version a driver needs for the picked image (None: no image is picked
        or a floor is unknown)."""
        if not self.floors or any(f.need is None for f in self.floors):
            return None
        return max(f.need for f in self.floors if f.need is not None)

    @property
    def min_release(self) -> Release | None:
        """The driver versions of :attr:`min_driver` (:attr:`Floor.release`: for a CUDA 11.1+
        cubin, 450.80.02 rather than the 11.0 driver)."""
        if self.min_driver is None:
            return None
        return highest_release(f.release for f in self.floors)

    def to_dict(self) -> dict[str, Any]:
        low = self.min_driver
        return {
            "device": self.device.sm,
            "driver": dotted(self.driver) if self.driver else None,
            "how": self.how,
            "image": self.image.name if self.image else None,
            "label": self.image.label if self.image else None,
            "reason": self.reason,
            "error": self.error,
            "floor": self.floor.what if self.floor else None,
            "min_driver": dotted(low) if low else None,
            "warnings": list(self.warnings),
        }

    def __str__(self) -> str:
        """``sm_90: SASS sm_90a (entry at 0x50) loads``, ``sm_120 (driver 13.0): PTX compute_90
        (PTX 8.4) JIT (driver >= 12.4)``, ``sm_75: no image: CUDA_ERROR_NO_BINARY_FOR_GPU (SASS
        sm_80 runs only on CC 8.x, not 7.5)``."""
        driver = f" (driver {dotted(self.driver)})" if self.driver else ""
        if self.image is not None:
            where = f" ({self.image.label})" if self.image.label else ""
            low = self.min_driver
            what = ("loads" if self.how == "sass" else
                    "JIT" + (f" (driver >= {dotted(low)})" if low else ""))
            kind = "SASS" if self.image.kind == SASS else "PTX"
            return f"{self.device.sm}{driver}: {kind} {self.image.name}{where} {what}"
        why = str(self.floor) if self.floor else next(
            (v.reason for v in self.verdicts if self.error == NO_BINARY == v.error), self.reason)
        return f"{self.device.sm}{driver}: no image: {self.error} ({why})"


def highest_release(releases: Iterable[Release | None]) -> Release | None:
    """The release of the highest CUDA version, of the highest Linux, then Windows, driver
    among equals (a CUDA 12.0 device floor, 12.0 GA's 525.60.13 / 527.41, and a CUDA 12.9
    cubin's, Table 2's 525.60.13 / 528.33: the latter)."""
    known = [r for r in releases if r is not None]
    return max(known, key=lambda r: (r.cuda, version_tuple(r.linux),
                                     version_tuple(r.windows or "0"))) if known else None


# module outcomes, worst last
LOADS, RESTRICTED, FAILED = "loads", "restricted", "failed"


def module_outcome(decisions: Iterable[Decision]) -> str:
    """A module fails when the driver picks an image for this arch and cannot load it (a floor,
    a mislabelled PTX); it loads when some kernel loads (the others, if any, are not in the image
    for this arch); it is restricted when no kernel has an image for this arch."""
    outcome = RESTRICTED
    for d in decisions:
        if d.loadable:
            outcome = LOADS
        elif not d.restricted:
            return FAILED
    return outcome


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")

