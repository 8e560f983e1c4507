"""Triton kernels for AMD GPUs: one code object per gfx target, compiled in parallel, in one
clang offload bundle per kernel. The AMD half of :mod:`fatbinkit.triton`, whose
:func:`~fatbinkit.triton.compile_kernel`, :func:`~fatbinkit.triton.blobs` and
:func:`~fatbinkit.triton.header` call into it for ``gfx`` targets; what is AMD's stays here.

Triton's AMD backend (``triton/backends/amd/compiler.py``) compiles for the target it is given,
with no GPU and no ROCm: LLVM's AMDGPU code generator and the in-process link are in the wheel's
``libtriton_amd_codegen.so`` (ROCM.md §3.4). Each target is one ``triton.compile`` with
``GPUTarget("hip", <processor>, <warp size>)``, the warp size by Triton's own rule
(``HIPOptions.__post_init__``: 64 before GFX10, 32 from it), read from Triton's options for that
processor rather than copied. The code objects become one bundle as the HIP driver writes it
(``clang-offload-bundler -type=o -bundle-align=4096``, entry ids
``hipv4-amdgcn-amd-amdhsa--<target id>``: clang's ``HIPUtility.cpp``), which ``hipModuleLoadData``
loads, picking the entry for the GPU (CLR's ``hip_fatbin.cpp``).

Triton takes a processor (``gfx942``), not a target ID with features: its code objects have
``xnack`` and ``sramecc`` unspecified (any), which is what their ``e_flags`` say and what the
bundle ids carry. Generic targets (``gfx11-generic``) are compiled where the installed Triton
accepts them (Triton 3.9 does not: its options read the processor as ``gfx<major><minor>
<stepping>``), else refused.

The launch differs per target where warp sizes do: a Triton kernel runs ``num_warps`` warps,
so ``num_warps * 64`` threads per workgroup on gfx9 and ``num_warps * 32`` on gfx10+ (the
code object's ``.max_flat_workgroup_size``); the LDS and scratch to reserve are the largest any
target needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from .errors import FatbinkitError, InvalidArgumentError, option
from .formats.amdgpu import TargetId
from .formats.hsaco import read_code_object
from .formats.offload_bundle import compress_bundle, write_bundle
from .parallel import as_jobs
from .progress import Progress, reporter

__all__ = [
    "BUNDLE_KIND",
    "LDS_PER_WORKGROUP",
    "AmdImage",
    "AmdKernel",
    "amd_targets",
    "compile_amd",
    "retarget_amd",
]

#: the offload kind and triple of every entry: ``hipv4`` for code object v4+ (clang's
#: ``HIP::constructHIPFatbinCommand``), the legacy ``amdgcn-amd-amdhsa-`` prefix the HIP runtime
#: matches (``normalizeForBundler``)
BUNDLE_KIND = "hipv4-amdgcn-amd-amdhsa-"


#: LDS a workgroup may address where it is not 64 KiB: LLVM's ``AMDGPU.td``
#: (``FeatureAddressableLocalMemorySize163840`` on gfx950; 65536 on the gfx9 to gfx12
#: processors before it)
LDS_PER_WORKGROUP: dict[str, int] = {"gfx950": 160 << 10}
_LDS_DEFAULT = 64 << 10


def amd_targets(targets: Sequence[object] | object) -> list[TargetId] | None:
    """The AMD targets (``"gfx942"``, a :class:`~fatbinkit.formats.amdgpu.TargetId`), distinct,
    in generation order; None when no target is AMD's. Mixing them with CUDA targets is an
    :class:`InvalidArgumentError`: one call builds one vendor's container."""
    if isinstance(targets, (str, TargetId)) or not isinstance(targets, Sequence):
        targets = [targets]
    amd = [t for t in targets if isinstance(t, TargetId)
           or (isinstance(t, str) and t.startswith("gfx"))]
    if not amd:
        return None
    if len(amd) != len(targets):
        others = [str(t) for t in targets if t not in amd]
        raise InvalidArgumentError(
            f"targets mix AMD ({', '.join(map(str, amd))}) and other GPUs "
            f"({', '.join(others)}): one call builds a fatbin (CUDA) or an offload bundle (AMD); "
            "compile each vendor's targets in its own call")
    parsed = {t if isinstance(t, TargetId) else TargetId.parse(t) for t in amd}
    with_features = sorted(str(t) for t in parsed if t.sramecc is not None or t.xnack is not None)
    if with_features:
        raise InvalidArgumentError(
            f"Triton compiles for a processor, not a target ID with features "
            f"({', '.join(with_features)}): its code objects leave xnack and sramecc "
            "unspecified and run with either; give the processor alone (gfx90a)")
    return sorted(parsed)


