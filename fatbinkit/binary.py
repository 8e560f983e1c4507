"""The front door: ``fatbinkit.open(path)`` reads an input once and answers what users ask of it.

What :func:`open` returns, a :class:`Binary`, lists (``cuobjdump -lelf -lptx``), filters by arch
and kernel, summarises per arch and GPU generation, gives per-function resources
(``cuobjdump -res-usage``), extracts (``cuobjdump -xelf -xptx``) and checks loadability
(:mod:`fatbinkit.compat`). The CLI's ``ls``, ``extract`` and ``check`` are thin layers over it::

    import fatbinkit
    lib = fatbinkit.open("libtorch_cuda.so")
    print(lib.summary())                          # per arch, per GPU generation
    for item in lib.select(arch="sm_90"):         # SASS and PTX for SM 9.0 (any a/f)
        print(item.name, item.arch, item.uncompressed)
    lib.extract("out/", arch=["sm_90a"], kernel="*gemm*")

Arch filters (:class:`ArchFilter`) follow ``cuobjdump -arch`` where it has a rule: ``sm_90``
selects SASS and PTX of SM 9.0 with any suffix; fatbinkit adds ``sm_90a`` / ``sm_100f`` (that
suffix only) and ``compute_90`` (PTX only), which cuobjdump refuses. Listing names are
cuobjdump's, counted over the selected images as ``cuobjdump -arch`` counts them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import mmap
import os
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from . import vendors
from .decision import JIT, NATIVE, NONE, Version, dotted
from .device_code import DeviceCode, EntrylessContainer
from .errors import (
    FatbinkitError,
    InputError,
    InvalidArgumentError,
    OutputError,
    UnsupportedError,
    naming,
)
from .formats.arch import Arch, ArchLike
from .formats.codec import DecompressionBudget
from .infile import as_path, is_collection
from .outfile import OutputBatch, atomic_files
from .progress import Progress, reporter
from .scan import extract_names, listed, scan_modules, source_keys

if TYPE_CHECKING:
    from .collection import TotalCheck
    from .compat import ArchVerdict, Decision, ImageInfo, ImageSet, MinDriver
    from .driver import DriverLike
    from .formats.cubin import CubinFunction
    from .imagesets import Shapes

__all__ = [
    "ArchFilter",
    "ArchSummary",
    "Binary",
    "Check",
    "DeviceSummary",
    "HiddenSection",
    "Item",
    "KernelFilter",
    "Summary",
    "demangle",
    "judge",
    "open",
]

R = TypeVar("R")
P = ParamSpec("P")

_DEMANGLE_LIMIT = 16384  # longer names stay mangled: the demangler is native code


@dataclass(frozen=True)
class ArchFilter:
    """One ``--arch`` value, as the vendor that spells it selects images
    (:meth:`fatbinkit.vendors.Vendor.target_filter`). CUDA's follows ``cuobjdump -arch``:
    ``sm_90`` and ``90``: SASS and PTX of SM 9.0, any suffix; ``sm_90a``: that suffix only;
    ``compute_90``: PTX only (an :class:`~fatbinkit.formats.arch.Arch`: that arch, its suffix
    exactly)."""

    rule: Any  # the vendor's own filter: matches(kind, target), matches_device(device), str()

    @classmethod
    def parse(cls, text: str | Arch) -> ArchFilter:
        if not isinstance(text, (str, Arch)):
            raise InvalidArgumentError(f"an arch filter is a str like 'sm_90', not "
                                       f"{type(text).__name__}")
        return cls(vendors.target_filter(text))

    def matches(self, kind: str, target: str) -> bool:
        """Whether an image of ``kind`` (``sass``, ``ptx``...) for ``target`` (``sm_90a``,
        ``compute_90``) is selected; another vendor's target never is."""
        return bool(self.rule.matches(kind, target))

    def matches_device(self, device: str) -> bool:
        """Whether the GPU named ``device`` (``sm_90``) is one this filter is about."""
        return bool(self.rule.matches_device(device))

    def __str__(self) -> str:
        return str(self.rule)


@functools.lru_cache(maxsize=1 << 16)  # diff and check print a name once per arch and field
def demangle(name: str) -> str:
    """The C++ name of a mangled (Itanium ABI) symbol, as ``c++filt`` prints it; other names
    (``extern "C"`` kernels, names the demangler refuses or longer than 16 KiB) unchanged."""
    if not name.startswith("_Z") or len(name) > _DEMANGLE_LIMIT:
        return name
    import cxxfilt

    try:
        return str(cxxfilt.demangle(name))
    except (cxxfilt.Error, UnicodeError):
        return name


@dataclass(frozen=True)
class KernelFilter:
    """A ``--kernel`` pattern: a glob (``*gemm*``, case-sensitive) or, after ``re:``, a regular
    expression searched for; it matches a kernel's mangled or its demangled name."""

    pattern: str
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        import cxxfilt  # noqa: F401  (matches demangles, in workers too: loaded before a fork)

    @classmethod
    def parse(cls, pattern: str) -> KernelFilter:
        if not isinstance(pattern, str) or not pattern:
            raise InvalidArgumentError("a kernel pattern is a non-empty str (a glob, or re:REGEX)")
        if pattern.startswith("re:"):
            try:
                return cls(pattern, re.compile(pattern[3:]))
            except re.error as e:
                raise InvalidArgumentError(f"bad kernel regex {pattern[3:]!r}: {e}") from e
        return cls(pattern, re.compile(fnmatch.translate(pattern)))

    def matches(self, name: str) -> bool:
        assert self.regex is not None
        search = self.regex.search if self.pattern.startswith("re:") else self.regex.match
        return bool(search(name)) or (name.startswith("_Z") and bool(search(demangle(name))))

    def __str__(self) -> str:
        return self.pattern


