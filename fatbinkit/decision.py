"""The neutral records of what a runtime does with device code: an image (:class:`ImageInfo`), a
runtime floor it needs (:class:`Floor`), why one image can or cannot serve a device
(:class:`Verdict`), the pick of one load (:class:`Decision`), and a module, the images a runtime
chooses among in one load (:class:`~fatbinkit.imagesets.ImageSet`).

Which image a device loads and what it needs are the vendor's rules (:mod:`fatbinkit.vendors`;
CUDA's: :mod:`fatbinkit.vendors.cuda.loading`); these records are what the rules answer with.
"""

from __future__ import annotations

import functools
import importlib
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeAlias

from .errors import InvalidArgumentError
from .formats.arch import Arch

if TYPE_CHECKING:
    from .driver import Release

__all__ = [
    "BELOW_FLOOR",
    "FAILED",
    "JIT",
    "KERNEL_NOT_FOUND",
    "LOADABLE_KINDS",
    "LOADS",
    "NATIVE",
    "NONE",
    "NO_IMAGE",
    "OUTCOMES",
    "PTX",
    "REFUSED",
    "RESTRICTED",
    "SASS",
    "Decision",
    "Floor",
    "ImageInfo",
    "Verdict",
    "Version",
    "dotted",
    "highest_release",
    "module_outcome",
    "version_numbers",
]

SASS = "sass"
PTX = "ptx"

#: the kinds of image a runtime loads, as the registered vendors name them, in their order
#: (:func:`fatbinkit.vendors.register` keeps it: CUDA's ``sass`` and ``ptx``): an
#: :class:`ImageInfo` of another kind is refused
LOADABLE_KINDS: list[str] = []


@functools.cache
def _fields_but(without: tuple[str, ...]) -> Callable[[ImageInfo], tuple[Any, ...]]:
    """A getter of :class:`ImageInfo`'s fields but ``without``, as one tuple (in C)."""
    names = [f.name for f in fields(ImageInfo) if f.name not in without]
    unknown = set(without).difference(f.name for f in fields(ImageInfo))
    if unknown:
        raise InvalidArgumentError(f"ImageInfo has no field {sorted(unknown)[0]!r}")
    get = operator.attrgetter(*names)
    return get if len(names) > 1 else lambda image: (get(image),)


def _loadable_kinds() -> list[str]:
    """:data:`LOADABLE_KINDS`, the registry loaded first if nothing has loaded it yet (this
    module sits below :mod:`fatbinkit.vendors`, which fills the list when it is imported)."""
    if not LOADABLE_KINDS:
        importlib.import_module(f"{__package__}.vendors")
    return LOADABLE_KINDS


#: a runtime version (CUDA 12.4: ``(12, 4)``; ROCm's have the same shape)
Version: TypeAlias = tuple[int, int]

#: how a runtime loads the image it picks (:attr:`Decision.how`), in the JSON's words (version 1:
#: CUDA's, whatever the vendor): native code for the device, an IR compiled at load, nothing
NATIVE, JIT, NONE = "sass", "ptx-jit", "none"
#: why a decision is what it is (:attr:`Decision.outcome`): an image loads; the module holds no
#: image for the device; the image picked lacks the kernel asked for; the runtime refuses the
#: pick (or the device) for a floor it does not meet; or for another reason (a mislabelled IR)
LOADS, NO_IMAGE, KERNEL_NOT_FOUND, BELOW_FLOOR, REFUSED = (
    "loads", "no-image", "not-found", "floor", "refused")
OUTCOMES = (LOADS, NO_IMAGE, KERNEL_NOT_FOUND, BELOW_FLOOR, REFUSED)


