"""Fleet surveys: many wheels read on an engine that schedules (Dask, or a local process pool),
their figures written as Parquet tables (:mod:`fatbinkit.survey_tables`).

``fatbinkit survey SOURCE... -o OUT --engine local|dask://HOST:PORT``::

    import fatbinkit.survey
    wheels = fatbinkit.survey.plan(["https://pypi.org/simple/"], package="nvidia-curand")
    done = fatbinkit.survey.survey(wheels, "out/", engine="dask://scheduler:8786")

1. **Plan**: the wheels of the sources (a folder, a glob, a wheel, an fsspec URL such as
   ``s3://bucket/wheels/`` or ``https://host/x.whl``, or a PEP 691 simple index's project page),
   each with its name, size and SHA-256 (the index's; else hashed from the bytes, streamed),
   filtered by package and version, before anything is read.
2. **One task per wheel** (:func:`survey_wheel`): pure and idempotent. A local wheel is read
   where it is; a remote one is copied to a temporary file in 1 MiB steps (the worker's memory
   does not grow with the wheel) and its SHA-256 checked. Its members are then read one at a
   time (:func:`fatbinkit.report.report`'s reading: ``ls --summary``, ``check --min-driver``
   and the what-if of ``prune``, once). Its rows go to one Parquet part per table, named by the
   wheel's SHA-256, each written whole (a temporary name, then renamed; ``wheels`` or
   ``errors`` last: the mark that the wheel is done). A retry overwrites; ``resume`` skips
   wheels whose mark is there.
3. **The engine schedules, fatbinkit does not**: ``dask://HOST:PORT`` submits the tasks to a
   Dask scheduler (``distributed``'s futures, ``retries=``; a worker lost mid-task has its task
   run again elsewhere), ``local`` to a process pool on this machine (a failed task is submitted
   again, up to ``retries`` times; the tasks of a process that dies go to a new pool). A
   corrupt wheel is an ``errors`` row (``input``), not a failed run; a task that still fails
   after its retries is one too (``engine``).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import FatbinkitError, InputError, InvalidArgumentError, NoDeviceCodeError, OutputError
from .progress import Progress, reporter
from .survey_tables import TABLES, rows, schema, wheel_name

__all__ = ["Outcome", "Survey", "Wheel", "done", "plan", "survey", "survey_wheel"]

_CHUNK = 1 << 20  # bytes copied or hashed at a time
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Wheel:
    """One wheel of a plan: where it is read from (a path or an fsspec URL), its file name, size
    and SHA-256 (hex)."""

    url: str
    filename: str
    size: int
    sha256: str

    def __str__(self) -> str:
        return f"{self.filename} ({self.size} bytes, sha256 {self.sha256[:12]})"


@dataclass(frozen=True)
class Outcome:
    """What one task did: the wheel, ``error`` (None: its rows were written), the error's kind
    (``input``: the wheel cannot be read; ``engine``: the run failed it after ``attempts``),
    the rows written per table, the bytes read."""

    wheel: Wheel
    rows: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None
    kind: str | None = None
    attempts: int = 1
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.error is not None:
            return f"{self.wheel.filename}: {self.kind} error: {self.error}"
        counts = ", ".join(f"{n} {t}" for t, n in self.rows.items() if n)
        return f"{self.wheel.filename}: {counts or 'no rows'} in {self.seconds:.1f} s"


@dataclass(frozen=True)
class Survey:
    """What :func:`survey` did: the output folder, the wheels planned, those read now, those a
    resumed run found done, and the outcomes (one per wheel read)."""

    out: str
    planned: int
    skipped: int
    outcomes: tuple[Outcome, ...] = field(repr=False)

    @property
    def errors(self) -> int:
        return sum(o.error is not None for o in self.outcomes)

    @property
    def bytes_read(self) -> int:
        return sum(o.wheel.size for o in self.outcomes)

    def __str__(self) -> str:
        return (f"surveyed {len(self.outcomes)} of {self.planned} wheels into {self.out} "
                f"({self.skipped} done before, {self.errors} errors, {self.bytes_read} bytes)")


# -- plan --------------------------------------------------------------------------------------

def plan(sources: Iterable[str | os.PathLike[str]], *, package: str | None = None,
         versions: str | None = None, progress: Progress = None) -> list[Wheel]:
    """The wheels of ``sources``, sorted by package, version and file name, each once (by
    SHA-256). ``package`` keeps one package's wheels (its name normalized as PEP 503 says);
    ``versions`` those whose version a PEP 440 specifier set admits (``">=2.13,<2.15"``). A PEP
    691 index (a URL whose path has ``/simple``) needs ``package`` unless the URL names the
    project's page."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.utils import canonicalize_name

    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    wanted = None if package is None else canonicalize_name(package)
    try:
        spec = None if versions is None else SpecifierSet(versions)
    except InvalidSpecifier as e:
        raise InvalidArgumentError(f"versions: not a PEP 440 specifier set: {versions!r}") from e
    found: list[tuple[str, str, int, str | None]] = []  # url, filename, size, sha256 if known
    for source in sources:
        found += _listed(os.fspath(source), wanted)
    kept = []
    for url, filename, size, digest in found:
        name = wheel_name(filename)
        if wanted is not None and (name is None or name.package != wanted):
            continue
        if spec is not None and (name is None or not spec.contains(name.version,
                                                                    prereleases=True)):
            continue
        kept.append((url, filename, size, digest))
    wheels = []
    with reporter(progress, len(kept), "wheel", "hashing wheels") as report, \
            ThreadPoolExecutor(4) as pool:  # hashlib lets go of the GIL: files hash at once
        hashed = [None if digest else pool.submit(_sha256, url)
                  for url, _, _, digest in kept]
        for (url, filename, size, digest), pending in zip(kept, hashed, strict=True):
            wheels.append(Wheel(url, filename, size,
                                digest or (pending.result() if pending else "")))
            report.advance(1, filename)
    unique = {w.sha256: w for w in wheels}
    return sorted(unique.values(), key=_order)


