"""``fatbinkit check`` on real ROCm wheels and clang-built libraries (issue 29): which code
object the HIP runtime loads on gfx90a, gfx942, gfx1100, gfx1101 and gfx1201, and the ROCm
release it needs, from expectations written from what the files hold (``../shared/ROCM.md``
§4: each wheel's targets, code object version and bundle format, read by LLVM's tools) and
AMD's rules (tests/test_hip_loading.py's table), not from fatbinkit's code.

ROCm floors used below (fatbinkit/vendors/hip/floors.py cites each): code object v4 ROCm 4.1,
v5 5.2, v6 6.2; compressed bundles 6.2, CCOB v3 6.4; generic targets 6.4; device support:
gfx942 5.7, gfx1200/gfx1201 6.2.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import fatbinkit
from tests.hipbuild import build, remarks
from tests.thirdparty import CUPY_ROCM5_RANDOM, CUPY_ROCM7_RANDOM, JAX_ROCM7_SOLVER, fetch

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
GPUS = ("gfx90a", "gfx942", "gfx1100", "gfx1101", "gfx1201")


def _check(path: Path, *args: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "check", str(path), *args,
                           "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    return doc


def _status(doc: dict[str, object]) -> dict[str, str]:
    """Verdict per GPU, keyed by its processor (the JSON names the device with the features
    it runs: gfx942:sramecc+:xnack-)."""
    verdicts = doc["verdicts"]
    assert isinstance(verdicts, dict)
    return {k.split(":")[0]: v["status"] for k, v in verdicts.items()}


# wheel -> (expected status per GPU without a ROCm release, the ROCm each loading GPU needs)
EXPECTED = {
    # ROCm 7.0 build: gfx908, gfx90a, gfx942, gfx950, gfx1030, gfx1100, gfx1101, gfx1200,
    # gfx1201; code object v6; one plain bundle
    "cupy7": ({"gfx90a": "works", "gfx942": "works", "gfx1100": "works", "gfx1101": "works",
               "gfx1201": "works"}, "6.2"),
    # ROCm 5.0 build: gfx801..803, gfx900, gfx906, gfx908, gfx1010..1012; code object v4
    "cupy5": ({g: "fails" for g in GPUS}, None),
    # ROCm 7 build, 27 targets incl. all five; two CCOB v3 bundles
    "jax": ({g: "works" for g in GPUS}, "6.4"),
}


def _wheel(name: str) -> Path:
    return fetch({"cupy7": CUPY_ROCM7_RANDOM, "cupy5": CUPY_ROCM5_RANDOM,
                  "jax": JAX_ROCM7_SOLVER}[name])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_wheels_load_where_their_targets_say(name: str) -> None:
    status, needs = EXPECTED[name]
    doc = _check(_wheel(name), *(a for g in GPUS for a in ("--arch", g)))
    assert _status(doc) == status
    for key, v in doc["verdicts"].items():  # type: ignore[union-attr]
        if v["status"] == "works":
            assert v["min_driver"] == needs, key


def test_a_rocm_below_the_floor_fails_with_the_runtimes_error() -> None:
    """jax's bundles are CCOB v3 (ROCm 6.4): on ROCm 6.3 CLR refuses them
    (hipErrorNotSupported); cupy7's code objects are v6 (ROCm 6.2): ROCm 6.1 cannot load them;
    on 7.0 both load."""
    jax = _check(_wheel("jax"), "--arch", "gfx942", "--rocm", "6.3")
    assert _status(jax) == {"gfx942": "fails"}
    (verdict,) = jax["verdicts"].values()  # type: ignore[union-attr]
    assert {f["error"] for f in verdict["failed"]} == {"hipErrorNotSupported"}
    assert {f["floor"] for f in verdict["failed"]} == {"compression"}
    assert _status(_check(_wheel("cupy7"), "--arch", "gfx1201", "--rocm", "6.1")) == {
        "gfx1201": "fails"}
    assert _status(_check(_wheel("jax"), "--arch", "gfx942", "--rocm", "7.0")) == {
        "gfx942": "works"}


def test_min_rocm_is_the_highest_floor() -> None:
    doc = _check(_wheel("cupy5"), "--min-rocm", "--arch", "gfx906", "--arch", "gfx908")
    lows = {k.split(":")[0]: v["min_driver"] for k, v in doc["min_driver"].items()}  # type: ignore
    assert lows == {"gfx906": "4.1", "gfx908": "4.1"}  # code object v4


def test_generic_code_objects_load_on_their_family_from_rocm_6_4() -> None:
    """clang 19's generic19 fixture: gfx11-generic, gfx9-generic:xnack-,
    gfx942:sramecc+:xnack- (code object v6)."""
    lib = fatbinkit.open(build("generic19"))
    assert sorted(i.arch for i in lib.select()) == sorted(
        ["gfx11-generic", "gfx9-generic:xnack-", "gfx942:sramecc+:xnack-"])
    check = lib.check(["gfx1101", "gfx906", "gfx942", "gfx90a", "gfx1201"])
    status = {str(v.device).split(":")[0]: v.status for v in check.verdicts}
    assert status == {"gfx1101": "works", "gfx906": "works", "gfx942": "works",
                      "gfx90a": "fails", "gfx1201": "fails"}
    old = lib.check(["gfx1101", "gfx942"], "6.3")
    assert {str(v.device).split(":")[0]: v.status for v in old.verdicts} == {
        "gfx1101": "fails", "gfx942": "works"}


def test_resources_equal_clangs_remarks() -> None:
    """Every kernel of clang 22's obj22 fixture, per target: SGPRs, VGPRs, AGPRs, LDS,
    scratch and spills as clang's -Rpass-analysis=kernel-resource-usage reports them."""
    path = build("obj22")
    told = remarks("obj22")
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "ls", "--resources", "--json",
                           str(path)], capture_output=True, text=True, check=True)
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    seen = 0
    for entry in doc["entries"]:
        assert entry["vendor"] == "hip" and "ptx_version" not in entry
        per = told[("kernels", entry["arch"])]  # clang's targets: gfx942, gfx90a:xnack+...
        for f in entry["functions"]:
            r = per[f["name"]]
            # LLVM 22 says TotalSGPRs (what the metadata's .sgpr_count counts: VCC and the
            # flat-scratch/XNACK registers included); AGPRs only where the target has them
            assert (f["sgpr_count"], f["vgpr_count"]) == (
                int(r["TotalSGPRs"]), int(r["VGPRs"])), f["name"]
            agprs = r.get("AGPRs")  # gfx1100 has none: no remark line, no metadata key
            assert f["agpr_count"] == (None if agprs is None else int(agprs)), f["name"]
            assert f["group_segment_fixed_size"] == int(r["LDS Size [bytes/block]"])
            assert f["private_segment_fixed_size"] == int(r["ScratchSize [bytes/lane]"])
            assert (f["sgpr_spill_count"], f["vgpr_spill_count"]) == (
                int(r["SGPRs Spill"]), int(r["VGPRs Spill"]))
            assert f["uses_dynamic_stack"] == (r["Dynamic Stack"] == "True")
            assert f["descriptor"] and f["disagreements"] == []
            seen += 1
    assert seen == sum(len(v) for v in told.values()) >= 15  # 5 kernels x 3 targets


