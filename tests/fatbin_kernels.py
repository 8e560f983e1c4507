"""Small CUDA kernels compiled once per test session with the system nvcc (CUDA 13.0), plus
cuobjdump helpers: the oracles for the fatbin tests."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fatbinkit.toolchain import find_tool, tool_candidates

SOURCE = r"""
extern "C" __global__ void add1(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;  // a comment nvFatbin strips from PTX
}
extern "C" __global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
#: Archs compiled to cubins (ABI v2, .nv.compat for sm >= 100, a/f variants).
CUBIN_ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a", "sm_100", "sm_100f", "sm_120")
#: Archs for which PTX is kept.
PTX_ARCHS = ("sm_80", "sm_90", "sm_100f", "sm_120")


def system_tool(name: str) -> str:
    """The CUDA toolkit's tool ``name`` (``$CUDA_HOME``, /usr/local/cuda: 13.0 here) in
    fatbinkit.toolchain's search order, falling back to ``find_tool`` (PATH, the pip wheels)."""
    toolkit = [c for c in tool_candidates(name) if "site-packages" not in c.parts]
    return str(next((c for c in toolkit if c.is_file()), None) or find_tool(name))


def wheel_tool(name: str) -> Path:
    """The pip wheels' tool ``name`` (``site-packages/nvidia/cu13/bin``: 13.5 here) where
    fatbinkit.toolchain looks for it; the first such place when it is missing."""
    wheels = [c for c in tool_candidates(name) if "site-packages" in c.parts]
    return next((c for c in wheels if c.is_file()), wheels[0])


@dataclass(frozen=True)
class Kernels:
    """Paths of the compiled kernels: ``cubins[arch]``, ``ptx[arch]`` (every arch compiled) and
    the source."""

    root: Path
    source: Path
    cubins: dict[str, Path]
    ptx: dict[str, Path]


def compile_kernels(root: Path) -> Kernels:
    root.mkdir(parents=True, exist_ok=True)
    src = root / "kernels.cu"
    src.write_text(SOURCE)
    nvcc, ptxas = system_tool("nvcc"), system_tool("ptxas")
    cubins: dict[str, Path] = {}
    ptx: dict[str, Path] = {}
    for arch in sorted(set(CUBIN_ARCHS) | set(PTX_ARCHS)):
        virt = arch.replace("sm_", "compute_")
        p = root / f"k_{arch}.ptx"
        subprocess.run([nvcc, "-ptx", f"-arch={virt}", str(src), "-o", str(p)], check=True)
        ptx[arch] = p
        if arch in CUBIN_ARCHS:
            c = root / f"k_{arch}.cubin"
            subprocess.run([ptxas, f"-arch={arch}", str(p), "-o", str(c)], check=True)
            cubins[arch] = c
    return Kernels(root, src, cubins, ptx)


_BUILT: dict[str, Kernels] = {}


def kernels_in(factory: pytest.TempPathFactory) -> Kernels:
    """Compile once per session, whichever test module asks first."""
    if "kernels" not in _BUILT:
        _BUILT["kernels"] = compile_kernels(factory.mktemp("kernels"))
    return _BUILT["kernels"]


def cuobjdump(*args: str | os.PathLike[str], cwd: Path | None = None,
              tool: Path | None = None) -> str:
    """``cuobjdump args`` (``tool``: another cuobjdump, e.g. 11.8 for old binaries)."""
    proc = subprocess.run(
        [str(tool or find_tool("cuobjdump")), *map(str, args)], cwd=cwd, capture_output=True,
        text=True, check=False,
    )
    if proc.returncode != 0 and "does not contain device code" not in proc.stderr:
        raise AssertionError(f"cuobjdump {args} failed: {proc.stderr}")
    return proc.stdout


def cuobjdump_list(path: Path, *, all: bool = False, tool: Path | None = None) -> list[str]:
    """``cuobjdump -lelf -lptx [-all]`` lines (``ELF file    1: name``)."""
    out = cuobjdump(*(["-all"] if all else []), "-lelf", "-lptx", path, tool=tool)
    return [line for line in out.splitlines() if re.match(r"^(ELF|PTX) file", line)]


def cuobjdump_fields(path: Path, tool: Path | None = None) -> list[dict[str, str]]:
    """The ``key = value`` blocks of plain ``cuobjdump FILE``, one dict per entry."""
    blocks: list[dict[str, str]] = []
    for line in cuobjdump(path, tool=tool).splitlines():
        m = re.match(r"^Fatbin (elf|ptx) code:", line)
        if m:
            blocks.append({"kind": m.group(1)})
            continue
        if blocks and " = " in line:
            key, _, value = line.partition(" = ")
            blocks[-1][key.strip()] = value.strip()
        elif blocks and line.strip() == "compressed":
            blocks[-1]["compressed"] = "yes"
    return blocks


def cuobjdump_extract(path: Path, out: Path, *, all: bool = False,
                      tool: Path | None = None) -> dict[str, bytes]:
    """Files ``cuobjdump -xelf all -xptx all`` writes, by name."""
    out.mkdir(parents=True, exist_ok=True)
    flags = ["-all"] if all else []
    for what in ("-xelf", "-xptx"):
        subprocess.run(
            [str(tool or find_tool("cuobjdump")), *flags, what, "all", str(path.resolve())],
            cwd=out,
            capture_output=True, check=False,
        )
    return {p.name: p.read_bytes() for p in out.iterdir()}
