"""Shared test fixtures (third-party binaries: see tests/thirdparty.py)."""

from __future__ import annotations

import pytest

from fatbinkit.formats import cubin, native


@pytest.fixture(params=["c", "python"])
def cubin_reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test that uses it runs twice: with the cubin walk in C (fatbinkit/formats/_cubin.c,
    and its search in place) and with the pure-Python reader alone, as an install without a
    compiler reads (issue 32: the same tests on both paths). Forked workers and the CLI run as
    a child inherit the choice."""
    if request.param == "python":
        monkeypatch.setattr(cubin, "_compiled", None)
        monkeypatch.setattr(native, "compiled", None)
        monkeypatch.setenv("FATBINKIT_PURE_PYTHON", "1")
    elif cubin._compiled is None:
        pytest.skip("the cubin walk in C is not built here (tests/test_cubin_fast.py says why)")
    return str(request.param)
