"""Slim the device code of shipped binaries: prune GPU architectures and recompress fatbins inside
linked libraries, executables, relocatable objects, raw fatbin files and wheels.

**Pruning** keeps, in every fatbin container (module), what a device of each requested arch
could load: the image the driver picks for it (:func:`fatbinkit.compat.decide`: exact SASS,
then the highest compatible SASS, then the highest compatible PTX), so an sm_86 device keeps the
sm_80 SASS it runs when no sm_86 SASS exists. PTX is kept by policy: ``keep`` (every PTX entry,
the forward compatibility the input had), ``floor`` (the one plain PTX a GPU newer than any in the
file would JIT: the highest ``compute_XY``), ``none``. Kinds the driver never loads (LTO-IR and
unknown ones) stay. Every requested arch then picks the same image per module as before, which the
report shows per arch, computed again on the output's containers. ``exact`` keeps instead the SASS
of exactly the archs given, as ``nvprune -arch`` does, and the report names what no longer loads.
So that ``check`` and ``gate`` judge the output as the input, a module of no kernel and no
variable keeps one image, and images no kept arch loads stay where they hold kernels the kept
ones lack; a module no kept arch loads becomes a container with no entry (the runtime still
registers it), counted in the report; a library left with no image at all, or none any arch
kept loads, is refused unless ``allow_empty``. Every compressed payload copied is inflated
once: a corrupt one is refused.

**Recompression** re-encodes every kept entry (``none``, ``lz4``, ``zstd`` at a level), on
``jobs`` threads (the codecs release the GIL), keeping an entry uncompressed where compressing
does not make it smaller. zstd entries need a CUDA 12.4 driver where LZ4 ones load on any: the
report gives each arch's minimum driver before and after, and a rise is refused unless allowed.

**The file**: in a linked ELF file the CUDA runtime finds each container only through the
``__fatbinwrap`` record in ``.nvFatBinSegment`` whose data pointer is a ``RELATIVE`` relocation.
The pointer is read where the loader takes it from: a RELA relocation's addend (GNU ld also
stores the value in the slot, LLD leaves 0 there), else the slot (a packed ``RELR``
relocation, an executable's absolute address). Containers are repacked at the start of their
section, the pointers rewritten there (the slot too where it held the value; 0 stays 0), and
the freed tail cut out of the file by :mod:`fatbinkit.formats.elf_edit`.
Any other reference into a fatbin section (a relocation elsewhere, a dynamic symbol) is refused,
naming it; ``same_size`` then rewrites each container where it was and zero-fills the rest, moving
nothing (the file keeps its size; the zeros compress in a wheel). Unknown wrapper versions are
refused. In a relocatable object the wrapper's pointer is an ``R_X86_64_64`` relocation whose addend
follows its container. A non-PIE executable has no relocations for absolute addresses: there the
wrapper records are the only references nvcc's registration code makes. The output is read back
and checked before it replaces the target. A wheel's libraries are slimmed in parallel and the
wheel written again with its ``RECORD`` (:mod:`fatbinkit.wheel`).

**The API**: every entry point takes a path or bytes and writes a file or, with no output,
returns the output's bytes in its report (``report.data``; ``report.output`` is the file
written); an output that is the input file (the same path, a link to it) is refused before
anything is read. The keywords are named and typed: ``jobs``, ``progress`` and
``max_decompressed`` as everywhere in fatbinkit.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import mmap
import os
import struct
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar, overload

from . import slim_bundles, vendors
from .compat import PTX, SASS, ImageInfo, image_from_entry
from .device_code import DeviceCode
from .driver import CudaVersion, as_device, dotted
from .errors import (
    CompatibilityError,
    EmptiedError,
    FatbinkitError,
    FormatError,
    InvalidArgumentError,
    OutputError,
    TruncatedError,
    UnsupportedError,
    option,
    spelled_for_cli,
)
from .formats import elf, elf_edit, pe
from .formats.arch import Arch, ArchLike
from .formats.archive import is_archive, is_archive_file
from .formats.codec import ZSTD_MAGIC, ZSTD_STEP, zstd_steps
from .formats.cubin import cubin_toolkit
from .formats.fatbin import (
    CONTAINER_HEADER_SIZE,
    MAX_DATA_SIZE,
    DecompressionBudget,
    EntryFlags,
    EntryKind,
    FatbinContainer,
    FatbinEntry,
    Reader,
    align8,
    compress,
    is_fatbin,
    iter_containers,
)
from .formats.offload_bundle import BUNDLE_ALIGNMENT, Bundle, is_bundle
from .formats.wrapper import (
    CUDA_WRAPPER_MAGIC,
    CUDA_WRAPPER_PE_SECTION,
    CUDA_WRAPPER_SECTION,
    HIP_WRAPPER_PE_SECTION,
    HIP_WRAPPER_SECTION,
    FatbinWrapper,
    HipWrapper,
)
from .infile import Content, FilePath, as_input, as_path, open_input
from .memory import give_back, give_back_range, trim_heap
from .outfile import atomic_path
from .parallel import as_jobs
from .progress import Progress, reporter
from .progress import check as check_progress
from .vendors.cuda.finding import (
    FATBIN_SECTION,
    PE_FATBIN_SECTION,
    PE_RELFATBIN_SECTION,
    RELFATBIN_SECTION,
)
from .vendors.cuda.loading import STREAM_ABOVE, streamed_cubin
from .vendors.hip.finding import FATBIN_SECTION as HIP_FATBIN_SECTION
from .vendors.hip.finding import OBJECT_PREFIX, OFFLOADING_SECTION
from .vendors.hip.finding import PE_FATBIN_SECTION as HIP_PE_FATBIN_SECTION
from .vendors.hip.floors import needs as rocm_needs

__all__ = [
    "CODECS",
    "PTX_POLICIES",
    "SPIRV_POLICIES",
    "WRAPPER_MAGIC",
    "WRAPPER_SECTION",
    "ArchReport",
    "Codec",
    "HiddenSlim",
    "PtxPolicy",
    "SlimReport",
    "SpirvPolicy",
    "WheelReport",
    "has_device_code",
    "prune",
    "recompress",
    "slim",
    "slim_archive",
    "slim_wheel",
]

#: what ``ptx=`` takes: every PTX, the one plain PTX newer GPUs JIT (the floor), or none beyond
#: what the archs kept load
PtxPolicy: TypeAlias = Literal["keep", "floor", "none"]
#: what ``spirv=`` takes (AMD): every SPIR-V entry, or none beyond what the archs kept load
SpirvPolicy: TypeAlias = Literal["keep", "none"]
#: what ``codec=`` takes: LZ4 and zstd for CUDA's fatbins, zstd and zlib for AMD's bundles
Codec: TypeAlias = Literal["none", "lz4", "zstd", "zlib"]
PTX_POLICIES: tuple[PtxPolicy, ...] = ("keep", "floor", "none")
SPIRV_POLICIES: tuple[SpirvPolicy, ...] = ("keep", "none")  # slim_bundles.SPIRV_POLICIES
CODECS: tuple[Codec, ...] = ("none", "lz4", "zstd", "zlib")  # fatbin.COMPRESSIONS, "none", zlib
_CUDA_CODECS = ("none", "lz4", "zstd")
_ZLIB_LEVELS = range(1, 10)
WRAPPER_SECTION = CUDA_WRAPPER_SECTION
WRAPPER_MAGIC = CUDA_WRAPPER_MAGIC
_SECTIONS = (FATBIN_SECTION, RELFATBIN_SECTION)
_ELF, _PTX = int(EntryKind.ELF), int(EntryKind.PTX)
# whose rules the planner asks: the vendor of the fatbin containers slim rewrites
_VENDOR = vendors.VENDORS[FatbinEntry.vendor]
_CODEC_FLAG = {"lz4": int(EntryFlags.COMPRESSED_LZ4), "zstd": int(EntryFlags.COMPRESSED_ZSTD)}
_CODEC_BITS = _CODEC_FLAG["lz4"] | _CODEC_FLAG["zstd"]
_U64 = struct.Struct("<Q")
_PE_WRAPPER_SECTION = CUDA_WRAPPER_PE_SECTION  # .nvFatBinSegment in a PE image's section names
#: a PE file's device code: ``.nv_fatbin`` and ``__nv_relfatbin`` as an image's eight-byte
#: section names hold them (and whole, as an object's long names keep them)
_PE_SECTIONS = (PE_FATBIN_SECTION, PE_RELFATBIN_SECTION, *_SECTIONS)
_MODULE_SIGNATURE = b"~Module signature appended~\n"  # what Linux's sign-file appends
_ZIP_MAGIC = b"PK\x03\x04"


@dataclass(frozen=True)
class ArchReport:
    """What the output does on one device arch, beside the input.

    ``modules`` counts the modules that load an image on it; ``changed`` names those whose pick
    differs from the input's (empty when pruning did its job; with ``exact`` the price of the
    literal list), ``lost`` the kernels those modules no longer have on this arch;
    ``min_driver_before/after`` is the lowest CUDA driver the picked images need (None: no
    module loads).
    """

    device: Arch
    modules: int
    sass: int
    ptx: int
    changed: tuple[str, ...]
    min_driver_before: CudaVersion | None
    min_driver_after: CudaVersion | None
    lost: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.device.sm

    @property
    def same(self) -> bool:
        return not self.changed

    def __repr__(self) -> str:
        return (f"ArchReport(device={self.device.sm!r}, modules={self.modules}, "
                f"sass={self.sass}, ptx={self.ptx}, changed=<{len(self.changed)}>, "
                f"lost=<{len(self.lost)}>, min_driver_before={self.min_driver_before}, "
                f"min_driver_after={self.min_driver_after})")

    @property
    def driver_raised(self) -> bool:
        before, after = self.min_driver_before, self.min_driver_after
        return before is not None and after is not None and after > before

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.name, "modules": self.modules, "sass": self.sass,
            "ptx": self.ptx, "same": self.same, "changed": list(self.changed),
            "lost_kernels": list(self.lost),
            "min_driver_before": dotted(self.min_driver_before) if self.min_driver_before
            else None,
            "min_driver_after": dotted(self.min_driver_after) if self.min_driver_after else None,
        }

    def __str__(self) -> str:
        def drv(v: CudaVersion | None) -> str:
            return dotted(v) if v else "-"

        how = (f"same image in all {self.modules} loading modules ({self.sass} SASS, "
               f"{self.ptx} PTX JIT)" if self.same else
               f"{len(self.changed)} module(s) load a different image or none "
               f"({', '.join(self.changed[:3])}{', ...' if len(self.changed) > 3 else ''}); "
               f"{len(self.lost)} kernel(s) lost"
               + (f": {', '.join(self.lost[:5])}{', ...' if len(self.lost) > 5 else ''}"
                  if self.lost else ""))
        driver = f"min driver {drv(self.min_driver_before)}"
        if self.min_driver_after != self.min_driver_before:
            driver += f" -> {drv(self.min_driver_after)}"
        return f"{self.name}: {how}; {driver}"


@dataclass(frozen=True)
class SlimReport:
    """The outcome of :func:`slim`: sizes, what was kept and dropped, and each arch's check."""

    input_size: int
    output_size: int
    device_before: int  # bytes of fatbin containers
    device_after: int
    modules: int
    entries_before: int
    entries_after: int
    dropped: tuple[tuple[str, int], ...]  # ("SASS sm_80", count)
    codec: str | None
    archs: tuple[Any, ...]  # ArchReport (CUDA) or slim_bundles.HipArchReport (HIP)
    layout: elf_edit.Layout | None = field(default=None)
    same_size: bool = False
    unreferenced: int = 0  # containers no wrapper points at: rewritten where they were
    no_image: int = 0  # modules that held an image and hold none in the output
    emptied: bool = False  # no module holds an image any more (allowed by allow_empty)
    level: int | None = None  # the compression level asked for (None: the codec's default)
    stored_as: tuple[tuple[str, int], ...] = ()  # recompression: what happened to the entries
    for_kernels: int = 0  # images no kept arch loads, kept for kernels the others lack
    output: Path | None = None  # the file written (None: the output is ``data``)
    data: bytes | None = field(default=None, repr=False)  # the output, when no file was given
    hidden: HiddenSlim | None = None  # with everywhere: what was done to the hidden code

    def __repr__(self) -> str:
        data = "" if self.data is None else f", data=<{len(self.data):,} bytes>"
        return (f"SlimReport(input_size={self.input_size}, output_size={self.output_size}, "
                f"modules={self.modules}, entries={self.entries_before}->{self.entries_after}, "
                f"archs={[a.name for a in self.archs]}, codec={self.codec!r}, "
                f"emptied={self.emptied}, output={self.output!r}{data})")

    @property
    def saved(self) -> int:
        return self.input_size - self.output_size

    @property
    def recompressed(self) -> int:
        """Entries encoded anew (their bytes may come out the same: ``stored_as`` says)."""
        return sum(n for how, n in self.stored_as if not how.startswith(_AS_STORED))

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_size": self.input_size, "output_size": self.output_size,
            "device_code_before": self.device_before, "device_code_after": self.device_after,
            "modules": self.modules, "entries_before": self.entries_before,
            "entries_after": self.entries_after,
            "dropped": [{"image": k, "count": n} for k, n in self.dropped],
            "codec": self.codec, "level": self.level,
            "recompressed": self.recompressed,
            "stored_as": [{"how": k, "count": n} for k, n in self.stored_as],
            "same_size": self.same_size,
            "unreferenced_in_place": self.unreferenced,
            "modules_without_image": self.no_image, "emptied": self.emptied,
            "kept_for_kernels": self.for_kernels,
            "archs": [a.to_dict() for a in self.archs],
            "cuts": [dataclasses.asdict(c) for c in self.layout.cuts] if self.layout else [],
            "strip_breaks": bool(self.layout and self.layout.strip_breaks),
            **({} if self.hidden is None else {"hidden": self.hidden.to_dict()}),
        }

    def __str__(self) -> str:
        pct = 100 * self.saved / self.input_size if self.input_size else 0.0
        lines = [
            f"file: {self.input_size:,} -> {self.output_size:,} bytes ({pct:.1f} % smaller)"
            + (" (same size: freed bytes zero-filled)" if self.same_size else ""),
            f"device code: {self.device_before:,} -> {self.device_after:,} bytes in "
            f"{self.modules} modules; entries {self.entries_before} -> {self.entries_after}",
        ]
        if self.codec:
            level = f" (level {self.level})" if self.level is not None else ""
            lines.append(f"as {self.codec}{level}: " + "; ".join(
                f"{n} {how}" for how, n in self.stored_as))
        if self.dropped:
            lines.append("dropped: " + ", ".join(f"{k} x{n}" for k, n in self.dropped))
        if self.for_kernels:
            lines.append(f"kept {self.for_kernels} image(s) no {_asked()} loads: they hold "
                         "kernels the loaded images lack (which fail there with "
                         "CUDA_ERROR_NOT_FOUND, as before; check and gate still see them)")
        if self.emptied:
            lines.append(f"warning: NO IMAGE LEFT: none of the {self.no_image} modules holds an "
                         f"image for any GPU (allowed by {option('allow_empty')}); the "
                         "runtime still "
                         "registers them and their kernels load nowhere")
        elif self.no_image:
            lines.append(f"warning: {self.no_image} of {self.modules} modules left with no image "
                         f"(no {_asked()} loads them): the runtime still registers them and "
                         "their kernels load on no GPU (check counts them as built for other "
                         "GPUs, as in the input)")
        if self.unreferenced:
            lines.append(f"{self.unreferenced} containers no wrapper points at were rewritten "
                         "where they were (not moved)")
        if self.hidden is not None:
            lines.append(str(self.hidden))
        if self.layout is not None and self.layout.strip_breaks:
            lines.append("warning: GNU strip run on this output would corrupt it (it moves the "
                         "grown program header table over the first sections): strip before "
                         "pruning, not after")
        lines += [f"  {a}" for a in self.archs]
        return "\n".join(lines)


