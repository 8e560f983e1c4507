"""The records of Intel XPU images: :class:`XpuImage`, one image as found (a
:class:`~fatbinkit.device_code.Payload`), and :class:`XpuTarget`, what a device selects it by;
the kinds of image Intel's toolchains emit."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from ...device_code import HeldPayload

if TYPE_CHECKING:
    from ...formats.elf import Buffer

__all__ = ["OPENCL_ELF", "SPIR64", "SPIRV", "ZEBIN", "XpuImage", "XpuTarget"]

#: a zebin (native code for one device), SPIR-V (compiled by the driver at load), a legacy
#: OpenCL ELF (patch-token native code of compilers before zebin; listed, not read)
ZEBIN, SPIRV, OPENCL_ELF = "zebin", "spirv", "opencl-elf"
#: the target of SPIR-V: SYCL's ``spir64`` (the triple of its bundle sections)
SPIR64 = "spir64"


@dataclass(frozen=True)
class XpuTarget:
    """What a device selects an image by: an IP version (``12.55.8``), a product name as ocloc
    spells it (``intel:tgllp``) or ``spir64``."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class XpuImage(HeldPayload):
    """One Intel image (a :class:`~fatbinkit.device_code.Payload`): a SPIR-V module, a zebin or
    an OpenCL ELF, bare, in a SYCL bundle section or an ocloc ``ar`` fat binary
    (``identifier_text``: its member name, ``64.12.55.8``; ``""`` elsewhere)."""

    vendor: ClassVar[str] = "xpu"

    image_kind: str
    target: str
    stored: Buffer = field(repr=False)
    offset: int
    size: int
    identifier_text: str = ""
    version: str | None = None  # SPIR-V's "1.0", a zebin's .ze_info version
    # the codec of the section it came in (Intel's compiler zstd-compresses SYCL device images);
    # ``stored`` then holds the inflated image and ``size`` its share of the compressed bytes
    packed: str | None = None

    @property
    def compression(self) -> str | None:
        return self.packed

    def detached(self) -> XpuImage:
        return replace(self, stored=bytes(self.stored))
