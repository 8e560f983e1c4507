"""What changed between two builds: ``fatbinkit diff OLD NEW``, and the snapshot a CI gate keeps.

A :class:`Snapshot` is everything a comparison needs from one input (a file, a wheel or a folder,
:mod:`fatbinkit.collection`), read once on every core: per library, every function of every
cubin with what ``cuobjdump -res-usage`` reports plus its spills and SASS size, every PTX entry,
per (kind, arch) the images, bytes, codecs, producer toolkits and minimum driver
(:func:`fatbinkit.compat.image_floors`), per module (fatbin container) the archs it carries, and
per GPU what each module loads (:class:`fatbinkit.binary.DeviceSummary`). It is also what
``fatbinkit gate --write-baseline`` stores (:meth:`Snapshot.to_dict`, read back by
:meth:`Snapshot.from_dict`).

:func:`diff` pairs libraries by path, then by :func:`fatbinkit.collection.member_key`
(``libcublasLt.so.12`` with ``.so.13``), and within a library functions by (mangled name, arch):
SASS archs are ``sm_90a``-style, PTX ``compute_90``-style, with ``a``/``f`` kept apart. A name
that occurs more than once for one arch (the same internal kernel in two translation units) is
paired in file order. A :class:`Diff` holds the kernels ``added``, ``removed`` and ``changed``
(one :class:`FieldChange` per field), coverage per library and module, what each GPU loads, and
per-arch facts; :meth:`Diff.filter` narrows it by arch, kernel and to regressions.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from . import vendors
from .binary import ArchFilter, Binary, DeviceSummary, KernelFilter, Summary, _size, demangle
from .collection import Member, binaries, member_key, named
from .decision import dotted, version_numbers
from .errors import FatbinkitError, FormatError, InvalidArgumentError
from .formats.arch import Arch
from .formats.codec import DecompressionBudget
from .parallel import as_jobs
from .progress import Progress

if TYPE_CHECKING:
    from .decision import ImageInfo
    from .device_code import DeviceCode
    from .imagesets import ImageSet

__all__ = [
    "COLUMNS",
    "FIELDS",
    "SNAPSHOT_FORMAT",
    "WORSE_WHEN_HIGHER",
    "ArchChange",
    "ArchImages",
    "CoverageChange",
    "DeviceChange",
    "Diff",
    "FieldChange",
    "KernelImage",
    "Library",
    "ModuleArchs",
    "ModuleChange",
    "Snapshot",
    "diff",
    "images_read",
    "read_library",
    "snapshot",
]

SNAPSHOT_FORMAT = "fatbinkit-snapshot/1"
# The per-function figures compared, in report order; constant banks follow as "constant[N]".
FIELDS = ("registers", "stack", "spill_stores", "spill_loads", "shared", "local", "size")
# Fields whose rise is a regression (more registers: lower occupancy; spills, stack and local:
# memory traffic; shared: fewer blocks per SM). SASS size and constant banks are reported only.
WORSE_WHEN_HIGHER = ("registers", "stack", "spill_stores", "spill_loads", "shared", "local")
_VERDICT_RANK = {"native": 3, "jit": 2, "partial": 1, "none": 0}
COLUMNS = ["kernel", "arch", "instance", "module", "entry", *FIELDS, "constant"]  # snapshot rows
_Outline = tuple["ImageInfo", list[tuple[Any, ...]]]  # an image read, and its functions
# an image read for a Library (Library.read, by digest): its digest, ImageInfo, functions (the
# rows of Vendor.profile), driver floor (None: newer than the tables) and entry kernel names
_Read = tuple[bytes, "ImageInfo", list[tuple[Any, ...]], "tuple[int, int] | None",
              frozenset[str]]


@dataclass(frozen=True)
class KernelImage:
    """One function in one image of a library: its mangled ``kernel`` name, the image's
    ``arch`` (``sm_90a`` SASS, ``compute_90`` PTX), ``instance`` (0, or the n-th time this name
    occurs for this arch), the ``module`` (container) holding it, and for SASS its resources:
    ``cuobjdump -res-usage``'s figures, spills (None: the toolkit did not record them) and the
    code ``size``. PTX entries carry no figures (None)."""

    library: str
    kernel: str
    arch: str
    instance: int
    module: int
    entry: bool
    registers: int | None = None
    stack: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    shared: int | None = None
    local: int | None = None
    size: int | None = None
    constant: Mapping[int, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``sass`` or ``ptx``: what the vendor spelling its :attr:`arch` says
        (:func:`fatbinkit.vendors.target_kind`)."""
        return vendors.target_kind(self.arch)

    def values(self) -> dict[str, int | None]:
        """The compared figures by field name (:data:`FIELDS`, then ``constant[N]``)."""
        out: dict[str, int | None] = {f: getattr(self, f) for f in FIELDS}
        out.update({f"constant[{bank}]": size for bank, size in sorted(self.constant.items())})
        return out

    def to_dict(self) -> dict[str, Any]:
        out = {"library": self.library, "kernel": self.kernel, "arch": self.arch,
               "kind": self.kind, "instance": self.instance, "module": self.module,
               "entry": self.entry, "registers": self.registers, "stack": self.stack,
               "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
               "shared": self.shared, "local": self.local, "size": self.size}  # FIELDS' order
        if self.constant:  # then the banks, as values() gives them
            out.update({f"constant[{bank}]": size for bank, size in sorted(self.constant.items())})
        return out

    def __str__(self) -> str:
        if self.kind == "ptx":
            return f"{self.arch} {self.kernel} (PTX)"
        spills = ("" if self.spill_stores is None else
                  f", spills {self.spill_stores}/{self.spill_loads}")
        return (f"{self.arch} {self.kernel}: {self.registers} registers, stack {self.stack}"
                f"{spills}, shared {self.shared}, local {self.local}, {self.size} bytes")


@dataclass(frozen=True)
class ArchImages:
    """One (kind, arch) of a library: images, bytes stored and uncompressed, codecs, the CUDA
    releases that built its cubins, and the lowest driver (CUDA version) every one of its images
    loads with (None: a floor newer than the tables, or nothing recorded)."""

    kind: str
    arch: str
    entries: int
    stored: int
    uncompressed: int
    compression: tuple[str, ...]
    toolkits: tuple[str, ...]
    min_driver: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "arch": self.arch, "entries": self.entries,
                "stored": self.stored, "uncompressed": self.uncompressed,
                "compression": list(self.compression), "toolkits": list(self.toolkits),
                "min_driver": self.min_driver}

    def __str__(self) -> str:
        return (f"{self.kind} {self.arch}: {self.entries} images, {_size(self.uncompressed)}, "
                f"min driver {self.min_driver or '?'}")


