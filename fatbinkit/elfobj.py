"""Write ELF64 relocatable objects that embed blobs in ``.rodata``, with no toolchain.

The object carries one read-only ``.rodata`` section holding every blob (each at its own alignment),
an empty ``.note.GNU-stack`` (so a linked library keeps a non-executable stack) and, per blob, three
global symbols: ``__<name>_start`` and ``__<name>_end`` in ``.rodata`` and the absolute
``__<name>_size`` (style ``"aoti"``, PyTorch AOTInductor's names), or ld's
``_binary_<mangled>_{start,end,size}`` (style ``"ld"``). With ``align=1`` and style ``"ld"`` the
file is byte-for-byte what ``ld -r -b binary -z noexecstack`` followed by
``objcopy --rename-section .data=.rodata,alloc,load,readonly,data,contents`` writes (GNU binutils
2.40), symbol order included.

The layout is computed from the blobs' sizes first; file contents are then streamed into the output
(``os.sendfile`` on Linux), so a 256 MiB blob is never held in memory.
"""

from __future__ import annotations

import os
import platform
import re
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias

from . import elf
from .errors import InputError, InvalidArgumentError, UnsupportedError
from .outfile import atomic_path

Content: TypeAlias = bytes | bytearray | memoryview
Source: TypeAlias = bytes | bytearray | memoryview | os.PathLike[str] | os.PathLike[bytes]
Style: TypeAlias = Literal["aoti", "ld"]

#: Machines this writer targets, by the names ``uname -m`` uses.
MACHINES: dict[str, int] = {"x86_64": elf.EM_X86_64, "aarch64": elf.EM_AARCH64}
_MACHINE_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}
STYLES: tuple[str, ...] = ("aoti", "ld")
DEFAULT_ALIGN = 16
MAX_ALIGN = 1 << 16

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LD_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_SHSTRTAB_NAMES = (b".symtab", b".strtab", b".shstrtab", b".rodata", b".note.GNU-stack")
_SMALL = 1 << 20  # blobs up to this size are gathered in one write buffer
_SENDFILE = sys.platform.startswith("linux")  # file-to-file sendfile is Linux-only
_BFD_HASH_SIZE = 4051  # bfd_default_hash_table_size
_BFD_PRIMES = (
    31,
    61,
    127,
    251,
    509,
    1021,
    2039,
    4093,
    8191,
    16381,
    32749,
    65521,
    131071,
    262139,
    524287,
    1048573,
    2097143,
    4194301,
    8388593,
    16777213,
    33554393,
    67108859,
    134217689,
    268435399,
    536870909,
    1073741789,
    2147483647,
)  # libiberty/bfd higher_prime_number's table


@dataclass(frozen=True)
class Blob:
    """One blob to embed.

    ``name`` is the kernel name for style ``"aoti"`` (a C identifier: symbols ``__<name>_start``...)
    or, for style ``"ld"``, the file name as it would be given to ld (``str`` or raw ``bytes``),
    which ld's rule mangles into ``_binary_<mangled>_start``... ``source`` is the content (bytes,
    bytearray, memoryview) or a path to read it from. ``align`` overrides the writer's default.
    """

    name: str | bytes
    source: Source
    align: int | None = None


def host_machine() -> str:
    """The running machine's name in :data:`MACHINES`; refuse a host we cannot target."""
    name = platform.machine().lower()
    name = _MACHINE_ALIASES.get(name, name)
    if name not in MACHINES:
        raise UnsupportedError(
            f"host machine {platform.machine()!r} has no default; pass one of {', '.join(MACHINES)}"
        )
    return name


def ld_mangle(file_name: str | bytes) -> str:
    """ld's ``-b binary`` mangling: every byte that is not an ASCII letter or digit becomes ``_``.

    ld works on the bytes of the file name as given on its command line, so one non-ASCII
    character encoded in UTF-8 turns into as many underscores as it has bytes.
    """
    raw = os.fsencode(file_name)
    return bytes(c if c in _LD_KEEP else 0x5F for c in raw).decode("ascii")


