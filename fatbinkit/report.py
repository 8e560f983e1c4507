"""A picture of where the bytes go: ``fatbinkit report INPUT [OLD] -o report.html``.

:func:`report` reads a library, a wheel or a folder (:mod:`fatbinkit.collection`) once, every
image on every core (:func:`fatbinkit.diff.read_library`, as ``diff`` reads it), and makes a
:class:`Report`: one JSON document (:meth:`Report.to_dict`) and one self-contained HTML page
(:meth:`Report.html`: Plotly's JavaScript inside, no network) with four views:

1. **bytes**: a treemap input -> library -> arch -> module -> kernel, stored or uncompressed, the
   host code of each library its own block so that a library adds up to its file size; images
   stored more than once in the input marked;
2. **coverage**: library x GPU, what each GPU loads (native code, PTX JIT, nothing, or fails with
   the driver given) and the minimum driver per GPU;
3. **what-if**: for sets of GPUs, what ``prune --for`` would keep and drop (nothing written);
4. **comparison** (with ``OLD``): what ``diff OLD INPUT`` reports, in short.

The figures are the commands' own: ``summary`` holds ``ls --summary --json``'s documents,
``coverage`` each library's verdicts as ``check --arch ... --json`` gives them and the
minimum drivers of ``check --min-driver --json``, ``comparison`` the counts and changes of
``diff --json``. Plotly (the ``report`` extra) is needed for :meth:`Report.html` only.
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import __version__, vendors
from .binary import Binary, Check, Summary, demangle, judge
from .collection import Member, TotalCheck, binaries, inventory, named, total_check
from .decision import dotted
from .diff import Diff, Snapshot, diff, images_read, read_library
from .errors import FatbinkitError, InvalidArgumentError
from .formats.codec import DecompressionBudget
from .outfile import atomic_path
from .parallel import as_jobs, beside, gc_paused
from .progress import Progress
from .slim import _for_kernels

__all__ = ["FORMAT", "KERNEL_NODES", "Report", "report"]

#: what :meth:`Report.to_dict` says it is
FORMAT = "fatbinkit-report/1"
#: kernels drawn in the treemap, largest first over the whole input; the others of a module are
#: one block ("412 more kernels"): torch has 10^5 and the page stays under 10 MB
KERNEL_NODES = 12_000
_KERNELS_PER_IMAGE = 24  # at most this many kernels of one image drawn
_LABEL = 72  # characters of a demangled kernel name shown
_BRACKETS = re.compile(r"([<>()])")
_OTHER_FILES = 12  # files without device code drawn apart in the treemap (the largest)


@dataclass(frozen=True)
class Report:
    """What :func:`report` found: ``data`` is the JSON document (:meth:`to_dict`);
    ``snapshot`` the libraries of ``source`` as read (:class:`fatbinkit.diff.Snapshot`: every
    image's kernels, what ``fatbinkit survey --kernels`` stores)."""

    source: str
    old: str | None
    data: Mapping[str, Any] = field(repr=False)
    snapshot: Snapshot | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    def html(self) -> str:
        """The page: the document inside (``<script id="fatbinkit-report"
        type="application/json">``), Plotly's JavaScript inline (the ``report`` extra)."""
        from ._report_page import page

        with gc_paused():  # the document's tree, as JSON
            return page(self.data)

    def write(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`html` to ``path`` (whole or not at all)."""
        text = self.html()
        with atomic_path(Path(path)) as tmp:
            tmp.write_text(text, encoding="utf-8")

    def __str__(self) -> str:
        libs = self.data["libraries"]
        size = sum(lib["size"] for lib in libs)
        against = f" against {self.old}" if self.old else ""
        return (f"report of {self.source}{against}: {len(libs)} "
                f"librar{'y' if len(libs) == 1 else 'ies'}, {size} bytes")


def report(source: str | os.PathLike[str], old: str | os.PathLike[str] | None = None, *,
           driver: Any = None, keep: Iterable[Iterable[str]] | None = None,
           everywhere: bool = False, jobs: int | None = None, progress: Progress = None,
           max_decompressed: int | DecompressionBudget | None = None,
           skipped: Callable[[Member, FatbinkitError], None] | None = None) -> Report:
    """Read ``source`` (and ``old``, to compare) and make a :class:`Report`.

    ``driver``: the driver the coverage view judges with (``"12.8"``, ``"570.124.06"``; None:
    driver floors are reported as minimum drivers, not applied). ``keep``: the GPU sets of the
    what-if view (each a list of archs, ``[["sm_90"], ["sm_90", "sm_120"]]``); None: each base
    SASS arch the input has, alone. ``everywhere``, ``jobs``, ``progress``,
    ``max_decompressed``, ``skipped`` as :func:`fatbinkit.diff.snapshot` takes them."""
    as_jobs(jobs)
    DecompressionBudget.of(max_decompressed, 0)
    runtime = vendors.runtime((), driver)  # refused before anything is read
    how = _Reader(driver, _gpu_sets(keep), everywhere, jobs, progress, max_decompressed,
                  skipped)
    with gc_paused():
        return _report(source, old, how, runtime)


def _report(source: str | os.PathLike[str], old: str | os.PathLike[str] | None, how: _Reader,
            runtime: Any) -> Report:
    new = _read(source, how, None)
    doc: dict[str, Any] = {
        "format": FORMAT, "tool": f"fatbinkit {__version__}", "source": os.fspath(source),
        "old": None if old is None else os.fspath(old),
        "driver": None if runtime is None else dotted(runtime), **new.doc, "comparison": None}
    if old is not None:
        before = _read(old, how, new.snapshot)
        doc["comparison"] = _comparison(diff(before.snapshot, new.snapshot), before.doc, new.doc)
    return Report(os.fspath(source), None if old is None else os.fspath(old), doc,
                  new.snapshot)


@dataclass(frozen=True)
class _Read:
    snapshot: Snapshot
    doc: dict[str, Any]


def _gpu_sets(keep: Iterable[Iterable[str]] | None) -> list[list[str]] | None:
    if keep is None:
        return None
    if isinstance(keep, str):
        raise InvalidArgumentError("keep is a list of GPU sets, e.g. [['sm_90', 'sm_120']], "
                                   f"not the string {keep!r}")
    sets = []
    for s in keep:
        if isinstance(s, str):
            raise InvalidArgumentError(f"each set of keep is a list of archs, not {s!r}")
        archs = [str(vendors.device(a, "GPU arch")[1]) for a in s]
        if not archs:
            raise InvalidArgumentError("a GPU set of keep names no arch")
        sets.append(list(dict.fromkeys(archs)))
    if not sets:
        raise InvalidArgumentError("keep names no GPU set")
    return sets


@dataclass(frozen=True)
class _Reader:
    """How :func:`report` reads each of its inputs."""

    driver: Any
    keep: list[list[str]] | None
    everywhere: bool
    jobs: int | None
    progress: Progress
    max_decompressed: int | DecompressionBudget | None
    skipped: Callable[[Member, FatbinkitError], None] | None


def _read(source: str | os.PathLike[str], how: _Reader, like: Snapshot | None) -> _Read:
    """One input read once: each library's summary, images, verdicts and what-if."""
    driver, keep, jobs = how.driver, how.keep, how.jobs
    known = {} if like is None else {d: o for lib in like.libraries for d, o in lib.read.items()}
    read = []
    held = inventory(source)
    passed: list[tuple[Member, FatbinkitError]] = []  # told to how.skipped in name order
    note = None if how.skipped is None else lambda m, e: passed.append((m, e))
    # the largest first (torch's libtorch_cuda.so is read while libtorch_cpu.so is inflated and
    # scanned), then back in name order
    try:
        for m, binary in binaries(source, how.progress, note, jobs=jobs,
                                  everywhere=how.everywhere, largest_first=True, listed=held):
            with named(m):
                lib = read_library(binary, m.name, how.max_decompressed, known, jobs=jobs)
                assert lib.summary is not None  # read_library's, headers only
                summary = lib.summary  # named as ls names it: a file given by its path,
                if m.path != m.origin:  # a wheel's or folder's library by its path inside
                    summary = replace(summary, file=m.name)
            read.append((m.name, lib, summary, *_library(m, binary, lib, summary)))
    finally:
        for m, e in sorted(passed, key=lambda p: p[0].name):
            if how.skipped is not None:
                how.skipped(m, e)
    read.sort(key=lambda r: r[0])
    libs = [r[1] for r in read]
    summaries: list[Summary] = [r[2] for r in read]
    libraries = [r[3] for r in read]
    every_image: list[list[dict[str, Any]]] = [r[4] for r in read]
    every_unit: list[list[_Unit]] = [r[5] for r in read]
    # each library judged on every GPU of its vendors that any library of the input lists (a
    # wheel's libraries have their own future GPUs: cuFFT 11's sm_35), as check --min-driver
    # judges them
    listed = [[vendors.device(d.device, "GPU arch") for d in s.devices] for s in summaries]
    every = {d: v for found in listed for v, d in found}
    judging = []
    for found in listed:
        own = {v.name for v, _ in found}
        gpus = sorted(((v, d) for d, v in every.items() if v.name in own),
                      key=lambda g: _device_key(g[1]))
        judging.append(([d for _, d in gpus], vendors.runtime(gpus, driver)))
    devices = list(dict.fromkeys(str(d) for gpus, _ in judging for d in gpus))

    def coverage() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Each library's cells, and the input's (judged beside the rest: 0.4 s of torch's)."""
        checks, floors, cells = [], [], []
        for lib, (gpus, runtime) in zip(libs, judging, strict=True):
            judged = judge(lib.name, lib.sets, gpus, runtime)
            least = judged if driver is None else judge(lib.name, lib.sets, gpus, None)
            if judged.rows:
                checks.append(judged)
                floors.append(least)
            cells.append(_coverage(judged, least))
        verdicts = total_check(os.fspath(source), checks) if checks else None
        least_total = total_check(os.fspath(source), floors) if floors else None
        return cells, _total_coverage(verdicts, least_total, cells)

    with beside(coverage, jobs=jobs) as judged:
        sets = keep if keep is not None else _default_sets(summaries)
        for entry, units in zip(libraries, every_unit, strict=True):
            entry["what_if"] = [_what_if(units, gpus) for gpus in sets]
            entry["choosable"] = _choosable(units, devices)
        one = held.members[0]  # a wheel's or folder's libraries are totalled, even one
        total = Summary.combined(f"{os.fspath(source)} (total of {len(summaries)} files)",
                                 summaries) if len(summaries) > 1 or one.path != one.origin \
            else None
        copies = _copies(every_image)
        for entry, images in zip(libraries, every_image, strict=True):  # the copies after
            entry["duplicated"] = _duplicated(images, copies)  # the first
        names = {lib["name"] for lib in libraries}
        others = [(n, size) for n, size in held.files if n not in names]
        tree = _tree(os.fspath(source), libraries, every_image, copies, others)
        cells, total_coverage = judged()
    for entry, cell in zip(libraries, cells, strict=True):
        entry["coverage"] = cell
    doc = {
        "summary": {"files": [s.to_dict() for s in summaries],
                    "total": None if total is None else total.to_dict()},
        "libraries": libraries,
        "other_files": sum(size for _, size in others),
        "bytes": tree,
        "devices": devices,
        "total_coverage": total_coverage,
        "what_if": _what_if_total(libraries),
    }
    return _Read(Snapshot(os.fspath(source), tuple(libs)), doc)


def _device_key(device: Any) -> tuple[Any, ...]:
    return vendors.target_key(str(device))


def _coverage(judged: Check, least: Check) -> dict[str, Any]:
    """A library's cells, per GPU: judged (with the driver), and its minimum driver."""
    return {str(v.device): {**_cell(v), "min_driver": _dotted(f.min_driver),
                            "min_driver_known": f.min_driver_known}
            for v, f in zip(judged.verdicts, least.verdicts, strict=True)}


def _library(m: Member, binary: Binary, lib: Any, summary: Summary,
             ) -> tuple[dict[str, Any], list[dict[str, Any]], list[_Unit]]:
    """One library's part of the document (its coverage is added once every library is
    read), its images as the treemap draws them, and its modules as the what-if weighs
    them."""
    listed = binary.select()
    items = [it for it in listed if it.kind in vendors.of(it.code).loadable]
    read = images_read(lib)
    assert len(read) == len(items), "read_library reads the loadable images in select() order"
    images = []
    for it, (arch, module, native, rows, digest) in zip(items, read, strict=True):
        c = it.code
        kernels = [(r[0], (r[-1] or 0) if native else 0) for r in rows if not native or r[1]]
        images.append({"kind": c.kind, "arch": arch, "module": module, "stored": c.stored,
                       "uncompressed": c.uncompressed, "hidden": c.hidden,
                       "kernels": len(kernels),
                       "largest": heapq.nsmallest(_KERNELS_PER_IMAGE, kernels,
                                                  key=lambda k: (-k[1], k[0])),
                       "digest": digest})
    other = [it.code for it in listed if it.kind not in vendors.of(it.code).loadable]
    return {
        "name": m.name, "size": binary.size,
        "stored": summary.stored, "uncompressed": summary.uncompressed,
        "other_images": sum(c.stored for c in other),
        "other_images_uncompressed": sum(c.uncompressed for c in other),
        "duplicated": 0,
        "coverage": {},  # every library's GPUs once all are read: _coverage
        "what_if": [],  # for every library's GPU sets once all are read: _what_if
    }, images, _units([it.code for it in listed], lib)


def _dotted(v: Any) -> str | None:
    return None if v is None else dotted(v)


def _cell(v: Any) -> dict[str, Any]:
    """What one GPU does with one library: ``none`` (no module has an image it loads),
    ``fails`` (the verdict fails: the driver picks an image it cannot load, or no driver for
    that GPU is new enough), ``native`` (every module that loads has native code for it),
    ``jit`` (every one by PTX JIT), ``mixed``; with the verdict's counts as ``check --json``
    gives them."""
    d = v.to_dict()
    native = d[vendors.VENDORS[v.vendor].words["native_key"]]  # CUDA's "sass"
    if not native and not d["jit"] and not d["cannot"]:
        status = "none"
    elif d["status"] == "fails":  # a module the driver cannot load, or no driver drives it
        status = "fails"
    elif not d["jit"]:
        status = "native"
    else:
        status = "jit" if not native else "mixed"
    return {"status": status, "verdict": d["status"], "native": native, "jit": d["jit"],
            "cannot": d["cannot"], "other_gpus": d["other_gpus"], "reason": d["reason"]}


def _total_coverage(verdicts: TotalCheck | None, least: TotalCheck | None,
                    cells: Sequence[Mapping[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per GPU, the whole input's verdict (with the driver given), module counts and minimum
    driver (``check --min-driver``'s: no driver), and its cell: ``fails`` when the verdict
    does, else what its libraries' cells say together (``none`` where none has an image, one
    status where all that have agree, ``mixed``)."""
    if verdicts is None or least is None:
        return {}
    out = {}
    for v, f in zip(verdicts.verdicts, least.verdicts, strict=True):
        d = str(v.device)
        seen = {cell[d]["status"] for cell in cells if d in cell}
        seen.discard("none")
        status = "fails" if v.status == "fails" and seen else \
            "none" if not seen else seen.pop() if len(seen) == 1 else "mixed"
        floor = f.to_dict()  # no driver: check --min-driver's
        native = floor[vendors.device(v.device, "GPU arch")[0].words["native_key"]]
        out[d] = {"status": status, "verdict": v.status, "reason": v.to_dict()["reason"],
                  "min_driver": _dotted(f.min_driver), "native": native,
                  "jit": floor["jit"], "cannot": floor["cannot"],
                  "other_gpus": floor["other_gpus"]}
    return out


def _duplicated(images: Sequence[dict[str, Any]], copies: Mapping[bytes, int]) -> int:
    """A library's stored bytes that repeat an image stored earlier in the input (its own or
    another library's: the input's first copy of each is not counted)."""
    return sum(img["stored"] for img in images if copies[img["digest"]] > 1
               and not img.get("first"))


def _copies(libraries: Sequence[Sequence[dict[str, Any]]]) -> dict[bytes, int]:
    """How many images of the input have each image's entry header and stored bytes (its
    ``digest``, as :func:`fatbinkit.diff.read_library` takes it)."""
    seen: dict[bytes, int] = {}
    for images in libraries:
        for img in images:
            img["first"] = img["digest"] not in seen
            seen[img["digest"]] = seen.get(img["digest"], 0) + 1
    return seen


# -- what-if: what prune would keep ------------------------------------------------------------

@dataclass(frozen=True)
class _Unit:
    """One module as the what-if weighs it: its images' stored bytes and kinds (in container
    order), which are loadable, each loadable one as read (kernels) and as its entry header
    says (what prune's picks go by)."""

    vendor: Any
    stored: tuple[int, ...]
    kinds: tuple[str, ...]
    compressed: bool
    loadable: tuple[int, ...]
    images: tuple[Any, ...]
    headers: tuple[Any, ...]
    shape: int  # units whose headers are equal share it (and so the images GPUs pick)
    fixed: tuple[int, ...]  # kept whenever a GPU of the vendor is named: PTX, other kinds
    empty: bool  # no kernel and no variable in any loadable image: it keeps its smallest


def _units(codes: Sequence[Any], lib: Any) -> list[_Unit]:
    """The modules of one library, from its images in listing order and ``lib.sets``
    (:func:`fatbinkit.diff.read_library`'s: the modules with a loadable image, in order)."""
    modules: dict[tuple[str, str, int, int], list[int]] = {}
    for i, c in enumerate(codes):
        modules.setdefault((c.member, c.source, c.container, i if c.container < 0 else -1),
                           []).append(i)
    sets_read = iter(lib.sets)
    units = []
    shapes: dict[tuple[Any, ...], int] = {}
    for idx in modules.values():
        vendor = vendors.of(codes[idx[0]])
        loadable = tuple(j for j, i in enumerate(idx) if codes[i].kind in vendor.loadable)
        images = next(sets_read).images if loadable else ()
        assert len(images) == len(loadable)
        headers = tuple(vendor.header_image(codes[idx[j]]) for j in loadable)
        kinds = tuple(codes[i].kind for i in idx)
        units.append(_Unit(
            vendor, tuple(codes[i].stored for i in idx), kinds,
            any(codes[i].compression for i in idx), loadable, tuple(images), headers,
            shapes.setdefault((vendor.name, headers), len(shapes)),
            tuple(j for j, kind in enumerate(kinds)
                  if kind not in vendor.loadable or kind not in vendor.function_kinds),
            bool(loadable) and all(img.kernels is not None and not img.kernels
                                   and not img.variables for img in images)))
    return units


def _default_sets(summaries: Sequence[Summary]) -> list[list[str]]:
    """Each GPU the input has native code for, alone (``sm_90a`` SASS: ``sm_90``), in the
    vendors' order: the same sets for every library."""
    found = {}
    for s in summaries:
        for a in s.archs:
            vendor, device = vendors.device(a.arch, "GPU arch") if \
                a.kind in vendors.of_target(a.arch).function_kinds else (None, None)
            if vendor is not None:
                found[str(device)] = vendor
    return [[d] for d in sorted(found, key=vendors.target_key)]


def _what_if(units: Sequence[_Unit], gpus: list[str]) -> dict[str, Any]:
    """The stored bytes of device code ``prune --for`` each of ``gpus`` keeps (``--ptx
    keep``, its default) and drops in one library, by the rules of
    :func:`fatbinkit.slim.slim` (``_kept``, ``_keep_empty``, ``_keep_for_kernels``): per
    module, the image each GPU picks, every PTX, every image of a kind no GPU loads; a module
    left no image that holds no kernel and no variable keeps its smallest; a module whose kept
    images lack kernels that dropped ones hold keeps the smallest dropped ones that have them.
    Modules of another vendor than the GPUs' are kept. ``exact``: the kept bytes are what
    ``prune`` writes (tests/test_report.py holds them to it); False where a container
    compressed whole (AMD's CCOB) loses images: prune compresses what it keeps anew, and the
    figure is the kept images' shares of the bundle as it is. ``refused``: none of the GPUs
    loads an image of any module, which ``prune`` refuses (EmptiedError) rather than write a
    library with no device code for them."""
    kept = total = 0
    exact = True
    loads = False
    devices = [vendors.device(g, "GPU arch") for g in gpus]
    picks: dict[tuple[int, Any], list[int] | None] = {}  # (shape, GPU): the headers picked
    for unit in units:
        chosen, picked = _kept_of(unit, devices, picks)
        loads |= picked
        kept += sum(unit.stored[j] for j in chosen)
        total += sum(unit.stored)
        if len(chosen) < len(unit.stored) and unit.compressed and not \
                unit.vendor.compressed_apart:
            exact = False
    return {"gpus": gpus, "kept": kept, "dropped": total - kept, "exact": exact,
            "refused": bool(units) and not loads}


def _kept_of(unit: _Unit, gpus: Sequence[tuple[vendors.Vendor, Any]],
             picks: dict[tuple[int, Any], list[int] | None]) -> tuple[set[int], bool]:
    """The positions of one module's images that pruning for ``gpus`` (:func:`vendors.device`'s
    answers) keeps, and whether one of the GPUs loads one of them; ``picks`` remembers the
    image each GPU picks among equal headers."""
    vendor = unit.vendor
    everything = set(range(len(unit.stored)))
    devices = [d for v, d in gpus if v is vendor]
    if not devices:
        return everything, False
    kept = set(unit.fixed)  # other kinds, and PTX (--ptx keep)
    picked = False
    for d in devices:
        at = _pick(unit, d, picks)
        if at is not None:
            picked = True
            kept.update(unit.loadable[n] for n in at)
    names = {j: img.kernels or frozenset()
             for j, img in zip(unit.loadable, unit.images, strict=True)}
    size = {j: (unit.stored[j], j) for j in unit.loadable}
    if unit.loadable and kept.isdisjoint(unit.loadable):
        if unit.empty:
            kept.add(min(unit.loadable, key=size.__getitem__))
    elif unit.loadable:
        kept.update(_for_kernels(kept, names, size.__getitem__))
    return kept, picked


def _pick(unit: _Unit, device: Any, picks: dict[tuple[int, Any], list[int] | None],
          ) -> list[int] | None:
    """The positions among ``unit``'s headers of the image ``device`` picks (None: it picks
    none), remembered in ``picks`` per header shape."""
    key = (unit.shape, device)
    if key not in picks:
        pick = unit.vendor.decide(unit.headers, device).image
        picks[key] = None if pick is None else \
            [n for n, h in enumerate(unit.headers) if h is pick]
    return picks[key]


def _choosable(units: Sequence[_Unit], devices: Sequence[str]) -> dict[str, Any]:
    """What the page needs to weigh any set of ``devices`` as :func:`_what_if` does: per
    module ``[vendor, stored, fixed, loadable, kernel_sets, picks, empty, inexact]``: each
    image's stored bytes; the positions kept whenever a GPU of the vendor is named (PTX, kinds
    no GPU loads); the loadable positions; each loadable image's kernels (an index into
    ``kernel_sets``, lists of kernel numbers); per device of ``devices`` the position it picks
    (-1: none; -2: another vendor's GPU); whether the module holds no kernel and no variable
    (it keeps its smallest image when left none); whether it is a bundle compressed whole
    (``exact`` false when it loses images)."""
    found = [vendors.device(d, "GPU arch") for d in devices]
    names: dict[str, int] = {}
    sets: dict[tuple[int, ...], int] = {}
    picks: dict[tuple[int, Any], list[int] | None] = {}
    out = []
    for unit in units:
        vendor = unit.vendor
        picked = []
        for v, d in found:
            if v is not vendor:
                picked.append(-2)
                continue
            at = _pick(unit, d, picks)
            picked.append(unit.loadable[at[0]] if at else -1)
        kernel_sets = [sets.setdefault(tuple(sorted(names.setdefault(k, len(names))
                                                    for k in sorted(img.kernels or ()))),
                                    len(sets))
                       for img in unit.images]
        out.append([vendor.name, list(unit.stored), list(unit.fixed), list(unit.loadable),
                    kernel_sets, picked, unit.empty,
                    unit.compressed and not vendor.compressed_apart])
    return {"units": out, "kernel_sets": [list(k) for k in sets]}


def _what_if_total(libraries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU set over every library: refused when one library is (prune refuses a wheel
    one of whose libraries it would leave no device code for those GPUs)."""
    sets: dict[tuple[str, ...], list[int]] = {}
    for lib in libraries:
        for w in lib["what_if"]:
            t = sets.setdefault(tuple(w["gpus"]), [0, 0, 1, 0])
            t[0] += w["kept"]
            t[1] += w["dropped"]
            t[2] &= w["exact"]
            t[3] |= w["refused"]
    return [{"gpus": list(g), "kept": k, "dropped": d, "exact": bool(e), "refused": bool(r)}
            for g, (k, d, e, r) in sets.items()]


# -- comparison --------------------------------------------------------------------------------

def _comparison(d: Diff, old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What ``diff --json`` says, in short: its summary, every coverage, arch and device
    change, and the worst register/spill/stack changes; per library the bytes on each side,
    and per library and arch the stored bytes on each side (``ls --summary``'s: None where
    that side has no image for the arch)."""
    doc = d.to_dict()
    worst = sorted((c for c in doc["changed"] if c["regression"]),
                   key=lambda c: (-(c["delta"] or 0), c["field"], c["kernel"], c["arch"]))[:50]
    def figures(part: Mapping[str, Any], name: str) -> dict[str, int]:
        lib = next(lib for lib in part["libraries"] if lib["name"] == name)
        return {"size": lib["size"], "stored": lib["stored"],
                "uncompressed": lib["uncompressed"]}

    def archs(part: Mapping[str, Any], name: str | None) -> dict[tuple[str, str], int]:
        if name is None:
            return {}
        at = next(i for i, lib in enumerate(part["libraries"]) if lib["name"] == name)
        summary = part["summary"]["files"][at]  # in the libraries' order (a lone file's:
        return {(a["kind"], a["arch"]): a["stored"]  # named by its path)
                for a in summary["archs"]}

    pairs = doc["libraries"]
    sizes = [{"library": p["new"], "old": figures(old, p["old"]), "new": figures(new, p["new"])}
             for p in pairs["compared"]]
    sizes += [{"library": n, "old": None, "new": figures(new, n)} for n in pairs["added"]]
    sizes += [{"library": n, "old": figures(old, n), "new": None} for n in pairs["removed"]]
    paired = [(p["old"], p["new"]) for p in pairs["compared"]] + \
        [(None, n) for n in pairs["added"]] + [(n, None) for n in pairs["removed"]]
    arch_sizes = []
    for before, after in paired:
        a, b = archs(old, before), archs(new, after)
        for kind, arch in sorted(a.keys() | b.keys(),
                                 key=lambda k: (vendors.target_key(k[1]), k[0])):
            arch_sizes.append({"library": after or before, "kind": kind, "arch": arch,
                               "old": a.get((kind, arch)), "new": b.get((kind, arch))})
    return {"libraries": doc["libraries"], "summary": doc["summary"],
            "coverage": doc["coverage"], "archs": doc["archs"],
            "devices": [c for c in doc["devices"] if c["regression"]],
            "modules": doc["modules"][:200],
            "worst": [{**c, "demangled": demangle(c["kernel"])} for c in worst],
            "sizes": sizes, "arch_sizes": arch_sizes}


def _base_name(name: str, most: int = 48) -> str:
    """A kernel's demangled name without its return type, template arguments and parameters
    (``pytorch_flash::flash_bwd_kernel``), cut to ``most`` characters: what names a module."""
    text = demangle(name)
    depth = 0
    out = []
    for part in _BRACKETS.split(text):  # drop what is inside <...> and (...)
        if part in ("<", "("):
            depth += 1
        elif part in (">", ")"):
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(part)
    base = "".join(out).strip().rpartition(" ")[2] or text
    return base if len(base) <= most else "…" + base[-(most - 1):]


def _short_name(name: str, most: int = _LABEL) -> str:
    """A kernel's demangled name, cut to ``most`` characters."""
    text = demangle(name)
    return text if len(text) <= most else text[:most - 1] + "…"


def _tree(source: str, libraries: Sequence[dict[str, Any]],
          images: Sequence[Sequence[dict[str, Any]]], copies: Mapping[bytes, int],
          others: Sequence[tuple[str, int]]) -> dict[str, list[Any]]:
    """The treemap's nodes, as parallel lists (``ids``, ``labels``, ``parents``, ``stored``,
    ``uncompressed``, ``kind``, ``copies``, ``name``): input -> library -> its host code and
    archs -> modules -> kernels. The largest :data:`KERNEL_NODES` kernels of the input are drawn
    (a kernel: its SASS bytes uncompressed; stored, its share of its image's stored bytes), the
    others of an image are one block with the image's other sections. Every node's values are
    its children's sums; a library's stored value is its file size. ``name``: a library's
    path inside the input (a kernel's label is its demangled name, shortened: torch's 12,000
    full names would double the page)."""
    nodes: dict[str, list[Any]] = {k: [] for k in ("ids", "labels", "parents", "stored",
                                                   "uncompressed", "kind", "copies", "name")}

    def add(label: str, parent: str, s: int, u: int, kind: str, n: int = 1,
            name: str = "") -> int:
        nodes["ids"].append(str(len(nodes["ids"])))
        for key, value in (("labels", label), ("parents", parent), ("stored", s),
                           ("uncompressed", u), ("kind", kind), ("copies", n),
                           ("name", name)):
            nodes[key].append(value)
        return len(nodes["ids"]) - 1

    sizes = sorted((k[1] for imgs in images for img in imgs for k in img["largest"] if k[1]),
                   reverse=True)
    cut = sizes[KERNEL_NODES - 1] if len(sizes) >= KERNEL_NODES else 1
    stored, unc = nodes["stored"], nodes["uncompressed"]
    root = add(os.path.basename(source.rstrip("/")) or source, "", 0, 0, "input")
    for lib, imgs in zip(libraries, images, strict=True):
        host = lib["size"] - lib["stored"] - lib["other_images"]
        lid = add(lib["name"].rpartition("/")[2], str(root), lib["size"],
                  host + lib["uncompressed"] + lib["other_images_uncompressed"], "library",
                  name=lib["name"])
        add("host code and data", str(lid), host, host, "host")
        if lib["other_images"]:
            add("other device code (LTO-IR...)", str(lid), lib["other_images"],
                lib["other_images_uncompressed"], "other")
        archs: dict[str, int] = {}
        for img in imgs:
            if img["arch"] not in archs:
                archs[img["arch"]] = add(img["arch"], str(lid), 0, 0, img["kind"])
            aid = archs[img["arch"]]
            n = copies[img["digest"]]
            largest = f": {_base_name(img['largest'][0][0])}" if img["largest"] else ""
            mid = add(("hidden " if img["hidden"] else "") + f"module {img['module']}"
                      + (f" (x{n})" if n > 1 else "") + largest, str(aid), img["stored"],
                      img["uncompressed"], "module", n)
            stored[aid] += img["stored"]
            unc[aid] += img["uncompressed"]
            drawn = [k for k in img["largest"] if k[1] >= cut]
            if not drawn:
                continue
            rest_s, rest_u = img["stored"], img["uncompressed"]
            for name, size in drawn:
                share = img["stored"] * size // max(1, img["uncompressed"])
                add(_short_name(name), str(mid), share, size, "kernel")
                rest_s -= share
                rest_u -= size
            more = img["kernels"] - len(drawn)
            add(f"{more} more kernel{'s' if more != 1 else ''} and data" if more else
                "data (constants, symbols)", str(mid), max(0, rest_s), max(0, rest_u), "rest")
        stored[root] += lib["size"]
        unc[root] += unc[lid]
    others = sorted(others, key=lambda f: (-f[1], f[0]))
    for name, size in others[:_OTHER_FILES]:  # the largest files with no device code
        add(name.rpartition("/")[2], str(root), size, size, "other", name=name)
    rest = others[_OTHER_FILES:]
    if rest:
        n = sum(size for _, size in rest)
        add(f"{len(rest)} other files", str(root), n, n, "other")
    stored[root] += sum(size for _, size in others)
    unc[root] += sum(size for _, size in others)
    return nodes