@dataclass(frozen=True)
class AmdImage:
    """One kernel compiled by Triton for one AMD target: the code object and launch metadata.

    ``target`` is the code object's own (from its ``e_flags``: the processor, features
    unspecified). ``lds`` and ``scratch`` are the code object's ``.group_segment_fixed_size``
    (bytes per workgroup) and ``.private_segment_fixed_size`` (bytes per work-item);
    ``arg_layout`` the kernel's explicit arguments as the loader sees them (offset, size,
    value kind from ``.args``)."""

    name: str
    target: TargetId
    hsaco: bytes = field(repr=False)
    num_warps: int
    warp_size: int
    shared: int
    global_scratch_size: int
    profile_scratch_size: int
    lds: int
    scratch: int
    arg_layout: tuple[tuple[int, int, str], ...] = field(repr=False)

    @property
    def block_threads(self) -> int:
        """Threads per workgroup the kernel must be launched with (``num_warps * warp_size``)."""
        return self.num_warps * self.warp_size

    @property
    def bundle_id(self) -> str:
        """``hipv4-amdgcn-amd-amdhsa--gfx942``: this image's entry in the bundle."""
        return f"{BUNDLE_KIND}-{self.target}"

    @classmethod
    def from_compiled(cls, compiled: Any, asked: TargetId) -> AmdImage:
        """The image of a ``triton.compiler.CompiledKernel`` Triton built for ``asked``; its
        code object's target must be that one (:class:`FatbinkitError` otherwise), and hold
        the kernel Triton names."""
        meta = compiled.metadata
        hsaco = bytes(compiled.asm["hsaco"])
        code = read_code_object(hsaco)
        if code.target_id != asked:
            raise FatbinkitError(f"Triton was asked for {asked} and wrote a code object for "
                                 f"{code.target_id or f'MACH {code.mach:#x}'}")
        kernel = code.kernel(meta.name)
        raw = next((k for k in (code.metadata or {}).get("amdhsa.kernels", ())
                    if isinstance(k, Mapping) and k.get(".name") == meta.name), {})
        layout = tuple((int(a.get(".offset", -1)), int(a.get(".size", -1)),
                        str(a.get(".value_kind", "")))
                       for a in raw.get(".args", ()) if isinstance(a, Mapping)
                       and not str(a.get(".value_kind", "")).startswith("hidden_"))
        return cls(
            name=meta.name, target=asked, hsaco=hsaco, num_warps=meta.num_warps,
            warp_size=meta.warp_size, shared=meta.shared,
            global_scratch_size=getattr(meta, "global_scratch_size", 0) or 0,
            profile_scratch_size=getattr(meta, "profile_scratch_size", 0) or 0,
            lds=kernel.group_segment_fixed_size or 0,
            scratch=kernel.private_segment_fixed_size or 0, arg_layout=layout)

    def __str__(self) -> str:
        return (f"{self.name} {self.target}: hsaco {len(self.hsaco)} B, {self.num_warps} warps "
                f"x wave{self.warp_size}, LDS {self.lds} B, scratch {self.scratch} B/lane")


