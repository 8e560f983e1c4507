"""Load kernel images through the CUDA driver API (cuda-python), with errors that say why.

AOTInductor's generated code calls ``cuModuleLoadData(__<kernel>_start)`` with no JIT options, so a
failure reads only ``CUDA_ERROR_NO_BINARY_FOR_GPU``. Here the same load goes through
``cuModuleLoadDataEx`` with info/error log buffers (or ``cuLibraryLoadData`` on request), and a
failure is explained: which archs the image holds against the device's, which PTX ISA needs which
driver, the JIT log. ``cuda.bindings`` is imported only when a GPU is actually used.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any

from .errors import (
    CudaError,
    CudaUnavailableError,
    InvalidArgumentError,
    cuda_error_class,
)
from .formats.arch import Arch
from .infile import as_path, read_input

if TYPE_CHECKING:
    from .compat import Decision

__all__ = [
    "LOG_SIZE",
    "Buffer",
    "Device",
    "Kernel",
    "Module",
    "image_kind",
    "nul_terminated",
    "to_object_code",
]

LOG_SIZE = 64 * 1024


def image_kind(data: bytes | memoryview) -> str:
    """Classify an image by its first bytes: ``"fatbin"``, ``"cubin"`` or ``"ptx"``.

    The names are the driver's and nvJitLink's input kinds, as cuda.core uses them. Only the
    magic is looked at (as the driver does): anything else is handed over as PTX.
    """
    from .formats.elf import ELFMAG  # here, not at the top: `import fatbinkit.runtime` stays light
    from .formats.fatbin import FATBIN_MAGIC

    head = bytes(data[:4])
    if head == FATBIN_MAGIC.to_bytes(4, "little"):
        return "fatbin"
    if head == ELFMAG:
        return "cubin"
    return "ptx"


def nul_terminated(data: bytes | memoryview) -> bytes | memoryview:
    """PTX handed to the driver must end in NUL; return ``data`` itself if it already does."""
    if len(data) and data[-1] == 0:
        return data
    return bytes(data) + b"\0"


def _driver() -> ModuleType:
    try:
        from cuda.bindings import driver as drv
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise CudaUnavailableError(
            "cuda-python is not installed: pip install 'fatbinkit[cuda]' (package cuda-bindings)"
        ) from exc
    driver: ModuleType = drv
    return driver


def _name(result: Any) -> str:
    return str(getattr(result, "name", result))


def _check(ret: tuple[Any, ...], what: str) -> Any:
    """Unpack a cuda-python return tuple, raising CudaError for anything but CUDA_SUCCESS."""
    result, *values = ret
    if int(result) != 0:
        code = _name(result)
        raise cuda_error_class(code)(f"{what} failed", code=code)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _init() -> ModuleType:
    drv = _driver()
    try:
        _check(drv.cuInit(0), "cuInit")
    except CudaError:
        raise
    except Exception as exc:  # the bindings raise their own errors when libcuda is missing
        raise CudaUnavailableError(f"no CUDA driver library could be loaded: {exc}") from exc
    return drv


@dataclass(frozen=True)
class Device:
    """A CUDA device as the driver reports it."""

    ordinal: int
    name: str
    arch: Arch
    driver_version: tuple[int, int]

    @classmethod
    def get(cls, ordinal: int = 0) -> Device:
        """Describe device ``ordinal``; raises CudaUnavailableError without a driver or GPU."""
        drv = _init()
        count = _check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
        if ordinal < 0 or ordinal >= count:
            raise CudaUnavailableError(f"no CUDA device {ordinal} (the driver sees {count})")
        dev = _check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        attr = drv.CUdevice_attribute
        major = _check(
            drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
            "cuDeviceGetAttribute",
        )
        minor = _check(
            drv.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
            "cuDeviceGetAttribute",
        )
        raw_name = _check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
        version = _check(drv.cuDriverGetVersion(), "cuDriverGetVersion")
        return cls(
            ordinal=ordinal,
            name=bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace"),
            arch=Arch(major * 10 + minor),
            driver_version=(version // 1000, version % 1000 // 10),
        )


_contexts: dict[int, Any] = {}


def _activate(ordinal: int) -> ModuleType:
    """Make device ``ordinal``'s primary context current (retained once per process)."""
    drv = _init()
    if ordinal not in _contexts:
        dev = _check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
        _contexts[ordinal] = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(drv.cuCtxSetCurrent(_contexts[ordinal]), "cuCtxSetCurrent")
    return drv