def symbol_names(name: str | bytes, style: Style = "aoti") -> tuple[str, str, str]:
    """The ``(start, end, size)`` symbol names a blob called ``name`` gets in ``style``."""
    if style == "aoti":
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise InvalidArgumentError(f"blob name {name!r} is not a C identifier")
        stem = f"__{name}"
    elif style == "ld":
        if not isinstance(name, (str, bytes)) or not name:
            raise InvalidArgumentError(f"blob name {name!r} must be a non-empty file name")
        stem = f"_binary_{ld_mangle(name)}"
    else:
        raise InvalidArgumentError(
            f"unknown symbol style {style!r}; use one of {', '.join(STYLES)}"
        )
    return f"{stem}_start", f"{stem}_end", f"{stem}_size"


@dataclass(frozen=True)
class Placed:
    """A blob's place in the section that holds all blobs.

    ``symbols`` are its ``(start, end, size)`` names, ``offset`` is from the section start,
    ``padding`` the zero bytes before it, ``source`` its content or the path to stream it from.
    """

    symbols: tuple[str, str, str]
    source: Content | Path
    offset: int
    size: int
    padding: int


@dataclass(frozen=True)
class Placement:
    """Every blob placed, the section's size and its alignment (the largest blob alignment)."""

    blobs: tuple[Placed, ...]
    size: int
    align: int


@dataclass(frozen=True)
class _Layout:
    """Everything but the blob contents, computed from sizes alone."""

    head: bytes  # ELF header plus padding up to .rodata
    blobs: tuple[Placed, ...]
    tail: bytes  # padding, .symtab, .strtab, .shstrtab, section headers

    @property
    def size(self) -> int:
        return len(self.head) + sum(b.padding + b.size for b in self.blobs) + len(self.tail)


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) & -align


def _source_size(blob: Blob) -> tuple[Content | Path, int]:
    source = blob.source
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        return source, view.nbytes
    if isinstance(source, os.PathLike):
        path = Path(os.fsdecode(os.fspath(source)))
        try:
            st = path.stat()
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from e
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"cannot read {path}: it is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"cannot read {path}: not a regular file")
        return path, st.st_size
    raise InvalidArgumentError(
        f"blob {blob.name!r}: source must be bytes, bytearray, memoryview or a path, "
        f"not {type(source).__name__}"
    )


def _bfd_order(names: Sequence[bytes]) -> list[int]:
    """Indexes of ``names`` in the order GNU ld writes global symbols.

    ld -r emits them by walking its symbol hash table (libbfd ``bfd_hash_traverse``): buckets in
    ascending order, newest entry first in each, the table growing to the next prime of its list
    once it is more than 3/4 full. Reproducing that walk makes style ``"ld"`` byte-identical.
    """
    mask = (1 << 64) - 1
    size = _BFD_HASH_SIZE
    table: list[list[tuple[int, int]]] = [[] for _ in range(size)]
    for count, name in enumerate(names, 1):
        h = 0
        for c in name:
            h = (h + c + (c << 17)) & mask
            h ^= h >> 2
        n = len(name)
        h = (h + n + (n << 17)) & mask
        h ^= h >> 2
        table[h % size].insert(0, (h, count - 1))
        if count > size * 3 // 4:
            new_size = next((p for p in _BFD_PRIMES if p > size), 0)
            if new_size == 0:
                continue
            new_table: list[list[tuple[int, int]]] = [[] for _ in range(new_size)]
            for bucket in table:
                while bucket:
                    run = 1  # entries of equal hash move together, keeping their order
                    while run < len(bucket) and bucket[run][0] == bucket[0][0]:
                        run += 1
                    new_table[bucket[0][0] % new_size][0:0] = bucket[:run]
                    del bucket[:run]
            table, size = new_table, new_size
    return [index for bucket in table for _, index in bucket]


def _strtab(names: Sequence[bytes]) -> tuple[bytes, list[int]]:
    """A string table for distinct ``names`` and each one's offset, as libbfd builds it.

    A name that is the tail of another is stored once (``_bfd_elf_strtab_finalize``: sort by
    reversed string, merge each into its neighbour that ends with it); the rest keep their order.
    """
    order = sorted(range(len(names)), key=lambda i: names[i][::-1])
    host: dict[int, int] = {}
    keeper = order[-1] if order else -1
    for i in reversed(order[:-1]):
        if names[keeper].endswith(names[i]):
            host[i] = keeper
        else:
            keeper = i
    offsets = [0] * len(names)
    table = bytearray(b"\0")
    for i, name in enumerate(names):
        if i not in host:
            offsets[i] = len(table)
            table += name + b"\0"
    for i, keeper in host.items():
        offsets[i] = offsets[keeper] + len(names[keeper]) - len(names[i])
    return bytes(table), offsets