@pytest.mark.parametrize("args", [
    ("ls", "--json"), ("ls", "--resources", "--json"), ("ls", "--summary", "--json"),
    ("check", "--arch", "gfx942", "--arch", "gfx1100", "--json"),
    ("check", "--arch", "gfx942", "--rocm", "6.1", "--json"),
    ("check", "--min-rocm", "--json"),
])
def test_amd_rows_speak_amd(args: tuple[str, ...]) -> None:
    """One JSON vocabulary (docs/json-schema.json), and nothing NVIDIA's in AMD rows: no PTX,
    SASS, CUDA driver numbers or CUresult names."""
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", args[0],
                           str(_wheel("cupy7")), *args[1:]],
                          capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)

    def keys(o: object) -> set[str]:
        if isinstance(o, dict):
            return set(o) | {k for v in o.values() for k in keys(v)}
        if isinstance(o, list):
            return {k for v in o for k in keys(v)}
        return set()

    found = keys(doc)
    nvidia = {k for k in found if "ptx" in k or "sass" in k
              or (k.endswith("_driver") and k not in ("min_driver", "max_driver"))}
    assert not nvidia, found
    assert "CUDA" not in proc.stdout and "sm_" not in proc.stdout
    assert "hip" in proc.stdout or "gfx" in proc.stdout


