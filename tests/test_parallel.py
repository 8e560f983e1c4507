"""fatbinkit.parallel and its users (parallel.functions_of, compat.image_sets): the parallel path
gives what the serial one gives on real libraries, errors and the decompression budget cross the
process boundary, and no worker outlives a call."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import struct
from pathlib import Path

import pytest
from thirdparty import CUPY12_RANDOM, CURAND13, fetch

import fatbinkit
from fatbinkit import memory, parallel
from fatbinkit.compat import image_sets
from fatbinkit.errors import DecompressionError, FormatError, InvalidArgumentError
from fatbinkit.formats import elf
from fatbinkit.formats.cubin import Cubin, cubin_arch
from fatbinkit.formats.fatbin import DecompressionBudget, EntryKind, build_fatbin, make_entry
from fatbinkit.imagesets import ImageSet, read_image_sets
from fatbinkit.parallel import functions_of
from fatbinkit.scan import DeviceCode, scan

LIBRARIES = [CUPY12_RANDOM, CURAND13]


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small test libraries would run serially: make every map use the pool."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)


def _no_children() -> bool:
    return not multiprocessing.active_children()


@pytest.mark.parametrize("member", LIBRARIES, ids=lambda m: Path(m.member).name)
def test_functions_of_equals_each_cubins_functions(member: object) -> None:
    codes = scan(fetch(member))  # type: ignore[arg-type]
    found = functions_of(codes, jobs=2)
    assert len(found) == len(codes)
    for code, functions in zip(codes, found, strict=True):
        if code.entry.header.kind == EntryKind.ELF:
            expected = Cubin.from_bytes(code.entry.data()).functions
            assert functions == expected
            assert [f.attributes for f in functions] == [f.attributes for f in expected]
        else:
            assert functions == ()
    assert any(found) and _no_children()


@pytest.mark.parametrize("member", LIBRARIES, ids=lambda m: Path(m.member).name)
def test_parallel_equals_serial(member: object) -> None:
    path = fetch(member)  # type: ignore[arg-type]
    codes = scan(path)
    assert functions_of(codes, jobs=2) == functions_of(codes, jobs=1)
    assert image_sets(path, jobs=2) == image_sets(path, jobs=1)
    data = path.read_bytes()  # bytes in memory, not a mapped file: the same
    assert image_sets(data, jobs=2) == image_sets(path, jobs=1)
    assert _no_children()


def test_results_in_input_order_from_several_processes() -> None:
    codes = scan(fetch(CURAND13))
    pids = parallel.map_codes(lambda c: (c.offset, os.getpid()), codes, jobs=2)
    assert [offset for offset, _ in pids] == [c.offset for c in codes]
    assert os.getpid() not in {pid for _, pid in pids}
    assert _no_children()


def test_iter_codes_yields_in_order_as_chunks_finish() -> None:
    """The iterator gives map_codes' results, and its first result comes before most of the
    work is done: a counter shared with the workers shows how many codes ran by then (a window
    of chunks per worker, not all of them)."""
    codes = scan(fetch(CURAND13))
    ran = multiprocessing.get_context("fork").Value("i", 0)

    def fn(code: DeviceCode) -> tuple[int, int]:
        with ran.get_lock():
            ran.value += 1
        return code.offset, os.getpid()

    results = parallel.iter_codes(fn, codes, jobs=2)
    assert ran.value == 0  # nothing runs before the first result is asked for
    first = next(results)
    assert first[0] == codes[0].offset and first[1] != os.getpid()
    chunk = -(-len(codes) // (2 * parallel.CHUNKS_PER_JOB))
    assert ran.value <= 2 * parallel.WINDOW_PER_JOB * chunk < len(codes)
    rest = list(results)
    assert [offset for offset, _ in [first, *rest]] == [c.offset for c in codes]
    assert _no_children()


def test_iter_codes_yields_what_comes_before_an_error_and_stops_when_closed() -> None:
    codes = scan(fetch(CURAND13))
    bad = len(codes) // 2

    def fn(code: DeviceCode) -> int:
        if code.offset == codes[bad].offset:
            raise FormatError("bad entry", offset=code.offset)
        return code.offset

    got = []
    with pytest.raises(FormatError) as err:
        for offset in parallel.iter_codes(fn, codes, jobs=2):
            got.append(offset)
    assert got == [c.offset for c in codes[:bad]] and err.value.offset == codes[bad].offset
    assert _no_children()
    results = parallel.iter_codes(lambda c: c.offset, codes, jobs=2)
    assert next(results) == codes[0].offset
    results.close()  # the caller stops early: the workers are joined
    assert _no_children()


def test_modules_come_as_their_images_are_read() -> None:
    """read_image_sets gives each module as soon as its images are back: the first before
    most images are read (a progress callable counts the chunks done), all of them equal to
    image_sets' modules; check judges them as they come and gives the same rows."""
    path = fetch(CURAND13)
    binary = fatbinkit.open(path)
    done: list[int] = []
    sets = read_image_sets(path, binary.codes, jobs=2, progress=lambda step: done.append(step.done))
    first = next(sets)
    assert max(done, default=0) < len([c for c in binary.codes if c.kind in ("sass", "ptx")]) // 2
    assert (first, *sets) == image_sets(path, jobs=1)
    assert _no_children()
    streamed = binary.check(["sm_80", "sm_90"], jobs=2)
    whole = binary.check(["sm_80", "sm_90"], sets=image_sets(path, jobs=1,
                                                             devices=["sm_80", "sm_90"]))
    assert streamed.rows == whole.rows and streamed.verdicts == whole.verdicts
    assert streamed.every_image_read == whole.every_image_read


