"""Verdicts over many modules: will a file (:class:`ArchVerdict`), or the libraries of a wheel or a
folder (:class:`TotalVerdict`), work on one GPU arch, and the lowest driver each arch needs
(:class:`ArchMinDriver`, :class:`MinDriver`): what ``check`` and ``check --min-driver`` print.

They add up per-module :class:`~fatbinkit.decision.Decision` objects, whichever rules made them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from . import vendors
from .decision import (
    FAILED,
    NATIVE,
    RESTRICTED,
    Decision,
    Version,
    _count,
    dotted,
    highest_release,
    module_outcome,
)
from .errors import InvalidArgumentError, NotFoundError
from .imagesets import ImageSet

if TYPE_CHECKING:
    from .driver import DriverLike, Release
    from .formats.arch import ArchLike

__all__ = [
    "ArchMinDriver",
    "ArchVerdict",
    "MinDriver",
    "TotalVerdict",
    "file_verdict",
]

@dataclass(frozen=True)
class ArchVerdict:
    """Will a file's device code work on one GPU arch (with one driver, if given)?

    Every module (fatbin container) is one load unit, and the runtime loads a module lazily, on
    first use of one of its kernels or variables (CUDA Programming Guide, "Lazy Loading": the
    default since CUDA 12.2 on Linux, 12.3 on Windows; ``CUDA_MODULE_LOADING=EAGER`` loads every
    module at start). So a module that holds no image for this arch (``restricted``: built for
    other GPUs only, like cuBLAS's sm_75-only or NCCL's sm_100f-only kernels) fails only if the
    library calls it on this GPU, which a library that dispatches by arch does not: reported, not
    fatal. ``failed`` modules are ones the driver picks an image for and cannot load (a driver
    floor, PTX whose text targets another arch): those are fatal, as is a file where no module
    loads. A module with no kernels is loaded only when the host reads one of its variables by
    symbol: when it cannot load, it is ``data_only_failed`` (reported, fatal only when strict:
    cuRAND ships its precalc tables in such modules for sm_75 only). ``empty`` modules (no
    kernels, no variables) are never loaded and not counted. A container with no entry at all
    (``entryless``, what ``prune`` leaves of a module no kept arch loads) is not empty: the
    runtime registers it and its kernels, unknown, load nowhere, so it is ``restricted`` (as the
    module it was, built for other GPUs, is in the original), named apart in ``entryless``.
    When every driver that drives the device is older than the images need
    (:attr:`driver_gap`), no driver loads them there: the verdict fails, with or without a
    driver given. ``if verdict.ok:`` is the exit status of ``check``, :attr:`strict_ok` that of
    ``check --strict``.
    """

    device: Any  # the vendor's GPU (CUDA: an Arch, no suffix); str() names it
    driver: Version | None
    loading: tuple[str, ...]
    restricted: tuple[str, ...]
    failed: tuple[tuple[str, Decision], ...]
    data_only_failed: tuple[tuple[str, Decision], ...]
    missing: tuple[tuple[str, str], ...]  # (module, kernel): not in the image this arch loads
    empty: tuple[str, ...]
    min_driver: Version | None  # None: no image is picked, or (min_driver_known False) a
    min_driver_known: bool          # picked image's floor is newer than the tables
    kernels_load: bool = True  # some module with kernels loads (or the file has no kernels)
    warnings: tuple[str, ...] = ()
    jit: tuple[str, ...] = ()  # the loading modules that load by PTX JIT (no SASS for it)
    min_release: Release | None = None  # the driver versions of min_driver (Floor.release)
    host: str | None = None  # the input's OS (ImageInfo.host): whose driver numbers apply
    entryless: tuple[str, ...] = ()  # the restricted modules that are containers with no entry
    vendor: str = field(kw_only=True)  # whose rules (fatbinkit.vendors.VENDORS) made it
    # the floors newer than the tables that make min_driver_known False (Decision.beyond)
    beyond: tuple[str, ...] = field(default=(), kw_only=True)

    @classmethod
    def of(cls, device: ArchLike, driver: DriverLike | None,
           modules: Sequence[tuple[ImageSet, Sequence[Decision]]],
           kernels: Sequence[Sequence[str]] | None = None) -> ArchVerdict:
        """The verdict over modules whose per-kernel decisions are already made: one decision
        per name of ``kernels`` (one list per module; default: each module's
        :attr:`ImageSet.kernels`, as :meth:`ImageSet.decisions` makes them)."""
        vendor, device = vendors.device(device, "device")
        driver = None if driver is None else vendor.runtime(driver)
        loading: list[str] = []
        restricted: list[str] = []
        failed: list[tuple[str, Decision]] = []
        data_only: list[tuple[str, Decision]] = []
        missing: list[tuple[str, str]] = []
        jit: list[str] = []
        empty: list[str] = []
        entryless: list[str] = []
        warnings: dict[str, None] = {}
        low: Version | None = None
        releases: list[Release | None] = []
        known = True
        beyond: dict[str, None] = {}
        names = {id(s): s.kernels for s, _ in modules} if kernels is None else {
            id(s): ks for (s, _), ks in zip(modules, kernels, strict=True)}
        counted = [(s, ds) for s, ds in modules if not s.empty]
        if counted:
            empty = [s.label for s, _ in modules if s.empty]
        else:  # a file of empty modules only is judged on them
            counted = list(modules)
        any_kernels = any(s.kernels for s, _ in counted)
        for s, ds in counted:
            # a module's kernels mostly share its one decision: each distinct one looked at once
            distinct = list({id(d): d for d in ds}.values())  # in first-seen order
            outcome = module_outcome(distinct)
            if outcome == FAILED:
                first = next(d for d in distinct if not d.loadable and not d.restricted)
                (failed if s.kernels else data_only).append((s.label, first))
            elif outcome == RESTRICTED:
                restricted.append(s.label)
                if s.entryless:
                    entryless.append(s.label)
            else:
                loading.append(s.label)
                if not any(d.how == NATIVE for d in distinct):
                    jit.append(s.label)
                # ds holds one decision per kernel (one for a set without kernels: none missing)
                if any(d.restricted for d in distinct):
                    missing += [(s.label, k) for k, d in zip(names[id(s)], ds, strict=False)
                                if d.restricted]
            for d in distinct:
                warnings.update(dict.fromkeys(d.warnings))
                if d.restricted or not d.floors or (not s.kernels and any_kernels):
                    continue  # the minimum is what the kernels need
                need = d.min_driver
                if need is None:
                    known = False
                    beyond.update(dict.fromkeys(d.beyond))
                elif low is None or need >= low:
                    releases = [] if low is None or need > low else releases
                    low = need
                    releases.append(d.min_release)
        kernels_load = not any_kernels or any(
            s.kernels and s.label in loading for s, _ in counted)
        host = next((i.host for s, _ in modules for i in s.images), None)
        return cls(device, driver, tuple(loading),
                   tuple(restricted), tuple(failed), tuple(data_only), tuple(missing),
                   tuple(empty), low if known else None, known, kernels_load, tuple(warnings),
                   tuple(jit), highest_release(releases) if known else None, host,
                   tuple(entryless), vendor=vendor.name, beyond=tuple(beyond))

    @property
    def modules(self) -> int:
        """Modules counted (empty ones are not)."""
        return (len(self.loading) + len(self.restricted) + len(self.failed)
                + len(self.data_only_failed))

    @property
    def holds_nothing(self) -> bool:
        """Whether no counted module holds an image for this arch (all built for other GPUs)."""
        return not (self.loading or self.failed or self.data_only_failed)

    @property
    def counts(self) -> dict[str, int]:
        """Modules loading an image built for this arch (``sass``), by PTX JIT (``jit``), that
        cannot load (``cannot``: a floor, PTX for another target; data-only ones too) and that
        hold nothing for it (``other_gpus``)."""
        return {"sass": len(self.loading) - len(self.jit), "jit": len(self.jit),
                "cannot": len(self.failed) + len(self.data_only_failed),
                "other_gpus": len(self.restricted)}

    @property
    def status(self) -> str:
        """``works``, ``partial`` (some modules restricted to other archs, or data-only modules
        that cannot load) or ``fails`` (a module cannot load, none with kernels loads, or no
        driver can load the images on this device: :attr:`driver_gap`)."""
        if self._coverage_fails or self.driver_gap is not None:
            return "fails"
        return ("partial" if self.restricted or self.data_only_failed or self.missing
                else "works")

    @property
    def _coverage_fails(self) -> bool:
        """Whether the modules fail the arch, whatever the driver: one the driver picks an image
        for cannot load, or none with kernels loads."""
        return bool(self.failed) or not self.loading or not self.kernels_load

    @property
    def max_driver(self) -> Version | None:
        """The last CUDA version whose driver drives this device (None: still supported)."""
        return vendors.VENDORS[self.vendor].last_runtime(self.device)

    @property
    def driver_gap(self) -> str | None:
        """Why no driver meets :attr:`min_driver` on this device, if none does (CUDA 13 cubins
        on a GPU that only CUDA 12 drivers call sm_101)."""
        if self.min_driver is None:
            return None
        return vendors.VENDORS[self.vendor].gap(self.device, self.min_driver)

    @property
    def ok(self) -> bool:
        """Exit-status truth: ``works`` or ``partial`` (``if verdict.ok:``)."""
        return self.status != "fails"

    @property
    def strict_ok(self) -> bool:
        """Exit-status truth with ``strict`` (``--strict``): ``works`` only."""
        return self.status == "works"

    @property
    def reason(self) -> str:
        """One line a user can act on; when no driver can load the images on this device
        (:attr:`driver_gap`), that first."""
        gap = self.driver_gap
        if gap is None:
            return self._modules_reason
        gap = f"no driver can load it on {self.device!s}: {gap}"
        return f"{self._modules_reason} (and {gap})" if self._coverage_fails else gap

    @property
    def _modules_reason(self) -> str:
        """What the modules say: which cannot load, which hold no image for the arch."""
        n = self.modules
        if self.failed and len(self.failed) == n and len({d.reason for _, d in self.failed}) == 1:
            return f"no module can load: {self.failed[0][1].reason}"
        if self.failed and self.data_only_failed:
            return replace(self, data_only_failed=())._modules_reason + (
                f" (and {_count(len(self.data_only_failed), 'data-only module')})")
        if self.failed:
            reasons: dict[str, int] = {}
            for _, d in self.failed:
                reasons[d.reason] = reasons.get(d.reason, 0) + 1
            top, count = max(reasons.items(), key=lambda kv: kv[1])
            more = f" (+{_count(len(reasons) - 1, 'other reason')})" if len(reasons) > 1 else ""
            return f"{len(self.failed)}/{_count(n, 'module')} cannot load: {top}" + (
                f" [{count} of them]" if count != len(self.failed) else "") + more
        if not self.loading:
            return f"no module holds an image for {self.device!s}" + (
                f" ({len(self.entryless)} of {_count(n, 'module')} empty containers, no entries: "
                "images removed, e.g. by prune)" if self.entryless else "")
        if not self.kernels_load:
            return (f"no module with kernels holds an image for {self.device!s} (only "
                    f"{_count(len(self.loading), 'data-only module')} load)")
        text = f"{len(self.loading)}/{_count(n, 'module')} " + ("loads" if n == 1 else "load")
        if self.restricted:
            text += (f"; {_count(len(self.restricted), 'module')} built for other GPUs hold no "
                     f"image (or kernel) for {self.device!s}: loaded lazily, they fail only if "
                     "used on this one")
        if self.entryless:
            text += (f" ({len(self.entryless)} of them empty containers, no entries: images "
                     "removed, e.g. by prune)")
        if self.missing:
            text += (f"; {_count(len(self.missing), 'kernel')} of loading modules not in the "
                     f"image for {self.device!s} (built for other GPUs only)")
        if self.data_only_failed:
            _, d = self.data_only_failed[0]
            text += (f"; {_count(len(self.data_only_failed), 'data-only module')} (variables, "
                     f"no kernels: used only if the host reads them) cannot load: {d.reason}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": str(self.device),
            "driver": dotted(self.driver) if self.driver else None,
            "status": self.status,
            "reason": self.reason,
            "modules": self.modules,
            "loading": len(self.loading),
            "restricted": list(self.restricted),
            "missing_kernels": [{"module": m, "kernel": k} for m, k in self.missing],
            "failed": [{"module": m, "floor": d.floor.what if d.floor else None,
                        "error": d.error, "reason": d.reason} for m, d in self.failed],
            "data_only_failed": [{"module": m, "floor": d.floor.what if d.floor else None,
                                  "error": d.error, "reason": d.reason}
                                 for m, d in self.data_only_failed],
            "empty": len(self.empty),
            "empty_containers": list(self.entryless),
            "min_driver": dotted(self.min_driver) if self.min_driver else None,
            **vendors.VENDORS[self.vendor].runtime_numbers(self.min_release, self.host),
            "max_driver": dotted(self.max_driver) if self.max_driver else None,
            "driver_gap": self.driver_gap,
            "min_driver_beyond": list(self.beyond),
            "warnings": list(self.warnings),
            **_json_counts(self.vendor, self.counts),
        }

    def __str__(self) -> str:
        driver = f" with driver {dotted(self.driver)}" if self.driver else ""
        return f"{self.device!s}{driver}: {self.status}: {self.reason}"

    def __repr__(self) -> str:
        """Counts, not the modules' names: short for a library of thousands of modules."""
        return (f"ArchVerdict({self.device!s}, driver={_driver_repr(self.vendor, self.driver)}, "
                f"status={self.status!r}, modules={self.modules}, "
                f"loading={len(self.loading)}, restricted={len(self.restricted)}, "
                f"failed={len(self.failed)}, data_only_failed={len(self.data_only_failed)}, "
                f"empty={len(self.empty)})")


