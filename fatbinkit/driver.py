"""CUDA versions, NVIDIA's driver releases and the GPUs each drives: the names the README documents,
kept where they were. The tables and their sources live in :mod:`fatbinkit.vendors.cuda.driver`.
"""

from __future__ import annotations

from .decision import dotted
from .vendors.cuda.driver import (
    DEVICE_SUPPORT,
    FUTURE,
    LINUX,
    MINOR_COMPAT_DRIVER,
    RELEASES,
    WINDOWS,
    CudaVersion,
    DeviceSupport,
    Driver,
    DriverLike,
    Release,
    as_cuda_version,
    as_device,
    cuda_for_driver,
    cuda_name,
    driver_name,
    drivers_text,
    parse_driver,
    release_for,
    version_tuple,
)

__all__ = [
    "DEVICE_SUPPORT",
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
    "cuda_for_driver",
    "cuda_name",
    "dotted",
    "driver_name",
    "drivers_text",
    "parse_driver",
    "release_for",
    "version_tuple",
]
