"""`fatbinkit.survey_summary` over a real survey (issue 34 item 3): summarize() and regressions()
read the Parquet tables a survey wrote, and what they say is what the single-wheel commands say.

One survey (module-scoped fixture, `engine="local"`, one process) of real wheels: cuRAND
10.4.0.35 and 10.4.5.25 for Linux (two consecutive versions of one package), cuRAND 10.4.5.25
for Windows (the same version, another platform: a version of two wheels, and a wheel with no
predecessor of its platform), and jax_cuda12_plugin 0.10.2 (another package).

Oracles, independent of the module: `fatbinkit ls WHEEL --summary --json` (files, stored and
uncompressed bytes, archs), `fatbinkit check WHEEL --min-driver --json` (status and minimum
driver per GPU), `fatbinkit diff OLD NEW --json` (archs and libraries dropped), os.stat.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from thirdparty import CACHE, CURAND13, CURAND13_WIN, CURAND130, JAX_CUDA12_LINALG, fetch

pa = pytest.importorskip("pyarrow", reason="survey tables need the survey extra (pyarrow)")
pq = pytest.importorskip("pyarrow.parquet")

from fatbinkit.errors import FormatError, InputError  # noqa: E402
from fatbinkit.survey import survey  # noqa: E402
from fatbinkit.survey_summary import (  # noqa: E402
    Finding,
    Regressions,
    SurveySummary,
    platform_family,
    regressions,
    summarize,
)
from fatbinkit.survey_tables import FORMAT, schema  # noqa: E402

_RANK = {"fails": 0, "partial": 1, "works": 2}


def _wheel(pattern: str) -> Path:
    found = sorted((CACHE / "wheels").glob(pattern))
    assert found, pattern
    return found[0]


def _cli(*args: str | Path) -> Any:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def _driver(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    """The surveyed wheels by a short name."""
    for member in (CURAND130, CURAND13, CURAND13_WIN, JAX_CUDA12_LINALG):
        fetch(member)
    return {"old": _wheel("nvidia_curand-10.4.0.35-*linux*_x86_64.whl"),
            "new": _wheel("nvidia_curand-10.4.5.25-*linux*_x86_64.whl"),
            "win": _wheel("nvidia_curand-10.4.5.25-*win_amd64.whl"),
            "jax": _wheel("jax_cuda12_plugin-0.10.2-*linux*_x86_64.whl")}


@pytest.fixture(scope="module")
def out(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A survey of the four wheels, and of a wheel cut short (an ``errors`` row)."""
    folder = tmp_path_factory.mktemp("survey")
    corrupt = folder / "broken_pkg-1.0-py3-none-any.whl"  # a wheel cut short: not a zip
    with open(wheels["jax"], "rb") as f:
        corrupt.write_bytes(f.read(5000))
    assert not zipfile.is_zipfile(corrupt)
    done = survey([*wheels.values(), corrupt], folder / "out", engine="local", jobs=1)
    assert done.errors == 1 and len(done.outcomes) == 5, str(done)
    return folder / "out"


@pytest.fixture(scope="module")
def oracles(wheels: dict[str, Path]) -> dict[str, tuple[Any, Any]]:
    """Per wheel, (`ls --summary --json`, `check --min-driver --json`)."""
    return {k: (_cli("ls", w, "--summary", "--json"), _cli("check", w, "--min-driver", "--json"))
            for k, w in wheels.items()}


@pytest.fixture(scope="module")
def summary(out: Path) -> SurveySummary:
    return summarize(out)


def _copy(out: Path, to: Path) -> Path:
    shutil.copytree(out, to)
    return to


def _kinds(ls: Any, kind: str) -> set[str]:
    return {a["arch"] for a in ls["total"]["archs"] if a["kind"] == kind}