@dataclass(frozen=True)
class Item:
    """One image of a listing: cuobjdump's ``number`` (per kind, from 1) and file ``name``,
    and the :class:`~fatbinkit.scan.DeviceCode` found in the input. It pickles with a copy of
    its payload as stored (:meth:`~fatbinkit.scan.DeviceCode.__reduce__`): sent to another
    process, it reads there as here, without its :class:`Binary`."""

    number: int
    name: str
    code: DeviceCode

    @property
    def kind(self) -> str:
        """``sass``, ``ptx``, ``ltoir`` (or ``kind_0x..``): :attr:`DeviceCode.kind`."""
        return self.code.kind

    @property
    def arch(self) -> str:
        """``sm_90a`` for SASS, ``compute_90a`` for PTX, with ``a``/``f`` as the entry says."""
        return self.code.target

    @property
    def stored(self) -> int:
        """Bytes the payload takes in the file (compressed, padded)."""
        return self.code.stored

    @property
    def uncompressed(self) -> int:
        return self.code.uncompressed

    def to_dict(self) -> dict[str, Any]:
        """The listing row of the JSON vocabulary (docs/json.md)."""
        c = self.code
        section, symbol = source_keys(c.source)
        row: dict[str, Any] = {
            "number": self.number,
            "name": self.name,
            "kind": self.kind,
            "arch": self.arch,
            "member": c.member or None,
            "section": section,
            "symbol": symbol,
            "container": c.container if c.container >= 0 else None,
            "offset": c.offset,
            "compression": c.compression,
            "stored": self.stored,
            "uncompressed": self.uncompressed,
            "identifier": c.identifier or None,
            "vendor": c.vendor,
            **vendors.of(c).details(c),
            **({"hidden": True} if c.hidden else {}),
        }
        return row

    def __str__(self) -> str:
        """cuobjdump's listing line; an image of the deep scan says where it lies
        (``ELF file 3: libcufft.3.sm_90.cubin  (hidden: .ldata at 0x860be0)``)."""
        label = {"sass": "ELF", "ptx": "PTX", "ltoir": "LTO"}.get(self.kind, self.kind)
        line = f"{label} file {self.number:4d}: {self.name}"
        if self.code.hidden:
            line += f"  (hidden: {self.code.source} at {self.code.offset:#x})"
        return line

    def __repr__(self) -> str:
        """What the listing says of it, and where it is: not the entry's header fields."""
        return (f"Item(number={self.number}, name={self.name!r}, kind={self.kind!r}, "
                f"arch={self.arch!r}, uncompressed={self.uncompressed}, code={self.code!r})")


@dataclass(frozen=True)
class ArchSummary:
    """One (kind, arch) row of a summary: entries, bytes stored and uncompressed, codecs;
    ``kernels`` (distinct kernel names) and ``toolkits`` (CUDA releases that built the cubins)
    are None unless the summary read the images (``kernels=True``); ``ptx_versions`` are the
    PTX ISA versions the entry headers record."""

    kind: str
    arch: str
    entries: int
    stored: int
    uncompressed: int
    compression: tuple[str, ...]
    ptx_versions: tuple[str, ...] = ()
    kernels: int | None = None
    toolkits: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        versions = vendors.of_target(self.arch).words["versions_key"]  # CUDA: ptx_versions
        return {"kind": self.kind, "arch": self.arch, "entries": self.entries,
                "stored": self.stored, "uncompressed": self.uncompressed,
                "compression": list(self.compression),
                **({versions: list(self.ptx_versions)} if versions else {}),
                "kernels": self.kernels,
                "toolkits": None if self.toolkits is None else list(self.toolkits)}

    def __str__(self) -> str:
        return f"{self.kind} {self.arch}: {self.entries} entries, {_size(self.uncompressed)}"


@dataclass(frozen=True)
class DeviceSummary:
    """What a GPU of compute capability ``device`` does with each module (fatbin container) of
    the file, by :func:`fatbinkit.compat.decide` on the entry headers (no driver floors: ``check
    --driver`` adds them): ``sass`` modules load an image built for it, ``jit`` ones compile PTX
    at load, ``none`` hold nothing it can use."""

    device: str
    generation: str
    sass: int
    jit: int
    none: int
    images: tuple[str, ...]  # the archs of the images picked, most used first

    @property
    def verdict(self) -> str:
        """``native``, ``jit`` (every module loads, some by PTX JIT), ``partial`` or ``none``."""
        if not self.sass and not self.jit:
            return "none"
        if self.none:
            return "partial"
        return "jit" if self.jit else "native"

    def to_dict(self) -> dict[str, Any]:
        native = vendors.of_target(self.device).words["native_key"]  # CUDA: sass
        return {"device": self.device, "generation": self.generation, "verdict": self.verdict,
                native: self.sass, "jit": self.jit, "none": self.none,
                "images": list(self.images)}

    def __str__(self) -> str:
        return f"{self.device} ({self.generation}): {self.verdict}"


@dataclass(frozen=True)
class HiddenSection:
    """The device code the deep scan found in one section of a file (the kinds listed: LTO-IR
    with ``all``): outside cuobjdump's view, loaded by the library itself
    (:attr:`DeviceCode.hidden <fatbinkit.device_code.DeviceCode.hidden>`)."""

    section: str
    modules: int
    images: int
    stored: int
    uncompressed: int

    def to_dict(self) -> dict[str, Any]:
        return {"section": self.section, "modules": self.modules, "images": self.images,
                "stored": self.stored, "uncompressed": self.uncompressed}

    def __str__(self) -> str:
        return (f"{self.section}: {_count(self.images, 'image')} in "
                f"{_count(self.modules, 'module')}, {_size(self.stored)} stored")