@dataclass(frozen=True)
class ImageInfo:
    """One loadable image: its vendor's ``kind`` (CUDA: SASS or PTX) for a target, ``arch``;
    ``kernels`` None when not known. The vendor that reads it checks its kind.

    ``arch`` is what the runtime selects by (CUDA: an
    :class:`~fatbinkit.formats.arch.Arch`, from a fatbin entry's header; another vendor's
    target, whose ``str()`` names it); ``target`` is set when a PTX
    text's own ``.target`` says more than that label (Triton's ``sm_90a`` PTX stored as plain
    ``compute_90``): the JIT compiles for ``target``. ``toolkit`` is the CUDA release that built
    a cubin (None: not recorded), ``abi_version`` its ELF ABI, ``compression`` the fatbin entry's
    codec, ``variables`` whether the image declares module-scope variables the host can reach,
    ``host`` the OS of the file it is in (:data:`~fatbinkit.driver.LINUX` for ELF,
    :data:`~fatbinkit.driver.WINDOWS` for PE/COFF, None for a bare fatbin/cubin/PTX): whose
    driver numbers its floors name.
    """

    kind: str
    arch: Any
    ptx_version: tuple[int, int] | None = None
    label: str = ""
    kernels: frozenset[str] | None = field(default=None, repr=False)  # thousands, at times
    target: Arch | None = None
    toolkit: Version | None = None
    abi_version: int | None = None
    compression: str | None = None
    variables: bool = False
    unread: str = ""  # why a cubin's ELF could not be read (its kernels and toolkit unknown)
    offset: int | None = None  # file offset of the fatbin entry header, when read from a file
    host: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in LOADABLE_KINDS:
            kinds = _loadable_kinds()
            if self.kind not in kinds:
                raise InvalidArgumentError(f"image kind {self.kind!r} is not "
                                           f"{' or '.join(map(repr, kinds))}")
        if self.kind == PTX and self.ptx_version is None:
            raise InvalidArgumentError("a PTX image needs its PTX ISA version")

    def at(self, offset: int | None, host: str | None) -> ImageInfo:
        """This image with ``offset`` and ``host`` (:func:`dataclasses.replace` of those two,
        without its ``__init__``: nothing it checks changes; libtorch_cuda.so's 2,975 images
        are placed on every ``check``)."""
        placed = object.__new__(ImageInfo)
        placed.__dict__.update(self.__dict__, offset=offset, host=host)
        return placed

    def key(self, *without: str) -> tuple[Any, ...]:
        """Its fields but ``without``, in order: what a vendor's
        :meth:`~fatbinkit.vendors.Vendor.decision_key` compares (equal keys: equal images but
        for those fields)."""
        return _fields_but(without)(self)

    @property
    def arch_name(self) -> str:
        """``sm_90a`` for SASS, ``compute_90a`` for PTX, the target as its vendor spells it for
        other kinds: what the image's header says."""
        return self.arch.compute if self.kind == PTX else str(self.arch)

    @property
    def name(self) -> str:
        """``sm_90a`` for SASS, ``compute_90a (PTX 8.4)`` for PTX (as :attr:`arch_name` for
        other kinds)."""
        if self.kind != PTX:
            return self.arch_name
        assert self.ptx_version is not None
        target = f", .target {self.target.sm}" if self.target else ""
        return f"{self.arch.compute} (PTX {self.ptx_version[0]}.{self.ptx_version[1]}{target})"

    def __str__(self) -> str:
        built = f", built by CUDA {dotted(self.toolkit)}" if self.toolkit else ""
        codec = f", {self.compression}" if self.compression else ""
        kind = {SASS: "SASS", PTX: "PTX"}.get(self.kind, self.kind)
        return f"{kind} {self.name}{built}{codec}"