def test_versions_are_ls_summary_figures(summary: SurveySummary, wheels: dict[str, Path],
                                         oracles: dict[str, tuple[Any, Any]]) -> None:
    """Per package and version (sorted by name, then PEP 440): wheels, their bytes, libraries,
    device code stored and uncompressed, native and PTX archs are the sums and unions of `ls
    --summary --json` over the version's wheels (cuRAND 10.4.5.25: its Linux and Windows
    wheels together)."""
    groups: dict[tuple[str | None, str | None], list[str]] = {
        ("jax-cuda12-plugin", "0.10.2"): ["jax"], ("nvidia-curand", "10.4.0.35"): ["old"],
              ("nvidia-curand", "10.4.5.25"): ["new", "win"]}
    assert [(v.package, v.version) for v in summary.versions] == list(groups)
    for v in summary.versions:
        names = groups[(v.package, v.version)]
        ls = [oracles[n][0] for n in names]
        assert v.wheels == len(names)
        assert v.size == sum(wheels[n].stat().st_size for n in names)
        assert v.files == sum(len(d["files"]) for d in ls)
        assert v.stored == sum(d["total"]["stored"] for d in ls)
        assert v.uncompressed == sum(d["total"]["uncompressed"] for d in ls)
        assert set(v.native) == set().union(*(_kinds(d, "sass") for d in ls))
        assert set(v.jit) == set().union(*(_kinds(d, "ptx") for d in ls))
        # what prune keeps and drops of a GPU set is all the device code, split in two
        assert v.what_if and all(w.kept + w.dropped == v.stored for w in v.what_if)
        assert v.best is not None and v.best.dropped == max(w.dropped for w in v.what_if)
    assert summary.wheels == 4 and summary.packages == 2
    # the wheel cut short is no version's: an error of the input, counted apart
    assert [(e.kind, e.wheels) for e in summary.errors] == [("input", 1)]
    assert summary.errors[0].type


def test_min_driver_is_check_min_driver(summary: SurveySummary,
                                        oracles: dict[str, tuple[Any, Any]]) -> None:
    """Per GPU, a version's status is the worst of its wheels' `check --min-driver` verdicts and
    its minimum driver the highest of theirs (None where a wheel has none); a version of one
    wheel has that wheel's figures exactly, sm_101's `fails` with driver 13.0 included."""
    groups = {"0.10.2": ["jax"], "10.4.0.35": ["old"], "10.4.5.25": ["new", "win"]}
    for v in summary.versions:
        checks = [oracles[n][1]["min_driver"] for n in groups[str(v.version)]]
        assert len(v.devices) >= 20
        for d in v.devices:
            cells = [c[d.device] for c in checks]
            assert d.status == min((c["status"] for c in cells), key=_RANK.__getitem__)
            drivers = [c["min_driver"] for c in cells]
            expected = None if None in drivers else max(drivers, key=_driver)
            assert d.min_driver == expected, (v.version, d)
    curand = {d.device: d for d in summary.versions[1].devices}
    assert (curand["sm_101"].status, curand["sm_101"].min_driver) == ("fails", "13.0")
    assert (curand["sm_110"].status, curand["sm_110"].min_driver) == ("fails", None)


def test_arch_counts_are_ls_archs(summary: SurveySummary,
                                  oracles: dict[str, tuple[Any, Any]]) -> None:
    """Per arch over the survey: the wheels whose `ls --summary` total holds it as SASS
    (native) and as PTX (jit)."""
    expected: dict[str, list[int]] = {}
    for ls, _ in oracles.values():
        for kind, at in (("sass", 0), ("ptx", 1)):
            for arch in _kinds(ls, kind):
                expected.setdefault(arch, [0, 0])[at] += 1
    assert {a.arch: [a.native, a.jit] for a in summary.archs} == expected
    assert {a.arch: [a.native, a.jit] for a in summary.archs}["compute_120"] == [0, 3]


