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
  (:data:`fatbinkit.ptx.PTX_ISA_MIN_CUDA`, from the PTX ISA release history); CUDA minor-version
  compatibility does not extend to PTX JIT (CUDA Compatibility guide, "Minor Version
  Compatibility", its limitations). Newer PTX fails with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.
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

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import elf
from .arch import Arch
from .cubin import Cubin, is_cubin
from .errors import FatbinkitError, FormatError, InvalidArgumentError
from .fatbin import EntryKind, FatbinEntry
from .ptx import NEWEST_KNOWN_CUDA, Ptx, is_ptx, max_ptx_isa_for_driver, min_driver_for_ptx_isa
from .scan import scan

SASS = "sass"
PTX = "ptx"

NO_BINARY = "CUDA_ERROR_NO_BINARY_FOR_GPU"
UNSUPPORTED_PTX = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
INVALID_PTX = "CUDA_ERROR_INVALID_PTX"

_SUFFIX_RANK = {"a": 2, "f": 1, "": 0}


@dataclass(frozen=True)
class Image:
    """One loadable image: SASS or PTX for an arch; ``kernels`` None when not known.

    ``arch`` is what the driver selects by (a fatbin entry's header); ``target`` is set when a PTX
    text's own ``.target`` says more than that label (Triton's ``sm_90a`` PTX stored as plain
    ``compute_90``): the JIT compiles for ``target``.
    """

    kind: str
    arch: Arch
    ptx_version: tuple[int, int] | None = None
    label: str = ""
    kernels: frozenset[str] | None = None
    target: Arch | None = None

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


@dataclass(frozen=True)
class Verdict:
    """Why one image can or cannot serve the device."""

    image: Image
    usable: bool
    reason: str
    error: str | None = None


@dataclass(frozen=True)
class Decision:
    """What the driver would do with an image set on ``device`` (with ``driver``, if given)."""

    device: Arch
    driver: tuple[int, int] | None
    image: Image | None
    how: str  # "sass", "ptx-jit" or "none"
    reason: str
    error: str | None
    verdicts: tuple[Verdict, ...]

    @property
    def loadable(self) -> bool:
        return self.image is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device.sm,
            "driver": f"{self.driver[0]}.{self.driver[1]}" if self.driver else None,
            "how": self.how,
            "image": self.image.name if self.image else None,
            "label": self.image.label if self.image else None,
            "reason": self.reason,
            "error": self.error,
        }


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


def _ptx_isa_ok(version: tuple[int, int], driver: tuple[int, int] | None) -> tuple[bool, str]:
    if driver is None:
        return True, "driver version not given"
    newest = max_ptx_isa_for_driver(driver)
    if newest is None:
        return True, (f"driver {driver[0]}.{driver[1]} is newer than the table "
                      f"(CUDA {NEWEST_KNOWN_CUDA[0]}.{NEWEST_KNOWN_CUDA[1]}); assumed to JIT it")
    if version <= newest:
        return True, f"driver {driver[0]}.{driver[1]} JITs PTX ISA up to {newest[0]}.{newest[1]}"
    try:
        need = min_driver_for_ptx_isa(version)
        needs = f"needs CUDA {need[0]}.{need[1]}"
    except FatbinkitError:
        needs = "is newer than any known CUDA release"
    return False, (f"PTX ISA {version[0]}.{version[1]} {needs}; driver {driver[0]}.{driver[1]} "
                   f"JITs up to {newest[0]}.{newest[1]}")


