"""Write ELF64 relocatable objects that embed blobs in ``.rodata``, with no toolchain.

The object carries one read-only ``.rodata`` section holding every blob (each at its own alignment),
an empty ``.note.GNU-stack`` (so a linked library keeps a non-executable stack) and, per blob, three
global symbols: ``__<name>_start`` and ``__<name>_end`` in ``.rodata`` and the absolute
``__<name>_size`` (style ``"aoti"``, PyTorch AOTInductor's names), or ld's
``_binary_<mangled>_{start,end,size}`` (style ``"ld"``). With ``align=1`` and style ``"ld"`` the
file is byte-for-byte what ``ld -r -b binary -z noexecstack`` followed by
``objcopy --rename-section .data=.rodata,alloc,load,readonly,data,contents`` writes (GNU binutils
2.40), symbol order included.

Names and alignments are checked first. Then each blob file is opened once (its ``fstat`` gives
type and size): a small one is read straight into one reused 256 KiB buffer that is written in
large runs, a big one is streamed kernel to kernel (``copy_file_range`` on Linux), so a 256 MiB
blob is never held in memory. The symbol and string tables and the ELF header, which depend on the
sizes, are written last.
"""

from __future__ import annotations

import errno
import io
import os
import platform
import re
import stat
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO, Literal, NamedTuple, TypeAlias

from ..errors import FormatError, InputError, InvalidArgumentError, UnsupportedError
from ..infile import Content, FilePath, as_path, read_input
from ..outfile import atomic_path
from . import elf
from .offload_bundle import BUNDLE_ALIGNMENT, read_bundle
from .wrapper import HIP_WRAPPER_MAGIC, HIP_WRAPPER_SECTION, HIP_WRAPPER_VERSION, HipWrapper

__all__ = [
    "DEFAULT_ALIGN",
    "HIP_FATBIN_SECTION",
    "HIP_WRAPPER_SYMBOL",
    "MACHINES",
    "MAX_ALIGN",
    "STYLES",
    "Blob",
    "BlobSource",
    "Placed",
    "Placement",
    "Style",
    "hip_object_bytes",
    "host_machine",
    "ld_mangle",
    "object_bytes",
    "place",
    "symbol_names",
    "write_hip_object",
    "write_object",
]

#: a blob's content, or the path of a file holding it (a ``str`` is a path)
BlobSource: TypeAlias = Content | FilePath
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
_CHUNK = 1 << 20  # copy buffer where the kernel cannot copy file to file
_STAGE = 256 << 10  # the gathering buffer (larger costs page faults and cache misses, no speed)
_SMALL = 128 << 10  # files below this size are read into the gathering buffer, bigger ones streamed
_ZEROS = memoryview(bytes(MAX_ALIGN))  # padding
_REVERSED = itemgetter(slice(None, None, -1))
# O_NONBLOCK: opening a FIFO must not wait for a writer (fstat then refuses it)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
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
    source: BlobSource
    align: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.source, str):  # a str is a path, as everywhere in fatbinkit
            object.__setattr__(self, "source", as_path(self.source, f"blob {self.name!r}"))


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


def _stem(name: str | bytes, style: Style) -> str:
    """What a blob's symbol names start with: ``__<name>`` or ``_binary_<mangled>``."""
    if style == "aoti":
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise InvalidArgumentError(f"blob name {name!r} is not a C identifier")
        return "__" + name
    if style == "ld":
        if not isinstance(name, (str, bytes)) or not name:
            raise InvalidArgumentError(f"blob name {name!r} must be a non-empty file name")
        return "_binary_" + ld_mangle(name)
    raise InvalidArgumentError(f"unknown symbol style {style!r}; use one of {', '.join(STYLES)}")


def symbol_names(name: str | bytes, style: Style = "aoti") -> tuple[str, str, str]:
    """The ``(start, end, size)`` symbol names a blob called ``name`` gets in ``style``."""
    stem = _stem(name, style)
    return stem + "_start", stem + "_end", stem + "_size"


