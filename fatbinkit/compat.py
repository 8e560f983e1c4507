"""Which image of a set the CUDA driver loads on a device, or why none can: pure data, no GPU.

The rules, as NVIDIA documents them (paraphrased; the sources named where each is applied):

* **SASS** (a cubin) for ``sm_XY`` runs on compute capability X.Z with Z >= Y: same major, equal or
  higher minor. CUDA C++ Programming Guide, "Binary Compatibility": "binary compatibility is
  guaranteed from one minor revision to the next one, but not from one minor revision to the
  previous one or across major revisions" (13.x guide: 1.3 "The CUDA Platform").
* **PTX** for ``compute_XY`` is JIT-compiled by the driver for any CC >= X.Y. Same guide, "PTX
  Compatibility": PTX produced for a compute capability can be compiled to binary code of greater
  or equal compute capability.
* **Arch-specific ``a``** targets (sm_90a, sm_100a, ...) run only on exactly that CC, as SASS and as
  PTX: neither forward nor backward compatible. Guide, "Feature Set Compiler Targets" / "Feature
  availability"; PTX ISA, ".target" directive notes on the ``a`` suffix.
* **Family-specific ``f``** targets (sm_100f, ...) run on the same major with an equal or higher
  minor (100f on 10.0 and 10.3, never 11.x or 12.x). Guide, "Feature Set Compiler Targets"; NVIDIA
  technical blog "NVIDIA Blackwell and NVIDIA CUDA 12.9 Introduce Family-Specific Architecture
  Features" (May 2025).
* **Driver version**: a driver JIT-compiles only the PTX ISA versions its CUDA release knows
  (:data:`fatbinkit.formats.ptx.PTX_ISA_MIN_CUDA`, from the PTX ISA release history); CUDA
  minor-version compatibility does not extend to PTX JIT (CUDA Compatibility guide, "Minor Version
  Compatibility", its limitations). Newer PTX fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
* **Driver floors** (:mod:`fatbinkit.driver` holds NVIDIA's tables): the driver must support
  the device's arch (first CUDA release per arch; R580 is the last branch for Maxwell, Pascal
  and Volta); a cubin needs a driver of its producer toolkit's major (CUDA Compatibility guide,
  "Minor Version Compatibility": from CUDA 11 on, within a major family; release notes 2.2:
  "applications compiled against a particular version of the CUDA will continue to work on
  subsequent (later) driver releases"; before 11, the toolkit's own version); zstd-compressed
  entries need CUDA 12.4 (R550: NVIDIA's rapids-cmake ``enable_fatbin_compression.cmake`` gives
  550.54.14 for ``--compress-mode=balance|size``), LZ4 is fatbinary's default since at least
  CUDA 10.0 (its ``--help``); ``a`` targets exist from CUDA 12.0 and ``f`` targets from 12.9
  (Programming Guide, "Feature Set Compiler Targets"; the 12.9 blog above), so an older driver
  does not know them. A device whose last driver is older than what its images need (CUDA 13
  images on Thor as sm_101, which CUDA 13 drivers call sm_110; CUDA 13.1 PTX on Volta, whose
  last branch is R580 = CUDA 13.0) is loaded by no driver at all: its verdict fails even when
  no driver is given (:attr:`ArchVerdict.driver_gap`).
* **No fall back after the pick** (observed on an H200 with R580, 2026-12-01, docs/gpu.md): the
  driver selects the image by arch alone, then loads it; when that image fails (PTX ISA too
  new, an entry flag or ELF OSABI it does not know, a corrupt compressed payload) the load fails,
  even when another image would have worked. A floor is therefore checked on the picked image
  only. The CUresult predicted for a floor follows what R580 returns for an image it cannot
  read (CUDA_ERROR_INVALID_IMAGE for SASS, CUDA_ERROR_INVALID_PTX for PTX); for a device the
  driver does not drive, CUDA_ERROR_NO_DEVICE. Those codes are reasoned: an older driver cannot
  be run on the test GPU.
* **Preference** (Programming Guide, "Application Compatibility" and "Just-in-Time Compilation":
  the driver runs a compatible cubin when the fatbin has one and JIT-compiles PTX otherwise):
  exact-arch SASS (``a`` before ``f`` before plain: sm_90a over sm_90 on a 9.0 device), then the
  highest compatible SASS of the same major, then the highest-arch compatible PTX. Nothing
  compatible: CUDA_ERROR_NO_BINARY_FOR_GPU.

A raw cubin or PTX (not in a fatbin) is handed to the driver as-is, so a bare PTX whose target the
device cannot run is rejected by the JIT (CUDA_ERROR_INVALID_PTX) rather than skipped. The GPU
test (tests/gpu/test_check_gpu.py) checks these predictions against the driver.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .driver import (
    DEVICE_SUPPORT,
    FUTURE,
    LINUX,
    MINOR_COMPAT_DRIVER,
    RELEASES,
    WINDOWS,
    CudaVersion,
    Driver,
    DriverLike,
    Release,
    as_cuda_version,
    as_device,
    cuda_name,
    dotted,
    driver_name,
    drivers_text,
    release_for,
    version_tuple,
)
from .errors import (
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    NotFoundError,
    UnsupportedError,
)
from .formats import elf
from .formats.arch import Arch, ArchLike, as_arch
from .formats.cubin import ABI_V2, cubin_outline, is_cubin
from .formats.fatbin import DecompressionBudget, EntryKind, FatbinEntry
from .formats.pe import is_coff_object, is_pe
from .formats.ptx import (
    NEWEST_KNOWN_CUDA,
    Ptx,
    is_ptx,
    max_ptx_isa_for_driver,
    min_driver_for_ptx_isa,
)
from .infile import as_content, as_input
from .progress import Progress
from .scan import DeviceCode, EntrylessContainer, scan_modules

__all__ = [
    "ABI_V2_MIN_CUDA",
    "COMPRESSION_MIN_CUDA",
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
    "VARIANT_MIN_CUDA",
    "ArchMinDriver",
    "ArchVerdict",
    "Decision",
    "Floor",
    "ImageInfo",
    "ImageSet",
    "MinDriver",
    "TotalVerdict",
    "Verdict",
    "decide",
    "device_floor",
    "file_verdict",
    "header_image",
    "highest_release",
    "host_of",
    "image_floors",
    "image_from_bytes",
    "image_from_cubin",
    "image_from_entry",
    "image_from_ptx",
    "image_sets",
    "input_host",
    "module_label",
    "module_outcome",
    "predict_load",
    "ptx_jits_for",
    "ptx_narrower",
    "sass_runs_on",
]

SASS = "sass"
PTX = "ptx"

NO_BINARY = "CUDA_ERROR_NO_BINARY_FOR_GPU"
UNSUPPORTED_PTX = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
INVALID_PTX = "CUDA_ERROR_INVALID_PTX"
INVALID_IMAGE = "CUDA_ERROR_INVALID_IMAGE"
NO_DEVICE = "CUDA_ERROR_NO_DEVICE"
NOT_FOUND = "CUDA_ERROR_NOT_FOUND"

_SUFFIX_RANK = {"a": 2, "f": 1, "": 0}

# The first CUDA release that knows each target variant and codec (module docstring: sources).
VARIANT_MIN_CUDA = {"a": (12, 0), "f": (12, 9)}
COMPRESSION_MIN_CUDA = {"lz4": (10, 0), "zstd": (12, 4)}
# ptxas writes ELF ABI v2 (OSABI 0x41) from 12.8 for sm_100+ and from 13.0 for every arch
# (checked with ptxas 12.8, 12.9 and 13.0): the floor of an ABI v2 cubin whose toolkit is unknown.
ABI_V2_MIN_CUDA = ((100, (12, 8)), (0, (13, 0)))
_OLDEST_TABLED = RELEASES[0].cuda
# module-scope variables a host can reach (PTX): a `.global`/`.const` directive that starts a
# line (after `.visible`, `.extern`, `.weak`). Found from the directive, then its line checked:
# one regex anchored at every line start took 2.4 s on cuBLASLt's PTX.
_PTX_VARIABLE_AT = re.compile(rb"\.(?:global|const)[ \t]")
_PTX_VARIABLE_LINE = re.compile(rb"[ \t]*(?:\.(?:visible|extern|weak)[ \t]+)*")


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


def host_of(head: bytes | bytearray | memoryview) -> str | None:
    """The OS whose driver numbers apply to an input, from its first bytes: ELF (not a bare
    cubin) is Linux, a PE image or COFF object Windows, anything else (a bare fatbin, cubin or
    PTX, a static library) not known."""
    machine = elf.machine(head)
    if machine is not None:
        return None if machine == elf.EM_CUDA else LINUX
    return WINDOWS if is_pe(head) or is_coff_object(head) else None


def input_host(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> str | None:
    """:func:`host_of` a file (by its path) or of the bytes given."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return host_of(source[:4096])
    with open(source, "rb") as f:
        return host_of(f.read(4096))


