"""``fatbinkit ls``, ``extract`` and ``build``: list, extract and build fatbins from the shell.

``ls`` and ``extract`` follow ``cuobjdump -lelf -lptx`` / ``-xelf all -xptx all``: the same
selection (``--all`` as ``cuobjdump -all``), the same file names, the same bytes (PTX without its
trailing NULs, as cuobjdump writes it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OutputError
from ..fatbin import DecompressionBudget, EntryKind
from ..outfile import atomic_files, atomic_path
from .args import UsageError, add_budget, examples, image_arg

if TYPE_CHECKING:
    from ..cubin import CubinFunction


# cuobjdump's words for ELF and PTX; `ls --all` also lists what cuobjdump -all skips
_LABELS = {int(EntryKind.ELF): "ELF", int(EntryKind.PTX): "PTX", int(EntryKind.LTOIR): "LTO"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ls``, ``extract`` and ``build``."""
    p = sub.add_parser("ls", help="list the device code in a fatbin, cubin or ELF file")
    p.add_argument("file", type=Path)
    p.add_argument("--all", action="store_true", help="include __nv_relfatbin and other kinds")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--resources", action="store_true", help="per-function resource usage of ELF entries"
    )
    add_budget(p)
    p.set_defaults(func=_ls)

    p = sub.add_parser("extract", help="write each cubin/PTX image to a file, as cuobjdump -x")
    p.add_argument("file", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--elf", action="store_true", help="cubins only")
    which.add_argument("--ptx", action="store_true", help="PTX only")
    p.add_argument("--all", action="store_true", help="include __nv_relfatbin sections")
    add_budget(p)
    p.set_defaults(func=_extract)

    p = sub.add_parser(
        "build", help="build a fatbin from cubins and PTX",
        description="Write a fatbin holding each --cubin and --ptx image, in the order given, "
        "each labelled with its ARCH. A cubin must be labelled with its own arch (its ELF "
        "header's, suffix included); PTX with its .target or a newer arch it compiles for "
        "(PTX for sm_90a only as sm_90a; for sm_100f only as an a/f arch of the sm_10x family): "
        "a mismatch is refused, naming the file and both archs.",
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
            "fatbinkit build -o k.fatbin --backend nvcc --ptx sm_80=k.ptx --ptx sm_90=k.ptx"))
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.fatbin",
                   help="the fatbin to write (replaced atomically)")
    p.add_argument("--cubin", action="append", default=[], metavar="ARCH=PATH",
                   type=image_arg("--cubin", "sm_90=k.cubin"),
                   help="a cubin and its arch, e.g. sm_90=k.cubin or sm_90a=k.cubin; repeatable")
    p.add_argument("--ptx", action="append", default=[], metavar="ARCH=PATH",
                   type=image_arg("--ptx", "compute_90=k.ptx"),
                   help="PTX and the arch to label it, e.g. compute_90=k.ptx (sm_90=k.ptx is "
                   "the same); repeatable")
    p.add_argument("--backend", default="pure", choices=("pure", "fatbinary", "nvfatbin", "nvcc"),
                   help="who writes the fatbin: pure (default, no NVIDIA software), fatbinary, "
                   "nvfatbin (NVIDIA's library) or nvcc (see below)")
    p.add_argument("--compress", default="none", choices=("none", "lz4", "zstd"),
                   help="codec of every entry (default none; not with --backend nvcc)")
    p.add_argument("--identifier", default="",
                   help="identifier stored in each entry, e.g. the source file's name (not with "
                   "--backend nvcc)")
    p.set_defaults(func=_build)


def _ls(args: argparse.Namespace) -> int:
    # A listing makes tens of thousands of small objects and no cycles: the cyclic collector,
    # which would walk them every few hundred allocations, has nothing to find (10 % of the time).
    gc.disable()
    try:
        return _list(args)
    finally:
        gc.enable()


