"""``fatbinkit gate``: rules a build's kernels must meet, and a ratchet on a baseline, for CI.

Absolute rules (:class:`Rules`) judge each library of the inputs: registers, spills, the archs
every module must load on (decided as :meth:`fatbinkit.binary.Binary.check` decides, so SASS for
an older arch of the same major or a PTX floor counts, as the driver would take them; a library
passes for an arch exactly when its verdict there is ``works``), the archs every kernel must
have SASS for (no PTX JIT), the highest minimum driver an arch's images may need, and device
code size per arch or in total. The ratchet compares the inputs with a baseline snapshot
(:mod:`fatbinkit.diff`): a kernel whose registers, spills, stack, local or shared memory rise
beyond a tolerance, a kernel that loses an arch, a library that loses an arch or disappears,
fail. Every :class:`Violation` names the rule (one of :data:`RULES`), the file, library,
kernel, arch, value and limit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import vendors
from .binary import ArchFilter, _size, demangle
from .collection import Member, binaries, named
from .decision import Version, dotted, version_numbers
from .diff import (
    WORSE_WHEN_HIGHER,
    Diff,
    Library,
    Snapshot,
    _count_kernels,
    _resources,
    _short,
    diff,
    read_library,
)
from .errors import FatbinkitError, InvalidArgumentError, option
from .formats.arch import Arch, ArchLike
from .formats.codec import DecompressionBudget
from .parallel import as_jobs
from .progress import Progress

if TYPE_CHECKING:
    from .binary import Check
    from .driver import DriverLike

__all__ = ["RULES", "Gate", "Rules", "SizeLimit", "Tolerance", "Violation", "escape", "gate",
           "parse_tolerances"]

#: every :attr:`Violation.rule`: the absolute rules, named as their command-line flags, then
#: the ratchet's ``baseline:FIGURE``: a field that rose (the ``--tolerance`` names), a kernel
#: that lost an arch, a library with no SASS or PTX for an arch any more, a library gone
RULES = ("max-registers", "no-spills", "require-arch", "require-sass-arch", "max-min-driver",
         "max-size", *(f"baseline:{f}" for f in WORSE_WHEN_HIGHER), "baseline:lost-arch",
         "baseline:lost-coverage", "baseline:library-gone")


def _count(value: object, name: str, placeholder: str, least: int) -> int:
    """``value`` as a whole number from ``least`` up, else an error naming the keyword."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgumentError(f"{option(name, placeholder)}: {placeholder} is a whole "
                                   f"number from {least} up, not {value!r}")
    return value


def _values(value: object, single: tuple[type, ...], name: str) -> list[Any]:
    """``value`` as a list: one of ``single``, or an iterable of values (not a mapping)."""
    if isinstance(value, single):
        return [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{name} is one value or a sequence of them, not "
                                   f"{type(value).__name__} {value!r}")
    return list(value)


def _archs(value: object, name: str) -> tuple[Any, ...]:
    """GPUs (:func:`fatbinkit.vendors.device`: CUDA's archs, a suffix ignored), in order,
    once."""
    out: dict[Any, None] = {}
    for v in _values(value, (str, int, Arch), name):
        out.setdefault(vendors.device(v, name)[1])
    return tuple(out)


def _vendor(devices: Sequence[Any]) -> vendors.Vendor:
    """The vendor of the GPUs the rules name: whose driver versions they give (with no GPU, the
    first vendor's: CUDA's)."""
    return vendors.device(devices[0])[0] if devices else next(iter(vendors.VENDORS.values()))


def _sm(device: Any) -> str:
    return vendors.device(device)[0].spell_device(device)


@dataclass(frozen=True, init=False)
class SizeLimit:
    """``max_size``: device code bytes (stored, as in the file) of one library, for the images
    matching ``arch`` (None: all of them; a str is read by
    :meth:`fatbinkit.binary.ArchFilter.parse`: ``sm_90`` SASS and PTX of SM 9.0)."""

    limit: int
    arch: ArchFilter | None

    def __init__(self, limit: int, arch: ArchFilter | Arch | str | None = None) -> None:
        object.__setattr__(self, "limit", _count(limit, "max_size", "SIZE", 0))
        if isinstance(arch, (str, Arch)):
            arch = ArchFilter.parse(arch)
        elif arch is not None and not isinstance(arch, ArchFilter):
            raise InvalidArgumentError(f"a SizeLimit's arch is an ArchFilter, a name like "
                                       f"'sm_90' or None, not {arch!r}")
        object.__setattr__(self, "arch", arch)

    def __str__(self) -> str:
        return f"{self.arch}={self.limit}" if self.arch else str(self.limit)

    def __repr__(self) -> str:
        return f"SizeLimit({self.limit}{'' if self.arch is None else f', {str(self.arch)!r}'})"


