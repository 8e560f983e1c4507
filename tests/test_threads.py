"""The reading API from many threads and processes at once (issue 27, point 1), and the lifecycle
of a Binary and its Items (point 7: pickling, close, ``with``).

The stress test reads different libraries at once on many threads, and in process pools (spawn
and fork) that run threads of their own, through every reading entry point, with every map on a
fork pool (``PARALLEL_MIN_BYTES`` 0 and ``FATBINKIT_JOBS=2``, module and environment settings
every thread sees), and compares each result with the serial one computed first. Before the
registry of parallel.py, two maps at once handed each other's work to their workers through one
module global: wrong functions, an IndexError or an AssertionError in most runs.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import pickle
import random
import shutil
import threading
import zipfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from thirdparty import (
    CUPY11_RANDOM,
    CUPY13_RANDOM,
    CUPY102_RANDOM,
    JAX_CUDA12_LINALG,
    JAX_CUDA12_PRNG,
    JAX_CUDA12_SOLVER,
    fetch,
)

import fatbinkit
from fatbinkit import collection, parallel
from fatbinkit.binary import Binary, Check, Item
from fatbinkit.diff import snapshot
from fatbinkit.errors import InputError, InvalidArgumentError
from fatbinkit.formats.cubin import cubin_arch
from fatbinkit.formats.fatbin import DecompressionBudget, EntryKind, build_fatbin, make_entry
from fatbinkit.gate import Rules, gate
from fatbinkit.scan import DeviceCode

LIBRARIES = (JAX_CUDA12_PRNG, JAX_CUDA12_SOLVER, JAX_CUDA12_LINALG, CUPY102_RANDOM,
             CUPY13_RANDOM, CUPY11_RANDOM)
ARCHS = ("sm_75", "sm_90", "sm_120")
KERNEL = "re:Kernel|init_curand"  # some of each library's kernels: a selection per library
THREADS = 8
# Python 3.12+ warns at each fork of a process that runs threads: expected here (fatbinkit.parallel)
pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")


def _check(c: Check) -> tuple[Any, ...]:
    return c.file, str(c), c.verdicts, c.every_image_read


def _total(t: collection.TotalCheck) -> tuple[Any, ...]:
    return t.file, str(t), t.verdicts, tuple(_check(c) for c in t.checks)


#: every reading entry point, its result in a comparable form
READERS: dict[str, Callable[[Path], object]] = {
    "functions": lambda p: fatbinkit.open(p).functions(),
    "summary": lambda p: fatbinkit.open(p).summary(kernels=True).to_dict(),
    "select": lambda p: [it.to_dict() for it in fatbinkit.open(p).select(kernel=KERNEL)],
    "check": lambda p: _check(fatbinkit.open(p).check(ARCHS)),
    "bytes": lambda p: fatbinkit.open(p.read_bytes(), name=p.name).functions(),
    "snapshot": lambda p: snapshot(p).to_dict(),
    "gate": lambda p: gate([p], Rules(max_registers=64, no_spills=True)).to_dict(),
    "collection": lambda p: _total(collection.check(p, ARCHS)),
}
Task = tuple[str, str]  # (reader, path)


def _read(task: Task) -> object:
    name, path = task
    return READERS[name](Path(path))


def _read_on_threads(tasks: list[Task], threads: int) -> list[object]:
    """Each task's result (or the exception it raised), read on ``threads`` threads at once."""
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(_read, t) for t in tasks]
        return [f.exception() or f.result() for f in futures]


