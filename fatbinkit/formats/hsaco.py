"""One AMDGPU code object (an "hsaco"): its target from ``e_flags``, its metadata note, and each
kernel's resources and 64-byte kernel descriptor, no ROCm needed.

A code object is an ELF64 little-endian file with ``e_machine`` EM_AMDGPU (224) and
``EI_OSABI`` ELFOSABI_AMDGPU_HSA (64) for HIP/HSA (65 is PAL, 66 Mesa3D: graphics, read the same
way where they share the layout). Layouts, each cited where it is read:

* ``e_flags``: ``llvm/llvm-project llvm/include/llvm/BinaryFormat/ELF.h`` (``EF_AMDGPU_*``);
  which layout a version uses: ``AMDGPUTargetELFStreamer::getEFlags*``
  (``llvm/lib/Target/AMDGPU/MCTargetDesc/AMDGPUTargetStreamer.cpp``);
* the target ID from ``e_flags``: ROCm/clr ``getTripleTargetIDFromCodeObject``
  (``hipamd/src/hip_comgr_helper.cpp``, formerly ``hip_code_object.cpp``);
* the ``NT_AMDGPU_METADATA`` note (owner ``AMDGPU``, type 32, one msgpack map) and its keys:
  LLVM's AMDGPUUsage "Code Object V3 Metadata" and later, ``AMDGPUHSAMetadataStreamer.cpp``;
* the kernel descriptor: ``llvm/include/llvm/Support/AMDHSAKernelDescriptor.h``
  (``kernel_descriptor_t``), written by ``AMDGPUTargetELFStreamer::EmitAmdhsaKernelDescriptor``
  at the ``<kernel>.kd`` symbol (``STT_OBJECT``, size 64).

The target ID comes from ``e_flags`` only, never from strings: newest LLVM writes
``amdhsa.target`` as ``amdgpu9.42-amd-amdhsa-unknown-gfx942`` where older tools wrote
``amdgcn-amd-amdhsa--gfx942``; :attr:`CodeObject.target_string` keeps it as written.
"""

from __future__ import annotations

import enum
import mmap
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import msgpack  # type: ignore[import-untyped]  # msgpack ships no type hints

from ..errors import (
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    NotFoundError,
    TruncatedError,
)
from ..infile import as_content
from . import elf
from .amdgpu import PROCESSOR_FEATURES, TargetId, processor_name

__all__ = [
    "ELFOSABI_AMDGPU_HSA",
    "ELFOSABI_AMDGPU_MESA3D",
    "ELFOSABI_AMDGPU_PAL",
    "EM_AMDGPU",
    "MAX_METADATA_SIZE",
    "NT_AMDGPU_METADATA",
    "CodeObject",
    "CodeObjectKernel",
    "FeatureSetting",
    "KernelDescriptor",
    "is_code_object",
    "read_code_object",
    "read_header",
]

EM_AMDGPU = 224
EI_OSABI = 7
ELFOSABI_AMDGPU_HSA = 64
ELFOSABI_AMDGPU_PAL = 65
ELFOSABI_AMDGPU_MESA3D = 66
#: ``EI_ABIVERSION`` -> code object version, for ``ELFOSABI_AMDGPU_HSA``
#: (``ELFABIVERSION_AMDGPU_HSA_V2`` = 0 ... ``_V6`` = 4)
_CODE_OBJECT_VERSIONS = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}

EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V3 = 0x100
EF_AMDGPU_FEATURE_SRAMECC_V3 = 0x200
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300  # 2-bit fields of v4+: 0 unsupported, 1 any, 2 off, 3 on
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
EF_AMDGPU_GENERIC_VERSION = 0xFF000000
EF_AMDGPU_GENERIC_VERSION_OFFSET = 24

NT_AMDGPU_METADATA = 32
_NOTE_OWNER = b"AMDGPU"
#: the largest metadata note decoded (bytes): cupy's 48-kernel code objects carry ~100 KiB
MAX_METADATA_SIZE = 64 << 20

PT_NOTE = 4
STT_OBJECT = 1
_DESCRIPTOR_SUFFIX = ".kd"


