"""Compile Triton kernels for many GPU targets ahead of time (no GPU needed), with a portable PTX
floor, into one fatbin per kernel.

Triton compiles for the target it is given, not the GPU it runs on, so one process on a machine
without a GPU produces SASS for sm_80, sm_90a, sm_100a, ... :func:`compile_kernel` compiles a
``@triton.jit`` function for every target on a thread pool (``jobs``, default
:func:`fatbinkit.parallel.default_jobs`: the cores this process may use; Triton releases the
GIL in MLIR, LLVM and ptxas: threads scale, need no pickling and are safe inside a process that
holds a CUDA context, such as torch), reporting each target done to ``progress``
(:mod:`fatbinkit.progress`); :func:`retarget` does the same for a kernel Triton has
already compiled (what AOTInductor holds), from its target-independent Triton IR.

The PTX floor is the PTX every GPU at or above the lowest target can JIT-compile: Triton labels
its PTX with the arch-specific target from sm_90 on (``.target sm_90a``), which no other GPU
accepts; the floor relabels the lowest target's PTX with the plain arch where the kernel allows it,
decided by ptxas compiling it for that plain arch (a kernel using ``wgmma`` or ``tcgen05``
cannot). ``min_driver`` caps the floor's PTX ISA at the newest that driver's CUDA release can JIT
(PTX ISA release history, :data:`fatbinkit.formats.ptx.PTX_ISA_MIN_CUDA`): Triton otherwise writes
the ISA of its bundled ptxas (8.8 for Triton 3.9), which older drivers refuse.

For a Triton-only AOT flow, :func:`blobs` turns kernels into what one object (or one section of
a linked library) embeds, the fatbins and their launch table, and :func:`header` into the C
declarations a launcher includes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from .driver import DEVICE_SUPPORT, CudaVersion, as_cuda_version, dotted
from .errors import FatbinkitError, InvalidArgumentError, ToolError, ToolNotFoundError, option
from .formats.amdgpu import TargetId
from .formats.arch import Arch, as_arch
from .formats.elf_writer import Blob
from .formats.ptx import max_ptx_isa_for_driver, ptx_header
from .parallel import as_jobs
from .progress import Progress, reporter
from .triton_amd import AmdKernel, amd_targets, compile_amd, retarget_amd

__all__ = [
    "LAUNCH_TABLE",
    "SHARED_PER_BLOCK",
    "PtxFloor",
    "TritonImage",
    "TritonKernel",
    "blobs",
    "compile_kernel",
    "header",
    "retarget",
]

#: the blob name of the launch table :func:`blobs` adds (symbols ``__fatbinkit_triton_launch_*``)
LAUNCH_TABLE = "fatbinkit_triton_launch"

#: The most shared memory one block may use, opting in
#: (``cudaFuncAttributeMaxDynamicSharedMemorySize``), per SM number: CUDA C++ Programming
#: Guide, "Technical Specifications per Compute Capability", "Maximum amount of shared memory
#: per thread block" (7.0 96 KB, 7.5 64 KB, 8.0/8.7 163 KB, 8.6/8.9/12.x 99 KB, 9.0/10.x 227 KB);
#: each GPU reports it as ``CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN``. Archs not
#: listed are not checked.
SHARED_PER_BLOCK: dict[int, int] = {
    70: 96 << 10, 75: 64 << 10, 80: 163 << 10, 86: 99 << 10, 87: 163 << 10, 89: 99 << 10,
    90: 227 << 10, 100: 227 << 10, 103: 227 << 10, 120: 99 << 10, 121: 99 << 10,
}

# Options that Triton derives from the target (parse_options): never carried to another target.
_TARGET_OPTIONS = frozenset({"arch", "ptx_version", "supported_fp8_dtypes",
                             "deprecated_fp8_dot_operand_dtypes"})


@dataclass(frozen=True)
class TritonImage:
    """One kernel compiled by Triton for one target: SASS, PTX and the launch metadata."""

    name: str
    arch: Arch
    cubin: bytes = field(repr=False)
    ptx: bytes = field(repr=False)
    ptx_version: tuple[int, int]
    num_warps: int
    shared: int
    global_scratch_size: int
    profile_scratch_size: int

    @property
    def block_threads(self) -> int:
        """Threads per block the kernel must be launched with (``num_warps * 32``)."""
        return self.num_warps * 32

    @classmethod
    def from_compiled(cls, compiled: Any) -> TritonImage:
        """The image of a ``triton.compiler.CompiledKernel``, labelled with its PTX's real
        target (``sm_90a``, not the ``sm_90`` it was asked for)."""
        ptx = compiled.asm["ptx"]
        ptx_bytes = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        meta = compiled.metadata
        version, ptx_arch = ptx_header(ptx_bytes)
        return cls(
            name=meta.name,
            arch=Arch(ptx_arch.number, ptx_arch.suffix),
            cubin=bytes(compiled.asm["cubin"]),
            ptx=ptx_bytes,
            ptx_version=version,
            num_warps=meta.num_warps,
            shared=meta.shared,
            global_scratch_size=getattr(meta, "global_scratch_size", 0) or 0,
            profile_scratch_size=getattr(meta, "profile_scratch_size", 0) or 0,
        )

    def __str__(self) -> str:
        return (f"{self.name} {self.arch.sm}: cubin {len(self.cubin)} B, PTX ISA "
                f"{dotted(self.ptx_version)}, {self.num_warps} warps, {self.shared} B shared")


@dataclass(frozen=True)
class PtxFloor:
    """The PTX shipped for GPUs no SASS image fits: the lowest target's, labelled ``arch``.

    ``portable`` when ``arch`` is the plain virtual arch (``compute_80``, ``compute_90``: every
    GPU of that compute capability or newer JIT-compiles it); otherwise ``arch`` keeps Triton's
    arch-specific label (``compute_90a``: that GPU only) and ``reason`` says why (ptxas' error for
    the plain arch).
    """

    arch: Arch
    ptx: bytes = field(repr=False)
    ptx_version: tuple[int, int]
    portable: bool
    reason: str = ""

    def __str__(self) -> str:
        what = "portable" if self.portable else f"arch-specific: {self.reason}"
        return f"PTX floor {self.arch.compute} (ISA {dotted(self.ptx_version)}, {what})"


@dataclass(frozen=True)
class TritonKernel:
    """One kernel for many targets: a SASS image per target and the PTX floor.

    ``shared`` and the scratch sizes are the largest over the images: one launch configuration
    (what a C++ wrapper such as AOTInductor's hard-codes) that is enough on every target.
    """

    name: str
    images: tuple[TritonImage, ...]
    floor: PtxFloor | None

    @property
    def num_warps(self) -> int:
        return self.images[0].num_warps

    @property
    def block_threads(self) -> int:
        """Threads per block to launch with (``num_warps * 32``), the same on every target."""
        return self.images[0].block_threads

    @property
    def shared(self) -> int:
        return max(i.shared for i in self.images)

    @property
    def global_scratch_size(self) -> int:
        return max(i.global_scratch_size for i in self.images)

    @property
    def profile_scratch_size(self) -> int:
        return max(i.profile_scratch_size for i in self.images)

    def check_shared(self) -> None:
        """Refuse (:class:`InvalidArgumentError`) a kernel whose one launch size (:attr:`shared`,
        the largest over the targets) is more shared memory than a block may have on one of its
        targets (:data:`SHARED_PER_BLOCK`): the launch would fail there, though that target's
        own image might fit."""
        for image in self.images:
            limit = SHARED_PER_BLOCK.get(image.arch.number)
            if limit is not None and self.shared > limit:
                worst = max(self.images, key=lambda i: i.shared)
                raise InvalidArgumentError(
                    f"{self.name}: its {worst.arch.sm} image needs {worst.shared} B of shared "
                    f"memory, more than a block may have on {image.arch.sm} ({limit} B); one "
                    f"launch size serves every arch: drop {image.arch.sm} or use a smaller config")

    def fatbin(self, *, sass: bool = True, ptx: Literal["floor", "all", "none"] = "floor",
               compression: str | None = None) -> bytes:
        """One fatbin (pure-Python writer, no NVIDIA tool): SASS for every target labelled with
        Triton's real target (``sm_90a``), and the PTX floor (``ptx="floor"``), every target's
        own PTX (``"all"``, labelled ``compute_90a``...) or none."""
        from .formats.fatbin import EntryKind, build_fatbin, make_entry

        if ptx not in ("floor", "all", "none"):
            raise InvalidArgumentError(f"ptx must be 'floor', 'all' or 'none', not {ptx!r}")
        entries = []
        if sass:
            entries += [make_entry(EntryKind.ELF, i.arch, i.cubin, identifier=self.name,
                                   compression=compression) for i in self.images]
        if ptx == "all":
            entries += [make_entry(EntryKind.PTX, i.arch, i.ptx, identifier=self.name,
                                   compression=compression) for i in self.images]
        elif ptx == "floor":
            if self.floor is None:
                raise InvalidArgumentError(f"{self.name} was compiled without a PTX floor")
            entries.append(make_entry(EntryKind.PTX, self.floor.arch, self.floor.ptx,
                                      identifier=self.name, compression=compression))
        if not entries:
            raise InvalidArgumentError("a fatbin needs SASS, PTX or both")
        return build_fatbin(entries)

    @property
    def target_names(self) -> tuple[str, ...]:
        """Each image's target as Triton built it: ``sm_80``, ``sm_90a``..."""
        return tuple(i.arch.sm for i in self.images)

    def blob(self, *, ptx: Literal["floor", "all", "none"] = "floor",
             compression: str | None = None) -> bytes:
        """What :func:`blobs` embeds: :meth:`fatbin` with SASS."""
        return self.fatbin(ptx=ptx, compression=compression)

    def launch_entry(self, *, ptx: Literal["floor", "all", "none"] = "floor") -> dict[str, Any]:
        """This kernel's entry in :func:`blobs`' launch table."""
        return {
            "name": self.name, "symbol": f"__{self.name}_start", "num_warps": self.num_warps,
            "block_threads": self.block_threads, "shared": self.shared,
            "global_scratch_size": self.global_scratch_size,
            "profile_scratch_size": self.profile_scratch_size,
            "sass": [i.arch.sm for i in self.images], "ptx": _ptx_labels(self, ptx)}

    def declaration(self) -> list[str]:
        """This kernel's lines in :func:`header`: its symbols and launch constants."""
        macro = re.sub(r"\W", "_", self.name).upper()
        floor = f", PTX {self.floor.arch.compute}" if self.floor else ""
        return [
            f"/* {self.name}: SASS {', '.join(i.arch.sm for i in self.images)}{floor} */",
            f"extern const unsigned char __{self.name}_start[], __{self.name}_end[];",
            f"#define {macro}_BLOCK_THREADS {self.block_threads}",
            f"#define {macro}_SHARED {self.shared}",
            f"#define {macro}_GLOBAL_SCRATCH {self.global_scratch_size}",
            f"#define {macro}_PROFILE_SCRATCH {self.profile_scratch_size}", ""]

    def __str__(self) -> str:
        archs = ", ".join(i.arch.sm for i in self.images)
        floor = f"; {self.floor}" if self.floor else ""
        return f"{self.name}: SASS {archs}{floor}"

    def __repr__(self) -> str:
        archs = ", ".join(i.arch.sm for i in self.images)
        floor = self.floor.arch.compute if self.floor else None
        return f"TritonKernel(name={self.name!r}, images=<{archs}>, floor={floor!r})"


def blobs(kernels: Sequence[TritonKernel | AmdKernel], *,
          ptx: Literal["floor", "all", "none"] = "floor",
          compression: str | None = None) -> list[Blob]:
    """What a Triton-only AOT flow embeds: each kernel's container, named after the kernel
    (``__<name>_start/_end/_size``): a fatbin (:class:`TritonKernel`: SASS and ``ptx``) or an
    offload bundle (:class:`~fatbinkit.triton_amd.AmdKernel`: a code object per target;
    ``compression`` makes it a CCOB), and a launch table (:data:`LAUNCH_TABLE`, JSON: per
    kernel its symbol, warps, threads per block, shared memory, scratch sizes and targets). The
    kernels are one vendor's.
    Write them into one object with :func:`fatbinkit.formats.elf_writer.write_object` (no
    toolchain) or into a linked library with :func:`fatbinkit.inject.inject`; :func:`header`
    declares them for C."""
    names = [k.name for k in kernels]
    if not kernels or len(set(names)) != len(names) or LAUNCH_TABLE in names:
        raise InvalidArgumentError(
            f"kernels must be given once each (and none named {LAUNCH_TABLE}): {names}")
    if len({type(k) for k in kernels}) > 1:
        raise InvalidArgumentError(
            f"kernels for CUDA and AMD GPUs in one object: {names}; embed each vendor's apart")
    table = {"kernels": [k.launch_entry(ptx=ptx) for k in kernels]}
    out = [Blob(k.name, k.blob(ptx=ptx, compression=compression)) for k in kernels]
    out.append(Blob(LAUNCH_TABLE, json.dumps(table, indent=1, sort_keys=True).encode()))
    return out


def _ptx_labels(kernel: TritonKernel, ptx: str) -> list[str]:
    if ptx == "all":
        return [i.arch.compute for i in kernel.images]
    return [kernel.floor.arch.compute] if ptx == "floor" and kernel.floor else []


def header(kernels: Sequence[TritonKernel | AmdKernel]) -> str:
    """A C header for :func:`blobs`' object: each container's symbols and launch constants
    (``<NAME>_BLOCK_THREADS``, ``<NAME>_SHARED``, ...), for a C/C++ launcher that calls
    ``cuModuleLoadData(__<name>_start)`` and ``cuLaunchKernel`` (CUDA) or
    ``hipModuleLoadData`` and ``hipModuleLaunchKernel`` (AMD)."""
    lines = ["/* Triton kernels embedded by fatbinkit (fatbinkit.triton.blobs): each a fatbin",
             " * (CUDA) or an offload bundle (AMD). Launch with the constants below; Triton",
             " * kernels take two more pointer parameters after their own (global and profile",
             " * scratch): NULL when 0. */",
             "#pragma once", "#include <stddef.h>", ""]
    for k in kernels:
        lines += k.declaration()
    return "\n".join(lines)


def compile_kernel(
    fn: Callable[..., Any],
    signature: Mapping[str, str],
    targets: Sequence[Arch | TargetId | str] | Arch | TargetId | str,
    *,
    constexprs: Mapping[str, Any] | None = None,
    num_warps: int = 4,
    num_stages: int | None = None,
    min_driver: object = None,
    floor: bool = True,
    jobs: int | None = None,
    progress: Progress = None,
) -> TritonKernel | AmdKernel:
    """Compile the ``@triton.jit`` function ``fn`` for every target (``sm_80``, ``90``...; one
    target alone is a list of one), on ``jobs`` threads (None:
    :func:`fatbinkit.parallel.default_jobs`, the cores this process may use), plus the PTX floor
    (``floor``). ``progress`` (:mod:`fatbinkit.progress`) hears of each target compiled (unit
    ``"arch"``, named ``sm_90a``...).

    AMD targets (``gfx90a``, ``gfx942``, ``gfx1100``...; :mod:`fatbinkit.triton_amd`) give an
    :class:`~fatbinkit.triton_amd.AmdKernel` instead: a code object per target, shipped as one
    offload bundle (no floor; ``min_driver`` is CUDA's); one call takes one vendor's targets.

    ``signature`` maps every parameter to a Triton type (``"*fp32"``, ``"i32"``, ``"constexpr"``),
    as ``triton.compiler.ASTSource`` takes it; ``constexprs`` gives the constexpr values.
    ``num_stages`` None is Triton's default for the backend (3 for CUDA, 2 for AMD).
    ``min_driver`` (``"12.4"``, ``(12, 4)``) caps the floor's PTX ISA to what that driver JITs.
    """
    amd = amd_targets(targets)
    if amd is None:
        archs = _targets(targets)  # type: ignore[arg-type]  # no TargetId: amd_targets saw none
    else:
        _no_driver(amd, min_driver)
    jobs = as_jobs(jobs)
    triton, ast_source = _import_triton()
    options = {"num_warps": num_warps}
    if num_stages is not None:
        options["num_stages"] = num_stages

    def source() -> Any:
        return ast_source(fn=fn, signature=dict(signature), constexprs=dict(constexprs or {}))

    try:
        source()  # a wrong signature or constexpr, or not a @triton.jit function: said once
    except Exception as exc:  # Triton raises many types
        raise InvalidArgumentError(f"not a Triton kernel and its signature: {exc}") from exc

    name = str(getattr(fn, "__name__", "kernel"))
    if amd is not None:
        return compile_amd(source, name, amd, options, jobs=jobs, progress=progress)

    def compile_one(arch: Arch, ptx_version: int | None) -> TritonImage:
        return _compile(triton, source(), arch, options, ptx_version)

    return _build(compile_one, archs, min_driver=min_driver, floor=floor, jobs=jobs,
                  progress=progress, desc=f"Triton {name}")


def retarget(
    compiled: Any,
    targets: Sequence[Arch | TargetId | str] | Arch | TargetId | str,
    *,
    min_driver: object = None,
    floor: bool = True,
    jobs: int | None = None,
    progress: Progress = None,
) -> TritonKernel | AmdKernel:
    """Compile a kernel Triton has already compiled (a ``triton.compiler.CompiledKernel``, for
    any target) for every target, from its Triton IR (``asm["ttir"]``, which precedes every
    target-specific pass) with the same options (warps, stages, ...). For the kernels tested
    (pointwise, reductions, ``tl.dot`` matmuls) the cubins are byte-identical to compiling the
    source for each target; the few front-end choices Triton makes from the target (fp8 types
    allowed, ``max_num_imprecise_acc`` of fp8 dots on sm_90) stay those of the kernel's own
    target. The given kernel's own image is reused where its GPU is asked for. ``jobs`` and
    ``progress`` as in :func:`compile_kernel`; AMD targets as there, for a kernel Triton
    compiled for an AMD GPU (:func:`fatbinkit.triton_amd.retarget_amd`)."""
    amd = amd_targets(targets)
    if amd is not None:
        _no_driver(amd, min_driver)
        return retarget_amd(compiled, amd, jobs=jobs, progress=progress)
    archs, jobs = _targets(targets), as_jobs(jobs)  # type: ignore[arg-type]  # no TargetId
    triton, _ = _import_triton()
    try:
        ttir = compiled.asm["ttir"]
        meta = compiled.metadata._asdict()
        own = TritonImage.from_compiled(compiled)
    except (AttributeError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(
            f"not a compiled Triton kernel with its Triton IR: {type(compiled).__name__}"
        ) from exc
    from triton.backends.nvidia.compiler import CUDAOptions

    known = {f.name for f in fields(CUDAOptions)} - _TARGET_OPTIONS
    options = {k: _frozen(v) for k, v in meta.items() if k in known and v is not None}

    with tempfile.TemporaryDirectory(prefix="fatbinkit-ttir-") as tmp:
        path = Path(tmp) / f"{own.name}.ttir"  # Triton reads IR from a file named *.ttir
        path.write_text(ttir if isinstance(ttir, str) else bytes(ttir).decode())

        def compile_one(arch: Arch, ptx_version: int | None) -> TritonImage:
            if arch.number == own.arch.number and ptx_version is None:  # sm_90 asked, sm_90a
                return own
            return _compile(triton, str(path), arch, options, ptx_version)

        return _build(compile_one, archs, min_driver=min_driver, floor=floor, jobs=jobs,
                      progress=progress, desc=f"Triton {own.name}")


def _no_driver(amd: Sequence[TargetId], min_driver: object) -> None:
    if min_driver is not None:
        raise InvalidArgumentError(
            f"{option('min_driver', str(min_driver))} is a CUDA driver; AMD targets "
            f"({', '.join(map(str, amd))}) have none")


def _frozen(value: Any) -> Any:
    """Lists in kernel metadata (its JSON form) as the tuples Triton's options hash."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _targets(targets: Sequence[Arch | str] | Arch | str) -> list[Arch]:
    """The distinct targets, lowest first; one target alone counts as a list of one."""
    if isinstance(targets, (str, Arch, int)):
        targets = [targets]
    try:
        archs = sorted({_target(t) for t in targets})
    except TypeError as exc:
        raise InvalidArgumentError(
            f"targets must be archs ('sm_90', 90...), not {targets!r}") from exc
    if not archs:
        raise InvalidArgumentError(f"no target arch given: {option('targets', '[ARCHS]')}")
    return archs


def _build(compile_one: Callable[[Arch, int | None], TritonImage],
           archs: list[Arch], *, min_driver: object, floor: bool, jobs: int,
           progress: Progress, desc: str) -> TritonKernel:
    """Every target on a thread pool, the lowest one with the floor's ISA cap; then the floor."""
    caps: list[int | None] = [None] * len(archs)
    driver = None if min_driver is None else as_cuda_version(min_driver, "min_driver")
    images: list[TritonImage | None] = [None] * len(archs)
    # one build at a time: the ptxas swap lives in os.environ, which every thread shares
    with reporter(progress, len(archs), "arch", desc) as report, _ENV_LOCK:
        groups: list[tuple[dict[str, str], list[int]]] = [({}, list(range(len(archs))))]
        if driver is not None:
            env, swapped, sass_cap = _sass_for_driver(archs, driver)
            caps = [sass_cap if a in swapped else None for a in archs]
            if floor:
                caps[0] = _min_isa(_isa_cap(archs[0], driver), caps[0])
            groups = [(env, [i for i, a in enumerate(archs) if a in swapped]),
                      ({}, [i for i, a in enumerate(archs) if a not in swapped])]
        for env, picked in groups:
            if not picked:
                continue
            with _environment(env), _serial_ast_parse(), ThreadPoolExecutor(
                    min(jobs, len(picked)), thread_name_prefix="fatbinkit-triton") as pool:
                futures: dict[Future[TritonImage], int] = {
                    pool.submit(compile_one, archs[i], caps[i]): i for i in picked}
                try:
                    for future in as_completed(futures):
                        image = future.result()
                        images[futures[future]] = image
                        report.advance(1, image.arch.sm)
                except BaseException:  # a failure, or progress cancelling: start no other
                    for future in futures:
                        future.cancel()
                    raise
    built = tuple(i for i in images if i is not None)
    return TritonKernel(built[0].name, built, _floor(built[0]) if floor else None)


def _min_isa(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def _sass_for_driver(archs: Sequence[Arch], driver: CudaVersion) -> tuple[
        dict[str, str], set[Arch], int | None]:
    """Make every cubin loadable by the drivers that run its GPU from ``driver`` on: a cubin
    needs a driver of its ptxas' CUDA major (CUDA Compatibility guide, minor-version
    compatibility; :mod:`fatbinkit.compat`'s toolkit floor), and a GPU needs a driver of at least
    its first CUDA release (``DEVICE_SUPPORT``: sm_100 runs on 12.8 drivers, so ``min_driver``
    12.4 means 12.8 there, and sm_110's 13.0 lets Triton's CUDA 13 ptxas build it). Triton 3.5+
    runs its newer ``ptxas-blackwell`` (CUDA 13.x in Triton 3.9) from sm_90 on; the targets it
    would build for too old a driver take Triton's other ptxas (``TRITON_PTXAS_BLACKWELL_PATH``,
    Triton's cache bypassed: its key does not see the swap) and that ptxas' PTX ISA. Returns the
    environment for those targets, the targets, and their ISA cap."""
    legacy = _ptxas(Arch(80))
    swapped = set()
    for arch in archs:
        support = DEVICE_SUPPORT.get(arch.number)
        floor = max(driver, support.first) if support is not None else driver
        if _ptxas_release(_ptxas(arch))[0] <= floor[0]:
            continue
        if _ptxas_release(legacy)[0] > floor[0]:
            raise InvalidArgumentError(
                f"{option('min_driver', dotted(driver))}: Triton's ptxas is CUDA "
                f"{dotted(_ptxas_release(legacy))}, whose {arch.sm} cubins need a CUDA "
                f"{_ptxas_release(legacy)[0]}.x driver; install a Triton whose ptxas is that "
                "old, or raise min_driver")
        swapped.add(arch)
    if not swapped:
        return {}, swapped, None
    env = {"TRITON_ALWAYS_COMPILE": "1"}
    if any(_ptxas(a) != legacy for a in swapped):
        env["TRITON_PTXAS_BLACKWELL_PATH"] = str(legacy)
    isa = max_ptx_isa_for_driver(_ptxas_release(legacy))
    return env, swapped, None if isa is None else isa[0] * 10 + isa[1]


_ENV_LOCK = threading.Lock()


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` set in ``os.environ`` (where Triton reads its knobs) for the block, then
    restored; the caller holds ``_ENV_LOCK``."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_AST_LOCK = threading.Lock()  # held by each ast.parse while compile pools run
_AST_STATE = threading.Lock()  # guards _AST_PARSE, the real ast.parse while it is wrapped
_AST_PARSE: list[Callable[..., Any]] = []


@contextmanager
def _serial_ast_parse() -> Iterator[None]:
    """``ast.parse`` one thread at a time while compile threads run. Triton parses each kernel's
    source for every compile, and CPython's AST constructor keeps its recursion depth per
    interpreter, not per thread: two parses at once can fail with "SystemError: AST constructor
    recursion depth mismatch" (seen here on 3.11.7; CPython gh-106905). Only the parse is
    serialised (microseconds); MLIR, LLVM and ptxas still run in parallel. Builds hold
    ``_ENV_LOCK``, so one wrapper is installed at a time."""
    import ast

    with _AST_STATE:
        parse = ast.parse
        _AST_PARSE.append(parse)

        def serial_parse(*args: Any, **kwargs: Any) -> Any:
            with _AST_LOCK:
                return parse(*args, **kwargs)

        setattr(ast, "parse", serial_parse)  # noqa: B010 (mypy: parse is overloaded)
    try:
        yield
    finally:
        with _AST_STATE:
            setattr(ast, "parse", _AST_PARSE.pop())  # noqa: B010


@functools.cache
def _ptxas_release(tool: Path | str) -> CudaVersion:
    """The CUDA release of a ptxas (``release 12.9`` in ``--version``)."""
    from .toolchain import run_tool

    text = run_tool(tool, ["--version"]).stdout.decode("utf-8", "replace")
    m = re.search(r"release (\d+)\.(\d+)", text)
    if not m:
        raise ToolError(f"{tool}: no release in its --version output")
    return int(m.group(1)), int(m.group(2))


def _isa_cap(arch: Arch, driver: CudaVersion) -> int | None:
    """The PTX ISA (``84`` for 8.4) of ``arch``'s floor PTX: the newest a ``driver`` JITs, or,
    where that GPU needs a newer driver anyway, the newest its first CUDA release JITs (the
    first release for the GPU, ``DEVICE_SUPPORT``; for Triton's arch-specific targets from sm_90
    on at least CUDA 12.0, where PTX ISA 8.0 brought ``sm_90a``): never below what the target
    needs, which LLVM would abort the process on. None when the driver is newer than the ISA
    table."""
    support = DEVICE_SUPPORT.get(arch.number)
    if support is not None:
        first = max(support.first, (12, 0)) if arch.number >= 90 else support.first
        driver = max(driver, first)
    isa = max_ptx_isa_for_driver(driver)
    return None if isa is None else isa[0] * 10 + isa[1]


def _target(target: Arch | str) -> Arch:
    return Arch(as_arch(target, "target").number)  # Triton picks the suffix: sm_90 -> sm_90a


def _compile(triton: Any, src: Any, arch: Arch, options: Mapping[str, Any],
             ptx_version: int | None) -> TritonImage:
    """One ``triton.compile`` for ``arch``; Triton's errors (any type) become FatbinkitError."""
    from triton.backends.compiler import GPUTarget

    opts = dict(options)
    if ptx_version is not None:
        opts["ptx_version"] = min(ptx_version, _triton_ptx_version(arch))
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", arch.number, 32), options=opts)
    except Exception as exc:  # Triton raises many types; keep its message
        isa = f" with PTX ISA {opts['ptx_version'] / 10:.1f}" if ptx_version is not None else ""
        raise FatbinkitError(f"Triton failed to compile for {arch.sm}{isa}: {exc}") from exc
    return TritonImage.from_compiled(compiled)


def _floor(image: TritonImage) -> PtxFloor:
    """The lowest target's PTX as the floor, relabelled with the plain arch where ptxas compiles
    it for that arch."""
    plain = Arch(image.arch.number)
    if image.arch == plain:
        return PtxFloor(plain, image.ptx, image.ptx_version, portable=True)
    relabelled = _relabel(image.ptx, image.arch, plain)
    reason = _ptxas_refuses(relabelled, plain)
    if reason:
        return PtxFloor(image.arch, image.ptx, image.ptx_version, portable=False, reason=reason)
    return PtxFloor(plain, relabelled, image.ptx_version, portable=True)


def _relabel(ptx: bytes, old: Arch, new: Arch) -> bytes:
    """``ptx`` with its ``.target sm_90a`` directive (the first, in the header) made ``new``."""
    directive = f".target {old.sm}".encode()
    at = ptx.find(directive)
    end = at + len(directive)
    if at < 0 or ptx[end:end + 1].isalnum():
        raise FatbinkitError(f"the PTX has no '.target {old.sm}' directive to relabel")
    return ptx[:at] + f".target {new.sm}".encode() + ptx[end:]


def _ptxas_refuses(ptx: bytes, arch: Arch) -> str:
    """Why ptxas (Triton's own, else the toolkit's) will not compile ``ptx`` for ``arch``, or
    '' when it does: the floor is only as portable as a real compile proves."""
    from .toolchain import run_tool

    with tempfile.TemporaryDirectory(prefix="fatbinkit-floor-") as tmp:
        src = Path(tmp) / "floor.ptx"
        src.write_bytes(ptx.rstrip(b"\0"))
        try:
            run_tool(_ptxas(arch), [f"-arch={arch.sm}", str(src), "-o", os.devnull])
        except ToolError as exc:
            lines = str(exc).splitlines()[1:] or [str(exc)]
            first = next((ln for ln in lines if "error" in ln.lower()), lines[-1])
            return "ptxas: " + first.split("error", 1)[-1].lstrip(" :").strip()
    return ""


def _ptxas(arch: Arch) -> Path | str:
    """Triton's bundled ptxas for ``arch`` (the one that compiled the kernel), else ``ptxas``
    from the toolkit or the pip wheels."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        try:
            tool = get_ptxas(arch.number)
        except TypeError:  # Triton < 3.5: one ptxas for every arch
            tool = get_ptxas()
        return Path(tool.path)
    except (ImportError, AttributeError, RuntimeError):
        return "ptxas"


def _triton_ptx_version(arch: Arch) -> int:
    """The PTX ISA (e.g. 88) Triton's bundled ptxas writes for ``arch``, as Triton computes it."""
    from triton.backends.nvidia import compiler as nv

    return int(nv.get_ptx_version_from_options(nv.CUDAOptions(), arch.number))


def _import_triton() -> Any:
    try:
        import triton
        from triton.compiler import ASTSource
    except ImportError as exc:
        raise ToolNotFoundError(
            "Triton is not installed: pip install 'fatbinkit[triton]' (package triton)"
        ) from exc
    return triton, ASTSource
