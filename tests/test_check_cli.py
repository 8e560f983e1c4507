"""``fatbinkit check`` and ``fatbinkit ls --resources`` on real files, against cuobjdump.

Image lists and per-function resources come from cuobjdump; which image loads comes from the
rules tested in test_compat.py (and against the driver in tests/gpu/test_check_gpu.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cudabuild import CUOBJDUMP, NVCC, SOURCE, Builds, builds, res_usage_blocks, run  # noqa: F401
from thirdparty import CUPY12_RANDOM, CUPY13_RANDOM, fetch


def fatbinkit(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def mix(builds: Builds) -> Path:  # noqa: F811
    """A fatbin with SASS sm_80 and sm_90a and PTX compute_90, as nvcc builds it."""
    out = builds.root / "mix.fatbin"
    if not out.exists():
        run([NVCC, "-fatbin", "-gencode", "arch=compute_80,code=sm_80",
             "-gencode", "arch=compute_90a,code=sm_90a",
             "-gencode", "arch=compute_90,code=compute_90",
             "-o", out, SOURCE])
    return out


def check_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = fatbinkit("check", *args, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _listing(path: Path) -> list[str]:
    """cuobjdump's image names (``mix.1.sm_80.cubin``, ``mix.1.sm_90.ptx``) -> arch names."""
    names = []
    for flag in ("-lelf", "-lptx"):
        out = run([CUOBJDUMP, flag, path]).stdout
        names += re.findall(r"\.(sm_\w+)\.(?:cubin|ptx)$", out, re.M)
    return names


def test_check_mixed_fatbin(mix: Path) -> None:
    rc, doc = check_json(mix, "--arch", "sm_80", "--arch", "sm_86", "--arch", "sm_90",
                         "--arch", "sm_100", "--driver", "13.0")
    assert rc == 0 and doc["ok"]
    (module,) = doc["modules"]
    # the images are the ones cuobjdump lists (PTX by its sm_ name there)
    assert sorted(i["arch"].replace("compute_", "sm_") for i in module["images"]) == sorted(
        _listing(mix))
    assert {k["name"] for k in module["kernels"]} >= {"k_simple", "k_params", "k_noparams"}
    for k in module["kernels"]:
        got = {arch: (d["how"], d["image"]) for arch, d in k["archs"].items()}
        assert got == {"sm_80": ("sass", "sm_80"), "sm_86": ("sass", "sm_80"),
                       "sm_90": ("sass", "sm_90a"),
                       "sm_100": ("ptx-jit", "compute_90 (PTX 9.0)")}


def test_check_exit_1_when_an_arch_cannot_load(mix: Path) -> None:
    rc, doc = check_json(mix, "--arch", "sm_90", "--arch", "sm_75")
    assert rc == 1 and not doc["ok"]
    d = doc["modules"][0]["kernels"][0]["archs"]["sm_75"]
    assert d["how"] == "none" and d["error"] == "CUDA_ERROR_NO_BINARY_FOR_GPU"
    text = fatbinkit("check", mix, "--arch", "sm_75", "--arch", "sm_100")
    assert text.returncode == 1
    assert "none: NO_BINARY_FOR_GPU" in text.stdout and "PTX-JIT compute_90" in text.stdout
    assert "cold start" in text.stdout


def test_check_ptx_too_new_for_the_driver(builds: Builds, tmp_path: Path) -> None:  # noqa: F811
    text = builds.ptx["compute_80"].read_text()
    new = tmp_path / "new.ptx"
    new.write_text(re.sub(r"^\.version \d+\.\d+", ".version 9.9", text, flags=re.M))
    rc, doc = check_json(new, "--arch", "sm_90", "--driver", "13.0")
    assert rc == 1
    d = doc["modules"][0]["kernels"][0]["archs"]["sm_90"]
    assert d["error"] == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    assert check_json(new, "--arch", "sm_90")[0] == 0  # no driver limit given
    assert check_json(builds.ptx["compute_80"], "--arch", "sm_90", "--driver", "13.0")[0] == 0


def test_check_bare_cubin_and_arch_specific_ptx(builds: Builds) -> None:  # noqa: F811
    rc, doc = check_json(builds.root / "nvcc_sm90a.cubin", "--arch", "sm_90", "--arch", "sm_100")
    assert rc == 1 and doc["modules"][0]["raw"]
    k = doc["modules"][0]["kernels"][0]["archs"]
    assert k["sm_90"]["how"] == "sass" and k["sm_100"]["error"] == "CUDA_ERROR_NO_BINARY_FOR_GPU"
    rc, doc = check_json(builds.ptx["compute_90a"], "--arch", "sm_100")
    assert doc["modules"][0]["kernels"][0]["archs"]["sm_100"]["error"] == "CUDA_ERROR_INVALID_PTX"