class FeatureSetting(enum.IntEnum):
    """A code object's ``xnack``/``sramecc`` setting: the 2-bit ``e_flags`` field of code
    object v4 and later (``EF_AMDGPU_FEATURE_*_V4``); code object v3 records only OFF or ON."""

    UNSUPPORTED = 0
    ANY = 1
    OFF = 2
    ON = 3

    def __str__(self) -> str:
        return self.name.lower()


@dataclass(frozen=True)
class KernelDescriptor:
    """``amdhsa::kernel_descriptor_t`` (64 bytes, little-endian), fields verbatim; reserved
    bytes are kept so :meth:`pack` gives back the bytes read. ``kernel_code_entry_byte_offset``
    is relative to the descriptor's own address."""

    FORMAT: ClassVar[struct.Struct] = struct.Struct("<III4sq20sIIIHH4s")

    group_segment_fixed_size: int
    private_segment_fixed_size: int
    kernarg_size: int
    reserved0: bytes
    kernel_code_entry_byte_offset: int
    reserved1: bytes  # 16 bytes plus GFX13's laneshared_segment_fixed_size in ROCm's LLVM
    compute_pgm_rsrc3: int
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    kernel_code_properties: int
    kernarg_preload: int
    reserved3: bytes

    @classmethod
    def unpack(cls, raw: elf.Buffer, offset: int = 0) -> KernelDescriptor:
        """Parse 64 bytes of ``raw``; ``offset`` locates them in error messages."""
        if len(raw) < cls.FORMAT.size:
            raise TruncatedError(f"kernel descriptor needs {cls.FORMAT.size} bytes, only "
                                 f"{len(raw)} left", offset=offset)
        return cls(*cls.FORMAT.unpack_from(raw, 0))

    def pack(self) -> bytes:
        return self.FORMAT.pack(
            self.group_segment_fixed_size, self.private_segment_fixed_size, self.kernarg_size,
            self.reserved0, self.kernel_code_entry_byte_offset, self.reserved1,
            self.compute_pgm_rsrc3, self.compute_pgm_rsrc1, self.compute_pgm_rsrc2,
            self.kernel_code_properties, self.kernarg_preload, self.reserved3,
        )  # fmt: skip

    # Bits, from AMDHSAKernelDescriptor.h: COMPUTE_PGM_RSRC1 GRANULATED_WORKITEM_VGPR_COUNT
    # [5:0] and GRANULATED_WAVEFRONT_SGPR_COUNT [9:6]; COMPUTE_PGM_RSRC2 ENABLE_PRIVATE_SEGMENT
    # [0], USER_SGPR_COUNT [5:1], GRANULATED_LDS_SIZE [23:15]; COMPUTE_PGM_RSRC3_GFX90A
    # ACCUM_OFFSET [5:0]; KERNEL_CODE_PROPERTY ENABLE_WAVEFRONT_SIZE32 [10] (GFX10+),
    # USES_DYNAMIC_STACK [11]; KERNARG_PRELOAD_SPEC LENGTH [6:0], OFFSET [15:7].

    @property
    def granulated_vgpr_count(self) -> int:
        """VGPR blocks minus one (the block size depends on the processor and wave size)."""
        return self.compute_pgm_rsrc1 & 0x3F

    @property
    def granulated_sgpr_count(self) -> int:
        """SGPR blocks minus one (GFX6-GFX9; GFX10+ ignore it)."""
        return (self.compute_pgm_rsrc1 >> 6) & 0xF

    @property
    def enable_private_segment(self) -> bool:
        """Whether the kernel is given scratch (private) memory."""
        return bool(self.compute_pgm_rsrc2 & 1)

    @property
    def user_sgpr_count(self) -> int:
        return (self.compute_pgm_rsrc2 >> 1) & 0x1F

    @property
    def granulated_lds_size(self) -> int:
        """LDS blocks (0 from the compiler: the runtime sets it from the dispatch)."""
        return (self.compute_pgm_rsrc2 >> 15) & 0x1FF

    @property
    def accum_offset(self) -> int:
        """GFX90A+: the first AccVGPR, as (offset / 4) - 1 (COMPUTE_PGM_RSRC3 [5:0])."""
        return self.compute_pgm_rsrc3 & 0x3F

    @property
    def wave32(self) -> bool:
        """ENABLE_WAVEFRONT_SIZE32 (GFX10+): the kernel runs 32-lane wavefronts."""
        return bool(self.kernel_code_properties & (1 << 10))

    @property
    def uses_dynamic_stack(self) -> bool:
        return bool(self.kernel_code_properties & (1 << 11))

    @property
    def kernarg_preload_length(self) -> int:
        """Kernel argument dwords preloaded into SGPRs (GFX940+)."""
        return self.kernarg_preload & 0x7F

    @property
    def kernarg_preload_offset(self) -> int:
        return self.kernarg_preload >> 7

    def disagreements(self, kernel: CodeObjectKernel) -> tuple[str, ...]:
        """Where this descriptor and ``kernel``'s metadata differ, one line per field:
        LDS, scratch, kernarg size, wavefront size (wave32 bit) and dynamic stack. A key the
        metadata lacks is not compared. Empty for every kernel LLVM writes."""
        pairs: list[tuple[str, object, object]] = [
            ("group_segment_fixed_size", self.group_segment_fixed_size,
             kernel.group_segment_fixed_size),
            ("private_segment_fixed_size", self.private_segment_fixed_size,
             kernel.private_segment_fixed_size),
            ("kernarg_size", self.kernarg_size, kernel.kernarg_segment_size),
            ("uses_dynamic_stack", self.uses_dynamic_stack, kernel.uses_dynamic_stack),
        ]
        if kernel.wavefront_size is not None:
            pairs.append(("wavefront_size", 32 if self.wave32 else 64, kernel.wavefront_size))
        return tuple(f"{name}: descriptor {mine}, metadata {theirs}"
                     for name, mine, theirs in pairs if theirs is not None and mine != theirs)

    def __str__(self) -> str:
        """``LDS 0, scratch 0, kernarg 48, rsrc1 0x00af0081, rsrc2 0x0000009c, rsrc3
        0x00000002, wave64``."""
        return (f"LDS {self.group_segment_fixed_size}, scratch "
                f"{self.private_segment_fixed_size}, kernarg {self.kernarg_size}, rsrc1 "
                f"{self.compute_pgm_rsrc1:#010x}, rsrc2 {self.compute_pgm_rsrc2:#010x}, rsrc3 "
                f"{self.compute_pgm_rsrc3:#010x}, {'wave32' if self.wave32 else 'wave64'}")


