"""Shrink allocated sections of a linked ELF file for real: the file gets smaller, virtual addresses
stay where they were.

A section that holds less than before (``.nv_fatbin`` after pruning) keeps its start; its freed
tail is cut out of the file, in whole pages, and every byte after it moves down by that amount.
The ``PT_LOAD`` segment that held it is split in two around the hole: the first part maps the
file up to the section's new end, the second maps what followed it at its old virtual address
from its new file offset (``p_offset`` stays congruent to ``p_vaddr`` modulo the page size, which
is what the loader maps by; ``p_align`` drops to the page size where the larger original one no
longer holds). A segment the section ends needs no split. The grown program header table goes into
the slack the cut leaves behind the section. Section offsets, program headers, ``e_phoff`` and
``e_shoff`` follow.

Where the table sits decides what later tools do with the file. A file with ``PT_PHDR`` (an
executable) needs it mapped: the first part is extended over it. A library has none; the loader
copies an unmapped table (glibc's ``_dl_map_object_from_fd``), so it is left out of every segment.
GNU ``strip``/``objcopy`` always put the table right after the ELF header: where the grown one
does not fit, they refuse such a library ("not enough room for program headers", exit 1, the file
untouched), while a mapped table gets moved there over the first sections, which breaks the file.
So strip before slimming; ``patchelf`` works on the output (tests/test_slim.py runs both).

A relocatable object (:func:`rewrite_object`) has no segments: the cut only keeps the alignment of
the sections after it.

Nothing else in a linked file holds file offsets, so code, data, relocations and symbols (virtual
addresses) are untouched: callers that move data inside the section (containers compacted to its
start) pass the pointer updates as plain writes. Refused with :class:`UnsupportedError`: files
that are not ``ET_DYN``/``ET_EXEC`` for x86-64 or AArch64, a section outside every ``PT_LOAD``, and
a non-load segment or another section that overlaps the freed bytes.
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import FormatError, UnsupportedError, option
from . import elf

__all__ = ["PAGE_SIZE", "Cut", "Layout", "Pieces", "Resize", "load_segment", "rewrite",
           "rewrite_object", "vaddr_offset"]

#: the largest page size a loader may use per machine: cuts are multiples of it (AArch64 kernels
#: run with 4, 16 or 64 KiB pages)
PAGE_SIZE = {elf.EM_X86_64: 0x1000, elf.EM_AARCH64: 0x10000}
_PHDR = elf.ProgramHeader.FORMAT.size
_SHDR = elf.SectionHeader.FORMAT.size
_COPY_CHUNK = 1 << 24
#: the bytes of mapped patches written between two give-backs of their pages (:func:`_emit`)
_MAPPED_HELD = 4 << 20
_Patch = tuple[int, bytes | bytearray | memoryview]  # an offset, and the bytes that go there


@dataclass(frozen=True)
class Pieces:
    """Section contents given in pieces and never joined (a library's new ``.nv_fatbin`` is
    hundreds of MiB): ``parts`` are ``(offset in the section, bytes)`` in increasing order,
    not overlapping; the gaps between them are zeros; ``size`` bytes in all (at least the end
    of the last)."""

    parts: tuple[_Patch, ...]
    size: int

    def __len__(self) -> int:
        return self.size

    def patches(self, base: int) -> Iterator[_Patch]:
        """``(file offset, bytes)`` that write these contents at ``base``: each part, and zeros
        over each gap (in pieces of at most 16 MiB)."""
        pos = 0
        for at, data in (*self.parts, (self.size, b"")):
            for zero in range(pos, at, _COPY_CHUNK):
                yield base + zero, bytes(min(_COPY_CHUNK, at - zero))
            if data:
                yield base + at, data
            pos = at + len(data)

    def joined(self) -> bytes:
        """The contents as one ``bytes`` (for writers that need them whole)."""
        out = bytearray(self.size)
        for at, data in self.parts:
            out[at : at + len(data)] = data
        return bytes(out)


@dataclass(frozen=True)
class Resize:
    """New contents for an allocated section: ``data`` replaces its first bytes (``len(data)`` <=
    its size); the rest of its old size is freed."""

    section: elf.Section
    data: bytes | Pieces


@dataclass(frozen=True)
class Cut:
    """Bytes removed from the file behind a resized section: ``[resume - size, resume)`` of the
    input (``size`` a multiple of the page size); ``[keep_end, resume - size)`` stays, zeroed."""

    section: str
    keep_end: int
    resume: int
    size: int
    split: bool  # the segment that held the section was split in two around the hole

    def __str__(self) -> str:
        how = "segment split" if self.split else "segment end"
        return f"{self.section}: {self.size} bytes cut at {self.resume - self.size:#x} ({how})"


@dataclass(frozen=True)
class Layout:
    """What :func:`rewrite` did: sizes, cuts, and where the program header table went."""

    input_size: int
    output_size: int
    cuts: tuple[Cut, ...]
    phdr_offset: int
    phdr_count: int
    phdr_mapped: bool = False  # the grown table moved into a segment (a file with PT_PHDR)

    @property
    def strip_breaks(self) -> bool:
        """Whether GNU strip run on the output would corrupt it: it moves a table that a segment
        maps back behind the ELF header, over the first sections (see the module notes)."""
        return self.phdr_mapped

    def __str__(self) -> str:
        cuts = "; ".join(map(str, self.cuts)) or "no bytes cut"
        return f"{self.input_size} -> {self.output_size} bytes ({cuts})"


def vaddr_offset(phdrs: Sequence[elf.ProgramHeader], vaddr: int, size: int = 1) -> int | None:
    """The file offset of ``size`` bytes at ``vaddr``, or None when no ``PT_LOAD`` maps them
    from the file."""
    for p in phdrs:
        if p.type == elf.PT_LOAD and p.vaddr <= vaddr and vaddr + size <= p.vaddr + p.filesz:
            return p.offset + vaddr - p.vaddr
    return None


def load_segment(phdrs: Sequence[elf.ProgramHeader], section: elf.Section) -> int | None:
    """The index of the ``PT_LOAD`` that maps ``section`` from the file (None: none does)."""
    h = section.header
    for i, p in enumerate(phdrs):
        if (p.type == elf.PT_LOAD and p.offset <= h.offset
                and h.offset + h.size <= p.offset + p.filesz
                and h.addr - p.vaddr == h.offset - p.offset):
            return i
    return None


@dataclass
class _Hole:
    section: elf.Section
    segment: int
    keep_end: int  # a
    resume: int    # b
    size: int      # D
    split: bool = False


def _holes(head: elf.FileHeader, phdrs: Sequence[elf.ProgramHeader],
           sections: Sequence[elf.Section], resizes: Sequence[Resize], page: int,
           shrink: bool) -> list[_Hole]:
    holes: list[_Hole] = []
    for r in resizes:
        s = r.section
        h = s.header
        if not h.flags & elf.SHF_ALLOC or h.type == elf.SHT_NOBITS:
            raise UnsupportedError(f"section {s.name} is not allocated file data: cannot resize")
        if len(r.data) > h.size:
            raise UnsupportedError(f"section {s.name}: {len(r.data)} new bytes exceed its "
                                   f"{h.size}")
        seg = load_segment(phdrs, s)
        if seg is None:
            raise UnsupportedError(f"section {s.name} lies in no PT_LOAD segment")
        a, b = h.offset + len(r.data), h.offset + h.size
        size = (b - a) // page * page if shrink else 0
        holes.append(_Hole(s, seg, a, b, size))
    holes.sort(key=lambda x: x.resume)
    for x, y in itertools.pairwise(holes):
        if y.section.header.offset < x.resume:
            raise UnsupportedError(f"sections {x.section.name} and {y.section.name} overlap")
    for hole in holes:
        a, b = hole.keep_end, hole.resume
        for s in sections:
            sh = s.header
            if s.index == hole.section.index or sh.type in (elf.SHT_NULL, elf.SHT_NOBITS) or \
                    not sh.size:
                continue
            if sh.offset < b and sh.offset + sh.size > a:
                raise UnsupportedError(f"section {s.name} overlaps the freed end of "
                                       f"{hole.section.name}")
        for i, p in enumerate(phdrs):
            if i == hole.segment or not p.filesz:
                continue
            if p.offset < b and p.offset + p.filesz > a:
                raise UnsupportedError(
                    f"segment {i} (type {p.type:#x}) overlaps the freed end of "
                    f"{hole.section.name}: cannot cut it")
        load = phdrs[hole.segment]
        at_end = b == load.offset + load.filesz and load.memsz == load.filesz
        hole.split = hole.size > 0 and not at_end
    table_end = head.phoff + head.phnum * head.phentsize
    if head.phnum and any(x.keep_end < table_end and head.phoff < x.resume for x in holes):
        raise UnsupportedError("the program header table lies in a resized section")
    return holes


def _place_table(head: elf.FileHeader, holes: list[_Hole], page: int,
                 sections: Sequence[elf.Section]) -> tuple[int, int, _Hole | None]:
    """Where the program header table goes (an input offset), how many headers it holds (one
    more per split), and the hole whose slack holds it (None: it stays where it is). A split
    whose slack cannot hold the table and still cut a page is given up (zero-filled, not cut)."""
    after = head.phoff + head.phnum * head.phentsize
    used = [s.header.offset for s in sections
            if s.header.type not in (elf.SHT_NULL, elf.SHT_NOBITS) and s.header.size
            and s.header.offset >= after]
    for hole in holes:
        count = head.phnum + sum(x.split for x in holes)
        need = count * _PHDR
        if count == head.phnum:
            break
        if head.phentsize == _PHDR and head.phoff + need <= min(used, default=0):
            return head.phoff, count, None  # room in place (rare: linkers pack the first section)
        if not hole.split:
            continue
        at = -(-hole.keep_end // 8) * 8
        while at + need > hole.resume - hole.size and hole.size > page:
            hole.size -= page  # keep one more page of slack for the table
        if at + need <= hole.resume - hole.size:
            return at, count, hole
        hole.size, hole.split = 0, False
    return head.phoff, head.phnum, None


def rewrite(source: os.PathLike[str], output: os.PathLike[str], resizes: Sequence[Resize],
            writes: Sequence[_Patch] = (), *, shrink: bool = True) -> Layout:
    """Write ``source`` to ``output`` with ``resizes`` applied and ``writes`` (input file offset,
    bytes) patched in; with ``shrink``, the freed tail of each resized section is cut out of the
    file (else it is zero-filled and the layout stays as it was)."""
    with open(source, "rb") as src_file:
        fd = src_file.fileno()
        total = os.fstat(fd).st_size
        src = elf.FileSource(fd, total)
        head = elf.file_header(src)
        if head.type not in (elf.ET_DYN, elf.ET_EXEC):
            raise UnsupportedError(f"ELF type {head.type} is not a linked file (ET_DYN/ET_EXEC)")
        page = PAGE_SIZE.get(head.machine)
        if page is None:
            raise UnsupportedError(f"ELF machine {head.machine} is not x86-64 or AArch64")
        phdrs = elf.program_headers(src, head)
        _check_segments(phdrs, total)
        sections = elf.sections(src, head)
        if not sections:
            raise UnsupportedError("the file has no section headers")
        if head.shentsize != _SHDR:
            raise UnsupportedError(f"section header size {head.shentsize} is not {_SHDR}")
        holes = _holes(head, phdrs, sections, resizes, page, shrink)
        phoff, count, table_hole = _place_table(head, holes, page, sections)
        if not any(p.type == elf.PT_PHDR for p in phdrs):
            table_hole = None  # the table stays out of every segment: see the module notes
        elif table_hole is not None:
            _check_phdr_mapping(phdrs, table_hole)
        cuts = [x for x in holes if x.size]
        moved = _mover(cuts)
        new_phdrs = _segments(phdrs, holes, page, moved, phoff, count, table_hole)
        new_head = dataclasses.replace(head, phoff=moved(phoff), shoff=moved(head.shoff),
                                       phentsize=_PHDR, phnum=count)
        patches = _patches(holes, resizes, writes)
        patches.append([(phoff, b"".join(p.pack() for p in new_phdrs)),
                        (head.shoff, _section_table(sections, resizes, moved)),
                        (0, new_head.pack())])
        size = _emit(fd, total, output, cuts, patches, moved)
    return Layout(total, size, tuple(Cut(x.section.name, x.keep_end, x.resume, x.size, x.split)
                                     for x in holes), moved(phoff), count, table_hole is not None)


def rewrite_object(source: os.PathLike[str], output: os.PathLike[str],
                   resizes: Sequence[Resize], writes: Sequence[tuple[int, bytes]] = (), *,
                   shrink: bool = True) -> Layout:
    """:func:`rewrite` for a relocatable object (``ET_REL``: sections, no segments): the
    freed tail of each resized section is cut out in a multiple of the largest alignment of the
    sections after it, so each keeps its alignment; section offsets and ``e_shoff`` follow."""
    with open(source, "rb") as src_file:
        fd = src_file.fileno()
        total = os.fstat(fd).st_size
        src = elf.FileSource(fd, total)
        head = elf.file_header(src)
        if head.type != elf.ET_REL or head.phnum:
            raise UnsupportedError("not a relocatable object without segments")
        if head.shentsize != _SHDR:
            raise UnsupportedError(f"section header size {head.shentsize} is not {_SHDR}")
        sections = elf.sections(src, head)
        holes = []
        for r in sorted(resizes, key=lambda r: r.section.header.offset):
            h = r.section.header
            if len(r.data) > h.size:
                raise UnsupportedError(f"section {r.section.name}: {len(r.data)} new bytes "
                                       f"exceed its {h.size}")
            a, b = h.offset + len(r.data), h.offset + h.size
            for s in sections:
                sh = s.header
                if s.index != r.section.index and sh.type not in (elf.SHT_NULL, elf.SHT_NOBITS) \
                        and sh.size and sh.offset < b and sh.offset + sh.size > a:
                    raise UnsupportedError(f"section {s.name} overlaps the freed end of "
                                           f"{r.section.name}")
            later = [s.header.addralign for s in sections
                     if s.header.offset >= b and s.header.type != elf.SHT_NULL]
            grain = max([8, *later])
            if grain & (grain - 1) or grain > 1 << 16:
                raise UnsupportedError(f"a section alignment of {grain} after "
                                       f"{r.section.name}")
            holes.append(_Hole(r.section, -1, a, b, (b - a) // grain * grain if shrink else 0))
        cuts = [x for x in holes if x.size]
        moved = _mover(cuts)
        new_head = dataclasses.replace(head, shoff=moved(head.shoff))
        patches = _patches(holes, resizes, writes)
        patches.append([(head.shoff, _section_table(sections, resizes, moved)),
                        (0, new_head.pack())])
        size = _emit(fd, total, output, cuts, patches, moved)
    return Layout(total, size, tuple(Cut(x.section.name, x.keep_end, x.resume, x.size, False)
                                     for x in holes), 0, 0)


def _check_phdr_mapping(phdrs: Sequence[elf.ProgramHeader], hole: _Hole) -> None:
    """A table that ``PT_PHDR`` names must be found where kernels before Linux 5.18 look for it:
    the first ``PT_LOAD``'s base plus ``e_phoff``, so its segment must map file offsets to
    addresses as the first one does."""
    loads = [p for p in phdrs if p.type == elf.PT_LOAD]
    seg = phdrs[hole.segment]
    if seg.vaddr - seg.offset != loads[0].vaddr - loads[0].offset:
        raise UnsupportedError(
            "this file has PT_PHDR, and the program header table, which grows, can only go "
            "into a segment that older kernels do not map it from: "
            f"{option('same_size')} keeps the layout")


def _mover(cuts: Sequence[_Hole]) -> Callable[[int], int]:
    """The output offset of an input offset (not inside a cut range)."""
    def moved(at: int) -> int:
        return at - sum(x.size for x in cuts if x.resume <= at)

    return moved


def _patches(holes: Sequence[_Hole], resizes: Sequence[Resize],
             writes: Sequence[_Patch]) -> list[Iterable[_Patch]]:
    """What is written over the copied bytes (at input offsets): zeros over each freed range
    that stays, each section's new contents (:class:`Pieces` one by one), and ``writes``, none
    of which may land in the bytes a resize frees."""
    for at, data in writes:
        if any(x.keep_end < at + len(data) and at < x.resume for x in holes):
            raise UnsupportedError(f"a write at {at:#x} lands in a freed range")
    return [[(x.keep_end, bytes(x.resume - x.size - x.keep_end)) for x in holes],
            *(r.data.patches(r.section.header.offset) if isinstance(r.data, Pieces) else
              [(r.section.header.offset, r.data)] for r in resizes), writes]


def _section_table(sections: Sequence[elf.Section], resizes: Sequence[Resize],
                   moved: Callable[[int], int]) -> bytes:
    """The section header table with offsets moved and the resized sections' new sizes."""
    sizes = {r.section.index: len(r.data) for r in resizes}
    return b"".join(
        elf.SectionHeader(h.name, h.type, h.flags, h.addr, moved(h.offset) if s.index else h.offset,
                          sizes.get(s.index, h.size), h.link, h.info, h.addralign,
                          h.entsize).pack()
        for s in sections for h in (s.header,))


