"""NVIDIA cubins (CUDA ELF): architecture, toolkit and per-function resources, no toolkit needed.

Reads what ``cuobjdump -res-usage`` reports (registers, stack, shared, local, constant banks) plus
the kernel parameter layout, from the ELF header, ``.note.nv.cuinfo``, ``.nv.compat``, ``.nv.info``
attribute records and the per-function ``.nv.shared.<f>`` / ``.nv.local.<f>`` /
``.nv.constant<N>.<f>`` sections. Layout leads: ``docs/inspect.md``; every figure is checked against
cuobjdump in the test suite. Only the little-endian ELF64 cubins that every CUDA >= 11 toolkit
writes are accepted.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import elf
from .arch import Arch
from .elf import SHT_NOTE, SHT_SYMTAB, STT_FUNC, Section
from .errors import (
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    NotFoundError,
    TruncatedError,
    UnsupportedError,
)
from .infile import as_content
from .nvinfo import (
    EIATTR_CBANK_PARAM_SIZE,
    EIATTR_CUDA_API_VERSION,
    EIATTR_FRAME_SIZE,
    EIATTR_KPARAM_INFO,
    EIATTR_MAX_STACK_SIZE,
    EIATTR_MAX_THREADS,
    EIATTR_MAXREG_COUNT,
    EIATTR_MIN_STACK_SIZE,
    EIATTR_REGCOUNT,
    EIATTR_REQNTID,
    EICOMPAT_ARCH_SPECIFIC,
    KPARAM_INFO,
    PER_FUNCTION_ATTRIBUTES,
    NvInfoRecord,
    parse_records,
)

__all__ = [
    "ABI_V1",
    "ABI_V2",
    "CUINFO",
    "CUINFO_HEAD",
    "EF_V1_ARCH_SPECIFIC",
    "EF_V2_ARCH_SPECIFIC",
    "SHT_CUDA_INFO",
    "STO_CUDA_ENTRY",
    "Cubin",
    "CubinFunction",
    "KernelParam",
    "cubin_arch",
    "cubin_toolkit",
    "is_cubin",
]

CUINFO = struct.Struct("<HHI")  # version, virtual SM, toolkit (major * 10 + minor)
CUINFO_HEAD = struct.Struct("<HH")  # version, virtual SM: what every cuinfo/cuver note holds

SHT_CUDA_INFO = 0x70000000
STO_CUDA_ENTRY = 0x10

# EI_ABIVERSION: 7 (ptxas <= 12.x for sm < 100), 8 (ptxas 13.x; 12.9 for sm >= 100).
ABI_V1 = 7
ABI_V2 = 8
EF_V1_ARCH_SPECIFIC = 0x800
EF_V2_ARCH_SPECIFIC = 0x8

_CONST_RE = re.compile(r"^\.nv\.constant(\d+)(?:\.(.*))?$")


@dataclass(frozen=True)
class KernelParam:
    """One kernel parameter from ``EIATTR_KPARAM_INFO``; offset/size in the parameter bank."""

    ordinal: int
    offset: int
    size: int
    log_alignment: int
    space: int
    cbank: int
    index: int

    def to_dict(self) -> dict[str, int]:
        return {"ordinal": self.ordinal, "offset": self.offset, "size": self.size}

    def __str__(self) -> str:
        """``param 1: 4 bytes at 0x8`` (offset in the parameter bank)."""
        return f"param {self.ordinal}: {self.size} bytes at {self.offset:#x}"


@dataclass(frozen=True)
class CubinFunction:
    """One function as ``cuobjdump -res-usage`` lists it, plus its parameters and raw attributes.

    ``constant`` maps bank number to the size of this function's ``.nv.constant<N>.<name>``
    section, in section order; ``registers`` is 0 where cuobjdump prints 0 (non-entry functions
    of sm_90+).
    """

    name: str
    entry: bool
    registers: int
    stack: int
    shared: int
    local: int
    constant: Mapping[int, int]
    texture: int = 0
    surface: int = 0
    sampler: int = 0
    params: tuple[KernelParam, ...] = ()
    param_size: int | None = None
    frame_size: int | None = None
    max_stack: int | None = None
    max_threads: tuple[int, ...] | None = None
    reqntid: tuple[int, ...] | None = None
    maxreg: int | None = None
    cuda_api_version: int | None = None
    attributes: tuple[NvInfoRecord, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``fatbinkit ls --resources --json``."""
        return {
            "name": self.name,
            "entry": self.entry,
            "registers": self.registers,
            "stack": self.stack,
            "shared": self.shared,
            "local": self.local,
            "constant": {str(bank): size for bank, size in self.constant.items()},
            "texture": self.texture,
            "surface": self.surface,
            "sampler": self.sampler,
            "params": [p.to_dict() for p in self.params],
        }

    def __str__(self) -> str:
        """``kernel axpy: 16 registers, 3 params (20 bytes), shared 0, local 0, stack 0``."""
        what = "kernel" if self.entry else "function"
        params = (f", {len(self.params)} param{'' if len(self.params) == 1 else 's'}"
                  + (f" ({self.param_size} bytes)" if self.param_size is not None else "")
                  if self.entry else "")
        return (f"{what} {self.name}: {self.registers} registers{params}, shared {self.shared}, "
                f"local {self.local}, stack {self.stack}")


