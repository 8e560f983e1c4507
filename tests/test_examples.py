"""The example scripts of docs/examples: ``mypy --strict`` passes on them, and each runs on a
small input and prints what the API (or an oracle: cuobjdump) says. Also what lets mypy see the
package at all: the editable install ``make`` makes, and ``py.typed`` in a built wheel.

The inputs: a wheel made here of two real libraries from the fixture cache (CuPy's CUDA 13
``_generator_api``, JAX's LLD-linked ``_prng``), and a fatbin of a Triton kernel compiled here
(skipped where Triton is not installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from fatbin_kernels import cuobjdump_extract, cuobjdump_list
from thirdparty import CUPY13_RANDOM, JAX_CUDA12_PRNG, fetch

import fatbinkit
import fatbinkit.collection
import fatbinkit.gate
import fatbinkit.slim
from fatbinkit.compat import ArchVerdict

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
SCRIPTS = ("ci_gate.py", "prune_in_memory.py", "readme.py", "support_table.py",
           "triton_to_object.py")


def run(script: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_DEFAULT_FP_FUSION": "1"}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *map(str, args)],
                          capture_output=True, text=True, check=False, env=env, cwd=ROOT)


def test_every_example_passes_mypy_strict() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == list(SCRIPTS)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "docs/examples"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- mypy sees the installed package ---------------------------------------------------------------


def _make_install_options() -> list[str]:
    """The options of the Makefile's editable install (``pip install -e ...``)."""
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines()
                if "pip install" in ln and " -e " in ln)
    return [a for s in re.findall(r"--config-settings[= ](\S+)", line)
            for a in ("--config-settings", s)]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's sources as a project of its own (an editable install writes beside it)."""
    root = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "fatbinkit", root / "fatbinkit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _pip(*args: str | Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *map(str, args)], capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0 and re.search(r"No matching distribution|Could not find a version|"
                                          r"Network is unreachable", proc.stderr):
        pytest.skip(f"pip cannot fetch the build backend here: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_mypy_outside_the_repository_sees_the_editable_install_make_makes(
        project: Path, tmp_path: Path) -> None:
    """A venv with fatbinkit installed as ``make`` installs it; mypy run from a folder outside
    the repository on a script that uses it: the package and its types are found. setuptools'
    default editable install (an import hook) leaves mypy with "Cannot find implementation or
    library stub for module named fatbinkit"."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    _pip("--python", python, "install", "-q", "--no-deps", "-e", project,
         *_make_install_options())
    elsewhere = tmp_path / "user"
    elsewhere.mkdir()
    (elsewhere / "use.py").write_text(
        "import fatbinkit\n\n\ndef count(path: str) -> int:\n"
        "    return len(fatbinkit.open(path).items)\n\n\n"
        "reveal_type(fatbinkit.open)\nx: int = fatbinkit.open('f').summary()\n")
    alone = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    proc = subprocess.run(  # mypy asks the venv's python for its path: no PYTHONPATH to help
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--python-executable",
         str(python), "use.py"], capture_output=True, text=True, check=False, cwd=elsewhere,
        env=alone)
    out = proc.stdout
    assert "import-not-found" not in out and "py.typed" not in out, out
    assert "-> fatbinkit.binary.Binary" in out, out  # the real signature, not Any
    # and its types are checked: a Summary is not an int
    assert re.search(r'use\.py:9: error: Incompatible types in assignment \(expression has type '
                     r'"Summary"', out), out


@pytest.mark.slow
def test_a_built_wheel_ships_py_typed(project: Path, tmp_path: Path) -> None:
    _pip("wheel", "-q", "--no-deps", "-w", tmp_path, project)
    (wheel,) = tmp_path.glob("fatbinkit-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    assert "fatbinkit/py.typed" in names and "fatbinkit/demo/kernels.py" in names


# -- the scripts, run ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of two real libraries: CuPy 14.2 (CUDA 13) and JAX's cuda12 plugin 0.10.2."""
    path = tmp_path_factory.mktemp("wheel") / "examples-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for member in (CUPY13_RANDOM, JAX_CUDA12_PRNG):
            z.write(fetch(member), member.member)
        z.writestr("examples-1.0.dist-info/METADATA", "Name: examples\nVersion: 1.0\n")
    return path


def _cell(verdict: ArchVerdict) -> str:
    return {"fails": "-", "partial": "partial"}.get(
        verdict.status, "JIT" if verdict.jit else "SASS")


def _compatible(listing: list[str], arch: fatbinkit.Arch) -> tuple[bool, bool]:
    """From cuobjdump's listing: whether a cubin runs on ``arch`` (same major, minor at most
    arch's, no arch-specific suffix unless equal), and whether PTX for an arch at most it."""
    sass = ptx = False
    for line in listing:
        m = re.search(r"\.sm_(\d+)([af]?)\.(cubin|ptx)$", line)
        assert m, line
        number, suffix = int(m.group(1)), m.group(2)
        if m.group(3) == "cubin":
            sass |= (number // 10 == arch.number // 10 and number <= arch.number
                     and (not suffix or number == arch.number))
        else:
            ptx |= number <= arch.number and not suffix
    return sass, ptx


