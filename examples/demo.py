"""The whole fatbinkit pipeline on the bundled example kernels (``make demo``).

1. Triton compiles ``examples/triton_kernels.py`` for four GPU generations, on this machine, with
   no GPU and no CUDA toolkit;
2. ``fatbinkit build`` packs SASS + PTX for all of them into one fatbin (pure Python writer);
3. ``fatbinkit ls --summary`` / ``ls`` / ``check`` inspect it: what is inside, which GPU
   generations load it natively or by JIT, which image each GPU would load;
4. ``fatbinkit embed`` writes an ELF object with ``__<name>_start/_end/_size`` symbols (no ld, no
   objcopy), gcc links it into a shared library, and ``ls --resources`` finds the kernels there;
5. ``fatbinkit inject`` adds the fatbin to an already linked library instead;
6. ``fatbinkit load`` loads it from the library's symbol on the GPU, when there is one;
7. ``fatbinkit prune`` slims device code for one GPU generation: the fatbin, and (where nvcc is
   found) a CUDA library built for four, whose file really shrinks.

Everything lands in ``out/demo/``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "out" / "demo"
sys.path.insert(0, str(ROOT / "examples"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

TARGETS = ["sm_80", "sm_90", "sm_100", "sm_120"]
CHECK_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "sm_120"]


def step(title: str) -> None:
    print(f"\n== {title}")


def fatbinkit(*args: str, ok: tuple[int, ...] = (0,)) -> int:
    """Run the CLI as a user would and show its output."""
    shown = [str(Path(a).relative_to(ROOT)) if a.startswith(str(ROOT)) else a for a in args]
    print(f"$ fatbinkit {shlex.join(shown)}", flush=True)
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *args], cwd=ROOT, check=False)
    if proc.returncode not in ok:
        sys.exit(f"demo: fatbinkit {args[0]} exited {proc.returncode}")
    return proc.returncode


def main() -> int:
    import triton_kernels as tk

    from fatbinkit.triton import compile_kernel

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)

    step(f"1. Triton compiles add_kernel for {', '.join(TARGETS)} on every core (no GPU, no "
         "CUDA toolkit), with a portable PTX floor a CUDA 12.4 driver can JIT")
    t0 = time.perf_counter()
    kernel = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, TARGETS,
                            constexprs=tk.ADD_CONSTEXPRS, min_driver="12.4")
    build_args = []
    for image in kernel.images:
        cubin = OUT / f"add_kernel.{image.arch.sm}.cubin"
        cubin.write_bytes(image.cubin)
        build_args += ["--cubin", f"{image.arch.sm}={cubin}"]
        print(f"   {image}")
    assert kernel.floor is not None
    floor = OUT / f"add_kernel.{kernel.floor.arch.compute}.ptx"
    floor.write_bytes(kernel.floor.ptx)
    build_args += ["--ptx", f"{kernel.floor.arch.compute}={floor}"]
    print(f"   {kernel.floor}")
    print(f"   compiled in {time.perf_counter() - t0:.1f} s")

    step("2. One fatbin with SASS for every target + the PTX floor, zstd, pure Python")
    fat = OUT / "add_kernel.fatbin"
    fatbinkit("build", "-o", str(fat), *build_args, "--compress", "zstd")

    step("3. What is inside, which image each GPU would load with an R580 driver, and the "
         "minimum driver per GPU")
    fatbinkit("ls", str(fat), "--summary", "--kernels")
    fatbinkit("ls", str(fat))
    arch_args = [a for arch in CHECK_ARCHS for a in ("--arch", arch)]
    # exit 1 is expected: sm_75 is below every target (Triton's sm_90a+ SASS is arch-specific;
    # sm_103 loads by JIT from the compute_80 floor)
    fatbinkit("check", str(fat), *arch_args, "--driver", "580.65.06", ok=(0, 1))
    fatbinkit("check", str(fat), *arch_args, "--min-driver")

    step("4. Embed into an ELF object (no ld/objcopy), link with gcc, find the kernels again")
    obj = OUT / "kernels.o"
    sm90 = OUT / "add_kernel.sm_90a.cubin"
    fatbinkit("embed", "-o", str(obj), f"add_kernel={fat}", f"add_kernel_sm90={sm90}")
    if shutil.which("readelf"):
        print(f"$ readelf -sW {obj.relative_to(ROOT)}", flush=True)
        subprocess.run(["readelf", "-sW", str(obj)], check=False)
    lib = OUT / "libkernels.so"
    gcc = shutil.which("gcc")
    if gcc:
        subprocess.run([gcc, "-shared", "-o", str(lib), str(obj)], check=True)
        print(f"$ gcc -shared -o {lib.relative_to(ROOT)} {obj.relative_to(ROOT)}")
        fatbinkit("ls", str(lib), "--resources")
    else:
        print("   (no gcc here: linking skipped)")

    step("5. Or inject the fatbin into an already linked library (LIEF), no relink")
    host = OUT / "libhost.so"
    injected = OUT / "libhost-with-kernels.so"
    if gcc:
        src = OUT / "host.c"
        src.write_text("int host_version(void) { return 1; }\n")
        subprocess.run([gcc, "-shared", "-fPIC", "-o", str(host), str(src)], check=True)
        fatbinkit("inject", str(host), "-o", str(injected), f"add_kernel={fat}")
        fatbinkit("ls", str(injected))
    else:
        print("   (no gcc here: no host library to inject into)")

    step("6. Load from the library's symbol on the GPU")
    try:
        from fatbinkit.runtime import Device

        device = Device.get(0)
    except Exception as exc:  # no cuda-python, no driver, or no GPU
        print(f"   no GPU here ({str(exc).splitlines()[0][:80]}...): skipped.")
        print("   On a GPU machine: fatbinkit load out/demo/libhost-with-kernels.so "
              "--symbol add_kernel  (docs/gpu.md has the H200 run)")
    else:
        major, minor = device.driver_version
        print(f"   {device.name} ({device.arch}), driver CUDA {major}.{minor}")
        target = injected if injected.exists() else lib
        if target.exists():
            fatbinkit("load", str(target), "--symbol", "add_kernel")
        else:
            fatbinkit("load", str(fat))
    step("7. Slim for one GPU generation: keep what sm_90 GPUs load")
    fatbinkit("prune", str(fat), "-o", str(OUT / "add_kernel.sm_90.fatbin"), "--for", "sm_90",
              "--ptx", "none")
    cuda_lib = OUT / "libslim.so"
    nvcc = shutil.which("nvcc")
    gencode = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in ("75", "80", "86")]
    gencode.append("-gencode=arch=compute_90,code=[sm_90,compute_90]")
    built = nvcc is not None and subprocess.run(
        [nvcc, "-shared", "-Xcompiler", "-fPIC", "-o", str(cuda_lib),
         str(ROOT / "tests" / "data" / "slim_lib.cu"), *gencode],
        capture_output=True, check=False).returncode == 0
    if built:
        print(f"$ nvcc -shared -o {cuda_lib.relative_to(ROOT)} tests/data/slim_lib.cu "
              "(sm_75, sm_80, sm_86, sm_90 + PTX)")
        fatbinkit("prune", str(cuda_lib), "-o", str(OUT / "libslim.sm_90.so"), "--for", "sm_90")
        fatbinkit("ls", str(OUT / "libslim.sm_90.so"))
    else:
        print("   (no working nvcc here: the library step is skipped; docs/slim.md shows torch's "
              "libraries pruned)")
    print(f"\nDone: files in {OUT.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
