"""PyTorch AOTInductor without the toolchain, and for many GPUs: one switch, and its drop-ins.

AOTInductor (``torch/_inductor/codecache.py``) embeds each Triton kernel in the model's ``.so``
with subprocesses: ``ld -r -b binary`` and two ``objcopy`` per cubin (``convert_cubin_to_obj``,
torch <= 2.11), or one ``gcc -c`` of a ``.incbin`` file (``batch_convert_cubins_to_obj``, torch
>= 2.12); and with ``aot_inductor.emit_multi_arch_kernel``, ``nvcc -fatbin`` or ``fatbinary`` per
kernel, for the build GPU alone (its SASS and PTX). :func:`packaging` replaces all of them::

    with fatbinkit.aoti.packaging(archs=["sm_80", "sm_90", "sm_100", "sm_120"]):
        path = torch._inductor.aoti_compile_and_package(torch.export.export(model, args))

Inside the block, every kernel is embedded by fatbinkit's object writer (no ld, objcopy, gcc,
nvcc or fatbinary runs for kernels; the model's own C++ is still compiled and linked by torch's
C++ compiler); with ``archs``, each kernel becomes one fatbin holding SASS for every requested
arch, compiled from the kernel's Triton IR (:func:`fatbinkit.triton.retarget`; the build GPU's
own cubin is kept as is), plus the PTX floor, and the launch reserves the largest shared memory
and scratch any target needs. Without ``archs`` the output is what torch would have produced:
each kernel's cubin, or, where ``emit_multi_arch_kernel`` is on, a fatbin of the cubin and its
PTX, written by fatbinkit.

On ROCm torch the same switch takes AMD targets (``archs=["gfx90a", "gfx942", "gfx1100"]``):
each kernel becomes one clang offload bundle holding a code object per target, compiled by
Triton from the kernel's Triton IR (:func:`fatbinkit.triton_amd.retarget_amd`; the build GPU's
own code object is kept as is) and bundled by fatbinkit (no ROCm clang, clang-offload-bundler,
ld or objcopy: torch's own ``emit_multi_arch_kernel`` path, ``rocm_multiarch_utils``, runs all
of them), saved under torch's ``.hsaco`` name, which ``hipModuleLoadData`` loads; the launch
reserves the largest LDS and scratch any target needs. Without ``archs`` the code object is
torch's own, embedded by fatbinkit.

torch's functions are replaced by name where they exist (torch 2.6 to 2.14 as read for this
module; a name a release lacks is skipped) and restored when the block ends, also on error.

What needs what: the drop-ins (:func:`convert_cubin_to_obj`, :func:`batch_convert_cubins_to_obj`,
:func:`convert_cubins_to_obj`) need neither torch nor a GPU. :func:`packaging` needs torch
(>= 2.6, any build: the block opens with a CPU-only torch), but torch compiles GPU kernels only
with a CUDA build of torch and a CUDA GPU in the process (AOTInductor runs each Triton kernel
while it compiles, to autotune it); retargeting them (``archs``) needs Triton, not that GPU.
A block given ``archs`` that saw no GPU kernel (a CPU model or a CPU-only torch) warns with
:class:`NoKernelWarning`.
"""

from __future__ import annotations

import contextvars
import os
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .driver import as_cuda_version
from .embed import TARGETS, is_windows, write_object
from .errors import InvalidArgumentError, ToolNotFoundError, option
from .formats.arch import ArchLike, as_arch
from .formats.elf_writer import DEFAULT_ALIGN, Blob
from .formats.fatbin import COMPRESSIONS
from .parallel import as_jobs
from .progress import Progress, Reporter, reporter
from .triton_amd import AmdKernel, amd_targets

__all__ = [
    "NoKernelWarning",
    "PackagedKernel",
    "Packaging",
    "batch_convert_cubins_to_obj",
    "convert_cubin_to_obj",
    "convert_cubins_to_obj",
    "packaging",
]