def test_check_shared_library(builds: Builds) -> None:  # noqa: F811
    so = fetch(CUPY12_RANDOM)
    rc, doc = check_json(so, "--arch", "sm_90", "--arch", "sm_121", "--driver", "12.9")
    assert rc == 0
    assert {k["archs"]["sm_121"]["image"] for m in doc["modules"] for k in m["kernels"]} == {
        "sm_120f"}
    # sm_121 (DGX Spark) arrived with CUDA 12.9: a 12.8 driver does not drive it
    rc, doc = check_json(so, "--arch", "sm_90", "--arch", "sm_121", "--driver", "12.8")
    assert rc == 1 and doc["verdicts"]["sm_90"]["status"] == "works"
    assert doc["verdicts"]["sm_121"]["failed"][0]["floor"] == "device"
    images = [i["arch"].replace("compute_", "sm_") for m in doc["modules"] for i in m["images"]]
    # cuobjdump names f images without the suffix: compare the numbers
    assert sorted(a.rstrip("f") for a in images) == sorted(a.rstrip("f") for a in _listing(so))
    assert all(k["archs"]["sm_90"]["image"] == "sm_90" for m in doc["modules"]
               for k in m["kernels"])


@pytest.mark.parametrize("args, message", [
    (["--arch", "sm_90", "--driver", "580.65.06.1"], "neither a CUDA version"),
    (["--arch", "sm_90", "--driver", "999.10"], "outside the known table"),
    (["--min-driver", "--driver", "13.0"], "takes no --driver"),
    (["--arch", "sm_9x"], "not a GPU arch"),
    ([], "--arch"),
])
def test_check_usage_errors(mix: Path, args: list[str], message: str) -> None:
    proc = fatbinkit("check", mix, *args)
    assert proc.returncode == 2 and message in proc.stderr


def test_check_bad_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not device code at all")
    proc = fatbinkit("check", junk, "--arch", "sm_90")
    assert proc.returncode == 3
    assert proc.stderr.startswith("fatbinkit: error:") and proc.stderr.count("\n") == 1
    proc = fatbinkit("check", tmp_path / "missing", "--arch", "sm_90")
    assert proc.returncode == 3 and proc.stderr.startswith("fatbinkit: error:")


# -- ls --resources -----------------------------------------------------------------------------

def _resource_fields(f: dict[str, Any]) -> dict[str, int]:
    fields = {"REG": f["registers"], "STACK": f["stack"], "SHARED": f["shared"],
              "LOCAL": f["local"]}
    fields.update({f"CONSTANT[{b}]": n for b, n in f["constant"].items()})
    fields.update({"TEXTURE": f["texture"], "SURFACE": f["surface"], "SAMPLER": f["sampler"]})
    return fields


@pytest.mark.parametrize("which", ["mix", "cupy12", "cupy13"])
def test_ls_resources_json_equals_cuobjdump(which: str, mix: Path) -> None:
    path = {"mix": mix, "cupy12": None, "cupy13": None}[which] or fetch(
        CUPY12_RANDOM if which == "cupy12" else CUPY13_RANDOM)
    proc = fatbinkit("ls", path, "--resources", "--json")
    assert proc.returncode == 0, proc.stderr
    elves = [e for e in json.loads(proc.stdout)["entries"] if e["kind"] == "sass"]
    oracle = res_usage_blocks(path)
    assert len(elves) == len(oracle) > 0
    for entry, (arch, usage) in zip(elves, oracle, strict=True):
        assert entry["arch"].rstrip("f") == arch.rstrip("f")
        ours = [(f["name"], _resource_fields(f)) for f in entry["functions"]]
        assert ours == usage.functions, f"{path.name} {arch}"
        for f in entry["functions"]:
            assert list(f) == ["name", "entry", "registers", "stack", "shared", "local",
                               "constant", "texture", "surface", "sampler", "params", "size",
                               "spill_stores", "spill_loads"]


