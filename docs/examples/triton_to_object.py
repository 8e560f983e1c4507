"""A Triton kernel compiled for several GPUs on a machine without one, packed as one fatbin (SASS
per GPU and a portable PTX floor) and written into an object file with a C header: what a C/C++
launcher links and loads with ``cuModuleLoadData(__add_kernel_start)``. No NVIDIA tool but
Triton's own ptxas runs.

    python docs/examples/triton_to_object.py OUT.o [ARCH...]

writes ``OUT.o`` and ``OUT.h`` (default archs: sm_80, sm_90, sm_100, sm_120).
"""

from __future__ import annotations

import sys
from pathlib import Path

import triton
import triton.language as tl

import fatbinkit.embed
import fatbinkit.progress
import fatbinkit.triton

ARCHS = ["sm_80", "sm_90", "sm_100", "sm_120"]


def add_kernel(x_ptr: tl.tensor, y_ptr: tl.tensor, out_ptr: tl.tensor, n: tl.tensor,
               BLOCK: tl.constexpr) -> None:
    """out = x + y over n elements; BLOCK per program."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask)
             + tl.load(y_ptr + offsets, mask=mask), mask=mask)


# triton.jit called, not used as a decorator: triton has no type hints, and mypy --strict
# refuses an untyped decorator; the kernel's own parameters stay typed
KERNEL = triton.jit(add_kernel)
SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
             "BLOCK": "constexpr"}


def log(step: fatbinkit.progress.Step) -> None:
    print(f"compiled {step}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: triton_to_object.py OUT.o [ARCH...]", file=sys.stderr)
        return 2
    obj = Path(argv[0])
    kernel = fatbinkit.triton.compile_kernel(
        KERNEL, SIGNATURE, argv[1:] or ARCHS, constexprs={"BLOCK": 1024},
        min_driver="12.4", progress=log)
    kernel.check_shared()  # one launch size must fit every arch
    print(kernel)
    fatbinkit.embed.write_object(obj, fatbinkit.triton.blobs([kernel], compression="zstd"))
    obj.with_suffix(".h").write_text(fatbinkit.triton.header([kernel]))
    print(f"wrote {obj} and {obj.with_suffix('.h')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
