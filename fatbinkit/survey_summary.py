"""What a survey found (:mod:`fatbinkit.survey`), read back from its Parquet tables with pyarrow
(:mod:`pyarrow.dataset`, :mod:`pyarrow.compute`; no engine): ``fatbinkit survey summarize OUT``
and ``fatbinkit survey regressions OUT [--package P]``.

:func:`summarize` gives, per package and version (packages by name, versions in PEP 440 order),
the figures of its wheels together, in the tables' own column names
(:func:`fatbinkit.survey_tables.schema`):

- ``wheels``: how many wheels of the version were read (a ``wheels`` row each; wheels that
  failed are ``errors``, counted apart); ``size``: their bytes (the wheel files'); ``files``:
  their libraries with device code; ``stored`` / ``uncompressed``: their device code's bytes
  as stored and uncompressed (``ls --summary --json``'s total, summed over the wheels);
- ``native`` / ``jit``: the archs of native code (SASS, AMD code objects) and of code compiled
  when loaded (PTX), the union over the version's wheels;
- ``devices``: per GPU, ``status`` the worst verdict among the wheels that have a row for it
  (``fails`` < ``partial`` < ``works``) and ``min_driver`` the highest of their minimum drivers
  (``check --min-driver --json``'s, compared as version tuples), or None when one of those
  wheels has none (it holds no image any driver loads on that GPU: ``fails`` with no driver).
  A ``fails`` with a driver is a GPU whose images need that driver while no driver for that GPU
  is that new (CUDA 13's images on sm_101, which CUDA 13 drivers call sm_110). A version whose
  only wheel is one wheel has that wheel's ``check --min-driver`` status and driver, as is;
- ``what_if``: per GPU set (``report``'s what-if: what ``prune --for GPUS`` keeps), ``kept``
  and ``dropped`` summed over the wheels that have that set, ``refused`` when ``prune`` refuses
  one of them, ``exact`` when every figure is exact; ``best`` the set, among those not refused,
  that drops the most (the first such set in the tables' order on a tie);

then the errors per ``kind`` (``input``, ``engine``) and ``type``, and per arch over the whole
survey how many wheels hold it as native code (``native``) and as PTX (``jit``).

:func:`regressions` compares consecutive versions of each package. **Pairing**: a wheel is
compared with the one of the package's previous version (PEP 440 order, among the versions
that have such a wheel) built for the same interpreter and ABI (``cp311-cp311``,
``py3-none``: the tags' first two parts) and the same platform family (the tags' platform part
without its version: ``manylinux2014_x86_64`` and ``manylinux_2_27_x86_64`` are both
``manylinux_x86_64``, ``macosx_11_0_arm64`` is ``macosx_arm64``; ``win_amd64`` stays itself).
So Linux wheels are compared with Linux wheels, Windows with Windows, cp311 with cp311, and each
pair is two wheels, as ``fatbinkit diff OLD.whl NEW.whl`` compares them. Where one version
has several wheels of one key (build tags), the last by build tag and file name stands for
it. A finding is:

- ``native`` ``dropped``: an arch of native code the old wheel has and the new one lacks;
- ``jit`` ``dropped``: the same of PTX;
- ``min_driver`` ``raised``: a GPU whose minimum driver is higher in the new wheel (both
  known);
- ``status`` ``worsened``: a GPU whose verdict is worse in the new wheel (``works`` ->
  ``partial`` -> ``fails``);
- ``stored`` ``grew``: more device code stored in the new wheel (bytes, and the ratio);
- ``files`` ``added`` / ``removed``: a library with device code in one wheel only.

Both raise :class:`~fatbinkit.errors.InputError` when ``OUT`` is not a survey's output (no
folder, or neither a ``wheels`` nor an ``errors`` part) and
:class:`~fatbinkit.errors.FormatError` when a part is not of this version of the tables (its
schema's ``fatbinkit`` metadata is not :data:`fatbinkit.survey_tables.FORMAT`, or its columns
are not the schema's).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from . import vendors
from .errors import FatbinkitError, FormatError, InputError
from .survey_tables import FORMAT, schema

__all__ = ["ArchCount", "DeviceDriver", "ErrorCount", "Finding", "Pair", "Regressions",
           "SurveySummary", "VersionSummary", "WhatIf", "platform_family", "regressions",
           "summarize"]

#: what :meth:`SurveySummary.to_dict` and :meth:`Regressions.to_dict` say they are
SUMMARY_FORMAT = "fatbinkit-survey-summary/1"
REGRESSIONS_FORMAT = "fatbinkit-survey-regressions/1"
_STATUS_RANK = {"fails": 0, "partial": 1, "works": 2}


# -- reading the tables ------------------------------------------------------------------------

def _filesystem(out: str) -> tuple[Any, str]:
    """The file system ``out`` is on (fsspec's: a local folder, or a URL such as
    ``s3://bucket/survey`` that a survey wrote to) and the folder's path on it."""
    if "://" in out and not out.startswith("file://"):
        try:
            import fsspec

            fs, root = fsspec.core.url_to_fs(out)
        except (ImportError, ValueError) as e:
            raise InputError(f"{out}: cannot read: {e}") from e
        return fs, str(root).rstrip("/")
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem(), os.path.abspath(out.removeprefix("file://"))


def _parts(fs: Any, root: str, table: str) -> list[str]:
    """The part files of one table (the names a writer left half-done, ``.NAME.tmp``, left)."""
    folder = f"{root}/{table}"
    try:
        if not fs.isdir(folder):
            return []
        names = fs.ls(folder, detail=False)
    except OSError as e:
        raise InputError(f"cannot read {folder}: {e}") from e
    return sorted(n for n in names if n.endswith(".parquet")
                  and not n.rpartition("/")[2].startswith((".", "_")))


def _read(fs: Any, root: str, table: str, columns: Sequence[str]) -> Any:
    """The ``columns`` of one table (a :class:`pyarrow.Table`, empty where the table has no
    part), every part's schema checked first."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    expected = schema(table)
    parts = _parts(fs, root, table)
    if not parts:
        return pa.table({c: pa.array([], type=expected.field(c).type) for c in columns})
    dataset = ds.dataset(parts, format="parquet", schema=expected, filesystem=fs)
    for fragment in dataset.get_fragments():
        try:
            found = fragment.physical_schema
        except (OSError, pa.ArrowException) as e:
            raise FormatError(f"{fragment.path}: not a Parquet file: {e}") from e
        said = (found.metadata or {}).get(b"fatbinkit")
        if said != FORMAT.encode():
            raise FormatError(
                f"{fragment.path}: a part of another version of the survey tables (its schema "
                f"says fatbinkit={said.decode(errors='replace') if said else None!r}, this "
                f"fatbinkit reads {FORMAT!r}): survey again into a new folder")
        if not found.equals(expected, check_metadata=False):
            raise FormatError(f"{fragment.path}: its columns are not those of the {table} table "
                              f"of {FORMAT!r}")
    try:
        return dataset.to_table(columns=list(columns))
    except (OSError, pa.ArrowException) as e:
        raise FormatError(f"{root}/{table}: cannot read: {e}") from e


def _checked(out: str | os.PathLike[str]) -> tuple[str, Any, str]:
    """``out`` as given, its file system and its path there, once it is known to be a
    survey's output."""
    path = os.fspath(out)
    fs, root = _filesystem(path)
    try:
        there = fs.isdir(root)
    except OSError as e:
        raise InputError(f"cannot read {path}: {e}") from e
    if not there:
        raise InputError(f"{path}: no such folder (a survey's output: fatbinkit survey ... -o "
                         f"{path})")
    if not _parts(fs, root, "wheels") and not _parts(fs, root, "errors"):
        raise InputError(f"{path}: not a survey's output: no wheels table ({path}/wheels/*.parquet)"
                         " nor errors table")
    return path, fs, root


# -- orders ------------------------------------------------------------------------------------

def _version_key(version: str | None) -> tuple[Any, ...]:
    """PEP 440 order; a version PEP 440 does not parse after, by its text."""
    from packaging.version import InvalidVersion, Version

    if version is None:
        return (2, "")
    try:
        return (0, Version(version))
    except InvalidVersion:
        return (1, version)


def _arch_key(arch: str) -> tuple[Any, ...]:
    try:
        return (0, *vendors.target_key(arch))
    except FatbinkitError:  # no vendor spells it: after the others
        return (1, arch)


def _driver_key(driver: str) -> tuple[Any, ...]:
    """A driver version as a tuple (``"12.10"`` > ``"12.9"``)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in driver.split("."))


def _package_key(package: str | None) -> tuple[int, str]:
    return (package is None, package or "")


# -- summarize ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceDriver:
    """One GPU for one version: the worst verdict among its wheels, and the highest minimum
    driver (None: one wheel has no driver that loads anything on it)."""

    device: str
    status: str
    min_driver: str | None

    def __str__(self) -> str:
        return f"{self.device}: {self.status}, min_driver {self.min_driver or '-'}"

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "status": self.status, "min_driver": self.min_driver}


@dataclass(frozen=True)
class WhatIf:
    """What ``prune --for GPUS`` keeps and drops of one version's device code, summed over the
    ``wheels`` that have that GPU set."""

    gpus: tuple[str, ...]
    kept: int
    dropped: int
    exact: bool
    refused: bool
    wheels: int

    def __str__(self) -> str:
        return (f"--for {','.join(self.gpus)}: drops {self.dropped} of "
                f"{self.kept + self.dropped} bytes{'' if self.exact else ' (about)'}"
                f"{' (refused)' if self.refused else ''}")

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": list(self.gpus), "kept": self.kept, "dropped": self.dropped,
                "exact": self.exact, "refused": self.refused, "wheels": self.wheels}


@dataclass(frozen=True)
class VersionSummary:
    """One version of one package: its wheels' figures together (the module says how)."""

    package: str | None
    version: str | None
    wheels: int
    size: int
    files: int
    stored: int
    uncompressed: int
    native: tuple[str, ...]
    jit: tuple[str, ...]
    devices: tuple[DeviceDriver, ...]
    what_if: tuple[WhatIf, ...]

    @property
    def best(self) -> WhatIf | None:
        """The GPU set, of those ``prune`` does not refuse, that drops the most."""
        best = None
        for w in self.what_if:
            if not w.refused and (best is None or w.dropped > best.dropped):
                best = w
        return best

    def __str__(self) -> str:
        return (f"{self.package or '-'} {self.version or '-'}: {self.wheels} wheels, "
                f"{self.size} bytes, {self.files} files, {self.stored} bytes of device code "
                f"stored ({self.uncompressed} uncompressed), native {' '.join(self.native) or '-'}"
                f", jit {' '.join(self.jit) or '-'}")

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"package": self.package, "version": self.version, "wheels": self.wheels,
                "size": self.size, "files": self.files, "stored": self.stored,
                "uncompressed": self.uncompressed, "native": list(self.native),
                "jit": list(self.jit), "devices": [d.to_dict() for d in self.devices],
                "what_if": [w.to_dict() for w in self.what_if],
                "best": None if best is None else best.to_dict()}