def _order(w: Wheel) -> tuple[Any, ...]:
    from packaging.version import InvalidVersion, Version

    name = wheel_name(w.filename)
    if name is None:
        return ("", (), w.filename)
    try:
        version: Any = (0, Version(name.version))
    except InvalidVersion:
        version = (1, name.version)
    return (name.package, version, w.filename)


def _remote(source: str) -> bool:
    return "://" in source and not source.startswith("file://")


def _listed(source: str, package: str | None) -> list[tuple[str, str, int, str | None]]:
    """The wheels one source names: (url, file name, size, SHA-256 when the source says it)."""
    if _remote(source):
        if source.startswith(("http://", "https://")) and "/simple" in source:
            return _index(source, package)
        return _fsspec_listed(source)
    if any(c in source for c in "*?["):
        paths = sorted(glob.glob(source, recursive=True))
    else:
        path = Path(source)
        if not path.exists():
            raise InputError(f"{source}: no such file or folder")
        paths = sorted(str(p) for p in path.rglob("*.whl")) if path.is_dir() else [source]
    out: list[tuple[str, str, int, str | None]] = []
    for p in paths:
        if (Path(p).is_file() and not Path(p).is_symlink()) or p == source:
            try:
                out.append((os.path.abspath(p), os.path.basename(p), os.stat(p).st_size,
                            None))  # absolute: a worker may run elsewhere in the tree
            except OSError as e:
                raise InputError(f"cannot read {p}: {e.strerror or e}") from e
    return out


def _fsspec_listed(source: str) -> list[tuple[str, str, int, str | None]]:
    fs, path = _filesystem(source)
    try:
        if any(c in path for c in "*?["):
            paths = sorted(fs.glob(path))
        elif fs.isdir(path):
            paths = sorted(p for p in fs.find(path) if p.endswith(".whl"))
        else:
            paths = [path]
        return [(fs.unstrip_protocol(p), p.rpartition("/")[2], int(fs.size(p)), None)
                for p in paths]
    except FatbinkitError:
        raise
    except (OSError, ValueError) as e:
        raise InputError(f"cannot list {source}: {e}") from e


