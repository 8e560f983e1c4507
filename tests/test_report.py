"""`fatbinkit report` (issue 33): the report's figures against the commands' own JSON and
against what the other tools and formats say, on the suite's real wheels.

- the document's summaries are `ls --summary --json`'s, its verdicts `check --json`'s for every
  GPU it shows (with and without `--driver`), its minimum drivers `check --min-driver --json`'s,
  its comparison `diff --json`'s;
- the what-if view is held to what `prune` really writes: `ls --summary` of the pruned file;
- the treemap adds up: the input's bytes as zipfile lists them, each library its file size,
  each arch's modules as `ls --summary` counts them, every node its children's sum;
- bad input and outputs: one error, nothing half-written; the page is deterministic.
The page in a real browser: tests/test_report_browser.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from test_prune_truth import mixed  # noqa: F401  (the fixture: libguard.so, libmix.so)
from thirdparty import (
    BITSANDBYTES,
    CACHE,
    CUPY13_RANDOM,
    CUPY_ROCM7_RANDOM,
    CURAND13,
    CURAND130,
    JAX_ROCM7_PRNG,
    fetch,
)

from fatbinkit import report as report_module
from fatbinkit.errors import FatbinkitError, InvalidArgumentError, UnsupportedError
from fatbinkit.report import Report, report

pytest.importorskip("plotly", reason="the page needs the report extra (plotly)")


def _wheel(pattern: str) -> Path:
    return next((CACHE / "wheels").glob(pattern))


@pytest.fixture(scope="module")
def wheels() -> tuple[Path, Path]:
    """(old, new): cuRAND 10.4.0.35 and 10.4.5.25 for CUDA 13."""
    fetch(CURAND130)
    fetch(CURAND13)
    return (_wheel("nvidia_curand-10.4.0.35-*linux*.whl"),
            _wheel("nvidia_curand-10.4.5.25-*linux*.whl"))


def _cli(*args: str | Path) -> Any:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def compared(wheels: tuple[Path, Path]) -> dict[str, Any]:
    """The report of the newer wheel against the older, judged with a CUDA 12.8 driver."""
    old, new = wheels
    return report(new, old, driver="12.8", keep=[["sm_90"], ["sm_80", "sm_120"]]).to_dict()


def test_summaries_are_ls_summary(compared: dict[str, Any], wheels: tuple[Path, Path]) -> None:
    """The document's summaries are `ls --summary --json`'s, file by file and the total."""
    ls = _cli("ls", wheels[1], "--summary", "--json")
    assert compared["summary"]["files"] == ls["files"]
    assert compared["summary"]["total"] == ls["total"]


def test_verdicts_are_check_with_the_driver(compared: dict[str, Any],
                                            wheels: tuple[Path, Path]) -> None:
    """Each library's cell per GPU has `check --arch ... --driver 12.8 --json`'s verdict and
    counts, and a GPU whose images need CUDA 13 fails under 12.8 in the picture too."""
    devices = compared["devices"]
    assert "sm_90" in devices and len(devices) > 15
    checked = _cli("check", wheels[1], *(a for d in devices for a in ("--arch", d)),
                   "--driver", "12.8", "--json")
    for lib, files in zip(compared["libraries"], checked["files"], strict=True):
        assert lib["name"] == files["file"]
        for d in devices:
            want = files["verdicts"][d]
            got = lib["coverage"][d]
            assert (got["verdict"], got["native"], got["jit"], got["cannot"], got["other_gpus"],
                    got["reason"]) == (want["status"], want["sass"], want["jit"],
                                       want["cannot"], want["other_gpus"], want["reason"]), d
    assert compared["libraries"][0]["coverage"]["sm_90"]["status"] == "fails"
    assert compared["total_coverage"]["sm_90"]["verdict"] == checked["verdicts"]["sm_90"]["status"]


def test_minimum_drivers_are_check_min_driver(compared: dict[str, Any],
                                              wheels: tuple[Path, Path]) -> None:
    """The whole input's minimum driver and module counts per GPU are `check --min-driver
    --json`'s, and each library's minimum driver is that of `check --min-driver` on the library
    alone."""
    least = _cli("check", wheels[1], "--min-driver", "--json")["min_driver"]
    for d in compared["devices"]:
        mine = compared["total_coverage"][d]
        assert mine["min_driver"] == least[d]["min_driver"], d
        assert [mine[k] for k in ("native", "jit", "cannot", "other_gpus")] == \
            [least[d][k] for k in ("sass", "jit", "cannot", "other_gpus")], d
    lib = fetch(CURAND13)
    alone = _cli("check", lib, "--min-driver", "--json")["min_driver"]
    for d in compared["devices"]:
        assert compared["libraries"][0]["coverage"][d]["min_driver"] == \
            alone[d]["min_driver"], d


def test_comparison_is_diff(compared: dict[str, Any], wheels: tuple[Path, Path]) -> None:
    """The comparison's counts, coverage and arch changes are `diff OLD NEW --json`'s, and its
    worst changes are diff's regressions, largest first."""
    d = _cli("diff", *wheels, "--json")
    c = compared["comparison"]
    assert c["summary"] == d["summary"]
    assert c["coverage"] == d["coverage"]
    assert c["archs"] == d["archs"]
    assert c["libraries"] == d["libraries"]
    worst = sorted((x for x in d["changed"] if x["regression"]), key=lambda x: -x["delta"])
    assert [x["delta"] for x in c["worst"]] == [x["delta"] for x in worst[:len(c["worst"])]]
    assert c["worst"] and all(x["regression"] for x in c["worst"])


def test_the_tree_adds_up(compared: dict[str, Any], wheels: tuple[Path, Path]) -> None:
    """The root is every byte of the wheel's files (zipfile's sizes); a library is its file's
    size; each arch's stored bytes are `ls --summary`'s for that arch; every node's values are
    its children's sums (treemap branchvalues "total")."""
    t = compared["bytes"]
    with zipfile.ZipFile(wheels[1]) as zf:
        infos = {i.filename: i.file_size for i in zf.infolist() if not i.is_dir()}
    assert t["stored"][0] == sum(infos.values())
    children: dict[str, list[int]] = {}
    for i, parent in enumerate(t["parents"]):
        children.setdefault(parent, []).append(i)
    for i, node in enumerate(t["ids"]):
        kids = children.get(node)
        if kids:
            for key in ("stored", "uncompressed"):
                assert t[key][i] == sum(t[key][k] for k in kids), (t["labels"][i], key)
    libs = [i for i, k in enumerate(t["kind"]) if k == "library"]
    assert [t["name"][i] for i in libs] == [lib["name"] for lib in compared["libraries"]]
    for i in libs:
        assert t["stored"][i] == infos[t["name"][i]]
        ls = {a["arch"]: a for a in compared["summary"]["files"][0]["archs"]}
        for k in children[t["ids"][i]]:
            if t["kind"][k] in ("sass", "ptx"):
                assert t["stored"][k] == ls[t["labels"][k]]["stored"]
                assert t["uncompressed"][k] == ls[t["labels"][k]]["uncompressed"]
    kernels = [i for i, k in enumerate(t["kind"]) if k == "kernel"]
    assert 0 < len(kernels) <= report_module.KERNEL_NODES


def test_duplicates_are_marked(compared: dict[str, Any]) -> None:
    """cuRAND 10.4.5.25 stores some images more than once (docs/hidden.md: 37 of them): their
    modules say how many times, and the library's repeated bytes are counted once each."""
    t = compared["bytes"]
    dup = [i for i, k in enumerate(t["kind"]) if k == "module" and t["copies"][i] > 1]
    assert dup and all(f"(x{t['copies'][i]})" in t["labels"][i] for i in dup)
    lib = compared["libraries"][0]
    assert 0 < lib["duplicated"] < lib["stored"]


@pytest.mark.parametrize("gpus", [["sm_90"], ["sm_80", "sm_120"]])
def test_what_if_is_what_prune_writes(compared: dict[str, Any], gpus: list[str],
                                      tmp_path: Path) -> None:
    """For each GPU set, the device code the what-if keeps is what `prune --for` those GPUs
    writes (`ls --summary --json` of its output), and kept + dropped is all of it."""
    lib = fetch(CURAND13)
    out = tmp_path / "pruned.so"
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o", str(out),
                           *(a for g in gpus for a in ("--for", g)), "--allow-newer-driver"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    pruned = _cli("ls", out, "--summary", "--json")
    (w,) = [w for w in compared["libraries"][0]["what_if"] if w["gpus"] == gpus]
    assert w["exact"] and w["kept"] == pruned["stored"]
    assert w["kept"] + w["dropped"] == compared["libraries"][0]["stored"]
    (total,) = [x for x in compared["what_if"] if x["gpus"] == gpus]
    assert total == w


def test_what_if_of_a_cupy_module(tmp_path: Path) -> None:
    """The same on another vendor's build (CuPy 14.2's random module, every SASS arch alone by
    default): each set's kept bytes are prune's."""
    lib = fetch(CUPY13_RANDOM)
    doc = report(lib).to_dict()
    sets = doc["libraries"][0]["what_if"]
    assert len(sets) >= 3
    for w in sets[:2]:
        out = tmp_path / f"{w['gpus'][0]}.so"
        subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o", str(out),
                        "--for", w["gpus"][0], "--allow-newer-driver"], check=True,
                       capture_output=True)
        assert w["kept"] == _cli("ls", out, "--summary", "--json")["stored"]


@pytest.mark.parametrize(("name", "gpus"), [("libguard.so", ["sm_75"]),
                                           ("libguard.so", ["sm_80"]),
                                           ("libmix.so", ["sm_90"]),
                                           ("libmix.so", ["sm_120"]),
                                           ("libmix.so", ["sm_80", "sm_120"])])
def test_what_if_follows_prune_on_its_edge_cases(mixed: Path, name: str,  # noqa: F811
                                                gpus: list[str], tmp_path: Path) -> None:
    """slim's rules where they matter: libguard.so's kernel only its sm_80 image holds (pruning
    for sm_75 keeps that image too), libmix.so's module with no kernel (it keeps its smallest
    image) and its sm_120a-only module (left no image): the what-if keeps what `prune --for`
    writes, `ls --summary` of its output."""
    lib = mixed / name
    (w,) = report(lib, keep=[gpus]).to_dict()["libraries"][0]["what_if"]
    out = tmp_path / name
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o", str(out),
                           *(a for g in gpus for a in ("--for", g)), "--allow-newer-driver"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert w["exact"] and not w["refused"]
    assert w["kept"] == _cli("ls", out, "--summary", "--json")["stored"]


def test_libraries_of_several_vendors_and_gpu_lists() -> None:
    """bitsandbytes 0.50.2 ships CUDA, ROCm and Intel builds of one library, whose summaries
    list different GPUs: the report judges each library on its vendors' GPUs and totals each
    GPU over the libraries judged on it (it stopped with "a total verdict adds up verdicts on
    one arch" before); per CUDA and AMD GPU the whole input's verdict, module counts and
    minimum driver are `check --min-driver --json`'s."""
    fetch(BITSANDBYTES)
    wheel = _wheel("bitsandbytes-0.50.2-*.whl")
    doc = report(wheel).to_dict()
    least = _cli("check", wheel, "--min-driver", "--json")["min_driver"]
    judged = [d for d in doc["devices"] if d.startswith(("sm_", "gfx"))]
    assert any(d.startswith("sm_") for d in judged) and any(d.startswith("gfx") for d in judged)
    for d in judged:
        mine, theirs = doc["total_coverage"][d], least[d]
        assert (mine["verdict"], mine["min_driver"], mine["native"], mine["jit"],
                mine["cannot"], mine["other_gpus"]) == \
            (theirs["status"], theirs["min_driver"], theirs.get("sass", theirs.get("native")),
             theirs["jit"], theirs["cannot"], theirs["other_gpus"]), d
    rocm = next(lib for lib in doc["libraries"] if "rocm" in lib["name"])
    assert rocm["coverage"] and all(d.startswith("gfx") for d in rocm["coverage"])


def test_the_document_does_not_depend_on_string_hashes(tmp_path: Path) -> None:
    """A module whose sm_80 image holds four kernels and whose sm_90 image one of them: the
    page's kernel sets (what it weighs GPU sets with) are numbered in name order, so two
    processes with other string hashes (PYTHONHASHSEED) write the same document; numbered in
    a set's iteration order they differed."""
    from cudabuild import NVCC

    (tmp_path / "a.cu").write_text("".join(
        f"__global__ void k{i}(float *x) {{ x[0] = {i}; }}\n" for i in range(1, 5)))
    (tmp_path / "b.cu").write_text("__global__ void k1(float *x) { x[0] = 1; }\n")
    for name, arch in (("a", "sm_80"), ("b", "sm_90")):
        subprocess.run([NVCC, "-cubin", "-arch", arch, str(tmp_path / f"{name}.cu"), "-o",
                        str(tmp_path / f"{name}.cubin")], check=True)
    fatbin = tmp_path / "k.fatbin"
    subprocess.run([sys.executable, "-m", "fatbinkit", "build", "-o", str(fatbin), "--cubin",
                    f"sm_80={tmp_path / 'a.cubin'}", "--cubin", f"sm_90={tmp_path / 'b.cubin'}"],
                   check=True, capture_output=True)
    docs = {subprocess.run([sys.executable, "-m", "fatbinkit", "report", str(fatbin), "--json"],
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True,
                           capture_output=True, text=True).stdout for seed in range(1, 7)}
    assert len(docs) == 1


def test_a_file_alone(tmp_path: Path) -> None:
    """A library alone: no total summary, the tree's root is the file, the page is written
    and is the same bytes on a second run (deterministic)."""
    lib = fetch(CURAND13)
    one = report(lib)
    doc = one.to_dict()
    assert doc["summary"]["total"] is None
    assert doc["summary"]["files"] == [_cli("ls", lib, "--summary", "--json")]
    assert doc["bytes"]["stored"][0] == lib.stat().st_size
    assert doc["comparison"] is None
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    one.write(a)
    # another process, other string hashes (sets of kernel names iterate in another order)
    subprocess.run([sys.executable, "-m", "fatbinkit", "report", str(lib), "-o", str(b)],
                   env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True,
                   capture_output=True)
    assert a.read_bytes() == b.read_bytes()
    text = a.read_text()
    assert "<script src" not in text and "<link" not in text  # nothing fetched: offline
    assert 'id="fatbinkit-report"' in text


def test_the_document_is_the_cli_json(tmp_path: Path) -> None:
    """`report --json` prints the document the page holds, as docs/json-schema.json says it
    (the comparison's too)."""
    lib = fetch(CUPY13_RANDOM)
    doc = _cli("report", lib, "--json")
    schema = json.loads((Path(__file__).parent.parent / "docs" / "json-schema.json").read_text())
    jsonschema.validate(doc, schema)
    jsonschema.validate(_cli("report", lib, lib, "--json"),
                        {"$defs": schema["$defs"], "$ref": "#/$defs/report"})
    page = tmp_path / "p.html"
    subprocess.run([sys.executable, "-m", "fatbinkit", "report", str(lib), "-o", str(page)],
                   check=True, capture_output=True)
    text = page.read_text()
    start = text.index('id="fatbinkit-report" type="application/json">') + len(
        'id="fatbinkit-report" type="application/json">')
    inside = json.loads(text[start:text.index("</script>", start)])
    assert inside == doc


def test_the_kernel_cap_keeps_the_sums(monkeypatch: pytest.MonkeyPatch) -> None:
    """With fewer kernels drawn than the input has (torch has 10^5), the largest are drawn and
    the rest of each image is one block: the sums still hold."""
    monkeypatch.setattr(report_module, "KERNEL_NODES", 10)
    t = report(fetch(CUPY13_RANDOM)).to_dict()["bytes"]
    kernels = [i for i, k in enumerate(t["kind"]) if k == "kernel"]
    assert 10 <= len(kernels) <= 10 + 24  # ties at the cut are all drawn
    children: dict[str, list[int]] = {}
    for i, parent in enumerate(t["parents"]):
        children.setdefault(parent, []).append(i)
    for i, node in enumerate(t["ids"]):
        if node in children:
            assert t["uncompressed"][i] == sum(t["uncompressed"][k] for k in children[node])


def _errors(argv: list[str]) -> Iterator[str]:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", *argv], capture_output=True,
                          text=True, check=False)
    yield str(proc.returncode)
    yield proc.stderr


def test_bad_inputs_and_outputs(tmp_path: Path) -> None:
    """Not a binary: exit 3, one line naming it; an output in a missing folder: exit 3 and
    nothing written; neither -o nor --json: a usage error."""
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    code, err = _errors(["report", str(bad), "-o", str(tmp_path / "r.html")])
    assert code == "3" and err.count("\n") == 1 and str(bad) in err
    assert not (tmp_path / "r.html").exists()
    lib = fetch(CUPY13_RANDOM)
    code, err = _errors(["report", str(lib), "-o", str(tmp_path / "no" / "r.html")])
    assert code == "3" and "cannot write" in err
    assert not (tmp_path / "no").exists()
    code, err = _errors(["report", str(lib)])
    assert code == "2" and "-o FILE" in err
    code, err = _errors(["report", str(lib), "--json", "--keep", "sm_9x"])
    assert code == "2"


def test_api_arguments_are_checked() -> None:
    """Wrong GPU sets are refused before anything is read."""
    lib = fetch(CUPY13_RANDOM)
    for keep in ("sm_90", [[]], [], ["sm_90"]):
        with pytest.raises(InvalidArgumentError):
            report(lib, keep=keep)  # type: ignore[arg-type]
    with pytest.raises(FatbinkitError):
        report(lib, driver="twelve")


def test_without_plotly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the report extra the page says what to install; the document needs nothing."""
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    made = Report("x", None, {"source": "x"})
    with pytest.raises(UnsupportedError, match=r"fatbinkit\[report\]"):
        made.html()


@pytest.mark.parametrize("gpus", [["gfx942"], ["gfx90a", "gfx1100"]])
def test_what_if_of_amd_bundles(gpus: list[str], tmp_path: Path) -> None:
    """AMD: CuPy's ROCm build (plain offload bundles) keeps exactly what `prune --for` writes;
    JAX's ROCm plugin (a compressed bundle, CCOB) is flagged not exact: prune compresses the
    code objects it keeps anew, so the kept images' shares of the old bundle are not its
    size."""
    for item, exact in ((CUPY_ROCM7_RANDOM, True), (JAX_ROCM7_PRNG, False)):
        lib = fetch(item)
        (w,) = report(lib, keep=[gpus]).to_dict()["libraries"][0]["what_if"]
        assert w["exact"] is exact
        out = tmp_path / "pruned.so"
        subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o", str(out),
                        *(a for g in gpus for a in ("--for", g))], check=True,
                       capture_output=True)
        assert (w["kept"] == _cli("ls", out, "--summary", "--json")["stored"]) is exact


def test_every_library_is_weighed_for_the_same_gpus(tmp_path: Path) -> None:
    """A folder of two libraries built for different GPUs (cuRAND 13 and CuPy's CUDA 13
    module): the default GPU sets are every GPU either has native code for, each library is
    weighed for each set (the total of a set adds them all: kept + dropped is the device code
    of both), and each set's total is the sum of its libraries' figures."""
    folder = tmp_path / "site"
    folder.mkdir()
    for item in (CURAND13, CUPY13_RANDOM):
        shutil.copy(fetch(item), folder / fetch(item).name)
    doc = report(folder).to_dict()
    libs = doc["libraries"]
    assert len(libs) == 2
    device = sum(lib["stored"] for lib in libs)
    gpus = [w["gpus"] for w in doc["what_if"]]
    archs = {a["arch"].rstrip("af") for f in doc["summary"]["files"] for a in f["archs"]
             if a["kind"] == "sass"}
    assert sorted(g for (g,) in gpus) == sorted(archs)
    for i, w in enumerate(doc["what_if"]):
        assert w["kept"] + w["dropped"] == device
        assert [lib["what_if"][i]["gpus"] for lib in libs] == [w["gpus"]] * 2
        assert w["kept"] == sum(lib["what_if"][i]["kept"] for lib in libs)
    # CuPy's module has no sm_110 SASS and no PTX sm_110 JITs: prune refuses to empty it
    (cupy,) = [lib for lib in libs if lib["name"].startswith("_generator_api")]
    refused = {w["gpus"][0]: w["refused"] for w in cupy["what_if"]}
    assert refused["sm_110"] and not refused["sm_90"]
    total = {w["gpus"][0]: w["refused"] for w in doc["what_if"]}
    assert total["sm_110"] and not total["sm_90"]  # prune refuses a wheel one library empties
    for gpu, code in (("sm_110", 3), ("sm_90", 0)):
        proc = subprocess.run([sys.executable, "-m", "fatbinkit", "prune",
                               str(folder / cupy["name"]), "-o", str(tmp_path / f"{gpu}.so"),
                               "--for", gpu, "--allow-newer-driver"],
                              capture_output=True, text=True, check=False)
        assert proc.returncode == code, proc.stderr
        assert ("pruning would keep only images none of them loads" in proc.stderr) == (code == 3)
