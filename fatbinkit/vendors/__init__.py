"""GPU vendors: each one's device-code formats, targets, runtimes and loading rules behind one
interface, :class:`Vendor`, which the operations (binary, collection, slim, diff, gate, the CLI)
call without knowing which vendor they hold. CUDA's is :data:`fatbinkit.vendors.cuda.CUDA`.

An operation holds a :class:`~fatbinkit.device_code.DeviceCode` and asks :func:`of` for its
vendor; every member of the interface replaces a call an operation made to CUDA's code
directly (``../shared/VENDORS.md`` lists them). :func:`registered` plugs another vendor in (a
test's toy format; AMD and Intel next)::

    from fatbinkit import vendors
    names, toolkit = vendors.of(code).outline(code)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..decision import LOADABLE_KINDS
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..decision import Decision, Floor, ImageInfo
    from ..device_code import DeviceCode, EntrylessContainer, Place
    from ..formats.codec import DecompressionBudget

__all__ = [
    "VENDORS",
    "Vendor",
    "device",
    "device_machine",
    "of",
    "of_target",
    "register",
    "registered",
    "row_key",
    "runtime",
    "target_filter",
    "target_key",
    "target_kind",
]


class Vendor(Protocol):
    """What the operations ask of a vendor; every member takes and gives neutral records
    (:class:`~fatbinkit.device_code.DeviceCode`, :class:`~fatbinkit.decision.ImageInfo`,
    :class:`~fatbinkit.decision.Decision`) and the vendor's own words as ``str``."""

    @property
    def name(self) -> str:
        """The name :attr:`DeviceCode.vendor <fatbinkit.device_code.DeviceCode.vendor>`
        holds."""
        ...

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every kind of image the vendor names, in the order it lists them."""
        ...

    @property
    def function_kinds(self) -> frozenset[str]:
        """The kinds of image that hold functions with resources (:meth:`functions`)."""
        ...

    @property
    def compressed_apart(self) -> bool:
        """Each image is compressed on its own, so its stored bytes are its own (CUDA's fatbin
        entries); False where a container is compressed whole (AMD's compressed offload
        bundles), whose images' stored bytes are shares of it, which a rewrite changes."""
        ...

    @property
    def machines(self) -> frozenset[int]:
        """The ELF ``e_machine`` values of the vendor's device code (CUDA: 190, a cubin): an
        ELF file of one is device code, not a host library to search."""
        ...

    @property
    def not_found(self) -> str:
        """The runtime's name for a kernel the loaded image lacks (CUDA:
        ``CUDA_ERROR_NOT_FOUND``, what ``cuModuleGetFunction`` returns)."""
        ...

    @property
    def loadable(self) -> frozenset[str]:
        """The kinds of image a device loads (CUDA: SASS and PTX): listed by default, read
        for kernel names, grouped into modules; other kinds (LTO-IR) are listed with
        ``all``."""
        ...

    def sections(self, present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
        """The sections of a host file (ELF, or PE with ``pe``) whose sections are
        ``present`` that hold this vendor's containers, as its own tools select them (CUDA:
        cuobjdump's rule for ``.nv_fatbin`` and ``__nv_relfatbin``; ``all``: every one)."""
        ...

    def read(self, place: Place, claimed: bool,
             ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
        """The images at ``place``, and its containers with no entry: for a ``claimed``
        section (one :meth:`sections` names), its containers, anything else there a
        :class:`~fatbinkit.errors.FormatError`; for an embedded blob or a whole file, None
        when the bytes are not this vendor's."""
        ...

    def search(self, place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
        """The vendor's device code anywhere in ``place``, a section no tool reads (the deep
        scan, :func:`fatbinkit.scan.scan` with ``everywhere``): images a library hands the
        runtime itself, found by their structure, each a module of its own
        (:attr:`~fatbinkit.device_code.DeviceCode.hidden`)."""
        ...

    def device(self, value: object, what: str = "GPU arch") -> Any | None:
        """The GPU ``value`` names (CUDA: an :class:`~fatbinkit.formats.arch.Arch` of a
        compute capability NVIDIA lists, no suffix), its ``str()`` its name; None when
        ``value`` is not this vendor's spelling; :class:`~fatbinkit.errors.
        InvalidArgumentError` (naming ``what``) when it is, but no such GPU exists."""
        ...

    def runtime(self, value: object, what: str = "driver") -> tuple[int, int]:
        """A runtime version (CUDA: a driver, as the CUDA version it implements), from any way
        a user gives one."""
        ...

    @property
    def words(self) -> Mapping[str, str]:
        """The vendor's words in text output: ``native`` (code for the GPU: CUDA ``SASS``;
        ``native_key`` its count's key in JSON, ``sass``),
        ``jit`` (IR compiled at load: ``PTX JIT``), ``floors`` (``driver floors``) and
        ``version`` (the language version a listing shows: ``PTX ISA``; ``""``: none;
        ``versions_key`` its key in JSON, ``ptx_versions``),
        ``runtime`` (what names a runtime version: ``driver CUDA`` 12.8, ``ROCm`` 6.4),
        ``unchecked`` (the note when no runtime is given) and ``jit_note`` (what JIT costs)."""
        ...

    @property
    def runtime_label(self) -> str:
        """What its runtime versions are called: ``"CUDA"`` (``CUDA 12.8``)."""
        ...

    def runtime_text(self, version: tuple[int, int], host: str | None = None,
                     release: Any = None) -> str:
        """A runtime version with the driver versions that implement it on ``host``:
        ``CUDA 12.9 (Linux driver >= 575.51.03)``."""
        ...

    def spell_device(self, device: Any) -> str:
        """The text that names ``device`` again (CUDA: ``sm_90``, ``future:sm_130``)."""
        ...

    def spell_runtime(self, version: tuple[int, int]) -> str:
        """The text that gives a runtime version again (CUDA: ``12.8``, or a driver's own
        number, ``580.65.06``)."""
        ...

    def runtime_name(self, version: tuple[int, int]) -> str:
        """``"13.0"``; a driver given by its own number, that number."""
        ...

    def last_runtime(self, device: Any) -> tuple[int, int] | None:
        """The last runtime version that drives ``device`` (None: still driven)."""
        ...

    def gap(self, device: Any, need: tuple[int, int]) -> str | None:
        """Why no runtime that drives ``device`` meets ``need``, if none does."""
        ...

    def every_device(self, codes: Sequence[DeviceCode] = ()) -> tuple[Any, ...]:
        """Every GPU the vendor's tables list (``check --min-driver``'s default), then those
        of ``codes`` (its images: a file's) are built for that the tables do not list yet
        (CUDA: SASS for an SM newer than the device table, as a future GPU, whose floor is a
        driver newer than any known)."""
        ...

    def target_filter(self, value: object) -> Any | None:
        """An ``--arch`` filter the vendor spells (CUDA: ``sm_90``, ``compute_90a``, an
        :class:`~fatbinkit.formats.arch.Arch`), with ``matches(kind, target)``,
        ``matches_device(device)`` and a ``str()`` that gives it again; None when ``value`` is
        not this vendor's spelling; :class:`~fatbinkit.errors.InvalidArgumentError` when it is,
        but wrong."""
        ...

    def sort_key(self, kind: str, target: str) -> tuple[Any, ...]:
        """Where a (kind, target) row goes in a summary: CUDA's, PTX before SASS before LTO-IR,
        then by SM number and suffix."""
        ...

    def target_kind(self, target: str) -> str | None:
        """The kind of image a target spelled ``target`` names (CUDA: ``compute_90`` PTX,
        ``sm_90a`` SASS); None, or an :class:`~fatbinkit.errors.InvalidArgumentError` that
        says why, when it is not this vendor's spelling."""
        ...

    def target_key(self, target: str) -> tuple[Any, ...]:
        """Where one of this vendor's targets sorts among its others."""
        ...

    def fingerprint(self, code: DeviceCode) -> bytes:
        """What, besides the stored payload, makes two images the same (CUDA: the entry
        header)."""
        ...

    def profile(self, code: DeviceCode) -> tuple[ImageInfo, list[tuple[Any, ...]]]:
        """An image read in full for comparison (``diff``, ``gate``), with no budget (callers
        charge first): its :class:`~fatbinkit.decision.ImageInfo` and one plain tuple per
        function: for :attr:`function_kinds`, ``(name, entry, registers, stack, shared, local,
        constant banks, spill stores, spill loads, size)``; for other kinds ``(name, True)``
        per kernel."""
        ...

    def file_suffix(self, code: DeviceCode) -> str:
        """``.<target>.<ext>`` of an extracted image's file name (CUDA: cuobjdump's,
        ``.sm_90a.cubin``, ``.compute_90.ptx``)."""
        ...

    def version(self, code: DeviceCode) -> str | None:
        """The version of the language an image is written in, from its header (CUDA: a
        PTX image's PTX ISA, ``"8.4"``); None for kinds without one."""
        ...

    def details(self, code: DeviceCode) -> dict[str, Any]:
        """The vendor's own members of an image's listing row (``ls --json``; CUDA:
        ``ptx_version``; AMD: the bundle entry ID and code object version)."""
        ...

    def image_details(self, image: ImageInfo) -> dict[str, Any]:
        """The vendor's own members of an image's row in ``check --json`` (CUDA:
        ``ptx_version``, ``toolkit``; AMD: code object, generic and CCOB versions)."""
        ...

    def runtime_numbers(self, release: Any, host: str | None) -> dict[str, Any]:
        """The vendor's own members of a verdict's minimum runtime in JSON (CUDA: the Linux
        and Windows driver versions and the input's OS; AMD: none, a ROCm release is its
        number)."""
        ...

    def outline(self, code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
        """An image's kernel names and the toolkit that built it (None: not recorded), read
        from its payload with no budget (callers charge first); ``[]`` for kinds with no
        kernels to read."""
        ...

    def toolkit_name(self, toolkit: tuple[int, int]) -> str:
        """``"CUDA 12.4"``: how a summary names a toolkit :meth:`outline` found."""
        ...

    def functions(self, code: DeviceCode) -> tuple[Any, ...]:
        """Per-function resources of an image, as the vendor's records (CUDA:
        :class:`~fatbinkit.formats.cubin.CubinFunction`, ``cuobjdump -res-usage``); ``()`` for
        kinds that have none (PTX). Read with no budget: callers charge first."""
        ...

    def function_code(self, code: DeviceCode, data: bytes) -> tuple[tuple[str, bytes], ...]:
        """Each function's machine code as the image stores it, ``(name, bytes)``, from
        ``data``, the image as :meth:`DeviceCode.data` gives it (CUDA: a cubin's
        ``.text.<name>`` sections); ``()`` for kinds with no functions to compare."""
        ...

    def header_image(self, code: DeviceCode, label: str = "") -> ImageInfo | None:
        """What the header alone says of an image a device loads (its kernels unknown); None
        for kinds no device loads."""
        ...

    def image(self, code: DeviceCode, budget: DecompressionBudget | None = None,
              ) -> ImageInfo | None:
        """The image as read from its payload (kernels, toolkit), decompression charged to
        ``budget``; None for kinds no device loads."""
        ...

    def may_load(self, image: ImageInfo, device: Any) -> bool:
        """Whether ``device`` could load ``image`` at all, by target alone (no runtime)."""
        ...

    def extracted(self, code: DeviceCode, budget: DecompressionBudget | None = None) -> bytes:
        """The bytes ``extract`` writes for an image (CUDA: PTX without its trailing NULs, as
        cuobjdump writes it), decompression charged to ``budget``."""
        ...

    def devices(self, images: Iterable[ImageInfo]) -> tuple[str, ...]:
        """The GPUs a summary shows for a file holding ``images``: every one the vendor's
        tables know from the oldest still of interest, and older ones the file has code
        for."""
        ...

    def generation(self, device: str) -> str:
        """The product generation of a GPU target (``"Hopper"``; ``"?"``: not known)."""
        ...

    def decide(self, images: Iterable[ImageInfo], device: Any, runtime: Any = None, *,
               raw: bool = False) -> Decision:
        """The image the runtime loads on ``device`` from one module's ``images`` (with
        ``runtime``, a driver or runtime version the vendor parses; None: floors reported,
        not applied), or why none."""
        ...

    def floors(self, image: ImageInfo) -> tuple[tuple[Floor, ...], tuple[str, ...]]:
        """The runtime floors of one image, and what could not be known about them."""
        ...

    def decision_key(self, image: ImageInfo, device: Any) -> Hashable:
        """What :meth:`decide` reads of an image for ``device`` (one of the vendor's GPUs: as
        :meth:`decide` gets it): two modules whose images have equal keys, position by
        position, are decided alike on that GPU, but for which of their images the decision
        names (:meth:`fatbinkit.imagesets.ImageSet.judged` decides each such shape once per
        GPU and runtime). :meth:`decide` must name the very image objects it is given (they
        are swapped for the other module's by position)."""
        ...


#: the vendors fatbinkit knows, by name (:func:`registered` adds one for a while)
VENDORS: dict[str, Vendor] = {}


def register(vendor: Vendor) -> None:
    """Add ``vendor`` (a name taken already is refused)."""
    if vendor.name in VENDORS:
        raise InvalidArgumentError(f"a vendor named {vendor.name!r} is registered already")
    VENDORS[vendor.name] = vendor
    _changed()


@contextlib.contextmanager
def registered(vendor: Vendor) -> Iterator[Vendor]:
    """``with registered(v):``: ``v`` is a vendor inside the block only."""
    register(vendor)
    try:
        yield vendor
    finally:
        del VENDORS[vendor.name]
        _changed()


def _changed() -> None:
    """After the registry changed: the spellings found are forgotten, and the kinds an
    :class:`~fatbinkit.decision.ImageInfo` may have are the vendors' loadable ones."""
    _SPELLINGS.clear()
    LOADABLE_KINDS[:] = [k for v in VENDORS.values() for k in v.kinds if k in v.loadable]


def of(code: DeviceCode) -> Vendor:
    """The vendor whose rules load ``code``."""
    try:
        return VENDORS[code.vendor]
    except KeyError:
        raise InvalidArgumentError(f"{code}: no vendor named {code.vendor!r} is "
                                   "registered") from None


# target -> (its vendor, its kind): asked per kernel of a library (diff, gate); cleared when the
# vendors change
_SPELLINGS: dict[str, tuple[Vendor, str]] = {}
_SPELLINGS_KEPT = 4096


def _first(ask: Callable[[Vendor], Any], refusal: Callable[[], str]) -> tuple[Vendor, Any]:
    """The first vendor whose answer to ``ask`` is not None, and that answer; when none answers,
    the :class:`~fatbinkit.errors.InvalidArgumentError` of a later vendor that refused it (the
    others answer None for what is not theirs: ``gfx11-generic`` is AMD's, refused in AMD's
    words), else the first vendor's (CUDA's, which refuses what it cannot read: the words
    NVIDIA users know), else ``refusal()`` (made only then: a check asks thousands of times)."""
    first: InvalidArgumentError | None = None
    error: InvalidArgumentError | None = None
    for n, vendor in enumerate(VENDORS.values()):
        try:
            found = ask(vendor)
        except InvalidArgumentError as e:
            if n:
                error = error or e
            else:
                first = e
            continue
        if found is not None:
            return vendor, found
    raise error or first or InvalidArgumentError(refusal())


def _spelling(target: str) -> tuple[Vendor, str]:
    found = _SPELLINGS.get(target)
    if found is None:
        found = _first(lambda v: v.target_kind(target),
                       lambda: f"{target!r} is not a target any vendor spells "
                               f"({', '.join(VENDORS)})")
        if len(_SPELLINGS) >= _SPELLINGS_KEPT:  # hostile input: many spellings
            _SPELLINGS.clear()
        _SPELLINGS[target] = found
    return found


def of_target(target: str) -> Vendor:
    """The vendor that spells ``target`` (``sm_90a``: CUDA)."""
    return _spelling(target)[0]


def target_kind(target: str) -> str:
    """The kind of image ``target`` names, as the vendor spelling it says (``compute_90``:
    ``ptx``); when no vendor spells it, the first vendor's
    :class:`~fatbinkit.errors.InvalidArgumentError` (CUDA's: not a GPU arch)."""
    return _spelling(target)[1]


def target_key(target: str) -> tuple[Any, ...]:
    """Where ``target`` sorts: by vendor, then the vendor's own order."""
    vendor, _ = _spelling(target)
    return (vendor.name, *vendor.target_key(target))


def device(value: object, what: str = "GPU arch") -> tuple[Vendor, Any]:
    """The vendor of the GPU ``value`` names, and that GPU (:meth:`Vendor.device`); when no
    vendor knows it, the first vendor's error (CUDA's, for ``sm_91``: no such GPU)."""
    return _first(lambda v: v.device(value, what),
                  lambda: f"{what} {value!r}: no vendor names a GPU so")


def target_filter(value: object) -> Any:
    """The ``--arch`` filter ``value`` spells, from the first vendor that spells it
    (:meth:`Vendor.target_filter`); when none does, the first vendor's error."""
    return _first(lambda v: v.target_filter(value),
                  lambda: f"{value!r} is an arch no vendor spells")[1]


def runtime(gpus: Sequence[tuple[Vendor, Any]], value: object, what: str = "driver",
            ) -> tuple[int, int] | None:
    """``value`` (None: none) as the runtime version of the vendor of ``gpus``
    (:func:`device`'s answers; none: the first vendor's, CUDA's); a runtime given with the GPUs
    of several vendors is an :class:`~fatbinkit.errors.InvalidArgumentError`: whose it is
    cannot be told."""
    if value is None:
        return None
    owners = list(dict.fromkeys(v.name for v, _ in gpus)) or [next(iter(VENDORS))]
    if len(owners) > 1:
        raise InvalidArgumentError(f"a {what} goes with the GPUs of one vendor, not of "
                                   f"{' and '.join(owners)}: check each vendor's GPUs apart")
    return VENDORS[owners[0]].runtime(value, what)


def device_machine(machine: int) -> bool:
    """Whether an ELF file of ``e_machine`` ``machine`` is a vendor's device code (a cubin, an
    AMDGPU code object) rather than a host file."""
    return any(machine in v.machines for v in VENDORS.values())


def row_key(kind: str, target: str) -> tuple[Any, ...]:
    """Where a summary row of ``kind`` images for ``target`` goes: by vendor, then the
    vendor's own order (:meth:`Vendor.sort_key`)."""
    vendor, _ = _spelling(target)
    return (vendor.name, *vendor.sort_key(kind, target))


def _install() -> None:
    from .cuda import CUDA
    from .hip import HIP
    from .xpu import XPU

    register(CUDA)
    register(HIP)
    register(XPU)


_install()
