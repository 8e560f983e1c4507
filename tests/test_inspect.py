"""Big libraries at a glance: ``fatbinkit.open``, ``ls --summary``, the ``--arch``/``--kernel``
filters, ``--sort``/``--top``, ``--demangle`` and the JSON schema, against cuobjdump, c++filt and
docs/json-schema.json (an oracle written apart from the code).
"""

from __future__ import annotations

import collections
import fnmatch
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cudabuild import CUOBJDUMP, res_usage_blocks, run
from fatbin_kernels import cuobjdump, cuobjdump_list, kernels_in, system_tool
from thirdparty import CUPY12_RANDOM, CUPY13_RANDOM, CURAND13, fetch

import fatbinkit
from fatbinkit.errors import FatbinkitError, FormatError

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
REAL = {"cupy12": CUPY12_RANDOM, "cupy13": CUPY13_RANDOM, "curand13": CURAND13}


@pytest.fixture(scope="module")
def kernels_fatbin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The suite's kernels for 7 SASS and 7 PTX archs (sm_90a, sm_100f among them), in one
    fatbin built by the toolkit's fatbinary."""
    k = kernels_in(tmp_path_factory)
    out = k.root / "all.fatbin"
    if not out.exists():
        args = [f"--image3=kind=elf,sm={a.removeprefix('sm_')},file={p}"
                for a, p in k.cubins.items()]
        args += [f"--image3=kind=ptx,sm={a.removeprefix('sm_')},file={p}"
                 for a, p in k.ptx.items()]
        run([Path(system_tool("fatbinary")), "--create", out, *args])
    return out


def _inputs(kernels_fatbin: Path) -> dict[str, Path]:
    return {"kernels": kernels_fatbin, **{k: fetch(v) for k, v in REAL.items()}}


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def validate(doc: dict[str, Any], what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})
    jsonschema.validate(doc, SCHEMA)  # and exactly one of the documents


# --- filters, against cuobjdump -arch ---------------------------------------------------------

@pytest.mark.parametrize("name", ["kernels", "cupy13", "curand13"])
@pytest.mark.parametrize("arch", ["sm_75", "sm_90", "sm_100", "sm_120"])
def test_ls_arch_lists_what_cuobjdump_arch_lists(name: str, arch: str, kernels_fatbin: Path
                                                 ) -> None:
    path = _inputs(kernels_fatbin)[name]
    proc = cli("ls", path, "--arch", arch)
    oracle = [line for line in cuobjdump("-arch", arch, "-lelf", "-lptx", path).splitlines()
              if re.match(r"^(ELF|PTX) file", line)]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == oracle


def test_arch_suffix_and_compute_narrow_the_selection(kernels_fatbin: Path) -> None:
    lib = fatbinkit.open(kernels_fatbin)
    assert {(i.kind, i.arch) for i in lib.select("sm_90")} == {
        ("sass", "sm_90"), ("sass", "sm_90a"), ("ptx", "compute_90"), ("ptx", "compute_90a")}
    assert {(i.kind, i.arch) for i in lib.select("sm_90a")} == {
        ("sass", "sm_90a"), ("ptx", "compute_90a")}
    assert {(i.kind, i.arch) for i in lib.select("compute_90")} == {
        ("ptx", "compute_90"), ("ptx", "compute_90a")}
    assert [(i.kind, i.arch) for i in lib.select("compute_90a")] == [("ptx", "compute_90a")]
    assert {(i.kind, i.arch) for i in lib.select("sm_100f")} == {
        ("sass", "sm_100f"), ("ptx", "compute_100f")}
    # several filters: the union, in file order, numbered per kind as one listing
    both = lib.select(["sm_75", "compute_120"])
    assert [(i.number, i.arch) for i in both] == [
        (1, "sm_75"), (1, "compute_120"), (2, "compute_75")]


@pytest.mark.parametrize("name", ["kernels", "cupy13"])
def test_extract_arch_writes_what_cuobjdump_arch_writes(name: str, kernels_fatbin: Path,
                                                        tmp_path: Path) -> None:
    path = _inputs(kernels_fatbin)[name]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for what in ("-xelf", "-xptx"):
        subprocess.run([CUOBJDUMP, "-arch", "sm_90", what, "all", path.resolve()], cwd=theirs,
                       capture_output=True, check=False)
    proc = cli("extract", path, "-o", tmp_path / "ours", "--arch", "sm_90")
    assert proc.returncode == 0, proc.stderr
    want = {p.name: p.read_bytes() for p in theirs.iterdir()}
    assert want
    assert {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()} == want


