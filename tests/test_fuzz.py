"""The fuzz harness in short, fixed campaigns: every target through mutants 0..N of seed 0, and
the harness itself shown to catch each kind of failure (the long runs: ``make fuzz``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fatbinkit.errors import FormatError
from fuzz.runner import campaign, mutant, replay
from fuzz.seeds import corpus
from fuzz.targets import TARGETS, Target

INPUTS = {"inject": 8, "cli": 120}


@pytest.fixture(scope="module")
def seeds() -> dict[str, list[bytes]]:
    return corpus()


def _pool(target: Target, seeds: dict[str, list[bytes]]) -> list[bytes]:
    return [s for family in target.families for s in seeds[family]]


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_short_campaign_finds_nothing(name: str, seeds: dict[str, list[bytes]],
                                        tmp_path: Path) -> None:
    target = TARGETS[name]
    report = campaign(target, _pool(target, seeds), tmp_path, inputs=INPUTS.get(name, 200))
    assert not report.failures, "\n".join(map(str, report.failures))
    assert report.outcomes["ok"] and report.outcomes["refused"], report.outcomes  # both reached
    assert not list(tmp_path.iterdir())


def _picky(data: bytes, work: Path) -> None:
    """A target with every failure the harness must catch, chosen by the mutant's first byte
    (the seeds below start with their kind)."""
    kind = data[:1]
    if kind == b"e":
        raise ValueError("not a FatbinkitError")
    if kind == b"a":
        os.abort()  # a native crash: SIGABRT
    if kind == b"h":
        time.sleep(60)
    if kind == b"s":
        time.sleep(0.3)
    if kind == b"r":
        raise FormatError("refused")


def test_the_harness_keeps_a_reproducer_of_each_kind_of_failure(tmp_path: Path) -> None:
    target = Target("picky", _picky, ())
    seeds = [b"e" * 64, b"a" * 64, b"h" * 64, b"s" * 64, b"r" * 64, b"o" * 64]
    report = campaign(target, seeds, tmp_path, inputs=40, hang=2, slow=0.2)
    assert report.inputs == 40  # the campaign went on after deaths and hangs
    kinds = {f.kind for f in report.failures}
    assert kinds == {"exception", "death", "hang", "slow"}, report
    for f in report.failures:
        data = f.reproducer.read_bytes()
        assert data == mutant(target, seeds, 0, f.index)  # the bytes the worker ran
        assert f.reproducer.with_suffix(".txt").read_text().count(f"input {f.index}:") == 1
        if f.kind == "death":
            assert "SIGABRT" in f.detail
    assert report.outcomes["refused"] and report.errors["FormatError"]
    exception = next(f for f in report.failures if f.kind == "exception")
    assert "ValueError: not a FatbinkitError" in exception.detail
    with pytest.raises(ValueError):
        replay(target, exception.reproducer)


def test_mutants_are_a_function_of_seed_target_and_index(seeds: dict[str, list[bytes]]) -> None:
    target = TARGETS["fatbin"]
    pool = _pool(target, seeds)
    first = [mutant(target, pool, 0, i) for i in range(50)]
    assert first == [mutant(target, pool, 0, i) for i in range(50)]
    assert first != [mutant(target, pool, 1, i) for i in range(50)]
    assert len(set(first)) > 40