@dataclass(frozen=True)
class Tolerance:
    """How much a ratcheted figure may rise over the baseline: ``amount`` units, or with
    ``percent`` that percentage of the baseline value. ``field`` is one of
    :data:`fatbinkit.diff.WORSE_WHEN_HIGHER`."""

    field: str
    amount: int
    percent: bool = False

    def __post_init__(self) -> None:
        if self.field not in WORSE_WHEN_HIGHER:
            raise InvalidArgumentError(f"no tolerance for {self.field!r}: the ratchet holds "
                                       f"{', '.join(WORSE_WHEN_HIGHER)}")
        _count(self.amount, "tolerance", "N", 0)
        if not isinstance(self.percent, bool):
            raise InvalidArgumentError(f"a Tolerance's percent is True or False, not "
                                       f"{self.percent!r}")

    def allows(self, old: int, new: int) -> bool:
        rise = new - old
        return rise <= (old * self.amount / 100 if self.percent else self.amount)

    def __str__(self) -> str:
        return f"{self.field}={self.amount}{'%' if self.percent else ''}"


@dataclass(frozen=True, init=False)
class Rules:
    """What the gate checks; every rule is off by default. The constructor takes what a caller
    has and keeps it normalised (anything else is an
    :class:`~fatbinkit.errors.InvalidArgumentError` naming the keyword):

    - ``max_registers``: a whole number from 1, or None;
    - ``no_spills``: a bool;
    - ``require_archs``: GPUs every module must load on (SASS, or PTX the driver JITs), as
      :meth:`fatbinkit.binary.Binary.check` decides; ``require_sass``: GPUs every kernel must
      have SASS for, which the GPU runs without JIT. Each an arch (``"sm_90"``, ``90``, an
      :class:`~fatbinkit.formats.arch.Arch`; ``"future:sm_130"``) or several, kept as a tuple
      of :class:`~fatbinkit.formats.arch.Arch` without suffix (a GPU has none);
    - ``driver`` (with ``require_archs`` or ``require_sass``: whose floors apply; None: none)
      and ``max_min_driver``: a :data:`fatbinkit.driver.DriverLike` (``"12.8"``,
      ``"580.65.06"``, ``(12, 8)``, ``12080``), kept as a CUDA version;
    - ``max_size``: :class:`SizeLimit`\\ s (an int is a limit on all device code);
    - ``tolerance``: :class:`Tolerance`\\ s, or their ``"registers=8"``/``"stack=10%"`` text.

    ``str()`` is the command line that gives these rules (``--max-registers 128
    --require-arch sm_90``), ``repr()`` the keywords that make them again.
    """

    max_registers: int | None
    no_spills: bool
    require_archs: tuple[Any, ...]  # the vendors' GPUs (CUDA: an Arch, no suffix)
    driver: Version | None
    max_min_driver: Version | None
    max_size: tuple[SizeLimit, ...]
    tolerance: tuple[Tolerance, ...]
    require_sass: tuple[Any, ...]

    def __init__(self, max_registers: int | None = None, no_spills: bool = False,
                 require_archs: Iterable[ArchLike] | ArchLike = (),
                 driver: DriverLike | None = None, max_min_driver: DriverLike | None = None,
                 max_size: Iterable[SizeLimit | int] | SizeLimit | int = (),
                 tolerance: Iterable[Tolerance | str] | Tolerance | str = (),
                 require_sass: Iterable[ArchLike] | ArchLike = ()) -> None:
        if max_registers is not None:
            _count(max_registers, "max_registers", "N", 1)
        if not isinstance(no_spills, bool):
            raise InvalidArgumentError(f"no_spills is True or False, not {no_spills!r}")
        sizes = tuple(s if isinstance(s, SizeLimit) else SizeLimit(_count(s, "max_size", "SIZE",
                                                                           0))
                      for s in _values(max_size, (SizeLimit, int), "max_size"))
        tolerances: list[Tolerance] = []
        for t in _values(tolerance, (Tolerance, str), "tolerance"):
            if isinstance(t, str):
                tolerances += parse_tolerances([t])
            elif isinstance(t, Tolerance):
                tolerances.append(t)
            else:
                raise InvalidArgumentError(f"tolerance is a Tolerance or text like "
                                           f"'registers=8', not {t!r}")
        archs = _archs(require_archs, "require_archs")
        gpus = [vendors.device(a) for a in archs]
        driven = vendors.runtime(gpus, driver, "driver")
        fields = {"max_registers": max_registers, "no_spills": no_spills,
                  "require_archs": archs, "driver": driven,
                  "max_min_driver": vendors.runtime(gpus, max_min_driver, "max_min_driver"),
                  "max_size": sizes, "tolerance": tuple(tolerances),
                  "require_sass": _archs(require_sass, "require_sass")}
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        if self.driver is not None and not self.loads:
            raise InvalidArgumentError(f"{option('driver', 'VERSION')} goes with "
                                       f"{option('require_archs', 'ARCH')} or "
                                       f"{option('require_sass', 'ARCH')}: the driver whose "
                                       "floors decide what loads")

    @property
    def loads(self) -> tuple[Any, ...]:
        """The archs a rule on what loads names (``require_archs``, then ``require_sass``)."""
        return tuple(dict.fromkeys((*self.require_archs, *self.require_sass)))

    @property
    def any(self) -> bool:
        """Whether an absolute rule is given (tolerances only temper the ratchet)."""
        return bool(self.max_registers is not None or self.no_spills or self.loads or
                    self.max_min_driver is not None or self.max_size)

    def __str__(self) -> str:
        """The rules as the command line gives them: ``--max-registers 128 --no-spills``."""
        parts = ([f"--max-registers {self.max_registers}"] if self.max_registers is not None
                 else []) + (["--no-spills"] if self.no_spills else [])
        parts += [f"--require-arch {_sm(a)}" for a in self.require_archs]
        parts += [f"--require-sass-arch {_sm(a)}" for a in self.require_sass]
        spell = _vendor(self.loads).spell_runtime
        parts += [f"--driver {spell(self.driver)}"] if self.driver else []
        parts += ([f"--max-min-driver {spell(self.max_min_driver)}"] if self.max_min_driver
                  else [])
        parts += [f"--max-size {s}" for s in self.max_size]
        parts += [f"--tolerance {t}" for t in self.tolerance]
        return " ".join(parts) or "no rules"

    def __repr__(self) -> str:
        """The keywords that make these rules again: ``Rules(max_registers=128,
        require_archs=('sm_90',), driver='12.8')`` (the rules left off are off)."""
        parts = [f"max_registers={self.max_registers}"] if self.max_registers is not None \
            else []
        parts += ["no_spills=True"] if self.no_spills else []
        for name in ("require_archs", "require_sass"):
            archs: tuple[Any, ...] = getattr(self, name)
            if archs:
                parts.append(f"{name}={tuple(_sm(a) for a in archs)!r}")
        for name in ("driver", "max_min_driver"):
            version: Version | None = getattr(self, name)
            if version is not None:
                parts.append(f"{name}={_vendor(self.loads).spell_runtime(version)!r}")
        if self.max_size:
            parts.append(f"max_size={self.max_size!r}")
        if self.tolerance:
            parts.append(f"tolerance={tuple(str(t) for t in self.tolerance)!r}")
        return f"Rules({', '.join(parts)})"

    def allowed(self, fieldname: str, old: int, new: int) -> bool:
        t = next((t for t in self.tolerance if t.field == fieldname), None)
        return new <= old if t is None else t.allows(old, new)


