"""``fatbinkit ls``, ``extract`` and ``build``: list, extract and build fatbins from the shell.

``ls`` and ``extract`` follow ``cuobjdump -lelf -lptx`` / ``-xelf all -xptx all``: the same
selection (``--all`` as ``cuobjdump -all``), the same file names, the same bytes (PTX without its
trailing NULs, as cuobjdump writes it).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import functools
import heapq
import io
import itertools
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..errors import FormatError
from ..formats.fatbin import DecompressionBudget, EntryKind
from ..infile import is_collection
from ..outfile import atomic_path
from .args import (
    UsageError,
    add_budget,
    add_everywhere,
    arch_filter,
    examples,
    image_arg,
    kernel_filter,
    key_path,
    positive,
)

if TYPE_CHECKING:
    from ..binary import Binary, Item, KernelFilter, Summary
    from ..collection import Member
    from ..device_code import DeviceCode
    from ..errors import FatbinkitError
    from ..formats.codec import DecompressionBudget
    from ..formats.cubin import Cubin, CubinFunction
    from ..progress import Step


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ls``, ``extract`` and ``build``."""
    p = sub.add_parser(
        "ls", help="list the device code in a file (cuobjdump -lelf -lptx), summarise it, or "
        "give per-function resources (cuobjdump -res-usage)",
        description="List the SASS (cubin) and PTX images in FILE: a fatbin, cubin, PTX, or an "
        "ELF file (.so, .o, executable) or Windows PE file (DLL, .pyd, EXE) holding fatbins, a "
        "static library (.a), or a wheel or folder of them. Names and numbers are cuobjdump's.\n\n"
        "--arch sm_90 (or 90) selects SASS and PTX of SM 9.0 with any a/f suffix, as cuobjdump "
        "-arch does; sm_90a or sm_100f that suffix only; compute_90 PTX only. --kernel takes a "
        "glob matched against the mangled and the demangled name, or re:REGEX (searched).",
        epilog=examples(
            "fatbinkit ls libtorch_cuda.so --summary          # per arch and GPU generation",
            "fatbinkit ls libtorch_cuda.so --arch sm_90 --json",
            "fatbinkit ls libcublasLt.so.13 --resources --sort registers --top 20 --demangle",
            "fatbinkit ls model.so --kernel '*gemm*' --resources",
            "fatbinkit ls libfoo.so --summary --kernels       # also count kernels (reads all)"))
    _input(p)
    p.add_argument("--all", action="store_true",
                   help="also __nv_relfatbin sections and LTO-IR entries, as cuobjdump -all")
    add_everywhere(p)
    p.add_argument("--json", action="store_true",
                   help="machine-readable output (schema: docs/json.md)")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--summary", action="store_true",
                      help="per arch: images, bytes, codecs; per GPU arch: modules that load "
                      "as SASS, by PTX JIT, or not at all (entry headers only: fast)")
    view.add_argument("--resources", action="store_true",
                      help="resources of each cubin, as cuobjdump -res-usage: its Common: "
                      "line (module data), then per function its figures, spills (ptxas -v's "
                      "bytes) and parameters")
    view.add_argument("--duplicates", action="store_true",
                      help="images stored more than once (by content, across containers, "
                      "sections and a wheel's libraries) and the bytes they waste; with "
                      "--kernels also functions found in more than one image (reads every "
                      "image)")
    p.add_argument("--kernels", action="store_true",
                   help="with --summary: also count each arch's kernels and name the toolkits "
                   "that built its cubins (reads every image); with --duplicates: compare "
                   "each cubin function's SASS too")
    p.add_argument("--sort", choices=_SORT_KEYS,
                   help="with --resources: one table of functions, largest first (spills: "
                   "bytes stored + loaded, unrecorded last; size: bytes of SASS); equal values "
                   "in library, image and function name order")
    p.add_argument("--top", type=positive, metavar="N",
                   help="with --resources: only the N largest functions (by --sort, default "
                   "registers)")
    p.add_argument("--demangle", action="store_true",
                   help="print C++ kernel names demangled (as c++filt)")
    _filters(p)
    add_budget(p)
    p.set_defaults(func=_ls, parser=p)

    p = sub.add_parser(
        "extract", help="write cubins and PTX to files, as cuobjdump -xelf all -xptx all",
        description="Write the SASS (cubin) and PTX images of FILE into a folder, under "
        "cuobjdump's names and with its bytes (PTX without trailing NULs). All or nothing: an "
        "error half-way leaves the folder as it was.",
        epilog=examples(
            "fatbinkit extract libtorch_cuda.so -o out/ --arch sm_90   # as cuobjdump -arch sm_90",
            "fatbinkit extract model.so -o out/ --elf --kernel 're:^triton_'",
            "fatbinkit extract k.fatbin -o out/ --ptx"))
    _input(p)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="folder to write into (created if missing)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--elf", action="store_true", help="cubins only (cuobjdump -xelf)")
    which.add_argument("--ptx", action="store_true", help="PTX only (cuobjdump -xptx)")
    p.add_argument("--all", action="store_true",
                   help="also __nv_relfatbin sections, as cuobjdump -all")
    add_everywhere(p)
    _filters(p)
    add_budget(p)
    p.set_defaults(func=_extract, parser=p)

    p = sub.add_parser(
        "build", help="build a fatbin from cubins and PTX, or a HIP bundle from code objects",
        description="Write a fatbin holding each --cubin and --ptx image, in the order given, "
        "each labelled with its ARCH. A cubin must be labelled with its own arch (its ELF "
        "header's, suffix included); PTX with its .target or a newer arch it compiles for "
        "(PTX for sm_90a only as sm_90a; for sm_100f only as an a/f arch of the sm_10x family): "
        "a mismatch is refused, naming the file and both archs. With --hsaco instead, write the "
        "clang offload bundle the HIP driver writes (clang-offload-bundler -type=o "
        "-bundle-align=4096): an empty host entry, then one entry "
        "hipv4-amdgcn-amd-amdhsa--TARGET per code object, sorted as clang sorts them; each "
        "TARGET must be the code object's own (its e_flags: processor, sramecc, xnack).",
        epilog="backends:\n"
        "  pure, fatbinary and nvfatbin write the images given, in order, and nothing else.\n"
        "  nvcc runs `nvcc -fatbin K.ptx -gencode arch=compute_X,code=compute_X\n"
        "  -gencode arch=compute_X,code=sm_X` for each --ptx label X (AOTInductor's recipe):\n"
        "  it takes one PTX file, the same for every label, and no --cubin; for each X it\n"
        "  writes an sm_X cubin that nvcc's ptxas compiles from the PTX (an image you did\n"
        "  not give), then the PTX itself labelled X, unchanged, with nvcc's compression.\n\n"
        + examples(
            "fatbinkit build -o k.fatbin --cubin sm_90=k_sm90.cubin --ptx compute_90=k.ptx",
            "fatbinkit build -o k.fatbin --cubin sm_90a=k.cubin --compress zstd --identifier k.cu",
            "fatbinkit build -o k.fatbin --backend fatbinary --cubin sm_80=k.cubin",
            "fatbinkit build -o k.fatbin --backend nvcc --ptx sm_80=k.ptx --ptx sm_90=k.ptx",
            "fatbinkit build -o k.hipfb --hsaco gfx942=k.hsaco --hsaco gfx90a:xnack+=k2.hsaco",
            "fatbinkit build -o k.hipfb --hsaco gfx1100=k.hsaco --compress zstd --ccob-version 2"))
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.fatbin",
                   help="the fatbin, or with --hsaco the bundle, to write (replaced "
                   "atomically)")
    p.add_argument("--cubin", action="append", default=[], metavar="ARCH=PATH",
                   type=image_arg("--cubin", "sm_90=k.cubin"),
                   help="a cubin and its arch, e.g. sm_90=k.cubin or sm_90a=k.cubin; repeatable")
    p.add_argument("--ptx", action="append", default=[], metavar="ARCH=PATH",
                   type=image_arg("--ptx", "compute_90=k.ptx"),
                   help="PTX and the arch to label it, e.g. compute_90=k.ptx (sm_90=k.ptx is "
                   "the same); repeatable")
    p.add_argument("--hsaco", action="append", default=[], metavar="TARGET=PATH",
                   type=_hsaco_arg,
                   help="an AMD code object and its target id, e.g. gfx942=k.hsaco or "
                   "gfx90a:xnack+=k.hsaco; repeatable; writes a HIP offload bundle (not with "
                   "--cubin or --ptx)")
    p.add_argument("--backend", default="pure", choices=("pure", "fatbinary", "nvfatbin", "nvcc"),
                   help="who writes the fatbin: pure (default, no NVIDIA software), fatbinary, "
                   "nvfatbin (NVIDIA's library) or nvcc (see below)")
    p.add_argument("--compress", default="none", choices=("none", "lz4", "zstd", "zlib"),
                   help="codec of every entry (default none; not with --backend nvcc); with "
                   "--hsaco, zstd or zlib compress the whole bundle (CCOB) as clang's "
                   "--offload-compress does")
    p.add_argument("--ccob-version", type=int, choices=(2, 3),
                   help="with --hsaco --compress: the compressed bundle version (default 3, as "
                   "clang 22 and ROCm 7 write; 2 for readers of LLVM 19 and older)")
    p.add_argument("--identifier", default="",
                   help="identifier stored in each entry, e.g. the source file's name (not with "
                   "--backend nvcc)")
    p.set_defaults(func=_build)


