"""A Triton kernel fatbinkit's authors did not write (Liger-Kernel's softmax, from PyPI),
compiled on this machine for four GPU generations with its PTX floor, run on the GPU: the SASS
image the driver picks from the fatbin, and the floor alone, JIT-compiled for this GPU."""

from __future__ import annotations

import ctypes
import math
import random
import struct

import pytest

from fatbinkit.runtime import Buffer, Device, Module
from fatbinkit.triton import compile_kernel

liger = pytest.importorskip("liger_kernel.ops.softmax")

TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]
SIGNATURE = {"Y_ptr": "*fp32", "Y_row_stride": "i32", "X_ptr": "*fp32", "X_row_stride": "i32",
             "n_cols": "i32", "BLOCK_SIZE": "constexpr"}


@pytest.mark.parametrize("packaging", ["fatbin", "floor only"])
def test_third_party_kernel_runs_as_sass_and_from_its_floor(gpu: Device, packaging: str) -> None:
    kernel = compile_kernel(liger._softmax_single_block_forward_kernel, SIGNATURE, TARGETS,
                            constexprs={"BLOCK_SIZE": 1024}, min_driver="12.8")
    assert kernel.floor is not None and kernel.floor.portable
    data = kernel.fatbin() if packaging == "fatbin" else kernel.fatbin(sass=False)
    rows, cols = 37, 781
    rng = random.Random(0)
    x = [rng.uniform(-4.0, 4.0) for _ in range(rows * cols)]
    with Module.load(data) as mod, Buffer.from_bytes(struct.pack(f"{rows * cols}f", *x)) as dx, \
            Buffer(4 * rows * cols) as dy:
        k = mod.kernel(kernel.name)
        assert k.binary_version == gpu.arch.number
        if packaging == "floor only":
            assert k.ptx_version == kernel.floor.arch.number  # JIT-compiled from compute_80
        stride = ctypes.c_int32(cols)
        k.launch(rows, kernel.block_threads,
                 [dy.ptr, stride, dx.ptr, stride, ctypes.c_int32(cols), ctypes.c_uint64(0),
                  ctypes.c_uint64(0)], shared_mem=kernel.shared)
        got = struct.unpack(f"{rows * cols}f", dy.to_bytes())
    for r in range(rows):
        row = x[r * cols:(r + 1) * cols]
        top = max(row)
        total = sum(math.exp(v - top) for v in row)
        for c, v in enumerate(row):
            assert got[r * cols + c] == pytest.approx(math.exp(v - top) / total, rel=1e-4,
                                                      abs=1e-7)