def sass_runs_on(image: Arch, device: Arch) -> bool:
    """Whether SASS for ``image`` runs on a device of compute capability ``device``."""
    if image.suffix == "a":
        return image.number == device.number  # arch-specific: exactly this CC
    # plain and family-specific SASS: same major, equal or higher minor
    return image.major == device.major and image.minor <= device.minor


def ptx_jits_for(image: Arch, device: Arch) -> bool:
    """Whether PTX for ``image`` may be JIT-compiled for ``device`` (ignoring the driver)."""
    if image.suffix == "a":
        return image.number == device.number  # arch-specific PTX never moves to another arch
    if image.suffix == "f":
        return image.major == device.major and image.minor <= device.minor  # same family
    return image.number <= device.number  # plain PTX: any equal or newer CC


def device_floor(device: Arch, host: str | None = None) -> Floor | None:
    """The first CUDA release whose driver drives ``device`` (None: not in the table), its
    driver numbers those of ``host``."""
    support = DEVICE_SUPPORT.get(device.number)
    if support is None:
        return None
    return Floor("device", support.first, f"a {device.sm} GPU", NO_DEVICE, host=host)


def image_floors(image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
    """The driver floors of one image in the order a driver meets them (the entry header's
    flags, then the payload), and what could not be known about them."""
    floors: list[Floor] = []
    warnings: list[str] = []
    bad = INVALID_IMAGE if image.kind == SASS else INVALID_PTX
    host = image.host
    if image.compression in COMPRESSION_MIN_CUDA:
        floors.append(Floor("compression", COMPRESSION_MIN_CUDA[image.compression],
                            f"{image.compression}-compressed {image.name}", bad, host=host))
    suffix = (image.target or image.arch).suffix
    if suffix:
        kind = "arch-specific" if suffix == "a" else "family-specific"
        floors.append(Floor("variant", VARIANT_MIN_CUDA[suffix],
                            f"{kind} ({suffix}) target {image.name}", bad, host=host))
    if image.kind == SASS:
        if image.toolkit is not None:
            major, _ = image.toolkit
            # within a major family from CUDA 11 on (minor-version compatibility, with the
            # driver version of Table 2 when the cubin is newer than the driver), else exactly
            need = (major, 0) if major >= 11 else image.toolkit
            floors.append(Floor("toolkit", need, f"cubin {image.name} built by CUDA "
                                f"{dotted(image.toolkit)}", bad, family=major >= 11,
                                built=image.toolkit, host=host))
        else:
            where = f" ({image.label})" if image.label else ""
            if image.unread:
                warnings.append(f"cubin {image.name}{where} could not be read ({image.unread}): "
                                "its kernels and toolkit are not known")
            elif image.abi_version != ABI_V2:
                warnings.append(f"cubin {image.name}{where}: its producer toolkit is not "
                                "recorded; the toolkit floor is not checked")
            if image.abi_version == ABI_V2:
                need = next(cuda for low, cuda in ABI_V2_MIN_CUDA if image.arch.number >= low)
                floors.append(Floor("toolkit", need, f"cubin {image.name} in ELF ABI v2 "
                                    "(producer toolkit not recorded)", bad, host=host))
    else:
        assert image.ptx_version is not None
        try:
            need_isa: CudaVersion | None = min_driver_for_ptx_isa(image.ptx_version)
        except FatbinkitError:
            need_isa = None
        floors.append(Floor("ptx-isa", need_isa, f"PTX ISA {dotted(image.ptx_version)} "
                            f"({image.arch.compute})", UNSUPPORTED_PTX, host=host))
    return tuple(floors), tuple(warnings)


def _driver_warnings(device: Arch, driver: CudaVersion | None) -> list[str]:
    out = []
    if device.number not in DEVICE_SUPPORT:  # named as {FUTURE}sm_XY (as_device)
        out.append(f"{device.sm} is named as a future GPU ({FUTURE}{device.sm}), not in NVIDIA's "
                   f"device table (sm_{min(DEVICE_SUPPORT)} .. sm_{max(DEVICE_SUPPORT)}): "
                   "whether a driver drives it is not checked")
    if driver is not None and driver < _OLDEST_TABLED:
        out.append(f"driver {dotted(driver)} is older than NVIDIA's driver tables used here "
                   f"(from CUDA {dotted(_OLDEST_TABLED)}): floors are checked where known")
    if driver is not None and driver > NEWEST_KNOWN_CUDA:
        out.append(f"driver {dotted(driver)} is newer than the tables (CUDA "
                   f"{dotted(NEWEST_KNOWN_CUDA)}): what it adds is assumed to work")
    return out


def _compat_unknown(floors: Iterable[Floor], driver: CudaVersion) -> list[str]:
    """What a driver given as a CUDA version leaves open: a family floor whose minor-version
    compatibility driver is newer than its release's own (11.1+ cubins on a CUDA 11.0 driver
    need 450.80.02, which nvidia-smi's "CUDA Version: 11.0" does not tell from 450.51.06)."""
    out = []
    for f in floors:
        rel, own = f.release, release_for(f.need) if f.need else None
        if (f.family and not isinstance(driver, Driver) and driver == f.need and rel and own
                and f.built is not None and f.built > driver
                and version_tuple(rel.linux) > version_tuple(own.linux)):
            out.append(f"driver {dotted(driver)} is given as a CUDA version: {f.why} runs on it "
                       f"only from {drivers_text(rel, f.host)} (minor-version compatibility); "
                       "give the driver version to check it")
    return out


def _device_refusal(device: Arch, driver: CudaVersion,
                    host: str | None) -> tuple[Floor, str] | None:
    floor = device_floor(device)
    if floor is None:
        return None
    support = DEVICE_SUPPORT[device.number]
    if not floor.met_by(driver):
        thor = f" ({support.note})" if support.last is None and support.note else ""
        return floor, (f"driver {driver_name(driver)} does not drive {device.sm} GPUs: "
                       f"they need {cuda_name(support.first, host)}{thor}")
    if support.last is not None and driver > support.last:
        return floor, (f"a driver for CUDA {dotted(driver)} no longer drives {device.sm} GPUs: "
                       f"the last is CUDA {dotted(support.last)} ({support.note})")
    return None


def decide(
    images: Iterable[ImageInfo],
    device: ArchLike,
    driver: DriverLike | None = None,
    *,
    raw: bool = False,
) -> Decision:
    """Pick the image the driver would load on ``device`` (a GPU that exists:
    :func:`~fatbinkit.driver.as_device`), or say why none fits.

    The pick is by arch alone (SASS, then PTX); the driver floors are then checked on the pick
    only, as the driver does not fall back. ``raw`` means the set is one bare cubin or PTX handed
    to the driver directly (not a fatbin): an unfit bare PTX is then refused by the JIT compiler
    instead of skipped. ``device`` and ``driver`` take what :func:`~fatbinkit.formats.arch.as_arch`
    and
    :func:`~fatbinkit.driver.as_cuda_version` take (``"sm_90"``, ``"12.4"``, ``12040``...).
    """
    device = as_device(device, "device")
    driver = None if driver is None else as_cuda_version(driver)
    # a device is a compute capability; suffixes name binaries only
    dev = Arch(device.number, future=device.future)
    images = tuple(images)
    host = next((i.host for i in images), None)
    warnings = _driver_warnings(dev, driver)
    dfloor = device_floor(dev, host)
    verdicts: list[Verdict] = []
    # the images that fit by arch, each with its floors (device first) and what is unknown
    sass: list[tuple[Verdict, tuple[Floor, ...], tuple[str, ...]]] = []
    ptx: list[tuple[Verdict, tuple[Floor, ...], tuple[str, ...]]] = []
    for img in images:
        runs = sass_runs_on if img.kind == SASS else ptx_jits_for
        if not runs(img.arch, dev):
            why = _sass_why_not if img.kind == SASS else _ptx_why_not
            error = INVALID_PTX if raw and img.kind == PTX else NO_BINARY
            verdicts.append(Verdict(img, False, why(img.arch, dev), error))
            continue
        own, unknown = image_floors(img)
        if img.kind == PTX and img.target is not None and not ptx_jits_for(img.target, dev):
            # selected by its label, then refused by the JIT compiler (reasoned, not observed)
            verdict = Verdict(img, False, (
                f"PTX labelled {img.arch.compute} but its text says .target {img.target.sm}: "
                f"{_ptx_why_not(img.target, dev)}"), INVALID_PTX)
        else:
            failed = next((f for f in own if driver is not None and not f.met_by(driver)), None)
            if failed is not None:
                assert driver is not None
                verdict = Verdict(img, False, failed.refusal(driver), failed.error, failed)
            else:
                verdict = Verdict(img, True, _fits(img, dev, driver))
        verdicts.append(verdict)
        (sass if img.kind == SASS else ptx).append(
            (verdict, ((dfloor,) if dfloor else ()) + own, unknown))

    def result(image: ImageInfo | None, how: str, reason: str, error: str | None,
               floors: tuple[Floor, ...] = (), floor: Floor | None = None) -> Decision:
        return Decision(dev, driver, image, how, reason, error, tuple(verdicts), floors, floor,
                        tuple(warnings))

    refused = _device_refusal(dev, driver, host) if driver is not None else None
    if sass:
        # exact CC first (a > f > plain), then the highest minor of the same major
        pick, floors, unknown = max(sass, key=lambda c: (
            c[0].image.arch.number == dev.number, c[0].image.arch.number,
            _SUFFIX_RANK[c[0].image.arch.suffix]))
    elif ptx:
        # The driver picks the PTX by arch label alone, then JIT-compiles it: a pick too new
        # for the driver (or whose text targets another arch) fails the load, with no fall
        # back to a lower PTX that would work (observed on an H200 with driver R580, 2026-12-01:
        # compute_80 + compute_90 with PTX ISA 9.9 -> CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
        pick, floors, unknown = max(ptx, key=lambda c: (
            c[0].image.arch.number, _SUFFIX_RANK[c[0].image.arch.suffix],
            c[0].image.ptx_version or (0, 0)))
    else:
        if refused is not None:
            return result(None, "none", refused[1], NO_DEVICE, floor=refused[0])
        if not verdicts:
            return result(None, "none", "no images", NO_BINARY)
        failing = [v for v in verdicts if v.error]
        error = next((v.error for v in failing if v.error == INVALID_PTX), NO_BINARY)
        held = ", ".join(sorted({v.image.name for v in verdicts}))
        reasons = "; ".join(dict.fromkeys(v.reason for v in failing if v.error == error))
        return result(None, "none", f"nothing loads on {dev.sm} (has {held}): {reasons}", error)
    best = pick.image
    warnings += unknown  # what is unknown about the image the driver loads
    if driver is not None:
        warnings += _compat_unknown(floors, driver)
    how = "sass" if best.kind == SASS else "ptx-jit"
    if refused is not None:
        return result(None, "none", refused[1], NO_DEVICE, floors, refused[0])
    if pick.usable:
        reason = (f"SASS {best.arch.sm} runs on {dev.sm}" if how == "sass" else
                  f"no SASS for {dev.sm}; the driver JIT-compiles {best.name} at load "
                  f"(cold start cost, cached in the JIT cache)")
        return result(best, how, reason, None, floors)
    others = [v.image.name for v, _, _ in sass + ptx if v.usable and v is not pick]
    unused = f"; the driver does not fall back to {', '.join(others)}" if others else ""
    lead = (f"the driver picks {best.name}" if how == "sass" else
            f"no SASS for {dev.sm}; the driver picks {best.name}")
    return result(None, "none", f"{lead}: {pick.reason}{unused}", pick.error, floors, pick.floor)


def _fits(img: ImageInfo, dev: Arch, driver: CudaVersion | None) -> str:
    if img.kind == SASS:
        return f"SASS {img.arch.sm} runs on {dev.sm}"
    assert img.ptx_version is not None
    if driver is None:
        return f"PTX {img.arch.compute} JIT-compiles for {dev.sm}; driver version not given"
    newest = max_ptx_isa_for_driver(driver)
    limit = (f"driver {dotted(driver)} JITs PTX ISA up to {dotted(newest)}" if newest else
             f"driver {dotted(driver)} is newer than the table (CUDA {dotted(NEWEST_KNOWN_CUDA)}); "
             "assumed to JIT it")
    return f"PTX {img.arch.compute} JIT-compiles for {dev.sm}; {limit}"


def _sass_why_not(image: Arch, dev: Arch) -> str:
    if image.suffix == "a":
        return f"SASS {image.sm} is arch-specific: runs only on CC {image.major}.{image.minor}"
    if image.major != dev.major:
        return f"SASS {image.sm} runs only on CC {image.major}.x, not {dev.major}.{dev.minor}"
    return f"SASS {image.sm} needs CC >= {image.major}.{image.minor} within {image.major}.x"


def _ptx_why_not(image: Arch, dev: Arch) -> str:
    if image.suffix == "a":
        return (f"PTX {image.compute} is arch-specific: JIT only for CC "
                f"{image.major}.{image.minor}, never another arch")
    if image.suffix == "f":
        return f"PTX {image.compute} is family-specific: JIT only for CC {image.major}.x"
    return f"PTX {image.compute} needs CC >= {image.major}.{image.minor}"


@dataclass(frozen=True)
class ImageSet:
    """The images the driver chooses among in one load: one fatbin container, or one bare
    cubin/PTX (``raw``). ``label`` says where it was found: ``source`` (the ELF section, or the
    start symbol of an embedded blob; ``""`` for a bare file) and ``container`` (its index in the
    file; None for a bare cubin/PTX). ``entryless``: a container with no entry at all, which the
    runtime still registers (its wrapper record and the host stubs of its kernels stay, as
    ``prune`` leaves a module no kept arch loads): a module with no image for any GPU whose
    kernels are unknown, never :attr:`empty`."""

    label: str
    images: tuple[ImageInfo, ...]
    raw: bool = False
    source: str = ""
    container: int | None = None
    entryless: bool = False

    @classmethod
    def of_entryless(cls, c: EntrylessContainer) -> ImageSet:
        """The module of a container with no entry."""
        return cls(module_label(c.source, c.container, c.member), (), source=c.source,
                   container=c.container, entryless=True)

    @functools.cached_property
    def kernels(self) -> list[str]:
        """Every kernel name any image lists, in first-seen order (made once: a verdict reads it
        per decision, for each of a library's thousands of kernels)."""
        seen: dict[str, None] = {}
        for img in self.images:
            for k in sorted(img.kernels or ()):
                seen.setdefault(k)
        return list(seen)

    def decide(self, device: ArchLike, driver: DriverLike | None = None,
               kernel: str | None = None) -> Decision:
        """:func:`decide` for the whole set, as the driver loads it: one image for the module.
        With ``kernel``, a picked image that lacks it gives ``CUDA_ERROR_NOT_FOUND`` (what
        ``cuModuleGetFunction`` returns), even when another image of the set has it; a kernel
        that no image has is a :class:`~fatbinkit.errors.NotFoundError`."""
        if kernel is not None:
            self._check_kernel(kernel)
        return self._for_kernel(self._decide(device, driver), kernel)

    def _decide(self, device: ArchLike, driver: DriverLike | None) -> Decision:
        d = decide(self.images, device, driver, raw=self.raw)
        if self.entryless and d.floor is None:  # a device floor still says why first
            return replace(d, reason="an empty fatbin container (no entries: its images were "
                           "removed, e.g. by prune): its kernels, unknown, load on no GPU")
        return d

    def _check_kernel(self, kernel: object) -> None:
        """Refuse a kernel name no image of the set has (when every image lists its kernels)."""
        if not isinstance(kernel, str):
            raise InvalidArgumentError(f"kernel is a name (str), not {type(kernel).__name__}")
        if all(i.kernels is not None and kernel not in i.kernels for i in self.images):
            raise NotFoundError.among("kernel", kernel, self.kernels, self.label)

    def _for_kernel(self, d: Decision, kernel: str | None) -> Decision:
        if kernel is None or d.image is None or d.image.kernels is None or \
                kernel in d.image.kernels:
            return d
        holders = [i.name for i in self.images if i.kernels is None or kernel in i.kernels]
        others = f" (only {', '.join(holders)} has it; no fall back)" if holders else ""
        return replace(
            d, image=None, how="none", error=NOT_FOUND, floors=(),
            reason=f"the driver loads {d.image.name} for {d.device.sm}, which has no kernel "
                   f"{kernel}{others}")

    def __str__(self) -> str:
        """``k.fatbin container 0: sm_80, sm_90, compute_90 (PTX 8.4); 2 kernels``."""
        names = [i.name for i in self.images]
        shown = ", ".join(names[:6]) + (f", ... ({len(names)} images)" if len(names) > 6 else "")
        kernels = f"; {_count(len(self.kernels), 'kernel')}" if self.kernels else ""
        if self.entryless:
            return f"{self.label}: no entries (an empty container: kernels unknown)"
        return f"{self.label}: {shown or 'no loadable images'}{kernels}"

    @property
    def empty(self) -> bool:
        """No kernels and no module-scope variables in any image: nothing can ever make the
        runtime load this module (lazy loading loads a module on first use of one of its
        kernels or variables). An :attr:`entryless` container is not empty: what it held is
        unknown, and the runtime registers it."""
        return not self.entryless and not self.kernels and not any(
            i.variables for i in self.images)

    def decisions(self, device: ArchLike, driver: DriverLike | None = None,
                  ) -> list[tuple[str | None, Decision]]:
        """One decision per kernel (one for the whole set when it names no kernels)."""
        kernels: list[str | None] = list(self.kernels) or [None]
        module = self._decide(device, driver)  # one pick per module
        return [(k, self._for_kernel(module, k)) for k in kernels]


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


@dataclass(frozen=True)
class ArchVerdict:
    """Will a file's device code work on one GPU arch (with one driver, if given)?

    Every module (fatbin container) is one load unit, and the runtime loads a module lazily, on
    first use of one of its kernels or variables (CUDA Programming Guide, "Lazy Loading": the
    default since CUDA 12.2 on Linux, 12.3 on Windows; ``CUDA_MODULE_LOADING=EAGER`` loads every
    module at start). So a module that holds no image for this arch (``restricted``: built for
    other GPUs only, like cuBLAS's sm_75-only or NCCL's sm_100f-only kernels) fails only if the
    library calls it on this GPU, which a library that dispatches by arch does not: reported, not
    fatal. ``failed`` modules are ones the driver picks an image for and cannot load (a driver
    floor, PTX whose text targets another arch): those are fatal, as is a file where no module
    loads. A module with no kernels is loaded only when the host reads one of its variables by
    symbol: when it cannot load, it is ``data_only_failed`` (reported, fatal only when strict:
    cuRAND ships its precalc tables in such modules for sm_75 only). ``empty`` modules (no
    kernels, no variables) are never loaded and not counted. A container with no entry at all
    (``entryless``, what ``prune`` leaves of a module no kept arch loads) is not empty: the
    runtime registers it and its kernels, unknown, load nowhere, so it is ``restricted`` (as the
    module it was, built for other GPUs, is in the original), named apart in ``entryless``.
    When every driver that drives the device is older than the images need
    (:attr:`driver_gap`), no driver loads them there: the verdict fails, with or without a
    driver given. ``if verdict.ok:`` is the exit status of ``check``, :attr:`strict_ok` that of
    ``check --strict``.
    """

    device: Arch
    driver: CudaVersion | None
    loading: tuple[str, ...]
    restricted: tuple[str, ...]
    failed: tuple[tuple[str, Decision], ...]
    data_only_failed: tuple[tuple[str, Decision], ...]
    missing: tuple[tuple[str, str], ...]  # (module, kernel): not in the image this arch loads
    empty: tuple[str, ...]
    min_driver: CudaVersion | None  # None: no image is picked, or (min_driver_known False) a
    min_driver_known: bool          # picked image's floor is newer than the tables
    kernels_load: bool = True  # some module with kernels loads (or the file has no kernels)
    warnings: tuple[str, ...] = ()
    jit: tuple[str, ...] = ()  # the loading modules that load by PTX JIT (no SASS for it)
    min_release: Release | None = None  # the driver versions of min_driver (Floor.release)
    host: str | None = None  # the input's OS (ImageInfo.host): whose driver numbers apply
    entryless: tuple[str, ...] = ()  # the restricted modules that are containers with no entry

    @classmethod
    def of(cls, device: ArchLike, driver: DriverLike | None,
           modules: Sequence[tuple[ImageSet, Sequence[Decision]]],
           kernels: Sequence[Sequence[str]] | None = None) -> ArchVerdict:
        """The verdict over modules whose per-kernel decisions are already made: one decision
        per name of ``kernels`` (one list per module; default: each module's
        :attr:`ImageSet.kernels`, as :meth:`ImageSet.decisions` makes them)."""
        device = as_device(device, "device")
        driver = None if driver is None else as_cuda_version(driver)
        loading: list[str] = []
        restricted: list[str] = []
        failed: list[tuple[str, Decision]] = []
        data_only: list[tuple[str, Decision]] = []
        missing: list[tuple[str, str]] = []
        jit: list[str] = []
        empty: list[str] = []
        entryless: list[str] = []
        warnings: dict[str, None] = {}
        low: CudaVersion | None = None
        releases: list[Release | None] = []
        known = True
        names = {id(s): s.kernels for s, _ in modules} if kernels is None else {
            id(s): list(ks) for (s, _), ks in zip(modules, kernels, strict=True)}
        counted = [(s, ds) for s, ds in modules if not s.empty]
        if counted:
            empty = [s.label for s, _ in modules if s.empty]
        else:  # a file of empty modules only is judged on them
            counted = list(modules)
        any_kernels = any(s.kernels for s, _ in counted)
        for s, ds in counted:
            outcome = module_outcome(ds)
            if outcome == FAILED:
                first = next(d for d in ds if not d.loadable and not d.restricted)
                (failed if s.kernels else data_only).append((s.label, first))
            elif outcome == RESTRICTED:
                restricted.append(s.label)
                if s.entryless:
                    entryless.append(s.label)
            else:
                loading.append(s.label)
                if not any(d.how == SASS for d in ds):
                    jit.append(s.label)
                # ds holds one decision per kernel (one for a set without kernels: none missing)
                missing += [(s.label, k) for k, d in zip(names[id(s)], ds, strict=False)
                            if d.restricted]
            # a module's kernels mostly share its one decision: each distinct one counted once
            for d in {id(d): d for d in ds}.values():
                warnings.update(dict.fromkeys(d.warnings))
                if d.restricted or not d.floors or (not s.kernels and any_kernels):
                    continue  # the minimum is what the kernels need
                need = d.min_driver
                if need is None:
                    known = False
                elif low is None or need >= low:
                    releases = [] if low is None or need > low else releases
                    low = need
                    releases.append(d.min_release)
        kernels_load = not any_kernels or any(
            s.kernels and s.label in loading for s, _ in counted)
        host = next((i.host for s, _ in modules for i in s.images), None)
        return cls(Arch(device.number, future=device.future), driver, tuple(loading),
                   tuple(restricted), tuple(failed), tuple(data_only), tuple(missing),
                   tuple(empty), low if known else None, known, kernels_load, tuple(warnings),
                   tuple(jit), highest_release(releases) if known else None, host,
                   tuple(entryless))

    @property
    def modules(self) -> int:
        """Modules counted (empty ones are not)."""
        return (len(self.loading) + len(self.restricted) + len(self.failed)
                + len(self.data_only_failed))

    @property
    def holds_nothing(self) -> bool:
        """Whether no counted module holds an image for this arch (all built for other GPUs)."""
        return not (self.loading or self.failed or self.data_only_failed)

    @property
    def counts(self) -> dict[str, int]:
        """Modules loading an image built for this arch (``sass``), by PTX JIT (``jit``), that
        cannot load (``cannot``: a floor, PTX for another target; data-only ones too) and that
        hold nothing for it (``other_gpus``)."""
        return {"sass": len(self.loading) - len(self.jit), "jit": len(self.jit),
                "cannot": len(self.failed) + len(self.data_only_failed),
                "other_gpus": len(self.restricted)}

    @property
    def status(self) -> str:
        """``works``, ``partial`` (some modules restricted to other archs, or data-only modules
        that cannot load) or ``fails`` (a module cannot load, none with kernels loads, or no
        driver can load the images on this device: :attr:`driver_gap`)."""
        if self._coverage_fails or self.driver_gap is not None:
            return "fails"
        return ("partial" if self.restricted or self.data_only_failed or self.missing
                else "works")

    @property
    def _coverage_fails(self) -> bool:
        """Whether the modules fail the arch, whatever the driver: one the driver picks an image
        for cannot load, or none with kernels loads."""
        return bool(self.failed) or not self.loading or not self.kernels_load

    @property
    def max_driver(self) -> CudaVersion | None:
        """The last CUDA version whose driver drives this device (None: still supported)."""
        support = DEVICE_SUPPORT.get(self.device.number)
        return support.last if support else None

    @property
    def driver_gap(self) -> str | None:
        """Why no driver meets :attr:`min_driver` on this device, if none does (CUDA 13 cubins
        on a GPU that only CUDA 12 drivers call sm_101)."""
        last = self.max_driver
        if last is None or self.min_driver is None or self.min_driver <= last:
            return None
        note = DEVICE_SUPPORT[self.device.number].note
        return (f"{self.device.sm} GPUs are driven up to CUDA {dotted(last)} only ({note}), "
                f"the images need CUDA {dotted(self.min_driver)}")

    @property
    def ok(self) -> bool:
        """Exit-status truth: ``works`` or ``partial`` (``if verdict.ok:``)."""
        return self.status != "fails"

    @property
    def strict_ok(self) -> bool:
        """Exit-status truth with ``strict`` (``--strict``): ``works`` only."""
        return self.status == "works"

    @property
    def reason(self) -> str:
        """One line a user can act on; when no driver can load the images on this device
        (:attr:`driver_gap`), that first."""
        gap = self.driver_gap
        if gap is None:
            return self._modules_reason
        gap = f"no driver can load it on {self.device.sm}: {gap}"
        return f"{self._modules_reason} (and {gap})" if self._coverage_fails else gap

    @property
    def _modules_reason(self) -> str:
        """What the modules say: which cannot load, which hold no image for the arch."""
        n = self.modules
        if self.failed and len(self.failed) == n and len({d.reason for _, d in self.failed}) == 1:
            return f"no module can load: {self.failed[0][1].reason}"
        if self.failed and self.data_only_failed:
            return replace(self, data_only_failed=())._modules_reason + (
                f" (and {_count(len(self.data_only_failed), 'data-only module')})")
        if self.failed:
            reasons: dict[str, int] = {}
            for _, d in self.failed:
                reasons[d.reason] = reasons.get(d.reason, 0) + 1
            top, count = max(reasons.items(), key=lambda kv: kv[1])
            more = f" (+{_count(len(reasons) - 1, 'other reason')})" if len(reasons) > 1 else ""
            return f"{len(self.failed)}/{_count(n, 'module')} cannot load: {top}" + (
                f" [{count} of them]" if count != len(self.failed) else "") + more
        if not self.loading:
            return f"no module holds an image for {self.device.sm}" + (
                f" ({len(self.entryless)} of {_count(n, 'module')} empty containers, no entries: "
                "images removed, e.g. by prune)" if self.entryless else "")
        if not self.kernels_load:
            return (f"no module with kernels holds an image for {self.device.sm} (only "
                    f"{_count(len(self.loading), 'data-only module')} load)")
        text = f"{len(self.loading)}/{_count(n, 'module')} " + ("loads" if n == 1 else "load")
        if self.restricted:
            text += (f"; {_count(len(self.restricted), 'module')} built for other GPUs hold no "
                     f"image (or kernel) for {self.device.sm}: loaded lazily, they fail only if "
                     "used on this one")
        if self.entryless:
            text += (f" ({len(self.entryless)} of them empty containers, no entries: images "
                     "removed, e.g. by prune)")
        if self.missing:
            text += (f"; {_count(len(self.missing), 'kernel')} of loading modules not in the "
                     f"image for {self.device.sm} (built for other GPUs only)")
        if self.data_only_failed:
            _, d = self.data_only_failed[0]
            text += (f"; {_count(len(self.data_only_failed), 'data-only module')} (variables, "
                     f"no kernels: used only if the host reads them) cannot load: {d.reason}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.sm,
            "driver": dotted(self.driver) if self.driver else None,
            "status": self.status,
            "reason": self.reason,
            "modules": self.modules,
            "loading": len(self.loading),
            "restricted": list(self.restricted),
            "missing_kernels": [{"module": m, "kernel": k} for m, k in self.missing],
            "failed": [{"module": m, "floor": d.floor.what if d.floor else None,
                        "error": d.error, "reason": d.reason} for m, d in self.failed],
            "data_only_failed": [{"module": m, "floor": d.floor.what if d.floor else None,
                                  "error": d.error, "reason": d.reason}
                                 for m, d in self.data_only_failed],
            "empty": len(self.empty),
            "empty_containers": list(self.entryless),
            "min_driver": dotted(self.min_driver) if self.min_driver else None,
            **_driver_numbers(self.min_release, self.host),
            "max_driver": dotted(self.max_driver) if self.max_driver else None,
            "driver_gap": self.driver_gap,
            "warnings": list(self.warnings),
            **self.counts,
        }

    def __str__(self) -> str:
        driver = f" with driver {dotted(self.driver)}" if self.driver else ""
        return f"{self.device.sm}{driver}: {self.status}: {self.reason}"

    def __repr__(self) -> str:
        """Counts, not the modules' names: short for a library of thousands of modules."""
        return (f"ArchVerdict({self.device.sm}, driver={_driver_repr(self.driver)}, "
                f"status={self.status!r}, modules={self.modules}, "
                f"loading={len(self.loading)}, restricted={len(self.restricted)}, "
                f"failed={len(self.failed)}, data_only_failed={len(self.data_only_failed)}, "
                f"empty={len(self.empty)})")


def _driver_repr(driver: CudaVersion | None) -> str:
    return "None" if driver is None else repr(driver_name(driver))


def _driver_numbers(release: Release | None, host: str | None) -> dict[str, Any]:
    """The JSON of a minimum driver's versions, each labelled by its OS: ``linux_driver``,
    ``windows_driver`` (null: NVIDIA publishes none, or no minimum), and ``host``, the input's
    OS (null: not known), whose number applies."""
    return {"host": host, "linux_driver": release.linux if release else None,
            "windows_driver": release.windows if release else None}


@dataclass(frozen=True)
class TotalVerdict:
    """Will the libraries of a wheel or a folder work on one GPU arch (with one driver, if
    given)? Each library is loaded on its own (``dlopen``, then its modules lazily, see
    :class:`ArchVerdict`), so the rule one level up is the rule for modules: a library the
    driver picks an image from and cannot load fails the total, as does no library loading at
    all; a library that holds no image for the arch (``other_gpus_only``: a wheel's
    ``sm90/``-only extension, a Hopper-only kernel library) fails only where it is used, so it
    makes the total ``partial`` (``fails`` with ``strict``), as does a partial library. The
    driver it needs is the highest that one of its libraries needs.

    ``alternatives`` are groups of files that are one library built once per CUDA version, of
    which the package loads one (``(group, files oldest build first)``:
    :func:`fatbinkit.collection.alternatives` finds them by name). A group counts as the one
    file that :meth:`serving` names: the best verdict, then the newest build, among those
    that load (a driver that loads several runs the newest: minor version compatibility, CUDA
    Compatibility guide, lets a build of a later 12.x run on an earlier 12.x driver, and the
    per-file verdicts already hold the floors that limits); when none loads, the one needing
    the lowest driver. Its driver floor is the lowest any build needs (:meth:`floor`). The
    others are in :attr:`files` and the JSON's ``alternatives`` but neither fail nor count."""

    device: Arch
    driver: CudaVersion | None
    files: tuple[tuple[str, ArchVerdict], ...]  # (the file's path in the wheel or folder, ...)
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, files: Sequence[tuple[str, ArchVerdict]],
           alternatives: Sequence[tuple[str, Sequence[str]]] = ()) -> TotalVerdict:
        """The total of per-file verdicts on one arch (with one driver), ``alternatives`` as
        the class says (each group two files or more, each file in one group at most)."""
        if not files:
            raise InvalidArgumentError("a total verdict needs at least one file")
        first = files[0][1]
        if any((v.device, v.driver) != (first.device, first.driver) for _, v in files):
            raise InvalidArgumentError("a total verdict adds up verdicts on one arch and driver")
        names = [n for n, _ in files]
        grouped = [m for _, members in alternatives for m in members]
        if any(len(members) < 2 for _, members in alternatives) or \
                len(set(grouped)) != len(grouped) or not set(grouped) <= set(names):
            raise InvalidArgumentError("each group of alternatives holds two files or more of "
                                       "the total, each file in one group at most")
        return cls(first.device, first.driver, tuple(files),
                   tuple((g, tuple(members)) for g, members in alternatives))

    def serving(self, group: str) -> str:
        """The file of ``group`` that serves this arch (and driver): see the class."""
        members = dict(self.alternatives)[group]
        verdicts = dict(self.files)
        loads = [(i, m) for i, m in enumerate(members) if verdicts[m].status != "fails"]
        if loads:
            return max(loads, key=lambda p: (verdicts[p[1]].status == "works", p[0]))[1]
        low = self.floor(group)
        return members[-1] if low is None else low[0]

    def floor(self, group: str) -> tuple[str, CudaVersion] | None:
        """``(file, floor)``: the build of ``group`` needing the lowest driver and that driver
        (the last of equals: the newest build); None when no build's floor is known."""
        verdicts = dict(self.files)
        known: list[tuple[CudaVersion, int, str]] = []
        for i, m in enumerate(dict(self.alternatives)[group]):
            floor = verdicts[m].min_driver
            if floor is not None and verdicts[m].min_driver_known:
                known.append((floor, i, m))
        if not known:
            return None
        low = min(f for f, _, _ in known)
        return max((i, m) for f, i, m in known if f == low)[1], low

    @property
    def units(self) -> tuple[tuple[str, ArchVerdict], ...]:
        """The files that count: every file but the alternatives not serving."""
        idle = {m for _, members in self.alternatives for m in members} - {
            self.serving(g) for g, _ in self.alternatives}
        return tuple((n, v) for n, v in self.files if n not in idle)

    def named(self, status: str) -> tuple[str, ...]:
        """The files that count whose own verdict is ``status`` (``works``, ``partial``,
        ``fails``), those that hold nothing for the arch apart (``other_gpus_only``)."""
        if status == "other_gpus_only":
            return tuple(n for n, v in self.units if v.holds_nothing)
        return tuple(n for n, v in self.units if v.status == status and not (
            status == "fails" and v.holds_nothing))

    @property
    def status(self) -> str:
        if self.named("fails") or not any(v.loading for _, v in self.units):
            return "fails"
        return "partial" if self.named("partial") or self.named("other_gpus_only") else "works"

    @property
    def ok(self) -> bool:
        """Exit-status truth, as :attr:`ArchVerdict.ok`: ``works`` or ``partial``."""
        return self.status != "fails"

    @property
    def strict_ok(self) -> bool:
        """Exit-status truth with ``strict``, as :attr:`ArchVerdict.strict_ok`: ``works``
        only."""
        return self.status == "works"

    @property
    def counts(self) -> dict[str, int]:
        """The module counts (:attr:`ArchVerdict.counts`) of the files that count, added up."""
        total = dict.fromkeys(self.files[0][1].counts, 0)
        for _, v in self.units:
            for k, n in v.counts.items():
                total[k] += n
        return total

    @property
    def modules(self) -> int:
        return sum(v.modules for _, v in self.units)

    @property
    def empty(self) -> tuple[str, ...]:
        """The empty modules of every file (:attr:`ArchVerdict.empty`: never loaded, not
        counted), each after its file's name."""
        return tuple(f"{n}: {m}" for n, v in self.files for m in v.empty)

    def _floors(self) -> list[tuple[str, CudaVersion | None, bool]]:
        """``(file, floor, known)`` per file that counts, a group's its lowest build's."""
        groups = {self.serving(g): g for g, _ in self.alternatives}
        out = []
        for n, v in self.units:
            low = self.floor(groups[n]) if n in groups else None
            out.append((n, v.min_driver, v.min_driver_known) if low is None else (*low, True))
        return out

    @property
    def min_driver_known(self) -> bool:
        return all(known for _, _, known in self._floors())

    @property
    def min_driver(self) -> CudaVersion | None:
        """The highest driver floor of the files (None: no image picked, or unknown)."""
        floors = [f for _, f, _ in self._floors() if f is not None]
        return max(floors) if floors and self.min_driver_known else None

    @property
    def min_driver_file(self) -> str | None:
        """The file that sets :attr:`min_driver` (the first of equals)."""
        low = self.min_driver
        return next((n for n, f, _ in self._floors() if f == low), None) if low else None

    @property
    def min_release(self) -> Release | None:
        """The driver versions of :attr:`min_driver`."""
        low = self.min_driver
        files = dict(self.files)
        return highest_release(files[n].min_release for n, f, _ in self._floors() if f == low) \
            if low else None

    @property
    def host(self) -> str | None:
        """The OS of the files, when they all have the same one."""
        hosts = {v.host for _, v in self.files}
        return hosts.pop() if len(hosts) == 1 else None

    @property
    def max_driver(self) -> CudaVersion | None:
        """The last CUDA version whose driver drives this device (every file's is the same)."""
        return self.files[0][1].max_driver

    @property
    def driver_gap(self) -> str | None:
        """Why no driver drives every file on this device, if none does."""
        return next((f"{n}: {v.driver_gap}" for n, v in self.units if v.driver_gap), None)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The files' warnings, each after the files that give it (``lib/a.so: ...``; one that
        every file of several gives, such as the device's, once without names)."""
        where: dict[str, list[str]] = {}
        for name, v in self.units:
            for w in v.warnings:
                where.setdefault(w, []).append(name)
        every = len(self.units) > 1
        return tuple(w if every and len(names) == len(self.units) else
                     f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}: {w}"
                     for w, names in where.items())

    @property
    def reason(self) -> str:
        """One line a user can act on: the first library that fails (or holds nothing for the
        arch, or is partial), and why."""
        units = self.units
        n = len(units)
        sm = self.device.sm
        failing, nothing = self.named("fails"), self.named("other_gpus_only")
        if failing:
            return _first(failing, n, "cannot load", units)
        if len(nothing) == n:
            return f"no library holds an image for {sm}"
        if not any(v.loading for _, v in units):
            return f"no library loads on {sm} (only data-only modules)"
        parts = []
        if nothing:
            parts.append(f"{len(nothing)}/{n} {_plural(n, 'library', 'libraries')} hold no "
                         f"image for {sm} (built for other GPUs: they fail only if used on "
                         f"this one): {', '.join(nothing[:3])}" + (" ..." if len(nothing) > 3
                                                                   else ""))
        if self.named("partial"):
            parts.append(_first(self.named("partial"), n, "partial", units))
        return "; ".join(parts) or f"{n}/{n} {_plural(n, 'library loads', 'libraries load')}"

    def to_dict(self) -> dict[str, Any]:
        low = self.min_driver
        verdicts = dict(self.files)
        alternatives = []
        for group, members in self.alternatives:
            floor = self.floor(group)
            alternatives.append({
                "group": group, "serving": self.serving(group),
                "min_driver": None if floor is None else dotted(floor[1]),
                "min_driver_file": None if floor is None else floor[0],
                "files": [{"file": m, "status": verdicts[m].status,
                           "min_driver": _dotted_or_none(verdicts[m].min_driver)}
                          for m in members]})
        return {
            "device": self.device.sm,
            "driver": dotted(self.driver) if self.driver else None,
            "status": self.status,
            "reason": self.reason,
            "works": list(self.named("works")),
            "partial": list(self.named("partial")),
            "fails": list(self.named("fails")),
            "other_gpus_only": list(self.named("other_gpus_only")),
            "modules": self.modules,
            "min_driver": dotted(low) if low else None,
            **_driver_numbers(self.min_release, self.host),
            "min_driver_file": self.min_driver_file,
            "max_driver": dotted(self.max_driver) if self.max_driver else None,
            "driver_gap": self.driver_gap,
            "warnings": list(self.warnings),
            "alternatives": alternatives,
            **self.counts,
        }

    def __str__(self) -> str:
        driver = f" with driver {dotted(self.driver)}" if self.driver else ""
        return f"{self.device.sm}{driver}: {self.status}: {self.reason}"

    def __repr__(self) -> str:
        """Counts, not the files' verdicts: short for a wheel of hundreds of libraries."""
        return (f"TotalVerdict({self.device.sm}, driver={_driver_repr(self.driver)}, "
                f"status={self.status!r}, files={len(self.files)}, "
                f"alternatives={len(self.alternatives)}, modules={self.modules})")