def _json_counts(vendor: str, counts: dict[str, int]) -> dict[str, int]:
    """:attr:`ArchVerdict.counts` in JSON: the count of modules loading native code under the
    vendor's key (CUDA: ``sass``; AMD: ``native``)."""
    key = vendors.VENDORS[vendor].words["native_key"]
    return {key if k == "sass" else k: n for k, n in counts.items()}


def _driver_repr(vendor: str, driver: Version | None) -> str:
    return "None" if driver is None else repr(vendors.VENDORS[vendor].runtime_name(driver))


@dataclass(frozen=True)
class TotalVerdict:
    """Will the libraries of a wheel or a folder work on one GPU arch (with one driver, if
    given)? Each library is loaded on its own (``dlopen``, then its modules lazily, see
    :class:`ArchVerdict`), so the rule one level up is the rule for modules: a library the
    driver picks an image from and cannot load fails the total, as does no library loading at
    all; a library that holds no image for the arch (``other_gpus_only``: a wheel's
    ``sm90/``-only extension, a Hopper-only kernel library) fails only where it is used, so it
    makes the total ``partial`` (``fails`` with ``strict``), as does a partial library. The
    driver it needs is the highest that one of its libraries needs.

    ``alternatives`` are groups of files that are one library built once per CUDA version, of
    which the package loads one (``(group, files oldest build first)``:
    :func:`fatbinkit.collection.alternatives` finds them by name). A group counts as the one
    file that :meth:`serving` names: the best verdict, then the newest build, among those
    that load (a driver that loads several runs the newest: minor version compatibility, CUDA
    Compatibility guide, lets a build of a later 12.x run on an earlier 12.x driver, and the
    per-file verdicts already hold the floors that limits); when none loads, the one needing
    the lowest driver. Its driver floor is the lowest any build needs (:meth:`floor`). The
    others are in :attr:`files` and the JSON's ``alternatives`` but neither fail nor count."""

    device: Any  # the vendor's GPU (CUDA: an Arch, no suffix); str() names it
    driver: Version | None
    files: tuple[tuple[str, ArchVerdict], ...]  # (the file's path in the wheel or folder, ...)
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @classmethod
    def of(cls, files: Sequence[tuple[str, ArchVerdict]],
           alternatives: Sequence[tuple[str, Sequence[str]]] = ()) -> TotalVerdict:
        """The total of per-file verdicts on one arch (with one driver), ``alternatives`` as
        the class says (each group two files or more, each file in one group at most)."""
        if not files:
            raise InvalidArgumentError("a total verdict needs at least one file")
        first = files[0][1]
        if any((v.device, v.driver) != (first.device, first.driver) for _, v in files):
            raise InvalidArgumentError("a total verdict adds up verdicts on one arch and driver")
        names = [n for n, _ in files]
        grouped = [m for _, members in alternatives for m in members]
        if any(len(members) < 2 for _, members in alternatives) or \
                len(set(grouped)) != len(grouped) or not set(grouped) <= set(names):
            raise InvalidArgumentError("each group of alternatives holds two files or more of "
                                       "the total, each file in one group at most")
        return cls(first.device, first.driver, tuple(files),
                   tuple((g, tuple(members)) for g, members in alternatives))

    def serving(self, group: str) -> str:
        """The file of ``group`` that serves this arch (and driver): see the class."""
        members = dict(self.alternatives)[group]
        verdicts = dict(self.files)
        loads = [(i, m) for i, m in enumerate(members) if verdicts[m].status != "fails"]
        if loads:
            return max(loads, key=lambda p: (verdicts[p[1]].status == "works", p[0]))[1]
        low = self.floor(group)
        return members[-1] if low is None else low[0]

    def floor(self, group: str) -> tuple[str, Version] | None:
        """``(file, floor)``: the build of ``group`` needing the lowest driver and that driver
        (the last of equals: the newest build); None when no build's floor is known."""
        verdicts = dict(self.files)
        known: list[tuple[Version, int, str]] = []
        for i, m in enumerate(dict(self.alternatives)[group]):
            floor = verdicts[m].min_driver
            if floor is not None and verdicts[m].min_driver_known:
                known.append((floor, i, m))
        if not known:
            return None
        low = min(f for f, _, _ in known)
        return max((i, m) for f, i, m in known if f == low)[1], low

    @property
    def units(self) -> tuple[tuple[str, ArchVerdict], ...]:
        """The files that count: every file but the alternatives not serving."""
        idle = {m for _, members in self.alternatives for m in members} - {
            self.serving(g) for g, _ in self.alternatives}
        return tuple((n, v) for n, v in self.files if n not in idle)

    def named(self, status: str) -> tuple[str, ...]:
        """The files that count whose own verdict is ``status`` (``works``, ``partial``,
        ``fails``), those that hold nothing for the arch apart (``other_gpus_only``)."""
        if status == "other_gpus_only":
            return tuple(n for n, v in self.units if v.holds_nothing)
        return tuple(n for n, v in self.units if v.status == status and not (
            status == "fails" and v.holds_nothing))

    @property
    def status(self) -> str:
        if self.named("fails") or not any(v.loading for _, v in self.units):
            return "fails"
        return "partial" if self.named("partial") or self.named("other_gpus_only") else "works"

    @property
    def ok(self) -> bool:
        """Exit-status truth, as :attr:`ArchVerdict.ok`: ``works`` or ``partial``."""
        return self.status != "fails"

    @property
    def strict_ok(self) -> bool:
        """Exit-status truth with ``strict``, as :attr:`ArchVerdict.strict_ok`: ``works``
        only."""
        return self.status == "works"

    @property
    def counts(self) -> dict[str, int]:
        """The module counts (:attr:`ArchVerdict.counts`) of the files that count, added up."""
        total = dict.fromkeys(self.files[0][1].counts, 0)
        for _, v in self.units:
            for k, n in v.counts.items():
                total[k] += n
        return total

    @property
    def modules(self) -> int:
        return sum(v.modules for _, v in self.units)

    @property
    def empty(self) -> tuple[str, ...]:
        """The empty modules of every file (:attr:`ArchVerdict.empty`: never loaded, not
        counted), each after its file's name."""
        return tuple(f"{n}: {m}" for n, v in self.files for m in v.empty)

    def _floors(self) -> list[tuple[str, Version | None, bool]]:
        """``(file, floor, known)`` per file that counts, a group's its lowest build's."""
        groups = {self.serving(g): g for g, _ in self.alternatives}
        out = []
        for n, v in self.units:
            low = self.floor(groups[n]) if n in groups else None
            out.append((n, v.min_driver, v.min_driver_known) if low is None else (*low, True))
        return out

    @property
    def min_driver_known(self) -> bool:
        return all(known for _, _, known in self._floors())

    @property
    def min_driver(self) -> Version | None:
        """The highest driver floor of the files (None: no image picked, or unknown)."""
        floors = [f for _, f, _ in self._floors() if f is not None]
        return max(floors) if floors and self.min_driver_known else None

    @property
    def min_driver_file(self) -> str | None:
        """The file that sets :attr:`min_driver` (the first of equals)."""
        low = self.min_driver
        return next((n for n, f, _ in self._floors() if f == low), None) if low else None

    @property
    def min_release(self) -> Release | None:
        """The driver versions of :attr:`min_driver`."""
        low = self.min_driver
        files = dict(self.files)
        return highest_release(files[n].min_release for n, f, _ in self._floors() if f == low) \
            if low else None

    @property
    def host(self) -> str | None:
        """The OS of the files, when they all have the same one."""
        hosts = {v.host for _, v in self.files}
        return hosts.pop() if len(hosts) == 1 else None

    @property
    def vendor(self) -> str:
        """Whose rules made the files' verdicts (every file's is the same)."""
        return self.files[0][1].vendor

    @property
    def max_driver(self) -> Version | None:
        """The last CUDA version whose driver drives this device (every file's is the same)."""
        return self.files[0][1].max_driver

    @property
    def driver_gap(self) -> str | None:
        """Why no driver drives every file on this device, if none does."""
        return next((f"{n}: {v.driver_gap}" for n, v in self.units if v.driver_gap), None)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The files' warnings, each after the files that give it (``lib/a.so: ...``; one that
        every file of several gives, such as the device's, once without names)."""
        where: dict[str, list[str]] = {}
        for name, v in self.units:
            for w in v.warnings:
                where.setdefault(w, []).append(name)
        every = len(self.units) > 1
        return tuple(w if every and len(names) == len(self.units) else
                     f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}: {w}"
                     for w, names in where.items())

    @property
    def reason(self) -> str:
        """One line a user can act on: the first library that fails (or holds nothing for the
        arch, or is partial), and why."""
        units = self.units
        n = len(units)
        sm = str(self.device)
        failing, nothing = self.named("fails"), self.named("other_gpus_only")
        if failing:
            return _first(failing, n, "cannot load", units)
        if len(nothing) == n:
            return f"no library holds an image for {sm}"
        if not any(v.loading for _, v in units):
            return f"no library loads on {sm} (only data-only modules)"
        parts = []
        if nothing:
            parts.append(f"{len(nothing)}/{n} {_plural(n, 'library', 'libraries')} hold no "
                         f"image for {sm} (built for other GPUs: they fail only if used on "
                         f"this one): {', '.join(nothing[:3])}" + (" ..." if len(nothing) > 3
                                                                   else ""))
        if self.named("partial"):
            parts.append(_first(self.named("partial"), n, "partial", units))
        return "; ".join(parts) or f"{n}/{n} {_plural(n, 'library loads', 'libraries load')}"

    def to_dict(self) -> dict[str, Any]:
        low = self.min_driver
        verdicts = dict(self.files)
        alternatives = []
        for group, members in self.alternatives:
            floor = self.floor(group)
            alternatives.append({
                "group": group, "serving": self.serving(group),
                "min_driver": None if floor is None else dotted(floor[1]),
                "min_driver_file": None if floor is None else floor[0],
                "files": [{"file": m, "status": verdicts[m].status,
                           "min_driver": _dotted_or_none(verdicts[m].min_driver)}
                          for m in members]})
        return {
            "device": str(self.device),
            "driver": dotted(self.driver) if self.driver else None,
            "status": self.status,
            "reason": self.reason,
            "works": list(self.named("works")),
            "partial": list(self.named("partial")),
            "fails": list(self.named("fails")),
            "other_gpus_only": list(self.named("other_gpus_only")),
            "modules": self.modules,
            "min_driver": dotted(low) if low else None,
            **vendors.VENDORS[self.vendor].runtime_numbers(self.min_release, self.host),
            "min_driver_file": self.min_driver_file,
            "max_driver": dotted(self.max_driver) if self.max_driver else None,
            "driver_gap": self.driver_gap,
            "warnings": list(self.warnings),
            "alternatives": alternatives,
            **_json_counts(self.vendor, self.counts),
        }

    def __str__(self) -> str:
        driver = f" with driver {dotted(self.driver)}" if self.driver else ""
        return f"{self.device!s}{driver}: {self.status}: {self.reason}"

    def __repr__(self) -> str:
        """Counts, not the files' verdicts: short for a wheel of hundreds of libraries."""
        return (f"TotalVerdict({self.device!s}, driver={_driver_repr(self.vendor, self.driver)}, "
                f"status={self.status!r}, files={len(self.files)}, "
                f"alternatives={len(self.alternatives)}, modules={self.modules})")


