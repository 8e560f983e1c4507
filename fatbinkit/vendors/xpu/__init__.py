"""Intel GPUs (Level Zero, SYCL, OpenCL): SPIR-V modules (:mod:`fatbinkit.formats.spirv`),
zebins and legacy OpenCL ELF (:mod:`fatbinkit.formats.zebin`), ocloc's ``ar`` fat binaries and
SYCL's bundle sections (:mod:`.finding`), as the :class:`~fatbinkit.vendors.Vendor`
:data:`XPU`, at the depth of listing.

Loading is told only as far as sources say (``../shared/ROCM.md`` §6): a zebin is native code
for the device its IP version names (the ``.note.intelgt.compat`` product config, or ocloc's
member name); SPIR-V is compiled by the driver for any Intel GPU (Level Zero
``zeModuleCreate`` with ``ZE_MODULE_FORMAT_IL_SPIRV``); from a fat binary compute-runtime takes
the member whose name matches the device, else ``generic_ir`` (``device_binary_format_ar.cpp``).
fatbinkit holds no table of Intel devices: a device is given by its IP version
(``12.55.8``), and runtime floors are not known.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...decision import JIT, LOADS, NATIVE, NO_IMAGE, NONE, Decision, ImageInfo, Verdict
from ...errors import InvalidArgumentError
from ...formats.zebin import EM_INTELGT
from .images import OPENCL_ELF, SPIR64, SPIRV, ZEBIN, XpuImage, XpuTarget

if TYPE_CHECKING:
    from ...decision import Floor
    from ...device_code import DeviceCode, EntrylessContainer, Place
    from ...formats.codec import DecompressionBudget
    from ...formats.zebin import ZeKernel

__all__ = ["NOT_FOUND", "XPU", "XpuDevice", "XpuFilter", "XpuVendor", "image_of"]

#: what ``zeKernelCreate`` returns for a kernel the module lacks (Level Zero specification)
NOT_FOUND = "ZE_RESULT_ERROR_INVALID_KERNEL_NAME"
#: the host sections Intel's device code is in, in an object file (read by .finding, imported
#: only for a file that has one)
OBJECT_PREFIX = "__CLANG_OFFLOAD_BUNDLE__"  # formats.offload_bundle's BUNDLE_MAGIC, as text
_KIND_ORDER = {ZEBIN: 0, OPENCL_ELF: 1, SPIRV: 2}
_IP = re.compile(r"(\d+)\.(\d+)\.(\d+)")
# a device named otherwise (ocloc's product names in fat-binary members, ``intel:tgllp``), or
# not named at all (``intel:unknown``): the ``intel:`` prefix keeps every other spelling (a
# vendor registered later, a toy) free
_NAMED = re.compile(r"intel:[A-Za-z0-9][A-Za-z0-9._-]*")
_NO_FLOORS = "Level Zero runtime floors are not known to fatbinkit"


def image_of(code: DeviceCode) -> XpuImage:
    """The record an Intel image is."""
    entry = code.entry
    assert isinstance(entry, XpuImage), f"{code} is not an Intel image"
    return entry


@dataclass(frozen=True, order=True)
class XpuDevice:
    """An Intel GPU, by its IP version (``architecture.release.revision``, ``12.55.8``)."""

    ip: tuple[int, int, int]

    def __str__(self) -> str:
        return ".".join(map(str, self.ip))


def _spelling(target: str) -> str | None:
    """The kind ``target`` names, None when it is not an Intel spelling."""
    if target.startswith(SPIR64):
        return SPIRV
    if _IP.fullmatch(target) or _NAMED.fullmatch(target):
        return ZEBIN
    return None


@dataclass(frozen=True)
class XpuFilter:
    """``--arch 12.55.8`` (zebins for that IP version), ``--arch intel:tgllp`` (ocloc's member
    name) or ``--arch spir64`` (the SPIR-V)."""

    target: str

    def matches(self, kind: str, target: str) -> bool:
        return target == self.target

    def matches_device(self, device: str) -> bool:
        return device == self.target

    def __str__(self) -> str:
        return self.target


@dataclass(frozen=True)
class XpuVendor:
    """Intel XPU as a :class:`~fatbinkit.vendors.Vendor`."""

    name: str = "xpu"
    kinds: tuple[str, ...] = (ZEBIN, SPIRV, OPENCL_ELF)
    loadable: frozenset[str] = frozenset({ZEBIN, SPIRV, OPENCL_ELF})
    function_kinds: frozenset[str] = frozenset({ZEBIN})
    compressed_apart: bool = True  # images are stored plainly
    machines: frozenset[int] = frozenset({EM_INTELGT})
    not_found: str = NOT_FOUND
    runtime_label: str = "Level Zero"
    words: Mapping[str, str] = field(compare=False, default_factory=lambda: MappingProxyType({
        "native": "native", "native_key": "native", "jit": "SPIR-V JIT",
        "floors": "runtime floors", "version": "SPIR-V", "versions_key": "spirv_versions",
        "runtime": "Level Zero",
        "unchecked": "runtime floors not known for Intel GPUs",
        "jit_note": "SPIR-V-JIT: the driver (IGC) compiles the SPIR-V for the device at "
                    "module creation"}))

    def sections(self, present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
        if not any(s.startswith(OBJECT_PREFIX) for s in present):
            return frozenset()  # none could be Intel's
        from .finding import sections

        return sections(present, all, pe)

    def read(self, place: Place, claimed: bool,
             ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
        from .finding import read

        return read(place, claimed)

    def search(self, place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
        """Nothing: Intel's device code outside its sections is not searched yet."""
        return [], []

    def device(self, value: object, what: str = "GPU arch") -> XpuDevice | None:
        if isinstance(value, XpuDevice):
            return value
        if not isinstance(value, str):
            return None
        m = _IP.fullmatch(value)
        if m is None:
            return None
        return XpuDevice((int(m[1]), int(m[2]), int(m[3])))

    def runtime(self, value: object, what: str = "driver") -> tuple[int, int]:
        raise InvalidArgumentError(f"{what} {value!r}: {_NO_FLOORS}; check Intel GPUs without "
                                   "a runtime version")

    def runtime_text(self, version: tuple[int, int], host: str | None = None,
                     release: Any = None) -> str:
        return f"Level Zero {version[0]}.{version[1]}"

    def spell_device(self, device: XpuDevice) -> str:
        return str(device)

    def spell_runtime(self, version: tuple[int, int]) -> str:
        return f"{version[0]}.{version[1]}"

    def runtime_name(self, version: tuple[int, int]) -> str:
        return f"{version[0]}.{version[1]}"

    def last_runtime(self, device: XpuDevice) -> tuple[int, int] | None:
        return None

    def gap(self, device: XpuDevice, need: tuple[int, int]) -> str | None:
        return None

    def every_device(self, codes: Sequence[DeviceCode] = ()) -> tuple[XpuDevice, ...]:
        """None: fatbinkit keeps no table of Intel GPUs."""
        return ()

    def target_filter(self, value: object) -> XpuFilter | None:
        if not isinstance(value, str) or _spelling(value) is None:
            return None
        return XpuFilter(value)

    def sort_key(self, kind: str, target: str) -> tuple[Any, ...]:
        """zebins, then OpenCL ELF, then SPIR-V; by IP version, then name."""
        return (20 + _KIND_ORDER.get(kind, 9), self.target_key(target))

    def target_kind(self, target: str) -> str | None:
        return _spelling(target)

    def target_key(self, target: str) -> tuple[Any, ...]:
        m = _IP.fullmatch(target)
        return ((0, tuple(map(int, m.groups())), "") if m else (1, (), target))

    def fingerprint(self, code: DeviceCode) -> bytes:
        e = image_of(code)
        return repr((e.identifier_text, e.image_kind, e.target)).encode()

    def profile(self, code: DeviceCode) -> tuple[ImageInfo, list[tuple[Any, ...]]]:
        """A zebin's kernels in ``diff``'s fields: ``registers`` its GRF count (registers per
        thread), ``stack`` its private bytes, ``shared`` its SLM bytes; others by name."""
        info = self.image(code)
        assert info is not None
        if code.kind != ZEBIN:
            return info, [(k, True) for k in sorted(info.kernels or ())]
        return info, [(k.name, True, k.grf_count, k.private_size, k.slm_size, None, (), None,
                       None, None) for k in self.functions(code)]

    def file_suffix(self, code: DeviceCode) -> str:
        """``.12.55.8.zebin``, ``.spir64.spv``, ``.12.0.0.bin`` (an OpenCL ELF)."""
        ext = {ZEBIN: "zebin", SPIRV: "spv"}.get(code.kind, "bin")
        return f".{code.target.replace(':', '_')}.{ext}"

    def version(self, code: DeviceCode) -> str | None:
        """A SPIR-V module's version (``1.0``)."""
        return image_of(code).version if code.kind == SPIRV else None

    def details(self, code: DeviceCode) -> dict[str, Any]:
        """The fat-binary member name (None outside one) and the module's version: SPIR-V's,
        or a zebin's ``.ze_info`` version."""
        e = image_of(code)
        return {"member_name": e.identifier_text or None, "format_version": e.version}

    def image_details(self, image: ImageInfo) -> dict[str, Any]:
        return {}

    def runtime_numbers(self, release: Any, host: str | None) -> dict[str, Any]:
        return {}

    def outline(self, code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
        return sorted(self._kernels(code)), None

    def _kernels(self, code: DeviceCode) -> tuple[str, ...]:
        if code.kind == SPIRV:
            from ...formats.spirv import read_spirv

            return read_spirv(code.view).kernels
        return tuple(k.name for k in self.functions(code))

    def toolkit_name(self, toolkit: tuple[int, int]) -> str:
        return f"oneAPI {toolkit[0]}.{toolkit[1]}"

    def functions(self, code: DeviceCode) -> tuple[ZeKernel, ...]:
        if code.kind != ZEBIN:
            return ()
        from ...formats.zebin import read_zebin

        return read_zebin(code.view).kernels

    def _info(self, code: DeviceCode, label: str, kernels: frozenset[str] | None) -> ImageInfo:
        return ImageInfo(code.kind, XpuTarget(code.target), label=label, kernels=kernels,
                         offset=code.offset)

    def function_code(self, code: DeviceCode, data: bytes) -> tuple[tuple[str, bytes], ...]:
        """``()``: Intel's kernels are compared as whole images only."""
        return ()

    def header_image(self, code: DeviceCode, label: str = "") -> ImageInfo | None:
        return self._info(code, label, None)

    def image(self, code: DeviceCode, budget: DecompressionBudget | None = None,
              ) -> ImageInfo | None:
        kernels = None if code.kind == OPENCL_ELF else frozenset(self._kernels(code))
        return self._info(code, f"{code.kind} at {code.offset:#x}", kernels)

    def may_load(self, image: ImageInfo, device: object) -> bool:
        return image.kind == SPIRV or str(image.arch) == str(device)

    def extracted(self, code: DeviceCode, budget: DecompressionBudget | None = None) -> bytes:
        return code.data(budget)

    def devices(self, images: Iterable[ImageInfo]) -> tuple[str, ...]:
        """The IP versions the file has zebins for (no table of Intel GPUs is kept)."""
        ips = {str(i.arch) for i in images if _IP.fullmatch(str(i.arch))}
        return tuple(sorted(ips, key=lambda t: tuple(map(int, t.split(".")))))

    def generation(self, device: str) -> str:
        return "?"

    def decide(self, images: Iterable[ImageInfo], device: object, runtime: Any = None, *,
               raw: bool = False) -> Decision:
        """The zebin built for ``device``'s IP version, else SPIR-V (JIT by the driver), else
        none: compute-runtime's order in a fat binary (the exact match, then ``generic_ir``);
        a member named by product (``intel:tgllp``) is not matched (no table maps it to an IP
        version), and an OpenCL ELF is told apart as not read."""
        dev = self.device(device, "device")
        if dev is None:
            raise InvalidArgumentError(f"device {device!r}: give an Intel GPU by its IP version "
                                       "(12.55.8)")
        verdicts = []
        native = jit = None
        for img in images:
            if img.kind == SPIRV:
                verdicts.append(Verdict(img, True, f"SPIR-V, compiled for {dev} at load"))
                jit = jit or img
            elif str(img.arch) == str(dev):
                verdicts.append(Verdict(img, True, f"built for {dev}"))
                native = native or img
            else:
                why = (f"built for {img.arch}, not {dev}" if _IP.fullmatch(str(img.arch)) else
                       f"built for {img.arch}: which IP version that is, is not known")
                verdicts.append(Verdict(img, False, why, NOT_FOUND))
        if native is not None:
            return Decision(dev, None, native, NATIVE, f"{native.kind} {native.arch} loads",
                            None, tuple(verdicts), outcome=LOADS)
        if jit is not None:
            return Decision(dev, None, jit, JIT, f"no zebin for {dev}; SPIR-V is compiled at "
                            "load", None, tuple(verdicts), outcome=LOADS)
        return Decision(dev, None, None, NONE, f"no image for {dev}",
                        "ZE_RESULT_ERROR_INVALID_NATIVE_BINARY", tuple(verdicts),
                        outcome=NO_IMAGE)

    def floors(self, image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
        return (), (_NO_FLOORS,)

    def decision_key(self, image: ImageInfo, device: Any) -> Hashable:
        """The image but its kernels, offset and label, whatever the GPU (its decide reads
        its kind and target; a label names the image's offset)."""
        return image.key("kernels", "offset", "label")


#: the Intel XPU vendor (registered in :data:`fatbinkit.vendors.VENDORS` as ``"xpu"``)
XPU = XpuVendor()
