"""``fatbinkit check FILE --arch sm_90 ... [--driver 13.0] [--json]``: will these kernels load?

For every load unit in FILE (each fatbin container, or the bare cubin/PTX), every kernel and every
requested arch: which image the driver would use (SASS, or PTX JIT-compiled at load: a cold-start
cost) or why nothing fits and the CUDA error that follows. Exit status 1 when some kernel cannot
load on a requested arch. A thin layer over :mod:`fatbinkit.compat`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..arch import Arch
from ..errors import FormatError, InvalidArgumentError

if TYPE_CHECKING:  # the engine is imported by the handler: `fatbinkit ls` starts faster
    from ..compat import Decision, ImageSet

_DRIVER_RE = re.compile(r"^(\d{1,2})(?:\.(\d{1,2}))?$")
JIT_NOTE = ("PTX-JIT: the driver compiles the PTX at first load (cold start: ~0.1-1 s per kernel, "
            "cached in ~/.nv/ComputeCache unless CUDA_CACHE_DISABLE=1)")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``check``."""
    p = sub.add_parser("check", help="predict which image each kernel loads on given GPU archs")
    p.add_argument("file", type=Path, help="fatbin, cubin, PTX, or an ELF file holding fatbins")
    p.add_argument("--arch", action="append", required=True, type=_arch, metavar="ARCH",
                   help="device arch to check, e.g. sm_90 (repeat for several)")
    p.add_argument("--driver", type=_driver, metavar="X.Y",
                   help="CUDA version of the driver (e.g. 13.0); limits the PTX it can JIT")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_check)


def _arch(text: str) -> Arch:
    try:
        return Arch.parse(text)
    except InvalidArgumentError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _driver(text: str) -> tuple[int, int]:
    m = _DRIVER_RE.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a CUDA version like 13.0 (the driver's CUDA version, not its branch)")
    return int(m.group(1)), int(m.group(2) or 0)


def _cell(d: Decision) -> str:
    if d.image is None:
        return f"none: {(d.error or '').removeprefix('CUDA_ERROR_')}"
    if d.how == "sass":
        return f"SASS {d.image.arch.sm}"
    return f"PTX-JIT {d.image.arch.compute} *"


def _check(args: argparse.Namespace) -> int:
    from ..compat import image_sets

    archs: list[Arch] = list(dict.fromkeys(args.arch))
    sets = image_sets(args.file)
    if not sets:  # nothing can load: not "every requested arch is fine"
        raise FormatError(f"{args.file}: no device code (no fatbin, cubin or PTX)")
    rows = [(s, _rows(s, archs, args.driver)) for s in sets]
    ok = all(d.loadable for _, kernels in rows for _, ds in kernels for d in ds)
    if args.json:
        json.dump(_json(args, archs, rows, ok), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print(args, archs, rows)
    return 0 if ok else 1


def _rows(s: ImageSet, archs: list[Arch], driver: tuple[int, int] | None,
          ) -> list[tuple[str | None, list[Decision]]]:
    kernels: list[str | None] = list(s.kernels) or [None]
    return [(k, [s.decide(a, driver, k) for a in archs]) for k in kernels]


def _json(args: argparse.Namespace, archs: list[Arch],
          rows: list[tuple[ImageSet, list[tuple[str | None, list[Decision]]]]],
          ok: bool) -> dict[str, Any]:
    return {
        "file": str(args.file),
        "driver": f"{args.driver[0]}.{args.driver[1]}" if args.driver else None,
        "archs": [a.sm for a in archs],
        "ok": ok,
        "modules": [
            {
                "module": s.label,
                "raw": s.raw,
                "images": [{"kind": i.kind,
                            "arch": i.arch.compute if i.kind == "ptx" else i.arch.sm,
                            "label": i.label,
                            "ptx_version": f"{i.ptx_version[0]}.{i.ptx_version[1]}"
                            if i.ptx_version else None} for i in s.images],
                "kernels": [{"name": k, "archs": {a.sm: d.to_dict() for a, d in
                                                  zip(archs, ds, strict=True)}}
                            for k, ds in kernels],
            }
            for s, kernels in rows
        ],
    }


def _print(args: argparse.Namespace, archs: list[Arch],
           rows: list[tuple[ImageSet, list[tuple[str | None, list[Decision]]]]]) -> None:
    driver = f", driver CUDA {args.driver[0]}.{args.driver[1]}" if args.driver else ""
    print(f"{args.file}: {len(rows)} module(s){driver}")
    jit = False
    for s, kernels in rows:
        names = ", ".join(i.name for i in s.images) or "no loadable images"
        print(f"\n{s.label}: {names}")
        # kernels with the same decisions on every arch share one row
        grouped: dict[tuple[str, ...], list[str]] = {}
        for k, ds in kernels:
            grouped.setdefault(tuple(_cell(d) for d in ds), []).append(k or "(no kernels)")
        width = max(8, *(len(_label(v)) for v in grouped.values())) + 2
        cw = max(10, *(len(c) for cells in grouped for c in cells)) + 2
        print("  " + "KERNEL".ljust(width) + "".join(a.sm.ljust(cw) for a in archs).rstrip())
        for cells, ks in grouped.items():
            print("  " + _label(ks).ljust(width) + "".join(c.ljust(cw) for c in cells).rstrip())
            jit = jit or any(c.startswith("PTX-JIT") for c in cells)
        reasons: dict[str, None] = {}
        for _, ds in kernels:
            for a, d in zip(archs, ds, strict=True):
                if d.how != "sass":
                    reasons.setdefault(f"  {a.sm}: {d.reason}")
        for line in reasons:
            print(line)
    if jit:
        print(f"\n* {JIT_NOTE}")


def _label(kernels: list[str], limit: int = 40) -> str:
    first = kernels[0] if len(kernels[0]) <= limit else kernels[0][:limit - 3] + "..."
    return first if len(kernels) == 1 else f"{first} (+{len(kernels) - 1} more)"