@dataclass(frozen=True)
class Violation:
    """One rule (:data:`RULES`) one kernel, module or library's arch breaks."""

    rule: str
    file: str
    library: str
    kernel: str | None
    arch: str | None
    value: Any
    limit: Any
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "file": self.file, "library": self.library,
                "kernel": self.kernel, "arch": self.arch, "value": self.value,
                "limit": self.limit, "message": self.message}

    def __str__(self) -> str:
        where = self.file if self.file.endswith(self.library) else f"{self.file}: {self.library}"
        kernel = f": {demangle(self.kernel)}" if self.kernel else ""
        arch = f" ({self.arch})" if self.arch else ""
        return f"{where}{kernel}{arch}: {self.message} [{self.rule}]"

    def github(self) -> str:
        """A GitHub Actions workflow command: an error annotation on the file."""
        kernel = f"{demangle(self.kernel)} " if self.kernel else ""
        arch = f"({self.arch}) " if self.arch else ""
        text = f"{self.library}: {kernel}{arch}{self.message}"
        return (f"::error file={escape(self.file, True)},title="
                f"{escape(f'fatbinkit gate: {self.rule}', True)}::{escape(text)}")


def escape(text: str, prop: bool = False) -> str:
    """GitHub's workflow-command escaping (``%``, CR, LF; and ``:``, ``,`` in properties)."""
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