@dataclass(frozen=True)
class Summary:
    """A file at a glance: per (kind, arch) rows, totals, and per GPU arch what loads.
    ``hidden``: per section, the device code of the deep scan (``everywhere``), which the
    rows and totals include; None when it was not searched."""

    file: str
    modules: int
    archs: tuple[ArchSummary, ...]
    devices: tuple[DeviceSummary, ...]
    moved: int = 0  # modules whose device code was moved out of the file (not counted above)
    hidden: tuple[HiddenSection, ...] | None = None

    @property
    def entries(self) -> int:
        return sum(a.entries for a in self.archs)

    @property
    def stored(self) -> int:
        return sum(a.stored for a in self.archs)

    @property
    def uncompressed(self) -> int:
        return sum(a.uncompressed for a in self.archs)

    @classmethod
    def combined(cls, file: str, summaries: Sequence[Summary]) -> Summary:
        """Many files' summaries as one (a wheel's or a folder's libraries): rows of one (kind,
        arch) added up, their codecs, PTX ISA versions and toolkits joined (distinct kernels
        are per file: None), and per GPU arch the module counts added up."""
        rows: dict[tuple[str, str], list[ArchSummary]] = {}
        for s in summaries:
            for a in s.archs:
                rows.setdefault((a.kind, a.arch), []).append(a)
        archs = []
        for (kind, arch), same in sorted(rows.items(), key=lambda kv: vendors.row_key(*kv[0])):
            toolkits = [a.toolkits for a in same if a.toolkits is not None]
            archs.append(ArchSummary(
                kind, arch, sum(a.entries for a in same), sum(a.stored for a in same),
                sum(a.uncompressed for a in same),
                tuple(sorted({c for a in same for c in a.compression})),
                tuple(sorted({v for a in same for v in a.ptx_versions}, key=_version_order)),
                None, tuple(sorted({t for tk in toolkits for t in tk},
                                   key=lambda t: _version_order(t.split()[-1])))
                if toolkits else None))
        devices: dict[str, list[DeviceSummary]] = {}
        for s in summaries:
            for d in s.devices:
                devices.setdefault(d.device, []).append(d)
        merged = tuple(DeviceSummary(
            device, same[0].generation, sum(d.sass for d in same), sum(d.jit for d in same),
            sum(d.none for d in same), tuple(dict.fromkeys(i for d in same for i in d.images)))
            for device, same in sorted(devices.items(), key=lambda kv: vendors.target_key(kv[0])))
        hidden: dict[str, list[HiddenSection]] = {}
        for s in summaries:
            for h in s.hidden or ():
                hidden.setdefault(h.section, []).append(h)
        return cls(file, sum(s.modules for s in summaries), tuple(archs), merged,
                   sum(s.moved for s in summaries),
                   None if all(s.hidden is None for s in summaries) else tuple(
                       HiddenSection(name, sum(h.modules for h in same),
                                     sum(h.images for h in same), sum(h.stored for h in same),
                                     sum(h.uncompressed for h in same))
                       for name, same in sorted(hidden.items(),
                                                key=lambda kv: -sum(h.stored for h in kv[1]))))

    def __repr__(self) -> str:
        """Totals and row counts: the rows are in :meth:`lines` and :meth:`to_dict`."""
        return (f"Summary(file={self.file!r}, modules={self.modules}, entries={self.entries}, "
                f"stored={self.stored}, uncompressed={self.uncompressed}, "
                f"archs=<{len(self.archs)} rows>, devices=<{len(self.devices)} GPU archs>)")

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "modules": self.modules, "entries": self.entries,
                "stored": self.stored, "uncompressed": self.uncompressed,
                "archs": [a.to_dict() for a in self.archs],
                "devices": [d.to_dict() for d in self.devices],
                **({"moved": self.moved} if self.moved else {}),
                **({} if self.hidden is None else {"hidden": {
                    "modules": sum(h.modules for h in self.hidden),
                    "images": sum(h.images for h in self.hidden),
                    "stored": sum(h.stored for h in self.hidden),
                    "uncompressed": sum(h.uncompressed for h in self.hidden),
                    "sections": [h.to_dict() for h in self.hidden]}})}

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def lines(self) -> Iterator[str]:
        """The text the CLI prints: one screen even for libtorch."""
        yield (f"{self.file}: {_count(self.entries, 'image')} in {_count(self.modules, 'module')}, "
               f"{_size(self.stored)} stored, {_size(self.uncompressed)} uncompressed")
        if self.moved:
            yield (f"  {_count(self.moved, 'module')} more whose device code was moved out of "
                   "the file (rocm-kpack: a .kpack file the runtime loads it from): not judged")
        if self.hidden:
            yield (f"  of which hidden (outside cuobjdump's view, loaded by the library itself): "
                   f"{_count(sum(h.images for h in self.hidden), 'image')} in "
                   f"{_count(sum(h.modules for h in self.hidden), 'module')}, "
                   f"{_size(sum(h.stored for h in self.hidden))} stored")
            yield from (f"    {h}" for h in self.hidden)
        elif self.hidden is not None:
            yield "  no hidden device code (the deep scan found none outside cuobjdump's view)"
        if not self.archs:
            return
        read = any(a.kernels is not None for a in self.archs)
        present = list(dict.fromkeys(vendors.of_target(a.arch) for a in self.archs))
        version = " / ".join(w for v in present if (w := v.words["version"]))
        head = f"  {'KIND':<5} {'ARCH':<13} {'ENTRIES':>7} {'STORED':>10} {'UNCOMPR.':>10}"
        head += f"  {'CODEC':<9}" + (f" {'KERNELS':>7}  BUILT BY" if read else
                                     f"  {version}" if version else "")
        yield head.rstrip()
        for a in self.archs:
            row = (f"  {a.kind:<5} {a.arch:<13} {a.entries:>7} {_size(a.stored):>10} "
                   f"{_size(a.uncompressed):>10}  {'+'.join(a.compression) or 'none':<9}")
            if read:
                built = ", ".join(a.toolkits or ()) or (
                    "PTX " + ", ".join(a.ptx_versions) if a.ptx_versions else "-")
                row += f" {a.kernels if a.kernels is not None else '-':>7}  {built}"
            elif version:
                row += "  " + (", ".join(a.ptx_versions) or "-")
            yield row.rstrip()
        floors = " / ".join(dict.fromkeys(v.words["floors"] for v in present)) or "floors"
        yield (f"loads on ({_count(self.modules, 'module')}, from entry headers: empty ones "
               f"included, which `fatbinkit check` leaves out; {floors} not checked):")
        for d in self.devices:
            words = vendors.of_target(d.device).words
            parts = [f"{d.sass} {words['native']}" if d.sass else "",
                     f"{d.jit} {words['jit']}" if d.jit else "",
                     f"{d.none} no image" if d.none else ""]
            what = ", ".join(p for p in parts if p)
            images = f" [{', '.join(d.images)}]" if d.images else ""
            yield f"  {d.device:<8} {d.generation:<10} {d.verdict:<8} {what}{images}"


def _hidden(codes: Sequence[DeviceCode]) -> tuple[HiddenSection, ...]:
    """The deep scan's images per section, largest first; modules counted as the summary
    counts them (those with an image a device loads)."""
    per: dict[str, list[DeviceCode]] = {}
    for c in codes:
        if c.hidden:
            per.setdefault(c.source, []).append(c)
    return tuple(sorted((HiddenSection(name, len({c.container for c in same
                                                   if c.kind in vendors.of(c).loadable}),
                                       len(same),
                                       sum(c.stored for c in same),
                                       sum(c.uncompressed for c in same))
                         for name, same in per.items()), key=lambda h: (-h.stored, h.section)))


def _version_order(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _size(n: int) -> str:
    """``512 B``, ``33.2 MiB``, ``5.00 GiB``: binary units, as du -h."""
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20)):
        if n < scale << 10:
            return f"{n / scale:.1f} {unit}"
    return f"{n / (1 << 30):.2f} GiB"


