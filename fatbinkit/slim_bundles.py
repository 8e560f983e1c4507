"""Pruning and recompressing clang offload bundles, HIP's device code: which entries each bundle
keeps, the bundle written again, and what every AMD GPU loads before and after.
:mod:`fatbinkit.slim` rewrites the host file around the bundles (the wrapper pointers, the
layout) as it does around CUDA's fatbin containers; a bundle is one module.

**Pruning** keeps, in every bundle, the entry the HIP runtime loads on each device asked for
(:func:`fatbinkit.vendors.hip.loading.decide`: the native code object, else the processor's
generic target, else SPIR-V), the host entry, SPIR-V by policy (``keep``: every SPIR-V entry,
what GPUs no code object fits compile at load; ``none``: only where a device picks it) and
entries no runtime loads (LLVM bitcode) as they are. ``exact`` keeps instead the code objects
built for exactly the devices' processors whose features they run (what ``--offload-arch``
lists), as ``nvprune -arch`` keeps SASS: no generic target, and the report names what no longer
loads.

**The bundle written again** (:func:`~fatbinkit.formats.offload_bundle.write_bundle`): the kept
entries in their header order (the order the runtime tries them), each at the alignment the
input used (4096, clang's ``HIPCodeObjectAlign``), the header well under the 4096 bytes the
runtime reads of it; for the same entries that is clang-offload-bundler's output, byte for
byte. A compressed bundle (``CCOB``) is inflated, pruned and compressed again with its method
and version (zstd at level 3 with long-distance matching, clang's default, unless a level is
given: the level the input used is not recorded). ``codec`` re-encodes every bundle: ``none``
writes it plain, ``zstd``/``zlib`` as ``CCOB`` version 2, the one ROCm 6.2's comgr reads first
(:mod:`fatbinkit.vendors.hip.floors`), or 3 where the input was version 3 or a size needs 64
bits. A bundle nothing changes keeps its bytes.

**The report** per device: the modules that load a code object natively (generic included)
and through SPIR-V, the modules whose pick changed (none unless ``exact``), the kernels lost,
and the lowest ROCm the picked entries need before and after (code object version, the
compressed bundle's version, the device): a rise, as plain bundles compressed to ``CCOB`` cause
(ROCm 6.2), is refused unless allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .decision import Decision, ImageInfo
from .errors import FormatError, InvalidArgumentError
from .formats import hsaco
from .formats.codec import DecompressionBudget
from .formats.offload_bundle import (
    BUNDLE_ALIGNMENT,
    Bundle,
    compress_bundle,
    read_bundle,
    read_bundles,
    write_bundle,
)
from .vendors.hip.finding import bundle_images
from .vendors.hip.floors import needs
from .vendors.hip.gpus import GPUS, GpuTarget, as_device
from .vendors.hip.images import HSACO, SPIRV
from .vendors.hip.loading import compatible, decide

__all__ = [
    "CODECS",
    "SPIRV_POLICIES",
    "HipArchReport",
    "Rewritten",
    "arch_reports",
    "check_codec",
    "devices_of",
    "entry_labels",
    "kept_entries",
    "loadable",
    "picks",
    "read",
    "rewrite",
]

#: what ``spirv=`` takes
SPIRV_POLICIES = ("keep", "none")
#: what a bundle can be stored as (``none``: plain)
CODECS = ("none", "zstd", "zlib")
Version = tuple[int, int]
_V2_LIMIT = 1 << 32  # version 2 records sizes in 32 bits


def read(view: memoryview, base: int, size: int, budget: DecompressionBudget) -> list[Bundle]:
    """The bundles of a ``.hip_fatbin`` section (``size`` bytes at ``base``), in file order."""
    return read_bundles(view, base, base + size, budget=budget)


def entry_labels(bundle: Bundle) -> tuple[str, ...]:
    """Each entry as the report counts it when dropped: ``hsaco gfx90a:xnack+``, ``spirv
    amdgcnspirv``, ``bitcode gfx942``, ``host x86_64-unknown-linux-gnu``."""
    return tuple(f"{img.kind} {img.arch}" if img is not None else
                 f"{'host' if e.bundle_id.is_host else 'bitcode'} "
                 f"{e.bundle_id.target_id or e.bundle_id.triple}"
                 for e, img in zip(bundle.entries, bundle_images(bundle), strict=True))


def _pick(images: Sequence[ImageInfo | None], device: GpuTarget
          ) -> tuple[int | None, Decision]:
    """The index of the entry the HIP runtime loads on ``device`` (None: nothing loads) and
    its decision (its floors: the ROCm the pick needs)."""
    loadable = [(i, img) for i, img in enumerate(images) if img is not None]
    d = decide([img for _, img in loadable], device)
    return next((i for i, img in loadable if img is d.image), None), d


def picks(bundle: Bundle, devices: Sequence[GpuTarget]) -> dict[str, int | None]:
    """The index of the entry the HIP runtime loads on each device (by its name, ``str``;
    None: nothing loads)."""
    images = bundle_images(bundle)
    return {str(dev): _pick(images, dev)[0] for dev in devices}


def kept_entries(bundle: Bundle, devices: Sequence[GpuTarget], spirv: str,
                 exact: bool) -> list[int]:
    """The indexes of the entries pruning keeps, in header order (see the module)."""
    images = bundle_images(bundle)
    if not devices:  # recompression only
        return list(range(len(images)))
    keep: set[int] = set()
    if exact:
        keep = {i for i, img in enumerate(images) if img is not None and img.kind == HSACO
                and not img.arch.target.is_generic
                and any(img.arch.processor == d.target.processor
                        and compatible(img.arch.target, d) is None for d in devices)}
    else:
        keep = {i for i in picks(bundle, devices).values() if i is not None}
    if spirv == "keep":
        keep.update(i for i, img in enumerate(images) if img is not None and img.kind == SPIRV)
    keep.update(i for i, img in enumerate(images) if img is None)  # host, bitcode
    return sorted(keep)


@dataclass(frozen=True)
class Rewritten:
    """One bundle written again: ``data`` as stored, ``bundle`` read back from it, and what
    was done to it (``how``, for the report)."""

    data: bytes
    bundle: Bundle
    how: str


def _alignment(bundle: Bundle) -> int:
    """The largest power of two up to 4096 that every entry's offset is a multiple of (4096
    in what clang writes)."""
    align = BUNDLE_ALIGNMENT
    while align > 1 and any(e.offset % align for e in bundle.entries if e.size):
        align //= 2
    return align


def rewrite(bundle: Bundle, stored: bytes, kept: Sequence[int], codec: str | None,
            level: int | None, budget: DecompressionBudget) -> Rewritten:
    """``bundle`` (``stored``: its bytes as the input holds them) with only the ``kept``
    entries, stored as ``codec`` (None: as it was). The result is read back, its hash
    checked, and every kept entry compared with the input's, byte for byte."""
    same_entries = len(kept) == len(bundle.entries)
    was = None if bundle.compressed is None else bundle.compressed.codec
    want = was if codec is None else (None if codec == "none" else codec)
    if same_entries and want == was and (level is None or want is None):
        how = "left as stored" if codec is not None else "kept"
        return Rewritten(stored, bundle, how)
    plain = write_bundle([(bundle.entries[i].id, bundle.entries[i].data) for i in kept],
                         align=_alignment(bundle), host=None)
    if want is None:
        data, how = plain, "written plain"
    else:
        version = 3 if (bundle.compressed is not None and bundle.compressed.version == 3) or \
            len(plain) + 64 >= _V2_LIMIT else 2
        data = compress_bundle(plain, version=version, codec=want, level=level)
        how = f"compressed as CCOB v{version} {want}"
    back = read_bundle(data, budget=budget)
    olds = [bundle.entries[i] for i in kept]
    if [e.id for e in back.entries] != [e.id for e in olds] or any(
            bytes(a.data) != bytes(b.data) for a, b in zip(back.entries, olds, strict=True)):
        raise FormatError(f"the bundle at {bundle.offset:#x} written again does not read back "
                          "with its kept entries")
    return Rewritten(data, back, how)


