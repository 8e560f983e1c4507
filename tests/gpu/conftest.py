"""GPU tests: run only where cuda-python, a CUDA driver and a GPU are present.

Everywhere else (CI included) every test here is skipped with the reason. On the device machine
run ``tests/gpu/run.sh``; it writes a report that goes to docs/.
"""

from __future__ import annotations

import pytest

from fatbinkit.errors import FatbinkitError
from fatbinkit.runtime import Device


def _probe() -> tuple[Device | None, str]:
    try:
        return Device.get(0), ""
    except FatbinkitError as exc:
        return None, str(exc).splitlines()[0]
    except Exception as exc:  # bindings missing pieces
        return None, f"{type(exc).__name__}: {exc}"


_DEVICE, _REASON = _probe()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _DEVICE is not None:
        return
    skip = pytest.mark.skip(reason=f"no usable CUDA GPU: {_REASON}")
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu() -> Device:
    """The device under test (CUDA device 0)."""
    assert _DEVICE is not None
    return _DEVICE