@dataclass(frozen=True)
class Cubin:
    """A parsed cubin: what it runs on, who built it, and its functions in section order."""

    arch: Arch
    abi_version: int
    virtual_arch: Arch | None
    toolkit: tuple[int, int] | None
    elf_type: int
    e_flags: int
    functions: tuple[CubinFunction, ...]
    constant: Mapping[int, int]
    global_size: int
    compat: tuple[NvInfoRecord, ...] = field(default=(), repr=False)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Cubin:
        """Parse a cubin; any malformation raises :class:`~fatbinkit.errors.FormatError`."""
        as_content(data, "Cubin.from_bytes()")
        try:
            return _Reader(bytes(data)).cubin()
        except FatbinkitError:
            raise
        except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:  # defence in depth
            raise FormatError(f"malformed cubin: {e}") from e

    def function(self, name: str) -> CubinFunction:
        """The function called ``name``; :class:`~fatbinkit.errors.NotFoundError` (a
        ``KeyError``) naming the closest ones if absent."""
        if not isinstance(name, str):
            raise InvalidArgumentError(f"a function name is a str, not {type(name).__name__}")
        for f in self.functions:
            if f.name == name:
                return f
        raise NotFoundError.among("function", name, (f.name for f in self.functions),
                                  f"this {self.arch.sm} cubin")

    def __str__(self) -> str:
        """``cubin sm_90a, ABI 8, CUDA 13.0, 3 functions (2 kernels)``."""
        toolkit = f", CUDA {self.toolkit[0]}.{self.toolkit[1]}" if self.toolkit else ""
        n = len(self.functions)
        kernels = sum(f.entry for f in self.functions)
        return (f"cubin {self.arch.sm}, ABI {self.abi_version}{toolkit}, {n} "
                f"function{'' if n == 1 else 's'} ({kernels} kernel{'' if kernels == 1 else 's'})")


