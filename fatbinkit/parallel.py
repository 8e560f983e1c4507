"""Run a function over the device codes of one input on every core; results in input order.

The codes (what :func:`fatbinkit.scan.scan` returns: entries whose payloads are views of the
memory-mapped input, or of the bytes given) are not sent to the workers: each call registers
them, with the function, under a token of its own in a module registry before its fork-context
process pool starts, so each forked worker inherits them and is sent only ``(token, start,
stop)`` ranges; only the results travel back (pickled). Small inputs, ``jobs=1``, platforms
without ``fork`` and calls made inside a worker run in the calling process instead.

Threads and processes: every function of fatbinkit that reads images (``Binary.functions``,
``summary(kernels=True)``, ``select(kernel=...)``, ``check``, :mod:`fatbinkit.diff`,
:mod:`fatbinkit.gate`, :mod:`fatbinkit.collection`) may be called from several threads at once,
and from several processes (a process pool of the caller's: its workers may themselves start
pools, except daemonic ``multiprocessing.Pool`` workers, which run the work in place). Each call
has its own pool and its own registry entry, so calls never see each other's work. The cost:
every call that uses a pool forks its own workers (about 50 ms, and copy-on-write pages of the
caller's memory), and calls from several threads fork one at a time (a lock is held while a
pool's workers are forked, a few milliseconds); ``n`` threads each start ``jobs`` workers, so
threads that each read a library may use ``jobs=1`` (or ``FATBINKIT_JOBS=1``), or leave the
cores to the calls' pools and use few threads.

Forking while other threads run: on Python 3.12 and later ``os.fork`` warns
(``DeprecationWarning``: a child of a multi-threaded process may deadlock on a lock another
thread held at the fork). The results stay right and the workers do not deadlock: a worker
takes no lock another thread may hold: it reads the registry without the registry's lock
(which any forked child re-creates), runs only the work's function on inherited memory, and
imports nothing (the modules fatbinkit's own work uses are imported before the fork). A
function given to :func:`map_codes` (or :meth:`fatbinkit.binary.Binary.map`) runs in such a
child: it must not wait on a lock of the caller's either. The warning is left to the caller's
warning filters (``tests/test_threads.py`` shows the filter that silences it).

Errors: a :class:`~fatbinkit.errors.FatbinkitError` raised by the function in a worker is raised
again in the caller with the same type, message and attributes (``offset``...). The error of the
first failing code in input order wins, as in a serial run: later chunks are cancelled, earlier
ones finish. Workers are joined before :func:`map_codes` returns or raises (and before
:func:`iter_codes`' iterator ends, raises or is closed).

Decompression budget: a worker cannot charge the caller's
:class:`~fatbinkit.formats.fatbin.DecompressionBudget` (it has its own copy of it). :func:`charge`
takes, in the caller and before any work starts, the uncompressed size that each compressed entry
records; the function then decompresses with no budget (each entry is still held to
``MAX_DATA_SIZE`` and to its recorded size, which :meth:`~fatbinkit.formats.fatbin.FatbinEntry.data`
enforces). A bomb is therefore refused before anything is inflated, serial or parallel alike.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import itertools
import mmap
import multiprocessing
import os
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from . import memory
from .device_code import DeviceCode
from .errors import FatbinkitError, InvalidArgumentError
from .formats.codec import DecompressionBudget
from .progress import Progress, check, reporter

if TYPE_CHECKING:
    from .formats.cubin import CubinFunction

__all__ = [
    "JOBS_ENV",
    "PARALLEL_MIN_BYTES",
    "PROGRESS_MIN_BYTES",
    "as_jobs",
    "beside",
    "cgroup_cpus",
    "charge",
    "default_jobs",
    "functions_of",
    "gc_paused",
    "iter_codes",
    "map_codes",
    "payload_bytes",
]

R = TypeVar("R")

#: the environment variable that sets every ``jobs=None`` (processes used): ``FATBINKIT_JOBS=1``
#: runs everything in the calling process
JOBS_ENV = "FATBINKIT_JOBS"

#: below this many payload bytes (uncompressed) one process does the work: a pool costs ~50 ms
PARALLEL_MIN_BYTES = 16 << 20
#: a progress bar (on a terminal) from this many payload bytes: about a second of work
PROGRESS_MIN_BYTES = 256 << 20
#: chunks per worker: small enough to balance uneven cubins, large enough to amortise a task
CHUNKS_PER_JOB = 16
#: chunks per worker submitted ahead of the one whose results come next (iter_codes' memory)
WINDOW_PER_JOB = 3

# (function, codes) of each map in progress, by its token: registered before its pool forks and
# removed once its workers are joined. Written under _LOCK (which is also held while a pool's
# workers fork, so that no fork sees another thread between two writes); read by workers without
# it: a lock another thread held at the fork stays held in the child forever.
_WORK: dict[int, tuple[Callable[[DeviceCode], Any], Sequence[DeviceCode]]] = {}
_LOCK = threading.Lock()
_TOKENS = itertools.count()
_IN_WORKER = False
#: modules the work of fatbinkit's own callers imports in workers (reading cubins and PTX):
#: imported before a fork, once, rather than in every worker (and a module another thread is
#: importing at the fork is left locked in the child). The demangler a kernel filter uses in
#: workers is loaded by the filter itself (:class:`fatbinkit.binary.KernelFilter`): its
#: import runs ``ldconfig`` twice, 25 ms that a read without a filter does not pay
_WORKER_MODULES = (".formats.cubin", ".formats.ptx", ".vendors", ".vendors.cuda.loading",
                   "zstandard", "lz4.block")


@dataclass(frozen=True)
class _Failure:
    """A FatbinkitError raised in a worker, by value: its type, ``args`` and ``__dict__``
    (exceptions pickle as ``type(*args)``, which loses keyword-only attributes such as
    ``FormatError.offset``), plus the worker's traceback text."""

    kind: type[FatbinkitError]
    args: tuple[Any, ...]
    state: dict[str, Any]
    trace: str
    done: list[Any]  # the results of the chunk's codes before the failing one

    @classmethod
    def of(cls, e: FatbinkitError, done: list[Any]) -> _Failure:
        """The error being handled, by value (in the worker's ``except`` clause)."""
        import traceback

        return cls(type(e), e.args, dict(e.__dict__), traceback.format_exc(), done)

    def error(self) -> FatbinkitError:
        """The exception, rebuilt without calling ``__init__`` (which would format it again)."""
        err = self.kind.__new__(self.kind, *self.args)
        err.args = self.args
        err.__dict__.update(self.state)
        err.__cause__ = _RemoteTraceback(self.trace)
        return err


