"""fatbinkit.runtime on a real GPU: loads, launches, explained failures."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import pytest
from axpy import SOURCE, check_axpy, nvcc

from fatbinkit.errors import CudaError, JitError, NoBinaryForGpuError, UnsupportedPtxVersionError
from fatbinkit.runtime import Device, Module


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gpu-build")


def test_device(gpu: Device) -> None:
    assert gpu.arch.number >= 75
    assert gpu.driver_version >= (12, 0)


def test_cubin_bytes_and_path(gpu: Device, build: Path) -> None:
    cubin = nvcc(build, "-cubin", f"-arch={gpu.arch.sm}", suffix=".cubin")
    with Module.load(cubin) as mod:
        assert mod.kind == "cubin"
        assert mod.kernel_names == ("axpy",)
        k = mod.kernel("axpy")
        assert k.binary_version == gpu.arch.number
        check_axpy(mod)
    path = build / "k.cubin"
    path.write_bytes(cubin)
    with Module.load(path) as mod:
        check_axpy(mod)


def test_library_load(gpu: Device, build: Path) -> None:
    cubin = nvcc(build, "-cubin", f"-arch={gpu.arch.sm}", suffix=".cubin")
    with Module.load(cubin, library=True) as mod:
        assert mod.kernel_names == ("axpy",)
        check_axpy(mod)


def test_ptx_without_nul_is_terminated(gpu: Device, build: Path) -> None:
    ptx = nvcc(build, "-ptx", f"-arch={gpu.arch.compute}", suffix=".ptx").rstrip(b"\0")
    with Module.load(ptx) as mod:
        assert mod.kind == "ptx"
        k = mod.kernel("axpy")
        assert k.ptx_version == gpu.arch.number
        assert mod.picked().how == "ptx-jit"
        check_axpy(mod)


def test_no_binary_for_gpu(gpu: Device, build: Path) -> None:
    other = "sm_80" if gpu.arch.major != 8 else "sm_90"
    cubin = nvcc(build, "-cubin", f"-arch={other}", suffix=".cubin")
    with pytest.raises(NoBinaryForGpuError) as info:
        Module.load(cubin)
    text = str(info.value)
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in text
    assert other in text and gpu.arch.sm in text


def test_ptx_too_new(gpu: Device, build: Path) -> None:
    ptx = nvcc(build, "-ptx", f"-arch={gpu.arch.compute}", suffix=".ptx")
    ptx = re.sub(rb"\.version \d+\.\d+", b".version 9.9", ptx)
    with pytest.raises(UnsupportedPtxVersionError) as info:
        Module.load(ptx)
    text = str(info.value)
    assert "9.9" in text


def test_corrupt_ptx_has_jit_log(gpu: Device, build: Path) -> None:
    ptx = nvcc(build, "-ptx", f"-arch={gpu.arch.compute}", suffix=".ptx")
    bad = ptx.replace(b"ret;", b"ret_not_an_instruction;", 1)
    with pytest.raises(JitError) as info:
        Module.load(bad)
    assert info.value.code == "CUDA_ERROR_INVALID_PTX"
    assert "ret_not_an_instruction" in info.value.log or "error" in info.value.log.lower()


def test_from_symbol_ld_binary(gpu: Device, build: Path) -> None:
    """AOTInductor's own recipe (ld -r -b binary + objcopy), loaded from the symbol in place."""
    cubin = build / "axpy.cubin"
    cubin.write_bytes(nvcc(build, "-cubin", f"-arch={gpu.arch.sm}", suffix=".cubin"))
    obj = build / "axpy.o"
    subprocess.run(
        ["ld", "-r", "-b", "binary", "-z", "noexecstack", "-o", str(obj), "axpy.cubin"],
        cwd=build, check=True,
    )
    subprocess.run(
        ["objcopy", "--rename-section", ".data=.rodata,alloc,load,readonly,data,contents",
         "--redefine-sym", "_binary_axpy_cubin_start=__axpy_start",
         "--redefine-sym", "_binary_axpy_cubin_end=__axpy_end", str(obj)],
        check=True,
    )
    lib = build / "libaxpy.so"
    subprocess.run(["gcc", "-shared", "-o", str(lib), str(obj)], check=True)
    dll = ctypes.CDLL(str(lib))
    with Module.from_symbol(dll, "axpy") as mod:
        check_axpy(mod)
    assert SOURCE.is_file()


def test_host_library_is_refused_and_explained(gpu: Device, build: Path) -> None:
    """A whole .so handed to the driver (instead of the blob inside it) fails, and says why."""
    lib = build / "libaxpy.so"
    if not lib.exists():
        pytest.skip("needs test_from_symbol_ld_binary's library")
    with pytest.raises(CudaError) as info:
        Module.load(lib.read_bytes())
    assert "host ELF" in str(info.value)