@dataclass(frozen=True)
class ModuleArchs:
    """One fatbin container (or bare image): its entry kernels and the archs of its images."""

    index: int
    kernels: tuple[str, ...]
    sass: tuple[str, ...]
    ptx: tuple[str, ...]

    @property
    def label(self) -> str:
        """The module named by its first kernel (demangled) and how many more it holds."""
        if not self.kernels:
            return f"module {self.index} (no kernels)"
        more = len(self.kernels) - 1
        return demangle(self.kernels[0]) + (f" (+{more} more)" if more else "")

    def to_dict(self) -> dict[str, Any]:
        """The archs under the vendor's keys: CUDA ``sass`` and ``ptx``, AMD and Intel
        ``native`` and ``jit`` (the vendor of the module's first target)."""
        first = next(iter((*self.sass, *self.ptx)), None)
        native, jit = ("sass", "ptx") if first is None else (
            vendors.of_target(first).words["native_key"],
            "ptx" if vendors.of_target(first).words["native_key"] == "sass" else "jit")
        return {"index": self.index, "kernels": list(self.kernels), native: list(self.sass),
                jit: list(self.ptx)}

    def __str__(self) -> str:
        """``add(float*) (+2 more): sm_80, sm_90, compute_90``."""
        return f"{self.label}: {', '.join((*self.sass, *self.ptx)) or 'no images'}"


