"""Triton kernels for AMD GPUs on a machine without one: a code object per gfx target, compiled
in parallel, in one clang offload bundle. Checked against Triton itself (each target compiled
alone), clang-offload-bundler 22 (``--list``, ``--unbundle``), llvm-readelf 22 (the code
objects' own launch limits) and fatbinkit's ``ls``/``check`` command lines."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("triton")

from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.amdgpu import TargetId
from fatbinkit.progress import Step
from fatbinkit.triton import compile_kernel, retarget
from fatbinkit.triton_amd import AmdImage, AmdKernel
from tests.llvm import run_llvm

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import fatbinkit.demo.kernels as tk

TARGETS = ["gfx90a", "gfx942", "gfx1100", "gfx1201"]
MATMUL = (tk.matmul_kernel, tk.MATMUL_SIGNATURE)


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton compiles for real (its cache would make equal outputs trivially equal)."""
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")


@pytest.fixture(scope="module")
def mm() -> AmdKernel:
    with pytest.MonkeyPatch.context() as patch:  # compiled, not read from Triton's cache
        patch.setenv("TRITON_ALWAYS_COMPILE", "1")
        kernel = compile_kernel(*MATMUL, TARGETS, constexprs=tk.MATMUL_CONSTEXPRS,
                                num_warps=8)
    assert isinstance(kernel, AmdKernel)
    return kernel


def _alone(fn: Any, signature: dict[str, str], constexprs: dict[str, Any], arch: str,
           warp_size: int, **options: Any) -> bytes:
    """The oracle: Triton's own compile for one target, as its HIP driver asks it
    (``GPUTarget("hip", arch, warpSize)``)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    compiled = triton.compile(ASTSource(fn=fn, signature=dict(signature),
                                        constexprs=dict(constexprs)),
                              target=GPUTarget("hip", arch, warp_size), options=options)
    return bytes(compiled.asm["hsaco"])


def _bundler(*args: str | Path) -> str:
    proc = run_llvm(22, "clang-offload-bundler", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.usefixtures("fresh")
def test_each_code_object_is_tritons_own_for_that_target_and_clang_unbundles_it(
        mm: AmdKernel, tmp_path: Path) -> None:
    """Every target's code object equals ``triton.compile`` for that target alone (gfx9 with
    64-lane warps, gfx10+ with 32: Triton's rule); clang-offload-bundler 22 lists the bundle's
    entries and unbundles each to the same bytes."""
    path = tmp_path / "mm.hsaco"
    path.write_bytes(mm.bundle())
    ids = [f"hipv4-amdgcn-amd-amdhsa--{t}" for t in TARGETS]
    listed = _bundler("--list", "--type=o", f"--input={path}").split()
    assert sorted(listed) == sorted([*ids, "host-x86_64-unknown-linux-gnu-"])
    for target, warp, image, bundle_id in zip(TARGETS, (64, 64, 32, 32), mm.images, ids,
                                              strict=True):
        own = _alone(*MATMUL, tk.MATMUL_CONSTEXPRS, target, warp, num_warps=8)
        assert image.hsaco == own, target
        out = tmp_path / f"{target}.co"
        _bundler("--unbundle", "--type=o", f"--input={path}", f"--targets={bundle_id}",
                 f"--output={out}")
        assert out.read_bytes() == own, target


def _notes(hsaco: bytes, tmp_path: Path) -> dict[str, int]:
    """The kernel's launch limits as llvm-readelf 22 prints the metadata note."""
    path = tmp_path / "k.co"
    path.write_bytes(hsaco)
    proc = run_llvm(22, "llvm-readelf", "--notes", path)
    assert proc.returncode == 0, proc.stderr
    keys = ("max_flat_workgroup_size", "wavefront_size", "group_segment_fixed_size",
            "private_segment_fixed_size")
    return {k: int(re.search(rf"\.{k}:\s+(\d+)", proc.stdout)[1])  # type: ignore[index]
            for k in keys}


def test_the_launch_fits_every_target(mm: AmdKernel, tmp_path: Path) -> None:
    """One launch for every target: the same warps, threads per workgroup each target's code
    object allows (``.max_flat_workgroup_size``, by llvm-readelf), and the largest dynamic LDS
    (Triton's ``shared``: the code objects reserve none statically) over the targets."""
    for image in mm.images:
        notes = _notes(image.hsaco, tmp_path)
        assert image.block_threads == notes["max_flat_workgroup_size"] == mm.num_warps * \
            notes["wavefront_size"]
        assert mm.block_threads(image.target) == image.block_threads
        assert image.lds == notes["group_segment_fixed_size"] <= mm.lds
        assert image.scratch == notes["private_segment_fixed_size"] <= mm.scratch
    assert [i.block_threads for i in mm.images] == [512, 512, 256, 256]
    assert mm.shared == max(i.shared for i in mm.images) > min(i.shared for i in mm.images)
    entry = mm.launch_entry()
    assert entry["shared"] == mm.shared and entry["num_warps"] == 8
    assert [(t["target"], t["block_threads"]) for t in entry["targets"]] == [
        ("gfx90a", 512), ("gfx942", 512), ("gfx1100", 256), ("gfx1201", 256)]