@dataclass(frozen=True)
class ErrorCount:
    """How many wheels failed with one kind (``input``, ``engine``) and type of error."""

    kind: str | None
    type: str | None
    wheels: int

    def __str__(self) -> str:
        return f"{self.wheels} {self.kind} errors ({self.type})"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "type": self.type, "wheels": self.wheels}


@dataclass(frozen=True)
class ArchCount:
    """How many wheels of the survey hold one arch as native code and as PTX."""

    arch: str
    native: int
    jit: int

    def __str__(self) -> str:
        return f"{self.arch}: native in {self.native} wheels, jit in {self.jit}"

    def to_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "native": self.native, "jit": self.jit}


@dataclass(frozen=True)
class SurveySummary:
    """What :func:`summarize` found in a survey's output ``out``: ``str()`` is aligned text
    tables, :meth:`to_dict` the JSON document."""

    out: str
    versions: tuple[VersionSummary, ...]
    errors: tuple[ErrorCount, ...]
    archs: tuple[ArchCount, ...]

    @property
    def wheels(self) -> int:
        return sum(v.wheels for v in self.versions)

    @property
    def packages(self) -> int:
        return len({v.package for v in self.versions})

    def __str__(self) -> str:
        failed = sum(e.wheels for e in self.errors)
        lines = [f"survey {self.out}: {self.wheels} wheels of {self.packages} packages "
                 f"({len(self.versions)} versions), {failed} errors", ""]
        lines += _table(["package", "version", "wheels", "size", "files", "stored",
                         "uncompressed", "native", "jit"],
                        [[v.package or "-", v.version or "-", v.wheels, v.size, v.files,
                          v.stored, v.uncompressed, " ".join(v.native) or "-",
                          " ".join(v.jit) or "-"] for v in self.versions]) \
            if self.versions else ["(no wheel read)"]
        rows: list[list[Any]] = []
        for v in self.versions:
            groups: dict[tuple[str | None, str], list[str]] = {}
            for d in v.devices:
                groups.setdefault((d.min_driver, d.status), []).append(d.device)
            for (driver, status), devices in sorted(groups.items(), key=lambda g: (
                    g[0][0] is None, _driver_key(g[0][0] or ""), -_STATUS_RANK.get(g[0][1], -1),
                    g[0][1])):
                rows.append([v.package or "-", v.version or "-", driver or "-", status,
                             " ".join(devices)])
        lines += ["", "minimum driver per GPU (the highest over a version's wheels; status the "
                  "worst)"]
        lines += _table(["package", "version", "min_driver", "status", "devices"], rows) \
            if rows else ["(no wheel with device code)"]
        rows = [[v.package or "-", v.version or "-", ",".join(w.gpus), w.kept, w.dropped,
                 "yes" if w.refused else "no", "yes" if w.exact else "no",
                 "*" if w is v.best else ""]
                for v in self.versions for w in v.what_if]
        lines += ["", "what-if: prune --for GPUS (device-code bytes, summed over a version's "
                  "wheels; * the set that drops the most)"]
        lines += _table(["package", "version", "gpus", "kept", "dropped", "refused", "exact",
                         "best"], rows) if rows else ["(none)"]
        lines += ["", "archs: wheels holding each as native code and as PTX (jit)"]
        lines += _table(["arch", "native", "jit"], [[a.arch, a.native, a.jit]
                                                    for a in self.archs]) \
            if self.archs else ["(none)"]
        lines += ["", "errors"]
        lines += _table(["kind", "type", "wheels"], [[e.kind or "-", e.type or "-", e.wheels]
                                                     for e in self.errors]) \
            if self.errors else ["(none)"]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"format": SUMMARY_FORMAT, "out": self.out, "wheels": self.wheels,
                "packages": self.packages, "versions": [v.to_dict() for v in self.versions],
                "errors": [e.to_dict() for e in self.errors],
                "archs": [a.to_dict() for a in self.archs]}


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Aligned columns: numbers to the right, text to the left; the last column not padded."""
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    numeric = [bool(rows) and all(isinstance(r[i], int) and not isinstance(r[i], bool)
                                  for r in rows) for i in range(len(header))]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        out = []
        for i, c in enumerate(r):
            last = i == len(r) - 1
            out.append(c.rjust(widths[i]) if numeric[i] else c if last else c.ljust(widths[i]))
        lines.append("  ".join(out).rstrip())
    return lines


def summarize(out: str | os.PathLike[str]) -> SurveySummary:
    """The figures of the survey in ``out`` per package and version, the errors per kind, and
    the wheels per arch (the module says how each is counted)."""
    import pyarrow.compute as pc

    path, fs, root = _checked(out)
    wheels = _read(fs, root, "wheels", ["package", "version", "size", "files", "stored",
                                    "uncompressed", "native", "jit", "devices", "what_if"])
    errors = _read(fs, root, "errors", ["kind", "type"])
    by: dict[tuple[str | None, str | None], list[dict[str, Any]]] = {}
    for row in wheels.to_pylist():
        by.setdefault((row["package"], row["version"]), []).append(row)
    versions = []
    for (package, version), rows in sorted(by.items(), key=lambda kv: (
            _package_key(kv[0][0]), _version_key(kv[0][1]))):
        versions.append(VersionSummary(
            package, version, len(rows), sum(r["size"] or 0 for r in rows),
            sum(r["files"] or 0 for r in rows), sum(r["stored"] or 0 for r in rows),
            sum(r["uncompressed"] or 0 for r in rows), _union(r["native"] for r in rows),
            _union(r["jit"] for r in rows), _devices(rows), _what_if(rows)))
    errs = []
    if errors.num_rows:
        counted = errors.group_by(["kind", "type"]).aggregate([([], "count_all")])
        errs = sorted((ErrorCount(k, t, n) for k, t, n in zip(
            counted.column("kind").to_pylist(), counted.column("type").to_pylist(),
            counted.column("count_all").to_pylist(), strict=True)),
            key=lambda e: (e.kind or "", e.type or ""))
    counts: dict[str, list[int]] = {}
    for col, at in (("native", 0), ("jit", 1)):
        column = wheels.column(col)
        if not wheels.num_rows:
            continue
        # each wheel's list holds an arch once (survey_tables._kinds): values = wheels
        found = pc.value_counts(pc.list_flatten(column))
        for item in found.to_pylist():
            counts.setdefault(item["values"], [0, 0])[at] = item["counts"]
    archs = tuple(ArchCount(a, n, j) for a, (n, j) in sorted(counts.items(),
                                                           key=lambda kv: _arch_key(kv[0])))
    return SurveySummary(path, tuple(versions), tuple(errs), archs)


def _union(lists: Iterable[Sequence[str] | None]) -> tuple[str, ...]:
    found = {a for archs in lists for a in archs or ()}
    return tuple(sorted(found, key=_arch_key))


def _devices(rows: Sequence[Mapping[str, Any]]) -> tuple[DeviceDriver, ...]:
    """Per GPU over the wheels that have a row for it: the worst status, the highest minimum
    driver (None when one of them has none)."""
    seen: dict[str, list[tuple[str, str | None]]] = {}
    for r in rows:
        for d in r["devices"] or ():
            seen.setdefault(d["device"], []).append((d["status"], d["min_driver"]))
    out = []
    for device in sorted(seen, key=_arch_key):
        cells = seen[device]
        status = min((s for s, _ in cells), key=lambda s: _STATUS_RANK.get(s, -1))
        drivers = [m for _, m in cells if m is not None]
        driver = None if len(drivers) < len(cells) else max(drivers, key=_driver_key)
        out.append(DeviceDriver(device, status, driver))
    return tuple(out)


def _what_if(rows: Sequence[Mapping[str, Any]]) -> tuple[WhatIf, ...]:
    """Each GPU set over the wheels that have it, in the order the wheels list them."""
    sets: dict[tuple[str, ...], list[int]] = {}
    for r in rows:
        for w in r["what_if"] or ():
            t = sets.setdefault(tuple(w["gpus"]), [0, 0, 1, 0, 0])
            t[0] += w["kept"]
            t[1] += w["dropped"]
            t[2] &= bool(w["exact"])
            t[3] |= bool(w["refused"])
            t[4] += 1
    return tuple(WhatIf(g, k, d, bool(e), bool(r), n) for g, (k, d, e, r, n) in sets.items())


# -- regressions -------------------------------------------------------------------------------

_PLATFORM = re.compile(r"^(manylinux|musllinux)(?:1|2010|2014|_\d+_\d+)_(.+)$")
_MACOS = re.compile(r"^macosx_\d+_\d+_(.+)$")


def platform_family(platform: str) -> str:
    """A wheel tag's platform part without its version: ``manylinux_2_27_x86_64`` and
    ``manylinux2014_x86_64`` are ``manylinux_x86_64``, ``macosx_11_0_arm64`` is
    ``macosx_arm64``; others (``win_amd64``, ``linux_x86_64``, ``any``) as they are."""
    m = _PLATFORM.match(platform)
    if m:
        return f"{m.group(1)}_{m.group(2)}"
    m = _MACOS.match(platform)
    return f"macosx_{m.group(1)}" if m else platform


def _key(tags: Sequence[str]) -> tuple[str, str]:
    """(interpreter-ABI, platform family) of a wheel's tags, each set joined by ``.``."""
    pythons, platforms = set(), set()
    for tag in tags:
        python, _, rest = tag.partition("-")
        abi, _, platform = rest.partition("-")
        pythons.add(f"{python}-{abi}")
        platforms.add(platform_family(platform))
    return ".".join(sorted(pythons)), ".".join(sorted(platforms))


