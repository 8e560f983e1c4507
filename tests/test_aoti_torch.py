"""The AOTInductor switch against torch itself (the CPU build the suite installs: torch's
embedding and kernel-saving code runs without a GPU): torch's own ``batch_convert_cubins_to_obj``
(gcc + ``.incbin``) is the oracle for the objects; torch's own ``save_gpu_kernel`` and
``CudaKernelParamCache`` save a real Triton kernel through the switch, and cuobjdump and
``triton.compile`` of the source for each target check the fatbin it wrote. On the GPU,
tests/gpu/aoti_model.py compiles a real model (docs/gpu.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from elftools.elf.elffile import ELFFile
from fatbin_kernels import cuobjdump_extract, cuobjdump_list

import fatbinkit.aoti as aoti
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.progress import Step

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch._inductor.codecache as codecache
import torch._inductor.config as inductor_config
from torch._inductor.runtime import triton_heuristics

import fatbinkit.demo.kernels as tk

ARCHS = ["sm_80", "sm_90", "sm_100", "sm_120"]


def _names() -> dict[str, Any]:
    found = {name: getattr(codecache, name) for name in
             ("convert_cubin_to_obj", "batch_convert_cubins_to_obj") if hasattr(codecache, name)}
    found["save_gpu_kernel"] = triton_heuristics.CachingAutotuner.save_gpu_kernel
    found["set"] = vars(codecache.CudaKernelParamCache)["set"]
    return found


def test_the_switch_replaces_torchs_tool_runs_and_restores_them() -> None:
    before = _names()
    assert "convert_cubin_to_obj" in before  # every torch release since 2.5 has it
    embed = inductor_config.aot_inductor.embed_kernel_binary
    with pytest.warns(aoti.NoKernelWarning, match="packaged no kernel"), aoti.packaging(
            archs=ARCHS) as report:
        inside = _names()
        assert inductor_config.aot_inductor.embed_kernel_binary is True
        assert inductor_config.aot_inductor.emit_multi_arch_kernel is False  # no nvcc/fatbinary
        assert all(inside[n] is not before[n] for n in before)
        assert codecache.convert_cubin_to_obj.__name__ == "convert_cubin_to_obj"
        assert isinstance(vars(codecache.CudaKernelParamCache)["set"], classmethod)
        with pytest.raises(InvalidArgumentError, match="cannot nest"), aoti.packaging():
            pass
    assert report.archs == tuple(ARCHS)
    after = _names()
    assert all(after[n] is before[n] for n in before)
    assert inductor_config.aot_inductor.embed_kernel_binary == embed
    with aoti.packaging() as plain:  # embedding only: the kernel-saving path is torch's
        assert triton_heuristics.CachingAutotuner.save_gpu_kernel is before["save_gpu_kernel"]
    assert plain.kernels == []
    with pytest.raises(InvalidArgumentError, match="archs is empty"), aoti.packaging(archs=[]):
        pass
    for bad, match in (({"archs": ARCHS, "min_driver": "twelve"}, "min_driver"),
                       ({"min_driver": "12.4"}, "apply to archs"),
                       ({"archs": ARCHS, "jobs": 0}, "jobs must be"),
                       ({"archs": ARCHS, "jobs": "2"}, "jobs must be"),
                       ({"archs": ARCHS, "progress": "yes"}, "progress must be"),
                       ({"archs": ARCHS, "compression": "gzip"}, "compression must be")):
        with pytest.raises(InvalidArgumentError, match=match), aoti.packaging(**bad):
            pass


def _symbols(obj: Path) -> dict[str, tuple[int, int, str]]:
    """name -> (value, size, section name or ABS) of the object's global symbols."""
    with obj.open("rb") as f:
        elf = ELFFile(f)
        out = {}
        for sym in elf.get_section_by_name(".symtab").iter_symbols():
            if sym.name and sym["st_info"]["bind"] == "STB_GLOBAL":
                shndx = sym["st_shndx"]
                where = "ABS" if shndx == "SHN_ABS" else elf.get_section(shndx).name
                out[sym.name] = (sym["st_value"], sym["st_size"], where)
        return out


def _rodata(obj: Path) -> bytes:
    with obj.open("rb") as f:
        return bytes(ELFFile(f).get_section_by_name(".rodata").data())


@pytest.mark.skipif(not hasattr(codecache, "batch_convert_cubins_to_obj") or not shutil.which(
    "gcc"), reason="torch < 2.12 has no batch_convert_cubins_to_obj, or no gcc")