def _names_its_file(method: Callable[P, R]) -> Callable[P, R]:
    """A :class:`Binary` method whose errors (a corrupt payload met while reading images, in
    this process or a worker) start with the file's path, as every fatbinkit error about a
    file does."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        binary = args[0] if args and isinstance(args[0], Binary) else None
        if binary is not None and binary.closed:
            raise binary._closed_error(f"{method.__name__}()")
        try:
            return method(*args, **kwargs)
        except InputError:
            raise  # "cannot read PATH: ..." names it already
        except FatbinkitError as e:
            path = binary.path if binary is not None else None
            if path is None or str(e).startswith(f"{path}:"):
                raise
            raise naming(e, path) from e
        except ValueError as e:  # a payload view released by close() on another thread
            if binary is not None and binary.closed:
                raise binary._closed_error(f"{method.__name__}()") from e
            raise

    return wrapper


def _as_kinds(kinds: Sequence[str] | str) -> tuple[str, ...]:
    """``kinds=`` checked: some of the kinds the vendors name (CUDA: ``sass``, ``ptx``,
    ``ltoir``; a str is one kind)."""
    known = [k for v in vendors.VENDORS.values() for k in v.kinds]
    given = (kinds,) if isinstance(kinds, str) else tuple(kinds) \
        if isinstance(kinds, (list, tuple, set, frozenset)) else ()
    if not given or any(k not in known for k in given):
        raise InvalidArgumentError(f"kinds is some of {', '.join(map(repr, known))}, not "
                                   f"{kinds!r}")
    return given


def _as_filters(values: Iterable[str | Arch | ArchFilter] | str | Arch | None,
                ) -> tuple[ArchFilter, ...]:
    if values is None:
        return ()
    if isinstance(values, (str, Arch, ArchFilter)):
        values = [values]
    return tuple(v if isinstance(v, ArchFilter) else ArchFilter.parse(v) for v in values)


@dataclass(frozen=True)
class Binary:
    """Device code found in one input; see the module docstring. ``all`` as ``cuobjdump -all``:
    ``__nv_relfatbin`` sections and entry kinds other than SASS and PTX (LTO-IR) too."""

    path: Path | None
    size: int
    codes: tuple[DeviceCode, ...] = field(repr=False)
    all: bool = False
    data: memoryview | None = field(default=None, repr=False, compare=False)  # bytes given
    members: tuple[str, ...] = ()  # a static library's ELF objects, in order (cuobjdump's
    # "member LIB:OBJECT:" lines, those without device code too)
    name: str = "input"  # the file's name (bytes: the name given): the stem of images' names
    # containers with no entry at all (what prune leaves of a module no kept arch loads): the
    # runtime registers them, so check counts them as modules with no image
    entryless: tuple[EntrylessContainer, ...] = field(default=(), repr=False)
    # modules whose device code was moved out of the file (EntrylessContainer.moved: rocm-kpack):
    # listed as such, not judged
    moved: tuple[EntrylessContainer, ...] = field(default=(), repr=False)
    # the deep scan's too (scan(everywhere=True)): device code in the file's other sections,
    # which the library hands the driver itself (DeviceCode.hidden), after the usual images
    everywhere: bool = field(default=False, kw_only=True)
    # the file's modification time when it was read (pickling reopens it only if unchanged)
    _mtime_ns: int | None = field(default=None, init=False, repr=False, compare=False)
    _closed: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.path is not None:  # scan has just read it: a file changed or gone since
            with contextlib.suppress(OSError):  # then cannot be pickled (nor reopened)
                st = os.stat(self.path)
                if st.st_size == self.size:
                    object.__setattr__(self, "_mtime_ns", st.st_mtime_ns)

    def __str__(self) -> str:
        kinds: dict[str, int] = {}
        for c in self.codes:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
        if self.entryless:
            kinds["empty fatbin containers"] = len(self.entryless)
        for where in dict.fromkeys(c.moved for c in self.moved):
            kinds[f"modules moved to {where}"] = sum(c.moved == where for c in self.moved)
        what = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no device code"
        return f"{self.file}: {what}{' (closed)' if self._closed else ''}"

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Release the input: the memory map of the file and its file descriptor (or the view
        of the bytes given), by releasing every payload view this Binary holds (its codes'
        ``entry.stored``, shared with the :class:`Item` objects it handed out). Afterwards its
        reading methods raise :class:`~fatbinkit.errors.InvalidArgumentError`, its items keep
        their header fields (``kind``, ``arch``, sizes, ``to_dict()``) but not their payload
        (``entry.data()`` raises ``ValueError``), and it no longer pickles. Closing twice does
        nothing. A view the caller made of a payload (a slice of ``entry.stored``) keeps the
        mapping, and its descriptor, until that view is released or collected."""
        if self._closed:
            return
        object.__setattr__(self, "_closed", True)
        views = [c.view for c in self.codes if isinstance(c.view, memoryview)]
        if self.data is not None:
            views.append(self.data)
        maps: dict[int, mmap.mmap] = {}
        for view in views:
            with contextlib.suppress(ValueError):  # released already
                if isinstance(view.obj, mmap.mmap):
                    maps[id(view.obj)] = view.obj
            with contextlib.suppress(BufferError):  # exported further by the caller: kept
                view.release()
        for mapped in maps.values():
            with contextlib.suppress(BufferError):  # a view the caller made: closed with it
                mapped.close()

    def __enter__(self) -> Binary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """A Binary read from a file pickles as its path and options: unpickling (in a worker
        of a process pool, on this machine or one that shares the file) reads the file again,
        which must have the size and modification time it had when this one read it
        (else :class:`~fatbinkit.errors.InputError`). One read from bytes pickles its bytes."""
        if self._closed:
            raise self._closed_error("cannot pickle")
        if self.path is not None:
            if self._mtime_ns is None:
                raise InputError(f"{self.path}: cannot pickle: the file changed or went away "
                                 "while it was read")
            return _reopen, (self.path, self.all, self.size, self._mtime_ns, self.everywhere)
        if self.data is None:
            raise InvalidArgumentError("this Binary has neither a path nor bytes to pickle")
        return _reread, (bytes(self.data), self.all, self.name, self.everywhere)

    def _closed_error(self, what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.path or self.name}: {what}: the Binary is closed "
                                    "(fatbinkit.open reads the input again)")

    def __repr__(self) -> str:
        """Counts, not contents: short for libtorch's 20,000 images too."""
        return (f"Binary(path={self.path!r}, name={self.name!r}, size={self.size}, "
                f"codes={len(self.codes)}, entryless={len(self.entryless)}, "
                f"members={len(self.members)}, all={self.all}, everywhere={self.everywhere})")

    @property
    def file(self) -> str:
        """How results name this input: its path, or for bytes the ``name`` given."""
        return str(self.path) if self.path is not None else self.name

    def _read(self, fn: Callable[[DeviceCode], R], codes: Sequence[DeviceCode],
              kinds: Collection[str], budget: DecompressionBudget, desc: str, jobs: int | None,
              progress: Progress) -> list[R]:
        """``fn`` over ``codes`` on ``jobs`` processes, the payloads of ``kinds`` charged
        first."""
        from .parallel import charge, map_codes

        charge(codes, budget, kinds)
        return map_codes(fn, codes, jobs=jobs, progress=progress, desc=desc)

    def _budget(self, max_decompressed: int | DecompressionBudget | None, jobs: int | None,
                progress: Progress) -> DecompressionBudget:
        """The budget of one call, after the conventions' arguments are checked (at the call,
        whether or not it reads images)."""
        from .parallel import as_jobs
        from .progress import check

        if jobs is not None:
            as_jobs(jobs)
        check(progress)
        return DecompressionBudget.of(max_decompressed, self.size)

    @_names_its_file
    def select(self, arch: Iterable[str | Arch | ArchFilter] | str | Arch | None = None,
               kernel: str | KernelFilter | None = None, *,
               max_decompressed: int | DecompressionBudget | None = None,
               jobs: int | None = None, progress: Progress = None) -> tuple[Item, ...]:
        """The listed images (cuobjdump's selection) that match ``arch`` (any of several) and
        hold a kernel matching ``kernel``, numbered and named as cuobjdump names them. The kernel
        filter reads each image (decompressing it, charged to ``max_decompressed``) on ``jobs``
        processes, reporting to ``progress`` (the API's conventions: docs/api.md)."""
        budget = self._budget(max_decompressed, jobs, progress)
        filters = _as_filters(arch)
        codes = listed(self.codes, all=self.all)
        if filters:
            codes = tuple(c for c in codes if any(
                f.matches(c.kind, c.target) for f in filters))
        if kernel is not None:
            kf = kernel if isinstance(kernel, KernelFilter) else KernelFilter.parse(kernel)
            hits = self._read(lambda c: any(kf.matches(k) for k in _outline(c)[0]), codes,
                              _loadable(codes), budget, "reading kernel names", jobs, progress)
            codes = tuple(c for c, hit in zip(codes, hits, strict=True) if hit)
        names = extract_names(codes, self.name)
        counters: dict[str, int] = {}
        items: list[Item] = []
        for c, name in zip(codes, names, strict=True):
            n = counters[c.kind] = counters.get(c.kind, 0) + 1
            items.append(Item(n, name, c))
        return tuple(items)

    @_names_its_file
    def summary(self, *, kernels: bool = False,
                max_decompressed: int | DecompressionBudget | None = None,
                jobs: int | None = None, progress: Progress = None) -> Summary:
        """Per (kind, arch): entries, bytes, codecs (headers only, fast); with ``kernels``, also
        each arch's distinct kernels and the toolkits that built its cubins (reads every image,
        on ``jobs`` processes, reporting to ``progress``). Then, per GPU arch, how many modules
        load as SASS, by PTX JIT, or not at all. ``file`` is the path, or :attr:`name` for
        bytes."""
        budget = self._budget(max_decompressed, jobs, progress)
        items = self.select()
        groups: dict[tuple[str, str, str], list[DeviceCode]] = {}
        for it in items:
            c = it.code
            groups.setdefault((c.vendor, c.kind, c.target), []).append(c)
        rows: list[ArchSummary] = []
        read: dict[int, tuple[list[str], tuple[int, int] | None]] = {}
        if kernels:
            codes = [it.code for it in items]
            read = dict(zip(map(id, codes), self._read(_outline, codes, _loadable(codes), budget,
                                                       "reading kernel names", jobs, progress),
                            strict=True))
        for (_, kind, target), codes in sorted(groups.items(),
                                               key=lambda kv: vendors.row_key(*kv[0][1:])):
            vendor = vendors.of(codes[0])
            versions = {v for c in codes if (v := vendor.version(c)) is not None}
            row = ArchSummary(
                kind, target, len(codes), sum(c.stored for c in codes),
                sum(c.uncompressed for c in codes),
                tuple(sorted({c.compression or "none" for c in codes})),
                tuple(sorted(versions, key=_version_order)))
            if kernels:
                names = {k for c in codes for k in read[id(c)][0]}
                toolkits = {tk for c in codes if (tk := read[id(c)][1])}
                row = ArchSummary(row.kind, row.arch, row.entries, row.stored, row.uncompressed,
                                  row.compression, row.ptx_versions, len(names),
                                  tuple(vendor.toolkit_name(tk) for tk in sorted(toolkits)))
            rows.append(row)
        # a container with no entry is a module the runtime registers that loads nowhere
        sets = _header_sets(items)
        return Summary(self.file, len(sets) + len(self.entryless), tuple(rows),
                       _devices(sets, self.entryless), len(self.moved),
                       _hidden([it.code for it in items]) if self.everywhere else None)

    @_names_its_file
    def functions(self, items: Sequence[Item] | None = None, *,
                  max_decompressed: int | DecompressionBudget | None = None,
                  jobs: int | None = None, progress: Progress = None,
                  ) -> list[tuple[CubinFunction, ...]]:
        """Per-function resources (:class:`fatbinkit.formats.cubin.CubinFunction`) of each SASS item
        (``()`` for PTX), in order, read on ``jobs`` processes: what ``cuobjdump -res-usage``
        prints."""
        from .parallel import functions_of

        budget = self._budget(max_decompressed, jobs, progress)
        chosen = self.select() if items is None else items
        return functions_of([it.code for it in chosen], budget=budget, jobs=jobs,
                            progress=progress)

    @_names_its_file
    def map(self, fn: Callable[[DeviceCode], R], items: Sequence[Item], *,
            kinds: Sequence[str] | str | None = None,
            max_decompressed: int | DecompressionBudget | None = None,
            jobs: int | None = None, progress: Progress = None,
            desc: str = "reading images") -> list[R]:
        """``[fn(item.code) for item in items]`` on ``jobs`` processes
        (:func:`fatbinkit.parallel.map_codes`: ``fn`` may be a closure; workers are forked;
        ``progress`` counts images, a bar labelled ``desc``), with the compressed payloads of
        the ``kinds`` ``fn`` reads (None: those a device loads, CUDA's SASS and PTX) charged to
        ``max_decompressed`` first: ``fn`` reads ``code.data()`` with no budget of its own."""
        return list(self.imap(fn, items, kinds=kinds, max_decompressed=max_decompressed,
                              jobs=jobs, progress=progress, desc=desc))

    @_names_its_file
    def imap(self, fn: Callable[[DeviceCode], R], items: Sequence[Item], *,
             kinds: Sequence[str] | str | None = None,
             max_decompressed: int | DecompressionBudget | None = None,
             jobs: int | None = None, progress: Progress = None,
             desc: str = "reading images") -> Iterator[R]:
        """:meth:`map` as the results come, in ``items``' order
        (:func:`fatbinkit.parallel.iter_codes`): memory holds a few chunks of results, not all
        of them. The arguments are checked and the budget charged at the call."""
        from .parallel import charge, iter_codes

        budget = self._budget(max_decompressed, jobs, progress)
        if not callable(fn):
            raise InvalidArgumentError(f"map() and imap() call fn on each image's DeviceCode: "
                                       f"{fn!r} is not callable")
        codes = [it.code for it in items]
        charge(codes, budget, _loadable(codes) if kinds is None else _as_kinds(kinds))
        return self._named(iter_codes(fn, codes, jobs=jobs, progress=progress, desc=desc))

    def _named(self, results: Iterator[R]) -> Iterator[R]:
        """``results``, whose errors start with the file's path (:func:`_names_its_file`, for
        an error raised while iterating)."""
        try:
            yield from results
        except InputError:
            raise
        except FatbinkitError as e:
            if self.path is None or str(e).startswith(f"{self.path}:"):
                raise
            raise naming(e, self.path) from e

    @_names_its_file
    def extract(self, directory: str | os.PathLike[str],
                arch: Iterable[str | Arch | ArchFilter] | str | Arch | None = None,
                kernel: str | KernelFilter | None = None, *,
                kinds: Sequence[str] | str | None = None,
                max_decompressed: int | DecompressionBudget | None = None,
                jobs: int | None = None, progress: Progress = None,
                batch: OutputBatch | None = None) -> list[Path]:
        """Write the selected images of ``kinds`` (None: those a device loads, CUDA's SASS and
        PTX) into ``directory`` under cuobjdump's names (PTX without its trailing NULs, as
        cuobjdump writes it); all or nothing: a corrupt entry half-way leaves
        the folder as it was. Returns the paths written (a name written twice, as with cuobjdump
        for equal identifiers, once). With ``batch`` (:func:`fatbinkit.outfile.atomic_files`),
        the files are added to it and put in place when its block ends: many binaries written
        all or nothing (:func:`fatbinkit.collection.extract`). ``jobs`` read the images for
        ``kernel``; ``progress`` counts that reading, then the images written (``True``: a bar
        when there is much to write, as :func:`fatbinkit.parallel.map_codes`)."""
        from .parallel import PROGRESS_MIN_BYTES, payload_bytes

        out = as_path(directory, "output folder")
        spend = self._budget(max_decompressed, jobs, progress)
        wanted = None if kinds is None else _as_kinds(kinds)
        items = [it for it in self.select(arch, kernel, max_decompressed=spend, jobs=jobs,
                                          progress=progress)
                 if it.kind in (vendors.of(it.code).loadable if wanted is None else wanted)]
        try:
            created = not out.exists()
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create {out}: {e.strerror or e}") from e
        before = len(batch.targets) if batch is not None else 0
        try:
            with contextlib.ExitStack() as stack:
                into = batch if batch is not None else stack.enter_context(atomic_files())
                report = stack.enter_context(reporter(
                    None if progress is True and payload_bytes([it.code for it in items])
                    < PROGRESS_MIN_BYTES else progress, len(items), "image", "writing images"))
                for it in items:
                    if it.name in ("", ".", ".."):
                        raise OutputError(f"refusing to write outside the output folder: "
                                          f"{it.name}")
                    data = vendors.of(it.code).extracted(it.code, spend)
                    into.write(out / it.name, data)
                    report.advance(1, it.name)
                written = into.targets[before:]
        except BaseException:
            if batch is not None:
                batch.rollback(before)
            if created:
                with contextlib.suppress(OSError):
                    out.rmdir()
            raise
        return list(dict.fromkeys(written))

    @_names_its_file
    def check(self, archs: Iterable[ArchLike] | ArchLike, driver: DriverLike | None = None,
              kernel: str | KernelFilter | None = None, *, every_image: bool = False,
              max_decompressed: int | DecompressionBudget | None = None,
              jobs: int | None = None, progress: Progress = None,
              sets: Sequence[ImageSet] | None = None) -> Check:
        """What the CUDA driver does with each module on each of ``archs`` (GPUs: a suffix is
        ignored) with ``driver`` (``"12.8"``, ``(12, 8)``, ``"570.124.06"``, ``12080``; None:
        driver floors are reported, not applied): per module and kernel the decision, per arch
        the verdict (:class:`fatbinkit.verdict.ArchVerdict`). With ``kernel``, only the matching
        kernels are judged (and modules without one are left out).

        Without ``kernel``, only the images these GPUs could load are read
        (:func:`fatbinkit.compat.image_sets` with ``devices``), unless ``every_image``: the
        decisions are the same, but kernels that only other archs' images hold are not looked
        for (:attr:`Check.every_image_read` says so). A kernel filter reads every image.
        ``sets``: the modules with every image read, when the caller has them
        (:attr:`fatbinkit.diff.Library.sets`): nothing is read again. Images are read on
        ``jobs`` processes, reporting to ``progress``, charged to ``max_decompressed``."""
        from .imagesets import read_image_sets

        budget = self._budget(max_decompressed, jobs, progress)
        if isinstance(archs, (str, int)) or not isinstance(archs, Iterable):
            archs = [archs]
        found = [vendors.device(a, "GPU arch") for a in archs]
        wanted = list(dict.fromkeys(d for _, d in found))
        runtime = vendors.runtime(found, driver)
        if not wanted:
            raise InvalidArgumentError("check needs at least one GPU arch")
        kf = kernel if kernel is None or isinstance(kernel, KernelFilter) else \
            KernelFilter.parse(kernel)
        source = self.path if self.path is not None else self.data
        assert source is not None
        every_image = every_image or kf is not None
        name = str(self.path) if self.path else self.name
        if sets is not None:
            return judge(name, sets, wanted, runtime, kf)
        read = read_image_sets(source, self.codes, budget, jobs=jobs, progress=progress,
                               devices=None if every_image else wanted)
        with contextlib.closing(read):  # an error stops the workers here
            return judge(name, read, wanted, runtime, kf, entryless=self.entryless)

    @_names_its_file
    def min_driver(self, archs: Iterable[ArchLike] | ArchLike | None = None,
                   kernel: str | KernelFilter | None = None, *, every_image: bool = False,
                   jobs: int | None = None,
                   max_decompressed: int | DecompressionBudget | None = None,
                   progress: Progress = None) -> MinDriver:
        """The lowest driver each of ``archs`` (default: every GPU the vendors of its images
        list, :meth:`fatbinkit.vendors.Vendor.every_device`: NVIDIA's device table, and the
        future GPUs of its SASS for SMs the table lacks) needs for this
        file's images: ``check --min-driver``; ``lib.min_driver()["sm_90"].min_driver`` is
        ``(12, 0)`` for a library of CUDA 12 cubins. ``kernel``, ``every_image`` as for
        :meth:`check`; images are read on ``jobs`` processes, inflating at most
        ``max_decompressed`` bytes (``progress`` counts them)."""
        from .verdict import ArchMinDriver, MinDriver

        own = list(dict.fromkeys(c.vendor for c in self.codes)) or list(vendors.VENDORS)
        wanted = [d for v in own for d in vendors.VENDORS[v].every_device(self.codes)] \
            if archs is None else archs
        kf = kernel if kernel is None or isinstance(kernel, KernelFilter) else \
            KernelFilter.parse(kernel)
        c = self.check(wanted, None, kf, every_image=every_image, jobs=jobs,
                       max_decompressed=max_decompressed, progress=progress)
        return MinDriver(c.file, len(c.rows), tuple(ArchMinDriver.of(v) for v in c.verdicts))