def test_regressions_agree_with_diff(out: Path, wheels: dict[str, Path],
                                     oracles: dict[str, tuple[Any, Any]]) -> None:
    """One pair is compared: cuRAND's Linux wheels (the Windows wheel has no older Windows
    wheel, jax one version). Its archs and PTX dropped are `diff --json`'s coverage removals,
    its libraries added and removed diff's; the minimum drivers raised and verdicts worsened
    are what the two `check --min-driver --json` say; stored bytes did not grow (ls)."""
    found = regressions(out, package="NVIDIA_curand")
    assert [(p.old, p.new, p.python, p.platform) for p in found.pairs] == [
        ("10.4.0.35", "10.4.5.25", "py3-none", "manylinux_x86_64")]
    diff = _cli("diff", wheels["old"], wheels["new"], "--json")
    # diff speaks per library; a wheel-level arch is dropped when no library keeps it: the
    # wheels hold one library each (libcurand.so.10), so the two are the same here
    lost = {(c["kind"], c["arch"]) for c in diff["coverage"] if c["change"] == "removed"}
    assert {f.subject for f in found.findings if f.kind == "native"} == \
        {a for k, a in lost if k == "sass"} == {"sm_103", "sm_121"}
    assert {f.subject for f in found.findings if f.kind == "jit"} == \
        {a for k, a in lost if k == "ptx"} == {"compute_121"}
    assert {f.subject for f in found.findings if f.kind == "files" and f.change == "removed"} \
        == set(diff["libraries"]["removed"])
    assert {f.subject for f in found.findings if f.kind == "files" and f.change == "added"} \
        == set(diff["libraries"]["added"])
    # diff says nothing of drivers (its "devices" are which image each GPU loads: native ->
    # jit there is not a driver change): check --min-driver of each wheel is the oracle
    before, after = oracles["old"][1]["min_driver"], oracles["new"][1]["min_driver"]
    rows = {d["device"] for r in pq.read_table(out / "wheels").to_pylist() for d in r["devices"]}
    raised = {d: (before[d]["min_driver"], after[d]["min_driver"]) for d in rows
              if before[d]["min_driver"] and after[d]["min_driver"]
              and _driver(after[d]["min_driver"]) > _driver(before[d]["min_driver"])}
    assert {f.subject: (f.before, f.after) for f in found.findings
            if f.kind == "min_driver"} == raised
    worse = {d for d in rows if _RANK[after[d]["status"]] < _RANK[before[d]["status"]]}
    assert {f.subject for f in found.findings if f.kind == "status"} == worse
    assert oracles["new"][0]["total"]["stored"] < oracles["old"][0]["total"]["stored"]
    assert not [f for f in found.findings if f.kind == "stored"]
    assert len(found.findings) == 3
    assert regressions(out, package="jax-cuda12-plugin").pairs == ()
    assert regressions(out).findings == found.findings


def _made_up(work: Path, windows: bool, sha: str, stored: int, drivers: dict[str, str],
             fails: str | None, extra: str | None) -> dict[str, Any]:
    """A wheel of a release 10.4.10.1 written into ``work``: 10.4.5.25's rows of that platform,
    changed as said; its wheels row."""
    row: dict[str, Any] = next(
        r for p in (work / "wheels").iterdir() for r in pq.read_table(p).to_pylist()
        if r["version"] == "10.4.5.25" and ("win" in r["filename"]) == windows)
    files = pq.read_table(work / "files" / f"{row['sha256']}.parquet").to_pylist()
    row.update(sha256=sha, version="10.4.10.1", stored=row["stored"] + stored,
               filename=row["filename"].replace("10.4.5.25", "10.4.10.1"))
    for d in row["devices"]:
        d["min_driver"] = drivers.get(d["device"], d["min_driver"])
        d["status"] = "fails" if d["device"] == fails else d["status"]
    pq.write_table(pa.Table.from_pylist([row], schema=schema("wheels")),
                   work / "wheels" / f"{sha}.parquet")
    files += [{**files[0], "file": extra}] if extra else []
    pq.write_table(pa.Table.from_pylist([{**f, "sha256": sha, "version": "10.4.10.1"}
                                         for f in files], schema=schema("files")),
                   work / "files" / f"{sha}.parquet")
    return row