def _emit(fd: int, total: int, output: os.PathLike[str], cuts: Sequence[_Hole],
          patches: Sequence[Iterable[_Patch]], moved: Callable[[int], int]) -> int:
    """Write the input (``fd``, ``total`` bytes) to ``output`` without the cut ranges, then the
    patches (at input offsets) where they moved; returns the output's size."""
    with open(output, "r+b") as out:
        out.truncate(0)
        ofd = out.fileno()
        pos = 0
        for x in cuts:
            _copy(fd, ofd, pos, x.resume - x.size - pos)
            pos = x.resume
        _copy(fd, ofd, pos, total - pos)
        mapped = 0
        for at, data in itertools.chain.from_iterable(patches):
            os.pwrite(ofd, data, moved(at))
            source = data.obj if isinstance(data, memoryview) else None
            if isinstance(source, mmap.mmap):  # a caller's bytes spilled to a mapped file
                mapped += len(data)
                if mapped >= _MAPPED_HELD and hasattr(mmap, "MADV_DONTNEED"):
                    source.madvise(mmap.MADV_DONTNEED)  # they leave this process's memory
                    mapped = 0
        return os.fstat(ofd).st_size


def _check_segments(phdrs: Sequence[elf.ProgramHeader], total: int) -> None:
    """Each segment's file bytes inside the file, a loaded one no larger in the file than in
    memory, none past the end of the address space: what the rewrite computes with."""
    for i, p in enumerate(phdrs):
        if p.filesz and p.offset + p.filesz > total:
            raise FormatError(f"segment {i} ({p.filesz} bytes at {p.offset:#x}) runs past the "
                              f"end of the {total}-byte file", offset=p.offset)
        if p.type == elf.PT_LOAD and p.memsz < p.filesz:
            raise FormatError(f"loadable segment {i} is smaller in memory ({p.memsz}) than in "
                              f"the file ({p.filesz})")
        if max(p.vaddr + p.memsz, p.paddr + p.memsz) >> 64:
            raise FormatError(f"segment {i} runs past the end of the address space")