_SORT_KEYS = ("registers", "shared", "stack", "local", "spills", "size")
NAME_WIDTH = 60  # the widest function name a --sort/--top text row prints whole


def _input(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path,
                   help="a fatbin, cubin, PTX, an ELF (.so, .o, executable) or PE (DLL, .pyd, "
                   "EXE) file with fatbins, a static library, or a wheel or folder of them")


def _filters(p: argparse.ArgumentParser) -> None:
    """``--arch`` and ``--kernel``, shared by ls, extract and check."""
    p.add_argument("--arch", action="append", type=arch_filter, metavar="ARCH", dest="arch",
                   help="only images for ARCH: sm_90 (any a/f), sm_90a, sm_100f, compute_90 "
                   "(PTX only); repeat for several")
    p.add_argument("--kernel", type=kernel_filter, metavar="PATTERN",
                   help="only images (and functions) with a kernel matching PATTERN: a glob on "
                   "the mangled or demangled name, or re:REGEX")


def open_input(args: argparse.Namespace, *, entryless: bool = False) -> Binary:
    """The input, with one documented behaviour when it holds no device code (cuobjdump: "does
    not contain device code", exit 255): an error, exit 3, for every command. A file whose
    fatbin containers hold no entry at all (what prune leaves of a library no kept arch loads)
    is an input for ``entryless`` commands (ls says what it has, check judges its modules) and
    an error naming what it has for the others."""
    from ..binary import open as open_binary

    binary = open_binary(args.file, all=getattr(args, "all", False),
                         everywhere=getattr(args, "everywhere", False),
                         max_decompressed=getattr(args, "max_decompressed", None))
    if not binary.codes and not (entryless and binary.entryless):
        raise FormatError(f"{args.file}: " + (
            f"{empty_containers(len(binary.entryless))}: no image to read" if binary.entryless
            else "does not contain device code (no .nv_fatbin, __nv_relfatbin or embedded "
            "fatbin, cubin or PTX; no .hip_fatbin, offload bundle or AMD code object; no "
            "SPIR-V or Intel GPU binary)"))
    return binary