@dataclass(frozen=True)
class Gate:
    """The outcome: ``violations`` (empty: pass), ``notes`` on what could not be checked,
    the snapshot read (what ``--write-baseline`` stores) and ``changes`` from the baseline."""

    snapshot: Snapshot
    violations: tuple[Violation, ...]
    notes: tuple[str, ...] = ()
    changes: Diff | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "inputs": self.snapshot.source,
                "libraries": len(self.snapshot.libraries),
                "kernels": sum(map(_count_kernels, self.snapshot.libraries)),
                "violations": [v.to_dict() for v in self.violations],
                "notes": list(self.notes)}

    def __str__(self) -> str:
        n = len(self.violations)
        kernels = sum(map(_count_kernels, self.snapshot.libraries))
        head = (f"{'FAILED' if n else 'passed'}: {n} violation{'' if n == 1 else 's'}; "
                f"{kernels} kernel images in {len(self.snapshot.libraries)} libraries checked")
        return "\n".join([*(str(v) for v in self.violations), *self.notes, head])

    def __repr__(self) -> str:
        """Counts, not contents: cuBLAS's gate holds 10^5 kernel images."""
        rules = sorted({v.rule for v in self.violations})
        shown = ", ".join(rules[:4]) + (", ..." if len(rules) > 4 else "")
        snap = self.snapshot
        changes = "" if self.changes is None else \
            f", changes={len(self.changes.changed)}, regressions={self.changes.regressions}"
        return (f"Gate(ok={self.ok}, violations={len(self.violations)}"
                f"{f' ({shown})' if rules else ''}, notes={len(self.notes)}, "
                f"inputs={_short(snap.source)!r}, libraries={len(snap.libraries)}, "
                f"kernels={sum(map(_count_kernels, snap.libraries))}{changes})")


def gate(inputs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str], rules: Rules, *,
         baseline: Snapshot | None = None,
         max_decompressed: int | DecompressionBudget | None = None, jobs: int | None = None,
         progress: Progress = None,
         skipped: Callable[[Member, FatbinkitError], None] | None = None,
         everywhere: bool = False) -> Gate:
    """Read every input (files, wheels, folders; one path or several) and judge it by
    ``rules`` and, with ``baseline``, by the ratchet. The snapshot of all inputs together is
    :attr:`Gate.snapshot`. ``rules`` without a rule and no ``baseline`` is refused (nothing
    would be checked: :func:`fatbinkit.diff.snapshot` reads a baseline).

    ``max_decompressed``: what each library may inflate (bytes; default
    :meth:`~fatbinkit.formats.fatbin.DecompressionBudget.for_input`), or one
    :class:`~fatbinkit.formats.fatbin.DecompressionBudget` shared by all; ``jobs``: processes
    reading images (None: :func:`fatbinkit.parallel.default_jobs`); ``progress``
    (:mod:`fatbinkit.progress`): one step per file of each input; ``skipped``: see
    :func:`fatbinkit.collection.binaries`; ``everywhere``: the deep scan's images too
    (:func:`fatbinkit.binary.open`)."""
    sources = [inputs] if isinstance(inputs, (str, os.PathLike)) else \
        _values(inputs, (), "inputs")
    if not sources:
        raise InvalidArgumentError("gate needs at least one input")
    if not isinstance(rules, Rules):
        raise InvalidArgumentError(f"rules is a fatbinkit.gate.Rules, not "
                                   f"{type(rules).__name__}")
    if baseline is not None and not isinstance(baseline, Snapshot):
        raise InvalidArgumentError(f"baseline is a fatbinkit.diff.Snapshot (Snapshot.from_dict "
                                   f"of a baseline file) or None, not {type(baseline).__name__}")
    if not rules.any and baseline is None:
        raise InvalidArgumentError(
            f"no rule to check: give a rule ({option('max_registers', 'N')}, "
            f"{option('no_spills')}, {option('require_archs', 'ARCH')}, "
            f"{option('require_sass', 'ARCH')}, {option('max_min_driver', 'VERSION')}, "
            f"{option('max_size', 'SIZE')}) or a {option('baseline', 'BASE')}")
    if rules.tolerance and baseline is None:
        raise InvalidArgumentError(f"{option('tolerance', 'FIELD=N')} goes with "
                                   f"{option('baseline', 'BASE')}")
    DecompressionBudget.of(max_decompressed, 0)  # a wrong type is refused before reading
    as_jobs(jobs)
    violations: list[Violation] = []
    notes: list[str] = []
    libraries: list[Library] = []
    files: dict[str, str] = {}  # library -> input, for the ratchet (names are unique there)
    for source in sources:
        for m, binary in binaries(source, progress, skipped, jobs=jobs,
                                  everywhere=everywhere):
            with named(m):
                lib = read_library(binary, m.name, max_decompressed, jobs=jobs)
                libraries.append(lib)
                files[lib.name] = os.fspath(source)
                violations += _absolute(lib, os.fspath(source), rules, notes)
                if rules.loads:
                    check = binary.check(rules.loads, rules.driver, sets=lib.sets)
                    violations += _require(check, lib, os.fspath(source), rules, notes)
    snap = Snapshot(" ".join(os.fspath(s) for s in sources), tuple(libraries))
    changes = None
    if baseline is not None:
        changes = diff(baseline, snap)
        violations += _ratchet(changes, files, rules)
    return Gate(snap, tuple(violations), tuple(dict.fromkeys(notes)), changes)


