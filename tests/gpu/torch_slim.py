"""torch with its CUDA libraries pruned, run on the GPU beside the unpruned torch of the machine.

``python3 -m tests.gpu.torch_slim OUT [--for sm_90] [--codec zstd --level 19]`` builds a shadow
of the machine's ``torch`` and ``nvidia`` packages under ``/tmp/slimtorch`` (every file a symbolic
link, except each library with device code, which ``fatbinkit.slim.prune`` writes pruned), runs
the same smoke suite with the real and with the shadow torch (a fresh process each, the shadow
first on ``PYTHONPATH``; ``/proc/self/maps`` shows which libraries were mapped), and compares
every result bit for bit. Sizes, times and results go to ``OUT/torch_slim.json``.

``--everywhere`` prunes the containers outside ``.nv_fatbin`` too (issue 31), ``--only NAME``
(repeatable) prunes only the libraries whose file name contains NAME (the others stay links),
``--suite blasfft`` runs matmuls (fp32/fp16/bf16/fp8, cuBLAS and cuBLASLt, bias epilogues) and
FFTs (sizes 64 to 2^20, primes, c32/c64/c128, 2-D, 3-D, STFT) instead of the smoke suite. Each
pruned library's deflated size (zlib level 6, as a wheel stores it) is reported before and
after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SMOKE = r"""
import json, sys, torch
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
dev = "cuda"
def r(*shape):
    return torch.randn(*shape, generator=g).to(dev)
out = {}
a, b = r(257, 129), r(129, 65)
out["matmul"] = a @ b                                            # cuBLAS
out["matmul_bf16"] = (a.bfloat16() @ b.bfloat16()).float()
out["bmm"] = torch.bmm(r(8, 33, 17), r(8, 17, 9))
x = r(4, 3, 32, 32)
out["conv"] = torch.nn.functional.conv2d(x, r(8, 3, 3, 3), padding=1)  # cuDNN
out["batchnorm"] = torch.nn.functional.batch_norm(x, None, None, training=True)
out["softmax"] = torch.softmax(a, dim=1)
out["logsumexp"] = torch.logsumexp(a, dim=0)
out["sum"], out["mean"], out["max"] = a.sum(0), a.mean(), a.max(1).values
out["cumsum"] = a.cumsum(1)
v = r(100000)
out["sort"], out["argsort"] = torch.sort(v).values, torch.argsort(v)
out["topk"] = torch.topk(v, 50).values
idx = torch.randint(0, 257, (300,), generator=g).to(dev)
out["index_select"] = a.index_select(0, idx)
out["mask"] = a[a > 0.5]
out["gather"] = torch.gather(a, 1, (idx[:, None] % 129).expand(300, 5)[:257])
out["scatter_add"] = torch.zeros(257, device=dev).scatter_add(0, idx, torch.ones(300, device=dev))
out["unique"] = torch.unique(idx)
out["fft"] = torch.fft.rfft(v).abs()                              # cuFFT
out["solve"] = torch.linalg.solve(r(64, 64) + 64 * torch.eye(64, device=dev), r(64, 3))  # cuSOLVER
out["rand"] = torch.rand(1000, device=dev, generator=torch.Generator(dev).manual_seed(1))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 32 * 32, 10)).to(dev)
loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([1, 2, 3, 4], device=dev))
loss.backward()                                                  # autograd backward
out["loss"] = loss.detach()
out["grad_conv"], out["grad_linear"] = model[0].weight.grad, model[3].weight.grad
torch.cuda.synchronize()
torch.save({k: t.detach().cpu() for k, t in out.items()}, sys.argv[1])
maps = open("/proc/self/maps").read().splitlines()
libs = sorted({line.split()[-1] for line in maps if ".so" in line
               and ("/torch/" in line or "/nvidia/" in line)})
print(json.dumps({"torch": torch.__file__, "device": torch.cuda.get_device_name(),
                  "libs": libs}))
"""


BLASFFT = r"""
import json, sys, torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
g = torch.Generator().manual_seed(0)
dev = "cuda"
def r(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dev, dtype)
out, errors = {}, {}
def case(key, fn):
    try:
        out[key] = fn()
    except Exception as e:  # recorded: both runs must fail alike
        errors[key] = f"{type(e).__name__}: {str(e)[:200]}"
