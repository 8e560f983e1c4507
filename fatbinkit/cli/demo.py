"""``fatbinkit demo``: the whole pipeline on the bundled kernels (what ``make demo`` runs)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .args import examples


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo``."""
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on the bundled Triton kernels (about a minute)",
        description="Compile the bundled Triton kernel for four GPU generations with a PTX "
        "floor, build one fatbin, list and check it for eight GPUs, embed it (no ld/objcopy), "
        "link it, inject it into a linked library, load and run it where a GPU exists, prune "
        "it; where torch and a GPU exist, compile a small model with AOTInductor inside "
        "fatbinkit.aoti.packaging. Needs Triton (pip install 'fatbinkit[triton]').",
        epilog=examples("fatbinkit demo -o out/demo", "fatbinkit demo -o /tmp/demo --no-torch"),
    )
    p.add_argument("-o", "--output", type=Path, default=Path("out/demo"), metavar="DIR",
                   help="folder for everything the demo writes: new, empty, or a previous demo's, "
                   "which is replaced (default: out/demo)")
    p.add_argument("--no-torch", action="store_true",
                   help="skip the AOTInductor step even where torch and a GPU exist")
    p.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run

    return run(args.output, torch_model=not args.no_torch)
