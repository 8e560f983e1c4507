"""A real torch model through AOTInductor, with and without fatbinkit's switch, on the GPU.

    python -m tests.gpu.aoti_model OUT [--archs sm_80,sm_90,sm_100,sm_120] [--autotune]

The model is an MLP with layer norm, GELU and softmax (several fused Triton kernels; with
``--autotune``, its matmuls are Triton templates too). Each step runs in its own process (an AOTI
runner that crashes takes only its step down), cold (an empty inductor and Triton cache):

1. ``torch``: ``aoti_compile_and_package`` as torch does it for multi-arch, embedded kernels
   (``embed_kernel_binary`` + ``emit_multi_arch_kernel``: nvcc -fatbin, ld, objcopy per kernel);
2. ``switch``: the same inside ``fatbinkit.aoti.packaging(archs=...)``, with the CUDA toolkit's
   bin off PATH and a guard directory first on PATH whose ``nvcc``, ``fatbinary``, ``ptxas`` and
   ``objcopy`` record any call and fail;
3. every process either compile started (argv), the compile time, the kernels;
4. ``fatbinkit check`` of the switch's ``.so`` for the requested archs (JSON);
5. each embedded kernel loaded from its ``__<name>_start`` symbol on this GPU (SASS or JIT, its
   load time), and the same kernels as torch would have shipped them PTX-only (cold JIT load);
6. the model run by the AOTI runner (``aoti_load_package``) and through the package's C ABI
   with ctypes, for both packages, compared with eager PyTorch;
7. the model through torch.compile with every Triton kernel launched from the function fatbinkit
   loads out of the switch's ``.so`` (as the driver picks from the fatbin, then from the PTX
   floor alone), compared with eager PyTorch: the proof where the AOTI runner crashes.

Writes ``OUT/aoti-report.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GUARDED = ("nvcc", "fatbinary", "ptxas", "objcopy")


def model_and_input() -> tuple[Any, Any]:
    import torch

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(512)
            self.fc1 = torch.nn.Linear(512, 1024)
            self.fc2 = torch.nn.Linear(1024, 256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.nn.functional.gelu(self.fc1(self.norm(x)))
            return torch.softmax(self.fc2(h) * 0.5, dim=-1)

    torch.manual_seed(0)
    model = MLP().cuda().eval()
    x = torch.randn(64, 512, device="cuda")
    return model, x


def compile_step(mode: str, out: Path, archs: list[str], autotune: bool) -> dict[str, Any]:
    """In a fresh process: compile the model, record every process started."""
    started: list[list[str]] = []
    real = subprocess.Popen.__init__

    def record(self: Any, args: Any, *a: Any, **kw: Any) -> None:
        started.append([str(x) for x in args] if isinstance(args, (list, tuple)) else [args])
        real(self, args, *a, **kw)

    subprocess.Popen.__init__ = record  # type: ignore[method-assign]
    import torch
    from torch._inductor.codecache import CudaKernelParamCache

    import fatbinkit.aoti

    chosen: dict[str, Any] = {}  # the config autotuning picked for each kernel (XBLOCK, warps)
    real_set = CudaKernelParamCache.set.__func__  # type: ignore[attr-defined]

    def remember(cls: Any, key: str, params: dict[str, Any], *rest: Any, **kw: Any) -> Any:
        chosen[key] = {k: v for k, v in params.get("config", {}).items()
                       if isinstance(v, (int, float, str))}
        return real_set(cls, key, params, *rest, **kw)

    CudaKernelParamCache.set = classmethod(remember)  # type: ignore[method-assign,assignment]

    model, x = model_and_input()
    configs: dict[str, Any] = {"aot_inductor.embed_kernel_binary": True}
    if mode == "torch":
        configs["aot_inductor.emit_multi_arch_kernel"] = True
    if autotune:
        configs.update({"max_autotune": True, "max_autotune_gemm_backends": "TRITON"})
    package = out / f"{mode}.pt2"
    with torch.no_grad():
        ep = torch.export.export(model, (x,))
        t0 = time.perf_counter()
        if mode == "switch":
            with fatbinkit.aoti.packaging(archs=archs) as report:
                torch._inductor.aoti_compile_and_package(
                    ep, package_path=str(package), inductor_configs=configs)
            summary = str(report)
            packaged = {k.name: k.shared for k in report.kernels}
        else:
            packaged = {}
            torch._inductor.aoti_compile_and_package(
                ep, package_path=str(package), inductor_configs=configs)
            summary = ""
        seconds = time.perf_counter() - t0
        expected = model(x)
    torch.save({"x": x.cpu(), "expected": expected.cpu()}, out / f"{mode}-io.pt")
    so = _unpack(package, out / mode)
    return {"mode": mode, "seconds": round(seconds, 2), "package": str(package), "so": str(so),
            "processes": started, "summary": summary, "shared": packaged, "configs": chosen,
            "torch": torch.__version__}


def _unpack(package: Path, where: Path) -> Path:
    import zipfile

    shutil.rmtree(where, ignore_errors=True)
    with zipfile.ZipFile(package) as z:
        z.extractall(where)
    (so,) = [p for p in where.rglob("*.so")]
    return so


def kernels_step(so: Path, out: Path) -> dict[str, Any]:
    """Load every embedded kernel from its symbol (SASS picked?) and, PTX only, cold."""
    import ctypes

    import torch  # noqa: F401  (the .so needs libtorch's symbols)

    from fatbinkit.formats.fatbin import EntryKind
    from fatbinkit.runtime import Module
    from fatbinkit.scan import scan

    lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    rows = []
    for name in _kernel_symbols(so):
        with Module.from_symbol(lib, name) as mod:
            kernels = [(k.name, k.binary_version, k.ptx_version, k.registers, k.shared_bytes)
                       for k in mod.kernels()]
            rows.append({"symbol": name, "kind": mod.kind, "load_ms": round(
                mod.load_seconds * 1e3, 3), "kernels": kernels})
    # the same kernels PTX-only (what a build that ships PTX alone makes every process JIT)
    jit = []
    for code in scan(so):
        if code.entry.header.kind == EntryKind.PTX:
            with Module.load(bytes(code.entry.data())) as mod:
                jit.append(round(mod.load_seconds * 1e3, 2))
    return {"symbols": rows, "ptx_only_load_ms": jit}


def _symbols(so: Path) -> list[str]:
    """The library's defined symbols, as binutils' nm lists them."""
    text = subprocess.run(["nm", "--defined-only", str(so)], capture_output=True, text=True,
                          check=True).stdout
    return [line.split()[-1] for line in text.splitlines() if line.strip()]


def run_step(mode: str, out: Path, how: str) -> dict[str, Any]:
    """Run the packaged model and compare with eager PyTorch's output."""
    import torch

    io = torch.load(out / f"{mode}-io.pt")
    x, expected = io["x"].cuda(), io["expected"].cuda()
    if how == "runner":
        runner = torch._inductor.aoti_load_package(str(out / f"{mode}.pt2"))
        got = runner(x)
        got = got[0] if isinstance(got, (list, tuple)) else got
    else:
        got = _c_abi_run(Path(json.loads((out / f"{mode}.json").read_text())["so"]), x, expected)
    diff = (got - expected).abs().max().item()
    return {"mode": mode, "how": how, "max_abs_diff": diff,
            "equal": bool(torch.allclose(got, expected, rtol=1e-4, atol=1e-5))}


