"""AMD GPU targets: processor names by ELF ``e_flags`` MACH value, target IDs and triples.

No policy lives here (which code object loads where is for a later module): only the names and
the grammar the vendor tools use, so a code object's ``e_flags``, a bundle entry ID and an
``amdhsa.target`` string can be turned into one :class:`TargetId` and compared.

Sources, each cited where its rule is used:

* the MACH values: ``llvm/llvm-project llvm/include/llvm/BinaryFormat/ELF.h``
  (``EF_AMDGPU_MACH_*``), as listed by ``llvm/test/CodeGen/AMDGPU/elf-header-flags-mach.ll``
  (newest copy), plus gfx940 (0x40) and gfx941 (0x4B), removed from LLVM but present in code
  objects built before (older copies of the same test);
* the target ID grammar: clang's ``parseTargetID`` / ``getCanonicalTargetID``
  (``clang/lib/Basic/TargetID.cpp``): ``<processor>(:<feature>(+|-))*``, features sorted;
* feature support per processor: ``helpers::getProcName`` in ROCm/clr
  ``hipamd/src/hip_comgr_helper.cpp`` (the same table as ``hip_code_object.cpp``), gfx9-4-generic
  and gfx940/gfx941 from ROCr's ``IsaRegistry::GetSupportedIsas`` (``ISAREG_ENTRY_GEN``,
  ``runtime/hsa-runtime/core/runtime/isa.cpp``), which also gives the wavefront sizes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import InvalidArgumentError

__all__ = [
    "FEATURES",
    "GENERIC_PROCESSORS",
    "MACH",
    "MACH_BY_PROCESSOR",
    "PROCESSOR_FEATURES",
    "ProcessorFeatures",
    "TargetId",
    "Triple",
    "amdgpu_arch",
    "is_generic",
    "mach_of",
    "parse_triple",
    "processor_name",
]

#: ``e_flags & EF_AMDGPU_MACH`` (0xff) -> processor, every value of elf-header-flags-mach.ll
#: (r600 family: ELF32 objects of the old graphics ABI; amdgcn: gfx*), gfx940/gfx941 included
MACH: Mapping[int, str] = MappingProxyType({
    0x01: "r600", 0x02: "r630", 0x03: "rs880", 0x04: "rv670", 0x05: "rv710", 0x06: "rv730",
    0x07: "rv770", 0x08: "cedar", 0x09: "cypress", 0x0A: "juniper", 0x0B: "redwood",
    0x0C: "sumo", 0x0D: "barts", 0x0E: "caicos", 0x0F: "cayman", 0x10: "turks",
    0x20: "gfx600", 0x21: "gfx601", 0x3A: "gfx602",
    0x22: "gfx700", 0x23: "gfx701", 0x24: "gfx702", 0x25: "gfx703", 0x26: "gfx704",
    0x3B: "gfx705",
    0x28: "gfx801", 0x29: "gfx802", 0x2A: "gfx803", 0x3C: "gfx805", 0x2B: "gfx810",
    0x2C: "gfx900", 0x2D: "gfx902", 0x2E: "gfx904", 0x2F: "gfx906", 0x30: "gfx908",
    0x31: "gfx909", 0x3F: "gfx90a", 0x32: "gfx90c",
    0x40: "gfx940", 0x4B: "gfx941", 0x4C: "gfx942", 0x4F: "gfx950",
    0x33: "gfx1010", 0x34: "gfx1011", 0x35: "gfx1012", 0x42: "gfx1013",
    0x36: "gfx1030", 0x37: "gfx1031", 0x38: "gfx1032", 0x39: "gfx1033", 0x3E: "gfx1034",
    0x3D: "gfx1035", 0x45: "gfx1036",
    0x41: "gfx1100", 0x46: "gfx1101", 0x47: "gfx1102", 0x44: "gfx1103",
    0x43: "gfx1150", 0x4A: "gfx1151", 0x55: "gfx1152", 0x58: "gfx1153", 0x57: "gfx1154",
    0x5D: "gfx1170", 0x5E: "gfx1171", 0x5C: "gfx1172",
    0x48: "gfx1200", 0x4E: "gfx1201", 0x49: "gfx1250", 0x5A: "gfx1251", 0x50: "gfx1310",
    0x51: "gfx9-generic", 0x5F: "gfx9-4-generic", 0x52: "gfx10-1-generic",
    0x53: "gfx10-3-generic", 0x54: "gfx11-generic", 0x62: "gfx11-7-generic",
    0x59: "gfx12-generic", 0x5B: "gfx12-5-generic", 0x63: "gfx13-generic",
})  # fmt: skip
#: the inverse of :data:`MACH`
MACH_BY_PROCESSOR: Mapping[str, int] = MappingProxyType({v: k for k, v in MACH.items()})
#: the generic processors (code object v6 only; ``EF_AMDGPU_GENERIC_VERSION`` >= 1)
GENERIC_PROCESSORS = frozenset(p for p in MACH.values() if p.endswith("-generic"))
#: the only target ID features, in clang's canonical (sorted) order
FEATURES = ("sramecc", "xnack")

_PROCESSOR_RE = re.compile(r"^gfx(\d+)([0-9a-f])([0-9a-f])$")
_GENERIC_RE = re.compile(r"^gfx(\d+)(?:-(\d+))?-generic$")
_AMDGPU_ARCH_RE = re.compile(r"^amdgpu(\d+)(?:\.([0-9a-f]{1,2}))?$")


def processor_name(mach: int) -> str | None:
    """The processor of a MACH value (``e_flags & 0xff``), None for one no LLVM names."""
    return MACH.get(mach & 0xFF)


def mach_of(processor: str) -> int:
    """The MACH value of ``processor`` (``gfx942`` -> 0x4C); an unknown name is an
    :class:`~fatbinkit.errors.InvalidArgumentError`."""
    try:
        return MACH_BY_PROCESSOR[processor]
    except KeyError:
        raise InvalidArgumentError(f"unknown AMD GPU processor {processor!r}") from None


def is_generic(processor: str) -> bool:
    """Whether ``processor`` is a generic target (``gfx9-generic``, ``gfx11-generic``...)."""
    return processor in GENERIC_PROCESSORS or _GENERIC_RE.match(processor) is not None


@dataclass(frozen=True)
class ProcessorFeatures:
    """Whether a processor has the ``sramecc`` and ``xnack`` settings at all, and its
    wavefront size (ROCr's default: 64 before GFX10, 32 from GFX10)."""

    sramecc: bool
    xnack: bool
    wavefront_size: int


def _features() -> dict[str, ProcessorFeatures]:
    none, xnack, both = (False, False), (False, True), (True, True)
    table = {
        **dict.fromkeys(("gfx700", "gfx701", "gfx702", "gfx703", "gfx704", "gfx705", "gfx802",
                         "gfx803", "gfx805"), none),
        **dict.fromkeys(("gfx801", "gfx810", "gfx900", "gfx902", "gfx904", "gfx909", "gfx90c",
                         "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx9-generic",
                         "gfx10-1-generic"), xnack),
        **dict.fromkeys(("gfx906", "gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950",
                         "gfx9-4-generic"), both),
        **dict.fromkeys(("gfx1030", "gfx1031", "gfx1032", "gfx1033", "gfx1034", "gfx1035",
                         "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
                         "gfx1151", "gfx1200", "gfx1201", "gfx10-3-generic", "gfx11-generic",
                         "gfx12-generic"), none),
    }
    return {p: ProcessorFeatures(s, x, 64 if _major(p) < 10 else 32)
            for p, (s, x) in table.items()}


def _major(processor: str) -> int:
    m = _PROCESSOR_RE.match(processor) or _GENERIC_RE.match(processor)
    return int(m.group(1)) if m else 0


#: feature support of the processors the HIP runtime (CLR's ``getProcName``) knows; a processor
#: absent here (newer or older) is unknown, not "unsupported"
PROCESSOR_FEATURES: Mapping[str, ProcessorFeatures] = MappingProxyType(_features())


def _rank(value: bool | None) -> int:
    return 0 if value is None else 1 + value


@functools.total_ordering
@dataclass(frozen=True)
class TargetId:
    """A target ID: a processor plus the ``sramecc`` and ``xnack`` settings, each None
    (unspecified: any), True (``+``) or False (``-``).

    Hashable; ordered by processor generation (``gfx90a`` < ``gfx942`` < ``gfx1100``, generic
    targets after the processors of their generation), then unspecified < ``-`` < ``+``.
    """

    processor: str
    sramecc: bool | None = None
    xnack: bool | None = None

    def __post_init__(self) -> None:
        if not self.processor or not re.fullmatch(r"[A-Za-z0-9_.-]+", self.processor):
            raise InvalidArgumentError(f"bad AMD GPU processor name {self.processor!r}")
        for name in FEATURES:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise InvalidArgumentError(f"{name} is True, False or None, not {value!r}")

    @classmethod
    def parse(cls, text: str) -> TargetId:
        """Parse clang's form ``gfx942``, ``gfx942:xnack-``, ``gfx90a:sramecc+:xnack+``: a
        processor, then each of ``sramecc``/``xnack`` at most once with ``+`` or ``-``, in any
        order (clang's ``parseTargetIDWithFormatCheckingOnly``). Anything else is an
        :class:`~fatbinkit.errors.InvalidArgumentError` (a ``ValueError``): callers reading a
        string out of a file re-raise it as their format error."""
        if not isinstance(text, str):
            raise InvalidArgumentError(f"a target ID is a str, not {type(text).__name__}")
        processor, *features = text.split(":")
        settings: dict[str, bool] = {}
        for feature in features:
            name, sign = feature[:-1], feature[-1:]
            if sign not in ("+", "-") or name not in FEATURES:
                raise InvalidArgumentError(
                    f"bad feature {feature!r} in target ID {text!r} (sramecc or xnack, "
                    "then + or -)")
            if name in settings:
                raise InvalidArgumentError(f"feature {name} given twice in target ID {text!r}")
            settings[name] = sign == "+"
        if not processor:
            raise InvalidArgumentError(f"target ID {text!r} has no processor")
        return cls(processor, settings.get("sramecc"), settings.get("xnack"))

    @property
    def is_generic(self) -> bool:
        """Whether the processor is a generic target (``gfx11-generic``...)."""
        return is_generic(self.processor)

    @property
    def sort_key(self) -> tuple[int, int, int, int, str, int, int]:
        """(major, minor, stepping, generic, name, sramecc, xnack): the order of ``<``."""
        m = _PROCESSOR_RE.match(self.processor)
        g = _GENERIC_RE.match(self.processor)
        if m:
            major, minor, step, generic = int(m[1]), int(m[2], 16), int(m[3], 16), 0
        elif g:
            major, minor, step, generic = int(g[1]), int(g[2] or 0), 0xFF, 1
        else:
            major = minor = step = generic = 1 << 16  # unknown spellings last, by name
        return (major, minor, step, generic, self.processor, _rank(self.sramecc),
                _rank(self.xnack))

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, TargetId):
            return NotImplemented
        return self.sort_key < other.sort_key

    def __str__(self) -> str:
        """``gfx942:sramecc+:xnack-``: clang's canonical spelling, features sorted."""
        text = self.processor
        for name in FEATURES:
            value = getattr(self, name)
            if value is not None:
                text += f":{name}{'+' if value else '-'}"
        return text


