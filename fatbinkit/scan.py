"""Find device code in any input: a vendor's own file (CUDA: a fatbin, a cubin, PTX), a host ELF
file (.so, .o, executable), a static library, or a Windows PE file (DLL, .pyd, EXE, COFF .obj).

scan finds the places of a host file and asks each vendor (:mod:`fatbinkit.vendors`, in order)
which are its own: the sections it names (:meth:`~fatbinkit.vendors.Vendor.sections`; CUDA:
``.nv_fatbin``, what ``cuobjdump`` lists, and ``__nv_relfatbin``, relocatable device code,
listed with ``all=True`` as ``cuobjdump -all`` does or when the file has no ``.nv_fatbin``; in a
PE file ``.nv_fatb`` and ``__nv_rel``, the names cut to eight bytes, an object keeping the long
ones), blobs between ``__<name>_start`` / ``__<name>_end`` symbol pairs (AOTInductor's model.so,
fatbinkit's own objects; invisible to cuobjdump) and whole files
(:meth:`~fatbinkit.vendors.Vendor.read`). An ELF file whose machine is a vendor's device code
(:func:`fatbinkit.vendors.device_machine`: a cubin) is not searched as a host. Files are
memory-mapped: listing reads headers only, payloads stay views.

Every image comes back as a :class:`~fatbinkit.device_code.DeviceCode` holding its vendor's
record (CUDA: a :class:`~fatbinkit.formats.fatbin.FatbinEntry`; a bare cubin or PTX file becomes
a synthetic entry of kind ELF/PTX with its exact bytes).
"""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import IO

from . import vendors
from .device_code import DeviceCode, EntrylessContainer, Place
from .errors import FatbinkitError, FormatError, InputError, naming
from .formats import elf, pe
from .formats.archive import ArMember, ar_members, is_archive
from .formats.codec import DecompressionBudget
from .formats.elf import Buffer
from .formats.reader import Reader
from .infile import FilePath, as_input, open_input

__all__ = [
    "archive_objects",
    "extract_names",
    "listed",
    "scan",
    "scan_modules",
    "source_keys",
]

_PAIR_RE = re.compile(rb"^__(.+)_start$")


def source_keys(source: str) -> tuple[str | None, str | None]:
    """``(section, symbol)`` of a :attr:`DeviceCode.source`: the ELF section (``.nv_fatbin``,
    ``__nv_relfatbin``) or the start symbol of an embedded blob (``__name_start``); both None
    for a bare fatbin, cubin or PTX file (the JSON vocabulary's two keys, docs/json.md)."""
    if not source:
        return None, None
    if source.startswith("__") and source.endswith("_start"):
        return None, source
    return source, None


def _count_containers(codes: list[DeviceCode], first: int,
                      entryless: list[EntrylessContainer]) -> int:
    return max(max((c.container + 1 for c in codes), default=first),
               max((c.container + 1 for c in entryless), default=first))


def _symbol_pairs(
    src: Reader, sections: tuple[elf.Section, ...]
) -> list[tuple[str, int, int]]:
    """``(start symbol, file offset, size)`` for every ``__X_start``/``__X_end`` pair.

    Symbol values are section-relative in a ``.o`` (section address 0) and virtual addresses in
    linked files; both map to ``section offset + value - section address``.
    """
    found: dict[bytes, tuple[int, int]] = {}
    sym = elf.Symbol.FORMAT
    for sec in (s.header for s in sections):
        if sec.type not in (elf.SHT_SYMTAB, elf.SHT_DYNSYM) or sec.entsize != sym.size:
            continue
        if not 0 <= sec.link < len(sections):
            continue
        strtab = sections[sec.link].header
        if not (src.holds(b"_start\0", strtab.offset, strtab.size)
                and src.holds(b"_end\0", strtab.offset, strtab.size)):
            continue  # libtorch_cuda.so's 72 MB of names: searched in place, not read
        names = src.read(strtab.offset, strtab.size)
        raw = src.read(sec.offset, sec.size)
        raw = raw[: len(raw) - len(raw) % sym.size]
        lookup = elf.StringTable(names)
        for st_name, _info, _other, shndx, value, _size in sym.iter_unpack(raw):
            if not 0 < shndx < min(elf.SHN_LORESERVE, len(sections)):
                continue
            end = lookup.end(st_name)
            if end < 0:
                continue  # no name: not a blob symbol
            name = names[st_name:end]
            if not (name.startswith(b"__") and name.endswith((b"_start", b"_end"))):
                continue
            target = sections[shndx].header
            if target.type != elf.SHT_NOBITS:
                found[name] = (target.offset + value - target.addr, shndx)
    return _pairs(found, len(src))


