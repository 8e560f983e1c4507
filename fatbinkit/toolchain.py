"""Locate NVIDIA tools and libraries, run tools, and run fatbinkit's own isolated workers: the
one place fatbinkit starts a subprocess.

Search order for a tool: ``$PATH``, ``$CUDA_HOME/bin`` (or ``$CUDA_PATH``), ``/usr/local/cuda/bin``,
then the pip wheels' ``site-packages/nvidia/cu13/bin`` (and ``cu12``). Libraries: the pip wheels'
``nvidia/cu13/lib``, ``$CUDA_HOME/lib64``, ``/usr/local/cuda/lib64``. A missing tool raises
:class:`ToolNotFoundError` naming the pip package that provides it; a failing one
:class:`ToolError` with its command line and stderr.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolError, ToolNotFoundError

__all__ = [
    "PACKAGES",
    "ToolResult",
    "WorkerResult",
    "find_library",
    "find_tool",
    "run_tool",
    "run_worker",
    "tool_candidates",
]

#: Which pip package provides each tool or library.
PACKAGES = {
    "nvcc": "nvidia-cuda-nvcc",
    "ptxas": "nvidia-cuda-nvcc",
    "fatbinary": "nvidia-cuda-nvcc",
    "nvlink": "nvidia-cuda-nvcc",
    "cuobjdump": "nvidia-cuda-cuobjdump",
    "nvdisasm": "nvidia-cuda-nvdisasm",
    "libnvfatbin": "nvidia-nvfatbin",
    "libnvJitLink": "nvidia-nvjitlink",
}


def _site_dirs() -> list[Path]:
    dirs: list[Path] = []
    for key in ("purelib", "platlib"):
        d = Path(sysconfig.get_paths()[key])
        if d not in dirs:
            dirs.append(d)
    for entry in sys.path:
        p = Path(entry)
        if p.name == "site-packages" and p not in dirs:
            dirs.append(p)
    return dirs


def _cuda_homes() -> list[Path]:
    homes = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    homes.append(Path("/usr/local/cuda"))
    return homes


def _wheel_dirs(sub: str) -> list[Path]:
    return [d / "nvidia" / cu / sub for d in _site_dirs() for cu in ("cu13", "cu12")]


def tool_candidates(name: str) -> list[Path]:
    """Every place searched for tool ``name``, in order (after ``$PATH``)."""
    return [h / "bin" / name for h in _cuda_homes()] + [d / name for d in _wheel_dirs("bin")]


def find_tool(name: str) -> Path:
    """Path of NVIDIA tool ``name`` (``nvcc``, ``fatbinary``, ``cuobjdump``...)."""
    found = shutil.which(name)
    if found:
        return Path(found)
    for cand in tool_candidates(name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    package = PACKAGES.get(name, "the CUDA toolkit")
    raise ToolNotFoundError(
        f"{name} not found on PATH, in $CUDA_HOME, /usr/local/cuda or the pip wheels; "
        f"install it with `pip install {package}`"
    )


def find_library(name: str, soname: str) -> Path:
    """Path of shared library ``soname`` (e.g. ``libnvfatbin.so.13``); ``name`` keys PACKAGES."""
    dirs = _wheel_dirs("lib") + [h / "lib64" for h in _cuda_homes()]
    for d in dirs:
        cand = d / soname
        if cand.is_file():
            return cand
    package = PACKAGES.get(name, "the CUDA toolkit")
    raise ToolNotFoundError(f"{soname} not found; install it with `pip install {package}`")


@dataclass(frozen=True)
class ToolResult:
    """What a tool run produced."""

    argv: tuple[str, ...]
    stdout: bytes
    stderr: bytes


def run_tool(
    name: str | Path,
    args: Sequence[str | os.PathLike[str]],
    *,
    cwd: os.PathLike[str] | None = None,
    timeout: float = 600,
) -> ToolResult:
    """Run NVIDIA tool ``name`` (found by :func:`find_tool`, or the path given) with ``args``;
    raise :class:`ToolError` if it fails."""
    exe = name if isinstance(name, Path) else find_tool(name)
    argv = (str(exe), *(os.fspath(a) for a in args))
    command = shlex.join(argv)
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise ToolError(f"{command}: timed out after {timeout:g} s") from e
    except OSError as e:
        raise ToolError(f"{command}: cannot run: {e.strerror or e}") from e
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip() or proc.stdout.decode(
            "utf-8", "replace"
        ).strip()
        raise ToolError(f"{command}: exit status {proc.returncode}\n{err}")
    return ToolResult(argv, proc.stdout, proc.stderr)


@dataclass(frozen=True)
class WorkerResult:
    """How an isolated worker ended: ``returncode`` None when it ran out of time (and was
    killed); negative when a signal ended it."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: bytes
    stderr: bytes

    def __str__(self) -> str:
        return f"{shlex.join(self.argv)}: exit status {self.returncode}"


def run_worker(module: str, args: Sequence[str], *, timeout: float) -> WorkerResult:
    """Run ``python -m module args`` (a fatbinkit worker) in a child process of this Python:
    what the worker does cannot take this process down; a worker over ``timeout`` seconds is
    killed."""
    argv = (sys.executable, "-m", module, *args)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        return WorkerResult(argv, None, e.stdout or b"", e.stderr or b"")
    except OSError as e:
        raise ToolError(f"{shlex.join(argv)}: cannot run: {e.strerror or e}") from e
    return WorkerResult(argv, proc.returncode, proc.stdout, proc.stderr)