for lib in ("cublas", "cublaslt"):
    torch.backends.cuda.preferred_blas_library(lib)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        name = str(dt).split(".")[1]
        for m, k, n in ((257, 129, 65), (1024, 1024, 1024), (4096, 512, 2048), (33, 4096, 17)):
            a, b, bias = r(m, k, dtype=dt), r(k, n, dtype=dt), r(n, dtype=dt)
            key = f"{lib}:{name}:{m}x{k}x{n}"
            case(key + ":mm", lambda: a @ b)
            case(key + ":addmm", lambda: torch.addmm(bias, a, b))
            case(key + ":linear_gelu", lambda: torch.nn.functional.gelu(
                torch.nn.functional.linear(a, b.t().contiguous(), bias)))
            case(key + ":mm_t", lambda: a.t().contiguous().t() @ b)
        x, y = r(16, 64, 96, dtype=dt), r(16, 96, 48, dtype=dt)
        case(f"{lib}:{name}:bmm", lambda: torch.bmm(x, y))
        case(f"{lib}:{name}:baddbmm", lambda: torch.baddbmm(r(16, 64, 48, dtype=dt), x, y))
a8 = r(256, 512).to(torch.float8_e4m3fn)
b8 = r(384, 512).to(torch.float8_e4m3fn).t()
one = torch.ones((), device=dev)
case("fp8:scaled_mm", lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one,
                                               out_dtype=torch.bfloat16))
for n in (64, 97, 1000, 2310, 4096, 65536, 1 << 20):
    x = r(8, n)
    z = torch.complex(r(8, n), r(8, n))
    case(f"fft:c64:{n}", lambda: torch.fft.fft(z))
    case(f"ifft:c64:{n}", lambda: torch.fft.ifft(z))
    case(f"rfft:f32:{n}", lambda: torch.fft.rfft(x))
    case(f"irfft:f32:{n}", lambda: torch.fft.irfft(torch.fft.rfft(x), n))
    case(f"fft:c128:{n}", lambda: torch.fft.fft(z.to(torch.complex128)))
    if n & (n - 1) == 0:
        case(f"fft:c32:{n}", lambda: torch.fft.fft(z.to(torch.complex32)).to(torch.complex64))
case("fft2:c64", lambda: torch.fft.fft2(torch.complex(r(4, 256, 384), r(4, 256, 384))))
case("rfftn3:f32", lambda: torch.fft.rfftn(r(2, 64, 96, 50)))
case("stft", lambda: torch.stft(r(4, 16000), 400, hop_length=160,
                                window=torch.hann_window(400, device=dev), return_complex=True))
torch.cuda.synchronize()
torch.save({"out": {k: t.detach().cpu() for k, t in out.items()}, "errors": errors}, sys.argv[1])
maps = open("/proc/self/maps").read().splitlines()
libs = sorted({line.split()[-1] for line in maps if ".so" in line
               and ("/torch/" in line or "/nvidia/" in line)})
print(json.dumps({"torch": torch.__file__, "device": torch.cuda.get_device_name(),
                  "libs": libs, "cases": len(out), "errors": errors}))
"""


def _deflated(path: str) -> int:
    """The bytes of ``path`` deflated at zlib's level 6: what a wheel (zip) stores."""
    import zlib

    z = zlib.compressobj(6)
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(z.compress(chunk))
    return n + len(z.flush())


def _has_device_code(path: Path) -> bool:
    from fatbinkit.errors import FatbinkitError
    from fatbinkit.slim import has_device_code

    try:
        return has_device_code(path)
    except FatbinkitError:  # not an ELF file, or not one to slim
        return False


def _prune_one(job: tuple[str, str, list[str], str | None, int | None, bool]
               ) -> dict[str, object]:
    from fatbinkit.errors import FatbinkitError
    from fatbinkit.formats.arch import Arch
    from fatbinkit.slim import prune

    src, dst, archs, codec, level, everywhere = job
    t = time.perf_counter()
    row: dict[str, object] = {"file": src, "before": os.path.getsize(src)}
    try:
        report = prune(Path(src), Path(dst), [Arch.parse(a) for a in archs], codec=codec,
                       level=level, allow_newer_driver=True, everywhere=everywhere)
        row.update(after=report.output_size, device_before=report.device_before,
                   device_after=report.device_after, modules=report.modules,
                   min_driver=[str(a) for a in report.archs],
                   hidden=report.hidden.to_dict() if report.hidden else None)
        if everywhere:
            row.update(deflated_before=_deflated(src), deflated_after=_deflated(dst))
    except FatbinkitError as e:  # refused: the original stays (a symbolic link)
        os.symlink(src, dst)
        row.update(after=row["before"], refused=str(e))
    row["seconds"] = round(time.perf_counter() - t, 2)
    return row


def shadow(site: Path, root: Path, archs: list[str], codec: str | None,
           level: int | None, everywhere: bool = False,
           only: list[str] | None = None) -> list[dict[str, object]]:
    """Link ``site``'s torch and nvidia packages under ``root``; prune each library with
    device code into a real file."""
    if root.exists():
        shutil.rmtree(root)
    jobs = []
    for pkg in ("torch", "nvidia"):
        for dirpath, _dirs, filenames in os.walk(site / pkg):
            rel = Path(dirpath).relative_to(site)
            (root / rel).mkdir(parents=True, exist_ok=True)
            for name in filenames:
                src = Path(dirpath) / name
                if ".so" in name and not src.is_symlink() and \
                        (not only or any(o in name for o in only)) and _has_device_code(src):
                    jobs.append((str(src), str(root / rel / name), archs, codec, level,
                                 everywhere))
                else:
                    os.symlink(src, root / rel / name)
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        return list(pool.map(_prune_one, jobs))