def _fatbinkit(*args: str | Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.stdout


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_fatbinkit_ls_and_check_read_the_bundle(
        mm: AmdKernel, tmp_path: Path, compression: str | None) -> None:
    path = tmp_path / "mm.hsaco"
    path.write_bytes(mm.bundle(compression=compression))
    entries = json.loads(_fatbinkit("ls", path, "--json"))["entries"]
    assert [(e["arch"], e["bundle_id"], e["uncompressed"]) for e in entries] == [
        (str(i.target), i.bundle_id, len(i.hsaco)) for i in mm.images]
    assert {e["ccob_version"] for e in entries} == {3 if compression else None}
    doc = json.loads(_fatbinkit("check", path, "--arch", "gfx942", "--arch", "gfx1101",
                                "--json"))
    status = {k.split(":")[0]: v["status"] for k, v in doc["verdicts"].items()}
    assert status == {"gfx942": "works", "gfx1101": "fails"}  # gfx1100 code is not gfx1101's


@pytest.mark.usefixtures("fresh")
def test_parallel_compiles_equal_serial_ones_and_retarget_equals_compiling_the_source() -> None:
    import ast

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    parse = ast.parse
    serial = compile_kernel(*MATMUL, TARGETS, constexprs=tk.MATMUL_CONSTEXPRS, jobs=1)
    parallel = compile_kernel(*MATMUL, TARGETS, constexprs=tk.MATMUL_CONSTEXPRS, jobs=4)
    assert serial == parallel  # every code object byte, every field
    assert ast.parse is parse  # serialised during the pool (CPython gh-106905), then restored
    # what AOTInductor holds on ROCm: the kernel Triton compiled for the build GPU (an MI300)
    built = triton.compile(ASTSource(fn=tk.matmul_kernel, signature=dict(tk.MATMUL_SIGNATURE),
                                     constexprs=dict(tk.MATMUL_CONSTEXPRS)),
                           target=GPUTarget("hip", "gfx942", 64), options={"num_warps": 4})
    again = retarget(built, TARGETS)
    assert isinstance(again, AmdKernel) and again.images == serial.images
    assert again.images[1].hsaco == built.asm["hsaco"]  # its own target: reused
    with pytest.raises(InvalidArgumentError, match="not a Triton kernel compiled for an AMD"):
        retarget(object(), ["gfx942"])


def test_jobs_progress_and_targets_follow_the_api_conventions() -> None:
    steps: list[Step] = []
    one = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, "gfx942",
                         constexprs=tk.ADD_CONSTEXPRS, progress=steps.append)
    assert isinstance(one, AmdKernel) and one.targets == (TargetId("gfx942"),)
    assert steps == [Step(1, 1, "target", "gfx942")]
    two = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, [TargetId("gfx1100"), "gfx90a"],
                         constexprs=tk.ADD_CONSTEXPRS, jobs=2)
    assert repr(two) == "AmdKernel(name='add_kernel', images=<gfx90a, gfx1100>)"
    assert str(two.images[1]).startswith("add_kernel gfx1100: hsaco ")
    with pytest.raises(InvalidArgumentError, match="jobs must be"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["gfx942"], jobs=0)


@pytest.mark.parametrize(("targets", "message"), [
    (["sm_90", "gfx942"], r"targets mix AMD \(gfx942\) and other GPUs \(sm_90\)"),
    (["gfx90a:xnack+"], r"not a target ID with features \(gfx90a:xnack\+\)"),
    # Triton 3.9's HIPOptions reads "gfx11-generic" as gfx<major><minor><stepping>
    (["gfx942", "gfx11-generic"], r"does not compile for the generic target gfx11-generic"),
])
def test_what_triton_cannot_build_is_refused_before_it_runs(
        targets: list[str], message: str) -> None:
    steps: list[Step] = []
    with pytest.raises(InvalidArgumentError, match=message):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, targets, constexprs=tk.ADD_CONSTEXPRS,
                       progress=steps.append)
    assert steps == []
    with pytest.raises(InvalidArgumentError, match=r"min_driver='12\.4' is a CUDA driver"):
        compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["gfx942"], min_driver="12.4")


