"""What a benchmark measures: fatbinkit as the working tree has it, byte-compiled first (so the
first run does not pay for compiling), named by its commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def prepared() -> str:
    """fatbinkit's modules byte-compiled, and the commit measured: its short hash, with
    ``+ changes`` when fatbinkit/ differs from it."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "fatbinkit")],
                   check=True)
    commit = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h"],
                            capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "fatbinkit"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return commit + (" + changes" if dirty else "")
