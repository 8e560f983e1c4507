"""Driver versions, OS columns and GPU archs, checked against tables from NVIDIA's documents.

The expected outcomes below were written by hand from these sources, not from fatbinkit's tables:

- CUDA Toolkit Release Notes, 2.2 "CUDA Driver", Table 2 "CUDA Toolkit and Minimum Required Driver
  Version for CUDA Minor Version Compatibility": CUDA 11.1 .. 11.8 need Linux >= 450.80.02 /
  Windows >= 452.39; 12.x >= 525.60.13 / >= 528.33; 13.x >= 580 (no Windows number). The CUDA
  Compatibility guide's note: "CUDA 11.0 was released with an earlier driver version, but by
  upgrading to Tesla Recommended Drivers 450.80.02 (Linux) / 452.39 (Windows) ... minor version
  compatibility is possible across the CUDA 11.x family".
- Same notes, Table 3 "CUDA Toolkit and Corresponding Driver Versions": "CUDA 11.0.2 GA >=
  450.51.05 >= 451.48" (the GA row), "CUDA 11.0.1 RC >= 450.36.06 >= 451.22" (a release
  candidate, not a release); "CUDA 12.4 GA >= 550.54.14 >= 551.61"; "CUDA 13.0 GA >= 580.65.06",
  Windows N/A (from 13.0 the toolkit bundles no Windows driver).
- NVIDIA's compute capability list (CUDA GPUs page, CUDA C++ Programming Guide's compute
  capability table): the GPUs that exist. Compute capability 9.1, 8.1, 9.9, 10.4, 13.0 do not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from thirdparty import CUPY12_RANDOM, CUPY12_RANDOM_WIN, CURAND13_WIN, fetch

from fatbinkit import driver as tables
from fatbinkit.compat import SASS, ImageInfo, TotalVerdict, decide, file_verdict, image_sets
from fatbinkit.driver import parse_driver, release_for
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.arch import Arch

BADIMG = "CUDA_ERROR_INVALID_IMAGE"
NODEV = "CUDA_ERROR_NO_DEVICE"

# (cubin's toolkit, input's OS, driver version given, expected: None = loads, else the error).
# Device sm_75 (driven since CUDA 10.0), so that only the toolkit floor decides.
MINOR_COMPAT = [
    ("11.7", "linux", "450.51.06", BADIMG),  # an R450 driver older than Table 2's 450.80.02
    ("11.7", "linux", "450.80.02", None),    # Table 2's minimum for 11.1 .. 11.8
    ("11.1", "linux", "450.80.01", BADIMG),
    ("11.7", "linux", "455.23", None),       # CUDA 11.1's GA driver: above 450.80.02
    ("11.7", "linux", "515.43.04", None),    # CUDA 11.7's own GA driver
    ("11.0", "linux", "450.51.05", None),    # the 11.0 GA driver runs 11.0 cubins
    ("11.0", "linux", "450.36.06", BADIMG),  # the 11.0 RC driver is below the GA row
    ("11.7", "windows", "452.39", None),     # Table 2, Windows column
    ("11.7", "windows", "451.82", BADIMG),   # an R450 Windows driver below 452.39
    ("12.4", "linux", "525.60.13", None),    # Table 2: 12.x >= 525.60.13
    ("12.4", "windows", "528.33", None),     # Table 2: 12.x Windows >= 528.33
    ("12.4", "windows", "527.41", BADIMG),   # 12.0's GA Windows driver, below 528.33
    ("13.2", "linux", "580.65.06", None),    # Table 2: 13.x >= 580
    ("13.2", "windows", "581.57", None),     # no Windows number published: the branch decides
    ("13.2", "linux", "575.51.03", BADIMG),  # a CUDA 12.9 driver
]


@pytest.mark.parametrize("toolkit, host, driver, error", MINOR_COMPAT,
                         ids=[f"{t}-{h}-{d}" for t, h, d, _ in MINOR_COMPAT])
def test_minor_version_compatibility_needs_table_2s_driver(toolkit: str, host: str, driver: str,
                                                            error: str | None) -> None:
    major, minor = (int(x) for x in toolkit.split("."))
    image = ImageInfo(SASS, Arch(75), toolkit=(major, minor), kernels=frozenset({"k"}),
                      host=host)
    d = decide([image], "sm_75", driver)
    assert d.error == error, d.reason
    if error:
        assert d.floor is not None and d.floor.what == "toolkit"
        assert driver in d.reason  # the driver is named by its version


def test_a_cuda_version_driver_is_not_enough_under_11_0() -> None:
    """nvidia-smi says "CUDA Version: 11.0" for 450.51.06 and for 450.80.02 alike: given as
    11.0, an 11.7 cubin is not refused, but the verdict says what it cannot check."""
    image = ImageInfo(SASS, Arch(75), toolkit=(11, 7), kernels=frozenset({"k"}), host="linux")
    d = decide([image], "sm_75", "11.0")
    assert d.loadable
    assert any("450.80.02" in w for w in d.warnings)
    assert not decide([image], "sm_75", "11.7").warnings


# (CUDA version, Linux GA minimum, Windows GA minimum or None): Table 3's GA rows.
TABLE_3 = [((11, 0), "450.51.05", "451.48"), ((12, 4), "550.54.14", "551.61"),
           ((13, 0), "580.65.06", None),
           # NVIDIA's redistrib_13.3.0.json, cuda_compat (docs/research/issue32-future-arch.md)
           ((13, 3), "610.43.02", None)]


@pytest.mark.parametrize("cuda, linux, windows", TABLE_3, ids=[f"{a}.{b}" for (a, b), _, _ in
                                                                TABLE_3])
def test_table_3_ga_rows(cuda: tuple[int, int], linux: str, windows: str | None) -> None:
    rel = release_for(cuda)
    assert rel is not None and (rel.linux, rel.windows) == (linux, windows)


def test_floor_messages_name_table_2s_driver_and_the_os() -> None:
    image = ImageInfo(SASS, Arch(75), toolkit=(11, 7), kernels=frozenset({"k"}), host="linux")
    d = decide([image], "sm_75")
    assert d.min_release is not None and d.min_release.linux == "450.80.02"
    assert "a CUDA 11.x driver (Linux >= 450.80.02)" in str(d.floors[-1])
    pe = ImageInfo(SASS, Arch(75), toolkit=(11, 7), kernels=frozenset({"k"}), host="windows")
    assert "a CUDA 11.x driver (Windows >= 452.39)" in str(decide([pe], "sm_75").floors[-1])
    bare = ImageInfo(SASS, Arch(75), toolkit=(13, 2), kernels=frozenset({"k"}))
    assert "(Linux >= 580.65.06, Windows: not published)" in str(
        decide([bare], "sm_75").floors[-1])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False, timeout=600)


def test_pe_inputs_get_windows_numbers_elf_linux() -> None:
    """The same CuPy extension for CUDA 12 (cubins by 12.9, LZ4): the .pyd's minimum is Table 2's
    Windows 12.x driver, the .so's the Linux one; each printed with its OS, in text and JSON."""
    pyd, so = fetch(CUPY12_RANDOM_WIN), fetch(CUPY12_RANDOM)
    text = _cli("check", pyd, "--arch", "sm_90").stdout
    assert "needs CUDA 12.0 (Windows driver >= 528.33)" in text, text
    assert "580.65.06" not in text and "525.60.13" not in text
    text = _cli("check", so, "--arch", "sm_90").stdout
    assert "needs CUDA 12.0 (Linux driver >= 525.60.13)" in text, text
    table = json.loads(_cli("check", pyd, "--min-driver", "--json").stdout)["min_driver"]
    assert (table["sm_90"]["host"], table["sm_90"]["windows_driver"],
            table["sm_90"]["linux_driver"]) == ("windows", "528.33", "525.60.13")
    assert json.loads(_cli("check", so, "--min-driver", "--json").stdout)["min_driver"][
        "sm_90"]["host"] == "linux"