def _segments(phdrs: Sequence[elf.ProgramHeader], holes: Sequence[_Hole], page: int,
              moved: Callable[[int], int], phoff: int, count: int,
              table_hole: _Hole | None) -> list[elf.ProgramHeader]:
    """The new program headers: each split segment in pieces, offsets moved."""
    out: list[elf.ProgramHeader] = []
    table_end = phoff + count * _PHDR
    for i, p in enumerate(phdrs):
        mine = [h for h in holes if h.segment == i and (h.split or h.size)]
        if p.type == elf.PT_PHDR:
            seg = phdrs[table_hole.segment] if table_hole else None
            vaddr = p.vaddr if seg is None else seg.vaddr + phoff - seg.offset
            out.append(elf.ProgramHeader(p.type, p.flags, moved(phoff), vaddr, vaddr,
                                         count * _PHDR, count * _PHDR, p.align))
            continue
        if p.type != elf.PT_LOAD or not mine:
            out.append(_realigned(p, moved(p.offset) if p.filesz or p.offset else p.offset, page))
            continue
        start = p.offset
        for h in mine:
            end = h.keep_end
            if table_hole is h:
                end = max(end, table_end)
            piece = elf.ProgramHeader(p.type, p.flags, moved(start), p.vaddr + start - p.offset,
                                      p.paddr + start - p.offset, end - start, end - start,
                                      p.align)
            out.append(_realigned(piece, piece.offset, page))
            if not h.split:  # the section ended the segment: it only gets shorter
                start = -1
                break
            start = h.resume
        if start >= 0:
            skip = start - p.offset
            out.append(_realigned(elf.ProgramHeader(
                p.type, p.flags, moved(start), p.vaddr + skip, p.paddr + skip, p.filesz - skip,
                p.memsz - skip, p.align), moved(start), page))
    return out


def _realigned(p: elf.ProgramHeader, offset: int, page: int) -> elf.ProgramHeader:
    """``p`` at ``offset``, its ``p_align`` lowered to ``page`` where the move broke it."""
    align = p.align
    if p.type == elf.PT_LOAD and align > 1 and (p.vaddr - offset) % align:
        if (p.vaddr - offset) % page:
            raise FormatError(f"segment at {p.vaddr:#x} would map from a misaligned offset")
        align = page
    return elf.ProgramHeader(p.type, p.flags, offset, p.vaddr, p.paddr, p.filesz, p.memsz, align)


def _copy(src: int, dst: int, offset: int, size: int) -> None:
    """Append ``size`` bytes at ``offset`` of ``src`` to ``dst`` (in the kernel where it can)."""
    end = offset + size
    while offset < end:
        n = min(_COPY_CHUNK, end - offset)
        try:
            done = os.copy_file_range(src, dst, n, offset)
        except (AttributeError, OSError):
            data = os.pread(src, n, offset)
            done = os.write(dst, data)
        if done <= 0:
            raise FormatError(f"the input ended early at {offset:#x}", offset=offset)
        offset += done