def _c_abi_run(so: Path, x: Any, expected: Any) -> Any:
    """The model through the AOTI C ABI (torch/csrc/inductor/aoti_runtime/interface.h) with
    ctypes: AOTInductorModelContainerCreateWithDevice, then ...Run with tensor handles."""
    import ctypes

    import torch

    lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    handle = ctypes.c_void_p()
    cubin_dir = str(so.parent).encode()
    err = lib.AOTInductorModelContainerCreateWithDevice(
        ctypes.byref(handle), ctypes.c_size_t(1), b"cuda", ctypes.c_char_p(cubin_dir))
    if err:
        raise RuntimeError(f"AOTInductorModelContainerCreateWithDevice: {err}")
    inputs = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors([x])
    in_arr = (ctypes.c_void_p * 1)(*inputs)
    out_arr = (ctypes.c_void_p * 1)()
    stream = torch.cuda.current_stream().cuda_stream
    err = lib.AOTInductorModelContainerRun(handle, in_arr, ctypes.c_size_t(1), out_arr,
                                           ctypes.c_size_t(1), ctypes.c_void_p(stream), None)
    if err:
        raise RuntimeError(f"AOTInductorModelContainerRun: {err}")
    torch.cuda.synchronize()
    (got,) = torch._C._aoti.alloc_tensors_by_stealing_from_void_ptrs([out_arr[0]])
    return got