@dataclass(frozen=True)
class ArchMinDriver:
    """The lowest driver that loads a file's images on one GPU arch (of a wheel's or folder's
    libraries: the highest any library needs, :attr:`min_driver_file` the one that needs it):
    what ``check --min-driver`` prints per arch. Fields as on the :attr:`verdict` it is read
    from (an :class:`ArchVerdict` or :class:`TotalVerdict` made with no driver): ``min_driver``
    the CUDA version (None: no image is picked, or ``min_driver_known`` False: a floor newer
    than the tables), ``min_release`` its driver versions, of which ``host``'s apply,
    ``max_driver`` the last CUDA version that drives the device (None: still driven) and
    ``driver_gap`` why no driver can load the images on it, if none can."""

    device: Arch
    min_driver: CudaVersion | None
    min_driver_known: bool
    min_release: Release | None
    host: str | None
    max_driver: CudaVersion | None
    driver_gap: str | None
    min_driver_file: str | None
    verdict: ArchVerdict | TotalVerdict = field(repr=False, compare=False)

    @classmethod
    def of(cls, verdict: ArchVerdict | TotalVerdict) -> ArchMinDriver:
        """The minimum driver a verdict states."""
        return cls(verdict.device, verdict.min_driver, verdict.min_driver_known,
                   verdict.min_release, verdict.host, verdict.max_driver, verdict.driver_gap,
                   verdict.min_driver_file if isinstance(verdict, TotalVerdict) else None,
                   verdict)

    @property
    def needs(self) -> str:
        """``needs CUDA 12.0 (Linux driver >= 525.60.13)``, with the device's last CUDA version
        when it has one, ``needs no existing driver: ...`` for a :attr:`driver_gap`; empty when
        no image is picked."""
        if self.driver_gap:
            return f"needs no existing driver: {self.driver_gap}"
        if not self.min_driver_known:
            return "needs an unknown driver (a floor newer than the tables)"
        if self.min_driver is None:
            return ""
        upto = f", up to CUDA {dotted(self.max_driver)}" if self.max_driver else ""
        return f"needs {cuda_name(self.min_driver, self.host, self.min_release)}{upto}"

    @property
    def covers(self) -> str:
        """Which modules the minimum is for: ``every module``, ``3/5 modules (the others hold
        no image for it)``, and for a wheel or folder the library that sets it when the
        libraries need different drivers."""
        v = self.verdict
        picked = v.modules - v.counts["other_gpus"]
        cover = ("every module" if picked == v.modules else
                 f"{picked}/{v.modules} modules (the others hold no image for it)")
        if isinstance(v, TotalVerdict) and v.min_driver_file and len(
                {f.min_driver for _, f in v.files if f.min_driver}) > 1:
            cover += f"; set by {v.min_driver_file}"  # the others need less
        return cover

    def to_dict(self) -> dict[str, Any]:
        """The verdict's JSON (``check --min-driver --json``'s per arch): its ``status`` is
        arch coverage only, ``linux_driver``, ``windows_driver`` and ``host`` the driver
        versions of the minimum."""
        return self.verdict.to_dict()

    @property
    def text(self) -> str:
        """``CUDA 12.0 (Linux driver >= 525.60.13): every module``, or ``no image``."""
        needs = self.needs.removeprefix("needs ")
        return f"{needs}: {self.covers}" if needs else "no image"

    def __str__(self) -> str:
        """``sm_90: CUDA 12.0 (Linux driver >= 525.60.13): every module``."""
        return f"{self.device.sm}: {self.text}"


