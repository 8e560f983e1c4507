"""Mutators that know AMD's formats: offload bundles, CCOB headers, OffloadBinary blobs, code
objects' ``e_flags``, ``.kd`` descriptors and msgpack metadata notes.

The locators read the layouts with plain ``struct`` (not fatbinkit's readers, which are under
test), from the same sources the readers cite: ``clang/lib/Driver/OffloadBundler.cpp``
(``BinaryFileHandler::ReadHeader``, ``CompressedOffloadBundle``), ``llvm/include/llvm/Object/
OffloadBinary.h``, ``llvm/include/llvm/BinaryFormat/ELF.h`` (``EF_AMDGPU_*``) and
``llvm/include/llvm/Support/AMDHSAKernelDescriptor.h``. A compressed bundle is opened
(:func:`_ccob_inner`): its plain bundle is inflated, mutated by the other edits, packed again
with sizes and hash that agree (mostly) or lie, so mutants reach the parser behind the hash.

Every choice comes from the ``random.Random`` passed in: the same seed gives the same mutant.
"""

from __future__ import annotations

import functools
import hashlib
import random
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import zstandard

from .mutate import _BINARY, INTERESTING, Field, _elf_fields, _field

__all__ = ["AMD", "amd_fields", "looks_amd"]

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
OFFLOAD_MAGIC = b"\x10\xff\x10\xad"
ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
_MAX_FIELDS = 4096
_CCOB = {1: (("uncompressed", 8, 4), ("hash", 12, 8)),
         2: (("total", 8, 4), ("uncompressed", 12, 4), ("hash", 16, 8)),
         3: (("total", 8, 8), ("uncompressed", 16, 8), ("hash", 24, 8))}
_CCOB_HEAD = {1: 20, 2: 24, 3: 32}
_OFFLOAD = (("version", 4, 4), ("size", 8, 8), ("entries_offset", 16, 8),
            ("entry_size_or_count", 24, 8), ("inflated", 32, 8))
_OFFLOAD_ENTRY = (("image_kind", 0, 2), ("offload_kind", 2, 2), ("flags", 4, 4),
                  ("string_offset", 8, 8), ("string_count", 16, 8), ("image_offset", 24, 8),
                  ("image_size", 32, 8))
# kernel_descriptor_t: group/private segment sizes, kernarg size, entry offset, rsrc3/1/2,
# kernel code properties, kernarg preload
_KD = (("group_segment_fixed_size", 0, 4), ("private_segment_fixed_size", 4, 4),
       ("kernarg_size", 8, 4), ("kernel_code_entry_byte_offset", 16, 8),
       ("compute_pgm_rsrc3", 44, 4), ("compute_pgm_rsrc1", 48, 4), ("compute_pgm_rsrc2", 52, 4),
       ("kernel_code_properties", 56, 2), ("kernarg_preload", 58, 2))


def _finds(data: bytes, magic: bytes, limit: int = 32) -> list[int]:
    out, at = [], data.find(magic)
    while at >= 0 and len(out) < limit:
        out.append(at)
        at = data.find(magic, at + 1)
    return out


def _amdgpu_elves(data: bytes) -> list[int]:
    return [at for at in _finds(data, ELF_MAGIC, 16)
            if data[at + 4:at + 6] == b"\x02\x01" and len(data) >= at + 64
            and struct.unpack_from("<H", data, at + 18)[0] == EM_AMDGPU]


def _bundle_fields(data: bytes, out: list[Field]) -> None:
    for at in _finds(data, BUNDLE_MAGIC):
        if at + 32 > len(data):
            break
        out.append(Field(at + 24, 8, "bundle.count"))
        (count,) = struct.unpack_from("<Q", data, at + 24)
        pos = at + 32
        for i in range(min(count, 64)):
            if pos + 24 > len(data):
                break
            out += [Field(pos, 8, f"bundle.entry[{i}].offset"),
                    Field(pos + 8, 8, f"bundle.entry[{i}].size"),
                    Field(pos + 16, 8, f"bundle.entry[{i}].id_length")]
            pos += 24 + min(struct.unpack_from("<Q", data, pos + 16)[0], 1 << 20)


