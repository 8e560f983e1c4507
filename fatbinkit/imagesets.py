"""Modules: the images a runtime chooses among in one load (:class:`ImageSet`), found in an input
by :func:`image_sets` through each image's vendor (:mod:`fatbinkit.vendors`), and the input's
host OS (:func:`host_of`), whose driver numbers a floor names; and what a runtime would do with
a buffer handed to it (:func:`predict_load`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Generator, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from . import vendors
from .decision import KERNEL_NOT_FOUND, NO_IMAGE, NONE, Decision, ImageInfo, Verdict, _count
from .device_code import LINUX, WINDOWS, DeviceCode, EntrylessContainer
from .errors import FormatError, InvalidArgumentError, NotFoundError
from .formats import elf
from .formats.codec import DecompressionBudget
from .formats.pe import is_coff_object, is_pe
from .infile import as_content, as_input
from .progress import Progress

if TYPE_CHECKING:
    from .driver import DriverLike
    from .formats.arch import ArchLike

__all__ = ["ImageSet", "host_of", "image_sets", "input_host", "module_label", "placed",
           "predict_load", "read_image_sets"]


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
    # whose rules decide (a name in fatbinkit.vendors.VENDORS); sets made without one are
    # CUDA's, as every set was before there were vendors
    vendor: str = "cuda"

    def __post_init__(self) -> None:
        if self.vendor not in vendors.VENDORS:
            raise InvalidArgumentError(f"{self.label}: no vendor named {self.vendor!r} is "
                                       f"registered ({', '.join(vendors.VENDORS)})")

    @classmethod
    def of_entryless(cls, c: EntrylessContainer) -> ImageSet:
        """The module of a container with no entry."""
        return cls(module_label(c.source, c.container, c.member), (), source=c.source,
                   container=c.container, entryless=True, vendor=c.vendor)

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
        """The vendor's :meth:`~fatbinkit.vendors.Vendor.decide` for the whole set, as the
        driver loads it: one image for the module.
        With ``kernel``, a picked image that lacks it gives the vendor's
        :attr:`~fatbinkit.vendors.Vendor.not_found` (CUDA: ``CUDA_ERROR_NOT_FOUND``, what
        ``cuModuleGetFunction`` returns), even when another image of the set has it; a kernel
        that no image has is a :class:`~fatbinkit.errors.NotFoundError`."""
        if kernel is not None:
            self._check_kernel(kernel)
        return self._for_kernel(self._decide(device, driver), kernel)

    def _decide(self, device: ArchLike, driver: DriverLike | None,
                shapes: Shapes | None = None) -> Decision:
        vendor, gpu = vendors.device(device, "device")
        if vendor.name != self.vendor:  # another vendor's GPU loads nothing of this module
            return Decision(gpu, None, None, NONE, f"a {self.vendor} module holds no image for "
                            f"{vendor.name} GPUs", None, (), outcome=NO_IMAGE)
        decided = None
        # a device by itself and its future flag (not part of an Arch's equality)
        key = (device, getattr(device, "future", None))
        if shapes is not None:
            decided = shapes.setdefault((self._shape(vendor, gpu), type(driver), repr(driver)), {})
            if (done := decided.get(key)) is not None:
                return _moved(*done, self.images)
        d = vendor.decide(self.images, gpu, driver, raw=self.raw)
        if self.entryless and d.floor is None:  # a device floor still says why first
            d = replace(d, reason="an empty fatbin container (no entries: its images were "
                        "removed, e.g. by prune): its kernels, unknown, load on no GPU")
        if decided is not None:
            decided[key] = (d, self.images)
        return d

    def _shape(self, vendor: vendors.Vendor, gpu: Any) -> Hashable:
        """What the vendor's decide reads of the set on ``gpu``: its kind of load and, per
        image, its :meth:`~fatbinkit.vendors.Vendor.decision_key`; a set that holds one image
        object twice is a shape of its own (decisions are moved to another set's images by which
        object they name)."""
        if not self._distinct:
            return object()
        return (self.vendor, self.raw, self.entryless,
                tuple(vendor.decision_key(i, gpu) for i in self.images))

    @functools.cached_property
    def _distinct(self) -> bool:
        """No image object twice in the set."""
        return len({id(i) for i in self.images}) == len(self.images)

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
            d, image=None, how=NONE, error=vendors.VENDORS[self.vendor].not_found,
            outcome=KERNEL_NOT_FOUND, floors=(),
            reason=f"the driver loads {d.image.name} for {d.device}, which has no kernel "
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
        return [(k, ds[0]) for k, ds in self.judged([device], driver)]

    def judged(self, devices: Sequence[ArchLike], driver: DriverLike | None = None,
               shapes: Shapes | None = None) -> list[tuple[str | None, list[Decision]]]:
        """Per kernel (one None row when the set names no kernels), its decision on each of
        ``devices``: :meth:`decisions` for several GPUs at once. The driver picks one image per
        module, so the kernels every picked image holds share one list (do not change it).
        ``shapes``: a dict kept across the modules of one judgement (an empty one to start): a
        module whose images the vendor reads alike (:meth:`~fatbinkit.vendors.Vendor.
        decision_key`: the same archs, PTX versions, toolkits...) as one decided before, on the
        same GPU with the same driver, gets that decision, naming its own images
        (libtorch_cuda.so's 475 modules are 5 shapes)."""
        module = [self._decide(d, driver, shapes) for d in devices]  # one pick per module, GPU
        if not self.kernels:
            return [(None, module)]
        names = self.kernels
        every = set(names)
        lacking: set[str] = set()  # the kernels some picked image lacks
        for image in {id(d.image): d.image for d in module if d.image is not None}.values():
            if image.kernels is not None:
                lacking |= every.difference(image.kernels)
        if not lacking:
            return [(k, module) for k in names]
        return [(k, [self._for_kernel(d, k) for d in module] if k in lacking else module)
                for k in names]


#: the decisions made for one shape of module on a GPU (:meth:`ImageSet._shape`) with one
#: driver, by device: each with the images it names
_Decided = dict[tuple[Any, Any], tuple[Decision, tuple[ImageInfo, ...]]]
#: the decisions made in one judgement, by shape of module on a GPU and driver (its type and
#: repr: a :class:`~fatbinkit.driver.Driver` equals the CUDA version it stands for)
Shapes = dict[Hashable, _Decided]


def _moved(d: Decision, was: tuple[ImageInfo, ...], images: tuple[ImageInfo, ...]) -> Decision:
    """``d``, made for ``was``, for ``images`` whose keys are the same, position by
    position: it names the image of ``images`` at the position of the one it named, and so do
    its verdicts (made here field by field: :func:`dataclasses.replace` took 0.35 s of
    libtorch_cuda.so's 22 GPUs; tests/test_judge.py holds the fields to keep this in step)."""
    if was is images:
        return d
    at = {id(old): new for old, new in zip(was, images, strict=True)}
    return Decision(d.device, d.driver, None if d.image is None else at[id(d.image)], d.how,
                    d.reason, d.error,
                    tuple(Verdict(at[id(v.image)], v.usable, v.reason, v.error, v.floor)
                          for v in d.verdicts),
                    d.floors, d.floor, d.warnings, outcome=d.outcome)


def module_label(source: str, container: int, member: str = "") -> str:
    """How a module is named: ``.nv_fatbin container 3``, ``__k_start`` (an embedded bare
    image), ``file`` (a bare file), after ``member: `` in a static library."""
    where = f"{source or 'file'} container {container}" if container >= 0 else (source or "file")
    return f"{member}: {where}" if member else where


def host_of(head: bytes | bytearray | memoryview) -> str | None:
    """The OS whose driver numbers apply to an input, from its first bytes: ELF (not a GPU's
    own code object: :func:`fatbinkit.vendors.device_machine`) is Linux, a PE image or COFF
    object Windows, anything else (a bare fatbin, cubin or PTX, a static library) not known."""
    machine = elf.machine(head)
    if machine is not None:
        return None if vendors.device_machine(machine) else LINUX
    return WINDOWS if is_pe(head) or is_coff_object(head) else None


def input_host(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> str | None:
    """:func:`host_of` a file (by its path) or of the bytes given."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return host_of(source[:4096])
    with open(source, "rb") as f:
        return host_of(f.read(4096))


def image_sets(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
               max_decompressed: int | DecompressionBudget | None = None, *,
               jobs: int | None = None, progress: Progress = None,
               devices: Iterable[ArchLike] | None = None,
               codes: Sequence[DeviceCode] | None = None,
               entryless: Sequence[EntrylessContainer] = ()) -> tuple[ImageSet, ...]:
    """Every load unit in a file or buffer: each container (CUDA: a fatbin container, in a
    fatbin, a host ELF's ``.nv_fatbin``, or an embedded blob), or a bare image itself (a
    ``str`` is a path), its images those its vendor says a device loads
    (:attr:`~fatbinkit.vendors.Vendor.loadable`). Each image's :attr:`ImageInfo.host` is the
    input's OS (:func:`host_of`). Images are read on ``jobs`` processes (default: every core;
    ``progress`` as :func:`fatbinkit.parallel.map_codes` takes it). Decompression is charged to
    ``max_decompressed`` (:meth:`DecompressionBudget.of`: default 64x the input + 256 MiB) up
    front, for every image read (:func:`fatbinkit.parallel.charge`).

    With ``devices``, only the images one of those GPUs could load are read
    (:meth:`~fatbinkit.vendors.Vendor.may_load`: CUDA's SASS that runs on it, PTX that JITs for
    it), and every image of a module with none of those (its kernels and variables tell a
    module built for other GPUs from an empty one); the others come from their headers, their
    kernels and toolkit unknown (None). The image each device picks and its floors are the
    same; what is not known is which kernels only the unread images hold (a kernel the picked
    image lacks is ``CUDA_ERROR_NOT_FOUND``). libtorch_cuda.so, three archs: a third of its 5
    GiB of images. ``codes``: what :func:`~fatbinkit.scan.scan` found in ``source``, when the
    caller has it, and ``entryless`` the containers with no entry
    (:func:`~fatbinkit.scan.scan_modules`): each is a module too (:attr:`ImageSet.entryless`),
    in its place in file order."""
    from .scan import scan_modules

    source = as_input(source, "image_sets() source")
    if codes is None:
        codes, entryless = scan_modules(source)
    return placed(read_image_sets(source, codes, max_decompressed, jobs=jobs, progress=progress,
                                  devices=devices), entryless)


def read_image_sets(source: str | os.PathLike[str] | bytes | bytearray | memoryview,
                    codes: Sequence[DeviceCode],
                    max_decompressed: int | DecompressionBudget | None = None, *,
                    jobs: int | None = None, progress: Progress = None,
                    devices: Iterable[ArchLike] | None = None,
                    ) -> Generator[ImageSet, None, None]:
    """:func:`image_sets` of ``codes`` (what :func:`~fatbinkit.scan.scan` found in
    ``source``), each module as soon as its images are read, in file order, and without the
    containers that have no entry (:func:`placed` puts those in): a caller judges the first
    modules while the workers read the rest. The budget is charged, and the arguments checked,
    at the call."""
    from .parallel import charge, iter_codes

    source = as_input(source, "image_sets() source")
    host = input_host(source)
    budget = DecompressionBudget.of(max_decompressed, len(source) if isinstance(
        source, (bytes, bytearray, memoryview)) else os.path.getsize(source))
    # the loadable images per module: a container, or a bare image (an embedded blob, per
    # archive member)
    groups: dict[tuple[str, str, int], tuple[str, list[int]]] = {}
    for i, code in enumerate(codes):
        _, members = groups.setdefault((code.member, code.source, code.container),
                                       (code.vendor, []))
        if code.kind in vendors.of(code).loadable:
            members.append(i)
    heads: dict[int, ImageInfo] = {}  # what each loadable image's header says (to choose)
    read = {i for _, members in groups.values() for i in members}
    if devices is not None:
        wanted = [vendors.device(d, "device") for d in devices]
        heads = {i: _header(codes[i]) for i in read}
        read = {i for i in read if _may_load(codes[i], heads[i], wanted)}
        read |= {i for _, members in groups.values() if read.isdisjoint(members)
                 for i in members}
    order = sorted(read)
    chosen = [codes[i] for i in order]
    charge(chosen, budget)
    found = iter_codes(lambda c: vendors.of(c).image(c), chosen, jobs=jobs, progress=progress,
                       desc="reading images")
    return _modules(groups, codes, read, heads, host, zip(order, found, strict=True))


def _modules(groups: dict[tuple[str, str, int], tuple[str, list[int]]],
             codes: Sequence[DeviceCode], read: set[int], heads: dict[int, ImageInfo],
             host: str | None, found: Iterator[tuple[int, ImageInfo | None]],
             ) -> Generator[ImageSet, None, None]:
    """Each group of codes as a module, as soon as its images ``read`` have come back from
    ``found`` (in code order); the others from their headers (``heads``)."""
    images: dict[int, ImageInfo | None] = {}
    for (member, src, c), (vendor, members) in groups.items():
        own = []
        for i in members:
            if i in read:
                while i not in images:
                    at, img = next(found)
                    images[at] = img
                img = images.pop(i)
            else:  # not read: chosen by its header, made then
                img = heads[i]
            assert img is not None  # loadable images only
            own.append(img.at(codes[i].offset, host))
        yield ImageSet(module_label(src, c, member), tuple(own), raw=c < 0, source=src,
                       container=c if c >= 0 else None, vendor=vendor)
    for _ in found:  # nothing is left: the workers are joined
        raise AssertionError("an image read of no module")


def placed(sets: Iterable[ImageSet], entryless: Sequence[EntrylessContainer]
           ) -> tuple[ImageSet, ...]:
    """``sets`` (:func:`read_image_sets`) with a module for each container with no entry
    (:attr:`ImageSet.entryless`), each where it is in the file: before the next container."""
    out = list(sets)
    for hole in reversed(entryless):
        at = next((i for i, s in enumerate(out)
                   if s.container is not None and s.container > hole.container), len(out))
        out.insert(at, ImageSet.of_entryless(hole))
    return tuple(out)


def _may_load(code: DeviceCode, image: ImageInfo,
              devices: Sequence[tuple[vendors.Vendor, Any]]) -> bool:
    """Whether one of ``devices`` (each with its vendor) could load ``code``, by its header
    (``image``)."""
    return any(v.may_load(image, d) for v, d in devices if v.name == code.vendor)


def _header(code: DeviceCode) -> ImageInfo:
    """What a loadable image's header says of it, labelled with where it is."""
    image = vendors.of(code).header_image(code, f"entry at {code.offset:#x}")
    assert image is not None  # loadable images only
    return image


def predict_load(data: bytes | bytearray | memoryview, device: ArchLike,
                 driver: DriverLike | None = None) -> Decision:
    """What ``cuModuleLoadData(data)`` would do on ``device``: for a fatbin, its first container
    (the only one the driver reads); else the bare cubin or PTX. A host ELF (``.so``, ``.o``) is
    refused as the driver refuses it, even when it carries fatbins: load what :func:`scan` finds
    in it instead."""
    data = as_content(data, "predict_load()")
    machine = elf.machine(data)
    if machine is not None and not vendors.device_machine(machine):
        raise FormatError(f"a host ELF file (e_machine {machine}), not a cubin: the driver takes a "
                          "fatbin, a cubin or PTX; load the device code scan() finds in it",
                          offset=18)
    sets = image_sets(data)
    if not sets:
        raise FormatError("no device code: no fatbin container, cubin or PTX to load", offset=0)
    return sets[0].decide(device, driver)
