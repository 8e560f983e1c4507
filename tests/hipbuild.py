"""HIP test binaries built by Debian's clang 19 and 22 (tests/llvm.py), cached by recipe.

clang compiles HIP device code for any gfx target without ROCm when given ``-nogpulib
-nogpuinc`` (no device libraries, no HIP headers; the sources include tests/data/hip/hip_min.h
instead). See ../shared/ROCM.md §3.2. Each fixture is built once into
``CACHE/hip/<name>-<key>/``, where the key hashes the recipe, the sources and the LLVM versions,
so a fixture is rebuilt only when one of them changes.

Next to each output lie the resource oracle files: ``<source>.<target>.remarks``, the stderr of
``clang -Rpass-analysis=kernel-resource-usage`` compiling ``<source>`` for that one target with
the fixture's code-generation flags (clang's remarks do not say which target they are for, so
each target gets its own device-only compile), for every fixture that holds machine code;
``remarks(name)`` parses them.

Fixtures (``build(name)`` returns the output's path). Targets: T3 = gfx942, gfx90a:xnack+,
gfx1100 (plus clang's host entry of size 0); G3 = gfx11-generic, gfx9-generic:xnack-,
gfx942:sramecc+:xnack- (code object v6). kernels.hip: add, lds_reverse (1024 B LDS), scratch
(scratch), spill (VGPR spills under amdgpu_num_vgpr(16)), _ZN3fbk5scaleIfEEvPT_S1_i;
second.hip: saxpy.

========== ============================================================================
name       what it is
========== ============================================================================
bundle19   device-only uncompressed bundle file, clang 19, T3: 4 entries, host
           ``host-x86_64-unknown-linux--``, code object v5
obj19      host object, ``.hip_fatbin`` = 1 uncompressed bundle (T3), clang 19, 1 wrapper
obj19z     the same with ``--offload-compress``: 1 CCOB v2 (zstd)
obj22      host object, 1 uncompressed bundle (T3), clang 22 (host
           ``host-x86_64-unknown-linux-gnu-``, code object v6)
obj22z     the same with ``--offload-compress``: 1 CCOB v3 (zstd)
generic19  host object, 1 uncompressed bundle of G3, clang 19, code object v6
rdc19      ``-fgpu-rdc -c`` object, clang 19: object-file-handler sections
           ``__CLANG_OFFLOAD_BUNDLE__hip-amdgcn-amd-amdhsa--<target>`` (bitcode, T3) and
           ``__CLANG_OFFLOAD_BUNDLE__host-x86_64-pc-linux-gnu-``; no ``.hip_fatbin``
newdrv19   ``--offload-new-driver -fgpu-rdc -c`` object, clang 19: ``.llvm.offloading``,
           3 OffloadBinary v1 blobs of bitcode (T3)
lib19mix   ld.lld 19 ``-shared`` of obj19's kernels.o and second.hip compressed (CCOB v2):
           ``.hip_fatbin`` with 2 bundles (uncompressed, then CCOB v2), 2 wrappers
lib22zz    ld.lld 22 ``-shared`` of kernels.hip and second.hip, both compressed by clang 22:
           ``.hip_fatbin`` with 2 CCOB v3, 2 wrappers (the shape of jax's _solver.so)
ar19       llvm-ar archive of lib19mix's two objects (kernels.o uncompressed, second.o CCOB v2)
ar19rdc    llvm-ar archive of kernels.hip and second.hip compiled as rdc19 (object-file-handler
           sections in each member; ``clang-offload-bundler --type=a`` unbundles it)
========== ============================================================================
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from llvm import LLVM, run_llvm
from thirdparty import CACHE

__all__ = ["FIXTURES", "GENERIC", "SOURCES", "TARGETS", "Compile", "Fixture", "Tool", "build",
           "remarks"]

SOURCES = Path(__file__).resolve().parent / "data" / "hip"
TARGETS = ("gfx942", "gfx90a:xnack+", "gfx1100")
GENERIC = ("gfx11-generic", "gfx9-generic:xnack-", "gfx942:sramecc+:xnack-")
HIP = ("-x", "hip", "-nogpulib", "-nogpuinc", "-O2")


@dataclass(frozen=True)
class Compile:
    """clang on one HIP source: ``packaging`` picks the output's form (-c, --cuda-device-only,
    --offload-compress, -fgpu-rdc ...), ``codegen`` changes the device code itself."""

    major: int
    source: str
    output: str
    packaging: tuple[str, ...]
    targets: tuple[str, ...] = TARGETS
    codegen: tuple[str, ...] = ()

    @property
    def args(self) -> tuple[str, ...]:
        return (*HIP, *self.codegen, *(f"--offload-arch={t}" for t in self.targets),
                *self.packaging, "-o", self.output, self.source)

    @property
    def machine_code(self) -> bool:
        """Whether the output holds code objects (RDC compiles stop at bitcode)."""
        return "-fgpu-rdc" not in self.packaging

    def remark_args(self, target: str) -> tuple[str, ...]:
        return (*HIP, *self.codegen, f"--offload-arch={target}", "--cuda-device-only", "-S",
                "-o", os.devnull, "-Rpass-analysis=kernel-resource-usage", self.source)


@dataclass(frozen=True)
class Tool:
    """Another LLVM tool on earlier outputs (ld.lld, llvm-ar)."""

    major: int
    tool: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class Fixture:
    """A test binary: the steps that make it, run in order in one directory, and the file
    among their outputs that the fixture is."""

    output: str
    steps: tuple[Compile | Tool, ...]


def _obj(major: int, source: str, output: str, *packaging: str) -> Compile:
    return Compile(major, source, output, ("-c", *packaging))


_MIX = (_obj(19, "kernels.hip", "kernels.o"),
        _obj(19, "second.hip", "second.o", "--offload-compress"))

FIXTURES: dict[str, Fixture] = {
    "bundle19": Fixture("kernels.bundle", (
        Compile(19, "kernels.hip", "kernels.bundle", ("--cuda-device-only",)),)),
    "obj19": Fixture("kernels.o", (_obj(19, "kernels.hip", "kernels.o"),)),
    "obj19z": Fixture("kernels.o", (_obj(19, "kernels.hip", "kernels.o", "--offload-compress"),)),
    "obj22": Fixture("kernels.o", (_obj(22, "kernels.hip", "kernels.o"),)),
    "obj22z": Fixture("kernels.o", (_obj(22, "kernels.hip", "kernels.o", "--offload-compress"),)),
    "generic19": Fixture("kernels.o", (
        Compile(19, "kernels.hip", "kernels.o", ("-c",), GENERIC, ("-mcode-object-version=6",)),)),
    "rdc19": Fixture("kernels.o", (_obj(19, "kernels.hip", "kernels.o", "-fgpu-rdc"),)),
    "newdrv19": Fixture("kernels.o", (
        _obj(19, "kernels.hip", "kernels.o", "--offload-new-driver", "-fgpu-rdc"),)),
    "lib19mix": Fixture("libmix.so", (
        *_MIX, Tool(19, "ld.lld", ("-shared", "-o", "libmix.so", "kernels.o", "second.o")))),
    "lib22zz": Fixture("libzz.so", (
        _obj(22, "kernels.hip", "kernels.o", "--offload-compress"),
        _obj(22, "second.hip", "second.o", "--offload-compress"),
        Tool(22, "ld.lld", ("-shared", "-o", "libzz.so", "kernels.o", "second.o")))),
    "ar19": Fixture("libmix.a", (
        *_MIX, Tool(19, "llvm-ar", ("rcs", "libmix.a", "kernels.o", "second.o")))),
    "ar19rdc": Fixture("librdc.a", (
        _obj(19, "kernels.hip", "kernels.o", "-fgpu-rdc"),
        _obj(19, "second.hip", "second.o", "-fgpu-rdc"),
        Tool(19, "llvm-ar", ("rcs", "librdc.a", "kernels.o", "second.o")))),
}


def _key(fixture: Fixture) -> str:
    """The recipe (this file's code included), the LLVM versions and the sources, hashed."""
    digest = hashlib.sha256(repr(fixture).encode() + Path(__file__).read_bytes())
    for major in sorted({s.major for s in fixture.steps}):
        digest.update(f"{major}={LLVM[major][0].version}".encode())
    for src in sorted(SOURCES.iterdir()):
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    return digest.hexdigest()[:16]


def _run(work: Path, major: int, tool: str, args: tuple[str, ...]) -> str:
    proc = run_llvm(major, tool, *args, cwd=work)
    if proc.returncode != 0:
        pytest.fail(f"{tool}-{major} {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return proc.stderr


def _build(fixture: Fixture, work: Path) -> None:
    for src in SOURCES.iterdir():
        shutil.copyfile(src, work / src.name)
    log: list[str] = []
    done: set[tuple[str, ...]] = set()
    for step in fixture.steps:
        if isinstance(step, Tool):
            log.append(_run(work, step.major, step.tool, step.args))
            continue
        log.append(_run(work, step.major, "clang", step.args))
        for target in step.targets if step.machine_code else ():
            args = step.remark_args(target)
            if args not in done:
                done.add(args)
                text = _run(work, step.major, "clang", args)
                (work / f"{Path(step.source).stem}.{target}.remarks").write_text(text)
    (work / "build.log").write_text("".join(log))


def build(name: str) -> Path:
    """The output of fixture ``name`` (see the table above), built on first use; a failing
    step fails the test."""
    fixture = FIXTURES[name]
    root = CACHE / "hip" / f"{name}-{_key(fixture)}"
    if not root.is_dir():
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.with_name(root.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not root.is_dir():
                work = root.with_name(root.name + ".part")
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir()
                _build(fixture, work)
                work.replace(root)
    return root / fixture.output


_REMARK = re.compile(r"remark: +([^:]+): (.*?) \[-Rpass-analysis=kernel-resource-usage\]$")


def remarks(name: str) -> dict[tuple[str, str], dict[str, dict[str, str]]]:
    """clang's resource remarks for fixture ``name``: (source stem, target) -> kernel ->
    field -> value, e.g. ``[("kernels", "gfx942")]["add"]["LDS Size [bytes/block]"] == "0"``."""
    out: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for path in sorted(build(name).parent.glob("*.remarks")):
        stem, target = path.name[:-len(".remarks")].split(".", 1)
        kernels = out.setdefault((stem, target), {})
        fields: dict[str, str] = {}
        for line in path.read_text().splitlines():
            m = _REMARK.search(line)
            if m is None:
                continue
            if m[1] == "Function Name":
                fields = kernels.setdefault(m[2], {})
            else:
                fields[m[1].strip()] = m[2]
    return out
