"""AMD ROCm/HIP: clang offload bundles (plain and compressed), AMDGPU code objects and LLVM's
OffloadBinary (:mod:`fatbinkit.formats`), AMD's GPU tables (:mod:`.gpus`) and the HIP
runtime's loading rules (:mod:`.loading`), as the :class:`~fatbinkit.vendors.Vendor`
:data:`HIP`. Each member delegates to that code."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ...formats.amdgpu import TargetId
from ...formats.hsaco import EM_AMDGPU
from .floors import NOT_FOUND
from .images import BITCODE, HSACO, SPIRV, CodeTarget, HipImage

if TYPE_CHECKING:
    from ...decision import Decision, Floor, ImageInfo
    from ...device_code import DeviceCode, EntrylessContainer, Place
    from ...formats.codec import DecompressionBudget
    from ...formats.hsaco import CodeObjectKernel
    from .gpus import GpuTarget

__all__ = ["HIP", "HipFilter", "HipVendor", "image_of"]

#: the host sections AMD's device code is in (read by .finding, imported only for a file that
#: has one: an NVIDIA-only library's scan leaves AMD's readers unimported, 12 ms with Intel's)
FATBIN_SECTION = ".hip_fatbin"
PE_FATBIN_SECTION = ".hip_fat"  # .hip_fatbin in a PE image's eight-byte section names
OFFLOADING_SECTION = ".llvm.offloading"
OBJECT_PREFIX = "__CLANG_OFFLOAD_BUNDLE__"  # formats.offload_bundle's BUNDLE_MAGIC, as text
_KIND_ORDER = {HSACO: 0, SPIRV: 1, BITCODE: 2}
#: the GPUs a summary shows from (older ones only where the file has code for them): GCN5,
#: the oldest generation current ROCm releases still build for
_OLDEST_SHOWN = "gfx900"


def image_of(code: DeviceCode) -> HipImage:
    """The bundle entry a HIP image is."""
    entry = code.entry
    assert isinstance(entry, HipImage), f"{code} is not a HIP image"
    return entry


def _target(text: str) -> TargetId | None:
    """The target ID ``text`` spells, or None when it is not an AMD spelling (``gfx`` plus a
    processor)."""
    if not text.startswith("gfx"):
        return None
    return TargetId.parse(text)


@dataclass(frozen=True)
class HipFilter:
    """HIP's ``--arch`` filter: ``gfx942`` selects every image for processor gfx942, whatever
    its features; ``gfx90a:xnack+`` only images whose target ID is that; ``amdgcnspirv`` the
    SPIR-V images."""

    target: TargetId

    def matches(self, kind: str, target: str) -> bool:
        try:
            t = TargetId.parse(target)
        except InvalidArgumentError:
            return False
        if self.target.sramecc is None and self.target.xnack is None:
            return t.processor == self.target.processor
        return t == self.target

    def matches_device(self, device: str) -> bool:
        try:
            return TargetId.parse(device).processor == self.target.processor
        except InvalidArgumentError:
            return False

    def __str__(self) -> str:
        return str(self.target)


@dataclass(frozen=True)
class HipVendor:
    """AMD ROCm/HIP as a :class:`~fatbinkit.vendors.Vendor`."""

    name: str = "hip"
    kinds: tuple[str, ...] = (HSACO, SPIRV, BITCODE)
    loadable: frozenset[str] = frozenset({HSACO, SPIRV})
    function_kinds: frozenset[str] = frozenset({HSACO})
    compressed_apart: bool = False  # a CCOB bundle is compressed whole
    machines: frozenset[int] = frozenset({EM_AMDGPU})
    not_found: str = NOT_FOUND
    runtime_label: str = "ROCm"
    words: Mapping[str, str] = field(compare=False, default_factory=lambda: MappingProxyType({
        "native": "native", "native_key": "native", "jit": "SPIR-V JIT", "floors": "ROCm floors",
        "version": "", "versions_key": "",
        "runtime": "ROCm",
        "unchecked": "ROCm floors not checked (no --rocm): the device, code object version, "
                     "compression, generic target and SPIR-V minimums are shown as 'needs'",
        "jit_note": "SPIR-V-JIT: comgr compiles the SPIR-V for the device at first load "
                    "(HIP_FORCE_SPIRV_CODEOBJECT=1 forces it; ROCm 6.4+)"}))

    def sections(self, present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
        named = (FATBIN_SECTION, PE_FATBIN_SECTION, OFFLOADING_SECTION)
        if not any(s in named or s.startswith(OBJECT_PREFIX) for s in present):
            return frozenset()  # none could be AMD's
        from .finding import sections

        return sections(present, all, pe)

    def read(self, place: Place, claimed: bool,
             ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
        from .finding import read

        return read(place, claimed)

    def search(self, place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
        """Nothing: AMD's bundles outside ``.hip_fatbin`` and the wrappers' targets are not
        searched yet."""
        return [], []

    def device(self, value: object, what: str = "GPU arch") -> GpuTarget | None:
        from .gpus import GpuTarget, as_device

        if isinstance(value, GpuTarget):
            return value
        if not isinstance(value, str) or not value.startswith("gfx"):
            return None
        return as_device(value, what)

    def runtime(self, value: object, what: str = "driver") -> tuple[int, int]:
        from .floors import as_rocm

        return as_rocm(value, what)

    def runtime_text(self, version: tuple[int, int], host: str | None = None,
                     release: Any = None) -> str:
        return f"ROCm {version[0]}.{version[1]}"

    def spell_device(self, device: GpuTarget) -> str:
        return str(device.target)

    def spell_runtime(self, version: tuple[int, int]) -> str:
        return f"{version[0]}.{version[1]}"

    def runtime_name(self, version: tuple[int, int]) -> str:
        return f"{version[0]}.{version[1]}"

    def last_runtime(self, device: GpuTarget) -> tuple[int, int] | None:
        return None

    def gap(self, device: GpuTarget, need: tuple[int, int]) -> str | None:
        return None

    def every_device(self, codes: Sequence[DeviceCode] = ()) -> tuple[GpuTarget, ...]:
        """The GPUs from GCN5 (gfx900) on: older ones only where asked for."""
        from .gpus import GPUS, as_device

        oldest = TargetId(_OLDEST_SHOWN)
        return tuple(as_device(p) for p in GPUS if not TargetId(p) < oldest)

    def target_filter(self, value: object) -> HipFilter | None:
        if not isinstance(value, str):
            return None
        target = _target(value)
        return None if target is None else HipFilter(target)

    def sort_key(self, kind: str, target: str) -> tuple[Any, ...]:
        """Code objects, then SPIR-V, then bitcode; by processor generation, then features."""
        return (10 + _KIND_ORDER.get(kind, 9), self.target_key(target))

    def target_kind(self, target: str) -> str | None:
        if target == "amdgcnspirv":
            return SPIRV
        return None if _target(target) is None else HSACO

    def target_key(self, target: str) -> tuple[Any, ...]:
        try:
            return TargetId.parse(target).sort_key
        except InvalidArgumentError:
            return ((1 << 17,), target)

    def fingerprint(self, code: DeviceCode) -> bytes:
        e = image_of(code)
        return repr((e.identifier_text, e.image_kind, e.target, e.compression)).encode()

    def profile(self, code: DeviceCode) -> tuple[ImageInfo, list[tuple[Any, ...]]]:
        """The code object's kernels in ``diff``'s fields: ``registers`` its VGPRs (arch
        VGPRs, what bounds occupancy; AGPRs apart), ``stack`` its scratch bytes per lane,
        ``shared`` its static LDS, ``spill_stores``/``spill_loads`` the VGPRs and SGPRs it
        spills (counts, as the metadata records them, not bytes); no local memory, constant
        banks or code size."""
        from .finding import image

        info = image(code, None)
        assert info is not None, f"{code} is not an image the runtime loads"
        functions = [(k.name, True, k.vgpr_count, k.private_segment_fixed_size,
                      k.group_segment_fixed_size, None, (), k.vgpr_spill_count,
                      k.sgpr_spill_count, None) for k in self.functions(code)]
        return info, functions

    def file_suffix(self, code: DeviceCode) -> str:
        """``.gfx942.hsaco``, ``.gfx90a_xnack+.hsaco`` (``:`` as clang-offload-bundler's
        archive unbundling writes it, ``_``), ``.amdgcnspirv.spv``, ``.gfx942.bc``."""
        ext = {HSACO: "hsaco", SPIRV: "spv", BITCODE: "bc"}.get(code.kind, "bin")
        return f".{code.target.replace(':', '_')}.{ext}"

    def version(self, code: DeviceCode) -> str | None:
        return None

    def details(self, code: DeviceCode) -> dict[str, Any]:
        """The bundle entry ID, code object version, generic version (of a generic target)
        and the compressed bundle's version (CCOB; None: a plain bundle or no bundle)."""
        e = image_of(code)
        return {"bundle_id": e.identifier_text or None, "code_object_version": e.code_object,
                "generic_version": e.generic_version, "ccob_version": e.bundle_version,
                "past_header_window": e.hidden}

    def image_details(self, image: ImageInfo) -> dict[str, Any]:
        arch: CodeTarget = image.arch
        return {"code_object_version": arch.code_object,
                "generic_version": arch.generic_version, "ccob_version": arch.bundle}

    def runtime_numbers(self, release: Any, host: str | None) -> dict[str, Any]:
        return {}

    def outline(self, code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
        if code.kind != HSACO:
            return [], None
        return sorted(k.name for k in self.functions(code)), None

    def toolkit_name(self, toolkit: tuple[int, int]) -> str:
        return f"ROCm {toolkit[0]}.{toolkit[1]}"

    def functions(self, code: DeviceCode) -> tuple[CodeObjectKernel, ...]:
        if code.kind != HSACO:
            return ()
        from ...formats.hsaco import read_code_object

        return read_code_object(code.data()).kernels

    def function_code(self, code: DeviceCode, data: bytes) -> tuple[tuple[str, bytes], ...]:
        """``()``: a code object keeps its kernels in one ``.text``; they are not compared
        one by one yet (the image as a whole is)."""
        return ()

    def header_image(self, code: DeviceCode, label: str = "") -> ImageInfo | None:
        from .finding import header_image

        return header_image(code, label)

    def image(self, code: DeviceCode, budget: DecompressionBudget | None = None,
              ) -> ImageInfo | None:
        from .finding import image

        return image(code, budget)

    def may_load(self, image: ImageInfo, device: object) -> bool:
        from .loading import may_load

        return may_load(image, device)

    def extracted(self, code: DeviceCode, budget: DecompressionBudget | None = None) -> bytes:
        return code.data(budget)

    def devices(self, images: Iterable[ImageInfo]) -> tuple[str, ...]:
        from .gpus import GPUS

        present = {i.arch.processor for i in images}
        oldest = TargetId(_OLDEST_SHOWN)
        return tuple(p for p in GPUS if not TargetId(p) < oldest or p in present)

    def generation(self, device: str) -> str:
        from .gpus import GPUS

        gpu = GPUS.get(TargetId.parse(device).processor)
        return gpu.generation if gpu else "?"

    def decide(self, images: Iterable[ImageInfo], device: object, runtime: Any = None, *,
               raw: bool = False) -> Decision:
        from .loading import decide

        return decide(images, device, runtime)

    def floors(self, image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
        from .floors import image_floors

        return image_floors(image)

    def decision_key(self, image: ImageInfo, device: Any) -> Hashable:
        """The image but its kernels, offset and label, whatever the GPU (its decide reads
        its kind and target; a label names the image's offset)."""
        return image.key("kernels", "offset", "label")


#: the HIP vendor (registered in :data:`fatbinkit.vendors.VENDORS` as ``"hip"``)
HIP = HipVendor()
