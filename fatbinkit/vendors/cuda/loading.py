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

import contextlib
import functools
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...decision import (
    BELOW_FLOOR,
    LOADS,
    NO_IMAGE,
    PTX,
    REFUSED,
    SASS,
    Decision,
    Floor,
    ImageInfo,
    Verdict,
    dotted,
)
from ...errors import (
    DecompressionError,
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    UnsupportedError,
)
from ...formats.arch import Arch, ArchLike
from ...formats.codec import ZSTD_STEP, zstd_steps
from ...formats.cubin import ABI_V2, compact_cubin, cubin_outline, is_cubin
from ...formats.fatbin import MAX_DATA_SIZE, DecompressionBudget, EntryKind, FatbinEntry
from ...formats.ptx import (
    NEWEST_KNOWN_CUDA,
    Ptx,
    is_ptx,
    max_ptx_isa_for_driver,
    min_driver_for_ptx_isa,
    ptx_in_steps,
)
from .driver import (
    DEVICE_SUPPORT,
    DEVICE_TABLE_CUDA,
    FUTURE,
    MINOR_COMPAT_DRIVER,
    RELEASES,
    CudaVersion,
    Driver,
    DriverLike,
    Release,
    as_cuda_version,
    as_device,
    beyond_table,
    cuda_name,
    driver_name,
    drivers_text,
    release_for,
    version_tuple,
)

if TYPE_CHECKING:
    from ...formats.elf import Buffer

__all__ = [
    "ABI_V2_MIN_CUDA",
    "COMPRESSION_MIN_CUDA",
    "INVALID_IMAGE",
    "INVALID_PTX",
    "NOT_FOUND",
    "NO_BINARY",
    "NO_DEVICE",
    "UNSUPPORTED_PTX",
    "VARIANT_MIN_CUDA",
    "decide",
    "device_floor",
    "floor",
    "header_image",
    "image_floors",
    "image_from_bytes",
    "image_from_cubin",
    "image_from_entry",
    "image_from_ptx",
    "met_by",
    "ptx_jits_for",
    "ptx_narrower",
    "refusal",
    "sass_runs_on",
    "streamed_cubin",
    "streamed_ptx",
]


# the CUresult names of the driver's refusals (Decision.error)
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


@functools.lru_cache(maxsize=4096)  # a check builds the same floors per module and GPU
def floor(what: str, need: CudaVersion | None, why: str, error: str, *, family: bool = False,
          built: CudaVersion | None = None, host: str | None = None) -> Floor:
    """A CUDA driver floor, with the driver versions that meet it (:func:`_release`) and what
    it needs in words (:func:`_needs`)."""
    release = _release(need, family, built)
    return Floor(what, need, why, error, family, built, host, release=release,
                 needs=_needs(need, family, release, host))


def _release(need: CudaVersion | None, family: bool, built: CudaVersion | None,
             ) -> Release | None:
    """The minimum driver versions that meet a floor: Table 3's row for ``need``, or for a
    family floor whose cubin is newer than its major's first release, the minor-version
    compatibility row (Table 2: a CUDA 11.7 cubin needs 450.80.02, not the 11.0 driver)."""
    if need is None:
        return None
    compat = MINOR_COMPAT_DRIVER.get(need[0]) if family else None
    if compat is not None and built is not None and built >= compat.cuda:
        return Release(need, compat.linux, compat.windows)
    return release_for(need)


def _needs(need: CudaVersion | None, family: bool, release: Release | None,
           host: str | None) -> str:
    """``CUDA 12.9 (Linux driver >= 575.51.03)``, or for a family ``a CUDA 13.x driver
    (Linux >= 580.65.06)``."""
    if need is None:
        return (f"a CUDA release newer than any known (CUDA {dotted(NEWEST_KNOWN_CUDA)} or "
                "older does not know it)")
    if family:
        numbers = f" ({drivers_text(release, host, '')})" if release else ""
        return f"a CUDA {need[0]}.x driver{numbers}"
    return cuda_name(need, host)


def met_by(f: Floor, driver: CudaVersion) -> bool:
    """Whether ``driver`` meets the floor ``f``: its CUDA version, and for a :class:`Driver`
    (named by its version) whose CUDA version is the floor's own or, for a family floor,
    below the cubin's toolkit (minor-version compatibility), the minimum driver version of
    :attr:`Floor.release` in the column of :attr:`Floor.host` (Linux where the input's OS is
    not known): every R450 driver implements CUDA 11.0, only 450.80.02 and later run 11.1+
    cubins."""
    if f.need is None:
        return driver > NEWEST_KNOWN_CUDA  # beyond the tables: assumed to know it
    if driver < f.need:
        return False
    rel = f.release
    if not isinstance(driver, Driver) or rel is None:
        return True
    if driver > f.need and (not f.family or driver >= (f.built or f.need)):
        return True
    number = rel.driver(f.host)
    return number is None or driver.version >= version_tuple(number)


