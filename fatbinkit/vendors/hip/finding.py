"""Where HIP device code is, and how it is read into :class:`~fatbinkit.device_code.DeviceCode`
records.

* ``.hip_fatbin`` (``.hip_fat`` in a PE image's eight-byte names): one clang offload bundle per
  registered module, each 4096-aligned, plain or compressed (``CCOB``), as clang's
  ``CGCUDANV.cpp`` places them and lld concatenates them (``../shared/ROCM.md`` §1.3); a module
  is a bundle (``__hipRegisterFatBinary`` registers one per wrapper record). The walk is
  checked against the ``.hipFatBinSegment`` (``.hipFatB``) wrapper records of the host file
  (:mod:`.wrappers`, :func:`_fatbin`): each ``HIPF`` record must point at a bundle the walk
  found; a rocm-kpack ``HIPK`` record is a module with no entry here.
* ``__CLANG_OFFLOAD_BUNDLE__<id>`` sections: the object-file form of a bundle (``-fgpu-rdc``
  objects: one section per entry, LLVM bitcode).
* ``.llvm.offloading``: LLVM's OffloadBinary blobs (``--offload-new-driver``: bitcode).
* whole files and embedded blobs (AOTInductor's ``__<kernel>_start``): a bundle, plain or
  compressed, or a bare code object (an AOTI ``.hsaco`` is either: ``rocm_multiarch_utils.py``).

Each bundle entry but the host's becomes one image: a code object (``hsaco``, its target ID
from its ``e_flags``), SPIR-V (``spirv``) or LLVM bitcode (``bitcode``, listed with ``all``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from ...decision import ImageInfo
from ...device_code import LINUX, WINDOWS, DeviceCode, EntrylessContainer, Place
from ...errors import FormatError, InvalidArgumentError
from ...formats import elf, hsaco, pe
from ...formats.amdgpu import TargetId
from ...formats.offload_binary import read_offload_binaries
from ...formats.offload_bundle import (
    BUNDLE_MAGIC,
    RUNTIME_HEADER_WINDOW,
    Bundle,
    BundleEntry,
    is_bundle,
    object_section_id,
    read_bundle,
    read_bundles,
)
from . import FATBIN_SECTION, OBJECT_PREFIX, OFFLOADING_SECTION, PE_FATBIN_SECTION
from .images import BITCODE, HSACO, SPIRV, CodeTarget, HipImage
from .wrappers import WrapperRef, elf_wrappers, pe_wrappers

if TYPE_CHECKING:
    from ...formats.codec import DecompressionBudget
    from ...formats.elf import Buffer

__all__ = [
    "FATBIN_SECTION",
    "OBJECT_PREFIX",
    "OFFLOADING_SECTION",
    "PE_FATBIN_SECTION",
    "bundle_images",
    "header_image",
    "image",
    "read",
    "sections",
]

#: where a ``HIPK`` module's device code is (rocm-kpack's docs/multi_arch_packaging_with_kpack.md)
KPACK = "a .kpack file (rocm-kpack)"
SPIRV_TARGET = "amdgcnspirv"
_SPIRV_MAGIC = b"\x03\x02\x23\x07"
_BITCODE_MAGICS = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")  # raw bitcode, and its wrapper


def sections(present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
    """``.hip_fatbin`` (``.hip_fat`` in a PE image), ``.llvm.offloading`` and the object-file
    form's ``__CLANG_OFFLOAD_BUNDLE__<id>`` sections of AMD targets."""
    own = {FATBIN_SECTION, OFFLOADING_SECTION} | ({PE_FATBIN_SECTION} if pe else set())
    own |= {s for s in present if s.startswith(OBJECT_PREFIX) and _amd_object_section(s)}
    return frozenset(own & set(present))


def _amd_object_section(name: str) -> bool:
    try:
        found = object_section_id(name)
    except FormatError:
        return False
    return found is not None and not found.is_host and _amd_triple(found.triple)


def _amd_triple(triple: str) -> bool:
    return triple.startswith(("amdgcn-", "amdgpu")) or triple.startswith("spirv64-amd-")