def place(blobs: Iterable[Blob], *, style: Style = "aoti", align: int = DEFAULT_ALIGN) -> Placement:
    """Validate ``blobs`` and lay them out back to back, each at its alignment.

    Checks names (C identifiers for ``"aoti"``), duplicates (also two file names that ld would
    mangle alike), alignments, and that every path is a readable regular file, reading only sizes.
    """
    blobs = list(blobs)
    if not blobs:
        raise InvalidArgumentError("no blobs to embed")
    seen: dict[str, str | bytes] = {}
    placed: list[Placed] = []
    cursor = 0
    section_align = 1
    for blob in blobs:
        names = symbol_names(blob.name, style)
        if names[0] in seen:
            raise InvalidArgumentError(
                f"blob names {seen[names[0]]!r} and {blob.name!r} both give symbol {names[0]}"
                if seen[names[0]] != blob.name
                else f"duplicate blob name {blob.name!r}"
            )
        seen[names[0]] = blob.name
        a = align if blob.align is None else blob.align
        if not isinstance(a, int) or a < 1 or a > MAX_ALIGN or a & (a - 1):
            raise InvalidArgumentError(
                f"blob {blob.name!r}: alignment {a!r} is not a power of two in 1..{MAX_ALIGN}"
            )
        section_align = max(section_align, a)
        source, size = _source_size(blob)
        offset = _align_up(cursor, a)
        placed.append(Placed(names, source, offset, size, offset - cursor))
        cursor = offset + size
    return Placement(tuple(placed), cursor, section_align)


def _layout(blobs: Iterable[Blob], machine: str | None, style: Style, align: int) -> _Layout:
    machine = host_machine() if machine is None else _MACHINE_ALIASES.get(machine, machine)
    if machine not in MACHINES:
        raise InvalidArgumentError(f"unknown machine {machine!r}; use one of {', '.join(MACHINES)}")
    placement = place(blobs, style=style, align=align)
    placed = placement.blobs
    rodata_size = placement.size
    section_align = placement.align
    rodata_offset = _align_up(elf.FileHeader.FORMAT.size, section_align)
    names = [n.encode("ascii") for p in placed for n in p.symbols]

    symbols = [elf.Symbol(0, 0, 0, elf.SHN_UNDEF, 0, 0)]
    symbols += [
        elf.Symbol(0, elf.st_info(elf.STB_LOCAL, elf.STT_SECTION), 0, shndx, 0, 0)
        for shndx in (1, 2)
    ]
    order = _bfd_order(names) if style == "ld" else range(len(names))
    ordered = [names[i] for i in order]
    strtab, name_offsets = _strtab(ordered)
    glob = elf.st_info(elf.STB_GLOBAL, elf.STT_NOTYPE)
    for i, name_offset in zip(order, name_offsets, strict=True):
        blob_index, which = divmod(i, 3)
        p = placed[blob_index]
        if which == 0:
            symbols.append(elf.Symbol(name_offset, glob, 0, 1, p.offset, 0))
        elif which == 1:
            symbols.append(elf.Symbol(name_offset, glob, 0, 1, p.offset + p.size, 0))
        else:
            symbols.append(elf.Symbol(name_offset, glob, 0, elf.SHN_ABS, p.size, 0))
    symtab = b"".join(s.pack() for s in symbols)
    shstrtab, sh_names = _strtab(_SHSTRTAB_NAMES)

    note_offset = rodata_offset + rodata_size
    symtab_offset = _align_up(note_offset, 8)
    strtab_offset = symtab_offset + len(symtab)
    shstrtab_offset = strtab_offset + len(strtab)
    shdr_offset = _align_up(shstrtab_offset + len(shstrtab), 8)
    sym_size = elf.Symbol.FORMAT.size
    sections = [
        elf.SectionHeader(0, elf.SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0),
        elf.SectionHeader(
            sh_names[3],
            elf.SHT_PROGBITS,
            elf.SHF_ALLOC,
            0,
            rodata_offset,
            rodata_size,
            0,
            0,
            section_align,
            0,
        ),
        elf.SectionHeader(sh_names[4], elf.SHT_PROGBITS, 0, 0, note_offset, 0, 0, 0, 1, 0),
        elf.SectionHeader(
            sh_names[0], elf.SHT_SYMTAB, 0, 0, symtab_offset, len(symtab), 4, 3, 8, sym_size
        ),
        elf.SectionHeader(
            sh_names[1], elf.SHT_STRTAB, 0, 0, strtab_offset, len(strtab), 0, 0, 1, 0
        ),
        elf.SectionHeader(
            sh_names[2], elf.SHT_STRTAB, 0, 0, shstrtab_offset, len(shstrtab), 0, 0, 1, 0
        ),
    ]
    ident = elf.ELFMAG + bytes([elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EV_CURRENT]) + bytes(9)
    header = elf.FileHeader(
        ident,
        elf.ET_REL,
        MACHINES[machine],
        elf.EV_CURRENT,
        0,
        0,
        shdr_offset,
        0,
        elf.FileHeader.FORMAT.size,
        0,
        0,
        elf.SectionHeader.FORMAT.size,
        len(sections),
        5,
    )
    head = header.pack() + bytes(rodata_offset - elf.FileHeader.FORMAT.size)
    tail = b"".join(
        (
            bytes(symtab_offset - note_offset),
            symtab,
            strtab,
            shstrtab,
            bytes(shdr_offset - shstrtab_offset - len(shstrtab)),
            *(s.pack() for s in sections),
        )
    )
    return _Layout(head, placed, tail)