def amdgpu_arch(processor: str) -> str | None:
    """The ``amdgpuX.YZ`` triple architecture newest LLVM writes for ``processor``
    (``gfx942`` -> ``amdgpu9.42``, ``gfx90a`` -> ``amdgpu9.0a``, ``gfx1100`` ->
    ``amdgpu11.00``, ``gfx9-4-generic`` -> ``amdgpu9.4``, ``gfx11-generic`` -> ``amdgpu11``:
    the ``-mtriple`` of each line of elf-header-flags-mach.ll); None for another name."""
    m = _PROCESSOR_RE.match(processor)
    if m:
        return f"amdgpu{m[1]}.{m[2]}{m[3]}"
    g = _GENERIC_RE.match(processor)
    if g:
        return f"amdgpu{g[1]}" + (f".{g[2]}" if g[2] else "")
    return None


def _processor_of_arch(arch: str) -> str | None:
    """The inverse of :func:`amdgpu_arch`; None for ``amdgcn`` and other names."""
    m = _AMDGPU_ARCH_RE.match(arch)
    if not m:
        return None
    major, rest = m[1], m[2]
    if rest is None:
        return f"gfx{major}-generic"
    if len(rest) == 1:
        return f"gfx{major}-{rest}-generic"
    return f"gfx{major}{rest}"


