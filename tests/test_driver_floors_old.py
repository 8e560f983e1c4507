"""What a CUDA driver loads: CUDA 4..11-era binaries and old GPUs (Fermi, Kepler, early Maxwell).

A companion to ``test_driver_floors.py``: same rules (R1..R9 there), same row shape, same helper.
Every expected outcome below was derived by hand from NVIDIA's documents, independently of
fatbinkit's implementation. Sources:

- CUDA Toolkit Release Notes, "CUDA Driver", Table 3 "CUDA Toolkit and Corresponding Driver
  Versions" (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html; the rows were
  read from copies of the table, e.g. https://blog.csdn.net/ytomc/article/details/122805982 and
  https://cnblogs.com/ahuo/p/15057490.html). Minimum Linux x86_64 driver per CUDA release:
  7.0.28 >= 346.46, 7.5.16 >= 352.31, 8.0.44 >= 367.48, 8.0.61 GA2 >= 375.26,
  9.0.76 >= 384.81, 9.1.85 >= 390.46, 9.2.88 >= 396.26 (9.2.148 Update 1 >= 396.37),
  10.0.130 >= 410.48, 10.1.105 >= 418.39, 10.2.89 >= 440.33, 11.0 >= 450.36.06 (11.0.1 RC),
  11.4.0 GA >= 470.42.01.
  Note: an early edition of the table gave 9.1.85 >= 387.26 (still quoted in
  https://gist.github.com/okwrtdsh/6c1017e087f45a330b25922a69e12eec, and the PTX ISA table says
  "CUDA 9.1, driver r387"); the current Table 3 says 390.46, which is what is used here.
  Driver branch -> CUDA version (the release whose minimum driver is in that branch):
  R390 = 9.1, R396 = 9.2, R410 = 10.0, R418 = 10.1, R440 = 10.2, R450 = 11.0, R470 = 11.4.
- PTX ISA document, section "Release Notes", table "PTX Release History"
  (https://docs.nvidia.com/cuda/parallel-thread-execution/#release-notes-ptx-release-history;
  also mirrored by cuda-python's ``_ptx_utils.py``,
  https://nvidia.github.io/cuda-python/coverage/z_94f9e761dee70a67__ptx_utils_py.html).
  PTX ISA -> CUDA: 5.0 = 8.0, 6.0 = 9.0, 6.1 = 9.1, 6.2 = 9.2, 6.3 = 10.0, 6.4 = 10.1,
  6.5 = 10.2, 7.0 = 11.0, 7.1 = 11.1, ..., 7.8 = 11.8 (7.N = 11.N).
  The same table's "Supported Targets" column gives the first CUDA release for each target:
  sm_20 in CUDA 3.0 (PTX ISA 2.0), sm_30 in CUDA 4.2 (PTX ISA 3.0 spans CUDA 4.1 and 4.2; sm_30
  is listed only on the 4.2 row; "Changes in PTX ISA 3.0": "Support for sm_30"), sm_35 in
  CUDA 5.0 (PTX ISA 3.1), sm_32 and sm_50 in CUDA 6.0 (PTX ISA 4.0), sm_37 and sm_52 in CUDA 6.5
  (PTX ISA 4.1), sm_60/61/62 in 8.0, sm_70 in 9.0, sm_72 in 9.1, sm_75 in 10.0, sm_80 in 11.0,
  sm_86 in 11.1.
- NVIDIA Data Center driver documentation, "CUDA and Architecture Matrix"
  (https://docs.nvidia.com/datacenter/tesla/drivers/index.html#cuda-drivers, quoted by
  https://www.cnblogs.com/litifeng/p/18236236 and wccftech): Fermi 2.0: last CUDA toolkit 8.0,
  last driver R390; Kepler 3.0/3.2: last toolkit 10.2, last driver R470; Kepler 3.5/3.7: last
  toolkit 11.x, last driver R470. Confirmed by NVIDIA's Unix driver forum ("470.239.06 - GKxxx
  Kepler GPUs", "390.157 - GF1xx Fermi GPUs" as legacy releases,
  https://forums.developer.nvidia.com/t/current-graphics-driver-releases/28500) and Debian's
  nvidia-tesla-470 packages ("The (Tesla) 470 drivers are the last driver series supporting
  GPUs based on the Kepler architecture"). So a Fermi GPU has a driver up to 9.1 (R390) and none
  from 9.2 (R396) on; a Kepler GPU up to 11.4 (R470) and none from 11.5 (R495) on.
- As in test_driver_floors.py: R580 = 13.0 is the last branch for Maxwell, Pascal and Volta
  (13.1 = R590 drops them); cubin toolkit floor: exact version or newer before CUDA 11,
  minor-version compatibility (any driver of the same major) from CUDA 11 on.

Not verified: the first CUDA release supporting sm_21 (believed 3.2; the PTX table lists only
sm_20, and no row below depends on it). The Data Center matrix gives "first CUDA toolkit
support" 6.0 for Kepler and 6.5 for Maxwell, which contradicts the PTX ISA table (sm_30 4.2,
sm_35 5.0, sm_50 6.0); that matrix appears to describe something else (its Kepler 3.0 date is
certainly not the first), so the PTX ISA table is used here.

Not from the implementation. Each row's comment names the rule that decides it.
"""

