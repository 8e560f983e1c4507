"""`fatbinkit survey` (issue 34) on a real Dask `LocalCluster` (2 worker processes, 1 thread each)
and on the local engine, over the suite's real wheels:

- rows: each wheel's `wheels` row is `ls --summary --json`'s total and `check --min-driver
  --json`'s verdicts, each library's `files` row `ls --summary --json`'s entry for it; sizes and
  SHA-256 are zipfile's, os.stat's and hashlib's; both engines write the same tables;
- a corrupt wheel is an `errors` row (`input`), a wheel without device code a row with no files;
- a task whose read fails once is retried (`flaky://`, tests/survey_flaky.py), one that keeps
  failing is an `engine` error that `resume` tries again; a worker killed mid-task (`crashy://`)
  loses nothing;
- `resume` reads nothing twice, and exactly what is missing;
- a PEP 691 index served over HTTP: planned with its SHA-256, fetched, checked against it;
- the command line against the cluster's address.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pytest
from thirdparty import CACHE, CURAND13, CURAND130, JAX_CUDA12_PRNG, JAX_ROCM7_PRNG, PTXAS125, fetch

from fatbinkit.survey import Survey, plan, survey, survey_wheel
from fatbinkit.survey_tables import TABLES

distributed = pytest.importorskip("distributed", reason="the dask engine needs the survey extra")
pq = pytest.importorskip("pyarrow.parquet", reason="the tables need the survey extra")

import survey_flaky  # noqa: E402  (imports distributed: after the skip)

T = TypeVar("T")

CUDA = "jax_cuda12_plugin-0.10.2-*linux*.whl"
ROCM = "jax_rocm7_plugin-0.10.2-*linux*.whl"
NO_DEVICE_CODE = "nvidia_cuda_nvcc_cu12-12.5.82-*linux*.whl"
CORRUPT = "broken_wheel-1.0-py3-none-any.whl"
DASK_LIMIT = 180  # seconds any survey may take before its test fails (instead of hanging)


def _cached(pattern: str) -> Path:
    return next((CACHE / "wheels").glob(pattern))


def _place(source: Path, folder: Path) -> Path:
    """``source`` in ``folder``, hard-linked (copied across filesystems)."""
    target = folder / source.name
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _within(seconds: float, call: Callable[[], T]) -> T:
    """``call()`` in a daemon thread: the test fails, instead of hanging, when it takes longer
    than ``seconds``."""
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:
            box.append((False, e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"did not finish within {seconds} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _on(cluster: Any, sources: Any, out: Path, **options: Any) -> Survey:
    """``survey`` on ``cluster``, its address as a user types it: ``dask://HOST:PORT``."""
    address = cluster.scheduler_address.removeprefix("tcp://")
    return _within(DASK_LIMIT, lambda: survey(sources, out, engine=f"dask://{address}",
                                              **options))


def _table(out: Path, table: str) -> list[dict[str, Any]]:
    """A table's rows (none when it has no part), in a fixed order."""
    if not (out / table).is_dir():
        return []
    rows: list[dict[str, Any]] = pq.read_table(out / table).to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True))


def _parts(out: Path, table: str) -> set[str]:
    """The wheels (SHA-256) ``table`` has a part for."""
    folder = out / table
    return {p.name.removesuffix(".parquet") for p in folder.glob("*.parquet")} \
        if folder.is_dir() else set()


def _cli(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=timeout)


def _cluster() -> Any:
    """A 2-worker cluster of processes whose workers know ``flaky://`` and ``crashy://``."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=50)
    try:
        # not the default client: survey() must not lean on one being there
        with distributed.Client(cluster, set_as_default=False) as client:
            client.register_plugin(survey_flaky.Register())
    except BaseException:
        cluster.close()
        raise
    return cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """The module's cluster (tests that kill a worker start their own)."""
    survey_flaky.register()  # this process plans through the same protocols
    cluster = _cluster()
    try:
        yield cluster
    finally:
        cluster.close()