@dataclass(frozen=True)
class AmdKernel:
    """One kernel for many AMD targets: a code object per target, shipped as one bundle.

    ``shared``, ``lds``, ``scratch`` and the Triton scratch sizes are the largest over the
    images: what one launch reserves so it is enough on every target. The number of warps is
    the same everywhere; the threads per workgroup follow each target's warp size
    (:meth:`block_threads`)."""

    name: str
    images: tuple[AmdImage, ...]

    def __post_init__(self) -> None:
        if not self.images:
            raise InvalidArgumentError("an AMD kernel needs at least one image")
        first = self.images[0]
        for image in self.images[1:]:
            if image.name != first.name or image.arg_layout != first.arg_layout:
                raise InvalidArgumentError(
                    f"the {image.target} image ({image.name}, arguments {image.arg_layout}) "
                    f"is not the kernel of the {first.target} image ({first.name}, arguments "
                    f"{first.arg_layout}): one bundle holds one kernel")
            if image.num_warps != first.num_warps:
                raise InvalidArgumentError(
                    f"{self.name}: {image.num_warps} warps on {image.target}, "
                    f"{first.num_warps} on {first.target}: one launch serves every target")

    @property
    def targets(self) -> tuple[TargetId, ...]:
        return tuple(i.target for i in self.images)

    @property
    def target_names(self) -> tuple[str, ...]:
        """Each image's target: ``gfx90a``, ``gfx1100``..."""
        return tuple(str(i.target) for i in self.images)

    @property
    def num_warps(self) -> int:
        return self.images[0].num_warps

    def block_threads(self, target: TargetId | str) -> int:
        """Threads per workgroup on ``target`` (one of :attr:`targets`)."""
        want = target if isinstance(target, TargetId) else TargetId.parse(target)
        for image in self.images:
            if image.target == want:
                return image.block_threads
        raise InvalidArgumentError(
            f"{self.name} has no image for {want}: {', '.join(map(str, self.targets))}")

    @property
    def shared(self) -> int:
        return max(i.shared for i in self.images)

    @property
    def lds(self) -> int:
        return max(i.lds for i in self.images)

    @property
    def scratch(self) -> int:
        return max(i.scratch for i in self.images)

    @property
    def global_scratch_size(self) -> int:
        return max(i.global_scratch_size for i in self.images)

    @property
    def profile_scratch_size(self) -> int:
        return max(i.profile_scratch_size for i in self.images)

    def check_shared(self) -> None:
        """Refuse (:class:`InvalidArgumentError`) a kernel whose one launch (:attr:`shared`
        dynamic LDS plus the largest static LDS) is more than a workgroup may have on one of
        its targets (:data:`LDS_PER_WORKGROUP`)."""
        need = self.shared + self.lds
        for image in self.images:
            limit = LDS_PER_WORKGROUP.get(image.target.processor, _LDS_DEFAULT)
            if need > limit:
                raise InvalidArgumentError(
                    f"{self.name}: one launch needs {need} B of LDS (the largest over "
                    f"{', '.join(self.target_names)}), more than a workgroup may have on "
                    f"{image.target} ({limit} B); drop {image.target} or use a smaller config")

    def bundle(self, *, compression: str | None = None, version: int = 3) -> bytes:
        """The clang offload bundle of every image (:func:`~fatbinkit.formats.offload_bundle.
        write_bundle`: host entry first, then the targets in order, 4096-aligned), or with
        ``compression`` (``"zstd"``, ``"zlib"``) that bundle as a CCOB of ``version`` 2 or 3
        (:func:`~fatbinkit.formats.offload_bundle.compress_bundle`; loading one needs comgr
        2.8+, reading v3 LLVM 20+)."""
        plain = write_bundle((i.bundle_id, i.hsaco) for i in self.images)
        if compression is None:
            return plain
        return compress_bundle(plain, version=version, codec=compression)

    def blob(self, *, ptx: str = "floor", compression: str | None = None) -> bytes:
        """What :func:`fatbinkit.triton.blobs` embeds: the bundle (``ptx`` is CUDA's)."""
        del ptx
        return self.bundle(compression=compression)

    def launch_entry(self, *, ptx: str = "floor") -> dict[str, Any]:
        """This kernel's entry in :func:`fatbinkit.triton.blobs`' launch table."""
        del ptx
        return {
            "name": self.name, "symbol": f"__{self.name}_start", "container": "offload-bundle",
            "num_warps": self.num_warps, "shared": self.shared, "lds": self.lds,
            "scratch": self.scratch, "global_scratch_size": self.global_scratch_size,
            "profile_scratch_size": self.profile_scratch_size,
            "targets": [{"target": str(i.target), "bundle_id": i.bundle_id,
                         "warp_size": i.warp_size, "block_threads": i.block_threads}
                        for i in self.images]}

    def declaration(self) -> list[str]:
        """This kernel's lines in :func:`fatbinkit.triton.header`: its symbols and launch
        constants; the threads per workgroup as a macro of the device's warp size
        (``hipDeviceProp_t::warpSize``)."""
        macro = re.sub(r"\W", "_", self.name).upper()
        targets = ", ".join(f"{i.target} (wave{i.warp_size})" for i in self.images)
        return [
            f"/* {self.name}: an offload bundle for {targets}: hipModuleLoadData */",
            f"extern const unsigned char __{self.name}_start[], __{self.name}_end[];",
            f"#define {macro}_NUM_WARPS {self.num_warps}",
            f"#define {macro}_BLOCK_THREADS(warp_size) ({self.num_warps} * (warp_size))",
            f"#define {macro}_SHARED {self.shared}",
            f"#define {macro}_GLOBAL_SCRATCH {self.global_scratch_size}",
            f"#define {macro}_PROFILE_SCRATCH {self.profile_scratch_size}", ""]

    def __str__(self) -> str:
        return f"{self.name}: hsaco {', '.join(map(str, self.targets))}"

    def __repr__(self) -> str:
        return (f"AmdKernel(name={self.name!r}, "
                f"images=<{', '.join(map(str, self.targets))}>)")


