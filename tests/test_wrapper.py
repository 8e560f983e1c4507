"""The fatbin wrapper record: bytes written here with :mod:`struct` from NVIDIA's
``__fatBinC_Wrapper_t`` (``fatbinary_section.h``), then the records nvcc itself writes, read with
pyelftools: in a relocatable object (the data pointer a relocation at byte 8) and in a linked
library (the container's address)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from fatbin_kernels import system_tool

from fatbinkit import slim
from fatbinkit.errors import FormatError, ToolNotFoundError, TruncatedError
from fatbinkit.formats.wrapper import (
    CUDA_WRAPPER_MAGIC,
    CUDA_WRAPPER_PE_SECTION,
    CUDA_WRAPPER_SECTION,
    FatbinWrapper,
)

SOURCE = Path(__file__).parent / "data" / "axpy.cu"


def _record(magic: int, version: int, data: int, last: int = 0) -> bytes:
    """``{int magic; int version; const unsigned long long *data; void *filename_or_fatbins}``
    on x86-64: little-endian, 4 + 4 + 8 + 8 bytes, no padding."""
    return struct.pack("<IiQQ", magic, version, data, last)


def test_constants_are_nvidias() -> None:
    assert (CUDA_WRAPPER_MAGIC, CUDA_WRAPPER_SECTION) == (0x466243B1, ".nvFatBinSegment")
    assert CUDA_WRAPPER_SECTION[:8] == CUDA_WRAPPER_PE_SECTION
    assert (slim.WRAPPER_MAGIC, slim.WRAPPER_SECTION) == (CUDA_WRAPPER_MAGIC, CUDA_WRAPPER_SECTION)
    assert FatbinWrapper.FORMAT.size == 24 and FatbinWrapper.DATA_OFFSET == 8


@pytest.mark.parametrize(("version", "last"), [(1, 0), (2, 0x7F00_1234_5678)])
def test_round_trip(version: int, last: int) -> None:
    raw = _record(0x466243B1, version, 0x1122_3344_5566_7788, last)
    record = FatbinWrapper.unpack(raw)
    assert (record.magic, record.version, record.data, record.filename_or_fatbins) == (
        0x466243B1, version, 0x1122_3344_5566_7788, last)
    assert record.pack() == raw
    assert FatbinWrapper.unpack(memoryview(b"\xff" * 8 + raw)[8:], 8) == record
    assert raw[FatbinWrapper.DATA_OFFSET:][:8] == (0x1122_3344_5566_7788).to_bytes(8, "little")


def test_bad_magic_and_version_name_the_offset() -> None:
    with pytest.raises(FormatError, match=r"magic 0x48495046 .*\(at offset 0x30\)") as info:
        FatbinWrapper.unpack(_record(0x48495046, 1, 0), 0x30)  # HIP's magic: not CUDA's layout
    assert info.value.offset == 0x30
    for version in (0, 3, -1):
        with pytest.raises(FormatError, match=f"version {version} ") as info:
            FatbinWrapper.unpack(_record(0x466243B1, version, 0), 0x48)
        assert info.value.offset == 0x48
    with pytest.raises(TruncatedError, match="needs 24 bytes, only 23") as trunc:
        FatbinWrapper.unpack(_record(0x466243B1, 1, 0)[:23], 0x18)
    assert trunc.value.offset == 0x18


def _nvcc(tmp: Path, *args: str) -> Path:
    try:
        nvcc = system_tool("nvcc")
    except ToolNotFoundError:
        pytest.skip("nvcc is not installed")
    out = tmp / "out"
    subprocess.run([nvcc, *args, "-o", str(out), str(SOURCE)], check=True, capture_output=True)
    return out


def _records(section_data: bytes) -> list[FatbinWrapper]:
    size = FatbinWrapper.FORMAT.size
    assert section_data and len(section_data) % size == 0
    return [FatbinWrapper.unpack(section_data[at:at + size], at)
            for at in range(0, len(section_data), size)]


def test_nvcc_object(tmp_path: Path) -> None:
    """In ``nvcc -c`` output the data pointer is 0, and the relocation that fills it in lies at
    byte 8 of the record and points at ``.nv_fatbin``."""
    obj = _nvcc(tmp_path, "-c", "-arch=sm_90")
    with open(obj, "rb") as f:
        e = ELFFile(f)
        seg = e.get_section_by_name(CUDA_WRAPPER_SECTION)
        assert seg is not None
        data = seg.data()
        (record,) = _records(data)
        assert record.pack() == data
        assert record.magic == struct.unpack_from("<I", data)[0] == CUDA_WRAPPER_MAGIC
        assert record.version == struct.unpack_from("<i", data, 4)[0] == 1
        assert record.data == 0
        rela = e.get_section_by_name(".rela" + CUDA_WRAPPER_SECTION)
        assert isinstance(rela, RelocationSection)
        symtab = e.get_section(rela["sh_link"])
        targets = {r["r_offset"]: e.get_section(symtab.get_symbol(r["r_info_sym"])["st_shndx"]).name
                   for r in rela.iter_relocations()}
        assert targets[FatbinWrapper.DATA_OFFSET] == ".nv_fatbin"


@pytest.mark.skipif(shutil.which("ld") is None, reason="no linker")
def test_nvcc_shared_library(tmp_path: Path) -> None:
    """In a library linked by GNU ld (this file's module and the static runtime's), each slot
    holds what its ``RELATIVE`` relocation's addend says: the address of a container in
    ``.nv_fatbin`` (its magic ``50 ed 55 ba`` there)."""
    lib = _nvcc(tmp_path, "-shared", "-Xcompiler", "-fPIC", "-arch=sm_90")
    with open(lib, "rb") as f:
        e = ELFFile(f)
        seg, fat = e.get_section_by_name(CUDA_WRAPPER_SECTION), e.get_section_by_name(".nv_fatbin")
        assert seg is not None and fat is not None
        data, fat_data = seg.data(), fat.data()
        addends = {r["r_offset"]: r["r_addend"] for s in e.iter_sections()
                   if isinstance(s, RelocationSection) and s.is_RELA()
                   for r in s.iter_relocations()}
    records = _records(data)
    assert b"".join(r.pack() for r in records) == data
    for k, record in enumerate(records):
        at = 24 * k
        assert (record.magic, record.version) == struct.unpack_from("<Ii", data, at)
        slot = seg["sh_addr"] + at + FatbinWrapper.DATA_OFFSET
        assert record.data == addends[slot] == struct.unpack_from("<Q", data, at + 8)[0]
        start = record.data - fat["sh_addr"]
        assert start >= 0 and fat_data[start:start + 4] == bytes.fromhex("50ed55ba")


def test_slim_says_what_it_said() -> None:
    """slim reads the records through this module and refuses as before, naming the record."""
    from fatbinkit.errors import UnsupportedError
    from fatbinkit.slim import _wrapper_records

    good = _record(0x466243B1, 1, 0x4000)
    view = memoryview(b"\0" * 16 + good + _record(0x466243B1, 2, 0x5000, 7))
    assert [(w.slot, w.slot_offset, w.target) for w in _wrapper_records(view, "s", 16, 48, 0x100)
            ] == [(0x108, 24, 0x4000), (0x120, 48, 0x5000)]
    cases = {_record(0x12345678, 1, 0): "wrapper record 1 in s has magic 0x12345678, not "
                                        "0x466243b1: an unknown layout",
             _record(0x466243B1, 3, 0): "wrapper record 1 in s has version 3; only versions 1 "
                                        "and 2 are known"}
    for bad, message in cases.items():
        with pytest.raises(UnsupportedError) as info:
            _wrapper_records(memoryview(good + bad), "s", 0, 48, 0)
        assert str(info.value) == message
    with pytest.raises(UnsupportedError) as info:
        _wrapper_records(memoryview(good * 2), "s", 0, 40, 0)
    assert str(info.value) == "s of 40 bytes is not a whole number of 24-byte wrapper records"