#: what a summary of a host file says when the deep scan did not run
NOT_SEARCHED = ("device code outside cuobjdump's view (containers and cubins the library loads "
                "itself, e.g. cuBLASLt's, cuFFT's) not searched: --everywhere")


def empty_containers(n: int) -> str:
    """What a file of containers with no entry holds, as ls and the errors say it."""
    return (f"{n} empty fatbin container{'' if n == 1 else 's'} (no entries: no image for any "
            "GPU, e.g. left by prune)")


def without_cyclic_gc(handler: Callable[[argparse.Namespace], int],
                      ) -> Callable[[argparse.Namespace], int]:
    """A command handler run with the cyclic garbage collector off
    (:func:`fatbinkit.parallel.gc_paused`): listings and checks make hundreds of thousands of
    small objects and no cycles, so the collector, which would walk them every few hundred
    allocations, has nothing to find (10 % of a listing's time)."""
    from ..parallel import gc_paused

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        with gc_paused():
            return handler(args)

    return run


def shown(name: str, demangled: bool) -> str:
    """A function name as printed: demangled with ``--demangle``."""
    if not demangled:
        return name
    from ..binary import demangle

    return demangle(name)


@without_cyclic_gc
def _ls(args: argparse.Namespace) -> int:
    if args.kernels and not (args.summary or args.duplicates):
        args.parser.error("--kernels goes with --summary or --duplicates")
    if (args.sort and not args.resources) or (args.top and not (args.resources or args.duplicates)):
        args.parser.error("--sort goes with --resources, --top with --resources or --duplicates")
    if (args.summary or args.duplicates) and (args.arch or args.kernel):
        args.parser.error(f"--{'summary' if args.summary else 'duplicates'} covers the whole "
                          "file: it takes no --arch or --kernel")
    if args.duplicates:
        return _duplicates(args)
    if is_collection(args.file):
        return _ls_many(args)
    binary = open_input(args, entryless=True)
    if not binary.codes:  # only containers with no entry: say what the file has
        if args.json:
            dump({"entries": [], "empty_containers": len(binary.entryless)})
        else:
            print(f"{args.file}: {empty_containers(len(binary.entryless))}")
        return 0
    budget = DecompressionBudget.of(args.max_decompressed, binary.size)
    if args.summary:
        summary = binary.summary(kernels=args.kernels, max_decompressed=budget,
                                 progress=sys.stderr.isatty())
        if args.json:
            dump(summary.to_dict())
        else:
            sys.stdout.write("".join(f"{line}\n" for line in summary.lines()))
            if not args.everywhere and any(c.source for c in binary.codes):  # a host file
                print(NOT_SEARCHED)
        return 0
    items = binary.select(args.arch, args.kernel, max_decompressed=budget,
                          progress=sys.stderr.isatty())
    if args.sort or args.top:
        return _table(args, [(None, _rows(args, binary, items, budget))])
    if args.json:
        with _all_or_nothing() as out:  # each piece written as it comes: never held whole
            out.writelines(_entries_json(args, binary, items, budget))
            out.write("\n")
    else:
        sys.stdout.writelines(_entries_text(args, binary, items, budget, args.file))
    return 0


