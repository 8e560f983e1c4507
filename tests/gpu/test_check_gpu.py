"""The compatibility engine against the driver: predicted image or error == what the driver does.

Each case is a set of images of one kernel ``which`` that stores a mark saying which image it was
built as (SASS sm_80 only, sm_86, sm_90, sm_90a, sm_100/sm_120 only, PTX compute_80, PTX sm_90a,
PTX too new for the driver, cubins built by CUDA 12.9 and 13.0, LZ4 and zstd entries, mixes as
fatbins written by ``fatbinkit.formats.fatbin``, bare cubin/PTX). Images from other toolkits and
real cuRAND containers come from ``FATBINKIT_TOOLKIT_DIR`` (``python -m
tests.gpu.toolkit_artifacts``). For each, ``fatbinkit.compat`` predicts for this device and driver
(cuDriverGetVersion); then the image is loaded, and the kernel launched: the mark,
CU_FUNC_ATTRIBUTE_BINARY_VERSION and PTX_VERSION say which image the driver picked; or the CUresult
must be the predicted error. With FATBINKIT_GPU_REPORT set, the observed table is written there
(JSON) and next to it (.md).
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

from fatbinkit.compat import image_sets
from fatbinkit.errors import CudaError
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry
from fatbinkit.runtime import Buffer, Device, Module
from fatbinkit.toolchain import find_tool

SOURCE = 'extern "C" __global__ void which(int* out) { out[0] = MARK; }\n'

# image name -> (nvcc output kind, nvcc -arch value); "cubin@cu12.9": built by that toolkit's
# ptxas on the CPU machine (toolkit_artifacts.py). In a case, "name|zstd" stores it compressed.
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
    "compute_80@8.0": ("ptx", "compute_80"),  # .version 8.0: what a CUDA 12.0 nvcc writes
    "sm_90@cu12.9": ("cubin@cu12.9", "sm_90"),
    "sm_80@cu12.9": ("cubin@cu12.9", "sm_80"),
}
TOOLKIT_DIR = os.environ.get("FATBINKIT_TOOLKIT_DIR")
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
    ("SASS sm_90 built by CUDA 12.9", ["sm_90@cu12.9"], False),
    ("sm_90 (CUDA 12.9) + sm_90a (CUDA 13.0)", ["sm_90@cu12.9", "sm_90a"], False),
    ("sm_80 (CUDA 12.9) + sm_90 (CUDA 13.0)", ["sm_80@cu12.9", "sm_90"], False),
    ("bare cubin sm_90 built by CUDA 12.9", ["sm_90@cu12.9"], True),
    ("sm_80 + PTX 8.0", ["sm_80", "compute_80@8.0"], False),
    ("SASS sm_90 zstd", ["sm_90|zstd"], False),
    ("SASS sm_90 (CUDA 12.9) lz4", ["sm_90@cu12.9|lz4"], False),
    ("PTX compute_80 zstd", ["compute_80|zstd"], False),
    ("sm_100f + PTX compute_90 lz4", ["sm_100f", "compute_90|lz4"], False),
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
        if kind.startswith("cubin@"):  # another toolkit's: built on the CPU machine
            if TOOLKIT_DIR and (Path(TOOLKIT_DIR) / f"{name}.cubin").is_file():
                out[name] = (Path(TOOLKIT_DIR) / f"{name}.cubin").read_bytes()
            continue
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


def _parts(name: str) -> tuple[str, Arch, str | None]:
    """``compute_90a as compute_90|zstd`` -> (built image ``compute_90a``, label arch
    compute_90, codec zstd)."""
    image, _, codec = name.partition("|")
    built = image.split(" as ")[0]
    return built, Arch.parse(image.split(" as ")[-1].split("@")[0]), codec or None


def _blob(built: dict[str, bytes], names: list[str], bare: bool) -> bytes:
    missing = [n for n in names if _parts(n)[0] not in built]
    if missing:
        pytest.skip(f"{missing} not built here: run tests.gpu.toolkit_artifacts on the CPU "
                    "machine and set FATBINKIT_TOOLKIT_DIR")
    if bare:
        return built[_parts(names[0])[0]]
    entries = []
    for n in names:
        image, arch, codec = _parts(n)
        kind = EntryKind.PTX if n.startswith("compute") else EntryKind.ELF
        entries.append(make_entry(kind, arch, built[image], compression=codec))
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
    picked = next(n for n in names if MARKS[_parts(n)[0]] == mark)
    how = "ptx-jit" if picked.startswith("compute") else "sass"
    report.append(Observed(case, predicted, f"{how} {picked}", kernel.binary_version,
                           kernel.ptx_version))
    assert decision.image is not None, f"{case}: predicted {predicted}, driver loaded {picked}"
    assert f"{decision.how} {names[images.index(decision.image)]}" == f"{how} {picked}"
    assert kernel.binary_version == gpu.arch.number or how == "sass"
    if how == "sass":
        assert kernel.binary_version == Arch.parse(_parts(picked)[0].split("@")[0]).number
    else:
        assert kernel.ptx_version == Arch.parse(_parts(picked)[0].split("@")[0]).number


def test_marks_launch(gpu: Device, built: dict[str, bytes]) -> None:
    """The mark mechanism itself: the native SASS reports its own mark."""
    native = f"sm_{gpu.arch.number}"
    if native not in built:
        pytest.skip(f"no {native} image in the matrix")
    with Module.load(built[native]) as module, Buffer(4) as out:
        module.kernel("which").launch(1, 1, [out.ptr])
        assert struct.unpack("<i", out.to_bytes())[0] == MARKS[native]


# -- what the driver does after its pick --------------------------------------------------------
# Each case: images (as in CASES), the index of the entry to damage and how, the CUresult the
# driver gives. The damaged image is the one the driver picks by arch; another image would have
# loaded. The driver fails instead of falling back: the rule fatbinkit.compat applies to every
# floor (the pick is checked, nothing else). The damage stands for what an older driver sees in a
# newer image: an entry flag it does not know (zstd 0x8000 before CUDA 12.4, the f flag before
# 12.9) or an ELF OSABI it does not know.
FLAG_UNKNOWN = 0x4000
NO_FALL_BACK = [
    ("sm_90 with an unknown flag + compute_80", ["sm_90", "compute_80"], 0, "flag",
     "CUDA_ERROR_INVALID_IMAGE"),
    ("sm_90a with an unknown flag + sm_90", ["sm_90a", "sm_90"], 0, "flag",
     "CUDA_ERROR_INVALID_IMAGE"),
    ("compute_90 with an unknown flag + compute_80", ["compute_90", "compute_80"], 0, "flag",
     "CUDA_ERROR_INVALID_PTX"),
    ("sm_90 with an unknown OSABI + compute_80", ["sm_90", "compute_80"], 0, "osabi",
     "CUDA_ERROR_INVALID_IMAGE"),
    ("sm_90a with an unknown OSABI + sm_90", ["sm_90a", "sm_90"], 0, "osabi",
     "CUDA_ERROR_INVALID_IMAGE"),
    ("sm_90a with a corrupt LZ4 payload + sm_90", ["sm_90a|lz4", "sm_90"], 0, "payload",
     "CUDA_ERROR_NO_BINARY_FOR_GPU"),
]


def _damage(blob: bytes, index: int, how: str) -> bytes:
    import dataclasses

    from fatbinkit.formats.fatbin import Fatbin

    out = bytearray(blob)
    entry = Fatbin.from_bytes(blob).entries[index]
    head = entry.header.pack()
    at = blob.find(head)
    if how == "flag":
        out[at:at + len(head)] = dataclasses.replace(
            entry.header, flags=entry.header.flags | FLAG_UNKNOWN).pack()
    elif how == "osabi":
        payload = blob.find(bytes(entry.stored))
        out[payload + 7] = 66  # EI_OSABI: 51 (ABI v1) and 65 (ABI v2) are the known ones
    else:
        stored = bytes(entry.stored)
        payload = blob.find(stored)
        for i in range(payload + 4, payload + len(stored) - 4):
            out[i] ^= 0x5A
    return bytes(out)


@pytest.mark.parametrize("case, names, index, how, error", NO_FALL_BACK,
                         ids=[c[0] for c in NO_FALL_BACK])
def test_no_fall_back_after_the_pick(
    gpu: Device, built: dict[str, bytes], report: list[Observed], case: str, names: list[str],
    index: int, how: str, error: str,
) -> None:
    blob = _blob(built, names, False)
    intact = image_sets(blob)[0].decide(gpu.arch, gpu.driver_version, "which")
    assert intact.loadable  # undamaged, it loads: the damage is what the driver stops at
    with pytest.raises(CudaError) as exc:  # a fall back would load the other image
        Module.load(_damage(blob, index, how), validate=False).close()  # the driver's own way
    report.append(Observed(case, f"error {error} (no fall back)", f"error {exc.value.code}"))
    assert exc.value.code == error


def test_driver_reads_no_toolkit_field(gpu: Device, built: dict[str, bytes]) -> None:
    """The toolkit floor is NVIDIA's documented contract, not a header check: this driver loads a
    cubin whose EI_ABIVERSION (9) and .note.nv.cuinfo toolkit (14.0) name a future release."""
    from fatbinkit.formats import elf

    native = bytearray(built[f"sm_{gpu.arch.number}"])
    native[8] = 9
    head = elf.file_header(native)
    note = next(s for s in elf.sections(native, head) if s.name == ".note.nv.cuinfo")
    desc = elf.NoteHeader.unpack_from(elf.section_data(native, note)).desc_offset
    struct.pack_into("<I", native, note.header.offset + desc + 4, 140)
    with Module.load(bytes(native)) as module, Buffer(4) as out:
        module.kernel("which").launch(1, 1, [out.ptr])
        assert struct.unpack("<i", out.to_bytes())[0] == MARKS[f"sm_{gpu.arch.number}"]


@pytest.mark.parametrize("container", [0, 12])
def test_vendor_container_as_predicted(gpu: Device, report: list[Observed],
                                       container: int) -> None:
    """Real cuRAND 13 containers (CUDA 13.4, zstd): container 12 holds only sm_75 SASS and PTX
    ISA 9.4, so on another arch the driver picks that PTX and a driver older than 13.4 refuses
    it; container 0 has SASS for this arch."""
    path = Path(TOOLKIT_DIR or ".") / f"curand-container-{container}.fatbin"
    if not TOOLKIT_DIR or not path.is_file():
        pytest.skip("no cuRAND containers: run tests.gpu.toolkit_artifacts, set "
                    "FATBINKIT_TOOLKIT_DIR")
    blob = path.read_bytes()
    (image_set,) = image_sets(blob)
    decision = image_set.decide(gpu.arch, gpu.driver_version)
    predicted = (f"{decision.how} {decision.image.name}" if decision.image else
                 f"error {decision.error}")
    try:
        module = Module.load(blob)
    except CudaError as exc:
        report.append(Observed(f"cuRAND 13.4 container {container}", predicted,
                               f"error {exc.code}"))
        assert decision.error == exc.code
        return
    with module:
        versions = {k.binary_version for k in module.kernels()}
    report.append(Observed(f"cuRAND 13.4 container {container}", predicted, "loaded"))
    assert decision.loadable and decision.how == "sass"
    assert versions <= {gpu.arch.number}


def test_a_corrupt_compressed_payload_is_refused_before_the_driver(
    gpu: Device, built: dict[str, bytes],
) -> None:
    """The driver itself crashes the process (SIGSEGV, seen on R580) when the PTX it picks has a
    corrupt LZ4 payload; Module.load checks compressed payloads first and raises instead. Run in
    a child process, so that a regression shows as a dead child, not a dead test run."""
    blob = _damage(_blob(built, ["compute_90|lz4", "compute_80"], False), 0, "payload")
    code = ("import sys\nfrom fatbinkit.runtime import Module\n"
            "from fatbinkit.errors import DecompressionError\n"
            "try:\n    Module.load(sys.stdin.buffer.read())\n"
            "except DecompressionError as e:\n    print('refused:', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(b"refused:")