def test_regressions_of_a_made_up_release(out: Path, tmp_path: Path) -> None:
    """A release 10.4.10.1 made from 10.4.5.25's rows: its Linux wheel with a higher driver for
    sm_75 (13.10), sm_80 failing, 1000 more stored bytes, one library more; its Windows wheel
    with driver 13.9 for sm_75. It comes after 10.4.5.25 (PEP 440; as text it would sort
    before), each wheel is compared with its own platform's, each change is one finding with its
    values; its summary has the highest driver as a version tuple (13.10, not 13.9) and the
    worst status."""
    work = _copy(out, tmp_path / "out")
    linux = _made_up(work, False, "f" * 64, 1000, {"sm_75": "13.10"}, "sm_80",
                     "nvidia/cu13/lib/libextra.so")
    windows = _made_up(work, True, "e" * 64, 0, {"sm_75": "13.9"}, None, None)
    found = regressions(work, "nvidia-curand")
    assert [(p.old, p.new, p.platform) for p in found.pairs] == [
        ("10.4.0.35", "10.4.5.25", "manylinux_x86_64"),
        ("10.4.5.25", "10.4.10.1", "manylinux_x86_64"),
        ("10.4.5.25", "10.4.10.1", "win_amd64")]
    late = [(f.platform, f.kind, f.change, f.subject, f.before, f.after)
            for f in found.findings if f.new == "10.4.10.1"]
    linux_x86 = "manylinux_x86_64"
    assert late == [
        (linux_x86, "min_driver", "raised", "sm_75", "13.0", "13.10"),
        (linux_x86, "status", "worsened", "sm_80", "works", "fails"),
        (linux_x86, "stored", "grew", None, linux["stored"] - 1000, linux["stored"]),
        (linux_x86, "files", "added", "nvidia/cu13/lib/libextra.so", None, None),
        ("win_amd64", "min_driver", "raised", "sm_75", "13.0", "13.9")]
    grew = next(f for f in found.findings if f.kind == "stored")
    assert grew.ratio == pytest.approx(linux["stored"] / (linux["stored"] - 1000))
    assert str(grew) == (f"nvidia-curand 10.4.5.25 -> 10.4.10.1 (py3-none, manylinux_x86_64): "
                         f"stored grew: {linux['stored'] - 1000} -> {linux['stored']} "
                         f"(x{grew.ratio:.3f})")
    assert grew.to_dict()["ratio"] == grew.ratio
    assert json.loads(json.dumps(found.to_dict()))["findings"][-2]["subject"] == \
        "nvidia/cu13/lib/libextra.so"
    made = summarize(work).versions[-1]
    assert (made.version, made.wheels) == ("10.4.10.1", 2)
    assert made.stored == linux["stored"] + windows["stored"]
    devices = {d.device: d for d in made.devices}
    assert devices["sm_75"].min_driver == "13.10"
    assert (devices["sm_80"].status, devices["sm_80"].min_driver) == ("fails", "13.0")


@pytest.fixture
def broken(out: Path, tmp_path: Path) -> Iterator[Path]:
    yield _copy(out, tmp_path / "out")


@pytest.mark.parametrize("said", [b"fatbinkit-survey/0", None])
def test_other_format_refused(broken: Path, said: bytes | None) -> None:
    """A part whose schema says another version of the tables (or none) is refused with a
    FormatError naming the part and the version this fatbinkit reads."""
    part = sorted((broken / "wheels").iterdir())[0]
    table = pq.read_table(part)
    pq.write_table(table.replace_schema_metadata(None if said is None else {b"fatbinkit": said}),
                   part)
    for query in (summarize, regressions):
        with pytest.raises(FormatError) as e:
            query(broken)
        assert part.name in str(e.value) and FORMAT in str(e.value)


def test_other_columns_refused(broken: Path) -> None:
    """A part that says FORMAT but lacks a column of the schema is refused too."""
    part = sorted((broken / "files").iterdir())[0]
    table = pq.read_table(part)
    pq.write_table(table.drop_columns(["duplicated"]), part)
    with pytest.raises(FormatError, match="columns"):
        regressions(broken)


def test_not_a_survey(tmp_path: Path) -> None:
    """A folder that is not there, or has no wheels (nor errors) table, is an InputError."""
    with pytest.raises(InputError, match="no such folder"):
        summarize(tmp_path / "missing")
    (tmp_path / "empty" / "files").mkdir(parents=True)
    with pytest.raises(InputError, match="no wheels table"):
        regressions(tmp_path / "empty")


