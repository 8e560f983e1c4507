"""Build a fatbin from cubins and PTX through one interface, with four interchangeable backends.

- ``pure``: :mod:`fatbinkit.formats.fatbin`'s writer, no NVIDIA software (byte-identical to
  nvFatbin 13.x for uncompressed entries).
- ``fatbinary``: the toolkit's ``fatbinary --image3=kind=...,sm=...,file=...`` process.
- ``nvfatbin``: NVIDIA's nvFatbin library in-process (``cuda.bindings.nvfatbin``; the library comes
  from the ``nvidia-nvfatbin`` wheel).
- ``nvcc``: AOTInductor's multi-arch recipe, ``nvcc -fatbin k.ptx -o k.fatbin -gencode
  arch=compute_X,code=compute_X -gencode arch=compute_X,code=sm_X`` (see :func:`nvcc_command`).

Every :class:`Image` is checked against its label (:func:`check_label`): a cubin must be labelled
with its own arch, PTX with an arch its ``.target`` compiles for, whatever the backend.

For AMD, :func:`build_bundle` writes the clang offload bundle the HIP driver writes
(``HIP::constructHIPFatbinCommand``: ``clang-offload-bundler -type=o -bundle-align=4096``,
optionally ``-compress``) from :class:`CodeObjectImage` values, each checked against the target
its ``e_flags`` name (:func:`check_code_object_label`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .errors import (
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    ToolError,
    ToolNotFoundError,
    UnsupportedError,
)
from .formats import hsaco
from .formats.amdgpu import TargetId
from .formats.arch import Arch, ArchLike, as_arch
from .formats.fatbin import COMPRESSIONS, EntryKind, build_fatbin, make_entry
from .formats.offload_bundle import CCOB_VERSIONS, compress_bundle, write_bundle
from .infile import FilePath, as_content, as_path, read_input
from .toolchain import run_tool

__all__ = [
    "BACKENDS",
    "BUNDLE_CODECS",
    "CodeObjectImage",
    "Image",
    "build",
    "build_bundle",
    "build_fatbinary",
    "build_nvcc",
    "build_nvfatbin",
    "build_pure",
    "check_code_object_label",
    "check_label",
    "fatbinary_command",
    "nvcc_command",
]

BACKENDS = ("pure", "fatbinary", "nvfatbin", "nvcc")
#: the codecs of a compressed bundle (``llvm::compression::Format``)
BUNDLE_CODECS = ("zstd", "zlib")
#: the bundle entry id of a code object: ``<kind>-amdgcn-amd-amdhsa--<target id>``, the kind
#: ``hipv4`` for code object v4 and later, ``hip`` before ("For code object version 4 and
#: greater, the offload kind in bundle ID is 'hipv4'", and the triple forced to the legacy
#: ``amdgcn-amd-amdhsa--`` by ``normalizeForBundler``: clang/lib/Driver/ToolChains/HIPUtility.cpp)
_HIP_TRIPLE = "amdgcn-amd-amdhsa-"


@dataclass(frozen=True)
class Image:
    """One image to put in a fatbin: a cubin (``EntryKind.ELF``) or PTX text, labelled ``arch``
    (refused when its own arch contradicts the label: see :func:`check_label`)."""

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
        check_label(self.kind, self.arch, self.data)

    @classmethod
    def from_file(
        cls, kind: EntryKind, arch: ArchLike, path: FilePath, *, identifier: str = "",
        options: str = "",
    ) -> Image:
        """The image in file ``path``; every error names the file."""
        file = as_path(path, "Image.from_file() path")
        data = read_input(file)
        if not data.strip(b"\0"):
            raise InvalidArgumentError(f"{file}: empty file, no device code")
        try:
            return cls(kind, as_arch(arch, "image arch"), data, identifier, options)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{file}: {e}") from e

    def __str__(self) -> str:
        """``cubin sm_90a, 4096 bytes`` or ``PTX compute_90, 2310 bytes, 'k.cu'``."""
        what = f"cubin {self.arch.sm}" if self.kind == EntryKind.ELF else f"PTX {self.arch.compute}"
        ident = f", {self.identifier!r}" if self.identifier else ""
        return f"{what}, {len(self.data)} bytes{ident}"


def check_label(kind: EntryKind, label: Arch, data: bytes) -> None:
    """Refuse a label that contradicts the image (an :class:`InvalidArgumentError` naming both
    archs); the driver picks an image by its label, so a wrong one fails at load, or loads
    code that cannot run.

    - A cubin must be labelled with its own SM, ``a`` when it is arch-specific and only then
      (``f`` or none otherwise: its ELF header does not tell them apart). fatbinary compares the
      SM number only ("elf arch does not match user-specified arch"); ``sm_100a`` SASS labelled
      ``sm_100`` would be offered to sm_103 GPUs, on which it does not run.
    - PTX must be labelled with an arch its ``.target`` compiles for, on every GPU the label
      admits: ptxas refuses PTX for sm_90 on sm_80 ("SM version specified by .target is higher")
      and ``sm_90a`` PTX anywhere but sm_90a. fatbinary and ``nvcc -fatbin k.ptx`` wrap PTX
      under any label; a newer label than the ``.target`` is allowed (nvcc's backend and
      AOTInductor label one PTX with several archs).
    """
    if kind == EntryKind.ELF:
        from .formats.cubin import cubin_arch

        try:
            own = cubin_arch(data)
        except (FormatError, UnsupportedError) as e:
            raise InvalidArgumentError(f"not a cubin: {e}") from e
        # The ELF header tells sm_90a (arch-specific) from sm_90, not sm_100f from sm_100:
        # both labels fit a cubin without the `a` flag
        if own.number != label.number or (own.suffix == "a") != (label.suffix == "a"):
            right = own.sm if own.suffix == "a" else f"{own.sm} or {own.sm}f"
            raise InvalidArgumentError(
                f"the cubin is for {own.sm}, labelled {label.sm}: label it {right}")
    elif kind == EntryKind.PTX:
        from .formats.ptx import ptx_header

        try:
            _, target = ptx_header(data)
        except (FormatError, UnsupportedError) as e:
            text = str(e)
            raise InvalidArgumentError(text if text.startswith("not PTX") else f"not PTX: {text}"
                                       ) from e
        if not _ptx_label_ok(target, label):
            raise InvalidArgumentError(
                f"the PTX's .target is {target.sm}, labelled {label.compute}: a PTX label must "
                f"be {_ptx_labels(target)}, an arch the PTX compiles for")


def _ptx_label_ok(target: Arch, label: Arch) -> bool:
    """Whether every GPU a PTX entry labelled ``label`` is offered to can JIT PTX for
    ``target`` (see :func:`fatbinkit.compat.ptx_jits_for`)."""
    if target.suffix == "a":  # arch-specific PTX compiles for its own arch only
        return label == target
    if target.suffix == "f":  # family PTX: same major, equal or higher minor; a plain label
        return (label.suffix != "" and label.major == target.major  # admits other families
                and label.number >= target.number)
    return label.number >= target.number


def _ptx_labels(target: Arch) -> str:
    if target.suffix == "a":
        return target.compute
    if target.suffix == "f":
        return f"{target.compute} or a newer a/f arch of the sm_{target.major}x family"
    return f"{target.compute} or newer"


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


@dataclass(frozen=True)
class CodeObjectImage:
    """One AMD code object (hsaco) to put in a bundle, labelled ``target``: a
    :class:`~fatbinkit.formats.amdgpu.TargetId` or its text (``gfx942``, ``gfx90a:xnack+``),
    refused when the code object's own ``e_flags`` contradict it (:func:`check_code_object_label`).
    ``code_object_version`` is read from its header."""

    target: TargetId
    data: bytes
    code_object_version: int = field(init=False)

    def __post_init__(self) -> None:
        target = self.target
        if isinstance(target, str):
            target = TargetId.parse(target)
        elif not isinstance(target, TargetId):
            raise InvalidArgumentError(f"a code object's target is a TargetId or its text, not "
                                       f"{type(target).__name__}")
        object.__setattr__(self, "target", target)
        as_content(self.data, "CodeObjectImage data")
        head = check_code_object_label(target, self.data)
        if head.code_object_version is None:
            raise InvalidArgumentError(
                f"the code object is not for the HSA runtime (OSABI {head.osabi}, ABI version "
                f"{head.abi_version}): HIP loads code object v2 to v6 only")
        object.__setattr__(self, "code_object_version", head.code_object_version)

    @classmethod
    def from_file(cls, target: TargetId | str, path: FilePath) -> CodeObjectImage:
        """The code object in file ``path``; every error names the file."""
        file = as_path(path, "CodeObjectImage.from_file() path")
        data = read_input(file)
        try:
            return cls(TargetId.parse(target) if isinstance(target, str) else target, data)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{file}: {e}") from e

    @property
    def bundle_id(self) -> str:
        """``hipv4-amdgcn-amd-amdhsa--gfx942``, as clang names the entry."""
        kind = "hipv4" if self.code_object_version >= 4 else "hip"
        return f"{kind}-{_HIP_TRIPLE}-{self.target}"

    def __str__(self) -> str:
        """``gfx942 code object v5, 11816 bytes``."""
        return f"{self.target} code object v{self.code_object_version}, {len(self.data)} bytes"


def check_code_object_label(label: TargetId, data: bytes) -> hsaco.CodeObject:
    """Refuse a target that contradicts the code object (an :class:`InvalidArgumentError`
    naming both); its header, read with :func:`fatbinkit.formats.hsaco.read_header`, otherwise.

    The HIP runtime picks an entry by the target id in its bundle id (ROCm/clr
    ``hip_code_object.cpp``), so a wrong label offers the code to devices it does not run on.
    The processor must be the code object's (``e_flags`` MACH). For code object v4 and later,
    whose ``e_flags`` say on, off or any for ``sramecc`` and ``xnack``, the label must say the
    same (``gfx942`` for any, ``gfx942:xnack-`` for off); v2 and v3 record only on or off for
    what the processor supports, so a label may leave a feature out but not contradict it.
    """
    try:
        head = hsaco.read_header(data)
    except FatbinkitError as e:
        raise InvalidArgumentError(f"not an AMD code object: {e}") from e
    own = head.target_id
    if own is None:
        raise InvalidArgumentError(f"the code object's processor (MACH {head.mach:#x}) is not "
                                   "one LLVM names")
    if own.processor != label.processor:
        raise InvalidArgumentError(
            f"the code object is for {own.processor}, labelled {label}: label it {own}")
    if head.abi_version >= 2 and head.osabi == hsaco.ELFOSABI_AMDGPU_HSA:  # v4+
        if own != label:
            raise InvalidArgumentError(
                f"the code object is for {own}, labelled {label}: label it {own} (its "
                "sramecc and xnack settings are part of the target)")
    else:
        for name in ("sramecc", "xnack"):
            said = getattr(label, name)
            if said is not None and said != getattr(own, name):
                raise InvalidArgumentError(
                    f"the code object is for {own}, labelled {label}: its {name} is "
                    f"{'on' if getattr(own, name) else 'off'}")
    return head


def build_bundle(images: Sequence[CodeObjectImage], *, compression: str | None = None,
                 ccob_version: int = 3) -> bytes:
    """The clang offload bundle of ``images``, byte for byte what the HIP driver's
    ``clang-offload-bundler -type=o -bundle-align=4096 -targets=host-x86_64-unknown-linux-gnu,...
    -input=/dev/null ...`` writes: the empty host entry first, then the entries sorted by id
    (clang's order), each at a multiple of 4096. ``compression`` (``"zstd"`` or ``"zlib"``)
    wraps it in a compressed bundle of ``ccob_version`` (2 or 3) as ``-compress`` does, with
    clang's settings (:func:`fatbinkit.formats.offload_bundle.compress_bundle`)."""
    if compression is not None and compression not in BUNDLE_CODECS:
        raise InvalidArgumentError(f"bundle compression {compression!r} is not one of "
                                   f"{BUNDLE_CODECS}")
    if ccob_version not in CCOB_VERSIONS:
        raise InvalidArgumentError(f"compressed bundle version {ccob_version!r} is not one of "
                                   f"{CCOB_VERSIONS}")
    if not images:
        raise InvalidArgumentError("a bundle needs at least one code object")
    for image in images:
        if not isinstance(image, CodeObjectImage):
            raise InvalidArgumentError(f"bundle images are CodeObjectImage values, not "
                                       f"{type(image).__name__}")
    seen: dict[str, CodeObjectImage] = {}
    for image in images:
        if image.bundle_id in seen:
            raise InvalidArgumentError(f"two code objects for {image.target}: "
                                       f"{seen[image.bundle_id]} and {image}")
        seen[image.bundle_id] = image
    ordered = sorted(images, key=lambda i: i.bundle_id)
    plain = write_bundle([(i.bundle_id, i.data) for i in ordered])
    if compression is None:
        return plain
    return compress_bundle(plain, version=ccob_version, codec=compression)
