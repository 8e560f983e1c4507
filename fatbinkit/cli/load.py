"""``fatbinkit load``: load an image on the current GPU and say what the driver picked."""

from __future__ import annotations

import argparse
import ctypes
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CudaUnavailableError, FatbinkitError, FormatError, InputError, naming
from ..infile import read_input
from .args import UsageError, examples

if TYPE_CHECKING:
    from ..runtime import Kernel, Module


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``load``."""
    p = sub.add_parser(
        "load",
        help="load a fatbin/cubin/PTX (or a blob embedded in a shared library) on the GPU",
        description="Load an image with cuModuleLoadDataEx on the current GPU and report the "
        "image the driver picked, the load time and the kernels; a failure is explained.",
        epilog=examples(
            "fatbinkit load k.fatbin",
            "fatbinkit load k.ptx --kernel add1 --json",
            "fatbinkit load libmodel.so --symbol k --preflight   # the blob __k_start..__k_end",
            "fatbinkit load k.fatbin --library --device 1"),
    )
    p.add_argument("file", type=Path, help="fatbin, cubin or PTX file, or a shared library")
    p.add_argument("--symbol", metavar="NAME",
                   help="load the blob between __NAME_start and __NAME_end of the library FILE")
    p.add_argument("--kernel", metavar="NAME", action="append", default=[],
                   help="report only these kernels (default: all)")
    p.add_argument("--library", action="store_true",
                   help="use cuLibraryLoadData instead of cuModuleLoadDataEx")
    p.add_argument("--preflight", action="store_true",
                   help="refuse an image the compatibility engine says cannot load")
    p.add_argument("--device", type=_ordinal, default=0, metavar="N",
                   help="CUDA device ordinal (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def _ordinal(text: str) -> int:
    if not text.isdigit():
        raise UsageError(f"{text!r} is not a device ordinal like 0 or 1")
    return int(text)


def _run(args: argparse.Namespace) -> int:
    from ..runtime import Module

    try:
        if args.symbol:
            if not args.file.exists():
                raise InputError(f"cannot read {args.file}: No such file or directory")
            try:
                lib = ctypes.CDLL(str(args.file.resolve()))
            except OSError as exc:
                raise InputError(f"cannot dlopen {args.file}: {exc}") from exc
            module = Module.from_symbol(lib, args.symbol, device=args.device,
                                        library=args.library, preflight=args.preflight)
        else:
            data = read_input(args.file)
            if not data:
                raise FormatError("empty file, no device code")
            module = Module.load(data, device=args.device, library=args.library,
                                 preflight=args.preflight)
    except (InputError, CudaUnavailableError):  # named already, or not about the file
        raise
    except FatbinkitError as e:  # "k.fatbin: CUDA_ERROR_NO_BINARY_FOR_GPU: ..."
        raise naming(e, args.file) from e
    with module:
        kernels = [module.kernel(k) for k in args.kernel] if args.kernel else list(module.kernels())
        report = _report(module, kernels)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        dev = report["device"]
        print(f"device  {dev['name']} ({dev['arch']}), driver CUDA {dev['driver']}")
        print(f"image   {report['kind']}, loaded in {report['load_ms']:.3f} ms")
        picked = report["picked"]
        if picked:
            what = "SASS" if picked["how"] == "sass" else "PTX, JIT-compiled at load,"
            print(f"picked  {what} {picked['image']}")
        for k in report["kernels"]:
            print(f"kernel  {k['name']}: binary version {k['binary']}, PTX version {k['ptx']}, "
                  f"{k['registers']} registers, {k['shared']} B shared")
        if report["info_log"]:
            print(f"log     {report['info_log']}")
    return 0


def _report(module: Module, kernels: list[Kernel]) -> dict[str, Any]:
    dev = module.device
    try:
        decision = module.picked()
        picked = {"how": decision.how, "image": decision.image.name if decision.image else None}
    except FatbinkitError:  # the driver took it, fatbinkit cannot read it: say nothing
        picked = None
    return {
        "device": {
            "name": dev.name,
            "arch": dev.arch.sm,
            "driver": f"{dev.driver_version[0]}.{dev.driver_version[1]}",
        },
        "kind": module.kind,
        "picked": picked,
        "load_ms": module.load_seconds * 1e3,
        "info_log": module.info_log,
        "kernels": [
            {
                "name": k.name,
                "binary": f"sm_{k.binary_version}",
                "ptx": f"compute_{k.ptx_version}",
                "registers": k.registers,
                "shared": k.shared_bytes,
                "local": k.local_bytes,
                "max_threads": k.max_threads_per_block,
            }
            for k in kernels
        ],
    }