@dataclass(frozen=True)
class Library:
    """What one binary of a snapshot holds (``name``: its path inside the input).

    ``kernels`` read by :func:`read_library` are kept as the workers' rows until asked for
    (:class:`_Rows`): :func:`diff` compares the rows and makes :class:`KernelImage` objects only
    for the kernels it reports; the first read of ``kernels`` makes them all, once."""

    name: str
    kernels: tuple[KernelImage, ...]
    archs: tuple[ArchImages, ...]
    modules: tuple[ModuleArchs, ...]
    devices: tuple[DeviceSummary, ...]
    # what each image read gave, by _digest: for snapshot(like=); not compared, not stored
    read: Mapping[bytes, _Read] = field(default_factory=dict, compare=False, repr=False)
    # the modules as the driver sees them (fatbinkit.compat): for gate --require-arch; ditto
    sets: tuple[ImageSet, ...] = field(default=(), compare=False, repr=False)
    # the binary's summary as read_library made it (headers only): for fatbinkit.report; ditto
    summary: Summary | None = field(default=None, compare=False, repr=False)

    def coverage(self, kind: str) -> frozenset[str]:
        return frozenset(a.arch for a in self.archs if a.kind == kind)

    def __repr__(self) -> str:
        """Counts, not contents (cuBLAS has 10^5 kernel images)."""
        return (f"Library(name={_short(self.name)!r}, kernels={_count_kernels(self)}, "
                f"archs={len(self.archs)}, modules={len(self.modules)}, "
                f"devices={len(self.devices)})")

    def __str__(self) -> str:
        """``libfoo.so: 12 kernel images in 3 modules; sm_80, sm_90, compute_90``."""
        archs = ", ".join(a.arch for a in self.archs)
        return (f"{self.name}: {_count_kernels(self)} kernel images in {len(self.modules)} "
                f"modules; {archs or 'no images'}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "columns": COLUMNS,
            "kernels": [[k.kernel, k.arch, k.instance, k.module, k.entry,
                         *(getattr(k, f) for f in FIELDS),
                         {str(b): s for b, s in sorted(k.constant.items())}]
                        for k in self.kernels],
            "archs": [a.to_dict() for a in self.archs],
            "modules": [m.to_dict() for m in self.modules],
            "devices": [d.to_dict() for d in self.devices],
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Library:
        """Read back :meth:`to_dict`; a value of the wrong type is a ``ValueError``."""
        name = _text(doc["name"])
        if doc["columns"] != COLUMNS:
            raise ValueError(f"library {name}: columns {doc['columns']!r}, expected {COLUMNS}")
        kernels = []
        for row in doc["kernels"]:
            kernel, arch, instance, module, entry, *figures, constant = row
            values = {f: _count(v, True) for f, v in zip(FIELDS, figures, strict=True)}
            if not isinstance(entry, bool) or not isinstance(constant, dict):
                raise ValueError(f"library {name}: bad kernel row {row!r}")
            kernels.append(KernelImage(name, _text(kernel), _arch(arch), _count(instance),
                                  _count(module), entry, **values,
                                  constant={_count(int(b)): _count(s) for b, s in
                                            constant.items()}))
        archs = tuple(ArchImages(
            _text(a["kind"]), _arch(a["arch"]), _count(a["entries"]), _count(a["stored"]),
            _count(a["uncompressed"]), tuple(map(_text, a["compression"])),
            tuple(map(_text, a["toolkits"])),
            None if a["min_driver"] is None else _dotted(a["min_driver"], a["arch"]))
            for a in doc["archs"])
        modules = tuple(ModuleArchs(_count(m["index"]), tuple(map(_text, m["kernels"])),
                               tuple(map(_arch, m["sass"] if "sass" in m else m["native"])),
                               tuple(map(_arch, m["ptx"] if "ptx" in m else m["jit"])))
                        for m in doc["modules"])
        devices = tuple(DeviceSummary(_text(d["device"]), _text(d["generation"]),
                                      _count(d["sass"] if "sass" in d else d["native"]),
                                      _count(d["jit"]), _count(d["none"]),
                                      tuple(map(_arch, d["images"]))) for d in doc["devices"])
        return cls(name, tuple(kernels), archs, modules, devices)


# A kernel as diff() compares it: the key (mangled name, arch, instance) to (row, context).
# The row is what a worker sent, Vendor.profile's (name, entry, registers, stack, shared, local,
# constant banks as (bank, size) pairs, spill stores, spill loads, size) for native code or
# (name, True) for the rest; the context is (module, native) for a row, or the KernelImage a
# row was made from (a Library built from KernelImage objects: from_dict, or a caller's).
_Row = tuple[Any, ...]
_Keyed = dict[tuple[str, str, int], tuple[_Row, Any]]
_NO_FIGURES: _Row = (None, None, None, None, (), None, None, None)  # a PTX kernel's, as a row's


class _Rows:
    """A library's kernel images as the workers sent them, image by image: ``(arch, module,
    native, rows)``. ``Library.kernels`` makes the :class:`KernelImage` objects from them on
    first use (10^5 of them take a second); :func:`diff` reads them in place (:meth:`keyed`)."""

    __slots__ = ("count", "digests", "images")

    def __init__(self, images: list[tuple[str, int, bool, list[_Row]]],
                 digests: list[bytes]) -> None:
        self.images = images
        self.digests = digests  # each image's (_digest), in the same order
        self.count = sum(len(rows) for *_, rows in images)

    def __getstate__(self) -> tuple[Any, ...]:
        return self.images, self.digests, self.count

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        self.images, self.digests, self.count = state

    def keyed(self) -> _Keyed:
        """Every kernel by (name, arch, instance), in file order: ``instance`` counts the
        earlier kernels of that name and arch (as :func:`read_library` always numbered them)."""
        out: _Keyed = {}
        again: dict[tuple[str, str], int] = {}
        for arch, module, native, rows in self.images:
            context = (module, native)
            for row in rows:
                key = (row[0], arch, 0)
                if key in out:  # a name seen before for this arch: the next instance
                    n = again[row[0], arch] = again.get((row[0], arch), 0) + 1
                    key = (row[0], arch, n)
                out[key] = (row, context)
        return out

    def kernels(self, library: str) -> tuple[KernelImage, ...]:
        return tuple(_kernel(library, key, row, context)
                     for key, (row, context) in self.keyed().items())


def _kernel(library: str, key: tuple[str, str, int], row: _Row, context: Any) -> KernelImage:
    """The :class:`KernelImage` of one keyed kernel (:data:`_Keyed`) in ``library``."""
    if isinstance(context, KernelImage):
        return context if context.library == library else replace(context, library=library)
    kernel, arch, instance = key
    module, native = context
    # made as cubin.py makes its functions (no frozen __init__): a library has 10^5
    k: KernelImage = object.__new__(KernelImage)
    if native:
        _, entry, registers, stack, shared, local, constant, stores, loads, size = row
        k.__dict__.update(library=library, kernel=kernel, arch=arch, instance=instance,
                          module=module, entry=entry, registers=registers, stack=stack,
                          spill_stores=stores, spill_loads=loads, shared=shared, local=local,
                          size=size, constant=dict(constant))
    else:
        k.__dict__.update(library=library, kernel=kernel, arch=arch, instance=instance,
                          module=module, entry=True, registers=None, stack=None,
                          spill_stores=None, spill_loads=None, shared=None, local=None,
                          size=None, constant={})
    return k


def _keyed(lib: Library) -> _Keyed:
    """``lib``'s kernels by (name, arch, instance): its rows as read, or rows made from its
    :class:`KernelImage` objects (the last of two with one key, as a dict of them keeps)."""
    rows = lib.__dict__.get("_rows")
    if rows is not None:
        return rows.keyed()  # type: ignore[no-any-return]
    return {(k.kernel, k.arch, k.instance): ((k.kernel, k.entry, k.registers, k.stack, k.shared,
                                              k.local, tuple(k.constant.items()),
                                              k.spill_stores, k.spill_loads, k.size), k)
            for k in lib.kernels}


def _figures(row: _Row, context: Any) -> _Row:
    """What :func:`diff` compares of a keyed kernel: its row from ``registers`` on."""
    return row[2:] if type(context) is not tuple or context[1] else _NO_FIGURES


def _entry(row: _Row, context: Any) -> bool:
    return bool(row[1]) if type(context) is not tuple or context[1] else True


def _resources(lib: Library) -> Iterator[tuple[str, str, int | None, int | None, int | None]]:
    """``(kernel, arch, registers, spill_stores, spill_loads)`` of each of ``lib``'s kernels
    whose kind has resources (the vendor's ``function_kinds``: CUDA's SASS), in file order, as
    :attr:`Library.kernels` holds them, without making them (``gate``'s absolute rules)."""
    rows: _Rows | None = lib.__dict__.get("_rows")
    if rows is None:
        for k in lib.kernels:
            if k.kind in vendors.of_target(k.arch).function_kinds:
                yield k.kernel, k.arch, k.registers, k.spill_stores, k.spill_loads
        return
    judged: dict[str, bool] = {}
    for arch, _, native, image in rows.images:
        if arch not in judged:
            judged[arch] = vendors.target_kind(arch) in vendors.of_target(arch).function_kinds
        if not judged[arch]:
            continue
        for row in image:
            if native:
                yield row[0], arch, row[2], row[7], row[8]
            else:
                yield row[0], arch, None, None, None


def images_read(lib: Library) -> list[tuple[str, int, bool, list[tuple[Any, ...]], bytes]]:
    """Each image :func:`read_library` read, in the order of the binary's loadable images
    (:meth:`~fatbinkit.binary.Binary.select`): ``(arch, module, native, rows, digest)``,
    ``rows`` as :meth:`fatbinkit.vendors.Vendor.profile` gives them (a native function's SASS
    size last), ``digest`` what tells images apart (digests of the entry header and of the
    stored payload: :func:`_payload_hash`). Only a library read here has them (not one from
    :meth:`Library.from_dict`)."""
    rows: _Rows | None = lib.__dict__.get("_rows")
    if rows is None:
        raise InvalidArgumentError(f"{lib.name}: its images were not read here (a library "
                                   "from a snapshot file has its kernels, not its images)")
    return [(*image, digest) for image, digest in zip(rows.images, rows.digests, strict=True)]


def _count_kernels(lib: Library) -> int:
    """``len(lib.kernels)``, without making them."""
    rows = lib.__dict__.get("_rows")
    return rows.count if rows is not None else len(lib.kernels)


def _get_kernels(self: Library) -> tuple[KernelImage, ...]:
    made: tuple[KernelImage, ...] | None = self.__dict__.get("kernels")
    if made is None:  # made once (two threads at once may both make them: equal tuples)
        made = self.__dict__["kernels"] = self.__dict__["_rows"].kernels(self.name)
    return made


def _set_kernels(self: Library, value: tuple[KernelImage, ...] | _Rows) -> None:
    """Set by the dataclass ``__init__`` only (the class is frozen): a :class:`_Rows` (from
    :func:`read_library`) is kept as it is, made into KernelImage objects when first read."""
    if isinstance(value, _Rows):
        self.__dict__["_rows"] = value
        self.__dict__.pop("kernels", None)
    else:
        self.__dict__["kernels"] = value
        self.__dict__.pop("_rows", None)


# Library.kernels stays a dataclass field (init, eq, hash, replace, asdict read it through this)
Library.kernels = property(  # type: ignore[assignment]
    _get_kernels, _set_kernels, doc="""Every function of every image of the library, as
    :class:`KernelImage` objects, in file order.""")


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, not {value!r}")
    return value


def _count(value: object, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a count, not {value!r}")
    return value


def _arch(value: object) -> str:
    text = _text(value)
    vendors.target_kind(text)  # an InvalidArgumentError (a ValueError) if no vendor spells it
    return text


def _dotted(value: object, arch: str) -> str:
    """A minimum driver as the snapshot writes it, ``"12.4"``, read by the vendor of ``arch``
    (:meth:`fatbinkit.vendors.Vendor.runtime`: CUDA's ``12``, ``580.65.06`` too)."""
    return dotted(vendors.of_target(arch).runtime(_text(value)))


@dataclass(frozen=True)
class Snapshot:
    """Every library of one input (a file, a wheel, a folder) read for comparison."""

    source: str
    libraries: tuple[Library, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"format": SNAPSHOT_FORMAT, "source": self.source,
                "libraries": [lib.to_dict() for lib in self.libraries]}

    @classmethod
    def from_dict(cls, doc: object, where: str = "snapshot") -> Snapshot:
        """A snapshot written by :meth:`to_dict` (a baseline file); anything else is a
        :class:`~fatbinkit.errors.FormatError` naming ``where``."""
        if not isinstance(doc, Mapping) or doc.get("format") != SNAPSHOT_FORMAT:
            raise FormatError(f"{where}: not a fatbinkit snapshot (expected \"format\": "
                              f"\"{SNAPSHOT_FORMAT}\", as Snapshot.to_dict() and `fatbinkit "
                              "gate --write-baseline` write)")
        try:
            return cls(str(doc["source"]),
                       tuple(Library.from_dict(lib) for lib in doc["libraries"]))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
                FatbinkitError) as e:
            raise FormatError(f"{where}: malformed snapshot: {type(e).__name__}: {e}") from e

    def __str__(self) -> str:
        n = sum(map(_count_kernels, self.libraries))
        return f"{self.source}: {len(self.libraries)} libraries, {n} kernel images"

    def __repr__(self) -> str:
        """Counts, not contents."""
        n = sum(map(_count_kernels, self.libraries))
        return (f"Snapshot(source={_short(self.source)!r}, libraries={len(self.libraries)}, "
                f"kernels={n})")


def _short(text: str, most: int = 100) -> str:
    """``text`` cut to ``most`` characters, for a repr that stays short."""
    return text if len(text) <= most else f"{text[:most - 3]}..."


def snapshot(source: str | os.PathLike[str], *,
             max_decompressed: int | DecompressionBudget | None = None,
             jobs: int | None = None, progress: Progress = None,
             like: Snapshot | None = None,
             skipped: Callable[[Member, FatbinkitError], None] | None = None,
             everywhere: bool = False) -> Snapshot:
    """Read ``source`` (a file, a wheel or a folder; :func:`fatbinkit.collection.members`) into
    a :class:`Snapshot`: each binary with device code in turn, its images on ``jobs``
    processes (None: :func:`fatbinkit.parallel.default_jobs`). Binaries of a wheel or folder
    without device code are left out; an input with none at all is a
    :class:`~fatbinkit.errors.FormatError` naming it. ``max_decompressed`` bounds what each
    binary may inflate (bytes; default
    :meth:`fatbinkit.formats.fatbin.DecompressionBudget.for_input`), or is one
    :class:`~fatbinkit.formats.fatbin.DecompressionBudget` shared by every binary (and any
    other call given it). ``progress`` (:mod:`fatbinkit.progress`): one step per file of
    ``source``.

    ``like``: a snapshot read earlier in this process (the old side of a diff). An image whose
    stored bytes (their digest) and entry header equal one of its images is not inflated or parsed
    again: its functions are that image's (a fifth of libtorch_cuda.so's images from 2.13.0 to
    2.14.1). ``skipped``: see :func:`fatbinkit.collection.binaries`. ``everywhere``: the deep
    scan's images too (:func:`fatbinkit.binary.open`)."""
    if like is not None and not isinstance(like, Snapshot):
        raise InvalidArgumentError(f"like is a Snapshot read earlier, or None, not "
                                   f"{type(like).__name__}")
    DecompressionBudget.of(max_decompressed, 0)  # a wrong type is refused before reading
    as_jobs(jobs)
    known = {} if like is None else {d: o for lib in like.libraries for d, o in lib.read.items()}
    libraries = []
    for m, binary in binaries(source, progress, skipped, jobs=jobs, everywhere=everywhere):
        with named(m):
            libraries.append(read_library(binary, m.name, max_decompressed, known, jobs=jobs))
    return Snapshot(os.fspath(source), tuple(libraries))


def read_library(binary: Binary, name: str,
                 max_decompressed: int | DecompressionBudget | None = None,
                 known: Mapping[bytes, _Read] | None = None, *,
                 jobs: int | None = None) -> Library:
    """One binary's :class:`Library`: every SASS and PTX image read on ``jobs`` processes, but
    those whose digest (:func:`_digest`) is in ``known``; ``max_decompressed`` as
    :func:`snapshot` takes it."""
    from .imagesets import ImageSet, input_host, module_label

    read = [it for it in binary.select() if it.kind in vendors.of(it.code).loadable]
    source = binary.data if binary.data is not None else binary.path
    host = None if source is None else input_host(source)  # whose driver numbers apply
    # the images known from the other side, found by digest; the digest of the payload is
    # taken here only for those whose header is a known one's (the workers take the others')
    digests: list[bytes | None] = [None] * len(read)
    hashed: dict[int, bytes] = {}  # id(code) -> the digest taken here of an image still to read
    if known:
        heads = {d[:_HEAD] for d in known}
        for i, it in enumerate(read):
            head = _head(it.code)
            if head in heads:
                d = head + _payload(it.code)
                if d in known:
                    digests[i] = d
                else:
                    hashed[id(it.code)] = d  # a worker, forked, sees the same object (read
                    # holds every code alive: no other object takes its id meanwhile)

    def record(code: DeviceCode) -> _Read:  # in a worker: the image read, as _Read
        image, rows = _outline(code)
        if image.host != host:
            image = replace(image, host=host)
        floors, _ = vendors.of(code).floors(image)
        # None: a floor newer than the tables; (0, 0): no floor recorded (any driver that
        # drives the GPU)
        need = (0, 0) if not floors else None if any(f.need is None for f in floors) else \
            max(f.need for f in floors if f.need is not None)
        digest = hashed.get(id(code)) or _digest(code)
        return digest, image, rows, need, frozenset(r[0] for r in rows if r[1])

    todo = [it for it, d in zip(read, digests, strict=True) if d is None]
    _payload_hash()  # chosen here: the workers inherit the choice
    found = binary.imap(record, todo, max_decompressed=max_decompressed, jobs=jobs,
                        desc="reading images")
    summary = None  # header only: made while the workers read (once the first image is back)
    # per module (member, section or symbol, container; a bare image by its index): its index,
    # entry kernels, SASS and PTX archs, images
    modules: dict[tuple[str, str, int, int],
                  tuple[int, set[str], set[str], set[str], str, list[ImageInfo]]] = {}
    images: list[tuple[str, int, bool, list[_Row]]] = []
    digests_read: list[bytes] = []
    toolkits: dict[tuple[str, str], set[tuple[int, int]]] = {}
    owner: dict[tuple[str, str], vendors.Vendor] = {}
    needs: dict[tuple[str, str], list[tuple[int, int] | None]] = {}
    got: dict[bytes, _Read] = {}
    for i, (it, known_as) in enumerate(zip(read, digests, strict=True)):
        c = it.code
        one = next(found) if known_as is None else known[known_as]  # type: ignore[index]
        if summary is None and known_as is None:
            summary = binary.summary()
        got[one[0]] = one
        _, image, rows, need, entries = one
        key = (c.member, c.source, c.container, i if c.container < 0 else -1)
        module, names, sass, ptx, _, kept = modules.setdefault(
            key, (len(modules), set(), set(), set(), c.vendor, []))
        if image.offset != c.offset or image.host != host:  # known from the other side:
            image = replace(image, label=f"entry at {c.offset:#x}", offset=c.offset, host=host)
        kept.append(image)
        arch, native = it.arch, it.kind in vendors.of(c).function_kinds  # native code
        (sass if native else ptx).add(arch)
        names |= entries
        images.append((arch, module, native, rows))
        digests_read.append(one[0])
        owner[it.kind, it.arch] = vendors.of(c)
        if image.toolkit is not None:
            toolkits.setdefault((it.kind, it.arch), set()).add(image.toolkit)
        needs.setdefault((it.kind, it.arch), []).append(need)
    if summary is None:
        summary = binary.summary()
    archs = []
    for s in summary.archs:
        if (s.kind, s.arch) not in needs:
            continue  # LTO-IR and other kinds the driver does not load
        low = needs[s.kind, s.arch]
        top = None if None in low else max(v for v in low if v is not None)
        archs.append(ArchImages(
            s.kind, s.arch, s.entries, s.stored, s.uncompressed, s.compression,
            tuple(owner[s.kind, s.arch].toolkit_name(tk)
                  for tk in sorted(toolkits.get((s.kind, s.arch), ()))),
            None if top is None or top == (0, 0) else f"{top[0]}.{top[1]}"))
    return Library(name, _Rows(images, digests_read), tuple(archs),  # type: ignore[arg-type]
                   tuple(ModuleArchs(i, tuple(sorted(n)), tuple(sorted(s)), tuple(sorted(p)))
                         for i, n, s, p, _, _ in modules.values()),
                   summary.devices, got,
                   (*(ImageSet(module_label(src, c, member), tuple(found), raw=c < 0,
                                   source=src, container=c if c >= 0 else None, vendor=vendor)
                      for (member, src, c, _), (*_, vendor, found) in modules.items()),
                    *(ImageSet.of_entryless(c) for c in binary.entryless)), summary)


_HEAD = 16  # the bytes of a digest that hash the vendor's record of the image (its header)


def _head(code: DeviceCode) -> bytes:
    """The first part of an image's digest: the vendor's record of it (CUDA: the entry header:
    kind, arch, flags, sizes), hashed."""
    return hashlib.blake2b(vendors.of(code).fingerprint(code), digest_size=_HEAD).digest()


def _payload(code: DeviceCode) -> bytes:
    """The second part: a digest of the stored payload, 20 bytes of SHA-256 or BLAKE2b
    (:func:`_payload_hash`; libtorch_cuda.so's 317 MiB: 0.18 or 0.35 s here, where inflating
    and parsing them takes 5 s)."""
    return _payload_hash()(code.view)


@functools.cache  # chosen once per process, before read_library's workers fork
def _payload_hash() -> Callable[[Any], bytes]:
    """SHA-256 or BLAKE2b, whichever this machine hashes faster, cut to 20 bytes: SHA-256 on a
    CPU with SHA extensions (1.8 GB/s here, BLAKE2b 0.94), BLAKE2b elsewhere (SHA-256 in
    software is about half its speed). Timed on 1 MiB, best of three. Either tells payloads
    apart; the digests live in this process only (a snapshot's ``like=``), so both sides of a
    diff use the one chosen here."""
    sample = bytes(1 << 20)

    def sha256(data: Any) -> bytes:
        return hashlib.sha256(data).digest()[:20]

    def blake2b(data: Any) -> bytes:
        return hashlib.blake2b(data, digest_size=20).digest()

    def seconds(fn: Callable[[Any], bytes]) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            fn(sample)
            best = min(best, time.perf_counter() - start)
        return best

    return sha256 if seconds(sha256) < seconds(blake2b) else blake2b


def _digest(code: DeviceCode) -> bytes:
    """What makes two images the same for :func:`read_library`: the vendor's record of it
    (:func:`_head`) and the stored payload (:func:`_payload`). Only images whose heads match
    a known one's have their payloads hashed in the calling process."""
    return _head(code) + _payload(code)


def _outline(code: DeviceCode) -> _Outline:
    """In a worker: what the driver needs of one image and its functions, as the vendor reads
    them (:meth:`fatbinkit.vendors.Vendor.profile`). Plain tuples: only they travel back from
    the worker."""
    return vendors.of(code).profile(code)


@dataclass(frozen=True)
class FieldChange:
    """One figure of one kernel image that differs: ``old`` and ``new`` (None: not recorded)."""

    library: str
    kernel: str
    arch: str
    instance: int
    field: str
    old: int | None
    new: int | None

    @property
    def delta(self) -> int | None:
        return None if self.old is None or self.new is None else self.new - self.old

    @property
    def regression(self) -> bool:
        """A rise of a :data:`WORSE_WHEN_HIGHER` field (a figure that appears counts from 0)."""
        return self.field in WORSE_WHEN_HIGHER and (self.new or 0) > (self.old or 0)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "kernel": self.kernel, "arch": self.arch,
                "instance": self.instance, "field": self.field, "old": self.old,
                "new": self.new, "delta": self.delta, "regression": self.regression}

    def __str__(self) -> str:
        delta = self.delta
        sign = "" if delta is None else f" ({delta:+d})"
        return f"{self.arch} {self.kernel}: {self.field} {self.old} -> {self.new}{sign}"