def _ccob_fields(data: bytes, out: list[Field]) -> None:
    for at in _finds(data, CCOB_MAGIC):
        if at + 8 > len(data):
            break
        out += [Field(at + 4, 2, "ccob.version"), Field(at + 6, 2, "ccob.method")]
        version = struct.unpack_from("<H", data, at + 4)[0]
        out.extend(Field(at + o, w, f"ccob.{n}") for n, o, w in _CCOB.get(version, ())
                   if at + o + w <= len(data))


def _offload_fields(data: bytes, out: list[Field]) -> None:
    for at in _finds(data, OFFLOAD_MAGIC):
        if at + 40 > len(data):
            break
        out.extend(Field(at + o, w, f"offload.{n}") for n, o, w in _OFFLOAD)
        version, _, entries, count = struct.unpack_from("<IQQQ", data, at + 4)
        count = 1 if version == 1 else min(count, 8)
        for i in range(count):
            pos = at + entries + 40 * i
            if pos + 40 > len(data):
                break
            out.extend(Field(pos + o, w, f"offload.entry[{i}].{n}") for n, o, w in _OFFLOAD_ENTRY)
            strings, nstrings = struct.unpack_from("<QQ", data, pos + 8)
            width = 16 if version == 1 else 24
            for j in range(min(nstrings, 8)):
                s = at + strings + width * j
                if s + width > len(data):
                    break
                out += [Field(s, 8, f"offload.string[{j}].key"),
                        Field(s + 8, 8, f"offload.string[{j}].value")]
                if width == 24:
                    out.append(Field(s + 16, 8, f"offload.string[{j}].value_size"))


def _sections(data: bytes, base: int) -> list[tuple[int, int, int, int, int, int]]:
    """(type, addr, offset, size, link, index) of each section of the ELF at ``base``."""
    shoff = struct.unpack_from("<Q", data, base + 40)[0]
    shnum = struct.unpack_from("<H", data, base + 60)[0]
    out = []
    for i in range(min(shnum, 256)):
        at = base + shoff + 64 * i
        if at + 64 > len(data):
            break
        kind, _, addr, offset, size, link = struct.unpack_from("<IQQQQI", data, at + 4)
        out.append((kind, addr, offset, size, link, i))
    return out


