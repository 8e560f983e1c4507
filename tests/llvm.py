"""LLVM 19 and LLVM 22 as oracles for the AMD (HIP) formats, from Debian bookworm's packages.

The packages are downloaded on first use, checked against the SHA256 of the archive's Packages
index, and unpacked with ``dpkg -x`` into ``CACHE/llvm/<version>/`` (never installed). The tools
run from ``usr/lib/llvm-<major>/bin`` so clang finds its siblings (clang-offload-bundler,
ld.lld, clang-offload-packager) next to itself, with ``LD_LIBRARY_PATH`` on the unpacked
libraries. Only the packages the tools need are fetched: their other shared-library
dependencies (libz3, libxml2, libedit, libffi, libzstd, libcurl) are the system's (checked with
ldd). See ../shared/ROCM.md §3.1.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from thirdparty import CACHE, DebianPackage, unpacked

__all__ = ["LLVM", "TOOLS", "llvm_path", "run_llvm"]


def _llvm19(name: str, sha256: str) -> DebianPackage:
    return DebianPackage(name, "19.1.7-3~deb12u1", sha256, "main", "llvm-toolchain-19")


def _llvm22(name: str, sha256: str) -> DebianPackage:
    return DebianPackage(name, "22.1.8-1~deb12u1", sha256, "main", "llvm-toolchain-22",
                         security=True)


# major -> the packages (Debian version 1:19.1.7-3~deb12u1 of bookworm, 1:22.1.8-1~deb12u1 of
# bookworm-security; SHA256 from their Packages index). Sizes: 19: 65.8 MB, 22: 72.7 MB.
LLVM: dict[int, tuple[DebianPackage, ...]] = {
    19: (
        _llvm19("clang-19", "89ab931a9bbfd567a76df3141af5d5ec67b01d800150e614f2c9bf4671da9b08"),
        _llvm19("clang-tools-19",
                "5188563c2e08cba6e8e5d253e03bfc0a01e112eba1d8939f97d2e6ce35218491"),
        _llvm19("llvm-19", "f91492c5b361ff12f540b9f6145cf638b5e0fb3f145fceabd6c4b9540eab4bf9"),
        _llvm19("libllvm19", "6edf3a8b28495cdba883d9760e0dca1a81983fc497a5f989dc64d0d96d23b4aa"),
        _llvm19("libclang-cpp19",
                "5daa784e1d747db320c16604729ffa805e6bfd72d3ac0b7cb0ee5f1a7ebc8aae"),
        _llvm19("lld-19", "416e084363a16a7060eaa6343ed641dfe864b8208c39170ee00a5679e4b486a2"),
    ),
    22: (
        _llvm22("clang-22", "b6ffc4ffae2bf3d0757bab0623701060b30f5bb59e7ba4123d66b56fbb91362a"),
        _llvm22("clang-tools-22",
                "4aa071cf2a72270f7ed8ea637e902e3857c450c73c2e6eeb4b8e96406582798a"),
        _llvm22("llvm-22", "fcde579693b3f1cf1da596694c1add8a961ab1e1bd22744d4bff165d4f865add"),
        _llvm22("libllvm22", "729ec3e943d320515c2bbdc96acfffd7ce34861e62bd5c42726bf586d644dfe2"),
        _llvm22("libclang-cpp22",
                "662a8497190dd6cebaee2ac9421ed9d91cb1199eeabd154eafc4b5c1ac01d4b3"),
        _llvm22("lld-22", "13103b3fb3195bfeade9835d3906a4cc91002010f9013d98aa1fc55b841d07b4"),
    ),
}

# The tools the tests use, by package: clang (clang-N), clang-offload-bundler and
# clang-offload-packager (clang-tools-N), llvm-readelf/-objdump/-objcopy/-ar (llvm-N), ld.lld.
TOOLS = ("clang", "clang-offload-bundler", "clang-offload-packager", "llvm-readelf",
         "llvm-objdump", "llvm-objcopy", "llvm-ar", "llvm-nm", "ld.lld")


def _root(major: int) -> Path:
    if major not in LLVM:
        pytest.fail(f"no LLVM {major} pinned (have {sorted(LLVM)})")
    return CACHE / "llvm" / LLVM[major][0].version


def _unpack(major: int) -> Path:
    """The unpacked tree of LLVM ``major``, made once (:func:`thirdparty.unpacked`)."""
    return unpacked(_root(major), LLVM[major])


def llvm_path(major: int, tool: str) -> Path:
    """``usr/lib/llvm-<major>/bin/<tool>`` (clang, clang-offload-bundler, llvm-readelf,
    llvm-objdump, ld.lld, ...), unpacked on first use; a download failure fails the test."""
    path = _unpack(major) / "usr" / "lib" / f"llvm-{major}" / "bin" / tool
    if not path.is_file():
        pytest.fail(f"LLVM {major} has no {tool}")
    return path


def run_llvm(major: int, tool: str, *args: str | os.PathLike[str], cwd: Path | None = None,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``tool`` of LLVM ``major`` (text output captured, exit status not checked), with
    ``LD_LIBRARY_PATH`` on its unpacked libraries; ``env`` adds to the current environment."""
    path = llvm_path(major, tool)
    root = _root(major)
    libs = [root / "usr" / "lib" / "x86_64-linux-gnu",
            root / "usr" / "lib" / f"llvm-{major}" / "lib"]
    full = dict(os.environ)
    full.update(env or {})
    full["LD_LIBRARY_PATH"] = os.pathsep.join(
        [*map(str, libs), *filter(None, [full.get("LD_LIBRARY_PATH")])])
    return subprocess.run([str(path), *map(str, args)], capture_output=True, text=True,
                          check=False, cwd=cwd, env=full)