@dataclass(frozen=True)
class Kernel:
    """A kernel of a loaded module, with what the driver says about the image it came from.

    ``binary_version`` is the SM of the SASS that runs (e.g. 90); ``ptx_version`` the virtual arch
    it was compiled from. SASS JIT-compiled from PTX reports the device's SM as binary version.
    """

    name: str
    handle: Any = field(repr=False, compare=False)
    binary_version: int
    ptx_version: int
    registers: int
    shared_bytes: int
    local_bytes: int
    const_bytes: int
    max_threads_per_block: int

    def launch(
        self,
        grid: tuple[int, int, int] | int,
        block: tuple[int, int, int] | int,
        args: Sequence[Any],
        *,
        shared_mem: int = 0,
        stream: Any = None,
        sync: bool = True,
    ) -> None:
        """Launch with ctypes-typed ``args``: ``ctypes.c_uint64(ptr)``, ``ctypes.c_float(a)``..."""
        drv = _driver()
        g = (grid, 1, 1) if isinstance(grid, int) else grid
        b = (block, 1, 1) if isinstance(block, int) else block
        values = [a if isinstance(a, ctypes._SimpleCData) else ctypes.c_uint64(int(a))
                  for a in args]
        params = (ctypes.c_void_p * max(1, len(values)))(
            *[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values]
        )
        _check(
            drv.cuLaunchKernel(
                self.handle, *g, *b, shared_mem, stream or 0, ctypes.addressof(params), 0
            ),
            f"cuLaunchKernel({self.name})",
        )
        if sync:
            _check(drv.cuCtxSynchronize(), f"kernel {self.name}")


