"""``fatbinkit gate``: rules a build's kernels must meet, and a ratchet on a baseline, for CI.

Absolute rules (:class:`Rules`) judge each library of the inputs: registers, spills, the archs
every kernel must load on (decided by :meth:`fatbinkit.binary.Binary.check`, so SASS for an older
arch of the same major or a PTX floor counts, as the driver would take them), the highest minimum
driver an arch's images may need, and device code size per arch or in total. The ratchet compares
the inputs with a baseline snapshot (:mod:`fatbinkit.diff`): a kernel whose registers, spills,
stack, local or shared memory rise beyond a tolerance, a kernel that loses an arch, a library
that loses an arch or disappears, fail. Every :class:`Violation` names the file, library,
kernel, arch, value and limit.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .binary import ArchFilter, _size, demangle
from .collection import Member, binaries, named
from .diff import (
    WORSE_WHEN_HIGHER,
    Diff,
    Library,
    Snapshot,
    diff,
    read_library,
)
from .driver import CudaVersion, as_cuda_version, dotted
from .errors import FatbinkitError, InvalidArgumentError
from .formats.arch import Arch
from .formats.fatbin import EntryKind

__all__ = ["Gate", "Rules", "SizeLimit", "Tolerance", "Violation", "escape", "gate",
           "parse_tolerances"]


@dataclass(frozen=True)
class SizeLimit:
    """``--max-size``: device code bytes (stored, as in the file) of one library, for the images
    matching ``arch`` (None: all of them)."""

    limit: int
    arch: ArchFilter | None = None

    def __str__(self) -> str:
        return f"{self.arch}={self.limit}" if self.arch else str(self.limit)


@dataclass(frozen=True)
class Tolerance:
    """How much a ratcheted figure may rise over the baseline: ``amount`` units, or with
    ``percent`` that percentage of the baseline value."""

    field: str
    amount: int
    percent: bool = False

    def allows(self, old: int, new: int) -> bool:
        rise = new - old
        return rise <= (old * self.amount / 100 if self.percent else self.amount)

    def __str__(self) -> str:
        return f"{self.field}={self.amount}{'%' if self.percent else ''}"


@dataclass(frozen=True)
class Rules:
    """What the gate checks; every rule is off by default."""

    max_registers: int | None = None
    no_spills: bool = False
    require_archs: tuple[Arch, ...] = ()
    driver: CudaVersion | None = None  # the driver --require-arch decides with (None: no floors)
    max_min_driver: CudaVersion | None = None
    max_size: tuple[SizeLimit, ...] = ()
    tolerance: tuple[Tolerance, ...] = ()

    def __post_init__(self) -> None:
        for t in self.tolerance:
            if t.field not in WORSE_WHEN_HIGHER:
                raise InvalidArgumentError(f"no tolerance for {t.field!r}: the ratchet holds "
                                           f"{', '.join(WORSE_WHEN_HIGHER)}")

    @property
    def any(self) -> bool:
        return bool(self.max_registers is not None or self.no_spills or self.require_archs or
                    self.max_min_driver is not None or self.max_size)

    def __str__(self) -> str:
        """The rules as the command line gives them: ``--max-registers 128 --no-spills``."""
        parts = ([f"--max-registers {self.max_registers}"] if self.max_registers is not None
                 else []) + (["--no-spills"] if self.no_spills else [])
        parts += [f"--require-arch {a.sm}" for a in self.require_archs]
        parts += [f"--driver {dotted(self.driver)}"] if self.driver else []
        parts += ([f"--max-min-driver {dotted(self.max_min_driver)}"] if self.max_min_driver
                  else [])
        parts += [f"--max-size {s}" for s in self.max_size]
        parts += [f"--tolerance {t}" for t in self.tolerance]
        return " ".join(parts) or "no rules"

    def allowed(self, fieldname: str, old: int, new: int) -> bool:
        t = next((t for t in self.tolerance if t.field == fieldname), None)
        return new <= old if t is None else t.allows(old, new)


@dataclass(frozen=True)
class Violation:
    """One rule one kernel (or one library's arch) breaks."""

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
                "kernels": sum(len(lib.kernels) for lib in self.snapshot.libraries),
                "violations": [v.to_dict() for v in self.violations],
                "notes": list(self.notes)}

    def __str__(self) -> str:
        n = len(self.violations)
        kernels = sum(len(lib.kernels) for lib in self.snapshot.libraries)
        head = (f"{'FAILED' if n else 'passed'}: {n} violation{'' if n == 1 else 's'}; "
                f"{kernels} kernel images in {len(self.snapshot.libraries)} libraries checked")
        return "\n".join([*(str(v) for v in self.violations), *self.notes, head])


def gate(inputs: Sequence[str | os.PathLike[str]], rules: Rules, *,
         baseline: Snapshot | None = None, max_decompressed: int | None = None,
         progress: Callable[[Member], None] | None = None,
         skipped: Callable[[Member, FatbinkitError], None] | None = None) -> Gate:
    """Read every input (files, wheels, folders) and judge it by ``rules`` and, with
    ``baseline``, by the ratchet. The snapshot of all inputs together is
    :attr:`Gate.snapshot`."""
    if not inputs:
        raise InvalidArgumentError("gate needs at least one input")
    violations: list[Violation] = []
    notes: list[str] = []
    libraries: list[Library] = []
    files: dict[str, str] = {}  # library -> input, for the ratchet (names are unique there)
    for source in inputs:
        for m, binary in binaries(source, progress, skipped):
            with named(m):
                lib = read_library(binary, m.name, max_decompressed)
                libraries.append(lib)
                files[lib.name] = os.fspath(source)
                violations += _absolute(lib, os.fspath(source), rules, notes)
                if rules.require_archs:
                    check = binary.check(rules.require_archs, rules.driver, sets=lib.sets)
                    violations += _require(check, lib, os.fspath(source), rules)
    snap = Snapshot(" ".join(os.fspath(s) for s in inputs), tuple(libraries))
    changes = None
    if baseline is not None:
        changes = diff(baseline, snap)
        violations += _ratchet(changes, files, rules)
    return Gate(snap, tuple(violations), tuple(dict.fromkeys(notes)), changes)


