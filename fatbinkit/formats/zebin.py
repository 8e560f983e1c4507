"""Intel GPU binaries: zebin (an ELF of machine ``EM_INTELGT``) with its ``.ze_info`` metadata
and ``.note.intelgt.compat`` notes, and the legacy OpenCL ELF of older compilers.

Layout (Intel Graphics Compiler ``documentation/ZEBinary.md`` and ``zeinfo.md``;
compute-runtime ``shared/source/device_binary_format/zebin/zebin_elf.h``; ``../shared/ROCM.md``
§6):

* ELF64 little-endian, ``e_machine`` 205 (``EM_INTELGT``), ``e_type`` ``ET_REL`` or
  ``ET_ZEBIN_REL/EXE/DYN`` (0xff11..0xff13).
* ``.text.<kernel>`` per kernel; ``.spv`` (``SHT_ZEBIN_SPIRV`` 0xff000009) the SPIR-V it was
  built from, when kept; ``.ze_info`` (``SHT_ZEBIN_ZEINFO`` 0xff000011), YAML text: ``version``,
  ``kernels`` (each ``name``, ``execution_env`` with ``grf_count``, ``simd_size``,
  ``slm_size``..., ``per_thread_memory_buffers`` with ``type``, ``usage``, ``size``...).
* ``.note.intelgt.compat``: notes of owner ``IntelGT``, types 1 product family, 2 GFX core
  family (both ``u32`` enumerants of Intel's ``igfxfmid.h``), 3 target metadata, 4 zebin version
  (``"1.x"``), 5 vISA ABI version, 6 product config: the device's IP version as
  ``HardwareIpVersion`` packs it (``revision:6, reserved:8, release:8, architecture:10``), which
  is how ocloc names the device (``12.55.8``).
* The legacy OpenCL ELF (``e_machine`` 0, ``e_type`` 0xff01..0xff05, ``ET_OPENCL_EXECUTABLE``
  0xff04; IGC's ``CLElfTypes.h``) carries patch-token binaries: recognised, not read.

The ``.ze_info`` reader is :func:`parse_ze_info`: the subset of YAML IGC writes (block mappings
and sequences by indentation, scalars plain or quoted, flow sequences of scalars); anything else
is a :class:`~fatbinkit.errors.FormatError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from . import elf
from .elf import Buffer

__all__ = [
    "EM_INTELGT",
    "ET_OPENCL_EXECUTABLE",
    "ET_ZEBIN_DYN",
    "ET_ZEBIN_EXE",
    "ET_ZEBIN_REL",
    "OPENCL_TYPES",
    "CompatNotes",
    "ZeKernel",
    "Zebin",
    "ip_version",
    "is_opencl_elf",
    "is_zebin",
    "parse_ze_info",
    "read_zebin",
]

EM_INTELGT = 205
ET_ZEBIN_REL, ET_ZEBIN_EXE, ET_ZEBIN_DYN = 0xFF11, 0xFF12, 0xFF13
ZEBIN_TYPES = frozenset({elf.ET_REL, elf.ET_EXEC, elf.ET_DYN, ET_ZEBIN_REL, ET_ZEBIN_EXE,
                         ET_ZEBIN_DYN})
#: CLElfTypes.h: source, objects, library, executable, debug
OPENCL_TYPES = frozenset(range(0xFF01, 0xFF06))
ET_OPENCL_EXECUTABLE = 0xFF04
SHT_ZEBIN_SPIRV = 0xFF000009
SHT_ZEBIN_ZEINFO = 0xFF000011
ZE_INFO = ".ze_info"
NOTE_SECTION = ".note.intelgt.compat"
NOTE_OWNER = "IntelGT"
NT_PRODUCT_FAMILY, NT_GFX_CORE, NT_TARGET_METADATA, NT_ZEBIN_VERSION = 1, 2, 3, 4
NT_VISA_ABI, NT_PRODUCT_CONFIG = 5, 6


def ip_version(config: int) -> str:
    """``architecture.release.revision`` of a ``HardwareIpVersion`` word (``12.55.8``)."""
    return f"{config >> 22}.{(config >> 14) & 0xFF}.{config & 0x3F}"


@dataclass(frozen=True)
class CompatNotes:
    """The ``.note.intelgt.compat`` notes (None: absent); ``other`` keeps the rest raw, by
    type."""

    product_family: int | None = None
    gfx_core: int | None = None
    target_metadata: int | None = None
    zebin_version: str | None = None
    visa_abi: int | None = None
    product_config: int | None = None
    other: tuple[tuple[int, bytes], ...] = ()

    @property
    def ip_version(self) -> str | None:
        """The device's IP version from the product config (``12.55.8``), None without one."""
        return None if self.product_config is None else ip_version(self.product_config)