@dataclass(frozen=True)
class Pair:
    """Two wheels compared: the package's ``old`` and ``new`` versions built for ``python``
    (interpreter-ABI) and ``platform`` (family)."""

    package: str | None
    python: str
    platform: str
    old: str | None
    new: str | None
    old_filename: str
    new_filename: str

    def __str__(self) -> str:
        return (f"{self.package or '-'} {self.old} -> {self.new} ({self.python}, "
                f"{self.platform})")

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "python": self.python, "platform": self.platform,
                "old": self.old, "new": self.new, "old_filename": self.old_filename,
                "new_filename": self.new_filename}


@dataclass(frozen=True)
class Finding:
    """One regression between two consecutive versions: ``kind`` the column it is about
    (``native``, ``jit``, ``min_driver``, ``status``, ``stored``, ``files``), ``change``
    (``dropped``, ``raised``, ``worsened``, ``grew``, ``added``, ``removed``), ``subject`` the
    arch, GPU or library (None for ``stored``), ``before`` and ``after`` the values where there
    are two."""

    package: str | None
    old: str | None
    new: str | None
    python: str
    platform: str
    kind: str
    change: str
    subject: str | None = None
    before: str | int | None = None
    after: str | int | None = None

    @property
    def ratio(self) -> float | None:
        """``after / before`` for the ``stored`` growth."""
        if self.kind != "stored" or not isinstance(self.before, int) or not self.before or \
                not isinstance(self.after, int):
            return None
        return self.after / self.before

    def _values(self) -> str:
        if self.before is None and self.after is None:
            return ""
        text = f"{self.before if self.before is not None else '-'} -> " \
               f"{self.after if self.after is not None else '-'}"
        ratio = self.ratio
        return text if ratio is None else f"{text} (x{ratio:.3f})"

    def __str__(self) -> str:
        what = " ".join(p for p in (self.kind, self.subject or "", self.change) if p)
        values = self._values()
        return (f"{self.package or '-'} {self.old} -> {self.new} ({self.python}, "
                f"{self.platform}): {what}{': ' + values if values else ''}")

    def to_dict(self) -> dict[str, Any]:
        return {"package": self.package, "old": self.old, "new": self.new,
                "python": self.python, "platform": self.platform, "kind": self.kind,
                "change": self.change, "subject": self.subject, "before": self.before,
                "after": self.after, "ratio": self.ratio}