def _index(url: str, package: str | None) -> list[tuple[str, str, int, str | None]]:
    """A PEP 691 simple index's files for ``package`` (or the project page ``url`` names):
    their URLs, names, sizes (PEP 700) and SHA-256 hashes, wheels only, yanked ones left."""
    import json
    import urllib.parse
    import urllib.request

    base = url if url.endswith("/") else url + "/"
    page = base if package is None else urllib.parse.urljoin(base, f"{package}/")
    if package is None and base.rstrip("/").endswith("/simple"):
        raise InvalidArgumentError(f"{url} is an index: say which package (--package)")
    request = urllib.request.Request(page, headers={"Accept": _SIMPLE_JSON})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            kind = response.headers.get("Content-Type", "")
            body = response.read()
    except OSError as e:
        raise InputError(f"cannot read the index page {page}: {e}") from e
    if _SIMPLE_JSON not in kind:
        raise InputError(f"{page} did not answer in PEP 691's JSON ({kind or 'no type'})")
    try:
        files = json.loads(body)["files"]
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"{page}: not a PEP 691 project page: {e}") from e
    out = []
    for f in files:
        name = f.get("filename", "")
        if not name.endswith(".whl") or f.get("yanked"):
            continue
        digest = (f.get("hashes") or {}).get("sha256")
        size = f.get("size")
        link = urllib.parse.urljoin(page, f["url"])
        if size is None:
            fs, path = _filesystem(link)
            size = fs.size(path)
        out.append((link, name, int(size), digest))
    return out


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as e:
        raise InvalidArgumentError(f"{url}: reading URLs needs fsspec: pip install "
                                   "'fatbinkit[survey]'") from e
    try:
        return fsspec.core.url_to_fs(url)  # type: ignore[no-any-return]
    except (ValueError, ImportError) as e:
        raise InvalidArgumentError(f"{url}: {e}") from e


def _sha256(url: str) -> str:
    h = hashlib.sha256()
    with _opened(url) as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _opened(url: str) -> Iterator[Any]:
    try:
        if _remote(url):
            fs, path = _filesystem(url)
            with fs.open(path, "rb") as f:
                yield f
        else:
            with open(url, "rb") as f:
                yield f
    except FatbinkitError:
        raise
    except OSError as e:
        raise InputError(f"cannot read {url}: {e.strerror or e}") from e


# -- one wheel ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Options:
    keep: tuple[tuple[str, ...], ...] | None
    kernels: bool


def survey_wheel(wheel: Wheel, out: str | os.PathLike[str], *,
                 keep: Sequence[Sequence[str]] | None = None, kernels: bool = False) -> Outcome:
    """Survey one wheel into ``out``: its rows of each table, one part each named by its
    SHA-256. Pure and idempotent (run again, it writes the same parts). A wheel that cannot be
    read (corrupt, not a wheel) gives an ``errors`` row and returns its :class:`Outcome`; one that
    cannot be fetched (the disk, the network, a SHA-256 that does not match) raises, for the
    engine to retry."""
    return _task(wheel, os.fspath(out), _Options(
        None if keep is None else tuple(tuple(s) for s in keep), kernels))


def _task(wheel: Wheel, out: str, options: _Options) -> Outcome:
    """The task an engine runs (a module-level function: it pickles by name)."""
    start = time.monotonic()
    with _local_copy(wheel) as path:
        try:
            tables = _rows(wheel, path, options)
        except NoDeviceCodeError:
            tables = _rows_empty(wheel, path)
        except InputError:
            raise  # the disk: the engine retries
        except FatbinkitError as e:
            outcome = Outcome(wheel, {"errors": 1}, str(e), "input", 1,
                              time.monotonic() - start)
            _write(out, wheel, {"errors": [_error_row(wheel, outcome, type(e).__name__)]})
            return outcome
    _write(out, wheel, tables)
    return Outcome(wheel, {t: len(r) for t, r in tables.items()},
                   seconds=time.monotonic() - start)


@contextlib.contextmanager
def _local_copy(wheel: Wheel) -> Iterator[str]:
    """A local path of the wheel's bytes, their SHA-256 checked; a remote wheel copied into a
    temporary file (removed after) in :data:`_CHUNK` steps."""
    if not _remote(wheel.url):
        yield wheel.url
        return
    with tempfile.TemporaryDirectory(prefix="fatbinkit-survey-") as tmp:
        path = os.path.join(tmp, os.path.basename(wheel.filename) or "wheel.whl")
        h = hashlib.sha256()
        with _opened(wheel.url) as src, open(path, "wb") as dst:
            while chunk := src.read(_CHUNK):
                h.update(chunk)
                dst.write(chunk)
        if h.hexdigest() != wheel.sha256:
            raise InputError(f"{wheel.url}: SHA-256 {h.hexdigest()} is not the planned "
                             f"{wheel.sha256}")
        yield path


