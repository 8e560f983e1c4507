"""The device code outside ``.nv_fatbin`` handed to the driver (issue 31).

``python3 -m tests.gpu.hidden_load OUT LIB [LIB...]``: for each library, the deep scan's modules
(:func:`fatbinkit.scan.scan` with ``everywhere``) that hold an image an sm_90 GPU loads, handed
to ``cuModuleLoadData`` as the library would hand them: a fatbin container as stored (the
driver picks the image), a zstd-compressed cubin inflated. Every SASS module is loaded, PTX
modules (JIT-compiled at load, ~0.1 s each) up to ``--ptx N``. Counts per section, form and
result go to ``OUT/hidden_load.json``; exit 1 when a module the driver should load fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("libs", type=Path, nargs="+")
    ap.add_argument("--ptx", type=int, default=40)
    args = ap.parse_args()
    from cuda.bindings import driver as cu

    from fatbinkit.formats.codec import ZSTD_MAGIC
    from fatbinkit.scan import scan

    def check(r: tuple) -> object:  # type: ignore[type-arg]
        if r[0] != cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(r[0])
        return r[1] if len(r) > 1 else None

    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    doc: dict[str, object] = {}
    bad = 0
    for lib in args.libs:
        t = time.perf_counter()
        codes = [c for c in scan(lib, everywhere=True) if c.hidden]
        data = lib.read_bytes()
        modules: dict[int, list] = {}  # type: ignore[type-arg]
        for c in codes:
            modules.setdefault(c.container, []).append(c)
        counts: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        ptx = 0
        for group in modules.values():
            sass = any(c.kind == "sass" and c.target in ("sm_90", "sm_90a") for c in group)
            jit = any(c.kind == "ptx" and int(c.target.split("_")[1].rstrip("af")) <= 90
                      for c in group)
            if not (sass or jit) or (not sass and ptx >= args.ptx):
                continue
            ptx += not sass
            first = min(c.offset for c in group)
            raw = data[first:first + 4] == ZSTD_MAGIC or data[first:first + 4] == b"\x7fELF"
            if raw:  # a cubin: what the library inflates and loads
                image, form = group[0].data(), "cubin"
            else:  # the container, from its header to its end, as stored
                start = first - 16
                size = 16 + int.from_bytes(data[start + 8:start + 16], "little")
                image, form = data[start:start + size], "container"
            key = f"{group[0].source} {form} {'sass' if sass else 'ptx'}"
            err, mod = cu.cuModuleLoadData(image)
            if err == cu.CUresult.CUDA_SUCCESS:
                counts[key + " loaded"] += 1
                cu.cuModuleUnload(mod)
            else:
                counts[key + " FAILED"] += 1
                errors[f"{key}: {err.name}"] += 1
                bad += 1
        doc[str(lib)] = {"hidden_images": len(codes), "modules": len(modules),
                         "counts": dict(counts), "errors": dict(errors),
                         "seconds": round(time.perf_counter() - t, 1)}
        print(lib, json.dumps(doc[str(lib)], indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hidden_load.json").write_text(json.dumps(doc, indent=1))
    print("RESULT:", "all loaded" if not bad else f"{bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