@dataclass(frozen=True)
class ArchMinDriver:
    """The lowest driver that loads a file's images on one GPU arch (of a wheel's or folder's
    libraries: the highest any library needs, :attr:`min_driver_file` the one that needs it):
    what ``check --min-driver`` prints per arch. Fields as on the :attr:`verdict` it is read
    from (an :class:`ArchVerdict` or :class:`TotalVerdict` made with no driver): ``min_driver``
    the CUDA version (None: no image is picked, or ``min_driver_known`` False: a floor newer
    than the tables), ``min_release`` its driver versions, of which ``host``'s apply,
    ``max_driver`` the last CUDA version that drives the device (None: still driven) and
    ``driver_gap`` why no driver can load the images on it, if none can."""

    device: Any  # the vendor's GPU (CUDA: an Arch, no suffix); str() names it
    min_driver: Version | None
    min_driver_known: bool
    min_release: Release | None
    host: str | None
    max_driver: Version | None
    driver_gap: str | None
    min_driver_file: str | None
    verdict: ArchVerdict | TotalVerdict = field(repr=False, compare=False)

    @classmethod
    def of(cls, verdict: ArchVerdict | TotalVerdict) -> ArchMinDriver:
        """The minimum driver a verdict states."""
        return cls(verdict.device, verdict.min_driver, verdict.min_driver_known,
                   verdict.min_release, verdict.host, verdict.max_driver, verdict.driver_gap,
                   verdict.min_driver_file if isinstance(verdict, TotalVerdict) else None,
                   verdict)

    @property
    def needs(self) -> str:
        """``needs CUDA 12.0 (Linux driver >= 525.60.13)``, with the device's last CUDA version
        when it has one, ``needs no existing driver: ...`` for a :attr:`driver_gap`; empty when
        no image is picked."""
        if self.driver_gap:
            return f"needs no existing driver: {self.driver_gap}"
        if not self.min_driver_known:
            beyond = getattr(self.verdict, "beyond", ())
            return (f"needs a newer driver: {beyond[0]}" if beyond else
                    "needs an unknown driver (a floor newer than the tables)")
        if self.min_driver is None:
            return ""
        vendor = vendors.VENDORS[self.verdict.vendor]
        upto = (f", up to {vendor.runtime_label} {dotted(self.max_driver)}" if self.max_driver
                else "")
        return f"needs {vendor.runtime_text(self.min_driver, self.host, self.min_release)}{upto}"

    @property
    def covers(self) -> str:
        """Which modules the minimum is for: ``every module``, ``3/5 modules (the others hold
        no image for it)``, and for a wheel or folder the library that sets it when the
        libraries need different drivers."""
        v = self.verdict
        picked = v.modules - v.counts["other_gpus"]
        cover = ("every module" if picked == v.modules else
                 f"{picked}/{v.modules} modules (the others hold no image for it)")
        if isinstance(v, TotalVerdict) and v.min_driver_file and len(
                {f.min_driver for _, f in v.files if f.min_driver}) > 1:
            cover += f"; set by {v.min_driver_file}"  # the others need less
        return cover

    def to_dict(self) -> dict[str, Any]:
        """The verdict's JSON (``check --min-driver --json``'s per arch): its ``status`` is
        arch coverage only, ``linux_driver``, ``windows_driver`` and ``host`` the driver
        versions of the minimum."""
        return self.verdict.to_dict()

    @property
    def text(self) -> str:
        """``CUDA 12.0 (Linux driver >= 525.60.13): every module``, or ``no image``."""
        needs = self.needs.removeprefix("needs ")
        return f"{needs}: {self.covers}" if needs else "no image"

    def __str__(self) -> str:
        """``sm_90: CUDA 12.0 (Linux driver >= 525.60.13): every module``."""
        return f"{self.device!s}: {self.text}"