def test_a_check_that_fails_while_reading_stops_its_workers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Judging the second module fails while the workers read the rest: the error comes out of
    check and no worker is left; a reader closed after its first module leaves none either."""
    path = fetch(CURAND13)
    binary = fatbinkit.open(path)
    sets = read_image_sets(path, binary.codes, jobs=2)
    next(sets)
    sets.close()
    assert _no_children()
    judged = ImageSet.judged
    seen: list[ImageSet] = []

    def failing(self: ImageSet, *args: object, **kwargs: object) -> object:
        seen.append(self)
        if len(seen) == 2:
            raise FormatError("judging failed")
        return judged(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ImageSet, "judged", failing)
    with pytest.raises(FormatError, match="judging failed"):
        binary.check(["sm_80"], jobs=2)
    assert _no_children()


def test_jobs_1_runs_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("jobs=1 started a pool")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    codes = scan(fetch(CURAND13))
    assert parallel.map_codes(lambda c: os.getpid(), codes, jobs=1) == [os.getpid()] * len(codes)
    assert functions_of(codes, jobs=1) == [
        Cubin.from_bytes(c.entry.data()).functions if c.entry.header.kind == EntryKind.ELF
        else () for c in codes]


def test_a_worker_error_is_the_same_error_in_the_caller() -> None:
    codes = scan(fetch(CURAND13))
    bad = {len(codes) // 2, len(codes) - 1}

    def fn(code: DeviceCode) -> int:
        if codes.index(code) in bad:
            raise FormatError(f"entry {codes.index(code)} is bad", offset=code.offset)
        return code.offset

    with pytest.raises(FormatError) as err:
        parallel.map_codes(fn, codes, jobs=2)
    first = min(bad)  # the first failing entry in input order, as in a serial run
    assert type(err.value) is FormatError and err.value.offset == codes[first].offset
    assert str(err.value) == f"entry {first} is bad (at offset {codes[first].offset:#x})"
    assert _no_children()


def test_a_malformed_cubin_fails_functions_of_as_it_fails_serially() -> None:
    """A cubin whose symbol table links to a missing section, among good ones: the parallel
    call raises the FormatError Cubin.from_bytes raises for it."""
    good = [c.entry.data() for c in scan(fetch(CUPY12_RANDOM))
            if c.entry.header.kind == EntryKind.ELF]
    broken = bytearray(good[0])
    head = elf.file_header(broken)
    symtab = next(s for s in elf.sections(broken, head) if s.name == ".symtab")
    struct.pack_into("<I", broken, head.shoff + symtab.index * head.shentsize + 40, 999)
    with pytest.raises(FormatError) as expected:
        Cubin.from_bytes(bytes(broken))
    cubins = [*good[1:], bytes(broken), *good[1:]]
    blob = build_fatbin([make_entry(EntryKind.ELF, cubin_arch(c), c) for c in cubins])
    with pytest.raises(FormatError) as err:
        functions_of(scan(blob), jobs=2)
    assert type(err.value) is type(expected.value) and str(err.value) == str(expected.value)
    assert err.value.offset == expected.value.offset
    assert _no_children()


def test_the_budget_is_charged_up_front_across_workers() -> None:
    path = fetch(CURAND13)
    codes = scan(path)
    cubins = [c for c in codes if c.entry.header.kind == EntryKind.ELF]
    need = sum(c.entry.header.uncompressed_size for c in cubins if c.entry.compression)
    assert need > 0
    budget = DecompressionBudget(need)
    functions_of(codes, budget=budget, jobs=2)
    assert budget.used == need  # every cubin charged once, in this process
    with pytest.raises(DecompressionError, match="decompression budget"):
        functions_of(codes, budget=DecompressionBudget(need - 1), jobs=2)
    with pytest.raises(DecompressionError, match="decompression budget"):
        image_sets(path, DecompressionBudget(need - 1), jobs=2)  # its PTX is charged too
    assert _no_children()


def test_small_work_and_bad_jobs() -> None:
    codes = scan(fetch(CUPY12_RANDOM))
    assert parallel.map_codes(lambda c: c.offset, codes[:1], jobs=4) == [codes[0].offset]
    assert parallel.map_codes(lambda c: c.offset, (), jobs=4) == []
    from fatbinkit.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError):
        parallel.map_codes(lambda c: c, codes, jobs=0)
    assert parallel.default_jobs() >= 1


def _pids_in_a_pool_worker(path: str) -> tuple[int, list[int]]:
    """In a multiprocessing.Pool worker (daemonic: it may not start processes), map_codes over
    a library big enough for a pool."""
    parallel.PARALLEL_MIN_BYTES = 0
    return os.getpid(), parallel.map_codes(lambda c: os.getpid(), scan(Path(path)), jobs=2)


def test_inside_a_pool_worker_it_runs_in_that_worker() -> None:
    """Users call fatbinkit from their own process pools: it must not try to start one there
    ("daemonic processes are not allowed to have children"), found by the cli fuzz target."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pid, pids = pool.apply(_pids_in_a_pool_worker, (str(fetch(CURAND13)),))
    assert pids and set(pids) == {pid}


