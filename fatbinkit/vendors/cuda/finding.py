"""Where CUDA device code is, and how it is read into :class:`~fatbinkit.device_code.DeviceCode`
records: fatbin containers in the sections nvcc writes (``.nv_fatbin`` and, for relocatable
device code, ``__nv_relfatbin``; ``.nv_fatb`` / ``__nv_rel`` in a PE image's eight-byte section
names), and fatbins, cubins and PTX as blobs or whole files. :func:`fatbinkit.scan.scan` finds
the places of a host file and asks each vendor which are its own (:func:`read`).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Collection
from dataclasses import replace

from ...device_code import DeviceCode, EntrylessContainer, Place
from ...errors import FatbinkitError, FormatError
from ...formats import elf
from ...formats.codec import (
    ZSTD_MAGIC,
    DecompressionBudget,
    decompress,
    inflated_head,
    zstd_frame,
)
from ...formats.elf import Buffer
from ...formats.fatbin import (
    ENTRY_HEADER_SIZE,
    ENTRY_VERSION,
    FATBIN_MAGIC,
    FATBIN_VERSION,
    EntryFlags,
    EntryHeader,
    EntryKind,
    FatbinEntry,
    Reader,
    container_entries,
    entry_flags,
    is_fatbin,
    iter_container_entries,
)

__all__ = [
    "FATBIN_SECTION",
    "PE_FATBIN_SECTION",
    "PE_RELFATBIN_SECTION",
    "RELFATBIN_SECTION",
    "bare_entry",
    "read",
    "search",
    "sections",
]

FATBIN_SECTION = ".nv_fatbin"
RELFATBIN_SECTION = "__nv_relfatbin"
PE_FATBIN_SECTION = ".nv_fatb"  # .nv_fatbin in a PE image's eight-byte section names
PE_RELFATBIN_SECTION = "__nv_rel"  # __nv_relfatbin in them (nvcc -rdc, clang -fgpu-rdc)


def sections(present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
    """The sections read, as cuobjdump selects them: the fatbin sections, and the relocatable
    device code's with ``all`` or where the file has no fatbin section (a PE file: either
    spelling of each; an object keeps the long names)."""
    fatbins = (PE_FATBIN_SECTION, FATBIN_SECTION) if pe else (FATBIN_SECTION,)
    relocatable = (PE_RELFATBIN_SECTION, RELFATBIN_SECTION) if pe else (RELFATBIN_SECTION,)
    if all or set(present).isdisjoint(fatbins):
        return frozenset({*fatbins, *relocatable})
    return frozenset(fatbins)


def read(place: Place, claimed: bool
         ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
    """The images at ``place`` and its containers with no entry: for a ``claimed`` section
    (one :func:`sections` names), its fatbin containers (anything else there is a
    :class:`~fatbinkit.errors.FormatError`); for a blob or a whole file, a fatbin, a cubin or
    PTX, None when it is none of these."""
    entryless: list[EntrylessContainer] = []
    if claimed:
        codes = _fatbin_codes(place.source, place.view, place.base, place.first, place.fd,
                              entryless)
        return codes, entryless
    if is_fatbin(place.view):
        try:
            codes = _fatbin_codes(place.source, place.view, place.base, place.first, place.fd,
                                  entryless)
        except FormatError as e:
            if not place.source:
                raise
            raise type(e)(f"{place.source}: {e}") from e
        return codes, entryless
    code = _bare_code(place.source, place.view, place.base)
    return None if code is None else ([code], [])


def search(place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
    """CUDA device code anywhere in a section that no tool reads (``.data``, ``.ldata``,
    cuBLASLt's ``.cask_resource``): images a library hands the driver itself
    (``cuModuleLoadData`` on a pointer into its data), which cuobjdump does not list. Each is
    found by its structure, not by a magic number alone (docs/hidden.md):

    1. fatbin containers: version 1, a 16-byte header, entries that tile the payload, each of
       version 0x0101, a kind nvcc writes (PTX, ELF, LTO-IR), a valid SM, its compressed size
       inside its payload; then a zero tail; a container with no entry (what ``prune
       --everywhere`` leaves of one no kept arch loads) only with a payload of at most 64
       zero bytes, returned as an :class:`~fatbinkit.device_code.EntrylessContainer`;
    2. outside those, zstd frames whose header and block chain end inside the section, that
       record their content size, and whose content begins as a cubin (ELF64, EM_CUDA);
    3. outside both, bare cubins whose section table and sections lie inside the section.

    What lies inside a find (a compressed payload, the ELF header an LZ4 payload quotes) is
    not searched again. Each find is a module with its own container number: a container's
    entries, or one image; all are :attr:`~fatbinkit.device_code.DeviceCode.hidden`."""
    from ...formats.cubin import cubin_extent

    src = Reader(place.view, place.fd, place.base)
    modules: list[tuple[int, int, list[FatbinEntry]]] = []  # (start, end, entries)
    for at in src.find(_FATBIN_MAGIC):
        if not (modules and at < modules[-1][1]):
            found = _container(src, at)
            if found is not None:
                modules.append((at, *found))
    containers = [(start, end) for start, end, _ in modules]
    last = 0  # the end of the last zstd frame found
    for at in src.find(ZSTD_MAGIC):
        if at >= last and not _inside(containers, at):
            entry = _zstd_cubin(src, at, place.base, place.budget)
            if entry is not None:
                last = at + entry.size
                modules.append((at, last, [entry]))
    taken = sorted((start, end) for start, end, _ in modules)
    last = 0
    for at in src.find(elf.ELFMAG):
        if at >= last and not _inside(taken, at):
            size = cubin_extent(src, at)
            if size is not None:
                with contextlib.suppress(FatbinkitError):  # not a cubin this reader takes
                    entry = bare_entry(EntryKind.ELF, place.view[at : at + size])
                    modules.append((at, at + size, [replace(entry, offset=at)]))
                    last = at + size
    modules.sort(key=lambda m: m[0])
    return ([DeviceCode(place.source, place.first + i, e, place.base + e.offset, hidden=True)
             for i, (_, _, entries) in enumerate(modules) for e in entries],
            [EntrylessContainer(place.source, place.first + i, place.base + start,
                                vendor=FatbinEntry.vendor)
             for i, (start, _, entries) in enumerate(modules) if not entries])


_FATBIN_MAGIC = FATBIN_MAGIC.to_bytes(4, "little")
_KINDS = frozenset(int(k) for k in EntryKind)
_ZSTD_FLAG = int(EntryFlags.COMPRESSED_ZSTD)
#: the zero tail a container with no entry may have: what ``prune --everywhere`` leaves of a
#: hidden container no kept arch loads (its header, the old container's few zero bytes)
_EMPTIED_TAIL = 64
#: the largest image a zstd frame found outside a container may hold (cuBLASLt's: 28 MiB)
_RAW_IMAGE_LIMIT = 1 << 30


def _inside(spans: list[tuple[int, int]], at: int) -> bool:
    """Whether ``at`` lies inside one of ``spans`` (sorted, disjoint)."""
    i = bisect.bisect_right(spans, (at, 1 << 63)) - 1
    return i >= 0 and spans[i][0] <= at < spans[i][1]


def _container(src: Reader, at: int) -> tuple[int, list[FatbinEntry]] | None:
    """The end of the fatbin container at ``at`` and its entries, where the bytes there are one
    nvcc could have written (:func:`search`); else None."""
    try:
        head, entries, stop = container_entries(src, at)
        end = at + head.header_size + head.payload_size
        if head.version != FATBIN_VERSION or head.header_size != 16 or \
                (not entries and head.payload_size > _EMPTIED_TAIL) or \
                any(e.header.version != ENTRY_VERSION or e.header.kind not in _KINDS
                    for e in entries):
            return None
        for e in entries:
            e.arch  # noqa: B018 (raises on an SM number no GPU has)
    except FormatError:
        return None
    tail = src.read(stop, end - stop) if end - stop <= 4096 else b"\1"
    return (end, entries) if not tail.strip(b"\0") else None


def _zstd_cubin(src: Reader, at: int, base: int,
                budget: DecompressionBudget | None) -> FatbinEntry | None:
    """The zstd frame at ``at`` as an entry holding a compressed cubin, where it is a frame
    (:func:`~fatbinkit.formats.codec.zstd_frame`) that records its size and inflates to an
    ELF64 EM_CUDA header; else None. Only the first 64 bytes are inflated, unless the SM's
    ``a`` suffix is recorded in ``.nv.compat`` (ABI v2 without the arch-specific flag): then
    the image, charged to ``budget``."""
    from ...formats.cubin import cubin_arch, header_arch

    frame = zstd_frame(src, at)
    if frame is None or frame[1] is None or not 64 <= frame[1] <= _RAW_IMAGE_LIMIT:
        return None
    size, content = frame[0], frame[1]
    stored = src.view[at : at + size]
    head = inflated_head(stored, 64)
    if elf.machine(head) != elf.EM_CUDA:
        return None
    try:  # a header this reader cannot take (an unknown ABI, no valid SM) is no find
        header = elf.FileHeader.unpack(head)
        arch = header_arch(header)
    except FatbinkitError:
        return None
    if arch is None:
        if budget is not None:
            budget.charge(content, base + at)
        try:
            arch = cubin_arch(decompress("zstd", stored, content, base + at))
        except FatbinkitError:
            return None
    entry_header = EntryHeader(
        kind=int(EntryKind.ELF), version=ENTRY_VERSION, header_size=ENTRY_HEADER_SIZE,
        size=size, compressed_size=size, options_offset=0, minor=header.abi_version, major=1,
        sm=arch.number, identifier_offset=0, identifier_size=0,
        flags=int(entry_flags(arch)) | _ZSTD_FLAG, reserved=0, uncompressed_size=content,
    )
    return FatbinEntry(entry_header, b"", stored, at)


def bare_entry(kind: EntryKind, data: Buffer) -> FatbinEntry:
    """A synthetic entry for a bare cubin or PTX image; ``data()`` returns it unchanged."""
    if kind == EntryKind.ELF:
        from ...formats.cubin import cubin_arch

        arch = cubin_arch(data)
        major, minor = 1, elf.FileHeader.unpack(data).abi_version
    else:
        from ...formats.ptx import ptx_header

        (major, minor), arch = ptx_header(data)
    header = EntryHeader(
        kind=int(kind), version=ENTRY_VERSION, header_size=ENTRY_HEADER_SIZE, size=len(data),
        compressed_size=0, options_offset=0, minor=minor, major=major, sm=arch.number,
        identifier_offset=0, identifier_size=0, flags=int(entry_flags(arch)), reserved=0,
        uncompressed_size=0,
    )
    return FatbinEntry(header, b"", data)


def _fatbin_codes(
    source: str, view: memoryview, base: int, first: int, fd: int | None,
    entryless: list[EntrylessContainer]
) -> list[DeviceCode]:
    """The entries of every container in ``view``; containers with none go to ``entryless``."""
    codes = []
    for i, off, entries in iter_container_entries(Reader(view, fd, base)):
        if not entries:
            entryless.append(EntrylessContainer(source, first + i, base + off,
                                                vendor=FatbinEntry.vendor))
        codes += [DeviceCode(source, first + i, e, base + e.offset) for e in entries]
    return codes


def _bare_code(source: str, view: memoryview, base: int) -> DeviceCode | None:
    """A bare cubin or PTX image as device code; None when ``view`` is neither.

    The cubin and PTX modules are imported here, not at the top: listing the fatbins of a host
    library (``fatbinkit ls``) never needs them.
    """
    from ...formats.cubin import is_cubin
    from ...formats.ptx import is_ptx

    if is_cubin(view):
        return DeviceCode(source, -1, bare_entry(EntryKind.ELF, view), base)
    if is_ptx(view):
        end = len(bytes(view).rstrip(b"\0"))
        return DeviceCode(source, -1, bare_entry(EntryKind.PTX, view[:end]), base)
    return None