def test_one_bundle_holds_one_kernel(mm: AmdKernel) -> None:
    """Images of different kernels (another name, another argument layout) are refused."""
    add = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["gfx1100"],
                         constexprs=tk.ADD_CONSTEXPRS)
    assert isinstance(add, AmdKernel)
    with pytest.raises(InvalidArgumentError, match="one bundle holds one kernel"):
        AmdKernel("matmul_kernel", (mm.images[0], add.images[0]))


def test_a_triton_only_aot_flow_links_with_gcc_and_reads_back(
        mm: AmdKernel, tmp_path: Path) -> None:
    """The kernels and the launch table into one object (no toolchain), declared by the header:
    gcc compiles a C file against it and links the object; ctypes reads the bundle back byte
    for byte, clang-offload-bundler 22 lists it, the header's constants are the kernel's."""
    import ctypes
    import shutil

    from fatbinkit.formats.elf_writer import write_object
    from fatbinkit.triton import LAUNCH_TABLE, blobs, header

    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    add = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["gfx942", "gfx1201"],
                         constexprs=tk.ADD_CONSTEXPRS)
    assert isinstance(add, AmdKernel)
    kernels = [add, mm]
    obj = tmp_path / "kernels.o"
    write_object(obj, blobs(kernels, compression="zstd"))
    (tmp_path / "kernels.h").write_text(header(kernels))
    (tmp_path / "use.c").write_text(
        '#include "kernels.h"\n'
        f"extern const unsigned char __{LAUNCH_TABLE}_start[], __{LAUNCH_TABLE}_end[];\n"
        "const unsigned char *blob(int i) { return i == 0 ? __matmul_kernel_start :\n"
        f"  __{LAUNCH_TABLE}_start; }}\n"
        "size_t size(int i) { return i == 0 ? (size_t)(__matmul_kernel_end -\n"
        f"  __matmul_kernel_start) : (size_t)(__{LAUNCH_TABLE}_end - __{LAUNCH_TABLE}_start); }}\n"
        "int constant(int i) { return i == 0 ? MATMUL_KERNEL_BLOCK_THREADS(64) :\n"
        "  i == 1 ? MATMUL_KERNEL_BLOCK_THREADS(32) : MATMUL_KERNEL_SHARED; }\n")
    lib = tmp_path / "libkernels.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-Wall", "-Werror", "-o", str(lib),
                    str(tmp_path / "use.c"), str(obj)], check=True)
    so = ctypes.CDLL(str(lib))
    so.blob.restype = ctypes.c_void_p
    so.size.restype = ctypes.c_size_t
    got = [ctypes.string_at(so.blob(i), so.size(i)) for i in range(2)]
    assert got[0] == mm.bundle(compression="zstd")
    table = json.loads(got[1])
    assert [k["name"] for k in table["kernels"]] == ["add_kernel", "matmul_kernel"]
    assert table["kernels"][1]["shared"] == mm.shared == so.constant(2)
    assert [so.constant(0), so.constant(1)] == [512, 256]
    bundle = tmp_path / "mm.ccob"
    bundle.write_bytes(got[0])
    assert sorted(_bundler("--list", "--type=o", f"--input={bundle}").split()) == sorted(
        ["host-x86_64-unknown-linux-gnu-", *(i.bundle_id for i in mm.images)])
    cuda = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80"],
                          constexprs=tk.ADD_CONSTEXPRS, floor=False)
    with pytest.raises(InvalidArgumentError, match="CUDA and AMD GPUs in one object"):
        blobs([cuda, mm], ptx="none")


def _image(target: str, shared: int, lds: int = 0) -> AmdImage:
    return AmdImage("k", TargetId(target), b"", 4, 64, shared, 0, 0, lds, 0, ())


def test_one_launch_must_fit_every_targets_lds() -> None:
    """A workgroup addresses 64 KiB of LDS, 160 KiB on gfx950 (LLVM's AMDGPU.td,
    FeatureAddressableLocalMemorySize): the largest dynamic LDS over the targets plus the
    largest static LDS is what one launch needs, refused where a target has less."""
    AmdKernel("k", (_image("gfx942", 65_536), _image("gfx1100", 1024))).check_shared()
    AmdKernel("k", (_image("gfx950", 163_840),)).check_shared()
    with pytest.raises(InvalidArgumentError, match=r"needs 100000 B of LDS .* on gfx942"):
        AmdKernel("k", (_image("gfx942", 1024), _image("gfx950", 100_000))).check_shared()
    with pytest.raises(InvalidArgumentError, match=r"needs 65537 B of LDS .* on gfx1100"):
        AmdKernel("k", (_image("gfx1100", 65_000, 537),)).check_shared()
