"""The records of HIP images: :class:`HipImage`, one image as found (a
:class:`~fatbinkit.device_code.Payload`), and :class:`CodeTarget`, what the runtime selects it
by; the kinds of image AMD's toolchains put in bundles."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from ...device_code import HeldPayload
from ...formats.amdgpu import TargetId

if TYPE_CHECKING:
    from ...formats.elf import Buffer

__all__ = ["BITCODE", "HSACO", "SPIRV", "CodeTarget", "HipImage"]

#: an AMDGPU code object (what AOTInductor calls ``hsaco``), SPIR-V the runtime compiles at
#: load, and LLVM bitcode (relocatable device code: linked into a code object, never loaded)
HSACO, SPIRV, BITCODE = "hsaco", "spirv", "bitcode"


@dataclass(frozen=True)
class CodeTarget:
    """What the runtime selects an image by: its target ID (from the code object's ``e_flags``;
    for SPIR-V, ``amdgcnspirv``), the generic version of a generic code object, and its code
    object version (None where not an ELF) and the version of the compressed bundle it
    came in (None: a plain one)."""

    target: TargetId
    generic_version: int | None = None
    code_object: int | None = None
    bundle: int | None = None  # the CCOB version of the compressed bundle holding it
    hidden: bool = False  # described past the 4096 header bytes the runtime reads

    @property
    def processor(self) -> str:
        return self.target.processor

    def __str__(self) -> str:
        return str(self.target)


@dataclass(frozen=True)
class HipImage(HeldPayload):
    """One HIP image (a :class:`~fatbinkit.device_code.Payload`): a bundle entry, an
    OffloadBinary image or a bare code object. ``stored`` is the image as the input holds it:
    a view of the input, or for an entry of a compressed bundle its bytes once the bundle is
    decompressed; ``size`` is then its share of the bundle's compressed bytes (by uncompressed
    size: a compressed bundle is one zstd/zlib stream, not one per entry). ``identifier_text``
    is the bundle entry ID (``hipv4-amdgcn-amd-amdhsa--gfx942``)."""

    vendor: ClassVar[str] = "hip"

    image_kind: str
    target: str
    stored: Buffer = field(repr=False)
    offset: int
    size: int
    compression: str | None = None
    identifier_text: str = ""
    code_object: int | None = None  # code object version (3..6) of an ELF image
    generic_version: int | None = None
    bundle_version: int | None = None  # the CCOB version of the compressed bundle holding it
    hidden: bool = False  # its descriptor lies past the header bytes the runtime reads

    def detached(self) -> HipImage:
        return replace(self, stored=bytes(self.stored))