def _absolute(lib: Library, file: str, rules: Rules, notes: list[str]) -> list[Violation]:
    out: list[Violation] = []
    unknown = 0
    for kernel, arch, registers, stores, loads in _resources(lib):
        if rules.max_registers is not None and (registers or 0) > rules.max_registers:
            out.append(Violation("max-registers", file, lib.name, kernel, arch, registers,
                                 rules.max_registers,
                                 f"{registers} registers > {rules.max_registers}"))
        if rules.no_spills:
            if stores is None:
                unknown += 1
            elif stores or loads:
                out.append(Violation("no-spills", file, lib.name, kernel, arch,
                                     {"stores": stores, "loads": loads}, 0,
                                     f"spills {stores} bytes stored, {loads} loaded"))
    if unknown:
        notes.append(f"note: {lib.name}: {unknown} kernel images come from cubins that do not "
                     "record spills (built by ptxas before CUDA 12.6): "
                     f"{option('no_spills')} could not judge them")
    if rules.max_min_driver is not None:
        limit = dotted(rules.max_min_driver)
        for a in lib.archs:
            if a.min_driver is None:
                notes.append(f"note: {lib.name}: {a.arch}: minimum driver not known (no floor "
                             "recorded, or one newer than fatbinkit's tables)")
            elif version_numbers(a.min_driver) > rules.max_min_driver:
                label = vendors.of_target(a.arch).runtime_label
                out.append(Violation("max-min-driver", file, lib.name, None, a.arch,
                                     a.min_driver, limit,
                                     f"{a.kind.upper()} images need driver ({label}) "
                                     f"{a.min_driver} > {limit}"))
    for s in rules.max_size:
        chosen = [a for a in lib.archs if s.arch is None or s.arch.matches(a.kind, a.arch)]
        total = sum(a.stored for a in chosen)
        if total > s.limit:
            what = f"{s.arch} images" if s.arch else "device code"
            out.append(Violation("max-size", file, lib.name, None, str(s.arch) if s.arch else None,
                                 total, s.limit, f"{what}: {_size(total)} ({total} bytes) > "
                                 f"{_size(s.limit)} ({s.limit} bytes)"))
    return out


