"""``fatbinkit demo``: the whole pipeline on the bundled kernels, in about a minute.

1. Triton compiles ``add_kernel`` (:mod:`fatbinkit.demo.kernels`) for sm_80, sm_90, sm_100 and
   sm_120 on every core, with no GPU and no CUDA toolkit, plus a PTX floor a CUDA 12.4 driver JITs;
2. ``fatbinkit build`` packs the SASS and the floor into one zstd fatbin (pure Python writer);
3. ``fatbinkit ls --summary`` / ``ls`` / ``check`` say what is inside, which GPU generations load
   it natively or by JIT, which image each of eight GPUs would load, and the driver each needs;
4. ``fatbinkit embed`` writes an ELF object (no ld, no objcopy), gcc links it into a shared
   library, and ``ls --resources`` finds the kernels there;
5. ``fatbinkit inject`` adds the fatbin to an already linked library instead;
6. on a GPU: the kernel is loaded from that library's symbol and run, its result checked;
7. ``fatbinkit prune`` slims device code for one GPU generation: the fatbin, and (where nvcc is
   found) the bundled CUDA library built for four, whose file really shrinks;
8. where torch and a GPU are present: a small model compiled by AOTInductor inside
   ``fatbinkit.aoti.packaging`` for the four archs, checked, its kernels loaded from its ``.so``.

Everything lands in the output folder (``out/demo`` by default).
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shlex
import shutil
import struct
import subprocess
import sys
import time
import warnings
import zipfile
from pathlib import Path
from typing import Any

__all__ = ["TARGETS", "run"]

TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]
CHECK_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120"]
LIBRARY = Path(__file__).resolve().parent / "library.cu"
MARKER = ".fatbinkit-demo"  # in the output folder: the demo may empty it on its next run


class _Demo:
    """The output folder and how commands are shown (paths relative to the working folder)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.cwd = Path.cwd()

    def shown(self, arg: str | Path) -> str:
        text = str(arg)
        try:
            return str(Path(text).resolve().relative_to(self.cwd)) if os.sep in text else text
        except ValueError:
            return text

    def fatbinkit(self, *args: str | Path, ok: tuple[int, ...] = (0,)) -> int:
        """Run the CLI as a user would and show its output."""
        print(f"$ fatbinkit {shlex.join(self.shown(a) for a in args)}", flush=True)
        proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)], check=False)
        if proc.returncode not in ok:
            raise SystemExit(f"demo: fatbinkit {args[0]} exited {proc.returncode}")
        return proc.returncode

    def tool(self, *argv: str | Path, quiet: bool = False) -> bool:
        """Run a host tool (gcc, nvcc, readelf), shown; False when it failed."""
        print(f"$ {shlex.join(self.shown(a) for a in argv)}", flush=True)
        proc = subprocess.run([str(a) for a in argv], check=False,
                              capture_output=quiet)
        return proc.returncode == 0


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def run(out: Path, *, torch_model: bool = True) -> int:
    """Run the demo into ``out`` (new, empty, or a previous run's, which it replaces); 0 when
    every step worked or was skipped."""
    from ..errors import InvalidArgumentError, ToolNotFoundError
    from ..triton import TritonKernel, compile_kernel

    try:
        from . import kernels as tk
    except ImportError as exc:
        raise ToolNotFoundError(
            "fatbinkit demo needs Triton: pip install 'fatbinkit[triton]' (package triton)"
        ) from exc

    demo = _Demo(out.resolve())
    out = demo.out
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).is_file():  # never empty a folder the demo did not make
            raise InvalidArgumentError(f"{out} is not empty and not a demo's output folder: "
                                       "give a new or empty folder with -o")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by fatbinkit demo; it empties this folder on its next run\n")

    _step(f"1. Triton compiles add_kernel for {', '.join(TARGETS)} on every core (no GPU, no "
         "CUDA toolkit), with a portable PTX floor a CUDA 12.4 driver can JIT")
    t0 = time.perf_counter()
    kernel = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, TARGETS,
                            constexprs=tk.ADD_CONSTEXPRS, min_driver="12.4")
    assert isinstance(kernel, TritonKernel)  # CUDA targets
    build_args: list[str | Path] = []
    for image in kernel.images:
        cubin = out / f"add_kernel.{image.arch.sm}.cubin"
        cubin.write_bytes(image.cubin)
        build_args += ["--cubin", f"{image.arch.sm}={cubin}"]
        print(f"   {image}")
    assert kernel.floor is not None
    floor = out / f"add_kernel.{kernel.floor.arch.compute}.ptx"
    floor.write_bytes(kernel.floor.ptx)
    build_args += ["--ptx", f"{kernel.floor.arch.compute}={floor}"]
    print(f"   {kernel.floor}")
    print(f"   compiled in {time.perf_counter() - t0:.1f} s")

    _step("2. One fatbin with SASS for every target + the PTX floor, zstd, pure Python")
    fat = out / "add_kernel.fatbin"
    demo.fatbinkit("build", "-o", fat, *build_args, "--compress", "zstd")

    _step("3. What is inside, which image each GPU would load with an R580 driver, and the "
         "minimum driver per GPU")
    demo.fatbinkit("ls", fat, "--summary", "--kernels")
    demo.fatbinkit("ls", fat)
    arch_args = [a for arch in CHECK_ARCHS for a in ("--arch", arch)]
    # exit 1 is expected: sm_75 is below every target (sm_103 JIT-compiles the compute_80 floor)
    demo.fatbinkit("check", fat, *arch_args, "--driver", "580.65.06", ok=(0, 1))
    demo.fatbinkit("check", fat, *arch_args, "--min-driver")

    _step("4. Embed into an ELF object (no ld/objcopy), link with gcc, find the kernels again")
    obj = out / "kernels.o"
    demo.fatbinkit("embed", "-o", obj, f"add_kernel={fat}",
                   f"add_kernel_sm90={out / 'add_kernel.sm_90a.cubin'}")
    if shutil.which("readelf"):
        demo.tool("readelf", "-sW", obj)
    lib = out / "libkernels.so"
    gcc = shutil.which("gcc")
    if gcc and demo.tool(gcc, "-shared", "-o", lib, obj):
        demo.fatbinkit("ls", lib, "--resources")
    else:
        print("   (no gcc here: linking skipped)")

    _step("5. Or inject the fatbin into an already linked library (LIEF), no relink")
    injected = out / "libhost-with-kernels.so"
    if gcc:
        src = out / "host.c"
        src.write_text("int host_version(void) { return 1; }\n")
        demo.tool(gcc, "-shared", "-fPIC", "-o", out / "libhost.so", src)
        demo.fatbinkit("inject", out / "libhost.so", "-o", injected, f"add_kernel={fat}")
        demo.fatbinkit("ls", injected)
    else:
        print("   (no gcc here: no host library to inject into)")

    _step("6. On the GPU: load add_kernel from the library's symbol and run it")
    device = _device()
    if device is None:
        print("   On a GPU machine this loads and runs it: fatbinkit load "
              f"{demo.shown(injected)} --symbol add_kernel  (docs/gpu.md has the H200 runs)")
    else:
        _run_add(demo, kernel, injected if injected.exists() else fat)

    _step("7. Slim for one GPU generation: keep what sm_90 GPUs load")
    demo.fatbinkit("prune", fat, "-o", out / "add_kernel.sm_90.fatbin", "--for", "sm_90",
                   "--ptx", "none")
    cuda_lib = out / "libslim.so"
    nvcc = shutil.which("nvcc")
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ("75", "80", "86")]
    gencode.append("-gencode=arch=compute_90,code=[sm_90,compute_90]")
    if nvcc and demo.tool(nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", cuda_lib, LIBRARY,
                          *gencode, quiet=True):
        demo.fatbinkit("prune", cuda_lib, "-o", out / "libslim.sm_90.so", "--for", "sm_90")
        demo.fatbinkit("ls", out / "libslim.sm_90.so")
    else:
        print("   (no working nvcc here: the library step is skipped; docs/slim.md shows torch's "
              "libraries pruned)")

    _step("8. A torch model through AOTInductor, with fatbinkit's switch: every kernel for "
         f"{', '.join(TARGETS)}, no ld/objcopy/nvcc/fatbinary")
    if torch_model:
        _torch_model(demo, device is not None)
    else:
        print("   (skipped: --no-torch)")

    _step("9. One page to look at: where the bytes go, which GPU loads what, what pruning "
          "for a GPU set would keep, and what pruning changed")
    if importlib.util.find_spec("plotly") is None:
        print("   (no Plotly here: pip install 'fatbinkit[report]' for fatbinkit report)")
    elif (out / "libslim.sm_90.so").exists():
        demo.fatbinkit("report", out / "libslim.sm_90.so", cuda_lib, "-o", out / "report.html",
                       "--keep", "sm_90", "--keep", "sm_80,sm_90")
    else:
        demo.fatbinkit("report", fat, "-o", out / "report.html", "--keep", "sm_90",
                       "--keep", "sm_80,sm_90")
    print(f"\nDone: files in {demo.shown(out)}/")
    return 0


