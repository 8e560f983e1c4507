"""Where Intel XPU device code is, and how it is read into
:class:`~fatbinkit.device_code.DeviceCode` records (``../shared/ROCM.md`` §6).

* ``__CLANG_OFFLOAD_BUNDLE__sycl-spir64*`` sections: the object-file form of a clang offload
  bundle (``ObjectFileHandler``; Intel's SYCL compiler names its entries ``sycl-spir64`` for
  SPIR-V, ``sycl-spir64_gen`` for ocloc's ahead-of-time output). A linked library keeps its
  objects' sections back to back: SPIR-V modules, each its own module here (dpnp's
  ``_tensor_impl``: 4642 of them, one kernel each, as its ``.tgtimg`` table lists them).
* whole files and embedded blobs (``__<name>_start``): a SPIR-V module (AOTInductor's ``.spv``),
  a zebin, an OpenCL ELF, or ocloc's ``ar`` fat binary.

ocloc's fat binary (compute-runtime ``device_binary_format_ar.cpp``, ``ar_encoder.cpp``): an
``ar`` archive whose members are named ``<ptrsize>.<major>.<minor>.<revision>`` (an IP
version), ``<ptrsize>.<product>[.<stepping>]``, ``<ptrsize>.<major>.<minor>`` or
``generic_ir`` (SPIR-V, for devices no member matches), with ``pad_<n>`` members aligning the
next one; the runtime loads one member of it: the archive is one module.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace

from ...device_code import DeviceCode, EntrylessContainer, Place
from ...errors import DecompressionError, FormatError
from ...formats import spirv, zebin
from ...formats.archive import ar_members, is_archive
from ...formats.codec import MAX_DATA_SIZE, DecompressionBudget, decompress
from ...formats.elf import Buffer
from ...formats.offload_bundle import object_section_id
from . import OBJECT_PREFIX
from .images import OPENCL_ELF, SPIR64, SPIRV, ZEBIN, XpuImage

__all__ = ["OBJECT_PREFIX", "is_fat_archive", "read", "sections"]

_MEMBER = re.compile(r"(?P<ptr>32|64)\.(?P<device>[A-Za-z0-9][A-Za-z0-9._-]*)")
_PAD = re.compile(r"pad_[0-9]+")
_IP = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+")
GENERIC_IR = "generic_ir"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _inflated(place: Place, claimed: bool
              ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
    """A zstd frame holding what :func:`read` reads (Intel's SYCL compiler compresses the
    device images of its bundle sections: bitsandbytes' XPU library holds an ocloc fat binary
    and SPIR-V so), inflated within the scan's budget (its recorded size checked, at most
    :data:`~fatbinkit.formats.codec.MAX_DATA_SIZE`); the images are the inflated ones, at the
    frame's offset, each stored as its share of the frame."""
    import zstandard

    data = place.view
    size = zstandard.frame_content_size(bytes(data[:18]))
    limit = MAX_DATA_SIZE if size < 0 else size
    if limit > MAX_DATA_SIZE:
        raise DecompressionError(f"zstd frame records {size} bytes, above the limit of "
                                 f"{MAX_DATA_SIZE}", offset=0)
    budget = place.budget or DecompressionBudget.for_input(len(data))
    budget.charge(limit if size >= 0 else len(data) * 64, 0)
    try:
        inflated = decompress("zstd", data, limit, 0)
    except zstandard.ZstdError as e:
        raise DecompressionError(f"zstd frame: {e}", offset=0) from e
    if size >= 0 and len(inflated) != size:
        raise DecompressionError(f"zstd frame inflates to {len(inflated)} bytes, its header "
                                 f"records {size}", offset=0)
    if size < 0 and len(inflated) > MAX_DATA_SIZE:
        raise DecompressionError(f"zstd frame inflates past {MAX_DATA_SIZE} bytes", offset=0)
    found = read(replace(place, view=memoryview(inflated), base=place.base), claimed)
    if found is None:
        return None
    codes, entryless = found
    total = sum(c.entry.size for c in codes) or 1
    out: list[DeviceCode] = []
    given = 0
    for i, c in enumerate(codes):
        img = c.entry
        assert isinstance(img, XpuImage)
        share = (len(data) - given if i == len(codes) - 1 else
                 len(data) * img.size // total)
        given += share
        out.append(replace(c, entry=replace(img, offset=place.base, size=share, packed="zstd"),
                           offset=place.base))
    return out, entryless


def sections(present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
    """The object-file form's ``__CLANG_OFFLOAD_BUNDLE__<id>`` sections of SYCL's SPIR targets
    (``sycl-spir64``, ``sycl-spir64_gen``...)."""
    return frozenset(s for s in present if s.startswith(OBJECT_PREFIX) and _sycl_section(s))


def _sycl_section(name: str) -> bool:
    try:
        found = object_section_id(name)
    except FormatError:
        return False
    return found is not None and found.triple.startswith("spir") and found.kind != "host"


def is_fat_archive(view: Buffer) -> bool:
    """Whether ``view`` is ocloc's fat binary: a regular ``ar`` archive whose members are all
    named as compute-runtime's AR format names them, at least one not padding."""
    if not is_archive(view) or bytes(view[:8]) != b"!<arch>\n":
        return False
    try:
        members = ar_members(view)
    except FormatError:
        return False
    names = [m.name for m in members]
    return (any(not _PAD.fullmatch(n) for n in names) and
            all(_PAD.fullmatch(n) or n == GENERIC_IR or _MEMBER.fullmatch(n) for n in names))


def read(place: Place, claimed: bool
         ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
    """The images at ``place``: for a claimed section, its SPIR-V modules, zebin or fat binary
    (anything else: a :class:`~fatbinkit.errors.FormatError`); for a blob or a whole file, the
    same, None when it is none of them."""
    view = place.view
    if bytes(view[:4]) == _ZSTD_MAGIC:
        return _inflated(place, claimed)
    if spirv.is_spirv(view):
        return _modules(place, SPIR64), []
    if zebin.is_zebin(view) or zebin.is_opencl_elf(view):
        return [DeviceCode(place.source, place.first if claimed else -1,
                           _binary(view, place.base, ""), place.base)], []
    if is_fat_archive(view):
        return _archive(place), []
    if claimed:
        raise FormatError(f"neither SPIR-V, a zebin nor an ocloc fat binary (starts "
                          f"{bytes(view[:8]).hex()})", offset=0)
    return None


def _modules(place: Place, target: str) -> list[DeviceCode]:
    """Each SPIR-V module of ``place``, its own module (a bare file of one: container -1)."""
    found = spirv.split_modules(place.view)
    bare = not place.source and len(found) == 1
    codes = []
    for n, (off, module) in enumerate(found):
        view = place.view[off : off + module.size]
        img = XpuImage(SPIRV, target, view, place.base + off, module.size, "",
                       f"{module.version[0]}.{module.version[1]}")
        codes.append(DeviceCode(place.source, -1 if bare else place.first + n, img,
                                place.base + off))
    return codes


def _binary(view: Buffer, base: int, member: str) -> XpuImage:
    """A zebin (its target from its product-config note, else from the member's name) or an
    OpenCL ELF (its target from the member's name)."""
    # generic_ir: the IR for devices no member matches (a bare SPIR-V module, or an OpenCL ELF
    # holding one, as Intel's 2025 compiler writes it)
    device = SPIR64 if member == GENERIC_IR else _device(member)
    if zebin.is_opencl_elf(view):
        return XpuImage(OPENCL_ELF, device or "intel:unknown", view, base, len(view), member)
    z = zebin.read_zebin(view)
    target = z.notes.ip_version or device or "intel:unknown"
    return XpuImage(ZEBIN, target, view, base, len(view), member, z.ze_info_version)


def _device(member: str) -> str:
    """The device a member's name gives: an IP version (``12.55.8``) as it is, a product name
    as ``intel:<name>`` (``intel:tgllp``); ``""`` for none."""
    m = _MEMBER.fullmatch(member)
    if not m:
        return ""
    device = m["device"]
    return device if _IP.fullmatch(device) else f"intel:{device}"


def _archive(place: Place) -> list[DeviceCode]:
    """The members of an ocloc fat binary, one module (the runtime loads one member)."""
    codes = []
    container = place.first if place.source else 0
    for m in ar_members(place.view):
        if _PAD.fullmatch(m.name):
            continue
        view = place.view[m.offset : m.offset + m.size]
        base = place.base + m.offset
        try:
            if spirv.is_spirv(view):
                module = spirv.read_spirv(view)
                img = XpuImage(SPIRV, SPIR64, view, base, len(view), m.name,
                               f"{module.version[0]}.{module.version[1]}")
            elif zebin.is_zebin(view) or zebin.is_opencl_elf(view):
                img = _binary(view, base, m.name)
            else:
                raise FormatError(f"neither SPIR-V, a zebin nor an OpenCL ELF (starts "
                                  f"{bytes(view[:8]).hex()})", offset=m.offset)
        except FormatError as e:
            raise FormatError(f"ocloc fat binary member {m.name}: {e}", offset=e.offset) from e
        codes.append(DeviceCode(place.source, container, img, base))
    return codes
