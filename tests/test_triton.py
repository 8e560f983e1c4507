"""Triton kernels compiled for several GPUs on a machine without one, on every core, with a PTX
floor: packed into one fatbin and checked with cuobjdump (what is inside, byte for byte), the
toolkit's own ptxas (is the floor portable?), cuobjdump -elf (which ptxas built each cubin) and the
compatibility engine."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("triton")

from fatbin_kernels import cuobjdump_extract, cuobjdump_fields, cuobjdump_list

from fatbinkit.compat import predict_load
from fatbinkit.errors import FatbinkitError, InvalidArgumentError, ToolError
from fatbinkit.formats.arch import Arch
from fatbinkit.progress import Step
from fatbinkit.toolchain import find_tool, run_tool
from fatbinkit.triton import TritonImage, TritonKernel, compile_kernel, retarget

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import fatbinkit.demo.kernels as tk

TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]


@pytest.fixture(scope="module")
def add() -> TritonKernel:
    return compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, TARGETS,
                          constexprs=tk.ADD_CONSTEXPRS, min_driver="12.9")


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton compiles for real (its cache would make equal outputs trivially equal)."""
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")


def _toolkit_ptxas_refuses(ptx: bytes, arch: str, tmp_path: Path) -> bool:
    """The oracle: the CUDA toolkit's ptxas (not Triton's) on the PTX for ``arch``."""
    src = tmp_path / f"floor-{arch}.ptx"
    src.write_bytes(ptx.rstrip(b"\0"))
    try:
        run_tool(find_tool("ptxas"), [f"-arch={arch}", str(src), "-o", str(tmp_path / "o")])
    except ToolError:
        return True
    return False


def _producer(cubin: bytes, tmp_path: Path) -> tuple[int, int] | None:
    """The CUDA release of the ptxas that built ``cubin``, as ``cuobjdump -elf`` prints it from
    the cubin's toolkit note ("Tool Version: Cuda compilation tools, release 13.4"); None where
    the cubin has no such note (ptxas 12.x writes none)."""
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    text = run_tool("cuobjdump", ["-elf", str(path)]).stdout.decode()
    m = re.search(r"Tool Version: Cuda compilation tools, release (\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_triton_targets_are_arch_specific_from_sm_90(add: TritonKernel) -> None:
    assert [i.arch.sm for i in add.images] == ["sm_80", "sm_90a", "sm_100a", "sm_120a"]
    assert all(i.name == "add_kernel" and i.block_threads == 128 for i in add.images)
    assert add.floor is not None and add.floor.arch.compute == "compute_80"
    assert add.floor.portable and add.floor.ptx == add.images[0].ptx


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_one_fatbin_for_all_targets_reads_back_in_cuobjdump(
    add: TritonKernel, tmp_path: Path, compression: str | None
) -> None:
    fat = tmp_path / "add.fatbin"
    fat.write_bytes(add.fatbin(compression=compression))
    # entries carry the kernel name as identifier, which cuobjdump uses for the file names
    assert cuobjdump_list(fat) == [
        *(f"ELF file {n:4}: add_kernel.{i.arch.sm}.cubin" for n, i in enumerate(add.images, 1)),
        "PTX file    1: add_kernel.sm_80.ptx"]
    fields = cuobjdump_fields(fat)
    assert [f["arch"] for f in fields] == [i.arch.sm for i in add.images] + ["sm_80"]
    extracted = cuobjdump_extract(fat, tmp_path / "x")
    for image in add.images:
        assert extracted[f"add_kernel.{image.arch.sm}.cubin"] == image.cubin
    assert extracted["add_kernel.sm_80.ptx"] == add.floor.ptx.rstrip(b"\0")  # type: ignore[union-attr]


def test_compat_sees_the_arch_specific_labels(add: TritonKernel) -> None:
    fat = add.fatbin(sass=False, ptx="all")  # every target's own PTX: which GPU could JIT it
    assert predict_load(fat, Arch(90), (13, 0)).how == "ptx-jit"
    assert predict_load(fat, Arch(89), (13, 0)).how == "ptx-jit"  # from compute_80
    sm_103 = predict_load(fat, Arch(103), (13, 0))
    assert sm_103.how == "ptx-jit" and sm_103.image is not None
    assert sm_103.image.arch.sm == "sm_80"  # compute_100a never JITs for 10.3


def test_the_floor_drops_the_a_suffix_only_where_the_toolkits_ptxas_agrees(
        tmp_path: Path) -> None:
    add = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_90", "sm_120"],
                         constexprs=tk.ADD_CONSTEXPRS, min_driver="12.9")
    assert add.images[0].arch.sm == "sm_90a" and add.floor is not None
    assert add.floor.portable and add.floor.arch.compute == "compute_90"
    assert b".target sm_90\n" in add.floor.ptx and b"sm_90a" not in add.floor.ptx
    for arch in ("sm_90", "sm_100", "sm_120"):  # every newer GPU can JIT it
        assert not _toolkit_ptxas_refuses(add.floor.ptx, arch, tmp_path)
    # the tutorial matmul uses wgmma on sm_90a: no portable PTX, and the label stays honest
    mm = compile_kernel(tk.matmul_kernel, tk.MATMUL_SIGNATURE, ["sm_90", "sm_100"],
                        constexprs=tk.MATMUL_CONSTEXPRS, min_driver="12.9")
    assert mm.floor is not None and not mm.floor.portable
    assert mm.floor.arch.compute == "compute_90a" and "wgmma" in mm.floor.reason
    relabelled = mm.floor.ptx.replace(b".target sm_90a", b".target sm_90")
    assert _toolkit_ptxas_refuses(relabelled, "sm_90", tmp_path)
    assert not _toolkit_ptxas_refuses(mm.floor.ptx, "sm_90a", tmp_path)
    # the largest shared memory over the targets: one launch size enough everywhere
    assert mm.shared == max(i.shared for i in mm.images) > min(i.shared for i in mm.images)


