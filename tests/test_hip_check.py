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
    assert not {k for k in found if "ptx" in k or "sass" in k or k.endswith("_driver")
                and k != "min_driver" and k != "max_driver"}, found
    assert "CUDA" not in proc.stdout and "sm_" not in proc.stdout
    assert "hip" in proc.stdout or "gfx" in proc.stdout
