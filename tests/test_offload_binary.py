"""LLVM OffloadBinary blobs (fatbinkit.formats.offload_binary), written here by a small writer
that follows OffloadBinary::write (and clang 19's version 1, whose bytes ROCM.md §1.4 records),
independently of the parser."""

from __future__ import annotations

import struct
import zlib

import pytest
import zstandard

from fatbinkit.errors import (
    DecompressionError,
    FormatError,
    InvalidArgumentError,
    TruncatedError,
    UnsupportedError,
)
from fatbinkit.formats.codec import DecompressionBudget
from fatbinkit.formats.offload_binary import (
    OFFLOAD_BINARY_MAGIC,
    ImageKind,
    OffloadBinaryHeader,
    image_kind_name,
    is_offload_binary,
    offload_kind_name,
    read_offload_binaries,
)

BC = b"BC\xc0\xde" + bytes(range(200))
ELF = b"\x7fELF" + b"gfx942" * 50

Image = tuple[int, int, dict[str, str], bytes]  # image kind, offload kind, strings, image


def blob(images: list[Image], version: int = 3) -> bytes:
    """OffloadBinary::write's layout: header, entries, string entries, string table, padding
    to 8, images, padding to 8. Version 1 has one entry and 16-byte string entries."""
    head = 40 if version >= 3 else 32
    pair = 16 if version == 1 else 24
    table = bytearray(b"\0")
    def add(text: str) -> int:
        at = len(table)
        table.extend(text.encode() + b"\0")
        return at
    nstrings = sum(len(s) for _, _, s, _ in images)
    strtab_at = head + 40 * len(images) + pair * nstrings
    pairs = bytearray()
    for _, _, strings, _ in images:
        for key, value in strings.items():
            fields = [strtab_at + add(key), strtab_at + add(value)]
            if version > 1:
                fields.append(len(value.encode()))
            pairs += struct.pack(f"<{len(fields)}Q", *fields)
    data_at = -(-(strtab_at + len(table)) // 8) * 8
    size = -(-(data_at + sum(len(i) for *_, i in images)) // 8) * 8
    entries, string_at, image_at = bytearray(), head + 40 * len(images), data_at
    for kind, producer, strings, image in images:
        entries += struct.pack("<HHIQQQQ", kind, producer, 0, string_at, len(strings),
                               image_at, len(image))
        string_at += pair * len(strings)
        image_at += len(image)
    word = 40 if version == 1 else len(images)
    header = struct.pack("<4sIQQQ", OFFLOAD_BINARY_MAGIC, version, size, head, word)
    if version >= 3:
        header += struct.pack("<Q", 0)
    out = header + entries + pairs + table
    out += bytes(data_at - len(out)) + b"".join(i for *_, i in images)
    return out + bytes(size - len(out))


def compressed(plain: bytes, method: str) -> bytes:
    """OffloadBinary::write with compression: the header kept, InflatedSize set, the rest
    compressed, padded to 8."""
    body = plain[40:]
    packed = zlib.compress(body) if method == "zlib" else zstandard.ZstdCompressor().compress(body)
    header = bytearray(plain[:40])
    header[8:16] = struct.pack("<Q", 40 + len(packed))
    header[32:40] = struct.pack("<Q", len(plain))
    out = bytes(header) + packed
    return out + bytes(-len(out) % 8)


HIP_STRINGS = {"triple": "amdgcn-amd-amdhsa", "arch": "gfx942"}


def test_version_1_as_clang_19_writes_it() -> None:
    data = blob([(2, 3, {"arch": "gfx1100", "triple": "amdgcn-amd-amdhsa"}, BC)], version=1)
    (image,) = read_offload_binaries(data)
    assert image.header.header_size == 32 and image.header.entries_word == 40
    assert image.header.entries_count == 1
    assert (image.image_kind, image.offload_kind, image.arch) == ("llvm ir", "hip", "gfx1100")
    assert image.strings == {"arch": "gfx1100", "triple": "amdgcn-amd-amdhsa"}
    assert bytes(image.image) == BC and image.image.obj is data
    assert image.header.pack() == data[:32]
    assert "producer hip" in str(image)


def test_offload_kinds_by_version() -> None:
    # LLVM <= 20 numbered kinds, LLVM 21+ (still version 1) writes a mask: HIP is 3 or 4
    assert [offload_kind_name(k, 1) for k in (0, 1, 2, 3, 4, 8)] == \
        ["none", "openmp", "cuda", "hip", "hip", "sycl"]
    assert [offload_kind_name(k, 2) for k in (1, 2, 4, 8, 3, 0x20)] == \
        ["openmp", "cuda", "hip", "sycl", "openmp+cuda", "unknown(0x20)"]
    assert [image_kind_name(k) for k in ImageKind] == \
        ["<none>", "elf", "llvm ir", "cubin", "fatbinary", "ptx", "spir-v"]
    assert image_kind_name(99) == "<none>"


@pytest.mark.parametrize("version", [2, 3])
def test_several_entries_with_sized_values(version: int) -> None:
    images = [(1, 4, HIP_STRINGS, ELF), (2, 4, {"triple": "amdgcn-amd-amdhsa", "arch": "gfx90a",
                                                "feature": ""}, BC)]
    found = read_offload_binaries(blob(images, version))
    assert [(i.index, i.arch, i.offload_kind, i.image_kind) for i in found] == \
        [(0, "gfx942", "hip", "elf"), (1, "gfx90a", "hip", "llvm ir")]
    assert found[1].strings["feature"] == "" and bytes(found[1].image) == BC
    assert found[0].header.entries_count == 2


@pytest.mark.parametrize("method", ["zlib", "zstd"])
def test_compressed_version_3(method: str) -> None:
    plain = blob([(1, 4, HIP_STRINGS, ELF), (2, 8, {"triple": "spirv64"}, BC)])
    data = compressed(plain, method)
    found = read_offload_binaries(data)
    assert [bytes(i.image) for i in found] == [ELF, BC]
    assert found[0].header.compressed and found[1].offload_kind == "sycl"
    assert "compressed" in str(found[0])
    with pytest.raises(DecompressionError, match="budget"):
        read_offload_binaries(data, budget=DecompressionBudget(100))
    lying = bytearray(data)
    lying[32:40] = struct.pack("<Q", len(plain) + 1)
    with pytest.raises(DecompressionError, match="header records"):
        read_offload_binaries(bytes(lying))


def test_a_section_of_several_blobs() -> None:
    one = blob([(2, 3, HIP_STRINGS, BC[:13])], version=1)
    two = blob([(1, 4, HIP_STRINGS, ELF)], version=2)
    assert len(one) % 8 == 0
    region = b"\xff" * 8 + one + two + b"\xff"
    found = read_offload_binaries(region, 8, 8 + len(one) + len(two))
    assert [(i.offset, i.version) for i in found] == [(8, 1), (8 + len(one), 2)]
    assert is_offload_binary(region, 8) and not is_offload_binary(region)
    with pytest.raises(FormatError, match="bad offload binary magic"):
        read_offload_binaries(one + bytes(40))
    with pytest.raises(InvalidArgumentError):
        read_offload_binaries(one, 8, 4)


def test_hostile_headers_and_entries() -> None:
    good = blob([(1, 4, HIP_STRINGS, ELF)], version=2)

    def patched(at: int, fmt: str, value: int) -> bytes:
        raw = bytearray(good)
        struct.pack_into(fmt, raw, at, value)
        return bytes(raw)

    with pytest.raises(UnsupportedError, match="version 4"):
        read_offload_binaries(patched(4, "<I", 4))
    with pytest.raises(FormatError, match="version 0"):
        read_offload_binaries(patched(4, "<I", 0))
    with pytest.raises(TruncatedError, match="records"):
        read_offload_binaries(patched(8, "<Q", len(good) + 8))
    with pytest.raises(TruncatedError, match="entries"):
        read_offload_binaries(patched(24, "<Q", 1 << 60))
    with pytest.raises(TruncatedError, match="entries"):
        read_offload_binaries(patched(16, "<Q", 8))  # entries inside the header
    with pytest.raises(TruncatedError, match="image"):
        read_offload_binaries(patched(32 + 32, "<Q", len(good)))  # image size
    with pytest.raises(TruncatedError, match="strings"):
        read_offload_binaries(patched(32 + 16, "<Q", 1 << 62))  # string count
    first_key = struct.unpack_from("<Q", good, 72)[0]
    with pytest.raises(TruncatedError, match="runs past"):
        read_offload_binaries(patched(72 + 16, "<Q", 1 << 40))  # value size
    with pytest.raises(TruncatedError, match="no NUL"):
        read_offload_binaries(patched(72, "<Q", len(good) - 1))  # key in the tail padding
    raw = bytearray(good)
    raw[first_key] = 0xFF
    with pytest.raises(FormatError, match="not UTF-8"):
        read_offload_binaries(bytes(raw))


@pytest.mark.parametrize("version", [1, 2, 3])
def test_truncation_at_every_byte(version: int) -> None:
    data = blob([(1, 4, HIP_STRINGS, ELF[:24])], version)
    for cut in range(1, len(data)):
        with pytest.raises(FormatError):
            read_offload_binaries(data[:cut])
    packed = compressed(blob([(1, 4, HIP_STRINGS, ELF)]), "zstd")
    stored = OffloadBinaryHeader.unpack(packed).size  # the padding after it is not the blob's
    assert stored <= len(packed)
    for cut in range(1, stored):
        with pytest.raises(FormatError):
            read_offload_binaries(packed[:cut])


def test_header_record_round_trip() -> None:
    for version in (1, 2, 3):
        data = blob([(1, 4, HIP_STRINGS, ELF)], version)
        header = OffloadBinaryHeader.unpack(data)
        assert header.pack() == data[:header.header_size]
