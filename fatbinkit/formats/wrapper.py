"""The fatbin wrapper: the 24-byte record through which a host program registers its device code.

nvcc puts one record per fatbin container in ``.nvFatBinSegment`` (``.nvFatBi`` in a PE image's
eight-byte section names); the CUDA runtime's registration code (``__cudaRegisterFatBinary``)
finds each container only through the record's data pointer. The layout is NVIDIA's
``__fatBinC_Wrapper_t`` of ``fatbinary_section.h``::

    struct { int magic; int version; const unsigned long long *data; void *filename_or_fatbins; }

that is ``{u32 magic, i32 version, u64 data pointer, u64}`` on a 64-bit host. The last field is,
by the header's comment, an offline file name in version 1 (``FATBINC_VERSION``) and the array of
prelinked fatbins in version 2 (``FATBINC_LINK_VERSION``, what ``-rdc`` writes).
HIP's ``__hip_fatbin_wrapper`` has the same shape with its own magic and section
(:class:`HipWrapper`).

One :class:`struct.Struct` plus a frozen dataclass, used both to parse and to pack, so
``FatbinWrapper.unpack(b).pack() == b``. The data pointer is the value stored in the file: in a
relocatable object, or a library whose loader takes it from a RELA relocation's addend, that may
be 0 (what the relocation says is the caller's to read).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import FormatError, TruncatedError

if TYPE_CHECKING:
    from .elf import Buffer

__all__ = [
    "CUDA_WRAPPER_MAGIC",
    "CUDA_WRAPPER_PE_SECTION",
    "CUDA_WRAPPER_SECTION",
    "CUDA_WRAPPER_VERSIONS",
    "HIP_KPACK_MAGIC",
    "HIP_WRAPPER_MAGIC",
    "HIP_WRAPPER_PE_SECTION",
    "HIP_WRAPPER_SECTION",
    "HIP_WRAPPER_VERSION",
    "FatbinWrapper",
    "HipWrapper",
]

#: ``__fatBinC_Wrapper_t.magic`` (``FATBINC_MAGIC``)
CUDA_WRAPPER_MAGIC = 0x466243B1
#: ``FATBINC_VERSION`` and ``FATBINC_LINK_VERSION`` (relocatable device code, ``-rdc``)
CUDA_WRAPPER_VERSIONS = (1, 2)
#: the ELF (and PE object) section of the records
CUDA_WRAPPER_SECTION = ".nvFatBinSegment"
#: the same section in a PE image, whose section names are cut to eight bytes
CUDA_WRAPPER_PE_SECTION = ".nvFatBi"


@dataclass(frozen=True)
class FatbinWrapper:
    """One 24-byte wrapper record: ``data`` is the container's address as stored."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IiQQ")
    #: where the data pointer lies in the record (the slot a relocation rewrites)
    DATA_OFFSET: ClassVar[int] = 8

    magic: int
    version: int
    data: int
    filename_or_fatbins: int  # version 1: a file name (0 as nvcc writes it); 2: prelinked fatbins

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> FatbinWrapper:
        """Parse ``raw`` (the record's bytes); ``offset`` locates it in error messages. A magic
        other than CUDA's or a version nvcc does not write is refused: the layout is unknown."""
        if len(raw) < cls.FORMAT.size:
            raise TruncatedError(f"fatbin wrapper record needs {cls.FORMAT.size} bytes, only "
                                 f"{len(raw)} left", offset=offset)
        record = cls(*cls.FORMAT.unpack_from(raw, 0))
        if record.magic != CUDA_WRAPPER_MAGIC:
            raise FormatError(f"bad fatbin wrapper magic {record.magic:#010x} (expected "
                              f"{CUDA_WRAPPER_MAGIC:#010x})", offset=offset)
        if record.version not in CUDA_WRAPPER_VERSIONS:
            raise FormatError(f"unknown fatbin wrapper version {record.version} (known: "
                              f"{', '.join(map(str, CUDA_WRAPPER_VERSIONS))})", offset=offset)
        return record

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.magic, self.version, self.data, self.filename_or_fatbins)


#: ``__hipFatMAGIC2`` ("HIPF" as a little-endian u32): ROCm/clr ``hipamd/src/hip_platform.cpp``
#: and clang's ``CGCUDANV.cpp`` (``HIPFatMagic``)
HIP_WRAPPER_MAGIC = 0x48495046
#: rocm-kpack's rewritten magic ("HIPK"): the module's device code was moved out to a ``.kpack``
#: file and ``binary`` points at a ``.rocm_kpack_ref`` record (rocm-kpack
#: ``docs/multi_arch_packaging_with_kpack.md`` §3.4-3.5)
HIP_KPACK_MAGIC = 0x4B504948
#: the only version CLR registers (``hip_platform.cpp``: ``fbwrapper->version != 1`` fails)
HIP_WRAPPER_VERSION = 1
#: the ELF (and COFF object) section of the records
HIP_WRAPPER_SECTION = ".hipFatBinSegment"
#: the same section in a PE image (rocm-kpack ``coff/kpack_transform.py``:
#: ``SECTION_HIP_FATBIN_SEGMENT = ".hipFatB"``)
HIP_WRAPPER_PE_SECTION = ".hipFatB"


@dataclass(frozen=True)
class HipWrapper:
    """One 24-byte ``__hip_fatbin_wrapper`` record, CLR's ``__CudaFatBinaryWrapper``::

        struct { unsigned int magic; unsigned int version; void* binary; void* dummy1; };

    ``binary`` is the module's address as stored (0 in an object or a library that leaves
    the value to a relocation); ``kpack``: a rocm-kpack ``HIPK`` record."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IIQQ")
    #: where ``binary`` lies in the record (the slot a relocation rewrites)
    BINARY_OFFSET: ClassVar[int] = 8

    magic: int
    version: int
    binary: int
    dummy: int

    @property
    def kpack(self) -> bool:
        """Whether rocm-kpack moved the module's device code out (magic ``HIPK``)."""
        return self.magic == HIP_KPACK_MAGIC

    @classmethod
    def unpack(cls, raw: Buffer, offset: int = 0) -> HipWrapper:
        """Parse ``raw`` (the record's bytes); ``offset`` locates it in error messages. A magic
        other than ``HIPF``/``HIPK`` or a version other than 1 is refused, as CLR refuses to
        register it."""
        if len(raw) < cls.FORMAT.size:
            raise TruncatedError(f"HIP wrapper record needs {cls.FORMAT.size} bytes, only "
                                 f"{len(raw)} left", offset=offset)
        record = cls(*cls.FORMAT.unpack_from(raw, 0))
        if record.magic not in (HIP_WRAPPER_MAGIC, HIP_KPACK_MAGIC):
            raise FormatError(f"bad HIP wrapper magic {record.magic:#010x} (expected "
                              f"{HIP_WRAPPER_MAGIC:#010x} HIPF or {HIP_KPACK_MAGIC:#010x} HIPK)",
                              offset=offset)
        if record.version != HIP_WRAPPER_VERSION:
            raise FormatError(f"unknown HIP wrapper version {record.version} (CLR registers "
                              f"version {HIP_WRAPPER_VERSION} only)", offset=offset)
        return record

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.magic, self.version, self.binary, self.dummy)