def _warp_size(triton: Any, target: TargetId, options: Mapping[str, Any]) -> int:
    """Triton's warp size for ``target`` (its ``HIPOptions``), or a refusal where Triton does
    not take the processor (generic targets in Triton 3.9)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    try:
        backend = make_backend(GPUTarget("hip", target.processor, 64))
        return int(backend.parse_options(dict(options)).warp_size)
    except Exception as exc:  # Triton raises many types; keep its message
        kind = "generic target" if target.is_generic else "target"
        raise InvalidArgumentError(
            f"Triton {triton.__version__} does not compile for the {kind} {target}: {exc}"
        ) from exc


def compile_amd(
    source: Callable[[], Any],
    name: str,
    targets: Sequence[TargetId],
    options: Mapping[str, Any],
    *,
    jobs: int | None = None,
    progress: Progress = None,
) -> AmdKernel:
    """Compile ``source()`` (a fresh ``triton.compiler.ASTSource`` per call: Triton's
    compile mutates it) for every AMD target on ``jobs`` threads, each target reported to
    ``progress`` (unit ``"target"``); :func:`fatbinkit.triton.compile_kernel` calls it for
    ``gfx`` targets. Each target is checked first (its warp size from Triton), so a target
    Triton refuses fails before any compile runs."""
    return _build(source, name, targets, options, None, jobs, progress)


#: HIPOptions fields Triton derives from the target (``HIPBackend.parse_options``,
#: ``HIPOptions.__post_init__``): never carried from one target's kernel to another's
_TARGET_OPTIONS = frozenset({"arch", "supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes",
                             "allowed_dot_input_precisions", "extern_libs"})


def retarget_amd(compiled: Any, targets: Sequence[TargetId], *, jobs: int | None = None,
                 progress: Progress = None) -> AmdKernel:
    """Compile a kernel Triton has already compiled for an AMD GPU (a
    ``triton.compiler.CompiledKernel``: what AOTInductor holds on ROCm) for every target, from
    its Triton IR (``asm["ttir"]``, before any target-specific pass) with the same options;
    the kernel's own code object is reused where its GPU is asked for.
    :func:`fatbinkit.triton.retarget` calls it for ``gfx`` targets."""
    import tempfile
    from dataclasses import fields
    from pathlib import Path

    from triton.backends.amd.compiler import HIPOptions

    try:
        ttir = compiled.asm["ttir"]
        meta = compiled.metadata._asdict()
        own = AmdImage.from_compiled(compiled, TargetId.parse(str(meta["arch"])))
    except (AttributeError, KeyError, TypeError) as exc:
        raise InvalidArgumentError(
            f"not a Triton kernel compiled for an AMD GPU with its Triton IR: "
            f"{type(compiled).__name__}") from exc
    known = {f.name for f in fields(HIPOptions)} - _TARGET_OPTIONS
    options = {k: _frozen(v) for k, v in meta.items() if k in known and v is not None}
    with tempfile.TemporaryDirectory(prefix="fatbinkit-ttir-") as tmp:
        path = Path(tmp) / f"{own.name}.ttir"  # Triton reads IR from a file named *.ttir
        path.write_text(ttir if isinstance(ttir, str) else bytes(ttir).decode())
        return _build(lambda: str(path), own.name, targets, options, own, jobs, progress)


def _frozen(value: Any) -> Any:
    """Lists in kernel metadata (its JSON form) as the tuples Triton's options hash."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _build(source: Callable[[], Any], name: str, targets: Sequence[TargetId],
           options: Mapping[str, Any], own: AmdImage | None, jobs: int | None,
           progress: Progress) -> AmdKernel:
    """Every target on a thread pool (``own``: an image already built, reused for its
    target), in ``targets``' order."""
    from triton.backends.compiler import GPUTarget

    from .triton import _ENV_LOCK, _import_triton, _serial_ast_parse

    triton, _ = _import_triton()
    if not targets:
        raise InvalidArgumentError(f"no target given: {option('targets', '[TARGETS]')}")
    jobs = as_jobs(jobs)
    sizes = [_warp_size(triton, t, options) for t in targets]

    def compile_one(i: int) -> AmdImage:
        if own is not None and own.target == targets[i]:
            return own
        target = GPUTarget("hip", targets[i].processor, sizes[i])
        try:
            compiled = triton.compile(source(), target=target, options=dict(options))
        except Exception as exc:  # Triton raises many types; keep its message
            raise FatbinkitError(f"Triton failed to compile for {targets[i]}: {exc}") from exc
        return AmdImage.from_compiled(compiled, targets[i])

    images: list[AmdImage | None] = [None] * len(targets)
    with reporter(progress, len(targets), "target", f"Triton {name}") as report, _ENV_LOCK, \
            _serial_ast_parse(), ThreadPoolExecutor(
                min(jobs, len(targets)), thread_name_prefix="fatbinkit-triton") as pool:
        futures: dict[Future[AmdImage], int] = {
            pool.submit(compile_one, i): i for i in range(len(targets))}
        try:
            for future in as_completed(futures):
                image = future.result()
                images[futures[future]] = image
                report.advance(1, str(image.target))
        except BaseException:  # a failure, or progress cancelling: start no other
            for future in futures:
                future.cancel()
            raise
    built = tuple(i for i in images if i is not None)
    return AmdKernel(built[0].name, built)