def convert_cubin_to_obj(
    cubin_file: str | os.PathLike[str],
    kernel_name: str,
    ld: str | None = None,
    objcopy: str | None = None,
) -> str:
    """Write ``<cubin_file>.o`` embedding the cubin as ``__<kernel_name>_{start,end,size}``.

    Same arguments and return value (the object's path) as AOTInductor's function; ``ld`` and
    ``objcopy`` are accepted for that and ignored. The blob is 16-byte aligned in ``.rodata``.
    The object is ELF, or on Windows (the host, or :func:`packaging`'s ``target``) a COFF
    ``<cubin_file>.obj`` (:mod:`fatbinkit.formats.coff`), which torch's own function refuses to
    make ("Windows is not supported yet").
    """
    del ld, objcopy  # same signature as AOTInductor's; no tool is run
    target = _TARGET[0]
    obj_file = os.fspath(cubin_file) + (".obj" if is_windows(target) else ".o")
    write_object(obj_file, [Blob(kernel_name, Path(cubin_file))], target=target)
    return obj_file


def batch_convert_cubins_to_obj(
    cubins: list[tuple[str, str]],
    output_dir: str,
    cpp_compiler: str = "gcc",
) -> str:
    """Write ``<output_dir>/cubins_combined.o`` embedding every ``(cubin path, kernel name)``.

    Same arguments and return value as AOTInductor's function (torch >= 2.12), which assembles a
    ``.incbin`` file with ``cpp_compiler``; accepted for that and ignored: no tool is run.
    """
    del cpp_compiler  # same signature as AOTInductor's; no tool is run
    name = "cubins_combined.obj" if is_windows(_TARGET[0]) else "cubins_combined.o"
    return convert_cubins_to_obj(cubins, os.path.join(output_dir, name))


def convert_cubins_to_obj(
    kernels: Iterable[tuple[str | os.PathLike[str], str]],
    obj_file: str | os.PathLike[str],
    *,
    align: int = DEFAULT_ALIGN,
) -> str:
    """Write one object embedding every ``(cubin path, kernel name)`` pair; return its path.

    The batch form of :func:`convert_cubin_to_obj`: one file to link instead of one per kernel,
    written in one pass (about the cost of copying the cubins); ELF or COFF as there.
    """
    write_object(obj_file, [Blob(name, Path(path), align) for path, name in kernels],
                 target=_TARGET[0], align=align)
    return os.fspath(obj_file)


@dataclass(frozen=True)
class PackagedKernel:
    """One kernel as the switch packaged it: its images' archs, the floor, the fatbin's (or
    offload bundle's) size, what its images are (``SASS``, AMD's ``hsaco``)."""

    name: str
    archs: tuple[str, ...]
    floor: str | None
    shared: int
    size: int
    kind: str = "SASS"

    def __str__(self) -> str:
        floor = f" + {self.floor}" if self.floor else ""
        return (f"{self.name}: {self.kind} {', '.join(self.archs)}{floor}; {self.size} B, "
                f"{self.shared} B shared")


class NoKernelWarning(UserWarning):
    """A :func:`packaging` block given ``archs`` ended without a GPU kernel to package: the
    model compiled none (a CPU model, a CPU-only torch), or left all its GPU work to libraries
    (cuBLAS, cuDNN), which ``archs`` does not change. To make it an error::

        warnings.simplefilter("error", fatbinkit.aoti.NoKernelWarning)
    """


@dataclass
class Packaging:
    """What one :func:`packaging` block did: the kernels it packaged and the objects it wrote
    (instead of torch's tool runs)."""

    archs: tuple[str, ...] | None
    kernels: list[PackagedKernel] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"fatbinkit.aoti: {len(self.kernels)} kernel(s) packaged for "
                 f"{', '.join(self.archs) if self.archs else 'the build GPU'}, "
                 f"{len(self.objects)} object(s) written, no toolchain run"]
        if self.archs and not self.kernels:
            lines.append(f"  {_NO_KERNEL}")
        lines += [f"  {k}" for k in self.kernels]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Packaging(archs={self.archs!r}, kernels=<{len(self.kernels)}>, "
                f"objects=<{len(self.objects)}>)")


