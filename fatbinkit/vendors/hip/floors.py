"""The ROCm release an AMD image needs: the first release whose HIP runtime (CLR, comgr, ROCr)
loads it. Each floor names its source; [inferred] ones come from the date a change landed on
AMD's development branch and the release cut that followed it, not from a release note.

=====================  =======  ===============================================================
what                   ROCm     source
=====================  =======  ===============================================================
compressed bundle      6.2      ROCm/clr@rocm-6.2.0 ``hip_fatbin.cpp``: compressed bundles need
(CCOB v1, v2)                   comgr 2.8 ("comgr %zu.%zu cannot support commpressed mode which
                                need comgr 2.8+"), first shipped with ROCm 6.2.0;
                                ``hip_code_object.cpp`` gains the ``CCOB`` magic in rocm-6.2.0
                                (absent in 6.1). v2 (llvm PR #88827, 2024-04) [inferred]
CCOB v3                6.4      llvm PR #122307 (2025-01) after the 6.3 cut [inferred]
code object v4         4.1      LLVM review D99235 "[HIP] Change to code object v4 ... to match
                                ROCm 4.1" (the ``hipv4`` bundle kind comes with it)
code object v5         5.2      ROCm/ROCR-Runtime@rocm-5.2.0 ``amd_hsa_code.cpp``
                                (``ELFABIVERSION_AMDGPU_HSA_V5``, absent in 5.1)
code object v6         6.2      ROCm/ROCR-Runtime@rocm-6.2.0 ``amd_hsa_code.cpp`` (``HSA_V6``,
                                the generic MACH ids; absent in 6.1.0)
generic code object    6.4      ROCr "Generic ISA targets support" (2024-10-28) and CLR "Support
                                generic targets" (2024-11-29), both after the 6.3 cut [inferred]
SPIR-V (amdgcnspirv)   6.4      ROCm docs, "SPIR-V": "ROCm 6.4 introduces beta support ..."
=====================  =======  ===============================================================

Device floors (the first ROCr that knows the processor) come from ROCR-Runtime tags:
gfx942 rocm-5.7.0, gfx1150/gfx1151 rocm-6.1.0, gfx1200/gfx1201 rocm-6.2.0; gfx950 from ROCm 7.0
[inferred: ROCr support 2025-01-26; PyTorch builds it "starting in ROCm 7.0"]. Other processors
have no floor here: their first release is older than the tables or not known.
"""

from __future__ import annotations

import re

from ...decision import Floor, ImageInfo, Version
from ...errors import InvalidArgumentError
from .images import SPIRV, CodeTarget

__all__ = [
    "CCOB",
    "CODE_OBJECT",
    "DEVICE",
    "GENERIC",
    "INVALID_IMAGE",
    "NEWEST",
    "NOT_FOUND",
    "NOT_SUPPORTED",
    "NO_BINARY",
    "SPIRV_JIT",
    "as_rocm",
    "device_floor",
    "image_floors",
    "needs",
]

#: compressed bundle version -> ROCm
CCOB: dict[int, Version] = {1: (6, 2), 2: (6, 2), 3: (6, 4)}
#: code object version -> ROCm (v3 and older: not known here)
CODE_OBJECT: dict[int, Version] = {4: (4, 1), 5: (5, 2), 6: (6, 2)}
GENERIC: Version = (6, 4)
SPIRV_JIT: Version = (6, 4)
#: processor -> the first ROCm whose ROCr knows it
DEVICE: dict[str, Version] = {
    "gfx942": (5, 7), "gfx1150": (6, 1), "gfx1151": (6, 1), "gfx1200": (6, 2),
    "gfx1201": (6, 2), "gfx950": (7, 0),
}
#: the newest ROCm release the tables know
NEWEST: Version = (7, 2)

#: hipError_t names (HIP's hip_runtime_api.h; CLR hip_fatbin.cpp, hip_module.cpp): no code
#: object for the device (209); the module lacks the kernel asked for (500,
#: ``hipModuleGetFunction``); a compressed bundle its comgr cannot read (801); a code object
#: ROCr cannot load (200: [inferred], the loader's refusal of an unknown ABI version)
NO_BINARY = "hipErrorNoBinaryForGpu"
NOT_FOUND = "hipErrorNotFound"
NOT_SUPPORTED = "hipErrorNotSupported"
INVALID_IMAGE = "hipErrorInvalidImage"

_VERSION = re.compile(r"(?:rocm[- ]?)?(\d+)\.(\d+)(?:\.\d+)?", re.IGNORECASE)


def as_rocm(value: object, what: str = "ROCm") -> Version:
    """A ROCm release from ``"6.4"``, ``"6.4.1"``, ``"rocm-7.0"`` or ``(6, 4)`` (the point
    release dropped: floors are per minor release)."""
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return (value[0], value[1])
    m = _VERSION.fullmatch(str(value).strip())
    if m is None or isinstance(value, bool):
        raise InvalidArgumentError(f"{what} {value!r} is not a ROCm release (e.g. 6.4 or 7.0.2)")
    version = (int(m.group(1)), int(m.group(2)))
    if version < (1, 0):
        raise InvalidArgumentError(f"{what} {value!r} is not a ROCm release")
    return version


def needs(version: Version) -> str:
    return f"ROCm {version[0]}.{version[1]}"


def _floor(what: str, need: Version, why: str, error: str) -> Floor:
    return Floor(what, need, why, error, needs=needs(need))


def device_floor(processor: str) -> Floor | None:
    """The first ROCm that drives ``processor`` (None: older than the tables, or not known)."""
    need = DEVICE.get(processor)
    return None if need is None else _floor("device", need, f"a {processor} GPU", NO_BINARY)


def image_floors(image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
    """The ROCm floors of one image (code object version, compression, generic target,
    SPIR-V), and what could not be known."""
    arch: CodeTarget = image.arch
    floors: list[Floor] = []
    unknown: list[str] = []
    if image.kind == SPIRV:
        floors.append(_floor("spirv", SPIRV_JIT, "SPIR-V compiled at load", NO_BINARY))
    if arch.code_object is not None and arch.code_object in CODE_OBJECT:
        floors.append(_floor("code-object", CODE_OBJECT[arch.code_object],
                             f"code object v{arch.code_object}", INVALID_IMAGE))
    elif arch.code_object is not None:
        unknown.append(f"code object v{arch.code_object}: the first ROCm that loads it is not "
                       "known here")
    if arch.target.is_generic:
        floors.append(_floor("generic", GENERIC, f"generic target {arch.target.processor}",
                             NO_BINARY))
    if arch.bundle is not None:
        need = CCOB.get(arch.bundle)
        if need is None:
            unknown.append(f"compressed bundle v{arch.bundle} is newer than the tables")
        else:
            floors.append(_floor("compression", need,
                                 f"a compressed bundle (CCOB v{arch.bundle})", NOT_SUPPORTED))
    return tuple(floors), tuple(unknown)
