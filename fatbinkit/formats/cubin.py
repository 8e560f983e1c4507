"""NVIDIA cubins (CUDA ELF): architecture, toolkit and per-function resources, no toolkit needed.

Reads what ``cuobjdump -res-usage`` reports (registers, stack, shared, local, constant banks) plus
the kernel parameter layout, from the ELF header, ``.note.nv.cuinfo``, ``.nv.compat``, ``.nv.info``
attribute records and the per-function ``.nv.shared.<f>`` / ``.nv.local.<f>`` /
``.nv.constant<N>.<f>`` sections. Layout leads: ``docs/inspect.md``; every figure is checked against
cuobjdump in the test suite. Only the little-endian ELF64 cubins that every CUDA >= 11 toolkit
writes are accepted.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..errors import (
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    NotFoundError,
    TruncatedError,
    UnsupportedError,
)
from ..infile import as_content
from . import elf, native
from .arch import Arch
from .elf import SHT_NOTE, SHT_SYMTAB, STT_FUNC
from .nvinfo import (
    EIATTR_ANNOTATIONS,
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
    FMT_BVAL,
    FMT_HVAL,
    FMT_NVAL,
    FMT_SVAL,
    KPARAM_INFO,
    PER_FUNCTION_ATTRIBUTES,
    RECORD_HEAD,
    NvInfoRecord,
    parse_records,
    record_tuples,
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
    "TKINFO",
    "Cubin",
    "CubinFunction",
    "CubinOutline",
    "CubinProfile",
    "FunctionRow",
    "KernelParam",
    "compact_cubin",
    "cubin_arch",
    "cubin_extent",
    "cubin_outline",
    "cubin_profile",
    "cubin_toolkit",
    "function_code",
    "header_arch",
    "is_cubin",
]

if TYPE_CHECKING:
    from .elf import Buffer
    from .reader import Reader

CUINFO = struct.Struct("<HHI")  # version, virtual SM, toolkit (major * 10 + minor)
CUINFO_HEAD = struct.Struct("<HH")  # version, virtual SM: what every cuinfo/cuver note holds
# .note.nv.tkinfo's descriptor: a u32 (ptxas 12.x: the toolkit, major * 10 + minor; ptxas 13.x:
# 2, its toolkit then in .note.nv.cuinfo), a u32 0, then the offsets of the tool name, version,
# build and command line in the strings that follow (from the end of these six words)
TKINFO = struct.Struct("<IIIIII")

SHT_CUDA_INFO = 0x70000000
STO_CUDA_ENTRY = 0x10

# EI_ABIVERSION: 7 (ptxas <= 12.x for sm < 100), 8 (ptxas 13.x; 12.9 for sm >= 100).
ABI_V1 = 7
ABI_V2 = 8
# Where a cubin records the toolkit (its ptxas) that built it, in the order cuobjdump -elf reads
# it for its "toolkit=" (checked by patching each field: cuobjdump 13.5 prints what is there,
# tests/test_cubin_toolkit.py): ABI v1, the ELF header's e_version (ptxas 10.2, 11.8 and 12.9
# write 102, 118, 129 there; cuobjdump prints "toolkit=118"); ABI v2 (e_version is 1),
# .note.nv.cuinfo's toolkit field (ptxas 13.x), else .note.nv.tkinfo's first word (ptxas 12.9,
# whose .note.nv.cuver has no toolkit). No fatbin entry header field records it (its code
# version is [1, EI_ABIVERSION]). A value below 10 (ABI v2's e_version 1, ptxas 13's tkinfo 2)
# names no toolkit; the kernels' EIATTR_CUDA_API_VERSION is the last resort.
_NO_TOOLKIT_BELOW = 10
EF_V1_ARCH_SPECIFIC = 0x800
EF_V2_ARCH_SPECIFIC = 0x8

_CONST_RE = re.compile(r"^\.nv\.constant(\d+)(?:\.(.*))?$")

# Spill figures come from EIATTR_ANNOTATIONS (0x55): (type, offset) pairs, type 1 ("SpillRefill"
# in cuobjdump 13.5 -elf) at each spill STL / refill LDL of the function's .text. ptxas 12.6
# (12.6.20, its first release), 12.8, 12.9 (Triton's), 13.0 (nvcc), 13.4 (Triton's
# ptxas-blackwell) and 13.5 (pip) write one record per spilling function, none for a function
# that does not spill, and never annotate the STL/LDL of a real local array; ptxas 11.8
# (Debian's), 12.0, 12.4 and 12.5 (NVIDIA's pip wheels) write none for the same spilling kernels
# (tests/test_cubin.py builds them with ptxas 12.5 and 12.6). So the figures are 0 without a
# record only for cubins whose Cubin.toolkit is >= 12.6, else None. That toolkit is the ptxas
# that wrote the cubin (_NO_TOOLKIT_BELOW: where it is recorded), or, where none of those
# records it, its kernels' EIATTR_CUDA_API_VERSION, which is the ptxas's own version (ptxas
# 13.5 writes 135 for PTX 9.0, ptxas 12.6 writes 126 for PTX 8.4). cuobjdump -res-usage
# prints no spill figures (13.5 included): the oracle is ptxas -v.
_ANNOTATED_SINCE = 126
_SPILL_REFILL = 1
# Arches whose STL/LDL encoding was checked against nvdisasm 13.1 and whose summed widths equal
# ptxas 13.0's -v figures, and sm_70/sm_72 (ptxas 12.6) and sm_101 (ptxas 12.9), which CUDA 13
# no longer builds (tests/test_cubin.py): a 128-bit instruction read as two little-endian u64,
# opcode = lo & 0xFFF (STL 0x387, also 0x987 on sm_120; LDL 0x983), width code = (hi >> 9) & 7:
# U8 0, S8 1, U16 2, S16 3, 32-bit 4, .64 5, .128 6 (7 never seen).
_SPILL_ARCHES = frozenset({70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 110, 120, 121})
_STL = frozenset({0x387, 0x987})
_LDL = 0x983
_WIDTHS = (1, 1, 2, 2, 4, 8, 16)
_INSTRUCTION = struct.Struct("<QQ")
# Maxwell and Pascal (sm_50 to sm_62; checked against ptxas 12.6's -v on each): 64-bit
# instructions, the first of each 32-byte bundle a control word (never annotated); one read as a
# little-endian u64, opcode = (w >> 48) & 0xFFF8 (STL 0xEF50, LDL 0xEF40), width code =
# (w >> 48) & 7, the same codes. ptxas annotates real spills only here too.
_SPILL_ARCHES_64 = frozenset({50, 52, 53, 60, 61, 62})
_STL_64 = 0xEF50
_LDL_64 = 0xEF40
_WORD = struct.Struct("<Q")
_T = TypeVar("_T")


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
    of sm_90+). ``size`` is the byte size of its ``.text.<name>`` section (the SASS code).
    ``spill_stores`` / ``spill_loads`` are the bytes ``ptxas -v`` prints ("N bytes spill stores,
    M bytes spill loads"): the summed widths of the STL / LDL instructions that the function's
    EIATTR_ANNOTATIONS record marks as spills (local-array accesses are not counted). They are
    None where the cubin does not record them: a toolkit older than 12.6 or not named by the
    cubin's note, an arch whose encoding is not checked (before sm_50), or an annotation that
    does not check out (an offset outside the section or not 16-byte aligned, an instruction
    that is not STL/LDL, an unknown annotation type); nothing is raised for those.
    ``raw_attributes`` holds this function's attribute records as ``(file offset,
    bytes)`` runs (its ``.nv.info`` records, then its ``.nv.info.<name>`` section), parsed into
    :attr:`attributes` when first read: a library has millions of records that listing its
    resources never looks at.
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
    size: int = 0
    spill_stores: int | None = None
    spill_loads: int | None = None
    raw_attributes: tuple[tuple[int, bytes], ...] = field(default=(), repr=False)

    @functools.cached_property
    def attributes(self) -> tuple[NvInfoRecord, ...]:
        """Every attribute record of this function, module-wide ones first."""
        return tuple(r for at, raw in self.raw_attributes for r in parse_records(raw, base=at))

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
            "size": self.size,
            "spill_stores": self.spill_stores,
            "spill_loads": self.spill_loads,
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
        data = data if type(data) is bytes else bytes(data)
        try:
            walked = _walked(data, _FUNCTIONS)
            if walked is None:
                return _Reader(data).cubin()
            head, arch = walked.head, walked.arch
            return cls(arch, head.abi_version, _virtual(arch, head, walked.vsm),
                       _toolkit(walked.toolkit), head.type, head.flags, tuple(walked.items),
                       walked.banks, walked.global_size, walked.compat)
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


@dataclass(frozen=True)
class CubinOutline:
    """What a load decision needs from a cubin (:func:`fatbinkit.compat.image_from_cubin`): its
    arch, ELF ABI, producer toolkit, entry kernel names, and whether it has module-scope
    variables (``.nv.global``, a module constant bank). Read from the ELF header, the section
    and symbol tables and the notes, not from the attribute records (a tenth of the parse)."""

    arch: Arch
    abi_version: int
    toolkit: tuple[int, int] | None
    kernels: frozenset[str]
    variables: bool


def cubin_outline(data: bytes | bytearray | memoryview) -> CubinOutline:
    """The :class:`CubinOutline` of a cubin, equal to what :meth:`Cubin.from_bytes` gives
    (a cubin whose note records no toolkit is parsed in full, for its kernels' CUDA API
    version). Attribute records are not read, so a corrupt one is not reported here."""
    try:
        data = data if type(data) is bytes else bytes(data)
        walked = _walked(data, _OUTLINE)
        if walked is not None:
            return CubinOutline(walked.arch, walked.head.abi_version, _toolkit(walked.toolkit),
                                frozenset(walked.items), bool(walked.global_size or walked.banks))
        reader = _Reader(data)
        arch = _arch(reader.head, reader.compat())
        _vsm, tk = reader.virtual(arch)
        if tk is None:
            c = Cubin.from_bytes(data)
            return CubinOutline(c.arch, c.abi_version, c.toolkit,
                                frozenset(f.name for f in c.functions if f.entry),
                                bool(c.global_size or c.constant))
        module_banks, _banks, global_size = reader.module_data()
        return CubinOutline(arch, reader.abi_version, _toolkit(tk), reader.kernels(),
                            bool(global_size or module_banks))
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:
        raise FormatError(f"malformed cubin: {e}") from e


#: a function as ``diff`` and ``gate`` compare it (:func:`cubin_profile`): name, entry,
#: registers, stack, shared, local, constant banks ``((bank, size), ...)``, spill stores, spill
#: loads, size
FunctionRow = tuple[str, bool, int, int, int, int, tuple[tuple[int, int], ...], int | None,
                    int | None, int]


class CubinProfile(NamedTuple):
    """A cubin as ``diff`` compares it: :class:`Cubin`'s arch, ELF ABI and producer toolkit,
    whether it has module-scope variables, and a :data:`FunctionRow` per function."""

    arch: Arch
    abi_version: int
    toolkit: tuple[int, int] | None
    variables: bool
    rows: list[FunctionRow]


def cubin_profile(data: bytes | bytearray | memoryview) -> CubinProfile:
    """The :class:`CubinProfile` of a cubin, equal to what :meth:`Cubin.from_bytes` gives
    (``rows`` from its :attr:`Cubin.functions`), the same errors raised. The C walk makes the
    rows without a :class:`CubinFunction` (its attribute records and kernel parameters): a
    fifth of the walk's time on libtorch_cuda.so, which ``diff`` reads twice."""
    as_content(data, "cubin_profile()")
    data = data if type(data) is bytes else bytes(data)
    try:
        walked = _walked(data, _PROFILE)
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:  # as from_bytes
        raise FormatError(f"malformed cubin: {e}") from e
    if walked is not None:
        return CubinProfile(walked.arch, walked.head.abi_version, _toolkit(walked.toolkit),
                            bool(walked.global_size or walked.banks), walked.items)
    c = Cubin.from_bytes(data)
    return CubinProfile(c.arch, c.abi_version, c.toolkit, bool(c.global_size or c.constant),
                        [(f.name, f.entry, f.registers, f.stack, f.shared, f.local,
                          tuple(f.constant.items()), f.spill_stores, f.spill_loads, f.size)
                         for f in c.functions])