class _RemoteTraceback(Exception):
    """The traceback of an error raised in a worker (shown as the cause of the error)."""

    def __str__(self) -> str:
        return str(self.args[0])


_GC_LOCK = threading.Lock()
_gc_holds = 0  # the calls inside gc_paused, in all threads
_gc_was_on = False  # whether the collector was on when the first of them came in


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a reading makes millions of objects that
    live until it ends (per-kernel rows, image records): each full collection walks every one of
    them, and they come often while objects pile up (24 of them, 0.5 s, in the report of torch
    2.14.1's wheel). Reference counting frees what is not in a cycle meanwhile. The collector is
    on again, if it was when the first came in, when the last call of the process (of any
    thread) leaves (a caller that turns it off meanwhile finds it on again then)."""
    global _gc_holds, _gc_was_on
    with _GC_LOCK:
        if not _gc_holds:
            _gc_was_on = gc.isenabled()
            gc.disable()
        _gc_holds += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_holds -= 1
            if not _gc_holds and _gc_was_on:
                gc.enable()


def default_jobs() -> int:
    """The processes a call with ``jobs=None`` uses: :data:`JOBS_ENV` when set (a whole number,
    at least 1), else the cores this process may use: its CPU affinity, capped by a cgroup CPU
    quota (a container limited to 2 CPUs on a 64-core host gets 2)."""
    text = os.environ.get(JOBS_ENV, "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise InvalidArgumentError(f"{JOBS_ENV}={text!r} is not a number of processes "
                                       "(a whole number, at least 1)")
        return value
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0)) or 1
    else:
        cores = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cores, quota)) if quota is not None else cores


def as_jobs(jobs: int | None) -> int:
    """``jobs`` as a number of processes: None is :func:`default_jobs`; below 1, or not a
    whole number, is an :class:`~fatbinkit.errors.InvalidArgumentError`."""
    if jobs is None:
        return default_jobs()
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InvalidArgumentError(f"jobs must be a whole number of processes, at least 1 "
                                   f"(or None: every core this process may use), not {jobs!r}")
    return jobs


@functools.cache  # read once per process: every map_codes call asks (a wheel: per library)
def cgroup_cpus(root: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup") -> int | None:
    """The CPUs the cgroup CPU quota grants this process, rounded up (None: no quota, or no
    cgroup file readable). cgroup v2: the lowest ``cpu.max`` from this process's group up to the
    root; v1: ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of its ``cpu`` group (the kernel's
    Documentation/admin-guide/cgroup-v2.rst "cpu.max", cgroup-v1/cfs bandwidth)."""
    try:
        with open(own, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    limits: list[int] = []
    for line in lines:
        _, controllers, path = [*line.split(":", 2), "", ""][:3]
        if controllers == "":  # v2: "0::/PATH"
            where = path.strip("/")
            while True:
                text = _read(os.path.join(root, where, "cpu.max"))
                parts = text.split() if text else []
                if len(parts) == 2 and parts[0] != "max" and parts[0].isdigit() \
                        and parts[1].isdigit() and int(parts[1]) > 0:
                    limits.append(-(-int(parts[0]) // int(parts[1])))
                if not where:
                    break
                where = os.path.dirname(where)
        elif "cpu" in controllers.split(","):
            base = os.path.join(root, controllers, path.strip("/"))
            quota, period = (_read(os.path.join(base, f"cpu.cfs_{k}_us")) for k in
                             ("quota", "period"))
            if quota and period and quota.lstrip("-").isdigit() and period.isdigit() \
                    and int(quota) > 0 and int(period) > 0:
                limits.append(-(-int(quota) // int(period)))
    return min(limits) if limits else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, ValueError):
        return None


def payload_bytes(codes: Sequence[DeviceCode]) -> int:
    """The bytes the codes' payloads take once decompressed (the work :func:`map_codes` sizes)."""
    return sum(c.uncompressed or c.stored for c in codes)


def charge(codes: Sequence[DeviceCode], budget: DecompressionBudget | None,
           kinds: Collection[str] | None = None) -> None:
    """Charge ``budget`` with the recorded uncompressed size of every compressed entry among
    ``codes`` (of ``kinds`` only: those the work will read), in entry order, before any is
    inflated (raises :class:`~fatbinkit.errors.DecompressionError` naming the entry that goes
    over). Each entry is charged once per budget, however often it is then read."""
    if budget is None:
        return
    for c in codes:
        if kinds is None or c.kind in kinds:
            c.charge(budget)


def map_codes(fn: Callable[[DeviceCode], R], codes: Sequence[DeviceCode], *,
              jobs: int | None = None, progress: Progress = None,
              desc: str = "reading images") -> list[R]:
    """``[fn(c) for c in codes]``, on ``jobs`` processes (None: :func:`default_jobs`): the
    list of :func:`iter_codes`' results."""
    return list(iter_codes(fn, codes, jobs=jobs, progress=progress, desc=desc))


def iter_codes(fn: Callable[[DeviceCode], R], codes: Sequence[DeviceCode], *,
               jobs: int | None = None, progress: Progress = None,
               desc: str = "reading images") -> Iterator[R]:
    """``fn(c)`` for each of ``codes``, in their order, on ``jobs`` processes (None:
    :func:`default_jobs`), each result yielded as soon as it and those before it are done: the
    caller holds a few chunks of results (``WINDOW_PER_JOB`` per worker), not all of them
    (``ls --resources`` prints libtorch_cuda.so's 144,640 functions as they come).

    ``fn`` may be any callable (a lambda, a closure): workers inherit it by ``fork``.
    ``progress`` (:mod:`fatbinkit.progress`) counts codes done, in chunks: ``True`` shows a bar
    labelled ``desc`` on stderr when the work is long (:data:`PROGRESS_MIN_BYTES`), a callable
    is told of every chunk. Runs in this process when ``jobs`` is 1, the payloads total less
    than :data:`PARALLEL_MIN_BYTES`, there is a single code, ``fork`` is not available, this is
    already a worker, or this is a daemonic process (a ``multiprocessing.Pool`` worker, which
    may not start processes). The arguments are checked at the call; the work starts with the
    first result asked for. An error is raised where its code's result would come (the results
    before it were yielded); closing the iterator early stops the workers.
    """
    jobs = as_jobs(jobs)
    _reading_payloads(codes)
    size = payload_bytes(codes)
    if progress is True and size < PROGRESS_MIN_BYTES:
        progress = None  # about a second of work or less: no bar
    jobs = min(jobs, len(codes))
    check(progress)  # at the call; the report (a bar) starts with the work
    if jobs <= 1 or size < PARALLEL_MIN_BYTES or not _may_fork():
        return _in_place(fn, codes, progress, desc)
    return _pooled(fn, codes, jobs, progress, desc)


def _may_fork() -> bool:
    """Whether this process may start forked workers: not one of fatbinkit's own workers, not
    a daemonic process (a ``multiprocessing.Pool`` worker may not fork), and ``fork`` is
    there."""
    return (not _IN_WORKER and not multiprocessing.current_process().daemon
            and "fork" in multiprocessing.get_all_start_methods())


def _in_place(fn: Callable[[DeviceCode], R], codes: Sequence[DeviceCode], progress: Progress,
              desc: str) -> Iterator[R]:
    with reporter(progress, len(codes), "image", desc) as report:
        if not report.active:
            yield from map(fn, codes)
            return
        for c in codes:
            yield fn(c)
            report.advance()


def _reading_payloads(codes: Sequence[DeviceCode]) -> None:
    """The file the codes' payloads are mapped from gets the kernel's normal advice back: scan
    maps it MADV_RANDOM (a listing touches headers only), which also turns off fault-around, so
    each 4 KiB page of a payload read in full faulted alone (0.3-0.5 s more per 100 MiB stored
    on libtorch_cuda.so's first read). Workers inherit the advice with the mapping."""
    view = codes[0].view if codes else None
    mapped = view.obj if isinstance(view, memoryview) else None
    if isinstance(mapped, mmap.mmap):
        mapped.madvise(mmap.MADV_NORMAL)


def _pooled(fn: Callable[[DeviceCode], R], codes: Sequence[DeviceCode], jobs: int,
            progress: Progress, desc: str) -> Iterator[R]:
    step = max(1, -(-len(codes) // (jobs * CHUNKS_PER_JOB)))
    ranges = [(start, min(start + step, len(codes))) for start in range(0, len(codes), step)]
    for name in _WORKER_MODULES:
        importlib.import_module(name, __package__)
    memory.prepare()  # glibc found here: a worker imports and loads nothing
    with reporter(progress, len(codes), "image", desc) as report:
        with _LOCK:
            token = next(_TOKENS)
            _WORK[token] = (fn, codes)
        pool = None
        try:
            pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"),
                                       initializer=_enter_worker)
            # The workers fork inside the first submit: with the fork start method,
            # ProcessPoolExecutor forks them all at the first submit
            # (_start_executor_manager_thread calls _launch_processes, gh-90622; read in
            # Lib/concurrent/futures/process.py of CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0;
            # 3.10 before that fix forks one per submit) and never later (a worker is replaced
            # only under max_tasks_per_child, which fork refuses; a dead one breaks the pool).
            # Every fork of this pool is therefore in its first submit, made under the lock with
            # this call's work registered, and its workers inherit it; the lock keeps other
            # calls' forks out.
            window = jobs * WINDOW_PER_JOB  # chunks submitted and not yet yielded
            futures: dict[int, Future[list[R] | _Failure]] = {}
            for i in range(len(ranges)):
                while len(futures) < window and i + len(futures) < len(ranges):
                    j = i + len(futures)
                    with _LOCK:
                        futures[j] = pool.submit(_run, token, *ranges[j])
                out = futures.pop(i).result()  # anything but a FatbinkitError is a bug
                if isinstance(out, _Failure):  # the first failing code: what came before it
                    yield from out.done  # is yielded, and later chunks are cancelled
                    raise out.error()
                report.advance(len(out))
                yield from out
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            with _LOCK:
                del _WORK[token]


def _enter_worker() -> None:
    global _IN_WORKER
    _IN_WORKER = True
    memory.keep_freed_heap(_WORKER_HEAP)  # no fresh pages for each inflated image


#: in a worker, allocations up to this size come from the heap, and freed memory up to this
#: size stays in the process: the work is short and its peak is one or two inflated images
_WORKER_HEAP = 256 << 20


def _after_fork_in_child() -> None:
    """Any child forked while a thread held the registry's lock (a worker, or a process the
    caller forks) gets a free one: the thread that held it does not exist there."""
    global _LOCK, _GC_LOCK
    _LOCK = threading.Lock()
    _GC_LOCK = threading.Lock()  # gc_paused's, likewise


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _run(token: int, start: int, stop: int) -> list[Any] | _Failure:
    """In a worker: the function over ``codes[start:stop]`` of the map ``token`` names, or the
    first FatbinkitError. The registry is read without its lock (see ``_WORK``)."""
    work = _WORK.get(token)
    assert work is not None, "map_codes workers are forked after their work is registered"
    fn, codes = work
    out = []
    for i in range(start, stop):
        try:
            out.append(fn(codes[i]))
        except FatbinkitError as e:
            return _Failure.of(e, out)
    return out


# the functions run beside their caller (:func:`beside`), by token: as _WORK
_BESIDE: dict[int, Callable[[], Any]] = {}


@contextlib.contextmanager
def beside(fn: Callable[[], R], *, jobs: int | None = None) -> Iterator[Callable[[], R]]:
    """``fn()`` run in a forked child process while the caller does other work in this one: the
    context gives the call that waits for its result (pickled back; a FatbinkitError raised
    again here, as :func:`map_codes` raises them). In this process instead, when that call is
    made, where :func:`map_codes` would not fork (``jobs`` 1, no ``fork``, a worker, a
    daemonic process) and where another thread runs: ``fn`` may run any code, and a lock
    another thread held at the fork would stay held in the child; and here too if the child
    dies. The child is joined when the context ends (an error in the caller's work waits for
    ``fn`` to finish)."""
    jobs = as_jobs(jobs)
    if jobs <= 1 or not _may_fork() or threading.active_count() > 1:
        yield fn
        return
    with _LOCK:
        token = next(_TOKENS)
        _BESIDE[token] = fn
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                 initializer=_enter_worker) as pool:
            with _LOCK:  # the child forks in the first submit (see _pooled)
                future = pool.submit(_call, token)

            def result() -> R:
                try:
                    out = future.result()
                except BrokenProcessPool:  # the child died (killed for memory): here, then
                    return fn()
                if isinstance(out, _Failure):
                    raise out.error()
                return out  # type: ignore[no-any-return]

            yield result
    finally:
        with _LOCK:
            del _BESIDE[token]


def _call(token: int) -> Any:
    """In the child of :func:`beside`: the function's result, or its FatbinkitError."""
    try:
        return _BESIDE[token]()
    except FatbinkitError as e:
        return _Failure.of(e, [])


def functions_of(codes: Sequence[DeviceCode], *, budget: DecompressionBudget | None = None,
                 jobs: int | None = None, progress: Progress = None,
                 ) -> list[tuple[CubinFunction, ...]]:
    """The functions of every cubin among ``codes`` (what ``cuobjdump -res-usage`` lists), one
    tuple per code in ``codes``' order, empty for codes that are not ELF (PTX, LTO-IR), each
    equal to ``Cubin.from_bytes(code.data()).functions``; on ``jobs`` processes (default:
    every core, see :func:`map_codes`).

    ``budget`` is charged up front, in this process, with the recorded size of every compressed
    cubin (:func:`charge`). A malformed cubin raises its
    :class:`~fatbinkit.errors.FormatError`, the first one in ``codes``' order. For
    ``fatbinkit ls --resources``::

        codes = listed(scan(path))
        for code, functions in zip(codes, functions_of(codes, budget=budget), strict=True):
            ...  # print code, then one line per function
    """
    from . import vendors

    def has(c: DeviceCode) -> bool:
        return c.kind in vendors.of(c).function_kinds

    elves = [c for c in codes if has(c)]
    charge(elves, budget)
    found = iter(map_codes(_functions, elves, jobs=jobs, progress=progress,
                           desc="reading cubins"))
    return [next(found) if has(c) else () for c in codes]


def _functions(code: DeviceCode) -> tuple[CubinFunction, ...]:
    from . import vendors

    return vendors.of(code).functions(code)
