"""The benchmarks' large inputs, each from the package registry into the fixtures cache.

Every input a benchmark reads comes from here or from ``tests/thirdparty.py`` (``fetch``), as
the tests' fixtures do: a pinned wheel is downloaded once into ``$FATBINKIT_FIXTURES/wheels``
(default ``.fixtures/wheels``) and a member is extracted next to it, so that a benchmark runs the
same on any machine. torch comes with ``pip download --isolated``: a machine's pip configuration
may list a local CPU-only torch first, whose wheel has no libtorch_cuda.so; PyPI's manylinux
x86_64 wheel is the CUDA build.

A failure says what failed (the download, a file that is not a wheel, a wheel without the
member) and exits; it is never a skip. Other pinned inputs (``thirdparty.CUBLASLT13``...) go
through :func:`member` (a wheel's member) and :func:`tool` (a Debian package's tool).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

import pytest  # noqa: E402  (thirdparty.fetch reports a failure with pytest.fail)
from thirdparty import CACHE, DebianPackage, WheelMember, debian_tool, fetch  # noqa: E402

#: torch releases the benchmarks read: 2.13.0 -> 2.14.1 for ``diff``, 2.14.1 elsewhere
TORCH = "2.14.1"
TORCH_OLD = "2.13.0"
TORCH_MEMBER = "torch/lib/libtorch_cuda.so"
PYTHON = "311"
PLATFORM = "manylinux_2_28_x86_64"


def wheel(package: str, version: str) -> Path:
    """The cached wheel of ``package==version`` for CPython 3.11 on manylinux_2_28 x86_64,
    downloaded from the registry on first use (``pip download --isolated``: no machine's pip
    configuration takes part).

    The name is the one :func:`thirdparty.fetch` looks for, so that a member is extracted from
    this very file.
    """
    wheels = CACHE / "wheels"
    pattern = f"{package.replace('-', '_')}-{version}-*linux*_x86_64.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--isolated", "-q", "--no-deps",
               "--only-binary=:all:", "--python-version", PYTHON, "--platform", PLATFORM,
               "-d", str(wheels), f"{package}=={version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        found = sorted(wheels.glob(pattern))
        if proc.returncode != 0 or not found:
            raise SystemExit(
                f"could not download {package}=={version} (cp{PYTHON}, {PLATFORM}) into "
                f"{wheels}: `{' '.join(cmd[2:])}` exited {proc.returncode}\n"
                f"{proc.stderr.strip()[-2000:]}")
    path = found[0]
    if not zipfile.is_zipfile(path):
        raise SystemExit(f"{path} is not a wheel (zip): an interrupted download? Delete it and "
                         "run again to download it anew.")
    return path


def member(item: WheelMember) -> Path:
    """:func:`thirdparty.fetch` of ``item`` (its wheel downloaded if need be, the member extracted
    once into the cache), a failure said in one message rather than a pytest outcome."""
    try:
        return fetch(item)
    except pytest.fail.Exception as e:  # fetch's own words: which download, which member
        raise SystemExit(e.msg) from None
    except (OSError, zipfile.BadZipFile) as e:
        raise SystemExit(f"could not extract {item.member} from the cached "
                         f"{item.package} {item.version} wheel: {e}") from None


def tool(package: DebianPackage, name: str) -> Path:
    """:func:`thirdparty.debian_tool`: ``usr/bin/<name>`` of a pinned Debian package, downloaded,
    checked against its SHA256 and unpacked into the cache once; a failure said in one message."""
    try:
        return debian_tool(package, name)
    except pytest.fail.Exception as e:
        raise SystemExit(e.msg) from None


def torch_wheel(version: str = TORCH) -> Path:
    """torch ``version``'s CUDA wheel (cp311, manylinux_2_28 x86_64), in the cache."""
    return wheel("torch", version)


def torch_cuda(version: str = TORCH) -> Path:
    """libtorch_cuda.so of torch ``version``'s CUDA wheel, extracted once into the cache (a
    CPU-only wheel has none: that fails, saying so)."""
    torch_wheel(version)  # first, with --isolated: fetch then finds it and downloads nothing
    return member(WheelMember("torch", version, TORCH_MEMBER))
