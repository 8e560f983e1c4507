"""Which code object the HIP runtime loads on an AMD GPU, and the ROCm release it needs.

The rules, from AMD's sources (``../shared/ROCM.md`` §1.5 quotes them):

* **Native first.** CLR (``ROCm/rocm-systems projects/clr/hipamd/src/hip_fatbin.cpp``,
  ``FatBinaryInfo::ExtractFatBinaryUsingCOMGR``) asks comgr for the device's ISA name; comgr's
  ``lookUpCodeObject`` (``amd/comgr/src/comgr-metadata.cpp``) takes the first bundle entry, in
  header order, whose processor is the device's and whose features are compatible
  (``isCompatibleIsaName``): each feature the code object sets (``xnack±``, ``sramecc±``) must
  equal the device's; a feature it leaves unset runs either way. ROCr checks the same when it
  loads the ELF (``core/runtime/isa.cpp``, ``Isa::IsCompatible``).
* **Then the generic target** of the device's processor (CLR's ``TargetGenericMap``, the table
  :data:`GENERIC_OF` copies; ``TargetToGeneric`` keeps the device's features), whose code
  object's generic version must be one ROCr supports (``GetSupportedGenericVersions``: 1 for
  every generic target) (ROCr ``Isa::IsCompatible``: ``codeGenericVersion >= min version``).
* **Then SPIR-V** (``spirv64-amd-amdhsa--amdgcnspirv``), compiled at load by comgr
  (``AMD_COMGR_ACTION_COMPILE_SPIRV_TO_RELOCATABLE``).
* **Else a miss**: "No compatible code objects found for: gfxNNNN" and
  ``hipErrorNoBinaryForGpu`` (a newer CLR skips the device instead: the module still does not
  load there).

A device is named as ROCm names its agent's ISA: ``gfx942`` means the features its driver
reports by default (:func:`fatbinkit.vendors.hip.gpus.default_target`); ``gfx942:xnack+`` a GPU
running with ``HSA_XNACK=1``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ...decision import (
    BELOW_FLOOR,
    JIT,
    LOADS,
    NATIVE,
    NO_IMAGE,
    NONE,
    Decision,
    Floor,
    ImageInfo,
    Verdict,
)
from ...formats.amdgpu import TargetId
from .floors import (
    GENERIC,
    NEWEST,
    NO_BINARY,
    SPIRV_JIT,
    as_rocm,
    device_floor,
    image_floors,
    needs,
)
from .gpus import GpuTarget, as_device
from .images import SPIRV, CodeTarget

__all__ = ["GENERIC_OF", "MIN_GENERIC_VERSION", "compatible", "decide", "may_load"]

#: CLR's ``TargetGenericMap`` (hip_fatbin.cpp): the generic target whose code a processor runs
#: when the bundle has none of its own. gfx908 and gfx90a have none.
GENERIC_OF: dict[str, str] = {
    **dict.fromkeys(("gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"),
                    "gfx9-generic"),
    **dict.fromkeys(("gfx942", "gfx950"), "gfx9-4-generic"),
    **dict.fromkeys(("gfx1010", "gfx1011", "gfx1012", "gfx1013"), "gfx10-1-generic"),
    **dict.fromkeys(("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
                     "gfx1036"), "gfx10-3-generic"),
    **dict.fromkeys(("gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
                     "gfx1152", "gfx1153"), "gfx11-generic"),
    **dict.fromkeys(("gfx1200", "gfx1201"), "gfx12-generic"),
    "gfx1250": "gfx12-5-generic",
}
#: the lowest generic version ROCr loads of each generic target (``GetSupportedGenericVersions``)
MIN_GENERIC_VERSION = 1


def compatible(code: TargetId, device: GpuTarget) -> str | None:
    """Why code built for ``code`` does not run on ``device`` by its features (None: it runs):
    every feature the code sets must be the device's setting (comgr ``isCompatibleIsaName``)."""
    for feature in ("sramecc", "xnack"):
        want = getattr(code, feature)
        have = getattr(device.target, feature)
        if want is None or want == have:
            continue
        if have is None:
            return f"{code} needs {feature}{'+' if want else '-'}, which {device} does not have"
        return (f"{code} needs {feature}{'+' if want else '-'}; {device} runs "
                f"{feature}{'+' if have else '-'}" +
                (" (HSA_XNACK=1 turns it on)" if feature == "xnack" and want else ""))
    return None