@dataclass(frozen=True)
class Regressions:
    """What :func:`regressions` found: the pairs of wheels compared and the findings, in the
    order of package, platform, interpreter, version."""

    out: str
    package: str | None
    pairs: tuple[Pair, ...]
    findings: tuple[Finding, ...] = field(default=())

    def __str__(self) -> str:
        scope = f" ({self.package})" if self.package else ""
        lines = [f"regressions in {self.out}{scope}: {len(self.pairs)} pair(s) of consecutive "
                 f"versions compared, {len(self.findings)} findings"]
        if self.findings:
            lines.append("")
            lines += _table(["package", "old", "new", "python", "platform", "kind", "change",
                             "subject", "before", "after", "ratio"],
                            [[f.package or "-", f.old or "-", f.new or "-", f.python,
                              f.platform, f.kind, f.change, f.subject or "-",
                              "-" if f.before is None else str(f.before),
                              "-" if f.after is None else str(f.after),
                              "-" if f.ratio is None else f"{f.ratio:.3f}"]
                             for f in self.findings])
        quiet = [p for p in self.pairs if not any(
            (f.package, f.old, f.new, f.python, f.platform) ==
            (p.package, p.old, p.new, p.python, p.platform) for f in self.findings)]
        if quiet:
            lines += ["", "compared, nothing regressed:"]
            lines += [f"  {p}" for p in quiet]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"format": REGRESSIONS_FORMAT, "out": self.out, "package": self.package,
                "pairs": [p.to_dict() for p in self.pairs],
                "findings": [f.to_dict() for f in self.findings]}