# -- how many processes jobs=None means (the kernel's cgroup files, written here by hand) ----------


def _cgroup(tmp_path: Path, own: str, files: dict[str, str]) -> tuple[str, str]:
    """A fake ``/sys/fs/cgroup`` tree and ``/proc/self/cgroup``: (root, own file)."""
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    (tmp_path / "cgroup").write_text(own)
    return str(tmp_path / "fs"), str(tmp_path / "cgroup")


@pytest.mark.parametrize(("own", "files", "cpus"), [
    # cgroup v2 (Documentation/admin-guide/cgroup-v2.rst, cpu.max: "$MAX $PERIOD", "max" = none)
    ("0::/pod/app\n", {"pod/app/cpu.max": "200000 100000"}, 2),
    ("0::/pod/app\n", {"pod/app/cpu.max": "150000 100000"}, 2),  # 1.5 CPUs: rounded up
    ("0::/pod/app\n", {"pod/app/cpu.max": "max 100000", "pod/cpu.max": "300000 100000"}, 3),
    ("0::/pod/app\n", {"pod/app/cpu.max": "400000 100000", "pod/cpu.max": "100000 100000"}, 1),
    ("0::/\n", {"cpu.max": "max 100000"}, None),
    ("0::/pod\n", {}, None),
    # cgroup v1 (Documentation/scheduler/sched-bwc.rst: quota -1 = none)
    ("4:cpu,cpuacct:/docker/x\n", {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "50000",
                                   "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"}, 1),
    ("4:cpu,cpuacct:/docker/x\n", {"cpu,cpuacct/docker/x/cpu.cfs_quota_us": "-1",
                                   "cpu,cpuacct/docker/x/cpu.cfs_period_us": "100000"}, None),
    ("4:memory:/x\n", {}, None),
])
def test_the_cgroup_cpu_quota_is_read_as_the_kernel_documents_it(
        tmp_path: Path, own: str, files: dict[str, str], cpus: int | None) -> None:
    root, own_file = _cgroup(tmp_path, own, files)
    assert parallel.cgroup_cpus(root, own_file) == cpus


