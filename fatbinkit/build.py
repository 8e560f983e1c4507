"""Build a fatbin from cubins and PTX through one interface, with four interchangeable backends.

- ``pure``: :mod:`fatbinkit.fatbin`'s writer, no NVIDIA software (byte-identical to nvFatbin 13.x
  for uncompressed entries).
- ``fatbinary``: the toolkit's ``fatbinary --image3=kind=...,sm=...,file=...`` process.
- ``nvfatbin``: NVIDIA's nvFatbin library in-process (``cuda.bindings.nvfatbin``; the library comes
  from the ``nvidia-nvfatbin`` wheel).
- ``nvcc``: AOTInductor's multi-arch recipe, ``nvcc -fatbin k.ptx -o k.fatbin -gencode
  arch=compute_X,code=compute_X -gencode arch=compute_X,code=sm_X`` (see :func:`nvcc_command`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .arch import Arch, ArchLike, as_arch
from .errors import InvalidArgumentError, ToolError, ToolNotFoundError
from .fatbin import COMPRESSIONS, EntryKind, build_fatbin, make_entry
from .infile import FilePath, as_content, as_path, read_input
from .toolchain import run_tool

__all__ = [
    "BACKENDS",
    "Image",
    "build",
    "build_fatbinary",
    "build_nvcc",
    "build_nvfatbin",
    "build_pure",
    "fatbinary_command",
    "nvcc_command",
]

BACKENDS = ("pure", "fatbinary", "nvfatbin", "nvcc")


@dataclass(frozen=True)
class Image:
    """One image to put in a fatbin: a cubin (``EntryKind.ELF``) or PTX text."""

    kind: EntryKind
    arch: Arch
    data: bytes
    identifier: str = ""
    options: str = ""

    def __post_init__(self) -> None:
        if self.kind not in (EntryKind.ELF, EntryKind.PTX):
            raise InvalidArgumentError(f"an image is a cubin or PTX, not kind {self.kind}")
        object.__setattr__(self, "arch", as_arch(self.arch, "image arch"))  # "sm_90" too
        as_content(self.data, "Image data")

    @classmethod
    def from_file(
        cls, kind: EntryKind, arch: ArchLike, path: FilePath, *, identifier: str = "",
        options: str = "",
    ) -> Image:
        """The image of the cubin or PTX file at ``path`` (a ``str`` or ``os.PathLike``)."""
        data = read_input(as_path(path, "Image.from_file() path"))
        return cls(kind, as_arch(arch, "image arch"), data, identifier, options)

    def __str__(self) -> str:
        """``cubin sm_90a, 4096 bytes`` or ``PTX compute_90, 2310 bytes, 'k.cu'``."""
        what = f"cubin {self.arch.sm}" if self.kind == EntryKind.ELF else f"PTX {self.arch.compute}"
        ident = f", {self.identifier!r}" if self.identifier else ""
        return f"{what}, {len(self.data)} bytes{ident}"


def build(
    images: Sequence[Image], *, backend: str = "pure", compression: str | None = None
) -> bytes:
    """Fatbin bytes holding ``images`` in order, made by ``backend``."""
    if compression is not None and compression not in COMPRESSIONS:
        raise InvalidArgumentError(f"compression {compression!r} is not one of {COMPRESSIONS}")
    if not images:
        raise InvalidArgumentError("a fatbin needs at least one image")
    if backend == "pure":
        return build_pure(images, compression)
    if backend == "fatbinary":
        return build_fatbinary(images, compression)
    if backend == "nvfatbin":
        return build_nvfatbin(images, compression)
    if backend == "nvcc":
        if compression is not None:
            raise InvalidArgumentError("the nvcc backend uses nvcc's own compression defaults")
        return build_nvcc(images)
    raise InvalidArgumentError(f"unknown backend {backend!r}; choose one of {BACKENDS}")


def build_pure(images: Sequence[Image], compression: str | None = None) -> bytes:
    """The pure-Python writer: deterministic, no NVIDIA software."""
    entries = [
        make_entry(
            i.kind, i.arch, i.data, identifier=i.identifier, options=i.options,
            compression=compression,
        )
        for i in images
    ]
    return build_fatbin(entries)


def _compress_flags(compression: str | None, dash: str) -> list[str]:
    """``--compress-mode`` for fatbinary (``dash="--"``) or nvFatbin (``dash="-"``)."""
    if compression is None:
        return [f"{dash}compress-mode=none"]
    mode = "speed" if compression == "lz4" else "size"
    return [f"{dash}compress-mode={mode}", f"{dash}compress-all"]


def _common(images: Sequence[Image], what: str) -> tuple[str, str]:
    idents = {i.identifier for i in images}
    options = {i.options for i in images if i.kind == EntryKind.PTX}
    if len(idents) > 1 or len(options) > 1:
        raise InvalidArgumentError(
            f"{what} takes one identifier and one options string for all images"
        )
    return next(iter(idents)), next(iter(options), "")


def fatbinary_command(
    images: Sequence[tuple[Image, Path]], out: Path, compression: str | None
) -> list[str]:
    """Arguments for ``fatbinary`` building ``out`` from images already written to files."""
    ident, options = _common([i for i, _ in images], "fatbinary")
    args = ["-64", f"--create={out}"]
    if ident:
        args.append(f"--ident={ident}")
    if options:
        args.append(f"--cmdline={options}")
    for image, path in images:
        kind = "elf" if image.kind == EntryKind.ELF else "ptx"
        sm = f"{image.arch.number}{image.arch.suffix}"
        args.append(f"--image3=kind={kind},sm={sm},file={path}")
    return args + _compress_flags(compression, "--")


def build_fatbinary(images: Sequence[Image], compression: str | None = None) -> bytes:
    """Run the ``fatbinary`` tool (nvidia-cuda-nvcc wheel or the toolkit)."""
    with tempfile.TemporaryDirectory(prefix="fatbinkit-") as tmp:
        files: list[tuple[Image, Path]] = []
        for n, image in enumerate(images):
            path = Path(tmp) / f"{n}.{'cubin' if image.kind == EntryKind.ELF else 'ptx'}"
            path.write_bytes(image.data)
            files.append((image, path))
        out = Path(tmp) / "out.fatbin"
        run_tool("fatbinary", fatbinary_command(files, out, compression))
        return out.read_bytes()


def build_nvfatbin(images: Sequence[Image], compression: str | None = None) -> bytes:
    """nvFatbin in-process through ``cuda.bindings.nvfatbin``."""
    try:
        from cuda.bindings import nvfatbin
    except ImportError as e:
        raise ToolNotFoundError(
            "cuda.bindings.nvfatbin is not importable; install it with "
            "`pip install cuda-bindings nvidia-nvfatbin`"
        ) from e
    options = ["-64", *_compress_flags(compression, "-")]
    try:
        handle = nvfatbin.create(options, len(options))
    except Exception as e:  # raised when libnvfatbin.so cannot be loaded, or rejects an option
        raise ToolNotFoundError(
            f"nvFatbin is unavailable ({e}); install it with `pip install nvidia-nvfatbin`"
        ) from e
    try:
        for image in images:
            arch = f"{image.arch.number}{image.arch.suffix}"
            if image.kind == EntryKind.ELF:
                nvfatbin.add_cubin(handle, image.data, len(image.data), arch, image.identifier)
            else:
                nvfatbin.add_ptx(
                    handle, image.data, len(image.data), arch, image.identifier, image.options
                )
        size = nvfatbin.size(handle)
        buf = bytearray(size)
        nvfatbin.get(handle, buf)
    except nvfatbin.nvFatbinError as e:
        raise ToolError(f"nvFatbin failed: {e}") from e
    finally:
        nvfatbin.destroy(handle)
    return bytes(buf)


def nvcc_command(
    ptx: os.PathLike[str], out: os.PathLike[str], archs: Sequence[Arch], *, sass: bool = True
) -> list[str]:
    """nvcc arguments of AOTInductor's ``emit_multi_arch_kernel`` recipe, generalised to archs.

    For each arch X: ``-gencode arch=compute_X,code=compute_X`` (PTX) and, with ``sass``,
    ``-gencode arch=compute_X,code=sm_X`` (SASS), exactly as torch/_inductor/codecache.py runs
    ``nvcc -fatbin {asm_file} -o {cubin_file} ...``.
    """
    args = ["-fatbin", os.fspath(ptx), "-o", os.fspath(out)]
    for a in archs:
        x = f"{a.number}{a.suffix}"
        args += ["-gencode", f"arch=compute_{x},code=compute_{x}"]
        if sass:
            args += ["-gencode", f"arch=compute_{x},code=sm_{x}"]
    return args


def build_nvcc(images: Sequence[Image], *, sass: bool = True) -> bytes:
    """AOTInductor's recipe: one PTX source, PTX (and SASS) for each of its images' archs."""
    sources = {i.data for i in images}
    if any(i.kind != EntryKind.PTX for i in images) or len(sources) != 1:
        raise InvalidArgumentError(
            "the nvcc backend compiles one PTX source: give the same PTX file for every arch"
        )
    with tempfile.TemporaryDirectory(prefix="fatbinkit-") as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_bytes(images[0].data.rstrip(b"\0"))
        out = Path(tmp) / "kernel.fatbin"
        run_tool("nvcc", nvcc_command(ptx, out, [i.arch for i in images], sass=sass), cwd=Path(tmp))
        return out.read_bytes()