from __future__ import annotations

import pytest
from test_driver_floors import BADIMG, BADPTXV, NOBIN, NODEV, check_row, params

from fatbinkit.driver import release_for

# A CUDA 10.2 build for all the GPUs CUDA 10.2 compiles for, plus PTX for the newest:
# toolkit floor 10.2 (pre-11: exact version or newer), PTX ISA 6.5 -> 10.2.
LIB102 = [
    "sass sm_30 tk=10.2",
    "sass sm_35 tk=10.2",
    "sass sm_50 tk=10.2",
    "sass sm_60 tk=10.2",
    "sass sm_70 tk=10.2",
    "sass sm_75 tk=10.2",
    "ptx compute_75 isa=6.5",
]

# (images, device, driver) -> (loadable, picked, error, floor, min_driver)
# min_driver = the highest "not before" floor of the picked image and device (R8); a device that
# a driver no longer drives (Fermi after 9.1, Kepler after 11.4) does not raise it, as for the
# sm_70-on-13.1 rows of test_driver_floors.py.
ROWS = [
    # ---- Kepler sm_35: last driver R470 = 11.4 (R3) ----
    # CUDA 11.4 cubin on 11.4: toolkit floor 11.0 (minor-version compatibility), device 5.0.
    (["sass sm_35 tk=11.4"], "sm_35", (11, 4), True, "sass sm_35 tk=11.4", None, None, (11, 0)),
    # ... on 11.5 (R495): the driver no longer drives Kepler.
    (["sass sm_35 tk=11.4"], "sm_35", (11, 5), False, None, NODEV, "device", (11, 0)),
    # ... on 12.0: dropped.
    (["sass sm_35 tk=11.4"], "sm_35", (12, 0), False, None, NODEV, "device", (11, 0)),
    # ... on 13.0: dropped.
    (["sass sm_35 tk=11.4"], "sm_35", (13, 0), False, None, NODEV, "device", (11, 0)),
    # ... on 10.2 (still drives Kepler): a CUDA 11 cubin needs an 11.x driver (R4).
    (["sass sm_35 tk=11.4"], "sm_35", (10, 2), False, None, BADIMG, "toolkit", (11, 0)),
    # ---- Kepler sm_37 (K80): likewise ----
    (["sass sm_37 tk=11.4"], "sm_37", (11, 4), True, "sass sm_37 tk=11.4", None, None, (11, 0)),
    (["sass sm_37 tk=11.4"], "sm_37", (11, 5), False, None, NODEV, "device", (11, 0)),
    (["sass sm_37 tk=11.4"], "sm_37", (12, 0), False, None, NODEV, "device", (11, 0)),
    (["sass sm_37 tk=11.4"], "sm_37", (13, 0), False, None, NODEV, "device", (11, 0)),
    # sm_35 cubin on a 3.7 device (same major, lower minor, R1); toolkit 10.2 > device 6.5.
    (["sass sm_35 tk=10.2"], "sm_37", (11, 4), True, "sass sm_35 tk=10.2", None, None, (10, 2)),
    # ---- Kepler PTX ----
    # compute_30 PTX (ISA 6.5 -> 10.2) JITs on sm_35 under 11.4.
    (["ptx compute_30 isa=6.5"], "sm_35", (11, 4), True, "ptx compute_30 isa=6.5", None, None,
     (10, 2)),
    # ... under 11.5: no Kepler device.
    (["ptx compute_30 isa=6.5"], "sm_35", (11, 5), False, None, NODEV, "device", (10, 2)),
    # CUDA 11.5 PTX (ISA 7.5 -> 11.5) for compute_35 on 11.4: PTX too new (R7).
    (["ptx compute_35 isa=7.5"], "sm_35", (11, 4), False, None, BADPTXV, "ptx-isa", (11, 5)),
    # ... on 11.5 the PTX would be fine, but Kepler is gone (R9).
    (["ptx compute_35 isa=7.5"], "sm_35", (11, 5), False, None, NODEV, "device", (11, 5)),
    # ---- Kepler sm_30 (CUDA 10.2 was the last toolkit to build it; R470 still drives it) ----
    (["sass sm_30 tk=10.2"], "sm_30", (11, 4), True, "sass sm_30 tk=10.2", None, None, (10, 2)),
    (["sass sm_30 tk=10.2"], "sm_30", (11, 5), False, None, NODEV, "device", (10, 2)),
    # ---- Kepler: first supported (R3, too old a driver) ----
    # sm_30 exists from CUDA 4.2: a 4.1 driver has no such device.
    (["sass sm_30 tk=4.2"], "sm_30", (4, 1), False, None, NODEV, "device", (4, 2)),
    (["sass sm_30 tk=4.2"], "sm_30", (4, 2), True, "sass sm_30 tk=4.2", None, None, (4, 2)),
    # sm_35 exists from CUDA 5.0.
    (["sass sm_35 tk=5.0"], "sm_35", (4, 2), False, None, NODEV, "device", (5, 0)),
    (["sass sm_35 tk=5.0"], "sm_35", (5, 0), True, "sass sm_35 tk=5.0", None, None, (5, 0)),
    # sm_32 (Tegra K1) exists from CUDA 6.0: the sm_30 cubin is picked by arch (3.0 <= 3.2), and
    # the device floor (6.0) fails on 5.5.
    (["sass sm_30 tk=5.5"], "sm_32", (5, 5), False, None, NODEV, "device", (6, 0)),
    (["sass sm_30 tk=5.5"], "sm_32", (6, 0), True, "sass sm_30 tk=5.5", None, None, (6, 0)),
    # ---- Fermi: last driver R390 = 9.1; CUDA 8.0 the last toolkit to build sm_20 ----
    (["sass sm_20 tk=8.0"], "sm_20", (9, 1), True, "sass sm_20 tk=8.0", None, None, (8, 0)),
    # ... 9.2 (R396): Fermi dropped.
    (["sass sm_20 tk=8.0"], "sm_20", (9, 2), False, None, NODEV, "device", (8, 0)),
    # ... 13.0: dropped long ago.
    (["sass sm_20 tk=8.0"], "sm_20", (13, 0), False, None, NODEV, "device", (8, 0)),
    # sm_20 cubin on a 2.1 device (same major, lower minor); device 2.1 predates toolkit 8.0.
    (["sass sm_20 tk=8.0"], "sm_21", (9, 1), True, "sass sm_20 tk=8.0", None, None, (8, 0)),
    (["sass sm_20 tk=8.0"], "sm_21", (9, 2), False, None, NODEV, "device", (8, 0)),
    # compute_20 PTX (ISA 5.0 -> 8.0) JITs on Fermi under 9.1.
    (["ptx compute_20 isa=5.0"], "sm_20", (9, 1), True, "ptx compute_20 isa=5.0", None, None,
     (8, 0)),
    # sm_20 device from CUDA 3.0.
    (["sass sm_20 tk=3.0"], "sm_20", (3, 0), True, "sass sm_20 tk=3.0", None, None, (3, 0)),
    # ---- Volta, CUDA 10.2 cubin ----
    # pre-11 toolkit floor: 10.2 needs 10.2 (R4).
    (["sass sm_70 tk=10.2"], "sm_70", (10, 1), False, None, BADIMG, "toolkit", (10, 2)),
    # 13.0 (R580) still drives Volta; binary backward compatibility.
    (["sass sm_70 tk=10.2"], "sm_70", (13, 0), True, "sass sm_70 tk=10.2", None, None, (10, 2)),
    # 13.1 (R590) no longer drives Volta.
    (["sass sm_70 tk=10.2"], "sm_70", (13, 1), False, None, NODEV, "device", (10, 2)),
    # sm_70 exists from 9.0: an 8.0 driver has none (R9: reported over the 9.0 toolkit floor).
    (["sass sm_70 tk=9.0"], "sm_70", (8, 0), False, None, NODEV, "device", (9, 0)),
    # CUDA 9.1 cubin on 9.0: pre-11, too old.
    (["sass sm_70 tk=9.1"], "sm_70", (9, 0), False, None, BADIMG, "toolkit", (9, 1)),
    # ---- Pascal, CUDA 9.2 cubin ----
    (["sass sm_61 tk=9.2"], "sm_61", (9, 1), False, None, BADIMG, "toolkit", (9, 2)),
    (["sass sm_61 tk=9.2"], "sm_61", (9, 2), True, "sass sm_61 tk=9.2", None, None, (9, 2)),
    # ---- Maxwell sm_50: first CUDA 6.0, last driver R580 = 13.0 ----
    (["sass sm_50 tk=6.0"], "sm_50", (6, 0), True, "sass sm_50 tk=6.0", None, None, (6, 0)),
    # 5.5: no Maxwell device yet (R9: reported over the 6.0 toolkit floor).
    (["sass sm_50 tk=6.0"], "sm_50", (5, 5), False, None, NODEV, "device", (6, 0)),
    (["sass sm_50 tk=6.0"], "sm_50", (13, 0), True, "sass sm_50 tk=6.0", None, None, (6, 0)),
    (["sass sm_50 tk=6.0"], "sm_50", (13, 1), False, None, NODEV, "device", (6, 0)),
    # ---- PTX ISA floors, CUDA 9..11 (R7) ----
    # CUDA 11.8 PTX (ISA 7.8 -> 11.8) on 11.7: too new, even within 11.x.
    (["ptx compute_80 isa=7.8"], "sm_80", (11, 7), False, None, BADPTXV, "ptx-isa", (11, 8)),
    (["ptx compute_80 isa=7.8"], "sm_80", (11, 8), True, "ptx compute_80 isa=7.8", None, None,
     (11, 8)),
    # ISA 7.4 -> 11.4 on 11.3.
    (["ptx compute_80 isa=7.4"], "sm_80", (11, 3), False, None, BADPTXV, "ptx-isa", (11, 4)),
    # ISA 6.0 -> 9.0 on 8.0.
    (["ptx compute_60 isa=6.0"], "sm_61", (8, 0), False, None, BADPTXV, "ptx-isa", (9, 0)),
    # ISA 6.1 -> 9.1 on 9.0.
    (["ptx compute_70 isa=6.1"], "sm_70", (9, 0), False, None, BADPTXV, "ptx-isa", (9, 1)),
    # ISA 6.2 -> 9.2 on 9.1.
    (["ptx compute_70 isa=6.2"], "sm_70", (9, 1), False, None, BADPTXV, "ptx-isa", (9, 2)),
    # ISA 6.4 -> 10.1 on 10.0.
    (["ptx compute_75 isa=6.4"], "sm_75", (10, 0), False, None, BADPTXV, "ptx-isa", (10, 1)),
    # ISA 6.3 -> 10.0 on 10.0: fine (device 7.5 from 10.0).
    (["ptx compute_75 isa=6.3"], "sm_75", (10, 0), True, "ptx compute_75 isa=6.3", None, None,
     (10, 0)),
    # ISA 6.5 -> 10.2, JIT of compute_70 for a 7.5 device.
    (["ptx compute_70 isa=6.5"], "sm_75", (10, 2), True, "ptx compute_70 isa=6.5", None, None,
     (10, 2)),
    # ---- toolkit floor across the CUDA 11 boundary (R4) ----
    # CUDA 10.0 cubin on 10.2: newer driver, fine.
    (["sass sm_75 tk=10.0"], "sm_75", (10, 2), True, "sass sm_75 tk=10.0", None, None, (10, 0)),
    # CUDA 11.4 cubin on 11.0: minor-version compatibility.
    (["sass sm_70 tk=11.4"], "sm_70", (11, 0), True, "sass sm_70 tk=11.4", None, None, (11, 0)),
    # ---- driver None: arch rules only (R8) ----
    (["sass sm_35 tk=11.4"], "sm_35", None, True, "sass sm_35 tk=11.4", None, None, (11, 0)),
    (["sass sm_20 tk=8.0"], "sm_21", None, True, "sass sm_20 tk=8.0", None, None, (8, 0)),
    # ---- realistic: CUDA 10.2 library ----
    # sm_37 on 11.4: sm_35 SASS (highest same-major minor <= 7).
    (LIB102, "sm_37", (11, 4), True, "sass sm_35 tk=10.2", None, None, (10, 2)),
    # sm_37 on 11.5: Kepler dropped; the sm_35 pick still sets min_driver.
    (LIB102, "sm_37", (11, 5), False, None, NODEV, "device", (10, 2)),
    # sm_30 on 10.1: the 10.2 cubin is too new.
    (LIB102, "sm_30", (10, 1), False, None, BADIMG, "toolkit", (10, 2)),
    # sm_52 on 10.2: sm_50 SASS.
    (LIB102, "sm_52", (10, 2), True, "sass sm_50 tk=10.2", None, None, (10, 2)),
    # sm_61 on 10.2: sm_60 SASS.
    (LIB102, "sm_61", (10, 2), True, "sass sm_60 tk=10.2", None, None, (10, 2)),
    # sm_86 on 11.1: no SASS of major 8; compute_75 PTX JITs; device 8.6 from 11.1.
    (LIB102, "sm_86", (11, 1), True, "ptx compute_75 isa=6.5", None, None, (11, 1)),
    # sm_86 on 11.0: no such device yet.
    (LIB102, "sm_86", (11, 0), False, None, NODEV, "device", (11, 1)),
    # sm_21 on 9.1: nothing fits (no SASS of major 2, PTX for 7.5 > 2.1).
    (LIB102, "sm_21", (9, 1), False, None, NOBIN, None, None),
    # sm_21 on 9.2: Fermi dropped (R9); nothing picked, so no min_driver.
    (LIB102, "sm_21", (9, 2), False, None, NODEV, "device", None),
]