def test_text_is_deterministic(out: Path, summary: SurveySummary, tmp_path: Path) -> None:
    """The text and the document are the same read after read and from a copy of the folder
    (the parts listed in another order by the file system), and the text holds each version's
    figures in aligned columns."""
    again = summarize(_copy(out, tmp_path / "copy"))
    assert str(again).replace(str(tmp_path / "copy"), "OUT") == \
        str(summary).replace(str(out), "OUT")
    assert str(summarize(out)) == str(summary)
    assert json.dumps(summarize(out).to_dict()) == json.dumps(summary.to_dict())
    lines = str(summary).splitlines()
    header = next(line for line in lines if line.startswith("package "))
    for v in summary.versions:
        row = next(line for line in lines if line.startswith(f"{v.package} ")
                   and f" {v.version} " in line)
        assert row.split()[2:7] == [str(x) for x in (v.wheels, v.size, v.files, v.stored,
                                                     v.uncompressed)]
        # numbers right-aligned under their header (the sixth column: stored)
        assert [m.end() for m in re.finditer(r"\S+", row)][5] == \
            [m.end() for m in re.finditer(r"\S+", header)][5]
    found = regressions(out)
    assert isinstance(found, Regressions) and str(found) == str(regressions(out))
    assert all(isinstance(f, Finding) and str(f).startswith("nvidia-curand 10.4.0.35 -> ")
               for f in found.findings)


def test_cli_json_follows_the_schema(out: Path, summary: SurveySummary) -> None:
    """``fatbinkit survey summarize OUT --json`` and ``survey regressions OUT --json`` print the
    documents of summarize() and regressions(), valid against docs/json-schema.json (a made-up
    release's findings too); ``survey SOURCE -o OUT --json`` its outcome."""
    import jsonschema

    root = Path(__file__).resolve().parent.parent
    schema = json.loads((root / "docs" / "json-schema.json").read_text())

    def valid(doc: Any, name: str) -> None:
        jsonschema.validate(doc, {**schema, "$ref": f"#/$defs/{name}"})

    def cli(*args: str | Path) -> Any:
        proc = subprocess.run([sys.executable, "-m", "fatbinkit", "survey", *map(str, args)],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    doc = cli("summarize", out, "--json")
    assert doc == summary.to_dict()
    valid(doc, "survey_summary")
    found = cli("regressions", out, "--json")
    assert found == regressions(out).to_dict() and found["findings"]
    valid(found, "survey_regressions")
    fetch(JAX_CUDA12_LINALG)
    wheel = next((CACHE / "wheels").glob("jax_cuda12_plugin-0.10.2-*linux*.whl"))
    valid(cli(wheel, "-o", out.parent / "one", "--json"), "survey")


def test_platform_family() -> None:
    """Tags' platform parts without their versions: one family for every manylinux of an
    architecture, Windows and others as they are."""
    assert platform_family("manylinux2014_x86_64") == platform_family("manylinux_2_27_x86_64") \
        == "manylinux_x86_64"
    assert platform_family("manylinux_2_28_aarch64") == "manylinux_aarch64"
    assert platform_family("musllinux_1_2_x86_64") == "musllinux_x86_64"
    assert platform_family("macosx_11_0_arm64") == "macosx_arm64"
    assert platform_family("win_amd64") == "win_amd64"


def test_survey_at_a_url(out: Path, summary: SurveySummary) -> None:
    """A survey written to an fsspec URL (here fsspec's in-memory file system) is read there,
    with the same figures as the folder's."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    url = "memory://fatbinkit-test-survey-summary"
    try:
        for part in sorted(out.rglob("*.parquet")):
            fs.pipe(f"{url}/{part.parent.name}/{part.name}", part.read_bytes())
        assert summarize(url).to_dict()["versions"] == summary.to_dict()["versions"]
        assert regressions(url).to_dict()["findings"] == regressions(out).to_dict()["findings"]
    finally:
        fs.rm(url, recursive=True)