def refusal(f: Floor, driver: CudaVersion) -> str:
    """``cubin built by CUDA 13.2 needs CUDA 13.0 (Linux driver >= 580.65.06); driver 12.8
    refuses it``."""
    return f"{f.why} needs {f.needs}; driver {driver_name(driver)} refuses it"


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


def device_floor(device: Arch, host: str | None = None) -> Floor:
    """The first CUDA release whose driver drives ``device``, its driver numbers those of
    ``host``; for an arch absent from the table, a release newer than any known
    (:data:`~fatbinkit.driver.DEVICE_TABLE_CUDA`: the table holds every arch up to it)."""
    support = DEVICE_SUPPORT.get(device.number)
    if support is None:
        return floor("device", None, f"a {device.sm} GPU", NO_DEVICE, host=host)
    return floor("device", support.first, f"a {device.sm} GPU", NO_DEVICE, host=host)


@functools.lru_cache(maxsize=256)  # a few archs, asked for each image of each module and GPU
def _tabled_gpu_runs(image: Arch) -> bool:
    """Whether some GPU of the device table runs SASS for ``image``."""
    return any(sass_runs_on(image, Arch(n)) for n in DEVICE_SUPPORT)


def _sass_device_floor(image: Arch, host: str | None) -> Floor | None:
    """The device floor of SASS that no GPU of the table runs (sm_130, or sm_107a were sm_107
    not tabled): the GPUs it runs on are all absent, so newer than the table (None: a known GPU
    runs it, whose own floor :func:`decide` checks)."""
    if _tabled_gpu_runs(image):
        return None
    return floor("device", None, f"SASS {image.sm} (no GPU of the device table runs it)",
                 INVALID_IMAGE, host=host)