def test_ls_resources_text_uses_cuobjdump_figures(mix: Path) -> None:
    """The human listing prints each cubin's ``Common:`` line and each function's line with
    cuobjdump -res-usage's very fields."""
    proc = fatbinkit("ls", mix, "--resources")
    assert proc.returncode == 0, proc.stderr
    ours = [line.split(": ", 1) for line in proc.stdout.splitlines() if line.startswith("    ")]
    expected = []
    for _, usage in res_usage_blocks(mix):
        expected.append(("", " ".join(f"{k}:{v}" for k, v in usage.common.items())))
        expected += [(name, " ".join(f"{k}:{v}" for k, v in fields.items()))
                     for name, fields in usage.functions]
    assert len(ours) == len(expected) > 0
    for (head, text), (name, fields) in zip(ours, expected, strict=True):
        if not name:
            assert head.strip() == "Common" and text == fields
            continue
        assert head.strip().split(" ", 1)[1] == name
        assert text.startswith(fields)


def test_check_arch_specific_ptx_labelled_portable(
    builds: Builds, tmp_path: Path,  # noqa: F811
) -> None:
    """Triton's case: `.target sm_90a` PTX stored in a fatbin entry labelled compute_90."""
    from fatbinkit.formats.arch import Arch
    from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry

    path = tmp_path / "mislabelled.fatbin"
    path.write_bytes(build_fatbin([make_entry(EntryKind.PTX, Arch(90),
                                              builds.ptx["compute_90a"].read_bytes())]))
    rc, doc = check_json(path, "--arch", "sm_90", "--arch", "sm_100", "--driver", "13.0")
    assert rc == 1
    (image,) = doc["modules"][0]["images"]
    assert image["arch"] == "compute_90"
    k = doc["modules"][0]["kernels"][0]["archs"]
    assert k["sm_90"]["how"] == "ptx-jit"
    assert k["sm_100"]["error"] == "CUDA_ERROR_INVALID_PTX"
    assert ".target sm_90a" in k["sm_100"]["reason"]


# -- the suite's real libraries on the drivers users run ----------------------------------------
# Expected verdicts written from the documented floors (docs/inspect.md), for what each library
# is: cupy-cuda12x 14.2 was built by CUDA 12.9 (PTX .version 8.8, checked below with cuobjdump),
# LZ4, SASS sm_50 .. sm_90, sm_100f, sm_120f, PTX compute_100; cupy-cuda13x 14.2 by CUDA 13.2,
# zstd, SASS sm_75 .. sm_90, sm_100f, sm_120f, PTX compute_120; cuRAND 10.4.5.25 by CUDA 13.4,
# zstd, SASS + PTX ISA 9.4 for sm_75 .. sm_120 except for modules with sm_75 only, one of which
# holds data (the precalc tables) and no kernels.
# (library, driver, arch) -> (status, floor of the failure or None)
REAL = {
    "cupy12": {
        "12.0": {"sm_80": ("works", None), "sm_90": ("works", None),
                 "sm_100": ("fails", "device"), "sm_120": ("fails", "device")},
        "12.4": {"sm_90": ("works", None), "sm_120": ("fails", "device")},
        # Blackwell is driven from 12.8, but the f targets arrived with 12.9
        "12.8": {"sm_90": ("works", None), "sm_100": ("fails", "variant"),
                 "sm_120": ("fails", "variant"), "sm_121": ("fails", "device")},
        "12.9": {"sm_100": ("works", None), "sm_103": ("works", None),
                 "sm_120": ("works", None), "sm_121": ("works", None)},
        # R580 still drives Volta; Thor (sm_110) JITs the compute_100 PTX (ISA 8.8 <= 13.0)
        "13.0": {"sm_70": ("works", None), "sm_90": ("works", None), "sm_110": ("works", None)},
        "13.1": {"sm_70": ("fails", "device"), "sm_90": ("works", None)},
    },
    "cupy13": {
        # zstd entries before 12.4: the entry's flags are read before its cubin
        "12.0": {"sm_90": ("fails", "compression")},
        "12.4": {"sm_90": ("fails", "toolkit")},
        # sm_120 picks the sm_120f SASS: its f flag (12.9) comes before its CUDA 13 cubin
        "12.8": {"sm_90": ("fails", "toolkit"), "sm_120": ("fails", "variant")},
        "13.0": {"sm_75": ("works", None), "sm_90": ("works", None), "sm_100": ("works", None),
                 "sm_121": ("works", None), "sm_110": ("fails", None)},
    },
    "curand13": {
        "12.0": {"sm_90": ("fails", "compression")},
        "12.4": {"sm_90": ("fails", "toolkit")},
        "12.8": {"sm_90": ("fails", "toolkit"), "sm_120": ("fails", "toolkit")},
        # the data-only sm_75 module's PTX 9.4 needs 13.4: reported, not fatal
        "13.0": {"sm_75": ("works", None), "sm_90": ("partial", None),
                 "sm_120": ("partial", None)},
    },
}