def cubin_toolkit(data: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """The CUDA release that built a cubin, as :attr:`Cubin.toolkit` gives it, from
    ``.note.nv.cuinfo`` alone where that records it: what a driver floor needs, without parsing
    every function."""
    try:
        info = _Reader(bytes(data)).cuinfo()
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:
        raise FormatError(f"malformed cubin: {e}") from e
    if info is not None and info[1] is not None:
        return info[1] // 10, info[1] % 10
    return Cubin.from_bytes(data).toolkit


def is_cubin(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts like a CUDA ELF (magic and ``e_machine`` EM_CUDA)."""
    return elf.machine(data) == elf.EM_CUDA


def cubin_arch(data: bytes | bytearray | memoryview) -> Arch:
    """The SM (``a`` included) a cubin runs on, from its ELF header and ``.nv.compat`` only."""
    head = _header(data)
    compat: tuple[NvInfoRecord, ...] = ()
    if head.abi_version == ABI_V2 and not head.flags & EF_V2_ARCH_SPECIFIC:
        for s in elf.sections(data, head):
            if s.name == ".nv.compat":
                compat = parse_records(elf.section_data(data, s), base=s.header.offset,
                                       compat=True)
    return _arch(head, compat)


def _header(data: bytes | bytearray | memoryview) -> elf.FileHeader:
    """The ELF header of a cubin: ELF64 little-endian, ``e_machine`` EM_CUDA."""
    head = elf.file_header(data)
    if head.machine != elf.EM_CUDA:
        raise FormatError(f"ELF machine {head.machine} is not EM_CUDA ({elf.EM_CUDA})", offset=18)
    return head


def _arch(head: elf.FileHeader, compat: Sequence[NvInfoRecord]) -> Arch:
    """The SM from ``e_flags`` (ABI v1: bits 0-7, v2: bits 8-15) and ``a`` from its flag bit or,
    for ptxas 13's ABI v2, ``.nv.compat``'s EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET."""
    flags = head.flags
    if head.abi_version == ABI_V1:
        number = flags & 0xFF
        specific = bool(flags & EF_V1_ARCH_SPECIFIC)
    elif head.abi_version == ABI_V2:
        number = (flags >> 8) & 0xFF
        specific = bool(flags & EF_V2_ARCH_SPECIFIC) or any(
            r.attribute == EICOMPAT_ARCH_SPECIFIC and r.value == 1 for r in compat)
    else:
        raise UnsupportedError(f"cubin ELF ABI version {head.abi_version} is not 7 or 8")
    if not 10 <= number <= 999:
        raise FormatError(f"cubin e_flags {flags:#x} name no valid SM ({number})", offset=0x30)
    return Arch(number, "a" if specific else "")


class _Reader:
    """Bounds-checked reading of one cubin's sections (through :mod:`fatbinkit.elf`)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.head = _header(data)
        self.abi_version = self.head.abi_version
        self.e_flags = self.head.flags
        elf.check_span(data, self.head.phoff, self.head.phnum * self.head.phentsize,
                       "program header table")
        self.sections = elf.sections(data, self.head)

    def body(self, s: Section) -> bytes:
        return elf.section_data(self.data, s)

    def symbols(self) -> list[tuple[str, int, int, int]]:
        """(name, st_info, st_other, st_shndx) for every symbol, index 0 included."""
        symtab = next((s.header for s in self.sections if s.header.type == SHT_SYMTAB), None)
        if symtab is None:
            return []
        if not 0 < symtab.link < len(self.sections):
            raise FormatError(f"symbol table links to missing section {symtab.link}",
                              offset=symtab.offset)
        names = self.sections[symtab.link]
        table = elf.StringTable(self.body(names))
        size = elf.Symbol.FORMAT.size
        out = []
        for pos in range(symtab.offset, symtab.offset + symtab.size - size + 1, size):
            sym = elf.Symbol.unpack_from(self.data, pos)
            name = table.string(sym.name, "symbol name", names.header.offset)
            out.append((name, sym.info, sym.other, sym.shndx))
        return out

    def cuinfo(self) -> tuple[int, int | None] | None:
        """(virtual SM, toolkit) from ``.note.nv.cuinfo`` (or the older ``.note.nv.cuver``, which
        has the virtual SM at the same place but no toolkit)."""
        for s in self.sections:
            if s.name not in (".note.nv.cuinfo", ".note.nv.cuver") or s.header.type != SHT_NOTE:
                continue
            body = self.body(s)
            if len(body) < elf.NoteHeader.FORMAT.size:
                raise TruncatedError("cuinfo note shorter than its header", offset=s.header.offset)
            note = elf.NoteHeader.unpack_from(body)
            desc = note.desc_offset
            size = min(note.descsz, CUINFO.size)
            if size < CUINFO_HEAD.size or desc + size > len(body):
                raise TruncatedError("cuinfo note descriptor is truncated",
                                     offset=s.header.offset)
            _version, vsm = CUINFO_HEAD.unpack_from(body, desc)
            if s.name != ".note.nv.cuinfo" or size < CUINFO_HEAD.size + 2:
                return vsm, None
            # some producers (cuBLASLt 13.0's sm_75 cubins) write a 6-byte descriptor: a u16
            # toolkit (0x0082 = 13.0), the rest padding
            fmt = "<I" if size == CUINFO.size else "<H"
            (toolkit,) = struct.unpack_from(fmt, body, desc + CUINFO_HEAD.size)
            return vsm, toolkit
        return None

    def cubin(self) -> Cubin:
        compat: tuple[NvInfoRecord, ...] = ()
        for s in self.sections:
            if s.name == ".nv.compat":
                compat = parse_records(self.body(s), base=s.header.offset, compat=True)
        arch = _arch(self.head, compat)
        info = self.cuinfo()
        virtual = None
        tk: int | None = None
        if info is not None:
            vsm, tk = info
            if 10 <= vsm <= 999:
                virtual = Arch(vsm, arch.suffix if vsm == arch.number else "")
        if virtual is None and self.abi_version == ABI_V1 and (self.e_flags >> 16) & 0xFF >= 10:
            vsm = (self.e_flags >> 16) & 0xFF  # ABI v1 keeps the virtual SM in e_flags too
            virtual = Arch(vsm, arch.suffix if vsm == arch.number else "")
        symbols = {(n, shndx): (i, other)
                   for i, (n, info, other, shndx) in enumerate(self.symbols())
                   if info & 0xF == STT_FUNC}
        per_symbol: dict[int, list[NvInfoRecord]] = {}
        per_section: dict[int, tuple[NvInfoRecord, ...]] = {}
        for s in self.sections:
            if s.header.type != SHT_CUDA_INFO:
                continue
            records = parse_records(self.body(s), base=s.header.offset)
            if s.name == ".nv.info":
                for r in records:
                    words = r.words()
                    if r.attribute in PER_FUNCTION_ATTRIBUTES and words:
                        per_symbol.setdefault(words[0], []).append(r)
            elif s.name.startswith(".nv.info."):
                per_section[s.header.info] = records
        by_name = {s.name: s for s in self.sections}
        module_banks: dict[int, int] = {}
        banks: dict[str, dict[int, int]] = {}
        global_size = 0
        for s in self.sections:
            m = _CONST_RE.match(s.name)
            if m and m.group(2) is None:
                module_banks[int(m.group(1))] = s.header.size
            elif m:
                banks.setdefault(m.group(2), {})[int(m.group(1))] = s.header.size
            elif s.name in (".nv.global", ".nv.global.init"):
                global_size += s.header.size
        functions = [
            self.function(s, symbols, banks, per_symbol, per_section, by_name)
            for s in self.sections if s.name.startswith(".text.")
        ]
        if tk is None:  # as cuobjdump does: fall back on the kernels' EIATTR_CUDA_API_VERSION
            tk = next((f.cuda_api_version for f in functions if f.cuda_api_version), None)
        toolkit = (tk // 10, tk % 10) if tk is not None else None
        return Cubin(arch, self.abi_version, virtual, toolkit, self.head.type, self.e_flags,
                     tuple(functions), module_banks, global_size, compat)

    def function(
        self,
        text: Section,
        symbols: dict[tuple[str, int], tuple[int, int]],
        banks: dict[str, dict[int, int]],
        per_symbol: dict[int, list[NvInfoRecord]],
        per_section: dict[int, tuple[NvInfoRecord, ...]],
        by_name: dict[str, Section],
    ) -> CubinFunction:
        name = text.name[len(".text."):]
        sym_index = symbols.get((name, text.index))
        entry = sym_index is not None and bool(sym_index[1] & STO_CUDA_ENTRY)
        module_records = per_symbol.get(sym_index[0], []) if sym_index is not None else []
        own = per_section.get(text.index, ())

        def sval(records: Iterable[NvInfoRecord], attribute: int) -> int | None:
            for r in records:
                words = r.words()
                if r.attribute == attribute and len(words) >= 2:
                    return int(words[1])
            return None

        def first(attribute: int) -> NvInfoRecord | None:
            return next((r for r in own if r.attribute == attribute), None)

        # cuobjdump: entries report EIATTR_REGCOUNT; other functions the count ptxas keeps in the
        # top byte of their .text sh_info (sm < 90 only; 0 on sm_90+, which store it nowhere else).
        registers = sval(module_records, EIATTR_REGCOUNT) if entry else None
        if registers is None:
            registers = text.header.info >> 24
        params = []
        for r in own:
            if r.attribute != EIATTR_KPARAM_INFO:
                continue
            if not isinstance(r.value, bytes) or len(r.value) != KPARAM_INFO.size:
                raise FormatError(f"KPARAM_INFO of {name} is not {KPARAM_INFO.size} bytes",
                                  offset=r.offset)
            index, ordinal, offset, w = KPARAM_INFO.unpack(r.value)
            params.append(KernelParam(ordinal, offset, (w >> 18) & 0x3FFF, w & 0xFF,
                                      (w >> 8) & 0xF, (w >> 12) & 0x1F, index))
        params.sort(key=lambda p: p.ordinal)
        constant = banks.get(name, {})
        shared = by_name.get(f".nv.shared.{name}")
        local = by_name.get(f".nv.local.{name}")
        max_threads = first(EIATTR_MAX_THREADS)
        reqntid = first(EIATTR_REQNTID)
        maxreg = first(EIATTR_MAXREG_COUNT)
        param_size = first(EIATTR_CBANK_PARAM_SIZE)
        api = first(EIATTR_CUDA_API_VERSION)
        return CubinFunction(
            name=name,
            entry=entry,
            registers=registers,
            stack=sval(module_records, EIATTR_MIN_STACK_SIZE) or 0,
            shared=shared.header.size if shared else 0,
            local=local.header.size if local else 0,
            constant=constant,
            params=tuple(params),
            param_size=param_size.value if param_size and isinstance(param_size.value, int)
            else None,
            frame_size=sval(module_records, EIATTR_FRAME_SIZE),
            max_stack=sval(module_records, EIATTR_MAX_STACK_SIZE),
            max_threads=max_threads.words() or None if max_threads else None,
            reqntid=reqntid.words() or None if reqntid else None,
            maxreg=maxreg.value if maxreg and isinstance(maxreg.value, int) else None,
            cuda_api_version=api.words()[0] if api and api.words() else None,
            attributes=tuple(module_records) + own,
        )