@dataclass(frozen=True)
class HiddenSlim:
    """What ``everywhere`` did with the device code of the deep scan
    (:attr:`DeviceCode.hidden <fatbinkit.device_code.DeviceCode.hidden>`): its fatbin
    containers are pruned and recompressed like the others but rewritten where they are, each
    one's freed tail zero-filled (``zero_filled`` bytes: the file keeps its size; a wheel's
    deflate compresses the zeros away), because the library finds them through its own tables
    and code, which nothing can safely move. ``left``: what was left as it was, ``(what, count,
    stored bytes)``: zstd-compressed and bare cubins (the library's tables record their sizes
    beside their pointers), containers that rewritten would not fit where they are."""

    modules: int
    rewritten: int
    zero_filled: int
    emptied: int = 0  # containers left no image: built only for GPUs no --for arch is
    left: tuple[tuple[str, int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"modules": self.modules, "rewritten": self.rewritten,
                "zero_filled": self.zero_filled, "emptied": self.emptied,
                "left": [{"what": w, "count": n, "stored": b} for w, n, b in self.left]}

    def __str__(self) -> str:
        text = (f"hidden (outside .nv_fatbin): {self.rewritten} of {self.modules} containers "
                f"rewritten in place, {self.zero_filled:,} bytes zero-filled (the file keeps "
                "its size; a wheel's deflate compresses the zeros)")
        if self.emptied:
            text += (f"; {self.emptied} of them left no image (built only for GPUs not kept: "
                     "the library picks its container per GPU)")
        if self.left:
            text += "; left as they were: " + ", ".join(
                f"{n} {w} ({b:,} bytes)" for w, n, b in self.left)
        return text


# -- planning one container -----------------------------------------------------------------------


def _cheap_image(entry: FatbinEntry) -> ImageInfo | None:
    """The image as the driver picks it: kind, arch and PTX ISA from the entry header only."""
    kind = entry.header.kind
    if kind == _ELF:
        return ImageInfo(SASS, entry.arch)
    if kind == _PTX:
        return ImageInfo(PTX, entry.arch, entry.code_version)
    return None


def _picks(entries: Sequence[FatbinEntry], devices: Iterable[Arch]) -> dict[Arch, int | None]:
    """The index of the entry the driver picks on each device (None: nothing loads), as the
    entries' vendor decides (:meth:`fatbinkit.vendors.Vendor.decide`)."""
    images = [_cheap_image(e) for e in entries]
    loadable = [(i, img) for i, img in enumerate(images) if img is not None]
    out: dict[Arch, int | None] = {}
    for dev in devices:
        d = _VENDOR.decide([img for _, img in loadable], dev)
        out[dev] = next((i for i, img in loadable if img is d.image), None)
    return out


def _kept(entries: Sequence[FatbinEntry], devices: Sequence[Arch], ptx: str,
          exact: bool = False) -> list[int]:
    """Indexes of the entries pruning keeps (in their order): what each device picks, or with
    ``exact`` the SASS of exactly the archs asked for (suffix included), as nvprune keeps it."""
    if not devices:  # recompression only
        return list(range(len(entries)))
    if exact:
        keep = {i for i, e in enumerate(entries) if e.header.kind == _ELF and e.arch in devices}
    else:
        keep = {i for i in _picks(entries, devices).values() if i is not None}
    ptx_entries = [i for i, e in enumerate(entries) if e.header.kind == _PTX]
    if ptx == "keep":
        keep.update(ptx_entries)
    elif ptx == "floor":
        plain = [i for i in ptx_entries if entries[i].arch.suffix == ""]
        if plain:
            keep.add(max(plain, key=lambda i: (entries[i].arch.number, entries[i].code_version)))
    keep.update(i for i, e in enumerate(entries) if e.header.kind not in (_ELF, _PTX))
    return sorted(keep)


def _recode(entry: FatbinEntry, codec: str | None, level: int | None) -> FatbinEntry:
    """``entry`` with its payload stored as ``codec`` (None: unchanged). Kinds the driver does
    not load stay as they are: nvcc's LTO-IR entries flagged zstd hold no zstd frame (no magic;
    seen with nvcc 13.0 ``code=lto_90``), so they cannot be inflated and encoded again."""
    if codec is None or ((entry.compression or "none") == codec and level is None) or \
            entry.header.kind not in (_ELF, _PTX):
        return entry
    data = entry.data()
    h = entry.header
    flags = h.flags & ~_CODEC_BITS
    payload, compressed, uncompressed = data, 0, 0
    if codec != "none":
        packed = compress(codec, data, level)
        if len(packed) < len(data):  # else stored plain, as NVIDIA's tools do
            payload, compressed, uncompressed = packed, len(packed), len(data)
            flags |= _CODEC_FLAG[codec]
    stored = payload + bytes(align8(len(payload)) - len(payload))
    header = dataclasses.replace(h, size=len(stored), compressed_size=compressed, flags=flags,
                                 uncompressed_size=uncompressed)
    return FatbinEntry(header, entry.extra, stored)


_AS_STORED = "left as stored"


def _stored_as(old: FatbinEntry, new: FatbinEntry, codec: str) -> str:
    """What recompression did to one kept entry (``new`` is ``old`` when it was not touched)."""
    if new is old:
        if old.header.kind not in (_ELF, _PTX):
            return f"{_AS_STORED}: a kind the driver does not load (LTO-IR)"
        return f"{_AS_STORED}: already {codec}, no level given"
    if new.to_bytes() == old.to_bytes():
        return "re-encoded to the same bytes"
    if codec != "none" and new.compression is None:
        return f"stored uncompressed: {codec} did not make them smaller"
    return "re-encoded"


def _checked_recode(entry: FatbinEntry, codec: str | None, level: int | None) -> FatbinEntry:
    """:func:`_recode`, and a compressed SASS or PTX payload copied as stored inflated once, to
    its recorded size, or :class:`~fatbinkit.errors.DecompressionError`; a SASS payload must be
    an ELF file (a cubin): a corrupt payload is refused, never copied (LTO-IR flagged zstd holds
    no zstd frame: copied unchecked)."""
    new = _recode(entry, codec, level)
    kind = entry.header.kind
    if new is entry and entry.compression is not None and kind in (_ELF, _PTX):
        head = _inflated_head(entry)
    else:
        head = bytes(new.stored[:4]) if new.compression is None else b""
    if kind == _ELF and head and head != elf.ELFMAG:
        raise FormatError(f"the SASS {entry.arch.sm} entry's payload is not a cubin (no ELF "
                          "magic): a corrupt payload is not copied", offset=entry.offset)
    return new


_STEP = ZSTD_STEP  # what the output's check reads at a time


def _inflated_head(entry: FatbinEntry) -> bytes:
    """The first four bytes of a compressed entry's payload, all of it inflated once to check
    it (:meth:`FatbinEntry.data`'s errors): a zstd frame larger than a few steps inflated in
    1 MiB steps (:func:`~fatbinkit.formats.codec.zstd_steps`), never held whole (NCCL 2.28's
    cubins inflate to 133 MiB); a smaller one, or an LZ4 block (LZ4 blocks have no streaming
    form), whole."""
    h = entry.header
    expected = h.uncompressed_size
    if entry.compression != "zstd" or expected > MAX_DATA_SIZE or expected <= STREAM_ABOVE:
        return entry.data()[:4]
    head = b""
    for step in zstd_steps(entry.stored[: h.compressed_size], expected, entry.offset):
        if len(head) < 4:
            head += bytes(step[: 4 - len(head)])
    return head


def _loadable(entries: Sequence[FatbinEntry]) -> list[int]:
    """The indexes of the SASS and PTX entries: the images the driver may load."""
    return [i for i, e in enumerate(entries) if e.header.kind in (_ELF, _PTX)]


def _keep_empty(m: _Module, budget: DecompressionBudget) -> None:
    """A module whose images hold no kernel and no variable (``empty``: never loaded, see
    :attr:`fatbinkit.compat.ImageSet.empty`) keeps its smallest image where pruning would
    leave it none: a container with no entry is a module whose kernels are unknown, which the
    verdict counts as one that loads on no GPU, so the output would be judged unlike the
    input. Such images are a few hundred bytes."""
    images = _loadable(m.old.entries)
    if not images or not set(images).isdisjoint(m.kept):
        return
    infos = [image_from_entry(m.old.entries[i], budget=budget, streamed=True) for i in images]
    if all(img is not None and img.kernels is not None and not img.kernels
           and not img.variables for img in infos):
        m.kept = sorted({*m.kept, min(images, key=lambda i: (len(m.old.entries[i]), i))})
        m.empty = True


def _kernel_names(entry: FatbinEntry) -> tuple[frozenset[str], ImageInfo | None]:
    """The kernels an image holds (none for one that cannot be read), and the image as its
    driver floors read it (:func:`_floor_image`; None where that reads it anew), from one
    inflation; charged by the caller."""
    img = image_from_entry(entry, streamed=True)
    names = frozenset() if img is None or img.kernels is None else img.kernels
    if img is None or img.unread:
        return names, None
    if img.kind == SASS:
        img = ImageInfo(SASS, entry.arch, toolkit=img.toolkit, abi_version=img.abi_version,
                        compression=entry.compression)
    return names, img


def _keep_kernels(modules: Sequence[_Module], budget: DecompressionBudget, jobs: int,
                  floors: dict[int, ImageInfo]) -> None:
    """Where the images pruning keeps lack kernels that dropped images of the module hold
    (cuFFT 11 builds its bf16 kernels for sm_80 and up only), the smallest dropped images that
    hold them stay too. The runtime registers every kernel of a module, and a device whose image
    lacks one gets ``CUDA_ERROR_NOT_FOUND`` for it (:meth:`fatbinkit.compat.ImageSet.decide`);
    without their names, check and gate would no longer see those kernels. No kept arch picks
    these images (each pick is the best of all the module's images), so what loads is the same.
    Every image of a module that keeps one is read for its kernel names, and for what its
    driver floors need (into ``floors``, by ``id()`` of the entry: :func:`_arch_reports`
    inflates it no more)."""
    todo = [m for m in modules
            if (held := set(_loadable(m.old.entries))) - set(m.kept) and held & set(m.kept)]
    entries = [m.old.entries[i] for m in todo for i in _loadable(m.old.entries)]
    for e in entries:  # charged here, in order: the workers share no state
        if e.compression is not None:
            budget.charge(e.data_size, e.offset, id(e))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = _bounded(pool, _given_back(_kernel_names), entries)
        read = 0
        for m in todo:  # each decided as soon as its images are read: their names go then
            images = _loadable(m.old.entries)
            names: dict[int, frozenset[str]] = {}
            for i in images:
                e = m.old.entries[i]
                names[i], img = next(results)
                if img is not None and i in m.kept:  # what _arch_reports reads: the picks
                    floors[id(e)] = img
                read += len(e)
                if read >= _PAGES_HELD:
                    _drop_pages([e])
                    read = 0
            _keep_for_kernels(m, images, names)


def _keep_for_kernels(m: _Module, images: Sequence[int],
                      names: dict[int, frozenset[str]]) -> None:
    """:func:`_keep_kernels` for one module: ``names`` are the kernels of each of its
    ``images`` (by entry index)."""
    extra = _for_kernels(m.kept, {i: names[i] for i in images},
                         lambda i: (len(m.old.entries[i]), i))
    m.kept = sorted([*m.kept, *extra])
    m.for_kernels += len(extra)


def _for_kernels(kept: Collection[int], names: Mapping[int, frozenset[str]],
                 size: Callable[[int], Any]) -> list[int]:
    """The images of a module (``names``: each one's kernels, by index) to keep beside
    ``kept`` so that every kernel of the module stays named: the smallest (``size``) that add
    a kernel the kept ones lack, until none is missing (also what ``fatbinkit.report``'s
    what-if counts)."""
    have = set().union(*(names[i] for i in names if i in kept))
    want = set().union(*names.values())
    extra = []
    for i in sorted((i for i in names if i not in kept), key=size):
        if want <= have:
            break
        if names[i] - have:
            extra.append(i)
            have |= names[i]
    return extra


@dataclass
class _Module:
    """One container: where it was, what is kept of it, and where it goes."""

    section: str
    index: int  # across the file, as compat labels modules
    old_offset: int  # in its section
    old: Any  # a FatbinContainer (CUDA) or a Bundle (HIP: slim_bundles)
    kept: list[int]
    new: Any = None  # the container written (its kept entries, stored anew)
    data: bytes | memoryview = b""  # new.to_bytes(), made once (CUDA: a view of _Spill's)
    stored: Any = None  # HIP: the bundle's bytes as the input holds them
    how: str = ""  # HIP: what was done to the bundle (slim_bundles.Rewritten.how)
    new_offset: int = -1
    unreferenced: bool = False  # no wrapper points at it: it stays where it was
    empty: bool = False  # no kernel, no variable: one image kept (_keep_empty)
    for_kernels: int = 0  # images kept for the names of kernels the kept ones lack
    hidden: bool = False  # found by the deep scan: rewritten where it is, never moved
    zeroed: int = 0  # hidden: the bytes after the rewritten container, zero-filled

    @property
    def label(self) -> str:
        what = "bundle" if isinstance(self.old, Bundle) else "container"
        return f"{self.section or 'file'} {what} {self.index}"


@dataclass(frozen=True)
class _Request:
    """What the caller asked for, checked."""

    devices: list[Any]  # Arch (CUDA) or GpuTarget (HIP): the GPUs of one vendor
    ptx: str
    codec: str | None
    level: int | None
    same_size: bool
    allow_newer_driver: bool
    budget: DecompressionBudget
    progress: Progress
    jobs: int
    exact: bool = False
    strip_signature: bool = False
    allow_empty: bool = False
    spirv: str = "keep"
    allow_newer_rocm: bool = False
    vendor: str | None = None  # the vendor of ``devices`` (None: none given)
    everywhere: bool = False  # hidden containers too (the deep scan), rewritten in place
    spill: Path | None = None  # the folder of planning's temporary file (None: the system's)
    # images as driver floors read them, by id() of the input's entry: read once, for
    # _keep_kernels and _arch_reports
    floors: dict[int, ImageInfo] = field(default_factory=dict, compare=False)


def _plan(modules: list[_Module], req: _Request) -> None:
    if req.codec not in (None, *_CUDA_CODECS):
        raise InvalidArgumentError(f"a fatbin entry is stored as one of {_CUDA_CODECS}, not "
                                   f"{req.codec!r} (zlib is for AMD's offload bundles)")
    keeps = bool(req.devices) and not req.exact  # exact: the literal list, as nvprune
    for m in modules:
        m.kept = _kept(m.old.entries, req.devices, req.ptx, req.exact)
        if keeps:
            _keep_empty(m, req.budget)
    if keeps:  # what _keep_empty read
        _drop_pages(next((m.old.entries for m in modules if m.old.entries), ()))
    if keeps:
        _keep_kernels(modules, req.budget, req.jobs, req.floors)
    work = [m.old.entries[i] for m in modules for i in m.kept]
    # every compressed image kept is inflated (recoded, or checked): charged here, in order,
    # as the workers share no state
    for e in work:
        if e.compression is not None and e.header.kind in (_ELF, _PTX):
            req.budget.charge(e.data_size, e.offset, id(e))
    with _spill_file(req.spill) as file, \
            ThreadPoolExecutor(max_workers=req.jobs) as pool, \
            reporter(req.progress if req.codec is not None else None, len(work), "entry",
                     f"recompressing as {req.codec}") as report:
        spill = _Spill(file)
        recoded = _in_order(pool, _given_back(lambda e: _checked_recode(e, req.codec,
                                                                         req.level)),
                            work, 2 * req.jobs)
        read = 0
        for m in modules:
            entries = []
            for _ in m.kept:
                entries.append(next(recoded))
                report.advance()
            spill.add(m, FatbinContainer(tuple(entries), m.old.version, m.old.header_extra,
                                         m.old.tail))
            read += sum(len(m.old.entries[i]) for i in m.kept)
            if read >= _PAGES_HELD:
                _drop_pages(m.old.entries)
                read = 0
        spill.close()


def _in_order(pool: ThreadPoolExecutor, fn: Callable[[FatbinEntry], FatbinEntry],
              items: Sequence[FatbinEntry], ahead: int) -> Iterator[FatbinEntry]:
    """``map(fn, items)`` on ``pool``, at most ``ahead`` calls submitted beyond the result
    taken last: what the workers made and the caller has not yet written is held, so a few
    entries' worth, not a whole batch's."""
    futures: collections.deque[Future[FatbinEntry]] = collections.deque()
    try:
        for item in items:
            futures.append(pool.submit(fn, item))
            if len(futures) > ahead:
                yield futures.popleft().result()
        while futures:
            yield futures.popleft().result()
    finally:
        for f in futures:
            f.cancel()


_T = TypeVar("_T")


def _given_back(fn: Callable[[FatbinEntry], _T]) -> Callable[[FatbinEntry], _T]:
    """``fn``, then the pages of the entry's payload given back (:func:`_give_back_payload`):
    what a worker read of the mapped input leaves it as soon as it is read."""
    def run(entry: FatbinEntry) -> _T:
        try:
            return fn(entry)
        finally:
            _give_back_payload(entry.stored)
            if entry.data_size > _TRIM_ABOVE:
                trim_heap()
    return run


#: an image inflating to more than this many bytes: the heap is trimmed once it is read
_TRIM_ABOVE = 4 << 20

#: the bytes images being inflated at once may take (one larger image alone: NCCL's)
_INFLATING = 64 << 20


def _bounded(pool: ThreadPoolExecutor, fn: Callable[[FatbinEntry], _T],
             entries: Sequence[FatbinEntry]) -> Iterator[_T]:
    """``map(fn, entries)`` on ``pool``, in order, with no more entries submitted and not yet
    taken than inflate to :data:`_INFLATING` bytes together (at least one): reading images on
    all cores without holding several of the largest at once."""
    futures: collections.deque[tuple[Future[_T], int]] = collections.deque()
    held = 0
    try:
        for e in entries:
            size = e.data_size
            while futures and held + size > _INFLATING:
                done, n = futures.popleft()
                held -= n
                yield done.result()
            futures.append((pool.submit(fn, e), size))
            held += size
        while futures:
            yield futures.popleft()[0].result()
    finally:
        for f, _ in futures:
            f.cancel()


def _spill_file(folder: Path | None) -> Any:
    """:class:`_Spill`'s file: a temporary file with no name in ``folder`` (the output's), or
    in the system's temporary folder where that cannot hold one (a folder that does not exist,
    or that is read-only: writing the output says so, as before)."""
    if folder is not None:
        with contextlib.suppress(OSError):
            return tempfile.TemporaryFile(dir=folder, prefix=".fatbinkit-")
    return tempfile.TemporaryFile(prefix="fatbinkit-")


class _Spill:
    """Where planning writes each module's new bytes as soon as they are made (``file``: a
    temporary file in the output's folder, or the system's), so that no module's bytes are held
    until the rewrite (kept bytes held twice: in the plan, then in the rewrite). When every
    module is written, the file is mapped: each module's ``data`` is a view of its bytes there
    and its ``new`` container is read back from them (entries planning kept as they were stay
    the input's own); the rewrite copies those pages, given back as it goes."""

    def __init__(self, file: Any) -> None:
        self._file = file
        self._at = 0
        # each module, its new container's fields but the entries, the entries kept as they
        # were (None: recoded, read back), where its bytes are and how many
        self._modules: list[tuple[_Module, tuple[int, bytes, bytes],
                                  tuple[FatbinEntry | None, ...], int, int]] = []

    def add(self, m: _Module, new: FatbinContainer) -> None:
        """Write ``new`` (``m``'s planned container) at the end of the file, as
        :meth:`FatbinContainer.to_bytes` makes it, without joining its entries."""
        size = 0
        fd = self._file.fileno()
        for part in new.parts():
            view = memoryview(part).cast("B")
            size += len(view)
            while view:
                view = view[os.write(fd, view):]
            _give_back_payload(part)  # a payload kept as stored: the input's pages
        # the entries recoded anew are not kept: they are read back from the file
        same = tuple(e if any(e is o for o in m.old.entries) else None for e in new.entries)
        self._modules.append((m, (new.version, new.header_extra, new.tail), same, self._at,
                              size))
        self._at += size

    def close(self) -> None:
        """Map the file (it stays mapped when closed): every module's ``data`` and ``new``
        read from it."""
        view = _map(self._file.fileno(), self._at)
        for m, (version, extra, tail), same, at, size in self._modules:
            m.data = view[at : at + size]
            read = FatbinContainer.parse(m.data).entries if None in same else ()
            m.new = FatbinContainer(tuple(read[i] if e is None else e
                                          for i, e in enumerate(same)), version, extra, tail)


#: the bytes of the mapped input read between two :func:`_drop_pages`: what a plan holds of it
_PAGES_HELD = 4 << 20
#: the bytes of :class:`_Spill`'s file read between two give-backs of its pages
_SPILL_HELD = 4 << 20


def _drop_pages(entries: Sequence[FatbinEntry]) -> None:
    """Give back the pages of the mapped input that reading ``entries`` touched (all of the
    mapping's, read so far: :func:`~fatbinkit.memory.give_back`). A plan reads hundreds of MiB
    of device code once."""
    if entries:
        give_back(entries[0].stored)


def _give_back_payload(view: object) -> None:
    """The pages of one payload (or spilled part) larger than :data:`_GIVE_BACK_ABOVE` given
    back as soon as it is read (:func:`~fatbinkit.memory.give_back_range`), not when the
    module's last entry is: NCCL 2.28's largest module stores 56 MiB of cubins."""
    if isinstance(view, memoryview) and len(view) >= _GIVE_BACK_ABOVE:
        give_back_range(view)


#: payloads smaller than this are given back with the others, every :data:`_PAGES_HELD`
_GIVE_BACK_ABOVE = 1 << 20


# -- per-arch report ------------------------------------------------------------------------------


def _floor_image(entry: FatbinEntry, budget: DecompressionBudget) -> ImageInfo | None:
    """The image with what its driver floors read (a cubin's toolkit and ELF ABI; PTX as
    :func:`~fatbinkit.vendors.cuda.loading.streamed_ptx` reads it, in steps where large)."""
    if entry.header.kind == _ELF:
        compact = streamed_cubin(entry, budget)  # a large zstd image: never inflated whole
        if compact is not None:
            with contextlib.suppress(FormatError, UnsupportedError):  # read whole: its error
                return ImageInfo(SASS, entry.arch, toolkit=cubin_toolkit(compact),
                                 abi_version=compact[elf.EI_ABIVERSION],
                                 compression=entry.compression)
        data = entry.data(budget=budget)
        try:
            toolkit = cubin_toolkit(data)
        except (FormatError, UnsupportedError):  # compat's own account of an unreadable cubin
            return image_from_entry(entry, budget=budget)
        return ImageInfo(SASS, entry.arch, toolkit=toolkit,
                         abi_version=data[elf.EI_ABIVERSION], compression=entry.compression)
    return image_from_entry(entry, budget=budget, streamed=True)  # PTX: a large text in steps


def _floors_need(img: ImageInfo | None, device: Arch, codec: str | None) -> CudaVersion | None:
    """The lowest CUDA driver that loads ``img`` on ``device`` (stored as ``codec``), as the
    vendor's :meth:`~fatbinkit.vendors.Vendor.decide` computes it for the image it picks."""
    if img is None:
        return None
    return _VENDOR.decide([dataclasses.replace(img, compression=codec)], device).min_driver


def _later(a: CudaVersion | None, b: CudaVersion | None) -> CudaVersion | None:
    return b if a is None or (b is not None and b > a) else a


def _arch_reports(modules: Sequence[_Module], devices: Sequence[Arch],
                  budget: DecompressionBudget, jobs: int,
                  floors: dict[int, ImageInfo]) -> tuple[ArchReport, ...]:
    # (module, old pick, new pick) per device, then each picked entry's image read once, on
    # all cores (decompression releases the GIL)
    picks: dict[Arch, list[tuple[_Module, int | None, int | None]]] = {d: [] for d in devices}
    for m in modules:
        assert m.new is not None
        old, new = _picks(m.old.entries, devices), _picks(m.new.entries, devices)
        for dev in devices:
            picks[dev].append((m, old[dev], new[dev]))
    wanted = {id(e): e for rows in picks.values()
              for m, old, new in rows if old is not None and new is not None
              for e in (m.old.entries[old],)}
    for e in wanted.values():  # charged in order, before the workers run
        if e.compression is not None:
            budget.charge(e.data_size, e.offset)
    unlimited = DecompressionBudget(1 << 62)
    full: dict[int, ImageInfo | None] = {k: floors[k] for k in wanted if k in floors}
    todo = [e for k, e in wanted.items() if k not in full]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        read = 0
        for e, img in zip(todo, _bounded(pool, _given_back(lambda e: _floor_image(e, unlimited)),
                                         todo), strict=True):
            full[id(e)] = img
            read += len(e)
            if read >= _PAGES_HELD:
                _drop_pages([e])
                read = 0
    reports = []
    for dev in devices:
        loading = sass = jit = 0
        changed: list[str] = []
        before: CudaVersion | None = None
        after: CudaVersion | None = None
        lost: dict[str, None] = {}
        for m, old_pick, new_pick in picks[dev]:
            assert m.new is not None
            origin = None if new_pick is None else m.kept[new_pick]
            if origin != old_pick:
                changed.append(m.label)
                lost.update(dict.fromkeys(_lost_kernels(m, old_pick, new_pick, budget)))
            if new_pick is None or old_pick is None:
                continue
            loading += 1
            new_entry = m.new.entries[new_pick]
            if new_entry.header.kind == _ELF:
                sass += 1
            else:
                jit += 1
            old_entry = m.old.entries[old_pick]
            img = full[id(old_entry)]
            before = _later(before, _floors_need(img, dev, old_entry.compression))
            after = _later(after, _floors_need(img, dev, new_entry.compression))
        reports.append(ArchReport(Arch(dev.number, dev.suffix), loading, sass, jit,
                                  tuple(changed), before, after, tuple(sorted(lost))))
    return tuple(reports)


def _lost_kernels(m: _Module, old_pick: int | None, new_pick: int | None,
                  budget: DecompressionBudget) -> list[str]:
    """The kernels of the image the input loaded that the output's pick lacks (large images
    read in steps, as planning reads them)."""
    if old_pick is None:
        return []
    old = image_from_entry(m.old.entries[old_pick], budget=budget, streamed=True)
    assert m.new is not None
    new = None if new_pick is None else \
        image_from_entry(m.new.entries[new_pick], budget=budget, streamed=True)
    have: frozenset[str] = frozenset() if new is None else (new.kernels or frozenset())
    return sorted(set(old.kernels or ()) - have) if old is not None else []


def _file_devices(modules: Sequence[_Module]) -> list[Arch]:
    """Every device arch some image of the file is built for (what recompression reports on)."""
    numbers = {e.header.sm for m in modules for e in m.old.entries
               if e.header.kind in (_ELF, _PTX)}
    return [Arch(n) for n in sorted(numbers)]


# -- the file -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Wrapper:
    slot: int  # address of the data pointer (ELF: a vaddr; PE: an RVA)
    slot_offset: int  # file offset of the data pointer
    target: int  # the value in the slot (a vaddr: PE stores ImageBase + RVA; in a linked ELF
    # file a RELA relocation at the slot says where it points: see _Pointer)


def _wrappers(view: memoryview, sections: Sequence[elf.Section], kind: _Kind
              ) -> list[_Wrapper]:
    """The wrapper records of ``kind`` (``__fatbinwrap``, ``__hip_fatbin_wrapper``): each data
    pointer's slot and target."""
    sec = next((s for s in sections if s.name == kind.wrapper_section), None)
    if sec is None or sec.header.type == elf.SHT_NOBITS:
        return []
    h = sec.header
    return _wrapper_records(view, kind.wrapper_section, h.offset, h.size, h.addr, kind)


def _wrapper_records(view: memoryview, name: str, offset: int, size: int,
                     addr: int, kind: _Kind | None = None) -> list[_Wrapper]:
    """The wrapper records of the section ``name`` (``size`` bytes at file ``offset``, address
    ``addr``: a virtual address in ELF, an RVA in PE) of ``kind`` (None: CUDA's): each data
    pointer's slot and target (a record whose module lies elsewhere, rocm-kpack's ``HIPK``, is
    left out)."""
    kind = kind or _CUDA
    n = FatbinWrapper.FORMAT.size  # 24 bytes, the pointer at 8: CUDA's and HIP's alike
    if size % n:
        raise UnsupportedError(f"{name} of {size} bytes is not a whole number of "
                               f"{n}-byte wrapper records")
    out = []
    for k in range(size // n):
        at = offset + k * n
        target = kind.record(view[at:at + n], at, k, name)
        if target is not None:
            slot = FatbinWrapper.DATA_OFFSET
            out.append(_Wrapper(addr + k * n + slot, at + slot, target))
    return out


def _cuda_record(raw: memoryview, at: int, k: int, name: str) -> int | None:
    """A ``__fatbinwrap`` record's data pointer; an unknown magic or version is refused."""
    try:
        return FatbinWrapper.unpack(raw, at).data
    except TruncatedError:
        raise
    except FormatError as e:  # said as before: which record of which section
        magic, version, _, _ = FatbinWrapper.FORMAT.unpack_from(raw, 0)
        if magic != WRAPPER_MAGIC:
            raise UnsupportedError(f"wrapper record {k} in {name} has magic "
                                   f"{magic:#x}, not {WRAPPER_MAGIC:#x}: an unknown layout"
                                   ) from e
        raise UnsupportedError(f"wrapper record {k} in {name} has version "
                               f"{version}; only versions 1 and 2 are known") from e


def _hip_record(raw: memoryview, at: int, k: int, name: str) -> int | None:
    """A ``__hip_fatbin_wrapper`` record's ``binary`` pointer (None for a rocm-kpack ``HIPK``
    record: its module is in a ``.kpack`` file, not here); what CLR would not register is
    refused."""
    try:
        record = HipWrapper.unpack(raw, at)
    except TruncatedError:
        raise
    except FormatError as e:
        raise UnsupportedError(f"wrapper record {k} in {name}: {e}") from e
    return None if record.kpack else record.binary


def _relocations(view: memoryview, sections: Sequence[elf.Section]
                 ) -> Iterator[tuple[elf.Section, int, tuple[int, int, int]]]:
    """Every dynamic RELA relocation: (its section, index, raw ``(offset, info, addend)``)."""
    for s in sections:
        h = s.header
        if h.type == elf.SHT_REL and h.flags & elf.SHF_ALLOC and h.size:
            raise UnsupportedError(f"{s.name}: REL relocations (no addend) are not supported")
        if h.type != elf.SHT_RELA or not h.flags & elf.SHF_ALLOC:
            continue
        if h.entsize != elf.Rela.FORMAT.size:
            raise FormatError(f"{s.name}: entry size {h.entsize}, not {elf.Rela.FORMAT.size}")
        raw = view[h.offset : h.offset + h.size - h.size % elf.Rela.FORMAT.size]
        for i, rec in enumerate(elf.Rela.FORMAT.iter_unpack(raw)):
            yield s, i, rec


def _relr_slots(view: memoryview, sections: Sequence[elf.Section]) -> list[int]:
    """The addresses a packed ``SHT_RELR`` table relocates (value stored in place)."""
    slots: list[int] = []
    for s in sections:
        h = s.header
        if h.type != elf.SHT_RELR or not h.size:
            continue
        base = 0
        for (word,) in _U64.iter_unpack(view[h.offset : h.offset + h.size - h.size % 8]):
            if not word & 1:
                slots.append(word)
                base = word + 8
            else:
                bits = word >> 1
                for k in range(63):
                    if bits >> k & 1:
                        slots.append(base + 8 * k)
                base += 63 * 8
    return slots


@dataclass(frozen=True)
class _Pointer:
    """A wrapper's data pointer in a linked ELF file, as the loader computes it: ``target`` is
    the addend of the ``RELATIVE`` relocation that covers the slot (a RELA relocation's value is
    its addend, whatever the slot holds: System V ABI, "Relocation"), else the value in place (a
    packed ``RELR`` slot, or an absolute address in an executable without relocations).
    ``stored`` is what the file holds in the slot: the target where the linker applied the
    relocation (GNU ld, ``lld --apply-dynamic-relocs``), 0 where it did not (LLD's default)."""

    slot: int  # vaddr of the data pointer
    slot_offset: int  # its file offset
    target: int
    stored: int
    relas: tuple[tuple[elf.Section, int, elf.Rela], ...]  # the RELA records of the slot

    @property
    def in_place(self) -> bool:
        """Whether the slot holds the target (what a rewrite writes there too; else 0 stays)."""
        return not self.relas or self.stored == self.target


def _references(view: memoryview, head: elf.FileHeader, sections: Sequence[elf.Section],
                phdrs: Sequence[elf.ProgramHeader], ranges: Sequence[tuple[str, int, int]],
                wrappers: Sequence[_Wrapper]
                ) -> tuple[list[_Pointer], list[tuple[str, int]]]:
    """Each wrapper's data pointer as the loader computes it (from the relocation covering its
    slot, or the value in place where none does), and every other reference into a fatbin
    section as (what, target address): what makes moving containers unsafe. A slot whose
    relocation is not ``RELATIVE``, or that holds neither its relocation's value nor 0, is
    one of the latter where it points into a fatbin section."""
    relative = elf.RELATIVE.get(head.machine)
    slots = {w.slot for w in wrappers}
    by_slot: dict[int, list[tuple[elf.Section, int, elf.Rela]]] = {}
    others: list[tuple[str, int]] = []

    def inside(target: int) -> str | None:
        return next((name for name, lo, hi in ranges if lo <= target < hi), None)

    low = min((lo for _, lo, _ in ranges), default=0)
    high = max((hi for _, _, hi in ranges), default=0)
    dynsym = next((s for s in sections if s.header.type == elf.SHT_DYNSYM), None)
    values: list[int] = []
    if dynsym is not None:
        h = dynsym.header
        raw = view[h.offset : h.offset + h.size - h.size % elf.Symbol.FORMAT.size]
        for _n, _i, _o, shndx, value, _s in elf.Symbol.FORMAT.iter_unpack(raw):
            defined = shndx != elf.SHN_UNDEF
            values.append(value if defined else -1)
            name = inside(value) if defined and low <= value < high else None
            if name:
                others.append((f"a dynamic symbol points into {name} at {value:#x}", value))

    def target_of(info: int, addend: int) -> int:
        kind, sym = info & 0xFFFFFFFF, info >> 32
        return addend if kind == relative else (
            values[sym] + addend if 0 < sym < len(values) and values[sym] >= 0 else -1)

    for s, i, (offset, info, addend) in _relocations(view, sections):
        if offset in slots:
            by_slot.setdefault(offset, []).append((s, i, elf.Rela(offset, info, addend)))
            continue
        target = target_of(info, addend)
        if not low <= target < high:  # the common case, decided without a call
            continue
        name = inside(target)
        if name:
            others.append((f"{s.name} entry {i} at {offset:#x} points into {name} at "
                           f"{target:#x}", target))
    for slot in _relr_slots(view, sections):
        if slot in slots:
            continue
        off = elf_edit.vaddr_offset(phdrs, slot, 8)
        if off is not None:
            (value,) = _U64.unpack_from(view, off)
            name = inside(value)
            if name:
                others.append((f"a RELR relocation at {slot:#x} points into {name}", value))
    pointers = []
    for w in wrappers:
        relas = tuple(by_slot.get(w.slot, ()))
        last = relas[-1][2] if relas else None  # the loader applies them in order
        target = w.target if last is None else target_of(last.info, last.addend)
        for s, i, r in relas:
            where = inside(target_of(r.info, r.addend))
            if where and r.type != relative:
                others.append((f"{s.name} entry {i} at {r.offset:#x}: relocation type "
                               f"{r.type}, not RELATIVE", -1))
            elif where and (len(relas) > 1 or w.target not in (0, target)):
                others.append((f"{s.name} entry {i} at {r.offset:#x}: the wrapper's pointer "
                               f"holds {w.target:#x} in place and has {len(relas)} "
                               f"relocation(s), the last to {target:#x}", target))
        pointers.append(_Pointer(w.slot, w.slot_offset, target, w.target, relas))
    return pointers, others


def _modules_of(view: memoryview, base: int, size: int, section: str,
                first: int, budget: DecompressionBudget | None = None,
                fd: int | None = None) -> list[_Module]:
    """The fatbin containers of ``size`` bytes at ``base`` (read as they are needed:
    ``budget`` is charged when payloads are inflated); with the file's ``fd``, their headers
    are read from it, which maps none of the payloads' pages (:class:`Reader`)."""
    src = Reader(view[base : base + size], fd, base)
    out = []
    for k, (off, head) in enumerate(iter_containers(src)):
        out.append(_Module(section, first + k, off, FatbinContainer.parse(src, off, head), []))
    return out


def _options(archs: Sequence[ArchLike] | None, ptx: str, codec: str | None, level: int | None,
             *, same_size: bool, allow_newer_driver: bool, exact: bool, strip_signature: bool,
             allow_empty: bool, jobs: int | None, progress: Progress, spirv: str = "keep",
             allow_newer_rocm: bool = False, everywhere: bool = False) -> _Options:
    """The keyword arguments of a public entry point, checked: bad ones (or none asking for
    anything) are an :class:`~fatbinkit.errors.InvalidArgumentError` naming the keyword,
    before any file is opened."""
    if ptx not in PTX_POLICIES:
        raise InvalidArgumentError(f"ptx={ptx!r} is not one of {PTX_POLICIES}")
    if spirv not in SPIRV_POLICIES:
        raise InvalidArgumentError(f"spirv={spirv!r} is not one of {SPIRV_POLICIES}")
    if codec is not None and codec not in CODECS:
        raise InvalidArgumentError(f"codec={codec!r} is not one of {CODECS} (or None: as stored)")
    if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
        raise InvalidArgumentError(f"level is a whole number (or None), not {level!r}")
    if level is not None and codec in (None, "none"):
        raise InvalidArgumentError(f"a compression level needs {option('codec', 'lz4')}, "
                                   f"{option('codec', 'zstd')} or {option('codec', 'zlib')}")
    if level is not None and codec == "zlib":
        if level not in _ZLIB_LEVELS:
            raise InvalidArgumentError(f"zlib level {level} is not in {_ZLIB_LEVELS.start}.."
                                       f"{_ZLIB_LEVELS.stop - 1}")
    elif level is not None:
        assert codec is not None
        compress(codec, b"", level)  # validates the level
    flags = {"same_size": same_size, "allow_newer_driver": allow_newer_driver, "exact": exact,
             "strip_signature": strip_signature, "allow_empty": allow_empty,
             "allow_newer_rocm": allow_newer_rocm, "everywhere": everywhere}
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} is True or False, not {value!r}")
    if isinstance(archs, (str, Arch)):
        raise InvalidArgumentError(f"archs is a list of archs, not one {archs!r}: give [{archs!r}]")
    gpus = [_device(a) for a in archs or ()]  # GPUs that exist
    owners = list(dict.fromkeys(v.name for v, _ in gpus))
    if len(owners) > 1:
        raise InvalidArgumentError(f"archs name the GPUs of one vendor, not of "
                                   f"{' and '.join(owners)}: prune each vendor's libraries apart")
    devices = tuple(dict.fromkeys(d for _, d in gpus))
    if not devices and codec is None:
        raise InvalidArgumentError("nothing to do: give archs to keep, a codec, or both")
    check_progress(progress)
    return _Options(devices, ptx, codec, level, same_size, allow_newer_driver, exact,
                    strip_signature, allow_empty, as_jobs(jobs), spirv, allow_newer_rocm,
                    owners[0] if owners else None, everywhere)


def _device(value: object) -> tuple[vendors.Vendor, Any]:
    """The vendor of the GPU ``value`` names, and the GPU: an NVIDIA arch with its suffix
    (``sm_90a`` keeps the arch-specific SASS: :func:`fatbinkit.driver.as_device`), an AMD
    processor with its driver's default features (``gfx942``) or those given
    (``gfx90a:xnack+``)."""
    vendor, device = vendors.device(value, "archs")
    return vendor, as_device(value, "archs") if isinstance(device, Arch) else device


def _target(value: object, what: str) -> Path | None:
    return None if value is None else as_path(value, what)


def _not_the_input(source: Path | Content, output: Path | None) -> None:
    """Refuse, before anything is read or written, an output that is the input file: the same
    path, or the same file under another name (a symbolic or a hard link: one device and inode,
    :func:`os.path.samefile`). Writing there would replace the input with the output."""
    if output is None or not isinstance(source, Path):
        return
    try:
        same = output.exists() and os.path.samefile(source, output)
    except OSError:  # the input is missing or unreadable: opening it says so
        same = False
    if same:
        how = "" if output.absolute() == source.absolute() else \
            f" ({source} under another name: a link)"
        raise InvalidArgumentError(f"the output {output} is the input{how}: write a new file")


@contextlib.contextmanager
def _opened(source: Path | Content) -> Iterator[_Input]:
    """The input, a path (memory-mapped) or bytes, for the slimming functions."""
    if not isinstance(source, Path):
        yield _Input("the input", memoryview(source).cast("B"), None, 0o666, None)
        return
    with open_input(source) as file:
        fd = file.fileno()
        st = os.fstat(fd)
        yield _Input(os.fspath(source), _map(fd, st.st_size), source, st.st_mode & 0o777, fd)


@dataclass(frozen=True)
class _Input:
    """A file to slim: ``name`` for messages, its bytes, its path (None: given as bytes),
    permissions (what the output gets) and open descriptor (None: given as bytes)."""

    name: str
    view: memoryview
    path: Path | None
    mode: int
    fd: int | None = None

    @contextlib.contextmanager
    def file(self) -> Iterator[Path]:
        """The input as a file (the ELF editors read one): its path, or a temporary copy."""
        if self.path is not None:
            yield self.path
            return
        with tempfile.TemporaryDirectory(prefix="fatbinkit-") as work:
            path = Path(work, "input")
            path.write_bytes(self.view)
            yield path


@dataclass
class _Output:
    """Where a slimmed file goes: ``path`` (replaced atomically, with permissions ``mode``),
    or, where there is none, ``data``."""

    path: Path | None
    mode: int = 0o666
    data: bytes | None = None

    def write(self, data: bytes | bytearray) -> None:
        if self.path is None:
            self.data = bytes(data)
            return
        with atomic_path(self.path, self.mode) as tmp:
            tmp.write_bytes(data)

    @contextlib.contextmanager
    def file(self) -> Iterator[Path]:
        """An empty file to write the output into; it replaces ``path`` (or is read into
        ``data``) when the block succeeds."""
        if self.path is not None:
            with atomic_path(self.path, self.mode) as tmp:
                yield tmp
            return
        with tempfile.TemporaryDirectory(prefix="fatbinkit-") as work:
            tmp = Path(work, "output")
            tmp.touch()
            yield tmp
            self.data = tmp.read_bytes()


def slim(source: FilePath | Content, output: FilePath | None = None, *,
         archs: Sequence[ArchLike] | None = None, ptx: PtxPolicy = "keep",
         codec: Codec | None = None, level: int | None = None, same_size: bool = False,
         allow_newer_driver: bool = False, exact: bool = False, strip_signature: bool = False,
         allow_empty: bool = False, spirv: SpirvPolicy = "keep", allow_newer_rocm: bool = False,
         everywhere: bool = False,
         max_decompressed: int | DecompressionBudget | None = None,
         progress: Progress = None, jobs: int | None = None) -> SlimReport:
    """Prune (``archs``) and/or recompress (``codec``) the fatbins of ``source`` into ``output``.

    ``source`` is a shared library, an executable, a relocatable object, a Windows DLL/EXE or a
    raw fatbin file: its path or its bytes. ``output`` is the file written (atomically: it is
    the whole output or untouched), or None: the output is :attr:`SlimReport.data`. An output
    that is the input file (the same path, a symbolic or a hard link to it) is an
    :class:`~fatbinkit.errors.InvalidArgumentError`, before anything is read. Raises
    :class:`CompatibilityError` (nothing written) when a requested arch would load a different
    image than before, or, without ``allow_newer_driver``, when an arch would need a newer
    driver; :class:`UnsupportedError` for what cannot be rewritten safely (see the module).
    ``exact`` keeps the SASS of exactly ``archs`` (as ``nvprune -arch`` does) instead of what
    their devices load; the report then names the modules and kernels that no longer load on
    them. Pruning after which no ``archs`` loads an image of any module (the file is left no
    image, or only PTX none of them JITs) raises :class:`~fatbinkit.errors.EmptiedError`,
    nothing written, unless ``allow_empty``. Every compressed image copied as stored is
    inflated once to its recorded size: a corrupt payload is a
    :class:`~fatbinkit.errors.DecompressionError`, nothing written. With ``level``, entries
    already stored as ``codec`` are encoded anew at that level; without, they stay as stored
    (:attr:`SlimReport.stored_as` says what happened to each).

    ``max_decompressed`` caps the bytes inflated (None: 64 times the input plus 256 MiB; a
    :class:`~fatbinkit.formats.fatbin.DecompressionBudget`: shared with other calls);
    ``progress`` (:mod:`fatbinkit.progress`) counts the entries recompressed; ``jobs`` threads
    encode and read them (None: :func:`fatbinkit.parallel.default_jobs`).
    """
    src = as_input(source, "slim() source")
    out = _target(output, "slim() output")
    opts = _options(archs, ptx, codec, level, same_size=same_size,
                    allow_newer_driver=allow_newer_driver, exact=exact,
                    strip_signature=strip_signature, allow_empty=allow_empty, jobs=jobs,
                    progress=progress, spirv=spirv, allow_newer_rocm=allow_newer_rocm,
                    everywhere=everywhere)
    _not_the_input(src, out)
    return _slim_one(src, out, opts, max_decompressed, progress)


@dataclass(frozen=True)
class _Options:
    """What the caller of a public entry point asked for, checked (:func:`_options`); sent to a
    wheel's worker processes."""

    devices: tuple[Any, ...]  # Arch (CUDA) or GpuTarget (HIP)
    ptx: str
    codec: str | None
    level: int | None
    same_size: bool
    allow_newer_driver: bool
    exact: bool
    strip_signature: bool
    allow_empty: bool
    jobs: int
    spirv: str = "keep"
    allow_newer_rocm: bool = False
    vendor: str | None = None
    everywhere: bool = False


def _slim_one(source: Path | Content, output: Path | None, opts: _Options,
              max_decompressed: int | DecompressionBudget | None,
              progress: Progress) -> SlimReport:
    with _opened(source) as src:
        budget = DecompressionBudget.of(max_decompressed, len(src.view))
        return _slim(src, _Output(output, src.mode), opts, budget, progress)


def _slim(src: _Input, out: _Output, opts: _Options, budget: DecompressionBudget,
          progress: Progress) -> SlimReport:
    req = _Request(list(opts.devices), opts.ptx, opts.codec, opts.level, opts.same_size,
                   opts.allow_newer_driver, budget, progress, opts.jobs, opts.exact,
                   opts.strip_signature, opts.allow_empty, opts.spirv, opts.allow_newer_rocm,
                   opts.vendor, opts.everywhere,
                   out.path.parent if out.path is not None else None)
    view = src.view
    machine = elf.machine(view)
    if is_fatbin(view):
        report = _slim_raw(src, out, req, _kind(src.name, req, [_CUDA]))
    elif is_bundle(view):
        report = _slim_raw(src, out, req, _kind(src.name, req, [_HIP]))
    elif machine is None and (pe.is_pe(view) or pe.is_coff_object(view)):
        report = _slim_pe(src, out, req)
    elif machine is None:
        if is_archive(view):
            raise UnsupportedError(f"{src.name} is a static library (an ar archive): "
                                   "slim_archive() slims its objects")
        if bytes(view[:4]) == _ZIP_MAGIC:
            raise UnsupportedError(f"{src.name} is a zip file: slim_wheel() slims the "
                                   "libraries of a wheel")
        raise FormatError(f"{src.name}: not a fatbin, ELF or PE file", offset=0)
    elif machine == elf.EM_CUDA:
        raise UnsupportedError(f"{src.name} is a cubin: nothing to prune in one image")
    elif vendors.device_machine(machine):
        raise UnsupportedError(f"{src.name} is one GPU's code object: nothing to prune in one "
                               "image")
    else:
        report = _slim_elf(src, out, req)
    return dataclasses.replace(report, output=out.path, data=out.data)


def _kind(name: str, req: _Request, present: Collection[_Kind], rdc: bool = False) -> _Kind:
    """Whose device code to slim among the kinds ``present`` in the file: the vendor of the
    GPUs asked for. GPUs of a vendor the file holds no device code of are an
    :class:`~fatbinkit.errors.UnsupportedError` (in a wheel: the library stays as it is), as is
    recompression of a file holding two vendors' code."""
    if not present and rdc:
        raise UnsupportedError(f"{name} holds relocatable device code (LLVM bitcode, "
                               "-fgpu-rdc or --offload-new-driver): it becomes code objects "
                               "when linked; slim the linked library")
    if not present:
        every = ", ".join(n for k in _KINDS for n in k.sections)
        raise FormatError(f"{name}: no device code to slim (no {every} section)", offset=None)
    if req.devices:
        found = next((k for k in present if k.vendor == req.vendor), None)
        if found is None:
            raise UnsupportedError(f"{name} holds {' and '.join(map(str, present))}, none for "
                                   f"the GPUs asked for ({', '.join(map(_spelled, req.devices))})")
        return found
    if len(present) > 1:
        raise UnsupportedError(f"{name} holds {' and '.join(map(str, present))}: recompress "
                               "one vendor's at a time is not supported")
    return next(iter(present))


def _spelled(device: Any) -> str:
    """``sm_90``, ``gfx942``: a GPU as the caller names it."""
    return str(getattr(device, "sm", None) or device.target.processor)


def _map(fd: int, size: int) -> memoryview:
    if not size:
        return memoryview(b"")
    return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))