def _pairs(found: dict[bytes, tuple[int, int]], limit: int) -> list[tuple[str, int, int]]:
    """``(start symbol, file offset, size)`` of each ``__X_start`` whose ``__X_end`` is in the
    same section, after it and within the first ``limit`` bytes, in file order; ``found`` maps
    each ``__..._start``/``_end`` name to its file offset and section."""
    pairs: list[tuple[str, int, int]] = []
    for name, (start, section) in found.items():
        m = _PAIR_RE.match(name)
        if not m:
            continue
        end_entry = found.get(b"__" + m.group(1) + b"_end")
        if end_entry is None or end_entry[1] != section:
            continue
        size = end_entry[0] - start
        if size <= 0 or start < 0 or start + size > limit:
            continue
        pairs.append((name.decode("utf-8", "replace"), start, size))
    pairs.sort(key=lambda p: p[1])
    return pairs


def _scan_elf(view: memoryview, fd: int | None, all: bool,
              entryless: list[EntrylessContainer], base: int = 0, *,
              budget: DecompressionBudget | None = None,
              everywhere: bool = False) -> list[DeviceCode]:
    """Device code in a host ELF file, or in one at ``base`` in the file ``fd`` reads (an
    archive member): offsets are the file's; containers with no entry go to ``entryless``;
    with ``everywhere``, then what the deep scan finds in its other allocated sections."""
    src = Reader(view, fd, base)
    sections = elf.sections(src)
    owners = _owners({s.name for s in sections}, all, pe=False)
    codes: list[DeviceCode] = []
    first = 0
    for sec in sections:
        vendor = owners.get(sec.name)
        if vendor is None or sec.header.type == elf.SHT_NOBITS or sec.header.size == 0:
            continue
        off, size = sec.header.offset, sec.header.size  # inside the file: elf.sections checks
        codes += _section(vendor, Place(sec.name, view[off : off + size], base + off, first, fd,
                                        view, base, budget=budget), entryless)
        first = _count_containers(codes, first, entryless)
    blobs = _symbol_pairs(src, sections)
    for sym, off, size in blobs:
        codes += _blob(Place(sym, view[off : off + size], base + off, first, fd, view, base,
                             budget=budget),
                       entryless) or []
        first = _count_containers(codes, first, entryless)
    if everywhere:
        known = set(_owners({s.name for s in sections}, True, pe=False))
        spans = [(s.name, s.header.offset, s.header.size) for s in sections
                 if s.header.flags & elf.SHF_ALLOC and s.header.type != elf.SHT_NOBITS
                 and s.name not in known]
        codes += _search(view, fd, base, spans, [(off, size) for _, off, size in blobs], first,
                         budget, entryless)
    return codes


def _search(view: memoryview, fd: int | None, base: int, spans: list[tuple[str, int, int]],
            read: list[tuple[int, int]], first: int, budget: DecompressionBudget | None,
            entryless: list[EntrylessContainer]) -> list[DeviceCode]:
    """The deep scan: each vendor's device code (:meth:`~fatbinkit.vendors.Vendor.search`) in
    the sections ``spans`` (name, offset, size in ``view``) outside the blobs already ``read``
    (offset, size), containers numbered from ``first``; those with no entry go to
    ``entryless``."""
    codes: list[DeviceCode] = []
    for name, off, size in spans:
        pieces = [(off, off + size)]
        for b_off, b_size in read:  # a blob inside the section was listed as itself
            pieces = [p for a, z in pieces for p in ((a, max(a, min(z, b_off))),
                                                      (max(a, min(z, b_off + b_size)), z))
                      if p[1] > p[0]]
        for a, z in pieces:
            for vendor in vendors.VENDORS.values():
                found, empty = vendor.search(Place(name, view[a:z], base + a, first, fd, view,
                                                   base, budget=budget))
                codes += found
                entryless += empty
                first = _count_containers(found, first, empty)
    return codes