def _head(wheel: Wheel) -> dict[str, Any]:
    name = wheel_name(wheel.filename)
    return {"sha256": wheel.sha256, "package": None if name is None else name.package,
            "version": None if name is None else name.version, "filename": wheel.filename,
            "url": wheel.url, "build": None if name is None else name.build,
            "tags": [] if name is None else list(name.tags), "size": wheel.size}


def _rows(wheel: Wheel, path: str, options: _Options) -> dict[str, list[dict[str, Any]]]:
    from . import vendors
    from .diff import FIELDS, images_read
    from .report import report

    r = report(path, keep=options.keep, jobs=1)
    found = None
    if options.kernels:
        assert r.snapshot is not None
        found = []
        for lib in r.snapshot.libraries:
            # lib.kernels are the images' rows in order: each with its image's digest
            digests = [d for *_, items, d in images_read(lib) for _ in items]
            for k, digest in zip(lib.kernels, digests, strict=True):
                found.append({"file": lib.name, "kind": vendors.target_kind(k.arch),
                              "arch": k.arch, "module": k.module, "kernel": k.kernel,
                              "entry": k.entry, **{f: getattr(k, f) for f in FIELDS},
                              "image": digest.hex()})
    return rows(r.to_dict(), _head(wheel), found)


def _rows_empty(wheel: Wheel, path: str) -> dict[str, list[dict[str, Any]]]:
    """A wheel with no device code: its row, with nothing in it (``other_files``: its members
    unpacked, as a report counts the files that are not libraries)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            others = sum(i.file_size for i in zf.infolist() if not i.is_dir())
    except (OSError, zipfile.BadZipFile):  # not a zip: a file of its own
        others = wheel.size
    return {"wheels": [{**_head(wheel), "files": 0, "modules": 0, "entries": 0, "stored": 0,
                        "uncompressed": 0, "other_files": others, "native": [], "jit": [],
                        "archs": [], "devices": [], "what_if": [], "tool": _tool()}],
            "files": [], "kernels": [], "errors": []}


def _tool() -> str:
    from . import __version__

    return f"fatbinkit {__version__}"


def _error_row(wheel: Wheel, outcome: Outcome, kind_of: str) -> dict[str, Any]:
    head = _head(wheel)
    return {**{k: head[k] for k in ("sha256", "package", "version", "filename", "url")},
            "kind": outcome.kind, "type": kind_of, "error": outcome.error,
            "attempts": outcome.attempts}


def _write(out: str, wheel: Wheel, tables: Mapping[str, list[dict[str, Any]]]) -> None:
    """Each table's part of one wheel, whole: written under a temporary name, then renamed;
    the mark of a finished wheel (its ``wheels`` part, or its ``errors`` part) last. A table
    the wheel has no rows for gets no part (an old one is removed: a retry's result stands)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, root = _out(out)
    order = [t for t in TABLES if t not in ("wheels", "errors")] + ["errors", "wheels"]
    for table in order:
        target = f"{root}/{table}/{wheel.sha256}.parquet"
        found = tables.get(table) or []
        if not found:  # an old part of a table this result has no rows for goes
            with contextlib.suppress(FileNotFoundError):
                if fs.exists(target):
                    fs.rm(target)
            continue
        data = pa.Table.from_pylist(list(found), schema=schema(table))
        tmp = f"{root}/{table}/.{wheel.sha256}.{os.getpid()}.tmp"
        try:
            fs.makedirs(f"{root}/{table}", exist_ok=True)
            with fs.open(tmp, "wb") as f:
                pq.write_table(data, f, compression="zstd")
            fs.mv(tmp, target)
        except OSError as e:
            with contextlib.suppress(OSError):
                fs.rm(tmp)
            raise OutputError(f"cannot write {target}: {e.strerror or e}") from e


def _out(out: str) -> tuple[Any, str]:
    if _remote(out):
        fs, path = _filesystem(out)
        return fs, path.rstrip("/")
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem(), os.path.abspath(out)


def done(out: str | os.PathLike[str]) -> set[str]:
    """The SHA-256 of each wheel ``out`` holds a finished part for: a ``wheels`` part, or an
    ``errors`` part of an ``input`` error (read again, the wheel fails the same); an ``engine``
    error is tried again."""
    import pyarrow.parquet as pq

    fs, root = _out(os.fspath(out))
    found: set[str] = set()
    for table in ("wheels", "errors"):
        try:
            names = fs.ls(f"{root}/{table}", detail=False) if fs.isdir(f"{root}/{table}") else []
        except OSError as e:
            raise InputError(f"cannot read {root}/{table}: {e}") from e
        for name in names:
            base = name.rpartition("/")[2]
            if base.startswith(".") or not base.endswith(".parquet"):
                continue
            sha = base[: -len(".parquet")]
            if table == "errors":
                with fs.open(name, "rb") as f:
                    if "engine" in pq.read_table(f, columns=["kind"]).column("kind").to_pylist():
                        continue
            found.add(sha)
    return found


# -- engines -----------------------------------------------------------------------------------

def survey(sources: Iterable[str | os.PathLike[str]] | Sequence[Wheel],
           out: str | os.PathLike[str], *, engine: str = "local", resume: bool = False,
           keep: Sequence[Sequence[str]] | None = None, kernels: bool = False,
           jobs: int | None = None, retries: int = 2, package: str | None = None,
           versions: str | None = None, progress: Progress = None) -> Survey:
    """Survey the wheels of ``sources`` (or a :func:`plan`'s wheels) into the Parquet tables
    of ``out`` (a folder, or an fsspec URL every worker can write), on ``engine``: ``local`` (a
    process pool of ``jobs`` processes) or ``dask://HOST:PORT`` (a Dask scheduler; its workers
    need fatbinkit installed and ``out`` reachable). ``resume``: wheels ``out`` holds a finished
    part for are not read again. ``keep``: the GPU sets of the what-if (as
    :func:`fatbinkit.report.report`); ``kernels``: the kernels table too. ``retries``: how
    many times a failed task is run again. ``progress``: a step per wheel done."""
    from .parallel import as_jobs

    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    items = list(sources)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise InvalidArgumentError(f"retries is a count (>= 0), not {retries!r}")
    if not isinstance(engine, str) or not (engine == "local" or engine.startswith("dask://")):
        raise InvalidArgumentError(f"engine is 'local' or 'dask://HOST:PORT', not {engine!r}")
    if keep is not None:
        from .report import _gpu_sets

        keep = _gpu_sets(keep)  # refused here, before any task
    wheels: list[Wheel] = [w for w in items if isinstance(w, Wheel)]
    if len(wheels) != len(items) or not items:
        if wheels:
            raise InvalidArgumentError("sources are paths and URLs, or a plan's wheels, not both")
        wheels = plan([w for w in items if not isinstance(w, Wheel)], package=package,
                      versions=versions)
    out = os.fspath(out)
    fs, root = _out(out)
    try:
        fs.makedirs(root, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot make {out}: {e.strerror or e}") from e
    finished = done(out) if resume else set()
    todo = [w for w in wheels if w.sha256 not in finished]
    options = _Options(None if keep is None else tuple(tuple(s) for s in keep), kernels)
    with reporter(progress, len(todo), "wheel", "surveying wheels") as report:
        tally = [0, 0]  # wheel bytes read, errors

        def advance(outcome: Outcome) -> None:
            tally[0] += outcome.wheel.size
            tally[1] += outcome.error is not None
            report.advance(1, f"{outcome.wheel.filename} ({tally[0] / 1e6:.0f} MB read, "
                              f"{tally[1]} error{'s' * (tally[1] != 1)})")

        if engine == "local":
            outcomes = _local(todo, out, options, as_jobs(jobs), retries, advance)
        else:
            outcomes = _dask(engine[len("dask://"):], todo, out, options, retries, advance)
    return Survey(out, len(wheels), len(wheels) - len(todo),
                  tuple(sorted(outcomes, key=lambda o: _order(o.wheel))))


def _failed(out: str, wheel: Wheel, error: BaseException | str, attempts: int) -> Outcome:
    """A task the engine gave up on: its ``errors`` row (``engine``)."""
    text = error if isinstance(error, str) else (str(error) or type(error).__name__)
    outcome = Outcome(wheel, {"errors": 1}, text, "engine", attempts)
    kind = "KilledWorker" if isinstance(error, str) else type(error).__name__
    _write(out, wheel, {"errors": [_error_row(wheel, outcome, kind)]})
    return outcome


_LOST = 3  # times a task may be lost with a process before it is an error (Dask's default of
# distributed.scheduler.allowed-failures)


def _local(todo: Sequence[Wheel], out: str, options: _Options, jobs: int, retries: int,
           advance: Callable[[Outcome], None]) -> list[Outcome]:
    """The tasks on a process pool of ``jobs``; a failed task is submitted again while it has
    retries left. A process that dies breaks the pool, and the tasks it held go to a new pool:
    a lost process is not a failed task (as on Dask, where a task is given up after it was on
    :data:`_LOST` workers that died)."""
    import multiprocessing
    from concurrent.futures.process import BrokenProcessPool

    outcomes: list[Outcome] = []
    context = multiprocessing.get_context("spawn")  # no state of the caller's threads inherited
    pending = [(w, 0, 0) for w in todo]  # each wheel, its failures and its losses
    while pending:
        with ProcessPoolExecutor(max_workers=min(jobs, len(pending)),
                                 mp_context=context) as pool:
            tries: dict[Future[Outcome], tuple[Wheel, int, int]] = {}
            for wheel, failed, lost in pending:
                tries[pool.submit(_task, wheel, out, options)] = (wheel, failed, lost)
            pending = []
            while tries:
                finished, _ = wait(tries, return_when=FIRST_COMPLETED)
                for f in finished:
                    wheel, failed, lost = tries.pop(f)
                    error = f.exception()
                    if error is None:
                        outcome = f.result()
                    elif isinstance(error, BrokenProcessPool) and lost + 1 < _LOST:
                        pending.append((wheel, failed, lost + 1))  # on the next pool
                        continue
                    elif not isinstance(error, BrokenProcessPool) and failed < retries:
                        try:
                            tries[pool.submit(_task, wheel, out, options)] = \
                                (wheel, failed + 1, lost)
                        except BrokenProcessPool:
                            pending.append((wheel, failed + 1, lost))
                        continue
                    else:
                        outcome = _failed(out, wheel, error, failed + lost + 1)
                    outcomes.append(outcome)
                    advance(outcome)
    return outcomes


def _dask(address: str, todo: Sequence[Wheel], out: str, options: _Options, retries: int,
          advance: Callable[[Outcome], None]) -> list[Outcome]:
    try:
        from distributed import Client, as_completed
    except ImportError as e:
        raise InvalidArgumentError("the dask engine needs distributed: pip install "
                                   "'fatbinkit[survey]'") from e
    outcomes: list[Outcome] = []
    try:
        client = Client(address, timeout=30, set_as_default=False)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as e:
        raise InputError(f"cannot reach the Dask scheduler at {address}: {e}") from e
    # a task's key names the wheel and the run's output and options: two surveys sharing a
    # scheduler share a task only when it writes the same parts (the dashboard groups them by
    # the prefix "fatbinkit-survey")
    run = hashlib.sha256(repr((out, options)).encode()).hexdigest()[:12]
    with client:
        futures = [client.submit(_task, w, out, options, retries=retries, pure=False,
                                 key=f"fatbinkit-survey-{w.sha256[:32]}-{run}") for w in todo]
        wheel_of = {f.key: w for f, w in zip(futures, todo, strict=True)}
        for f in as_completed(futures, loop=client.loop):  # type: ignore[no-untyped-call]
            wheel = wheel_of[f.key]
            if f.status == "finished":
                outcome = f.result()
            else:
                error = f.exception()
                outcome = _failed(out, wheel, error if error is not None else "task lost",
                                  retries + 1)
            outcomes.append(outcome)
            advance(outcome)
    return outcomes