def _why_not(image: ImageInfo, device: GpuTarget) -> str | None:
    """Why ``image`` cannot serve ``device`` (None: it can)."""
    arch: CodeTarget = image.arch
    if arch.hidden:  # finding.py: CLR reads 4096 bytes of a bundle's header
        return (f"{arch} is described past the first 4096 bytes of its bundle's header, "
                "which is all the HIP runtime reads of it (CLR hip_fatbin.cpp)")
    if image.kind == SPIRV:
        return None
    processor = device.target.processor
    generic = GENERIC_OF.get(processor)
    if arch.processor == processor:
        return compatible(arch.target, device)
    if arch.processor == generic:
        if (arch.generic_version or 0) < MIN_GENERIC_VERSION:
            return (f"{arch} code object has generic version {arch.generic_version or 0}; "
                    f"ROCr loads version {MIN_GENERIC_VERSION} or later")
        return compatible(arch.target, device)
    if arch.target.is_generic:
        runs = sorted(p for p, g in GENERIC_OF.items() if g == arch.processor)
        return (f"{arch} runs on {', '.join(runs) or 'no processor the runtime knows'}, "
                f"not {processor}")
    return f"{arch} is code for {arch.processor}, not {processor}"


def may_load(image: ImageInfo, device: object) -> bool:
    """Whether ``device`` could load ``image`` at all, by target alone."""
    return _why_not(image, as_device(device, "device")) is None


def decide(images: Iterable[ImageInfo], device: object, rocm: object = None) -> Decision:
    """The code object the HIP runtime loads on ``device`` from one module's ``images`` (a
    bundle's entries, in header order), or why none. With ``rocm`` (a release: ``"6.4"``), its
    runtime's floors apply: before 6.4 it has no generic fallback and no SPIR-V (they are not
    candidates), and the pick must meet its floors (code object version, compression, device),
    else the load fails (the runtime does not fall back)."""
    dev = as_device(device, "device")
    release = None if rocm is None else as_rocm(rocm)
    images = tuple(images)
    dfloor = device_floor(dev.target.processor)
    verdicts: list[Verdict] = []
    picks: dict[str, tuple[ImageInfo, tuple[Floor, ...], tuple[str, ...]]] = {}
    for img in images:
        why = _why_not(img, dev)
        arch: CodeTarget = img.arch
        way = "spirv" if img.kind == SPIRV else "generic" if arch.target.is_generic else "native"
        first = {"spirv": SPIRV_JIT, "generic": GENERIC}.get(way)
        if why is None and release is not None and first is not None and release < first:
            why = (f"{'SPIR-V' if way == 'spirv' else 'generic'} code objects load from "
                   f"{needs(first)} on; {needs(release)}'s runtime does not look for them")
        if why is not None:
            verdicts.append(Verdict(img, False, why, NO_BINARY))
            continue
        floors, unknown = image_floors(img)
        floors = ((dfloor,) if dfloor else ()) + floors
        failed = next((f for f in floors if release is not None and f.need is not None
                       and release < f.need), None)
        if failed is not None:
            assert release is not None
            verdicts.append(Verdict(img, False, f"{failed} ({needs(release)} given)",
                                    failed.error, failed))
        else:
            verdicts.append(Verdict(img, True, {
                "spirv": f"SPIR-V, compiled for {dev} at load by comgr",
                "generic": f"{arch} is the generic target of {dev.target.processor}",
                "native": f"{arch} runs on {dev}"}[way]))
        picks.setdefault(way, (img, floors, unknown) if failed is None else (img, floors, ()))
        if failed is not None:
            picks.setdefault(f"{way}-failed", (img, (failed,), ()))

    def result(image: ImageInfo | None, how: str, reason: str, error: str | None,
               floors: tuple[Floor, ...] = (), floor: Floor | None = None,
               warnings: tuple[str, ...] = ()) -> Decision:
        outcome = (LOADS if image is not None else BELOW_FLOOR if floor is not None else
                   NO_IMAGE)
        return Decision(dev, release, image, how, reason, error, tuple(verdicts), floors, floor,
                        warnings, outcome=outcome)

    for way, how, said in (("native", NATIVE, "native code object {} loads"),
                           ("generic", NATIVE, "no code object for {p}; its generic target {} "
                                               "loads"),
                           ("spirv", JIT, "no code object for {p}; SPIR-V is compiled at load "
                                          "(comgr)")):
        if way not in picks:
            continue
        img, floors, unknown = picks[way]
        if f"{way}-failed" in picks:  # the runtime picks it, then cannot load it
            floor = picks[f"{way}-failed"][1][0]
            return result(None, NONE, f"{img.arch} is picked and {floor} "
                          f"({needs(release) if release else ''} given)", floor.error, floors,
                          floor)
        newer = ((f"{needs(release)} is newer than the tables (up to {needs(NEWEST)}): "
                  "assumed to load what they load",) if release is not None and release > NEWEST
                 else ())
        return result(img, how, said.format(img.arch, p=dev.target.processor), None, floors,
                      warnings=unknown + newer)
    there = ", ".join(str(i.arch) for i in images) or "no code objects"
    generic_name = GENERIC_OF.get(dev.target.processor)
    wanted = dev.target.processor + (f" or {generic_name}" if generic_name else "")
    return result(None, NONE, f"No compatible code objects found for: {dev.target.processor} "
                  f"(the bundle has {there}; {wanted} would load)", NO_BINARY)
