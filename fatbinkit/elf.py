"""ELF64 little-endian records (file header, section header, symbol) and the constants we use.

Each record is one ``struct.Struct`` plus a frozen dataclass whose ``pack``/``unpack`` share it, so
the object writer (:mod:`fatbinkit.elfobj`) and the checks in :mod:`fatbinkit.inject` read and write
the same layout.
"""

from __future__ import annotations

import struct
from dataclasses import astuple, dataclass
from typing import ClassVar

from .errors import TruncatedError

ELFMAG = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
EV_CURRENT = 1

ET_REL = 1
ET_EXEC = 2
ET_DYN = 3

EM_X86_64 = 62
EM_AARCH64 = 183

SHT_NULL = 0
SHT_PROGBITS = 1
SHT_SYMTAB = 2
SHT_STRTAB = 3

SHF_WRITE = 0x1
SHF_ALLOC = 0x2
SHF_EXECINSTR = 0x4

SHN_UNDEF = 0
SHN_ABS = 0xFFF1

STB_LOCAL = 0
STB_GLOBAL = 1
STT_NOTYPE = 0
STT_SECTION = 3


@dataclass(frozen=True)
class FileHeader:
    """``Elf64_Ehdr``; ``ident`` is the 16-byte ``e_ident`` kept verbatim."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<16sHHIQQQIHHHHHH")

    ident: bytes
    type: int
    machine: int
    version: int
    entry: int
    phoff: int
    shoff: int
    flags: int
    ehsize: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(*astuple(self))

    @classmethod
    def unpack(cls, data: bytes | memoryview) -> FileHeader:
        """Parse the first 64 bytes of an ELF64 little-endian file."""
        if len(data) < cls.FORMAT.size:
            raise TruncatedError(
                f"ELF header needs {cls.FORMAT.size} bytes, got {len(data)}", offset=0
            )
        return cls(*cls.FORMAT.unpack_from(data, 0))

    @property
    def is_elf64_le(self) -> bool:
        return (
            self.ident[:4] == ELFMAG
            and self.ident[4] == ELFCLASS64
            and self.ident[5] == ELFDATA2LSB
        )


@dataclass(frozen=True)
class SectionHeader:
    """``Elf64_Shdr``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IIQQQQIIQQ")

    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(*astuple(self))


@dataclass(frozen=True)
class Symbol:
    """``Elf64_Sym``; ``info`` is ``bind << 4 | type``."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<IBBHQQ")

    name: int
    info: int
    other: int
    shndx: int
    value: int
    size: int

    def pack(self) -> bytes:
        return self.FORMAT.pack(*astuple(self))


def st_info(bind: int, kind: int) -> int:
    """Combine a symbol binding and type into ``st_info``."""
    return (bind << 4) | kind
