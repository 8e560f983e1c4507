"""Compile the example Triton kernels for GPU targets on a machine without a GPU.

``python -m tests.gpu.triton_artifacts DIR sm_90 [sm_100 ...]`` writes, per target,
``<kernel>.<arch>.cubin``, ``.ptx`` and ``.json`` (launch metadata). The GPU tests read DIR from
``FATBINKIT_TRITON_DIR``, so the kernels they run were compiled on the CPU machine.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

import fatbinkit.demo.kernels as tk
from fatbinkit.triton import TritonImage, compile_kernel

KERNELS = {
    "add_kernel": (tk.add_kernel, tk.ADD_SIGNATURE, tk.ADD_CONSTEXPRS, 4),
    "matmul_kernel": (tk.matmul_kernel, tk.MATMUL_SIGNATURE, tk.MATMUL_CONSTEXPRS, 8),
}


def write(out: Path, targets: list[str], min_driver: str = "12.9") -> list[TritonImage]:
    out.mkdir(parents=True, exist_ok=True)
    images = []
    for fn, sig, consts, warps in KERNELS.values():
        kernel = compile_kernel(fn, sig, targets, constexprs=consts, num_warps=warps,
                                min_driver=min_driver, floor=False)
        for image in kernel.images:
            stem = f"{image.name}.{image.arch.sm}"
            (out / f"{stem}.cubin").write_bytes(image.cubin)
            (out / f"{stem}.ptx").write_bytes(image.ptx)
            meta = {k: v for k, v in asdict(image).items() if k not in ("cubin", "ptx")}
            meta["arch"] = image.arch.sm
            (out / f"{stem}.json").write_text(json.dumps(meta, indent=1))
            images.append(image)
    return images


def read(directory: Path, name: str, arch: str) -> TritonImage:
    from fatbinkit.formats.arch import Arch

    stem = directory / f"{name}.{arch}"
    meta = json.loads(Path(f"{stem}.json").read_text())
    meta["arch"] = Arch.parse(meta["arch"])
    meta["ptx_version"] = tuple(meta["ptx_version"])
    return TritonImage(cubin=Path(f"{stem}.cubin").read_bytes(),
                       ptx=Path(f"{stem}.ptx").read_bytes(), **meta)


if __name__ == "__main__":
    for img in write(Path(sys.argv[1]), sys.argv[2:] or ["sm_90"]):
        print(f"{img.name} {img.arch}: cubin {len(img.cubin)} B, PTX {img.ptx_version}")