@dataclass(frozen=True)
class CodeObjectKernel:
    """One kernel of ``amdhsa.kernels``: its resources as the metadata records them (a key the
    metadata lacks is None) and the descriptor at its ``.kd`` symbol, if the object has one."""

    name: str
    symbol: str | None
    sgpr_count: int | None
    vgpr_count: int | None
    agpr_count: int | None
    sgpr_spill_count: int | None
    vgpr_spill_count: int | None
    group_segment_fixed_size: int | None
    private_segment_fixed_size: int | None
    kernarg_segment_size: int | None
    kernarg_segment_align: int | None
    wavefront_size: int | None
    max_flat_workgroup_size: int | None
    uses_dynamic_stack: bool | None
    descriptor: KernelDescriptor | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``fatbinkit ls --resources --json``: the metadata's keys
        without their dot (``sgpr_count``...), and the descriptor's consistency with them."""
        return {
            "name": self.name,
            "entry": True,
            "symbol": self.symbol,
            "sgpr_count": self.sgpr_count,
            "vgpr_count": self.vgpr_count,
            "agpr_count": self.agpr_count,
            "sgpr_spill_count": self.sgpr_spill_count,
            "vgpr_spill_count": self.vgpr_spill_count,
            "group_segment_fixed_size": self.group_segment_fixed_size,
            "private_segment_fixed_size": self.private_segment_fixed_size,
            "kernarg_segment_size": self.kernarg_segment_size,
            "kernarg_segment_align": self.kernarg_segment_align,
            "wavefront_size": self.wavefront_size,
            "max_flat_workgroup_size": self.max_flat_workgroup_size,
            "uses_dynamic_stack": self.uses_dynamic_stack,
            "descriptor": self.descriptor is not None,
            "disagreements": (list(self.descriptor.disagreements(self))
                              if self.descriptor is not None else []),
        }

    def usage(self, name: str | None = None) -> str:
        """One line of ``ls --resources``: ``Kernel add: SGPR:14 VGPR:6 AGPR:0 LDS:1024
        SCRATCH:0 SPILL_SGPR:0 SPILL_VGPR:0 WAVE:64 KERNARG:20 DYNAMIC_STACK:0`` (``name``: how
        to print the kernel's name; ``?`` where the metadata lacks a key)."""
        def n(value: int | bool | None) -> str:
            return "?" if value is None else str(int(value))

        return (f"Kernel {name or self.name}: SGPR:{n(self.sgpr_count)} "
                f"VGPR:{n(self.vgpr_count)} AGPR:{n(self.agpr_count)} "
                f"LDS:{n(self.group_segment_fixed_size)} "
                f"SCRATCH:{n(self.private_segment_fixed_size)} "
                f"SPILL_SGPR:{n(self.sgpr_spill_count)} SPILL_VGPR:{n(self.vgpr_spill_count)} "
                f"WAVE:{n(self.wavefront_size)} KERNARG:{n(self.kernarg_segment_size)} "
                f"DYNAMIC_STACK:{n(self.uses_dynamic_stack)}")

    def __str__(self) -> str:
        """``kernel add: 21 SGPRs, 12 VGPRs, 0 AGPRs, LDS 0, scratch 0, kernarg 48, wave64``."""
        def n(value: int | None) -> str:
            return "?" if value is None else str(value)

        spills = ""
        if self.sgpr_spill_count or self.vgpr_spill_count:
            spills = (f", spills {n(self.sgpr_spill_count)} SGPRs/"
                      f"{n(self.vgpr_spill_count)} VGPRs")
        stack = ", dynamic stack" if self.uses_dynamic_stack else ""
        return (f"kernel {self.name}: {n(self.sgpr_count)} SGPRs, {n(self.vgpr_count)} VGPRs, "
                f"{n(self.agpr_count)} AGPRs, LDS {n(self.group_segment_fixed_size)}, scratch "
                f"{n(self.private_segment_fixed_size)}, kernarg {n(self.kernarg_segment_size)}, "
                f"wave{n(self.wavefront_size)}{spills}{stack}")