def _finish(modules: list[_Module], req: _Request) -> tuple[ArchReport, ...]:
    codec = req.codec
    had = [m for m in modules if _loadable(m.old.entries) and not m.empty]
    if req.devices and had and not req.allow_empty and not any(
            i is not None for m in had
            for i in _picks(m.new.entries if m.new else (), req.devices).values()):
        held = sorted({_entry_label(m.old.entries[i]) for m in had
                       for i in _loadable(m.old.entries)})
        archs = ", ".join(d.sm for d in req.devices)
        left = any(m.new is not None and _loadable(m.new.entries) for m in had)
        why = ((f"{option('exact')} keeps no SASS for exactly {archs} in any" if req.exact else
                f"no {_asked()} ({archs}) loads an image of any") +
               f" of its {len(had)} module(s) (it holds {', '.join(held[:6])}"
               f"{', ...' if len(held) > 6 else ''})")
        what = (f"pruning would keep only images none of them loads ({option('ptx', req.ptx)} "
                "keeps the PTX)" if left else
                "pruning would leave it no device code for any GPU")
        raise EmptiedError(f"{why}: {what}; nothing written (accept it with "
                           f"{option('allow_empty')})", reason=why)
    reports = _arch_reports(modules, req.devices or _file_devices(modules), req.budget,
                            req.jobs, req.floors)
    changed = [r for r in reports if r.changed]
    if changed and not req.exact:  # cannot happen by construction; the check proves it
        raise CompatibilityError("after pruning, " + "; ".join(
            f"{r.device.sm} would load a different image in {', '.join(r.changed[:5])}"
            for r in changed))
    raised = [r for r in reports if r.driver_raised]
    if raised and not req.allow_newer_driver:
        raise CompatibilityError(
            f"recompressing as {codec} raises the minimum driver: " + "; ".join(
                f"{r.device.sm} {dotted(r.min_driver_before or (0, 0))} -> "
                f"{dotted(r.min_driver_after or (0, 0))}" for r in raised)
            + f" (allow it with {option('allow_newer_driver')})")
    return reports


