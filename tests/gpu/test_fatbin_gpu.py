"""Every kind of fatbin the pure writer makes loads with cuModuleLoadData and computes right.

SASS + PTX, SASS only and PTX only (JIT), each uncompressed, LZ4 and zstd. The kernel is built here
from source with the nvcc on PATH (the GPU machine's CUDA 13.0, whose PTX its driver accepts).
Skipped with the reason when cuda-python, a driver or a GPU is missing.
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from fatbinkit.build import Image, build
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import EntryKind, Fatbin

SOURCE = r"""
extern "C" __global__ void add_scaled(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + 1.0f;
}
"""
N = 1000


def _driver() -> tuple[Any, str]:
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:
        return None, f"cuda-python missing: {e}"
    try:
        (err,) = cu.cuInit(0)
    except Exception as e:  # no driver library
        return None, f"no CUDA driver: {str(e).splitlines()[0]}"
    if err != cu.CUresult.CUDA_SUCCESS:
        return None, f"cuInit failed: {err.name}"
    err, count = cu.cuDeviceGetCount()
    if err != cu.CUresult.CUDA_SUCCESS or count == 0:
        return None, "no CUDA device"
    if shutil.which("nvcc") is None:
        return None, "nvcc not on PATH"
    return cu, ""


CU, REASON = _driver()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(CU is None, reason=REASON or "no GPU")]


def _check(result: tuple[Any, ...]) -> Any:
    err, *rest = result
    assert err == CU.CUresult.CUDA_SUCCESS, f"{err.name}"
    return rest[0] if len(rest) == 1 else tuple(rest)


@pytest.fixture(scope="module")
def context() -> Iterator[Arch]:
    dev = _check(CU.cuDeviceGet(0))
    attr = CU.CUdevice_attribute
    major = _check(CU.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = _check(CU.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ctx = _check(CU.cuDevicePrimaryCtxRetain(dev))
    _check(CU.cuCtxSetCurrent(ctx))
    yield Arch(major * 10 + minor)
    _check(CU.cuDevicePrimaryCtxRelease(dev))


@pytest.fixture(scope="module")
def images(context: Arch, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Image]:
    root = tmp_path_factory.mktemp("gpu-fatbin")
    src = root / "k.cu"
    src.write_text(SOURCE)
    cubin, ptx = root / "k.cubin", root / "k.ptx"
    for what, arch, out in (("-cubin", context.sm, cubin), ("-ptx", context.compute, ptx)):
        subprocess.run(["nvcc", what, f"-arch={arch}", str(src), "-o", str(out)], check=True)
    return {
        "sass": Image.from_file(EntryKind.ELF, context, cubin),
        "ptx": Image.from_file(EntryKind.PTX, context, ptx),
    }


def _run(fatbin: bytes) -> list[float]:
    """Load ``fatbin``, run ``add_scaled`` on 0..N-1 with a = 2, return the result."""
    module = _check(CU.cuModuleLoadData(fatbin))
    try:
        func = _check(CU.cuModuleGetFunction(module, b"add_scaled"))
        data = struct.pack(f"{N}f", *range(N))
        dptr = _check(CU.cuMemAlloc(len(data)))
        try:
            _check(CU.cuMemcpyHtoD(dptr, data, len(data)))
            values = [ctypes.c_uint64(int(dptr)), ctypes.c_float(2.0), ctypes.c_int(N)]
            params = (ctypes.c_void_p * len(values))(
                *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
            )
            _check(CU.cuLaunchKernel(
                func, (N + 127) // 128, 1, 1, 128, 1, 1, 0, 0, ctypes.addressof(params), 0
            ))
            _check(CU.cuCtxSynchronize())
            out = bytearray(len(data))
            _check(CU.cuMemcpyDtoH(out, dptr, len(data)))
        finally:
            _check(CU.cuMemFree(dptr))
        return list(struct.unpack(f"{N}f", out))
    finally:
        _check(CU.cuModuleUnload(module))


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("content", ["sass+ptx", "sass", "ptx"])
def test_pure_fatbin_loads_and_computes(
    content: str, compression: str | None, images: dict[str, Image]
) -> None:
    chosen = [images[part] for part in content.split("+")]
    fatbin = build(chosen, compression=compression)
    entries = Fatbin.from_bytes(fatbin).entries
    assert [e.compression for e in entries] == [compression] * len(chosen)
    assert _run(fatbin) == [i * 2.0 + 1.0 for i in range(N)]