def _list(args: argparse.Namespace) -> int:
    from ..scan import extract_names, kind_name, listed, scan

    codes = listed(scan(args.file, all=args.all), all=args.all)
    budget = _budget(args)
    if args.json:
        rows: list[dict[str, Any]] = []
        for c in codes:
            e = c.entry
            row: dict[str, Any] = {
                "section": c.source or None,
                "container": c.container if c.container >= 0 else None,
                "kind": kind_name(e.header.kind),
                "arch": e.arch.sm,
                "compression": e.compression,
                "size": e.size,
                "data_size": e.data_size,
                "identifier": e.identifier,
            }
            if args.resources and e.header.kind == EntryKind.ELF:
                from ..cubin import Cubin

                row["functions"] = [f.to_dict() for f in
                                    Cubin.from_bytes(e.data(budget=budget)).functions]
            rows.append(row)
        # One compact row per line: json's C encoder (indent= falls back to pure Python, 3x slower
        # on libraries with thousands of entries) and still greppable.
        body = ",\n".join(f"  {json.dumps(r)}" for r in rows)
        sys.stdout.write(f'{{"entries": [\n{body}\n]}}\n' if rows else '{"entries": []}\n')
        return 0
    names = extract_names(codes, args.file.name)
    counters: dict[int, int] = {}
    lines: list[str] = []
    for c, name in zip(codes, names, strict=True):
        kind = c.entry.header.kind
        n = counters[kind] = counters.get(kind, 0) + 1
        label = _LABELS.get(kind) or f"Kind {kind:#x}"
        lines.append(f"{label} file {n:4d}: {name}\n")
        if args.resources and kind == EntryKind.ELF:
            from ..cubin import Cubin

            for f in Cubin.from_bytes(c.entry.data(budget=budget)).functions:
                lines.append(f"    {_usage(f)}\n")
    sys.stdout.write("".join(lines))  # one write: thousands of lines, stdout may be unbuffered
    return 0


def _budget(args: argparse.Namespace) -> DecompressionBudget:
    """The command's decompression budget (its input is known to exist: scan read it)."""
    return DecompressionBudget.for_input(args.file.stat().st_size, args.max_decompressed)


def _usage(f: CubinFunction) -> str:
    """One function in ``cuobjdump -res-usage``'s words, plus its parameters."""
    banks = "".join(f" CONSTANT[{bank}]:{size}" for bank, size in f.constant.items())
    kind = "Kernel" if f.entry else "Function"
    params = (f" PARAMS:{len(f.params)} ({f.param_size} bytes)"
              if f.entry and f.param_size is not None else "")
    return (f"{kind} {f.name}: REG:{f.registers} STACK:{f.stack} SHARED:{f.shared} "
            f"LOCAL:{f.local}{banks} TEXTURE:{f.texture} SURFACE:{f.surface} "
            f"SAMPLER:{f.sampler}{params}")


def _extract(args: argparse.Namespace) -> int:
    from ..scan import extract_names, listed, scan

    codes = listed(scan(args.file, all=args.all))
    budget = _budget(args)
    names = extract_names(codes, args.file.name)
    wanted = {EntryKind.ELF, EntryKind.PTX}
    if args.elf:
        wanted = {EntryKind.ELF}
    elif args.ptx:
        wanted = {EntryKind.PTX}
    out_dir: Path = args.output
    created = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {out_dir}: {e.strerror or e}") from e
    try:
        with atomic_files() as batch:  # a corrupt entry half-way changes no file in out_dir
            for c, name in zip(codes, names, strict=True):
                kind = c.entry.header.kind
                if kind not in wanted:
                    continue
                if name in ("", ".", ".."):  # extract's names never contain a separator
                    raise OutputError(f"refusing to write outside the output folder: {name}")
                data = c.entry.data(budget=budget)
                if kind == EntryKind.PTX:
                    data = data.rstrip(b"\0")
                batch.write(out_dir / name, data)
    except BaseException:
        if created:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    sys.stdout.write("".join(f"{path}\n" for path in dict.fromkeys(batch.targets)))
    return 0


def _build(args: argparse.Namespace) -> int:
    from ..build import Image, build

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
        raise UsageError("nothing to build: give at least one --cubin or --ptx")
    compression = None if args.compress == "none" else args.compress
    data = build(images, backend=args.backend, compression=compression)
    with atomic_path(args.output) as tmp:
        tmp.write_bytes(data)
    return 0
