"""Images from other toolkits and real vendor containers, made on the CPU machine for the GPU run.

``python -m tests.gpu.toolkit_artifacts DIR`` writes into DIR:

* ``<image>.cubin`` for each ``IMAGES`` entry of test_check_gpu.py built by an older toolkit
  (``sm_90@cu12.9``): the PTX comes from this machine's nvcc, its ``.version`` lowered to one the
  old ptxas reads, and is assembled by ptxas from the pinned ``nvidia-cuda-nvcc-cu12`` wheel
  (fetched from the package registry into the fixture cache, as tests/thirdparty.py does);
* ``curand-container-<n>.fatbin``: containers of the suite's pinned cuRAND 13 library (the one
  with only sm_75 SASS and PTX ISA 9.4, and one with SASS for many archs), copied entry for entry.

The GPU tests read DIR from ``FATBINKIT_TOOLKIT_DIR``; the library is too large to carry.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from test_check_gpu import IMAGES, MARKS, SOURCE  # noqa: E402
from thirdparty import CURAND13, WheelMember, fetch  # noqa: E402

from fatbinkit.formats.fatbin import build_fatbin  # noqa: E402
from fatbinkit.scan import scan  # noqa: E402
from fatbinkit.toolchain import find_tool  # noqa: E402

# toolkit -> (ptxas in a pinned wheel, the highest PTX ISA it reads)
PTXAS = {
    "cu12.9": (WheelMember("nvidia-cuda-nvcc-cu12", "12.9.86", "nvidia/cuda_nvcc/bin/ptxas"),
               "8.8"),
}
# cuRAND 13 containers: 12 holds only sm_75 SASS + compute_75 PTX ISA 9.4 (and the precalc
# tables, no kernels); 0 holds SASS for sm_75 .. sm_120 and the seed kernels.
CURAND_CONTAINERS = (0, 12)


def write(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    nvcc = str(find_tool("nvcc"))
    written = []
    for name, (kind, arch) in IMAGES.items():
        if not kind.startswith("cubin@"):
            continue
        toolkit = kind.split("@")[1]
        member, isa = PTXAS[toolkit]
        ptxas = fetch(member)
        ptxas.chmod(ptxas.stat().st_mode | stat.S_IXUSR)
        src = out / "which.cu"
        src.write_text(SOURCE)
        ptx = out / f"{name}.ptx"
        subprocess.run([nvcc, "-ptx", f"-arch=compute_{arch.removeprefix('sm_')}",
                        f"-DMARK={MARKS[name]}", "-o", str(ptx), str(src)], check=True)
        ptx.write_text(re.sub(r"^\.version \d+\.\d+", f".version {isa}", ptx.read_text(),
                              flags=re.M))
        cubin = out / f"{name}.cubin"
        subprocess.run([str(ptxas), f"-arch={arch}", "-o", str(cubin), str(ptx)], check=True)
        written.append(cubin)
    library = fetch(CURAND13)
    codes = scan(library)
    for n in CURAND_CONTAINERS:
        path = out / f"curand-container-{n}.fatbin"
        path.write_bytes(build_fatbin([c.entry for c in codes if c.container == n]))
        written.append(path)
    return written


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    for p in write(Path(sys.argv[1])):
        print(p)
