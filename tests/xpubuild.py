"""Intel XPU oracles and fixtures from Debian bookworm and PyPI (``../shared/ROCM.md`` §6).

* ``spirv-dis`` (Debian ``spirv-tools`` 2023.1-2): the disassembler the SPIR-V reader is
  compared with (its ``OpEntryPoint`` lines, its header comment).
* ``ocloc`` (Debian ``intel-opencl-icd`` 22.43 with Intel's graphics compiler 1.0.12504 and the
  LLVM 14 libraries it loads): Intel's offline compiler, which writes an ``ar`` fat binary of
  per-device binaries for a device list (``ocloc compile -device tgllp,acm-g10``). This old
  release writes legacy OpenCL ELF members (``e_type`` 0xff04), not zebin.
* :data:`DPNP_TENSOR`: a SYCL library from the ``dpnp`` wheel whose
  ``__CLANG_OFFLOAD_BUNDLE__sycl-spir64`` section holds JIT SPIR-V (19 MB).

The packages are downloaded on first use, checked against the SHA256 of bookworm's Packages
index (main, amd64), unpacked with ``dpkg -x`` (never installed) into ``CACHE/xpu/``; a failed
download fails the test that asked for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from thirdparty import CACHE, DebianPackage, WheelMember, unpacked

__all__ = ["DPNP_TENSOR", "OCLOC", "SPIRV_TOOLS", "ocloc_fat", "run_tool"]

# dpnp 0.20.0 (wheel 28.5 MB): its tensor library's SYCL SPIR-V.
DPNP_TENSOR = WheelMember(
    "dpnp", "0.20.0", "dpnp/tensor/_tensor_impl.cpython-311-x86_64-linux-gnu.so"
)

SPIRV_TOOLS = (DebianPackage(
    "spirv-tools", "2023.1-2",
    "51b1e7352dc84471623d7be38547009bd7b71ffaa1900e512060f8a22503f2dd", "main"),)

# ocloc and the libraries it loads (the system has libz3, libxml2, libedit, libffi, zlib).
OCLOC = (
    DebianPackage("intel-opencl-icd", "22.43.24595.41-1",
                  "698b08ffaec1da7821daad3965e78b1667a5e6f268fa7ccfaae24fb35c30dd08", "main",
                  "intel-compute-runtime"),
    DebianPackage("libigc1", "1.0.12504.6-1+deb12u1",
                  "148106ff69329fb1bd0dbab83814bdd8563edee6a7c2097dc21d00e9c3818dc2", "main",
                  "intel-graphics-compiler"),
    DebianPackage("libigdfcl1", "1.0.12504.6-1+deb12u1",
                  "f36ec860a03e84764f77a6b8f1b445188fe75de635a07162c966bcfdcac6eb8b", "main",
                  "intel-graphics-compiler"),
    DebianPackage("libopencl-clang14", "14.0.0-4",
                  "cda693c0b761dd12a5e8019c2d8b965542b1deb457ae9f2522f329b5a2e70c4b", "main",
                  "opencl-clang-14"),
    DebianPackage("libclang-cpp14", "14.0.6-12",
                  "964b13d74e9aece340cde93fecd2a2f18dd63afcb707a797ce7b39d430a01c46", "main",
                  "llvm-toolchain-14"),
    DebianPackage("libllvm14", "14.0.6-12",
                  "cd986403cfe53f47c41b80667f6b344c40fe35de4c5081dad9358b4c77cf64a8", "main",
                  "llvm-toolchain-14"),
    DebianPackage("libllvmspirvlib14", "14.0.0-5",
                  "d58720cf148a8880a75618a606bfe125ff88beb1dde129b431dea5be69b60b33", "main",
                  "spirv-llvm-translator-14"),
    DebianPackage("libigdgmm12", "22.3.3+ds1-1",
                  "9591d6be5d624422ae58b9bba0e013bd6dbdd1f1420d60de4eb2cd1186f2f44a", "main",
                  "intel-gmmlib"),
)


def _unpack(name: str, packages: tuple[DebianPackage, ...]) -> Path:
    """The packages unpacked together into ``CACHE/xpu/<name>-<versions>/``, once
    (:func:`thirdparty.unpacked`)."""
    key = hashlib.sha256(" ".join(p.sha256 for p in packages).encode()).hexdigest()[:16]
    return unpacked(CACHE / "xpu" / f"{name}-{key}", packages)


def run_tool(name: str, *args: str | os.PathLike[str], cwd: Path | None = None,
             ) -> subprocess.CompletedProcess[str]:
    """Run ``spirv-dis`` (and the other spirv-tools) or ``ocloc`` from the unpacked packages,
    with ``LD_LIBRARY_PATH`` on their libraries (text output captured, status not checked)."""
    packages = OCLOC if name == "ocloc" else SPIRV_TOOLS
    root = _unpack("ocloc" if name == "ocloc" else "spirv-tools", packages)
    path = root / "usr" / "bin" / name
    if not path.is_file():
        pytest.fail(f"{packages[0].name} {packages[0].version} has no usr/bin/{name}")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(root / "usr" / "lib" / "x86_64-linux-gnu"),
         *filter(None, [env.get("LD_LIBRARY_PATH")])])
    return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True,
                          check=False, cwd=cwd, env=env)


def ocloc_fat(source: Path, devices: str) -> Path:
    """``ocloc compile -file <source> -device <devices>``'s fat binary (an ``ar`` archive of
    one member per device), built once into ``CACHE/xpu/fat-<key>/``."""
    key = hashlib.sha256(source.read_bytes() + devices.encode()).hexdigest()[:16]
    out = CACHE / "xpu" / f"fat-{key}"
    fat = out / "k_fat"
    if fat.is_file():
        return fat
    work = out.with_name(out.name + f".{os.getpid()}.part")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copy(source, work / source.name)
    proc = run_tool("ocloc", "compile", "-file", source.name, "-device", devices,
                    "-output", "k_fat", "-output_no_suffix", cwd=work)
    made = sorted(p for p in work.iterdir() if p.name.startswith("k_fat"))
    if proc.returncode != 0 or not made:
        pytest.fail(f"ocloc failed ({proc.returncode}): {proc.stdout[-2000:]} "
                    f"{proc.stderr[-2000:]}")
    if made[0].name != "k_fat":
        made[0].rename(work / "k_fat")
    shutil.rmtree(out, ignore_errors=True)
    work.replace(out)
    return fat
