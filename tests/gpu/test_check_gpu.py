"""The compatibility engine against the driver: predicted image or error == what the driver does.

Each case is a set of images of one kernel ``which`` that stores a mark saying which image it was
built as (SASS sm_80 only, sm_86, sm_90, sm_90a, sm_100/sm_120 only, PTX compute_80, PTX sm_90a,
PTX too new for the driver, mixes as fatbins written by ``fatbinkit.fatbin``, bare cubin/PTX).
For each, ``fatbinkit.compat`` predicts for this device and driver (cuDriverGetVersion); then the
image is loaded, and the kernel launched: the mark, CU_FUNC_ATTRIBUTE_BINARY_VERSION and
PTX_VERSION say which image the driver picked; or the CUresult must be the predicted error.
With FATBINKIT_GPU_REPORT set, the observed table is written there (JSON) and next to it (.md).
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fatbinkit.arch import Arch
from fatbinkit.compat import image_sets
from fatbinkit.errors import CudaError
from fatbinkit.fatbin import EntryKind, build_fatbin, make_entry
from fatbinkit.runtime import Buffer, Device, Module
from fatbinkit.toolchain import find_tool

SOURCE = 'extern "C" __global__ void which(int* out) { out[0] = MARK; }\n'

# image name -> (nvcc output kind, nvcc -arch value)
IMAGES = {
    "sm_80": ("cubin", "sm_80"),
    "sm_86": ("cubin", "sm_86"),
    "sm_90": ("cubin", "sm_90"),
    "sm_90a": ("cubin", "sm_90a"),
    "sm_100": ("cubin", "sm_100"),
    "sm_100f": ("cubin", "sm_100f"),
    "sm_120": ("cubin", "sm_120"),
    "compute_80": ("ptx", "compute_80"),
    "compute_90": ("ptx", "compute_90"),
    "compute_90a": ("ptx", "compute_90a"),
    "compute_100": ("ptx", "compute_100"),
    "compute_80@9.9": ("ptx", "compute_80"),  # .version edited to 9.9: newer than any driver
    "compute_90@9.9": ("ptx", "compute_90"),
}
MARKS = {name: i + 1 for i, name in enumerate(IMAGES)}

# (case name, images, bare): bare = the single image given to the driver as is, not in a fatbin
CASES = [
    ("SASS sm_80 only", ["sm_80"], False),
    ("SASS sm_86 only", ["sm_86"], False),
    ("SASS sm_90 only", ["sm_90"], False),
    ("SASS sm_90a only", ["sm_90a"], False),
    ("SASS sm_100 + sm_120", ["sm_100", "sm_120"], False),
    ("SASS sm_100f only", ["sm_100f"], False),
    ("PTX compute_80", ["compute_80"], False),
    ("PTX compute_90a", ["compute_90a"], False),
    ("PTX compute_100", ["compute_100"], False),
    ("PTX too new (9.9)", ["compute_80@9.9"], False),
    ("sm_90 + sm_90a", ["sm_90", "sm_90a"], False),
    ("sm_90a + sm_90", ["sm_90a", "sm_90"], False),
    ("sm_80 + sm_90 + compute_80", ["sm_80", "sm_90", "compute_80"], False),
    ("sm_80 + compute_90", ["sm_80", "compute_90"], False),
    ("sm_90a + compute_90", ["sm_90a", "compute_90"], False),
    ("compute_80 + compute_90a", ["compute_80", "compute_90a"], False),
    ("compute_80 + compute_90 too new", ["compute_80", "compute_90@9.9"], False),
    ("sm_90 + PTX too new", ["sm_90", "compute_90@9.9"], False),
    ("sm_100f + compute_80", ["sm_100f", "compute_80"], False),
    ("PTX sm_90a labelled compute_90", ["compute_90a as compute_90"], False),
    ("bare cubin sm_90", ["sm_90"], True),
    ("bare cubin sm_80", ["sm_80"], True),
    ("bare PTX compute_90a", ["compute_90a"], True),
    ("bare PTX compute_100", ["compute_100"], True),
    ("bare PTX too new (9.9)", ["compute_80@9.9"], True),
]


@dataclass
class Observed:
    case: str
    predicted: str
    observed: str
    binary_version: int | None = None
    ptx_version: int | None = None


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    nvcc = str(find_tool("nvcc"))  # PATH, $CUDA_HOME, /usr/local/cuda, pip wheels
    tmp = tmp_path_factory.mktemp("check-gpu")
    src = tmp / "which.cu"
    src.write_text(SOURCE)
    out: dict[str, bytes] = {}
    for name, (kind, arch) in IMAGES.items():
        path = tmp / f"{name.replace('@', '_')}.{kind}"
        subprocess.run([nvcc, f"-{kind}", f"-arch={arch}", f"-DMARK={MARKS[name]}", "-o",
                        str(path), str(src)], check=True, capture_output=True)
        data = path.read_bytes()
        if "@" in name:
            version = name.split("@")[1]
            data = re.sub(rb"^\.version \d+\.\d+", b".version " + version.encode(), data,
                          flags=re.M)
        out[name] = data
    return out


@pytest.fixture(scope="module")
def report() -> Iterator[list[Observed]]:
    rows: list[Observed] = []
    yield rows
    target = os.environ.get("FATBINKIT_GPU_REPORT")
    if not target or not rows:
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            doc = {}
    doc["check_gpu"] = [r.__dict__ for r in rows]
    path.write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["| images | predicted (fatbinkit.compat) | observed (driver) | "
             "BINARY_VERSION | PTX_VERSION |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.case} | {r.predicted} | {r.observed} | "
                     f"{r.binary_version if r.binary_version is not None else ''} | "
                     f"{r.ptx_version if r.ptx_version is not None else ''} |")
    path.with_name(path.stem + ".check.md").write_text("\n".join(lines) + "\n")


def _image_arch(name: str) -> Arch:
    return Arch.parse(name.split("@")[0])


def _built(name: str) -> str:
    """``compute_90a as compute_90``: image compute_90a stored under the label compute_90."""
    return name.split(" as ")[0]


def _blob(built: dict[str, bytes], names: list[str], bare: bool) -> bytes:
    if bare:
        return built[names[0]]
    entries = []
    for n in names:
        kind = EntryKind.PTX if n.startswith("compute") else EntryKind.ELF
        entries.append(make_entry(kind, _image_arch(n.split(" as ")[-1]), built[_built(n)]))
    return build_fatbin(entries)


@pytest.mark.parametrize("case, names, bare", CASES, ids=[c[0] for c in CASES])
def test_driver_does_what_compat_predicts(
    gpu: Device, built: dict[str, bytes], report: list[Observed], tmp_path: Path, case: str,
    names: list[str], bare: bool,
) -> None:
    blob = _blob(built, names, bare)
    (image_set,) = image_sets(blob)
    images = list(image_set.images)
    assert len(images) == len(names)
    decision = image_set.decide(gpu.arch, gpu.driver_version, "which")
    if decision.image is None:
        predicted = f"error {decision.error}"
    else:
        predicted = f"{decision.how} {names[images.index(decision.image)]}"
    # `fatbinkit check FILE --arch <device> --driver <device's>` says the same
    path = tmp_path / ("image.ptx" if names[0].startswith("compute") and bare else "image.bin")
    path.write_bytes(blob)
    cli = subprocess.run(
        [sys.executable, "-m", "fatbinkit", "check", str(path), "--arch", gpu.arch.sm,
         "--driver", "{}.{}".format(*gpu.driver_version), "--json"],
        capture_output=True, text=True, check=False)
    assert cli.returncode == (0 if decision.loadable else 1), cli.stderr
    said = json.loads(cli.stdout)["modules"][0]["kernels"][0]["archs"][gpu.arch.sm]
    assert (said["how"], said["error"]) == (decision.how, decision.error)
    try:
        module = Module.load(blob)
    except CudaError as exc:
        report.append(Observed(case, predicted, f"error {exc.code}"))
        assert decision.error == exc.code, f"{case}: predicted {predicted}, driver {exc.code}"
        return
    with module:
        kernel = module.kernel("which")
        with Buffer(4) as out:
            kernel.launch(1, 1, [out.ptr])
            (mark,) = struct.unpack("<i", out.to_bytes())
    picked = next(n for n in names if MARKS[_built(n)] == mark)
    how = "ptx-jit" if picked.startswith("compute") else "sass"
    report.append(Observed(case, predicted, f"{how} {picked}", kernel.binary_version,
                           kernel.ptx_version))
    assert decision.image is not None, f"{case}: predicted {predicted}, driver loaded {picked}"
    assert f"{decision.how} {names[images.index(decision.image)]}" == f"{how} {picked}"
    assert kernel.binary_version == gpu.arch.number or how == "sass"
    if how == "sass":
        assert kernel.binary_version == _image_arch(_built(picked)).number
    else:
        assert kernel.ptx_version == _image_arch(_built(picked)).number


def test_marks_launch(gpu: Device, built: dict[str, bytes]) -> None:
    """The mark mechanism itself: the native SASS reports its own mark."""
    native = f"sm_{gpu.arch.number}"
    if native not in built:
        pytest.skip(f"no {native} image in the matrix")
    with Module.load(built[native]) as module, Buffer(4) as out:
        module.kernel("which").launch(1, 1, [out.ptr])
        assert struct.unpack("<i", out.to_bytes())[0] == MARKS[native]
