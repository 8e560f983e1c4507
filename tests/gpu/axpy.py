"""Build the test kernel with the GPU machine's nvcc and check a launch of it."""

from __future__ import annotations

import ctypes
import random
import struct
import subprocess
from pathlib import Path

from fatbinkit.runtime import Buffer, Module
from fatbinkit.toolchain import find_tool

SOURCE = Path(__file__).resolve().parent.parent / "data" / "axpy.cu"


def nvcc(tmp: Path, *args: str, suffix: str) -> bytes:
    """Compile tests/data/axpy.cu with ``args`` and return the output file's bytes."""
    exe = str(find_tool("nvcc"))  # PATH, $CUDA_HOME, /usr/local/cuda, pip wheels
    out = tmp / f"axpy-{abs(hash(args))}{suffix}"
    subprocess.run([exe, *args, "-o", str(out), str(SOURCE)], check=True, capture_output=True)
    return out.read_bytes()


def check_axpy(module: Module, n: int = 4099) -> None:
    """Launch ``axpy`` on fresh random data and compare with the host result exactly."""
    rnd = random.Random()
    x = [rnd.uniform(-4, 4) for _ in range(n)]
    y = [rnd.uniform(-4, 4) for _ in range(n)]
    a = rnd.uniform(-2, 2)
    fx, fy = struct.pack(f"{n}f", *x), struct.pack(f"{n}f", *y)
    x32, y32 = struct.unpack(f"{n}f", fx), struct.unpack(f"{n}f", fy)
    a32 = struct.unpack("f", struct.pack("f", a))[0]
    kernel = module.kernel("axpy")
    with Buffer.from_bytes(fx) as dx, Buffer.from_bytes(fy) as dy:
        kernel.launch((n + 255) // 256, 256, [ctypes.c_float(a), dx.ptr, dy.ptr, ctypes.c_int(n)])
        got = struct.unpack(f"{n}f", dy.to_bytes())
    # fma or mul+add: both are within one float32 rounding of the float64 result.
    for i in (0, 1, n // 2, n - 1, *rnd.sample(range(n), 64)):
        ref = a32 * x32[i] + y32[i]
        assert abs(got[i] - ref) <= 1e-5 * max(1.0, abs(ref)), (i, got[i], ref)