def read(place: Place, claimed: bool
         ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
    """The images at ``place``: for a claimed section, its bundles or OffloadBinary blobs; for
    a blob or a whole file, a bundle (plain or compressed) or a bare code object, None when it
    is neither."""
    view = place.view
    if claimed:
        name = place.source
        if name.startswith(OBJECT_PREFIX):
            return _object_section(place), []
        if name == OFFLOADING_SECTION:
            return _offloading(place), []
        return _fatbin(place)
    if is_bundle(view):
        return _bundles(place, [read_bundle(view, budget=place.budget)]), []
    if hsaco.is_code_object(view):
        return [DeviceCode(place.source, -1, _bare(view, place.base), place.base)], []
    return None


def _fatbin(place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
    """A ``.hip_fatbin`` section: its bundles, found by the 4096-aligned walk
    (:func:`~fatbinkit.formats.offload_bundle.read_bundles`) and checked against the
    ``.hipFatBinSegment`` wrapper records the runtime registers (:mod:`.wrappers`).

    * Each ``HIPF`` record must point at the start of a bundle the walk found; one pointing
      outside the section, or anywhere else in it, is a
      :class:`~fatbinkit.errors.FormatError` naming the record (CLR would hand the runtime
      garbage). Several records may name one bundle: it is one module.
    * A bundle no record points to is listed all the same, as a module of its own: its bytes
      are in the file (the runtime never registers it; nothing in the listing says so).
    * Each ``HIPK`` record (rocm-kpack moved the module's device code to a ``.kpack`` file, its
      ``binary`` naming a ``.rocm_kpack_ref`` record) is an
      :class:`~fatbinkit.device_code.EntrylessContainer`, numbered after the section's bundles
      in record order, its ``offset`` the record's.

    Bundles are numbered in file order. Without a host file (the section's bytes alone) or a
    record section (a file made by another tool), the walk alone decides."""
    view = place.view
    walked = read_bundles(view, budget=place.budget)
    start = place.base - place.host_base  # the section's offset in the host file
    try:
        refs = _wrappers(place)
    except FormatError as e:  # offsets of the host file: make them the section's, as ours
        msg = str(e).rsplit(" (at offset", 1)[0]
        raise type(e)(msg, offset=None if e.offset is None else e.offset - start) from e
    if refs is None:
        return _bundles(place, walked), []
    starts = {b.offset for b in walked}
    kpack: list[WrapperRef] = []
    for ref in refs:
        if ref.record.kpack:
            kpack.append(ref)
            continue
        where = ref.offset - start  # offsets of errors are the section's
        if ref.target is None or not start <= ref.target < start + len(view):
            target = "no place in the file" if ref.target is None else f"{ref.target:#x}"
            raise FormatError(f"{ref} points outside {place.source} "
                              f"({start:#x}..{start + len(view):#x}), at {target}: {ref.via}",
                              offset=where)
        at = ref.target - start
        if at not in starts:
            what = ("a bundle's inside" if any(b.offset < at < b.offset + b.stored_size
                                               for b in walked) else "no bundle")
            known = ", ".join(hex(s) for s in sorted(starts)) or "none"
            raise FormatError(f"{ref} points {at:#x} bytes into {place.source}, at {what}, "
                              f"not at a bundle start ({known}): {ref.via}", offset=where)
    codes = _bundles(place, walked)
    first = place.first + len(walked)
    entryless = [EntrylessContainer(place.source, first + j, place.host_base + ref.offset,
                                    vendor=HipImage.vendor, moved=KPACK)
                 for j, ref in enumerate(kpack)]
    return codes, entryless


def _wrappers(place: Place) -> list[WrapperRef] | None:
    """The wrapper records of the host file ``place`` lies in (None: no host, or no record
    section)."""
    host = place.host
    if host is None:
        return None
    if elf.machine(host) is not None:
        return elf_wrappers(host)
    if pe.is_pe(host) or pe.is_coff_object(host):
        return pe_wrappers(host, pe.read(host))
    return None


def _host(place: Place) -> str | None:
    return WINDOWS if place.source == PE_FATBIN_SECTION else LINUX if place.source else None


def _classify(entry_id: str, triple: str, target_id: str, data: Buffer
              ) -> tuple[str, str, int | None, int | None]:
    """(kind, target, code object version, generic version) of one image."""
    head = bytes(data[:4])
    if head == _SPIRV_MAGIC or triple.startswith("spirv64"):
        return SPIRV, target_id or SPIRV_TARGET, None, None
    if hsaco.is_code_object(data):
        co = hsaco.read_header(data)  # the target: its kernels are read when asked for
        known = co.target_id
        # a processor newer than the MACH table: as the bundle names it, else its number
        target = str(known) if known else (target_id or f"mach-{co.mach:#x}")
        return HSACO, target, co.code_object_version, co.generic_version
    if head in _BITCODE_MAGICS:
        return BITCODE, target_id or triple, None, None
    raise FormatError(f"bundle entry {entry_id!r}: neither an AMDGPU code object, SPIR-V nor "
                      f"LLVM bitcode (starts {head.hex()})")


def _shares(total: int, sizes: list[int]) -> list[int]:
    """``total`` split in proportion to ``sizes``, summing to ``total`` exactly (largest
    remainders get the odd bytes)."""
    whole = sum(sizes)
    if not whole:
        return [0] * len(sizes)
    raw = [total * s for s in sizes]
    out = [r // whole for r in raw]
    order = sorted(range(len(sizes)), key=lambda i: (-(raw[i] % whole), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def _bundles(place: Place, bundles: list[Bundle]) -> list[DeviceCode]:
    codes: list[DeviceCode] = []
    for n, bundle in enumerate(bundles):
        hidden = _past_the_window(bundle)
        entries = [e for e in bundle.entries if not e.bundle_id.is_host]
        codec = None if bundle.compressed is None else bundle.compressed.codec
        shares = (_shares(bundle.stored_size, [e.size for e in entries]) if codec else
                  [e.size for e in entries])
        for entry, share in zip(entries, shares, strict=True):
            codes.append(_entry_code(place, place.first + n, bundle, entry, codec, share,
                                     id(entry) in hidden))
    return codes


def _past_the_window(bundle: Bundle) -> set[int]:
    """``id()`` of the entries whose descriptor ends past the first
    :data:`~fatbinkit.formats.offload_bundle.RUNTIME_HEADER_WINDOW` bytes of the (inflated)
    bundle: the HIP runtime hands comgr only those bytes of a bundle's header (CLR
    ``hip_fatbin.cpp``: ``amd_comgr_set_data(data_object, 4096, image_)``; the newest copy walks
    "the same 4 KiB header window COMGR uses"), so it never sees such an entry."""
    if bundle.header_size <= RUNTIME_HEADER_WINDOW:
        return set()
    out: set[int] = set()
    end = len(BUNDLE_MAGIC) + 8  # magic and entry count, then the descriptors in order
    for entry in bundle.entries:
        end += BundleEntry.DESCRIPTOR.size + len(entry.id)
        if end > RUNTIME_HEADER_WINDOW:
            out.add(id(entry))
    return out


def _entry_code(place: Place, container: int, bundle: Bundle, entry: BundleEntry,
                codec: str | None, share: int, hidden: bool) -> DeviceCode:
    bid = entry.bundle_id
    kind, target, co, generic = _classify(entry.id, bid.triple, bid.target_id, entry.data)
    # a plain entry lies in the file; a compressed bundle's entries do not: their offset is
    # the bundle's
    offset = place.base + bundle.offset + (entry.offset if codec is None else 0)
    ccob = None if bundle.compressed is None else bundle.compressed.version
    img = HipImage(kind, target, entry.data, offset, share, codec, entry.id, co, generic, ccob,
                   hidden)
    return DeviceCode(place.source, container, img, offset)


def _bare(view: Buffer, base: int) -> HipImage:
    kind, target, co, generic = _classify("", "", "", view)
    return HipImage(kind, target, view, base, len(view), None, "", co, generic)


def _object_section(place: Place) -> list[DeviceCode]:
    """One entry of a bundle in the object-file form: the section is the entry."""
    bid = object_section_id(place.source)
    assert bid is not None  # sections() claims only these
    kind, target, co, generic = _classify(str(bid), bid.triple, bid.target_id, place.view)
    img = HipImage(kind, target, place.view, place.base, len(place.view), None, str(bid), co,
                   generic)
    return [DeviceCode(place.source, place.first, img, place.base)]


def _offloading(place: Place) -> list[DeviceCode]:
    """The AMD images of ``.llvm.offloading`` (one OffloadBinary blob per module)."""
    codes: list[DeviceCode] = []
    blobs: dict[int, int] = {}  # blob offset -> its module's number
    for found in read_offload_binaries(place.view, budget=place.budget):
        n = blobs.setdefault(found.offset, len(blobs))
        if not _amd_triple(found.triple):
            continue
        kind, target, co, generic = _classify(str(found), found.triple, found.arch, found.image)
        offset = place.base + found.offset
        img = HipImage(kind, target, found.image, offset, len(found.image), None,
                       f"{found.offload_kind}-{found.triple}--{found.arch}", co, generic)
        codes.append(DeviceCode(place.source, place.first + n, img, offset))
    return codes


def _info(code: DeviceCode, label: str, kernels: frozenset[str] | None) -> ImageInfo | None:
    img = code.entry
    assert isinstance(img, HipImage)
    return _image_info(img, code.source, code.offset, f"{code}", label, kernels)


def _image_info(img: HipImage, source: str, offset: int, what: str, label: str,
                kernels: frozenset[str] | None) -> ImageInfo | None:
    if img.image_kind not in (HSACO, SPIRV):
        return None
    try:
        target = TargetId.parse(img.target) if img.image_kind == HSACO else TargetId(SPIRV_TARGET)
    except InvalidArgumentError as e:
        raise FormatError(f"{what}: {e}") from e
    arch = CodeTarget(target, img.generic_version, img.code_object, img.bundle_version,
                      img.hidden)
    host = LINUX if source and source != PE_FATBIN_SECTION else (
        WINDOWS if source == PE_FATBIN_SECTION else None)
    return ImageInfo(img.image_kind, arch, label=label, kernels=kernels,
                     compression=img.compression, abi_version=img.code_object,
                     offset=offset, host=host)


def bundle_images(bundle: Bundle, source: str = FATBIN_SECTION
                  ) -> tuple[ImageInfo | None, ...]:
    """Each entry of ``bundle``, in header order, as the HIP runtime selects it (what
    :func:`~fatbinkit.vendors.hip.loading.decide` takes; None for the host entry and for
    bitcode, which no runtime loads), its kernels unknown, labelled with its entry id; offsets
    are the bundle's own. What a rewrite of the bundle (:mod:`fatbinkit.slim`) plans with."""
    hidden = _past_the_window(bundle)
    codec = None if bundle.compressed is None else bundle.compressed.codec
    ccob = None if bundle.compressed is None else bundle.compressed.version
    out: list[ImageInfo | None] = []
    for entry in bundle.entries:
        bid = entry.bundle_id
        if bid.is_host:
            out.append(None)
            continue
        kind, target, co, generic = _classify(entry.id, bid.triple, bid.target_id, entry.data)
        offset = bundle.offset + (entry.offset if codec is None else 0)
        img = HipImage(kind, target, entry.data, offset, entry.size, codec, entry.id, co,
                       generic, ccob, id(entry) in hidden)
        out.append(_image_info(img, source, offset, f"bundle entry {entry.id}", entry.id,
                               None))
    return tuple(out)


def header_image(code: DeviceCode, label: str = "") -> ImageInfo | None:
    """What the bundle entry says of an image (its kernels unknown)."""
    return _info(code, label, None)


def image(code: DeviceCode, budget: DecompressionBudget | None) -> ImageInfo | None:
    """The image with its kernels (a code object's ``amdhsa.kernels``)."""
    kernels: frozenset[str] | None = None
    if code.kind == HSACO:
        kernels = frozenset(k.name for k in hsaco.read_code_object(code.data()).kernels)
    return _info(code, f"code object at {code.offset:#x}", kernels)