# --- kernels: demangling, --kernel, --sort/--top, against c++filt and cuobjdump -res-usage -----

def _cxxfilt(names: list[str]) -> list[str]:
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                         text=True, check=True).stdout
    return out.splitlines()


def test_demangle_equals_cxxfilt() -> None:
    names = [n for _, u in res_usage_blocks(fetch(CUPY13_RANDOM)) for n, _ in u.functions]
    names = sorted(set(names))
    assert len(names) > 20 and any(n.startswith("_Z") for n in names)
    assert [fatbinkit.binary.demangle(n) for n in names] == _cxxfilt(names)
    # what is not a mangled name, or what the demangler refuses, stays as it is
    assert fatbinkit.binary.demangle("add_kernel") == "add_kernel"
    assert fatbinkit.binary.demangle("_ZZZ_not_a_name") == "_ZZZ_not_a_name"


@pytest.mark.parametrize("pattern", ["*uniform*", "re:^_Z11init_curand", "void execute_dist<*"])
def test_kernel_filter_selects_what_cuobjdump_names(pattern: str) -> None:
    path = fetch(CUPY13_RANDOM)
    blocks = res_usage_blocks(path)
    names = sorted({n for _, u in blocks for n, _ in u.functions})
    demangled = dict(zip(names, _cxxfilt(names), strict=True))

    def hit(n: str) -> bool:  # the documented rule, spelled with the standard library
        if pattern.startswith("re:"):
            return any(re.search(pattern[3:], x) for x in (n, demangled[n]))
        return fnmatch.fnmatchcase(n, pattern) or fnmatch.fnmatchcase(demangled[n], pattern)

    want = [(arch, n, f["REG"]) for arch, u in blocks for n, f in u.functions if hit(n)]
    assert want
    proc = cli("ls", path, "--resources", "--kernel", pattern, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "listing")
    got = [(e["arch"].replace("f", ""), f["name"], f["registers"])
           for e in doc["entries"] for f in e.get("functions", [])]
    assert got == [(a.replace("f", ""), n, r) for a, n, r in want]


def test_sort_top_is_cuobjdumps_largest() -> None:
    path = fetch(CUPY12_RANDOM)
    rows = [(f["REG"], n) for _, u in res_usage_blocks(path) for n, f in u.functions]
    proc = cli("ls", path, "--resources", "--sort", "registers", "--top", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "function_table")
    got = [f["registers"] for f in doc["functions"]]
    assert got == sorted((r for r, _ in rows), reverse=True)[:7]
    assert {f["name"] for f in doc["functions"]} <= {n for _, n in rows}
    text = cli("ls", path, "--resources", "--sort", "shared", "--top", "3", "--demangle")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 4  # header + 3
    assert "  void " in text.stdout.splitlines()[1]  # demangled signatures


# --- summaries, against cuobjdump's listing ---------------------------------------------------