def test_batch_embedding_equals_torchs_own_gcc_incbin_object(tmp_path: Path) -> None:
    blobs = []
    for name, size in (("triton_poi_fused_add_0", 8808), ("triton_red_fused_1", 13),
                       ("triton_per_fused_softmax_2", 1)):
        path = tmp_path / f"{name}.cubin"
        path.write_bytes(bytes((i * 7 + size) % 251 for i in range(size)))
        blobs.append((str(path), name))
    theirs_dir, ours_dir = tmp_path / "torch", tmp_path / "fatbinkit"
    theirs_dir.mkdir()
    ours_dir.mkdir()
    theirs = Path(codecache.batch_convert_cubins_to_obj(blobs, str(theirs_dir)))
    with aoti.packaging() as report:
        ours = Path(codecache.batch_convert_cubins_to_obj(blobs, str(ours_dir), "no-such-cc"))
    assert ours == ours_dir / "cubins_combined.o" and report.objects == [str(ours)]
    assert _rodata(ours) == _rodata(theirs)  # same blobs at the same 16-byte aligned offsets
    assert _symbols(ours) == _symbols(theirs)  # _start/_end in .rodata, _size absolute


def test_convert_cubin_to_obj_links_as_torchs_ld_objcopy_one(tmp_path: Path) -> None:
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF" + bytes(range(200)))
    with aoti.packaging():
        obj = Path(codecache.convert_cubin_to_obj(str(cubin), "triton_k_0", "ld", "objcopy"))
    assert obj == Path(f"{cubin}.o")
    syms = _symbols(obj)
    assert syms["__triton_k_0_size"] == (204, 0, "ABS")
    assert syms["__triton_k_0_start"][2] == ".rodata" and _rodata(obj) == cubin.read_bytes()


def _compiled_for_sm_90() -> Any:
    """What AOTInductor holds for a kernel it built on an H100/H200: Triton's CompiledKernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    return triton.compile(
        ASTSource(fn=tk.matmul_kernel, signature=dict(tk.MATMUL_SIGNATURE),
                  constexprs=dict(tk.MATMUL_CONSTEXPRS)),
        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})


def _save(compiled: Any, key: str) -> dict[str, Any]:
    """torch's own CachingAutotuner.save_gpu_kernel, on a launcher holding ``compiled``."""
    import triton

    args = [n for n, t in tk.MATMUL_SIGNATURE.items() if t != "constexpr"]
    tuner = SimpleNamespace(
        inductor_meta={"kernel_name": key}, device_props=SimpleNamespace(type="cuda"),
        triton_meta={"signature": dict(tk.MATMUL_SIGNATURE), "device": 0,
                     "constants": dict(tk.MATMUL_CONSTEXPRS)})
    launcher = SimpleNamespace(
        bin=compiled, config=triton.Config({}, num_warps=4, num_stages=3), def_args=args,
        call_args=args, global_scratch=compiled.metadata.global_scratch_size,
        profile_scratch=getattr(compiled.metadata, "profile_scratch_size", None))
    triton_heuristics.CachingAutotuner.save_gpu_kernel(tuner, 0, launcher)
    return codecache.CudaKernelParamCache.cache[key]


def test_the_switch_saves_each_kernel_as_one_fatbin_for_every_arch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")  # cached cubins may carry an old file path
    compiled = _compiled_for_sm_90()
    plain = _save(compiled, "triton_tem_fused_mm_0")  # torch alone: the sm_90a cubin
    assert Path(plain["cubin_path"]).read_bytes() == compiled.asm["cubin"]
    steps: list[Step] = []
    with aoti.packaging(archs=ARCHS, compression="zstd", progress=steps.append) as report:
        params = _save(compiled, "triton_tem_fused_mm_1")
        _save(compiled, "triton_tem_fused_mm_1")  # torch saves a kernel at every launch
    assert steps == [Step(1, None, "kernel", "matmul_kernel")]  # packaged once
    fat = Path(params["cubin_path"])
    assert cuobjdump_list(fat) == [
        *(f"ELF file {n}: matmul_kernel.{a}.cubin".replace("file ", "file    ")
          for n, a in enumerate(["sm_80", "sm_90a", "sm_100a", "sm_120a"], 1)),
        "PTX file    1: matmul_kernel.sm_80.ptx"]
    extracted = cuobjdump_extract(fat, tmp_path / "x")
    for number, sm in ((80, "sm_80"), (90, "sm_90a"), (100, "sm_100a"), (120, "sm_120a")):
        direct = triton.compile(  # the source compiled for that target: the same bytes
            ASTSource(fn=tk.matmul_kernel, signature=dict(tk.MATMUL_SIGNATURE),
                      constexprs=dict(tk.MATMUL_CONSTEXPRS)),
            target=GPUTarget("cuda", number, 32), options={"num_warps": 4, "num_stages": 3})
        assert extracted[f"matmul_kernel.{sm}.cubin"] == direct.asm["cubin"]
        assert direct.metadata.shared <= params["shared_mem"]
    # sm_100a's tiles need 64 KiB of shared memory, the H200's 32: the launch reserves the most
    assert params["shared_mem"] == 65552 > compiled.metadata.shared
    assert [str(k) for k in report.kernels] == [
        f"matmul_kernel: SASS sm_80, sm_90a, sm_100a, sm_120a + compute_80; "
        f"{fat.stat().st_size} B, 65552 B shared"]