@dataclass(frozen=True)
class Fleet:
    """The folder of wheels (``wheels``: by kind) surveyed once on each engine."""

    folder: Path
    wheels: dict[str, Path]
    dask: Path
    local: Path
    on_dask: Survey
    on_local: Survey


@pytest.fixture(scope="module")
def fleet(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    """jax's CUDA 12 and ROCm 7 plugins (device code of both vendors), nvcc 12.5 (no device
    code) and a corrupt wheel (jax's ROCm wheel cut in half: no central directory), surveyed
    with the dask engine and with the local one."""
    for member in (JAX_CUDA12_PRNG, JAX_ROCM7_PRNG, PTXAS125):
        fetch(member)
    root = tmp_path_factory.mktemp("fleet")
    folder = root / "wheels"
    folder.mkdir()
    wheels = {kind: _place(_cached(pattern), folder)
              for kind, pattern in (("cuda", CUDA), ("rocm", ROCM),
                                    ("none", NO_DEVICE_CODE))}
    whole = wheels["rocm"].read_bytes()
    wheels["corrupt"] = folder / CORRUPT
    wheels["corrupt"].write_bytes(whole[: len(whole) // 2])
    on_dask = _on(cluster, [folder], root / "dask", retries=1)
    on_local = _within(DASK_LIMIT, lambda: survey([folder], root / "local", engine="local",
                                                  jobs=2, retries=1))
    return Fleet(folder, wheels, root / "dask", root / "local", on_dask, on_local)


@pytest.fixture(scope="module")
def oracle(fleet: Fleet) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per wheel with device code: `ls --summary --json` and `check --min-driver --json`."""
    found = {}
    for kind in ("cuda", "rocm"):
        path = fleet.wheels[kind]
        ls, check = _cli("ls", path, "--summary", "--json"), \
            _cli("check", path, "--min-driver", "--json")
        assert ls.returncode == 0, ls.stderr
        assert check.returncode in (0, 1), check.stderr
        found[kind] = (json.loads(ls.stdout), json.loads(check.stdout))
    return found


def _archs(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """``ls --summary --json``'s archs, the fields a survey keeps."""
    return [{"kind": a["kind"], "arch": a["arch"], "entries": a["entries"],
             "stored": a["stored"], "uncompressed": a["uncompressed"],
             "compression": list(a["compression"]),
             "ptx_versions": list(a.get("ptx_versions") or [])} for a in summary["archs"]]


def test_plan_names_each_wheel_by_its_bytes(fleet: Fleet) -> None:
    """plan() lists every wheel of the folder, the corrupt one too, with os.stat's size and
    hashlib's SHA-256 of its bytes; the survey planned those and named its parts by them."""
    wheels = plan([fleet.folder])
    assert {w.filename: (w.url, w.size, w.sha256) for w in wheels} == {
        p.name: (str(p), p.stat().st_size, _sha256(p)) for p in fleet.wheels.values()}
    assert fleet.on_dask.planned == fleet.on_local.planned == 4
    assert fleet.on_dask.skipped == fleet.on_local.skipped == 0
    sha = {kind: _sha256(p) for kind, p in fleet.wheels.items()}
    for out in (fleet.dask, fleet.local):
        assert _parts(out, "wheels") == {sha["cuda"], sha["rocm"], sha["none"]}
        assert _parts(out, "files") == {sha["cuda"], sha["rocm"]}
        assert _parts(out, "errors") == {sha["corrupt"]}
        assert not _parts(out, "kernels")  # not asked for


def test_wheel_rows_are_ls_summary_and_check_min_driver(
        fleet: Fleet, oracle: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Each wheel's row (dask engine) holds `ls --summary --json`'s total, field by field, and
    `check --min-driver --json`'s verdict and minimum driver for every GPU it lists (every GPU
    check says works among them); its size, members and name are os.stat's, zipfile's and the
    file name's."""
    rows = {r["filename"]: r for r in _table(fleet.dask, "wheels")}
    assert set(rows) == {fleet.wheels[k].name for k in ("cuda", "rocm", "none")}
    for kind, (ls, check) in oracle.items():
        path = fleet.wheels[kind]
        row = rows[path.name]
        total = ls["total"] or ls["files"][0]
        assert (row["sha256"], row["url"], row["size"]) == (
            _sha256(path), str(path), path.stat().st_size)
        assert (row["package"], row["version"]) == (
            {"cuda": "jax-cuda12-plugin", "rocm": "jax-rocm7-plugin"}[kind], "0.10.2")
        assert row["files"] == len(ls["files"]) == 3
        assert {k: row[k] for k in ("modules", "entries", "stored", "uncompressed")} == \
            {k: total[k] for k in ("modules", "entries", "stored", "uncompressed")}
        assert row["archs"] == _archs(total)
        assert set(row["jit"]) == {a["arch"] for a in total["archs"] if a["kind"] == "ptx"}
        assert set(row["native"]) == {a["arch"] for a in total["archs"] if a["kind"] != "ptx"}
        with zipfile.ZipFile(path) as zf:
            libraries = {f["file"] for f in ls["files"]}
            assert row["other_files"] == sum(i.file_size for i in zf.infolist()
                                             if not i.is_dir() and i.filename not in libraries)
        verdicts = check["min_driver"]
        devices = {d["device"]: (d["status"], d["min_driver"]) for d in row["devices"]}
        assert devices == {d: (verdicts[d]["status"], verdicts[d]["min_driver"])
                           for d in devices}
        assert {d for d, v in verdicts.items() if v["status"] == "works"} <= set(devices)
        assert row["tool"].startswith("fatbinkit ")


def test_no_device_code_is_a_row_with_no_files(fleet: Fleet) -> None:
    """nvcc 12.5's wheel, which `ls --summary` refuses as holding no device code, is a wheels
    row with files == 0, no archs and its members' bytes as other files, and no files rows."""
    path = fleet.wheels["none"]
    ls = _cli("ls", path, "--summary", "--json")
    assert ls.returncode != 0 and "does not contain device code" in ls.stderr
    (row,) = [r for r in _table(fleet.dask, "wheels") if r["filename"] == path.name]
    assert (row["sha256"], row["size"], row["package"], row["version"]) == (
        _sha256(path), path.stat().st_size, "nvidia-cuda-nvcc-cu12", "12.5.82")
    assert (row["files"], row["modules"], row["entries"], row["stored"]) == (0, 0, 0, 0)
    assert row["archs"] == row["devices"] == row["native"] == row["jit"] == []
    with zipfile.ZipFile(path) as zf:
        assert row["other_files"] == sum(i.file_size for i in zf.infolist() if not i.is_dir())
    assert not [r for r in _table(fleet.dask, "files") if r["sha256"] == row["sha256"]]


def test_file_rows_are_ls_summary_files(
        fleet: Fleet, oracle: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Each library's files row holds its `ls --summary --json` entry (modules, entries, bytes,
    archs) and its size as zipfile lists it."""
    rows = _table(fleet.dask, "files")
    for kind, (ls, _) in oracle.items():
        path = fleet.wheels[kind]
        mine = {r["file"]: r for r in rows if r["sha256"] == _sha256(path)}
        package = {"cuda": "jax-cuda12-plugin", "rocm": "jax-rocm7-plugin"}[kind]
        assert sorted(mine) == sorted(f["file"] for f in ls["files"])
        with zipfile.ZipFile(path) as zf:
            for f in ls["files"]:
                row = mine[f["file"]]
                assert {k: row[k] for k in ("modules", "entries", "stored", "uncompressed")} \
                    == {k: f[k] for k in ("modules", "entries", "stored", "uncompressed")}
                assert row["archs"] == _archs(f)
                assert row["size"] == zf.getinfo(f["file"]).file_size
                assert (row["package"], row["version"]) == (package, "0.10.2")


def test_corrupt_wheel_is_an_errors_row(fleet: Fleet) -> None:
    """The wheel cut in half is one errors row (kind input, one attempt), not a failed run:
    both surveys returned, with one error among four outcomes."""
    path = fleet.wheels["corrupt"]
    for done, out in ((fleet.on_dask, fleet.dask), (fleet.on_local, fleet.local)):
        assert len(done.outcomes) == 4 and done.errors == 1
        (error,) = _table(out, "errors")
        assert {k: error[k] for k in ("sha256", "filename", "url", "kind", "attempts")} == {
            "sha256": _sha256(path), "filename": path.name, "url": str(path),
            "kind": "input", "attempts": 1}
        assert (error["package"], error["version"]) == ("broken-wheel", "1.0")
        assert error["error"]
        assert not [r for r in _table(out, "wheels") if r["filename"] == path.name]


def test_engines_write_the_same_tables(fleet: Fleet) -> None:
    """The dask engine and the local one write the same parts, row for row."""
    for table in TABLES:
        assert _parts(fleet.dask, table) == _parts(fleet.local, table)
        assert _table(fleet.dask, table) == _table(fleet.local, table)
    assert [(o.wheel, o.error, o.kind, o.attempts, dict(o.rows)) for o in fleet.on_dask.outcomes] \
        == [(o.wheel, o.error, o.kind, o.attempts, dict(o.rows)) for o in fleet.on_local.outcomes]


def _state(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``out``: its mtime (ns) and bytes."""
    return {str(p.relative_to(out)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(out.rglob("*")) if p.is_file()}


def test_resume_reads_nothing_twice(cluster: Any, fleet: Fleet, tmp_path: Path) -> None:
    """After a complete survey, resume reads nothing (every planned wheel skipped, the corrupt
    one's input error too) and touches no part; with one wheel's part deleted it reads exactly
    that wheel again, whose rows come back as they were, and touches nothing else."""
    out = tmp_path / "out"
    shutil.copytree(fleet.dask, out)
    before = _state(out)
    again = _on(cluster, [fleet.folder], out, resume=True)
    assert (again.outcomes, again.skipped, again.planned) == ((), 4, 4)
    assert _state(out) == before

    sha = _sha256(fleet.wheels["cuda"])
    rows = _table(out, "wheels")
    (out / "wheels" / f"{sha}.parquet").unlink()
    again = _on(cluster, [fleet.folder], out, resume=True)
    assert (again.planned, again.skipped) == (4, 3)
    assert [(o.wheel.sha256, o.error) for o in again.outcomes] == [(sha, None)]
    after = _state(out)
    assert {k: v for k, v in after.items() if sha not in k} == \
        {k: v for k, v in before.items() if sha not in k}
    assert _table(out, "wheels") == rows
    assert _table(out, "files") == _table(fleet.dask, "files")


@pytest.fixture()
def two_wheels(tmp_path: Path) -> Path:
    """A folder ``wheels`` holding jax's CUDA 12 and ROCm 7 plugins (the sibling ``attempts``
    is where tests/survey_flaky.py counts reads)."""
    fetch(JAX_CUDA12_PRNG)
    fetch(JAX_ROCM7_PRNG)
    folder = tmp_path / "wheels"
    folder.mkdir()
    for pattern in (CUDA, ROCM):
        _place(_cached(pattern), folder)
    return folder


def test_a_task_that_fails_once_is_retried(cluster: Any, two_wheels: Path,
                                           tmp_path: Path) -> None:
    """Each wheel's first read in a worker raises ConnectionError: with retries=2 the engine
    runs each task again, the run completes with every wheel's rows and no error, and each
    wheel was read twice in the workers."""
    done = _on(cluster, [f"flaky://{two_wheels}/"], tmp_path / "out", retries=2)
    names = sorted(p.name for p in two_wheels.iterdir())
    assert [o.wheel.filename for o in done.outcomes] == names
    assert [o.error for o in done.outcomes] == [None, None]
    assert sorted(r["filename"] for r in _table(tmp_path / "out", "wheels")) == names
    assert len(_table(tmp_path / "out", "files")) == 6
    assert _table(tmp_path / "out", "errors") == []
    assert [survey_flaky.attempts(two_wheels, n) for n in names] == [2, 2]


def test_an_engine_error_is_read_again_on_resume(cluster: Any, tmp_path: Path) -> None:
    """With retries=0 a read that fails is an errors row of kind engine, one attempt, and the
    wheel has no rows; a resumed survey reads it again (an engine error is not final) and it
    ends in the wheels table, its errors row gone."""
    fetch(JAX_ROCM7_PRNG)
    folder = tmp_path / "wheels"
    folder.mkdir()
    path = _place(_cached(ROCM), folder)
    out = tmp_path / "out"
    done = _on(cluster, [f"flaky://{folder}/"], out, retries=0)
    assert [(o.kind, o.attempts) for o in done.outcomes] == [("engine", 1)]
    (error,) = _table(out, "errors")
    assert {k: error[k] for k in ("sha256", "filename", "kind", "attempts")} == {
        "sha256": _sha256(path), "filename": path.name, "kind": "engine", "attempts": 1}
    assert _table(out, "wheels") == []
    assert survey_flaky.attempts(folder, path.name) == 1

    again = _on(cluster, [f"flaky://{folder}/"], out, retries=2, resume=True)
    assert (again.skipped, [o.error for o in again.outcomes]) == (0, [None])
    assert [r["sha256"] for r in _table(out, "wheels")] == [_sha256(path)]
    assert survey_flaky.attempts(folder, path.name) == 2
    assert _table(out, "errors") == []  # the wheel was read: no error stands for it


def test_a_worker_killed_mid_task_loses_nothing(two_wheels: Path, tmp_path: Path) -> None:
    """Each wheel's first read ends its worker's process (os._exit, as a kill): the nannies
    restart the workers, the scheduler runs the lost tasks again, and the survey completes with
    every wheel's rows, no error, though it allowed no retries (a lost worker is not a failed
    task). Its own cluster: the module's keeps its workers."""
    survey_flaky.register()
    cluster = _cluster()
    try:
        done = _on(cluster, [f"crashy://{two_wheels}/"], tmp_path / "out", retries=0)
    finally:
        cluster.close()
    names = sorted(p.name for p in two_wheels.iterdir())
    assert [(o.wheel.filename, o.error) for o in done.outcomes] == [(n, None) for n in names]
    assert sorted(r["filename"] for r in _table(tmp_path / "out", "wheels")) == names
    assert len(_table(tmp_path / "out", "files")) == 6
    assert _table(tmp_path / "out", "errors") == []
    assert [survey_flaky.attempts(two_wheels, n) for n in names] == [2, 2]


def test_the_local_engine_retries_and_outlives_its_processes(
        two_wheels: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local engine (a process pool): a task whose first read fails is an engine errors row
    with no retry, and run again with one; a process that dies mid-task (os._exit) breaks the
    pool, and its tasks go to a new one with no retry allowed (a lost process is not a failed
    task). Each run ends with every wheel's rows. Each wheel is read twice, or, when a process
    dies, three times at most: the other wheel's task in the broken pool, part-way through its
    second read, is lost with it and run again (which depends on how the two tasks overlap)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import survey_flaky\nsurvey_flaky.register()\n")
    tests = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site), tests, *filter(None, [os.environ.get("PYTHONPATH")])]))
    survey_flaky.register()
    names = sorted(p.name for p in two_wheels.iterdir())

    def run(protocol: str, out: str, retries: int) -> Survey:
        return _within(DASK_LIMIT, lambda: survey(
            [f"{protocol}://{two_wheels}/"], tmp_path / out, engine="local", jobs=2,
            retries=retries))

    none = run("flaky", "no", 0)
    assert [(o.kind, o.attempts) for o in none.outcomes] == [("engine", 1)] * 2
    assert [survey_flaky.attempts(two_wheels, n) for n in names] == [1, 1]
    for protocol, retries in (("flaky", 1), ("crashy", 0)):
        shutil.rmtree(tmp_path / "attempts")
        done = run(protocol, protocol, retries)
        assert [(o.wheel.filename, o.error) for o in done.outcomes] == \
            [(n, None) for n in names], protocol
        assert sorted(r["filename"] for r in _table(tmp_path / protocol, "wheels")) == names
        assert _table(tmp_path / protocol, "errors") == []
        attempts = [survey_flaky.attempts(two_wheels, n) for n in names]
        assert attempts == [2, 2] if protocol == "flaky" else \
            set(attempts) <= {2, 3} and 2 in attempts, (protocol, attempts)


def test_kernel_rows_are_ls_resources(tmp_path: Path) -> None:
    """``kernels=True``: each SASS function of the wheel's libraries is one kernels row whose
    figures are ``ls --resources --json``'s (registers, stack, shared and local memory,
    spills, SASS size), and the rows of one image share its digest; PTX images give their
    kernels' names. Through ``survey_wheel``, the task the engines run."""
    fetch(JAX_CUDA12_PRNG)
    wheel = _cached(CUDA)
    (planned,) = plan([wheel])
    outcome = survey_wheel(planned, tmp_path / "out", kernels=True)
    assert outcome.error is None and outcome.rows["kernels"] > 0
    rows = _table(tmp_path / "out", "kernels")
    fields = ("registers", "stack", "shared", "local", "spill_stores", "spill_loads", "size")
    listed = json.loads(_cli("ls", wheel, "--resources", "--json").stdout)
    expected = sorted((f["file"], e["arch"], fn["name"], fn["entry"],
                       *(fn[k] for k in fields))
                      for f in listed["files"] for e in f["entries"] if e["kind"] == "sass"
                      for fn in e["functions"])
    assert sorted((r["file"], r["arch"], r["kernel"], r["entry"], *(r[k] for k in fields))
                  for r in rows if r["kind"] == "sass") == expected
    ptx = [r for r in rows if r["kind"] == "ptx"]
    assert ptx and all(r["registers"] is None and r["entry"] for r in ptx)
    images = {(r["file"], r["module"], r["arch"]): r["image"] for r in rows}
    assert all(images[(r["file"], r["module"], r["arch"])] == r["image"] for r in rows)
    assert all(re.fullmatch("[0-9a-f]{72}", r["image"]) for r in rows)


# -- a PEP 691 index over HTTP -----------------------------------------------------------------

class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 691 simple index: ``pages`` (path: JSON), ``files`` (path: a file, with ranges)."""

    pages: ClassVar[dict[str, bytes]] = {}
    files: ClassVar[dict[str, Path]] = {}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        if self.path in self.pages:
            data = self.pages[self.path]
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)
            return
        if self.path not in self.files:
            self.send_error(404)
            return
        path = self.files[self.path]
        size = path.stat().st_size
        start, end = 0, size - 1
        asked = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if asked:
            start, end = int(asked[1]), min(int(asked[2] or size - 1), size - 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if body:
            with open(path, "rb") as f:
                f.seek(start)
                left = end - start + 1
                while left > 0 and (chunk := f.read(min(left, 1 << 20))):
                    self.wfile.write(chunk)
                    left -= len(chunk)


@contextmanager
def _index(projects: dict[str, list[tuple[Path, str]]]) -> Iterator[str]:
    """An index of ``projects`` (name: its wheels, each with the SHA-256 the index states) on
    127.0.0.1; its ``/simple/`` URL."""

    class Handler(_Index):
        pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    base = f"http://127.0.0.1:{server.server_address[1]}"
    Handler.files = {f"/files/{p.name}": p for wheels in projects.values() for p, _ in wheels}
    Handler.pages = {f"/simple/{name}/": json.dumps({
        "meta": {"api-version": "1.1"}, "name": name,
        "files": [{"filename": p.name, "url": f"{base}/files/{p.name}",
                   "hashes": {"sha256": digest}, "size": p.stat().st_size}
                  for p, digest in wheels]}).encode() for name, wheels in projects.items()}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{base}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_pep691_index_over_http(tmp_path: Path) -> None:
    """An index page lists cuRAND 10.4.0.35 and 10.4.5.25: plan() with versions >=10.4.5 keeps
    the newer one, with the index's SHA-256 and size; surveyed, it is fetched over HTTP and its
    row is the local file's (but the URL). A wheel whose stated SHA-256 is not its bytes' is an
    engine error after its retries, in the same run."""
    fetch(CURAND130)
    fetch(CURAND13)
    fetch(JAX_ROCM7_PRNG)
    old = _cached("nvidia_curand-10.4.0.35-*linux*.whl")
    new = _cached("nvidia_curand-10.4.5.25-*linux*.whl")
    rocm = _cached(ROCM)
    wrong = hashlib.sha256(b"not these bytes").hexdigest()
    projects = {"nvidia-curand": [(old, _sha256(old)), (new, _sha256(new))],
                "jax-rocm7-plugin": [(rocm, wrong)]}
    with _index(projects) as index:
        wheels = plan([index], package="nvidia-curand", versions=">=10.4.5")
        assert [(w.filename, w.sha256, w.size) for w in wheels] == [
            (new.name, _sha256(new), new.stat().st_size)]
        assert wheels[0].url.startswith(index.removesuffix("simple/"))
        bad = plan([index], package="jax-rocm7-plugin")
        assert [(w.filename, w.sha256) for w in bad] == [(rocm.name, wrong)]
        done = _within(DASK_LIMIT, lambda: survey([*wheels, *bad], tmp_path / "http",
                                                  engine="local", jobs=2, retries=1))
    local = survey_wheel(plan([new])[0], tmp_path / "local")  # the task, on the local file
    (row,) = _table(tmp_path / "http", "wheels")
    (expected,) = _table(tmp_path / "local", "wheels")
    assert row["url"] == wheels[0].url and expected["url"] == str(new)
    assert {**row, "url": None} == {**expected, "url": None}
    assert _table(tmp_path / "http", "files") == _table(tmp_path / "local", "files")
    outcome = {o.wheel: o for o in done.outcomes}
    ok, failed = outcome[wheels[0]], outcome[bad[0]]
    assert (ok.error, ok.rows) == (None, local.rows)

    assert (failed.kind, failed.attempts) == ("engine", 2)
    (error,) = _table(tmp_path / "http", "errors")
    assert (error["sha256"], error["kind"], error["attempts"]) == (wrong, "engine", 2)
    assert "SHA-256" in error["error"] and _sha256(rocm) in error["error"]


# -- the command line --------------------------------------------------------------------------

def test_cli_survey_on_the_cluster(cluster: Any, fleet: Fleet, tmp_path: Path) -> None:
    """`fatbinkit survey DIR -o OUT --engine dask://HOST:PORT` exits 0 though a wheel is
    corrupt (a note names it), prints one summary line, and writes the tables the library
    wrote."""
    address = cluster.scheduler_address.removeprefix("tcp://")
    out = tmp_path / "out"
    proc = _cli("survey", fleet.folder, "-o", out, "--engine", f"dask://{address}",
                timeout=DASK_LIMIT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    *notes, last = proc.stderr.strip().splitlines()
    size = sum(p.stat().st_size for p in fleet.wheels.values())
    assert last == (f"surveyed 4 of 4 wheels into {out} (0 done before, 1 errors, "
                    f"{size} bytes)")
    assert len(notes) == 1 and CORRUPT in notes[0], notes
    for table in TABLES:
        assert _table(out, table) == _table(fleet.dask, table)