@dataclass(frozen=True)
class ZeKernel:
    """One kernel of ``.ze_info``: its name and ``execution_env`` (raw, as parsed), with the
    members a listing shows; ``private_size`` and ``scratch_size`` sum the
    ``per_thread_memory_buffers`` of that type."""

    name: str
    execution_env: dict[str, Any] = field(repr=False)
    private_size: int = 0
    scratch_size: int = 0

    def _env(self, key: str) -> int | None:
        v = self.execution_env.get(key)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    @property
    def grf_count(self) -> int | None:
        return self._env("grf_count")

    @property
    def simd_size(self) -> int | None:
        return self._env("simd_size")

    @property
    def slm_size(self) -> int:
        return self._env("slm_size") or 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form used by ``fatbinkit ls --resources --json``."""
        return {"name": self.name, "entry": True, "grf_count": self.grf_count,
                "simd_size": self.simd_size, "slm_size": self.slm_size,
                "private_size": self.private_size, "scratch_size": self.scratch_size}

    def usage(self, name: str | None = None) -> str:
        """One line of ``ls --resources``: ``Kernel k: GRF:128 SIMD:16 SLM:0 PRIVATE:0
        SCRATCH:0`` (``name``: how to print the kernel's name; ``?``: not recorded)."""
        def n(value: int | None) -> str:
            return "?" if value is None else str(value)

        return (f"Kernel {name or self.name}: GRF:{n(self.grf_count)} "
                f"SIMD:{n(self.simd_size)} SLM:{self.slm_size} PRIVATE:{self.private_size} "
                f"SCRATCH:{self.scratch_size}")


@dataclass(frozen=True)
class Zebin:
    """A zebin: its ``e_type``, section names, ``.ze_info`` version and kernels (in its
    order), compat notes, and whether it keeps the SPIR-V it was built from (``.spv``)."""

    type: int
    sections: tuple[str, ...]
    ze_info_version: str | None
    kernels: tuple[ZeKernel, ...]
    notes: CompatNotes
    has_spirv: bool


def _header(data: Buffer) -> elf.FileHeader | None:
    if len(data) < elf.FileHeader.FORMAT.size or bytes(data[:4]) != elf.ELFMAG:
        return None
    head = elf.FileHeader.unpack(data)
    return head if head.is_elf64_le else None


def is_zebin(data: Buffer) -> bool:
    """Whether ``data`` is an ELF64 little-endian file of machine ``EM_INTELGT``."""
    head = _header(data)
    return head is not None and head.machine == EM_INTELGT


def is_opencl_elf(data: Buffer) -> bool:
    """Whether ``data`` is a legacy OpenCL ELF (machine 0, an ``e_type`` of CLElfTypes.h)."""
    head = _header(data)
    return head is not None and head.machine == 0 and head.type in OPENCL_TYPES


def read_zebin(data: Buffer) -> Zebin:
    """The zebin ``data`` holds; a :class:`~fatbinkit.errors.FormatError` when it is not one or
    its ``.ze_info`` or notes are malformed."""
    head = elf.file_header(data)
    if head.machine != EM_INTELGT:
        raise FormatError(f"not a zebin: e_machine {head.machine}, not {EM_INTELGT} "
                          "(EM_INTELGT)", offset=18)
    if head.type not in ZEBIN_TYPES:
        raise FormatError(f"zebin of unknown e_type {head.type:#x}", offset=16)
    sections = elf.sections(data, head)
    by_name = {s.name: s for s in sections}
    version: str | None = None
    kernels: tuple[ZeKernel, ...] = ()
    info = by_name.get(ZE_INFO)
    if info is not None:
        raw = elf.section_data(data, info)
        try:
            text = raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{ZE_INFO} is not UTF-8 text ({e.reason} at byte {e.start})",
                              offset=info.header.offset + e.start) from e
        version, kernels = _ze_info(text, info.header.offset)
    note = by_name.get(NOTE_SECTION)
    notes = CompatNotes() if note is None else _notes(elf.section_data(data, note),
                                                      note.header.offset)
    spirv = any(s.header.type == SHT_ZEBIN_SPIRV for s in sections)
    return Zebin(head.type, tuple(s.name for s in sections[1:]), version, kernels, notes,
                 spirv)


