"""SPIR-V modules: the header and the entry points (kernels), by a bounds-checked word walk.

Layout (the Khronos SPIR-V specification, §2.3 "Physical Layout of a SPIR-V Module and
Instruction"): five 32-bit words, magic ``0x07230203`` (its byte order is the module's), the
version (``0x00MMmm00``), the generator (tool id in the high 16 bits, its version in the low),
the id bound and a reserved schema word; then instructions, each a first word
``word count << 16 | opcode`` and ``word count - 1`` operands. ``OpEntryPoint`` (opcode 15) is
``execution model, function id, name`` (a NUL-terminated UTF-8 literal padded to a word), then
interface ids; execution model ``Kernel`` is 6 (OpenCL/SYCL kernels).

A linked SYCL library places many modules back to back (the ``__CLANG_OFFLOAD_BUNDLE__sycl-spir64``
sections of its objects, each padded to the section's alignment with zero bytes):
:func:`split_modules` walks them, a new module starting where a magic word stands at an
instruction boundary (an instruction's first word is never the magic: its opcode, 0x0203, is
no SPIR-V instruction).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import FormatError, TruncatedError
from .elf import Buffer

__all__ = ["EXECUTION_MODELS", "MAGIC", "EntryPoint", "SpirvModule", "is_spirv",
           "read_spirv", "split_modules"]

MAGIC = 0x07230203
_MAGIC_LE = struct.pack("<I", MAGIC)
_MAGIC_BE = struct.pack(">I", MAGIC)
OP_ENTRY_POINT = 15
_HEADER_WORDS = 5
#: SPIR-V's ExecutionModel enumerants (specification §3.3)
EXECUTION_MODELS = {0: "Vertex", 1: "TessellationControl", 2: "TessellationEvaluation",
                    3: "Geometry", 4: "Fragment", 5: "GLCompute", 6: "Kernel"}
#: the tools registered in Khronos' SPIR-V XML registry (spir-v.xml ``<ids type="vendor">``)
#: that the modules fatbinkit meets come from
GENERATORS = {6: "Khronos LLVM/SPIR-V Translator", 7: "Khronos SPIR-V Tools Assembler",
              8: "Khronos Glslang Reference Front End", 14: "Khronos LLVM/SPIR-V Translator",
              43: "Khronos LLVM SPIR-V Backend"}


@dataclass(frozen=True)
class EntryPoint:
    """One ``OpEntryPoint``: its execution model (``6``: Kernel), function id and name."""

    model: int
    function: int
    name: str

    @property
    def model_name(self) -> str:
        return EXECUTION_MODELS.get(self.model, str(self.model))


@dataclass(frozen=True)
class SpirvModule:
    """A SPIR-V module's header and entry points. ``version`` is ``(major, minor)``,
    ``generator`` the raw word (tool id ``generator >> 16``), ``size`` the bytes its
    instructions take (padding after it not counted)."""

    big_endian: bool
    version: tuple[int, int]
    generator: int
    bound: int
    schema: int
    entry_points: tuple[EntryPoint, ...]
    size: int

    @property
    def kernels(self) -> tuple[str, ...]:
        """The names of its ``Kernel`` entry points, in module order."""
        return tuple(e.name for e in self.entry_points if e.model == 6)

    @property
    def generator_name(self) -> str:
        """``Khronos LLVM/SPIR-V Translator; 14``, as spirv-dis writes its header comment."""
        tool = self.generator >> 16
        return f"{GENERATORS.get(tool, f'Unknown({tool})')}; {self.generator & 0xFFFF}"


def is_spirv(data: Buffer) -> bool:
    """Whether ``data`` starts with the SPIR-V magic word, in either byte order."""
    head = bytes(data[:4])
    return head in (_MAGIC_LE, _MAGIC_BE)


def _words(data: Buffer, big: bool, start: int, count: int) -> tuple[int, ...]:
    return struct.unpack_from(f"{'>' if big else '<'}{count}I", data, start)


def _walk(data: Buffer, start: int, stop: int) -> SpirvModule:
    """The module at ``start``: its instructions up to ``stop``, or up to a magic word or a zero
    word at an instruction boundary (what follows it: another module, or padding)."""
    if stop - start < _HEADER_WORDS * 4:
        raise TruncatedError(f"SPIR-V module of {stop - start} bytes is shorter than its "
                             f"{_HEADER_WORDS * 4}-byte header", offset=start)
    head = bytes(data[start : start + 4])
    if head not in (_MAGIC_LE, _MAGIC_BE):
        raise FormatError(f"not a SPIR-V module (starts {head.hex()})", offset=start)
    big = head == _MAGIC_BE
    _magic, version, generator, bound, schema = _words(data, big, start, _HEADER_WORDS)
    fmt = struct.Struct(">I" if big else "<I")
    entries: list[EntryPoint] = []
    pos = start + _HEADER_WORDS * 4
    while pos + 4 <= stop:
        (first,) = fmt.unpack_from(data, pos)
        if first in (MAGIC, 0):
            break
        count, opcode = first >> 16, first & 0xFFFF
        if count == 0:
            raise FormatError(f"SPIR-V instruction (opcode {opcode}) of 0 words at "
                              f"{pos - start:#x}", offset=pos)
        if pos + 4 * count > stop:
            raise TruncatedError(f"SPIR-V instruction (opcode {opcode}, {count} words) at "
                                 f"{pos - start:#x} runs past the module's end", offset=pos)
        if opcode == OP_ENTRY_POINT:
            entries.append(_entry_point(data, big, pos, count))
        pos += 4 * count
    if 0 < stop - pos < 4 and any(bytes(data[pos:stop])):  # zero bytes there: padding
        raise TruncatedError(f"SPIR-V module ends {stop - pos} bytes into a word",
                             offset=pos)
    return SpirvModule(big, ((version >> 16) & 0xFF, (version >> 8) & 0xFF), generator, bound,
                       schema, tuple(entries), pos - start)


def _entry_point(data: Buffer, big: bool, pos: int, count: int) -> EntryPoint:
    if count < 4:
        raise FormatError(f"OpEntryPoint of {count} words (at least 4: model, function, name)",
                          offset=pos)
    model, function = _words(data, big, pos + 4, 2)
    raw = bytes(data[pos + 12 : pos + 4 * count])
    if big:  # a literal string's bytes fill each word from its low-order byte
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    end = raw.find(b"\0")
    if end < 0:
        raise FormatError("OpEntryPoint name is not NUL-terminated inside its instruction",
                          offset=pos)
    return EntryPoint(model, function, raw[:end].decode("utf-8", "replace"))


def read_spirv(data: Buffer) -> SpirvModule:
    """The one module ``data`` holds (whatever follows its last instruction must be zero
    padding); :class:`~fatbinkit.errors.FormatError` if it is not SPIR-V or is cut short."""
    module = _walk(data, 0, len(data))
    if any(bytes(data[module.size :])):
        raise FormatError(f"SPIR-V module of {module.size} bytes is followed by "
                          f"{len(data) - module.size} bytes that are not padding",
                          offset=module.size)
    return module


def split_modules(data: Buffer) -> list[tuple[int, SpirvModule]]:
    """Every module of modules placed back to back (zero padding between them), with its
    offset in ``data``; an empty list for no bytes, a :class:`~fatbinkit.errors.FormatError`
    for anything else."""
    out: list[tuple[int, SpirvModule]] = []
    pos, end = 0, len(data)
    while pos < end:
        if not any(bytes(data[pos : pos + 4])):  # padding between modules
            pos += 4
            continue
        module = _walk(data, pos, end)
        out.append((pos, module))
        pos += module.size
    return out
