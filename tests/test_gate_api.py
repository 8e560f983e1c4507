"""``fatbinkit.gate`` and ``fatbinkit.diff.snapshot`` from Python: validated :class:`Rules`,
``require_archs`` agreeing with :meth:`fatbinkit.binary.Binary.check` (the oracle: an arch fails
the rule exactly where the check's verdict for it is not ``works``), ``require_sass``, short
reprs, and the conventions (``progress``, ``jobs``, ``max_decompressed``, errors that name the
keyword).

Libraries built by nvcc here: ``libdata.so`` holds a module of variables only (no kernel) built
for sm_80 beside a kernel module for sm_80 and sm_90 (as cuRAND ships its tables), ``libtables.so``
the variables' module alone, ``ptx.fatbin`` PTX for compute_80 only and ``sm100.fatbin`` SASS
for sm_100 only.
"""

from __future__ import annotations

import dataclasses
import pickle
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cudabuild import NVCC, run
from thirdparty import CUFFT11, fetch

import fatbinkit
from fatbinkit.binary import ArchFilter
from fatbinkit.diff import (
    ArchImages,
    Diff,
    FieldChange,
    KernelImage,
    Library,
    ModuleArchs,
    Snapshot,
    snapshot,
)
from fatbinkit.driver import DriverLike
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.arch import Arch
from fatbinkit.gate import RULES, Gate, Rules, SizeLimit, Tolerance, Violation, gate
from fatbinkit.progress import Step

TABLES = """
__device__ float table[256] = {1.0f};
"""
KERNELS = """
__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }
__global__ void shift(float *x, float a) { x[threadIdx.x] += a; }
"""
ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_120"]
GPUS = tuple(Arch.parse(a) for a in ARCHS)


def _object(root: Path, name: str, source: str, *gencode: str) -> Path:
    (root / f"{name}.cu").write_text(source)
    out = root / f"{name}.o"
    run([NVCC, "-c", "-Xcompiler", "-fPIC", *gencode, root / f"{name}.cu", "-o", out])
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gate_api")
    tables = _object(root, "tables", TABLES, "-gencode", "arch=compute_80,code=sm_80")
    kernels = _object(root, "kernels", KERNELS, "-gencode", "arch=compute_80,code=sm_80",
                      "-gencode", "arch=compute_90,code=sm_90")
    run([NVCC, "-shared", tables, kernels, "-o", root / "libdata.so"])
    run([NVCC, "-shared", tables, "-o", root / "libtables.so"])
    run([NVCC, "-shared", kernels, "-o", root / "libkernels.so"])
    (root / "k.cu").write_text(KERNELS)
    run([NVCC, "-fatbin", "-gencode", "arch=compute_80,code=compute_80", root / "k.cu", "-o",
         root / "ptx.fatbin"])
    run([NVCC, "-fatbin", "-gencode", "arch=compute_100,code=sm_100", root / "k.cu", "-o",
         root / "sm100.fatbin"])
    return root


def failing(g: Gate, rule: str) -> set[str]:
    return {v.arch for v in g.violations if v.rule == rule and v.arch is not None}


def not_working(path: Path, archs: list[str], driver: DriverLike | None = None) -> set[str]:
    """The oracle: the archs whose verdict (``fatbinkit check``) is not ``works``."""
    c = fatbinkit.open(path).check(archs, driver, every_image=True)
    return {v.device.sm for v in c.verdicts if v.status != "works"}


@pytest.mark.parametrize("name", ["libdata.so", "libtables.so", "libkernels.so", "ptx.fatbin"])
@pytest.mark.parametrize("driver", [None, (12, 0)])
def test_require_archs_fails_where_check_does(built: Path, name: str,
                                              driver: tuple[int, int] | None) -> None:
    path = built / name
    g = gate([path], Rules(require_archs=GPUS, driver=driver))
    assert failing(g, "require-arch") == not_working(path, ARCHS, driver)


def test_a_module_of_variables_only_is_judged(built: Path) -> None:
    """The variables' module has no image for sm_90: ``check`` says partial there (not
    ``works``), and the gate names the module (it has no kernel to name)."""
    assert not_working(built / "libdata.so", ["sm_90"]) == {"sm_90"}
    g = gate([built / "libdata.so"], Rules(require_archs=(Arch(90),)))
    assert not g.ok and [(v.rule, v.kernel, v.arch) for v in g.violations] == [
        ("require-arch", None, "sm_90")]
    assert "a module with no kernels (variables only), does not load on sm_90" in \
        g.violations[0].message
    # a library of such a module alone is judged too (it was passed over: no kernels)
    only = gate([built / "libtables.so"], Rules(require_archs=(Arch(80), Arch(90))))
    assert failing(only, "require-arch") == {"sm_90"}
    assert gate([built / "libkernels.so"], Rules(require_archs=(Arch(80), Arch(90)))).ok


