"""Static libraries: ``ar`` archives (GNU and BSD, regular and thin), member by member.

Layout (the ``ar`` format of GNU binutils and the BSDs, as ``ar(5)`` and binutils' ``bfd/archive.c``
describe it): the magic ``!<arch>\\n`` (``!<thin>\\n`` for a thin archive), then members, each a
60-byte header (name 16, date 12, uid 6, gid 6, mode 8, size 10 bytes, all ASCII, then
``\\x60\\n``) and ``size`` bytes of data padded to an even offset. Special members: ``/`` and
``/SYM64/`` (GNU symbol index), ``__.SYMDEF`` (BSD), ``//`` (GNU table of long names, each ending
``/\\n``). A GNU name is ``name/`` or ``/N`` (offset N in the long-name table); a BSD name
``#1/N`` puts the name in the first N bytes of the data. A thin archive stores no member data:
each name is the path of the member's file, relative to the archive's folder.

Nothing is trusted: sizes must be decimal and inside the file, names inside their table; a
malformed archive is a :class:`~fatbinkit.errors.FormatError` naming the member.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import FormatError, UnsupportedError
from ..infile import open_input

__all__ = ["AR_MAGIC", "HEADER", "THIN_MAGIC", "ArMember", "ar_members", "is_archive",
           "is_archive_file", "rewrite"]

AR_MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER = struct.Struct("16s12s6s6s8s10s2s")
_BSD_TABLES = {"__.SYMDEF", "__.SYMDEF SORTED", "__.SYMDEF_64", "__.SYMDEF_64 SORTED"}
_SYMBOL_TABLES = {b"/", b"/SYM64/", *(n.encode() for n in _BSD_TABLES)}


@dataclass(frozen=True)
class ArMember:
    """One member: its ``name``, where its header starts, where its data starts in the archive
    and its size (a BSD name stored in the data is not counted). For a thin archive's member,
    ``offset`` is -1: the data is the file ``name`` names."""

    name: str
    offset: int
    size: int
    thin: bool = False
    header: int = 0

    def __str__(self) -> str:
        where = "its own file" if self.thin else f"offset {self.offset:#x}"
        return f"{self.name}: {self.size} bytes at {where}"


@dataclass(frozen=True)
class _Record:
    """A member as it lies in the file: header offset, name field, the name (symbol indexes and
    the name table: their field), data offset, bytes stored, bytes of the data the name takes."""

    header: int
    field: bytes
    name: str
    start: int
    size: int  # as the header declares it (a thin archive's member: the size of its file)
    stored: int
    skip: int
    special: bool


def is_archive(data: bytes | bytearray | memoryview) -> bool:
    return bytes(data[:8]) in (AR_MAGIC, THIN_MAGIC)


def is_archive_file(path: os.PathLike[str]) -> bool:
    """Whether the regular file ``path`` starts like an archive."""
    with open_input(path) as f:
        return is_archive(f.read(8))


def ar_members(data: bytes | bytearray | memoryview) -> list[ArMember]:
    """The members of an archive, in order, symbol indexes and the long-name table left out."""
    view = memoryview(data).cast("B")
    thin = bytes(view[:8]) == THIN_MAGIC
    return [ArMember(r.name, -1 if thin else r.start + r.skip, r.size - r.skip, thin, r.header)
            for r in _records(view) if not r.special]


def _records(view: memoryview) -> list[_Record]:
    thin = bytes(view[:8]) == THIN_MAGIC
    if not thin and bytes(view[:8]) != AR_MAGIC:
        raise FormatError("not an ar archive (no !<arch> magic)", offset=0)
    out: list[_Record] = []
    names = b""
    pos = 8
    end = len(view)
    index = 0
    while pos < end:
        index += 1
        if pos + HEADER.size > end:
            raise FormatError(f"member {index}: header cut short ({end - pos} of "
                              f"{HEADER.size} bytes)", offset=pos)
        raw_name, _date, _uid, _gid, _mode, raw_size, magic = HEADER.unpack_from(view, pos)
        if magic != b"`\n":
            raise FormatError(f"member {index}: bad header end {magic!r}", offset=pos)
        size_text = raw_size.rstrip(b" ")
        if not size_text.isdigit():
            raise FormatError(f"member {index}: size {raw_size.decode('latin-1')!r} is not a "
                              "decimal number", offset=pos + 48)
        size = int(size_text)
        start = pos + HEADER.size
        name_field = raw_name.rstrip(b" ")
        table = name_field in _SYMBOL_TABLES or name_field == b"//"
        stored = size if not thin or table else 0  # thin: only the tables are in the file
        if start + stored > end:
            raise FormatError(f"member {index} ({name_field.decode('latin-1')}): its {size} "
                              f"bytes run past the end of the archive", offset=pos)
        if table:
            if name_field == b"//":
                names = bytes(view[start : start + size])
            out.append(_Record(pos, name_field, name_field.decode(), start, size, stored, 0,
                               True))
        else:
            name, skip = _name(name_field, names, view, start, stored, index, pos)
            special = name.rstrip("\0") in _BSD_TABLES  # a BSD index under a #1/N name
            out.append(_Record(pos, name_field, name, start, size, stored, skip, special))
        pos = start + stored + (stored & 1)
    return out


def rewrite(data: bytes | bytearray | memoryview, replaced: Mapping[int, bytes]) -> bytes:
    """The archive with the data of the members whose header offsets ``replaced`` maps
    replaced: headers keep every field but the size, members their order, names and padding,
    and the symbol index (GNU ``/``, ``/SYM64/``; BSD ``__.SYMDEF``) points at the members'
    new places. A thin archive holds no member data: :class:`UnsupportedError`."""
    view = memoryview(data).cast("B")
    if bytes(view[:8]) == THIN_MAGIC:
        raise UnsupportedError("a thin archive holds no member data: rewrite the objects it "
                               "names instead")
    records = _records(view)
    if set(replaced) - {r.header for r in records if not r.special}:
        raise FormatError("replaced member is not in the archive")
    moved: dict[int, int] = {}
    pos = 8
    bodies: list[bytes] = []
    for r in records:
        moved[r.header] = pos
        body = bytes(view[r.start : r.start + r.stored])
        if r.header in replaced:
            body = body[: r.skip] + replaced[r.header]
        bodies.append(body)
        pos += HEADER.size + len(body) + (len(body) & 1)
    out = bytearray(view[:8])
    for r, body in zip(records, bodies, strict=True):
        if r.special and r.name != "//":
            body = _index(body, r, moved)
        if len(str(len(body))) > 10:
            raise FormatError(f"member {r.name}: {len(body)} bytes do not fit an ar header")
        out += bytes(view[r.header : r.header + 48]) + str(len(body)).encode().ljust(10) + b"`\n"
        out += body + (b"\n" if len(body) & 1 else b"")
    return bytes(out)


def _index(body: bytes, r: _Record, moved: Mapping[int, int]) -> bytes:
    """A symbol index with its member offsets moved (the names and their order kept)."""
    def new(old: int) -> int:
        if old not in moved:
            raise FormatError(f"symbol index {r.name!r}: offset {old:#x} is no member's header")
        return moved[old]

    if r.name in ("/", "/SYM64/"):  # big-endian count, offsets, then the names
        word = 8 if r.name == "/SYM64/" else 4
        fmt = ">Q" if word == 8 else ">I"
        if len(body) < word:
            raise FormatError(f"symbol index {r.name!r} is cut short")
        (count,) = struct.unpack_from(fmt, body)
        if word + count * word > len(body):
            raise FormatError(f"symbol index {r.name!r}: {count} offsets run past its end")
        offsets = struct.unpack_from(f">{count}{fmt[1]}", body, word)
        return (body[:word] + struct.pack(f">{count}{fmt[1]}", *map(new, offsets))
                + body[word + count * word :])
    # BSD (ranlib): the name (in #1/N), a little-endian byte count of (string index, offset)
    # pairs, the pairs, then the strings
    skip = r.skip
    word = 8 if r.name.rstrip("\0").endswith("_64") else 4
    fmt = "<Q" if word == 8 else "<I"
    if len(body) < skip + word:
        raise FormatError(f"symbol index {r.name!r} is cut short")
    (nbytes,) = struct.unpack_from(fmt, body, skip)
    count = nbytes // (2 * word)
    if skip + word + nbytes > len(body):
        raise FormatError(f"symbol index {r.name!r}: {count} entries run past its end")
    pairs = list(struct.unpack_from(f"<{2 * count}{fmt[1]}", body, skip + word))
    pairs[1::2] = map(new, pairs[1::2])
    return (body[: skip + word] + struct.pack(f"<{2 * count}{fmt[1]}", *pairs)
            + body[skip + word + 2 * count * word :])


def _name(field: bytes, names: bytes, view: memoryview, start: int, size: int, index: int,
          at: int) -> tuple[str, int]:
    """A member's name and how many bytes of its data the name takes (BSD ``#1/N``)."""
    if field.startswith(b"#1/") and field[3:].isdigit():
        n = int(field[3:])
        if n > size:
            raise FormatError(f"member {index}: BSD name of {n} bytes is longer than its data",
                              offset=at)
        return bytes(view[start : start + n]).rstrip(b"\0").decode("utf-8", "replace"), n
    if field.startswith(b"/") and field[1:].isdigit():
        off = int(field[1:])
        stop = names.find(b"/\n", off)
        if off >= len(names) or stop < 0:
            raise FormatError(f"member {index}: long name at {off} is outside the name table "
                              f"({len(names)} bytes)", offset=at)
        return names[off:stop].decode("utf-8", "replace"), 0
    name = field[:-1] if field.endswith(b"/") else field
    if not name:
        raise FormatError(f"member {index}: empty name", offset=at)
    return name.decode("utf-8", "replace"), 0
