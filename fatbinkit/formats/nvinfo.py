"""``.nv.info`` / ``.nv.compat`` attribute records of NVIDIA cubins: layout, ids and names.

Each record is ``u8 format, u8 attribute`` followed by a value whose shape the format gives:
1 (NVAL) no value and two pad bytes, 2 (BVAL) a u8 and a pad byte, 3 (HVAL) a u16, 4 (SVAL) a u16
size and that many bytes. Records follow each other without gaps. The ids and names below are
those ``cuobjdump -elf`` prints (checked by the test suite); other ids stay raw ints.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import FormatError, TruncatedError

__all__ = [
    "EIATTR_ANNOTATIONS",
    "EIATTR_CBANK_PARAM_SIZE",
    "EIATTR_CUDA_API_VERSION",
    "EIATTR_FRAME_SIZE",
    "EIATTR_KPARAM_INFO",
    "EIATTR_MAXREG_COUNT",
    "EIATTR_MAX_STACK_SIZE",
    "EIATTR_MAX_THREADS",
    "EIATTR_MIN_STACK_SIZE",
    "EIATTR_NAMES",
    "EIATTR_REGCOUNT",
    "EIATTR_REQNTID",
    "EICOMPAT_ARCH_SPECIFIC",
    "EICOMPAT_NAMES",
    "FMT_BVAL",
    "FMT_HVAL",
    "FMT_NVAL",
    "FMT_SVAL",
    "KPARAM_INFO",
    "PER_FUNCTION_ATTRIBUTES",
    "RECORD_HEAD",
    "NvInfoRecord",
    "parse_records",
    "record_tuples",
]

FMT_NVAL = 1
FMT_BVAL = 2
FMT_HVAL = 3
FMT_SVAL = 4

RECORD_HEAD = struct.Struct("<BBH")  # format, attribute, u16 value (HVAL/BVAL) or size (SVAL)
KPARAM_INFO = struct.Struct("<IHHI")  # index, ordinal, offset, packed align/space/cbank/size

# EIATTR ids in NVIDIA's enum order (0x00..0x40, as listed by public reverse-engineering work),
# then later ids named by cuobjdump 13.5 -elf on the test suite's cubins.
_EIATTR_ORDER = (
    "ERROR", "PAD", "IMAGE_SLOT", "JUMPTABLE_RELOCS", "CTAIDZ_USED", "MAX_THREADS",
    "IMAGE_OFFSET", "IMAGE_SIZE", "TEXTURE_NORMALIZED", "SAMPLER_INIT", "PARAM_CBANK",
    "SMEM_PARAM_OFFSETS", "CBANK_PARAM_OFFSETS", "SYNC_STACK", "TEXID_SAMPID_MAP", "EXTERNS",
    "REQNTID", "FRAME_SIZE", "MIN_STACK_SIZE", "SAMPLER_FORCE_UNNORMALIZED",
    "BINDLESS_IMAGE_OFFSETS", "BINDLESS_TEXTURE_BANK", "BINDLESS_SURFACE_BANK", "KPARAM_INFO",
    "SMEM_PARAM_SIZE", "CBANK_PARAM_SIZE", "QUERY_NUMATTRIB", "MAXREG_COUNT",
    "EXIT_INSTR_OFFSETS", "S2RCTAID_INSTR_OFFSETS", "CRS_STACK_SIZE", "NEED_CNP_WRAPPER",
    "NEED_CNP_PATCH", "EXPLICIT_CACHING", "ISTYPEP_USED", "MAX_STACK_SIZE", "SUQ_USED",
    "LD_CACHEMOD_INSTR_OFFSETS", "LOAD_CACHE_REQUEST", "ATOM_SYS_INSTR_OFFSETS",
    "COOP_GROUP_INSTR_OFFSETS", "COOP_GROUP_MAX_REGIDS", "SW1850030_WAR", "WMMA_USED",
    "HAS_PRE_V10_OBJECT", "ATOMF16_EMUL_INSTR_OFFSETS", "ATOM16_EMUL_INSTR_REG_MAP", "REGCOUNT",
    "SW2393858_WAR", "INT_WARP_WIDE_INSTR_OFFSETS", "SHARED_SCRATCH", "STATISTICS",
    "INDIRECT_BRANCH_TARGETS", "SW2861232_WAR", "SW_WAR", "CUDA_API_VERSION", "NUM_MBARRIERS",
    "MBARRIER_INSTR_OFFSETS", "COROUTINE_RESUME_ID_OFFSETS", "SAM_REGION_STACK_SIZE",
    "PER_REG_TARGET_PERF_STATS", "CTA_PER_CLUSTER", "EXPLICIT_CLUSTER", "MAX_CLUSTER_RANK",
    "INSTR_REG_MAP",
)
EIATTR_NAMES: dict[int, str] = {i: f"EIATTR_{n}" for i, n in enumerate(_EIATTR_ORDER)}
EIATTR_NAMES.update({
    0x41: "EIATTR_RESERVED_SMEM_USED",
    0x4A: "EIATTR_VRC_CTA_INIT_COUNT",
    0x4C: "EIATTR_NUM_BARRIERS",
    0x50: "EIATTR_SPARSE_MMA_MASK",
    0x53: "EIATTR_GEN_ERRBAR_AT_EXIT",
    0x55: "EIATTR_ANNOTATIONS",
    0x66: "EIATTR_LANGUAGE",
    0x6B: "EIATTR_NVSAL_SW_WAR",
    0x6D: "EIATTR_PREEXIT_USED",
})
EICOMPAT_NAMES = {
    0x02: "EICOMPAT_ATTR_ISA_CLASS",
    0x03: "EICOMPAT_ATTR_INST_TENSORMAP_V1",
    0x05: "EICOMPAT_ATTR_INST_TCGEN05_MMA",
    0x06: "EICOMPAT_ATTR_ENABLE_OPPORTUNISTIC_FINALIZATION",
    0x09: "EICOMPAT_ATTR_CUDA_ACCELERATOR_TARGET",
    0x0B: "EICOMPAT_ATTR_CAN_FASTPATH_FINALIZE",
    0x0C: "EICOMPAT_ATTR_CUDA_INTERNAL_TARGET",
    0x0E: "EICOMPAT_ATTR_FINALIZER_VERSION",
}

# The attributes read into CubinFunction fields.
EIATTR_MAX_THREADS = 0x05
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_MIN_STACK_SIZE = 0x12
EIATTR_KPARAM_INFO = 0x17
EIATTR_CBANK_PARAM_SIZE = 0x19
EIATTR_MAXREG_COUNT = 0x1B
EIATTR_MAX_STACK_SIZE = 0x23
EIATTR_REGCOUNT = 0x2F
EIATTR_CUDA_API_VERSION = 0x37
# SVAL payload of u32 (type, .text offset) pairs; type 1 (cuobjdump 13.5 -elf: "SpillRefill")
# marks a register spill or refill instruction. Written by ptxas >= 12.6 only: see cubin.py.
EIATTR_ANNOTATIONS = 0x55
# Attributes of the module-wide .nv.info whose value starts with the symbol index it describes.
PER_FUNCTION_ATTRIBUTES = frozenset(
    {EIATTR_FRAME_SIZE, EIATTR_MIN_STACK_SIZE, EIATTR_MAX_STACK_SIZE, 0x1E, EIATTR_REGCOUNT}
)

# .nv.compat (EICOMPAT_ATTR_*): 0x09 = 1 marks an arch-specific ("a") cubin in ELF ABI v2.
EICOMPAT_ARCH_SPECIFIC = 0x09


@dataclass(frozen=True)
class NvInfoRecord:
    """One attribute record; ``value`` is the int (NVAL: None) or the SVAL payload bytes."""

    format: int
    attribute: int
    value: int | bytes | None
    offset: int
    compat: bool = False

    @property
    def name(self) -> str:
        """cuobjdump's name (``EIATTR_REGCOUNT``), or ``EIATTR_0x..`` when unknown."""
        if self.compat:
            return EICOMPAT_NAMES.get(self.attribute, f"EICOMPAT_ATTR_{self.attribute:#04x}")
        return EIATTR_NAMES.get(self.attribute, f"EIATTR_{self.attribute:#04x}")

    def words(self) -> tuple[int, ...]:
        """The SVAL payload as little-endian u32 words (empty for other formats)."""
        if not isinstance(self.value, bytes):
            return ()
        n = len(self.value) // 4
        return struct.unpack_from(f"<{n}I", self.value)


