"""A module pruned to an empty container on the GPU: the CUDA runtime still registers it and its
kernel fails as it did before pruning, while the module beside it computes; ``check`` says the
same of the original and the pruned copy (issue 26, point 1)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from fatbinkit.binary import open as open_binary
from fatbinkit.formats.arch import Arch
from fatbinkit.runtime import Device
from fatbinkit.slim import prune

SOURCES = {
    "a.cu": """__global__ void only_blackwell(float *x) { x[threadIdx.x] *= 2.0f; }
extern "C" int launch_a(float *x) {
  only_blackwell<<<1, 32>>>(x);
  int e = cudaGetLastError();
  return e ? e : cudaDeviceSynchronize();
}
""",
    "b.cu": """__global__ void everywhere(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" int launch_b(float *x) {
  everywhere<<<1, 32>>>(x);
  int e = cudaGetLastError();
  return e ? e : cudaDeviceSynchronize();
}
""",
    "main.cu": """#include <cstdio>
extern "C" int launch_a(float *x);
extern "C" int launch_b(float *x);
int main() {
  float *x;
  if (cudaMalloc(&x, 32 * sizeof(float))) return 2;
  cudaMemset(x, 0, 32 * sizeof(float));
  int b = launch_b(x);
  float h[32];
  cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
  int a = launch_a(x);
  std::printf("b %d %.1f\\na %d\\n", b, h[31], a);
  return 0;
}
""",
}
CUDA_ERROR_NO_KERNEL_IMAGE = 209  # cudaErrorNoKernelImageForDevice


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("truth_gpu")
    for name, text in SOURCES.items():
        (root / name).write_text(text)
    subprocess.run(["nvcc", "-c", "-Xcompiler", "-fPIC", "-gencode",
                    "arch=compute_120a,code=sm_120a", str(root / "a.cu"), "-o",
                    str(root / "a.o")], check=True)
    subprocess.run(["nvcc", "-c", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=sm_90", str(root / "b.cu"), "-o",
                    str(root / "b.o")], check=True)
    subprocess.run(["nvcc", "-shared", str(root / "a.o"), str(root / "b.o"), "-o",
                    str(root / "libmix.so")], check=True)
    subprocess.run(["nvcc", str(root / "main.cu"), f"-L{root}", "-lmix",
                    "-Xlinker", "-rpath,$ORIGIN", "-o", str(root / "prog")], check=True)
    return root


def _run(built: Path, lib: Path, eager: bool) -> str:
    work = lib.parent / f"run_{lib.stem}_{eager}"
    work.mkdir()
    (work / "prog").write_bytes((built / "prog").read_bytes())
    (work / "prog").chmod(0o755)
    (work / "libmix.so").write_bytes(lib.read_bytes())
    env = {**os.environ, "CUDA_MODULE_LOADING": "EAGER" if eager else "LAZY"}
    proc = subprocess.run([str(work / "prog")], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.parametrize("eager", [False, True])
def test_empty_container_fails_as_the_module_did(gpu: Device, built: Path, tmp_path: Path,
                                                 eager: bool) -> None:
    dev = Arch(gpu.arch.number)
    if dev.number == 120:
        pytest.skip("the sm_120a module loads on this GPU")
    out = tmp_path / "libmix.so"
    prune(built / "libmix.so", out, [dev], ptx="none")
    want = f"b 0 1.0\na {CUDA_ERROR_NO_KERNEL_IMAGE}\n"
    assert _run(built, built / "libmix.so", eager) == _run(built, out, eager) == want
    before, after = (open_binary(p).check([dev], every_image=True).verdicts[0]
                     for p in (built / "libmix.so", out))
    assert (before.status, before.strict_ok) == (after.status, after.strict_ok) \
        == ("partial", False)