def _no_kernel_said(torch: Any, targets: tuple[str, ...]) -> str:
    """The warning of a block with archs and no kernel, naming the likely cause."""
    if torch.version.cuda is None and torch.version.hip is None:
        why = (f"this torch ({torch.__version__}) is a CPU-only build (torch.version.cuda is "
               "None): it compiles no GPU kernel; use a CUDA build of torch on a machine with a "
               "GPU")
    elif not torch.cuda.is_available():
        why = ("this torch sees no GPU (torch.cuda.is_available() is False): AOTInductor "
               "compiles GPU kernels only for a model and inputs on a GPU")
    else:
        why = ("the model compiled no GPU kernel: a model on the CPU, or one whose GPU work is all "
               "in libraries (cuBLAS, cuDNN), which archs does not change")
    return f"fatbinkit.aoti.packaging({option('archs', list(targets))}) packaged no kernel: {why}"


_NO_KERNEL = ("no GPU kernel was compiled inside the block, so none was packaged for the archs: "
              "a CPU model, a torch without CUDA (torch.version.cuda is None), or a model whose "
              "GPU work is all in libraries (cuBLAS, cuDNN); kernels are compiled only by a CUDA "
              "build of torch with a GPU (see docs/aoti.md)")


# The fatbin (and launch sizes) of the kernel being saved: set by the save_gpu_kernel wrapper,
# read by the CudaKernelParamCache.set wrapper it calls.
_SAVING: contextvars.ContextVar[tuple[bytes, Any] | None] = contextvars.ContextVar(
    "fatbinkit_aoti_saving", default=None)
# The objects' target triple of the packaging block running (None: the host's). A plain global,
# not a context variable: torch may embed from its own threads, and blocks never overlap.
_TARGET: list[str | None] = [None]
_ACTIVE = threading.Lock()
# what an offload bundle's CCOB may use (fatbinkit.formats.offload_bundle.compress_bundle)
_BUNDLE_CODECS = frozenset({"zstd", "zlib"})


