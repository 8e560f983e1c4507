"""Verdicts as a library uses them (issue 27, points 3 and 5): ``ok`` and ``strict_ok`` are
properties everywhere, a device no driver can load the images on fails, ``to_dict()`` is the
``check --json`` document, the minimum driver has an API, reprs stay short, and
:func:`fatbinkit.collection.check` takes the conventions (``jobs``, ``progress``,
``max_decompressed``, ``driver``).

The driver-gap table is written from NVIDIA's facts, not from the implementation: the last CUDA
release whose driver drives a GPU (R390 = CUDA 9.1 for Fermi, R470 = CUDA 11.4 for Kepler, R580 =
CUDA 13.0 for Maxwell, Pascal and Volta; Thor is sm_101 up to CUDA 12.9, sm_110 from CUDA 13),
the PTX ISA release history (ISA 7.8: CUDA 11.8, 8.8: 12.9, 9.0: 13.0, 9.1: 13.1) and
minor-version compatibility (a CUDA 11.1+ cubin runs on any 11.x driver, a 12.x cubin needs a
12.x driver, a cubin before CUDA 11 needs its own toolkit's driver).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from thirdparty import CUPY12_RANDOM, CUPY13_RANDOM, fetch

import fatbinkit
from fatbinkit import collection
from fatbinkit.binary import Check
from fatbinkit.collection import TotalCheck
from fatbinkit.compat import (
    PTX,
    SASS,
    ArchVerdict,
    ImageInfo,
    ImageSet,
    TotalVerdict,
    file_verdict,
)
from fatbinkit.driver import DEVICE_SUPPORT
from fatbinkit.errors import DecompressionError, InvalidArgumentError, NotFoundError
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import DecompressionBudget
from fatbinkit.gate import Gate

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())


def validate(doc: dict[str, Any], what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})
    jsonschema.validate(doc, SCHEMA)


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def cli_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    proc = cli("check", *args, "--json")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def cupy12() -> str:
    """CuPy 14.2's cuda12x random module: SASS built by CUDA 12.x, PTX ISA 8.8 (CUDA 12.9)."""
    return str(fetch(CUPY12_RANDOM))


@pytest.fixture(scope="module")
def cupy13() -> str:
    """The same module of the cuda13x wheel: every image needs a CUDA 13 driver."""
    return str(fetch(CUPY13_RANDOM))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, cupy12: str, cupy13: str) -> str:
    """Two libraries that are not builds of one another (``a/`` and ``b/``)."""
    root = tmp_path_factory.mktemp("verdicts") / "site"
    for sub, src in (("a", cupy12), ("b", cupy13)):
        (root / sub).mkdir(parents=True)
        shutil.copyfile(src, root / sub / "_generator_api.so")
    return str(root)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory, cupy12: str, cupy13: str) -> str:
    """One library built for CUDA 12 and for CUDA 13 (``cuda12x/``, ``cuda13x/``)."""
    root = tmp_path_factory.mktemp("verdicts") / "twins"
    for sub, src in (("cuda12x", cupy12), ("cuda13x", cupy13)):
        (root / sub).mkdir(parents=True)
        shutil.copyfile(src, root / sub / "_generator_api.so")
    return str(root)


# --- 1. ok and strict_ok are properties -----------------------------------------------------

@pytest.mark.parametrize("cls", [ArchVerdict, TotalVerdict, Check, TotalCheck, Gate])
def test_ok_is_a_property_everywhere(cls: type) -> None:
    assert isinstance(cls.__dict__["ok"], property)
    if cls is not Gate:  # a gate has no strict form
        assert isinstance(cls.__dict__["strict_ok"], property)


def test_if_check_ok_means_what_it_says(cupy13: str, folder: str) -> None:
    """CuPy's cuda13x build holds nothing for sm_70 (CUDA 13 dropped Volta from offline
    compilation): the check fails, and ``if check.ok:`` says so."""
    failing = fatbinkit.open(cupy13).check(["sm_90", "sm_70"])
    assert failing.verdicts[1].status == "fails"
    if failing.ok or failing.strict_ok or failing.verdicts[1].ok:
        pytest.fail("a failing check is not ok")
    assert fatbinkit.open(cupy13).check("sm_90").ok
    # a folder where one library holds nothing for sm_70: partial, ok but not strict_ok
    total = collection.check(folder, "sm_70")
    assert total.verdicts[0].status == "partial"
    assert total.ok and total.verdicts[0].ok
    assert not total.strict_ok and not total.verdicts[0].strict_ok
    assert not collection.check(folder, ["sm_90", "sm_20"]).ok


