"""The fatbin wrapper: the 24-byte record through which a host program registers its device code.

nvcc puts one record per fatbin container in ``.nvFatBinSegment`` (``.nvFatBi`` in a PE image's
eight-byte section names); the CUDA runtime's registration code (``__cudaRegisterFatBinary``)
finds each container only through the record's data pointer. The layout is NVIDIA's
``__fatBinC_Wrapper_t`` of ``fatbinary_section.h``::

    struct { int magic; int version; const unsigned long long *data; void *filename_or_fatbins; }

that is ``{u32 magic, i32 version, u64 data pointer, u64}`` on a 64-bit host. The last field is,
by the header's comment, an offline file name in version 1 (``FATBINC_VERSION``) and the array of
prelinked fatbins in version 2 (``FATBINC_LINK_VERSION``, what ``-rdc`` writes).
HIP's ``__hip_fatbin_wrapper`` has the same shape with its own magic and section, for later.

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
    "FatbinWrapper",
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