def cubin_toolkit(data: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """The CUDA release that built a cubin, as :attr:`Cubin.toolkit` gives it, from the ELF
    header and notes alone where those record it (``e_version`` of ABI v1, ``.note.nv.cuinfo``,
    ``.note.nv.tkinfo``): what a driver floor needs, without parsing every function."""
    try:
        reader = _Reader(bytes(data))
        info = reader.cuinfo()
        tk = reader.toolkit(info[1] if info is not None else None)
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as e:
        raise FormatError(f"malformed cubin: {e}") from e
    if tk is not None:
        return tk // 10, tk % 10
    return Cubin.from_bytes(data).toolkit


# compact_cubin: the section types whose bytes cubin_outline and cubin_toolkit read (the symbol
# tables, the notes, the attribute records: a cubin that records no toolkit is parsed in full);
# sections of other types are kept up to _SMALL bytes unless of a _BULK type, so that a
# .nv.compat (read by name, whatever its type; ptxas writes 0x70000086) is kept before the names
# are known. Neither reader reads the bytes of any other section (the SASS, constant banks,
# relocations, sm_100's .nv.capmerc.<f>: a third of NCCL's).
_READ_TYPES = frozenset({SHT_SYMTAB, SHT_NOTE, SHT_CUDA_INFO})
_BULK = frozenset({elf.SHT_PROGBITS, elf.SHT_REL, elf.SHT_RELA, elf.SHT_NULL, elf.SHT_NOBITS})
_SMALL = 4096
_COMPAT_NAME = b".nv.compat\0"


def compact_cubin(passes: Callable[[], Iterable[Buffer]], size: int) -> bytes | None:
    """A cubin of ``size`` bytes that is read in passes (``passes()``: its bytes in order, in
    chunks, anew at each call; a chunk is used before the next is asked for), made into a
    compact ELF of what :func:`cubin_outline` and :func:`cubin_toolkit` read, which give the
    same values on it: the large zstd images of NCCL 2.28 are never held whole.

    Three passes: the ELF header (its first chunk), the section and program header tables
    (read to the end: the caller's stream checks its length there), then the bytes of the
    sections that the readers read: the name table, the symbol tables and their string tables,
    the notes, the attribute records, ``.nv.compat`` (see ``_READ_TYPES``). Those are placed
    one after another, and the section table is rewritten to point at them; a section whose
    bytes are not read (``.text.<f>``, ``.nv.constant<N>``, ...) becomes ``SHT_NOBITS`` at
    offset 0, its name, size, flags, link and info kept: the readers take only its header (a
    function's size, a bank's size) and its name, and no reader tests for the types so replaced.

    None where the cubin is not one this makes equal (not an EM_CUDA ELF64 LSB file, extended
    section numbering, section header entries not 64 bytes, a table or a section outside
    ``size``, a ``.nv.compat`` of a bulk type or larger than ``_SMALL``): the caller reads it
    whole, as it does where a reader refuses the compact ELF (its errors would name offsets of
    the compact file)."""
    ehsize = elf.FileHeader.FORMAT.size
    if size < ehsize:
        return None
    first = bytearray(ehsize)
    if _copy(passes(), [(0, ehsize, 0)], first, whole=False) < ehsize:
        return None
    head = elf.FileHeader.unpack(first)
    shsize = elf.SectionHeader.FORMAT.size
    phsize = head.phnum * head.phentsize
    if head.ident[:4] != elf.ELFMAG or not head.is_elf64_le or head.machine != elf.EM_CUDA or \
            head.shoff == 0 or head.shentsize != shsize or head.shnum == 0 or \
            not 0 < head.shstrndx < head.shnum or head.shoff + head.shnum * shsize > size or \
            head.phoff + phsize > size:
        return None
    tables = bytearray(head.shnum * shsize + phsize)
    _copy(passes(), [(head.shoff, head.shoff + head.shnum * shsize, 0),
                     (head.phoff, head.phoff + phsize, head.shnum * shsize)], tables, whole=True)
    rows = [list(row) for row in elf.SectionHeader.FORMAT.iter_unpack(
        memoryview(tables)[: head.shnum * shsize])]
    forced = {head.shstrndx} | {row[_SH_LINK] for row in rows if row[_SH_TYPE] == SHT_SYMTAB
                                and 0 < row[_SH_LINK] < head.shnum}
    kept: list[int] = []
    for i, row in enumerate(rows):
        kind, end = row[_SH_TYPE], row[_SH_OFFSET] + row[_SH_SIZE]
        if kind == elf.SHT_NOBITS and i != head.shstrndx:  # the names are read whatever it is
            continue
        if i in forced or kind in _READ_TYPES or (kind not in _BULK and row[_SH_SIZE] <= _SMALL):
            if end > size:
                return None
            kept.append(i)
        elif kind != elf.SHT_NULL and end > size:
            return None
    at = ehsize + phsize
    spans = []
    for i in kept:
        at = (at + 7) & ~7
        spans.append((rows[i][_SH_OFFSET], rows[i][_SH_OFFSET] + rows[i][_SH_SIZE], at))
        at += rows[i][_SH_SIZE]
    shoff = (at + 7) & ~7
    out = bytearray(shoff + head.shnum * shsize)
    _copy(passes(), spans, out, whole=False)
    names_at = spans[kept.index(head.shstrndx)][2]
    names = out[names_at : names_at + rows[head.shstrndx][_SH_SIZE]]
    chosen = set(kept)
    for i, row in enumerate(rows):
        if i in chosen or row[_SH_TYPE] in (elf.SHT_NOBITS, elf.SHT_NULL):
            continue
        if names.startswith(_COMPAT_NAME, row[0]):
            return None
        row[_SH_TYPE], row[_SH_OFFSET] = elf.SHT_NOBITS, 0
    for i, (_start, _end, to) in zip(kept, spans, strict=True):
        rows[i][_SH_OFFSET] = to
    out[:ehsize] = dataclasses.replace(head, phoff=ehsize, shoff=shoff).pack()
    out[ehsize : ehsize + phsize] = tables[head.shnum * shsize :]
    for i, row in enumerate(rows):
        elf.SectionHeader.FORMAT.pack_into(out, shoff + i * shsize, *row)
    return bytes(out)


def _copy(chunks: Iterable[Buffer], spans: Sequence[tuple[int, int, int]], out: bytearray,
          whole: bool) -> int:
    """Copy from a stream of ``chunks`` each ``(start, end, to)`` span of its bytes to ``out``
    at ``to``; read to the end of the stream if ``whole``, else only as far as the spans go.
    The number of bytes read."""
    todo = sorted(spans)
    last = max((end for _start, end, _to in todo), default=0)
    k = 0
    active: list[tuple[int, int, int]] = []
    pos = 0
    it = iter(chunks)
    try:
        for chunk in it:
            stop = pos + len(chunk)
            while k < len(todo) and todo[k][0] < stop:
                active.append(todo[k])
                k += 1
            held = []
            for start, end, to in active:
                a, b = max(start, pos), min(end, stop)
                if a < b:
                    out[to + a - start : to + b - start] = chunk[a - pos : b - pos]
                if end > stop:
                    held.append((start, end, to))
            active = held
            pos = stop
            if not whole and pos >= last and k == len(todo):
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return pos


def cubin_extent(src: Reader, offset: int) -> int | None:
    """The length of the cubin at ``offset`` of ``src``, from its headers: an ELF64
    little-endian file of version 1 for EM_CUDA, with 64-byte file and section headers, a
    section-name table among its sections, and its section table, program headers and every
    section's bytes inside ``src``; its length is where the last of them ends. None where the
    bytes there are not such a file (a magic inside compressed data, a truncated image)."""
    raw = src.read(offset, elf.FileHeader.FORMAT.size)
    if len(raw) < elf.FileHeader.FORMAT.size or raw[:4] != elf.ELFMAG or \
            raw[4:7] != bytes((elf.ELFCLASS64, elf.ELFDATA2LSB, elf.EV_CURRENT)):
        return None
    head = elf.FileHeader.unpack(raw)
    if head.machine != elf.EM_CUDA or head.ehsize != 64 or \
            head.shentsize != elf.SectionHeader.FORMAT.size or \
            not 0 < head.shstrndx < head.shnum:
        return None
    size = len(src) - offset
    end = head.shoff + head.shnum * head.shentsize
    if head.phnum:
        end = max(end, head.phoff + head.phnum * head.phentsize)
    if end > size:
        return None
    table = src.read(offset + head.shoff, head.shnum * head.shentsize)
    for i in range(head.shnum):
        sh = elf.SectionHeader.unpack_from(table, i * head.shentsize)
        if sh.type not in (elf.SHT_NOBITS, elf.SHT_NULL):
            if sh.offset + sh.size > size:
                return None
            end = max(end, sh.offset + sh.size)
    return end


def function_code(data: bytes | bytearray | memoryview) -> Iterator[tuple[str, bytes]]:
    """Each function's SASS as the cubin stores it: ``(name, bytes)`` of every
    ``.text.<name>`` section, in section order (what ``cuobjdump -res-usage`` counts as its
    size)."""
    for s in elf.sections(data, _header(data)):
        if s.name.startswith(".text.") and s.header.type != elf.SHT_NOBITS:
            yield s.name[len(".text."):], elf.section_data(data, s)


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


def header_arch(head: elf.FileHeader) -> Arch | None:
    """The SM a cubin's ELF header names, ``a`` included; None where only its ``.nv.compat``
    can say whether it is ``a`` (ABI v2 without the arch-specific flag: :func:`cubin_arch` reads
    the image). What a compressed cubin's first 64 bytes tell."""
    if head.abi_version == ABI_V2 and not head.flags & EF_V2_ARCH_SPECIFIC:
        return None
    return _arch(head, ())


def _virtual(arch: Arch, head: elf.FileHeader, vsm: int | None) -> Arch | None:
    """The virtual arch (PTX target): ``.note.nv.cuinfo``'s virtual SM ``vsm`` where it names
    one, else (ABI v1) the one ``e_flags`` keeps."""
    if vsm is None or not 10 <= vsm <= 999:
        if head.abi_version != ABI_V1 or (head.flags >> 16) & 0xFF < 10:
            return None
        vsm = (head.flags >> 16) & 0xFF
    return Arch(vsm, arch.suffix if vsm == arch.number else "")


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


# The per-function walk in C (fatbinkit/formats/_cubin.c), where the install could build it:
# the same reading as _Reader for the cubins it covers, None for the others (and for anything
# malformed), which _Reader then reads. tests/test_cubin_fast.py holds the two equal.
# FATBINKIT_PURE_PYTHON=1 in the environment reads every cubin with _Reader alone (native).
_compiled: ModuleType | None = native.compiled
# what the walk makes: CubinFunctions, entry kernel names, or rows (cubin_profile)
_FUNCTIONS, _OUTLINE, _PROFILE = 0, 1, 2


class _Walked(NamedTuple):
    """What the C walk read of a cubin: the ELF header and arch (``.nv.compat`` parsed here),
    the virtual SM and toolkit as recorded, the functions (or entry kernel names), the module
    constant banks and the size of its global variables."""

    head: elf.FileHeader
    arch: Arch
    vsm: int | None
    toolkit: int | None
    items: list[Any]
    banks: dict[int, int]
    global_size: int
    compat: tuple[NvInfoRecord, ...]


def _walked(data: bytes, mode: int) -> _Walked | None:
    """The C walk of ``data`` (``mode``: :data:`_FUNCTIONS` or :data:`_OUTLINE`), or None
    where it is not built or leaves the cubin to :class:`_Reader`."""
    if _compiled is None:
        return None
    got = _compiled.walk(data, mode, KernelParam, CubinFunction)
    if got is None:
        return None
    _sm, vsm, tk, items, banks, global_size, sections = got
    head = elf.FileHeader.unpack(data[: elf.FileHeader.FORMAT.size])
    compat: tuple[NvInfoRecord, ...] = ()
    for at, body in sections:  # as _Reader.compat: each is checked, the last one kept
        compat = parse_records(body, base=at, compat=True)
    return _Walked(head, _arch(head, compat), vsm, tk, items, banks, global_size, compat)


def _toolkit(tk: int | None) -> tuple[int, int] | None:
    """``(major, minor)`` of a toolkit recorded as ``major * 10 + minor``."""
    return (tk // 10, tk % 10) if tk is not None else None


# Fields of a raw section header tuple (elf.section_table) that the reader uses.
_SH_TYPE, _SH_OFFSET, _SH_SIZE, _SH_LINK, _SH_INFO = 1, 4, 5, 6, 7
_SYMBOL_SIZE = elf.Symbol.FORMAT.size


_SET = object.__setattr__


def _made(cls: type[_T], fields: dict[str, Any]) -> _T:
    """``cls(**fields)`` for a frozen dataclass without ``__post_init__``, every field given,
    made without its ``__init__`` (which sets each field through ``object.__setattr__``): a
    library's cubins hold hundreds of thousands of functions. Same value, equality and repr."""
    obj = object.__new__(cls)
    _SET(obj, "__dict__", fields)
    return obj


def _spills(text: bytes, notes: list[int | bytes | None], size: int) -> tuple[int, int] | None:
    """(spill stores, spill loads) in bytes from a function's EIATTR_ANNOTATIONS payloads and
    its ``.text`` bytes, whose instructions are ``size`` bytes (16, or 8 before Volta); None when
    an annotation does not check out (see :class:`CubinFunction`)."""
    stores = loads = 0
    end = len(text) - size
    for value in notes:
        if not isinstance(value, bytes) or len(value) % 8:
            return None
        for kind, at in struct.iter_unpack("<II", value):
            if kind != _SPILL_REFILL or at % size or at > end:
                return None
            if size == _WORD.size:
                if at % 32 == 0:  # a control word
                    return None
                head = _WORD.unpack_from(text, at)[0] >> 48
                code, store, load = head & 7, head & 0xFFF8 == _STL_64, head & 0xFFF8 == _LDL_64
            else:
                lo, hi = _INSTRUCTION.unpack_from(text, at)
                code, store, load = (hi >> 9) & 7, lo & 0xFFF in _STL, lo & 0xFFF == _LDL
            if code >= len(_WIDTHS) or not (store or load):
                return None
            if store:
                stores += _WIDTHS[code]
            else:
                loads += _WIDTHS[code]
    return stores, loads


# What a function's own ``.nv.info.<f>`` section gives its CubinFunction: the first value of
# each attribute read into a field, the KPARAM_INFO values (with their file offsets) and the
# EIATTR_ANNOTATIONS values, in record order.
_Own = tuple[dict[int, int | bytes | None], list[tuple[int | bytes | None, int]],
             list[int | bytes | None]]
_NO_OWN: tuple[int, bytes, _Own] = (0, b"", ({}, [], []))
_READ = frozenset({EIATTR_KPARAM_INFO, EIATTR_CBANK_PARAM_SIZE, EIATTR_MAXREG_COUNT,
                   EIATTR_CUDA_API_VERSION, EIATTR_MAX_THREADS, EIATTR_REQNTID,
                   EIATTR_ANNOTATIONS})
_KPARAM_UNPACK = KPARAM_INFO.unpack
_BY_ORDINAL = operator.itemgetter(1)  # of a KPARAM_INFO tuple: index, ordinal, offset, word
_MODULE_RECORD = struct.Struct("<xBxxI4x")  # an 8-byte SVAL: attribute, symbol index
_SVAL8 = RECORD_HEAD.pack(FMT_SVAL, 0, 8)  # an 8-byte SVAL's head (any attribute)


def _own_records(body: bytes, base: int) -> _Own:
    """A function's ``.nv.info.<f>`` records, read in one walk that makes values only for the
    attributes in ``_READ`` (a library has millions of records; ``ls --resources`` needs a few
    of each function's); every record is checked as :func:`nvinfo.record_tuples` checks them,
    and a malformed one raises its error."""
    first: dict[int, int | bytes | None] = {}
    kparams: list[tuple[int | bytes | None, int]] = []
    notes: list[int | bytes | None] = []
    read = _READ
    pos = 0
    end = len(body)
    while pos < end:
        if end - pos < 4:
            break
        fmt = body[pos]
        attribute = body[pos + 1]
        value: int | bytes | None
        if fmt == FMT_SVAL:
            nxt = pos + 4 + (body[pos + 2] | body[pos + 3] << 8)
            if nxt > end:
                break
            if attribute not in read:
                pos = nxt
                continue
            value = body[pos + 4 : nxt]
        elif fmt == FMT_HVAL:
            nxt = pos + 4
            if attribute not in read:
                pos = nxt
                continue
            value = body[pos + 2] | body[pos + 3] << 8
        elif fmt == FMT_BVAL:
            nxt = pos + 4
            value = body[pos + 2]
        elif fmt == FMT_NVAL:
            nxt = pos + 4
            value = None
        else:
            break
        if attribute == EIATTR_KPARAM_INFO:
            kparams.append((value, base + pos))
        elif attribute in read:
            if attribute == EIATTR_ANNOTATIONS:
                notes.append(value)
            if attribute not in first:
                first[attribute] = value
        pos = nxt
    if pos < end:
        record_tuples(body, base=base)  # raises the precise error
        raise FormatError("malformed attribute records", offset=base + pos)  # pragma: no cover
    return first, kparams, notes


def _module_records(body: bytes, base: int,
                    per_symbol: dict[int, list[tuple[int, int, bytes]]]) -> None:
    """Add the per-function records of a module-wide ``.nv.info`` to ``per_symbol``: symbol
    index -> ``(attribute, file offset, record bytes)``, in record order; every record checked.
    A section of 8-byte SVAL records only (what ptxas writes, nine cubins in ten) is split
    without a walk."""
    n = len(body) // 12
    if len(body) == 12 * n and body[0::12] == _SVAL8[:1] * n and \
            body[2::12] == _SVAL8[2:3] * n and body[3::12] == _SVAL8[3:] * n:
        for k, (attribute, symbol) in enumerate(_MODULE_RECORD.iter_unpack(body)):
            if attribute in PER_FUNCTION_ATTRIBUTES:
                at = 12 * k
                per_symbol.setdefault(symbol, []).append(
                    (attribute, base + at, body[at : at + 12]))
        return
    for _fmt, attribute, value, at in record_tuples(body, base=base):
        if attribute in PER_FUNCTION_ATTRIBUTES and isinstance(value, bytes) and len(value) >= 4:
            start = at - base
            per_symbol.setdefault(int.from_bytes(value[:4], "little"), []).append(
                (attribute, at, body[start : start + 4 + len(value)]))


def _words(value: int | bytes | None) -> tuple[int, ...]:
    """:meth:`NvInfoRecord.words` of a record's value."""
    if not isinstance(value, bytes):
        return ()
    return struct.unpack_from(f"<{len(value) // 4}I", value)


class _Reader:
    """Bounds-checked reading of one cubin's sections (through :mod:`fatbinkit.formats.elf`).

    Sections are kept as raw header tuples and names (:func:`fatbinkit.formats.elf.section_table`),
    and functions are built in one pass over their records: the parse of a library's thousands of
    cubins is what ``ls --resources`` and ``check`` spend their time on.
    """

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.head = _header(data)
        self.abi_version = self.head.abi_version
        self.e_flags = self.head.flags
        elf.check_span(data, self.head.phoff, self.head.phnum * self.head.phentsize,
                       "program header table")
        self.rows, self.names = elf.section_table(data, self.head)

    def body(self, index: int) -> bytes:
        """The contents of section ``index`` (empty for ``SHT_NOBITS``), bounds-checked."""
        row = self.rows[index]
        if row[_SH_TYPE] == elf.SHT_NOBITS:
            return b""
        elf.check_span(self.data, row[_SH_OFFSET], row[_SH_SIZE],
                       f"section {self.names[index] or index}")
        return self.data[row[_SH_OFFSET] : row[_SH_OFFSET] + row[_SH_SIZE]]

    def compat(self) -> tuple[NvInfoRecord, ...]:
        """The records of the last ``.nv.compat`` section (none: empty)."""
        compat: tuple[NvInfoRecord, ...] = ()
        for i, name in enumerate(self.names):
            if name == ".nv.compat":
                compat = parse_records(self.body(i), base=self.rows[i][_SH_OFFSET], compat=True)
        return compat

    def function_symbols(self) -> dict[tuple[str, int], tuple[int, int]]:
        """``(name, st_shndx) -> (symbol index, st_other)`` of every ``STT_FUNC`` symbol (the
        last one wins), every symbol's name checked."""
        symtab = next((i for i, r in enumerate(self.rows) if r[_SH_TYPE] == SHT_SYMTAB), None)
        if symtab is None:
            return {}
        row = self.rows[symtab]
        link = row[_SH_LINK]
        if not 0 < link < len(self.rows):
            raise FormatError(f"symbol table links to missing section {link}",
                              offset=row[_SH_OFFSET])
        table = elf.StringTable(self.body(link))
        count = row[_SH_SIZE] // _SYMBOL_SIZE
        raw = self.data[row[_SH_OFFSET] : row[_SH_OFFSET] + count * _SYMBOL_SIZE]
        symbols = list(elf.Symbol.FORMAT.iter_unpack(raw))
        strings = table.data
        # every name index inside a NUL-terminated table names a string: check them one by one
        # (for the precise error) only when that shortcut does not hold
        if symbols and (strings[-1:] != b"\0" or max(s[0] for s in symbols) >= len(strings)):
            where = self.rows[link][_SH_OFFSET]
            for sym in symbols:
                table.string(sym[0], "symbol name", where)
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for i, (name, info, other, shndx, _value, _size) in enumerate(symbols):
            if info & 0xF == STT_FUNC:
                out[strings[name : table.end(name)].decode("utf-8", "replace"), shndx] = (i, other)
        return out

    def cuinfo(self) -> tuple[int, int | None] | None:
        """(virtual SM, toolkit) from ``.note.nv.cuinfo`` (or the older ``.note.nv.cuver``, which
        has the virtual SM at the same place but no toolkit)."""
        for i, name in enumerate(self.names):
            if name not in (".note.nv.cuinfo", ".note.nv.cuver") or self.rows[i][_SH_TYPE] != (
                SHT_NOTE
            ):
                continue
            at = self.rows[i][_SH_OFFSET]
            body = self.body(i)
            if len(body) < elf.NoteHeader.FORMAT.size:
                raise TruncatedError("cuinfo note shorter than its header", offset=at)
            note = elf.NoteHeader.unpack_from(body)
            desc = note.desc_offset
            size = min(note.descsz, CUINFO.size)
            if size < CUINFO_HEAD.size or desc + size > len(body):
                raise TruncatedError("cuinfo note descriptor is truncated", offset=at)
            _version, vsm = CUINFO_HEAD.unpack_from(body, desc)
            if name != ".note.nv.cuinfo" or size < CUINFO_HEAD.size + 2:
                return vsm, None
            # some producers (cuBLASLt 13.0's sm_75 cubins) write a 6-byte descriptor: a u16
            # toolkit (0x0082 = 13.0), the rest padding
            fmt = "<I" if size == CUINFO.size else "<H"
            (toolkit,) = struct.unpack_from(fmt, body, desc + CUINFO_HEAD.size)
            return vsm, toolkit
        return None

    def module_data(self) -> tuple[dict[int, int], dict[str, dict[int, int]], int]:
        """Module constant banks (bank -> size), each function's banks, and the size of
        ``.nv.global`` plus ``.nv.global.init``."""
        module_banks: dict[int, int] = {}
        banks: dict[str, dict[int, int]] = {}
        global_size = 0
        for name, row in [(n, r) for n, r in zip(self.names, self.rows, strict=True)
                          if n.startswith((".nv.constant", ".nv.global"))]:
            if name.startswith(".nv.constant"):
                m = _CONST_RE.match(name)
                if m and m.group(2) is None:
                    module_banks[int(m.group(1))] = row[_SH_SIZE]
                elif m:
                    banks.setdefault(m.group(2), {})[int(m.group(1))] = row[_SH_SIZE]
            elif name in (".nv.global", ".nv.global.init"):
                global_size += row[_SH_SIZE]
        return module_banks, banks, global_size

    def tkinfo(self) -> int | None:
        """The first word of ``.note.nv.tkinfo``'s descriptor (None: no such note)."""
        for i, name in enumerate(self.names):
            if name != ".note.nv.tkinfo" or self.rows[i][_SH_TYPE] != SHT_NOTE:
                continue
            body = self.body(i)
            if len(body) < elf.NoteHeader.FORMAT.size:
                raise TruncatedError("tkinfo note shorter than its header",
                                     offset=self.rows[i][_SH_OFFSET])
            desc = elf.NoteHeader.unpack_from(body).desc_offset
            if desc + 4 > len(body):
                raise TruncatedError("tkinfo note descriptor is truncated",
                                     offset=self.rows[i][_SH_OFFSET])
            return int.from_bytes(body[desc : desc + 4], "little")
        return None

    def toolkit(self, cuinfo: int | None) -> int | None:
        """The producer toolkit (``major * 10 + minor``) where the cubin records it, as
        cuobjdump reads it (see ``_NO_TOOLKIT_BELOW``); ``cuinfo`` is the note's toolkit."""
        if self.abi_version == ABI_V1 and self.head.version >= _NO_TOOLKIT_BELOW:
            return self.head.version
        if cuinfo is not None:
            return cuinfo
        word = self.tkinfo()
        return word if word is not None and word >= _NO_TOOLKIT_BELOW else None

    def virtual(self, arch: Arch) -> tuple[Arch | None, int | None]:
        """The virtual arch (PTX target) and the toolkit (``major * 10 + minor``) if recorded
        (:meth:`toolkit`)."""
        info = self.cuinfo()
        vsm, tk = info if info is not None else (None, None)
        return _virtual(arch, self.head, vsm), self.toolkit(tk)

    def kernels(self) -> frozenset[str]:
        """The names of the entry functions (what :attr:`CubinFunction.entry` marks)."""
        symbols = self.function_symbols()
        texts = [(name[6:], i) for i, name in enumerate(self.names) if name.startswith(".text.")]
        return frozenset(name for name, i in texts
                         if (sym := symbols.get((name, i))) is not None and sym[1] & STO_CUDA_ENTRY)

    def cubin(self) -> Cubin:
        compat = self.compat()
        arch = _arch(self.head, compat)
        virtual, tk = self.virtual(arch)
        symbols = self.function_symbols()
        # One pass over the section table: each function's code, info, shared and local sections
        # by name (a name's hash is computed once; the last section of a name wins), the records
        # of the module-wide .nv.info by symbol, and each .nv.info.<f> by the section it
        # describes (sh_info).
        texts: list[tuple[str, int]] = []
        shared: dict[str, int] = {}
        local: dict[str, int] = {}
        per_symbol: dict[int, list[tuple[int, int, bytes]]] = {}
        per_section: dict[int, tuple[int, bytes, _Own]] = {}
        for i, (name, row) in enumerate(zip(self.names, self.rows, strict=True)):
            if name.startswith(".text."):
                texts.append((name[6:], i))
            elif name.startswith(".nv.shared."):
                shared[name[11:]] = row[_SH_SIZE]
            elif name.startswith(".nv.local."):
                local[name[10:]] = row[_SH_SIZE]
            if row[_SH_TYPE] != SHT_CUDA_INFO:
                continue
            base = row[_SH_OFFSET]
            body = self.body(i)
            if name == ".nv.info":
                _module_records(body, base, per_symbol)
            elif name.startswith(".nv.info."):
                per_section[row[_SH_INFO]] = (base, body, _own_records(body, base))
            else:
                record_tuples(body, base=base)  # every info section is checked
        module_banks, banks, global_size = self.module_data()

        def build(tk: int | None) -> list[CubinFunction]:
            annotated = 0 if tk is None or tk < _ANNOTATED_SINCE else \
                _INSTRUCTION.size if arch.number in _SPILL_ARCHES else \
                _WORD.size if arch.number in _SPILL_ARCHES_64 else 0
            return [self.function(i, name, symbols, banks, per_symbol, per_section, shared,
                                  local, annotated)
                    for name, i in texts]

        functions = build(tk)
        if tk is None:  # as cuobjdump does: fall back on the kernels' EIATTR_CUDA_API_VERSION
            tk = next((f.cuda_api_version for f in functions if f.cuda_api_version), None)
            if tk is not None and tk >= _ANNOTATED_SINCE:  # a bare ptxas's cubin: spills too
                functions = build(tk)
        return Cubin(arch, self.abi_version, virtual, _toolkit(tk), self.head.type, self.e_flags,
                     tuple(functions), module_banks, global_size, compat)

    def function(
        self,
        index: int,
        name: str,
        symbols: dict[tuple[str, int], tuple[int, int]],
        banks: dict[str, dict[int, int]],
        per_symbol: dict[int, list[tuple[int, int, bytes]]],
        per_section: dict[int, tuple[int, bytes, _Own]],
        shared: dict[str, int],
        local: dict[str, int],
        annotated: int,  # the instruction size when the cubin records spills, else 0
    ) -> CubinFunction:
        sym = symbols.get((name, index))
        entry = sym is not None and bool(sym[1] & STO_CUDA_ENTRY)
        module_records = per_symbol.get(sym[0], ()) if sym is not None else ()
        own_at, own_raw, (first, kparams, notes) = per_section.get(index, _NO_OWN)
        # the second u32 of the first module record of each attribute that has one
        second: dict[int, int] = {}
        raw: list[tuple[int, bytes]] = []
        for attribute, at, record in module_records:
            raw.append((at, record))
            if len(record) >= 12 and attribute not in second:
                second[attribute] = int.from_bytes(record[8:12], "little")
        if own_raw:
            raw.append((own_at, own_raw))
        # cuobjdump: entries report EIATTR_REGCOUNT; other functions the count ptxas keeps in the
        # top byte of their .text sh_info (sm < 90 only; 0 on sm_90+, which store it nowhere else).
        registers = second.get(EIATTR_REGCOUNT) if entry else None
        if registers is None:
            registers = self.rows[index][_SH_INFO] >> 24
        params: tuple[KernelParam, ...] = ()
        if kparams:
            rows = []
            for value, at in kparams:
                if not isinstance(value, bytes) or len(value) != KPARAM_INFO.size:
                    raise FormatError(f"KPARAM_INFO of {name} is not {KPARAM_INFO.size} bytes",
                                      offset=at)
                rows.append(_KPARAM_UNPACK(value))
            rows.sort(key=_BY_ORDINAL)  # stable: equal ordinals stay in record order
            params = tuple([_made(KernelParam, {
                "ordinal": ordinal, "offset": offset, "size": (w >> 18) & 0x3FFF,
                "log_alignment": w & 0xFF, "space": (w >> 8) & 0xF, "cbank": (w >> 12) & 0x1F,
                "index": i}) for i, ordinal, offset, w in rows])
        param_size = first.get(EIATTR_CBANK_PARAM_SIZE)
        maxreg = first.get(EIATTR_MAXREG_COUNT)
        api = first.get(EIATTR_CUDA_API_VERSION)  # its first u32
        spills: tuple[int, int] | None = (0, 0) if annotated else None
        if annotated and notes:  # only spilling functions have a record
            spills = _spills(self.body(index), notes, annotated)
        return _made(CubinFunction, {
            "name": name,
            "entry": entry,
            "registers": registers,
            "stack": second.get(EIATTR_MIN_STACK_SIZE) or 0,
            "shared": shared.get(name, 0),
            "local": local.get(name, 0),
            "constant": banks.get(name, {}),
            "texture": 0,
            "surface": 0,
            "sampler": 0,
            "params": params,
            "param_size": param_size if isinstance(param_size, int) else None,
            "frame_size": second.get(EIATTR_FRAME_SIZE),
            "max_stack": second.get(EIATTR_MAX_STACK_SIZE),
            "max_threads": _words(first.get(EIATTR_MAX_THREADS, b"")) or None
            if EIATTR_MAX_THREADS in first else None,
            "reqntid": _words(first.get(EIATTR_REQNTID, b"")) or None
            if EIATTR_REQNTID in first else None,
            "maxreg": maxreg if isinstance(maxreg, int) else None,
            "cuda_api_version": int.from_bytes(api[:4], "little")
            if isinstance(api, bytes) and len(api) >= 4 else None,
            "size": self.rows[index][_SH_SIZE],
            "spill_stores": spills[0] if spills else None,
            "spill_loads": spills[1] if spills else None,
            "raw_attributes": tuple(raw),
        })