def test_images_no_driver_of_the_gpu_loads(built: Path) -> None:
    """sm_100 SASS runs on sm_101 by the arch rules, but the CUDA 13 cubins need a 13.0 driver
    and sm_101 GPUs are driven up to CUDA 12.9 (CUDA 13 calls them sm_110): the verdict's
    driver_gap, a violation of both rules (once per library and arch)."""
    path = built / "sm100.fatbin"
    (verdict,) = fatbinkit.open(path).check("sm_101").verdicts
    assert verdict.driver_gap is not None
    g = gate(path, Rules(require_archs=["sm_100", "sm_101", "sm_103"], require_sass="sm_101"))
    assert [(v.rule, v.kernel, v.arch, v.value, v.limit) for v in g.violations] == [
        ("require-arch", None, "sm_101", "13.0", "12.9"),
        ("require-sass-arch", None, "sm_101", "13.0", "12.9")]
    assert g.violations[0].message == verdict.driver_gap


def test_require_sass_refuses_ptx_jit(built: Path) -> None:
    """PTX for compute_80 only: sm_90 loads it by JIT (require_archs passes), but no SASS runs
    there (require_sass fails, naming each kernel); SASS for sm_80 runs on sm_86 natively."""
    ptx = built / "ptx.fatbin"
    assert gate(ptx, Rules(require_archs=["sm_80", "sm_90"])).ok
    g = gate(ptx, Rules(require_sass="sm_90"))
    assert {(v.rule, v.kernel, v.arch, v.value) for v in g.violations} == {
        ("require-sass-arch", "_Z5scalePff", "sm_90", "ptx-jit"),
        ("require-sass-arch", "_Z5shiftPff", "sm_90", "ptx-jit")}
    assert "loads on sm_90 by PTX JIT only" in g.violations[0].message
    assert failing(gate(ptx, Rules(require_sass="sm_75")), "require-sass-arch") == {"sm_75"}
    kernels = built / "libkernels.so"
    assert gate(kernels, Rules(require_sass=["sm_80", "sm_86", "sm_90"])).ok
    assert failing(gate(kernels, Rules(require_sass=["sm_75", "sm_120"])),
                   "require-sass-arch") == {"sm_75", "sm_120"}


def test_cufft_gate_agrees_with_check() -> None:
    """A real library (cuFFT for CUDA 11: modules whose bf16 kernels only sm_80+ images hold):
    the gate fails an arch exactly where ``check`` does not say ``works``."""
    path = fetch(CUFFT11)
    for driver in (None, "11.0"):
        archs = ["sm_75", "sm_80", "sm_90"]
        g = gate(path, Rules(require_archs=archs, driver=driver))
        assert failing(g, "require-arch") == not_working(path, archs, driver)
    assert failing(gate(path, Rules(require_archs=["sm_75", "sm_90"])), "require-arch") == \
        {"sm_75"}


def test_rules_are_validated_and_normalised() -> None:
    r = Rules(max_registers=128, require_archs="sm_90a", driver="12.8", max_min_driver=12080,
              max_size=[200, SizeLimit(64, "sm_90")], tolerance="registers=8",
              require_sass=(80, Arch(86)))
    assert r.require_archs == (Arch(90),) and r.require_sass == (Arch(80), Arch(86))
    assert r.driver == (12, 8) and r.max_min_driver == (12, 8)
    assert r.max_size == (SizeLimit(200), SizeLimit(64, ArchFilter.parse("sm_90")))
    assert r.tolerance == (Tolerance("registers", 8),)
    assert str(r) == ("--max-registers 128 --require-arch sm_90 --require-sass-arch sm_80 "
                      "--require-sass-arch sm_86 --driver 12.8 --max-min-driver 12.8 "
                      "--max-size 200 --max-size sm_90=64 --tolerance registers=8")
    assert repr(r) == ("Rules(max_registers=128, require_archs=('sm_90',), require_sass=("
                       "'sm_80', 'sm_86'), driver='12.8', max_min_driver='12.8', max_size=("
                       "SizeLimit(200), SizeLimit(64, 'sm_90')), tolerance=('registers=8',))")
    assert eval(repr(r)) == r  # the keywords make the rules again
    assert pickle.loads(pickle.dumps(r)) == r
    assert dataclasses.replace(r, no_spills=True) == Rules(**{**vars(r), "no_spills": True})
    assert repr(Rules()) == "Rules()" and str(Rules()) == "no rules"
    assert str(Rules(driver="580.65.06", require_archs=90)) == \
        "--require-arch sm_90 --driver 580.65.06"