def _device() -> Any:
    try:
        from ..runtime import Device

        device = Device.get(0)
    except Exception as exc:  # no cuda-python, no driver, or no GPU
        print(f"   no GPU here: {str(exc).splitlines()[0]}")
        return None
    major, minor = device.driver_version
    print(f"   {device.name} ({device.arch}), driver CUDA {major}.{minor}")
    return device


def _run_add(demo: _Demo, kernel: Any, where: Path) -> None:
    """Load add_kernel from the injected library's symbol (or the fatbin) and check x + y."""
    from ..runtime import Buffer, Module

    n = 10_000
    x = [i * 0.5 for i in range(n)]
    y = [1.0 - i for i in range(n)]
    if where.suffix == ".so":
        mod = Module.from_symbol(ctypes.CDLL(str(where)), "add_kernel")
        print(f"   loaded __add_kernel_start of {demo.shown(where)}")
    else:
        mod = Module.load(where)
    with mod, Buffer.from_bytes(struct.pack(f"{n}f", *x)) as dx, \
            Buffer.from_bytes(struct.pack(f"{n}f", *y)) as dy, Buffer(4 * n) as dout:
        k = mod.kernel("add_kernel")
        k.launch((n + 1023) // 1024, kernel.block_threads,
                 [dx.ptr, dy.ptr, dout.ptr, ctypes.c_int32(n), ctypes.c_uint64(0),
                  ctypes.c_uint64(0)], shared_mem=kernel.shared)
        got = struct.unpack(f"{n}f", dout.to_bytes())
    ok = got == tuple(a + b for a, b in zip(x, y, strict=True))
    print(f"   ran SASS sm_{k.binary_version} ({mod.picked().how}): {n} sums "
          f"{'all right' if ok else 'WRONG'}")
    if not ok:
        raise SystemExit("demo: add_kernel computed a wrong result")


