"""``fatbinkit embed`` (blobs -> relocatable object) and ``fatbinkit inject`` (blobs -> library)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..embed import TARGETS
from ..errors import FormatError
from ..formats import coff, elf_writer
from ..formats.elf_writer import DEFAULT_ALIGN, MACHINES, MAX_ALIGN, STYLES, Blob
from .args import UsageError, alignment, examples, key_path

_EMBED_EXAMPLES = examples(
    "fatbinkit embed -o kernels.o add=add.fatbin mul=mul.cubin   # __add_start, __mul_start...",
    "fatbinkit embed -o blob.o --style ld data/k.fatbin           # _binary_data_k_fatbin_start",
    "fatbinkit embed -o arm.o --machine aarch64 --align 128 k=k.fatbin",
    "fatbinkit embed -o kernels.obj --target x86_64-pc-windows-msvc k=k.fatbin   # COFF",
    "fatbinkit embed -o k.o --hip k.hipfb            # .hip_fatbin + .hipFatBinSegment, as clang",
    "fatbinkit embed -o k.obj --hip --target x86_64-pc-windows-msvc k.hipfb",
)
_INJECT_EXAMPLES = examples(
    "fatbinkit inject libmodel.so -o libmodel-k.so k=k.fatbin",
    "fatbinkit inject libfoo.so -o out.so add=add.fatbin mul=mul.cubin --align 128",
)


def _align(text: str) -> int:
    value = alignment(text)
    if value > MAX_ALIGN:
        raise UsageError(f"alignment {value} is above the maximum, {MAX_ALIGN}")
    return value


def _named(arg: str) -> Blob:
    return Blob(*key_path(arg, "NAME", example="k=k.fatbin"))


def _embed(args: argparse.Namespace) -> int:
    writer, machine = elf_writer, args.machine
    if args.target is not None:
        writer, machine = TARGETS[args.target]
        if args.machine not in (None, machine):
            raise UsageError(f"--machine {args.machine} contradicts --target {args.target}")
    if args.hip:
        if args.style != "aoti" or args.align != DEFAULT_ALIGN:
            raise UsageError("--hip places each bundle at 4096 as clang does: drop --style and "
                             "--align")
        writer.write_hip_object(Path(args.output), [Path(arg) for arg in args.blobs],
                                machine=machine)
        return 0
    if writer is coff and args.align > coff.MAX_ALIGN:
        raise UsageError(f"alignment {args.align} is above COFF's maximum, {coff.MAX_ALIGN}")
    if args.style == "ld":
        blobs = [Blob(arg, Path(arg)) for arg in args.blobs]
    else:
        blobs = [_named(arg) for arg in args.blobs]
    writer.write_object(
        Path(args.output), blobs, machine=machine, style=args.style, align=args.align
    )
    return 0


def _inject(args: argparse.Namespace) -> int:
    from ..inject import inject

    library = Path(args.library)
    if library.is_file() and library.stat().st_size == 0:
        raise FormatError(f"{library}: empty file, not a shared library")
    inject(library, Path(args.output), args.blobs, align=args.align)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``embed`` and ``inject``."""
    p = sub.add_parser(
        "embed",
        help="write an ELF or COFF object embedding files, read-only (no toolchain needed)",
        description=(
            "Write a relocatable ELF object holding every file in one read-only .rodata section, "
            "with an empty .note.GNU-stack, or for a Windows --target a COFF object holding them "
            "in one .rdata section. Style aoti: arguments NAME=PATH give symbols "
            "__NAME_start, __NAME_end, __NAME_size. Style ld: arguments are paths, and symbols "
            "are _binary_<path>_start/_end/_size with every byte of the path that is not a letter "
            "or digit turned into '_', exactly as 'ld -r -b binary' names them. In ELF, _size is "
            "an absolute symbol whose address is the size; in COFF it is the address of the size "
            "(8 bytes, little-endian): C declares 'extern const unsigned long long __NAME_size;'."
        ),
        epilog=_EMBED_EXAMPLES,
    )
    p.add_argument("blobs", nargs="+", metavar="NAME=PATH | PATH",
                   help="a file to embed: NAME=PATH (style aoti, NAME a C identifier) or PATH "
                   "(style ld)")
    p.add_argument("-o", "--output", required=True, metavar="OUT.o", help="object to write")
    p.add_argument(
        "--machine", choices=sorted(MACHINES), help="target machine (default: this host's, or "
        "--target's); ELF unless --target says otherwise"
    )
    p.add_argument(
        "--target", choices=list(TARGETS), metavar="TRIPLE", help="object format and machine: "
        f"{', '.join(TARGETS)} (COFF for Windows, else ELF)"
    )
    p.add_argument(
        "--align",
        type=_align,
        default=DEFAULT_ALIGN,
        metavar="N",
        help=f"alignment of each blob, a power of two up to {MAX_ALIGN}, {coff.MAX_ALIGN} for COFF "
        f"(default {DEFAULT_ALIGN}; 1 packs like ld)",
    )
    p.add_argument("--style", choices=STYLES, default="aoti", help="symbol names (default aoti)")
    p.add_argument(
        "--hip", action="store_true", help="arguments are clang offload bundles (PATH, plain "
        "or compressed, e.g. from 'fatbinkit build --hsaco'): write them as clang's HIP "
        "codegen does, in .hip_fatbin (each at 4096) with one HIPF record per bundle in "
        ".hipFatBinSegment (symbol __hip_fatbin_wrapper; no module constructor); COFF for a "
        "Windows --target"
    )
    p.set_defaults(func=_embed)

    p = sub.add_parser(
        "inject",
        help="add files to a linked shared library as exported symbols (uses LIEF)",
        description=(
            "Copy LIB.so to OUT.so with every file added in one new read-only section and "
            "segment, exported as dynamic symbols __NAME_start, __NAME_end and __NAME_size; "
            "undefined references to those names in the library are resolved. No relink."
        ),
        epilog=_INJECT_EXAMPLES,
    )
    p.add_argument("library", metavar="LIB.so", help="the linked shared library to copy")
    p.add_argument("blobs", nargs="+", metavar="NAME=PATH", type=_named,
                   help="a file to add, exported as __NAME_start/_end/_size")
    p.add_argument("-o", "--output", required=True, metavar="OUT.so", help="library to write")
    p.add_argument(
        "--align",
        type=_align,
        default=DEFAULT_ALIGN,
        metavar="N",
        help=f"alignment of each blob, a power of two up to {MAX_ALIGN} (default {DEFAULT_ALIGN})",
    )
    p.set_defaults(func=_inject)
