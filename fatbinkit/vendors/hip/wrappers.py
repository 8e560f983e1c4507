"""The ``__hip_fatbin_wrapper`` records of a host file, and where each one's ``binary`` points:
how the HIP runtime finds its modules.

Each translation unit's constructor calls ``__hipRegisterFatBinary(&__hip_fatbin_wrapper)``;
CLR (``hipamd/src/hip_platform.cpp``) checks the record's magic and version and reads the
module at ``binary``. clang's ``CGCUDANV.cpp`` puts the records in ``.hipFatBinSegment``
(``.hipFatB`` in a PE image) and the modules in ``.hip_fatbin``. Where ``binary`` points
(``../shared/ROCM.md`` §1.3):

* a linked ELF file (``.so``, executable): the ``R_X86_64_RELATIVE`` relocation covering the
  slot, its addend being the address (a RELA relocation's value is its addend, whatever the
  slot holds: System V ABI, "Relocation"); a relocation against a symbol: the symbol's value
  plus the addend; no relocation (``RELR``, an executable): the value stored in the slot;
* a relocatable object (``.o``, an archive member): the ``R_X86_64_64`` relocation of
  ``.rela.hipFatBinSegment`` at the slot, against ``.hip_fatbin``'s section symbol or a symbol
  in it, plus the addend;
* a PE image: the value stored (``ImageBase`` + RVA; a ``DIR64`` base relocation adjusts it by
  the load delta only);
* a COFF object: the ``IMAGE_REL_AMD64_ADDR64`` relocation at the slot, against a symbol, plus
  the addend stored in place (COFF relocations are REL-style).

Every target is given as a file offset of the host file, or None where it is not in the
file's data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import FormatError
from ...formats import elf, pe
from ...formats.wrapper import HIP_WRAPPER_PE_SECTION, HIP_WRAPPER_SECTION, HipWrapper

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["WrapperRef", "elf_wrappers", "pe_wrappers"]

IMAGE_REL_AMD64_ADDR64 = 1
_COFF_RELOCATION = struct.Struct("<IIH")  # IMAGE_RELOCATION: VirtualAddress, symbol, type
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class WrapperRef:
    """One wrapper record: its number in the section, its file offset, the record, and the file
    offset of what ``binary`` points at (None: not in the file's data, or, in an object, no
    relocation gives it); ``via`` says how ``binary`` was resolved (error messages)."""

    index: int
    offset: int
    record: HipWrapper
    target: int | None
    via: str

    def __str__(self) -> str:
        return f"wrapper record {self.index}"


def _records(host: memoryview, name: str, offset: int, size: int
             ) -> list[tuple[int, int, HipWrapper]]:
    n = HipWrapper.FORMAT.size
    if size % n:
        raise FormatError(f"{name} of {size} bytes is not a whole number of {n}-byte wrapper "
                          "records", offset=offset)
    out = []
    for k in range(size // n):
        at = offset + k * n
        try:
            out.append((k, at, HipWrapper.unpack(host[at:at + n], at)))
        except FormatError as e:
            raise type(e)(f"{name} wrapper record {k}: "
                              f"{str(e).rsplit(' (at offset', 1)[0]}", offset=at) from e
    return out


def elf_wrappers(host: memoryview) -> list[WrapperRef] | None:
    """The records of an ELF host file's ``.hipFatBinSegment`` with their targets; None when it
    has no such section."""
    head = elf.file_header(host)
    sections = elf.sections(host, head)
    seg = next((s for s in sections if s.name == HIP_WRAPPER_SECTION), None)
    if seg is None or seg.header.type == elf.SHT_NOBITS:
        return None
    h = seg.header
    records = _records(host, HIP_WRAPPER_SECTION, h.offset, h.size)
    slot = HipWrapper.BINARY_OFFSET
    if head.type == elf.ET_REL:
        found = _object_slots(host, head, sections, seg.index)
        return [WrapperRef(k, at, r, *found.get(k * HipWrapper.FORMAT.size + slot,
                                                (None, "no relocation")))
                for k, at, r in records]
    targets = _linked_slots(host, head, sections)
    out = []
    for k, at, r in records:
        vaddr = h.addr + k * HipWrapper.FORMAT.size + slot
        address, via = targets.get(vaddr, (r.binary, "the value stored"))
        out.append(WrapperRef(k, at, r, _vaddr_offset(sections, address), via))
    return out


def _vaddr_offset(sections: Sequence[elf.Section], address: int | None) -> int | None:
    if address is None:
        return None
    for s in sections:
        h = s.header
        if (h.flags & elf.SHF_ALLOC and h.type != elf.SHT_NOBITS
                and h.addr <= address < h.addr + h.size):
            return h.offset + address - h.addr
    return None


def _symbols(host: memoryview, section: elf.Section | None) -> list[tuple[int, int]]:
    """(section index, value) of every symbol of ``section`` (a symbol table)."""
    if section is None:
        return []
    h = section.header
    size = elf.Symbol.FORMAT.size
    raw = host[h.offset : h.offset + h.size - h.size % size]
    return [(shndx, value) for _n, _i, _o, shndx, value, _s in elf.Symbol.FORMAT.iter_unpack(raw)]


def _rela(host: memoryview, section: elf.Section) -> list[tuple[int, int, int]]:
    h = section.header
    if h.entsize != elf.Rela.FORMAT.size:
        raise FormatError(f"{section.name}: entry size {h.entsize}, not {elf.Rela.FORMAT.size}")
    raw = host[h.offset : h.offset + h.size - h.size % elf.Rela.FORMAT.size]
    return list(elf.Rela.FORMAT.iter_unpack(raw))


def _object_slots(host: memoryview, head: elf.FileHeader, sections: Sequence[elf.Section],
                  seg: int) -> dict[int, tuple[int | None, str]]:
    """Offset in ``.hipFatBinSegment`` -> (file offset of the target, how) for each absolute
    relocation of the section (the last one at a slot wins, as a linker applies them)."""
    absolute = elf.ABS64.get(head.machine)
    symtab = next((s for s in sections if s.header.type == elf.SHT_SYMTAB), None)
    symbols = _symbols(host, symtab)
    out: dict[int, tuple[int | None, str]] = {}
    for rs in sections:
        if rs.header.type != elf.SHT_RELA or rs.header.info != seg or not rs.header.size:
            continue
        for offset, info, addend in _rela(host, rs):
            kind, sym = info & 0xFFFFFFFF, info >> 32
            via = f"{rs.name} relocation type {kind} against symbol {sym} + {addend:#x}"
            if kind != absolute or not 0 < sym < len(symbols):
                out[offset] = (None, via)
                continue
            shndx, value = symbols[sym]
            if not 0 < shndx < len(sections) or sections[shndx].header.type == elf.SHT_NOBITS:
                out[offset] = (None, via)
                continue
            target = sections[shndx].header
            where = value + addend
            out[offset] = (target.offset + where if 0 <= where < target.size else None,
                           f"{via} ({sections[shndx].name} + {where:#x})")
    return out


def _linked_slots(host: memoryview, head: elf.FileHeader, sections: Sequence[elf.Section]
                  ) -> dict[int, tuple[int | None, str]]:
    """Slot address -> (the address the loader writes there, how) for each dynamic RELA
    relocation (the last one at a slot wins: the loader applies them in order)."""
    relative = elf.RELATIVE.get(head.machine)
    absolute = elf.ABS64.get(head.machine)
    dynsym = next((s for s in sections if s.header.type == elf.SHT_DYNSYM), None)
    symbols = _symbols(host, dynsym)
    out: dict[int, tuple[int | None, str]] = {}
    for rs in sections:
        h = rs.header
        if h.type != elf.SHT_RELA or not h.flags & elf.SHF_ALLOC or not h.size:
            continue
        for offset, info, addend in _rela(host, rs):
            kind, sym = info & 0xFFFFFFFF, info >> 32
            if kind == relative:
                out[offset] = (addend, f"{rs.name} RELATIVE relocation, addend {addend:#x}")
            elif kind == absolute and 0 < sym < len(symbols) and symbols[sym][0]:
                out[offset] = (symbols[sym][1] + addend,
                               f"{rs.name} relocation against symbol {sym} + {addend:#x}")
            else:
                out[offset] = (None, f"{rs.name} relocation type {kind}")
    return out


def pe_wrappers(host: memoryview, image: pe.PeFile) -> list[WrapperRef] | None:
    """The records of a PE image's ``.hipFatB`` (a COFF object's ``.hipFatBinSegment``, and an
    image's where the linker kept long names, as GNU ld does by default) with their targets;
    None when it has no such section."""
    seg = next((s for s in image.sections
                if s.name in (HIP_WRAPPER_PE_SECTION, HIP_WRAPPER_SECTION)), None)
    if seg is None or not seg.size:
        return None
    name = seg.name
    records = _records(host, name, seg.offset, seg.size)
    slot = HipWrapper.BINARY_OFFSET
    if image.optional is None:
        found = _coff_slots(host, image, seg)
        return [WrapperRef(k, at, r, *found.get(k * HipWrapper.FORMAT.size + slot,
                                                (None, "no relocation")))
                for k, at, r in records]
    base = image.optional.image_base
    out = []
    for k, at, r in records:
        rva = r.binary - base
        target = pe.rva_offset(image, rva) if 0 <= rva < 1 << 32 else None
        out.append(WrapperRef(k, at, r, target,
                              f"the value stored ({r.binary:#x}, ImageBase {base:#x})"))
    return out


def _coff_slots(host: memoryview, image: pe.PeFile, seg: pe.PeSection
                ) -> dict[int, tuple[int | None, str]]:
    """Offset in the record section -> (file offset of the target, how), from its
    ``IMAGE_REL_AMD64_ADDR64`` relocations (the addend is the value stored at the slot)."""
    h = seg.header
    size = _COFF_RELOCATION.size
    if not h.number_of_relocations:
        return {}
    end = h.pointer_to_relocations + h.number_of_relocations * size
    if end > len(host):
        raise FormatError(f"{seg.name}: {h.number_of_relocations} relocations run past the "
                          "end of the file", offset=h.pointer_to_relocations)
    table = list(pe.symbols(host, image))
    by_index: dict[int, pe.ImageSymbol] = {}
    i = 0
    for _name, symbol in table:  # symbols() skips auxiliary records: number them again
        by_index[i] = symbol
        i += 1 + symbol.number_of_aux_symbols
    out: dict[int, tuple[int | None, str]] = {}
    for n in range(h.number_of_relocations):
        offset, index, kind = _COFF_RELOCATION.unpack_from(host, h.pointer_to_relocations
                                                           + n * size)
        via = f"{seg.name} relocation type {kind} against symbol {index}"
        sym = by_index.get(index)
        if (kind != IMAGE_REL_AMD64_ADDR64 or sym is None or offset + 8 > seg.size
                or not 0 < sym.section_number <= len(image.sections)):
            out[offset] = (None, via)
            continue
        (addend,) = _U64.unpack_from(host, seg.offset + offset)
        target = image.sections[sym.section_number - 1]
        where = sym.value + addend
        out[offset] = (target.offset + where if 0 <= where < target.size else None,
                       f"{via} ({target.name} + {where:#x})")
    return out