def _asked() -> str:
    """The archs a prune keeps, as the caller named them: ``--for`` arch in the command line, arch
    in ``archs`` from the API (:func:`fatbinkit.errors.option`)."""
    return "--for arch" if option("archs") == "--for" else "arch in archs"


def _entry_label(e: FatbinEntry) -> str:
    """``SASS sm_90``, ``PTX compute_90``, ``kind 0x4 sm_90``."""
    return (f"SASS {e.arch.sm}" if e.header.kind == _ELF else
            f"PTX {e.arch.compute}" if e.header.kind == _PTX else
            f"kind {e.header.kind:#x} {e.arch.sm}")


def _report(total: int, out_size: int, modules: list[_Module], req: _Request,
            reports: tuple[ArchReport, ...], layout: elf_edit.Layout | None,
            same_size: bool) -> SlimReport:
    dropped: dict[str, int] = {}
    stored_as: dict[str, int] = {}
    no_image = had = 0
    for m in modules:
        assert m.new is not None
        kept = set(m.kept)
        for i, e in enumerate(m.old.entries):
            if i not in kept:
                key = _entry_label(e)
                dropped[key] = dropped.get(key, 0) + 1
        if req.codec is not None:
            for i, new in zip(m.kept, m.new.entries, strict=True):
                how = _stored_as(m.old.entries[i], new, req.codec)
                stored_as[how] = stored_as.get(how, 0) + 1
        if _loadable(m.old.entries) and not m.empty:
            had += 1
            no_image += not _loadable(m.new.entries)
    return SlimReport(
        total, out_size, sum(len(m.old) for m in modules), sum(len(m.data) for m in modules),
        len(modules), sum(len(m.old.entries) for m in modules),
        sum(len(m.kept) for m in modules),
        tuple(sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))), req.codec, reports,
        layout, same_size, sum(m.unreferenced for m in modules), no_image,
        bool(had) and no_image == had, req.level,
        tuple(sorted(stored_as.items(), key=lambda kv: (-kv[1], kv[0]))),
        sum(m.for_kernels for m in modules))