def _absolute(lib: Library, file: str, rules: Rules, notes: list[str]) -> list[Violation]:
    out: list[Violation] = []
    unknown = 0
    for k in lib.kernels:
        if k.kind != "sass":
            continue
        if rules.max_registers is not None and (k.registers or 0) > rules.max_registers:
            out.append(Violation("max-registers", file, lib.name, k.kernel, k.arch, k.registers,
                                 rules.max_registers,
                                 f"{k.registers} registers > {rules.max_registers}"))
        if rules.no_spills:
            if k.spill_stores is None:
                unknown += 1
            elif k.spill_stores or k.spill_loads:
                out.append(Violation("no-spills", file, lib.name, k.kernel, k.arch,
                                     {"stores": k.spill_stores, "loads": k.spill_loads}, 0,
                                     f"spills {k.spill_stores} bytes stored, {k.spill_loads} "
                                     "loaded"))
    if unknown:
        notes.append(f"note: {lib.name}: {unknown} kernel images come from cubins that do not "
                     "record spills (built by ptxas before CUDA 12.6): --no-spills could not "
                     "judge them")
    if rules.max_min_driver is not None:
        limit = dotted(rules.max_min_driver)
        for a in lib.archs:
            if a.min_driver is None:
                notes.append(f"note: {lib.name}: {a.arch}: minimum driver not known (no floor "
                             "recorded, or one newer than fatbinkit's tables)")
            elif as_cuda_version(a.min_driver) > rules.max_min_driver:
                out.append(Violation("max-min-driver", file, lib.name, None, a.arch,
                                     a.min_driver, limit,
                                     f"{a.kind.upper()} images need driver (CUDA) "
                                     f"{a.min_driver} > {limit}"))
    for s in rules.max_size:
        chosen = [a for a in lib.archs if s.arch is None or s.arch.matches(
            int(EntryKind.ELF if a.kind == "sass" else EntryKind.PTX), Arch.parse(a.arch))]
        total = sum(a.stored for a in chosen)
        if total > s.limit:
            what = f"{s.arch} images" if s.arch else "device code"
            out.append(Violation("max-size", file, lib.name, None, str(s.arch) if s.arch else None,
                                 total, s.limit, f"{what}: {_size(total)} ({total} bytes) > "
                                 f"{_size(s.limit)} ({s.limit} bytes)"))
    return out


def _require(check: Any, lib: Library, file: str, rules: Rules) -> list[Violation]:
    """Each kernel that a required arch cannot load (with ``rules.driver``'s floors), and each
    container with no entry at all (its kernels, which the runtime still registers, are
    unknown and load on no GPU: what ``prune`` leaves of a module no kept arch loads)."""
    out: list[Violation] = []
    for module, kernels in check.rows:
        if module.entryless:
            out += [Violation("require-arch", file, lib.name, None, d.device.sm, d.error,
                              "loads", f"{module.label} is an empty fatbin container (no "
                              f"entries: its images were removed, e.g. by prune): its kernels "
                              f"do not load on {d.device.sm} and are unknown")
                    for d in kernels[0][1]]
            continue
        for name, decisions in kernels:
            if name is None:
                continue
            for d in decisions:
                if not d.loadable:
                    why = str(d.floor) if d.floor else d.reason
                    out.append(Violation("require-arch", file, lib.name, name, d.device.sm,
                                         d.error, "loads",
                                         f"does not load on {d.device.sm}: {d.error} ({why})"))
    return out


def _ratchet(changes: Diff, files: Mapping[str, str], rules: Rules) -> list[Violation]:
    out: list[Violation] = []
    for c in changes.changed:
        if c.field not in WORSE_WHEN_HIGHER or c.new is None:
            continue
        old = c.old or 0
        if not rules.allowed(c.field, old, c.new):
            out.append(Violation("baseline", files.get(c.library, c.library), c.library,
                                 c.kernel, c.arch, c.new, old,
                                 f"{c.field} {old} -> {c.new} ({c.new - old:+d}) over the "
                                 "baseline"))
    for k in changes.removed:
        if changes.is_lost_arch(k):
            out.append(Violation("baseline", files.get(k.library, k.library), k.library,
                                 k.kernel, k.arch, None, k.arch,
                                 f"lost its {k.arch} image (kept for other archs)"))
    for cov in changes.coverage:
        if cov.regression:
            out.append(Violation("baseline", files.get(cov.library, cov.library), cov.library,
                                 None, cov.arch, None, cov.arch,
                                 f"no {cov.kind.upper()} for {cov.arch} any more"))
    for name in changes.libraries_removed:
        out.append(Violation("baseline", name, name, None, None, None, name,
                             "library with device code in the baseline is gone"))
    return out


def parse_tolerances(specs: Iterable[str]) -> tuple[Tolerance, ...]:
    """``registers=8``, ``stack=10%``: :class:`Tolerance` values (for the CLI and callers)."""
    out = []
    for spec in specs:
        name, sep, value = spec.partition("=")
        percent = value.endswith("%")
        number = value[:-1] if percent else value
        if not sep or not (number.isascii() and number.isdigit()):
            raise InvalidArgumentError(f"a tolerance is FIELD=N or FIELD=N%, e.g. registers=8, "
                                       f"not {spec!r}")
        out.append(Tolerance(name, int(number), percent))
    return tuple(out)