@pytest.mark.parametrize(("keywords", "named"), [
    ({"max_registers": "128"}, "max_registers"),
    ({"max_registers": 0}, "max_registers"),
    ({"max_registers": True}, "max_registers"),
    ({"no_spills": "yes"}, "no_spills"),
    ({"require_archs": "sm_91"}, "require_archs"),
    ({"require_archs": [9.0]}, "require_archs"),
    ({"require_sass": {"sm_90": 1}}, "require_sass"),
    ({"require_archs": 90, "driver": 1.2}, "driver"),
    ({"require_archs": 90, "driver": "twelve"}, "driver"),
    ({"max_min_driver": (12, 8, 0)}, "max_min_driver"),
    ({"max_size": "64M"}, "max_size"),
    ({"max_size": [-1]}, "max_size"),
    ({"tolerance": ["size=3"]}, "size"),
    ({"tolerance": [3]}, "tolerance"),
    ({"driver": "12.8"}, "require_archs=ARCH"),  # a driver judges nothing alone
])
def test_bad_rules_name_the_keyword(keywords: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        Rules(**keywords)


def test_nothing_to_check_is_refused(built: Path) -> None:
    path = built / "libkernels.so"
    with pytest.raises(InvalidArgumentError, match=r"no rule to check.*max_registers=N"):
        gate(path, Rules())
    with pytest.raises(InvalidArgumentError, match="tolerance=FIELD=N goes with baseline="):
        gate(path, Rules(no_spills=True, tolerance="registers=1"))
    with pytest.raises(InvalidArgumentError, match=r"rules is a fatbinkit\.gate\.Rules"):
        gate(path, {"no_spills": True})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"baseline is a fatbinkit\.diff\.Snapshot"):
        gate(path, Rules(no_spills=True), baseline={"format": "x"})  # type: ignore[arg-type]
    base = snapshot(path)
    assert gate([path], Rules(), baseline=base).ok  # the ratchet alone is a rule