def test_min_driver_makes_every_image_load_on_that_driver(tmp_path: Path) -> None:
    k = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, TARGETS,
                       constexprs=tk.ADD_CONSTEXPRS, min_driver="12.4")
    assert k.floor is not None and k.floor.ptx_version <= (8, 4)
    assert b".version 8.4" in k.floor.ptx
    producers = [_producer(i.cubin, tmp_path) for i in k.images]
    assert not any(p and p[0] >= 13 for p in producers), producers  # no CUDA 13 ptxas cubin
    fat = k.fatbin()
    for arch, how in ((80, "sass"), (86, "sass"), (90, "sass")):
        assert predict_load(fat, Arch(arch), (12, 4)).how == how
    assert predict_load(fat, Arch(103), (12, 9)).how == "ptx-jit"
    # without min_driver, Triton 3.5+ builds sm_90a+ with its CUDA 13 ptxas: an H100 on a
    # 12.x driver gets nothing (the driver picks the SASS, refuses it, does not fall back)
    import triton

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 5):
        new = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80", "sm_90"],
                             constexprs=tk.ADD_CONSTEXPRS)
        producer = _producer(new.images[1].cubin, tmp_path)
        assert producer is not None and producer[0] >= 13
        assert predict_load(new.fatbin(), Arch(90), (12, 4)).how == "none"


def test_min_driver_counts_from_each_gpus_first_driver(tmp_path: Path) -> None:
    """sm_100 GPUs run on CUDA 12.8 drivers and newer, sm_110 on 13.0 and newer: min_driver 12.4
    means 12.8 for the first (a 12.x ptxas, a floor of ISA 8.7, never below what sm_100a needs,
    which LLVM would abort the process on), and leaves sm_110 to Triton's CUDA 13 ptxas."""
    k = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_100", "sm_120"],
                       constexprs=tk.ADD_CONSTEXPRS, min_driver="12.4")
    assert k.floor is not None and k.floor.ptx_version == (8, 7)
    assert k.floor.arch.compute == "compute_100" and k.floor.portable
    producers = [_producer(i.cubin, tmp_path) for i in k.images]
    assert not any(p and p[0] >= 13 for p in producers), producers
    assert predict_load(k.fatbin(), Arch(100), (12, 8)).how == "sass"
    both = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80", "sm_110"],
                          constexprs=tk.ADD_CONSTEXPRS, min_driver="12.9")
    sm_110 = _producer(both.images[1].cubin, tmp_path)
    assert both.images[1].arch.sm == "sm_110a" and sm_110 is not None and sm_110[0] >= 13


