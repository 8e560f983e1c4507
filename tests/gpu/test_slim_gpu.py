"""Pruned libraries on the GPU: the suite's nvcc library pruned for this GPU still computes right;
pruned for another GPU only, the driver refuses its kernels as ``check`` predicts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fatbinkit.compat import file_verdict, image_sets
from fatbinkit.errors import NoBinaryForGpuError
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import FatbinContainer
from fatbinkit.runtime import Device, Module
from fatbinkit.slim import prune, recompress

DATA = Path(__file__).resolve().parent.parent / "data"
LIBRARY = Path(__file__).resolve().parents[2] / "fatbinkit" / "demo" / "library.cu"
GENCODE = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_86,code=sm_86",
           "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
CUDA_ERROR_NO_KERNEL_IMAGE = 209  # cudaErrorNoKernelImageForDevice


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slim")
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-o", str(root / "libslim.so"),
                    str(LIBRARY), *GENCODE], check=True)
    subprocess.run(["g++", "-o", str(root / "prog"), str(DATA / "slim_main.cpp"),
                    f"-L{root}", "-lslim", "-Wl,-rpath,$ORIGIN"], check=True)
    return root


def _run(built: Path, lib: Path) -> subprocess.CompletedProcess[str]:
    work = lib.parent / f"run_{lib.stem}"
    work.mkdir()
    (work / "prog").write_bytes((built / "prog").read_bytes())
    (work / "prog").chmod(0o755)
    (work / "libslim.so").write_bytes(lib.read_bytes())
    return subprocess.run([str(work / "prog"), "gpu"], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("how", ["sm90", "sm90-ptx-none", "sm89+ptx", "sm90-zstd19"])
def test_pruned_library_computes(gpu: Device, built: Path, tmp_path: Path, how: str) -> None:
    out = tmp_path / "libslim.so"
    src = built / "libslim.so"
    dev = Arch(gpu.arch.number)
    if how == "sm90":
        prune(src, out, [dev])
    elif how == "sm90-ptx-none":
        prune(src, out, [dev], ptx="none")
    elif how == "sm89+ptx":  # SASS for 8.x only, plus the PTX: the H200 JIT-compiles it
        prune(src, out, [Arch(89)])
    else:
        tmp = tmp_path / "p.so"
        prune(src, tmp, [dev], ptx="none")
        recompress(tmp, out, "zstd", level=19)
    proc = _run(built, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("kernel ok\n")
    assert file_verdict(image_sets(out), dev, (13, 0)).status in ("works", "partial")


def test_pruned_for_another_gpu_is_refused_as_predicted(gpu: Device, built: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "libslim.so"
    prune(built / "libslim.so", out, [Arch(80)], ptx="none")
    verdict = file_verdict(image_sets(out), Arch(gpu.arch.number), (13, 0))
    assert verdict.status == "fails"
    proc = _run(built, out)
    assert proc.returncode == 3
    assert f"cuda error {CUDA_ERROR_NO_KERNEL_IMAGE}" in proc.stdout


def test_a_module_pruned_to_nothing_reads_as_no_binary(gpu: Device) -> None:
    """A container whose every image was for other GPUs ends up empty: the driver answers as it
    did before pruning, CUDA_ERROR_NO_BINARY_FOR_GPU (what lazy and eager loading skip)."""
    with pytest.raises(NoBinaryForGpuError):
        Module.load(FatbinContainer(()).to_bytes())


def test_pruned_object_links_and_computes(gpu: Device, tmp_path: Path) -> None:
    """``nvcc -c`` object pruned to this GPU, then linked: the kernel computes right."""
    obj, out, exe = tmp_path / "slim.o", tmp_path / "pruned.o", tmp_path / "exe"
    subprocess.run(["nvcc", "-c", "-o", str(obj), str(LIBRARY), *GENCODE],
                   check=True)
    prune(obj, out, [Arch(gpu.arch.number)], ptx="none")
    subprocess.run(["nvcc", "-o", str(exe), str(out), str(DATA / "slim_main.cpp")], check=True)
    proc = subprocess.run([str(exe), "gpu"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("kernel ok\n")


@pytest.mark.parametrize("exact", [False, True])
def test_pruned_static_library_links_and_computes(gpu: Device, tmp_path: Path,
                                                  exact: bool) -> None:
    """The object in a static library (``ar rcs``), the library pruned to this GPU (as
    ``nvprune -arch`` with ``exact``), then linked by nvcc: the kernel computes right."""
    obj, lib, out, exe = (tmp_path / "slim.o", tmp_path / "libslim.a", tmp_path / "libp.a",
                          tmp_path / "exe")
    subprocess.run(["nvcc", "-c", "-o", str(obj), str(LIBRARY), *GENCODE], check=True)
    subprocess.run(["ar", "rcs", str(lib), str(obj)], check=True)
    prune(lib, out, [Arch(gpu.arch.number)], ptx="none", exact=exact)
    assert out.stat().st_size < lib.stat().st_size
    subprocess.run(["nvcc", "-o", str(exe), str(DATA / "slim_main.cpp"), str(out)], check=True)
    proc = subprocess.run([str(exe), "gpu"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("kernel ok\n")