def judge(file: str, sets: Iterable[ImageSet], devices: Sequence[Any],
          runtime: Version | None, kernel: KernelFilter | None = None, *,
          entryless: Sequence[EntrylessContainer] = ()) -> Check:
    """The :class:`Check` of modules already read (``sets``) on ``devices`` (the vendors'
    GPUs: :func:`fatbinkit.vendors.device`'s) with ``runtime`` (the vendor's runtime version,
    None: floors reported): :meth:`Binary.check`'s judgement, for a caller that holds the
    modules and not the file (``file`` names it). Each module is judged as ``sets`` gives it
    (:func:`~fatbinkit.imagesets.read_image_sets` gives them while its workers read the rest);
    ``entryless``: the containers with no entry, put among them
    (:func:`~fatbinkit.imagesets.placed`)."""
    from .imagesets import placed
    from .verdict import ArchVerdict

    judged: dict[int, list[tuple[str | None, list[Decision]]]] = {}
    shapes: Shapes = {}
    order = placed((_judged(s, devices, runtime, shapes, judged) for s in sets), entryless)
    rows: list[tuple[ImageSet, list[tuple[str | None, list[Decision]]]]] = []
    for s in order:
        kernels = judged[id(s)] if id(s) in judged else s.judged(devices, runtime, shapes)
        if kernel is not None:
            kernels = [(k, ds) for k, ds in kernels if k is not None and kernel.matches(k)]
            if not kernels:
                continue
        rows.append((s, kernels))
    names = [[k for k, _ in ks if k is not None] for _, ks in rows]
    verdicts = tuple(ArchVerdict.of(a, runtime,
                                    [(s, [ds[i] for _, ds in ks]) for s, ks in rows], names)
                     for i, a in enumerate(devices))
    unread = sum(i.kernels is None and not i.unread for s in order for i in s.images)
    return Check(file, tuple(devices), runtime, tuple(rows), verdicts, unread == 0)


