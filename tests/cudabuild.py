"""Test binaries for the inspection tests, built once per session, and cuobjdump as the oracle.

Cubins come from ``tests/data/inspect_kernels.cu`` built three ways: the system nvcc 13.0
(``/usr/local/cuda``, whole-program and relocatable ``-rdc``), ptxas 13.5 from the pip
``nvidia-cuda-nvcc`` wheel, and the CUDA 12 cubins (ELF ABI v1 and v2) inside the CuPy cuda12x
wheel, extracted with ``cuobjdump -xelf all``. A missing tool fails the test that needs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from fatbin_kernels import system_tool, wheel_tool
from thirdparty import CUPY12_RANDOM, fetch

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "data" / "inspect_kernels.cu"
NVCC = Path(system_tool("nvcc"))
CUOBJDUMP = wheel_tool("cuobjdump")
PTXAS_PIP = wheel_tool("ptxas")

# (file stem, nvcc arguments): sm_75 .. sm_120 with the `a` variants, plus relocatable code.
NVCC_BUILDS = [(f"nvcc_sm{a}", ["-cubin", f"-arch=sm_{a}"])
               for a in ("75", "80", "86", "89", "90", "90a", "100", "100a", "120", "120a")]
NVCC_BUILDS += [("nvcc_rdc_sm80", ["-cubin", "-rdc=true", "-arch=sm_80"]),
                ("nvcc_rdc_sm90", ["-cubin", "-rdc=true", "-arch=sm_90"]),
                ("nvcc_G_sm90", ["-cubin", "-G", "-arch=sm_90"])]
# (file stem, PTX virtual arch, ptxas arguments) for the pip ptxas 13.5.
PTXAS_BUILDS = [("ptxas135_sm75", "compute_75", ["-arch=sm_75"]),
                ("ptxas135_sm87", "compute_75", ["-arch=sm_87"]),
                ("ptxas135_sm90a", "compute_90a", ["-arch=sm_90a"]),
                ("ptxas135_sm103a", "compute_103a", ["-arch=sm_103a"]),
                ("ptxas135_sm110", "compute_75", ["-arch=sm_110"]),
                ("ptxas135_sm121", "compute_75", ["-arch=sm_121"]),
                ("ptxas135_rel_sm100", "compute_75", ["-c", "-arch=sm_100"])]


def need(tool: Path) -> Path:
    if not tool.is_file():
        pytest.fail(f"{tool} is missing (CUDA 13 toolkit / pip nvidia-cuda-nvcc, "
                    f"nvidia-cuda-cuobjdump)")
    return tool


def run(cmd: list[str | Path], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False,
                          **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr[-3000:]}")
    return proc  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Builds:
    """Where the session's test binaries are."""

    root: Path
    own: tuple[Path, ...]  # cubins built from SOURCE
    cupy12: tuple[Path, ...]  # cubins from the CuPy cuda12x wheel
    ptx: dict[str, Path]  # virtual arch -> PTX built from SOURCE by nvcc 13.0

    @property
    def cubins(self) -> tuple[Path, ...]:
        return self.own + self.cupy12


def build_all(root: Path) -> Builds:
    nvcc, ptxas = need(NVCC), need(PTXAS_PIP)
    need(CUOBJDUMP)
    root.mkdir(parents=True, exist_ok=True)
    virtuals = sorted({v for _, v, _ in PTXAS_BUILDS} | {"compute_80", "compute_100f"})
    jobs: list[list[str | Path]] = []
    for stem, args in NVCC_BUILDS:
        jobs.append([nvcc, *args, "-o", root / f"{stem}.cubin", SOURCE])
    for v in virtuals:
        jobs.append([nvcc, "-ptx", f"-arch={v}", "-o", root / f"{v}.ptx", SOURCE])
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(run, jobs))
        list(pool.map(run, [[ptxas, *args, "-o", root / f"{stem}.cubin", root / f"{v}.ptx"]
                            for stem, v, args in PTXAS_BUILDS]))
    own = tuple(root / f"{stem}.cubin" for stem, _ in NVCC_BUILDS) + tuple(
        root / f"{stem}.cubin" for stem, _, _ in PTXAS_BUILDS)
    cupy_dir = root / "cupy12"
    cupy_dir.mkdir()
    run([CUOBJDUMP, "-xelf", "all", fetch(CUPY12_RANDOM)], cwd=cupy_dir)
    cupy = tuple(sorted(cupy_dir.glob("*.cubin")))
    if not cupy:
        pytest.fail("cuobjdump -xelf extracted no cubin from the CuPy cuda12x wheel")
    return Builds(root, own, cupy, {v: root / f"{v}.ptx" for v in virtuals})


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builds]:
    root = tmp_path_factory.mktemp("inspect")
    yield build_all(root)
    shutil.rmtree(root, ignore_errors=True)


# -- cuobjdump output, parsed -----------------------------------------------------------------

@dataclass(frozen=True)
class ResUsage:
    """``cuobjdump -res-usage`` of one cubin: Common line and per-function lines, in order."""

    common: dict[str, int]
    functions: list[tuple[str, dict[str, int]]]


_FIELD_RE = re.compile(r"(\w+(?:\[\d+\])?):(\d+)")


def res_usage(path: Path) -> ResUsage:
    return _parse_res_usage(run([CUOBJDUMP, "-res-usage", path]).stdout)


def _parse_res_usage(out: str) -> ResUsage:
    common: dict[str, int] = {}
    functions: list[tuple[str, dict[str, int]]] = []
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Common:":
            common = {k: int(v) for k, v in _FIELD_RE.findall(lines[i + 1])}
        elif line.startswith(" Function ") and line.endswith(":"):
            fields = {k: int(v) for k, v in _FIELD_RE.findall(lines[i + 1])}
            functions.append((line[len(" Function "):-1], fields))
    return ResUsage(common, functions)


@dataclass(frozen=True)
class ElfDump:
    """``cuobjdump -elf`` of one cubin: the header line and the attribute lists per section."""

    header: str
    attributes: dict[str, list[tuple[str, str]]]  # section -> [(attribute name, value text)]


def elf_dump(path: Path) -> ElfDump:
    out = run([CUOBJDUMP, "-elf", path]).stdout
    header = next(line for line in out.splitlines() if "elf" in line.lower() and "sm=" in line)
    attributes: dict[str, list[tuple[str, str]]] = {}
    for block in re.split(r"\n(?=\.nv\.)", out):
        name = block.split("\n", 1)[0].strip()
        if not (name.startswith(".nv.info") or name == ".nv.compat"):
            continue
        items = re.findall(
            r"Attribute:\t(.*)\n\tFormat:\t.*(?:\n\tValue:\t(.*(?:\n\t\t.*)?))?", block)
        attributes[name] = items
    return ElfDump(header, attributes)


def res_usage_blocks(path: Path, tool: Path = CUOBJDUMP) -> list[tuple[str, ResUsage]]:
    """``cuobjdump -res-usage`` of a fatbin or host file: (arch, usage) per ELF, in file order."""
    out = run([tool, "-res-usage", path]).stdout
    blocks = []
    for part in out.split("Fatbin elf code:")[1:]:
        arch = re.search(r"arch = (\S+)", part)
        assert arch, part[:200]
        blocks.append((arch.group(1), _parse_res_usage(part)))
    return blocks
