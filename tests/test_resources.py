"""``fatbinkit ls --resources``: the listing a cuobjdump user expects.

Oracles: ``cuobjdump -res-usage`` for the ``Common:`` figures (module-scope data) of every cubin
of a real library (cuRAND 13) and of the spill kernels, ``ptxas -v`` for the spill figures (which
cuobjdump does not print), pyelftools for the SASS sizes, c++filt for the demangled names.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cudabuild import NVCC, need, res_usage, res_usage_blocks, run
from thirdparty import CUPY13_RANDOM, CURAND13, fetch

# every test here runs on both cubin readers: the C walk and the pure one (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cubin_reader")

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
SPILL_SOURCE = Path(__file__).resolve().parent / "data" / "spill_kernels.cu"
_PTXAS_V_RE = re.compile(r"Function properties for (\w+)\n\s+\d+ bytes stack frame, (\d+) "
                         r"bytes spill stores, (\d+) bytes spill loads")


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def validate(doc: dict[str, Any], what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})
    jsonschema.validate(doc, SCHEMA)


@pytest.fixture(scope="module")
def spills(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, tuple[int, int]]]:
    """The spill kernels as one sm_90 cubin (nvcc 13.0, -maxrregcount=24) and ``ptxas -v``'s
    ``name -> (spill stores, spill loads)``."""
    out = tmp_path_factory.mktemp("resources") / "spills.cubin"
    proc = run([need(NVCC), "-cubin", "-arch=sm_90", "-maxrregcount=24", "-Xptxas", "-v",
                "-o", out, SPILL_SOURCE])
    oracle = {m[0]: (int(m[1]), int(m[2]))
              for m in _PTXAS_V_RE.findall(proc.stdout + proc.stderr)}
    assert len(oracle) == 5 and oracle["k_spill64"] != (0, 0)
    return out, oracle


def _common(fields: dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in fields.items())


def test_common_figures_equal_cuobjdumps() -> None:
    """cuRAND 13's 93 cubins: ``Common: GLOBAL:218048 CONSTANT[4]:64 CONSTANT[3]:72`` and
    ``GLOBAL:0`` alike, in text and JSON, cubin by cubin as cuobjdump -res-usage prints them."""
    path = fetch(CURAND13)
    oracle = [_common(usage.common) for _, usage in res_usage_blocks(path)]
    assert len(set(oracle)) >= 3 and any("CONSTANT[3]" in c for c in oracle)
    text = cli("ls", path, "--resources").stdout
    assert re.findall(r"^    Common: (.*)$", text, re.M) == oracle
    doc = json.loads(cli("ls", path, "--resources", "--json").stdout)
    validate(doc, "listing")
    got = [e["common"] for e in doc["entries"] if e["kind"] == "sass"]
    assert [_common({"GLOBAL": c["global"], **{f"CONSTANT[{b}]": n for b, n in
                                               c["constant"].items()}}) for c in got] == oracle
    assert all("common" not in e for e in doc["entries"] if e["kind"] != "sass")


def test_spill_figures_in_text_and_table(spills: tuple[Path, dict[str, tuple[int, int]]]
                                         ) -> None:
    path, oracle = spills
    usage = res_usage(path)
    text = cli("ls", path, "--resources").stdout.splitlines()
    assert text[1] == f"    Common: {_common(usage.common)}"
    found = {}
    for line in text[2:]:
        m = re.match(r"^    Kernel (\w+): .* SAMPLER:0 SPILL_STORES:(\d+) SPILL_LOADS:(\d+) ", line)
        assert m, line
        found[m[1]] = (int(m[2]), int(m[3]))
    assert found == oracle
    # the table: SPILLS stores/loads, largest total first, equal totals by name
    rows = cli("ls", path, "--resources", "--sort", "spills").stdout.splitlines()
    assert rows[0].split() == ["REG", "STACK", "SHARED", "LOCAL", "SPILLS", "SIZE", "ARCH",
                               "FUNCTION", "IMAGE"]
    got = [(row.split()[7], row.split()[4]) for row in rows[1:]]
    want = sorted(oracle, key=lambda n: (-sum(oracle[n]), n))
    assert got == [(n, f"{oracle[n][0]}/{oracle[n][1]}") for n in want]
    doc = json.loads(cli("ls", path, "--resources", "--sort", "spills", "--json").stdout)
    validate(doc, "function_table")
    assert [f["name"] for f in doc["functions"]] == want
    assert all(f["image"] == "spills.sm_90.cubin" and "file" not in f for f in doc["functions"])


def test_sort_size_and_the_tie_break(spills: tuple[Path, dict[str, tuple[int, int]]]) -> None:
    """``--sort size``: the bytes of each ``.text.<name>`` (pyelftools), largest first; equal
    values (every function has 0 shared memory) in name order, the documented tie-break."""
    from elftools.elf.elffile import ELFFile

    path, _ = spills
    with path.open("rb") as f:
        sizes = {s.name[6:]: s["sh_size"] for s in ELFFile(f).iter_sections()
                 if s.name.startswith(".text.")}
    doc = json.loads(cli("ls", path, "--resources", "--sort", "size", "--json").stdout)
    assert [(f["name"], f["size"]) for f in doc["functions"]] == sorted(
        sizes.items(), key=lambda kv: (-kv[1], kv[0]))
    rows = cli("ls", path, "--resources", "--sort", "shared").stdout.splitlines()[1:]
    assert [row.split()[7] for row in rows] == sorted(sizes)


def test_long_names_keep_the_library_on_screen(tmp_path: Path) -> None:
    """``--demangle --top`` over a folder: names longer than 60 characters are elided in the
    middle, so that every row's library starts in the same column; JSON keeps the whole name."""
    from fatbinkit.cli.fatbin import NAME_WIDTH

    folder = tmp_path / "dist"
    (folder / "pkg").mkdir(parents=True)
    shutil.copy(fetch(CUPY13_RANDOM), folder / "pkg" / "random.so")
    rows = cli("ls", folder, "--resources", "--sort", "size", "--top", "12",
               "--demangle").stdout.splitlines()
    head, rows = rows[0], rows[1:]
    column = head.index("LIBRARY: IMAGE")
    assert len(rows) == 12 and column <= 4 + 6 + 7 + 6 + 11 + 8 + 8 + NAME_WIDTH + 10
    assert all(row[column:].startswith("pkg/random.so: random.") for row in rows), rows
    assert any("..." in row for row in rows)
    doc = json.loads(cli("ls", folder, "--resources", "--sort", "size", "--top", "12",
                         "--demangle", "--json").stdout)
    validate(doc, "function_table")
    names = [f["demangled"] for f in doc["functions"]]
    filt = subprocess.run(["c++filt"], input="\n".join(f["name"] for f in doc["functions"]),
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert names == filt and max(map(len, names)) > NAME_WIDTH
    assert all(f["library"] == "pkg/random.so" for f in doc["functions"])
