"""One library, three module totals: ``ls --summary`` counts every module (it reads entry
headers), ``check`` and ``check --min-driver`` leave out the empty ones (no kernels, no
variables: never loaded). Each report says which it counts, and the numbers add up.

cuRAND 13 has 13 modules, 5 of them empty; which ones are empty comes from ``cuobjdump
-res-usage``: every cubin of the module lists no function and ``Common: GLOBAL:0``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from cudabuild import res_usage_blocks
from thirdparty import CURAND13, fetch


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def _empty_modules(path: Path) -> tuple[int, int]:
    """(modules, empty modules) by cuobjdump: a module is empty when each of its cubins has no
    function and no module data (the containers of the images from ``ls --json``)."""
    entries = [e for e in json.loads(cli("ls", path, "--json").stdout)["entries"]]
    blocks = res_usage_blocks(path)
    sass = [e for e in entries if e["kind"] == "sass"]
    assert len(sass) == len(blocks)
    empty: dict[int, bool] = {e["container"]: True for e in entries}
    for e, (_, usage) in zip(sass, blocks, strict=True):
        if usage.functions or usage.common != {"GLOBAL": 0}:
            empty[e["container"]] = False
    return len(empty), sum(empty.values())


def test_each_report_says_which_modules_it_counts() -> None:
    path = fetch(CURAND13)
    modules, empty = _empty_modules(path)
    assert (modules, empty) == (13, 5)
    # ls --summary: every module, and it says so
    summary = cli("ls", path, "--summary").stdout
    assert summary.startswith(f"{path}: 186 images in {modules} modules, ")
    assert (f"loads on ({modules} modules, from entry headers: empty ones included, which "
            "`fatbinkit check` leaves out; driver floors not checked):") in summary
    doc = json.loads(cli("ls", path, "--summary", "--json").stdout)
    assert doc["modules"] == modules
    assert all(d["sass"] + d["jit"] + d["none"] == modules for d in doc["devices"])
    # check: the empty ones named in the head, the verdicts count the others
    proc = cli("check", path, "--arch", "sm_90", "--arch", "sm_75")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{path}: {modules} module(s), {empty} of them empty (no "
                                  "kernels, no variables: never loaded, not counted below)\n")
    for n_sass, n_jit, n_cannot in re.findall(
            r"^  sm_\d+ +\w+ +(\d+) SASS, (\d+) PTX JIT, (\d+) cannot load", proc.stdout, re.M):
        assert int(n_sass) + int(n_jit) + int(n_cannot) <= modules - empty
    doc = json.loads(cli("check", path, "--arch", "sm_90", "--json").stdout)
    assert sum(m["empty"] for m in doc["modules"]) == empty
    assert sum(doc["verdicts"]["sm_90"][k] for k in ("sass", "jit", "cannot", "other_gpus")) \
        == modules - empty
    # check --min-driver: every module in JSON's head, the counted ones per arch; the text says so
    text = cli("check", path, "--min-driver").stdout
    assert text.splitlines()[0] == (f"{path}: minimum driver per GPU arch ({modules} module(s); "
                                    f"{empty} empty ones, no kernels and no variables: never "
                                    "loaded, left out)")
    doc = json.loads(cli("check", path, "--min-driver", "--json").stdout)
    assert doc["modules"] == modules
    assert doc["min_driver"]["sm_90"]["modules"] == modules - empty


def test_a_wheel_says_the_same() -> None:
    """``check`` of the cuRAND 13 wheel (one library): the same 13 modules, 5 left out."""
    from thirdparty import CACHE

    fetch(CURAND13)  # downloads the wheel on first use
    (wheel,) = sorted((CACHE / "wheels").glob(
        f"{CURAND13.package.replace('-', '_')}-{CURAND13.version}-*linux*_x86_64.whl"))
    proc = cli("check", wheel, "--arch", "sm_90")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{wheel}: 1 file(s) with device code, 13 module(s), 5 of them "
                                  "empty (never loaded, not counted below)\n")
    text = cli("check", wheel, "--min-driver").stdout
    assert text.splitlines()[0] == (f"{wheel}: minimum driver per GPU arch (13 module(s) in 1 "
                                    "file(s); 5 empty ones, no kernels and no variables: never "
                                    "loaded, left out)")
