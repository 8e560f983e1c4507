"""Compile Triton kernels for several GPU targets ahead of time (no GPU needed) into one fatbin.

Triton compiles for the target it is given, not the GPU it runs on, so one process on a machine
without a GPU can produce SASS for sm_80, sm_90a, sm_100a, ... plus their PTX. Triton labels its
PTX ``.target sm_90a``: arch-specific, so the fatbin entry must say ``compute_90a`` too (such PTX
never JIT-compiles for another GPU), which :func:`to_fatbin` does.

``ptx_version`` caps the PTX ISA written into ``.version`` (e.g. 88 for 8.8): Triton follows its
bundled ptxas (9.x for Triton 3.9), which drivers older than that CUDA release refuse to JIT. The
cap never goes above what that ptxas accepts (8.7 for Triton 3.6), so one call works across
Triton releases.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .arch import Arch
from .errors import FatbinkitError, InvalidArgumentError, ToolNotFoundError
from .ptx import ptx_header

__all__ = [
    "TritonImage",
    "compile_kernel",
    "to_fatbin",
]


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


def _import_triton() -> Any:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        raise ToolNotFoundError(
            "Triton is not installed: pip install 'fatbinkit[triton]' (package triton)"
        ) from exc
    return triton, GPUTarget, ASTSource


def compile_kernel(
    fn: Callable[..., Any],
    signature: Mapping[str, str],
    targets: Sequence[Arch | str],
    *,
    constexprs: Mapping[str, Any] | None = None,
    ptx_version: int | None = None,
    num_warps: int = 4,
    num_stages: int = 3,
) -> list[TritonImage]:
    """Compile the ``@triton.jit`` function ``fn`` once per target (``sm_80``, ``90``, ...).

    ``signature`` maps every parameter to a Triton type (``"*fp32"``, ``"i32"``, ``"constexpr"``),
    as ``triton.compiler.ASTSource`` takes it; ``constexprs`` gives the constexpr values.
    """
    triton, gpu_target, ast_source = _import_triton()
    if not targets:
        raise InvalidArgumentError("no target arch given")
    images = []
    for target in targets:
        arch = target if isinstance(target, Arch) else Arch.parse(target)
        src = ast_source(fn=fn, signature=dict(signature), constexprs=dict(constexprs or {}))
        options: dict[str, Any] = {"num_warps": num_warps, "num_stages": num_stages}
        if ptx_version is not None:
            options["ptx_version"] = min(ptx_version, _triton_ptx_version(arch))
        try:
            compiled = triton.compile(
                src, target=gpu_target("cuda", arch.number, 32), options=options
            )
        except Exception as exc:  # Triton raises many types; keep its message
            raise FatbinkitError(f"Triton failed to compile for {arch}: {exc}") from exc
        ptx = compiled.asm["ptx"]
        ptx_bytes = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        meta = compiled.metadata
        version, ptx_arch = ptx_header(ptx_bytes)  # Triton's real target: sm_90a, not sm_90
        images.append(
            TritonImage(
                name=meta.name,
                arch=ptx_arch,
                cubin=bytes(compiled.asm["cubin"]),
                ptx=ptx_bytes,
                ptx_version=version,
                num_warps=meta.num_warps,
                shared=meta.shared,
                global_scratch_size=getattr(meta, "global_scratch_size", 0),
                profile_scratch_size=getattr(meta, "profile_scratch_size", 0),
            )
        )
    return images


def _triton_ptx_version(arch: Arch) -> int:
    """The PTX ISA (e.g. 94) Triton's bundled ptxas writes for ``arch``, as Triton computes it."""
    from triton.backends.nvidia import compiler as nv

    return int(nv.get_ptx_version_from_options(nv.CUDAOptions(), arch.number))


def to_fatbin(
    images: Sequence[TritonImage], *, ptx: bool = True, sass: bool = True,
    compression: str | None = None,
) -> bytes:
    """One fatbin holding each image's SASS and (with ``ptx``) its PTX, labelled with Triton's
    real target (``sm_90a`` SASS, ``compute_90a`` PTX), written without any NVIDIA tool."""
    from .fatbin import EntryKind, build_fatbin, make_entry

    if not (ptx or sass):
        raise InvalidArgumentError("a fatbin needs SASS, PTX or both")
    entries = []
    for image in images:
        if sass:
            entries.append(make_entry(EntryKind.ELF, image.arch, image.cubin,
                                      identifier=image.name, compression=compression))
        if ptx:
            entries.append(make_entry(EntryKind.PTX, image.arch, image.ptx,
                                      identifier=image.name, compression=compression))
    return build_fatbin(entries)