class Placed(NamedTuple):
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


class _Checked(NamedTuple):
    """A validated blob whose size may not be known yet."""

    symbols: tuple[str, str, str]
    source: Content | Path
    align: int


def _align_up(value: int, align: int) -> int:
    return (value + align - 1) & -align


def _source(blob: Blob) -> Content | Path:
    """A blob's content as flat bytes, or its path."""
    source = blob.source
    if isinstance(source, (Path, bytes, bytearray)):
        return source
    if isinstance(source, memoryview):  # as flat bytes, whatever its item format or layout
        return source.cast("B") if source.c_contiguous else memoryview(source.tobytes())
    if isinstance(source, os.PathLike):
        return Path(os.fsdecode(os.fspath(source)))
    raise InvalidArgumentError(
        f"blob {blob.name!r}: source must be bytes, bytearray, memoryview or a path, "
        f"not {type(source).__name__}"
    )


def _regular_size(path: Path, st: os.stat_result) -> int:
    """The size of the file at ``path`` that ``st`` describes; refuse one that is not regular."""
    if not stat.S_ISREG(st.st_mode):
        kind = "it is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(f"cannot read {path}: {kind}")
    return st.st_size


def _open_regular(path: Path) -> tuple[int, int]:
    """A descriptor open on the regular file at ``path``, and its size (one ``fstat``)."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        return fd, _regular_size(path, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise


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


def _tails(names: Sequence[bytes]) -> dict[int, int]:
    """Each name (by index) that ends another, mapped to the longest name it ends."""
    reversed_names = list(map(_REVERSED, names))
    ordered = sorted(reversed_names)
    # A name ends the next one in that order exactly when it ends any later one (those sort
    # between the two), so each merges into the first following name that it does not end.
    ends_next = list(map(bytes.startswith, ordered[1:], ordered))
    host: dict[int, int] = {}
    if any(ends_next):
        index = {name: i for i, name in enumerate(reversed_names)}
        for k in reversed(list(compress(range(len(ends_next)), ends_next))):
            later = index[ordered[k + 1]]
            host[index[ordered[k]]] = host.get(later, later)
    return host


def _strtab(names: Sequence[bytes], *, tails: bool = True) -> tuple[bytes, list[int]]:
    """A string table for distinct ``names`` and each one's offset, as libbfd builds it.

    A name that is the tail of another is stored once (``_bfd_elf_strtab_finalize``: sort by
    reversed string, merge each into its neighbour that ends with it); the rest keep their order.
    ``tails=False`` says the caller knows no name ends another, which skips the search.
    """
    host = _tails(names) if tails else {}
    kept = [i for i in range(len(names)) if i not in host] if host else range(len(names))
    stored = [names[i] for i in kept]
    starts = list(accumulate([len(name) + 1 for name in stored], initial=1))
    if host:
        offsets = [0] * len(names)
        for i, start in zip(kept, starts, strict=False):  # starts has one more
            offsets[i] = start
        for i, keeper in host.items():
            offsets[i] = offsets[keeper] + len(names[keeper]) - len(names[i])
    else:
        offsets = starts[:-1]
    return b"\0".join([b"", *stored, b""]), offsets


def _check(
    blobs: Iterable[Blob], style: Style, align: int, max_align: int = MAX_ALIGN
) -> tuple[list[_Checked], int]:
    """Validate names, duplicates, alignments (powers of two up to ``max_align``) and source
    types, reading no file.

    Returns the blobs and the section alignment (the largest blob alignment).
    """
    blobs = list(blobs)
    if not blobs:
        raise InvalidArgumentError("no blobs to embed")
    seen: dict[str, str | bytes] = {}
    checked: list[_Checked] = []
    section_align = 1
    default_ok = _is_alignment(align, max_align)
    for blob in blobs:
        if not isinstance(blob, Blob):
            raise InvalidArgumentError(
                f"blobs are Blob values (Blob(name, content or path)), not {type(blob).__name__}")
        stem = _stem(blob.name, style)
        if stem in seen:
            raise InvalidArgumentError(
                f"blob names {seen[stem]!r} and {blob.name!r} both give symbol {stem}_start"
                if seen[stem] != blob.name
                else f"duplicate blob name {blob.name!r}"
            )
        seen[stem] = blob.name
        a = blob.align
        if not (default_ok if a is None else _is_alignment(a, max_align)):
            raise InvalidArgumentError(
                f"blob {blob.name!r}: alignment {align if a is None else a!r} "
                f"is not a power of two in 1..{max_align}"
            )
        a = align if a is None else a
        if a > section_align:
            section_align = a
        symbols = (stem + "_start", stem + "_end", stem + "_size")
        checked.append(_Checked(symbols, _source(blob), a))
    return checked, section_align


def _is_alignment(a: object, max_align: int) -> bool:
    return isinstance(a, int) and 1 <= a <= max_align and not a & (a - 1)


def place(blobs: Iterable[Blob], *, style: Style = "aoti", align: int = DEFAULT_ALIGN) -> Placement:
    """Validate ``blobs`` and lay them out back to back, each at its alignment.

    Checks names (C identifiers for ``"aoti"``), duplicates (also two file names that ld would
    mangle alike), alignments, and that every path is a readable regular file, reading only sizes.
    """
    checked, section_align = _check(blobs, style, align)
    placed: list[Placed] = []
    cursor = 0
    for symbols, source, a in checked:
        if isinstance(source, Path):
            try:
                st = os.stat(source)
            except OSError as e:
                raise InputError(f"cannot read {source}: {e.strerror or e}") from e
            size = _regular_size(source, st)
        else:
            size = len(source)
        offset = (cursor + a - 1) & -a
        placed.append(Placed(symbols, source, offset, size, offset - cursor))
        cursor = offset + size
    return Placement(tuple(placed), cursor, section_align)


def _machine(machine: str | None, machines: dict[str, int] = MACHINES) -> int:
    """The code for a name in ``machines`` (or an alias): ``e_machine`` for :data:`MACHINES`;
    the host's for ``None``."""
    name = host_machine() if machine is None else _MACHINE_ALIASES.get(machine, machine)
    if name not in machines:
        raise InvalidArgumentError(f"unknown machine {name!r}; use one of {', '.join(machines)}")
    return machines[name]