@dataclass(frozen=True)
class CoverageChange:
    """An arch a library gained or lost images for (``kind`` sass or ptx)."""

    library: str
    kind: str
    arch: str
    change: str  # "added" or "removed"

    @property
    def regression(self) -> bool:
        return self.change == "removed"

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "kind": self.kind, "arch": self.arch,
                "change": self.change, "regression": self.regression}

    def __str__(self) -> str:
        return f"{self.library}: {self.kind.upper()} {self.arch} {self.change}"


@dataclass(frozen=True)
class ModuleChange:
    """A module (matched by its entry kernels) whose archs changed."""

    library: str
    module: ModuleArchs
    lost: tuple[str, ...]
    gained: tuple[str, ...]

    @property
    def regression(self) -> bool:
        return bool(self.lost)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "kernels": list(self.module.kernels),
                "lost": list(self.lost), "gained": list(self.gained),
                "regression": self.regression}

    def __str__(self) -> str:
        parts = ([f"lost {', '.join(self.lost)}"] if self.lost else []) + (
            [f"gained {', '.join(self.gained)}"] if self.gained else [])
        return f"{self.library}: {self.module.label}: {'; '.join(parts)}"


@dataclass(frozen=True)
class DeviceChange:
    """What a GPU does with a library's modules, before and after (``sass``/``jit``/``none``
    module counts; headers only, driver floors not applied)."""

    library: str
    old: DeviceSummary
    new: DeviceSummary

    @property
    def device(self) -> str:
        return self.new.device

    @property
    def regression(self) -> bool:
        """A worse verdict (native, jit, partial, none in that order), or more modules that
        cannot load where some loaded before (modules deleted from the library are not a
        regression; nor are modules added to a library that never had code for the GPU:
        cuRAND 13's sm_50, none before and after)."""
        return (_VERDICT_RANK[self.new.verdict] < _VERDICT_RANK[self.old.verdict]
                or (self.new.none > self.old.none and self.old.verdict != "none"))

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "device": self.device, "old": self.old.to_dict(),
                "new": self.new.to_dict(), "regression": self.regression}

    def __str__(self) -> str:
        words = vendors.of_target(self.device).words

        def counts(d: DeviceSummary) -> str:
            return (f"{d.verdict} ({d.sass} {words['native']}, {d.jit} {words['jit']}, "
                    f"{d.none} none)")
        return f"{self.library}: {self.device}: {counts(self.old)} -> {counts(self.new)}"