@dataclass(frozen=True)
class MinDriver:
    """The lowest driver per GPU arch for a file (:meth:`fatbinkit.binary.Binary.min_driver`)
    or a wheel's or folder's libraries (:func:`fatbinkit.collection.min_driver`): ``check
    --min-driver``. ``modules`` counts every module, empty ones included (each arch's verdict
    counts only the others); ``files`` the libraries judged (None: one file) and
    ``alternatives`` their groups of builds per CUDA version. ``min_driver["sm_90"]`` is an
    arch's :class:`ArchMinDriver`."""

    file: str
    modules: int
    archs: tuple[ArchMinDriver, ...]
    files: tuple[str, ...] | None = None
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __getitem__(self, arch: ArchLike) -> ArchMinDriver:
        device = as_device(arch, "GPU arch")
        found = next((a for a in self.archs if a.device.number == device.number), None)
        if found is None:
            raise NotFoundError.among("arch", device.sm, [a.device.sm for a in self.archs],
                                      self.file)
        return found

    @property
    def empty(self) -> int:
        """The empty modules (no kernels, no variables: never loaded), left out of the
        verdicts."""
        return len(self.archs[0].verdict.empty) if self.archs else 0

    def to_dict(self) -> dict[str, Any]:
        """``check --min-driver --json``: of a file, or (with :attr:`files`) of a wheel or
        folder."""
        per_arch = {a.device.sm: a.to_dict() for a in self.archs}
        if self.files is None:
            return {"file": self.file, "modules": self.modules, "min_driver": per_arch}
        return {"file": self.file, "files": list(self.files), "modules": self.modules,
                "alternatives": [{"group": g, "files": list(members)}
                                 for g, members in self.alternatives],
                "min_driver": per_arch}

    def __str__(self) -> str:
        """What ``check --min-driver`` prints: a line per arch, then the warnings."""
        empty = self.empty
        lines = [f"{self.file}: minimum driver per GPU arch ({self.modules} module(s)"
                 + (f" in {len(self.files)} file(s)" if self.files is not None else "")
                 + (f"; {empty} empty ones, no kernels and no variables: never loaded, left "
                    "out" if empty > 0 else "") + ")"]
        width = max((len(a.device.sm) for a in self.archs), default=0) + 2
        lines += [f"  {a.device.sm.ljust(width)}{a.text}" for a in self.archs]
        lines += [f"warning: {w}" for w in dict.fromkeys(
            w for a in self.archs for w in a.verdict.warnings)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        files = "" if self.files is None else f", files={len(self.files)}"
        return (f"MinDriver({self.file!r}, modules={self.modules}, "
                f"archs={len(self.archs)}{files})")


def _dotted_or_none(version: CudaVersion | None) -> str | None:
    return dotted(version) if version else None


def _first(names: Sequence[str], n: int, what: str,
           files: Sequence[tuple[str, ArchVerdict]]) -> str:
    """``2/5 libraries cannot load: lib/a.so: <its reason> (+1 more)``."""
    reason = dict(files)[names[0]].reason
    more = f" (+{len(names) - 1} more)" if len(names) > 1 else ""
    return (f"{len(names)}/{n} {_plural(n, 'library', 'libraries')} {what}: {names[0]}: "
            f"{reason}{more}")


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def file_verdict(sets: Sequence[ImageSet], device: ArchLike,
                 driver: DriverLike | None = None) -> ArchVerdict:
    """The verdict on ``device`` (with ``driver``) for every load unit of a file, e.g.
    ``file_verdict(image_sets(Path("libcublas.so.13")), Arch(90), (13, 0)).status``."""
    device = as_arch(device, "device")
    driver = None if driver is None else as_cuda_version(driver)
    return ArchVerdict.of(device, driver,
                          [(s, [d for _, d in s.decisions(device, driver)]) for s in sets])


def image_from_cubin(data: bytes | bytearray | memoryview, label: str = "",
                     arch: Arch | None = None, compression: str | None = None) -> ImageInfo:
    """The SASS image of a cubin, with its kernel names and producer toolkit; ``arch``
    overrides the cubin's own (a fatbin entry's header, which is what the driver reads)."""
    c = cubin_outline(data)  # what the image needs: no attribute records
    return ImageInfo(SASS, arch or c.arch, None, label, c.kernels, toolkit=c.toolkit,
                     abi_version=c.abi_version, compression=compression, variables=c.variables)


def image_from_ptx(data: bytes | bytearray | memoryview, label: str = "",
                   arch: Arch | None = None, compression: str | None = None) -> ImageInfo:
    """The PTX image of a PTX module, with its entry names (``arch`` as for cubins)."""
    p = Ptx.from_bytes(data)
    label_arch = arch or p.arch
    target = p.arch if p.arch != label_arch and ptx_narrower(p.arch, label_arch) else None
    return ImageInfo(PTX, label_arch, p.version, label, frozenset(e.name for e in p.entries),
                     target, compression=compression,
                     variables=_ptx_variables(bytes(data)))


def _ptx_variables(text: bytes) -> bool:
    """Whether PTX text declares a module-scope ``.global`` or ``.const`` variable. Each line is
    looked at once, from its first such directive (a later one on the same line follows that
    directive, so it does not start the line either): linear in the text."""
    pos = 0
    while (m := _PTX_VARIABLE_AT.search(text, pos)) is not None:
        at = m.start()
        start = text.rfind(b"\n", pos, at) + 1 or pos
        if _PTX_VARIABLE_LINE.fullmatch(text, start, at):
            return True
        end = text.find(b"\n", at)
        if end < 0:
            return False
        pos = end + 1
    return False


def ptx_narrower(text: Arch, label: Arch) -> bool:
    """Whether PTX whose ``.target`` is ``text`` JITs for fewer devices than its ``label`` says
    (same SM with an ``a``/``f`` the label lacks, or a higher SM)."""
    return text.number > label.number or (
        text.number == label.number and _SUFFIX_RANK[text.suffix] > _SUFFIX_RANK[label.suffix])


def image_from_bytes(data: bytes | bytearray | memoryview, label: str = "") -> ImageInfo:
    """A bare cubin or PTX as an image (not a fatbin: see :func:`image_sets`)."""
    if is_cubin(data):
        return image_from_cubin(data, label)
    if is_ptx(data):
        return image_from_ptx(data, label)
    raise InvalidArgumentError(f"{label or 'input'} is neither a cubin nor PTX")


def image_from_entry(entry: FatbinEntry, label: str = "",
                     budget: DecompressionBudget | None = None) -> ImageInfo | None:
    """The image of a fatbin entry (None for kinds the driver does not load: LTO-IR...).

    Arch and ``a``/``f`` come from the entry header as the driver reads them; the PTX ISA version
    from the PTX text, which is what the JIT compiler checks. Decompression is charged to
    ``budget``.
    """
    if entry.header.kind == EntryKind.ELF:
        data = entry.data(budget=budget)
        try:
            return image_from_cubin(data, label, entry.arch, entry.compression)
        except (FormatError, UnsupportedError) as exc:  # one bad cubin must not hide the rest
            abi = data[8] if len(data) > 8 else None
            return ImageInfo(SASS, entry.arch, None, label, None, abi_version=abi,
                             compression=entry.compression, unread=str(exc))
    if entry.header.kind == EntryKind.PTX:
        return image_from_ptx(entry.data(budget=budget), label, entry.arch, entry.compression)
    return None


def image_sets(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
               max_decompressed: int | DecompressionBudget | None = None, *,
               jobs: int | None = None, progress: Progress = None,
               devices: Iterable[ArchLike] | None = None,
               codes: Sequence[DeviceCode] | None = None,
               entryless: Sequence[EntrylessContainer] = ()) -> tuple[ImageSet, ...]:
    """Every load unit in a file or buffer: each fatbin container (in a fatbin, a host ELF's
    ``.nv_fatbin``, or an embedded blob), or the bare cubin/PTX itself (a ``str`` is a path).
    Each image's :attr:`ImageInfo.host` is the input's OS (:func:`host_of`).
    Images are read on ``jobs`` processes (default: every core; ``progress`` as
    :func:`fatbinkit.parallel.map_codes` takes it). Decompression is charged to
    ``max_decompressed`` (:meth:`DecompressionBudget.of`: default 64x the input + 256 MiB) up
    front, for every cubin and PTX read (:func:`fatbinkit.parallel.charge`).

    With ``devices``, only the images one of those GPUs could load are read (SASS that runs on
    it, PTX that JITs for it: :func:`sass_runs_on`, :func:`ptx_jits_for`), and every image of a
    module with none of those (its kernels and variables tell a module built for other GPUs
    from an empty one); the others come from their entry headers, their kernels and toolkit
    unknown (None). The image each device picks and its floors are the same; what is not
    known is which kernels only the unread images hold (a kernel the picked image lacks is
    ``CUDA_ERROR_NOT_FOUND``). libtorch_cuda.so, three archs: a third of its 5 GiB of images.
    ``codes``: what :func:`~fatbinkit.scan.scan` found in ``source``, when the caller has it,
    and ``entryless`` the containers with no entry (:func:`~fatbinkit.scan.scan_modules`):
    each is a module too (:attr:`ImageSet.entryless`), in its place in file order."""
    from .parallel import charge, map_codes

    source = as_input(source, "image_sets() source")
    if codes is None:
        codes, entryless = scan_modules(source)
    host = input_host(source)
    budget = DecompressionBudget.of(max_decompressed, len(source) if isinstance(
        source, (bytes, bytearray, memoryview)) else os.path.getsize(source))
    # the loadable entries (SASS, PTX) per module: a container, or a bare image (an embedded
    # blob, per archive member)
    groups: dict[tuple[str, str, int], list[int]] = {}
    for i, code in enumerate(codes):
        members = groups.setdefault((code.member, code.source, code.container), [])
        if code.entry.header.kind in (EntryKind.ELF, EntryKind.PTX):
            members.append(i)
    read = {i for members in groups.values() for i in members}
    if devices is not None:
        targets = [as_arch(d, "device") for d in devices]
        read = {i for i in read if any(
            (sass_runs_on if codes[i].entry.header.kind == EntryKind.ELF else ptx_jits_for)(
                codes[i].entry.arch, d) for d in targets)}
        read |= {i for members in groups.values() if read.isdisjoint(members) for i in members}
    order = sorted(read)
    chosen = [codes[i] for i in order]
    charge(chosen, budget)
    found = dict(zip(order, map_codes(
        lambda c: image_from_entry(c.entry, f"entry at {c.offset:#x}"), chosen, jobs=jobs,
        progress=progress, desc="reading images"), strict=True))
    sets: list[ImageSet] = []
    for (member, src, c), members in groups.items():
        images = []
        for i in members:
            label = f"entry at {codes[i].offset:#x}"
            img = found[i] if i in found else header_image(codes[i].entry, label)
            assert img is not None  # SASS and PTX entries only
            images.append(replace(img, offset=codes[i].offset, host=host))
        sets.append(ImageSet(module_label(src, c, member), tuple(images), raw=c < 0,
                             source=src, container=c if c >= 0 else None))
    for hole in reversed(entryless):  # each where it is in the file: before the next one
        at = next((i for i, s in enumerate(sets)
                   if s.container is not None and s.container > hole.container), len(sets))
        sets.insert(at, ImageSet.of_entryless(hole))
    return tuple(sets)


def module_label(source: str, container: int, member: str = "") -> str:
    """How a module is named: ``.nv_fatbin container 3``, ``__k_start`` (an embedded bare
    image), ``file`` (a bare file), after ``member: `` in a static library."""
    where = f"{source or 'file'} container {container}" if container >= 0 else (source or "file")
    return f"{member}: {where}" if member else where


def header_image(entry: FatbinEntry, label: str = "") -> ImageInfo:
    """What an entry header alone says of its image: kind, arch, PTX ISA, codec."""
    if entry.header.kind == EntryKind.PTX:
        return ImageInfo(PTX, entry.arch, entry.code_version, label,
                         compression=entry.compression)
    return ImageInfo(SASS, entry.arch, None, label, compression=entry.compression)


def predict_load(data: bytes | bytearray | memoryview, device: ArchLike,
                 driver: DriverLike | None = None) -> Decision:
    """What ``cuModuleLoadData(data)`` would do on ``device``: for a fatbin, its first container
    (the only one the driver reads); else the bare cubin or PTX. A host ELF (``.so``, ``.o``) is
    refused as the driver refuses it, even when it carries fatbins: load what :func:`scan` finds
    in it instead."""
    data = as_content(data, "predict_load()")
    machine = elf.machine(data)
    if machine is not None and machine != elf.EM_CUDA:
        raise FormatError(f"a host ELF file (e_machine {machine}), not a cubin: the driver takes a "
                          "fatbin, a cubin or PTX; load the device code scan() finds in it",
                          offset=18)
    sets = image_sets(data)
    if not sets:
        raise FormatError("no device code: no fatbin container, cubin or PTX to load", offset=0)
    return sets[0].decide(device, driver)
