"""The runtime's parts that need no GPU: image kinds, PTX NUL handling, failing cleanly."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

from fatbinkit.errors import CudaUnavailableError, InputError, InvalidArgumentError
from fatbinkit.runtime import Device, Module, image_kind, nul_terminated


def _have_gpu() -> bool:
    try:
        Device.get(0)
    except CudaUnavailableError:
        return False
    return True


NO_GPU = not _have_gpu()


def test_image_kind_by_magic() -> None:
    assert image_kind(b"\x50\xed\x55\xba\x01\x00\x10\x00") == "fatbin"
    assert image_kind(b"\x7fELF\x02\x01\x01") == "cubin"
    assert image_kind(b".version 8.8\n.target sm_90\n") == "ptx"
    assert image_kind(memoryview(b"\x7fELF")) == "cubin"


def test_ptx_gets_exactly_one_nul() -> None:
    assert nul_terminated(b".version 8.8") == b".version 8.8\0"
    already = b".version 8.8\0"
    assert nul_terminated(already) is already
    assert nul_terminated(b"") == b"\0"


def test_missing_and_directory_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        Module.load(tmp_path / "absent.cubin")
    with pytest.raises(InputError, match="directory"):
        Module.load(tmp_path)
    with pytest.raises(InvalidArgumentError, match="cannot load a int"):
        Module.load(42)


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_no_driver_is_a_clear_error() -> None:
    with pytest.raises(CudaUnavailableError):
        Device.get(0)
    with pytest.raises(CudaUnavailableError):
        Module.load(b".version 8.8\n.target sm_90\n.address_size 64\n")


def test_from_symbol_missing_symbol_is_clear() -> None:
    libc = ctypes.CDLL(None)
    with pytest.raises(InvalidArgumentError, match="__nonexistent_kernel_start"):
        Module.from_symbol(libc, "nonexistent_kernel")


@pytest.mark.skipif(not NO_GPU, reason="checks the no-GPU path")
def test_cli_load_without_gpu_exits_3_with_one_line(tmp_path: Path) -> None:
    img = tmp_path / "k.ptx"
    img.write_bytes(b".version 8.8\n.target sm_90\n.address_size 64\n")
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "load", str(img)],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fatbinkit: error: ")


def test_fatbinkit_objects_become_the_bytes_the_driver_gets() -> None:
    from fatbinkit.formats.arch import Arch
    from fatbinkit.formats.fatbin import EntryKind, Fatbin, build_fatbin, make_entry
    from fatbinkit.runtime import _image_bytes

    ptx = b".version 8.8\n.target sm_90\n.address_size 64\n"
    data = build_fatbin([make_entry(EntryKind.PTX, Arch(90), ptx, compression="zstd")])
    fb = Fatbin.from_bytes(data)
    assert _image_bytes(fb) == data
    assert bytes(_image_bytes(fb.entries[0])).rstrip(b"\0") == ptx


def test_a_corrupt_compressed_entry_is_refused_before_the_driver() -> None:
    """Checked before any driver call (here there is none): the R580 driver crashes on a PTX
    entry whose LZ4 payload is corrupt (docs/gpu.md)."""
    from fatbinkit.errors import DecompressionError
    from fatbinkit.formats.arch import Arch
    from fatbinkit.formats.fatbin import EntryKind, Fatbin, build_fatbin, make_entry
    from fatbinkit.runtime import Module

    ptx = b".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\nret;\n}\n"
    blob = bytearray(build_fatbin([make_entry(EntryKind.PTX, Arch(80), ptx * 50,
                                              compression="lz4")]))
    stored = bytes(Fatbin.from_bytes(bytes(blob)).entries[0].stored)
    at = bytes(blob).find(stored)
    for i in range(at + 4, at + len(stored) - 4):
        blob[i] ^= 0x5A
    with pytest.raises(DecompressionError):
        Module.load(bytes(blob))