@contextmanager
def packaging(
    archs: Sequence[ArchLike] | None = None,
    *,
    min_driver: object = None,
    floor: bool = True,
    compression: str | None = None,
    jobs: int | None = None,
    target: str | None = None,
    progress: Progress = None,
) -> Iterator[Packaging]:
    """Within the block, torch's AOTInductor embeds kernels with fatbinkit, and with ``archs``
    ships each as a fatbin for every arch: see the module's documentation.

    ``archs`` are CUDA archs (``sm_90``), or on ROCm torch AMD targets (``gfx942``: one offload
    bundle per kernel). ``min_driver`` and ``floor`` are those of
    :func:`fatbinkit.triton.retarget` (CUDA's); ``compression`` (``"zstd"``, ``"lz4"``)
    compresses the fatbins' entries (AMD: ``"zstd"`` or ``"zlib"``, the bundle as a CCOB v3,
    which needs comgr 2.8+); ``jobs`` is the compile threads per
    kernel (None: :func:`fatbinkit.parallel.default_jobs`); ``target`` (a triple of
    :data:`fatbinkit.embed.TARGETS`; default the host's) picks the objects' format: COFF
    ``.obj`` for Windows, ELF ``.o`` otherwise; ``progress`` (:mod:`fatbinkit.progress`) hears
    of each kernel packaged (unit ``"kernel"``, total unknown: torch decides), from the thread
    torch saves it on. Yields a :class:`Packaging` that fills in as torch compiles. One block at
    a time. With ``archs``, a block that ends without having packaged a kernel warns
    (:class:`NoKernelWarning`): the model compiled no GPU kernel.
    """
    try:
        import torch._inductor.codecache as codecache
        import torch._inductor.config as inductor_config
        from torch._inductor.runtime import triton_heuristics
    except ImportError as exc:
        raise ToolNotFoundError("fatbinkit.aoti.packaging needs PyTorch (torch)") from exc
    if isinstance(archs, str):
        archs = [archs]
    amd = amd_targets(archs) if archs is not None else None
    if amd is not None:
        targets: tuple[str, ...] | None = tuple(map(str, amd))
    else:
        targets = tuple(as_arch(a, "archs").sm for a in archs) if archs is not None else None
    if targets is not None and not targets:
        raise InvalidArgumentError(
            f"archs is empty: give the GPUs to ship for ({option('archs', '[ARCHS]')}), or None")
    if targets is None and (min_driver is not None or jobs is not None):
        raise InvalidArgumentError(
            f"min_driver and jobs apply to {option('archs', '[ARCHS]')}: give the archs")
    if min_driver is not None and amd is not None:
        raise InvalidArgumentError(f"{option('min_driver', str(min_driver))} is a CUDA driver; "
                                   f"AMD targets ({', '.join(targets or ())}) have none")
    if min_driver is not None:
        as_cuda_version(min_driver, "min_driver")
    if jobs is not None:
        as_jobs(jobs)
    if target is not None and target not in TARGETS:
        raise InvalidArgumentError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    codecs = _BUNDLE_CODECS if amd is not None else COMPRESSIONS
    if compression is not None and compression not in codecs:
        raise InvalidArgumentError(
            f"compression must be one of {', '.join(sorted(codecs))} or None, "
            f"not {compression!r}")
    import torch

    if not hasattr(inductor_config.aot_inductor, "embed_kernel_binary"):
        raise ToolNotFoundError("this torch has no aot_inductor.embed_kernel_binary (torch >= 2.6)")
    own_ptx = bool(getattr(inductor_config.aot_inductor, "emit_multi_arch_kernel", False))
    rocm = torch.version.hip is not None
    if targets is not None and rocm != (amd is not None):
        raise InvalidArgumentError(
            f"{option('archs', list(targets))}: this torch is "
            f"{'ROCm: give AMD targets (gfx942...)' if rocm else 'not ROCm: give CUDA archs'}")
    if rocm and own_ptx and targets is None:
        raise InvalidArgumentError(
            "aot_inductor.emit_multi_arch_kernel on ROCm: torch would run ROCm's clang and "
            f"clang-offload-bundler; give the targets instead ({option('archs', '[TARGETS]')})")
    if not _ACTIVE.acquire(blocking=False):
        raise InvalidArgumentError("fatbinkit.aoti.packaging blocks cannot nest or overlap")
    report = Packaging(targets)
    _TARGET[0] = target
    try:
        with ExitStack() as stack:
            steps = stack.enter_context(reporter(progress, None, "kernel", "fatbinkit.aoti"))
            patches: dict[str, Any] = {"aot_inductor.embed_kernel_binary": True}
            if hasattr(inductor_config.aot_inductor, "emit_multi_arch_kernel"):
                patches["aot_inductor.emit_multi_arch_kernel"] = False  # no nvcc/fatbinary
            stack.enter_context(inductor_config.patch(patches))
            _replace(stack, codecache, "convert_cubin_to_obj",
                     lambda old: _recorded(convert_cubin_to_obj, report))
            _replace(stack, codecache, "batch_convert_cubins_to_obj",
                     lambda old: _recorded(batch_convert_cubins_to_obj, report))
            multi = _MultiArch(targets, rocm, min_driver, floor, compression, jobs, report, steps)
            if targets is not None or own_ptx:
                _replace(stack, triton_heuristics.CachingAutotuner, "save_gpu_kernel",
                         multi.save_gpu_kernel)
            _replace(stack, codecache.CudaKernelParamCache, "set",
                     lambda old: multi.cache_set(old, inductor_config))
            _replace(stack, codecache, "_cuda_fatbin_command", lambda old: _refuse_fatbin_command)
            yield report
    finally:
        _TARGET[0] = None
        _ACTIVE.release()
    if targets is not None and not report.kernels:  # the block ended without an error
        warnings.warn(NoKernelWarning(_no_kernel_said(torch, targets)), stacklevel=3)


def _replace(stack: ExitStack, owner: Any, name: str, make: Any) -> None:
    """``owner.name = make(current)`` until the stack closes; nothing where ``owner`` has no
    ``name`` (a torch release without that function). A classmethod stays one (``make`` gets
    the bound method); a name ``owner`` only inherits is deleted again, not copied down."""
    if not hasattr(owner, name):
        return
    saved = vars(owner).get(name, _INHERITED)
    new = make(getattr(owner, name))
    setattr(owner, name, classmethod(new) if isinstance(saved, classmethod) else new)
    if saved is _INHERITED:
        stack.callback(delattr, owner, name)
    else:
        stack.callback(setattr, owner, name, saved)


_INHERITED = object()


