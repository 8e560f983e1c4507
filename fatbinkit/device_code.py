"""The vendor-neutral record of one image found in an input, :class:`DeviceCode`, and of a module
that holds none, :class:`EntrylessContainer`.

A :class:`DeviceCode` says in neutral words what every operation asks of an image: its
``vendor`` (``"cuda"``), ``kind`` (CUDA: ``"sass"``, ``"ptx"``, ``"ltoir"``), ``target``
(``"sm_90a"``, ``"compute_90"``), where it is (``source``, ``container``, ``offset``,
``member``), its bytes ``stored`` and ``uncompressed``, its ``compression`` and its
:meth:`~DeviceCode.data`. The vendor's own record of it (a fatbin entry, with its header) is
:attr:`DeviceCode.entry`, a :class:`Payload`: only the vendor's modules read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .formats.codec import DecompressionBudget
    from .formats.elf import Buffer

__all__ = ["LINUX", "WINDOWS", "DeviceCode", "EntrylessContainer", "HeldPayload", "Payload",
           "Place"]

#: the host OS of an input, from its file format (ELF: Linux, PE: Windows): which column of a
#: vendor's driver tables applies. None where the format does not say (a bare fatbin or cubin).
LINUX = "linux"
WINDOWS = "windows"


class Payload(Protocol):
    """A vendor's record of one stored image, as :class:`DeviceCode` reads it
    (:class:`~fatbinkit.formats.fatbin.FatbinEntry` is CUDA's)."""

    @property
    def vendor(self) -> str:
        """The vendor whose format this is (``"cuda"``)."""
        ...

    @property
    def image_kind(self) -> str:
        """:attr:`DeviceCode.kind`."""
        ...

    @property
    def target(self) -> str:
        """:attr:`DeviceCode.target`."""
        ...

    @property
    def stored(self) -> Buffer:
        """The payload as stored (compressed and/or padded): a view of the input."""
        ...

    @property
    def offset(self) -> int:
        """Where the record starts in the input it was parsed from (errors name it)."""
        ...

    @property
    def size(self) -> int:
        """Bytes the payload takes in the input."""
        ...

    @property
    def data_size(self) -> int:
        """Bytes of the image once decompressed."""
        ...

    @property
    def compression(self) -> str | None:
        """The codec of the stored payload (None: stored plainly)."""
        ...

    @property
    def identifier(self) -> str:
        """The name the producer gave the image (a source file name; ``""``: none)."""
        ...

    @property
    def name(self) -> str:
        """What the image is in the vendor's words (``ELF sm_90a``)."""
        ...

    def data(self, max_size: int = ..., budget: DecompressionBudget | None = None) -> bytes:
        """The image, decompressed (charged to ``budget``)."""
        ...

    def detached(self) -> Payload:
        """The same record over a copy of its payload (``bytes``): what crosses a process
        boundary. A ``ValueError`` where the view it holds was released."""
        ...


class HeldPayload:
    """The common half of a vendor's :class:`Payload` whose ``stored`` bytes are the image
    itself, as the input holds it or already inflated (AMD's bundle entries, Intel's images):
    its data is those bytes, its name its kind and target. The vendor's frozen dataclass has
    the fields."""

    stored: Buffer
    image_kind: str
    target: str

    @property
    def data_size(self) -> int:
        return len(self.stored)

    @property
    def identifier(self) -> str:
        return ""

    @property
    def name(self) -> str:
        return f"{self.image_kind} {self.target}"

    def data(self, max_size: int = 1 << 62, budget: DecompressionBudget | None = None) -> bytes:
        """The bytes as held (inflating, if any, was done and charged when they were found)."""
        return bytes(self.stored)


@dataclass(frozen=True)
class DeviceCode:
    """One image found in an input.

    ``source`` is the ELF section (``.nv_fatbin``, ``__nv_relfatbin``), the start symbol of an
    embedded blob (``__name_start``), or ``""`` for a bare fatbin/cubin/PTX file. ``container`` is
    the index of the container (module) across the whole input (file order; -1 for a bare
    image), ``offset`` the file offset of the entry header (of the image for bare code).
    ``member`` names the object of a static library (``ar`` archive) the code is in; its
    ``offset`` is in the archive, or, for a thin archive, in the member's own file.
    ``vendor``, ``kind`` and ``target`` are the neutral words the vendor gives it (module
    docstring); ``entry`` is the vendor's own record.
    """

    source: str
    container: int
    entry: Payload = field(repr=False)  # its header tail may be long: str() says what it is
    offset: int
    member: str = ""  # the archive member (a static library's object) holding it
    # found by the deep scan (scan(everywhere=True)) in a section the vendor's tools do not
    # read: device code the library hands the runtime itself, outside cuobjdump's view
    hidden: bool = field(default=False, kw_only=True)

    @property
    def vendor(self) -> str:
        """Whose rules load it: ``"cuda"`` (a name in :data:`fatbinkit.vendors.VENDORS`)."""
        return self.entry.vendor

    @property
    def kind(self) -> str:
        """What the image is, in the vendor's word: ``sass``, ``ptx``, ``ltoir``."""
        return self.entry.image_kind

    @property
    def target(self) -> str:
        """What it is built for, as the vendor spells it: ``sm_90a``, ``compute_90``."""
        return self.entry.target

    @property
    def stored(self) -> int:
        """Bytes the payload takes in the file (compressed, padded)."""
        return self.entry.size

    @property
    def uncompressed(self) -> int:
        """Bytes of the image once decompressed."""
        return self.entry.data_size

    @property
    def compression(self) -> str | None:
        return self.entry.compression

    @property
    def identifier(self) -> str:
        return self.entry.identifier

    @property
    def view(self) -> Buffer:
        """The payload as stored: a view of the input (released by
        :meth:`fatbinkit.binary.Binary.close`)."""
        return self.entry.stored

    def data(self, budget: DecompressionBudget | None = None) -> bytes:
        """The image, decompressed (charged to ``budget``)."""
        return self.entry.data(budget=budget)

    def charge(self, budget: DecompressionBudget) -> None:
        """Take what decompressing the image costs from ``budget`` (nothing when stored
        plainly; once per budget, however often it is then read)."""
        if self.compression is not None:
            budget.charge(self.uncompressed, self.entry.offset, id(self.entry))

    def __str__(self) -> str:
        """``.nv_fatbin container 0: ELF sm_90a at 0x1050, 4096 bytes (lz4, 1024 stored)``,
        ``bare image: PTX compute_90 at 0x0, 2310 bytes``."""
        where = (f"{self.source or 'fatbin'} container {self.container}" if self.container >= 0
                 else "bare image") + (" (hidden)" if self.hidden else "")
        codec = self.compression
        size = (f"{self.uncompressed} bytes ({codec}, {self.stored} stored)" if codec else
                f"{self.stored} bytes")
        return f"{where}: {self.entry.name} at {self.offset:#x}, {size}"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with a copy of its payload as stored (``bytes``; a view of a memory-mapped
        file or of the caller's buffer cannot cross a process boundary): an image sent to
        another process stands alone there, and reads as it reads here. An image of a closed
        :class:`~fatbinkit.binary.Binary` has no payload left: an
        :class:`~fatbinkit.errors.InvalidArgumentError`."""
        try:
            entry = self.entry.detached()
        except ValueError as err:  # a view released by Binary.close()
            raise InvalidArgumentError(f"cannot pickle {self}: the Binary it belongs to is "
                                       "closed (pickle it, or its items, before closing)") from err
        if self.hidden:
            return _hidden_code, (self.source, self.container, entry, self.offset, self.member)
        return DeviceCode, (self.source, self.container, entry, self.offset, self.member)


def _hidden_code(source: str, container: int, entry: Payload, offset: int,
                 member: str) -> DeviceCode:
    """A pickled :attr:`DeviceCode.hidden` image (``kw_only`` fields cannot be positional)."""
    return DeviceCode(source, container, entry, offset, member, hidden=True)


@dataclass(frozen=True)
class EntrylessContainer:
    """A container with no entry at all: what ``prune`` leaves of a module no kept target
    loads. The runtime still registers it (CUDA: its ``__fatbinwrap`` record and the host stubs
    of its kernels stay), so it is a module that holds no image for any GPU, its kernels
    unknown; ``source``, ``container``, ``member`` as in :class:`DeviceCode`, ``offset`` the
    file offset of its header."""

    source: str
    container: int
    offset: int
    member: str = ""
    vendor: str = field(kw_only=True)  # whose container it is (DeviceCode.vendor)
    # where its device code went, when it was moved out of the file rather than pruned (a
    # rocm-kpack ``HIPK`` wrapper: "a .kpack file (rocm-kpack)"): such a module is not judged
    moved: str = field(default="", kw_only=True)


@dataclass(frozen=True)
class Place:
    """Bytes of an input where device code may be: a section or an embedded blob of a host
    file (``source``: its name, as :attr:`DeviceCode.source`), or a whole file (``source``
    ``""``). ``base`` is the file offset of ``view``, ``first`` the index the first container
    found here takes across the input, ``fd`` the file (a reader may read through it rather
    than touch the memory map).

    ``host`` is the whole host file the place lies in (an ELF file or a PE file; an archive
    member's own bytes), None for a whole file: a vendor whose runtime finds its containers
    through records elsewhere in the file (HIP's ``.hipFatBinSegment`` wrappers) reads them
    there. ``host_base`` is the input's offset of ``host[0]`` (an archive member's offset, else
    0), so the place starts at ``host[base - host_base]``."""

    source: str
    view: memoryview = field(repr=False)
    base: int
    first: int
    fd: int | None = None
    host: memoryview | None = field(default=None, repr=False)
    host_base: int = 0
    # what inflating while finding code may spend (AMD's compressed bundles): the scan's
    budget: DecompressionBudget | None = field(default=None, repr=False, kw_only=True)