# --- 2. no driver can load the images: the verdict fails ------------------------------------

def _sass(sm: str, toolkit: tuple[int, int]) -> ImageInfo:
    return ImageInfo(SASS, Arch.parse(sm), kernels=frozenset({"k"}), toolkit=toolkit)


def _ptx(compute: str, isa: tuple[int, int]) -> ImageInfo:
    return ImageInfo(PTX, Arch.parse(compute.replace("compute_", "sm_")), isa,
                     kernels=frozenset({"k"}))


# (device, the module's images, status with no driver given, the CUDA version they need)
GAP_TABLE = [
    # Thor: sm_101 up to CUDA 12.9 only; a CUDA 13 driver calls the same GPU sm_110
    ("sm_101", [_sass("sm_100f", (13, 0))], "fails", (13, 0)),
    ("sm_101", [_sass("sm_101", (12, 9))], "works", (12, 8)),  # the device: CUDA 12.8
    ("sm_101", [_ptx("compute_100", (9, 0))], "fails", (13, 0)),
    ("sm_101", [_ptx("compute_100", (8, 8))], "works", (12, 9)),
    ("sm_110", [_sass("sm_110", (13, 0))], "works", (13, 0)),
    # Volta: R580 (CUDA 13.0) is the last branch
    ("sm_70", [_sass("sm_70", (13, 0))], "works", (13, 0)),
    ("sm_70", [_ptx("compute_70", (9, 0))], "works", (13, 0)),
    ("sm_70", [_ptx("compute_70", (9, 1))], "fails", (13, 1)),
    # Kepler: R470 (CUDA 11.4) is the last branch
    ("sm_35", [_sass("sm_35", (11, 8))], "works", (11, 0)),
    ("sm_35", [_ptx("compute_35", (7, 8))], "fails", (11, 8)),
    ("sm_35", [_sass("sm_35", (12, 0))], "fails", (12, 0)),
    # Fermi: R390 (CUDA 9.1) is the last branch; before CUDA 11, a cubin needs its toolkit's
    ("sm_20", [_sass("sm_20", (8, 0))], "works", (8, 0)),
    ("sm_20", [_sass("sm_20", (9, 2))], "fails", (9, 2)),
    # still driven: any floor can be met
    ("sm_90", [_ptx("compute_90", (9, 1))], "works", (13, 1)),
]


@pytest.mark.parametrize("device, images, status, need", GAP_TABLE)
def test_no_driver_for_the_device_fails(device: str, images: list[ImageInfo], status: str,
                                        need: tuple[int, int]) -> None:
    v = file_verdict([ImageSet("m", tuple(images))], device)
    assert (v.status, v.min_driver, v.ok) == (status, need, status != "fails")
    if status == "fails":
        assert v.driver_gap is not None and v.max_driver is not None
        assert f"no driver can load it on {device}" in v.reason
        assert str(v).startswith(f"{device}: fails: no driver can load it")
    else:
        assert v.driver_gap is None and "no driver" not in v.reason
    # the wheel or folder around it: the same verdict, the library named
    total = TotalVerdict.of([("lib/a.so", v)])
    assert (total.status, total.ok) == (status, status != "fails")
    if status == "fails":
        assert total.driver_gap and "lib/a.so: no driver can load it" in total.reason
    validate_verdict(v.to_dict())


def validate_verdict(doc: dict[str, Any]) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/verdict"})


def test_a_gap_beside_a_failing_module_says_both() -> None:
    """A module that cannot load (PTX for another arch's target), another that no driver
    loads on the device: the reason gives the first and adds the gap."""
    bad = ImageInfo(PTX, Arch(100), (8, 8), kernels=frozenset({"x"}), target=Arch(103))
    v = file_verdict([ImageSet("gap", (_sass("sm_100f", (13, 0)),)), ImageSet("bad", (bad,))],
                     "sm_101")
    assert v.status == "fails" and v.failed
    assert v.reason.endswith(f"(and no driver can load it on sm_101: {v.driver_gap})")


