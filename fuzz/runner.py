"""A fuzz campaign: a worker process makes and runs the mutants, the parent watches it.

Mutant ``i`` of a campaign is a pure function of (seed, target, i), so the worker makes it
itself and the parent makes the same bytes again only when it must keep a reproducer: when the
worker raised something other than :class:`FatbinkitError`, took longer than ``slow`` seconds
twice (run again once: a busy machine stalls an input, not twice),
died (a signal, an abort in native code, the memory limit) or hung past ``hang`` seconds (then it
is killed). The worker is restarted after a death or a hang and the campaign goes on.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import multiprocessing
import random
import resource
import shutil
import signal
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from fatbinkit.errors import FatbinkitError

from .mutate import mutate
from .targets import Target

__all__ = ["Failure", "Report", "campaign", "mutant", "replay"]

HANG = 10.0  # seconds before a worker is killed
SLOW = 2.0  # seconds above which an input is a failure
MEMORY = 4 << 30  # address-space limit of the worker (RLIMIT_AS, soft)


def mutant(target: Target, seeds: Sequence[bytes], seed: int, index: int) -> bytes:
    """Mutant ``index`` of the campaign ``seed`` on ``target``: one to three rounds of
    :func:`fuzz.mutate.mutate` on a seed (one in 32 is a seed as it is)."""
    rng = random.Random(f"{seed}/{target.name}/{index}")
    data = rng.choice(seeds)
    if rng.randrange(32):
        for _ in range(rng.choice((1, 1, 2, 3))):
            data = mutate(rng, data, seeds, target.max_size)
    return data


@dataclass(frozen=True)
class Failure:
    """An input that broke the rule: what happened, and where its reproducer is."""

    index: int
    kind: str  # "exception", "slow", "death" or "hang"
    detail: str
    reproducer: Path

    def __str__(self) -> str:
        last = self.detail.strip().splitlines()[-1] if self.detail.strip() else ""
        return f"input {self.index}: {self.kind}: {last} ({self.reproducer})"


@dataclass
class Report:
    """What a campaign saw: inputs run, outcomes, errors by class, failures, slowest, memory."""

    target: str
    inputs: int = 0
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)
    slowest: float = 0.0
    slowest_index: int = -1
    peak_rss: int = 0  # bytes, the worker or the children it waited for

    @property
    def rate(self) -> float:
        return self.inputs / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "inputs": self.inputs, "seconds": round(self.seconds, 1),
                "rate": round(self.rate, 1), "outcomes": dict(self.outcomes),
                "errors": dict(self.errors.most_common()),
                "failures": [{"index": f.index, "kind": f.kind, "detail": f.detail,
                              "reproducer": str(f.reproducer)} for f in self.failures],
                "slowest_s": round(self.slowest, 3), "slowest_index": self.slowest_index,
                "peak_rss_mb": round(self.peak_rss / 2**20)}

    def __str__(self) -> str:
        outcomes = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items()))
        return (f"{self.target}: {self.inputs} inputs in {self.seconds:.0f} s "
                f"({self.rate:.1f}/s): {outcomes}; {len(self.failures)} failure(s); slowest "
                f"{self.slowest:.2f} s; peak {self.peak_rss / 2**20:.0f} MB")


def _worker(conn: Connection, target: Target, seeds: Sequence[bytes], seed: int,
            memory: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops the campaign
    faulthandler.disable()  # a crash is reported by the parent, not dumped by pytest's handler
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (memory, hard))
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target.name}-"))
    try:
        while (index := conn.recv()) is not None:
            data = mutant(target, seeds, seed, index)
            start = time.perf_counter()
            try:
                target.run(data, work)
                outcome, detail = "ok", ""
            except FatbinkitError as e:
                outcome, detail = "refused", type(e).__name__
            except BaseException:  # every other exception is what the campaign looks for
                outcome, detail = "exception", traceback.format_exc()
            elapsed = time.perf_counter() - start
            rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * 1024
            conn.send((outcome, detail, elapsed, rss))
    finally:
        shutil.rmtree(work, ignore_errors=True)


class _Watched:
    """The worker process and the parent's end of its pipe."""

    def __init__(self, target: Target, seeds: Sequence[bytes], seed: int, memory: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, target, seeds, seed, memory),
                                daemon=True)
        self.proc.start()
        child.close()

    def stop(self, kill: bool = False) -> int | None:
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
        return self.proc.exitcode


