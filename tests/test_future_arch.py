"""A GPU arch newer than the device table is a driver floor, not only a warning (issue 32).

The expected answers are written here from NVIDIA's documents and tools, not from the
implementation (docs/research/issue32-future-arch.md holds the sources and quotes):

* sm_107 (Rubin) is first supported by CUDA 13.4: LLVM ``NVPTXTargetParser.def`` gives sm_107,
  sm_107a and sm_107f ``MIN_VER`` CUDA_134; GCC's nvptx patch: "PTX ISA 9.4 (CUDA 13.4) added
  SM_107{,a,f} (Rubin)"; CUTLASS 4.8.0dev: "Executing Rubin kernels (SM107) requires the R615
  driver which will be released with CUDA Toolkit 13.4 GA".
* The newest CUDA release is 13.5 (the pip ``nvidia-cuda-nvcc`` 13.5.37 here; PTX ISA 9.5), and
  its ptxas takes exactly the archs the device table holds from sm_75 on (checked below against
  the wheel's ptxas itself). So a GPU whose arch is absent from the table came after CUDA 13.5: a
  driver of CUDA 13.5 or older does not drive it (CUDA_ERROR_NO_DEVICE, as for any GPU a driver
  predates), whatever the number (NVIDIA's numbers are not in release order: sm_88 came with
  13.0, after sm_120; sm_107 with 13.4, after sm_110). A driver above every known release is
  assumed to (nothing says otherwise).
* Binary compatibility (CUDA C++ Programming Guide): SASS for X.y runs on X.z, z >= y; so SASS
  sm_130 runs on no GPU of the table, while SASS sm_102 would run on sm_103.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cudabuild import NVCC, PTXAS_PIP, SOURCE, need, run

from fatbinkit.compat import NO_DEVICE, PTX, SASS, ImageInfo, decide, image_floors
from fatbinkit.formats.arch import Arch
from fatbinkit.vendors.cuda.driver import DEVICE_SUPPORT, DEVICE_TABLE_CUDA

NEWEST = (13, 5)  # the newest CUDA release (nvidia-cuda-nvcc 13.5.37, PTX ISA 9.5)
NOT_KNOWN = "is not known to CUDA 13.5 or older: needs a newer driver"

# (device, image arch, driver) -> (loads, error, failed floor, min_driver; None: newer than 13.5)
# The image is SASS of the device's own arch built by CUDA 13.0 (its toolkit floor: 13.0).
ROWS: list[tuple[str, str, tuple[int, int] | None, bool, str | None, str | None,
                 tuple[int, int] | None]] = [
    # sm_107: first driven by CUDA 13.4 (LLVM MIN_VER CUDA_134, CUTLASS: R615 = 13.4 GA)
    ("sm_107", "sm_107", None, True, None, None, (13, 4)),
    ("sm_107", "sm_107", (13, 0), False, NO_DEVICE, "device", (13, 4)),
    ("sm_107", "sm_107", (13, 2), False, NO_DEVICE, "device", (13, 4)),
    ("sm_107", "sm_107", (13, 3), False, NO_DEVICE, "device", (13, 4)),
    ("sm_107", "sm_107", (13, 4), True, None, None, (13, 4)),
    ("sm_107", "sm_107", (13, 5), True, None, None, (13, 4)),
    # SASS sm_107a: arch-specific, on its own GPU only
    ("sm_107", "sm_107a", (13, 4), True, None, None, (13, 4)),
    # archs no release up to 13.5 knows: the next ones after sm_121, one between (sm_108), a
    # made-up old one (sm_77): each needs a driver newer than CUDA 13.5
    *[(f"future:{sm}", sm, drv, ok, err, flr, None)
      for sm in ("sm_122", "sm_130", "sm_108", "sm_77")
      for drv, ok, err, flr in [
          (None, True, None, None),  # no driver: floors not checked, min_driver beyond 13.5
          ((13, 0), False, NO_DEVICE, "device"),
          ((13, 2), False, NO_DEVICE, "device"),
          ((13, 5), False, NO_DEVICE, "device"),  # at the newest known release: refused
          ((13, 6), True, None, None),  # above it: assumed to drive it
          ((14, 0), True, None, None)]],
]


def _row_id(row: tuple[Any, ...]) -> str:
    device, image, driver = row[:3]
    return f"{device}-{image}-{'none' if driver is None else f'{driver[0]}.{driver[1]}'}"


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_future_arch_floors(row: tuple[Any, ...]) -> None:
    device, image, driver, loads, error, floor, min_driver = row
    d = decide([ImageInfo(SASS, Arch.parse(image), toolkit=(13, 0), label=image)], device,
               driver)
    assert (d.loadable, d.error) == (loads, error), d.reason
    assert (d.floor.what if d.floor else None) == floor, d.reason
    assert d.min_driver == min_driver
    if error == NO_DEVICE:
        sm = device.removeprefix("future:")
        if min_driver is None:
            assert f"{sm} {NOT_KNOWN}" in d.reason
        else:
            assert "CUDA 13.4" in d.reason
    if min_driver is None:  # the floor is said, not only warned
        assert d.beyond and "newer than any known (CUDA 13.5 or older" in d.beyond[0]


def test_ptx_does_not_lift_the_device_floor() -> None:
    """PTX that JITs for any newer arch still needs a driver that drives the GPU."""
    ptx = ImageInfo(PTX, Arch(90), (8, 0), label="compute_90")  # PTX ISA 8.0: CUDA 12.0
    refused = decide([ptx], "future:sm_130", (13, 5))
    assert (refused.error, refused.floor and refused.floor.what) == (NO_DEVICE, "device")
    assert decide([ptx], "future:sm_130", (14, 0)).how == "ptx-jit"
    assert decide([ptx], "sm_107", (13, 4)).how == "ptx-jit"
    assert decide([ptx], "sm_107", (13, 2)).error == NO_DEVICE


def test_image_floors_of_sass_no_tabled_gpu_runs() -> None:
    """diff's and gate's per-image floor: SASS sm_130 runs on no tabled GPU (newer than 13.5);
    SASS sm_102 runs on sm_103 (CUDA 12.9), so it has no such floor; sm_107 is tabled."""
    def needs(arch: str) -> list[tuple[int, int] | None]:
        floors, _ = image_floors(ImageInfo(SASS, Arch.parse(arch), toolkit=(13, 0)))
        return [f.need for f in floors]
    assert None in needs("sm_130") and None in needs("sm_108a")
    assert needs("sm_102") == [(13, 0)] and needs("sm_107") == [(13, 0)]


def test_the_table_holds_every_arch_of_the_newest_ptxas() -> None:
    """The oracle: ptxas 13.5 (pip nvidia-cuda-nvcc) lists the GPU archs it compiles for; the
    device table holds exactly those from sm_75 (what CUDA 13 still compiles for) that are still
    driven, and names 13.5 as the release it is complete for."""
    ptxas = need(PTXAS_PIP)
    version = run([ptxas, "--version"]).stdout
    release = re.search(r"release (\d+)\.(\d+)", version)
    assert release and (int(release[1]), int(release[2])) == NEWEST == DEVICE_TABLE_CUDA
    listed = run([ptxas, "--help"]).stdout
    start = listed.index("--gpu-name")
    values = listed[start:listed.index("Default value", start)]
    archs = {int(n) for n in re.findall(r"'compute_(\d+)'", values)}
    assert 107 in archs
    # sm_101 is Thor's name up to CUDA 12.9 only (13.0 calls it sm_110): no 13.5 ptxas target
    assert archs == {n for n, s in DEVICE_SUPPORT.items() if n >= 75 and s.last is None}


def test_the_device_table_and_the_ptx_table_end_at_the_same_release() -> None:
    """A floor beyond the tables is met by drivers above the PTX ISA table's newest release: the
    device table must be complete up to that very release."""
    from fatbinkit.formats.ptx import NEWEST_KNOWN_CUDA

    assert DEVICE_TABLE_CUDA == NEWEST_KNOWN_CUDA == NEWEST


# --- the CLI, on a real cubin built by nvcc whose ELF header is patched to name another arch ---


@pytest.fixture(scope="module")
def cubins(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """nvcc 13.0's cubin for sm_100 (ELF ABI v2: the SM in e_flags bits 8-15), copied with the
    SM set to 107, 130 and 77: what a newer ptxas would write for those GPUs."""
    root = tmp_path_factory.mktemp("future")
    base = root / "k100.cubin"
    run([need(NVCC), "-cubin", "-arch=sm_100", "-o", base, SOURCE])
    data = bytearray(base.read_bytes())
    assert data[8] == 8, "expected an ELF ABI v2 cubin"
    flags = struct.unpack_from("<I", data, 0x30)[0]
    assert (flags >> 8) & 0xFF == 100
    out = {}
    for sm in (107, 130, 77):
        struct.pack_into("<I", data, 0x30, (flags & ~0xFF00) | (sm << 8))
        out[sm] = root / f"k{sm}.cubin"
        out[sm].write_bytes(bytes(data))
    return out


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def _min_driver(cubin: Path, arch: str) -> dict[str, Any]:
    proc = _cli("check", cubin, "--min-driver", "--arch", arch, "--json")
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["min_driver"].values()
    return row  # type: ignore[no-any-return]


# (cubin SM, --arch) -> (min_driver, a floor beyond the tables)
CLI_MIN = [(107, "sm_107", "13.4", False), (130, "future:sm_130", None, True),
           (77, "future:sm_77", None, True)]


@pytest.mark.parametrize(("sm", "arch", "low", "beyond"), CLI_MIN)
def test_check_min_driver_json(cubins: dict[int, Path], sm: int, arch: str, low: str | None,
                               beyond: bool) -> None:
    row = _min_driver(cubins[sm], arch)
    assert row["min_driver"] == low and row["sass"] == 1
    assert bool(row["min_driver_beyond"]) == beyond
    if beyond:
        text = _cli("check", cubins[sm], "--min-driver", "--arch", arch).stdout
        assert "a newer driver" in text and "CUDA 13.5 or older" in text


# (cubin SM, --arch, --driver) -> exit status, failed floor
CLI_CHECK = [(107, "sm_107", "13.2", 1, "device"), (107, "sm_107", "13.4", 0, None),
             (130, "future:sm_130", "13.5", 1, "device"), (130, "future:sm_130", "14.0", 0, None),
             (77, "future:sm_77", "13.0", 1, "device")]


@pytest.mark.parametrize(("sm", "arch", "driver", "rc", "floor"), CLI_CHECK)
def test_check_with_a_driver(cubins: dict[int, Path], sm: int, arch: str, driver: str,
                             rc: int, floor: str | None) -> None:
    proc = _cli("check", cubins[sm], "--arch", arch, "--driver", driver, "--json")
    assert proc.returncode == rc, proc.stderr
    doc = json.loads(proc.stdout)
    decision = doc["modules"][0]["kernels"][0]["archs"][arch.removeprefix("future:")]
    assert decision["floor"] == floor
    if floor:
        assert decision["error"] == NO_DEVICE


@pytest.mark.parametrize("sm", [130, 77])
def test_check_min_driver_lists_the_files_own_unknown_arch(cubins: dict[int, Path],
                                                           sm: int) -> None:
    """Without --arch, ``check --min-driver`` covers every GPU of the table and the file's own
    SASS SMs the table lacks: the sm_130 cubin's row says it needs a driver newer than CUDA
    13.5, and no GPU of the table loads it."""
    proc = _cli("check", cubins[sm], "--min-driver", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["min_driver"]
    own = rows[f"sm_{sm}"]
    assert own["min_driver"] is None and own["sass"] == 1
    assert any("CUDA 13.5 or older" in b for b in own["min_driver_beyond"])
    assert all(r["sass"] == 0 for a, r in rows.items() if a != f"sm_{sm}")
    assert {int(a[3:]) for a in rows} == {*DEVICE_SUPPORT, sm}
