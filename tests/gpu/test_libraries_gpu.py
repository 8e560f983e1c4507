"""`fatbinkit check` on the vendor libraries this machine really runs, against running them.

A child process does real GPU work with the machine's own libraries (CuPy random numbers through
cuRAND, a PyTorch matrix product through cuBLAS/cuBLASLt, PyTorch's own kernels) and lists the
shared libraries it mapped. Every one of them that holds device code must then get the verdict
"works" (exit 0) from ``fatbinkit check --arch <this GPU> --driver <this driver>``: the libraries
worked here, so a "fails" would be a wrong answer. The report lists each library's producer
toolkit, verdict and minimum driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fatbinkit.runtime import Device
from fatbinkit.scan import scan

WORKLOAD = r"""
import json, sys
done = {}
try:
    import cupy
    x = cupy.random.rand(1 << 20, dtype=cupy.float32)
    done["cupy.random (cuRAND)"] = float(x.mean())
except Exception as e:
    done["cupy.random (cuRAND)"] = f"failed: {type(e).__name__}: {e}"
try:
    import torch
    a = torch.randn(512, 512, device="cuda")
    done["torch matmul (cuBLAS)"] = float((a @ a).abs().sum())
    torch.cuda.synchronize()
except Exception as e:
    done["torch matmul (cuBLAS)"] = f"failed: {type(e).__name__}: {e}"
maps = sorted({line.split()[-1] for line in open("/proc/self/maps")
               if ".so" in line.split()[-1]})
print(json.dumps({"done": done, "maps": maps}))
"""


def _workload() -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-c", WORKLOAD], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return doc


# the libraries the workload uses (torch maps many more at import that it never calls here)
USED = ("_generator_api", "libcurand", "libcublas", "libtorch_cuda")


def _has_device_code(path: str) -> bool:
    try:
        return bool(scan(Path(path)))
    except Exception:
        return False


def test_libraries_that_ran_here_check_as_working(gpu: Device) -> None:
    run = _workload()
    ran = {k: v for k, v in run["done"].items() if not str(v).startswith("failed")}
    if not ran:
        pytest.skip(f"no GPU workload ran here: {run['done']}")
    libraries = [p for p in run["maps"]
                 if any(u in Path(p).name for u in USED) and _has_device_code(p)]
    assert libraries, "the workload mapped no library with device code"
    driver = "{}.{}".format(*gpu.driver_version)
    rows = []
    for lib in libraries:
        proc = subprocess.run(
            [sys.executable, "-m", "fatbinkit", "check", lib, "--arch", gpu.arch.sm,
             "--driver", driver, "--json"], capture_output=True, text=True, check=False)
        assert proc.returncode in (0, 1) and proc.stdout, f"{lib}: {proc.stderr}"
        doc = json.loads(proc.stdout)
        verdict = doc["verdicts"][gpu.arch.sm]
        toolkits = sorted({i["toolkit"] for m in doc["modules"] for i in m["images"]
                           if i["toolkit"]})
        rows.append({"library": Path(lib).name, "status": verdict["status"],
                     "modules": verdict["modules"], "restricted": len(verdict["restricted"]),
                     "data_only_failed": len(verdict["data_only_failed"]),
                     "min_driver": verdict["min_driver"], "toolkits": toolkits,
                     "reason": verdict["reason"], "exit": proc.returncode})
    target = os.environ.get("FATBINKIT_GPU_REPORT")
    if target:
        path = Path(target)
        report = json.loads(path.read_text()) if path.is_file() else {}
        report["libraries"] = {"ran": ran, "driver": driver, "arch": gpu.arch.sm, "rows": rows}
        path.write_text(json.dumps(report, indent=2) + "\n")
    wrong = [r for r in rows if r["exit"] != 0]
    assert not wrong, f"check says these libraries fail, yet they ran: {wrong}"