@dataclass(frozen=True)
class Triple:
    """A target triple as ``amdhsa.target`` and bundle entry IDs write it, split on ``-``:
    ``amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`` (arch ``amdgcn``, empty environment) or
    newest LLVM's ``amdgpu9.42-amd-amdhsa-unknown-gfx942``. ``target`` is None when the text
    ends after the OS or environment."""

    arch: str
    vendor: str
    os: str
    environment: str
    target: TargetId | None

    @property
    def processor(self) -> str | None:
        """The processor: the target ID's, else the one an ``amdgpuX.YZ`` arch names."""
        return self.target.processor if self.target else _processor_of_arch(self.arch)

    def __str__(self) -> str:
        head = f"{self.arch}-{self.vendor}-{self.os}"
        if self.target is None:
            return f"{head}-{self.environment}" if self.environment else head
        return f"{head}-{self.environment}-{self.target}"


def parse_triple(text: str) -> Triple:
    """Parse ``<arch>-<vendor>-<os>[-<environment>[-<target ID>]]``. The target ID is the
    fifth field and keeps its dashes (``gfx9-4-generic``). With an ``amdgpuX.YZ`` arch the
    processor must be the one it names. Errors: :class:`~fatbinkit.errors.InvalidArgumentError`."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a triple is a str, not {type(text).__name__}")
    parts = text.split("-", 4)
    if len(parts) < 3 or not all(parts[:3]):
        raise InvalidArgumentError(f"triple {text!r} is not <arch>-<vendor>-<os>[-<env>[-<id>]]")
    arch, vendor, os_, *rest = parts
    environment = rest[0] if rest else ""
    target = TargetId.parse(rest[1]) if len(rest) > 1 else None
    named = _processor_of_arch(arch)
    if target is not None and named is not None and named != target.processor:
        raise InvalidArgumentError(
            f"triple {text!r}: arch {arch} names {named}, the target ID {target.processor}")
    return Triple(arch, vendor, os_, environment, target)