# -- HIP's offload bundles (fatbinkit.slim_bundles) ----------------------------------------------


def _hip_modules_of(view: memoryview, base: int, size: int, section: str, first: int,
                    budget: DecompressionBudget | None = None,
                    fd: int | None = None) -> list[_Module]:
    """The bundles of ``size`` bytes at ``base`` (a compressed one inflated, charged to
    ``budget``), one module each (``fd`` is not used)."""
    found = slim_bundles.read(view, base, size, budget or DecompressionBudget.for_input(size))
    return [_Module(section, first + k, b.offset - base, b, [],
                    stored=view[b.offset : b.offset + b.stored_size])
            for k, b in enumerate(found)]


def _hip_plan(modules: list[_Module], req: _Request) -> None:
    slim_bundles.check_codec(req.codec)
    for m in modules:
        m.kept = slim_bundles.kept_entries(m.old, req.devices, req.spirv, req.exact)
    unlimited = DecompressionBudget(1 << 62)  # reading back what was just written

    def one(m: _Module) -> slim_bundles.Rewritten:
        return slim_bundles.rewrite(m.old, bytes(m.stored), m.kept, req.codec, req.level,
                                    unlimited)

    with ThreadPoolExecutor(max_workers=req.jobs) as pool, \
            reporter(req.progress if req.codec is not None else None, len(modules), "bundle",
                     f"recompressing as {req.codec}") as report:
        for m, done in zip(modules, pool.map(one, modules), strict=True):
            m.new, m.data, m.how = done.bundle, done.data, done.how
            report.advance()


def _hip_loads(bundle: Bundle, devices: Sequence[Any]) -> bool:
    return any(i is not None for i in slim_bundles.picks(bundle, devices).values())


def _hip_finish(modules: list[_Module], req: _Request) -> tuple[Any, ...]:
    had = [m for m in modules if slim_bundles.loadable(m.old)]
    if req.devices and had and not req.allow_empty and \
            not any(_hip_loads(m.new, req.devices) for m in had):
        archs = ", ".join(str(d.target.processor) for d in req.devices)
        held = sorted({label for m in had for label in slim_bundles.entry_labels(m.old)
                       if not label.startswith("host ")})
        why = ((f"{option('exact')} keeps no code object for exactly {archs} in any" if req.exact
                else f"no {_asked()} ({archs}) loads a code object of any") +
               f" of its {len(had)} bundle(s) (they hold {', '.join(held[:6])}"
               f"{', ...' if len(held) > 6 else ''})")
        raise EmptiedError(f"{why}: pruning would leave it no device code for these GPUs; "
                           f"nothing written (accept it with {option('allow_empty')})",
                           reason=why)
    devices = req.devices or slim_bundles.devices_of([m.old for m in modules])
    reports = slim_bundles.arch_reports([(m.label, m.old, m.new, m.kept) for m in modules],
                                        devices)
    changed = [r for r in reports if r.changed]
    if changed and not req.exact:  # cannot happen by construction; the check proves it
        raise CompatibilityError("after pruning, " + "; ".join(
            f"{r.name} would load a different code object in {', '.join(r.changed[:5])}"
            for r in changed))
    raised = [r for r in reports if r.raised]
    if raised and not req.allow_newer_rocm:
        raise CompatibilityError(
            f"storing the bundles as {req.codec} raises the minimum ROCm: " + "; ".join(
                f"{r.name} {rocm_needs(r.min_rocm_before or (0, 0))} -> "
                f"{rocm_needs(r.min_rocm_after or (0, 0))}" for r in raised)
            + f" (allow it with {option('allow_newer_rocm')})")
    return reports


def _hip_report(total: int, out_size: int, modules: list[_Module], req: _Request,
                reports: tuple[Any, ...], layout: elf_edit.Layout | None,
                same_size: bool) -> SlimReport:
    dropped: dict[str, int] = {}
    stored_as: dict[str, int] = {}
    no_image = had = 0
    for m in modules:
        kept = set(m.kept)
        for i, key in enumerate(slim_bundles.entry_labels(m.old)):
            if i not in kept:
                dropped[key] = dropped.get(key, 0) + 1
        if req.codec is not None:
            stored_as[m.how] = stored_as.get(m.how, 0) + 1
        if slim_bundles.loadable(m.old):
            had += 1
            no_image += not slim_bundles.loadable(m.new)
    return SlimReport(
        total, out_size, sum(m.old.stored_size for m in modules),
        sum(len(m.data) for m in modules), len(modules),
        sum(len(m.old.entries) for m in modules), sum(len(m.kept) for m in modules),
        tuple(sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))), req.codec, reports,
        layout, same_size, sum(m.unreferenced for m in modules), no_image,
        bool(had) and no_image == had, req.level,
        tuple(sorted(stored_as.items(), key=lambda kv: (-kv[1], kv[0]))), 0)


@dataclass(frozen=True)
class _Kind:
    """The device-code containers of one vendor that slim rewrites in a host file, and how:
    CUDA's fatbin containers (``.nv_fatbin``, ``__nv_relfatbin``) or HIP's offload bundles
    (``.hip_fatbin``), each registered through a 24-byte wrapper record whose pointer lies at
    offset 8 (``__fatbinwrap`` in ``.nvFatBinSegment``, ``__hip_fatbin_wrapper`` in
    ``.hipFatBinSegment``). ``align``: where a container may start in its section (8, the
    fatbin's own; 4096, clang's ``HIPCodeObjectAlign``)."""

    vendor: str
    sections: tuple[str, ...]
    pe_sections: tuple[str, ...]
    wrapper_section: str
    pe_wrapper_sections: tuple[str, ...]  # an image's eight-byte name; GNU ld keeps long ones
    align: int
    record: Callable[[memoryview, int, int, str], int | None]
    modules_of: Callable[..., list[_Module]]
    plan: Callable[[list[_Module], _Request], None]
    finish: Callable[[list[_Module], _Request], tuple[Any, ...]]
    report: Callable[..., SlimReport]

    def __str__(self) -> str:
        return f"{self.vendor} device code ({', '.join(self.sections)})"


_CUDA = _Kind("cuda", _SECTIONS, _PE_SECTIONS, WRAPPER_SECTION, (_PE_WRAPPER_SECTION,), 8,
              _cuda_record, _modules_of, _plan, _finish, _report)
_HIP = _Kind("hip", (HIP_FATBIN_SECTION,), (HIP_PE_FATBIN_SECTION, HIP_FATBIN_SECTION),
             HIP_WRAPPER_SECTION, (HIP_WRAPPER_PE_SECTION, HIP_WRAPPER_SECTION), BUNDLE_ALIGNMENT,
             _hip_record, _hip_modules_of, _hip_plan, _hip_finish, _hip_report)
_KINDS = (_CUDA, _HIP)


def _slim_raw(src: _Input, out: _Output, req: _Request, kind: _Kind) -> SlimReport:
    """A fatbin file, or a file of offload bundles (one, or several at 4096-byte steps): the
    containers one after the other, each at the next multiple of ``kind.align``."""
    view = src.view
    modules = kind.modules_of(view, 0, len(view), "", 0, req.budget)
    kind.plan(modules, req)
    reports = kind.finish(modules, req)
    data = bytearray()
    for m in modules:
        data += bytes(-len(data) % kind.align)
        m.new_offset = len(data)
        data += m.data
    out.write(data)
    return kind.report(len(view), len(data), modules, req, reports, None, False)


def _slim_elf(src: _Input, out: _Output, req: _Request) -> SlimReport:
    same_size, view = req.same_size, src.view
    head = elf.file_header(view)
    if bytes(view[-len(_MODULE_SIGNATURE):]) == _MODULE_SIGNATURE:
        raise UnsupportedError(f"{src.name} is signed (an appended module signature): "
                               "any rewrite invalidates the signature")
    if head.type == elf.ET_REL:
        return _slim_object(src, head, out, req)
    if head.type not in (elf.ET_DYN, elf.ET_EXEC):
        raise UnsupportedError(f"ELF type {head.type} is not a shared library or executable")
    sections = elf.sections(view, head)
    phdrs = elf.program_headers(view, head)
    present = _present(sections)
    # with everywhere, a file of hidden containers alone (no .nv_fatbin) is CUDA's to slim
    kind = _kind(src.name, req, present or ([_CUDA] if req.everywhere and req.vendor in
                                             (None, _CUDA.vendor) else []), _rdc(sections))
    fat, modules, by_section = _fat_sections(src.name, view, sections, kind, req, alloc=True,
                                             fd=src.fd)
    ranges = [(s.name, s.header.addr, s.header.addr + s.header.size) for s in fat]
    pointers, others = _references(view, head, sections, phdrs, ranges,
                                   _wrappers(view, sections, kind))
    ours = [p for p in pointers if any(lo <= p.target < hi for _, lo, hi in ranges)]
    starts = {s.header.addr + m.old_offset: m for s in fat for m in by_section[s.index]}
    for p in ours:
        if p.target not in starts:
            raise UnsupportedError(f"the wrapper record at {p.slot - 8:#x} points at "
                                   f"{p.target:#x}, inside {fat[0].name} but not at a "
                                   "container")
    # in place (same_size) a reference to a container's start still finds it; nothing else
    # (a pointer into a container's entries) survives a rewrite
    unsafe = [what for what, target in others if not same_size or target not in starts]
    if unsafe:
        raise UnsupportedError(
            f"other references into the device code than the {kind.wrapper_section} "
            "pointers: "
            + "; ".join(unsafe[:3]) + (f" (+{len(unsafe) - 3} more)" if len(unsafe) > 3 else "")
            + ("" if same_size else
               f"; {option('same_size')} rewrites each container in place, moving none"))
    hidden, left = (_hidden_modules(view, {s.name: s.header.offset for s in sections},
                                    len(modules), req, src.path)
                    if req.everywhere and kind is _CUDA else ([], []))
    if not modules and not hidden and not left:
        raise FormatError(f"{src.name}: no device code to slim (no .nv_fatbin, and the deep "
                          "scan found no fatbin container or cubin elsewhere)", offset=None)
    kind.plan(modules, req)
    if hidden:
        _plan(hidden, req)
        left += _fit(hidden)
    reports = kind.finish(modules + hidden, req)

    contents, moved = _pack([(s.index, s.name, s.header.size) for s in fat], by_section,
                            same_size, kind.align, {
        s.index: {p.target - s.header.addr for p in ours
                  if s.header.addr <= p.target < s.header.addr + s.header.size} for s in fat})
    resizes = [elf_edit.Resize(s, contents[s.index]) for s in fat]
    moves = {s.header.addr + old: s.header.addr + at
             for s in fat for old, at in moved[s.index].items()}
    writes: list[tuple[int, bytes | memoryview]] = []
    for p in ours:
        new = moves.get(p.target)
        if new is None:
            continue
        if p.in_place:  # else the linker left 0 there, and 0 stays
            writes.append((p.slot_offset, _U64.pack(new)))
        for rs, i, r in p.relas:  # where the loader takes it from
            at = rs.header.offset + i * elf.Rela.FORMAT.size
            writes.append((at, elf.Rela(r.offset, r.info, new).pack()))
    writes += _symtab_writes(view, sections, {s.index for s in fat}, moves)
    offsets = {s.name: s.header.offset for s in sections}
    rewritten = [m for m in hidden if m.new is not m.old]
    writes += [w for m in rewritten for at in (offsets[m.section] + m.old_offset,)
               for w in ((at, m.data), (at + len(m.data), bytes(m.zeroed)))]
    give_back(src.view)  # planning read the device code; the rewrite copies the file
    with src.file() as source, out.file() as tmp:
        layout = elf_edit.rewrite(source, tmp, resizes, writes, shrink=not same_size)
        _verify(tmp, modules + rewritten, pointers, moves)
    report = kind.report(len(view), layout.output_size, modules + hidden, req, reports, layout,
                         same_size)
    return _with_hidden(report, hidden, left) if req.everywhere and kind is _CUDA else report