def _duplicates(args: argparse.Namespace) -> int:
    """``ls --duplicates``: :func:`fatbinkit.duplicates.duplicates` of a file, wheel or
    folder."""
    from ..duplicates import duplicates

    try:
        found = duplicates(args.file, kernels=args.kernels, all=args.all,
                           everywhere=args.everywhere, max_decompressed=args.max_decompressed,
                           progress=progress, skipped=skipped)
    finally:
        progress_done()
    if args.json:
        dump_rows(found.to_dict())
    else:
        sys.stdout.write("".join(f"{line}\n" for line in found.lines(args.top or 10)))
    return 0


def _rendered(args: argparse.Namespace, binary: Binary, items: tuple[Item, ...],
              budget: DecompressionBudget) -> Iterator[str]:
    """With ``--resources``, each cubin's resources (:func:`_render`: its ``Common:`` figures and
    its functions) as text or JSON members, as they come; otherwise empty strings. Each cubin is
    rendered where it is read, on every core: only text travels back (144,640 function objects
    of libtorch_cuda.so would cost as much to send as to parse)."""
    if not args.resources:
        return iter([""] * len(items))
    # no bar when the lines themselves go to the terminal: they are the progress
    return binary.imap(functools.partial(_render, args.json, args.demangle, args.kernel),
                       items, kinds=_function_kinds(), max_decompressed=budget,
                       progress=sys.stderr.isatty() and not sys.stdout.isatty(),
                       desc="reading code")


def _function_kinds() -> tuple[str, ...]:
    """The kinds of image with per-function resources, of every vendor (CUDA's SASS, AMD's
    code objects)."""
    from .. import vendors

    return tuple(k for v in vendors.VENDORS.values() for k in sorted(v.function_kinds))


def _entries_json(args: argparse.Namespace, binary: Binary, items: tuple[Item, ...],
                  budget: DecompressionBudget, head: str = "") -> Iterator[str]:
    """``{"entries": [...]}`` (after ``head``), one entry per line (with its ``functions`` for
    --resources), in pieces as each entry is read."""
    kinds = _function_kinds()
    yield f"{{{head}\"entries\": ["
    for n, (it, functions) in enumerate(zip(items, _rendered(args, binary, items, budget),
                                            strict=True)):
        row = json.dumps(it.to_dict())
        if args.resources and it.kind in kinds:
            row = f'{row[:-1]}, {functions}}}'
        yield f"{',' if n else ''}\n  {row}"
    yield "\n]}" if items else "]}"


def _entries_text(args: argparse.Namespace, binary: Binary, items: tuple[Item, ...],
                  budget: DecompressionBudget, given: Path) -> Iterator[str]:
    """cuobjdump's listing lines (and -res-usage lines under each cubin for --resources), in
    pieces as each image is read; a static library's objects under cuobjdump's ``member
    PATH:OBJECT:`` lines (each object's after every image is read)."""
    lines = (f"{it}\n{text}" for it, text in
             zip(items, _rendered(args, binary, items, budget), strict=True))
    if binary.members:
        return iter(_by_member(binary, given, items, list(lines)))
    return lines