@dataclass(frozen=True)
class MinDriver:
    """The lowest driver per GPU arch for a file (:meth:`fatbinkit.binary.Binary.min_driver`)
    or a wheel's or folder's libraries (:func:`fatbinkit.collection.min_driver`): ``check
    --min-driver``. ``modules`` counts every module, empty ones included (each arch's verdict
    counts only the others); ``files`` the libraries judged (None: one file) and
    ``alternatives`` their groups of builds per CUDA version. ``min_driver["sm_90"]`` is an
    arch's :class:`ArchMinDriver`."""

    file: str
    modules: int
    archs: tuple[ArchMinDriver, ...]
    files: tuple[str, ...] | None = None
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __getitem__(self, arch: ArchLike) -> ArchMinDriver:
        _, device = vendors.device(arch, "GPU arch")
        found = next((a for a in self.archs if a.device == device), None)
        if found is None:
            raise NotFoundError.among("arch", str(device), [str(a.device) for a in self.archs],
                                      self.file)
        return found

    @property
    def empty(self) -> int:
        """The empty modules (no kernels, no variables: never loaded), left out of the
        verdicts."""
        return len(self.archs[0].verdict.empty) if self.archs else 0

    def to_dict(self) -> dict[str, Any]:
        """``check --min-driver --json``: of a file, or (with :attr:`files`) of a wheel or
        folder."""
        per_arch = {str(a.device): a.to_dict() for a in self.archs}
        if self.files is None:
            return {"file": self.file, "modules": self.modules, "min_driver": per_arch}
        return {"file": self.file, "files": list(self.files), "modules": self.modules,
                "alternatives": [{"group": g, "files": list(members)}
                                 for g, members in self.alternatives],
                "min_driver": per_arch}

    def __str__(self) -> str:
        """What ``check --min-driver`` prints: a line per arch, then the warnings."""
        empty = self.empty
        labels = dict.fromkeys(vendors.VENDORS[a.verdict.vendor].words["runtime"].split()[0]
                               for a in self.archs) or {"driver": None}
        lines = [f"{self.file}: minimum {' / '.join(labels)} per GPU arch ({self.modules} "
                 "module(s)"
                 + (f" in {len(self.files)} file(s)" if self.files is not None else "")
                 + (f"; {empty} empty ones, no kernels and no variables: never loaded, left "
                    "out" if empty > 0 else "") + ")"]
        width = max((len(str(a.device)) for a in self.archs), default=0) + 2
        lines += [f"  {str(a.device).ljust(width)}{a.text}" for a in self.archs]
        lines += [f"warning: {w}" for w in dict.fromkeys(
            w for a in self.archs for w in a.verdict.warnings)]
        return "\n".join(lines)

    def __repr__(self) -> str:
        files = "" if self.files is None else f", files={len(self.files)}"
        return (f"MinDriver({self.file!r}, modules={self.modules}, "
                f"archs={len(self.archs)}{files})")


def _dotted_or_none(version: Version | None) -> str | None:
    return dotted(version) if version else None


def _first(names: Sequence[str], n: int, what: str,
           files: Sequence[tuple[str, ArchVerdict]]) -> str:
    """``2/5 libraries cannot load: lib/a.so: <its reason> (+1 more)``."""
    reason = dict(files)[names[0]].reason
    more = f" (+{len(names) - 1} more)" if len(names) > 1 else ""
    return (f"{len(names)}/{n} {_plural(n, 'library', 'libraries')} {what}: {names[0]}: "
            f"{reason}{more}")


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def file_verdict(sets: Sequence[ImageSet], device: ArchLike,
                 driver: DriverLike | None = None) -> ArchVerdict:
    """The verdict on ``device`` (with ``driver``) for every load unit of a file, e.g.
    ``file_verdict(image_sets(Path("libcublas.so.13")), Arch(90), (13, 0)).status``."""
    vendor, device = vendors.device(device, "device")
    driver = None if driver is None else vendor.runtime(driver)
    return ArchVerdict.of(device, driver,
                          [(s, [d for _, d in s.decisions(device, driver)]) for s in sets])