class Module:
    """A loaded CUDA module (or library); unloads on :meth:`close` or at the end of a ``with``."""

    def __init__(
        self,
        handle: Any,
        *,
        library: bool,
        kind: str,
        image: bytes | memoryview,
        load_seconds: float,
        info_log: str,
        device: Device,
    ) -> None:
        self._handle = handle
        self._library = library
        self.kind = kind
        self.image = image  # the bytes the driver was given (a view of the library's memory)
        self.load_seconds = load_seconds
        self.info_log = info_log
        self.device = device

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        image: bytes | bytearray | memoryview | str | os.PathLike[str] | Any,
        *,
        device: int = 0,
        library: bool = False,
        preflight: bool = False,
        log_size: int = LOG_SIZE,
        validate: bool = True,
    ) -> Module:
        """Load a fatbin, cubin or PTX image: bytes, a path (``str`` or ``os.PathLike``), a
        ``Fatbin`` or one ``FatbinEntry``.

        With ``preflight`` the compatibility engine is asked first and an image that cannot load
        on this device/driver is refused before the driver is called. ``validate`` (the default)
        inflates and checks a fatbin's compressed entries first: a corrupt one is a
        ``DecompressionError``, not a driver crash.
        """
        data = _image_bytes(image)
        return cls._load_buffer(data, data, device=device, library=library, preflight=preflight,
                                log_size=log_size, validate=validate)

    @classmethod
    def from_symbol(
        cls,
        lib: ctypes.CDLL,
        name: str,
        *,
        device: int = 0,
        library: bool = False,
        preflight: bool = False,
    ) -> Module:
        """Load the blob between ``__<name>_start`` and ``__<name>_end`` of a loaded library.

        The driver reads the library's own memory: nothing is copied (PTX without a final NUL
        excepted, which gets one in a copy).
        """
        try:
            start = ctypes.addressof(ctypes.c_char.in_dll(lib, f"__{name}_start"))
            end = ctypes.addressof(ctypes.c_char.in_dll(lib, f"__{name}_end"))
        except ValueError as exc:
            raise InvalidArgumentError(
                f"{getattr(lib, '_name', lib)} has no __{name}_start/__{name}_end symbols"
            ) from exc
        if end < start:
            raise InvalidArgumentError(f"__{name}_end lies before __{name}_start")
        view = memoryview((ctypes.c_char * (end - start)).from_address(start)).cast("B")
        # the driver gets the address itself; PTX goes through _load_buffer's NUL check
        target: Any = view if image_kind(view) == "ptx" else start
        return cls._load_buffer(target, view, device=device, library=library,
                                preflight=preflight, log_size=LOG_SIZE, validate=True)

    @classmethod
    def _load_buffer(
        cls,
        target: Any,
        view: bytes | memoryview,
        *,
        device: int,
        library: bool,
        preflight: bool,
        log_size: int,
        validate: bool,
    ) -> Module:
        kind = image_kind(view)
        if kind == "ptx" and not isinstance(target, int):
            target = nul_terminated(target)
        if kind == "fatbin" and validate:
            _check_payloads(view)
        dev = Device.get(device)
        if preflight:
            from .diagnose import preflight_check

            preflight_check(view, dev.arch, dev.driver_version)
        drv = _activate(device)
        info, error = bytearray(log_size), bytearray(log_size)
        opt = drv.CUjit_option
        keys = [
            opt.CU_JIT_INFO_LOG_BUFFER,
            opt.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            opt.CU_JIT_ERROR_LOG_BUFFER,
            opt.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            opt.CU_JIT_LOG_VERBOSE,
        ]
        values = [info, log_size, error, log_size, 1]
        t0 = time.perf_counter()
        if library:
            ret = drv.cuLibraryLoadData(target, keys, values, len(keys), None, None, 0)
        else:
            ret = drv.cuModuleLoadDataEx(target, len(keys), keys, values)
        elapsed = time.perf_counter() - t0
        if int(ret[0]) != 0:
            from .diagnose import explain_load_error

            raise explain_load_error(_name(ret[0]), view, dev, _log_text(error))
        return cls(
            ret[1],
            library=library,
            kind=kind,
            image=view,
            load_seconds=elapsed,
            info_log=_log_text(info),
            device=dev,
        )

    def picked(self) -> Decision:
        """Which image of :attr:`image` the driver ran, as the compatibility engine reads it:
        ``how`` is "sass" or "ptx-jit" (the driver reports only version numbers, which do not
        tell SASS from JIT-compiled PTX)."""
        from .compat import predict_load

        return predict_load(self.image, self.device.arch, self.device.driver_version)

    # -- kernels -------------------------------------------------------------------------
    def kernel(self, name: str) -> Kernel:
        """Look up kernel ``name`` and read its attributes."""
        drv = self._drv()
        encoded = name.encode()
        try:
            if self._library:
                k = _check(drv.cuLibraryGetKernel(self._handle, encoded), "cuLibraryGetKernel")
                func = _check(drv.cuKernelGetFunction(k), "cuKernelGetFunction")
            else:
                func = _check(drv.cuModuleGetFunction(self._handle, encoded), "cuModuleGetFunction")
        except CudaError as exc:
            if exc.code == "CUDA_ERROR_NOT_FOUND":
                raise InvalidArgumentError(
                    f"no kernel {name!r} in this module; it has: {', '.join(self.kernel_names)}"
                ) from exc
            raise
        return _describe_function(drv, name, func)

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """Names of the module's kernels, as the driver enumerates them."""
        drv = self._drv()
        if self._library:
            count = _check(drv.cuLibraryGetKernelCount(self._handle), "cuLibraryGetKernelCount")
            kernels = _check(
                drv.cuLibraryEnumerateKernels(count, self._handle), "cuLibraryEnumerateKernels"
            )
            funcs = [_check(drv.cuKernelGetFunction(k), "cuKernelGetFunction") for k in kernels]
        else:
            count = _check(drv.cuModuleGetFunctionCount(self._handle), "cuModuleGetFunctionCount")
            funcs = _check(
                drv.cuModuleEnumerateFunctions(count, self._handle), "cuModuleEnumerateFunctions"
            )
        names = []
        for func in funcs or ():
            raw = _check(drv.cuFuncGetName(func), "cuFuncGetName")
            names.append(raw.decode() if isinstance(raw, bytes) else str(raw))
        return tuple(sorted(names))

    def kernels(self) -> Iterator[Kernel]:
        """Every kernel of the module, with attributes."""
        for name in self.kernel_names:
            yield self.kernel(name)

    # -- lifetime ------------------------------------------------------------------------
    def _drv(self) -> ModuleType:
        if self._handle is None:
            raise InvalidArgumentError("module already unloaded")
        return _activate(self.device.ordinal)

    def close(self) -> None:
        """Unload the module; safe to call twice."""
        if self._handle is None:
            return
        drv = _activate(self.device.ordinal)
        handle, self._handle = self._handle, None
        if self._library:
            _check(drv.cuLibraryUnload(handle), "cuLibraryUnload")
        else:
            _check(drv.cuModuleUnload(handle), "cuModuleUnload")

    def __enter__(self) -> Module:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Buffer:
    """Device memory for kernel arguments: ``Buffer.from_bytes(b)``, ``.ptr``, ``.to_bytes()``."""

    def __init__(self, nbytes: int, *, device: int = 0) -> None:
        drv = _activate(device)
        self.nbytes = nbytes
        self.device = device
        self._ptr: Any = _check(drv.cuMemAlloc(max(1, nbytes)), "cuMemAlloc")

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, device: int = 0) -> Buffer:
        buf = cls(len(data), device=device)
        _check(_activate(device).cuMemcpyHtoD(buf._ptr, bytes(data), len(data)), "cuMemcpyHtoD")
        return buf

    @property
    def ptr(self) -> ctypes.c_uint64:
        """The device address, typed for :meth:`Kernel.launch`."""
        return ctypes.c_uint64(int(self._ptr))

    def to_bytes(self) -> bytes:
        out = bytearray(self.nbytes)
        _check(_activate(self.device).cuMemcpyDtoH(out, self._ptr, self.nbytes), "cuMemcpyDtoH")
        return bytes(out)

    def free(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            _check(_activate(self.device).cuMemFree(ptr), "cuMemFree")

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def _check_payloads(view: bytes | memoryview) -> None:
    """Inflate and check every compressed entry of the container the driver reads, before the
    driver sees it: the R580 driver crashes the process (SIGSEGV) on a PTX entry whose LZ4
    payload is corrupt (docs/gpu.md, 2026-12-01); this raises a DecompressionError instead."""
    from .formats.fatbin import DecompressionBudget, FatbinContainer

    container = FatbinContainer.parse(view)
    budget = DecompressionBudget.for_input(len(view))
    for entry in container.entries:
        if entry.compression is not None:
            entry.data(budget=budget)


def _describe_function(drv: ModuleType, name: str, func: Any) -> Kernel:
    a = drv.CUfunction_attribute

    def attr(which: Any) -> int:
        return int(_check(drv.cuFuncGetAttribute(which, func), "cuFuncGetAttribute"))

    return Kernel(
        name=name,
        handle=func,
        binary_version=attr(a.CU_FUNC_ATTRIBUTE_BINARY_VERSION),
        ptx_version=attr(a.CU_FUNC_ATTRIBUTE_PTX_VERSION),
        registers=attr(a.CU_FUNC_ATTRIBUTE_NUM_REGS),
        shared_bytes=attr(a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        local_bytes=attr(a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
        const_bytes=attr(a.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES),
        max_threads_per_block=attr(a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    )


def _log_text(buf: bytearray) -> str:
    return bytes(buf).split(b"\0", 1)[0].decode(errors="replace").strip()


def _image_bytes(image: Any) -> bytes | memoryview:
    if isinstance(image, (bytes, bytearray, memoryview)):
        return memoryview(image).cast("B") if not isinstance(image, bytes) else image
    if isinstance(image, (str, os.PathLike)):  # a str is a path
        return read_input(as_path(image, "the image"))
    from .formats.fatbin import Fatbin, FatbinEntry

    if isinstance(image, Fatbin):
        return image.to_bytes()
    if isinstance(image, FatbinEntry):  # one cubin or PTX found by fatbinkit.scan
        return image.data()
    raise InvalidArgumentError(
        f"cannot load a {type(image).__name__}: pass bytes, a path, a Fatbin or a FatbinEntry"
    )


def to_object_code(image: bytes | os.PathLike[str] | Any, name: str = "") -> Any:
    """Hand an image to ``cuda.core`` as an ``ObjectCode`` of the right kind (fatbin/cubin/ptx)."""
    try:
        from cuda.core import ObjectCode
    except ImportError:
        try:
            from cuda.core.experimental import ObjectCode
        except ImportError as exc:
            raise CudaUnavailableError("cuda.core is not installed: pip install cuda-core") from exc
    data = bytes(_image_bytes(image))
    kind = image_kind(data)
    factory = {
        "fatbin": ObjectCode.from_fatbin,
        "cubin": ObjectCode.from_cubin,
        "ptx": ObjectCode.from_ptx,
    }[kind]
    return factory(data, name=name) if name else factory(data)