def smoke(result: Path, pythonpath: str | None,
          extra: dict[str, str] | None = None, suite: str = SMOKE) -> dict[str, object]:
    env = dict(os.environ, **(extra or {}))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", suite, str(result)], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"error": proc.stderr[-3000:], "rc": proc.returncode}
    info: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    info["seconds"] = round(time.perf_counter() - t, 2)
    return info


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--for", dest="archs", action="append", default=None)
    ap.add_argument("--codec")
    ap.add_argument("--level", type=int)
    ap.add_argument("--everywhere", action="store_true")
    ap.add_argument("--only", action="append")
    ap.add_argument("--suite", choices=("smoke", "blasfft"), default="smoke")
    args = ap.parse_args()
    suite = BLASFFT if args.suite == "blasfft" else SMOKE
    import torch

    site = Path(torch.__file__).resolve().parent.parent
    root = Path("/tmp/slimtorch")
    t = time.perf_counter()
    rows = shadow(site, root, args.archs or ["sm_90"], args.codec, args.level, args.everywhere,
                  args.only)
    prune_seconds = round(time.perf_counter() - t, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    base = smoke(args.out / "base.pt", None, suite=suite)
    slim = smoke(args.out / "slim.pt", str(root), suite=suite)
    # every module loaded at start (modules pruned to no image at all included), as
    # CUDA_MODULE_LOADING=EAGER does: the pruned torch must start and compute the same
    eager = smoke(args.out / "eager.pt", str(root), {"CUDA_MODULE_LOADING": "EAGER"},
                  suite=suite)
    compare: dict[str, object] = {}
    if "error" not in base and "error" not in slim:
        a = torch.load(args.out / "base.pt")
        if args.suite == "blasfft":
            compare["cases"] = len(a["out"])  # type: ignore[assignment]
            base_errors = a["errors"]
            a = a["out"]
        for run in ("slim", "eager"):
            if not (args.out / f"{run}.pt").exists():
                compare[run] = "did not run"
                continue
            b = torch.load(args.out / f"{run}.pt")
            if args.suite == "blasfft":
                compare[f"{run}:errors"] = "equal" if b["errors"] == base_errors else \
                    f"differ: {b['errors']} vs {base_errors}"
                b = b["out"]
            for k in a:
                if k not in b:
                    compare[f"{run}:{k}"] = "missing"
                elif torch.equal(a[k], b[k]):
                    compare[f"{run}:{k}"] = "equal"
                else:
                    diff = (a[k].to(torch.complex128 if a[k].is_complex() else torch.float64)
                            - b[k].to(torch.complex128 if b[k].is_complex() else torch.float64))
                    compare[f"{run}:{k}"] = f"differs (max abs {float(diff.abs().max()):.3g})"
        shadowed = [p for p in slim["libs"] if str(p).startswith(str(root))]  # type: ignore[union-attr]
        slim["shadow_libs"] = len(shadowed)
    total_before = sum(int(r["before"]) for r in rows)  # type: ignore[call-overload]
    total_after = sum(int(r["after"]) for r in rows)  # type: ignore[call-overload]
    doc = {"archs": args.archs or ["sm_90"], "codec": args.codec, "level": args.level,
           "prune_seconds": prune_seconds, "total_before": total_before,
           "total_after": total_after, "libraries": rows, "base": base, "slim": slim,
           "eager": eager,
           "compare": compare}
    (args.out / "torch_slim.json").write_text(json.dumps(doc, indent=1))
    print(f"pruned {len(rows)} libraries in {prune_seconds} s: {total_before:,} -> "
          f"{total_after:,} bytes")
    for r in sorted(rows, key=lambda r: -int(r["before"])):  # type: ignore[call-overload]
        print(f"  {Path(str(r['file'])).name:40} {int(r['before']):>13,} -> "  # type: ignore[call-overload]
              f"{int(r['after']):>13,}  {r['seconds']} s  {r.get('refused', '')}")  # type: ignore[call-overload]
    print("base:", {k: v for k, v in base.items() if k != "libs"})
    print("slim:", {k: v for k, v in slim.items() if k != "libs"})
    print("eager:", {k: v for k, v in eager.items() if k != "libs"})
    print("compare:", compare)
    ok = bool(compare) and all(v == "equal" for k, v in compare.items() if k != "cases")
    print("RESULT:", "all equal" if ok else "NOT all equal")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