def _owners(present: set[str], all: bool, pe: bool) -> dict[str, vendors.Vendor]:
    """The sections each vendor reads in a host file whose sections are ``present`` (the first
    vendor to name one owns it)."""
    owners: dict[str, vendors.Vendor] = {}
    for vendor in vendors.VENDORS.values():
        for name in vendor.sections(present, all, pe):
            owners.setdefault(name, vendor)
    return owners


def _section(vendor: vendors.Vendor, place: Place,
             entryless: list[EntrylessContainer]) -> list[DeviceCode]:
    """The device code of a section ``vendor`` owns; its errors name the section and the file
    offset."""
    try:
        found = vendor.read(place, True)
    except FormatError as e:
        where = None if e.offset is None else place.base + e.offset
        msg = str(e).rsplit(" (at offset", 1)[0]
        raise type(e)(f"{place.source}: {msg}", offset=where) from e
    assert found is not None  # a claimed section is read, or its error raised
    entryless += found[1]
    return found[0]


def _blob(place: Place, entryless: list[EntrylessContainer]) -> list[DeviceCode] | None:
    """The device code of an embedded blob or a whole file, from the first vendor whose it is;
    None when it is no vendor's."""
    for vendor in vendors.VENDORS.values():
        found = vendor.read(place, False)
        if found is not None:
            entryless += found[1]
            return found[0]
    return None


def _pe_symbol_pairs(view: memoryview, image: pe.PeFile) -> list[tuple[str, int, int]]:
    """``(start symbol, file offset, size)`` for every ``__X_start``/``__X_end`` pair of a COFF
    symbol table (an embedding object's: values are relative to their section), both in one
    section and inside its data."""
    try:
        table = list(pe.symbols(view, image))
    except FormatError:
        if image.optional is None:
            raise  # an object's symbols are its contents
        return []  # an image's is debug information only: a stale one hides no device code
    found: dict[bytes, tuple[int, int]] = {}
    for name, s in table:
        if 0 < s.section_number <= len(image.sections) and name.startswith("__") and \
                name.endswith(("_start", "_end")):
            sec = image.sections[s.section_number - 1]
            if s.value <= sec.size:  # inside the section's data in the file
                found[name.encode()] = (sec.offset + s.value, s.section_number)
    return _pairs(found, len(view))


def _map(file: IO[bytes], path: os.PathLike[str]) -> memoryview:
    """The whole file, memory-mapped (payload views stay valid after ``file`` is closed)."""
    try:
        if os.fstat(file.fileno()).st_size == 0:
            return memoryview(b"")
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise InputError(f"cannot map {os.fspath(path)}: {e.strerror or e}") from e
    mapped.madvise(mmap.MADV_RANDOM)  # payloads are read on demand, not ahead
    return memoryview(mapped)


def scan(source: FilePath | Buffer, *, all: bool = False, everywhere: bool = False,
         max_decompressed: int | DecompressionBudget | None = None) -> tuple[DeviceCode, ...]:
    """Every fatbin entry, cubin or PTX image in ``source`` (a path, or the bytes of a file; a
    ``str`` is a path). With ``everywhere``, the deep scan adds, after them, the device code
    found in every other allocated section of a host file (:attr:`DeviceCode.hidden
    <fatbinkit.device_code.DeviceCode.hidden>`: what cuobjdump does not list; docs/hidden.md).

    Errors about a path start with it (``k.so: empty file, no device code``), keeping their
    class and ``offset``.
    """
    return scan_modules(source, all=all, everywhere=everywhere,
                        max_decompressed=max_decompressed)[0]


def scan_modules(source: FilePath | Buffer, *, all: bool = False, everywhere: bool = False,
                 max_decompressed: int | DecompressionBudget | None = None,
                 ) -> tuple[tuple[DeviceCode, ...], tuple[EntrylessContainer, ...]]:
    """:func:`scan`'s images, and the containers that hold no entry at all (modules the
    runtime registers with no image for any GPU), in file order. What finding them inflates
    (AMD's compressed bundles, which must be inflated to be listed) is charged to
    ``max_decompressed`` (:meth:`~fatbinkit.formats.codec.DecompressionBudget.of`: None, the
    default for the input's size)."""
    source = as_input(source, "scan() source")
    entryless: list[EntrylessContainer] = []
    if isinstance(source, (bytes, bytearray, memoryview)):
        codes = _scan(memoryview(source).cast("B"), None, all, None, entryless,
                      max_decompressed, everywhere)
        return codes, tuple(entryless)
    with open_input(source) as file:  # its InputErrors name the file: "cannot read k.so: ..."
        try:
            codes = _scan(_map(file, source), file, all, Path(source), entryless,
                          max_decompressed, everywhere)
            return codes, tuple(entryless)
        except InputError:
            raise
        except FatbinkitError as e:  # "k.so: .nv_fatbin: bad magic (at offset 0x...)"
            raise naming(e, source) from e