def test_windows_13_numbers_are_not_published() -> None:
    """cuRAND's CUDA 13 DLL: NVIDIA publishes no Windows minimum for 13.x: said so, with the
    Linux number for reference, never as if it were the DLL's."""
    dll = fetch(CURAND13_WIN)
    text = _cli("check", dll, "--arch", "sm_90").stdout
    assert "needs CUDA 13.0 (Windows driver: not published; Linux >= 580.65.06)" in text, text
    table = json.loads(_cli("check", dll, "--min-driver", "--json").stdout)["min_driver"]
    assert table["sm_90"]["host"] == "windows" and table["sm_90"]["windows_driver"] is None


# compute capabilities NVIDIA has never shipped, and ones it has (its CUDA GPUs list)
NO_SUCH_GPU = ["sm_91", "sm_81", "compute_99", "sm_104", "sm_130", "91", "sm_122a"]
REAL_GPUS = ["sm_35", "sm_50", "sm_53", "sm_62", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87",
             "sm_89", "sm_90a", "sm_100f", "sm_103", "sm_110", "sm_120", "sm_121"]


@pytest.mark.parametrize("name", NO_SUCH_GPU)
def test_unknown_gpus_are_refused_by_the_api(name: str) -> None:
    image = ImageInfo(SASS, Arch(90), toolkit=(13, 0), kernels=frozenset({"k"}))
    with pytest.raises(InvalidArgumentError, match="future:"):
        tables.as_device(name)
    with pytest.raises(InvalidArgumentError):
        decide([image], name)