def _descriptors(data: bytes, base: int) -> list[tuple[str, int]]:
    """(name, file offset) of each ``*.kd`` symbol's 64 bytes in the code object at ``base``."""
    sections = _sections(data, base)
    found = []
    for kind, _, offset, size, link, _ in sections:
        if kind != 2 or link >= len(sections):  # SHT_SYMTAB
            continue
        strtab = sections[link][2] + base
        for j in range(min(size // 24, 256)):
            sym = base + offset + 24 * j
            if sym + 24 > len(data):
                break
            name_at, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, sym)
            end = data.find(b"\0", strtab + name_at)
            name = data[strtab + name_at:end]
            if info & 0xF == 1 and name.endswith(b".kd") and shndx < len(sections):
                _, addr, soff, _, _, _ = sections[shndx]
                at = base + soff + value - addr
                if 0 <= at <= len(data) - 64:
                    found.append((name.decode("latin-1"), at))
    return found


def _code_object_fields(data: bytes, out: list[Field]) -> None:
    for base in _amdgpu_elves(data):
        if len(out) >= _MAX_FIELDS:
            return
        out += [Field(base + 48, 4, "amdgpu.e_flags"), Field(base + 7, 1, "amdgpu.osabi"),
                Field(base + 8, 1, "amdgpu.abi_version")]
        if base:  # the one at 0 is amd_fields' own
            _elf_fields(data, out, base)
        for name, at in _descriptors(data, base):
            out.extend(Field(at + o, w, f"{name}.{n}") for n, o, w in _KD)


def amd_fields(data: bytes) -> list[Field]:
    """The integer fields of every AMD structure found in ``data``, and a host ELF's at 0."""
    out: list[Field] = []
    _elf_fields(data, out)
    _bundle_fields(data, out)
    _ccob_fields(data, out)
    _offload_fields(data, out)
    _code_object_fields(data, out)
    return out[:_MAX_FIELDS]


def looks_amd(data: bytes) -> bool:
    """Whether ``data`` holds an AMD structure these mutators know."""
    return (BUNDLE_MAGIC in data or CCOB_MAGIC in data or OFFLOAD_MAGIC in data
            or bool(_amdgpu_elves(data)))


Mutation = Callable[[random.Random, bytearray, Sequence[bytes]], None]


def _amd_field(rng: random.Random, d: bytearray, seeds: Sequence[bytes]) -> None:
    """An AMD field set to an interesting value or nudged (as :func:`fuzz.mutate._field`)."""
    found = amd_fields(bytes(d))
    if not found:
        _field(rng, d, seeds)
        return
    f = rng.choice(found)
    if f.offset + f.width > len(d):
        return
    old = int.from_bytes(d[f.offset:f.offset + f.width], "little")
    value = (old + rng.choice((-8, -1, 1, 8, 16, 4096, len(d))) if rng.random() < 0.4
             else rng.choice((*INTERESTING, len(d), len(d) - f.offset, 4097, 1 << 30)))
    d[f.offset:f.offset + f.width] = (value % (1 << (8 * f.width))).to_bytes(f.width, "little")


# EF_AMDGPU_MACH values (some real, some not), feature bits (v3: 0x100 xnack, 0x200 sramecc;
# v4+: xnack 0x300 mask, sramecc 0xc00 mask) and the v6 generic version (bits 24-31)
_MACHS = (0, 0x20, 0x2C, 0x30, 0x3F, 0x40, 0x41, 0x4C, 0x51, 0x52, 0x55, 0x56, 0x58, 0x59,
          0x5F, 0x60, 0xFF)


def _eflags(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """A code object's ``e_flags`` (target), ``EI_OSABI`` or ``EI_ABIVERSION`` (code object
    version) set to another target, feature setting or version, real or not."""
    elves = _amdgpu_elves(bytes(d))
    if not elves:
        return
    base = rng.choice(elves)
    choice = rng.randrange(3)
    if choice == 0:
        flags = (rng.choice(_MACHS) | rng.choice((0, 0x100, 0x200, 0x300, 0x400, 0x800, 0xC00,
                                                  0xF00))
                 | (rng.choice((0, 0, 1, 2, 255)) << 24))
        struct.pack_into("<I", d, base + 48, flags)
    elif choice == 1:
        d[base + 8] = rng.choice((0, 1, 2, 3, 4, 5, 255))  # ABI version: v3 = 1 ... v6 = 4
    else:
        d[base + 7] = rng.choice((0, 64, 65, 66, 255))  # HSA, PAL, Mesa3D


_MSGPACK_MARKERS = (0xC0, 0xC1, 0xC2, 0xC3, 0xC4, 0xC7, 0xCB, 0xCF, 0xD3, 0xD9, 0xDB,
                    0xDC, 0xDD, 0xDE, 0xDF, 0x90, 0x9F, 0x80, 0x8F, 0xA0, 0xBF, 0xFF, 0x7F)
_LEAVES: tuple[Any, ...] = (None, True, -1, 0, 1 << 31, (1 << 64) - 1, -(1 << 63), 1.5, "",
                            "x" * 300, b"\0\1", [], {}, [[[]]], {"": None},
                            "amdgcn-amd-amdhsa--gfx942")


def _metadata_note(d: bytearray) -> tuple[int, int] | None:
    """(offset, size) of the first ``AMDGPU`` note's descriptor of type 32 in ``d``."""
    data = bytes(d)
    at = data.find(b"AMDGPU\0\0")
    while at >= 0:
        head = at - 12
        if head >= 0:
            namesz, descsz, kind = struct.unpack_from("<III", data, head)
            if namesz == 7 and kind == 32 and at + 8 + descsz <= len(data):
                return at + 8, descsz
        at = data.find(b"AMDGPU\0\0", at + 1)
    return None


def _poke(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """``value`` with one leaf (or key) replaced, removed or wrapped."""
    if isinstance(value, dict) and value and depth < 8:
        key = rng.choice(list(value))
        copy = dict(value)
        action = rng.randrange(6)
        if action == 0:
            del copy[key]
        elif action == 1:
            copy[rng.choice(_LEAVES[5:9])] = copy.pop(key)  # a key of another type
        else:
            copy[key] = _poke(rng, value[key], depth + 1)
        return copy
    if isinstance(value, list) and value and depth < 8:
        i = rng.randrange(len(value))
        copy = list(value)
        if rng.random() < 0.2:
            del copy[i]
        elif rng.random() < 0.1:
            copy += copy[:1] * rng.choice((1, 16))
        else:
            copy[i] = _poke(rng, value[i], depth + 1)
        return copy
    return rng.choice(_LEAVES)


def _msgpack(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """The metadata note's msgpack: a type marker poked into it, or the map decoded, a leaf
    changed (type, size, a key removed...), encoded again and padded with a ``.pad`` string to
    the note's size (or the note shrunk, its size field set)."""
    note = _metadata_note(d)
    if note is None:
        return
    at, size = note
    if rng.random() < 0.4:
        d[at + rng.randrange(max(size, 1))] = rng.choice(_MSGPACK_MARKERS)
        return
    try:
        value = msgpack.unpackb(bytes(d[at:at + size]), raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException):  # an earlier edit broke it
        return
    for _ in range(rng.choice((1, 1, 2, 4))):
        value = _poke(rng, value)
    packed = msgpack.packb(value, use_bin_type=True)
    if len(packed) > size:
        return
    if isinstance(value, dict) and rng.random() < 0.8:
        for overhead in range(4, 12):
            n = size - len(packed) - overhead
            if n >= 0:
                padded = msgpack.packb({**value, ".pad": "p" * n}, use_bin_type=True)
                if len(padded) == size:
                    packed = padded
                    break
    d[at:at + len(packed)] = packed
    if len(packed) < size:  # the note shrinks: its size field says so, zeros follow
        d[at + len(packed):at + size] = bytes(size - len(packed))
        struct.pack_into("<I", d, at - 8 - 12 + 4, len(packed))


@functools.cache
def _bomb_frame(size: int) -> bytes:
    """A zstd frame of a plain bundle's magic, a count of 0 and ``size`` zeros (streamed: the
    zeros are never all in memory)."""
    c = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    parts = [c.compress(BUNDLE_MAGIC + bytes(8))]
    for _ in range(size >> 20):
        parts.append(c.compress(chunk))
    parts.append(c.flush())
    return b"".join(parts)


def _ccob_at(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, version, stored size) of each CCOB v2/v3 with a total size in ``data``."""
    out = []
    for at in _finds(data, CCOB_MAGIC, 8):
        if at + 32 > len(data):
            continue
        version = struct.unpack_from("<H", data, at + 4)[0]
        if version == 2:
            total = struct.unpack_from("<I", data, at + 8)[0]
        elif version == 3:
            total = struct.unpack_from("<Q", data, at + 8)[0]
        else:
            continue
        if _CCOB_HEAD[version] <= total <= len(data) - at:
            out.append((at, version, total))
    return out


def _pack_ccob(rng: random.Random, version: int, method: int, inner: bytes, packed: bytes,
               inflated_size: int) -> bytes:
    digest = struct.unpack("<Q", hashlib.md5(inner).digest()[:8])[0]
    if rng.random() < 0.1:
        digest ^= 1 << rng.randrange(64)
    uncompressed = inflated_size
    if rng.random() < 0.15:
        uncompressed = rng.choice((0, 1, inflated_size - 1, inflated_size + 1, (1 << 32) - 1,
                                   1 << 31, 1 << 40))
    total = _CCOB_HEAD[version] + len(packed)
    if rng.random() < 0.1:
        total = rng.choice((0, 1, total - 1, total + 1, 1 << 31))
    if version == 2:
        head = struct.pack("<4sHHIIQ", CCOB_MAGIC, 2, method, total % (1 << 32),
                           uncompressed % (1 << 32), digest)
    else:
        head = struct.pack("<4sHHQQQ", CCOB_MAGIC, 3, method, total % (1 << 64),
                           uncompressed % (1 << 64), digest)
    return head + packed


def _replace(d: bytearray, at: int, old: int, new: bytes) -> None:
    """Put ``new`` where ``old`` bytes were; zeros fill a shorter one (the room a section had:
    zeros between bundles are padding), a longer one grows ``d``."""
    d[at:at + old] = new + bytes(max(old - len(new), 0))


def _ccob_inner(rng: random.Random, d: bytearray, seeds: Sequence[bytes]) -> None:
    """A compressed bundle opened: its plain bundle inflated, mutated by the other AMD edits,
    compressed again (zstd or zlib, the method field to match or not), its header written with
    sizes and hash that agree, mostly."""
    found = _ccob_at(bytes(d))
    if not found:
        return
    at, version, total = rng.choice(found)
    method = struct.unpack_from("<H", d, at + 6)[0]
    payload = bytes(d[at + _CCOB_HEAD[version]:at + total])
    try:
        if method == 1:
            inner = zstandard.ZstdDecompressor().decompress(payload, max_output_size=16 << 20)
        else:
            inner = zlib.decompress(payload)
    except (zstandard.ZstdError, zlib.error):  # an earlier edit broke it: nothing to open
        return
    mutated = bytearray(inner)
    for _ in range(rng.choice((1, 1, 2))):
        rng.choice(_INNER)(rng, mutated, seeds)
    inner = bytes(mutated)
    method = rng.choice((1, 1, 0)) if rng.random() < 0.9 else rng.choice((2, 0xFFFF))
    packed = zlib.compress(inner, 9) if method == 0 else zstandard.ZstdCompressor(
        level=19).compress(inner)
    if rng.random() < 0.05:  # a frame cut short
        packed = packed[:rng.randrange(len(packed) + 1)]
    _replace(d, at, total, _pack_ccob(rng, version, method, inner, packed, len(inner)))


def _bomb(rng: random.Random, d: bytearray, _: Sequence[bytes]) -> None:
    """A compressed bundle replaced by a small zstd frame that inflates to 16 MiB (within any
    budget), 512 MiB (past the default budget of a small input: 256 MiB + 64x) or 1 GiB (past
    the size limit), its header recording the true size, or a small one (the frame then lies).
    A bomb under the budget is inflated in full by each command: 200 MiB ones are
    tests/test_hip_hostile.py's, not the campaign's (each would be a "slow" input)."""
    found = _ccob_at(bytes(d))
    if not found:
        return
    at, version, total = rng.choice(found)
    size = rng.choice((16 << 20, 512 << 20, 1 << 30))
    frame = _bomb_frame(size)
    inflated = len(BUNDLE_MAGIC) + 8 + size
    recorded = inflated if rng.random() < 0.7 else rng.choice((4096, 1 << 20))
    head = _pack_ccob(random.Random(rng.random()), version, 1, b"", frame, recorded)
    _replace(d, at, total, head)


_INNER: tuple[Mutation, ...] = (*_BINARY[:2], _amd_field, _amd_field, _amd_field, _eflags,
                                _msgpack, _msgpack)
#: the edits of AMD inputs: the generic byte edits, AMD fields, whole-structure edits
AMD: tuple[Mutation, ...] = (*_BINARY[:2], _amd_field, _amd_field, _amd_field, _amd_field,
                             *_BINARY[5:10], _eflags, _msgpack, _msgpack, _ccob_inner,
                             _ccob_inner, _bomb)