def _rodata_offset(section_align: int) -> int:
    return _align_up(elf.FileHeader.FORMAT.size, section_align)


def _head_tail(
    checked: Sequence[_Checked],
    offsets: Sequence[int],
    sizes: Sequence[int],
    section_align: int,
    e_machine: int,
    style: Style,
) -> tuple[bytes, bytes]:
    """What comes before ``.rodata`` (ELF header, padding) and after it (padding, ``.symtab``,
    ``.strtab``, ``.shstrtab``, section headers), from the blobs' offsets and sizes."""
    rodata_size = offsets[-1] + sizes[-1]
    rodata_offset = _rodata_offset(section_align)
    names = [n.encode("ascii") for c in checked for n in c.symbols]

    local = [elf.Symbol(0, 0, 0, elf.SHN_UNDEF, 0, 0)]
    local += [
        elf.Symbol(0, elf.st_info(elf.STB_LOCAL, elf.STT_SECTION), 0, shndx, 0, 0)
        for shndx in (1, 2)
    ]
    glob = elf.st_info(elf.STB_GLOBAL, elf.STT_NOTYPE)
    abs_ = elf.SHN_ABS
    rows = [s.pack() for s in local]
    if style == "ld":  # ld's symbol order: one Elf64_Sym at a time
        order = _bfd_order(names)
        strtab, name_offsets = _strtab([names[i] for i in order])
        where: list[tuple[int, int]] = []
        for offset, size in zip(offsets, sizes, strict=True):
            where += [(1, offset), (1, offset + size), (abs_, size)]
        pack = elf.Symbol.FORMAT.pack
        rows += [pack(n, glob, 0, *where[i], 0) for i, n in zip(order, name_offsets, strict=True)]
    else:  # blob order: a blob's three Elf64_Sym in one pack
        # "__A_end" can end "__B_end" (the suffixes end in different letters) only if "__A" ends
        # "__B": only if some B starts with "_" or holds "__", which is cheaper to rule out.
        tails = any("__" in c.symbols[0][1:] for c in checked)
        strtab, name_offsets = _strtab(names, tails=tails)
        pack = struct.Struct("<" + elf.Symbol.FORMAT.format.lstrip("<") * 3).pack
        it = iter(name_offsets)
        rows += [
            pack(s, glob, 0, 1, offset, 0, e, glob, 0, 1, offset + size, 0,
                 z, glob, 0, abs_, size, 0)
            for offset, size, s, e, z in zip(offsets, sizes, it, it, it, strict=True)
        ]  # fmt: skip
    symtab = b"".join(rows)
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
        e_machine,
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
    return head, tail


