"""The LLD-linked CUDA library of tests/test_slim_lld.py and tests/gpu/test_lld_gpu.py.

Two nvcc objects (``nvcc -c -Xcompiler -fPIC``: the demo library and tests/data/lld_kernels.cu,
one fatbin container each, SASS sm_75, sm_80, sm_90 and PTX compute_90) linked by g++ with
``ld.lld`` (``-fuse-ld=lld``, Debian's lld) and the static CUDA runtime, so the library needs
nothing but the C and C++ runtimes. LLD leaves a ``RELATIVE`` relocation's slot 0 and keeps the
target in the addend; ``LINKS`` also has its ``--apply-dynamic-relocs`` and packed ``RELR`` forms
and GNU ld's ``RELR``.

Where the GPU machine has no ``ld.lld``, build the library here and carry it:
``python tests/gpu/lld_library.py .artifacts/lld`` writes ``.artifacts/lld/liblld.so``;
the GPU test reads it from ``FATBINKIT_LLD_LIBRARY``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (ROOT / "fatbinkit" / "demo" / "library.cu", ROOT / "tests" / "data" / "lld_kernels.cu")
GENCODE = ["-gencode", "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
           "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
#: name: (g++ link flags, the tool it needs)
LINKS = {
    "lld": (["-fuse-ld=lld"], "ld.lld"),  # RELA, 0 in the slot
    "lld-apply": (["-fuse-ld=lld", "-Wl,--apply-dynamic-relocs"], "ld.lld"),  # RELA, value too
    "lld-relr": (["-fuse-ld=lld", "-Wl,--pack-dyn-relocs=relr"], "ld.lld"),  # value in place
    "bfd-relr": (["-fuse-ld=bfd", "-Wl,-z,pack-relative-relocs"], "ld.bfd"),  # binutils 2.38+
}


def cuda_lib(nvcc: str) -> Path:
    """The folder holding ``libcudart_static.a``: one of the ``-L`` folders nvcc itself passes
    to the host linker (``nvcc --dryrun``)."""
    proc = subprocess.run([nvcc, "--dryrun", "-shared", "-o", "x.so", "x.o"],
                          capture_output=True, text=True, check=False)
    for folder in re.findall(r'"?-L"?([^"\s]+)', proc.stdout + proc.stderr):
        if (Path(folder) / "libcudart_static.a").is_file():
            return Path(folder)
    raise FileNotFoundError(f"{nvcc} --dryrun names no folder with libcudart_static.a")


def compile_objects(root: Path, nvcc: str) -> list[Path]:
    """One ``nvcc -c`` object per source, in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    objs = [root / f"{src.stem}.o" for src in SOURCES]

    def one(pair: tuple[Path, Path]) -> None:
        src, obj = pair
        subprocess.run([nvcc, "-c", "-Xcompiler", "-fPIC", "-o", str(obj), str(src), *GENCODE],
                       check=True, capture_output=True)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, zip(SOURCES, objs, strict=True)))
    return objs


def link(objs: Sequence[str | Path], out: Path, flags: list[str], nvcc: str) -> Path:
    """``g++ -shared`` of ``objs`` (objects or static libraries) with the static CUDA runtime."""
    subprocess.run(["g++", "-shared", *flags, "-o", str(out), *map(str, objs),
                    f"-L{cuda_lib(nvcc)}", "-lcudart_static", "-lrt", "-lpthread", "-ldl"],
                   check=True, capture_output=True)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    out = Path(argv[0])
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    objs = compile_objects(out / "obj", nvcc)
    lib = link(objs, out / "liblld.so", LINKS["lld"][0], nvcc)
    print(lib)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
