"""``fatbinkit prune`` and ``fatbinkit recompress``: slim the device code of a library, an
executable or a fatbin file (see :mod:`fatbinkit.slim`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import (
    CompatibilityError,
    FormatError,
    UnsupportedError,
    naming,
)
from ..formats.fatbin import COMPRESSIONS, LEVELS
from .args import UsageError, add_budget, arch, gpu

if TYPE_CHECKING:
    from ..slim import SlimReport, WheelReport

# fatbinkit.slim's PTX_POLICIES, SPIRV_POLICIES and CODECS (tests/test_slim.py checks that they
# agree): slim and what it imports load only when a slimming command runs, so `fatbinkit ls`
# starts as fast as before
PTX_POLICIES = ("keep", "floor", "none")
SPIRV_POLICIES = ("keep", "none")
CODECS = ("none", *COMPRESSIONS, "zlib")
_ZLIB_LEVELS = range(1, 10)

_PRUNE_EXAMPLES = """examples:
  fatbinkit prune libfoo.so -o libfoo-h100.so --for sm_90
  fatbinkit prune libfoo.so -o out.so --for sm_80 --for sm_90 --ptx floor --codec zstd
  fatbinkit prune model.fatbin -o small.fatbin --for sm_120 --ptx none
  fatbinkit prune torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl -o dist/ --for sm_90
  fatbinkit prune libfoo_rocm.so -o out.so --for gfx942 --for gfx90a --codec zstd \
      --allow-newer-rocm