def direct_step(out: Path, how: str) -> dict[str, Any]:
    """The model through torch.compile, each Triton kernel launched from the CUfunction fatbinkit
    loads out of the switch's ``.so`` (the driver's pick of the embedded fatbin, or its PTX floor
    alone, JIT-compiled), compared with eager PyTorch: the AOTI runner crashes on this machine
    with or without the switch, so the embedded kernels are launched directly."""
    import ctypes

    import torch
    import torch._inductor.config as inductor_config
    from triton.compiler.compiler import CompiledKernel

    from fatbinkit.formats.fatbin import EntryKind, Fatbin
    from fatbinkit.runtime import Module

    switch = json.loads((out / "switch.json").read_text())
    so = Path(switch["so"])
    lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    functions: dict[str, Any] = {}
    blobs: dict[str, bytes] = {}
    modules = []
    for name in _kernel_symbols(so):
        start = ctypes.addressof(ctypes.c_char.in_dll(lib, f"__{name}_start"))
        end = ctypes.addressof(ctypes.c_char.in_dll(lib, f"__{name}_end"))
        blobs[name] = ctypes.string_at(start, end - start)
        if how == "none":
            continue
        if how == "floor":
            (ptx,) = [e for e in Fatbin.from_bytes(blobs[name]).entries
                      if e.kind == EntryKind.PTX]
            mod = Module.load(ptx)
        else:
            mod = Module.from_symbol(lib, name)
        modules.append(mod)
        functions[name] = mod.kernel(name)
    launched: list[str] = []
    swapped: dict[str, Any] = {}
    real = CompiledKernel._init_handles

    def init_handles(self: Any) -> None:
        real(self)
        name = self.metadata.name
        launched.append(name)
        ours = functions.get(name)
        if ours is None:
            return
        entries = Fatbin.from_bytes(blobs[name]).entries
        images = {e.arch.sm: bytes(e.data()) for e in entries if e.kind == EntryKind.ELF}
        (floor,) = [bytes(e.data()) for e in entries if e.kind == EntryKind.PTX]
        own = f"sm_{ours.binary_version}a" if ours.binary_version >= 90 else ""
        swapped[name] = {"binary_version": ours.binary_version, "ptx_version":
                         ours.ptx_version, "same_cubin_as_torch_compile":
                         images.get(own) == bytes(self.asm["cubin"]),
                         "params_torch_compile": _ptx_params(self.asm["ptx"]),
                         "params_aoti": _ptx_params(floor)}
        self.function = int(ours.handle)
        self.shared = max(self.metadata.shared, switch["shared"].get(name, 0))  # as AOTI launches

    CompiledKernel._init_handles = init_handles  # type: ignore[method-assign]
    if hasattr(inductor_config, "use_static_cuda_launcher"):
        inductor_config.use_static_cuda_launcher = False  # Triton's launcher, our function
    # the config AOTI's autotuning picked (XBLOCK is baked into the kernel, the launcher's grid
    # follows its own config): torch.compile is held to it, compiling in this process
    inductor_config.compile_threads = 1
    _hold_configs(switch["configs"])
    model, x = model_and_input()
    with torch.no_grad():
        got = torch.compile(model)(x)
        expected = model(x)
    return {"how": how, "launched": sorted(set(launched)), "swapped": swapped,
            "max_abs_diff": (got - expected).abs().max().item(),
            "equal": bool(torch.allclose(got, expected, rtol=1e-4, atol=1e-5))}


def _hold_configs(configs: dict[str, dict[str, Any]]) -> None:
    """Make every CachingAutotuner of a kernel in ``configs`` try that config alone."""
    import inspect

    import triton
    from torch._inductor.runtime import triton_heuristics

    real = triton_heuristics.CachingAutotuner.__init__
    signature = inspect.signature(real)
    launch = ("num_warps", "num_stages")

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        want = configs.get(getattr(bound.arguments["fn"], "__name__", ""))
        if want is not None:
            bound.arguments["configs"] = [triton.Config(
                {k: v for k, v in want.items() if k not in launch and not k.startswith("num_")},
                num_warps=want["num_warps"], num_stages=want["num_stages"])]
        real(*bound.args, **bound.kwargs)

    triton_heuristics.CachingAutotuner.__init__ = init  # type: ignore[method-assign]


def _ptx_params(ptx: Any) -> list[str]:
    """The entry's parameter types, from its PTX (``.param .u64 .ptr ...``)."""
    text = ptx if isinstance(ptx, str) else bytes(ptx).decode("utf-8", "replace")
    head = text[text.index(".entry"):text.index(")", text.index(".entry"))]
    return [line.split()[1] for line in head.splitlines() if line.strip().startswith(".param")]