def devices_of(bundles: Sequence[Bundle]) -> list[GpuTarget]:
    """The GPUs the bundles hold native code objects for, each running the features its code
    object sets (``gfx90a:xnack+`` code: a gfx90a with XNACK on; unset: the driver's
    default): what recompression reports on."""
    order = list(GPUS)
    targets = {str(img.arch.target): img.arch.processor for b in bundles
               for img in bundle_images(b)
               if img is not None and img.kind == HSACO and img.arch.processor in GPUS}
    devices = dict.fromkeys(as_device(t) for t in sorted(
        targets, key=lambda t: (order.index(targets[t]), t)))
    return list(devices)


@dataclass(frozen=True)
class HipArchReport:
    """What the output does on one AMD GPU, beside the input: ``modules`` load a code object
    there (``native``, generic targets included) or compile SPIR-V (``jit``); ``changed``
    names the modules whose pick differs from the input's (empty unless ``exact``), ``lost``
    the kernels they no longer have; ``min_rocm_before/after``: the lowest ROCm the picked
    entries need (None: no module loads, or a floor is unknown)."""

    device: GpuTarget
    modules: int
    native: int
    jit: int
    changed: tuple[str, ...]
    min_rocm_before: Version | None
    min_rocm_after: Version | None
    lost: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.device.target.processor

    @property
    def same(self) -> bool:
        return not self.changed

    @property
    def raised(self) -> bool:
        """Whether the output needs a newer ROCm than the input on this GPU."""
        before, after = self.min_rocm_before, self.min_rocm_after
        return before is not None and after is not None and after > before

    def to_dict(self) -> dict[str, Any]:
        def rocm(v: Version | None) -> str | None:
            return None if v is None else f"{v[0]}.{v[1]}"

        return {"device": self.name, "target": str(self.device), "vendor": "hip",
                "modules": self.modules, "native": self.native, "jit": self.jit,
                "same": self.same, "changed": list(self.changed),
                "lost_kernels": list(self.lost), "min_rocm_before": rocm(self.min_rocm_before),
                "min_rocm_after": rocm(self.min_rocm_after)}

    def __str__(self) -> str:
        def rocm(v: Version | None) -> str:
            return needs(v) if v else "-"

        how = (f"same code object in all {self.modules} loading modules ({self.native} native, "
               f"{self.jit} SPIR-V JIT)" if self.same else
               f"{len(self.changed)} module(s) load a different code object or none "
               f"({', '.join(self.changed[:3])}{', ...' if len(self.changed) > 3 else ''}); "
               f"{len(self.lost)} kernel(s) lost"
               + (f": {', '.join(self.lost[:5])}{', ...' if len(self.lost) > 5 else ''}"
                  if self.lost else ""))
        floor = f"min {rocm(self.min_rocm_before)}"
        if self.min_rocm_after != self.min_rocm_before:
            floor += f" -> {rocm(self.min_rocm_after)}"
        return f"{self.device}: {how}; {floor}"