@dataclass(frozen=True)
class ArchChange:
    """A per-(kind, arch) fact of a library that changed: ``min_driver``, ``toolkits``,
    ``compression``, ``entries``, ``stored`` or ``uncompressed``."""

    library: str
    kind: str
    arch: str
    field: str
    old: Any
    new: Any

    @property
    def regression(self) -> bool:
        """A higher minimum driver (both known)."""
        if self.field != "min_driver" or self.new is None or self.old is None:
            return False
        return version_numbers(self.new) > version_numbers(self.old)

    def to_dict(self) -> dict[str, Any]:
        return {"library": self.library, "kind": self.kind, "arch": self.arch,
                "field": self.field, "old": self.old, "new": self.new,
                "regression": self.regression}

    def __str__(self) -> str:
        def show(v: Any) -> str:
            if isinstance(v, (list, tuple)):
                return "+".join(map(str, v)) or "-"
            if isinstance(v, int) and self.field in ("stored", "uncompressed"):
                return _size(v)
            return "?" if v is None else str(v)
        return f"{self.library}: {self.arch}: {self.field} {show(self.old)} -> {show(self.new)}"


@dataclass(frozen=True)
class Diff:
    """What changed from ``old`` to ``new``: see the module docstring. ``libraries`` are the
    (old name, new name) pairs compared; ``unchanged`` counts kernel images equal on both
    sides."""

    old: str
    new: str
    libraries: tuple[tuple[str, str], ...]
    libraries_added: tuple[str, ...]
    libraries_removed: tuple[str, ...]
    added: tuple[KernelImage, ...]
    removed: tuple[KernelImage, ...]
    changed: tuple[FieldChange, ...]
    unchanged: int
    coverage: tuple[CoverageChange, ...] = ()
    modules: tuple[ModuleChange, ...] = ()
    devices: tuple[DeviceChange, ...] = ()
    archs: tuple[ArchChange, ...] = ()
    lost: frozenset[tuple[str, str, str]] = field(default=frozenset(), repr=False)

    def __repr__(self) -> str:
        """Counts, not contents (a libtorch diff has 10^5 changes)."""
        return (f"Diff(old={_short(self.old)!r}, new={_short(self.new)!r}, "
                f"libraries={len(self.libraries)}, added={len(self.added)}, "
                f"removed={len(self.removed)}, changed={len(self.changed)}, "
                f"unchanged={self.unchanged}, regressions={self.regressions})")

    def is_lost_arch(self, k: KernelImage) -> bool:
        """Whether a removed kernel image is an entry kernel the new build no longer has for
        this arch but still has for others (an arch lost; not a kernel deleted or renamed, a
        device function inlined, or one of two same-named instances gone)."""
        return (k.library, k.kernel, k.arch) in self.lost

    @property
    def regressions(self) -> int:
        others: tuple[CoverageChange | ModuleChange | DeviceChange | ArchChange, ...] = (
            *self.coverage, *self.modules, *self.devices, *self.archs)
        return (len(self.libraries_removed) + sum(map(self.is_lost_arch, self.removed))
                + sum(c.regression for c in self.changed) + sum(c.regression for c in others))

    @property
    def empty(self) -> bool:
        return not (self.libraries_added or self.libraries_removed or self.added or
                    self.removed or self.changed or self.coverage or self.modules or
                    self.devices or self.archs)

    def filter(self, arch: Iterable[str | Arch | ArchFilter] | str | Arch | None = None,
               kernel: str | KernelFilter | None = None, *, regressions: bool = False) -> Diff:
        """The changes about ``arch`` (any of several, as ``ls --arch``: ``sm_90`` matches SASS
        and PTX of SM 9.0, ``compute_90`` PTX only), kernels matching ``kernel`` (module
        changes: a module holding one), and with ``regressions`` only those; no filter
        returns this diff itself."""
        if arch is None and kernel is None and not regressions:
            return self  # every change kept: 0.05 s of copying a torch pair's 10^5 changes
        filters: list[ArchFilter] = []
        if arch is not None:
            values = [arch] if isinstance(arch, (str, Arch, ArchFilter)) else list(arch)
            filters = [v if isinstance(v, ArchFilter) else ArchFilter.parse(v) for v in values]
        kf = kernel if kernel is None or isinstance(kernel, KernelFilter) else \
            KernelFilter.parse(kernel)

        seen: dict[str, bool] = {}

        def arch_ok(name: str) -> bool:
            if not filters:
                return True
            if name not in seen:
                kind = vendors.target_kind(name)
                seen[name] = any(f.matches(kind, name) for f in filters)
            return seen[name]

        def name_ok(name: str) -> bool:
            return kf is None or kf.matches(name)

        def device_ok(c: DeviceChange) -> bool:
            return not filters or any(f.matches_device(c.device) for f in filters)

        def keep(ok: bool, regression: bool) -> bool:
            return ok and (regression or not regressions)

        return replace(
            self,
            added=tuple(k for k in self.added if keep(arch_ok(k.arch) and name_ok(k.kernel),
                                                      False)),
            removed=tuple(k for k in self.removed
                          if keep(arch_ok(k.arch) and name_ok(k.kernel), self.is_lost_arch(k))),
            changed=tuple(c for c in self.changed
                          if keep(arch_ok(c.arch) and name_ok(c.kernel), c.regression)),
            coverage=tuple(c for c in self.coverage
                           if keep(arch_ok(c.arch) and kf is None, c.regression)),
            modules=tuple(m for c in self.modules if any(map(name_ok, c.module.kernels))
                          for m in [replace(c, lost=tuple(filter(arch_ok, c.lost)),
                                            gained=tuple(filter(arch_ok, c.gained)))]
                          if keep(bool(m.lost or m.gained), m.regression)),
            devices=tuple(c for c in self.devices
                          if keep(device_ok(c) and kf is None, c.regression)),
            archs=tuple(c for c in self.archs
                        if keep(arch_ok(c.arch) and kf is None, c.regression)),
            libraries_added=() if filters or kf or regressions else self.libraries_added,
            libraries_removed=(() if filters or kf else self.libraries_removed),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``fatbinkit diff --json`` (``#/$defs/diff``): ``added``,
        ``removed`` and ``changed`` are the stable minimum CI scripts rely on."""
        return {
            "old": self.old,
            "new": self.new,
            "libraries": {"compared": [{"old": o, "new": n} for o, n in self.libraries],
                          "added": list(self.libraries_added),
                          "removed": list(self.libraries_removed)},
            "summary": {"added": len(self.added), "removed": len(self.removed),
                        "changed": len({(c.library, c.kernel, c.arch, c.instance)
                                        for c in self.changed}),
                        "unchanged": self.unchanged, "regressions": self.regressions},
            "added": [k.to_dict() for k in self.added],
            "removed": [{**k.to_dict(), "lost_arch": self.is_lost_arch(k)}
                        for k in self.removed],
            "changed": [c.to_dict() for c in self.changed],
            "coverage": [c.to_dict() for c in self.coverage],
            "modules": [c.to_dict() for c in self.modules],
            "devices": [c.to_dict() for c in self.devices],
            "archs": [c.to_dict() for c in self.archs],
        }

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self, *, demangled: bool = True, top: int = 5) -> Iterator[str]:
        """The text ``fatbinkit diff`` prints: a summary (counts, the ``top`` worst
        regressions), then the tables, largest change first."""
        show = demangle if demangled else str
        kernels = len({(c.library, c.kernel, c.arch, c.instance) for c in self.changed})
        yield f"{self.old} -> {self.new}"
        names = ", ".join(n if o == n else f"{o} -> {n}" for o, n in self.libraries[:4])
        more = f" and {len(self.libraries) - 4} more" if len(self.libraries) > 4 else ""
        yield f"  libraries compared: {len(self.libraries)} ({names}{more})"
        for what, libs in (("added", self.libraries_added), ("removed", self.libraries_removed)):
            if libs:
                yield f"  libraries {what}: {', '.join(libs)}"
        yield (f"  kernel images: {len(self.added)} added, {len(self.removed)} removed, "
               f"{kernels} changed, {self.unchanged} unchanged; "
               f"{self.regressions} regression{'' if self.regressions == 1 else 's'}")
        if self.empty:
            yield "  no change"
            return
        worst = sorted((c for c in self.changed if c.regression),
                       key=lambda c: (-(c.delta or c.new or 0), c.kernel, c.arch))[:top]
        if worst:
            yield "  worst regressions:"
            for c in worst:
                yield (f"    {c.field} {c.old} -> {c.new} ({(c.delta or 0):+d})  {c.arch}  "
                       f"{show(c.kernel)}")
        for title, rows in (("coverage", self.coverage), ("modules", self.modules),
                            ("loads on (per module, headers only)", self.devices),
                            ("per arch", self.archs)):
            if rows:
                yield f"{title}:"
                for r in rows:
                    yield f"  {'!' if r.regression else ' '} {r}"
        if self.changed:
            yield "changed:"
            yield f"    {'FIELD':<13} {'OLD':>8} {'NEW':>8} {'DELTA':>8}  {'ARCH':<12} KERNEL"
            order = sorted(self.changed, key=lambda c: (not c.regression, -abs(c.delta or 0),
                                                        c.field, c.kernel, c.arch))
            for c in order:
                delta = "" if c.delta is None else f"{c.delta:+d}"
                yield (f"  {'!' if c.regression else ' '} {c.field:<13} {_cell(c.old):>8} "
                       f"{_cell(c.new):>8} {delta:>8}  {c.arch:<12} {show(c.kernel)}"
                       + (f" [{c.library}]" if len(self.libraries) > 1 else ""))
        kinds: dict[str, str] = {}  # KernelImage.kind by arch: 10^5 kernels, a few archs
        for title, kept in (("added", self.added), ("removed", self.removed)):
            if kept:
                yield f"{title}:"
                for k in sorted(kept, key=lambda k: (k.library, k.kernel, k.arch)):
                    lost = " (arch lost)" if title == "removed" and self.is_lost_arch(k) else ""
                    kind = kinds.get(k.arch) or kinds.setdefault(k.arch, k.kind)
                    figures = "" if kind == "ptx" else f"  {k.registers} registers"
                    yield (f"  {'!' if lost else ' '} {k.arch:<12} {show(k.kernel)}{figures}"
                           f"{lost}" + (f" [{k.library}]" if len(self.libraries) > 1 else ""))


def _cell(v: int | None) -> str:
    return "-" if v is None else str(v)


def diff(old: Snapshot, new: Snapshot) -> Diff:
    """Compare two snapshots: see the module docstring."""
    for side in (old, new):
        if not isinstance(side, Snapshot):
            raise InvalidArgumentError(f"diff() compares two Snapshots (fatbinkit.diff.snapshot"
                                       f"), not {type(side).__name__}")
    pairs, gone, came = _pair(old.libraries, new.libraries)
    added: list[KernelImage] = []
    removed: list[KernelImage] = []
    changed: list[FieldChange] = []
    lost: set[tuple[str, str, str]] = set()
    coverage: list[CoverageChange] = []
    modules: list[ModuleChange] = []
    devices: list[DeviceChange] = []
    archs: list[ArchChange] = []
    unchanged = 0
    for lo, ln in pairs:
        name = ln.name
        before, after = _keyed(lo), _keyed(ln)
        # the new build's entry kernels, and its (kernel, arch) pairs: made when first needed
        still: set[str] | None = None
        present: set[tuple[str, str]] = set()
        for key, (row, context) in before.items():
            hit = after.get(key)
            if hit is None:
                removed.append(_kernel(name, key, row, context))
                if _entry(row, context):
                    if still is None:
                        still = {n for (n, _, _), (r, c) in after.items()
                                 if (r[1] if type(c) is not tuple or c[1] else True)}  # _entry
                        present = {(n, a) for n, a, _ in after}
                    if key[0] in still and (key[0], key[1]) not in present:
                        lost.add((name, key[0], key[1]))
                continue
            # the common case, without a KernelImage or a dict per kernel: the same row
            if row == hit[0] or _figures(row, context) == _figures(*hit):
                unchanged += 1
                continue
            a = _kernel(name, key, row, context).values()
            b = _kernel(name, key, *hit).values()
            fields = [f for f in dict.fromkeys((*a, *b)) if a.get(f) != b.get(f)]
            for f in fields:
                changed.append(FieldChange(name, key[0], key[1], key[2], f, a.get(f), b.get(f)))
            unchanged += not fields
        added.extend(_kernel(name, key, row, context)
                     for key, (row, context) in after.items() if key not in before)
        for kind in ("sass", "ptx"):
            was, now = lo.coverage(kind), ln.coverage(kind)
            coverage += [CoverageChange(name, kind, a, "removed") for a in _by_arch(was - now)]
            coverage += [CoverageChange(name, kind, a, "added") for a in _by_arch(now - was)]
        old_modules: dict[tuple[str, ...], list[ModuleArchs]] = {}
        for m in lo.modules:
            if m.kernels:
                old_modules.setdefault(m.kernels, []).append(m)
        for m in ln.modules:  # same entry kernels: paired in file order
            if not old_modules.get(m.kernels):
                continue
            o = old_modules[m.kernels].pop(0)
            was_images, now_images = {*o.sass, *o.ptx}, {*m.sass, *m.ptx}
            if was_images != now_images:
                modules.append(ModuleChange(name, m, _by_arch(was_images - now_images),
                                            _by_arch(now_images - was_images)))
        old_devices = {d.device: d for d in lo.devices}
        for d in ln.devices:
            o2 = old_devices.get(d.device)
            if o2 is not None and (o2.sass, o2.jit, o2.none) != (d.sass, d.jit, d.none):
                devices.append(DeviceChange(name, o2, d))
        old_archs = {(x.kind, x.arch): x for x in lo.archs}
        for x in ln.archs:
            o3 = old_archs.get((x.kind, x.arch))
            if o3 is None:
                continue
            for f in ("min_driver", "toolkits", "compression", "entries", "stored",
                      "uncompressed"):
                if getattr(o3, f) != getattr(x, f):
                    archs.append(ArchChange(name, x.kind, x.arch, f, _plain(getattr(o3, f)),
                                            _plain(getattr(x, f))))
    return Diff(old.source, new.source, tuple((o.name, n.name) for o, n in pairs),
                tuple(lib.name for lib in came), tuple(lib.name for lib in gone),
                tuple(added), tuple(removed), tuple(changed), unchanged, tuple(coverage),
                tuple(modules), tuple(devices), tuple(archs), frozenset(lost))


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _by_arch(names: Iterable[str]) -> tuple[str, ...]:
    """Arch names in their vendors' order (CUDA: SASS before PTX, then SM: ``sm_80`` before
    ``sm_100``)."""
    return tuple(sorted(names, key=vendors.target_key))


def _pair(old: Sequence[Library], new: Sequence[Library],
          ) -> tuple[list[tuple[Library, Library]], list[Library], list[Library]]:
    """Libraries paired by path, then by :func:`~fatbinkit.collection.member_key` (in its
    folder, then its file name alone) where that is unique on both sides, then, when each side
    holds one library, those two; the rest removed and added. Two libraries with one name on a
    side (two inputs given to ``gate``) are refused: they could not be told apart."""
    for side in (old, new):
        names = [lib.name for lib in side]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise InvalidArgumentError(f"two libraries are named {twice[0]}: compare (or gate) "
                                       "inputs whose libraries have distinct paths one by one")
    by_name = {lib.name: lib for lib in new}
    pairs = [(lib, by_name[lib.name]) for lib in old if lib.name in by_name]
    taken = {n.name for _, n in pairs}
    left_old = [lib for lib in old if lib.name not in by_name]
    left_new = [lib for lib in new if lib.name not in taken]
    for key in (member_key, lambda name: member_key(name).rsplit("/", 1)[-1]):
        keys_old: dict[str, list[Library]] = {}
        keys_new: dict[str, list[Library]] = {}
        for lib in left_old:
            keys_old.setdefault(key(lib.name), []).append(lib)
        for lib in left_new:
            keys_new.setdefault(key(lib.name), []).append(lib)
        found = [(olds[0], keys_new[k][0]) for k, olds in keys_old.items()
                 if len(olds) == 1 and len(keys_new.get(k, ())) == 1]
        pairs += found
        left_old = [lib for lib in left_old if all(lib is not o for o, _ in found)]
        left_new = [lib for lib in left_new if all(lib is not n for _, n in found)]
    if len(left_old) == 1 and len(left_new) == 1 and len(old) == 1 and len(new) == 1:
        pairs.append((left_old[0], left_new[0]))  # one library each side: whatever their names
        left_old, left_new = [], []
    return pairs, left_old, left_new