def test_a_real_library_no_driver_loads_on_sm_101(cupy13: str) -> None:
    """CuPy's cuda13x module on Thor as sm_101: its CUDA 13 images need a driver that calls
    the GPU sm_110. The API, the text and the JSON say fails; exit status 1."""
    c = fatbinkit.open(cupy13).check(["sm_101", "sm_110", "sm_120"])
    v = c.verdicts[0]
    assert v.status == "fails" and not v.ok and not c.ok
    assert "CUDA 12.9" in v.driver_gap and "13.0" in v.driver_gap  # type: ignore[operator]
    rc, doc = cli_json(cupy13, "--arch", "sm_101")
    assert rc == 1 and not doc["ok"] and doc["verdicts"]["sm_101"]["status"] == "fails"
    validate(doc, "check")
    text = cli("check", cupy13, "--arch", "sm_101")
    assert text.returncode == 1 and "FAILS" in text.stdout
    assert "no driver can load it on sm_101" in text.stdout
    table = fatbinkit.open(cupy13).min_driver().to_dict()["min_driver"]
    assert table["sm_101"]["status"] == "fails" and table["sm_101"]["driver_gap"]


# --- 3. to_dict() is the check --json document ---------------------------------------------

@pytest.mark.parametrize("args", [
    ("sm_90", "sm_101", "sm_75"), ("sm_90", "sm_120", "--driver", "12.8"),
    ("sm_90", "sm_70", "--strict"), ("sm_90", "--kernel", "*beta_functor*")])
def test_check_to_dict_is_the_cli_json(cupy12: str, args: tuple[str, ...]) -> None:
    archs = [a for a in args if a.startswith("sm_")]
    strict = "--strict" in args
    driver = args[args.index("--driver") + 1] if "--driver" in args else None
    kernel = args[args.index("--kernel") + 1] if "--kernel" in args else None
    flags = [x for a in archs for x in ("--arch", a)] + [
        a for a in args if not a.startswith("sm_")]
    rc, doc = cli_json(cupy12, *flags)
    binary = fatbinkit.open(cupy12)
    c = binary.check(archs, driver, kernel, every_image=strict or kernel is not None)
    assert c.to_dict(strict) == doc
    assert rc == (0 if (c.strict_ok if strict else c.ok) else 1)
    validate(c.to_dict(strict), "check")


@pytest.mark.parametrize("which", ["folder", "twins"])
@pytest.mark.parametrize("strict", [False, True])
def test_total_check_to_dict_is_the_cli_json(which: str, strict: bool, folder: str,
                                             twins: str) -> None:
    source = {"folder": folder, "twins": twins}[which]
    rc, doc = cli_json(source, "--arch", "sm_70", "--arch", "sm_101", "--arch", "sm_90",
                       *(["--strict"] if strict else []))
    total = collection.check(source, ["sm_70", "sm_101", "sm_90"], every_image=strict)
    assert total.to_dict(strict) == doc
    assert rc == (0 if (total.strict_ok if strict else total.ok) else 1)
    assert (doc["alternatives"] != []) == (which == "twins")
    validate(total.to_dict(strict), "checks")


# --- 4. the minimum driver --------------------------------------------------------------------

def test_min_driver_api_is_the_cli(cupy12: str, cupy13: str) -> None:
    from fatbinkit.compat import MinDriver

    for path in (cupy12, cupy13):
        least = fatbinkit.open(path).min_driver()
        proc = cli("check", path, "--min-driver", "--json")
        assert proc.returncode == 0, proc.stderr
        assert least.to_dict() == json.loads(proc.stdout)
        validate(least.to_dict(), "min_driver")
        assert str(least) + "\n" == cli("check", path, "--min-driver").stdout
        # the CLI's default: every GPU arch NVIDIA lists
        assert [a.device.number for a in least.archs] == list(DEVICE_SUPPORT)
    least = fatbinkit.open(cupy12).min_driver(["sm_90", "sm_101"])
    assert isinstance(least, MinDriver) and least.files is None
    sm90 = least["sm_90"]
    assert (sm90.min_driver, sm90.min_release.linux) == ((12, 0), "525.60.13")  # type: ignore[union-attr]
    assert (sm90.host, sm90.driver_gap, sm90.min_driver_file) == ("linux", None, None)
    assert str(sm90) == "sm_90: CUDA 12.0 (Linux driver >= 525.60.13): every module"
    assert least["sm_101"].max_driver == (12, 9) and least[Arch(101)].driver_gap is None
    assert fatbinkit.open(cupy13).min_driver("sm_101")["sm_101"].driver_gap
    with pytest.raises(NotFoundError, match="sm_120"):
        least["sm_120"]
    with pytest.raises(InvalidArgumentError, match="sm_91"):
        least["sm_91"]