def test_conventions_are_checked_at_the_call(built: Path) -> None:
    path = built / "libkernels.so"
    rules = Rules(no_spills=True)
    with pytest.raises(InvalidArgumentError, match="jobs"):
        gate(path, rules, jobs=0)
    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        gate(path, rules, max_decompressed="1G")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        snapshot(path, max_decompressed=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="progress"):
        snapshot(path, progress="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="like is a Snapshot"):
        snapshot(path, like=path)  # type: ignore[arg-type]
    assert snapshot(path, jobs=1, max_decompressed=1 << 30) == snapshot(path)


def test_progress_reports_a_step_per_file(built: Path, tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(built / "libkernels.so", "pkg/libkernels.so")
        z.write(built / "libtables.so", "pkg/libtables.so")
        z.writestr("pkg/README", "x" * 100)
    steps: list[Step] = []
    g = gate(wheel, Rules(no_spills=True), progress=steps.append, jobs=1)
    assert g.ok and len(g.snapshot.libraries) == 2
    assert steps == [Step(1, 2, "file", "pkg/libkernels.so"),
                     Step(2, 2, "file", "pkg/libtables.so")]
    steps.clear()
    snapshot(wheel, progress=steps.append)
    assert [s.done for s in steps] == [1, 2]
    assert gate(wheel, Rules(no_spills=True), progress=False).ok


def _kernel(n: int) -> KernelImage:
    return KernelImage("libbig.so", f"_Z6kernelILi{n}EEvPf", "sm_90", 0, n // 100, True,
                       registers=64, stack=0, spill_stores=0, spill_loads=0, shared=0, local=0,
                       size=1024)


def test_reprs_stay_short() -> None:
    """A snapshot of 20,000 kernel images, a gate of as many violations, a diff of as many
    changes: each repr a line of counts."""
    kernels = tuple(_kernel(n) for n in range(20_000))
    lib = Library("lib/" + "x" * 500 + "/libbig.so", kernels,
                  (ArchImages("sass", "sm_90", 200, 1 << 30, 1 << 31, ("zstd",),
                              ("CUDA 12.8",), "12.8"),),
                  tuple(ModuleArchs(i, (f"k{i}",), ("sm_90",), ()) for i in range(200)), ())
    snap = Snapshot("big.whl", (lib,))
    long = Snapshot(" ".join(f"dist/pkg{n}-1.0-py3-none-any.whl" for n in range(50)), (lib,))
    violations = tuple(Violation("max-registers", "big.whl", lib.name, k.kernel, k.arch, 64, 32,
                                 "64 registers > 32") for k in kernels)
    changes = Diff(long.source, long.source, ((lib.name, lib.name),), (), (), kernels, kernels,
                   tuple(FieldChange(lib.name, k.kernel, k.arch, 0, "registers", 32, 64)
                         for k in kernels), 0)
    g = Gate(long, violations, ("note: x",), changes)
    for obj in (lib, snap, long, changes, g):
        assert len(repr(obj)) < 400, repr(obj)[:1000]
    assert repr(snap) == "Snapshot(source='big.whl', libraries=1, kernels=20000)"
    assert repr(g).startswith("Gate(ok=False, violations=20000 (max-registers), notes=1, ")
    assert repr(g).endswith(", libraries=1, kernels=20000, changes=20000, regressions=20000)")
    assert "kernels=20000, archs=1, modules=200" in repr(lib)
    assert "changed=20000" in repr(changes)


def test_rule_names_are_a_closed_set() -> None:
    import json

    schema = json.loads((Path(__file__).resolve().parent.parent / "docs" /
                         "json-schema.json").read_text())
    rule = schema["$defs"]["gate"]["properties"]["violations"]["items"]["properties"]["rule"]
    assert tuple(rule["enum"]) == RULES
    assert "baseline:registers" in RULES and "baseline" not in RULES


def test_command_line_spells_flags(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same rules from the command line: ``--require-sass-arch``, and errors naming flags
    where the API names keywords."""
    from fatbinkit.cli import main

    ptx = str(built / "ptx.fatbin")
    assert main(["gate", ptx, "--require-arch", "sm_90"]) == 0
    assert main(["gate", ptx, "--require-sass-arch", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert out.count("[require-sass-arch]") == 2 and "by PTX JIT only" in out
    with pytest.raises(SystemExit) as usage:
        main(["gate", ptx, "--driver", "12.8", "--no-spills"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "--driver VERSION goes with --require-arch ARCH or --require-sass-arch ARCH" in err
    with pytest.raises(InvalidArgumentError, match="driver=VERSION goes with require_archs="):
        Rules(driver="12.8", no_spills=True)


def test_command_line_progress_line_takes_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's line on a terminal is a ``progress`` callable like any other."""
    import io

    from fatbinkit.cli.fatbin import progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr("sys.stderr", err)
    progress(Step(2, 7, "file", "torch/lib/\nlibx.so"))
    assert err.getvalue() == "\rread 2/7 files: torch/lib/?libx.so\x1b[K"


def test_ratchet_names_the_figure(built: Path, tmp_path: Path) -> None:
    """A library of the baseline gone, and a library that lost an arch: each violation names
    what the ratchet found, from the closed set."""
    for side, names in (("old", ("libkernels.so", "libtables.so")), ("new", ("libkernels.so",))):
        (tmp_path / side).mkdir()
        for name in names:
            (tmp_path / side / name).write_bytes((built / name).read_bytes())
    (tmp_path / "new" / "libtables.so").write_bytes((built / "ptx.fatbin").read_bytes())
    g = gate(tmp_path / "new", Rules(), baseline=snapshot(tmp_path / "old"))
    assert {v.rule for v in g.violations} == {"baseline:lost-coverage"}  # SASS gone: PTX now
    assert ("baseline:lost-coverage", "libtables.so", "sm_80") in {
        (v.rule, v.library, v.arch) for v in g.violations}
    (tmp_path / "new" / "libtables.so").unlink()
    g = gate(tmp_path / "new", Rules(), baseline=snapshot(tmp_path / "old"))
    assert [(v.rule, v.library) for v in g.violations] == [
        ("baseline:library-gone", "libtables.so")]
    assert {v.rule for v in g.violations} <= set(RULES)