def _read_in_a_process(tasks: list[Task]) -> list[object]:
    """In a pool's worker (spawned: fatbinkit imported afresh): maps on pools of their own."""
    parallel.PARALLEL_MIN_BYTES = 0
    os.environ[parallel.JOBS_ENV] = "2"
    return _read_on_threads(tasks, 3)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Paths per entry point: the libraries (and a fatbin built from one's cubins, a file of
    fatbinkit's making) for the per-binary readers; for collection, a wheel of the jax plugin's
    three libraries and a folder of two others."""
    libraries = [fetch(m) for m in LIBRARIES]
    root = tmp_path_factory.mktemp("threads")
    cubins = [c.entry.data() for c in fatbinkit.open(libraries[3]).codes
              if c.entry.header.kind == EntryKind.ELF]
    built = root / "built.fatbin"
    built.write_bytes(build_fatbin([make_entry(EntryKind.ELF, cubin_arch(c), c, compression="zstd")
                                    for c in cubins]))
    folder = root / "folder"
    folder.mkdir()
    for m in (CUPY102_RANDOM, JAX_CUDA12_PRNG):
        shutil.copy(fetch(m), folder / Path(m.member).name)
    wheel = root / "threads-1.0-py3-none-manylinux_2_27_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for m in (JAX_CUDA12_PRNG, JAX_CUDA12_SOLVER, JAX_CUDA12_LINALG):
            zf.write(fetch(m), m.member)
    files = [*libraries, built]
    return {name: [wheel, folder] if name == "collection" else
            files if name in ("functions", "summary", "select", "check", "bytes") else libraries
            for name in READERS}


def test_threads_and_processes_read_different_libraries_at_once(
        inputs: dict[str, list[Path]], monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = [(name, str(p)) for name, paths in inputs.items() for p in paths]
    monkeypatch.setenv(parallel.JOBS_ENV, "1")
    serial = {t: _read(t) for t in tasks}
    assert all(serial.values())

    monkeypatch.setenv(parallel.JOBS_ENV, "2")  # every map on a pool of 2, even on 1 core
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    pooled, calls = parallel._pooled, itertools.count()

    def counted(*args: Any) -> Any:
        next(calls)
        return pooled(*args)

    monkeypatch.setattr(parallel, "_pooled", counted)
    shuffled = random.Random(27).sample(tasks, len(tasks))
    by_process = [shuffled[0::4], shuffled[1::4]]  # a quarter for each process pool
    problems: list[str] = []
    # the fork pool is made and its workers forked before this process starts threads
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as forked, \
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as spawned:
        remote = [(chunk, pool.submit(_read_in_a_process, chunk))
                  for chunk, pool in zip(by_process, (forked, spawned), strict=True)]
        runs = [(shuffled, _read_on_threads(shuffled, THREADS))]
        runs += [(chunk, fut.result()) for chunk, fut in remote]
    for chunk, results in runs:
        for task, got in zip(chunk, results, strict=True):
            if isinstance(got, BaseException):
                problems.append(f"{task}: {type(got).__name__}: {got}")
            elif got != serial[task]:
                problems.append(f"{task}: not the serial result")
    assert not problems, f"{len(problems)} of {sum(len(c) for c, _ in runs)} reads:\n" + \
        "\n".join(problems[:20])
    assert next(calls) >= len(shuffled)  # every read went through a fork pool, at least once
    assert parallel._WORK == {}  # each map's work left the registry with it
    assert not multiprocessing.active_children()


def test_maps_on_threads_get_their_own_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """map_codes itself, on 8 threads at once, each over another library's codes: each call
    gets its own function's results over its own codes, in order."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    codes = {m.name: fatbinkit.open(fetch(m)).codes for m in LIBRARIES}

    def one(name: str) -> bool:
        mine = codes[name]
        got = parallel.map_codes(lambda c: (name, c.offset), mine, jobs=2)
        return got == [(name, c.offset) for c in mine]

    with ThreadPoolExecutor(THREADS) as pool:
        assert list(pool.map(one, [*codes] * 4)) == [True] * len(codes) * 4
    assert parallel._WORK == {}


def _child_maps(path: str) -> None:
    parallel.PARALLEL_MIN_BYTES = 0
    codes = fatbinkit.open(path).codes
    assert parallel.map_codes(lambda c: c.offset, codes, jobs=2) == [c.offset for c in codes]


def test_a_process_forked_while_a_map_forks_can_map(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process the caller forks while another thread holds the registry's lock (forking a
    map's workers) gets a free lock: its own maps do not wait forever."""
    with parallel._LOCK:
        child = multiprocessing.get_context("fork").Process(
            target=_child_maps, args=(str(fetch(JAX_CUDA12_SOLVER)),))
        child.start()
    child.join(60)
    assert child.exitcode == 0


# -- pickling and the lifecycle of a Binary --------------------------------------------------

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _use(binary: Binary, items: tuple[Item, ...]) -> tuple[object, ...]:
    """In a spawned worker: what the pickled Binary and Items read there."""
    return (binary.functions(), binary.summary(kernels=True).to_dict(),
            [(it.to_dict(), it.code.entry.data()) for it in items])


def test_binary_and_item_pickle(tmp_path: Path) -> None:
    path = fetch(CUPY13_RANDOM)
    binary = fatbinkit.open(path)
    items = binary.select()
    again = pickle.loads(pickle.dumps(binary))
    assert again == binary and again is not binary and again.functions() == binary.functions()
    data = fatbinkit.open(path.read_bytes(), name="x.so")  # bytes pickle as bytes
    data_again = pickle.loads(pickle.dumps(data))
    assert data_again == data and data_again.name == "x.so" and data_again.data is not None
    for it in items:  # an Item carries a copy of its payload: it stands alone
        copy = pickle.loads(pickle.dumps(it))
        assert copy == it and copy.to_dict() == it.to_dict()
        assert copy.code.entry.data() == it.code.entry.data()
        assert isinstance(copy.code.entry.stored, bytes)
    code: DeviceCode = pickle.loads(pickle.dumps(binary.codes[0]))
    assert code == binary.codes[0]
    budget = DecompressionBudget.of(None, binary.size)
    budget.charge(100, 0)
    assert repr(pickle.loads(pickle.dumps(budget))) == repr(budget)  # without its lock
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert pool.submit(_use, binary, items[:3]).result() == _use(binary, items[:3])
    # a file changed since: not read again as if it were the same
    copy_path = tmp_path / path.name
    shutil.copy(path, copy_path)
    pickled = pickle.dumps(fatbinkit.open(copy_path))
    with copy_path.open("ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(InputError, match="changed since"):
        pickle.loads(pickled)


def test_close_releases_the_map_and_its_descriptor() -> None:
    path = fetch(CUPY11_RANDOM)
    gc.collect()
    before = _fds()
    binary = fatbinkit.open(path)
    assert _fds() == before + 1  # mmap's own copy of the descriptor
    items = binary.select()
    with fatbinkit.open(path) as other:
        assert _fds() == before + 2 and not other.closed
    assert other.closed and _fds() == before + 1
    binary.close()
    binary.close()  # twice: nothing
    assert _fds() == before and binary.closed and "(closed)" in str(binary)
    for use in (binary.select, binary.summary, binary.functions, lambda: binary.check("sm_90"),
                lambda: binary.extract("/nonexistent"), lambda: binary.map(len, items),
                lambda: pickle.dumps(binary), lambda: pickle.dumps(items[0]),
                items[0].code.entry.data):
        with pytest.raises(InvalidArgumentError, match="closed"):
            use()
    assert [it.to_dict() for it in items] == [it.to_dict() for it in fatbinkit.open(path).select()]


def test_close_with_a_view_held_by_the_caller() -> None:
    """A slice of a payload the caller keeps holds the mapping until it goes: close() does not
    fail for it."""
    path = fetch(CUPY11_RANDOM)
    gc.collect()
    before = _fds()
    binary = fatbinkit.open(path)
    head = binary.codes[0].entry.stored[:16]
    kept = bytes(head)
    binary.close()
    assert binary.closed and _fds() == before + 1 and bytes(head) == kept
    del head
    gc.collect()
    assert _fds() == before


def test_close_of_bytes_frees_the_callers_buffer() -> None:
    data = bytearray(fetch(CUPY11_RANDOM).read_bytes())
    binary = fatbinkit.open(data)
    with pytest.raises(BufferError):  # its views are exports of the caller's bytearray
        data.extend(b"\0")
    binary.close()
    data.extend(b"\0")
    with pytest.raises(InvalidArgumentError, match="closed"):
        binary.functions()


def test_a_binary_closed_by_another_thread_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """close() on one thread while another reads: the reader gets the closed error, not a
    ValueError of a released memoryview."""
    binary = fatbinkit.open(fetch(CUPY11_RANDOM))
    started, closed = threading.Event(), threading.Event()
    monkeypatch.setenv(parallel.JOBS_ENV, "1")

    def slow(code: DeviceCode) -> bytes:
        started.set()
        closed.wait(10)
        return code.entry.data()

    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(binary.map, slow, binary.select())
        started.wait(10)
        try:
            binary.close()
        finally:
            closed.set()
        with pytest.raises(InvalidArgumentError, match="closed"):
            reading.result()