PARAMS = params(ROWS, {"lib102": LIB102})


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 20


@pytest.mark.parametrize("row", PARAMS)
def test_driver_floors_old(row: tuple[object, ...]) -> None:
    check_row(*row)  # type: ignore[arg-type]


# CUDA Toolkit Release Notes, Table 3: minimum Linux x86_64 driver of each release's GA
# (9.2.88, not 9.2.148 Update 1; 9.1.85 as the current table gives it; 11.0: "CUDA 11.0.2 GA
# >= 450.51.05", not "CUDA 11.0.1 RC >= 450.36.06").
LINUX_MIN = [
    ((9, 0), "384.81"),
    ((9, 1), "390.46"),
    ((9, 2), "396.26"),
    ((10, 0), "410.48"),
    ((10, 1), "418.39"),
    ((10, 2), "440.33"),
    ((11, 0), "450.51.05"),
]


@pytest.mark.parametrize("cuda, linux", LINUX_MIN, ids=[f"{a}.{b}" for (a, b), _ in LINUX_MIN])
def test_release_linux_driver(cuda: tuple[int, int], linux: str) -> None:
    rel = release_for(cuda)
    assert rel is not None, cuda
    assert tuple(rel.cuda) == cuda
    assert rel.linux == linux


# Driver branch of each release's minimum driver (R390 = 9.1, ..., R470 = 11.4).
BRANCHES = [
    ((9, 1), "390"),
    ((9, 2), "396"),
    ((10, 0), "410"),
    ((10, 1), "418"),
    ((10, 2), "440"),
    ((11, 0), "450"),
    ((11, 4), "470"),
]


@pytest.mark.parametrize("cuda, branch", BRANCHES, ids=[f"{a}.{b}" for (a, b), _ in BRANCHES])
def test_release_branch(cuda: tuple[int, int], branch: str) -> None:
    rel = release_for(cuda)
    assert rel is not None, cuda
    assert rel.linux.split(".")[0] == branch
