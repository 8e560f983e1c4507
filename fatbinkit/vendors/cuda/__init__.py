"""NVIDIA CUDA: fatbins, cubins and PTX (:mod:`fatbinkit.formats`), NVIDIA's driver tables
(:mod:`.driver`) and the driver's loading rules (:mod:`.loading`), as the
:class:`~fatbinkit.vendors.Vendor` :data:`CUDA`. Each member delegates to that code."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...decision import dotted
from ...errors import InvalidArgumentError
from ...formats.arch import Arch, ArchLike, as_arch
from ...formats.elf import EM_CUDA
from ...formats.fatbin import EntryKind, FatbinEntry, kind_name

if TYPE_CHECKING:
    from ...decision import Decision, Floor, ImageInfo
    from ...device_code import DeviceCode, EntrylessContainer, Place
    from ...formats.codec import DecompressionBudget
    from ...formats.cubin import CubinFunction
    from .driver import DriverLike, Release

__all__ = ["CUDA", "GENERATIONS", "CudaFilter", "CudaVendor", "entry_of"]

# NVIDIA's generation per compute capability ("CUDA GPUs - Compute Capability",
# developer.nvidia.com/cuda-gpus, and the CUDA C++ Programming Guide's "Compute Capabilities"
# table): Blackwell covers data-centre (10.x), Thor (11.0, once 10.1) and GeForce/RTX (12.x).
GENERATIONS: dict[int, str] = {
    20: "Fermi", 21: "Fermi", 30: "Kepler", 32: "Kepler", 35: "Kepler", 37: "Kepler",
    50: "Maxwell", 52: "Maxwell", 53: "Maxwell", 60: "Pascal", 61: "Pascal", 62: "Pascal",
    70: "Volta", 72: "Volta", 75: "Turing", 80: "Ampere", 86: "Ampere", 87: "Ampere",
    88: "Ampere", 89: "Ada", 90: "Hopper", 100: "Blackwell", 101: "Blackwell",
    103: "Blackwell", 110: "Blackwell", 120: "Blackwell", 121: "Blackwell",
}
_OLDEST_SHOWN = 50  # Fermi and Kepler appear only when the file has code for them
_KIND_ORDER = {"ptx": int(EntryKind.PTX), "sass": int(EntryKind.ELF),
               "ltoir": int(EntryKind.LTOIR)}


def entry_of(code: DeviceCode) -> FatbinEntry:
    """The fatbin entry a CUDA image is (a bare cubin or PTX: a synthetic one)."""
    entry = code.entry
    assert isinstance(entry, FatbinEntry), f"{code} is not a CUDA image"
    return entry


@dataclass(frozen=True)
class CudaFilter:
    """CUDA's ``--arch`` filter (:class:`fatbinkit.binary.ArchFilter` holds it): SM ``number``,
    ``suffix`` (None: any of ``""``, ``a``, ``f``) and whether SASS and/or PTX match. ``sm_90``
    and ``90``: SASS and PTX of SM 9.0, any suffix (as ``cuobjdump -arch sm_90``); ``sm_90a``:
    that suffix only; ``compute_90``: PTX only."""

    number: int
    suffix: str | None
    sass: bool = True
    ptx: bool = True

    @classmethod
    def parse(cls, text: str | Arch) -> CudaFilter:
        """An :class:`~fatbinkit.formats.arch.Arch` (that suffix exactly) or its spelling
        (:meth:`~fatbinkit.formats.arch.Arch.parse`'s errors for anything else)."""
        if isinstance(text, Arch):
            return cls(text.number, text.suffix)
        arch = Arch.parse(text)
        spelled = text.strip().lower()
        suffix = arch.suffix if spelled.endswith(("a", "f")) else None
        return cls(arch.number, suffix, sass=not spelled.startswith("compute"),
                   ptx=not spelled.startswith("lto"))

    def matches(self, kind: str, target: str) -> bool:
        """Whether an image of ``kind`` (``sass``, ``ptx``...) for ``target`` (``sm_90a``,
        ``compute_90``) is selected; a target NVIDIA does not spell never is."""
        try:
            arch = Arch.parse(target)
        except InvalidArgumentError:
            return False
        if arch.number != self.number or (self.suffix is not None and arch.suffix != self.suffix):
            return False
        return self.ptx if kind == "ptx" else self.sass

    def matches_device(self, device: str) -> bool:
        """Whether a GPU spelled ``device`` (``sm_90``) is of this filter's SM."""
        try:
            return Arch.parse(device).number == self.number
        except InvalidArgumentError:
            return False

    def __str__(self) -> str:
        prefix = "sm" if self.sass else "compute"
        return f"{prefix}_{self.number}{self.suffix or ''}"


@dataclass(frozen=True)
class CudaVendor:
    """NVIDIA CUDA as a :class:`~fatbinkit.vendors.Vendor`."""

    name: str = "cuda"
    kinds: tuple[str, ...] = ("sass", "ptx", "ltoir")
    loadable: frozenset[str] = frozenset({"sass", "ptx"})
    function_kinds: frozenset[str] = frozenset({"sass"})
    compressed_apart: bool = True  # each fatbin entry is compressed alone
    machines: frozenset[int] = frozenset({EM_CUDA})
    not_found: str = "CUDA_ERROR_NOT_FOUND"
    runtime_label: str = "CUDA"
    words: Mapping[str, str] = field(compare=False, default_factory=lambda: MappingProxyType({
        "native": "SASS", "native_key": "sass", "jit": "PTX JIT", "floors": "driver floors",
        "version": "PTX ISA", "versions_key": "ptx_versions",
        "runtime": "driver CUDA",
        "unchecked": "driver floors not checked (no --driver): the device, toolkit, compression "
                     "and PTX ISA minimums are shown as 'needs'",
        "jit_note": "PTX-JIT: the driver compiles the PTX at first load (cold start: ~0.1-1 s per "
                    "kernel, cached in ~/.nv/ComputeCache unless CUDA_CACHE_DISABLE=1)"}))

    def sections(self, present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
        from .finding import sections

        return sections(present, all, pe)

    def read(self, place: Place, claimed: bool,
             ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
        from .finding import read

        return read(place, claimed)

    def search(self, place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
        from .finding import search

        return search(place)

    def device(self, value: object, what: str = "GPU arch") -> Arch | None:
        """:func:`~fatbinkit.driver.as_device`, the suffix dropped (a GPU has none); an
        :class:`~fatbinkit.errors.InvalidArgumentError` for any value that names no GPU of the
        table (CUDA is asked first: its errors are the ones users of NVIDIA GPUs see)."""
        from .driver import DEVICE_SUPPORT, as_device

        if isinstance(value, Arch) and not value.suffix and (
                value.future or value.number in DEVICE_SUPPORT):
            return value  # a GPU already (check's, for each module)
        d = as_device(value, what)
        return Arch(d.number, future=d.future)

    def runtime(self, value: object, what: str = "driver") -> tuple[int, int]:
        from .driver import as_cuda_version

        return as_cuda_version(value, what)

    def runtime_text(self, version: tuple[int, int], host: str | None = None,
                     release: Release | None = None) -> str:
        from .driver import cuda_name

        return cuda_name(version, host, release)

    def spell_device(self, device: Arch) -> str:
        from .driver import FUTURE

        return f"{FUTURE}{device.sm}" if device.future else device.sm

    def spell_runtime(self, version: tuple[int, int]) -> str:
        from .driver import Driver

        return version.text if isinstance(version, Driver) else dotted(version)

    def runtime_name(self, version: tuple[int, int]) -> str:
        from .driver import driver_name

        return driver_name(version)

    def last_runtime(self, device: Arch) -> tuple[int, int] | None:
        from .driver import DEVICE_SUPPORT

        support = DEVICE_SUPPORT.get(device.number)
        return support.last if support else None

    def gap(self, device: Arch, need: tuple[int, int]) -> str | None:
        """CUDA 13 cubins on a GPU that only CUDA 12 drivers call sm_101."""
        from .driver import DEVICE_SUPPORT

        last = self.last_runtime(device)
        if last is None or need <= last:
            return None
        note = DEVICE_SUPPORT[device.number].note
        return (f"{device.sm} GPUs are driven up to CUDA {dotted(last)} only ({note}), "
                f"the images need CUDA {dotted(need)}")

    def every_device(self, codes: Sequence[DeviceCode] = ()) -> tuple[Arch, ...]:
        from .driver import DEVICE_SUPPORT

        beyond = sorted({a.number for c in codes if c.vendor == self.name
                         and c.kind == "sass" and (a := entry_of(c).arch).number
                         not in DEVICE_SUPPORT})
        return (*(Arch(n) for n in DEVICE_SUPPORT), *(Arch(n, future=True) for n in beyond))

    def target_filter(self, value: object) -> CudaFilter | None:
        return CudaFilter.parse(value) if isinstance(value, (str, Arch)) else None

    def sort_key(self, kind: str, target: str) -> tuple[Any, ...]:
        """As cuobjdump's kinds number them (PTX 1, ELF 2, LTO-IR 8), then SM and suffix."""
        order = _KIND_ORDER.get(kind)
        if order is None:  # kind_0x..: the number itself
            order = int(kind.removeprefix("kind_"), 16)
        arch = Arch.parse(target)
        return (order, arch.number, arch.suffix)

    def target_kind(self, target: str) -> str | None:
        """``ptx`` for ``compute_``, ``sass`` for other spellings of an NVIDIA arch
        (:meth:`~fatbinkit.formats.arch.Arch.parse`'s error for anything else)."""
        Arch.parse(target)
        return "ptx" if target.startswith("compute_") else "sass"

    def target_key(self, target: str) -> tuple[Any, ...]:
        """SASS before PTX, then by SM number (``sm_80`` before ``sm_100``), then as spelled."""
        return (target.startswith("compute_"), Arch.parse(target).number, target)

    def fingerprint(self, code: DeviceCode) -> bytes:
        e = entry_of(code)
        return repr((e.header, e.compression)).encode()

    def profile(self, code: DeviceCode) -> tuple[ImageInfo, list[tuple[Any, ...]]]:
        from dataclasses import replace

        from ...decision import SASS, ImageInfo
        from .loading import image_from_ptx

        e = entry_of(code)
        data = e.data()
        label = f"entry at {code.offset:#x}"
        if e.header.kind == EntryKind.ELF:
            from ...formats.cubin import cubin_profile

            c = cubin_profile(data)
            image = ImageInfo(SASS, e.arch, None, label,
                              frozenset(row[0] for row in c.rows if row[1]),
                              toolkit=c.toolkit, abi_version=c.abi_version,
                              compression=e.compression, variables=c.variables,
                              offset=code.offset)
            return image, c.rows
        image = replace(image_from_ptx(data, label, e.arch, e.compression), offset=code.offset)
        return image, [(name, True) for name in sorted(image.kernels or ())]

    def file_suffix(self, code: DeviceCode) -> str:
        """cuobjdump's: ELF names show an ``a`` suffix but not ``f``; PTX names show both."""
        e = entry_of(code)
        kind, arch = e.header.kind, e.arch
        if kind == EntryKind.ELF:
            return f".sm_{arch.number}a.cubin" if arch.suffix == "a" else f".sm_{arch.number}.cubin"
        return f".{arch.sm}.{'ptx' if kind == EntryKind.PTX else kind_name(kind)}"

    def version(self, code: DeviceCode) -> str | None:
        e = entry_of(code)
        if e.header.kind != EntryKind.PTX:
            return None
        return dotted(e.code_version)

    def details(self, code: DeviceCode) -> dict[str, Any]:
        return {"ptx_version": self.version(code)}

    def image_details(self, image: ImageInfo) -> dict[str, Any]:
        return {"ptx_version": dotted(image.ptx_version) if image.ptx_version else None,
                "toolkit": dotted(image.toolkit) if image.toolkit else None}

    def runtime_numbers(self, release: Release | None, host: str | None) -> dict[str, Any]:
        """The minimum driver's versions, each labelled by its OS: ``linux_driver``,
        ``windows_driver`` (null: NVIDIA publishes none, or no minimum), and ``host``, the
        input's OS (null: not known), whose number applies."""
        return {"host": host, "linux_driver": release.linux if release else None,
                "windows_driver": release.windows if release else None}

    def outline(self, code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
        kind = entry_of(code).header.kind
        if kind == EntryKind.ELF:
            from ...formats.cubin import cubin_outline

            c = cubin_outline(code.data())
            return sorted(c.kernels), c.toolkit
        if kind == EntryKind.PTX:
            from ...formats.ptx import Ptx

            return [e.name for e in Ptx.from_bytes(code.data()).entries], None
        return [], None

    def toolkit_name(self, toolkit: tuple[int, int]) -> str:
        return f"{self.runtime_label} {dotted(toolkit)}"

    def functions(self, code: DeviceCode) -> tuple[CubinFunction, ...]:
        if entry_of(code).header.kind != EntryKind.ELF:
            return ()
        from ...formats.cubin import Cubin

        return Cubin.from_bytes(code.data()).functions

    def function_code(self, code: DeviceCode, data: bytes) -> tuple[tuple[str, bytes], ...]:
        if entry_of(code).header.kind != EntryKind.ELF:
            return ()
        from ...formats.cubin import function_code

        return tuple(function_code(data))

    def header_image(self, code: DeviceCode, label: str = "") -> ImageInfo | None:
        from .loading import header_image

        e = entry_of(code)
        return header_image(e, label) if e.header.kind in (EntryKind.ELF, EntryKind.PTX) else None

    def image(self, code: DeviceCode, budget: DecompressionBudget | None = None,
              ) -> ImageInfo | None:
        from .loading import image_from_entry

        return image_from_entry(entry_of(code), f"entry at {code.offset:#x}", budget)

    def may_load(self, image: ImageInfo, device: ArchLike) -> bool:
        from .loading import ptx_jits_for, sass_runs_on

        return (sass_runs_on if image.kind == "sass" else ptx_jits_for)(
            image.arch, as_arch(device, "device"))

    def extracted(self, code: DeviceCode, budget: DecompressionBudget | None = None) -> bytes:
        data = code.data(budget)
        return data.rstrip(b"\0") if entry_of(code).header.kind == EntryKind.PTX else data

    def devices(self, images: Iterable[ImageInfo]) -> tuple[str, ...]:
        from .driver import DEVICE_SUPPORT

        present = {i.arch.number for i in images}
        return tuple(Arch(n).sm for n in sorted(DEVICE_SUPPORT)
                     if n >= _OLDEST_SHOWN or n in present)

    def generation(self, device: str) -> str:
        return GENERATIONS.get(Arch.parse(device).number, "?")

    def decide(self, images: Iterable[ImageInfo], device: ArchLike,
               runtime: DriverLike | None = None,
               *, raw: bool = False) -> Decision:
        from .loading import decide

        return decide(images, device, runtime, raw=raw)

    def floors(self, image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
        from .loading import image_floors

        return image_floors(image)

    def decision_key(self, image: ImageInfo, device: Arch) -> Hashable:
        """The image but its kernels, offset and variables, which :func:`.loading.decide`
        does not read, and its label, which only the warning about a cubin of unknown toolkit
        names, made where that cubin runs on ``device`` (an image that does not run there is
        refused by its arch alone: torch's modules hold such cubins of other archs, unread,
        so they share a key on the GPUs they do not run on)."""
        from ...decision import SASS
        from .loading import sass_runs_on

        label = image.label if image.kind == SASS and image.toolkit is None and \
            sass_runs_on(image.arch, Arch(device.number)) else ""
        return image.key("kernels", "offset", "variables", "label"), label


#: the CUDA vendor (registered in :data:`fatbinkit.vendors.VENDORS` as ``"cuda"``)
CUDA = CudaVendor()
