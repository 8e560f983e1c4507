"""``fatbinkit check FILE --arch sm_90 ... [--driver 13.0] [--strict] [--json]``: will it load?

For every load unit in FILE (each fatbin container, or the bare cubin/PTX), every kernel and every
requested arch: which image the driver would use (SASS, or PTX JIT-compiled at load: a cold-start
cost) or why nothing fits, the driver floor that failed and the CUDA error that follows. Then one
verdict per arch for the whole file (:class:`fatbinkit.verdict.ArchVerdict`): exit status 1 when an
arch fails (a module the driver would pick an image for cannot load, or no module with kernels
loads at all), or, with ``--strict``, when some module holds no image for it or a data-only
module cannot load. The text gives the verdicts first (modules as SASS, by PTX JIT, that cannot
load), then the tables of the modules that need a look; ``--min-driver`` prints the lowest
driver each arch needs instead. A thin layer over :meth:`fatbinkit.binary.Binary.check`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .. import vendors
from ..decision import NATIVE, dotted
from ..errors import FormatError
from ..formats.arch import Arch
from ..infile import is_collection
from .args import add_budget, add_everywhere, driver, examples, gpu, kernel_filter
from .fatbin import (
    dump,
    open_input,
    progress,
    progress_done,
    shown,
    skipped,
    without_cyclic_gc,
)

if TYPE_CHECKING:  # the engine is imported by the handler: `fatbinkit ls` starts faster
    from collections.abc import Sequence

    from ..binary import Check
    from ..collection import TotalCheck
    from ..decision import Decision
    from ..imagesets import ImageSet
    from ..verdict import ArchVerdict, TotalVerdict

UNREAD_NOTE = ("note: only the images these archs load were read; kernels that only other archs' "
               "images hold are not looked for (--strict or --verbose reads every image)")
TABLES_SHOWN = 8  # module tables printed without --verbose (modules that fail or need JIT)

def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``check``."""
    p = sub.add_parser(
        "check", help="predict which image each kernel loads on given GPU archs and drivers",
        description="Predict what the CUDA driver does with FILE's device code on each --arch "
        "(and --driver): exit 0 when every arch works, 1 when one fails.",
        epilog=examples("fatbinkit check libfoo.so --arch sm_90 --arch sm_120 --driver 12.8",
                        "fatbinkit check k.fatbin --arch sm_100 --driver 570.124.06 --json",
                        "fatbinkit check libfoo.so --min-driver"))
    p.add_argument("file", type=Path,
                   help="fatbin, cubin, PTX, an ELF or PE file holding fatbins, a static "
                   "library, or a wheel or folder of them")
    p.add_argument("--arch", action="append", type=gpu, metavar="ARCH",
                   help="device arch to check, e.g. sm_90 (repeat for several)")
    p.add_argument("--driver", "--rocm", type=driver, metavar="VERSION",
                   help="the driver: its CUDA version (13.0) or driver version (580.65.06); "
                   "checks every driver floor (device, toolkit, compression, PTX ISA); for AMD "
                   "GPUs the ROCm release (6.4): code object version, compression, generic "
                   "targets, SPIR-V")
    p.add_argument("--strict", action="store_true",
                   help="every module must load: one built for other GPUs only, or a data-only "
                   "module that cannot load, fails the arch")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="every module's table with untruncated kernel names, and the modules "
                   "restricted to other archs (reads every image, as --strict does; by default "
                   "only the images the given archs could load are read)")
    p.add_argument("--kernel", type=kernel_filter, metavar="PATTERN",
                   help="judge only kernels matching PATTERN: a glob on the mangled or "
                   "demangled name, or re:REGEX")
    p.add_argument("--demangle", action="store_true",
                   help="print C++ kernel names demangled (as c++filt)")
    p.add_argument("--min-driver", "--min-rocm", action="store_true",
                   help="print the minimum driver (AMD: ROCm release) per arch (all known archs "
                   "of the file's vendors without --arch)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_everywhere(p)
    add_budget(p)
    p.set_defaults(func=_check, parser=p)


@without_cyclic_gc
def _check(args: argparse.Namespace) -> int:
    if args.min_driver and args.driver:
        args.parser.error("--min-driver computes the driver a file needs: it takes no --driver")
    if not args.arch and not args.min_driver:
        args.parser.error("the following arguments are required: --arch (or --min-driver)")
    if is_collection(args.file):
        return _check_many(args)
    binary = open_input(args, entryless=True)
    every_image = args.strict or args.verbose
    if args.min_driver:
        least = binary.min_driver(args.arch, args.kernel, every_image=every_image,
                                  max_decompressed=args.max_decompressed)
        _judged_some(args, least.modules)
        if args.json:
            dump(least.to_dict())
        else:
            print(least)
        return 0
    result = binary.check(args.arch, args.driver, args.kernel, every_image=every_image,
                          max_decompressed=args.max_decompressed, progress=sys.stderr.isatty())
    _judged_some(args, len(result.rows))
    if args.json:
        dump(result.to_dict(args.strict))
    else:
        _print(args, result)
    return 0 if (result.strict_ok if args.strict else result.ok) else 1


def _judged_some(args: argparse.Namespace, modules: int) -> None:
    """A file with no module to judge is an error: no kernel matches, or no SASS or PTX."""
    if modules:
        return
    if args.kernel is not None:
        raise FormatError(f"{args.file}: no kernel matches {args.kernel}")
    raise FormatError(f"{args.file}: does not contain device code the driver loads "
                      "(no SASS or PTX)")


def _check_many(args: argparse.Namespace) -> int:
    """``check`` of a wheel or folder: the total verdict per arch (the worst file's), a table of
    each library's verdicts, and why each library that does not work fails; ``--verbose`` adds
    each library's own report; ``--min-driver`` the highest floor per arch and the library that
    sets it. A library built once per CUDA version counts as the build that serves each arch
    (and driver), which the text and JSON name with the group's lowest driver."""
    from ..collection import check, min_driver
    from ..verdict import TotalVerdict

    every_image = args.strict or args.verbose
    if args.min_driver:
        try:
            least = min_driver(args.file, args.arch, args.kernel, every_image=every_image,
                               max_decompressed=args.max_decompressed, progress=progress,
                               skipped=skipped, everywhere=args.everywhere)
        finally:
            progress_done()
        if args.json:
            dump(least.to_dict())
        else:
            print(least)
            _print_alternatives(least.alternatives, [
                a.verdict for a in least.archs if isinstance(a.verdict, TotalVerdict)],
                serving=False)
        return 0
    try:
        total = check(args.file, args.arch, args.driver, args.kernel, every_image=every_image,
                      max_decompressed=args.max_decompressed, progress=progress,
                      skipped=skipped, everywhere=args.everywhere)
    finally:
        progress_done()
    if args.json:
        dump(total.to_dict(args.strict))
    else:
        _print_many(args, total)
    return 0 if (total.strict_ok if args.strict else total.ok) else 1


def _print_alternatives(alternatives: Sequence[tuple[str, Sequence[str]]],
                        verdicts: Sequence[TotalVerdict], serving: bool = True) -> None:
    """Each group of builds per CUDA version: per arch the build that serves it (with
    ``serving``) and the lowest driver a build needs, with that build."""
    if not alternatives:
        return
    from ..collection import cuda_build

    print("\nalternatives (one library built per CUDA version; the package loads one):")
    width = max(len(str(v.device)) for v in verdicts) + 2
    for group, members in alternatives:
        builds = [b for b in map(cuda_build, members) if b is not None]  # each names one
        print(f"  {group}: {len(members)} builds (CUDA "
              + ", ".join(f"{a}.{'x' if b < 0 else b}" for a, b in builds) + ")")
        for v in verdicts:
            if group not in dict(v.alternatives):  # another vendor's GPU: not its builds
                continue
            low = v.floor(group)
            lowest = ("no build's driver floor known" if low is None else
                      f"lowest driver {_vendor(v).runtime_text(low[1])}: "
                      f"{_in_group(group, low[0])}")
            print(f"    {str(v.device).ljust(width)}"
                  + (f"served by {_in_group(group, v.serving(group))}; " if serving else "")
                  + lowest)


def _vendor(verdict: ArchVerdict | TotalVerdict) -> vendors.Vendor:
    """The vendor whose rules made ``verdict`` (whose words its text uses)."""
    return vendors.VENDORS[verdict.vendor]


def _in_group(group: str, name: str) -> str:
    """``name`` without the folder of ``group`` (where its builds lie, as a rule)."""
    folder = group.rpartition("/")[0]
    return name.removeprefix(folder + "/") if folder else name


def _print_many(args: argparse.Namespace, total: TotalCheck) -> None:
    driver = (f", {_vendor(total.verdicts[0]).words['runtime']} {dotted(args.driver)}"
              if args.driver else "")
    kernels = f", kernels matching {args.kernel}" if args.kernel is not None else ""
    empty = len(total.verdicts[0].empty)
    print(f"{args.file}: {len(total.checks)} file(s) with device code, {total.modules} module(s)"
          + (f", {empty} of them empty (never loaded, not counted below)" if empty else "")
          + kernels + driver)
    if not args.driver:
        for note in dict.fromkeys(_vendor(v).words["unchecked"] for v in total.verdicts):
            print(note)
    _print_verdicts(args, total.verdicts)
    _print_alternatives(total.alternatives, total.verdicts)
    width = max(len(c.file) for c in total.checks) + 2
    counted = [{n for n, _ in t.units} for t in total.verdicts]  # per arch: not an idle build
    cells = [[_file_cell(v, args.strict) if c.file in counted[i] else
              f"({'none' if v.holds_nothing else v.status})" for i, v in enumerate(c.verdicts)]
             for c in total.checks]
    cw = max(9, *(len(str(a)) + 2 for a in total.archs), *(len(x) + 2 for r in cells for x in r))
    print("\n  " + "FILE".ljust(width) + "".join(str(a).ljust(cw) for a in total.archs).rstrip())
    for c, row in zip(total.checks, cells, strict=True):
        print("  " + c.file.ljust(width) + "".join(x.ljust(cw) for x in row).rstrip())
    if any(x.startswith("(") for r in cells for x in r):
        print("  (status): a build for another CUDA version, not the one loaded on this arch "
              "(and driver): not counted")
    why = [f"  {c.file}: {v.device!s}: {v.reason}" for c in total.checks
           for i, v in enumerate(c.verdicts) if v.status != "works" and c.file in counted[i]]
    if why:
        print("\nwhy:")
        for line in why if args.verbose else why[:TABLES_SHOWN * 4]:
            print(line)
        if len(why) > TABLES_SHOWN * 4 and not args.verbose:
            print(f"  ... {len(why) - TABLES_SHOWN * 4} more (--verbose shows every one)")
    if not total.every_image_read:
        print(UNREAD_NOTE)
    if args.verbose:
        for c in total.checks:
            print(f"\n== {c.file} ==")
            _print(args, c)


def _file_cell(v: ArchVerdict, strict: bool) -> str:
    """A library's verdict in the table of a wheel or folder: ``none`` when it holds no image
    for the arch; in capitals when it fails the total."""
    status = "none" if v.holds_nothing else v.status
    return status.upper() if status == "fails" or (strict and status != "works") else status


def _needs(v: ArchVerdict | TotalVerdict) -> str:
    """``needs CUDA 12.0 (driver >= 525.60.13)``, with the device's last driver when it has one;
    empty when no image is picked (:attr:`fatbinkit.verdict.ArchMinDriver.needs`)."""
    from ..verdict import ArchMinDriver

    return ArchMinDriver.of(v).needs


def _cell(d: Decision, words: Mapping[str, str]) -> str:
    """``SASS sm_90``, ``PTX-JIT compute_80 *``, ``none: NO_BINARY_FOR_GPU`` in the vendor's
    ``words`` (AMD: ``native gfx942``, ``SPIR-V-JIT amdgcnspirv *``)."""
    if d.image is None:
        return f"none: {(d.error or '').removeprefix('CUDA_ERROR_')}"
    if d.how == NATIVE:
        return f"{words['native']} {d.image.arch_name}"
    return f"{words['jit'].replace(' ', '-')} {d.image.arch_name} *"


def _print(args: argparse.Namespace, result: Check) -> None:
    """The verdict first (one line per arch), then the modules a user has to look at: those
    that cannot load or need PTX JIT (every module with --verbose)."""
    archs, rows, verdicts = result.archs, result.rows, result.verdicts
    driver = (f", {_vendor(verdicts[0]).words['runtime']} {dotted(args.driver)}"
              if args.driver else "")
    empty = len(verdicts[0].empty) if verdicts else 0
    kernels = f", kernels matching {args.kernel}" if args.kernel is not None else ""
    print(f"{result.file}: {len(rows)} module(s)" + (f", {empty} of them empty (no kernels, no "
                                                      "variables: never loaded, not counted "
                                                      "below)" if empty else "")
          + kernels + driver)
    if not args.driver and verdicts:
        print(_vendor(verdicts[0]).words["unchecked"])
    _print_verdicts(args, verdicts)
    if not result.every_image_read:
        print(UNREAD_NOTE)
    for w in dict.fromkeys(w for v in verdicts for w in v.warnings):
        print(f"warning: {w}")
    # the modules to look at: cannot load, or load by JIT (with --strict also the restricted)
    shown = [r for r in rows if args.verbose or _attention(r, args.strict)]
    limit = len(shown) if args.verbose else TABLES_SHOWN
    notes: dict[str, None] = {}  # what JIT at load means, per vendor whose modules need it
    for s, ks in shown[:limit]:
        if _print_module(s, ks, archs, args.verbose, args.demangle):
            notes.setdefault(vendors.VENDORS[s.vendor].words["jit_note"])
    if len(shown) > limit:
        print(f"\n... {len(shown) - limit} more module(s) that cannot load or need PTX JIT "
              "(--verbose shows every module)")
    if not shown and not args.verbose:
        print("no module needs PTX JIT or fails to load an image the driver picks (--verbose "
              "shows every module)")
    if notes:
        print("\n" + "\n".join(f"* {n}" for n in notes))


def _print_verdicts(args: argparse.Namespace,
                    verdicts: Sequence[ArchVerdict] | Sequence[TotalVerdict]) -> None:
    """One line per arch: status, module counts and the driver needed, then why (for a wheel
    or folder, which file first)."""
    from ..verdict import ArchVerdict

    print("verdict" + (" (--strict)" if args.strict else "") + ":")
    width = max(len(str(v.device)) for v in verdicts) + 2
    for v in verdicts:
        status = v.status if (v.strict_ok if args.strict else v.ok) else v.status.upper()
        n = v.counts
        words = _vendor(v).words
        counts = (f"{n['sass']} {words['native']}, {n['jit']} {words['jit']}, "
                  f"{n['cannot']} cannot load") + (
            f", {n['other_gpus']} for other GPUs only" if n["other_gpus"] else "")
        needs = _needs(v)
        print(f"  {str(v.device).ljust(width)}{status.ljust(9)}{counts}"
              + (f"; {needs}" if needs else ""))
        if v.status != "works":  # why: the reason groups, under the verdict line
            print(f"  {''.ljust(width)}{''.ljust(9)}{v.reason}")
        if not isinstance(v, ArchVerdict) or not (args.verbose or args.strict):
            continue  # a wheel's or folder's details are in each file's report
        if v.restricted:
            print("    built for other GPUs: " + ", ".join(v.restricted))
        if v.missing:
            print("    kernels not in this arch's image: " + ", ".join(
                f"{shown(k, args.demangle)} ({m})" for m, k in v.missing[:20])
                + (" ..." if len(v.missing) > 20 else ""))
        if v.data_only_failed:
            print("    data-only, cannot load: " + ", ".join(m for m, _ in v.data_only_failed))


def _attention(row: tuple[ImageSet, list[tuple[str | None, list[Decision]]]],
               strict: bool) -> bool:
    """Whether a module needs a look: some arch JITs its PTX or cannot load it (a module built
    for other GPUs only counts with --strict)."""
    s, kernels = row
    if s.empty:
        return False
    for i in range(len(kernels[0][1]) if kernels else 0):
        ds = [d[i] for _, d in kernels]
        if any(d.how == "ptx-jit" for d in ds):
            return True
        if not any(d.loadable for d in ds) and (strict or not all(d.restricted for d in ds)):
            return True
    return False


def _print_module(s: ImageSet, kernels: list[tuple[str | None, list[Decision]]],
                  archs: Sequence[Arch], verbose: bool, demangled: bool) -> bool:
    names = ", ".join(i.name for i in s.images) or (
        "no entries (an empty container: kernels unknown)" if s.entryless
        else "no loadable images")
    print(f"\n{s.label}: {names}")
    words = vendors.VENDORS[s.vendor].words
    # kernels with the same decisions on every arch share one row
    grouped: dict[tuple[str, ...], list[str]] = {}
    for k, ds in kernels:
        grouped.setdefault(tuple(_cell(d, words) for d in ds), []).append(
            shown(k, demangled) if k else "(kernels unknown)" if s.entryless else "(no kernels)")
    limit = 1 << 30 if verbose else 60
    width = max(8, *(len(_label(v, limit)) for v in grouped.values())) + 2
    cw = max(10, *(len(c) for cells in grouped for c in cells)) + 2
    print("  " + "KERNEL".ljust(width) + "".join(str(a).ljust(cw) for a in archs).rstrip())
    jit = False
    for cells, ks in grouped.items():
        print("  " + _label(ks, limit).ljust(width)
              + "".join(c.ljust(cw) for c in cells).rstrip())
        jit = jit or any(c.endswith(" *") for c in cells)
    reasons: dict[str, None] = {}
    for _, ds in kernels:
        for a, d in zip(archs, ds, strict=True):
            if d.how != NATIVE:
                floor = f"[{d.floor.what} floor] " if d.floor else ""
                reasons.setdefault(f"  {a!s}: {floor}{d.reason}")
    for line in reasons:
        print(line)
    return jit


def _label(kernels: list[str], limit: int) -> str:
    first = kernels[0] if len(kernels[0]) <= limit else kernels[0][:limit - 3] + "..."
    return first if len(kernels) == 1 else f"{first} (+{len(kernels) - 1} more)"