def regressions(out: str | os.PathLike[str], package: str | None = None) -> Regressions:
    """What regressed between consecutive versions of each package in the survey in ``out``
    (of ``package`` alone, its name normalized as PEP 503 says, when given): the module says
    which wheels are compared and what a finding is."""
    import pyarrow.compute as pc
    from packaging.utils import canonicalize_name

    path, fs, root = _checked(out)
    wanted = None if package is None else str(canonicalize_name(package))
    wheels = _read(fs, root, "wheels", ["sha256", "package", "version", "filename", "build",
                                        "tags", "stored", "native", "jit", "devices"])
    files = _read(fs, root, "files", ["sha256", "package", "file"])
    if wanted is not None:
        wheels = wheels.filter(pc.equal(wheels.column("package"), wanted))
        files = files.filter(pc.equal(files.column("package"), wanted))
    libraries: dict[str, set[str]] = {}
    for sha, name in zip(files.column("sha256").to_pylist(), files.column("file").to_pylist(),
                         strict=True):
        libraries.setdefault(sha, set()).add(name)
    series: dict[tuple[str | None, str, str], dict[str | None, dict[str, Any]]] = {}
    for row in sorted(wheels.to_pylist(), key=lambda r: (r["build"] or "", r["filename"])):
        python, platform = _key(row["tags"] or ())
        series.setdefault((row["package"], platform, python), {})[row["version"]] = row
    pairs: list[Pair] = []
    findings: list[Finding] = []
    for (pkg, platform, python), by_version in sorted(series.items(), key=lambda kv: (
            _package_key(kv[0][0]), kv[0][1], kv[0][2])):
        order = sorted(by_version, key=_version_key)
        for old_v, new_v in itertools.pairwise(order):
            old, new = by_version[old_v], by_version[new_v]
            pair = Pair(pkg, python, platform, old_v, new_v, old["filename"], new["filename"])
            pairs.append(pair)
            findings += _compared(pair, old, new, libraries.get(old["sha256"], set()),
                                  libraries.get(new["sha256"], set()))
    return Regressions(path, wanted, tuple(pairs), tuple(findings))