def _torch_model(demo: _Demo, gpu: bool) -> None:
    """AOTInductor inside the switch, checked for the four archs, kernels loaded from the .so."""
    try:
        with warnings.catch_warnings():  # a torch without numpy says so on import
            warnings.simplefilter("ignore", UserWarning)
            import torch
    except ImportError:
        print("   (no torch here: skipped; docs/aoti.md has the H200 run)")
        return
    if not (gpu and torch.cuda.is_available()):
        print(f"   (torch {torch.__version__} has no GPU here: AOTInductor needs one to compile "
              "for; docs/aoti.md has the H200 run)")
        return
    import fatbinkit.aoti

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(256)
            self.fc = torch.nn.Linear(256, 128)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(self.norm(x)), dim=-1)

    model = Model().cuda().eval()
    x = torch.randn(32, 256, device="cuda")
    package = demo.out / "model.pt2"
    print("$ with fatbinkit.aoti.packaging(archs=TARGETS): "
          "torch._inductor.aoti_compile_and_package(...)", flush=True)
    t0 = time.perf_counter()
    with torch.no_grad(), fatbinkit.aoti.packaging(archs=TARGETS) as report:
        torch._inductor.aoti_compile_and_package(torch.export.export(model, (x,)),
                                                 package_path=str(package))
    print(f"   compiled in {time.perf_counter() - t0:.0f} s\n{report}")
    with zipfile.ZipFile(package) as z:
        z.extractall(demo.out / "model")
    (so,) = sorted((demo.out / "model").rglob("*.so"))
    demo.fatbinkit("check", so, *[a for arch in TARGETS for a in ("--arch", arch)])
    from ..runtime import Module

    lib = ctypes.CDLL(str(so), mode=ctypes.RTLD_GLOBAL)
    for k in report.kernels:
        with Module.from_symbol(lib, k.name) as mod:
            print(f"   {k.name}: loaded from __{k.name}_start as {mod.picked().how} "
                  f"in {mod.load_seconds * 1e3:.2f} ms")