class _Output:
    """Writes the object front to back in few large writes.

    Headers, padding, in-memory blobs and small files are gathered in one reused buffer (a small
    file is read straight into it); big files are streamed through the kernel with
    ``copy_file_range`` where it can, else in chunks, never held whole in memory. Each stretch
    of a real file gets its disk blocks (``posix_fallocate``) before it is written: on ext4,
    renaming a file over an existing one first flushes the new file's delayed allocations
    (``auto_da_alloc``), about 1 ms per MiB here, which allocated blocks skip.
    """

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.fd = file.fileno() if isinstance(file, io.FileIO) else None
        self.allocate = self.fd is not None and hasattr(os, "posix_fallocate")
        self.end = 0  # bytes appended (or being copied) so far
        self.buffer = memoryview(bytearray(_STAGE))
        self.used = 0

    def put(self, data: Content) -> None:
        """Append ``data``: gathered where it fits, else written as it is."""
        end = self.used + len(data)
        if end > len(self.buffer):
            self.flush()
            end = len(data)
            if end > len(self.buffer):
                self._reserve(end)
                self._write(data)
                return
        self.buffer[self.used : end] = data
        self.used = end

    def put_file(self, path: Path) -> int:
        """Append the regular file at ``path``; its size.

        One file costs four system calls: open, ``fstat`` (type and size), one read straight
        into the buffer (asking a byte more than the size tells a file that grew), close.
        """
        src, size = _open_regular(path)
        try:
            if size >= _SMALL:
                self.copy(src, path, size)
                return size
            used = self.used
            if used + size >= len(self.buffer):
                self.flush()
                used = 0
            view = self.buffer[used : used + size + 1]
            try:
                got = n = _readinto(src, view)  # a regular file reads short only at its end
                while n and got < size:
                    n = _readinto(src, view[got:])
                    got += n
            except OSError as e:
                raise InputError(f"cannot read {path}: {e.strerror or e}") from e
        finally:
            os.close(src)
        if got != size:
            raise InputError(f"{path} changed size while being embedded")
        self.used = used + size
        return size

    def copy(self, src: int, path: Path, size: int) -> None:
        """Stream the open file ``src`` (at ``path``), which must still be ``size`` bytes."""
        self.flush()
        self._reserve(size)
        try:
            done = self._copy_in_kernel(src, size)
            while done < size:  # both file positions are past what the kernel copied
                chunk = os.read(src, min(_CHUNK, size - done))
                if not chunk:
                    raise InputError(f"{path} changed size while being embedded")
                self._write(chunk)
                done += len(chunk)
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from e

    def flush(self) -> None:
        """Write what is gathered."""
        if self.used:
            self._reserve(self.used)
            self._write(self.buffer[: self.used])
            self.used = 0

    def rewrite_start(self, data: bytes) -> None:
        """Overwrite the first bytes of the file, once everything is written."""
        self.flush()
        self.file.seek(0)
        self._write(data)

    def _reserve(self, count: int) -> None:
        """Allocate the file's next ``count`` bytes, where the file system can."""
        if self.allocate and count and self.fd is not None:
            try:
                os.posix_fallocate(self.fd, self.end, count)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS):
                    raise
                self.allocate = False
        self.end += count

    def _write(self, data: Content) -> None:
        view = memoryview(data)
        while view:
            view = view[self.file.write(view) or 0 :]

    def _copy_in_kernel(self, src: int, size: int) -> int:
        """Bytes copied with ``copy_file_range`` (0 where the system cannot do it)."""
        if self.fd is None or not hasattr(os, "copy_file_range"):
            return 0
        done = 0
        while done < size:
            try:
                n = os.copy_file_range(src, self.fd, size - done)
            except OSError as e:
                if e.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    return done  # the caller copies the rest through a buffer
                raise
            if n == 0:
                break
            done += n
        return done


