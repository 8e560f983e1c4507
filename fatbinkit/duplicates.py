"""Device code stored more than once, and the bytes it wastes.

Images are compared by content: a BLAKE2b digest of each image as the driver receives it
(decompressed), so one cubin stored LZ4-compressed in one library and zstd-compressed in
another is one image stored twice. Copies are counted across containers, sections (the deep
scan's too, with ``everywhere``) and every library of a wheel or folder. A group's waste is
what storing one copy (the smallest) would save.

With ``kernels``, functions are compared too: each function's machine code
(:meth:`fatbinkit.vendors.Vendor.function_code`: a cubin's ``.text.<name>`` sections) is
hashed, and a function whose bytes appear in more than one distinct image (the same kernel
built into two modules or two libraries) wastes its size for each extra image. Copies inside
identical images are not counted again.

cudf's 1.5 GiB library is 70 % ``.nv_fatbin`` in 518 blobs (NVIDIA/cudf#23419); this says
how much of such a library is the same bytes. Measured 2026-12-03: cuRAND 10.4.5.25 stores 37
images more than once (10.9 of its 22.8 MiB), bitsandbytes 0.50.2 repeats 1,283 functions across
its per-CUDA-version libraries (docs/hidden.md).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import vendors
from .binary import _count, _size
from .collection import Member, binaries, named
from .device_code import DeviceCode
from .errors import FatbinkitError
from .formats.codec import DecompressionBudget
from .parallel import as_jobs
from .progress import Progress
from .scan import source_keys

__all__ = ["Copy", "DuplicateFunction", "DuplicateImage", "Duplicates", "duplicates"]

_DIGEST_SIZE = 20  # BLAKE2b-160: as fatbinkit.diff's image digests


@dataclass(frozen=True)
class Copy:
    """Where one copy of an image is: the library (its path inside a wheel or folder, or the
    file given), the place (``.nv_fatbin container 12``; ``hidden`` for the deep scan's), the
    file offset of its entry header and the bytes it takes there."""

    file: str
    where: str
    offset: int
    stored: int
    hidden: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "where": self.where, "offset": self.offset,
                "stored": self.stored, "hidden": self.hidden}

    def __str__(self) -> str:
        return (f"{self.file}: {self.where} at {self.offset:#x}"
                + (" (hidden)" if self.hidden else ""))


@dataclass(frozen=True)
class DuplicateImage:
    """One image (``kind``, ``arch``, ``size`` bytes decompressed, content ``digest``) stored
    in more than one place; :attr:`wasted` is what keeping only the smallest copy saves."""

    digest: str
    kind: str
    arch: str
    size: int
    copies: tuple[Copy, ...]

    @property
    def wasted(self) -> int:
        return sum(c.stored for c in self.copies) - min(c.stored for c in self.copies)

    def to_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "kind": self.kind, "arch": self.arch, "size": self.size,
                "wasted": self.wasted, "copies": [c.to_dict() for c in self.copies]}

    def __str__(self) -> str:
        return (f"{self.kind} {self.arch}, {_size(self.size)}: {len(self.copies)} copies, "
                f"{_size(self.wasted)} wasted")


@dataclass(frozen=True)
class DuplicateFunction:
    """One function (``name`` for ``arch``, ``size`` bytes of SASS, content ``digest``) in
    ``images`` distinct images; :attr:`wasted` is its size for each image but one."""

    name: str
    arch: str
    digest: str
    size: int
    images: int

    @property
    def wasted(self) -> int:
        return self.size * (self.images - 1)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arch": self.arch, "digest": self.digest, "size": self.size,
                "images": self.images, "wasted": self.wasted}

    def __str__(self) -> str:
        return f"{self.name} ({self.arch}, {self.size} bytes): in {self.images} images"


@dataclass(frozen=True)
class Duplicates:
    """What :func:`duplicates` found in ``file``: the ``images`` read (``stored`` bytes), the
    ones stored more than once (``groups``, most wasteful first) and, when functions were
    compared, the functions found in more than one distinct image (``functions``; None when
    not compared)."""

    file: str
    images: int
    stored: int
    groups: tuple[DuplicateImage, ...]
    functions: tuple[DuplicateFunction, ...] | None = None

    @property
    def wasted(self) -> int:
        """Stored bytes that keeping one copy of each image would save."""
        return sum(g.wasted for g in self.groups)

    @property
    def functions_wasted(self) -> int | None:
        """Bytes of SASS in functions repeated across distinct images (None: not compared)."""
        return None if self.functions is None else sum(f.wasted for f in self.functions)

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "images": self.images, "stored": self.stored,
                "wasted": self.wasted, "groups": [g.to_dict() for g in self.groups],
                "functions_wasted": self.functions_wasted,
                "functions": None if self.functions is None else [
                    f.to_dict() for f in self.functions]}

    def lines(self, top: int | None = None) -> Iterator[str]:
        """The text ``fatbinkit ls --duplicates`` prints: totals, then the ``top`` groups (all:
        None) with their copies, then the top functions."""
        copies = sum(len(g.copies) for g in self.groups)
        yield (f"{self.file}: {_count(self.images, 'image')}, {_size(self.stored)} stored; "
               f"{_count(len(self.groups), 'image')} stored more than once ({copies} copies): "
               f"{_size(self.wasted)} wasted ({_share(self.wasted, self.stored)})")
        for g in self.groups[:top]:
            yield f"  {g.digest[:16]}  {g}"
            yield from (f"      {c}" for c in g.copies)
        if top is not None and len(self.groups) > top:
            yield f"  ... {len(self.groups) - top} more (--top N, or --json for all)"
        if self.functions is None:
            return
        yield (f"functions in more than one distinct image: {len(self.functions)}, "
               f"{_size(self.functions_wasted or 0)} of SASS wasted")
        for f in self.functions[:top]:
            yield f"  {_size(f.wasted):>10}  {f}"
        if top is not None and len(self.functions) > top:
            yield f"  ... {len(self.functions) - top} more"

    def __str__(self) -> str:
        return "\n".join(self.lines(10))

    def __repr__(self) -> str:
        return (f"Duplicates(file={self.file!r}, images={self.images}, groups={len(self.groups)}, "
                f"wasted={self.wasted}, functions="
                f"{None if self.functions is None else len(self.functions)})")


def duplicates(source: str | os.PathLike[str], *, kernels: bool = False, all: bool = False,
               everywhere: bool = False, jobs: int | None = None, progress: Progress = None,
               max_decompressed: int | DecompressionBudget | None = None,
               skipped: Callable[[Member, FatbinkitError], None] | None = None) -> Duplicates:
    """The images of ``source`` (a file, a wheel or a folder:
    :func:`fatbinkit.collection.binaries`) stored more than once, by content, and with
    ``kernels`` the cubin functions found in more than one distinct image. ``all`` and
    ``everywhere`` choose the images as for :func:`fatbinkit.binary.open` (``cuobjdump -all``;
    the deep scan). Every image is decompressed and hashed on ``jobs`` processes, charged to
    ``max_decompressed`` (per library); ``progress`` counts the libraries read."""
    DecompressionBudget.of(max_decompressed, 0)  # a wrong type is refused before reading
    jobs = as_jobs(jobs)
    seen: dict[tuple[str, str, bytes], list[tuple[Copy, int]]] = {}
    functions: dict[tuple[str, str, bytes], int] = {}  # (name, arch, digest) -> images
    sizes: dict[tuple[str, str, bytes], int] = {}
    images = stored = 0
    for m, binary in binaries(source, progress, skipped, all=all, jobs=jobs,
                              everywhere=everywhere):
        with named(m):
            items = binary.select()  # the listed kinds: LTO-IR too with all
            chosen = [it.code for it in items]
            read = binary.map(functools.partial(_content, kernels), items,
                              kinds=tuple({c.kind for c in chosen}),
                              max_decompressed=max_decompressed, jobs=jobs,
                              desc="hashing images")
        for code, (digest, size, funcs) in zip(chosen, read, strict=True):
            images += 1
            stored += code.stored
            key = (code.kind, code.target, digest)
            first = key not in seen
            seen.setdefault(key, []).append((_copy(m.name, code), size))
            if first:  # a function counts once per distinct image
                for name, length, fdigest in funcs:
                    fkey = (name, code.target, fdigest)
                    functions[fkey] = functions.get(fkey, 0) + 1
                    sizes[fkey] = length
    groups = sorted((DuplicateImage(digest.hex(), kind, arch, copies[0][1],
                                    tuple(c for c, _ in copies))
                     for (kind, arch, digest), copies in seen.items() if len(copies) > 1),
                    key=lambda g: (-g.wasted, g.kind, g.arch, g.digest))
    found = None
    if kernels:
        found = tuple(sorted((DuplicateFunction(name, arch, digest.hex(), sizes[key], n)
                              for key, n in functions.items() if n > 1
                              for name, arch, digest in [key]),
                             key=lambda f: (-f.wasted, f.name, f.arch)))
    return Duplicates(os.fspath(source), images, stored, tuple(groups), found)


def _content(kernels: bool, code: DeviceCode
             ) -> tuple[bytes, int, tuple[tuple[str, int, bytes], ...]]:
    """In a worker: the digest and size of the image as the driver receives it and, with
    ``kernels``, each cubin function's name, SASS size and digest (plain tuples: only they
    travel back)."""
    data = code.data()
    digest = hashlib.blake2b(data, digest_size=_DIGEST_SIZE).digest()
    funcs: tuple[tuple[str, int, bytes], ...] = ()
    if kernels:
        funcs = tuple((name, len(text), hashlib.blake2b(text, digest_size=_DIGEST_SIZE).digest())
                      for name, text in vendors.of(code).function_code(code, data))
    return digest, len(data), funcs


def _copy(file: str, code: DeviceCode) -> Copy:
    section, symbol = source_keys(code.source)
    place = section or symbol or "file"
    where = f"{place} container {code.container}" if code.container >= 0 else place
    if code.member:
        where = f"{code.member}: {where}"
    return Copy(file, where, code.offset, code.stored, code.hidden)


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "0 %"