def test_min_driver_that_cannot_be_met_is_refused_before_triton_runs() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cubins need a CUDA 12\.x driver"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"],
                       constexprs=tk.ADD_CONSTEXPRS, min_driver="11.8")
    with pytest.raises(InvalidArgumentError, match="no target"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, [], constexprs=tk.ADD_CONSTEXPRS)
    with pytest.raises(InvalidArgumentError, match="not a Triton kernel and its signature"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"], constexprs={"NOPE": 1})
    with pytest.raises(FatbinkitError, match="Triton failed to compile for sm_80"):
        compile_kernel(tk.add_kernel, {"x_ptr": "*fp32"}, ["sm_80"])


def test_jobs_progress_and_targets_follow_the_api_conventions() -> None:
    """``jobs`` checked at the call (as :func:`fatbinkit.parallel.as_jobs`), ``progress`` told of
    each target compiled (a :class:`fatbinkit.progress.Step`), one target alone accepted, errors
    naming the keyword, a short repr."""
    steps: list[Step] = []
    one = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, "sm_80", constexprs=tk.ADD_CONSTEXPRS,
                         floor=False, progress=steps.append)
    assert [i.arch.sm for i in one.images] == ["sm_80"]
    assert steps == [Step(1, 1, "arch", "sm_80")]
    steps.clear()
    two = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_90", "sm_80"], floor=False,
                         constexprs=tk.ADD_CONSTEXPRS, progress=steps.append, jobs=2)
    assert [s.done for s in steps] == [1, 2] and {s.total for s in steps} == {2}
    assert sorted(s.name for s in steps) == ["sm_80", "sm_90a"]
    assert repr(two) == "TritonKernel(name='add_kernel', images=<sm_80, sm_90a>, floor=None)"
    for bad in (0, "2", 1.5, True):
        with pytest.raises(InvalidArgumentError, match="jobs must be"):
            compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"], jobs=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="jobs must be"):
            retarget(object(), ["sm_80"], jobs=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="progress must be"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"], constexprs=tk.ADD_CONSTEXPRS,
                       progress="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"targets=\[ARCHS\]"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, [], constexprs=tk.ADD_CONSTEXPRS)
    with pytest.raises(InvalidArgumentError, match=r"min_driver='11\.8'"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"],
                       constexprs=tk.ADD_CONSTEXPRS, min_driver="11.8")


@pytest.mark.usefixtures("fresh")
def test_parallel_compiles_equal_serial_ones_and_retarget_equals_compiling_the_source() -> None:
    args = (tk.matmul_kernel, tk.MATMUL_SIGNATURE, ["sm_80", "sm_90", "sm_120"])
    import ast

    parse = ast.parse
    serial = compile_kernel(*args, constexprs=tk.MATMUL_CONSTEXPRS, jobs=1)
    parallel = compile_kernel(*args, constexprs=tk.MATMUL_CONSTEXPRS, jobs=3)
    assert serial == parallel  # every cubin and PTX byte, every field
    assert ast.parse is parse  # serialised during the pool (CPython gh-106905), then restored
    # what AOTInductor holds: the kernel Triton compiled for the build GPU (sm_90 here)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    built = triton.compile(ASTSource(fn=tk.matmul_kernel, signature=dict(tk.MATMUL_SIGNATURE),
                                     constexprs=dict(tk.MATMUL_CONSTEXPRS)),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4, "num_stages": 3})
    again = retarget(built, ["sm_80", "sm_90", "sm_120"])
    assert again.images == serial.images
    assert again.images[1].cubin == built.asm["cubin"]  # its own target: reused
    with pytest.raises(InvalidArgumentError, match="not a compiled Triton kernel"):
        retarget(object(), ["sm_80"])


def test_a_kernel_from_pypi_gets_sass_for_every_target_and_a_portable_floor(
        tmp_path: Path) -> None:
    """Liger-Kernel's softmax (PyPI's liger-kernel, not written for these tests): the floor is
    portable by the toolkit's own ptxas for every newer GPU, and the fatbin reads back in
    cuobjdump as one cubin per target plus the floor."""
    liger = pytest.importorskip("liger_kernel.ops.softmax")
    kernel = compile_kernel(liger._softmax_single_block_forward_kernel, LIGER_SOFTMAX,
                            TARGETS, constexprs={"BLOCK_SIZE": 1024}, min_driver="12.8")
    assert kernel.floor is not None and kernel.floor.portable
    for arch in ("sm_80", "sm_86", "sm_90", "sm_100", "sm_120"):
        assert not _toolkit_ptxas_refuses(kernel.floor.ptx, arch, tmp_path)
    fat = tmp_path / "softmax.fatbin"
    fat.write_bytes(kernel.fatbin(compression="zstd"))
    name = "_softmax_single_block_forward_kernel"
    assert cuobjdump_list(fat) == [
        *(f"ELF file {n:4}: {name}.{i.arch.sm}.cubin" for n, i in enumerate(kernel.images, 1)),
        f"PTX file    1: {name}.sm_80.ptx"]


#: Liger-Kernel's _softmax_single_block_forward_kernel(Y_ptr, Y_row_stride, X_ptr,
#: X_row_stride, n_cols, BLOCK_SIZE: tl.constexpr)
LIGER_SOFTMAX = {"Y_ptr": "*fp32", "Y_row_stride": "i32", "X_ptr": "*fp32",
                 "X_row_stride": "i32", "n_cols": "i32", "BLOCK_SIZE": "constexpr"}