def test_without_archs_torchs_multi_arch_output_is_written_by_fatbinkit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """emit_multi_arch_kernel on: torch would run fatbinary (or nvcc -fatbin) for the cubin and
    its PTX; the switch writes that fatbin itself, labelled with Triton's real target."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    compiled = _compiled_for_sm_90()
    with inductor_config.patch({"aot_inductor.emit_multi_arch_kernel": True}), aoti.packaging():
        assert inductor_config.aot_inductor.emit_multi_arch_kernel is False
        params = _save(compiled, "triton_tem_fused_mm_2")
    fat = Path(params["cubin_path"])
    assert fat.suffix == ".cubin"  # torch's name; the content is the fatbin
    assert cuobjdump_list(fat) == ["ELF file    1: matmul_kernel.sm_90a.cubin",
                                   "PTX file    1: matmul_kernel.sm_90a.ptx"]
    extracted = cuobjdump_extract(fat, tmp_path / "x")
    assert extracted["matmul_kernel.sm_90a.cubin"] == compiled.asm["cubin"]
    assert extracted["matmul_kernel.sm_90a.ptx"] == compiled.asm["ptx"].encode().rstrip(b"\0")
    assert params["shared_mem"] == compiled.metadata.shared


def test_no_toolchain_runs_inside_the_switch(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Every process started while the switch saves and embeds kernels is recorded: only
    Triton's own ptxas runs (compiling the other targets), never ld, objcopy, gcc, nvcc or
    fatbinary."""
    import triton

    started: list[list[str]] = []
    real = subprocess.Popen.__init__

    def record(self: Any, args: Any, *a: Any, **kw: Any) -> None:
        started.append([str(x) for x in args] if isinstance(args, (list, tuple)) else [args])
        real(self, args, *a, **kw)

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    compiled = _compiled_for_sm_90()
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    with aoti.packaging(archs=ARCHS):
        monkeypatch.setattr(subprocess.Popen, "__init__", record)
        _save(compiled, "triton_tem_fused_mm_3")
        codecache.convert_cubin_to_obj(str(cubin), "k", "ld", "objcopy")
        if hasattr(codecache, "batch_convert_cubins_to_obj"):
            codecache.batch_convert_cubins_to_obj([(str(cubin), "k")], str(tmp_path))
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    programs = [argv[0] for argv in started]
    assert programs and all(Path(cmd).parent == tools and Path(cmd).name.startswith("ptxas")
                            for cmd in programs), programs
    # the build GPU's own cubin is reused, not compiled again for sm_90a
    assert not any("sm_90a" in " ".join(argv) for argv in started), started


def test_multi_arch_turned_back_on_inside_the_switch_is_refused_before_any_tool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """inductor_configs (or compile_standalone) re-enabling emit_multi_arch_kernel inside the
    block would make torch run nvcc/fatbinary: the kernel save refuses it, naming the fix."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    compiled = _compiled_for_sm_90()
    with aoti.packaging(archs=ARCHS), inductor_config.patch(
            {"aot_inductor.emit_multi_arch_kernel": True}), pytest.raises(
            InvalidArgumentError, match="emit_multi_arch_kernel was turned back on"):
        _save(compiled, "triton_tem_fused_mm_4")


def test_the_api_names_keywords_in_its_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"apply to archs=\[ARCHS\]"), aoti.packaging(
            min_driver="12.4"):
        pass
    with pytest.raises(InvalidArgumentError, match="archs=") as refused, aoti.packaging(
            archs=ARCHS), inductor_config.patch({"aot_inductor.emit_multi_arch_kernel": True}):
        codecache.CudaKernelParamCache.set("k", {}, b"", "cubin")
    assert "--for" not in str(refused.value)


@pytest.mark.slow
def test_a_cpu_model_packaged_for_archs_warns_that_no_kernel_was_packaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real AOTInductor build of a model on the CPU, inside the switch with archs: torch builds
    its .so (C++ only) and the block says that no GPU kernel was there to package, and why."""
    import torch

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x) * 2 + 1

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    program = torch.export.export(Model(), (torch.randn(8),))
    with pytest.warns(aoti.NoKernelWarning, match="packaged no kernel") as said, aoti.packaging(
            archs=ARCHS) as report:
        package = torch._inductor.aoti_compile_and_package(
            program, package_path=str(tmp_path / "model.pt2"))
    assert Path(package).is_file() and report.kernels == []
    warning = next(w for w in said if w.category is aoti.NoKernelWarning)
    assert warning.filename == __file__  # pointed at the block, not at fatbinkit
    assert "archs=['sm_80', 'sm_90', 'sm_100', 'sm_120']" in str(warning.message)
    if torch.version.cuda is None:
        assert "CPU-only build" in str(warning.message)
    assert "no GPU kernel was compiled" in str(report)