def test_collection_min_driver_is_the_cli(folder: str, twins: str) -> None:
    for source in (folder, twins):
        least = collection.min_driver(source, ["sm_75", "sm_90", "sm_101"])
        proc = cli("check", source, "--min-driver", "--arch", "sm_75", "--arch", "sm_90",
                   "--arch", "sm_101", "--json")
        assert least.to_dict() == json.loads(proc.stdout)
        validate(least.to_dict(), "min_drivers")
        text = cli("check", source, "--min-driver", "--arch", "sm_75", "--arch", "sm_90",
                   "--arch", "sm_101").stdout
        assert text.startswith(str(least) + "\n")
    least = collection.min_driver(folder, ["sm_90"])
    assert least.files == ("a/_generator_api.so", "b/_generator_api.so")
    # the cuda13x build needs CUDA 13.0, the cuda12x one 12.0: the highest, and who needs it
    assert (least["sm_90"].min_driver, least["sm_90"].min_driver_file) == (
        (13, 0), "b/_generator_api.so")
    # twins: the package loads one build; the lowest driver a build needs is the group's
    twin = collection.min_driver(twins, "sm_90")
    assert twin.alternatives and twin["sm_90"].min_driver == (12, 0)


def test_a_build_not_serving_is_not_called_empty(twins: str) -> None:
    """The cuda13x build's module is not counted on sm_90 (the cuda12x build serves it): it is
    not an empty module (no kernels, no variables) either, which the heads said."""
    assert collection.min_driver(twins, "sm_90").empty == 0
    assert collection.check(twins, "sm_90").verdicts[0].empty == ()
    for args in (("--min-driver",), ("--arch", "sm_90")):
        head = cli("check", twins, *args).stdout.splitlines()[0]
        assert "2 module(s)" in head and "empty" not in head, head


# --- 5. short reprs -----------------------------------------------------------------------------

def test_reprs_stay_short_for_thousands_of_modules() -> None:
    sets = [ImageSet(f"lib.so container {i}", (_sass("sm_90", (12, 8)),
                                              _sass("sm_80", (12, 8))))
            for i in range(3000)]
    rows = tuple((s, [(k, [s.decide("sm_90")]) for k in s.kernels]) for s in sets)
    verdict = file_verdict(sets, "sm_90")
    check = Check("lib.so", (Arch(90),), None, rows, (verdict,))
    total = TotalCheck("wheel.whl", (Arch(90),), None, (check,) * 3,
                       (TotalVerdict.of([(f"lib{i}.so", verdict) for i in range(300)]),))
    for obj in (check, total, verdict, total.verdicts[0]):
        assert len(repr(obj)) < 400, repr(obj)
    assert repr(check) == "Check('lib.so', modules=3000, driver=None, works: sm_90)"
    assert "files=3" in repr(total) and "modules=9000" in repr(total)


# --- 6. collection.check takes the conventions ---------------------------------------------

def test_collection_check_arguments_are_checked_first(tmp_path: Path) -> None:
    missing = tmp_path / "no such folder"
    with pytest.raises(InvalidArgumentError, match="jobs"):
        collection.check(missing, "sm_90", jobs=0)
    with pytest.raises(InvalidArgumentError, match="driver"):
        collection.check(missing, "sm_90", "abc")
    with pytest.raises(InvalidArgumentError, match="sm_91"):
        collection.check(missing, "sm_91")
    with pytest.raises(InvalidArgumentError, match="at least one"):
        collection.check(missing, [])
    with pytest.raises(InvalidArgumentError, match="max_decompressed"):
        collection.check(missing, "sm_90", max_decompressed="1G")  # type: ignore[arg-type]


def test_collection_check_jobs_driver_and_a_shared_budget(folder: str) -> None:
    serial = collection.check(folder, ["sm_90", "sm_120"], 12080, jobs=1)
    assert serial.driver == (12, 8)
    assert serial.to_dict() == collection.check(folder, ["sm_90", "sm_120"], "12.8",
                                                jobs=2).to_dict()
    # one budget for every library: what each spends adds up in it
    shared = DecompressionBudget(1 << 40)
    collection.check(folder, "sm_90", every_image=True, max_decompressed=shared)
    alone = [DecompressionBudget(1 << 40) for _ in range(2)]
    for budget, sub in zip(alone, ("a", "b"), strict=True):
        collection.check(Path(folder, sub), "sm_90", every_image=True, max_decompressed=budget)
    assert shared.used == sum(b.used for b in alone) > 0  # CuPy's images are lz4
    # a budget too small stops the check, the advice in API terms
    with pytest.raises(DecompressionError, match="max_decompressed=SIZE"):
        collection.check(folder, "sm_90", every_image=True, max_decompressed=1)