if hasattr(os, "readv"):

    def _readinto(fd: int, view: memoryview) -> int:
        """Read from ``fd`` into ``view``; the count read, 0 at the end of the file."""
        return os.readv(fd, [view])

else:  # Windows

    def _readinto(fd: int, view: memoryview) -> int:
        """Read from ``fd`` into ``view``; the count read, 0 at the end of the file."""
        data = os.read(fd, len(view))
        view[: len(data)] = data
        return len(data)


def _put_blobs(
    out: _Output, checked: Sequence[_Checked], limit: int | None = None
) -> tuple[list[int], list[int]]:
    """Append the blobs to ``out``, each at its alignment from where the section starts (where
    ``out`` is now), each file opened once (its ``fstat`` gives its size); their offsets in the
    section and their sizes. ``limit``: the most bytes the section may hold (a bigger in-memory
    blob is refused before it is written, a file once it is)."""
    offsets: list[int] = []
    sizes: list[int] = []
    cursor = 0
    for symbols, source, a in checked:
        offset = (cursor + a - 1) & -a
        if offset > cursor:
            out.put(_ZEROS[: offset - cursor])
        size = out.put_file(source) if isinstance(source, Path) else len(source)
        if limit is not None and offset + size > limit:
            raise UnsupportedError(
                f"the blobs up to {symbols[0].removesuffix('_start')} take {offset + size} "
                f"bytes, more than the object can hold ({limit})"
            )
        if not isinstance(source, Path):  # in memory: checked before a byte of it is written
            out.put(source)
        offsets.append(offset)
        sizes.append(size)
        cursor = offset + size
    return offsets, sizes


def _emit(
    file: BinaryIO, checked: list[_Checked], section_align: int, e_machine: int, style: Style
) -> None:
    """Write the object to ``file``: blobs first, then the tables, then the ELF header over the
    room left for it at the start."""
    out = _Output(file)
    out.put(_ZEROS[: _rodata_offset(section_align)])
    offsets, sizes = _put_blobs(out, checked)
    head, tail = _head_tail(checked, offsets, sizes, section_align, e_machine, style)
    out.put(tail)
    out.rewrite_start(head)