def test_a_triton_only_aot_flow_links_with_gcc_and_reads_back(
        add: TritonKernel, tmp_path: Path) -> None:
    """Kernels + launch table into one object (no toolchain), declared by the generated header:
    gcc compiles a C file against the header and links the object; ctypes reads every fatbin
    back byte for byte, cuobjdump lists it, and the header's constants are the kernels'."""
    import ctypes
    import json
    import shutil

    from fatbinkit.formats.elf_writer import write_object
    from fatbinkit.triton import LAUNCH_TABLE, blobs, header

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    mm = compile_kernel(tk.matmul_kernel, tk.MATMUL_SIGNATURE, ["sm_80", "sm_100"],
                        constexprs=tk.MATMUL_CONSTEXPRS)
    kernels = [add, mm]
    obj = tmp_path / "kernels.o"
    write_object(obj, blobs(kernels, compression="zstd"))
    (tmp_path / "kernels.h").write_text(header(kernels))
    (tmp_path / "use.c").write_text(
        '#include "kernels.h"\n'
        f"extern const unsigned char __{LAUNCH_TABLE}_start[], __{LAUNCH_TABLE}_end[];\n"
        "const unsigned char *blob(int i) { return i == 0 ? __add_kernel_start :\n"
        f"  i == 1 ? __matmul_kernel_start : __{LAUNCH_TABLE}_start; }}\n"
        "size_t size(int i) { return i == 0 ? (size_t)(__add_kernel_end - __add_kernel_start) :\n"
        "  i == 1 ? (size_t)(__matmul_kernel_end - __matmul_kernel_start) :\n"
        f"  (size_t)(__{LAUNCH_TABLE}_end - __{LAUNCH_TABLE}_start); }}\n"
        "int constant(int i) { return i == 0 ? ADD_KERNEL_BLOCK_THREADS :\n"
        "  i == 1 ? MATMUL_KERNEL_SHARED : MATMUL_KERNEL_GLOBAL_SCRATCH; }\n")
    lib = tmp_path / "libkernels.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(lib),
                    str(tmp_path / "use.c"), str(obj)], check=True)
    so = ctypes.CDLL(str(lib))
    so.blob.restype = ctypes.c_void_p
    so.size.restype = ctypes.c_size_t
    got = [ctypes.string_at(so.blob(i), so.size(i)) for i in range(3)]
    assert got[0] == add.fatbin(compression="zstd")
    assert got[1] == mm.fatbin(compression="zstd")
    table = json.loads(got[2])
    assert [k["name"] for k in table["kernels"]] == ["add_kernel", "matmul_kernel"]
    assert table["kernels"][1]["shared"] == mm.shared == so.constant(1)
    assert table["kernels"][1]["sass"] == ["sm_80", "sm_100a"]
    assert table["kernels"][0]["ptx"] == ["compute_80"]
    assert so.constant(0) == add.num_warps * 32 and so.constant(2) == mm.global_scratch_size
    fat = tmp_path / "mm.fatbin"
    fat.write_bytes(got[1])
    assert cuobjdump_list(fat) == ["ELF file    1: matmul_kernel.sm_80.cubin",
                                   "ELF file    2: matmul_kernel.sm_100a.cubin",
                                   "PTX file    1: matmul_kernel.sm_80.ptx"]
    with pytest.raises(InvalidArgumentError, match="once each"):
        blobs([add, add])


def _image(arch: str, shared: int) -> TritonImage:
    return TritonImage("k", Arch.parse(arch), b"", b"", (8, 8), 4, shared, 0, 0)


def test_one_launch_size_must_fit_every_target() -> None:
    """The largest shared memory over the targets is what a C++ wrapper launches with: refused
    where it is more than a block may have on one target (CUDA C++ Programming Guide, technical
    specifications: sm_80 163 KB = 166,912 B, sm_86/89/120 99 KB = 101,376 B, sm_90/100
    227 KB = 232,448 B per block, opting in)."""
    fits = TritonKernel("k", (_image("sm_90a", 232_448), _image("sm_100a", 200_000)), None)
    fits.check_shared()
    with pytest.raises(InvalidArgumentError, match=r"sm_90a image needs 180000 B .* sm_80"):
        TritonKernel("k", (_image("sm_80", 90_000), _image("sm_90a", 180_000)), None
                     ).check_shared()
    TritonKernel("k", (_image("sm_80", 166_912), _image("sm_90a", 166_912)), None).check_shared()
    with pytest.raises(InvalidArgumentError, match="sm_120"):
        TritonKernel("k", (_image("sm_90a", 101_377), _image("sm_120a", 1024)), None
                     ).check_shared()
