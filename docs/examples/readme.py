"""The README's example: what a library holds, its sm_90 GEMM kernels, its sm_90a images
extracted, and which of three GPUs can run it with a CUDA 12.8 driver.

    python docs/examples/readme.py libtorch_cuda.so [OUT_DIR]
"""

from __future__ import annotations

import sys

import fatbinkit


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: readme.py LIBRARY [OUT_DIR]", file=sys.stderr)
        return 2
    out = argv[1] if len(argv) == 2 else "out/"
    lib = fatbinkit.open(argv[0])                    # a path, str, or the file's bytes
    print(lib.summary())                             # per arch; per GPU generation: SASS, JIT, none
    for item in lib.select(arch="sm_90", kernel="*gemm*"):
        print(item.name, item.arch, item.stored, item.uncompressed)
    lib.extract(out, arch="sm_90a")
    print(lib.check(["sm_80", "sm_90", "sm_120"], driver=(12, 8)))   # one verdict per arch
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