def _compared(pair: Pair, old: Mapping[str, Any], new: Mapping[str, Any], old_files: set[str],
              new_files: set[str]) -> list[Finding]:
    def finding(kind: str, change: str, subject: str | None = None, before: Any = None,
                after: Any = None) -> Finding:
        return Finding(pair.package, pair.old, pair.new, pair.python, pair.platform, kind,
                       change, subject, before, after)

    out = []
    for col in ("native", "jit"):
        gone = set(old[col] or ()) - set(new[col] or ())
        out += [finding(col, "dropped", a) for a in sorted(gone, key=_arch_key)]
    before = {d["device"]: d for d in old["devices"] or ()}
    after = {d["device"]: d for d in new["devices"] or ()}
    for device in sorted(before.keys() & after.keys(), key=_arch_key):
        b, a = before[device], after[device]
        if b["min_driver"] is not None and a["min_driver"] is not None and \
                _driver_key(a["min_driver"]) > _driver_key(b["min_driver"]):
            out.append(finding("min_driver", "raised", device, b["min_driver"], a["min_driver"]))
    for device in sorted(before.keys() & after.keys(), key=_arch_key):
        b, a = before[device], after[device]
        if _STATUS_RANK.get(a["status"], -1) < _STATUS_RANK.get(b["status"], -1):
            out.append(finding("status", "worsened", device, b["status"], a["status"]))
    if (new["stored"] or 0) > (old["stored"] or 0):
        out.append(finding("stored", "grew", None, old["stored"] or 0, new["stored"]))
    out += [finding("files", "removed", f) for f in sorted(old_files - new_files)]
    out += [finding("files", "added", f) for f in sorted(new_files - old_files)]
    return out