def _judged(s: ImageSet, devices: Sequence[Any], runtime: Version | None, shapes: Shapes,
            into: dict[int, list[tuple[str | None, list[Decision]]]]) -> ImageSet:
    """``s``, its :meth:`~fatbinkit.imagesets.ImageSet.judged` rows put ``into`` by its id."""
    into[id(s)] = s.judged(devices, runtime, shapes)
    return s


@dataclass(frozen=True, repr=False)
class Check:
    """The result of :meth:`Binary.check`: ``rows`` are (module, [(kernel, [decision per
    arch])]), ``verdicts`` one :class:`~fatbinkit.verdict.ArchVerdict` per arch. ``if
    check.ok:`` is the exit status of ``check``, ``check.strict_ok`` that of ``check
    --strict``."""

    file: str
    archs: tuple[Arch, ...]
    driver: Version | None
    rows: tuple[tuple[ImageSet, list[tuple[str | None, list[Decision]]]], ...]
    verdicts: tuple[ArchVerdict, ...]
    every_image_read: bool = True  # False: kernels only other archs' images hold not looked for

    @property
    def ok(self) -> bool:
        """Every arch works or is partial (:attr:`fatbinkit.verdict.ArchVerdict.ok`)."""
        return all(v.ok for v in self.verdicts)

    @property
    def strict_ok(self) -> bool:
        """Every arch works (:attr:`fatbinkit.verdict.ArchVerdict.strict_ok`)."""
        return all(v.strict_ok for v in self.verdicts)

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        """The ``check --json`` document (``check --strict --json`` with ``strict``: its
        ``ok`` is :attr:`strict_ok`)."""
        return {**_check_head(self, strict), "every_image_read": self.every_image_read,
                "modules": [_module_dict(s, kernels, self.archs) for s, kernels in self.rows]}

    def __str__(self) -> str:
        return "\n".join(str(v) for v in self.verdicts)

    def __repr__(self) -> str:
        return f"Check({self.file!r}, modules={len(self.rows)}, {_verdicts_repr(self)})"


