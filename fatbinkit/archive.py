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

import struct
from dataclasses import dataclass

from .errors import FormatError

__all__ = ["AR_MAGIC", "HEADER", "THIN_MAGIC", "ArMember", "ar_members", "is_archive"]

AR_MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HEADER = struct.Struct("16s12s6s6s8s10s2s")
_SYMBOL_TABLES = {b"/", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED", b"__.SYMDEF_64"}


@dataclass(frozen=True)
class ArMember:
    """One member: its ``name``, where its data starts in the archive and its size. For a thin
    archive's member, ``offset`` is -1: the data is the file ``name`` names."""

    name: str
    offset: int
    size: int
    thin: bool = False

    def __str__(self) -> str:
        where = "its own file" if self.thin else f"offset {self.offset:#x}"
        return f"{self.name}: {self.size} bytes at {where}"


def is_archive(data: bytes | bytearray | memoryview) -> bool:
    return bytes(data[:8]) in (AR_MAGIC, THIN_MAGIC)


def ar_members(data: bytes | bytearray | memoryview) -> list[ArMember]:
    """The members of an archive, in order, symbol indexes and the long-name table left out."""
    view = memoryview(data).cast("B")
    thin = bytes(view[:8]) == THIN_MAGIC
    if not thin and bytes(view[:8]) != AR_MAGIC:
        raise FormatError("not an ar archive (no !<arch> magic)", offset=0)
    out: list[ArMember] = []
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
        special = name_field in _SYMBOL_TABLES or name_field == b"//"
        stored = size if not thin or special else 0  # thin: only the tables are in the file
        if start + stored > end:
            raise FormatError(f"member {index} ({name_field.decode('latin-1')}): its {size} "
                              f"bytes run past the end of the archive", offset=pos)
        if name_field == b"//":
            names = bytes(view[start : start + size])
        elif not special:
            name, skip = _name(name_field, names, view, start, stored, index, pos)
            out.append(ArMember(name, -1 if thin else start + skip, size - skip, thin))
        pos = start + stored + (stored & 1)
    return out


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
