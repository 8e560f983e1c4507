"""The whole pipeline on a real GPU: embed/inject -> link/dlopen -> load from the symbol -> run;
every fatbin builder backend; a Triton kernel compiled on the CPU machine; the load CLI."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from axpy import check_axpy, nvcc
from triton_artifacts import read as read_artifact

from fatbinkit.build import BACKENDS, Image, build
from fatbinkit.errors import ToolNotFoundError
from fatbinkit.formats.elf_writer import Blob, write_object
from fatbinkit.formats.fatbin import EntryKind
from fatbinkit.inject import inject
from fatbinkit.runtime import Buffer, Device, Module, to_object_code
from fatbinkit.scan import scan
from fatbinkit.triton import TritonImage, TritonKernel, compile_kernel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


@pytest.fixture(scope="module")
def kernels(gpu: Device, tmp: Path) -> dict[str, bytes]:
    """The axpy kernel as SASS for the device and as PTX (no trailing NUL, as nvcc writes it)."""
    return {
        "cubin": nvcc(tmp, "-cubin", f"-arch={gpu.arch.sm}", suffix=".cubin"),
        "ptx": nvcc(tmp, "-ptx", f"-arch={gpu.arch.compute}", suffix=".ptx").rstrip(b"\0"),
    }


def _images(gpu: Device, kernels: dict[str, bytes]) -> list[Image]:
    return [Image(EntryKind.ELF, gpu.arch, kernels["cubin"]),
            Image(EntryKind.PTX, gpu.arch, kernels["ptx"])]


@pytest.mark.parametrize("what", ["cubin", "ptx", "ptx-nul", "fatbin", "fatbin-zstd"])
def test_embedded_object_linked_then_loaded_from_symbol(
    gpu: Device, kernels: dict[str, bytes], tmp: Path, what: str
) -> None:
    if what.startswith("fatbin"):
        blob = build(_images(gpu, kernels), compression="zstd" if "zstd" in what else None)
    elif what == "ptx-nul":  # already terminated: loaded in place, no copy
        blob = kernels["ptx"] + b"\0"
    else:
        blob = kernels[what]
    obj = tmp / f"embed-{what}.o"
    write_object(obj, [Blob("axpy", blob), Blob("other", b"unrelated bytes")])
    lib = tmp / f"libembed-{what}.so"
    subprocess.run(["gcc", "-shared", "-o", str(lib), str(obj)], check=True)
    dll = ctypes.CDLL(str(lib))
    with Module.from_symbol(dll, "axpy") as mod:
        assert mod.kind == what.split("-")[0]
        check_axpy(mod)
    # the same kernel found again by scanning the library file, loaded entry by entry
    found = [c for c in scan(lib) if c.source == "__axpy_start"]
    assert found
    for code in found:
        with Module.load(code.entry) as mod:
            check_axpy(mod)


def test_injected_library_loaded_from_symbol(
    gpu: Device, kernels: dict[str, bytes], tmp: Path
) -> None:
    src = tmp / "host.c"
    src.write_text("int host_answer(void) { return 42; }\n")
    lib = tmp / "libhost.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    out = tmp / "libhost-injected.so"
    fat = build(_images(gpu, kernels), compression="lz4")
    inject(lib, out, [Blob("axpy_cubin", kernels["cubin"]), Blob("axpy_fatbin", fat)])
    dll = ctypes.CDLL(str(out))
    assert dll.host_answer() == 42
    for name in ("axpy_cubin", "axpy_fatbin"):
        with Module.from_symbol(dll, name) as mod:
            check_axpy(mod)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_every_backend_loads_and_computes(
    gpu: Device, kernels: dict[str, bytes], backend: str, compression: str | None
) -> None:
    if backend == "nvcc" and compression is not None:
        pytest.skip("the nvcc backend has no compression switch")
    # nvcc (AOTInductor's recipe) compiles the one PTX source to PTX + SASS itself
    images = _images(gpu, kernels)[1:] if backend == "nvcc" else _images(gpu, kernels)
    try:
        fat = build(images, backend=backend, compression=compression)
    except ToolNotFoundError as exc:
        pytest.skip(f"{backend} not installed on this machine: {exc}")
    with Module.load(fat) as mod:
        k = mod.kernel("axpy")
        assert k.binary_version == gpu.arch.number
        check_axpy(mod)


def _triton_image(gpu: Device, name: str) -> TritonImage:
    """Compiled on the CPU machine when FATBINKIT_TRITON_DIR is set (see triton_artifacts.py)."""
    directory = os.environ.get("FATBINKIT_TRITON_DIR")
    target = f"sm_{gpu.arch.number}a" if gpu.arch.number >= 90 else gpu.arch.sm
    if directory and (Path(directory) / f"{name}.{target}.cubin").is_file():
        return read_artifact(Path(directory), name, target)
    import fatbinkit.demo.kernels as tk

    kernel = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, [gpu.arch],
                            constexprs=tk.ADD_CONSTEXPRS, min_driver="12.9", floor=False)
    return kernel.images[0]


@pytest.mark.parametrize("packaging", ["cubin", "fatbin", "ptx-only fatbin"])
def test_triton_kernel_runs(gpu: Device, packaging: str) -> None:
    image = _triton_image(gpu, "add_kernel")
    one = TritonKernel(image.name, (image,), None)
    data = {"cubin": image.cubin, "fatbin": one.fatbin(ptx="all", compression="zstd"),
            "ptx-only fatbin": one.fatbin(sass=False, ptx="all")}[packaging]
    n = 10_000
    x = struct.pack(f"{n}f", *[i * 0.5 for i in range(n)])
    y = struct.pack(f"{n}f", *[1.0 - i for i in range(n)])
    with Module.load(data) as mod, Buffer.from_bytes(x) as dx, Buffer.from_bytes(y) as dy, \
            Buffer(4 * n) as dout:
        k = mod.kernel(image.name)
        if packaging == "ptx-only fatbin":
            assert k.ptx_version == gpu.arch.number
        args = [dx.ptr, dy.ptr, dout.ptr, ctypes.c_int32(n), ctypes.c_uint64(0),
                ctypes.c_uint64(0)]
        k.launch((n + 1023) // 1024, image.block_threads, args, shared_mem=image.shared)
        got = struct.unpack(f"{n}f", dout.to_bytes())
    assert got == tuple(i * 0.5 + 1.0 - i for i in range(n))


def test_cli_load_reports_and_explains(gpu: Device, kernels: dict[str, bytes], tmp: Path) -> None:
    fat = tmp / "cli.fatbin"
    fat.write_bytes(build(_images(gpu, kernels)))
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "load", str(fat), "--json"],
                          capture_output=True, text=True, env=env, check=True)
    report = json.loads(proc.stdout)
    assert [k["name"] for k in report["kernels"]] == ["axpy"]
    assert report["kernels"][0]["binary"] == gpu.arch.sm
    assert report["picked"] == {"how": "sass", "image": gpu.arch.sm}
    other = "sm_80" if gpu.arch.major != 8 else "sm_90"
    bad = tmp / "other.cubin"
    bad.write_bytes(nvcc(tmp, "-cubin", f"-arch={other}", suffix=".cubin"))
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "load", str(bad)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 3  # could not load: not a verdict
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in proc.stderr and other in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "load", str(bad), "--preflight"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 3 and "refused before loading" in proc.stderr


def test_cuda_core_interop(gpu: Device, kernels: dict[str, bytes]) -> None:
    core = pytest.importorskip("cuda.core")
    device_cls = getattr(core, "Device", None)
    if device_cls is None:
        device_cls = pytest.importorskip("cuda.core.experimental").Device
    device_cls(gpu.ordinal).set_current()
    code = to_object_code(build(_images(gpu, kernels)), name="axpy-fatbin")
    assert code.code_type == "fatbin"
    assert code.get_kernel("axpy") is not None