class _Sink:
    """Collects output: small pieces gathered in a buffer, big files streamed to ``fd``."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.fd is not None and len(data) > _SMALL:
            self.flush()
            _write_all(self.fd, memoryview(data))
        else:
            self.buffer += data
            if self.fd is not None and len(self.buffer) > 4 * _SMALL:
                self.flush()

    def flush(self) -> None:
        if self.fd is not None and self.buffer:
            _write_all(self.fd, memoryview(self.buffer))
            self.buffer.clear()

    def copy(self, path: Path, size: int) -> None:
        try:
            with open(path, "rb", buffering=0) as src:
                if os.fstat(src.fileno()).st_size != size:
                    raise InputError(f"{path} changed size while being embedded")
                if self.fd is None or size <= _SMALL:
                    data = src.read(size) if size else b""
                    if len(data) != size:
                        raise InputError(f"{path} changed size while being embedded")
                    self.write(data)
                else:
                    self.flush()
                    _stream(src.fileno(), self.fd, size, path)
        except InputError:
            raise
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from e


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def _stream(in_fd: int, fd: int, size: int, path: Path) -> None:
    """Copy ``size`` bytes of an open file to ``fd`` without holding them in memory."""
    offset = 0
    while offset < size:
        if _SENDFILE:
            sent = os.sendfile(fd, in_fd, offset, min(size - offset, 1 << 30))
        else:
            chunk = os.read(in_fd, min(size - offset, _SMALL))
            _write_all(fd, memoryview(chunk))
            sent = len(chunk)
        if sent == 0:
            raise InputError(f"{path} changed size while being embedded")
        offset += sent


def _emit(layout: _Layout, sink: _Sink) -> None:
    sink.write(layout.head)
    for p in layout.blobs:
        if p.padding:
            sink.write(bytes(p.padding))
        if isinstance(p.source, Path):
            sink.copy(p.source, p.size)
        else:
            sink.write(p.source)
    sink.write(layout.tail)
    sink.flush()


def object_bytes(
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> bytes:
    """The relocatable object embedding ``blobs``, in memory (see :func:`write_object`)."""
    layout = _layout(blobs, machine, style, align)
    sink = _Sink(None)
    _emit(layout, sink)
    return bytes(sink.buffer)


def write_object(
    path: os.PathLike[str] | os.PathLike[bytes],
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> None:
    """Write a relocatable ELF object embedding ``blobs`` to ``path``, atomically.

    ``machine`` is a key of :data:`MACHINES` (default: the host's); ``align`` applies to blobs
    without their own (1 packs them as ld does). Everything is validated before the output is
    created; a failure later (an input vanishing, a full disk) leaves no file behind.
    """
    layout = _layout(blobs, machine, style, align)
    with atomic_path(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | getattr(os, "O_BINARY", 0))
        try:
            _emit(layout, _Sink(fd))
        finally:
            os.close(fd)