def object_bytes(
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> bytes:
    """The relocatable object embedding ``blobs``, in memory (see :func:`write_object`)."""
    e_machine = _machine(machine)
    checked, section_align = _check(blobs, style, align)
    buffer = io.BytesIO()
    _emit(buffer, checked, section_align, e_machine, style)
    return buffer.getvalue()


def write_object(
    path: FilePath,
    blobs: Iterable[Blob],
    *,
    machine: str | None = None,
    style: Style = "aoti",
    align: int = DEFAULT_ALIGN,
) -> None:
    """Write a relocatable ELF object embedding ``blobs`` to ``path``, atomically.

    ``machine`` is a key of :data:`MACHINES` (default: the host's); ``align`` applies to blobs
    without their own (1 packs them as ld does). Names and alignments are checked before the
    output is created, input files as they are read (each is opened once); any failure (an
    unreadable input, one changing size, a full disk) leaves no file behind.
    """
    path = as_path(path, "write_object() output")
    e_machine = _machine(machine)
    checked, section_align = _check(blobs, style, align)
    with atomic_path(path) as tmp, open(tmp, "r+b", buffering=0) as file:
        _emit(file, checked, section_align, e_machine, style)


#: where clang puts a translation unit's bundle (``CGCUDANV.cpp``: ``FatbinConstantName``)
HIP_FATBIN_SECTION = ".hip_fatbin"
#: clang's name for a module's wrapper record (``CGCUDANV.cpp``: ``__hip_fatbin_wrapper``)
HIP_WRAPPER_SYMBOL = "__hip_fatbin_wrapper"
#: the 64-bit absolute relocation clang writes at a record's ``binary`` slot, per machine
_SHF_WRITE = 0x1
_SHF_INFO_LINK = 0x40
_STT_OBJECT = 1
_HIP_SECTIONS = (b".symtab", b".strtab", b".shstrtab", HIP_FATBIN_SECTION.encode(),
                 HIP_WRAPPER_SECTION.encode(), b".rela" + HIP_WRAPPER_SECTION.encode(),
                 b".note.GNU-stack")


def _bundle_bytes(index: int, source: Content | FilePath) -> bytes:
    """Bundle ``index`` of a HIP object, read and checked: a whole plain or compressed bundle
    (:func:`fatbinkit.formats.offload_bundle.read_bundle`), nothing after it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, what = bytes(source), f"bundle {index}"
    else:
        path = as_path(source, f"bundle {index}")
        data, what = read_input(path), str(path)
    try:
        bundle = read_bundle(data)
    except FormatError as e:
        raise InvalidArgumentError(f"{what} is not a clang offload bundle: {e}") from e
    if bundle.stored_size != len(data):
        raise InvalidArgumentError(f"{what}: {len(data) - bundle.stored_size} bytes follow the "
                                   f"{bundle.stored_size}-byte bundle")
    return data


def hip_object_bytes(bundles: Sequence[Content | FilePath], *,
                     machine: str | None = None) -> bytes:
    """A relocatable ELF object holding ``bundles`` as clang's HIP codegen places one per
    translation unit (``CGCUDANV.cpp``, ``makeModuleCtorFunction``; ``../shared/ROCM.md``
    §1.3), so that linking it gives a library whose ``.hip_fatbin`` the bundle readers walk:

    - ``.hip_fatbin`` (``SHF_ALLOC``, align 4096): the bundles, each at a multiple of 4096;
    - ``.hipFatBinSegment`` (``SHF_WRITE|SHF_ALLOC``, align 8): per bundle one 24-byte
      ``HIPF`` version 1 record, its ``binary`` slot relocated (``R_X86_64_64``,
      ``R_AARCH64_ABS64``) to the bundle through ``.hip_fatbin``'s section symbol, and a local
      ``__hip_fatbin_wrapper`` object on it;
    - an empty ``.note.GNU-stack``, ``.symtab``, ``.strtab``, ``.shstrtab``.

    There is no module constructor: nothing calls ``__hipRegisterFatBinary`` for these
    records (clang's ``__hip_module_ctor`` does, with each kernel's host stub). Each bundle
    (bytes or a path) must be a whole plain or compressed bundle.
    """
    e_machine = _machine(machine)
    if not bundles:
        raise InvalidArgumentError("no bundles to embed")
    datas = [_bundle_bytes(n, b) for n, b in enumerate(bundles)]
    offsets: list[int] = []
    cursor = 0
    for data in datas:
        cursor = _align_up(cursor, BUNDLE_ALIGNMENT)
        offsets.append(cursor)
        cursor += len(data)
    fatbin_size = cursor
    record = HipWrapper(HIP_WRAPPER_MAGIC, HIP_WRAPPER_VERSION, 0, 0)
    records = record.pack() * len(datas)
    shstrtab, sh_names = _strtab(_HIP_SECTIONS)
    strtab, (wrapper_name,) = _strtab([HIP_WRAPPER_SYMBOL.encode()])
    fatbin_sym = 1  # .hip_fatbin's section symbol
    symbols = [elf.Symbol(0, 0, 0, elf.SHN_UNDEF, 0, 0),
               elf.Symbol(0, elf.st_info(elf.STB_LOCAL, elf.STT_SECTION), 0, 1, 0, 0),
               elf.Symbol(0, elf.st_info(elf.STB_LOCAL, elf.STT_SECTION), 0, 2, 0, 0)]
    symbols += [elf.Symbol(wrapper_name, elf.st_info(elf.STB_LOCAL, _STT_OBJECT), 0, 2,
                           n * HipWrapper.FORMAT.size, HipWrapper.FORMAT.size)
                for n in range(len(datas))]
    symtab = b"".join(sym.pack() for sym in symbols)
    relas = b"".join(
        elf.Rela(n * HipWrapper.FORMAT.size + HipWrapper.BINARY_OFFSET,
                 fatbin_sym << 32 | elf.ABS64[e_machine], offset).pack()
        for n, offset in enumerate(offsets))

    fatbin_offset = BUNDLE_ALIGNMENT  # as clang's objects have it
    segment_offset = _align_up(fatbin_offset + fatbin_size, 8)
    rela_offset = segment_offset + len(records)
    note_offset = rela_offset + len(relas)
    symtab_offset = _align_up(note_offset, 8)
    strtab_offset = symtab_offset + len(symtab)
    shstrtab_offset = strtab_offset + len(strtab)
    shdr_offset = _align_up(shstrtab_offset + len(shstrtab), 8)
    sh = elf.SectionHeader
    sections = [
        sh(0, elf.SHT_NULL, 0, 0, 0, 0, 0, 0, 0, 0),
        sh(sh_names[3], elf.SHT_PROGBITS, elf.SHF_ALLOC, 0, fatbin_offset, fatbin_size, 0, 0,
          BUNDLE_ALIGNMENT, 0),
        sh(sh_names[4], elf.SHT_PROGBITS, elf.SHF_ALLOC | _SHF_WRITE, 0, segment_offset,
          len(records), 0, 0, 8, 0),
        sh(sh_names[5], elf.SHT_RELA, _SHF_INFO_LINK, 0, rela_offset, len(relas), 5, 2, 8,
          elf.Rela.FORMAT.size),
        sh(sh_names[6], elf.SHT_PROGBITS, 0, 0, note_offset, 0, 0, 0, 1, 0),
        sh(sh_names[0], elf.SHT_SYMTAB, 0, 0, symtab_offset, len(symtab), 6, len(symbols), 8,
          elf.Symbol.FORMAT.size),
        sh(sh_names[1], elf.SHT_STRTAB, 0, 0, strtab_offset, len(strtab), 0, 0, 1, 0),
        sh(sh_names[2], elf.SHT_STRTAB, 0, 0, shstrtab_offset, len(shstrtab), 0, 0, 1, 0),
    ]
    ident = elf.ELFMAG + bytes([elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EV_CURRENT]) + bytes(9)
    header = elf.FileHeader(ident, elf.ET_REL, e_machine, elf.EV_CURRENT, 0, 0, shdr_offset, 0,
                            elf.FileHeader.FORMAT.size, 0, 0, elf.SectionHeader.FORMAT.size,
                            len(sections), 7)
    out = bytearray(shdr_offset)
    out[:elf.FileHeader.FORMAT.size] = header.pack()
    for data, offset in zip(datas, offsets, strict=True):
        out[fatbin_offset + offset:fatbin_offset + offset + len(data)] = data
    for at, blob in ((segment_offset, records), (rela_offset, relas), (symtab_offset, symtab),
                     (strtab_offset, strtab), (shstrtab_offset, shstrtab)):
        out[at:at + len(blob)] = blob
    out += b"".join(sec.pack() for sec in sections)
    return bytes(out)


def write_hip_object(path: FilePath, bundles: Sequence[Content | FilePath], *,
                     machine: str | None = None) -> None:
    """Write :func:`hip_object_bytes` to ``path``, atomically (nothing is left on failure)."""
    path = as_path(path, "write_hip_object() output")
    data = hip_object_bytes(bundles, machine=machine)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