@pytest.mark.parametrize("which, driver", [(w, d) for w in REAL for d in REAL[w]])
def test_real_libraries_on_each_driver(which: str, driver: str) -> None:
    from thirdparty import CURAND13

    path = fetch({"cupy12": CUPY12_RANDOM, "cupy13": CUPY13_RANDOM, "curand13": CURAND13}[which])
    expected = REAL[which][driver]
    args = [a for arch in expected for a in ("--arch", arch)]
    rc, doc = check_json(path, *args, "--driver", driver)
    got = {arch: (v["status"], v["failed"][0]["floor"] if v["failed"] else None)
           for arch, v in doc["verdicts"].items()}
    assert got == expected
    assert rc == (0 if all(s != "fails" for s, _ in expected.values()) else 1)
    assert doc["driver_checked"]
    if which == "curand13" and driver == "13.0":
        assert check_json(path, *args, "--driver", driver, "--strict")[0] == 1
        v = doc["verdicts"]["sm_90"]
        assert [f["floor"] for f in v["data_only_failed"]] == ["ptx-isa"]


def test_real_library_facts_from_cuobjdump() -> None:
    """The facts the table above rests on, read by NVIDIA's tool: CuPy 12's PTX ISA."""
    out = run([CUOBJDUMP, "-ptx", fetch(CUPY12_RANDOM)]).stdout
    assert set(re.findall(r"^\.version (\d+\.\d+)", out, re.M)) == {"8.8"}
    out = run([CUOBJDUMP, "-ptx", fetch(CUPY13_RANDOM)]).stdout
    assert set(re.findall(r"^\.version (\d+\.\d+)", out, re.M)) == {"9.2"}


def test_min_driver_and_unchecked_floors() -> None:
    so = fetch(CUPY12_RANDOM)
    proc = fatbinkit("check", so, "--min-driver", "--json")
    assert proc.returncode == 0, proc.stderr
    table = json.loads(proc.stdout)["min_driver"]
    # SASS sm_90 built by 12.9: any 12.x driver; f targets: 12.9; Thor as sm_101 (its name up to
    # CUDA 12.9) runs the sm_100f SASS from 12.9, its last driver: no gap
    assert table["sm_90"]["min_driver"] == "12.0" and table["sm_90"]["linux_driver"] == "525.60.13"
    assert table["sm_100"]["min_driver"] == "12.9" and table["sm_121"]["min_driver"] == "12.9"
    assert table["sm_110"]["min_driver"] == "13.0"
    assert table["sm_101"]["min_driver"] == "12.9" and table["sm_101"]["driver_gap"] is None
    text = fatbinkit("check", so, "--arch", "sm_90", "--arch", "sm_120")
    assert text.returncode == 0
    assert "driver floors not checked" in text.stdout
    assert "needs CUDA 12.9 (Linux driver >= 575.51.03)" in text.stdout
    rc, doc = check_json(so, "--arch", "sm_120")
    assert not doc["driver_checked"] and doc["verdicts"]["sm_120"]["min_driver"] == "12.9"
    # a driver version is read as its branch's CUDA version
    rc, doc = check_json(so, "--arch", "sm_120", "--driver", "570.124.06")
    assert doc["driver"] == "12.8" and rc == 1


def test_file_verdict_api_agrees_with_the_cli() -> None:
    from fatbinkit.compat import file_verdict, image_sets
    from fatbinkit.formats.arch import Arch

    so = fetch(CUPY13_RANDOM)
    sets = image_sets(so)
    for driver, status in (((12, 8), "fails"), ((13, 0), "works")):
        v = file_verdict(sets, Arch(90), driver)
        _, doc = check_json(so, "--arch", "sm_90", "--driver", "{}.{}".format(*driver))
        assert v.status == status == doc["verdicts"]["sm_90"]["status"]
        row = doc["verdicts"]["sm_90"]
        assert v.to_dict() == row
        # the counts beside the verdict: every counted module in exactly one of them
        assert row["sass"] + row["jit"] + row["cannot"] + row["other_gpus"] == v.modules
        assert (row["cannot"] > 0) == (status == "fails")
    assert str(file_verdict(sets, Arch(90), (12, 8))).startswith("sm_90 with driver 12.8: fails")