def _with_hidden(report: SlimReport, hidden: Sequence[_Module],
                 left: Sequence[tuple[str, int, int]]) -> SlimReport:
    """``report`` with what ``everywhere`` did (:class:`HiddenSlim`); hidden containers left no
    image are not counted among the modules the runtime still registers (the library hands
    a container to the driver only on the GPUs it was built for)."""
    emptied = sum(bool(_loadable(m.old.entries)) and not m.empty and not _loadable(m.new.entries)
                  for m in hidden)
    return dataclasses.replace(report, no_image=report.no_image - emptied, hidden=HiddenSlim(
        len(hidden), sum(m.new is not m.old for m in hidden), sum(m.zeroed for m in hidden),
        emptied, tuple(left)))


def _hidden_modules(view: memoryview, offsets: dict[str, int], first: int,
                    req: _Request, path: Path | None = None
                    ) -> tuple[list[_Module], list[tuple[str, int, int]]]:
    """The deep scan's fatbin containers (:func:`fatbinkit.scan.scan` with ``everywhere``),
    each a module numbered from ``first`` that stays where it is; and what it found that is
    left as it was, ``(what, count, stored bytes)``: zstd-compressed and bare cubins, whose
    sizes the library's own tables record beside their pointers (cuBLASLt's
    ``{pointer, pointer, u32 compressed, u32 uncompressed}`` records). The scan reads the
    file at ``path`` where there is one (``view`` holds its bytes): given a file, it reads what
    it searches without mapping all of it into this process (a scan of the mapped bytes takes
    every page of cuBLASLt's 517 MiB)."""
    from .scan import scan_modules

    groups: dict[int, list[DeviceCode]] = {}
    found = scan_modules(view if path is None else path, everywhere=True,
                         max_decompressed=req.budget)[0]
    for c in found:
        if c.hidden:
            groups.setdefault(c.container, []).append(c)
    modules: list[_Module] = []
    left: dict[str, list[int]] = {}
    for codes in groups.values():
        at = min(c.offset for c in codes)
        magic = bytes(view[at : at + 4])
        if magic in (ZSTD_MAGIC, elf.ELFMAG):
            what = "zstd-compressed cubins" if magic == ZSTD_MAGIC else "bare cubins"
            n, size = left.setdefault(what, [0, 0])
            left[what] = [n + 1, size + codes[0].stored]
            continue
        start = at - CONTAINER_HEADER_SIZE  # finding.search: a 16-byte header, then entries
        container = FatbinContainer.parse(view, start)
        section = codes[0].source
        modules.append(_Module(section, first + len(modules), start - offsets[section],
                               container, [], new_offset=start - offsets[section],
                               hidden=True))
    return modules, [(w, n, b) for w, (n, b) in left.items()]


def _fit(hidden: list[_Module]) -> list[tuple[str, int, int]]:
    """Each planned hidden container zero-filled to its old size, or, where rewritten it would
    not fit there (a codec that stores it larger), left as it was: counted as such."""
    grew = []
    for m in hidden:
        size = len(m.old)
        if len(m.data) > size:
            grew.append(size)
            m.kept, m.new, m.data = list(range(len(m.old.entries))), m.old, m.old.to_bytes()
        elif len(m.new.entries) == len(m.old.entries) and all(
                new is old for new, old in zip(m.new.entries, m.old.entries, strict=True)):
            m.new = m.old  # every entry kept as stored (_recode): nothing to write
        else:
            m.zeroed = size - len(m.data)
    return [("containers that rewritten would not fit in place", len(grew), sum(grew))
            ] if grew else []


def _slim_pe(src: _Input, out: _Output, req: _Request) -> SlimReport:
    """A Windows DLL, ``.pyd`` or EXE: the containers of ``.nv_fatb`` and of ``__nv_rel``
    (relocatable device code, ``-rdc``) are repacked at each section's start and its raw data
    cut to them (:func:`fatbinkit.formats.pe.shrink`: the file shrinks, the virtual layout
    stays); each ``.nvFatBi`` wrapper's data pointer (an absolute address with a DIR64 base
    relocation, which stays valid: the slot does not move) gets its container's new address.
    With ``-rdc`` each object's version-1 wrapper points at its container in ``__nv_rel``: the
    device-link stub (CUDA's ``crt/link.stub``, ``__cudaRegisterLinkedBinary``) reads that
    pointer at start-up into the array its version-2 wrapper names, so those are the only
    references into ``__nv_rel`` too. Any other base-relocated pointer into the device code is
    refused, as is an Authenticode signature unless ``strip_signature``."""
    view = src.view
    image = pe.read(view)
    if image.optional is None:
        raise UnsupportedError(f"{src.name} is a COFF object (.obj): its device code "
                               "is slimmed where it is linked (the DLL or EXE)")
    if image.optional.magic != pe.PE32_PLUS:
        raise UnsupportedError(f"{src.name} is a 32-bit (PE32) image: CUDA's are 64-bit")
    base = image.optional.image_base
    names = {s.name for s in image.sections if s.size}
    present = [k for k in _KINDS if names & set(k.pe_sections)]
    kind = _kind(src.name, req, present or ([_CUDA] if req.everywhere and req.vendor in
                                            (None, _CUDA.vendor) else []))
    fat = [(i, s) for i, s in enumerate(image.sections) if s.name in kind.pe_sections and s.size]
    modules: list[_Module] = []
    by_section: dict[int, list[_Module]] = {}
    for i, s in fat:
        by_section[i] = kind.modules_of(view, s.offset, s.size, s.name, len(modules),
                                        req.budget)
        modules += by_section[i]
    ranges = {i: (base + s.header.virtual_address, base + s.header.virtual_address + s.size)
              for i, s in fat}
    wrappers = [w for sec in image.sections if sec.name in kind.pe_wrapper_sections
                for w in _wrapper_records(view, sec.name, sec.offset, sec.size,
                                          sec.header.virtual_address, kind)]  # slots as RVAs
    starts = {lo + m.old_offset: m for i, (lo, _) in ranges.items() for m in by_section[i]}
    referenced: dict[int, set[int]] = {i: set() for i, _ in fat}
    for w in wrappers:
        inside = [i for i, (lo, hi) in ranges.items() if lo <= w.target < hi]
        if inside and w.target not in starts:
            raise UnsupportedError(f"the wrapper record at RVA {w.slot - 8:#x} points at "
                                   f"{w.target:#x}, inside {image.sections[inside[0]].name} "
                                   "but not at a container")
        if inside:
            referenced[inside[0]].add(w.target - ranges[inside[0]][0])
    _pe_references(view, image, ranges, {w.slot for w in wrappers}, set(starts),
                   req.same_size)
    offsets = {s.name: s.offset for s in reversed(image.sections)}  # the first of a name
    hidden, left = (_hidden_modules(view, offsets, len(modules), req, src.path)
                    if req.everywhere and kind is _CUDA else ([], []))
    if not modules and not hidden and not left:
        raise FormatError(f"{src.name}: no device code to slim (no .nv_fatb, and the deep "
                          "scan found no fatbin container or cubin elsewhere)", offset=None)
    kind.plan(modules, req)
    if hidden:
        _plan(hidden, req)
        left += _fit(hidden)
    reports = kind.finish(modules + hidden, req)
    contents, moved = _pack([(i, s.name, s.size) for i, s in fat], by_section, req.same_size,
                            kind.align, referenced)
    whole = {i: contents[i].joined() for i, _ in fat}  # the PE writer takes them whole
    if req.same_size:  # every byte where it was: the section keeps its raw size
        whole = {i: whole[i].ljust(s.size, b"\0") for i, s in fat}
    moves = {ranges[i][0] + old: ranges[i][0] + at for i in moved for old, at in moved[i].items()}
    writes = [(w.slot_offset, _U64.pack(moves[w.target])) for w in wrappers
              if w.target in moves]
    rewritten = [m for m in hidden if m.new is not m.old]
    writes += [(offsets[m.section] + m.old_offset, bytes(m.data) + bytes(m.zeroed))
               for m in rewritten]
    data = pe.shrink(view, image, whole, writes, strip_signature=req.strip_signature)
    _verify_pe(data, image, by_section,
               [(w.slot, moves.get(w.target, w.target)) for w in wrappers])
    after = {s.name: s.offset for s in reversed(pe.read(data).sections)}
    for m in rewritten:  # each where it was in its section, its freed tail zeros
        at = after[m.section] + m.old_offset
        if data[at : at + len(m.data) + m.zeroed] != bytes(m.data) + bytes(m.zeroed):
            raise FormatError(f"{m.label}: the output does not hold the planned bytes")
    out.write(data)
    report = kind.report(len(view), len(data), modules + hidden, req, reports, None,
                         req.same_size)
    return _with_hidden(report, hidden, left) if req.everywhere and kind is _CUDA else report


def _pe_references(view: memoryview, image: pe.PeFile, ranges: dict[int, tuple[int, int]],
                   wrapper_slots: set[int], starts: set[int], same_size: bool) -> None:
    """Refuse what else points into the device code, which a move would leave pointing at the
    wrong bytes (in place, ``same_size``, a pointer at a container's start still finds it):
    base-relocated pointers other than the wrappers', base relocations of another type than
    DIR64 (a PE32+ image has no other), exports (their RVAs) and data directories. Code reaches
    data RIP-relative, with no relocation: like the ELF path, only the wrappers are expected
    there (nvcc's registration code passes the wrapper, never the container)."""
    assert image.optional is not None
    base = image.optional.image_base
    inside = [(lo - base, hi - base) for lo, hi in ranges.values()]  # as RVAs

    def into(rva: int, size: int = 1) -> bool:
        return any(lo < rva + size and rva < hi for lo, hi in inside)

    unsafe = []
    for rva, kind in pe.base_relocations(view, image):
        if into(rva):
            unsafe.append(f"a base relocation at RVA {rva:#x}, inside the device code")
        elif kind != pe.IMAGE_REL_BASED_DIR64:
            unsafe.append(f"a base relocation of type {kind} at RVA {rva:#x} (a PE32+ image "
                          "has DIR64 ones only)")
        elif rva not in wrapper_slots:
            at = pe.rva_offset(image, rva, _U64.size)
            if at is None:
                continue  # in uninitialised data: no address stored in the file
            (value,) = _U64.unpack_from(view, at)
            if into(value - base) and not (same_size and value in starts):
                unsafe.append(f"the pointer at RVA {rva:#x} points at {value:#x}")
    for k, (rva, size) in enumerate(image.optional.directories):
        if size and k != pe.IMAGE_DIRECTORY_ENTRY_SECURITY and into(rva, size):
            unsafe.append(f"data directory {k} (RVA {rva:#x}, {size} bytes)")
    for rva in pe.export_rvas(view, image):
        if into(rva):
            unsafe.append(f"an export at RVA {rva:#x}")
    if unsafe:
        raise UnsupportedError(
            "other references into the device code than the wrapper records: "
            + "; ".join(unsafe[:3]) + (f" (+{len(unsafe) - 3} more)" if len(unsafe) > 3 else ""))


def _verify_pe(data: bytearray, before: pe.PeFile, by_section: dict[int, list[_Module]],
               wrappers: Sequence[tuple[int, int]]) -> None:
    """Read the output back with the own reader: the same sections at the same addresses with
    the same virtual sizes (the raw size where that is 0) and image size, raw data aligned;
    every container where planned, byte for byte (``by_section``: by section index); every
    wrapper slot holding its container's address."""
    image = pe.read(data)
    assert image.optional is not None and before.optional is not None

    def layout(p: pe.PeFile) -> list[tuple[str, int, int]]:
        return [(s.name, s.header.virtual_address,
                 s.header.virtual_size or s.header.size_of_raw_data) for s in p.sections]

    align = image.optional.file_alignment
    if layout(image) != layout(before) or \
            image.optional.size_of_image != before.optional.size_of_image or \
            any(s.header.pointer_to_raw_data % align for s in image.sections):
        raise FormatError("the output's sections are not laid out as the input's")
    for i, modules in by_section.items():
        s = image.sections[i]
        for m in modules:
            at = s.offset + m.new_offset
            if m.new_offset + len(m.data) > s.size or bytes(data[at:at + len(m.data)]) != m.data:
                raise FormatError(f"{m.label}: the output does not hold the planned bytes")
    for slot, want in wrappers:
        where = pe.rva_offset(image, slot, _U64.size)
        if where is None or _U64.unpack_from(data, where)[0] != want:
            raise FormatError(f"wrapper slot at RVA {slot:#x} does not hold {want:#x} in the "
                              "output")




def _present(sections: Sequence[elf.Section]) -> list[_Kind]:
    """The kinds of device code whose sections an ELF file holds (with bytes)."""
    names = {s.name for s in sections if s.header.type != elf.SHT_NOBITS and s.header.size}
    return [k for k in _KINDS if names & set(k.sections)]


def _rdc(sections: Sequence[elf.Section]) -> bool:
    """Whether an ELF file holds AMD relocatable device code: the object-file form of a bundle
    of bitcode (``__CLANG_OFFLOAD_BUNDLE__<id>``) or LLVM's ``.llvm.offloading``."""
    return any(s.name.startswith(OBJECT_PREFIX) or s.name == OFFLOADING_SECTION
               for s in sections)


def _fat_sections(name: str, view: memoryview, sections: Sequence[elf.Section], kind: _Kind,
                  req: _Request, alloc: bool, fd: int | None = None
                  ) -> tuple[list[elf.Section], list[_Module], dict[int, list[_Module]]]:
    fat = [s for s in sections if s.name in kind.sections and s.header.type != elf.SHT_NOBITS
           and s.header.size]
    modules: list[_Module] = []
    by_section: dict[int, list[_Module]] = {}
    for s in fat:
        if alloc and not s.header.flags & elf.SHF_ALLOC:
            raise UnsupportedError(f"section {s.name} is not loaded (not SHF_ALLOC)")
        found = kind.modules_of(view, s.header.offset, s.header.size, s.name, len(modules),
                                req.budget, fd)
        by_section[s.index] = found
        modules += found
    return fat, modules, by_section