def _ze_info(text: str, at: int) -> tuple[str | None, tuple[ZeKernel, ...]]:
    try:
        doc = parse_ze_info(text)
    except FormatError as e:
        raise FormatError(f"{ZE_INFO}: {e}", offset=at) from e
    if not isinstance(doc, dict):
        raise FormatError(f"{ZE_INFO} is not a mapping", offset=at)
    version = doc.get("version")
    kernels = doc.get("kernels", [])
    if not isinstance(kernels, list):
        raise FormatError(f"{ZE_INFO}: 'kernels' is not a sequence", offset=at)
    out = []
    for n, k in enumerate(kernels):
        if not isinstance(k, dict) or not isinstance(k.get("name"), str):
            raise FormatError(f"{ZE_INFO}: kernel {n} has no name", offset=at)
        env = k.get("execution_env", {})
        buffers = k.get("per_thread_memory_buffers", [])
        if not isinstance(env, dict) or not isinstance(buffers, list):
            raise FormatError(f"{ZE_INFO}: kernel {k['name']!r}: malformed execution_env or "
                              "per_thread_memory_buffers", offset=at)
        sizes = {"private": 0, "scratch": 0}
        for b in buffers:
            if isinstance(b, dict) and b.get("type") in sizes and isinstance(b.get("size"), int):
                sizes[b["type"]] += b["size"]
        out.append(ZeKernel(k["name"], env, sizes["private"], sizes["scratch"]))
    return (None if version is None else str(version)), tuple(out)


def _notes(raw: bytes, at: int) -> CompatNotes:
    found: dict[str, Any] = {}
    other: list[tuple[int, bytes]] = []
    pos, size = 0, len(raw)
    numbers = {NT_PRODUCT_FAMILY: "product_family", NT_GFX_CORE: "gfx_core",
               NT_TARGET_METADATA: "target_metadata", NT_VISA_ABI: "visa_abi",
               NT_PRODUCT_CONFIG: "product_config"}
    while size - pos >= elf.NoteHeader.FORMAT.size:
        note = elf.NoteHeader.unpack_from(raw, pos)
        desc = pos + note.desc_offset
        end = desc + note.descsz
        if end > size:
            raise FormatError(f"{NOTE_SECTION}: note of type {note.type} runs {end - size} "
                              "bytes past the section's end", offset=at + pos)
        owner = raw[pos + 12 : pos + 12 + note.namesz].rstrip(b"\0").decode("latin-1")
        body = raw[desc:end]
        if owner != NOTE_OWNER:
            other.append((note.type, body))
        elif note.type == NT_ZEBIN_VERSION:
            found["zebin_version"] = body.rstrip(b"\0").decode("latin-1")
        elif note.type in numbers and note.descsz == 4:
            found[numbers[note.type]] = int.from_bytes(body, "little")
        else:
            other.append((note.type, body))
        pos = (end + 3) // 4 * 4
    return CompatNotes(**found, other=tuple(other))


# --- .ze_info: the YAML subset IGC writes ---------------------------------------------------

