"""What a CUDA driver supports, by the CUDA version it implements: NVIDIA's tables as data.

A driver is named here by its CUDA version (what ``nvidia-smi`` prints as "CUDA Version" and
``cuDriverGetVersion`` returns), e.g. ``(13, 0)``; :func:`parse_driver` also takes a driver
version such as ``580.65.06``: a :class:`Driver`, the CUDA version of its branch that keeps the
version for minor-version compatibility's floor. Driver versions are per OS (Table 3's Linux and
Windows columns): :func:`drivers_text` labels each number with its OS. :func:`as_device` accepts
only GPU archs of :data:`DEVICE_SUPPORT` (or ``future:sm_XY``). The floors that decide a load
(which device archs a driver drives, which toolkit's cubins and which compression it reads) are
applied by :mod:`fatbinkit.compat`; every table cites its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypeAlias

from ...decision import dotted
from ...device_code import LINUX, WINDOWS
from ...errors import InvalidArgumentError
from ...formats.arch import Arch, as_arch

__all__ = [
    "DEVICE_SUPPORT",
    "DEVICE_TABLE_CUDA",
    "FUTURE",
    "LINUX",
    "MINOR_COMPAT_DRIVER",
    "RELEASES",
    "WINDOWS",
    "CudaVersion",
    "DeviceSupport",
    "Driver",
    "DriverLike",
    "Release",
    "as_cuda_version",
    "as_device",
    "beyond_table",
    "cuda_for_driver",
    "cuda_name",
    "driver_name",
    "drivers_text",
    "parse_driver",
    "release_for",
    "version_tuple",
]

CudaVersion = tuple[int, int]
#: what :func:`as_cuda_version` accepts: ``(12, 4)``, ``"12.4"``, ``"580.65.06"`` or ``12040``
DriverLike: TypeAlias = tuple[int, int] | str | int

_OS_NAMES = {LINUX: "Linux", WINDOWS: "Windows"}


def version_tuple(driver: str) -> tuple[int, ...]:
    """``450.80.02`` -> ``(450, 80, 2)``: driver versions compare part by part."""
    return tuple(int(p) for p in driver.split("."))


class Driver(tuple[int, int]):
    """A driver named by its version (``450.51.06``): it is, compares and prints (:func:`dotted`)
    as the CUDA version it implements (``(11, 0)``), and keeps ``version`` for the one floor
    that a CUDA version cannot decide: minor-version compatibility needs a driver version of
    its major's Table 2 row (450.80.02 for CUDA 11.1+ builds, while every R450 driver reports
    CUDA 11.0). A tuple, so that every API taking a CUDA version takes it."""

    version: tuple[int, ...]

    def __new__(cls, cuda: CudaVersion, version: tuple[int, ...]) -> Driver:
        self = super().__new__(cls, cuda)
        self.version = version
        return self

    def __getnewargs__(self) -> tuple[CudaVersion, tuple[int, ...]]:
        return (self[0], self[1]), self.version

    @property
    def text(self) -> str:
        """``450.51.06``: the version as NVIDIA writes it (two-digit parts after the branch)."""
        return ".".join(f"{p:02d}" if i else str(p) for i, p in enumerate(self.version))

    def __repr__(self) -> str:
        return f"Driver({self.text}, CUDA {dotted(self)})"


def driver_name(driver: CudaVersion) -> str:
    """``450.51.06 (CUDA 11.0)`` for a :class:`Driver`, ``11.0`` for a CUDA version."""
    if isinstance(driver, Driver):
        return f"{driver.text} (CUDA {dotted(driver)})"
    return dotted(driver)


@dataclass(frozen=True)
class Release:
    """One CUDA release and the minimum driver its toolkit ships with (Linux, Windows; None:
    NVIDIA publishes none)."""

    cuda: CudaVersion
    linux: str
    windows: str | None

    def driver(self, host: str | None) -> str | None:
        """The minimum driver version on ``host`` (:data:`LINUX`, :data:`WINDOWS`)."""
        return self.windows if host == WINDOWS else self.linux

    def __str__(self) -> str:
        return cuda_name(self.cuda)


def drivers_text(release: Release, host: str | None, noun: str = " driver") -> str:
    """The driver numbers of a release labelled by OS: ``Linux driver >= 580.65.06`` for an ELF
    input, ``Windows driver >= 551.61`` for a PE one (``Windows driver: not published; Linux
    >= 580.65.06`` where NVIDIA gives no Windows number), both for an input of no known OS
    (``Linux driver >= 580.65.06, Windows: not published``). ``noun=""`` drops "driver"."""
    windows = f" >= {release.windows}" if release.windows else ": not published"
    if host == LINUX:
        return f"Linux{noun} >= {release.linux}"
    if host == WINDOWS:
        return (f"Windows{noun}{windows}" if release.windows else
                f"Windows{noun}{windows}; Linux >= {release.linux}")
    return f"Linux{noun} >= {release.linux}, Windows{windows}"


# CUDA Toolkit Release Notes, 2.2 "CUDA Driver", Table 3 "CUDA Toolkit and Corresponding Driver
# Versions" (docs.nvidia.com/cuda/cuda-toolkit-release-notes, 13.2 Update 2 edition): the GA row
# of each release (8.0: its first GA, 8.0.44; 9.2: 9.2.88; 11.0: "CUDA 11.0.2 GA >= 450.51.05
# >= 451.48", not the "11.0.1 RC" row's 450.36.06 / 451.22). There was no CUDA 12.7 release (PTX
# ISA 8.6 is listed for 12.7; the first driver to JIT it is 12.8's). From 13.0 on the Windows
# column reads "N/A": the toolkit no longer bundles a Windows driver and NVIDIA publishes no
# Windows minimum for 13.x (nor does the CUDA Compatibility guide, whose Table 1 gives ">= 580"
# for 13.x without an OS), so it is None here ("not published"). The rows before 11.0 serve the
# CUDA 7-10 era's binaries. CUDA 13.3 (610.43.02): its notes' Table 3 was not readable here
# (docs/research/issue32-future-arch.md); the number is NVIDIA's redistributable manifest for
# 13.3.0 (redistrib_13.3.0.json: cuda_compat, the driver cut for the toolkit, 610.43.02; the same
# field gives 13.2.0's 595.45.04, Table 3's 13.2 row), which public quotes of 13.3's Table 3
# ("CUDA 13.3 GA >=610.43.02", Update 1 the same) agree with. CUDA 13.4 ships no Linux driver
# (its manifest has no cuda_compat; the developer preview's notes: "CUDA drivers ... are not
# included") and no 13.4/13.5 number was found: the table ends at 13.3.
RELEASES: tuple[Release, ...] = (
    Release((7, 0), "346.46", "347.62"), Release((7, 5), "352.31", "353.66"),
    Release((8, 0), "367.48", "369.30"), Release((9, 0), "384.81", "385.54"),
    Release((9, 1), "390.46", "391.29"), Release((9, 2), "396.26", "397.44"),
    Release((10, 0), "410.48", "411.31"), Release((10, 1), "418.39", "418.96"),
    Release((10, 2), "440.33", "441.22"),
    Release((11, 0), "450.51.05", "451.48"), Release((11, 1), "455.23", "456.38"),
    Release((11, 2), "460.27.03", "460.82"), Release((11, 3), "465.19.01", "465.89"),
    Release((11, 4), "470.42.01", "471.11"), Release((11, 5), "495.29.05", "496.04"),
    Release((11, 6), "510.39.01", "511.23"), Release((11, 7), "515.43.04", "516.01"),
    Release((11, 8), "520.61.05", "520.06"), Release((12, 0), "525.60.13", "527.41"),
    Release((12, 1), "530.30.02", "531.14"), Release((12, 2), "535.54.03", "536.25"),
    Release((12, 3), "545.23.06", "545.84"), Release((12, 4), "550.54.14", "551.61"),
    Release((12, 5), "555.42.02", "555.85"), Release((12, 6), "560.28.03", "560.76"),
    Release((12, 8), "570.26", "570.65"), Release((12, 9), "575.51.03", "576.02"),
    Release((13, 0), "580.65.06", None), Release((13, 1), "590.44.01", None),
    Release((13, 2), "595.45.04", None), Release((13, 3), "610.43.02", None),
)

# CUDA Compatibility guide, "Minor Version Compatibility" (docs.nvidia.com/deploy/cuda-
# compatibility/minor-version-compatibility.html): "From CUDA 11 onwards, applications compiled
# with a CUDA Toolkit release from within a CUDA major release family can run, with limited
# feature-set, on systems having at least the minimum required driver version", and its note:
# "CUDA 11.0 was released with an earlier driver version, but by upgrading to Tesla Recommended
# Drivers 450.80.02 (Linux) / 452.39 (Windows) ... minor version compatibility is possible across
# the CUDA 11.x family". Release notes Table 2 "CUDA Toolkit and Minimum Required Driver Version
# for CUDA Minor Version Compatibility": CUDA 11.1 .. 11.8 >= 450.80.02 / >= 452.39, 12.x >=
# 525.60.13 / >= 528.33, 13.x >= 580 (Linux 580.65.06, the 13.0 GA driver; no Windows number).
# Each row is keyed by the major and names the first toolkit it covers: a cubin built by 11.0
# needs the 11.0 driver of Table 3, one by 11.1+ on a CUDA 11.0 driver needs 450.80.02. PTX JIT
# is not covered (PTX_ISA_MIN_CUDA in fatbinkit.formats.ptx).
MINOR_COMPAT_DRIVER = {
    11: Release((11, 1), "450.80.02", "452.39"),
    12: Release((12, 0), "525.60.13", "528.33"),
    13: Release((13, 0), "580.65.06", None),
}


@dataclass(frozen=True)
class DeviceSupport:
    """The drivers that drive GPUs of one compute capability: from ``first`` (the first CUDA
    release that supports the arch) to ``last`` (None: still supported)."""

    first: CudaVersion
    last: CudaVersion | None = None
    note: str = ""

    def __str__(self) -> str:
        last = f" to CUDA {dotted(self.last)}" if self.last else " on"
        return f"from CUDA {dotted(self.first)}{last}" + (f" ({self.note})" if self.note else "")


_VOLTA_AND_OLDER = "NVIDIA ends Maxwell, Pascal and Volta support with R580"
_KEPLER = "NVIDIA ended Kepler support with R470"
_FERMI = "NVIDIA ended Fermi support with R390"
_THOR = "Thor is sm_101 up to CUDA 12.9; CUDA 13 drivers report it as sm_110"

# The first CUDA release supporting each compute capability: CUDA Toolkit release notes of each
# release ("New architecture support": 11.0 sm_80, 11.1 sm_86, 11.4 sm_87, 11.8 sm_89/sm_90,
# 12.8 sm_100/sm_101/sm_120, 12.9 sm_103/sm_121, 13.0 sm_110 (renamed from sm_101) and sm_88),
# cross-checked with LLVM's NVPTXTargetParser.def MIN_VER column and with the ptxas 12.8/12.9
# arch lists (12.8 has no sm_103, sm_121 or f targets; 12.9 has). A driver cannot drive a GPU
# released after it: NVIDIA publishes no per-arch driver table, so the first toolkit's driver
# branch is the floor (reasoned). Before 11.0 (release notes of CUDA 3.0 .. 6.5): sm_20 3.0,
# sm_21 3.2, sm_30 4.2, sm_35 5.0, sm_32 6.0, sm_37 6.5, sm_50 6.0. The end of support: Fermi
# ended with R390 (CUDA 9.1; NVIDIA "Support plan for Fermi series GeForce GPUs": 390.x is the
# last branch for GFxxx GPUs), Kepler with R470 (CUDA 11.4; NVIDIA "Current graphics driver
# releases": 470.x is the legacy branch for GKxxx GPUs); "The release 580 series will be the
# last to support GPUs based on the Maxwell, Pascal, and Volta architectures" (NVIDIA, Unix
# graphics feature deprecation schedule), and R590 is CUDA 13.1 (Table 3). CUDA 13.0 also
# removed offline compilation for those archs (release notes, "Deprecated Architectures"): a
# toolkit limit, not a driver one. sm_107 (Rubin) is first supported by CUDA 13.4: LLVM's
# NVPTXTargetParser.def gives sm_107/107a/107f MIN_VER CUDA_134; GCC's nvptx patch "Update
# -march-map= for newer sm_{107,110}" (gcc-patches): "PTX ISA 9.4 (CUDA 13.4) added
# SM_107{,a,f} (Rubin)"; NVIDIA's CUTLASS 4.8.0dev release notes: "Executing Rubin kernels (SM107)
# requires the R615 driver which will be released with CUDA Toolkit 13.4 GA. R610 from CUDA
# Toolkit 13.4 Developer Preview is not sufficient" (docs/research/issue32-future-arch.md).
DEVICE_SUPPORT: dict[int, DeviceSupport] = {
    20: DeviceSupport((3, 0), (9, 1), _FERMI),
    21: DeviceSupport((3, 2), (9, 1), _FERMI),
    30: DeviceSupport((4, 2), (11, 4), _KEPLER),
    32: DeviceSupport((6, 0), (11, 4), _KEPLER),
    35: DeviceSupport((5, 0), (11, 4), _KEPLER),
    37: DeviceSupport((6, 5), (11, 4), _KEPLER),
    50: DeviceSupport((6, 0), (13, 0), _VOLTA_AND_OLDER),
    52: DeviceSupport((6, 5), (13, 0), _VOLTA_AND_OLDER),
    53: DeviceSupport((7, 0), (13, 0), _VOLTA_AND_OLDER),
    60: DeviceSupport((8, 0), (13, 0), _VOLTA_AND_OLDER),
    61: DeviceSupport((8, 0), (13, 0), _VOLTA_AND_OLDER),
    62: DeviceSupport((8, 0), (13, 0), _VOLTA_AND_OLDER),
    70: DeviceSupport((9, 0), (13, 0), _VOLTA_AND_OLDER),
    72: DeviceSupport((9, 1), (13, 0), _VOLTA_AND_OLDER),
    75: DeviceSupport((10, 0)),
    80: DeviceSupport((11, 0)),
    86: DeviceSupport((11, 1)),
    87: DeviceSupport((11, 4)),
    88: DeviceSupport((13, 0)),
    89: DeviceSupport((11, 8)),
    90: DeviceSupport((11, 8)),
    100: DeviceSupport((12, 8)),
    101: DeviceSupport((12, 8), (12, 9), _THOR),
    103: DeviceSupport((12, 9)),
    107: DeviceSupport((13, 4)),
    110: DeviceSupport((13, 0), None, _THOR),
    120: DeviceSupport((12, 8)),
    121: DeviceSupport((12, 9)),
}

#: The newest CUDA release whose GPU archs :data:`DEVICE_SUPPORT` holds, every one of them: the
#: archs ptxas 13.5 takes (``ptxas --help``, ``--gpu-name``; ``nvcc --list-gpu-code``: sm_75 ..
#: sm_121 with sm_107) are the table's from sm_75 on (tests/test_future_arch.py checks it with
#: the pip wheel's ptxas). An arch absent from the table, if a GPU has it, came with a later
#: release whatever its number: NVIDIA numbers are not in release order (sm_88 came with 13.0,
#: after sm_100 .. sm_121 in 12.8/12.9; sm_107 with 13.4, after sm_110), so "above the newest
#: arch" does not tell a new GPU. A driver of this release or older does not drive it: its device
#: floor is "newer than CUDA 13.5" (:func:`beyond_table`), which the PTX ISA table's newest
#: release (:data:`fatbinkit.formats.ptx.NEWEST_KNOWN_CUDA`) must equal, as floors beyond the
#: tables are met by drivers above that one.
DEVICE_TABLE_CUDA: CudaVersion = (13, 5)

#: the prefix that names a GPU arch the device table does not know yet: ``future:sm_130``
FUTURE = "future:"


def beyond_table(sm: str) -> str:
    """``sm_130 is not known to CUDA 13.5 or older: needs a newer driver``: the device floor of
    an arch absent from :data:`DEVICE_SUPPORT` (:data:`DEVICE_TABLE_CUDA`)."""
    return (f"{sm} is not known to CUDA {dotted(DEVICE_TABLE_CUDA)} or older: needs a newer "
            "driver")


def as_device(value: object, what: str = "device") -> Arch:
    """``value`` (what :func:`~fatbinkit.formats.arch.as_arch` takes) as the arch of a GPU that
    exists: its SM must be in :data:`DEVICE_SUPPORT` (NVIDIA's published compute capabilities),
    else :class:`InvalidArgumentError` -- a typo like ``sm_91`` would otherwise be judged as a
    GPU no driver drives, and a ``prune`` for it would drop every SASS. A GPU newer than the
    table is named on purpose as ``future:sm_130`` (or an :class:`Arch` with ``future=True``):
    accepted, its device floor newer than :data:`DEVICE_TABLE_CUDA` (:func:`beyond_table`)."""
    if isinstance(value, str) and value.strip().lower().startswith(FUTURE):
        arch = as_arch(value.strip()[len(FUTURE):], what)
        return Arch(arch.number, arch.suffix, future=True)
    arch = as_arch(value, what)
    if arch.number in DEVICE_SUPPORT or arch.future:
        return arch
    known = ", ".join(f"sm_{n}" for n in sorted(DEVICE_SUPPORT))
    raise InvalidArgumentError(
        f"{what} {arch.sm}: no NVIDIA GPU has compute capability {arch.major}.{arch.minor} "
        f"(known: {known}); a GPU newer than this table is named {FUTURE}{arch.sm}")


_CUDA_RE = re.compile(r"^(\d{1,2})(?:\.(\d{1,2}))?$")
_DRIVER_RE = re.compile(r"^(\d{3})(?:\.\d{1,3}){0,2}$")


def parse_driver(text: str) -> CudaVersion:
    """``13.0`` or ``13`` (a CUDA version), or ``580.65.06`` / ``580`` (a driver version: a
    :class:`Driver` of the CUDA version of its branch, :func:`cuda_for_driver`)."""
    text = text.strip()
    m = _CUDA_RE.match(text)
    if m:
        return int(m.group(1)), int(m.group(2) or 0)
    if _DRIVER_RE.match(text):
        return Driver(cuda_for_driver(text), version_tuple(text))
    raise InvalidArgumentError(
        f"{text!r} is neither a CUDA version like 13.0 nor a driver version like 580.65.06")


def cuda_for_driver(version: str) -> CudaVersion:
    """The CUDA version a driver implements, from its branch (``580.65.06`` -> 13.0): the newest
    release of Table 3 whose Linux or Windows minimum driver is on that branch or an older one.

    A branch outside the table is refused (give the CUDA version): before the first row the table
    is not kept, after the newest row the CUDA version is not known here.
    """
    if not _DRIVER_RE.match(version.strip()):
        raise InvalidArgumentError(f"{version!r} is not a driver version like 580.65.06")
    branch = int(version.strip().split(".")[0])
    fits = [r for r in RELEASES if min(_branch(r.linux), _branch(r.windows or r.linux)) <= branch]
    first, newest = RELEASES[0], RELEASES[-1]
    if not fits or branch > _branch(newest.linux):
        raise InvalidArgumentError(
            f"driver {version} is outside the known table ({_branch(first.linux)} .. "
            f"{_branch(newest.linux)}, CUDA {dotted(first.cuda)} .. {dotted(newest.cuda)}): give "
            "its CUDA version instead (nvidia-smi's 'CUDA Version')")
    return fits[-1].cuda


def _branch(driver: str) -> int:
    return int(driver.split(".")[0])


def release_for(cuda: CudaVersion) -> Release | None:
    """The first release of the table at or after ``cuda`` (12.7 -> 12.8); None outside the
    table (before its first row or past its end)."""
    if cuda < RELEASES[0].cuda:
        return None
    return next((r for r in RELEASES if r.cuda >= cuda), None)


def cuda_name(cuda: CudaVersion, host: str | None = LINUX,
              release: Release | None = None) -> str:
    """``CUDA 13.0 (Linux driver >= 580.65.06)``: a version with the driver that provides it on
    ``host`` (:func:`drivers_text`); ``release`` gives other numbers than Table 3's row for it
    (minor-version compatibility's)."""
    rel = release or release_for(cuda)
    if rel is not None:
        return f"CUDA {dotted(cuda)} ({drivers_text(rel, host)})"
    where = "older than" if cuda < RELEASES[0].cuda else "newer than"
    return f"CUDA {dotted(cuda)} ({where} the known driver table)"


def as_cuda_version(value: object, what: str = "driver") -> CudaVersion:
    """A driver, given any way a user has one, as the CUDA version it implements:

    * ``(12, 4)``: a CUDA version (what this library uses everywhere);
    * ``"12.4"`` / ``"12"`` or ``"580.65.06"`` / ``"580"``: :func:`parse_driver` (a driver
      version gives a :class:`Driver`, kept as it is when given again);
    * ``12040``: the int ``cuDriverGetVersion`` returns (``1000 * major + 10 * minor``).

    Anything else (``"abc"``, ``-1``, ``(12,)``, ``1.5``, ``True``) is an
    :class:`InvalidArgumentError` naming ``what``.
    """
    if isinstance(value, Driver):
        return value
    if isinstance(value, str):
        try:
            return parse_driver(value)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{what}: {e}") from e
    if isinstance(value, int) and not isinstance(value, bool):
        if 1000 <= value < 100_000:
            return value // 1000, value % 1000 // 10
        raise InvalidArgumentError(
            f"{what} {value} is not a CUDA driver API version (1000 * major + 10 * minor, e.g. "
            "12040 for 12.4): give 12040, '12.4' or (12, 4)")
    if isinstance(value, tuple) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        major, minor = value
        if 1 <= major <= 99 and 0 <= minor <= 99:
            return major, minor
        raise InvalidArgumentError(f"{what} {value} is not a CUDA version (major 1..99, minor "
                                   "0..99)")
    raise InvalidArgumentError(
        f"{what} is a CUDA version like (12, 4) or '12.4', a driver version like '580.65.06', or "
        f"cuDriverGetVersion's int like 12040; not {type(value).__name__} {value!r}")