def image_floors(image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
    """The driver floors of one image in the order a driver meets them (the entry header's
    flags, then the payload), and what could not be known about them."""
    floors: list[Floor] = []
    warnings: list[str] = []
    bad = INVALID_IMAGE if image.kind == SASS else INVALID_PTX
    host = image.host
    if image.compression in COMPRESSION_MIN_CUDA:
        floors.append(floor("compression", COMPRESSION_MIN_CUDA[image.compression],
                            f"{image.compression}-compressed {image.name}", bad, host=host))
    suffix = (image.target or image.arch).suffix
    if suffix:
        kind = "arch-specific" if suffix == "a" else "family-specific"
        floors.append(floor("variant", VARIANT_MIN_CUDA[suffix],
                            f"{kind} ({suffix}) target {image.name}", bad, host=host))
    if image.kind == SASS:
        beyond = _sass_device_floor(image.arch, host)
        if beyond is not None:
            floors.append(beyond)
        if image.toolkit is not None:
            major, _ = image.toolkit
            # within a major family from CUDA 11 on (minor-version compatibility, with the
            # driver version of Table 2 when the cubin is newer than the driver), else exactly
            need = (major, 0) if major >= 11 else image.toolkit
            floors.append(floor("toolkit", need, f"cubin {image.name} built by CUDA "
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
                floors.append(floor("toolkit", need, f"cubin {image.name} in ELF ABI v2 "
                                    "(producer toolkit not recorded)", bad, host=host))
    else:
        assert image.ptx_version is not None
        try:
            need_isa: CudaVersion | None = min_driver_for_ptx_isa(image.ptx_version)
        except FatbinkitError:
            need_isa = None
        floors.append(floor("ptx-isa", need_isa, f"PTX ISA {dotted(image.ptx_version)} "
                            f"({image.arch.compute})", UNSUPPORTED_PTX, host=host))
    return tuple(floors), tuple(warnings)


def _driver_warnings(device: Arch, driver: CudaVersion | None) -> list[str]:
    out = []
    if device.number not in DEVICE_SUPPORT and (driver is None or driver > DEVICE_TABLE_CUDA):
        # named as {FUTURE}sm_XY (as_device): its floor is the device floor (device_floor);
        # above the table's release, whether the driver drives it is not known
        given = "no driver given" if driver is None else (
            f"driver {dotted(driver)} is newer than that: assumed to drive it")
        out.append(f"{device.sm} is named as a future GPU ({FUTURE}{device.sm}), not in NVIDIA's "
                   f"device table (sm_{min(DEVICE_SUPPORT)} .. sm_{max(DEVICE_SUPPORT)}, every "
                   f"arch up to CUDA {dotted(DEVICE_TABLE_CUDA)}): {beyond_table(device.sm)}; "
                   f"{given}")
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
    first = device_floor(device, host)
    support = DEVICE_SUPPORT.get(device.number)
    if support is None:
        if met_by(first, driver):
            return None
        return first, (f"driver {driver_name(driver)} does not drive {device.sm} GPUs: "
                       f"{beyond_table(device.sm)}")
    if not met_by(first, driver):
        thor = f" ({support.note})" if support.last is None and support.note else ""
        return first, (f"driver {driver_name(driver)} does not drive {device.sm} GPUs: "
                       f"they need {cuda_name(support.first, host)}{thor}")
    if support.last is not None and driver > support.last:
        return first, (f"a driver for CUDA {dotted(driver)} no longer drives {device.sm} GPUs: "
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
            failed = next((f for f in own if driver is not None and not met_by(f, driver)), None)
            if failed is not None:
                assert driver is not None
                verdict = Verdict(img, False, refusal(failed, driver), failed.error, failed)
            else:
                verdict = Verdict(img, True, _fits(img, dev, driver))
        verdicts.append(verdict)
        (sass if img.kind == SASS else ptx).append(
            (verdict, (dfloor, *own), unknown))

    def result(image: ImageInfo | None, how: str, reason: str, error: str | None,
               floors: tuple[Floor, ...] = (), floor: Floor | None = None) -> Decision:
        outcome = (LOADS if image is not None else BELOW_FLOOR if floor is not None else
                   NO_IMAGE if error == NO_BINARY else REFUSED)
        return Decision(dev, driver, image, how, reason, error, tuple(verdicts), floors, floor,
                        tuple(warnings), outcome=outcome)

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
    return _ptx_image(Ptx.from_bytes(data), label, arch, compression,
                      _ptx_variables(bytes(data)))


def _ptx_image(p: Ptx, label: str, arch: Arch | None, compression: str | None,
               variables: bool) -> ImageInfo:
    """The PTX image of the parsed text ``p`` (``arch``: its label's, as for cubins)."""
    label_arch = arch or p.arch
    target = p.arch if p.arch != label_arch and ptx_narrower(p.arch, label_arch) else None
    return ImageInfo(PTX, label_arch, p.version, label, frozenset(e.name for e in p.entries),
                     target, compression=compression, variables=variables)


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
                     budget: DecompressionBudget | None = None, *,
                     streamed: bool = False) -> ImageInfo | None:
    """The image of a fatbin entry (None for kinds the driver does not load: LTO-IR...).

    Arch and ``a``/``f`` come from the entry header as the driver reads them; the PTX ISA version
    from the PTX text, which is what the JIT compiler checks. Decompression is charged to
    ``budget``. ``streamed``: a SASS image stored as zstd that inflates to more than
    :data:`STREAM_ABOVE` bytes is read in steps, never whole (:func:`streamed_cubin`: prune's
    memory; it inflates the payload about once more, so the other commands read whole), and so
    is a PTX image of more than :data:`STREAM_PTX_ABOVE` bytes (:func:`streamed_ptx`).
    """
    if entry.header.kind == EntryKind.ELF:
        compact = streamed_cubin(entry, budget) if streamed else None
        if compact is not None:
            with contextlib.suppress(FormatError, UnsupportedError):  # read whole: its error
                return image_from_cubin(compact, label, entry.arch, entry.compression)
        data = entry.data(budget=budget)
        try:
            return image_from_cubin(data, label, entry.arch, entry.compression)
        except (FormatError, UnsupportedError) as exc:  # one bad cubin must not hide the rest
            abi = data[8] if len(data) > 8 else None
            return ImageInfo(SASS, entry.arch, None, label, None, abi_version=abi,
                             compression=entry.compression, unread=str(exc))
    if entry.header.kind == EntryKind.PTX:
        img = streamed_ptx(entry, label, budget) if streamed else None
        if img is not None:
            return img
        return image_from_ptx(entry.data(budget=budget), label, entry.arch, entry.compression)
    return None


#: zstd payloads that inflate to more than this many bytes are read in steps, never held whole
#: (NCCL 2.28's cubins inflate to 105-133 MiB each): SASS images by :func:`streamed_cubin`,
#: and every payload prune checks.
STREAM_ABOVE = 4 * ZSTD_STEP


def streamed_cubin(entry: FatbinEntry, budget: DecompressionBudget | None = None,
                   above: int | None = None) -> bytes | None:
    """What :func:`~fatbinkit.formats.cubin.cubin_outline` and
    :func:`~fatbinkit.formats.cubin.cubin_toolkit` read of a SASS entry stored as zstd that
    inflates to more than ``above`` bytes (:data:`STREAM_ABOVE` by default), as a compact ELF
    on which they give the same values (:func:`~fatbinkit.formats.cubin.compact_cubin`),
    inflated in steps and never whole; charged to ``budget`` as :meth:`FatbinEntry.data` does.
    None for any other entry, and where the payload or the cubin is not read that way (a
    corrupt frame, one of another size than its header records, a cubin the compact form does
    not cover): the caller then reads the entry whole, which raises its own error. A reader
    that refuses the compact ELF is refused in offsets of it: the caller reads the entry whole
    for the error too."""
    h = entry.header
    expected = h.uncompressed_size
    if h.kind != EntryKind.ELF or entry.compression != "zstd" or expected > MAX_DATA_SIZE or \
            expected <= (STREAM_ABOVE if above is None else above):
        return None
    src = _open_payload(entry)
    if src is None:
        return None
    if budget is not None:
        budget.charge(expected, entry.offset, id(entry))
    src = src[: h.compressed_size]
    try:
        return compact_cubin(lambda: zstd_steps(src, expected, entry.offset), expected)
    except DecompressionError:
        return None


def _open_payload(entry: FatbinEntry) -> Buffer | None:
    """The entry's payload as stored, or None where it is a view of a closed Binary (the
    caller then reads whole: :meth:`FatbinEntry.data` says so)."""
    src = entry.stored
    if isinstance(src, memoryview):
        try:
            src.nbytes  # noqa: B018 (raises for a released view)
        except ValueError:
            return None
    return src


#: PTX texts longer than this are read in steps by :func:`streamed_ptx` (one step: a text of
#: one step is read whole either way)
STREAM_PTX_ABOVE = ZSTD_STEP


def streamed_ptx(entry: FatbinEntry, label: str = "",
                 budget: DecompressionBudget | None = None,
                 above: int | None = None) -> ImageInfo | None:
    """:func:`image_from_ptx` of a PTX entry whose text is longer than ``above`` bytes
    (:data:`STREAM_PTX_ABOVE` by default), its text read in steps of :data:`ZSTD_STEP` bytes and
    parsed as it comes (:func:`~fatbinkit.formats.ptx.ptx_in_steps`): never held whole, nor
    decoded whole (cuBLASLt's 16 MiB texts cost 62 MiB to parse whole). A zstd payload is
    inflated in steps (charged to ``budget`` as :meth:`FatbinEntry.data` charges it), an
    uncompressed one walked where it lies, an LZ4 block (no streaming form) inflated whole as
    :meth:`FatbinEntry.data` does, its error raised as there. None for any other entry, and
    where the text is not read that way (a corrupt zstd frame, one of another size than its
    header records, text the stepped parse does not cover or that the parse refuses): the
    caller then reads the entry whole, which gives its value or raises its error."""
    h = entry.header
    size = entry.data_size
    codec = entry.compression
    if h.kind != EntryKind.PTX or size <= (STREAM_PTX_ABOVE if above is None else above) or \
            size > MAX_DATA_SIZE:
        return None
    src = _open_payload(entry)
    if src is None:
        return None
    if codec == "lz4":
        src = entry.data(budget=budget)
    elif codec == "zstd":
        if budget is not None:
            budget.charge(size, entry.offset, id(entry))
        src = src[: h.compressed_size]
    elif codec is not None:
        return None
    view = memoryview(src)
    steps = (zstd_steps(view, size, entry.offset) if codec == "zstd" else
             (view[i : i + ZSTD_STEP] for i in range(0, len(view), ZSTD_STEP)))
    found = False

    def lines(text: bytes) -> None:
        nonlocal found
        found = found or _ptx_variables(text)

    p = ptx_in_steps(steps, lines)
    return None if p is None else _ptx_image(p, label, entry.arch, codec, found)


def header_image(entry: FatbinEntry, label: str = "") -> ImageInfo:
    """What an entry header alone says of its image: kind, arch, PTX ISA, codec."""
    if entry.header.kind == EntryKind.PTX:
        return ImageInfo(PTX, entry.arch, entry.code_version, label,
                         compression=entry.compression)
    return ImageInfo(SASS, entry.arch, None, label, compression=entry.compression)