@pytest.mark.parametrize("name", REAL_GPUS)
def test_real_gpus_are_accepted(name: str) -> None:
    assert tables.as_device(name).number == int(name.split("_")[1].rstrip("af"))


def test_a_future_gpu_is_named_on_purpose() -> None:
    image = ImageInfo(SASS, Arch(130), toolkit=(13, 0), kernels=frozenset({"k"}))
    d = decide([image], "future:sm_130")
    assert d.loadable and any("future GPU" in w for w in d.warnings)
    assert decide([image], Arch(130, future=True)).loadable  # type: ignore[call-arg]
    assert tables.as_device("future:sm_130") == Arch(130)


def test_unknown_gpus_are_usage_errors_everywhere(tmp_path: Path) -> None:
    """check --arch, prune --for, gate --require-arch, ls/diff --arch: exit 2, nothing written;
    ``future:`` lets each through."""
    so = fetch(CUPY12_RANDOM)
    out = tmp_path / "out.so"
    for args in (["check", so, "--arch", "sm_91"], ["prune", so, "-o", out, "--for", "sm_91"],
                 ["gate", so, "--require-arch", "sm_91"], ["ls", so, "--arch", "sm_91"],
                 ["diff", so, so, "--arch", "sm_91"], ["gate", so, "--max-size", "sm_91=1M"]):
        proc = _cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "no NVIDIA GPU has compute capability 9.1" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not out.exists()
    proc = _cli("check", so, "--arch", "future:sm_130")
    assert proc.returncode == 0 and "future GPU" in proc.stdout, proc.stderr
    assert _cli("ls", so, "--arch", "future:sm_130").returncode == 0


def test_pruning_for_an_unknown_gpu_is_refused_by_the_api(tmp_path: Path) -> None:
    from fatbinkit.slim import prune

    with pytest.raises(InvalidArgumentError):
        prune(fetch(CUPY12_RANDOM), tmp_path / "out.so", ["sm_91"])
    assert not (tmp_path / "out.so").exists()
    with pytest.raises(InvalidArgumentError):
        file_verdict(image_sets(fetch(CUPY12_RANDOM)), Arch(91))


def test_a_wheel_warning_names_its_library() -> None:
    """A cubin with no recorded toolkit in one library of several: the warning says which."""
    unknown = ImageInfo(SASS, Arch(75), kernels=frozenset({"k"}), label="entry at 0x50",
                        abi_version=7, host="linux")
    known = ImageInfo(SASS, Arch(75), toolkit=(12, 9), kernels=frozenset({"k"}), host="linux")
    from fatbinkit.compat import ImageSet

    a = file_verdict([ImageSet("a", (unknown,))], "sm_75")
    b = file_verdict([ImageSet("b", (known,))], "sm_75")
    total = TotalVerdict.of([("lib/liba.so", a), ("lib/libb.so", b)])
    assert [w for w in total.warnings if "toolkit" in w] == [
        "lib/liba.so: cubin sm_75 (entry at 0x50): its producer toolkit is not recorded; the "
        "toolkit floor is not checked"]


def test_parse_driver_keeps_the_version() -> None:
    d = parse_driver("450.51.06")
    assert d == (11, 0) and d.version == (450, 51, 6)  # type: ignore[attr-defined]


def test_the_minimum_of_equal_cuda_versions_takes_the_higher_driver_of_each_os() -> None:
    """12.0's GA row (Windows 527.41) and Table 2's 12.x row (Windows 528.33) both say CUDA 12.0:
    a PE library that needs both needs 528.33, in whichever order its floors come."""
    from fatbinkit.compat import highest_release
    from fatbinkit.driver import Release

    ga, compat = Release((12, 0), "525.60.13", "527.41"), Release((12, 0), "525.60.13", "528.33")
    for order in ([ga, compat], [compat, ga]):
        best = highest_release(order)
        assert best is not None and best.windows == "528.33"


def test_a_cuda_13_3_driver_and_floor() -> None:
    """CUDA 13.3's driver (610.43.02, NVIDIA's 13.3.0 manifest): a 610 driver is CUDA 13.3, a
    595 one still 13.2, and a 615 driver (13.4's branch, no number found) is newer than the
    table: refused, with the advice to give the CUDA version."""
    from fatbinkit.errors import InvalidArgumentError
    from fatbinkit.vendors.cuda.driver import cuda_for_driver

    assert cuda_for_driver("610.57.04") == (13, 3)
    assert cuda_for_driver("595.45.04") == (13, 2)
    with pytest.raises(InvalidArgumentError):
        cuda_for_driver("615.20")
    rel = release_for((13, 3))
    assert rel is not None and rel.linux == "610.43.02"
