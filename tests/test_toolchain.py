"""Locating NVIDIA tools and running them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fatbinkit.errors import ToolError, ToolNotFoundError
from fatbinkit.toolchain import find_library, find_tool, run_tool


def test_finds_pip_and_system_tools() -> None:
    cuobjdump = find_tool("cuobjdump")  # only the nvidia-cuda-cuobjdump wheel provides it here
    assert cuobjdump.is_file() and "cuobjdump" in cuobjdump.name
    assert b"cuobjdump" in run_tool("cuobjdump", ["--version"]).stdout.lower()
    assert find_tool("fatbinary").is_file()


def test_wheel_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    assert "site-packages" in str(find_tool("cuobjdump"))


def test_missing_tool_names_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolNotFoundError, match="pip install nvidia-cuda-nvdisasm"):
        find_tool("nvdisasm")
    with pytest.raises(ToolNotFoundError, match="pip install nvidia-nvfatbin"):
        find_library("libnvfatbin", "libnvfatbin.so.99")
    assert find_library("libnvfatbin", "libnvfatbin.so.13").is_file()


def test_failing_tool_reports_command_and_stderr(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"fatbinary .*--image3=kind=elf.*exit status") as info:
        run_tool("fatbinary", ["--create", str(tmp_path / "o"),
                               f"--image3=kind=elf,sm=90,file={tmp_path / 'missing.cubin'}"])
    assert "missing.cubin" in str(info.value)