def _kernels(bundle: Bundle, images: Sequence[ImageInfo | None],
             index: int | None) -> frozenset[str]:
    img = None if index is None else images[index]
    if index is None or img is None or img.kind != HSACO:
        return frozenset()
    return frozenset(k.name for k in hsaco.read_code_object(bundle.entries[index].data).kernels)


def _later(a: Version | None, b: Version | None) -> Version | None:
    return b if a is None or (b is not None and b > a) else a


def arch_reports(modules: Sequence[tuple[str, Bundle, Bundle, Sequence[int]]],
                 devices: Sequence[GpuTarget]) -> tuple[HipArchReport, ...]:
    """Per device, what ``modules`` (label, bundle before, bundle after, the kept indexes into
    before) load before and after."""
    images = [(bundle_images(old), bundle_images(new)) for _, old, new, _ in modules]
    reports = []
    for dev in devices:
        loading = native = jit = 0
        changed: list[str] = []
        lost: dict[str, None] = {}
        before: Version | None = None
        after: Version | None = None
        for (label, old, new, kept), (old_images, new_images) in zip(modules, images,
                                                                     strict=True):
            old_pick, old_decision = _pick(old_images, dev)
            new_pick, new_decision = _pick(new_images, dev)
            origin = None if new_pick is None else kept[new_pick]
            if origin != old_pick:
                changed.append(label)
                lost.update(dict.fromkeys(sorted(_kernels(old, old_images, old_pick)
                                                 - _kernels(new, new_images, new_pick))))
            if new_pick is None or old_pick is None:
                continue
            loading += 1
            picked = new_images[new_pick]
            assert picked is not None
            if picked.kind == SPIRV:
                jit += 1
            else:
                native += 1
            before = _later(before, old_decision.min_driver)
            after = _later(after, new_decision.min_driver)
        reports.append(HipArchReport(dev, loading, native, jit, tuple(changed), before, after,
                                     tuple(lost)))
    return tuple(reports)


def check_codec(codec: str | None) -> None:
    """Refuse a codec a bundle cannot be stored as (LZ4 is CUDA's)."""
    if codec is not None and codec not in CODECS:
        raise InvalidArgumentError(f"an offload bundle is stored as one of {CODECS}, not "
                                   f"{codec!r} (LZ4 is for CUDA's fatbins)")


def loadable(bundle: Bundle) -> bool:
    """Whether the bundle holds an entry a runtime loads (a code object, SPIR-V)."""
    return any(img is not None for img in bundle_images(bundle))