def test_diff_and_gate_of_two_rocm_builds(tmp_path: Path) -> None:
    """cupy's random module from its ROCm 5.0 build (gfx801..gfx1012, code object v4) to its
    ROCm 7.0 build (gfx908..gfx1201, v6): the targets both builds have (gfx908 only, by
    ROCM.md §4) keep their kernels, the others are added or removed; the gate's baseline
    (a snapshot in JSON) of the old build flags the lost targets."""
    old, new = _wheel("cupy5"), _wheel("cupy7")
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "diff", str(old), str(new),
                           "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, SCHEMA)
    only_old = {"gfx801", "gfx802", "gfx803", "gfx900", "gfx906", "gfx1010", "gfx1011",
                "gfx1012"}
    only_new = {"gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101", "gfx1200",
                "gfx1201"}
    # on gfx908, both builds': kernels CuPy dropped or added between 13.3 and 14.2 too
    assert {k["arch"] for k in doc["removed"]} - {"gfx908"} == only_old
    assert {k["arch"] for k in doc["added"]} - {"gfx908"} == only_new
    assert {c["arch"] for c in doc["changed"]} <= {"gfx908"}
    on908 = {k["kernel"] for k in doc["removed"] + doc["added"] if k["arch"] == "gfx908"}
    assert not on908 & {c["kernel"] for c in doc["changed"]}
    base = tmp_path / "base.json"
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "gate", str(old),
                           "--write-baseline", str(base)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    baseline = json.loads(base.read_text())
    jsonschema.validate(baseline, SCHEMA)
    modules = [m for lib in baseline["libraries"] for m in lib["modules"]]
    assert modules and all(set(m) == {"index", "kernels", "native", "jit"} for m in modules)
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "gate", str(new), "--baseline",
                           str(base), "--format", "json"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 1, proc.stderr
    gate = json.loads(proc.stdout)
    jsonschema.validate(gate, SCHEMA)
    lost = {v["arch"] for v in gate["violations"] if v["rule"] == "baseline:lost-arch"}
    assert lost == only_old
    # ROCm 7's gfx908 scratch rose on kernels both builds have: the ratchet sees it
    assert any(v["rule"] == "baseline:stack" and v["arch"] == "gfx908"
               for v in gate["violations"])