@dataclass(frozen=True)
class CodeObject:
    """A parsed AMDGPU code object.

    ``code_object_version`` is 2..6 for ``ELFOSABI_AMDGPU_HSA`` with ``EI_ABIVERSION`` 0..4,
    None otherwise (PAL, Mesa3D, or an ABI version newer than this reader; ``abi_version`` keeps
    the raw value). ``xnack``/``sramecc`` are the 2-bit fields of v4+ (and of an unknown newer
    version), OFF/ON from the single bits of v3 and older and of PAL/Mesa3D (LLVM writes those
    with ``getEFlagsV3``). ``generic_version`` is ``e_flags`` bits 24-31 for v6, else None.
    ``processor`` is None for a MACH value LLVM does not name, and then so is ``target_id``.
    """

    osabi: int
    abi_version: int
    code_object_version: int | None
    elf_type: int
    flags: int
    mach: int
    processor: str | None
    xnack: FeatureSetting
    sramecc: FeatureSetting
    generic_version: int | None
    metadata: Mapping[str, Any] | None
    kernels: tuple[CodeObjectKernel, ...]

    @property
    def target_id(self) -> TargetId | None:
        """The target ID as CLR's ``getTripleTargetIDFromCodeObject`` derives it from
        ``e_flags``: v4+ adds ``-``/``+`` for OFF/ON and nothing for ANY or UNSUPPORTED; v3
        (and older, PAL, Mesa3D) adds ``-``/``+`` for each feature the processor supports
        (CLR's ``getProcName``), and for a processor that table lacks, ``+`` where the bit is
        set (LLVM sets it for on or any) and nothing where it is clear."""
        if self.processor is None:
            return None
        if not self._v3_layout:
            def v4(s: FeatureSetting) -> bool | None:
                return {FeatureSetting.OFF: False, FeatureSetting.ON: True}.get(s)

            return TargetId(self.processor, v4(self.sramecc), v4(self.xnack))
        support = PROCESSOR_FEATURES.get(self.processor)

        def v3(s: FeatureSetting, supported: bool | None) -> bool | None:
            on = s == FeatureSetting.ON
            if supported is None:
                return True if on else None
            return on if supported else None

        return TargetId(self.processor,
                        v3(self.sramecc, support.sramecc if support else None),
                        v3(self.xnack, support.xnack if support else None))

    @property
    def _v3_layout(self) -> bool:
        return self.osabi != ELFOSABI_AMDGPU_HSA or self.abi_version <= 1

    @property
    def target_string(self) -> str | None:
        """``amdhsa.target`` as written (either triple spelling), None where absent."""
        value = self.metadata.get("amdhsa.target") if self.metadata is not None else None
        return value if isinstance(value, str) else None

    def kernel(self, name: str) -> CodeObjectKernel:
        """The kernel called ``name``; :class:`~fatbinkit.errors.NotFoundError` (a
        ``KeyError``) naming the closest ones if absent."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise NotFoundError.among("kernel", name, (k.name for k in self.kernels),
                                  "this code object")

    def __str__(self) -> str:
        """``gfx942:sramecc+:xnack- COv6 (2 kernels)``."""
        target = str(self.target_id) if self.target_id else f"MACH {self.mach:#x}"
        version = (f"COv{self.code_object_version}" if self.code_object_version is not None
                   else f"OSABI {self.osabi} ABI {self.abi_version}")
        generic = f" generic v{self.generic_version}" if self.generic_version else ""
        n = len(self.kernels)
        return f"{target} {version}{generic} ({n} kernel{'' if n == 1 else 's'})"


def is_code_object(buf: elf.Buffer | mmap.mmap) -> bool:
    """Whether ``buf`` starts like an AMDGPU code object: ELF64 little-endian, ``e_machine``
    EM_AMDGPU (any OSABI: HIP's runtime itself takes only HSA, 64; see
    :attr:`CodeObject.osabi`)."""
    data = memoryview(buf) if isinstance(buf, mmap.mmap) else buf
    return (elf.machine(data) == EM_AMDGPU and data[4] == elf.ELFCLASS64
            and data[5] == elf.ELFDATA2LSB)


def read_code_object(buf: elf.Buffer | mmap.mmap, offset: int = 0) -> CodeObject:
    """Parse the code object that starts ``offset`` bytes into ``buf`` (it may run to the end:
    every bound is checked against what is there). Malformed input raises
    :class:`~fatbinkit.errors.FormatError` (:class:`~fatbinkit.errors.TruncatedError` for
    what runs past the end); offsets in messages are relative to ``offset``."""
    data = memoryview(buf) if isinstance(buf, mmap.mmap) else as_content(buf, "read_code_object()")
    if not 0 <= offset <= len(data):
        raise InvalidArgumentError(f"offset {offset} is outside the {len(data)}-byte input")
    return _guarded(memoryview(data)[offset:], header_only=False)


def _guarded(view: memoryview, header_only: bool) -> CodeObject:
    try:
        return _read(view, header_only)
    except FatbinkitError:
        raise
    except (struct.error, IndexError, ValueError) as e:  # defence in depth
        raise FormatError(f"malformed AMDGPU code object: {e}") from e


def read_header(buf: elf.Buffer | mmap.mmap) -> CodeObject:
    """The code object as its ELF header says it (processor, features, versions: what
    :attr:`CodeObject.target_id` needs), its notes and symbols not read: ``metadata`` None and
    ``kernels`` empty. Listing reads this; :func:`read_code_object` the rest."""
    data = memoryview(buf) if isinstance(buf, mmap.mmap) else as_content(buf, "read_header()")
    return _guarded(memoryview(data), header_only=True)


def _read(data: memoryview, header_only: bool = False) -> CodeObject:
    head = elf.file_header(data)
    if head.machine != EM_AMDGPU:
        raise FormatError(f"ELF machine {head.machine} is not EM_AMDGPU ({EM_AMDGPU})",
                          offset=18)
    osabi, abi = head.ident[EI_OSABI], head.abi_version
    hsa = osabi == ELFOSABI_AMDGPU_HSA
    version = _CODE_OBJECT_VERSIONS.get(abi) if hsa else None
    flags = head.flags
    if hsa and abi >= 2:  # AMDGPUTargetELFStreamer::getEFlagsV4 / V6
        xnack = FeatureSetting((flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8)
        sramecc = FeatureSetting((flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10)
    else:  # getEFlagsV3: HSA v2/v3, PAL, Mesa3D
        xnack = FeatureSetting.ON if flags & EF_AMDGPU_FEATURE_XNACK_V3 else FeatureSetting.OFF
        sramecc = (FeatureSetting.ON if flags & EF_AMDGPU_FEATURE_SRAMECC_V3
                   else FeatureSetting.OFF)
    generic = ((flags & EF_AMDGPU_GENERIC_VERSION) >> EF_AMDGPU_GENERIC_VERSION_OFFSET
               if version == 6 else None)
    metadata: Mapping[str, Any] | None = None
    kernels: tuple[CodeObjectKernel, ...] = ()
    if not header_only:
        sections = elf.sections(data, head)
        metadata = _metadata(data, head, sections)
        kernels = _kernels(data, sections, metadata) if metadata is not None else ()
    mach = flags & EF_AMDGPU_MACH
    return CodeObject(osabi, abi, version, head.type, flags, mach, processor_name(mach), xnack,
                      sramecc, generic, metadata, kernels)


def _notes(data: memoryview, head: elf.FileHeader,
           sections: tuple[elf.Section, ...]) -> list[tuple[int, int]]:
    """(offset, size) of each note area: the ``SHT_NOTE`` sections, else (a file without
    section headers) the ``PT_NOTE`` segments."""
    areas = [(s.header.offset, s.header.size) for s in sections
             if s.header.type == elf.SHT_NOTE]
    if not areas and not sections:
        areas = [(p.offset, p.filesz) for p in elf.program_headers(data, head)
                 if p.type == PT_NOTE]
    for at, size in areas:
        elf.check_span(data, at, size, "note area")
    return areas


def _metadata(data: memoryview, head: elf.FileHeader,
              sections: tuple[elf.Section, ...]) -> dict[str, Any] | None:
    """The first ``NT_AMDGPU_METADATA`` note of owner ``AMDGPU``, decoded; None if none."""
    for start, size in _notes(data, head, sections):
        pos, end = start, start + size
        while end - pos >= elf.NoteHeader.FORMAT.size:
            note = elf.NoteHeader.unpack_from(data, pos)
            desc_at = pos + note.desc_offset
            desc_end = desc_at + note.descsz
            if pos + elf.NoteHeader.FORMAT.size + note.namesz > end or desc_end > end:
                raise TruncatedError(
                    f"note at {pos:#x} (name {note.namesz} bytes, descriptor {note.descsz} "
                    f"bytes) runs {max(desc_end, desc_at) - end} bytes past its note area "
                    f"ending at {end:#x}", offset=pos)
            name = bytes(data[pos + elf.NoteHeader.FORMAT.size:
                              pos + elf.NoteHeader.FORMAT.size + note.namesz]).rstrip(b"\0")
            if name == _NOTE_OWNER and note.type == NT_AMDGPU_METADATA:
                return _decode_metadata(data[desc_at:desc_end], desc_at)
            pos = desc_at + (note.descsz + 3) // 4 * 4
    return None


def _decode_metadata(raw: memoryview, at: int) -> dict[str, Any]:
    if len(raw) > MAX_METADATA_SIZE:
        raise FormatError(f"AMDGPU metadata note of {len(raw)} bytes is over the "
                          f"{MAX_METADATA_SIZE}-byte limit", offset=at)
    try:
        value = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as e:
        raise FormatError(f"AMDGPU metadata note ({len(raw)} bytes) is not valid msgpack: "
                          f"{e}", offset=at) from e
    if not isinstance(value, dict):
        raise FormatError(f"AMDGPU metadata is a {type(value).__name__}, not a map",
                          offset=at)
    return value


_INT_KEYS = {
    "sgpr_count": ".sgpr_count",
    "vgpr_count": ".vgpr_count",
    "agpr_count": ".agpr_count",
    "sgpr_spill_count": ".sgpr_spill_count",
    "vgpr_spill_count": ".vgpr_spill_count",
    "group_segment_fixed_size": ".group_segment_fixed_size",
    "private_segment_fixed_size": ".private_segment_fixed_size",
    "kernarg_segment_size": ".kernarg_segment_size",
    "kernarg_segment_align": ".kernarg_segment_align",
    "wavefront_size": ".wavefront_size",
    "max_flat_workgroup_size": ".max_flat_workgroup_size",
}


def _kernels(data: memoryview, sections: tuple[elf.Section, ...],
             metadata: Mapping[str, Any]) -> tuple[CodeObjectKernel, ...]:
    entries = metadata.get("amdhsa.kernels", [])
    if not isinstance(entries, list):
        raise FormatError(f"amdhsa.kernels is a {type(entries).__name__}, not a list")
    descriptors = _descriptor_symbols(data, sections)
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise FormatError(f"amdhsa.kernels[{i}] is a {type(entry).__name__}, not a map")
        name = entry.get(".name")
        if not isinstance(name, str):
            raise FormatError(f"amdhsa.kernels[{i}] has no string .name")
        symbol = entry.get(".symbol")
        if symbol is not None and not isinstance(symbol, str):
            raise FormatError(f"kernel {name}: .symbol is not a string")
        fields: dict[str, Any] = {}
        for field, key in _INT_KEYS.items():
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not 0 <= value < 1 << 32):
                # the metadata's counts and sizes are unsigned 32-bit (AMDGPUUsage.rst,
                # "Code Object V3 Metadata": uint32 values)
                raise FormatError(f"kernel {name}: {key} is {value!r}, not an unsigned 32-bit "
                                  "integer")
            fields[field] = value
        dynamic = entry.get(".uses_dynamic_stack")
        if dynamic is not None and not isinstance(dynamic, bool):
            raise FormatError(f"kernel {name}: .uses_dynamic_stack is {dynamic!r}, not a bool")
        found = descriptors.get(symbol if symbol is not None else name + _DESCRIPTOR_SUFFIX)
        descriptor = _descriptor(data, sections, found) if found is not None else None
        out.append(CodeObjectKernel(name=name, symbol=symbol, uses_dynamic_stack=dynamic,
                                    descriptor=descriptor, **fields))
    return tuple(out)


def _descriptor_symbols(data: memoryview,
                        sections: tuple[elf.Section, ...]) -> dict[str, elf.Symbol]:
    """The ``*.kd`` object symbols of ``.symtab`` (else ``.dynsym``), by name."""
    tables = [s for s in sections if s.header.type == elf.SHT_SYMTAB] or [
        s for s in sections if s.header.type == elf.SHT_DYNSYM]
    out: dict[str, elf.Symbol] = {}
    for table in tables:
        link = table.header.link
        if link >= len(sections):
            raise FormatError(f"symbol table {table.name} links to section {link} of "
                              f"{len(sections)}", offset=table.header.offset)
        names = elf.StringTable(elf.section_data(data, sections[link]))
        raw = elf.section_data(data, table)
        size = elf.Symbol.FORMAT.size
        for row in elf.Symbol.FORMAT.iter_unpack(raw[: len(raw) // size * size]):
            symbol = elf.Symbol(*row)
            if symbol.info & 0xF != STT_OBJECT:
                continue
            name = names.string(symbol.name, "symbol name", sections[link].header.offset)
            if name.endswith(_DESCRIPTOR_SUFFIX):
                out.setdefault(name, symbol)
    return out


def _descriptor(data: memoryview, sections: tuple[elf.Section, ...],
                symbol: elf.Symbol) -> KernelDescriptor:
    """The 64 bytes at ``symbol``, which must lie inside its section."""
    size = KernelDescriptor.FORMAT.size
    if symbol.size != size:
        raise FormatError(f"kernel descriptor symbol has size {symbol.size}, not {size}")
    if not 0 < symbol.shndx < len(sections):
        raise FormatError(f"kernel descriptor symbol is in section {symbol.shndx}, not one of "
                          f"the {len(sections)} sections")
    section = sections[symbol.shndx]
    h = section.header
    if h.type == elf.SHT_NOBITS:
        raise FormatError(f"kernel descriptor symbol is in {section.name}, which has no bytes",
                          offset=h.offset)
    start = symbol.value - h.addr
    if start < 0 or start + size > h.size:
        raise TruncatedError(
            f"kernel descriptor at {symbol.value:#x} ({size} bytes) is outside its section "
            f"{section.name or symbol.shndx} ({h.size} bytes at address {h.addr:#x})",
            offset=h.offset)
    return KernelDescriptor.unpack(data[h.offset + start: h.offset + start + size],
                                   h.offset + start)