def parse_records(data: bytes, *, base: int = 0, compat: bool = False) -> tuple[NvInfoRecord, ...]:
    """Split a ``.nv.info*`` (or, with ``compat``, ``.nv.compat``) section into records; ``base``
    is the section's file offset, used in error messages and kept in each record.

    Records are made without the frozen dataclass's ``__init__`` (one ``object.__setattr__`` per
    field), filling their ``__dict__`` with every field instead: same value, equality and repr.
    """
    new = object.__new__
    records = []
    for fmt, attr, value, at in record_tuples(data, base=base):
        record = new(NvInfoRecord)
        record.__dict__.update(format=fmt, attribute=attr, value=value, offset=at, compat=compat)
        records.append(record)
    return tuple(records)


def record_tuples(data: bytes, *, base: int = 0) -> list[tuple[int, int, int | bytes | None, int]]:
    """``(format, attribute, value, offset)`` of each record, as :func:`parse_records` reads
    and checks them, without making objects: a library's cubins hold millions of records, and
    reading resources needs a few of each function's."""
    data = bytes(data)
    out: list[tuple[int, int, int | bytes | None, int]] = []
    append = out.append
    unpack = RECORD_HEAD.unpack_from
    head = RECORD_HEAD.size
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < head:
            raise TruncatedError(
                f"attribute record needs {head} bytes, {end - pos} left", offset=base + pos)
        fmt, attr, half = unpack(data, pos)
        nxt = pos + head
        if fmt == FMT_SVAL:
            if nxt + half > end:
                raise TruncatedError(
                    f"attribute {attr:#x} value of {half} bytes runs {nxt + half - end} "
                    f"bytes past its section", offset=base + pos)
            append((fmt, attr, data[nxt : nxt + half], base + pos))
            nxt += half
        elif fmt == FMT_NVAL:
            append((fmt, attr, None, base + pos))
        elif fmt == FMT_BVAL:
            append((fmt, attr, half & 0xFF, base + pos))
        elif fmt == FMT_HVAL:
            append((fmt, attr, half, base + pos))
        else:
            raise FormatError(f"attribute record format {fmt} is not 1..4", offset=base + pos)
        pos = nxt
    return out