def test_jobs_none_is_the_environment_variable_else_the_cpus_this_process_may_use(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    monkeypatch.setattr(parallel, "cgroup_cpus", lambda: None)
    if hasattr(os, "sched_getaffinity"):
        assert parallel.as_jobs(None) == len(os.sched_getaffinity(0))
    monkeypatch.setattr(parallel, "cgroup_cpus", lambda: 1)
    assert parallel.as_jobs(None) == 1  # a quota of one CPU caps the affinity
    monkeypatch.setenv(parallel.JOBS_ENV, "7")
    assert parallel.as_jobs(None) == 7 and parallel.as_jobs(3) == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(parallel.JOBS_ENV, bad)
        with pytest.raises(InvalidArgumentError, match=parallel.JOBS_ENV):
            parallel.as_jobs(None)
    for value in (0, True, 1.5, "2"):
        with pytest.raises(InvalidArgumentError, match="jobs"):
            parallel.as_jobs(value)  # type: ignore[arg-type]


def test_gc_paused_nests_and_restores_across_threads() -> None:
    """The collector is off inside gc_paused, stays off while any call (of any thread) is
    inside, and comes back as it was when the last one leaves: on if it was on, off if the
    caller had turned it off."""
    import gc
    import threading

    assert gc.isenabled()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with parallel.gc_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    with parallel.gc_paused():
        assert not gc.isenabled()
        t.start()
        inside.wait(10)
    assert not gc.isenabled()  # the other thread is still inside
    leave.set()
    t.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with parallel.gc_paused():
            pass
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        gc.enable()


_BESIDE_CHILD = """
import os
import pytest
from fatbinkit import parallel
from fatbinkit.errors import FormatError

with parallel.beside(os.getpid, jobs=2) as result:
    here = os.getpid()
    assert result() != here

def bad():
    raise FormatError("not a fatbin", offset=12)

with parallel.beside(bad, jobs=2) as result, pytest.raises(FormatError) as caught:
    result()
assert caught.value.offset == 12 and "not a fatbin" in str(caught.value)

def dies():  # the child killed (for memory, say): the function runs here instead
    if os.getpid() != here:
        os._exit(9)
    return "here"

with parallel.beside(dies, jobs=2) as result:
    assert result() == "here"
print("ok")
"""


def test_beside_runs_in_a_child_or_in_place() -> None:
    """beside(): the function in a forked child while the caller works (its pid is not the
    caller's), its result pickled back; a FatbinkitError comes back with its type, text and
    attributes; a child that dies leaves the function to this process (in a new process: this
    one may have other tests' threads); in this process with jobs=1, and while another thread
    runs."""
    import subprocess
    import sys
    import threading

    done = subprocess.run([sys.executable, "-c", _BESIDE_CHILD], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
    with parallel.beside(os.getpid, jobs=1) as result:
        assert result() == os.getpid()
    leave = threading.Event()
    t = threading.Thread(target=leave.wait, args=(10,))
    t.start()
    try:
        with parallel.beside(os.getpid, jobs=2) as result:
            assert result() == os.getpid()
    finally:
        leave.set()
        t.join(10)


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (malloc.h, glibc 2.33 and later)."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mapped_apart(_code: object) -> tuple[int, int]:
    """The bytes glibc serves from mappings of their own (``hblkhd``) while a block of just
    under the workers' heap limit is allocated (not touched: no page is made), and this
    process's id. No heap keeps that much free at its top by default (glibc's trim threshold
    moves up to 64 MiB), so by default the block is a mapping of its own."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _Mallinfo2
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    block = libc.malloc(parallel._WORKER_HEAP - (1 << 20))
    assert block
    apart = int(libc.mallinfo2().hblkhd)
    libc.free(block)
    return apart, os.getpid()


@pytest.mark.skipif(memory._glibc() is None or not hasattr(memory._glibc(), "mallinfo2"),
                    reason="glibc 2.33's mallinfo2 is not here")
def test_a_worker_keeps_the_memory_it_frees() -> None:
    """A worker does not give an inflated image's pages back to the kernel and fault them in
    again for the next one (glibc's default above its mmap threshold): a large block comes
    from the heap, which keeps what is freed, not from a mapping of its own, unmapped when
    freed. In this process (not a worker) glibc's default stands."""
    codes = scan(fetch(CURAND13))[:2]
    found = parallel.map_codes(_mapped_apart, codes, jobs=2)
    assert os.getpid() not in {pid for _, pid in found}
    assert all(apart < 64 << 20 for apart, _ in found), found
    assert _mapped_apart(None)[0] >= 200 << 20
    assert _no_children()
