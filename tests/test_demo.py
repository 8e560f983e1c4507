"""``fatbinkit demo`` (what ``make demo`` runs) end to end on this machine: every step runs or
says why it is skipped, and what it writes reads back in cuobjdump."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from fatbin_kernels import cuobjdump_list


@pytest.mark.slow
def test_the_demo_runs_every_step(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "demo", "-o", str(out),
                           "--no-torch"], capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = [line.split(".")[0] for line in proc.stdout.splitlines() if line.startswith("== ")]
    assert steps == [f"== {n}" for n in range(1, 10)]
    assert cuobjdump_list(out / "add_kernel.fatbin") == [
        "ELF file    1: add_kernel.1.sm_80.cubin", "ELF file    2: add_kernel.2.sm_90a.cubin",
        "ELF file    3: add_kernel.3.sm_100a.cubin", "ELF file    4: add_kernel.4.sm_120a.cubin",
        "PTX file    1: add_kernel.1.sm_80.ptx"]
    assert cuobjdump_list(out / "add_kernel.sm_90.fatbin") == [
        "ELF file    1: add_kernel.sm_90.1.sm_90a.cubin"]
    if shutil.which("gcc"):
        assert "add_kernel" in proc.stdout and (out / "libhost-with-kernels.so").is_file()
    if shutil.which("nvcc"):
        pruned, full = out / "libslim.sm_90.so", out / "libslim.so"
        assert pruned.stat().st_size < full.stat().st_size


def test_the_demo_never_empties_a_folder_it_did_not_make(tmp_path: Path) -> None:
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "demo", "-o", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 3 and "not a demo's output folder" in proc.stderr
    assert mine.read_text() == "keep me" and sorted(tmp_path.iterdir()) == [mine]