def test_support_table_of_a_wheel(wheel: Path, tmp_path: Path) -> None:
    proc = run("support_table.py", wheel)
    assert proc.returncode in (0, 1), proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()]
    total = fatbinkit.collection.check(wheel, ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89",
                                               "sm_90", "sm_100", "sm_120"])
    assert rows[0] == ["library", *(a.sm for a in total.archs)]
    assert [r[0] for r in rows[1:]] == [*(c.file for c in total.checks), "total"]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    for row, check in zip(rows[1:], total.checks, strict=False):
        assert row[1:] == [_cell(v) for v in check.verdicts], row  # the API's own verdicts
        listing = cuobjdump_list(tmp_path / check.file)  # the oracle
        for arch, cell in zip(total.archs, row[1:], strict=True):
            sass, ptx = _compatible(listing, arch)
            assert (cell != "SASS" or sass) and (cell != "JIT" or ptx), (check.file, arch)
            assert sass or ptx or cell == "-", (check.file, arch)
    # CuPy 14.2 for CUDA 13: SASS sm_75 to sm_120 and the sm_120 PTX, nothing for sm_70
    cupy = rows[1] if rows[1][0].startswith("cupy") else rows[2]
    assert cupy[1:] == ["-", "SASS", "SASS", "SASS", "SASS", "SASS", "SASS", "SASS"]
    assert rows[-1][1:] == [{"fails": "-", "partial": "partial"}.get(v.status, "works")
                            for v in total.verdicts]
    assert proc.returncode == (0 if all(v.status != "fails" for v in total.verdicts) else 1)


@pytest.mark.parametrize("max_registers", [255, 16])
def test_ci_gate_exits_1_and_prints_each_violation(wheel: Path, max_registers: int) -> None:
    proc = run("ci_gate.py", "--max-registers", str(max_registers), wheel)
    rules = fatbinkit.gate.Rules(max_registers=max_registers,
                                 require_archs=(fatbinkit.Arch(80), fatbinkit.Arch(90)))
    result = fatbinkit.gate.gate([wheel], rules)
    assert proc.returncode == (0 if not result.violations else 1), proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:len(result.violations)] == [str(v) for v in result.violations]
    assert lines[-1].startswith("FAILED" if result.violations else "passed")
    assert [ln for ln in proc.stderr.splitlines() if ln.startswith("gate: ")]  # progress
    if max_registers == 16:  # kernels of both libraries use more than 16 registers
        assert {v.library.split("/")[0] for v in result.violations} == {"cupy",
                                                                         "jax_cuda12_plugin"}
    assert run("ci_gate.py", wheel.with_name("missing.whl")).returncode == 3


def test_prune_in_memory(tmp_path: Path) -> None:
    source = tmp_path / "_prng.so"
    source.write_bytes(fetch(JAX_CUDA12_PRNG).read_bytes())
    before = source.read_bytes()
    proc = run("prune_in_memory.py", source, tmp_path / "out.so", "sm_90")
    assert proc.returncode == 0, proc.stderr
    out = (tmp_path / "out.so").read_bytes()
    assert source.read_bytes() == before and len(out) < len(before)
    assert out == fatbinkit.slim.prune(before, archs=["sm_90"]).data
    kept = cuobjdump_list(tmp_path / "out.so")
    assert kept and all(line.endswith(".sm_90.cubin") for line in kept if "ELF" in line)


@pytest.fixture(scope="module")
def triton_fatbin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fatbin of a Triton kernel named like a GEMM: SASS for sm_80 and sm_90a (what the README
    extracts), the PTX floor."""
    pytest.importorskip("triton")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import fatbinkit.demo.kernels as tk
    from fatbinkit.triton import TritonImage, TritonKernel, compile_kernel

    kernel = compile_kernel(tk.add_kernel, tk.ADD_SIGNATURE, ["sm_80", "sm_90"],
                            constexprs=tk.ADD_CONSTEXPRS)
    renamed = TritonKernel("tiny_gemm_kernel", tuple(
        TritonImage(**{**vars(i), "name": "tiny_gemm_kernel"}) for i in kernel.images),
        kernel.floor)
    path = tmp_path_factory.mktemp("triton") / "kernels.fatbin"
    path.write_bytes(renamed.fatbin())
    yield path


def test_the_readme_example(triton_fatbin: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run("readme.py", triton_fatbin, out)
    assert proc.returncode == 0, proc.stderr
    lib = fatbinkit.open(triton_fatbin)
    expected = [str(lib.summary()),
                *(f"{i.name} {i.arch} {i.stored} {i.uncompressed}"
                  for i in lib.select(arch="sm_90", kernel="*gemm*")),
                str(lib.check(["sm_80", "sm_90", "sm_120"], driver=(12, 8)))]
    assert proc.stdout == "\n".join(expected) + "\n"  # select lists none: Triton builds sm_90a
    theirs = cuobjdump_extract(triton_fatbin, tmp_path / "cuobjdump")
    assert sorted(p.read_bytes() for p in out.iterdir()) == sorted(
        data for name, data in theirs.items() if ".sm_90a." in name)


def test_triton_to_object(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    obj = tmp_path / "add.o"
    proc = run("triton_to_object.py", obj, "sm_80", "sm_90")
    assert proc.returncode == 0, proc.stderr
    assert "add_kernel: SASS sm_80, sm_90a; PTX floor compute_80" in proc.stdout
    assert re.findall(r"compiled (\d)/2 archs", proc.stderr) == ["1", "2"]  # progress
    with obj.open("rb") as f:  # the fatbin between its symbols, as a linker sees them
        elf = ELFFile(f)
        symbols = {s.name: s for s in elf.get_section_by_name(".symtab").iter_symbols()}
        start, end = symbols["__add_kernel_start"], symbols["__add_kernel_end"]
        data = elf.get_section(start["st_shndx"]).data()
        blob = data[start["st_value"]:end["st_value"]]
    (tmp_path / "add.fatbin").write_bytes(blob)
    assert cuobjdump_list(tmp_path / "add.fatbin") == [  # the oracle
        "ELF file    1: add_kernel.sm_80.cubin", "ELF file    2: add_kernel.sm_90a.cubin",
        "PTX file    1: add_kernel.sm_80.ptx"]
    header = obj.with_suffix(".h").read_text()
    assert "extern const unsigned char __add_kernel_start[], __add_kernel_end[];" in header