def _check_head(check: Check | TotalCheck, strict: bool) -> dict[str, Any]:
    """The keys a file's and a wheel's or folder's ``check --json`` share, in their order."""
    return {
        "file": check.file,
        "driver": dotted(check.driver) if check.driver else None,
        "driver_checked": check.driver is not None,
        "strict": strict,
        "archs": [str(a) for a in check.archs],
        "ok": check.strict_ok if strict else check.ok,
        "verdicts": {str(v.device): v.to_dict() for v in check.verdicts},
    }


def _module_dict(s: ImageSet, kernels: list[tuple[str | None, list[Decision]]],
                 archs: Sequence[Arch]) -> dict[str, Any]:
    """A module of the ``check --json`` document: where it was found (in the listing's words:
    ``section`` or ``symbol``, and ``container``), its images and each kernel's decisions."""
    section, symbol = source_keys(s.source)
    return {
        "module": s.label,
        "section": section,
        "symbol": symbol,
        "container": s.container,
        "raw": s.raw,
        "empty": s.empty,
        "vendor": s.vendor,
        "images": [{"kind": i.kind,
                    "arch": i.arch_name,
                    "offset": i.offset,
                    **vendors.VENDORS[s.vendor].image_details(i),
                    "compression": i.compression,
                    "read": i.kernels is not None or bool(i.unread)}
                   for i in s.images],
        "kernels": [{"name": k, "archs": {str(a): d.to_dict()
                                          for a, d in zip(archs, ds, strict=True)}}
                    for k, ds in kernels],
    }


def _verdicts_repr(check: Check | TotalCheck) -> str:
    """``driver='13.0', works: sm_80 sm_90, fails: sm_75``: the archs by status."""
    by: dict[str, list[str]] = {}
    for v in check.verdicts:
        by.setdefault(v.status, []).append(str(v.device))
    driver = "None" if check.driver is None else repr(dotted(check.driver))
    return ", ".join([f"driver={driver}", *(f"{k}: {' '.join(a)}" for k, a in by.items())])