def _scan(view: memoryview, file: IO[bytes] | None, all: bool,
          path: Path | None, entryless: list[EntrylessContainer],
          max_decompressed: int | DecompressionBudget | None,
          everywhere: bool = False) -> tuple[DeviceCode, ...]:
    if not len(view):
        raise FormatError("empty file, no device code")
    budget = DecompressionBudget.of(max_decompressed, len(view))
    fd = None if file is None else file.fileno()
    if is_archive(view):
        # a vendor's own archive first (Intel's ocloc fat binary: members per device), else a
        # static library of host objects
        own = _blob(Place("", view, 0, 0, fd, budget=budget), entryless)
        return tuple(own) if own is not None else tuple(
            _scan_archive(view, fd, all, path, entryless, budget=budget,
                          everywhere=everywhere))
    if _host_elf(view):  # a host file: .so, .o, executable
        return tuple(_scan_elf(view, fd, all, entryless, budget=budget, everywhere=everywhere))
    if pe.is_pe(view) or pe.is_coff_object(view):  # a Windows DLL, .pyd, EXE or .obj
        return tuple(_scan_pe(view, fd, all, entryless, budget=budget, everywhere=everywhere))
    # a vendor's own file: a fatbin, cubin, PTX, an offload bundle...
    codes = _blob(Place("", view, 0, 0, fd, budget=budget), entryless)
    if codes is None:
        raise FormatError("no device code: not a fatbin, cubin, PTX, ELF or PE file", offset=0)
    return tuple(codes)


def _scan_pe(view: memoryview, fd: int | None, all: bool,
             entryless: list[EntrylessContainer], *,
             budget: DecompressionBudget | None = None,
             everywhere: bool = False) -> list[DeviceCode]:
    """Device code in a PE image or COFF object: the containers of each ``.nv_fatb`` section
    (``.nv_fatbin`` in an object, where long names are kept) and, with ``all`` or where the
    file has none of these, of each ``__nv_rel`` (``__nv_relfatbin``) section, as
    :func:`_scan_elf` selects an ELF file's, in file order; then blobs between
    ``__X_start``/``__X_end`` symbols (fatbinkit's COFF embedding objects)."""
    image = pe.read(view)
    owners = _owners({s.name for s in image.sections}, all, pe=True)
    codes: list[DeviceCode] = []
    first = 0
    for sec in image.sections:
        vendor = owners.get(sec.name)
        if vendor is None or not sec.size:
            continue
        off, size = sec.offset, sec.size  # inside the file: pe.read checks
        codes += _section(vendor, Place(sec.name, view[off : off + size], off, first, fd, view,
                                        budget=budget),
                          entryless)
        first = _count_containers(codes, first, entryless)
    blobs = _pe_symbol_pairs(view, image)
    for sym, off, size in blobs:
        codes += _blob(Place(sym, view[off : off + size], off, first, fd, view, budget=budget),
                       entryless) or []
        first = _count_containers(codes, first, entryless)
    if everywhere:
        known = set(_owners({s.name for s in image.sections}, True, pe=True))
        codes += _search(view, fd, 0, [(s.name, s.offset, s.size) for s in image.sections
                                       if s.size and s.name not in known],
                         [(off, size) for _, off, size in blobs], first, budget, entryless)
    return codes


def archive_objects(view: memoryview, path: Path | None) -> list[tuple[ArMember, memoryview]]:
    """The members of an archive that are ELF files, with their bytes (a thin archive's are
    mapped from their own files, found next to the archive), in archive order."""
    out = []
    for m in ar_members(view):
        if m.thin:
            if path is None:
                raise FormatError(f"thin archive member {m.name}: its file is read from the "
                                  "archive's folder; give the archive as a path")
            member = path.parent / m.name
            with open_input(member) as file:
                data = _map(file, member)
        else:
            data = view[m.offset : m.offset + m.size]
        if _host_elf(data):
            out.append((m, data))
    return out