def test_tritons_own_code_object_through_the_front_door(tmp_path: Path) -> None:
    """triton.compile for GPUTarget("hip", "gfx942", 64) on this GPU-less machine: the bare
    hsaco (its amdhsa.target spelled amdgpu9.42-amd-amdhsa-unknown-gfx942) lists as gfx942,
    with Triton's kernel name, and loads on gfx942 only; embedded as AOTInductor embeds it
    (between __k_start/__k_end), the same."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import fatbinkit.demo.kernels as tk

    k = triton.compile(ASTSource(fn=tk.add_kernel, signature=tk.ADD_SIGNATURE,
                                 constexprs=tk.ADD_CONSTEXPRS),
                       target=GPUTarget("hip", "gfx942", 64))
    path = tmp_path / "add.hsaco"
    path.write_bytes(k.asm["hsaco"])
    lib = fatbinkit.open(path)
    (item,) = lib.select()
    assert (item.kind, item.arch, item.code.vendor) == ("hsaco", "gfx942", "hip")
    assert lib.summary(kernels=True).archs[0].kernels == 1
    assert [i.arch for i in lib.select(kernel=k.metadata.name)] == ["gfx942"]
    status = {str(v.device).split(":")[0]: v.status
              for v in lib.check(["gfx942", "gfx950", "gfx90a"]).verdicts}
    assert status == {"gfx942": "works", "gfx950": "fails", "gfx90a": "fails"}
    from fatbinkit.formats.elf_writer import Blob, write_object

    obj = tmp_path / "k.o"
    write_object(obj, [Blob("k", k.asm["hsaco"])])
    assert [(i.arch, i.code.source) for i in fatbinkit.open(obj).select()] == [
        ("gfx942", "__k_start")]


def test_arch_and_kernel_filters() -> None:
    """``--arch gfx90a`` takes every gfx90a image whatever its features, ``gfx90a:xnack+``
    only that target ID; ``--kernel`` globs the names (bundle19: gfx942, gfx90a:xnack+,
    gfx1100, 5 kernels each)."""
    lib = fatbinkit.open(build("bundle19"))
    assert [i.arch for i in lib.select("gfx90a")] == ["gfx90a:xnack+"]
    assert [i.arch for i in lib.select("gfx90a:xnack+")] == ["gfx90a:xnack+"]
    assert [i.arch for i in lib.select("gfx90a:xnack-")] == []
    assert sorted(i.arch for i in lib.select(["gfx942", "sm_90"])) == ["gfx942"]
    assert sorted(i.arch for i in lib.select(kernel="lds_*")) == sorted(
        ["gfx942", "gfx90a:xnack+", "gfx1100"])
    assert lib.select(kernel="no_such_kernel") == ()


def test_a_folder_of_cuda_and_rocm_libraries(tmp_path: Path) -> None:
    """CuPy's random module built for CUDA 13 and for ROCm 7 in one folder: each GPU is
    judged on its own vendor's library (neither fails for lack of the other's code), and the
    summary and listing speak each vendor's words."""
    from tests.thirdparty import CUPY13_RANDOM

    (tmp_path / "cuda").mkdir()
    (tmp_path / "rocm").mkdir()
    (tmp_path / "cuda" / "random.so").write_bytes(fetch(CUPY13_RANDOM).read_bytes())
    (tmp_path / "rocm" / "random.so").write_bytes(_wheel("cupy7").read_bytes())
    doc = _check(tmp_path, "--arch", "sm_90", "--arch", "gfx942")
    assert _status(doc) == {"sm_90": "works", "gfx942": "works"}
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "ls", "--summary", "--json",
                           str(tmp_path)], capture_output=True, text=True, check=True)
    summary = json.loads(proc.stdout)
    jsonschema.validate(summary, SCHEMA)
    kinds = {a["kind"] for a in summary["total"]["archs"]}
    assert {"sass", "hsaco"} <= kinds
    devices = {d["device"]: d for d in summary["total"]["devices"]}
    assert devices["sm_90"]["sass"] >= 1 and devices["gfx942"]["native"] == 1
    text = subprocess.run([sys.executable, "-m", "fatbinkit", "check", str(tmp_path),
                           "--arch", "sm_90", "--arch", "gfx942"], capture_output=True,
                          text=True, check=True).stdout
    assert re.search(r"^  sm_90 +works +\d+ SASS, ", text, re.M), text
    assert re.search(r"^  gfx942:sramecc\+:xnack- +works +1 native, 0 SPIR-V JIT", text,
                     re.M), text


def test_a_rocm_newer_than_the_tables_is_said() -> None:
    lib = fatbinkit.open(_wheel("jax"))
    (v,) = lib.check(["gfx942"], "9.1").verdicts
    assert v.status == "works"
    assert v.warnings == ("ROCm 9.1 is newer than the tables (up to ROCm 7.2): assumed to load "
                          "what they load",)
    assert lib.check(["gfx942"], "7.2").verdicts[0].warnings == ()
