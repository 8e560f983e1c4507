"""The AOTInductor switch for ROCm torch, against torch itself: the suite's CPU build of torch,
told it is ROCm (``torch.version.hip``, as tests/test_aoti_torch.py fakes nothing more than the
device properties), saves a real Triton kernel through its own ``save_gpu_kernel`` and
``CudaKernelParamCache`` with ``device_props.type == "hip"``; clang-offload-bundler 22 and
``triton.compile`` of the source for each target check the bundle the switch wrote."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

import fatbinkit.aoti as aoti
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.progress import Step
from tests.llvm import run_llvm

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch
import torch._inductor.codecache as codecache
import torch._inductor.config as inductor_config
from torch._inductor.runtime import triton_heuristics

import fatbinkit.demo.kernels as tk

ARCHS = ["gfx90a", "gfx942", "gfx1100"]
HOST = "host-x86_64-unknown-linux-gnu-"


@pytest.fixture
def rocm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch says it is a ROCm build (what torch's kernel saving and path naming read); its
    cache in the test's folder; Triton compiles for real."""
    monkeypatch.setattr(torch.version, "hip", "7.0.51831-fake")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")


def _compile(arch: str, warp_size: int) -> Any:
    """What AOTInductor holds for a kernel built on that GPU: Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    return triton.compile(
        ASTSource(fn=tk.matmul_kernel, signature=dict(tk.MATMUL_SIGNATURE),
                  constexprs=dict(tk.MATMUL_CONSTEXPRS)),
        target=GPUTarget("hip", arch, warp_size), options={"num_warps": 4})


def _save(compiled: Any, key: str) -> dict[str, Any]:
    """torch's own CachingAutotuner.save_gpu_kernel, on a launcher holding ``compiled``, for
    a HIP device."""
    import triton

    args = [n for n, t in tk.MATMUL_SIGNATURE.items() if t != "constexpr"]
    tuner = SimpleNamespace(
        inductor_meta={"kernel_name": key}, device_props=SimpleNamespace(type="hip"),
        triton_meta={"signature": dict(tk.MATMUL_SIGNATURE), "device": 0,
                     "constants": dict(tk.MATMUL_CONSTEXPRS)})
    launcher = SimpleNamespace(
        bin=compiled, config=triton.Config({}, num_warps=4), def_args=args,
        call_args=args, global_scratch=compiled.metadata.global_scratch_size,
        profile_scratch=getattr(compiled.metadata, "profile_scratch_size", None))
    triton_heuristics.CachingAutotuner.save_gpu_kernel(tuner, 0, launcher)
    return codecache.CudaKernelParamCache.cache[key]


def _bundler(*args: str | Path) -> str:
    proc = run_llvm(22, "clang-offload-bundler", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.usefixtures("rocm")
def test_the_switch_saves_each_kernel_as_one_bundle_for_every_target(tmp_path: Path) -> None:
    compiled = _compile("gfx942", 64)  # built on an MI300
    plain = _save(compiled, "triton_tem_fused_mm_0")  # torch alone: the gfx942 code object
    assert Path(plain["hsaco_path"]).read_bytes() == compiled.asm["hsaco"]
    steps: list[Step] = []
    with aoti.packaging(archs=ARCHS, progress=steps.append) as report:
        assert inductor_config.aot_inductor.emit_multi_arch_kernel is False  # no ROCm clang
        params = _save(compiled, "triton_tem_fused_mm_1")
        _save(compiled, "triton_tem_fused_mm_1")  # torch saves a kernel at every launch
    assert steps == [Step(1, None, "kernel", "matmul_kernel")]  # packaged once
    bundle = Path(params["hsaco_path"])
    assert bundle.suffix == ".hsaco"  # torch's name, as its own multi-arch bundles have
    ids = [f"hipv4-amdgcn-amd-amdhsa--{a}" for a in ARCHS]
    assert sorted(_bundler("--list", "--type=o", f"--input={bundle}").split()) == sorted(
        [HOST, *ids])
    shared = []
    for arch, warp_size, bundle_id in zip(ARCHS, (64, 64, 32), ids, strict=True):
        out = tmp_path / f"{arch}.co"
        _bundler("--unbundle", "--type=o", f"--input={bundle}", f"--targets={bundle_id}",
                 f"--output={out}")
        direct = _compile(arch, warp_size)  # the source compiled for that target alone
        assert out.read_bytes() == direct.asm["hsaco"], arch
        shared.append(direct.metadata.shared)
    # gfx1100's 32-lane warps need twice the LDS of the MI300's tiles: the launch reserves it
    assert params["shared_mem"] == max(shared) == 2 * compiled.metadata.shared
    assert [str(k) for k in report.kernels] == [
        f"matmul_kernel: hsaco gfx90a, gfx942, gfx1100; {bundle.stat().st_size} B, "
        f"{max(shared)} B shared"]


@pytest.mark.usefixtures("rocm")
def test_without_archs_the_saved_code_object_is_torchs_own() -> None:
    compiled = _compile("gfx1100", 32)
    theirs = _save(compiled, "triton_poi_fused_0")
    with aoti.packaging() as report:
        assert triton_heuristics.CachingAutotuner.save_gpu_kernel is vars(
            triton_heuristics.CachingAutotuner)["save_gpu_kernel"]
        ours = _save(compiled, "triton_poi_fused_1")
    assert Path(ours["hsaco_path"]).read_bytes() == Path(theirs["hsaco_path"]).read_bytes()
    same = {k for k in theirs if not k.endswith("path") and k != "inductor_meta"}  # the key
    assert {k: ours[k] for k in same} == {k: theirs[k] for k in same}
    assert report.kernels == []


@pytest.mark.usefixtures("rocm")
def test_no_process_runs_inside_the_switch(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process started while the switch saves and embeds a ROCm kernel is recorded:
    none (Triton's AMD backend compiles and links in-process; no clang, clang-offload-bundler,
    ld, objcopy or gcc)."""
    started: list[Any] = []
    real = subprocess.Popen.__init__

    def record(self: Any, args: Any, *a: Any, **kw: Any) -> None:
        started.append(args)
        real(self, args, *a, **kw)

    compiled = _compile("gfx942", 64)
    code = tmp_path / "k.hsaco"
    code.write_bytes(compiled.asm["hsaco"])
    with aoti.packaging(archs=ARCHS):
        monkeypatch.setattr(subprocess.Popen, "__init__", record)
        _save(compiled, "triton_tem_fused_mm_3")
        codecache.convert_cubin_to_obj(str(code), "k", "ld", "objcopy")
        if hasattr(codecache, "batch_convert_cubins_to_obj"):
            codecache.batch_convert_cubins_to_obj([(str(code), "k")], str(tmp_path))
    assert started == []


@pytest.mark.usefixtures("rocm")
def test_what_rocm_torch_cannot_take_is_refused() -> None:
    for bad, match in (({"archs": ["sm_90"]}, r"this torch is ROCm: give AMD targets"),
                       ({"archs": ["gfx942", "sm_90"]}, "targets mix AMD"),
                       ({"archs": ARCHS, "min_driver": "12.4"}, "is a CUDA driver"),
                       ({"archs": ARCHS, "compression": "lz4"}, "zlib, zstd or None")):
        with pytest.raises(InvalidArgumentError, match=match), aoti.packaging(**bad):
            pass
    with inductor_config.patch({"aot_inductor.emit_multi_arch_kernel": True}), pytest.raises(
            InvalidArgumentError, match=r"ROCm's clang .*archs=\[TARGETS\]"), \
            aoti.packaging():
        pass


def test_amd_targets_need_a_rocm_torch() -> None:
    if torch.version.hip is not None:
        pytest.skip("this torch is ROCm")
    with pytest.raises(InvalidArgumentError, match="this torch is not ROCm"), aoti.packaging(
            archs=ARCHS):
        pass