def _require(check: Check, lib: Library, file: str, rules: Rules,
             notes: list[str]) -> list[Violation]:
    """What ``require_archs`` and ``require_sass`` find in one library's
    :meth:`~fatbinkit.binary.Binary.check`: per arch, each kernel the arch cannot load (with
    ``rules.driver``'s floors), each module with no kernels (variables only) that does not load
    on it, each container with no entry at all (its kernels, which the runtime still registers,
    are unknown and load on no GPU: what ``prune`` leaves of a module no kept arch loads), and
    images no driver for that GPU loads (:attr:`~fatbinkit.verdict.ArchVerdict.driver_gap`). So
    an arch fails exactly when the check's verdict for it is not ``works``; modules with no
    kernels and no variables are not judged (never loaded), as the check does. For
    ``require_sass`` a kernel (or module with no kernels) the GPU loads by PTX JIT fails too."""
    if not check.rows:
        notes.append(f"note: {lib.name}: no SASS or PTX the driver loads (LTO-IR only, as "
                     f"`fatbinkit check` leaves it out): {option('require_archs', 'ARCH')} "
                     "could not judge it")
        return []
    out: list[Violation] = []
    judge_empty = all(s.empty for s, _ in check.rows)  # a library of empty modules only
    for i, (device, verdict) in enumerate(zip(check.archs, check.verdicts, strict=True)):
        sm = str(device)
        named_rules = [r for r, archs in (("require-arch", rules.require_archs),
                                          ("require-sass-arch", rules.require_sass))
                       if device in archs]
        gap = verdict.driver_gap
        if gap is not None:
            out += [Violation(r, file, lib.name, None, sm, dotted(verdict.min_driver or (0, 0)),
                              dotted(verdict.max_driver or (0, 0)), gap) for r in named_rules]
        for module, kernels in check.rows:
            if module.empty and not judge_empty:
                continue
            if module.entryless:
                d = kernels[0][1][i]
                out += [Violation(r, file, lib.name, None, sm, d.error, "loads",
                                  f"{module.label} is an empty fatbin container (no entries: "
                                  f"its images were removed, e.g. by prune): its kernels do not "
                                  f"load on {sm} and are unknown") for r in named_rules]
                continue
            for name, decisions in kernels:
                d = decisions[i]
                what = "" if name is not None else \
                    f"{module.label}, a module with no kernels (variables only), "
                if not d.loadable:
                    why = str(d.floor) if d.floor else d.reason
                    out += [Violation(r, file, lib.name, name, sm, d.error, "loads",
                                      f"{what}does not load on {sm}: {d.error} ({why})")
                            for r in named_rules]
                elif d.how != "sass" and "require-sass-arch" in named_rules:
                    image = d.image.name if d.image is not None else "PTX"
                    out.append(Violation("require-sass-arch", file, lib.name, name, sm, d.how,
                                         "sass", f"{what}loads on {sm} by PTX JIT only "
                                         f"({image}): no SASS runs on it"))
    return out


def _ratchet(changes: Diff, files: Mapping[str, str], rules: Rules) -> list[Violation]:
    """The baseline's violations, each named ``baseline:FIGURE`` (:data:`RULES`)."""
    out: list[Violation] = []
    for c in changes.changed:
        if c.field not in WORSE_WHEN_HIGHER or c.new is None:
            continue
        old = c.old or 0
        if not rules.allowed(c.field, old, c.new):
            out.append(Violation(f"baseline:{c.field}", files.get(c.library, c.library),
                                 c.library, c.kernel, c.arch, c.new, old,
                                 f"{c.field} {old} -> {c.new} ({c.new - old:+d}) over the "
                                 "baseline"))
    for k in changes.removed:
        if changes.is_lost_arch(k):
            out.append(Violation("baseline:lost-arch", files.get(k.library, k.library),
                                 k.library, k.kernel, k.arch, None, k.arch,
                                 f"lost its {k.arch} image (kept for other archs)"))
    for cov in changes.coverage:
        if cov.regression:
            out.append(Violation("baseline:lost-coverage", files.get(cov.library, cov.library),
                                 cov.library, None, cov.arch, None, cov.arch,
                                 f"no {cov.kind.upper()} for {cov.arch} any more"))
    for name in changes.libraries_removed:
        out.append(Violation("baseline:library-gone", name, name, None, None, None, name,
                             "library with device code in the baseline is gone"))
    return out


def parse_tolerances(specs: Iterable[str]) -> tuple[Tolerance, ...]:
    """``registers=8``, ``stack=10%``: :class:`Tolerance` values (for the CLI and callers)."""
    out = []
    for spec in _values(specs, (str,), "tolerance"):
        if not isinstance(spec, str):
            raise InvalidArgumentError(f"a tolerance is text like 'registers=8', not {spec!r}")
        name, sep, value = spec.partition("=")
        percent = value.endswith("%")
        number = value[:-1] if percent else value
        if not sep or not (number.isascii() and number.isdigit()):
            raise InvalidArgumentError(f"a tolerance is FIELD=N or FIELD=N%, e.g. registers=8, "
                                       f"not {spec!r}")
        out.append(Tolerance(name, int(number), percent))
    return tuple(out)