@pytest.mark.parametrize("name", ["kernels", "cupy12", "cupy13", "curand13"])
def test_summary_counts_equal_cuobjdumps_listing(name: str, kernels_fatbin: Path) -> None:
    path = _inputs(kernels_fatbin)[name]
    want = collections.Counter()
    for line in cuobjdump_list(path):
        kind, arch = re.match(r"^(ELF|PTX) file .*\.(sm_\w+)\.(?:cubin|ptx)$", line).groups()
        want["sass" if kind == "ELF" else "ptx", arch] += 1
    proc = cli("ls", path, "--summary", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    validate(doc, "summary")
    got = collections.Counter()
    for row in doc["archs"]:  # cuobjdump's names drop f from ELF, keep it for PTX
        arch = row["arch"].replace("compute_", "sm_")
        got[row["kind"], arch.rstrip("f") if row["kind"] == "sass" else arch] += row["entries"]
    assert got == want
    assert doc["entries"] == sum(want.values())
    # the text says the same numbers
    text = cli("ls", path, "--summary").stdout
    assert re.match(rf"{re.escape(str(path))}: {doc['entries']} images? in {doc['modules']} "
                    rf"modules?, ", text)
    for row in doc["archs"]:
        assert re.search(rf"^  {row['kind']} +{row['arch']} +{row['entries']} ", text, re.M)


def test_summary_kernels_and_toolkit_equal_cuobjdump() -> None:
    path = fetch(CUPY13_RANDOM)
    doc = json.loads(cli("ls", path, "--summary", "--kernels", "--json").stdout)
    validate(doc, "summary")
    kernels: dict[str, set[str]] = collections.defaultdict(set)
    for arch, usage in res_usage_blocks(path):  # every function of these cubins is a kernel
        kernels[arch.rstrip("f")].update(n for n, _ in usage.functions)
    # cuobjdump -elf heads each cubin with "64-bit ELF: ..., sm=75, toolkit=13.2, ..."
    toolkits: dict[str, set[str]] = collections.defaultdict(set)
    for sm, tk in re.findall(r"^64-bit ELF: .*\bsm=(\d+), toolkit=([\d.]+)",
                             cuobjdump("-elf", path), re.M):
        toolkits[f"sm_{sm}"].add(f"CUDA {tk}")
    sass = [r for r in doc["archs"] if r["kind"] == "sass"]
    assert len(sass) == len(kernels) > 1
    for row in sass:
        arch = row["arch"].rstrip("f")
        assert row["kernels"] == len(kernels[arch])
        assert set(row["toolkits"]) == toolkits[arch]


def test_summary_generations_follow_the_loading_rules(kernels_fatbin: Path) -> None:
    s = fatbinkit.open(kernels_fatbin).summary()
    dev = {d.device: d for d in s.devices}
    assert dev["sm_70"].verdict == "none"           # nothing below sm_75
    assert dev["sm_75"].images == ("sm_75",) and dev["sm_75"].verdict == "native"
    assert dev["sm_86"].images == ("sm_80",)        # same major, lower minor: SASS runs
    assert dev["sm_90"].images == ("sm_90a",)       # the a image wins on its own arch
    assert dev["sm_103"].images == ("sm_100f",)     # family-specific: the whole 10.x family
    assert dev["sm_110"].verdict == "jit"            # compute_100f cannot JIT for 11.0:
    assert dev["sm_110"].images == ("compute_100",)  # the plain compute_100 can
    assert dev["sm_121"].images == ("sm_120",)
    assert str(s).splitlines()[0].startswith(str(kernels_fatbin))


# --- one JSON vocabulary, one schema -----------------------------------------------------------

def test_every_json_document_validates(kernels_fatbin: Path) -> None:
    path = fetch(CUPY13_RANDOM)
    for args, what in (
        ((path, "--json"), "listing"),
        ((path, "--json", "--resources", "--demangle"), "listing"),
        ((kernels_fatbin, "--json", "--all"), "listing"),
        ((kernels_fatbin, "--json", "--resources", "--top", "3"), "function_table"),
        ((kernels_fatbin, "--json", "--summary", "--kernels"), "summary"),
    ):
        proc = cli("ls", *args)
        assert proc.returncode == 0, proc.stderr
        validate(json.loads(proc.stdout), what)
    for args, what in (
        ((path, "--arch", "sm_90", "--arch", "sm_70", "--driver", "12.8"), "check"),
        ((kernels_fatbin, "--arch", "sm_90", "--arch", "sm_110", "--kernel", "add*"), "check"),
        ((path, "--min-driver"), "min_driver"),
    ):
        proc = cli("check", *args, "--json")
        assert proc.returncode in (0, 1), proc.stderr
        validate(json.loads(proc.stdout), what)


def test_listing_json_and_text_agree_on_real_libraries(kernels_fatbin: Path) -> None:
    for path in _inputs(kernels_fatbin).values():
        rows = json.loads(cli("ls", path, "--json").stdout)["entries"]
        text = cli("ls", path).stdout.splitlines()
        assert text == cuobjdump_list(path)
        assert [f"{'ELF' if r['kind'] == 'sass' else 'PTX'} file {r['number']:4d}: {r['name']}"
                for r in rows] == text
        raw = path.read_bytes()
        for r in rows:  # the offset is the entry header: kind, then the stored size at +8
            assert int.from_bytes(raw[r["offset"] : r["offset"] + 2], "little") == (
                2 if r["kind"] == "sass" else 1)
            assert int.from_bytes(raw[r["offset"] + 8 : r["offset"] + 16], "little") == \
                r["stored"]


def test_check_text_and_json_agree() -> None:
    path = fetch(CURAND13)
    args = (path, "--arch", "sm_75", "--arch", "sm_90", "--arch", "sm_61", "--driver", "13.0")
    doc = json.loads(cli("check", *args, "--json").stdout)
    validate(doc, "check")
    text = cli("check", *args).stdout
    for sm, v in doc["verdicts"].items():
        status = v["status"].upper() if v["status"] == "fails" else v["status"]
        line = next(x for x in text.splitlines() if x.startswith(f"  {sm} "))
        assert line.split()[1] == status
        assert (f"{v['sass']} SASS, {v['jit']} PTX JIT, {v['cannot']} cannot load") in line


# --- the front door ----------------------------------------------------------------------------

def test_open_takes_str_path_and_bytes(kernels_fatbin: Path) -> None:
    by_path = fatbinkit.open(kernels_fatbin)
    by_str = fatbinkit.open(str(kernels_fatbin))
    by_bytes = fatbinkit.open(kernels_fatbin.read_bytes())
    assert [(i.name, i.arch) for i in by_path.select()] == \
        [(i.name, i.arch) for i in by_str.select()]
    assert [i.arch for i in by_bytes.select()] == [i.arch for i in by_path.select()]
    assert by_bytes.summary().to_dict()["archs"] == by_path.summary().to_dict()["archs"]
    assert by_bytes.check(["sm_90"]).ok and by_path.check(["sm_90"]).ok
    assert str(by_path) == f"{kernels_fatbin}: 7 sass, 7 ptx"
    with pytest.raises(FatbinkitError, match="path"):
        fatbinkit.open(42)  # type: ignore[arg-type]
    with pytest.raises(FatbinkitError, match="not a GPU arch"):
        by_path.select("hopper")


def test_no_device_code_is_one_error_everywhere(tmp_path: Path) -> None:
    src = tmp_path / "host.c"
    src.write_text("int answer(void) { return 42; }\n")
    lib = tmp_path / "libhost.so"
    subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    oracle = subprocess.run([CUOBJDUMP, "-lelf", str(lib)], capture_output=True, text=True,
                            check=False)
    assert oracle.returncode != 0 and "does not contain device code" in oracle.stderr
    assert not fatbinkit.open(lib).codes
    for args in (("ls",), ("ls", "--summary"), ("ls", "--json"),
                 ("extract", "-o", tmp_path / "out"), ("check", "--arch", "sm_90")):
        proc = cli(args[0], lib, *args[1:])
        assert proc.returncode == 3 and proc.stdout == ""
        assert proc.stderr.startswith(f"fatbinkit: error: {lib}: does not contain device code")
    assert not (tmp_path / "out").exists()
    with pytest.raises(FormatError):
        fatbinkit.open(src)


def test_check_kernel_filter_judges_the_matching_kernels(tmp_path: Path) -> None:
    """One module whose sm_80 image has kernels a1, a2 and whose sm_90 image has b1 only (built
    from two sources, packed by fatbinkit build): on sm_90 the driver loads the sm_90 image, so
    a1 and a2 are missing there (cuModuleGetFunction: CUDA_ERROR_NOT_FOUND)."""
    from cudabuild import NVCC

    for name, src, arch in (("a", "a1() {} extern \"C\" __global__ void a2() {}", "sm_80"),
                            ("b", "b1() {}", "sm_90")):
        cu = tmp_path / f"{name}.cu"
        cu.write_text(f'extern "C" __global__ void {src}\n')
        run([NVCC, "-cubin", f"-arch={arch}", "-o", tmp_path / f"{name}.cubin", cu])
    fat = tmp_path / "ab.fatbin"
    assert cli("build", "-o", fat, "--cubin", f"sm_80={tmp_path / 'a.cubin'}",
               "--cubin", f"sm_90={tmp_path / 'b.cubin'}").returncode == 0
    # judged alone, a2 (or a1 and a2) has no image on sm_90: the module is built for other GPUs
    # as far as those kernels go; with b1 beside them, it loads and they are missing from it
    for pattern, judged, missing, elsewhere in (
            ("a2", ["a2"], [], True), ("a*", ["a1", "a2"], [], True), ("b1", ["b1"], [], False),
            ("*", ["a1", "a2", "b1"], ["a1", "a2"], False)):
        doc = json.loads(cli("check", fat, "--arch", "sm_90", "--kernel", pattern, "--strict",
                             "--json").stdout)
        validate(doc, "check")
        # a kernel filter reads every image, --strict or not: the same answer without it
        loose = json.loads(cli("check", fat, "--arch", "sm_90", "--kernel", pattern,
                               "--json").stdout)
        assert loose["modules"] == doc["modules"] and loose["every_image_read"]
        assert loose["verdicts"] == doc["verdicts"]
        (module,) = doc["modules"]
        assert [k["name"] for k in module["kernels"]] == judged
        v = doc["verdicts"]["sm_90"]
        assert [m["kernel"] for m in v["missing_kernels"]] == missing, pattern
        assert bool(v["restricted"]) == elsewhere, pattern
        assert doc["ok"] == (not missing and not elsewhere)  # --strict: all must load
    proc = cli("check", fat, "--arch", "sm_90", "--kernel", "zz*")
    assert proc.returncode == 3 and "no kernel matches zz*" in proc.stderr
    # without a filter, only the image sm_90 loads is read: the decision is the same, a1 and a2
    # are not looked for, and both outputs say so
    doc = json.loads(cli("check", fat, "--arch", "sm_90", "--json").stdout)
    assert not doc["every_image_read"] and doc["verdicts"]["sm_90"]["status"] == "works"
    assert [i["read"] for i in doc["modules"][0]["images"]] == [False, True]
    assert "kernels that only other archs' images hold are not looked for" in cli(
        "check", fat, "--arch", "sm_90").stdout


def test_the_budget_charges_each_image_read_once(kernels_fatbin: Path, tmp_path: Path) -> None:
    """fatbinary compresses the PTX and stores the cubins plain: ``ls --resources`` reads only
    cubins (nothing to inflate), ``extract --kernel`` reads each image twice (to select it, to
    write it) and must be charged once."""
    rows = json.loads(cli("ls", kernels_fatbin, "--json").stdout)["entries"]
    inflated = sum(r["uncompressed"] for r in rows if r["compression"])
    assert inflated and all(r["compression"] is None for r in rows if r["kind"] == "sass")
    assert cli("ls", kernels_fatbin, "--resources", "--max-decompressed", "0").returncode == 0
    assert cli("ls", kernels_fatbin, "--resources", "--top", "3",
               "--max-decompressed", "0").returncode == 0
    for budget, status in ((inflated, 0), (inflated - 1, 3)):
        proc = cli("extract", kernels_fatbin, "-o", tmp_path / str(budget), "--kernel", "add*",
                   "--max-decompressed", str(budget))
        assert proc.returncode == status, proc.stderr
    assert "decompression budget" in proc.stderr


def test_a_corrupt_payload_is_an_error_naming_the_file(kernels_fatbin: Path,
                                                       tmp_path: Path) -> None:
    """A payload is read after the scan (in a worker, or here): its error names the file too."""
    rows = json.loads(cli("ls", kernels_fatbin, "--json").stdout)["entries"]
    ptx = next(r for r in rows if r["kind"] == "ptx" and r["compression"] == "zstd")
    data = bytearray(kernels_fatbin.read_bytes())
    payload = ptx["offset"] + 64 + 16  # inside the zstd frame, past its header
    data[payload : payload + 64] = bytes(64)
    bad = tmp_path / "bad.fatbin"
    bad.write_bytes(bytes(data))
    assert cli("ls", bad).returncode == 0  # the listing reads headers only
    for args in (("extract", bad, "-o", tmp_path / "out"), ("ls", bad, "--kernel", "add*"),
                 ("ls", bad, "--summary", "--kernels")):
        proc = cli(*args)
        assert proc.returncode == 3, args
        assert proc.stderr.startswith(f"fatbinkit: error: {bad}: "), proc.stderr
        assert len(proc.stderr.splitlines()) == 1