def _recorded(fn: Any, report: Packaging) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> str:
        path = fn(*args, **kwargs)
        report.objects.append(path)
        return str(path)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@dataclass
class _MultiArch:
    """The two wrappers that turn each saved kernel's cubin into a multi-arch fatbin."""

    targets: tuple[str, ...] | None
    amd: bool
    min_driver: object
    floor: bool
    compression: str | None
    jobs: int | None
    report: Packaging
    steps: Reporter
    done: dict[tuple[str, str], tuple[bytes, Any]] = field(default_factory=dict)

    def package(self, key: str, compiled: Any) -> tuple[bytes, Any]:
        """The fatbin of one saved kernel, made once per kernel (torch saves a kernel each time
        its launcher runs outside benchmarking)."""
        token = (key, str(getattr(compiled, "hash", id(compiled))))
        if token not in self.done:
            self.done[token] = self._package(compiled)
        return self.done[token]

    def _package(self, compiled: Any) -> tuple[bytes, Any]:
        from .triton import TritonImage, TritonKernel, retarget

        kernel: TritonKernel | AmdKernel
        if self.targets is None:  # torch's own multi-arch output: the cubin and its PTX
            own = TritonImage.from_compiled(compiled)
            kernel = TritonKernel(own.name, (own,), None)
            data = kernel.fatbin(ptx="all", compression=self.compression)
        else:  # a fatbin (CUDA) or an offload bundle (ROCm) for every target
            kernel = retarget(compiled, self.targets, min_driver=self.min_driver,
                              floor=self.floor, jobs=self.jobs)
            kernel.check_shared()
            data = kernel.blob(ptx="floor" if self.floor else "none",
                               compression=self.compression)
        floor = kernel.floor if isinstance(kernel, TritonKernel) else None
        self.report.kernels.append(PackagedKernel(
            kernel.name, kernel.target_names, floor.arch.compute if floor else None,
            kernel.shared, len(data), "hsaco" if self.amd else "SASS"))
        self.steps.advance(1, kernel.name)
        return data, kernel

    def save_gpu_kernel(self, original: Any) -> Any:
        def save_gpu_kernel(tuner: Any, stream: Any, launcher: Any) -> Any:
            kind = getattr(getattr(tuner, "device_props", None), "type", "cuda")
            if kind != ("hip" if self.amd else "cuda"):
                return original(tuner, stream, launcher)  # XPU, CPU: torch's own path
            key = str(getattr(tuner, "inductor_meta", {}).get("kernel_name", ""))
            token = _SAVING.set(self.package(key, launcher.bin))
            try:
                return original(tuner, stream, launcher)
            finally:
                _SAVING.reset(token)

        return save_gpu_kernel

    def cache_set(self, original: Any, inductor_config: Any) -> Any:
        func = getattr(original, "__func__", original)  # the classmethod's function

        def cache_set(cls: Any, key: str, params: dict[str, Any], cubin: Any, bin_type: str,
                      *rest: Any, **kwargs: Any) -> Any:
            if getattr(inductor_config.aot_inductor, "emit_multi_arch_kernel", False):
                raise InvalidArgumentError(_multi_arch_back_on())
            saving = _SAVING.get()
            if saving is not None and bin_type in ("cubin", "hsaco"):
                data, kernel = saving
                cubin = data
                params = dict(params, shared_mem=kernel.shared)
                for name, size in (("global_scratch", kernel.global_scratch_size),
                                   ("profile_scratch", kernel.profile_scratch_size)):
                    if params.get(name) is not None:
                        params[name] = max(params[name], size)
            return func(cls, key, params, cubin, bin_type, *rest, **kwargs)

        return cache_set


def _multi_arch_back_on() -> str:
    return ("aot_inductor.emit_multi_arch_kernel was turned back on inside "
            "fatbinkit.aoti.packaging (by inductor_configs or compile_standalone): torch would "
            "run nvcc -fatbin or fatbinary; leave it off, the switch writes the fatbins "
            f"({option('archs', '[ARCHS]')} for every GPU)")


def _refuse_fatbin_command(*args: Any, **kwargs: Any) -> list[str]:
    """torch >= 2.14's fatbin command builder, inside the switch: never a toolchain run."""
    raise InvalidArgumentError(_multi_arch_back_on())
