"""Load-failure explanations and preflight, for images built by the real nvcc (no GPU needed).

The device is described by value (an H200 with a CUDA 13.0 driver), as the driver would report it;
what the driver really does with these images is checked on the GPU in tests/gpu.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from fatbin_kernels import system_tool

from fatbinkit.diagnose import explain_load_error, preflight_check
from fatbinkit.errors import (
    CompatibilityError,
    JitError,
    NoBinaryForGpuError,
    UnsupportedPtxVersionError,
)
from fatbinkit.formats.arch import Arch
from fatbinkit.runtime import Device

SOURCE = Path(__file__).parent / "data" / "axpy.cu"
H200 = Device(0, "NVIDIA H200", Arch(90), (13, 0))
NVCC = system_tool("nvcc")


def _nvcc(tmp: Path, *args: str) -> bytes:
    out = tmp / "out"
    subprocess.run([NVCC, *args, "-o", str(out), str(SOURCE)], check=True, capture_output=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("diag")
    ptx90 = _nvcc(tmp, "-ptx", "-arch=compute_90")
    return {
        "sm80": _nvcc(tmp, "-cubin", "-arch=sm_80"),
        "sm90": _nvcc(tmp, "-cubin", "-arch=sm_90"),
        "ptx90": ptx90,
        "ptx99": re.sub(rb"\.version \d+\.\d+", b".version 9.9", ptx90),
        "fat80": _nvcc(tmp, "-fatbin", "-gencode", "arch=compute_80,code=sm_80"),
    }


def test_no_binary_lists_what_the_image_holds(images: dict[str, bytes]) -> None:
    err = explain_load_error("CUDA_ERROR_NO_BINARY_FOR_GPU", images["fat80"], H200, "")
    assert isinstance(err, NoBinaryForGpuError)
    text = str(err)
    assert text.startswith("CUDA_ERROR_NO_BINARY_FOR_GPU: ")
    assert "sm_80" in text and "sm_90" in text and "NVIDIA H200" in text


def test_unsupported_ptx_names_isa_and_driver(images: dict[str, bytes]) -> None:
    err = explain_load_error("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", images["ptx99"], H200, "")
    assert isinstance(err, UnsupportedPtxVersionError)
    assert "PTX ISA 9.9" in str(err) and "up to 9.0" in str(err)
    ptx91 = images["ptx90"].replace(b".version 9.0", b".version 9.1")
    err = explain_load_error("CUDA_ERROR_UNSUPPORTED_PTX_VERSION", ptx91, H200, "")
    assert "CUDA 13.1 or newer" in str(err)


def test_jit_log_is_kept(images: dict[str, bytes]) -> None:
    log = "ptxas application ptx input, line 30; error   : Unknown symbol 'bogus'"
    err = explain_load_error("CUDA_ERROR_INVALID_PTX", images["ptx90"], H200, log)
    assert isinstance(err, JitError) and err.log == log and log in str(err)


def test_unreadable_image_still_explained() -> None:
    err = explain_load_error("CUDA_ERROR_INVALID_IMAGE", b"\x50\xed\x55\xba\x01\x00", H200, "")
    assert "unreadable" in str(err) and err.code == "CUDA_ERROR_INVALID_IMAGE"


def test_preflight(images: dict[str, bytes]) -> None:
    assert preflight_check(images["sm90"], Arch(90), (13, 0)).how == "sass"
    assert preflight_check(images["ptx90"], Arch(90), (13, 0)).how == "ptx-jit"
    with pytest.raises(CompatibilityError, match="CUDA_ERROR_NO_BINARY_FOR_GPU"):
        preflight_check(images["fat80"], Arch(90), (13, 0))
    with pytest.raises(CompatibilityError, match="UNSUPPORTED_PTX"):
        preflight_check(images["ptx99"], Arch(90), (13, 0))


def test_host_elf_is_not_an_image_even_with_fatbins_inside(
    images: dict[str, bytes], tmp_path: Path
) -> None:
    """gcc links a fatbin into a .so: scan() finds it, but the .so itself is no loadable image."""
    from fatbinkit.compat import image_sets, predict_load
    from fatbinkit.errors import FormatError
    from fatbinkit.formats.elf_writer import Blob, write_object

    obj, lib = tmp_path / "k.o", tmp_path / "libk.so"
    write_object(obj, [Blob("k", images["fat80"])])
    subprocess.run(["gcc", "-shared", "-o", str(lib), str(obj)], check=True)
    assert image_sets(lib)  # the fatbin is found inside
    with pytest.raises(FormatError, match="host ELF"):
        predict_load(lib.read_bytes(), Arch(90), (13, 0))
    err = explain_load_error("CUDA_ERROR_INVALID_IMAGE", lib.read_bytes(), H200, "")
    assert "host ELF" in str(err)