def _keep(out: Path, target: Target, seeds: Sequence[bytes], seed: int, index: int, kind: str,
          detail: str) -> Failure:
    data = mutant(target, seeds, seed, index)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{target.name}-{kind}-{hashlib.sha256(data).hexdigest()[:12]}"
    path = out / f"{stem}.bin"
    path.write_bytes(data)
    (out / f"{stem}.txt").write_text(
        f"target {target.name}, campaign seed {seed}, input {index}: {kind}\n"
        f"replay: python -m fuzz --target {target.name} --replay {path}\n\n{detail}\n")
    return Failure(index, kind, detail, path)


def _again(worker: _Watched, index: int, hang: float) -> float | None:
    """How long ``worker`` takes over input ``index`` run a second time (None: it did not
    answer within ``hang``: the caller's next input finds it gone and restarts it)."""
    worker.conn.send(index)
    if not worker.conn.poll(hang):
        return None
    try:
        return float(worker.conn.recv()[2])
    except EOFError:
        return None


def campaign(target: Target, seeds: Sequence[bytes], out: Path, *, seed: int = 0,
             inputs: int | None = None, seconds: float | None = None, hang: float = HANG,
             slow: float = SLOW, memory: int = MEMORY,
             progress: Callable[[Report], None] | None = None) -> Report:
    """Run mutants 0, 1, ... of ``seeds`` through ``target`` until ``inputs`` have run or
    ``seconds`` have passed; reproducers of failures go to ``out``."""
    if not seeds:
        raise ValueError(f"no seeds for target {target.name}")
    report = Report(target.name)
    start = time.monotonic()
    last_progress = start
    worker = _Watched(target, seeds, seed, memory)
    index = 0
    try:
        while (inputs is None or index < inputs) and (
                seconds is None or time.monotonic() - start < seconds):
            worker.conn.send(index)
            if not worker.conn.poll(hang):
                worker.stop(kill=True)
                report.outcomes["hang"] += 1
                report.failures.append(_keep(out, target, seeds, seed, index, "hang",
                                             f"no answer in {hang:.0f} s"))
                worker = _Watched(target, seeds, seed, memory)
            else:
                try:
                    outcome, detail, elapsed, rss = worker.conn.recv()
                except EOFError:
                    code = worker.stop()
                    how = (f"killed by {signal.Signals(-code).name}" if code and code < 0
                           else f"exit status {code}")
                    report.outcomes["death"] += 1
                    report.failures.append(_keep(out, target, seeds, seed, index, "death", how))
                    worker = _Watched(target, seeds, seed, memory)
                else:
                    report.outcomes[outcome] += 1
                    report.peak_rss = max(report.peak_rss, rss)
                    if outcome == "refused":
                        report.errors[detail] += 1
                    elif outcome == "exception":
                        report.failures.append(
                            _keep(out, target, seeds, seed, index, outcome, detail))
                    if elapsed > slow:  # again, to tell a slow input from a stall of the
                        again = _again(worker, index, hang)  # machine (a busy CI runner)
                        if again is not None and again <= slow:
                            elapsed = again
                        else:
                            if again is None:  # hung or died the second time
                                worker.stop(kill=True)
                                worker = _Watched(target, seeds, seed, memory)
                            then = "no answer" if again is None else f"{again:.2f} s"
                            report.failures.append(_keep(out, target, seeds, seed, index,
                                                         "slow", f"{elapsed:.2f} s, then {then}"))
                    if elapsed > report.slowest:
                        report.slowest, report.slowest_index = elapsed, index
            index += 1
            report.inputs = index
            now = time.monotonic()
            report.seconds = now - start
            if progress is not None and now - last_progress >= 1:
                progress(report)
                last_progress = now
    finally:
        worker.stop()
        report.seconds = time.monotonic() - start
    return report


def replay(target: Target, path: Path) -> str:
    """Run ``target`` on the reproducer at ``path`` in this process; what happened."""
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{target.name}-"))
    try:
        target.run(path.read_bytes(), work)
        return "ok"
    except FatbinkitError as e:
        return f"refused: {type(e).__name__}: {e}"
    finally:
        shutil.rmtree(work, ignore_errors=True)
