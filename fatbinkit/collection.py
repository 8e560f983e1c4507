"""Inputs that hold many binaries: a wheel, a folder, or one file, as a list of named members.

A member's ``name`` is its path inside the input (``torch/lib/libtorch_cuda.so`` in a wheel or an
unpacked site-packages folder), which is what two releases of a package have in common; a single
file is one member named after the file. Members are the files whose first bytes say ELF (a
``.so``, an executable, a cubin, a ``.o``), fatbin, ``ar`` archive (a static library) or PE (a
Windows DLL, ``.pyd`` or EXE; a ``.obj``);
folders are walked recursively, symbolic links skipped (``libfoo.so -> libfoo.so.1`` would count
the library twice). Reading a wheel member inflates that one member into memory; nothing is
unpacked to disk.

:func:`member_key` is what :func:`fatbinkit.diff.diff` pairs libraries by when their paths differ
between builds (``libcublasLt.so.12`` and ``libcublasLt.so.13``; a CPython extension's ABI tag).
:func:`alternatives` finds the libraries a package ships once per CUDA version and loads one of
(``libbitsandbytes_cuda118.so`` ... ``libbitsandbytes_cuda132.so``): :func:`check` judges each
group as the one build that serves the arch and driver.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import (
    FatbinkitError,
    FormatError,
    InputError,
    InvalidArgumentError,
    NoDeviceCodeError,
    OutputError,
    UnsupportedError,
    naming,
)
from .infile import ARCHIVE_SUFFIXES, as_path

if TYPE_CHECKING:
    from .binary import ArchFilter, Binary, Check, KernelFilter
    from .decision import Version
    from .driver import DriverLike
    from .formats.arch import Arch, ArchLike
    from .formats.codec import DecompressionBudget
    from .progress import Progress
    from .verdict import ArchVerdict, MinDriver, TotalVerdict

__all__ = ["MAX_MEMBER", "OPENING_MODULES", "Inventory", "Member", "TotalCheck", "alternatives",
           "binaries", "check", "cuda_build", "extract", "inventory", "member_key", "members",
           "min_driver",
           "named", "total_check"]

MAX_MEMBER = 8 << 30  # a wheel member declared larger than this is refused, not inflated
# ... and one that would inflate to more than this ratio of its compressed size (plus a floor), the
# rule of fatbinkit.formats.fatbin.DecompressionBudget.for_input: a deflate bomb is refused before
# it is
# read into memory.
# ELF; fatbin container (0xBA55ED50, little-endian); ar archive (a static library), thin or not
_MAGICS = (b"\x7fELF", b"\x50\xed\x55\xba")
_ARCHIVES = (b"!<arch>\n", b"!<thin>\n")
_HEAD = 1024  # bytes read to tell a binary: a PE image's signature is found through its 0x3C
_ABI_TAG = re.compile(r"\.(?:cpython|pypy|cp)[-\w]*(?=\.so$)|\.abi3(?=\.so$)")
_SO_VERSION = re.compile(r"(\.so)(?:\.\d+)+$")
_VENDOR_HASH = re.compile(r"-[0-9a-f]{8}(?=\.so)")  # auditwheel's libgomp-a34b3233.so.1
#: a CUDA version in a path: ``cuda``/``cu`` and 1 to 3 digits, ``x`` for any minor, not inside
#: a longer word (``cuda118``, ``cu121``, ``cuda12x``, ``cuda13``; not ``cudart``, ``cuda_fp16``)
_CUDA_BUILD = re.compile(r"(?<![a-z0-9])(cuda|cu)(\d{1,3})(x?)(?![a-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class Member:
    """One binary of an input: ``name`` relative to it, ``origin`` the file or folder given,
    ``path`` the file on disk (None inside a wheel: :meth:`read` inflates it)."""

    name: str
    origin: Path
    path: Path | None
    size: int

    @property
    def label(self) -> str:
        """How errors and reports name it: ``wheel.whl:torch/lib/x.so``, ``dir/lib/x.so``, or
        the file given."""
        if self.path is not None:
            return str(self.path)
        return f"{self.origin}:{self.name}"

    def read(self, wheel: zipfile.ZipFile | None = None) -> bytes:
        """The member's bytes, for wheel members (files are memory-mapped by their reader),
        through ``wheel`` when the caller has the wheel open (its member list is read once)."""
        if self.path is not None:
            raise InputError(f"{self.label}: a file on disk is opened by path, not read")
        with _zip_errors(self.label, "corrupt wheel member"), contextlib.ExitStack() as stack:
            zf = wheel or stack.enter_context(zipfile.ZipFile(self.origin))
            with zf.open(self.name) as src:
                return src.read()

    def __str__(self) -> str:
        return self.label


def member_key(name: str) -> str:
    """The part of a member's path that survives a new release: the file name with its
    soname version (``libcurand.so.10`` -> ``libcurand.so``) and CPython ABI tag
    (``_x.cpython-311-x86_64-linux-gnu.so`` -> ``_x.so``) and auditwheel's hash of a vendored
    library (``libgomp-a34b3233.so.1`` -> ``libgomp.so``) removed, in its folder
    (``torch/lib/libgomp.so``)."""
    folder, _, base = name.rpartition("/")
    base = _VENDOR_HASH.sub("", _ABI_TAG.sub("", _SO_VERSION.sub(r"\1", base)))
    return f"{folder}/{base}" if folder else base


def cuda_build(name: str) -> tuple[int, int] | None:
    """The CUDA version a path names a build for, ``(major, minor)`` (minor -1: any, ``12x``
    or ``cuda12``): 3 digits are major, major, minor (``cuda118``: 11.8, ``cu121``: 12.1), 2
    digits from 10 a major (``cuda12``) and below it major, minor (``cuda92``: 9.2), 1 digit a
    major. None when the path names none, or two different ones."""
    found = set()
    for m in _CUDA_BUILD.finditer(name):
        digits, wildcard = m.group(2), bool(m.group(3))
        if len(digits) == 3:
            version = (int(digits[:2]), int(digits[2]))
        elif len(digits) == 2 and digits[0] != "1":
            version = (int(digits[0]), int(digits[1]))
        else:
            version = (int(digits), -1)
        found.add((version[0], -1) if wildcard else version)
    return found.pop() if len(found) == 1 else None


def alternatives(names: Iterable[str]) -> list[tuple[str, tuple[str, ...]]]:
    """Groups of member paths that are one library built once per CUDA version, of which a
    package loads the one matching the CUDA it runs with (bitsandbytes' ``libbitsandbytes_
    cuda118.so`` ... ``_cuda132.so``, per-version twins such as ``_cuda12``/``_cuda13``,
    ``cu121``/``cu124`` folders): paths equal but for the CUDA version they name
    (:func:`cuda_build`), compared by :func:`member_key` (``libx_cuda12.so.12`` and
    ``libx_cuda13.so.13`` are twins), two versions at least. Each group is ``(its name with
    ``*`` for the version, its paths oldest build first)``, groups by name."""
    keyed: dict[str, list[tuple[tuple[int, int], str]]] = {}
    for name in names:
        build = cuda_build(name)
        if build is not None:
            key = _CUDA_BUILD.sub(lambda m: m.group(1) + "*", member_key(name))
            keyed.setdefault(key, []).append((build, name))
    return [(key, tuple(n for _, n in sorted(found)))
            for key, found in sorted(keyed.items()) if len({b for b, _ in found}) > 1]


def _binary_head(head: bytes, name: str) -> bool:
    """Whether a file whose first bytes are ``head`` (:data:`_HEAD` of them) is a binary: ELF
    (a cubin, a code object too), fatbin, ``ar`` archive, a PE image (DLL, ``.pyd``, EXE: by its
    ``PE`` signature), a COFF object (by its header, when named ``.obj``: the header has no
    magic number) or PTX text (named ``.ptx``, with its ``.version`` line: a Triton cache
    folder's kernels come as ``.cubin`` and ``.ptx`` files)."""
    from .formats import pe

    return (head[:4] in _MAGICS or head[:8] in _ARCHIVES or pe.is_pe(head)
            or (name.lower().endswith(".obj") and pe.is_coff_object(head))
            or (name.endswith(".ptx") and b".version" in head and b"\0" not in head))


@dataclass(frozen=True)
class Inventory:
    """What an input holds: its binaries (:func:`members`) and every file, each with its size
    (a wheel's members unpacked, a folder's files by their paths inside, or the file given),
    from one walk of it."""

    members: tuple[Member, ...]
    files: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        return f"{len(self.members)} binaries among {len(self.files)} files"


def members(source: str | os.PathLike[str]) -> list[Member]:
    """The binaries of ``source`` (a file, a wheel or a folder), sorted by name. A file is one
    member whatever it holds (its reader says if it is not a binary); a wheel or folder with no
    binary is an error naming it."""
    return list(inventory(source).members)


def inventory(source: str | os.PathLike[str]) -> Inventory:
    """:func:`members` of ``source``, and every file of it."""
    path = as_path(source, "input")
    files: list[tuple[str, int]] = []
    if path.is_dir():
        found = list(_folder(path, files))
        what = "folder"
    elif path.suffix in ARCHIVE_SUFFIXES:
        found = list(_wheel(path, files))
        what = "wheel" if path.suffix == ".whl" else "package"
    else:
        try:
            size = path.stat().st_size
        except OSError as e:
            raise InputError(f"cannot read {path}: {e.strerror or e}") from e
        return Inventory((Member(path.name, path, path, size),), ((path.name, size),))
    if not found:
        raise NoDeviceCodeError(f"{path}: this {what} holds no ELF, PE, fatbin or ar archive "
                                "file (no library to read)")
    return Inventory(tuple(sorted(found, key=lambda m: m.name)), tuple(sorted(files)))


def _folder(root: Path, files: list[tuple[str, int]]) -> Iterator[Member]:
    for top, dirs, names in os.walk(root, onerror=_walk_error):
        dirs.sort()
        for name in sorted(names):
            path = Path(top, name)
            if path.is_symlink() or not path.is_file():
                continue
            try:
                size = path.stat().st_size
                files.append((path.relative_to(root).as_posix(), size))
                with open(path, "rb") as f:
                    head = f.read(_HEAD)
            except OSError as e:
                raise InputError(f"cannot read {path}: {e.strerror or e}") from e
            if _binary_head(head, name):
                yield Member(path.relative_to(root).as_posix(), root, path, size)


def _walk_error(error: OSError) -> None:
    raise InputError(f"cannot read {error.filename}: {error.strerror or error}") from error


def _wheel(path: Path, files: list[tuple[str, int]]) -> Iterator[Member]:
    from .formats.codec import DecompressionBudget

    seen: set[str] = set()
    what = "wheel" if path.suffix == ".whl" else ".pt2 package"
    with _zip_errors(str(path), f"not a readable {what} (zip)"), zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            files.append((info.filename, info.file_size))
            if info.file_size < 64:
                continue
            if info.filename in seen:
                raise FormatError(f"{path}: member {info.filename} is in the wheel twice")
            seen.add(info.filename)
            limit = min(MAX_MEMBER, DecompressionBudget.for_input(info.compress_size).limit)
            if info.file_size > limit:
                raise FormatError(f"{path}:{info.filename}: declared {info.file_size} bytes "
                                  f"from {info.compress_size} compressed, more than the "
                                  f"{limit} a member may inflate to")
            with zf.open(info) as src:
                head = src.read(_HEAD)
            if _binary_head(head, info.filename):
                yield Member(info.filename, path, None, info.file_size)


#: the modules opening a binary imports on first use (each vendor's finder, the cubin reader,
#: zstd bundles, Intel's SPIR-V): imported before the prefetch threads start, so that no thread
#: is ever part-way through importing one when a process pool forks (a child that needs a module
#: another thread was importing at the fork waits for its lock forever: this hung ``check
#: --min-driver`` of bitsandbytes' wheel). tests/test_collection.py checks that opening imports
#: nothing else.
OPENING_MODULES = (".vendors.cuda.finding", ".vendors.hip.finding", ".vendors.hip.wrappers",
                   ".vendors.xpu.finding", ".formats.cubin", ".formats.nvinfo",
                   ".formats.offload_binary", ".formats.wrapper", ".formats.spirv", "zstandard")


def binaries(source: str | os.PathLike[str], progress: Progress = None,
             skipped: Callable[[Member, FatbinkitError], None] | None = None, *,
             all: bool = False, jobs: int | None = None, everywhere: bool = False,
             largest_first: bool = False,
             listed: Inventory | None = None) -> Iterator[tuple[Member, Binary]]:
    """Each member of ``source`` (:func:`fatbinkit.collection.members`) that holds device code,
    opened, in name order (``largest_first``: the largest first, for a caller that puts them
    back in order: the longest inflate then starts first, and the others are inflated and
    opened while it is read; errors and ``skipped`` then come in that order too); a source with
    none is a :class:`~fatbinkit.errors.FormatError` naming it. The next members, ``jobs`` of
    them (None: :func:`fatbinkit.parallel.default_jobs`), are inflated and opened on threads
    while this one is read: inflating (zlib releases the GIL) overlaps itself, the opening and
    the reading. In a wheel or folder, an ELF file fatbinkit does not read (32-bit, big-endian:
    :class:`~fatbinkit.errors.UnsupportedError`) goes to ``skipped`` when given, instead of
    stopping the walk; any other error stops it, naming the file. ``progress``
    (:mod:`fatbinkit.progress`): a step per member, named by its path inside, once the caller
    is done with it (or it is passed over: no device code, skipped). ``all`` and
    ``everywhere`` as in :func:`fatbinkit.binary.open` (``cuobjdump -all``; the deep scan).
    ``listed``: the source's :func:`inventory`, when the caller has it."""
    from .binary import open as open_binary
    from .parallel import as_jobs
    from .progress import reporter

    depth = as_jobs(jobs)  # members being inflated and opened at once, each on a thread
    for module in OPENING_MODULES:
        importlib.import_module(module, __package__)
    found = list((listed or inventory(source)).members)
    if largest_first:
        found.sort(key=lambda m: -m.size)
    count = 0
    with contextlib.ExitStack() as stack:
        report = stack.enter_context(reporter(progress, len(found), "file", "reading files"))
        wheel = None  # opened once: torch's member list takes 0.09 s to read
        if any(m.path is None for m in found):
            origin = found[0].origin
            what = "wheel" if origin.suffix == ".whl" else ".pt2 package"
            with _zip_errors(str(origin), f"not a readable {what} (zip)"):
                wheel = stack.enter_context(zipfile.ZipFile(found[0].origin))
        ahead: list[Future[Binary] | None] = []
        stack.callback(_close_unused, ahead)  # after the pool is shut down
        pool = stack.enter_context(ThreadPoolExecutor(depth))

        def opened(m: Member) -> Binary:  # on a thread
            data = m.read(wheel) if m.path is None else m.path
            return open_binary(data, all=all, name=m.name.rpartition("/")[2],
                               everywhere=everywhere)

        def submit(m: Member) -> Future[Binary]:  # in the caller's context (the CLI's spelling
            return pool.submit(contextvars.copy_context().run, opened, m)  # of advice)

        ahead += [submit(m) for m in found[:depth]]
        for i, m in enumerate(found):
            if i + depth < len(found):
                ahead.append(submit(found[i + depth]))
            with named(m):
                pending = ahead[i]
                ahead[i] = None  # the caller's from here on
                assert pending is not None
                binary: Binary | None
                try:
                    binary = pending.result()
                except UnsupportedError as e:
                    if skipped is None or (len(found) == 1 and m.origin == m.path):
                        raise
                    skipped(m, e)
                    binary = None
                del pending
            if binary is not None and (binary.codes or binary.entryless):
                count += 1
                yield m, binary
            report.advance(1, m.name)
    if not count:
        raise NoDeviceCodeError(f"{os.fspath(source)}: does not contain device code (no library "
                                "with .nv_fatbin, __nv_relfatbin or an embedded fatbin, cubin "
                                "or PTX)")


def _close_unused(ahead: Sequence[Future[Binary] | None]) -> None:
    """The binaries opened ahead that the caller never got (it stopped early, or an error
    did): their mappings closed now rather than when they are collected."""
    for pending in ahead:
        if pending is not None and pending.done() and pending.exception() is None:
            pending.result().close()


@dataclass(frozen=True, repr=False)
class TotalCheck:
    """:func:`check` of a wheel or folder: each library's :class:`~fatbinkit.binary.Check`
    (``file`` its path inside), and per arch the :class:`~fatbinkit.verdict.TotalVerdict`;
    ``alternatives`` the groups of builds per CUDA version (:func:`alternatives`). ``if
    total.ok:`` is the exit status of ``check``, ``total.strict_ok`` that of ``check
    --strict``."""

    file: str
    archs: tuple[Arch, ...]
    driver: Version | None
    checks: tuple[Check, ...]
    verdicts: tuple[TotalVerdict, ...]
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def modules(self) -> int:
        """Modules judged, over every library."""
        return sum(len(c.rows) for c in self.checks)

    @property
    def every_image_read(self) -> bool:
        """As :attr:`fatbinkit.binary.Check.every_image_read`, of every library."""
        return all(c.every_image_read for c in self.checks)

    @property
    def ok(self) -> bool:
        """Every arch works or is partial (:attr:`fatbinkit.verdict.TotalVerdict.ok`)."""
        return all(v.ok for v in self.verdicts)

    @property
    def strict_ok(self) -> bool:
        """Every arch works (:attr:`fatbinkit.verdict.TotalVerdict.strict_ok`)."""
        return all(v.strict_ok for v in self.verdicts)

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        """The ``check WHEEL-OR-FOLDER --json`` document (``--strict`` with ``strict``): the
        total per arch, then each library's :meth:`~fatbinkit.binary.Check.to_dict`."""
        from .binary import _check_head

        return {**_check_head(self, strict), "every_image_read": self.every_image_read,
                "alternatives": [{"group": g, "files": list(members)}
                                 for g, members in self.alternatives],
                "files": [c.to_dict(strict) for c in self.checks]}

    def __str__(self) -> str:
        return "\n".join(str(v) for v in self.verdicts)

    def __repr__(self) -> str:
        from .binary import _verdicts_repr

        return (f"TotalCheck({self.file!r}, files={len(self.checks)}, modules={self.modules}, "
                f"alternatives={len(self.alternatives)}, {_verdicts_repr(self)})")


def check(source: str | os.PathLike[str], archs: Iterable[ArchLike] | ArchLike,
          driver: DriverLike | None = None, kernel: str | KernelFilter | None = None, *,
          every_image: bool = False, jobs: int | None = None, progress: Progress = None,
          max_decompressed: int | DecompressionBudget | None = None,
          skipped: Callable[[Member, FatbinkitError], None] | None = None,
          everywhere: bool = False) -> TotalCheck:
    """:meth:`fatbinkit.binary.Binary.check` of each library of ``source`` (a wheel, a folder
    or a file: :func:`binaries`), and the total per arch. A library with no kernel matching
    ``kernel`` is left out; one with no SASS or PTX the driver loads (LTO-IR only) goes to
    ``skipped``. Each library's images are read on ``jobs`` processes (None:
    :func:`fatbinkit.parallel.default_jobs`); ``progress`` (:mod:`fatbinkit.progress`) counts
    the libraries read. ``max_decompressed`` bounds each library's inflated images (a number
    of bytes; default: 64x the library + 256 MiB), or all of them together (a
    :class:`~fatbinkit.formats.fatbin.DecompressionBudget`). Libraries built once per CUDA
    version (:func:`alternatives`) count as the one build that serves each arch and driver
    (:class:`~fatbinkit.verdict.TotalVerdict`). ``archs``, ``driver``, ``kernel`` and ``jobs``
    are checked before anything is read. ``everywhere``: the deep scan's modules too
    (:func:`fatbinkit.binary.open`)."""
    from . import vendors
    from .binary import KernelFilter
    from .formats.codec import DecompressionBudget
    from .parallel import as_jobs

    if isinstance(archs, (str, int)) or not isinstance(archs, Iterable):
        archs = [archs]
    found = [vendors.device(a, "GPU arch") for a in archs]
    devices = [d for _, d in found]
    if not devices:
        raise InvalidArgumentError("check needs at least one GPU arch")
    runtime = vendors.runtime(found, driver)
    kf = kernel if kernel is None or isinstance(kernel, KernelFilter) else \
        KernelFilter.parse(kernel)
    jobs = as_jobs(jobs)
    DecompressionBudget.of(max_decompressed, 0)  # refuses what is not a size or a budget
    checks: list[Check] = []
    for m, binary in binaries(source, progress=progress, skipped=skipped,
                              everywhere=everywhere):
        with named(m):
            c = binary.check(devices, runtime, kf, every_image=every_image, jobs=jobs,
                             max_decompressed=max_decompressed)
        if c.rows:
            checks.append(replace(c, file=m.name))
        elif kf is None and skipped is not None:
            skipped(m, FormatError("no SASS or PTX the driver loads"))
    if not checks:
        what = "no kernel matches " + str(kf) if kf is not None else \
            "does not contain device code the driver loads (no SASS or PTX)"
        raise FormatError(f"{os.fspath(source)}: {what}")
    return total_check(os.fspath(source), checks)


def total_check(file: str, checks: Sequence[Check]) -> TotalCheck:
    """The :class:`TotalCheck` of libraries checked with the same driver (``file``: the wheel
    or folder), each :class:`~fatbinkit.binary.Check` named by its path inside: what
    :func:`check` makes of them. Each GPU any of them was checked on gets a total, over the
    libraries checked on it."""
    from .verdict import TotalVerdict

    first = checks[0]
    groups = tuple(alternatives(c.file for c in checks))
    owners = [{m.vendor for m, _ in c.rows} for c in checks]
    # the GPUs, in the order the libraries name them; a library judged on other GPUs (another
    # vendor's: a report judges each library on its vendors' GPUs) is not counted on these
    devices = list(dict.fromkeys(d for c in checks for d in c.archs))
    at = [{d: i for i, d in enumerate(c.archs)} for c in checks]

    def files(device: Any) -> list[tuple[str, ArchVerdict]]:
        """The libraries a GPU's verdict counts: those with modules of its vendor (a ROCm
        library of a wheel is not a CUDA library that fails on sm_90); all where none has."""
        judged = [(c.file, c.verdicts[a[device]], o)
                  for c, a, o in zip(checks, at, owners, strict=True) if device in a]
        own = [(f, v) for f, v, o in judged if v.vendor in o]
        return own or [(f, v) for f, v, _ in judged]

    def total(device: Any) -> TotalVerdict:
        counted = files(device)
        names = {n for n, _ in counted}
        return TotalVerdict.of(counted, [g for g in groups if set(g[1]) <= names])

    return TotalCheck(file, tuple(devices), first.driver, tuple(checks),
                      tuple(total(d) for d in devices), groups)


def min_driver(source: str | os.PathLike[str], archs: Iterable[ArchLike] | ArchLike | None = None,
               kernel: str | KernelFilter | None = None, *, every_image: bool = False,
               jobs: int | None = None, progress: Progress = None,
               max_decompressed: int | DecompressionBudget | None = None,
               skipped: Callable[[Member, FatbinkitError], None] | None = None,
               everywhere: bool = False) -> MinDriver:
    """The lowest driver each of ``archs`` (default: every GPU the vendors of its modules list,
    :meth:`fatbinkit.vendors.Vendor.every_device`: NVIDIA's device table) needs for the
    libraries of ``source`` (a wheel, a folder or a file): ``check --min-driver``, the
    library that needs it named
    (:attr:`~fatbinkit.verdict.ArchMinDriver.min_driver_file`). The other arguments as for
    :func:`check`."""
    from . import vendors
    from .verdict import ArchMinDriver, MinDriver

    every = [d for v in vendors.VENDORS.values() for d in v.every_device()]
    total = check(source, every if archs is None else archs, None, kernel,
                  every_image=every_image, jobs=jobs, progress=progress,
                  max_decompressed=max_decompressed, skipped=skipped, everywhere=everywhere)
    verdicts = total.verdicts
    if archs is None:  # the GPUs of the vendors the libraries have modules of (else all)
        present = {m.vendor for c in total.checks for m, _ in c.rows}
        verdicts = tuple(v for v in verdicts if not present or v.vendor in present)
    return MinDriver(total.file, total.modules, tuple(map(ArchMinDriver.of, verdicts)),
                     tuple(c.file for c in total.checks), total.alternatives)


def extract(source: str | os.PathLike[str], directory: str | os.PathLike[str],
            arch: Iterable[str | Arch | ArchFilter] | str | Arch | None = None,
            kernel: str | KernelFilter | None = None, *, kinds: Sequence[str] | None = None,
            all: bool = False, max_decompressed: int | DecompressionBudget | None = None,
            jobs: int | None = None, progress: Progress = None,
            skipped: Callable[[Member, FatbinkitError], None] | None = None,
            everywhere: bool = False) -> list[Path]:
    """:meth:`fatbinkit.binary.Binary.extract` of each library of ``source`` (a wheel, a
    folder: :func:`binaries`) into its own folder, ``directory/<its path inside>/``
    (``out/torch/lib/libtorch_cuda.so/libtorch_cuda.1.sm_90.cubin``: cuobjdump's names, after
    the library's file name), all or nothing: an error half-way leaves ``directory`` as it was
    (created, as for one file, when it did not exist). A library none of whose images are
    selected gets no folder. A wheel member whose path would leave ``directory`` (absolute,
    ``..``) or holds a control character is refused. ``all`` as ``cuobjdump -all``
    (``__nv_relfatbin`` sections too), ``everywhere`` the deep scan's images too. ``jobs``,
    ``progress`` (libraries done) and ``max_decompressed`` as for :func:`check`."""
    from .outfile import atomic_files

    out = as_path(directory, "output folder")
    made: list[Path] = []  # folders created, parents first: removed if anything fails
    written: list[Path] = []
    try:
        made += _make_folders(out)
        with atomic_files() as batch:
            for m, binary in binaries(source, progress, skipped, all=all, jobs=jobs,
                                      everywhere=everywhere):
                sub = out.joinpath(*_inside(m))
                with named(m):
                    made += _make_folders(sub)
                    found = binary.extract(sub, arch, kernel, kinds=kinds,
                                           max_decompressed=max_decompressed, jobs=jobs,
                                           batch=batch)
                written += found
                while not found and made and made[-1] == sub != out:  # nothing selected
                    try:
                        sub.rmdir()
                    except OSError:
                        break  # another library's folder is in it
                    made.pop()
                    sub = sub.parent
    except BaseException:
        _remove_folders(made)
        raise
    return written


def _inside(m: Member) -> list[str]:
    """The parts of a member's path, refused when it would leave the output folder or holds a
    control character (a forged line in the list of files written)."""
    parts = m.name.split("/")
    if any(not c.isprintable() for c in m.name):
        raise OutputError(f"{m.origin}: refusing to write a member named with control "
                          f"characters: {m.name!r}")
    if m.name.startswith("/") or any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise OutputError(f"{m.label}: refusing to write outside the output folder: "
                          f"{m.name!r}")
    return parts


def _make_folders(path: Path) -> list[Path]:
    """Create ``path`` and its missing parents, one level at a time: the ones created, parents
    first (a failure half-way removes those it made)."""
    made: list[Path] = []
    try:
        missing = [p for p in (path, *path.parents) if not p.exists()][::-1]
        for p in missing:
            p.mkdir()
            made.append(p)
    except OSError as e:
        _remove_folders(made)
        raise OutputError(f"cannot create {path}: {e.strerror or e}") from e
    return made


def _remove_folders(made: list[Path]) -> None:
    """Remove the folders created (deepest first) that are empty."""
    for p in reversed(made):
        with contextlib.suppress(OSError):
            p.rmdir()


@contextlib.contextmanager
def _zip_errors(where: str, problem: str) -> Iterator[None]:
    """A zip archive's bad data (:func:`fatbinkit.wheel.corrupt`) as a :class:`FormatError`
    ``where: problem: ...``; the disk's errors as an :class:`InputError` naming ``where``."""
    from .wheel import ZIP_ERRORS, corrupt

    try:
        yield
    except (*ZIP_ERRORS, KeyError, OSError) as e:
        if isinstance(e, FatbinkitError):
            raise
        if isinstance(e, KeyError) or corrupt(e):
            raise FormatError(f"{where}: {problem}: {e}") from e
        assert isinstance(e, OSError)
        raise InputError(f"cannot read {where}: {e.strerror or e}") from e


@contextlib.contextmanager
def named(m: Member) -> Iterator[None]:
    """Errors about a wheel member name the wheel and the member (files name themselves)."""
    try:
        yield
    except FatbinkitError as e:
        if m.path is not None or str(e).startswith(m.label):
            raise
        raise naming(e, m.label) from e