def _kernel_symbols(so: Path) -> list[str]:
    """The kernels embedded as ``__<name>_start`` (not the weights' ``_binary_...``)."""
    return sorted({s[2:-6] for s in _symbols(so) if s.startswith("__") and s.endswith("_start")})


def check_step(so: Path, archs: list[str]) -> dict[str, Any]:
    args = [sys.executable, "-m", "fatbinkit", "check", str(so), "--json"]
    for a in archs:
        args += ["--arch", a]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    return {"rc": proc.returncode, "report": json.loads(proc.stdout) if proc.stdout else None,
            "stderr": proc.stderr[-2000:]}


def _child(step: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "tests.gpu.aoti_model", "--step", step, *args],
                          capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    result: dict[str, Any] = {"rc": proc.returncode, "stderr": proc.stderr[-3000:]}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if lines:
        result.update(json.loads(lines[-1]))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--archs", default="sm_80,sm_90,sm_100,sm_120")
    ap.add_argument("--autotune", action="store_true")
    ap.add_argument("--step", help=argparse.SUPPRESS)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    ap.add_argument("--how", help=argparse.SUPPRESS)
    args = ap.parse_args()
    out = args.out.resolve()
    archs = args.archs.split(",")
    if args.step == "compile":
        print(json.dumps(compile_step(args.mode, out, archs, args.autotune)))
        return 0
    if args.step == "run":
        print(json.dumps(run_step(args.mode, out, args.how)))
        return 0
    if args.step == "direct":
        print(json.dumps(direct_step(out, args.how)))
        return 0
    if args.step == "kernels":
        so = Path(json.loads((out / f"{args.mode}.json").read_text())["so"])
        print(json.dumps(kernels_step(so, out)))
        return 0

    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"archs": archs, "autotune": args.autotune}
    guard = out / "guard"
    guard.mkdir(exist_ok=True)
    for tool in GUARDED:
        script = guard / tool
        script.write_text(f'#!/bin/sh\necho "{tool} $*" >> {out}/guard.log\nexit 1\n')
        script.chmod(0o755)
    cuda_bins = {"/usr/local/cuda/bin", os.path.realpath("/usr/local/cuda/bin")}
    path = [str(guard)] + [p for p in os.environ["PATH"].split(":")
                           if p and os.path.realpath(p) not in cuda_bins]
    for mode in ("torch", "switch"):
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(out / f"cache-{mode}"),
                   TRITON_CACHE_DIR=str(out / f"triton-{mode}"))
        if mode == "switch":
            env["PATH"] = ":".join(path)
        extra = ["--autotune"] if args.autotune else []
        step = _child("compile", str(out), "--mode", mode, "--archs", args.archs, *extra,
                      env=env)
        (out / f"{mode}.json").write_text(json.dumps(step, indent=1))
        report[f"compile_{mode}"] = step
    cold = dict(os.environ, CUDA_CACHE_DISABLE="1")  # every PTX load JIT-compiles
    report["guard_log"] = (out / "guard.log").read_text() if (out / "guard.log").exists() else ""
    if "so" in report["compile_switch"]:
        report["check"] = check_step(Path(report["compile_switch"]["so"]), archs)
        report["kernels_switch"] = _child("kernels", str(out), "--mode", "switch", env=cold)
    if "so" in report["compile_torch"]:
        report["kernels_torch"] = _child("kernels", str(out), "--mode", "torch", env=cold)
    if "so" in report["compile_switch"]:
        for how in ("none", "fatbin", "floor"):
            env = dict(cold, TORCHINDUCTOR_CACHE_DIR=str(out / f"cache-direct-{how}"))
            report[f"direct_{how}"] = _child("direct", str(out), "--how", how, env=env)
    for mode in ("torch", "switch"):
        for how in ("runner", "c-abi"):
            if "so" in report[f"compile_{mode}"]:
                report[f"run_{mode}_{how}"] = _child("run", str(out), "--mode", mode,
                                                     "--how", how)
    (out / "aoti-report.json").write_text(json.dumps(report, indent=1))
    for key, value in report.items():
        if isinstance(value, dict):
            brief = {k: v for k, v in value.items() if k not in ("processes", "stderr", "report")}
            print(key, json.dumps(brief)[:600])
            if value.get("rc"):
                print("   stderr:", value.get("stderr", "")[-800:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