"""
_RECOMPRESS_EXAMPLES = """examples:
  fatbinkit recompress libfoo.so -o libfoo-zstd.so --codec zstd --level 19 --allow-newer-driver
  fatbinkit recompress libfoo.so -o libfoo-plain.so --codec none
  fatbinkit recompress libfoo_rocm.so -o out.so --codec zstd --allow-newer-rocm
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``prune`` and ``recompress``."""
    p = sub.add_parser(
        "prune", help="keep only what the given GPU archs load (and recompress)",
        description="Keep, in every fatbin container, the image a device of each --for arch "
        "loads (sm_86 keeps the sm_80 SASS it runs when there is no sm_86 SASS), plus PTX by "
        "--ptx; in every AMD offload bundle, the code object the HIP runtime loads on each "
        "--for GPU (native, else its generic target), plus SPIR-V by --spirv; the freed bytes "
        "are cut out of the file.",
        epilog=_PRUNE_EXAMPLES)
    p.add_argument("--for", dest="archs", action="append", required=True, metavar="ARCH",
                   type=_gpu,
                   help="a GPU arch to keep everything for (sm_90, 90, sm_100, gfx942, "
                   "gfx90a:xnack+...); repeatable, one vendor")
    p.add_argument("--ptx", choices=PTX_POLICIES, default="keep",
                   help="keep every PTX (default), only the floor newer GPUs JIT, or none "
                   "beyond what --for archs load")
    p.add_argument("--spirv", choices=SPIRV_POLICIES, default="keep",
                   help="AMD: keep every SPIR-V entry (default), or none beyond what --for "
                   "GPUs load")
    p.add_argument("--exact", action="store_true",
                   help="keep the SASS (AMD: the code objects) of exactly the --for archs, as "
                   "nvprune -arch does, not what their GPUs load; the report names the kernels "
                   "that no longer load")
    p.add_argument("--allow-empty", action="store_true",
                   help="write a library even when no --for arch loads any of its images (it "
                   "is left with no device code for any GPU); refused without this, naming it")
    _common(p, codec_required=False)
    p.set_defaults(func=_prune)

    p = sub.add_parser(
        "recompress", help="store every fatbin entry with another codec",
        description="Re-encode every fatbin entry as --codec (an AMD offload bundle as a "
        "whole: a compressed bundle, CCOB); the freed bytes are cut out of the file. zstd "
        "needs a CUDA 12.4 driver, a compressed bundle ROCm 6.2: a rise of the minimum driver "
        "is refused unless --allow-newer-driver (--allow-newer-rocm).",
        epilog=_RECOMPRESS_EXAMPLES)
    _common(p, codec_required=True)
    p.set_defaults(func=_recompress, archs=None, ptx="keep", exact=False, allow_empty=False,
                   spirv="keep")


def _common(p: argparse.ArgumentParser, *, codec_required: bool) -> None:
    p.add_argument("file", type=Path, help="shared library, executable, object, static "
                   "library, Windows DLL/.pyd/EXE, fatbin or wheel")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                   help="the output file (a folder for a wheel)")
    p.add_argument("--codec", choices=CODECS, required=codec_required,
                   help="store entries as none, lz4 or zstd (AMD bundles: none, zstd or zlib)" +
                   ("" if codec_required else " (default: as they are)"))
    p.add_argument("--level", type=int, metavar="N",
                   help="compression level (lz4 1-12, zstd 1-22, zlib 1-9; defaults 3 and 6; "
                   "AMD bundles: zstd 3, zlib 6, as clang)")
    p.add_argument("--same-size", action="store_true",
                   help="rewrite each container in place and zero-fill the rest: the file keeps "
                   "its size and layout (for files whose layout cannot be changed safely)")
    p.add_argument("--allow-newer-driver", action="store_true",
                   help="accept an output that needs a newer driver than the input")
    p.add_argument("--allow-newer-rocm", action="store_true",
                   help="AMD: accept an output that needs a newer ROCm than the input (a "
                   "compressed bundle needs ROCm 6.2)")
    p.add_argument("--strip-signature", action="store_true",
                   help="a signed Windows DLL/EXE: leave its Authenticode signature out (a "
                   "rewrite invalidates it; sign the output anew); refused without this")
    p.add_argument("--everywhere", action="store_true",
                   help="also the fatbin containers outside .nv_fatbin that the library loads "
                   "itself (cuFFT, cuBLASLt, cuRAND), each rewritten where it is and its freed "
                   "tail zero-filled (docs/hidden.md); zstd and bare cubins there are left as "
                   "they are")
    p.add_argument("--json", action="store_true", help="machine-readable report")
    add_budget(p)


def _gpu(text: str) -> Any:
    """``--for``: an NVIDIA arch with its suffix (``sm_90a``: :func:`.args.arch`), else any
    vendor's GPU (``gfx942``: :func:`.args.gpu`, whose refusal is in the words of the vendor
    that spells it)."""
    try:
        return arch(text)
    except UsageError:
        return gpu(text, "GPU arch")


def _run(args: argparse.Namespace) -> int:
    from ..formats.archive import is_archive_file
    from ..memory import share_one_arena
    from ..slim import slim, slim_archive, slim_wheel
    from ..wheel import is_wheel

    if args.codec in (None, "none"):  # images kept as stored: their threads share one arena
        share_one_arena()  # (re-encoding, the heap trims after each large image gave back
        # what the next one faulted in again: cuBLASLt's recompress 3.8 -> 4.2 s for 8 MiB)

    if args.level is not None:
        if args.codec in (None, "none"):
            raise UsageError("--level needs --codec lz4, zstd or zlib")
        levels = _ZLIB_LEVELS if args.codec == "zlib" else LEVELS[args.codec]
        if args.level not in levels:
            raise UsageError(f"--level {args.level}: {args.codec} levels are "
                             f"{levels.start}..{levels.stop - 1}")
    archs = args.archs or None
    report: SlimReport | WheelReport
    try:
        if args.file.is_file() and args.file.stat().st_size == 0:
            raise FormatError("empty file, no device code")
        call = (slim_wheel if is_wheel(args.file) else
                slim_archive if is_archive_file(args.file) else slim)
        report = call(args.file, args.output, archs=archs, ptx=args.ptx, codec=args.codec,
                      level=args.level, same_size=args.same_size,
                      allow_newer_driver=args.allow_newer_driver, exact=args.exact,
                      strip_signature=args.strip_signature, allow_empty=args.allow_empty,
                      spirv=args.spirv, allow_newer_rocm=args.allow_newer_rocm,
                      everywhere=args.everywhere, max_decompressed=args.max_decompressed,
                      progress=sys.stderr.isatty())
    except (FormatError, UnsupportedError, CompatibilityError) as e:  # about the input file
        if str(e).startswith(f"{args.file}"):
            raise
        raise naming(e, args.file) from e
    _print(report, args)
    return 0


_prune = _recompress = _run


def _print(report: SlimReport | WheelReport, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps({"input": str(args.file), "output": str(args.output),
                          **report.to_dict()}, indent=2))
        return
    print(f"{args.file} -> {args.output}")
    print(report)