def _slim_object(src: _Input, head: elf.FileHeader, out: _Output, req: _Request) -> SlimReport:
    """A relocatable object (``nvcc -c``): each wrapper's pointer is an ``R_X86_64_64``
    relocation against the fatbin section (or a symbol in it); its addend follows the move."""
    same_size, view = req.same_size, src.view
    sections = elf.sections(view, head)
    kind = _kind(src.name, req, _present(sections), _rdc(sections))
    fat, modules, by_section = _fat_sections(src.name, view, sections, kind, req, alloc=False,
                                             fd=src.fd)
    fat_index = {s.index for s in fat}
    starts = {(s.index, m.old_offset) for s in fat for m in by_section[s.index]}
    wrapper = next((s for s in sections if s.name == kind.wrapper_section), None)
    if wrapper is not None:
        _wrappers(view, [wrapper], kind)  # checks magic and version of each record
    symtab = next((s for s in sections if s.header.type == elf.SHT_SYMTAB), None)
    symbols: list[tuple[int, int]] = []
    size = elf.Symbol.FORMAT.size
    if symtab is not None:
        h = symtab.header
        raw = view[h.offset : h.offset + h.size - h.size % size]
        symbols = [(shndx, value) for _n, _i, _o, shndx, value, _s in
                   elf.Symbol.FORMAT.iter_unpack(raw)]
    absolute = elf.ABS64.get(head.machine)
    pointers: list[tuple[elf.Section, int, elf.Rela, int, int]] = []  # + section, offset
    others: list[tuple[str, tuple[int, int]]] = []
    for rs in sections:
        h = rs.header
        if h.type not in (elf.SHT_RELA, elf.SHT_REL) or not h.size:
            continue
        if h.type == elf.SHT_REL:
            raise UnsupportedError(f"{rs.name}: REL relocations (no addend) are not supported")
        if h.info in fat_index:
            raise UnsupportedError(f"{rs.name} relocates the device code itself")
        raw = view[h.offset : h.offset + h.size - h.size % elf.Rela.FORMAT.size]
        for i, (offset, info, addend) in enumerate(elf.Rela.FORMAT.iter_unpack(raw)):
            sym = info >> 32
            if not 0 < sym < len(symbols) or symbols[sym][0] not in fat_index:
                continue
            shndx, value = symbols[sym]
            target = (shndx, value + addend)
            rela = elf.Rela(offset, info, addend)
            is_slot = (wrapper is not None and h.info == wrapper.index
                       and offset % FatbinWrapper.FORMAT.size == FatbinWrapper.DATA_OFFSET
                       and info & 0xFFFFFFFF == absolute)
            if is_slot and target in starts:
                pointers.append((rs, i, rela, shndx, value))
            else:
                others.append((f"{rs.name} entry {i} points into section {shndx} at "
                               f"{value + addend:#x}", target))
    unsafe = [what for what, target in others if not same_size or target not in starts]
    if unsafe:
        raise UnsupportedError(
            f"other references into the device code than the {kind.wrapper_section} "
            "pointers: "
            + "; ".join(unsafe[:3]) + ("" if same_size else
                                       f"; {option('same_size')} rewrites each container in "
                                       "place"))
    kind.plan(modules, req)
    reports = kind.finish(modules, req)
    referenced: dict[int, set[int]] = {s.index: set() for s in fat}
    for _rs, _i, r, shndx, value in pointers:
        referenced[shndx].add(value + r.addend)
    contents, moved = _pack([(s.index, s.name, s.header.size) for s in fat], by_section,
                            same_size, kind.align, referenced)
    resizes = [elf_edit.Resize(s, contents[s.index]) for s in fat]
    writes: list[tuple[int, bytes]] = []
    for rs, i, r, shndx, value in pointers:
        new = moved[shndx].get(value + r.addend)
        if new is not None:
            writes.append((rs.header.offset + i * elf.Rela.FORMAT.size,
                           elf.Rela(r.offset, r.info, new - value).pack()))
    if symtab is not None:
        h = symtab.header
        raw = view[h.offset : h.offset + h.size - h.size % size]
        for i, (name, info, other, shndx, value, sz) in enumerate(
                elf.Symbol.FORMAT.iter_unpack(raw)):
            if shndx in fat_index and value in moved[shndx]:
                writes.append((h.offset + i * size, elf.Symbol(
                    name, info, other, shndx, moved[shndx][value], sz).pack()))
    with src.file() as source, out.file() as tmp:
        layout = elf_edit.rewrite_object(source, tmp, resizes, writes, shrink=not same_size)
        _verify_object(tmp, modules)
    return kind.report(len(view), layout.output_size, modules, req, reports, layout,
                       same_size)


def _verify_object(path: os.PathLike[str], modules: Sequence[_Module]) -> None:
    """Every container where planned in the written object, byte for byte."""
    with open(path, "rb") as f:
        src = elf.FileSource(f.fileno(), os.fstat(f.fileno()).st_size)
        sections = {s.name: s for s in elf.sections(src)}
        for m in modules:
            at = sections[m.section].header.offset + m.new_offset
            if not _holds(src, at, m.data):
                raise FormatError(f"{m.label}: the output does not hold the planned bytes")


def _holds(src: elf.FileSource, at: int, want: bytes | memoryview) -> bool:
    """Whether the file holds ``want`` at ``at``: compared 1 MiB at a time, as bytes (a
    memoryview compares a few times slower), neither held whole."""
    for i in range(0, len(want), _STEP):
        part = bytes(want[i : i + _STEP])
        if src.read(at + i, len(part)) != part:
            return False
        _give_back_payload(want[i : i + _STEP])  # a spilled module's pages: read once
    return True


def _pack(fat: Sequence[tuple[int, str, int]], by_section: dict[int, list[_Module]],
          same_size: bool, align: int, referenced: dict[int, set[int]]
          ) -> tuple[dict[int, elf_edit.Pieces], dict[int, dict[int, int]]]:
    """Each fatbin section's new contents (``fat``: its key, name and size): referenced
    containers packed at its start (each at a multiple of ``align`` from it: 8 for fatbin
    containers, 4096 for bundles), the others (and all, with ``same_size``)
    where they were; and per section the containers that moved (old offset -> new).
    ``referenced``: per section, the offsets of the containers a wrapper points at."""
    contents: dict[int, elf_edit.Pieces] = {}
    moved: dict[int, dict[int, int]] = {}
    for key, name, size in fat:
        parts: list[tuple[int, bytes | memoryview]] = []  # the modules' own bytes, never joined
        end = 0
        moved[key] = {}
        for m in by_section[key]:
            m.unreferenced = m.old_offset not in referenced[key]
            pinned = same_size or m.unreferenced
            at = m.old_offset if pinned else -(-end // align) * align
            if at < end:
                raise UnsupportedError(f"{m.label} cannot stay where it was: the containers "
                                       "before it grew")
            # in steps: the rewrite gives back a spilled view's pages after every few MiB
            # written, and a module's may be more (NCCL 2.28's largest is 56 MiB)
            parts.extend((at + k, m.data[k : k + _SPILL_HELD])
                         for k in range(0, len(m.data), _SPILL_HELD))
            end = at + len(m.data)
            m.new_offset = at
            if at != m.old_offset:
                moved[key][m.old_offset] = at
        if end > size:
            raise UnsupportedError(
                f"{name}: the rewritten device code ({end} bytes) does not fit its "
                f"{size} bytes, and a section of a linked file cannot grow: keep a "
                "codec that stores it smaller")
        contents[key] = elf_edit.Pieces(tuple(parts), end)
    return contents, moved


def _symtab_writes(view: memoryview, sections: Sequence[elf.Section], fat: set[int],
                   moves: dict[int, int]) -> list[tuple[int, bytes]]:
    """``.symtab`` symbols at a moved container's start (``fatbinData``) follow it."""
    writes = []
    size = elf.Symbol.FORMAT.size
    for s in sections:
        h = s.header
        if h.type != elf.SHT_SYMTAB or h.entsize != size:
            continue
        raw = view[h.offset : h.offset + h.size - h.size % size]
        for i, (name, info, other, shndx, value, sz) in enumerate(
                elf.Symbol.FORMAT.iter_unpack(raw)):
            if shndx in fat and value in moves:
                writes.append((h.offset + i * size,
                               elf.Symbol(name, info, other, shndx, moves[value], sz).pack()))
    return writes


def _verify(path: os.PathLike[str], modules: Sequence[_Module], pointers: Sequence[_Pointer],
            moves: dict[int, int]) -> None:
    """Read the output back with the own reader (its tables, each container, each wrapper
    pointer): every container where planned, byte for byte, and every wrapper pointing at it
    where the loader takes the pointer from (its RELA records, same slot and type, else the
    slot), the slot holding that value where it did before and 0 where it held 0."""
    with open(path, "rb") as f:
        src = elf.FileSource(f.fileno(), os.fstat(f.fileno()).st_size)
        head = elf.file_header(src)
        sections = elf.sections(src, head)
        by_name = {s.name: s for s in sections}
        phdrs = elf.program_headers(src, head)
        read = 0
        for m in modules:
            s = by_name[m.section].header
            want = m.data
            at = s.offset + m.new_offset
            if elf_edit.vaddr_offset(phdrs, s.addr + m.new_offset, len(want)) != at or \
                    not _holds(src, at, want):
                raise FormatError(f"{m.label}: the output does not hold the planned bytes "
                                  "where the loader maps them")
            read += len(want)
            if read >= _SPILL_HELD:
                give_back(want)
                read = 0
            if m.zeroed and src.read(at + len(want), m.zeroed) != bytes(m.zeroed):
                raise FormatError(f"{m.label}: its freed tail is not zero-filled in the output")
        size = elf.Rela.FORMAT.size
        for p in pointers:
            target = moves.get(p.target, p.target)
            off = elf_edit.vaddr_offset(phdrs, p.slot, 8)
            if off is None:
                raise FormatError(f"wrapper slot {p.slot:#x} is not mapped in the output")
            (value,) = _U64.unpack(src.read(off, 8))
            if value != (target if p.in_place else p.stored):
                raise FormatError(f"wrapper slot {p.slot:#x} holds {value:#x} in the output")
            for rs, i, r in p.relas:
                got = elf.Rela.FORMAT.unpack(
                    src.read(sections[rs.index].header.offset + i * size, size))
                if got != (r.offset, r.info, target):
                    raise FormatError(f"{rs.name} entry {i} of wrapper slot {p.slot:#x} reads "
                                      f"{got} in the output")


@dataclass(frozen=True)
class WheelReport:
    """The outcome of :func:`slim_wheel` (or :func:`slim_archive`: ``kind`` "archive"): one row
    per ELF file with device code (its :class:`SlimReport`, or why it was kept as it was), the
    wheel's sizes, the signature files left out. A row is named by its path inside the wheel
    (``file``, as ``ls`` and ``check`` of a wheel name it) or by the archive's object
    (``member``, as cuobjdump's ``member LIB:OBJECT`` line)."""

    input_size: int
    output_size: int
    files: tuple[tuple[str, SlimReport | str], ...]
    dropped_signatures: tuple[str, ...] = ()
    kind: str = "wheel"
    output: Path | None = None  # the file written (None: the output is ``data``)
    data: bytes | None = field(default=None, repr=False)  # the output, when no file was given

    @property
    def saved(self) -> int:
        return self.input_size - self.output_size

    def __repr__(self) -> str:
        data = "" if self.data is None else f", data=<{len(self.data):,} bytes>"
        slimmed = sum(isinstance(r, SlimReport) for _, r in self.files)
        return (f"WheelReport(kind={self.kind!r}, input_size={self.input_size}, "
                f"output_size={self.output_size}, files=<{len(self.files)}, {slimmed} "
                f"slimmed>, output={self.output!r}{data})")

    def to_dict(self) -> dict[str, Any]:
        key = "member" if self.kind == "archive" else "file"
        return {
            "kind": self.kind,
            "input_size": self.input_size, "output_size": self.output_size,
            "files": [{key: name, **(r.to_dict() if isinstance(r, SlimReport)
                                     else {"kept": r})} for name, r in self.files],
            "modules_without_image": sum(r.no_image for _, r in self.files
                                         if isinstance(r, SlimReport)),
            "emptied": [n for n, r in self.files if isinstance(r, SlimReport) and r.emptied],
            "dropped_signatures": list(self.dropped_signatures),
        }

    def __str__(self) -> str:
        width = max((len(n) for n, _ in self.files), default=10)
        lines = []
        before = after = 0
        for name, r in self.files:
            if isinstance(r, SlimReport):
                before += r.input_size
                after += r.output_size
                pct = 100 * r.saved / r.input_size if r.input_size else 0.0
                lines.append(f"  {name:{width}}  {r.input_size:>14,} -> {r.output_size:>14,}  "
                             f"-{pct:4.1f} %" + (f"  NO IMAGE LEFT ({option('allow_empty')})"
                                                 if r.emptied
                                                 else f"  {r.no_image} module(s) left with no "
                                                 "image" if r.no_image else ""))
            else:
                lines.append(f"  {name:{width}}  kept as is: {r}")
        pct = 100 * (before - after) / before if before else 0.0
        what = "libraries" if self.kind == "wheel" else "objects"
        lines.append(f"  {what:{width}}  {before:>14,} -> {after:>14,}  -{pct:4.1f} %")
        pct = 100 * (self.input_size - self.output_size) / self.input_size
        lines.append(f"  {self.kind:{width}}  {self.input_size:>14,} -> "
                     f"{self.output_size:>14,}  -{pct:4.1f} %")
        checks: dict[str, list[Any]] = {}
        for _, r in self.files:
            if isinstance(r, SlimReport):
                for a in r.archs:
                    checks.setdefault(a.name, []).append(a)
        for sm, rows in checks.items():
            same = all(a.same for a in rows)
            loading = sum(a.modules for a in rows)
            lines.append(f"{sm}: {'same image' if same else 'A DIFFERENT IMAGE'} in every "
                         f"module of {len(rows)} {what} " + (f"({loading} modules load)" if
                                                             loading else "(NO MODULE LOADS)"))
        reports = [r for _, r in self.files if isinstance(r, SlimReport)]
        stored_as: dict[str, int] = {}
        for r in reports:
            for how, n in r.stored_as:
                stored_as[how] = stored_as.get(how, 0) + n
        if stored_as and reports[0].codec:
            level = f" (level {reports[0].level})" if reports[0].level is not None else ""
            lines.append(f"as {reports[0].codec}{level}: " + "; ".join(
                f"{n} {how}" for how, n in sorted(stored_as.items(),
                                                  key=lambda kv: (-kv[1], kv[0]))))
        no_image = sum(r.no_image for r in reports)
        if no_image:
            lines.append(f"warning: {no_image} module(s) left with no image (no {_asked()} "
                         "loads them): the runtime still registers them and their kernels load "
                         "on no GPU")
        if self.dropped_signatures:
            lines.append("left out (signatures over the old RECORD): "
                         + ", ".join(self.dropped_signatures))
        return "\n".join(lines)


def has_device_code(path: os.PathLike[str]) -> bool:
    """Whether the ELF or PE file at ``path`` (not a cubin) holds a fatbin section to slim; its
    section table is read, nothing else."""
    with open_input(path) as f:
        src = elf.FileSource(f.fileno(), os.fstat(f.fileno()).st_size)
        if pe.is_pe(src.read(0, min(len(src), 1024))):
            image = pe.read(_map(f.fileno(), len(src)))
            return any(s.name in k.pe_sections and s.size for s in image.sections
                       for k in _KINDS)
        head = elf.file_header(src)
        return not vendors.device_machine(head.machine) and bool(
            _present(elf.sections(src, head)))


def slim_wheel(source: FilePath | Content, output_dir: FilePath | None = None, *,
               archs: Sequence[ArchLike] | None = None, ptx: PtxPolicy = "keep",
               codec: Codec | None = None, level: int | None = None, same_size: bool = False,
               allow_newer_driver: bool = False, exact: bool = False,
               strip_signature: bool = False, allow_empty: bool = False,
               spirv: SpirvPolicy = "keep", allow_newer_rocm: bool = False,
               everywhere: bool = False,
               max_decompressed: int | DecompressionBudget | None = None,
               progress: Progress = None, jobs: int | None = None) -> WheelReport:
    """:func:`slim` every ELF or PE file with device code inside the wheel ``source`` (on
    ``jobs`` processes) and write the wheel, ``RECORD`` made anew and its name (tags) kept, into
    the folder ``output_dir`` (:attr:`WheelReport.output` is the file written); with no folder,
    the new wheel is :attr:`WheelReport.data`. ``source`` is the wheel's path or its bytes
    (which have no file name: then ``output_dir`` must be None). The keywords are
    :func:`slim`'s; ``progress`` counts the libraries done. ``max_decompressed`` as a number
    caps each library; a :class:`~fatbinkit.formats.fatbin.DecompressionBudget` is charged
    with what each library inflated as it completes (each gets what is left of it).

    A library whose layout cannot be rewritten safely stays as it was (the report says why);
    libraries pruning would leave no image (:class:`~fatbinkit.errors.EmptiedError`, unless
    ``allow_empty``) are named together; any other error fails the whole wheel, naming the
    member. On failure nothing is written: no wheel, and no folder this call created. A wheel
    written over the input (the folder it is in) is an
    :class:`~fatbinkit.errors.InvalidArgumentError`, before anything is read.
    """
    src = as_input(source, "slim_wheel() source")
    out_dir = _target(output_dir, "slim_wheel() output folder")
    opts = _options(archs, ptx, codec, level, same_size=same_size,
                    allow_newer_driver=allow_newer_driver, exact=exact,
                    strip_signature=strip_signature, allow_empty=allow_empty, jobs=jobs,
                    progress=progress, spirv=spirv, allow_newer_rocm=allow_newer_rocm,
                    everywhere=everywhere)
    if out_dir is not None and not isinstance(src, Path):
        raise InvalidArgumentError(
            "slim_wheel(): a wheel given as bytes has no file name, which the wheel written "
            "into a folder takes: give output_dir=None (the new wheel is report.data) or the "
            "wheel's path")
    if isinstance(src, Path) and out_dir is not None:
        _not_the_input(src, out_dir / src.name)
    return _slim_wheel_at(src, out_dir, opts, max_decompressed, progress)


def _slim_wheel_at(source: Path | Content, out_dir: Path | None, opts: _Options,
                   max_decompressed: int | DecompressionBudget | None,
                   progress: Progress) -> WheelReport:
    from . import wheel

    if not isinstance(source, Path):
        if bytes(source[:4]) != _ZIP_MAGIC:
            raise FormatError("the input is not a wheel (a zip file)", offset=0)
        with tempfile.TemporaryDirectory(prefix="fatbinkit-") as work:
            path = Path(work, "input.whl")
            path.write_bytes(source)
            return _slim_wheel_at(path, None, opts, max_decompressed, progress)
    if not wheel.is_wheel(source):
        raise FormatError(f"{source} is not a wheel (a .whl zip file)")
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="fatbinkit-") as work:
            target = Path(work, source.name)
            report = _slim_wheel(source, Path(work), target, opts, max_decompressed, progress)
            return dataclasses.replace(report, data=target.read_bytes())
    made = _output_folder(out_dir)
    try:
        report = _slim_wheel(source, out_dir, out_dir / source.name, opts, max_decompressed,
                             progress)
    except BaseException:
        for p in reversed(made):  # deepest first; only those this call created, if empty
            with contextlib.suppress(OSError):
                p.rmdir()
        raise
    return dataclasses.replace(report, output=out_dir / source.name)