_LINE = re.compile(r"(?P<indent> *)(?P<item>- +)?(?P<rest>.*)")
_KEY = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*) *:(?: +(?P<value>.*))?")
_INT = re.compile(r"[-+]?(?:0x[0-9a-fA-F]+|[0-9]+)")


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int  # the column of the key (after a "- " item marker)
    item: bool
    key: str | None  # None: a bare scalar item
    value: str | None  # None: a nested block follows


def _scalar(text: str, number: int) -> Any:
    text = text.strip()
    if text.startswith("'") or text.startswith('"'):
        q = text[0]
        if len(text) < 2 or not text.endswith(q):
            raise FormatError(f"line {number}: unterminated quoted scalar {text!r}")
        body = text[1:-1]
        return body.replace("''", "'") if q == "'" else body
    if text.startswith("["):
        if not text.endswith("]"):
            raise FormatError(f"line {number}: unterminated flow sequence {text!r}")
        inner = text[1:-1].strip()
        return [] if not inner else [_scalar(p, number) for p in inner.split(",")]
    if text in ("true", "false"):
        return text == "true"
    if _INT.fullmatch(text):
        return int(text, 0) if "x" in text.lower() else int(text)
    if not text or text[0] in "{&*!|>%@`":
        raise FormatError(f"line {number}: unsupported YAML value {text!r}")
    return text


def _lines(text: str) -> list[_Line]:
    out: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "\t" in raw:
            raise FormatError(f"line {number}: tab in indentation")
        line = raw.rstrip()
        if not line.strip() or line.lstrip().startswith("#") or line in ("---", "..."):
            continue
        m = _LINE.fullmatch(line)
        assert m is not None  # the pattern matches any line
        indent = len(m["indent"]) + len(m["item"] or "")
        rest = m["rest"]
        k = _KEY.fullmatch(rest)
        if k is None:
            if not m["item"]:
                raise FormatError(f"line {number}: expected 'key: value', got {rest!r}")
            out.append(_Line(number, indent, True, None, rest))
        else:
            out.append(_Line(number, indent, bool(m["item"]), k["key"], k["value"]))
    return out


def _block(lines: list[_Line], i: int, indent: int) -> tuple[Any, int]:
    """The mapping or sequence whose lines start at ``lines[i]``, at column ``indent``, and the
    index of the line after it."""
    if lines[i].item:
        return _sequence(lines, i, indent)
    out: dict[str, Any] = {}
    while i < len(lines) and lines[i].indent == indent and not lines[i].item:
        line = lines[i]
        assert line.key is not None
        if line.key in out:
            raise FormatError(f"line {line.number}: key {line.key!r} given twice")
        i += 1
        if line.value is not None:
            out[line.key] = _scalar(line.value, line.number)
        elif i < len(lines) and lines[i].indent > indent:
            out[line.key], i = _block(lines, i, lines[i].indent)
        else:
            out[line.key] = None
    if i < len(lines) and lines[i].indent > indent:
        raise FormatError(f"line {lines[i].number}: unexpected indentation")
    return out, i


def _sequence(lines: list[_Line], i: int, indent: int) -> tuple[list[Any], int]:
    """Items marked ``- `` whose content starts at column ``indent`` (``lines`` is the
    parser's own list: an item's first line becomes the first key of its mapping)."""
    out: list[Any] = []
    while i < len(lines) and lines[i].item and lines[i].indent == indent:
        line = lines[i]
        if line.key is None:
            assert line.value is not None
            out.append(_scalar(line.value, line.number))
            i += 1
            continue
        lines[i] = _Line(line.number, indent, False, line.key, line.value)
        item, i = _block(lines, i, indent)
        out.append(item)
    return out, i


def parse_ze_info(text: str) -> Any:
    """The ``.ze_info`` document: nested ``dict``/``list`` of ``str``, ``int`` and ``bool``."""
    lines = _lines(text)
    if not lines:
        return {}
    if lines[0].indent != 0 or lines[0].item:
        raise FormatError(f"line {lines[0].number}: the document must start at column 0 "
                          "with a key")
    doc, i = _block(lines, 0, 0)
    if i != len(lines):
        raise FormatError(f"line {lines[i].number}: unexpected indentation")
    return doc