@contextlib.contextmanager
def _all_or_nothing() -> Iterator[TextIO]:
    """A file for a JSON document written in pieces, copied to stdout when the block ends
    without an error: a consumer never reads half a document, and the pieces are not held in
    memory (they wait on disk)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as spool:
        yield spool
        spool.seek(0)
        shutil.copyfileobj(spool, sys.stdout, 1 << 20)


def _by_member(binary: Binary, given: Path, items: tuple[Item, ...],
               lines: list[str]) -> list[str]:
    """The listing of a static library as cuobjdump prints it: each ELF object (those with no
    device code too) after a blank line and ``member <path>:<object>:``, where the path is the
    one given, joined to the working folder when relative (cuobjdump's spelling, not resolved)."""
    shown = given if given.is_absolute() else Path(os.getcwd(), given)
    per: dict[str, list[str]] = {}
    for it, line in zip(items, lines, strict=True):
        per.setdefault(it.code.member, []).append(line)
    return [f"\nmember {shown}:{m}:\n" + "".join(per.get(m, ())) for m in binary.members]


def _ls_many(args: argparse.Namespace) -> int:
    """``ls`` of a wheel or a folder: each binary with device code (by its path inside, in name
    order), then with ``--summary`` the total. Text: a ``== PATH ==`` line before each one's
    listing or summary, written as each is read; JSON: ``{"files": [...]}`` of each one's
    document (and ``total``); ``--sort``/``--top``: one table over every library."""
    from ..binary import Summary

    summaries: list[Summary] = []
    tables: list[tuple[str | None, list[_Row]]] = []
    with (_all_or_nothing() if args.json and not (args.summary or args.sort or args.top)
          else contextlib.nullcontext()) as spool:
        docs = _ls_each(args, summaries, tables, spool)
        if spool is not None:
            spool.write("\n]}\n" if docs else '{"files": []}\n')
    if args.sort or args.top:
        return _table(args, tables)
    if not args.summary:
        return 0
    total = Summary.combined(f"{args.file} (total of {len(summaries)} files)", summaries)
    if args.json:
        dump({"files": [s.to_dict() for s in summaries], "total": total.to_dict()})
    else:
        sys.stdout.write("".join(f"== {s.file} ==\n" + "".join(f"{line}\n" for line in
                                                               s.lines()) + "\n"
                                 for s in summaries))
        sys.stdout.write("".join(f"{line}\n" for line in total.lines()))
    return 0


def _ls_each(args: argparse.Namespace, summaries: list[Summary],
             tables: list[tuple[str | None, list[_Row]]], spool: TextIO | None) -> int:
    """Each binary of a wheel or folder, as :func:`_ls_many` wants it: its summary, its table
    rows, its JSON document written to ``spool``, or its listing written to stdout. Returns
    the number of JSON documents written."""
    from ..collection import binaries, named

    docs = 0
    try:
        for m, binary in binaries(args.file, progress, skipped, all=args.all,
                                  everywhere=args.everywhere):
            with named(m):
                budget = DecompressionBudget.of(args.max_decompressed, binary.size)
                if args.summary:
                    summaries.append(dataclasses.replace(
                        binary.summary(kernels=args.kernels, max_decompressed=budget,
                                       progress=sys.stderr.isatty()), file=m.name))
                    continue
                items = binary.select(args.arch, args.kernel, max_decompressed=budget,
                                      progress=sys.stderr.isatty())
                if not items:
                    continue  # nothing matches --arch/--kernel here
                if args.sort or args.top:
                    tables.append((m.name, _rows(args, binary, items, budget)))
                elif spool is not None:
                    spool.write(",\n" if docs else '{"files": [\n')
                    spool.writelines(_entries_json(args, binary, items, budget,
                                                   f'"file": {json.dumps(m.name)}, '))
                    docs += 1
                else:  # text goes out as each library is read
                    progress_done()
                    sys.stdout.write(f"== {m.name} ==\n")
                    sys.stdout.writelines(_entries_text(args, binary, items, budget,
                                                        Path(m.label)))
    finally:
        progress_done()
    return docs


def progress(step: Step) -> None:
    """A line on a terminal as each binary of a wheel or folder is read (a
    :class:`fatbinkit.progress.Step` per file)."""
    progress_line(step, "read", "files")


def progress_line(step: Step, done: str, units: str) -> None:
    """One line on a terminal, kept up to date: ``read 3/12 files: NAME``."""
    if sys.stderr.isatty():
        name = "".join(c if c.isprintable() else "?" for c in step.name)  # from the zip
        of = f"/{step.total}" if step.total is not None else ""
        sys.stderr.write(f"\r{done} {step.done}{of} {units}: {name}\x1b[K")
        sys.stderr.flush()


def progress_done() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\x1b[K")


def skipped(member: Member, error: FatbinkitError) -> None:
    """A file of a wheel or folder that is not read: one note on stderr (on its own line, not
    after the progress line)."""
    progress_done()
    print(f"fatbinkit: note: skipped {member.label}: {error}", file=sys.stderr)


def _cubin(code: DeviceCode) -> Cubin | None:
    """The parsed cubin of an image with functions (:attr:`fatbinkit.vendors.Vendor.
    function_kinds`: CUDA's SASS, the only vendor with some so far); None for other kinds.
    ``ls --resources`` prints cuobjdump's ``-res-usage`` of cubins."""
    from .. import vendors
    from ..formats.fatbin import FatbinEntry

    if code.kind not in vendors.of(code).function_kinds or not isinstance(code.entry,
                                                                          FatbinEntry):
        return None
    from ..formats.cubin import Cubin

    return Cubin.from_bytes(code.data())


def _functions(cubin: Cubin | None, kernel: KernelFilter | None) -> tuple[CubinFunction, ...]:
    """A cubin's functions (those matching ``kernel``); () for other kinds."""
    if cubin is None:
        return ()
    return cubin.functions if kernel is None else tuple(
        f for f in cubin.functions if kernel.matches(f.name))


def _render(as_json: bool, demangled: bool, kernel: KernelFilter | None,
            code: DeviceCode) -> str:
    """One cubin's resources as ``ls --resources`` prints them: cuobjdump's ``Common:`` line and
    its function lines, or the JSON members ``"common": {...}, "functions": [...]``."""
    cubin = _cubin(code)
    if cubin is None:
        return _render_kernels(as_json, demangled, kernel, code)
    functions = _functions(cubin, kernel)
    if as_json:
        common = json.dumps(_common_dict(cubin)) if cubin is not None else "null"
        return (f'"common": {common}, '
                f'"functions": {json.dumps([_function(f, demangled) for f in functions])}')
    if cubin is None:
        return ""
    return f"    Common: {_common(cubin)}\n" + "".join(
        f"    {_usage(f, demangled)}\n" for f in functions)


def _render_kernels(as_json: bool, demangled: bool, kernel: KernelFilter | None,
                    code: DeviceCode) -> str:
    """The kernels of another vendor's image (an AMD code object, an Intel zebin) as ``ls
    --resources`` prints them: each record's own line (``usage``: AMD's is what
    ``llvm-readelf --notes`` and clang's ``-Rpass-analysis=kernel-resource-usage`` report), or
    the JSON members ``"common": null, "functions": [...]``."""
    from .. import vendors

    records = vendors.of(code).functions(code) if code.kind in vendors.of(
        code).function_kinds else ()
    kernels = [k for k in records if kernel is None or kernel.matches(k.name)]
    if as_json:
        rows = []
        for k in kernels:
            row = k.to_dict()
            if demangled:
                row["demangled"] = shown(k.name, demangled)
            rows.append(row)
        return f'"common": null, "functions": {json.dumps(rows)}'
    return "".join(f"    {k.usage(shown(k.name, demangled))}\n" for k in kernels)


def _common(cubin: Cubin) -> str:
    """What ``cuobjdump -res-usage`` prints under ``Common:`` for a cubin: the bytes of its
    module-scope variables (``.nv.global`` and ``.nv.global.init``) and of each module-wide
    constant bank (``.nv.constantN``, in section order): ``GLOBAL:218080 CONSTANT[3]:72``."""
    return f"GLOBAL:{cubin.global_size}" + "".join(
        f" CONSTANT[{bank}]:{size}" for bank, size in cubin.constant.items())


def _common_dict(cubin: Cubin) -> dict[str, Any]:
    """:func:`_common` in JSON: ``{"global": 218080, "constant": {"3": 72}}``."""
    return {"global": cubin.global_size,
            "constant": {str(bank): size for bank, size in cubin.constant.items()}}


def _function(f: CubinFunction, demangled: bool) -> dict[str, Any]:
    row = f.to_dict()
    if demangled:
        row["demangled"] = shown(f.name, demangled)
    return row


def _sort_value(f: CubinFunction, key: str) -> int:
    """``f``'s figure for ``--sort key``; spills are stores + loads, -1 where not recorded (so
    that they come after every function that records them, 0 included)."""
    if key == "spills":
        return -1 if f.spill_stores is None or f.spill_loads is None else \
            f.spill_stores + f.spill_loads
    value: int = getattr(f, key)
    return value


def _spills(f: CubinFunction) -> str:
    """``1432/1464`` (bytes stored/loaded), ``-`` where the cubin does not record them."""
    return "-" if f.spill_stores is None else f"{f.spill_stores}/{f.spill_loads}"


def elided(name: str, width: int = NAME_WIDTH) -> str:
    """``name`` cut to ``width`` characters with ``...`` in the middle when longer: a C++
    signature keeps its start (the function) and its end (the last parameters)."""
    if len(name) <= width:
        return name
    head = (width - 3) * 2 // 3
    return f"{name[:head]}...{name[head - width + 3:]}"


_Row = tuple[int, str, "Item", str, str]  # sort value, name, its image, row, name shown


def _rows(args: argparse.Namespace, binary: Binary, items: tuple[Item, ...],
          budget: DecompressionBudget) -> list[_Row]:
    """``--sort``/``--top``: each function of the selected cubins, with its sort key and its
    rendered row (the JSON object, or the figures). Workers send back only these."""
    key = args.sort or "registers"

    def rows_of(code: DeviceCode) -> list[tuple[int, str, str, str]]:
        """(sort value, name, then the JSON object or the figures and the name to print)."""
        out = []
        for f in _functions(_cubin(code), args.kernel):
            value = _sort_value(f, key)
            if args.json:
                out.append((value, f.name, json.dumps(_function(f, args.demangle)), ""))
            else:
                out.append((value, f.name, f"{f.registers:>4} {f.stack:>6} {f.shared:>7} "
                            f"{f.local:>6} {_spills(f):>11} {f.size:>8}",
                            shown(f.name, args.demangle)))
        return out

    found = binary.map(rows_of, items, kinds=("sass",), max_decompressed=budget,
                       progress=sys.stderr.isatty(), desc="reading cubins")
    rows = [(value, name, it, row, shown_name)
            for it, fs in zip(items, found, strict=True) for value, name, row, shown_name in fs]
    if args.top:  # only the N largest can make the table (144,640 rows for libtorch_cuda.so)
        rows = heapq.nsmallest(args.top, rows, key=lambda r: (-r[0], r[2].number, r[1]))
    return rows


def _table(args: argparse.Namespace, tables: list[tuple[str | None, list[_Row]]]) -> int:
    """Every function of the selected cubins in one table, largest first (of every library
    of a wheel or folder: each row names its ``library``); equal values in the order of the
    library's path, then the image's number (file order), then the (mangled) function name:
    the same input always gives the same table. Text: names longer than NAME_WIDTH are elided
    in the middle (JSON keeps them whole), so the image and library stay on screen."""
    rows = [(-value, library or "", it.number, name, it, row, shown_name)
            for library, found in tables for value, name, it, row, shown_name in found]
    rows.sort(key=lambda r: r[:4])
    if args.top:
        rows = rows[: args.top]
    many = is_collection(args.file)
    if args.json:
        body = ",\n".join(
            f'  {row[:-1]}, "arch": {json.dumps(it.arch)}, "image": {json.dumps(it.name)}, '
            f'"number": {it.number}' + (f', "library": {json.dumps(lib)}' if many else "") + "}"
            for _, lib, _, _, it, row, _ in rows)
        sys.stdout.write(f'{{"functions": [\n{body}\n]}}\n' if rows else
                         '{"functions": []}\n')
        return 0
    width = max((len(elided(name)) for *_, name in rows), default=8)
    out = [f"{'REG':>4} {'STACK':>6} {'SHARED':>7} {'LOCAL':>6} {'SPILLS':>11} {'SIZE':>8}  "
           f"{'ARCH':<8} {'FUNCTION':<{width}}  {'LIBRARY: ' if many else ''}IMAGE\n"]
    out += [f"{row}  {it.arch:<8} {elided(name):<{width}}  {f'{lib}: ' if many else ''}"
            f"{it.name}\n" for _, lib, _, _, it, row, name in rows]
    sys.stdout.write("".join(out))
    return 0


def write_lines(lines: Iterable[str], chunk: int = 2048) -> None:
    """``lines`` on stdout, each ended by a newline: made and encoded here ``chunk`` at a time
    while a thread writes the chunks before them, so that the kernel's copy of a large text (a
    torch diff's 64 MB: 0.05-0.2 s into a file) overlaps the making of the rest. That is done
    only where stdout is a text file over an OS file, in an encoding that writes each chunk
    alike (UTF-8, ASCII, Latin-1: no byte-order mark, no state) and lines end with ``\n``;
    elsewhere (a test's capture, a wrapper that compresses, UTF-16, Windows) one string goes
    through ``sys.stdout``. A write that fails (a closed pipe) is raised here, and no later line
    is made; when making the lines raises, the chunks not yet written are dropped."""
    out = sys.stdout
    fd = _os_file(out)
    if fd is None:
        out.write("".join(f"{line}\n" for line in lines))
        return
    out.flush()
    pending: queue.Queue[bytes | None] = queue.Queue(8)  # at most 8 chunks wait
    failed: list[Exception] = []
    stop = threading.Event()  # the caller raised: write nothing more

    def write() -> None:
        while (data := pending.get()) is not None:  # taken to the end: put never blocks long
            view = memoryview(data)
            try:
                while view and not failed and not stop.is_set():
                    view = view[os.write(fd, view):]
            except Exception as e:  # raised again by the caller
                failed.append(e)

    writer = threading.Thread(target=write, name="fatbinkit stdout", daemon=True)
    writer.start()  # daemon: an interrupt here does not wait on a reader that stopped reading
    try:
        rest = iter(lines)
        while not failed and (part := list(itertools.islice(rest, chunk))):
            part.append("")
            pending.put("\n".join(part).encode(out.encoding, out.errors or "strict"))
    except BaseException:
        stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                pending.get_nowait()
        pending.put(None)  # the writer ends after the chunk it may be writing
        raise
    pending.put(None)
    writer.join()
    if failed:
        raise failed[0]


# encodings whose chunks, encoded one by one, join into what one encoding of the whole gives
_STATELESS = frozenset({"utf-8", "ascii", "iso8859-1"})  # codecs.lookup names


def _os_file(out: TextIO) -> int | None:
    """The file descriptor under ``out`` where :func:`write_lines` may write to it directly:
    ``out`` a :class:`io.TextIOWrapper` over an OS file (buffered or not), in a stateless
    encoding, with ``\n`` line ends; else None."""
    if os.linesep != "\n" or type(out) is not io.TextIOWrapper:
        return None
    raw = out.buffer  # a FileIO itself where Python runs unbuffered (-u, PYTHONUNBUFFERED)
    if type(raw) in (io.BufferedWriter, io.BufferedRandom):
        raw = raw.raw
    if type(raw) is not io.FileIO:
        return None
    if codecs.lookup(out.encoding).name not in _STATELESS:  # known: the stream was made with it
        return None
    return raw.fileno()


def dump_rows(doc: dict[str, Any]) -> None:
    """A JSON document on stdout with one list item per line (as ``ls --json`` writes its
    rows), through :func:`write_lines`: ``json.dump(indent=2)`` runs the pure-Python encoder,
    20 times slower on the 55 MB of a libtorch diff; each row here goes through the C one."""
    write_lines(_rows_json(doc))


def _rows_json(doc: dict[str, Any]) -> Iterator[str]:
    yield "{"
    if not doc:
        yield ""  # as the document joined in one string was
    last = len(doc) - 1
    for i, (key, value) in enumerate(doc.items()):
        end = "," if i < last else ""
        if isinstance(value, list) and value:
            yield f"  {json.dumps(key)}: ["
            final = len(value) - 1
            for j, v in enumerate(value):
                yield f"    {json.dumps(v)}{',' if j < final else ''}"
            yield f"  ]{end}"
        else:
            yield f"  {json.dumps(key)}: {json.dumps(value)}{end}"
    yield "}"


def dump(doc: dict[str, Any]) -> None:
    """One JSON document on stdout, indented."""
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def _usage(f: CubinFunction, demangled: bool = False) -> str:
    """One function in ``cuobjdump -res-usage``'s words, then what cuobjdump does not print:
    its spills (``ptxas -v``'s bytes; UNKNOWN, as cuobjdump's ``STACK:UNKNOWN``, where the cubin
    does not record them) and its parameters."""
    banks = "".join(f" CONSTANT[{bank}]:{size}" for bank, size in f.constant.items())
    kind = "Kernel" if f.entry else "Function"
    params = (f" PARAMS:{len(f.params)} ({f.param_size} bytes)"
              if f.entry and f.param_size is not None else "")
    spills = ("UNKNOWN" if f.spill_stores is None else f.spill_stores,
              "UNKNOWN" if f.spill_loads is None else f.spill_loads)
    return (f"{kind} {shown(f.name, demangled)}: REG:{f.registers} STACK:{f.stack} "
            f"SHARED:{f.shared} LOCAL:{f.local}{banks} TEXTURE:{f.texture} SURFACE:{f.surface} "
            f"SAMPLER:{f.sampler} SPILL_STORES:{spills[0]} SPILL_LOADS:{spills[1]}{params}")


def _extract(args: argparse.Namespace) -> int:
    kinds = ("sass",) if args.elf else ("ptx",) if args.ptx else None
    if is_collection(args.file):  # each library into OUT/<its path inside>/
        from ..collection import extract

        try:
            written = extract(args.file, args.output, args.arch, args.kernel, kinds=kinds,
                              all=args.all, max_decompressed=args.max_decompressed,
                              progress=progress, skipped=skipped, everywhere=args.everywhere)
        finally:
            progress_done()
    else:
        binary = open_input(args)
        written = binary.extract(args.output, args.arch, args.kernel, kinds=kinds,
                                 max_decompressed=args.max_decompressed,
                                 progress=sys.stderr.isatty())
    sys.stdout.write("".join(f"{path}\n" for path in written))
    return 0


def _hsaco_arg(spec: str) -> tuple[str, Path]:
    """``--hsaco TARGET=PATH``: a well-formed target id (whether it fits the code object is
    :func:`fatbinkit.build.check_code_object_label`'s question)."""
    from ..errors import InvalidArgumentError
    from ..formats.amdgpu import TargetId

    label, path = key_path(spec, "TARGET", option="--hsaco", example="gfx942=k.hsaco")
    try:
        return str(TargetId.parse(label.strip())), path
    except InvalidArgumentError as e:
        raise UsageError(f"--hsaco {spec}: {e}") from e


def _build_bundle(args: argparse.Namespace) -> int:
    from ..build import CodeObjectImage, build_bundle

    if args.cubin or args.ptx:
        raise UsageError("--hsaco builds a HIP bundle: it takes no --cubin or --ptx")
    if args.backend != "pure" or args.identifier:
        raise UsageError("--hsaco writes the bundle itself: drop --backend and --identifier")
    if args.compress == "lz4":
        raise UsageError("a HIP bundle compresses with zstd or zlib, not lz4")
    compression = None if args.compress == "none" else args.compress
    if compression is None and args.ccob_version is not None:
        raise UsageError("--ccob-version is the version of a compressed bundle: add --compress "
                         "zstd or zlib")
    images = [CodeObjectImage.from_file(label, path) for label, path in args.hsaco]
    data = build_bundle(images, compression=compression, ccob_version=args.ccob_version or 3)
    with atomic_path(args.output) as tmp:
        tmp.write_bytes(data)
    return 0


def _build(args: argparse.Namespace) -> int:
    from ..build import Image, build

    if args.hsaco:
        return _build_bundle(args)
    if args.compress == "zlib":
        raise UsageError("a fatbin compresses with lz4 or zstd; zlib is for --hsaco bundles")
    if args.ccob_version is not None:
        raise UsageError("--ccob-version is for --hsaco bundles")
    if args.backend == "nvcc":
        if args.cubin:
            raise UsageError("--backend nvcc compiles PTX: it takes no --cubin")
        if args.compress != "none" or args.identifier:
            raise UsageError("--backend nvcc uses nvcc's own compression and no identifier: "
                             "drop --compress and --identifier")
    images: list[Image] = []
    for kind, specs in ((EntryKind.ELF, args.cubin), (EntryKind.PTX, args.ptx)):
        for label, path in specs:
            images.append(Image.from_file(kind, label, path, identifier=args.identifier))
    if not images:
        raise UsageError("nothing to build: give at least one --cubin, --ptx or --hsaco")
    compression = None if args.compress == "none" else args.compress
    data = build(images, backend=args.backend, compression=compression)
    with atomic_path(args.output) as tmp:
        tmp.write_bytes(data)
    return 0