def _output_folder(path: Path) -> list[Path]:
    """Make the output folder ``path`` (and its missing parents): the folders made, parents
    first. A file in the way is an :class:`~fatbinkit.errors.OutputError`."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"cannot write into {path}: it is a file, not a folder (a wheel is "
                          "written into a folder, under its own name)")
    missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
    made: list[Path] = []
    try:
        for p in missing:
            p.mkdir()
            made.append(p)
    except OSError as e:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                p.rmdir()
        raise OutputError(f"cannot write into {path}: {e.strerror or e}") from e
    return made


def _slim_member(job: tuple[str, str, _Options, int | None, bool]
                 ) -> tuple[SlimReport | str, int]:
    """One library of a wheel (in a worker process): its report, or why it stays as it was;
    and the bytes it inflated. Advice is spelled as the caller's (the command line's flags)."""
    src, dst, opts, limit, cli = job
    with spelled_for_cli() if cli else contextlib.nullcontext(), _opened(Path(src)) as inp:
        budget = DecompressionBudget.of(limit, len(inp.view))
        try:
            return _slim(inp, _Output(Path(dst), inp.mode), opts, budget, None), budget.used
        except UnsupportedError as e:
            return f"refused: {e}", budget.used


def _slim_wheel(src: Path, out_dir: Path, target: Path, opts: _Options,
                max_decompressed: int | DecompressionBudget | None,
                progress: Progress) -> WheelReport:
    from . import wheel

    shared = max_decompressed if isinstance(max_decompressed, DecompressionBudget) else None
    if max_decompressed is not None and shared is None:
        DecompressionBudget.of(max_decompressed, 0)  # checks it
    cli = option("allow_empty") == "--allow-empty"
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".fatbinkit-") as work:
        jobs: list[tuple[str, str, _Options, int | None, bool]] = []
        names: list[str] = []
        for name, path in wheel.extract_binaries(src, Path(work)):
            try:
                if not has_device_code(path):
                    path.unlink()
                    continue
            except FatbinkitError as e:
                raise type(e)(f"{name}: {e}") from e
            names.append(name)
            limit = (shared.limit - shared.used if shared is not None else
                     max_decompressed if isinstance(max_decompressed, int) else None)
            jobs.append((str(path), str(path.with_suffix(".out")), opts, limit, cli))
        results: list[SlimReport | str] = [""] * len(jobs)
        emptied: dict[int, str] = {}
        with ProcessPoolExecutor(max_workers=min(len(jobs), opts.jobs) or 1) as pool, \
                reporter(progress, len(jobs), "library", src.name) as report:
            futures = {pool.submit(_slim_member, job): i for i, job in enumerate(jobs)}
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    results[i], used = fut.result()
                    if shared is not None:
                        shared.charge(used, 0)
                except EmptiedError as e:
                    emptied[i] = e.reason
                except FatbinkitError as e:
                    raise type(e)(f"{names[i]}: {e}") from e
                report.advance(1, names[i])
        if emptied:
            raise EmptiedError(
                f"pruning would leave no device code for any GPU in {len(emptied)} of the "
                f"{len(jobs)} libraries of {src.name}: " + "; ".join(
                    f"{names[i]}: {why}" for i, why in sorted(emptied.items()))
                + f"; nothing written (accept it with {option('allow_empty')})")
        replaced = {name: Path(job[1]) for name, job, r in zip(names, jobs, results, strict=True)
                    if isinstance(r, SlimReport)}
        dropped = wheel.rewrite(src, target, replaced)
    return WheelReport(src.stat().st_size, target.stat().st_size,
                       tuple(zip(names, results, strict=True)), dropped)


def slim_archive(source: FilePath | Content, output: FilePath | None = None, *,
                 archs: Sequence[ArchLike] | None = None, ptx: PtxPolicy = "keep",
                 codec: Codec | None = None, level: int | None = None, same_size: bool = False,
                 allow_newer_driver: bool = False, exact: bool = False,
                 strip_signature: bool = False, allow_empty: bool = False,
                 spirv: SpirvPolicy = "keep", allow_newer_rocm: bool = False,
                 everywhere: bool = False,
                 max_decompressed: int | DecompressionBudget | None = None,
                 progress: Progress = None, jobs: int | None = None) -> WheelReport:
    """:func:`slim` every object with device code of the static library ``source`` (an ``ar``
    archive, GNU or BSD; not thin; its path or its bytes) and write the archive to ``output``
    (None: the new archive is :attr:`WheelReport.data`): members keep their order, names and
    headers but the size, and the symbol index points at their new places
    (:func:`fatbinkit.formats.archive.rewrite`). The keywords are :func:`slim`'s;
    ``progress`` counts the members done; ``max_decompressed`` as a number caps each object,
    a :class:`~fatbinkit.formats.fatbin.DecompressionBudget` is shared by them. An object whose
    layout cannot be rewritten safely stays as it was (the report says why); any other error
    fails the whole archive, naming the member, with nothing written. An object pruning leaves
    no image is written so (an object built for other GPUs only, as nvprune leaves it), but an
    archive none of whose objects keeps an image is refused
    (:class:`~fatbinkit.errors.EmptiedError`) unless ``allow_empty``. The output is read back:
    the same members, in order. An output that is the input file is an
    :class:`~fatbinkit.errors.InvalidArgumentError`, before anything is read."""
    src = as_input(source, "slim_archive() source")
    out = _target(output, "slim_archive() output")
    opts = _options(archs, ptx, codec, level, same_size=same_size,
                    allow_newer_driver=allow_newer_driver, exact=exact,
                    strip_signature=strip_signature, allow_empty=allow_empty, jobs=jobs,
                    progress=progress, spirv=spirv, allow_newer_rocm=allow_newer_rocm,
                    everywhere=everywhere)
    _not_the_input(src, out)
    return _slim_archive(src, out, opts, max_decompressed, progress)


def _slim_archive(source: Path | Content, output: Path | None, opts: _Options,
                  max_decompressed: int | DecompressionBudget | None,
                  progress: Progress) -> WheelReport:
    from .formats import archive

    each = dataclasses.replace(opts, allow_empty=True)  # judged for the whole archive below
    with _opened(source) as src:
        view = src.view
        members = archive.ar_members(view)
        if any(m.thin for m in members):
            raise UnsupportedError(f"{src.name} is a thin archive: it holds no member data; "
                                   "prune the objects it names")
        names: list[str] = []
        results: list[SlimReport | str] = []
        replaced: dict[int, bytes] = {}
        with tempfile.TemporaryDirectory(prefix="fatbinkit-") as work, \
                reporter(progress, len(members), "member", src.name) as done:
            for i, m in enumerate(members):
                data = view[m.offset : m.offset + m.size]
                done.advance(1, m.name)
                if elf.machine(data) in (None, elf.EM_CUDA):
                    continue  # not a host object: kept as it is
                obj = Path(work, f"{i}.o")
                obj.write_bytes(data)
                try:
                    if not has_device_code(obj):
                        continue
                    report: SlimReport | str = _slim_one(obj, None, each, max_decompressed,
                                                         None)
                except UnsupportedError as e:
                    report = f"refused: {e}"
                except FatbinkitError as e:
                    raise type(e)(f"member {m.name}: {e}") from e
                names.append(m.name)
                if isinstance(report, SlimReport):
                    assert report.data is not None
                    replaced[m.header] = report.data
                    report = dataclasses.replace(report, data=None)
                results.append(report)
        if not opts.allow_empty and results and all(
                isinstance(r, SlimReport) and r.emptied for r in results):
            raise EmptiedError(
                f"no {_asked()} loads an image of any of the {len(results)} objects with "
                f"device code of {src.name}: pruning would leave it no device code for any GPU; "
                f"nothing written (accept it with {option('allow_empty')})")
        new = archive.rewrite(view, replaced)
        mode = src.mode
    after = archive.ar_members(new)
    if [m.name for m in after] != [m.name for m in members]:  # cannot happen: the check proves it
        raise FormatError(f"{src.name}: the rewritten archive does not list the same members")
    out = _Output(output, mode)
    out.write(new)
    return WheelReport(len(view), len(new), tuple(zip(names, results, strict=True)),
                       kind="archive", output=out.path, data=out.data)


@overload
def prune(source: Content, output: FilePath | None = None, *,
          archs: Sequence[ArchLike], ptx: PtxPolicy = "keep", codec: Codec | None = None,
          level: int | None = None, same_size: bool = False, allow_newer_driver: bool = False,
          exact: bool = False, strip_signature: bool = False, allow_empty: bool = False,
          spirv: SpirvPolicy = "keep", allow_newer_rocm: bool = False,
          everywhere: bool = False,
          max_decompressed: int | DecompressionBudget | None = None, progress: Progress = None,
          jobs: int | None = None) -> SlimReport: ...


@overload
def prune(source: FilePath, output: FilePath | None = None, *,
          archs: Sequence[ArchLike], ptx: PtxPolicy = "keep", codec: Codec | None = None,
          level: int | None = None, same_size: bool = False, allow_newer_driver: bool = False,
          exact: bool = False, strip_signature: bool = False, allow_empty: bool = False,
          spirv: SpirvPolicy = "keep", allow_newer_rocm: bool = False,
          everywhere: bool = False,
          max_decompressed: int | DecompressionBudget | None = None, progress: Progress = None,
          jobs: int | None = None) -> SlimReport | WheelReport: ...


def prune(source: FilePath | Content, output: FilePath | None = None,
          archs: Sequence[ArchLike] | None = None, *, ptx: PtxPolicy = "keep",
          codec: Codec | None = None, level: int | None = None, same_size: bool = False,
          allow_newer_driver: bool = False, exact: bool = False, strip_signature: bool = False,
          allow_empty: bool = False, spirv: SpirvPolicy = "keep",
          allow_newer_rocm: bool = False, everywhere: bool = False,
          max_decompressed: int | DecompressionBudget | None = None,
          progress: Progress = None, jobs: int | None = None) -> SlimReport | WheelReport:
    """Keep what devices of ``archs`` load (the keywords are :func:`slim`'s).

    ``source`` is a path or bytes; ``output`` the file to write, or None: the output is the
    report's ``data``. Bytes in give a :class:`SlimReport` (one binary: a fatbin, an ELF or PE
    file): ``prune(data, archs=["sm_90"]).data``. A path may also name a static library
    (:func:`slim_archive`) or a wheel (:func:`slim_wheel`; ``output`` is then a folder): a
    :class:`WheelReport`. ``report.output`` is the file written. An output that is the input
    file (the same path, a link to it) is an :class:`~fatbinkit.errors.InvalidArgumentError`,
    before anything is read."""
    if not archs:
        raise InvalidArgumentError("prune() needs at least one arch to keep in archs")
    return _dispatch("prune()", source, output, _options(
        archs, ptx, codec, level, same_size=same_size, allow_newer_driver=allow_newer_driver,
        exact=exact, strip_signature=strip_signature, allow_empty=allow_empty, jobs=jobs,
        progress=progress, spirv=spirv, allow_newer_rocm=allow_newer_rocm, everywhere=everywhere),
        max_decompressed, progress)


@overload
def recompress(source: Content, output: FilePath | None = None, *, codec: Codec,
               level: int | None = None, same_size: bool = False,
               allow_newer_driver: bool = False, strip_signature: bool = False,
               allow_newer_rocm: bool = False, everywhere: bool = False,
               max_decompressed: int | DecompressionBudget | None = None,
               progress: Progress = None, jobs: int | None = None) -> SlimReport: ...


@overload
def recompress(source: FilePath, output: FilePath | None = None, *, codec: Codec,
               level: int | None = None, same_size: bool = False,
               allow_newer_driver: bool = False, strip_signature: bool = False,
               allow_newer_rocm: bool = False, everywhere: bool = False,
               max_decompressed: int | DecompressionBudget | None = None,
               progress: Progress = None, jobs: int | None = None
               ) -> SlimReport | WheelReport: ...


def recompress(source: FilePath | Content, output: FilePath | None = None,
               codec: Codec | None = None, *, level: int | None = None,
               same_size: bool = False, allow_newer_driver: bool = False,
               strip_signature: bool = False, allow_newer_rocm: bool = False,
               everywhere: bool = False,
               max_decompressed: int | DecompressionBudget | None = None,
               progress: Progress = None, jobs: int | None = None
               ) -> SlimReport | WheelReport:
    """Store every entry as ``codec`` (``"none"``, ``"lz4"``, ``"zstd"``; an AMD bundle as a
    whole: ``"none"``, ``"zstd"``, ``"zlib"``); ``source``,
    ``output`` and the result as for :func:`prune`, the keywords :func:`slim`'s."""
    if codec is None:
        raise InvalidArgumentError(f"recompress() needs a codec, one of {CODECS}")
    return _dispatch("recompress()", source, output, _options(
        None, "keep", codec, level, same_size=same_size, allow_newer_driver=allow_newer_driver,
        exact=False, strip_signature=strip_signature, allow_empty=False, jobs=jobs,
        progress=progress, allow_newer_rocm=allow_newer_rocm,
        everywhere=everywhere), max_decompressed, progress)


def _dispatch(what: str, source: object, output: object, opts: _Options,
              max_decompressed: int | DecompressionBudget | None,
              progress: Progress) -> SlimReport | WheelReport:
    from .wheel import is_wheel

    src = as_input(source, f"{what} source")
    out = _target(output, f"{what} output")
    if isinstance(src, Path):
        if is_wheel(src):
            if out is not None:
                _not_the_input(src, out / src.name)
            return _slim_wheel_at(src, out, opts, max_decompressed, progress)
        _not_the_input(src, out)
        if is_archive_file(src):
            return _slim_archive(src, out, opts, max_decompressed, progress)
        return _slim_one(src, out, opts, max_decompressed, progress)
    if is_archive(src):
        raise InvalidArgumentError(
            f"{what} of bytes slims one binary (a fatbin, ELF or PE file); these are a static "
            "library's (an ar archive): slim_archive(data, ...) returns a WheelReport")
    if bytes(src[:4]) == _ZIP_MAGIC:
        raise InvalidArgumentError(
            f"{what} of bytes slims one binary (a fatbin, ELF or PE file); these are a zip "
            "file's (a wheel?): slim_wheel(data, ...) returns a WheelReport")
    return _slim_one(src, out, opts, max_decompressed, progress)
