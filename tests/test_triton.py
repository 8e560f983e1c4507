"""Triton kernels compiled for several GPUs on a machine without one, packed into one fatbin,
checked with cuobjdump (what is inside, byte for byte) and the compatibility engine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from fatbin_kernels import cuobjdump_extract, cuobjdump_fields, cuobjdump_list

from fatbinkit.arch import Arch
from fatbinkit.compat import predict_load
from fatbinkit.triton import TritonImage, compile_kernel, to_fatbin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]


@pytest.fixture(scope="module")
def images() -> list[TritonImage]:
    import triton_kernels as tk

    return compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, TARGETS,
                          constexprs=tk.ADD_CONSTEXPRS, ptx_version=88)


def test_triton_targets_are_arch_specific_from_sm_90(images: list[TritonImage]) -> None:
    assert [i.arch.sm for i in images] == ["sm_80", "sm_90a", "sm_100a", "sm_120a"]
    assert {i.ptx_version for i in images} == {(8, 8)}
    assert all(i.name == "add_kernel" and i.block_threads == 128 for i in images)


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_one_fatbin_for_all_targets_reads_back_in_cuobjdump(
    images: list[TritonImage], tmp_path: Path, compression: str | None
) -> None:
    fat = tmp_path / "add.fatbin"
    fat.write_bytes(to_fatbin(images, compression=compression))
    # entries carry the kernel name as identifier, which cuobjdump uses for the file names
    assert cuobjdump_list(fat) == [
        line for n, i in enumerate(images, 1)
        for line in (f"ELF file {n:4}: add_kernel.{i.arch.sm}.cubin",
                     f"PTX file {n:4}: add_kernel.{i.arch.sm}.ptx")
    ]
    fields = cuobjdump_fields(fat)
    assert [f["arch"] for f in fields] == [i.arch.sm for i in images for _ in (0, 1)]
    extracted = cuobjdump_extract(fat, tmp_path / "x")
    for image in images:
        assert extracted[f"add_kernel.{image.arch.sm}.cubin"] == image.cubin
        assert extracted[f"add_kernel.{image.arch.sm}.ptx"] == image.ptx.rstrip(b"\0")


def test_compat_sees_the_arch_specific_labels(images: list[TritonImage]) -> None:
    fat = to_fatbin(images, sass=False)  # PTX only: which GPU could JIT it
    assert predict_load(fat, Arch(90), (13, 0)).how == "ptx-jit"
    assert predict_load(fat, Arch(89), (13, 0)).how == "ptx-jit"  # from compute_80
    sm_103 = predict_load(fat, Arch(103), (13, 0))
    assert sm_103.how == "ptx-jit" and sm_103.image is not None
    assert sm_103.image.arch.sm == "sm_80"  # compute_100a never JITs for 10.3


def test_ptx_version_is_a_cap_never_above_tritons_ptxas() -> None:
    import triton_kernels as tk

    (high,) = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_90"],
                             constexprs=tk.ADD_CONSTEXPRS, ptx_version=99)
    (native,) = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_90"],
                               constexprs=tk.ADD_CONSTEXPRS)
    # uncapped, 9.9 would make Triton's ptxas fail ("Unsupported .version")
    assert high.ptx_version == native.ptx_version