def _outline(code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
    """Kernel names and the toolkit that built the image (None: not recorded): the vendor's
    :meth:`~fatbinkit.vendors.Vendor.outline`. The payload is read with no budget: callers
    charge it first."""
    return vendors.of(code).outline(code)


def _loadable(codes: Sequence[DeviceCode]) -> set[str]:
    """The kinds among ``codes`` that a device loads (their kernels are read)."""
    return {c.kind for c in codes if c.kind in vendors.of(c).loadable}


def _header_sets(items: Sequence[Item]) -> list[tuple[str, tuple[ImageInfo, ...]]]:
    """Per module (container, or a bare image), its vendor and its loadable images as the
    headers say."""
    sets: dict[tuple[str, int, int], tuple[str, list[ImageInfo]]] = {}
    for i, it in enumerate(items):
        c = it.code
        image = vendors.of(c).header_image(c)
        if image is not None:
            key = (c.source, c.container, i if c.container < 0 else -1)
            sets.setdefault(key, (c.vendor, []))[1].append(image)
    return [(vendor, tuple(images)) for vendor, images in sets.values()]


def _devices(sets: Sequence[tuple[str, tuple[ImageInfo, ...]]],
             entryless: Sequence[EntrylessContainer]) -> tuple[DeviceSummary, ...]:
    """Per GPU of each vendor the file has code for (of every vendor when it has none), what
    each of its modules loads, the ``entryless`` ones loading nowhere (modules with the same
    images decided once)."""
    present = list(dict.fromkeys([*(v for v, _ in sets), *(c.vendor for c in entryless)])) \
        or list(vendors.VENDORS)
    out: list[DeviceSummary] = []
    for name in present:
        vendor = vendors.VENDORS[name]
        own = [images for v, images in sets if v == name]
        devices = vendor.devices(i for images in own for i in images)
        picks: dict[tuple[ImageInfo, ...], list[tuple[str, str]]] = {}
        for images in own:
            if images not in picks:
                decisions = [vendor.decide(images, d) for d in devices]
                picks[images] = [(d.how, "" if d.image is None else d.image.arch_name)
                                 for d in decisions]
        nowhere = sum(c.vendor == name for c in entryless)
        per_module = [picks[images] for images in own]  # a tuple of images hashes each time
        for i, device in enumerate(devices):
            counts = {NATIVE: 0, JIT: 0, NONE: nowhere}
            used: dict[str, int] = {}
            for pick in per_module:
                how, img = pick[i]
                counts[how if how in counts else NONE] += 1
                if img:
                    used[img] = used.get(img, 0) + 1
            out.append(DeviceSummary(device, vendor.generation(device), counts[NATIVE],
                                     counts[JIT], counts[NONE],
                                     tuple(sorted(used, key=lambda a: (-used[a], a)))))
    return tuple(out)


def open(source: str | os.PathLike[str] | bytes | bytearray | memoryview, *,
         all: bool = False, name: str = "input", everywhere: bool = False,
         max_decompressed: int | DecompressionBudget | None = None) -> Binary:
    """Read ``source`` (a path, or the bytes of a file): a fatbin, cubin, PTX, or a host ELF
    file (``.so``, ``.o``, executable) holding device code. The file is memory-mapped; images
    are read when asked for. A host ELF file without device code gives a :class:`Binary` with
    no ``codes`` (the CLI then says "does not contain device code", as cuobjdump does); input
    that is none of these raises :class:`~fatbinkit.errors.FormatError`; a wheel or a folder
    (many binaries: :mod:`fatbinkit.collection` reads them) an
    :class:`~fatbinkit.errors.UnsupportedError` that says so. A static library (``.a``) is one
    input: its objects' device code, :attr:`Binary.members` its objects. ``name`` is the file
    name of bytes given (a wheel member's): images are named after it, as cuobjdump names them
    after the file it reads (``libfoo.1.sm_90.cubin``). ``max_decompressed``
    bounds what finding the images inflates (AMD's compressed bundles are inflated to be listed;
    :meth:`~fatbinkit.formats.codec.DecompressionBudget.of`). ``everywhere`` adds the deep
    scan's images (:func:`fatbinkit.scan.scan`): device code in the file's other sections, which
    cuobjdump does not list and the library loads itself (:attr:`DeviceCode.hidden
    <fatbinkit.device_code.DeviceCode.hidden>`; docs/hidden.md)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        codes, entryless = scan_modules(view, all=all, everywhere=everywhere,
                                        max_decompressed=max_decompressed)
        return Binary(None, len(view), codes, all, view,
                      _objects(view, None) if any(c.member for c in codes) else (), name,
                      tuple(c for c in entryless if not c.moved),
                      moved=tuple(c for c in entryless if c.moved), everywhere=everywhere)
    path = as_path(source, "input")
    _one_binary(path)
    codes, entryless = scan_modules(path, all=all, everywhere=everywhere,
                                    max_decompressed=max_decompressed)
    try:
        size = path.stat().st_size
        members: tuple[str, ...] = ()
        if any(c.member for c in codes):  # a static library (with no code, nothing is listed)
            with path.open("rb") as f:
                members = _objects(
                    memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)), path)
    except OSError as e:  # scan read it a moment ago: removed since
        raise InputError(f"{path}: {e.strerror or e}") from e
    return Binary(path, size, codes, all, members=members, name=path.name,
                  entryless=tuple(c for c in entryless if not c.moved),
                  moved=tuple(c for c in entryless if c.moved), everywhere=everywhere)


def _reopen(path: Path, all: bool, size: int, mtime_ns: int, everywhere: bool) -> Binary:
    """A pickled :class:`Binary` of a file: the file read again, if it is unchanged."""
    binary = open(path, all=all, everywhere=everywhere)
    if (binary.size, binary._mtime_ns) != (size, mtime_ns):
        binary.close()
        raise InputError(f"{path}: changed since the pickled Binary read it ({size} bytes then, "
                         f"{binary.size} now, or modified since): open it again")
    return binary


def _reread(data: bytes, all: bool, name: str, everywhere: bool) -> Binary:
    """A pickled :class:`Binary` of bytes."""
    return open(data, all=all, name=name, everywhere=everywhere)


def _one_binary(path: Path) -> None:
    """Refuse a wheel or a folder (:func:`fatbinkit.infile.is_collection`), pointing to
    the API that reads one."""
    if is_collection(path):
        what = "a folder" if path.is_dir() else "a wheel" if path.suffix == ".whl" else \
            "a .pt2 package"
        raise UnsupportedError(
            f"{path}: {what} holds many binaries, and fatbinkit.open reads one: use "
            "fatbinkit.collection (collection.binaries(path) opens each binary with device "
            "code, collection.check checks them all)")


def _objects(view: memoryview, path: Path | None) -> tuple[str, ...]:
    """The names of a static library's ELF objects, those without device code too."""
    from .scan import archive_objects

    return tuple(m.name for m, _ in archive_objects(view, path))
