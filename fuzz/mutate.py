"""Structure-aware mutators: byte edits, and edits of the fields of the formats fatbinkit reads.

The field locators below walk fatbin containers, ELF64 headers, section headers, symbols and
``.nv.info`` records with plain ``struct`` reads of their own (not fatbinkit's readers, which are
what is under test), so that most mutants keep a valid outer structure and reach the deep code: a
size one past its bound, an offset at the end of the file, a count of 2**32 - 1, a compressed flag
on an uncompressed payload, a whitespace run of a million characters in a PTX parameter list.

Every choice comes from the ``random.Random`` passed in: the same seed gives the same mutant.
"""

from __future__ import annotations

import contextlib
import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lz4.block
import zstandard

__all__ = ["Field", "fields", "mutate"]

FATBIN_MAGIC = b"\x50\xed\x55\xba"
ELF_MAGIC = b"\x7fELF"
INTERESTING = (
    0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 72, 80, 127, 128, 255, 256, 4095, 4096,
    0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 32, 1 << 40,
    (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
)
_MAX_FIELDS = 4096  # fields located per input (enough to reach every header of a small library)


@dataclass(frozen=True)
class Field:
    """An integer field: where it is, its width in bytes, and what it is (for reports)."""

    offset: int
    width: int
    what: str


# -- field locators -------------------------------------------------------------------------------

_CONTAINER = (("version", 4, 2), ("header_size", 6, 2), ("payload_size", 8, 8))
_ENTRY = (("kind", 0, 2), ("version", 2, 2), ("header_size", 4, 4), ("size", 8, 8),
          ("compressed_size", 16, 4), ("options_offset", 20, 4), ("minor", 24, 2),
          ("major", 26, 2), ("sm", 28, 4), ("identifier_offset", 32, 4),
          ("identifier_size", 36, 4), ("flags", 40, 8), ("uncompressed_size", 56, 8))


def _fatbin_fields(data: bytes, out: list[Field]) -> None:
    at = data.find(FATBIN_MAGIC)
    while at >= 0 and len(out) < _MAX_FIELDS:
        out.extend(Field(at + off, w, f"container.{n}") for n, off, w in _CONTAINER)
        try:
            _, _, head, payload = struct.unpack_from("<IHHQ", data, at)
        except struct.error:
            return
        pos, end = at + head, min(at + head + payload, len(data))
        while end - pos >= 64 and len(out) < _MAX_FIELDS:
            out.extend(Field(pos + off, w, f"entry.{n}") for n, off, w in _ENTRY)
            hsize, size = struct.unpack_from("<IQ", data, pos + 4)
            (opt,) = struct.unpack_from("<I", data, pos + 20)
            if opt >= 64 and pos + opt + 8 <= end:
                out += [Field(pos + opt, 4, "entry.options.start"),
                        Field(pos + opt + 4, 4, "entry.options.size")]
            if hsize < 64 or pos + hsize + size > end:
                break
            pos += hsize + size
        at = data.find(FATBIN_MAGIC, at + 4)


_EHDR = (("e_type", 16, 2), ("e_machine", 18, 2), ("e_phoff", 32, 8), ("e_shoff", 40, 8),
         ("e_flags", 48, 4), ("e_ehsize", 52, 2), ("e_phentsize", 54, 2), ("e_phnum", 56, 2),
         ("e_shentsize", 58, 2), ("e_shnum", 60, 2), ("e_shstrndx", 62, 2), ("abi", 8, 1),
         ("class", 4, 1), ("data", 5, 1))
_SHDR = (("sh_name", 0, 4), ("sh_type", 4, 4), ("sh_flags", 8, 8), ("sh_addr", 16, 8),
         ("sh_offset", 24, 8), ("sh_size", 32, 8), ("sh_link", 40, 4), ("sh_info", 44, 4),
         ("sh_addralign", 48, 8), ("sh_entsize", 56, 8))
_PHDR = (("p_type", 0, 4), ("p_flags", 4, 4), ("p_offset", 8, 8), ("p_vaddr", 16, 8),
         ("p_filesz", 32, 8), ("p_memsz", 40, 8), ("p_align", 48, 8))
_SYM = (("st_name", 0, 4), ("st_info", 4, 1), ("st_shndx", 6, 2), ("st_value", 8, 8),
        ("st_size", 16, 8))
_SHT_SYMTAB, _SHT_DYNSYM, _SHT_NV_INFO, _SHT_NOTE = 2, 11, 0x70000000, 7


def _elf_fields(data: bytes, out: list[Field], base: int = 0) -> None:
    """ELF64 little-endian headers, section headers, symbols, ``.nv.info`` records, notes, of
    the ELF file that starts ``base`` bytes into ``data`` (a code object inside a bundle)."""
    if data[base:base + 4] != ELF_MAGIC or data[base + 4:base + 6] != b"\x02\x01" or (
            len(data) < base + 64):
        return
    out.extend(Field(base + off, w, f"ehdr.{n}") for n, off, w in _EHDR)
    phoff, shoff = struct.unpack_from("<QQ", data, base + 32)
    phnum, _, shnum = struct.unpack_from("<HHH", data, base + 56)
    for i in range(min(phnum, 64)):
        at = base + phoff + 56 * i
        if at + 56 > len(data):
            break
        out.extend(Field(at + off, w, f"phdr[{i}].{n}") for n, off, w in _PHDR)
    for i in range(min(shnum, 256)):
        at = base + shoff + 64 * i
        if at + 64 > len(data) or len(out) >= _MAX_FIELDS:
            break
        out.extend(Field(at + off, w, f"shdr[{i}].{n}") for n, off, w in _SHDR)
        kind, _, _, offset, size = struct.unpack_from("<IQQQQ", data, at + 4)
        offset += base
        if offset + size > len(data):
            continue
        if kind in (_SHT_SYMTAB, _SHT_DYNSYM):
            for j in range(min(size // 24, 64)):
                out.extend(Field(offset + 24 * j + o, w, f"sym[{i}.{j}].{n}") for n, o, w in _SYM)
        elif kind == _SHT_NV_INFO:  # records: format (1), attribute (1), size (2), value
            pos, end = offset, offset + size
            while end - pos >= 4 and len(out) < _MAX_FIELDS:
                out += [Field(pos, 1, "nvinfo.format"), Field(pos + 1, 1, "nvinfo.attribute"),
                        Field(pos + 2, 2, "nvinfo.size")]
                fmt = data[pos]
                pos += 4 + (struct.unpack_from("<H", data, pos + 2)[0] if fmt == 4 else 0)
        elif kind == _SHT_NOTE and size >= 12:
            out += [Field(offset, 4, "note.namesz"), Field(offset + 4, 4, "note.descsz"),
                    Field(offset + 8, 4, "note.type")]


def fields(data: bytes) -> list[Field]:
    """The integer fields of every structure found in ``data`` (fatbin anywhere, ELF at 0)."""
    out: list[Field] = []
    _elf_fields(data, out)
    _fatbin_fields(data, out)
    return out[:_MAX_FIELDS]


# -- mutations ------------------------------------------------------------------------------------

Mutation = Callable[[random.Random, bytearray, Sequence[bytes]], None]


def _span(rng: random.Random, n: int) -> tuple[int, int]:
    start = rng.randrange(n + 1)
    return start, min(n, start + rng.choice((1, 2, 4, 8, 16, 64, 256, 4096)))


def _flip(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    if d:
        d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)


def _byte(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    if d:
        d[rng.randrange(len(d))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))


def _field(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """Set a located field to an interesting value, or nudge it by a small delta."""
    found = fields(bytes(d))
    if not found:
        _byte(rng, d, _)
        return
    f = rng.choice(found)
    if f.offset + f.width > len(d):
        return
    old = int.from_bytes(d[f.offset : f.offset + f.width], "little")
    value = (old + rng.choice((-8, -1, 1, 8, 16, len(d))) if rng.random() < 0.4
             else rng.choice((*INTERESTING, len(d), len(d) - f.offset)))
    d[f.offset : f.offset + f.width] = (value % (1 << (8 * f.width))).to_bytes(f.width, "little")


def _insert(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    at = rng.randrange(len(d) + 1)
    d[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 8, 64))))


def _delete(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    start, stop = _span(rng, len(d))
    del d[start:stop]


def _duplicate(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    start, stop = _span(rng, len(d))
    at = rng.randrange(len(d) + 1)
    d[at:at] = d[start:stop] * rng.choice((1, 2, 16, 256))


def _truncate(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    del d[rng.randrange(len(d) + 1) :]


def _splice(rng: random.Random, d: bytearray, seeds: Sequence[bytes]) -> None:
    other = rng.choice(seeds)
    at, start = rng.randrange(len(d) + 1), rng.randrange(len(other) + 1)
    d[at:] = other[start:]


def _compress(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """Replace an entry's payload with an LZ4 block or a zstd frame (of its bytes, of zeros, or
    garbage) and set the flags and sizes to match, or not."""
    entries = [f.offset - 8 for f in fields(bytes(d)) if f.what == "entry.size"]
    if not entries:
        return
    pos = rng.choice(entries)
    hsize, size = struct.unpack_from("<IQ", d, pos + 4)
    start, stop = pos + hsize, pos + hsize + size
    if stop > len(d):
        return
    plain = bytes(d[start:stop]) if rng.random() < 0.5 else bytes(rng.choice((64, 1 << 16)))
    codec = rng.choice(("lz4", "zstd"))
    packed = (lz4.block.compress(plain, store_size=False) if codec == "lz4"
              else zstandard.ZstdCompressor().compress(plain))
    if rng.random() < 0.2:  # a corrupt frame
        packed = packed[: len(packed) // 2] + bytes(rng.randrange(256) for _ in range(8))
    stored = packed + bytes(-len(packed) % 8)
    d[start:stop] = stored
    flags = struct.unpack_from("<Q", d, pos + 40)[0] & ~0xA000
    flags |= 0x2000 if codec == "lz4" else 0x8000
    struct.pack_into("<Q", d, pos + 8, len(stored))
    struct.pack_into("<I", d, pos + 16, len(packed))
    struct.pack_into("<Q", d, pos + 40, flags)
    unpacked = len(plain) + rng.choice((0, 0, 0, -1, 1, 1 << 20))
    struct.pack_into("<Q", d, pos + 56, max(unpacked, 0))
    _fix_container(d, pos, len(stored) - size)


def _fix_container(d: bytearray, entry: int, grown: int) -> None:
    """Grow the payload size of the container holding ``entry`` by ``grown`` bytes."""
    at = bytes(d).rfind(FATBIN_MAGIC, 0, entry + 1)
    if at >= 0:
        (payload,) = struct.unpack_from("<Q", d, at + 8)
        struct.pack_into("<Q", d, at + 8, max(payload + grown, 0))


_PTX_PIECES = (
    " ", "\t", "\n", ",", "(", ")", "[", "]", "{", "}", ";", ".param", ".u32", ".u64", ".b8",
    ".align", ".ptr", ".entry", ".visible", ".func", ".target", ".version", ".address_size",
    "sm_90a", "sm_100f", "compute_", "//", "/*", "*/", "\"", "\\", "9" * 40, "\u00b2", "\udcff",
)


def _ptx(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """Text edits that target PTX scanning: long runs, many parameters, deep nesting, long
    names, unterminated comments and lists."""
    text = bytes(d)
    anchors = [i for i in (text.find(b"("), text.find(b".param"), text.find(b"{"),
                           text.find(b".target"), text.find(b".version")) if i >= 0]
    at = rng.choice(anchors) if anchors and rng.random() < 0.7 else rng.randrange(len(d) + 1)
    n = 10 ** rng.randrange(1, 7)  # up to a million
    choice = rng.randrange(6)
    if choice == 0:
        piece = rng.choice((" ", "\t", "\n", " \t\r\n")).encode() * n
    elif choice == 1:
        piece = rng.choice((b".param .u64 p, ", b".param .align 8 .b8 q[16], ")) * min(n, 200_000)
    elif choice == 2:
        piece = b"{" * min(n, 100_000) + b"}" * rng.randrange(2) * min(n, 100_000)
    elif choice == 3:
        piece = b"k" * n
    elif choice == 4:
        piece = rng.choice(_PTX_PIECES).encode("utf-8", "surrogateescape")
    else:
        piece = b"".join(rng.choice(_PTX_PIECES).encode("utf-8", "surrogateescape")
                         for _ in range(rng.randrange(1, 64)))
    d[at:at] = piece


_BINARY: tuple[Mutation, ...] = (_flip, _byte, _field, _field, _field, _insert, _delete,
                                 _duplicate, _truncate, _splice, _compress)
_TEXT: tuple[Mutation, ...] = (_ptx, _ptx, _ptx, _flip, _byte, _insert, _delete, _duplicate,
                               _truncate, _splice)


def mutate(rng: random.Random, data: bytes, seeds: Sequence[bytes], max_size: int) -> bytes:
    """One mutant of ``data``: one to four stacked mutations, cut to ``max_size`` bytes. Input
    holding an AMD structure (a bundle, a CCOB, an OffloadBinary, a code object) gets
    :data:`fuzz.amd.AMD`'s edits."""
    d = bytearray(data)
    from .amd import AMD, looks_amd  # AMD's mutators build on this module's

    text = not (data.startswith(ELF_MAGIC) or data.startswith(FATBIN_MAGIC))
    ops = AMD if looks_amd(data) else _TEXT if text else _BINARY
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        # a field out of range: that edit is skipped (deterministically), the others still apply
        with contextlib.suppress(struct.error, ValueError, IndexError, OverflowError):
            rng.choice(ops)(rng, d, seeds)
        if len(d) > max_size:
            del d[max_size:]
    return bytes(d)
