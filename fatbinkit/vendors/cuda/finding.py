"""Where CUDA device code is, and how it is read into :class:`~fatbinkit.device_code.DeviceCode`
records: fatbin containers in the sections nvcc writes (``.nv_fatbin`` and, for relocatable
device code, ``__nv_relfatbin``; ``.nv_fatb`` / ``__nv_rel`` in a PE image's eight-byte section
names), and fatbins, cubins and PTX as blobs or whole files. :func:`fatbinkit.scan.scan` finds
the places of a host file and asks each vendor which are its own (:func:`read`).
"""

from __future__ import annotations

from collections.abc import Collection

from ...device_code import DeviceCode, EntrylessContainer, Place
from ...errors import FormatError
from ...formats import elf
from ...formats.elf import Buffer
from ...formats.fatbin import (
    ENTRY_HEADER_SIZE,
    ENTRY_VERSION,
    EntryHeader,
    EntryKind,
    FatbinEntry,
    Reader,
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