def decide(
    images: Iterable[Image],
    device: Arch,
    driver: tuple[int, int] | None = None,
    *,
    raw: bool = False,
) -> Decision:
    """Pick the image the driver would load on ``device``, or say why none fits.

    ``raw`` means the set is one bare cubin or PTX handed to the driver directly (not a fatbin):
    an unfit bare PTX is then refused by the JIT compiler instead of skipped.
    """
    dev = Arch(device.number)  # a device is a compute capability; suffixes name binaries only
    verdicts: list[Verdict] = []
    sass: list[Image] = []
    ptx: list[Verdict] = []
    for img in images:
        if img.kind == SASS:
            if sass_runs_on(img.arch, dev):
                sass.append(img)
                verdicts.append(Verdict(img, True, f"SASS {img.arch.sm} runs on {dev.sm}"))
            else:
                verdicts.append(Verdict(img, False, _sass_why_not(img.arch, dev), NO_BINARY))
            continue
        assert img.ptx_version is not None
        if not ptx_jits_for(img.arch, dev):
            verdicts.append(Verdict(img, False, _ptx_why_not(img.arch, dev),
                                    INVALID_PTX if raw else NO_BINARY))
            continue
        if img.target is not None and not ptx_jits_for(img.target, dev):
            # selected by its label, then refused by the JIT compiler (reasoned, not observed)
            verdict = Verdict(img, False, (
                f"PTX labelled {img.arch.compute} but its text says .target {img.target.sm}: "
                f"{_ptx_why_not(img.target, dev)}"), INVALID_PTX)
        else:
            ok, why = _ptx_isa_ok(img.ptx_version, driver)
            verdict = Verdict(img, ok, why if not ok else
                              f"PTX {img.arch.compute} JIT-compiles for {dev.sm}; {why}",
                              None if ok else UNSUPPORTED_PTX)
        verdicts.append(verdict)
        ptx.append(verdict)
    if sass:
        # exact CC first (a > f > plain), then the highest minor of the same major
        best = max(sass, key=lambda i: (i.arch.number == dev.number, i.arch.number,
                                        _SUFFIX_RANK[i.arch.suffix]))
        return Decision(dev, driver, best, "sass", f"SASS {best.arch.sm} runs on {dev.sm}", None,
                        tuple(verdicts))
    if ptx:
        # The driver picks the PTX by arch label alone, then JIT-compiles it: a pick too new
        # for the driver (or whose text targets another arch) fails the load, with no fall
        # back to a lower PTX that would work (observed on an H200 with driver R580, 2026-12-01:
        # compute_80 + compute_90 with PTX ISA 9.9 -> CUDA_ERROR_UNSUPPORTED_PTX_VERSION).
        pick = max(ptx, key=lambda v: (v.image.arch.number, _SUFFIX_RANK[v.image.arch.suffix],
                                       v.image.ptx_version or (0, 0)))
        best = pick.image
        if pick.usable:
            return Decision(dev, driver, best, "ptx-jit",
                            f"no SASS for {dev.sm}; the driver JIT-compiles {best.name} at load "
                            f"(cold start cost, cached in the JIT cache)", None, tuple(verdicts))
        others = [v.image.name for v in ptx if v.usable]
        unused = (f"; it does not fall back to {', '.join(others)}" if others else "")
        return Decision(dev, driver, None, "none",
                        f"no SASS for {dev.sm}; the driver picks {best.name}: {pick.reason}"
                        f"{unused}", pick.error, tuple(verdicts))
    if not verdicts:
        return Decision(dev, driver, None, "none", "no images", NO_BINARY, ())
    failing = [v for v in verdicts if v.error]
    # PTX that would fit but is too new for the driver is the more useful explanation
    error = next((v.error for v in failing if v.error == UNSUPPORTED_PTX), None) or next(
        (v.error for v in failing if v.error == INVALID_PTX), NO_BINARY)
    held = ", ".join(sorted({v.image.name for v in verdicts}))
    reasons = "; ".join(dict.fromkeys(v.reason for v in failing if v.error == error))
    return Decision(dev, driver, None, "none", f"nothing loads on {dev.sm} (has {held}): {reasons}",
                    error, tuple(verdicts))


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
    cubin/PTX (``raw``). ``label`` says where it was found."""

    label: str
    images: tuple[Image, ...]
    raw: bool = False

    @property
    def kernels(self) -> list[str]:
        """Every kernel name any image lists, in first-seen order."""
        seen: dict[str, None] = {}
        for img in self.images:
            for k in sorted(img.kernels or ()):
                seen.setdefault(k)
        return list(seen)

    def decide(self, device: Arch, driver: tuple[int, int] | None = None,
               kernel: str | None = None) -> Decision:
        """:func:`decide` over the images that hold ``kernel`` (all images when None)."""
        images = [i for i in self.images
                  if kernel is None or i.kernels is None or kernel in i.kernels]
        return decide(images, device, driver, raw=self.raw)


def image_from_cubin(data: bytes | bytearray | memoryview, label: str = "",
                     arch: Arch | None = None) -> Image:
    """The SASS image of a cubin, with its kernel names; ``arch`` overrides the cubin's own
    (a fatbin entry's header, which is what the driver reads)."""
    c = Cubin.from_bytes(data)
    return Image(SASS, arch or c.arch, None, label,
                 frozenset(f.name for f in c.functions if f.entry))


def image_from_ptx(data: bytes | bytearray | memoryview, label: str = "",
                   arch: Arch | None = None) -> Image:
    """The PTX image of a PTX module, with its entry names (``arch`` as for cubins)."""
    p = Ptx.from_bytes(data)
    label_arch = arch or p.arch
    target = p.arch if p.arch != label_arch and ptx_narrower(p.arch, label_arch) else None
    return Image(PTX, label_arch, p.version, label, frozenset(e.name for e in p.entries), target)


def ptx_narrower(text: Arch, label: Arch) -> bool:
    """Whether PTX whose ``.target`` is ``text`` JITs for fewer devices than its ``label`` says
    (same SM with an ``a``/``f`` the label lacks, or a higher SM)."""
    return text.number > label.number or (
        text.number == label.number and _SUFFIX_RANK[text.suffix] > _SUFFIX_RANK[label.suffix])


def image_from_bytes(data: bytes | bytearray | memoryview, label: str = "") -> Image:
    """A bare cubin or PTX as an image (not a fatbin: see :func:`image_sets`)."""
    if is_cubin(data):
        return image_from_cubin(data, label)
    if is_ptx(data):
        return image_from_ptx(data, label)
    raise InvalidArgumentError(f"{label or 'input'} is neither a cubin nor PTX")


def image_from_entry(entry: FatbinEntry, label: str = "") -> Image | None:
    """The image of a fatbin entry (None for kinds the driver does not load: LTO-IR...).

    Arch and ``a``/``f`` come from the entry header as the driver reads them; the PTX ISA version
    from the PTX text, which is what the JIT compiler checks.
    """
    if entry.header.kind == EntryKind.ELF:
        return image_from_cubin(entry.data(), label, entry.arch)
    if entry.header.kind == EntryKind.PTX:
        return image_from_ptx(entry.data(), label, entry.arch)
    return None


def image_sets(source: os.PathLike[str] | bytes | bytearray | memoryview) -> tuple[ImageSet, ...]:
    """Every load unit in a file or buffer: each fatbin container (in a fatbin, a host ELF's
    ``.nv_fatbin``, or an embedded blob), or the bare cubin/PTX itself."""
    codes = scan(source)
    groups: dict[tuple[str, int], list[Image]] = {}
    for code in codes:
        group = groups.setdefault((code.source, code.container), [])
        img = image_from_entry(code.entry, f"entry at {code.offset:#x}")
        if img is not None:
            group.append(img)
    return tuple(
        ImageSet(f"{src or 'file'} container {c}" if c >= 0 else (src or "file"), tuple(imgs),
                 raw=c < 0)
        for (src, c), imgs in groups.items())


def predict_load(data: bytes | bytearray | memoryview, device: Arch,
                 driver: tuple[int, int] | None = None) -> Decision:
    """What ``cuModuleLoadData(data)`` would do on ``device``: for a fatbin, its first container
    (the only one the driver reads); else the bare cubin or PTX. A host ELF (``.so``, ``.o``) is
    refused as the driver refuses it, even when it carries fatbins: load what :func:`scan` finds
    in it instead."""
    machine = elf.machine(data)
    if machine is not None and machine != elf.EM_CUDA:
        raise FormatError(f"a host ELF file (e_machine {machine}), not a cubin: the driver takes a "
                          "fatbin, a cubin or PTX; load the device code scan() finds in it",
                          offset=18)
    sets = image_sets(data)
    if not sets:
        raise FormatError("no device code: no fatbin container, cubin or PTX to load", offset=0)
    return sets[0].decide(device, driver)