@dataclass(frozen=True)
class Floor:
    """A minimum CUDA version the driver must implement for an image (or a device) to load.

    ``what`` names the rule: "device" (the driver drives this GPU), "toolkit" (the cubin's
    producer), "variant" (``a``/``f`` targets), "compression", "ptx-isa". ``need`` None means
    newer than any release known here. ``error`` is the CUresult a driver below the floor gives.
    ``built`` is the toolkit of a ``family`` floor's cubin, ``host`` the input's OS
    (:attr:`ImageInfo.host`): whose driver numbers :attr:`release` gives. The vendor that makes
    a floor fills :attr:`release` and :attr:`needs` (CUDA:
    :func:`fatbinkit.vendors.cuda.loading.floor`).
    """

    what: str
    need: Version | None
    why: str
    error: str
    family: bool = False  # any driver of need's major (minor-version compatibility) or newer
    built: Version | None = None
    host: str | None = None
    # filled by the vendor's rules: the minimum driver versions that meet the floor (for host),
    # and what it needs in words ("CUDA 12.9 (Linux driver >= 575.51.03)")
    release: Release | None = field(default=None, kw_only=True)
    needs: str = field(kw_only=True)

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

    ``how`` says how the image loads (:data:`NATIVE`, :data:`JIT`, :data:`NONE`), ``outcome``
    why, in words every vendor shares (:data:`OUTCOMES`); ``error`` is the vendor's name for
    the failure (``CUDA_ERROR_NO_BINARY_FOR_GPU``), a detail. ``floors`` are the minimums of the
    image the driver picks (device included), whether or not
    ``driver`` meets them; ``floor`` is the one that failed; ``warnings`` name what could not be
    checked (a device or toolkit the tables do not know).
    """

    device: Any  # the vendor's GPU (CUDA: an Arch)
    driver: Version | None
    image: ImageInfo | None
    how: str  # NATIVE, JIT or NONE
    reason: str
    error: str | None
    verdicts: tuple[Verdict, ...] = field(repr=False)
    floors: tuple[Floor, ...] = field(default=(), repr=False)
    floor: Floor | None = None
    warnings: tuple[str, ...] = ()
    outcome: str = field(kw_only=True)  # OUTCOMES: why, in words every vendor shares

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise InvalidArgumentError(f"a decision's outcome is one of {', '.join(OUTCOMES)}, "
                                       f"not {self.outcome!r}")
        if (self.outcome == LOADS) != (self.image is not None):
            raise InvalidArgumentError("a decision loads exactly when it picks an image")

    @property
    def loadable(self) -> bool:
        return self.image is not None

    @property
    def restricted(self) -> bool:
        """No image for this arch (not a floor), or the image loaded lacks the kernel: built for
        other GPUs."""
        return self.outcome in (NO_IMAGE, KERNEL_NOT_FOUND)

    @property
    def min_driver(self) -> Version | None:
        """The lowest CUDA version a driver needs for the picked image (None: no image is picked
        or a floor is unknown)."""
        if not self.floors or any(f.need is None for f in self.floors):
            return None
        return max(f.need for f in self.floors if f.need is not None)

    @property
    def min_release(self) -> Release | None:
        """The driver versions of :attr:`min_driver` (:attr:`Floor.release`: for a CUDA 11.1+
        cubin, 450.80.02 rather than the 11.0 driver), of the floors that set it only: None
        where one of them has none (a release past the driver table: a lower floor's numbers
        would not meet it)."""
        low = self.min_driver
        if low is None:
            return None
        top = [f.release for f in self.floors if f.need == low]
        return None if None in top else highest_release(top)

    @property
    def beyond(self) -> tuple[str, ...]:
        """The floors newer than the tables (:attr:`Floor.need` None) the picked image and the
        device have, in words (``a sm_130 GPU (sm_130 is not known to CUDA 13.5 or older: needs
        a newer driver) needs ...``): why :attr:`min_driver` is None."""
        return tuple(dict.fromkeys(str(f) for f in self.floors if f.need is None))

    def to_dict(self) -> dict[str, Any]:
        low = self.min_driver
        return {
            "device": str(self.device),
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
            return f"{self.device}{driver}: {kind} {self.image.name}{where} {what}"
        why = str(self.floor) if self.floor else next(
            (v.reason for v in self.verdicts if self.outcome == NO_IMAGE and v.error == self.error),
            self.reason)
        return f"{self.device}{driver}: no image: {self.error} ({why})"


def highest_release(releases: Iterable[Release | None]) -> Release | None:
    """The release of the highest runtime version, of the highest Linux, then Windows, driver
    among equals (a CUDA 12.0 device floor, 12.0 GA's 525.60.13 / 527.41, and a CUDA 12.9
    cubin's, Table 2's 525.60.13 / 528.33: the latter)."""
    known = [r for r in releases if r is not None]
    return max(known, key=lambda r: (r.cuda, version_numbers(r.linux),
                                     version_numbers(r.windows or "0"))) if known else None


def version_numbers(text: str) -> tuple[int, ...]:
    """``450.80.02`` -> ``(450, 80, 2)``, ``"12.4"`` -> ``(12, 4)``: versions compare part by
    part."""
    return tuple(int(p) for p in text.split("."))


def dotted(version: Version) -> str:
    """``(13, 0)`` -> ``13.0``."""
    return f"{version[0]}.{version[1]}"


# module outcomes, worst last (a module that loads: LOADS)
RESTRICTED, FAILED = "restricted", "failed"


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