def _scan_archive(view: memoryview, fd: int | None, all: bool, path: Path | None,
                  entryless: list[EntrylessContainer], *,
                  budget: DecompressionBudget | None = None,
                  everywhere: bool = False) -> list[DeviceCode]:
    """Device code in each ELF object of a static library, in member order, containers numbered
    across the archive (as cuobjdump numbers them); other members (not ELF) are skipped."""
    codes: list[DeviceCode] = []
    first = 0
    for m, data in archive_objects(view, path):
        own: list[EntrylessContainer] = []
        try:
            found = (_scan_elf(data, fd, all, own, m.offset, budget=budget,
                               everywhere=everywhere) if not m.thin
                     else _scan_elf(data, None, all, own, budget=budget, everywhere=everywhere))
        except FatbinkitError as e:
            raise naming(e, f"member {m.name}") from e
        codes += [replace(c, container=c.container + first if c.container >= 0 else -1,
                          member=m.name) for c in found]
        entryless += [replace(e, container=e.container + first, member=m.name) for e in own]
        first = _count_containers(codes, first, entryless)
    return codes


def _host_elf(view: Buffer) -> bool:
    """Whether ``view`` is an ELF file that is not a vendor's device code (a cubin, an AMDGPU
    code object: :func:`fatbinkit.vendors.device_machine`): a host file to search."""
    machine = elf.machine(view)
    return machine is not None and not vendors.device_machine(machine)


def listed(codes: tuple[DeviceCode, ...], *, all: bool = False) -> tuple[DeviceCode, ...]:
    """The images ``cuobjdump -lelf -lptx`` lists: those a device loads (CUDA: ELF and PTX,
    :attr:`~fatbinkit.vendors.Vendor.loadable`); other kinds too with ``all``."""
    if all:
        return codes
    return tuple(c for c in codes if c.kind in vendors.of(c).loadable)


def extract_names(codes: tuple[DeviceCode, ...], input_name: str) -> list[str]:
    """File names ``cuobjdump -xelf all`` / ``-xptx all`` give ``codes`` (one per code).

    cuobjdump's rules, observed: ``<stem>.<n>.<arch>.<ext>`` with ``stem`` the input's name minus
    its last suffix and ``n`` counting per kind from 1; an entry with an identifier is named
    ``<identifier's stem>.<arch>.<ext>`` instead (so equal identifiers collide: the last file
    wins, as with cuobjdump; the identifier's directories are dropped, ``../x.cu`` gives
    ``x.sm_90.cubin``); a bare cubin is ``<stem>.<arch>.cubin``. An image of the deep scan
    (:attr:`DeviceCode.hidden`, which cuobjdump does not list) is always
    ``<stem>.<n>.<arch>.<ext>``: cuRAND's 1,747 share one identifier (``lto``). ELF names show
    an ``a`` suffix but not ``f``; PTX names show both. Names never contain a path separator.
    """
    stem = _safe(Path(input_name).stem)
    counters: dict[str, int] = {}
    suffixes: dict[tuple[str, str, str], str] = {}  # (vendor, kind, target) -> ".<arch>.<ext>"
    names: list[str] = []
    for c in codes:
        n = counters[c.kind] = counters.get(c.kind, 0) + 1
        key = (c.vendor, c.kind, c.target)
        suffix = suffixes.get(key)
        if suffix is None:
            suffix = suffixes[key] = vendors.of(c).file_suffix(c)
        if c.container < 0 and not c.source:
            names.append(f"{stem}{suffix}")
        elif c.identifier and not c.hidden:
            base = c.identifier.rsplit("/", 1)[-1]
            dot = base.rfind(".")
            names.append(f"{_safe(base[:dot] if dot > 0 else base)}{suffix}")
        else:
            names.append(f"{stem}.{n}{suffix}")
    return names


def _safe(stem: str) -> str:
    """``stem`` without path separators or control characters (names get ``.arch.ext`` appended,
    so they are never ``.`` or ``..``)."""
    return "".join("_" if ch == "/" or ord(ch) < 32 else ch for ch in stem)
