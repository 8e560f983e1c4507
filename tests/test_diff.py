"""``fatbinkit diff`` and ``fatbinkit gate`` on a library built by nvcc in two versions.

tests/data/diff_lib.cu, built as v1 (sm_80, sm_90, compute_90) and v2 (-DV2: sm_90 and
compute_90 only): `regs` gets more registers, `spiller` spills, `renamed_v1` becomes
`renamed_v2`, scale<double> is added, sm_80 is dropped. The oracles: `cuobjdump -res-usage` of
both libraries for every figure it prints, and `ptxas -v` (printed while nvcc builds them) for
spills. Exit codes are the CLI's contract: 0 pass, 1 a rule failed, 2 usage, 3 an error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from cudabuild import NVCC, res_usage_blocks, run

DATA = Path(__file__).resolve().parent / "data"
V1_ARCHS = ["-gencode", "arch=compute_80,code=sm_80",
            "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
V2_ARCHS = ["-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
CUOBJDUMP_FIELDS = {"REG": "registers", "STACK": "stack", "SHARED": "shared", "LOCAL": "local"}


@dataclass(frozen=True)
class Lib:
    path: Path
    ptxas: dict[tuple[str, str], tuple[int, int]]  # (kernel, sm_XX) -> spill stores, loads


def _ptxas_spills(log: str) -> dict[tuple[str, str], tuple[int, int]]:
    out = {}
    for part in log.split("Compiling entry function ")[1:]:
        m = re.match(r"'([^']+)' for '(sm_\w+)'", part)
        s = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", part)
        assert m and s, part[:300]
        out[m.group(1), m.group(2)] = (int(s.group(1)), int(s.group(2)))
    return out


def _build(root: Path, name: str, archs: list[str], *defines: str) -> Lib:
    out = root / name
    proc = run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v", *archs, *defines,
                "-o", out, DATA / "diff_lib.cu"])
    return Lib(out, _ptxas_spills(proc.stdout + proc.stderr))


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Lib, Lib]:
    root = tmp_path_factory.mktemp("diff")
    return _build(root, "libv1.so", V1_ARCHS), _build(root, "libv2.so", V2_ARCHS, "-DV2")


def fatbinkit(*args: str | Path | int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False)


def diff_json(*args: str | Path) -> dict[str, Any]:
    proc = fatbinkit("diff", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _res_usage(path: Path) -> dict[tuple[str, str, int], dict[str, int]]:
    """(function, arch, n-th occurrence) -> cuobjdump's figures in our field names."""
    out: dict[tuple[str, str, int], dict[str, int]] = {}
    for arch, usage in res_usage_blocks(path):
        for name, fields in usage.functions:
            n = sum(1 for key in out if key[:2] == (name, arch))
            row = {CUOBJDUMP_FIELDS.get(k, k.lower()): v for k, v in fields.items()
                   if k in CUOBJDUMP_FIELDS or k.startswith("CONSTANT")}
            out[name, arch, n] = row
    return out


def test_diff_reports_exactly_the_changes(libs: tuple[Lib, Lib]) -> None:
    v1, v2 = libs
    doc = diff_json(v1.path, v2.path)
    added = {(k["kernel"], k["arch"]) for k in doc["added"]}
    removed = {(k["kernel"], k["arch"]) for k in doc["removed"]}
    old_kernels = ["regs", "spiller", "stable", "renamed_v1", "_Z5scaleIfEvPT_S0_i"]
    assert added == {("renamed_v2", "sm_90"), ("renamed_v2", "compute_90"),
                     ("_Z5scaleIdEvPT_S0_i", "sm_90"), ("_Z5scaleIdEvPT_S0_i", "compute_90")}
    assert removed == ({(k, "sm_80") for k in old_kernels}
                       | {("renamed_v1", "sm_90"), ("renamed_v1", "compute_90")})
    # sm_80 was lost by kernels that are still there; renamed_v1 is simply gone
    lost = {(k["kernel"], k["arch"]) for k in doc["removed"] if k["lost_arch"]}
    assert lost == {(k, "sm_80") for k in old_kernels if k != "renamed_v1"}
    changed = {(c["kernel"], c["arch"]) for c in doc["changed"]}
    assert changed == {("regs", "sm_90"), ("spiller", "sm_90")}
    fields = {(c["kernel"], c["field"]) for c in doc["changed"]}
    assert {("regs", "registers"), ("spiller", "registers"), ("spiller", "spill_stores"),
            ("spiller", "spill_loads"), ("spiller", "stack")} <= fields
    regs = next(c for c in doc["changed"] if c["kernel"] == "regs" and c["field"] == "registers")
    assert regs["new"] > regs["old"] and regs["regression"]
    assert doc["coverage"] == [{"library": "libv2.so", "kind": "sass", "arch": "sm_80",
                                "change": "removed", "regression": True}]
    # stable and scale<float> on sm_90; the four kernels kept in the PTX (no figures to differ)
    assert doc["summary"]["unchanged"] == 6


def test_numbers_equal_cuobjdump_and_ptxas(libs: tuple[Lib, Lib]) -> None:
    from fatbinkit.diff import snapshot

    for lib in libs:
        oracle = _res_usage(lib.path)
        (library,) = snapshot(lib.path).libraries
        sass = [k for k in library.kernels if k.kind == "sass"]
        assert {(k.kernel, k.arch, k.instance) for k in sass} == set(oracle)
        for k in sass:
            want = oracle[k.kernel, k.arch, k.instance]
            got = {"registers": k.registers, "stack": k.stack, "shared": k.shared,
                   "local": k.local,
                   **{f"constant[{b}]": s for b, s in k.constant.items()}}
            assert got == want, (k, want)
            assert (k.spill_stores, k.spill_loads) == lib.ptxas[k.kernel, k.arch], k
    v1, v2 = libs
    doc = diff_json(v1.path, v2.path)
    before, after = _res_usage(v1.path), _res_usage(v2.path)
    for c in doc["changed"]:
        key = (c["kernel"], c["arch"], c["instance"])
        if c["field"] in CUOBJDUMP_FIELDS.values() or c["field"].startswith("constant"):
            assert (c["old"], c["new"]) == (before[key][c["field"]], after[key][c["field"]])
        elif c["field"].startswith("spill"):
            i = 0 if c["field"] == "spill_stores" else 1
            pair = (c["kernel"], c["arch"])
            assert (c["old"], c["new"]) == (v1.ptxas[pair][i], v2.ptxas[pair][i])
    spills = {c["field"]: (c["old"], c["new"]) for c in doc["changed"]
              if c["kernel"] == "spiller" and c["field"].startswith("spill")}
    assert spills["spill_stores"][0] == 0 and spills["spill_stores"][1] > 0


def test_text_summary_and_filters(libs: tuple[Lib, Lib]) -> None:
    v1, v2 = libs
    proc = fatbinkit("diff", v1.path, v2.path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{v1.path} -> {v2.path}"
    assert "4 added, 7 removed, 2 changed, 6 unchanged" in proc.stdout
    assert "worst regressions:" in proc.stdout
    assert "scale<double>(double*, double, int)" in proc.stdout  # demangled in text
    assert "_Z5scaleIdEvPT_S0_i" in fatbinkit("diff", v1.path, v2.path, "--mangled").stdout
    only = diff_json(v1.path, v2.path, "--only", "regressions")
    assert only["added"] == [] and {k["kernel"] for k in only["removed"]} == {
        "regs", "spiller", "stable", "_Z5scaleIfEvPT_S0_i"}
    assert all(c["regression"] for c in only["changed"])
    by_kernel = diff_json(v1.path, v2.path, "--kernel", "spill*", "--arch", "sm_90")
    assert {c["kernel"] for c in by_kernel["changed"]} == {"spiller"}
    assert by_kernel["added"] == [] and by_kernel["removed"] == []
    ptx = diff_json(v1.path, v2.path, "--arch", "compute_90")
    assert {k["arch"] for k in ptx["added"] + ptx["removed"]} == {"compute_90"}


def test_identical_inputs_give_no_change(libs: tuple[Lib, Lib]) -> None:
    v1, _ = libs
    doc = diff_json(v1.path, v1.path)
    assert (doc["added"], doc["removed"], doc["changed"]) == ([], [], [])
    proc = fatbinkit("diff", v1.path, v1.path, "--exit-code")
    assert proc.returncode == 0 and "no change" in proc.stdout
    assert fatbinkit("diff", v1.path, libs[1].path, "--exit-code").returncode == 1


def gate(*args: str | Path | int) -> subprocess.CompletedProcess[str]:
    return fatbinkit("gate", *args)


def test_gate_rules(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, v2 = libs
    limit = max(k.registers or 0 for k in _kernels(v2.path) if k.kernel == "regs")
    proc = gate(v2.path, "--max-registers", limit - 1)
    assert proc.returncode == 1
    assert f"{v2.path}: regs (sm_90): {limit} registers > {limit - 1} [max-registers]" in \
        proc.stdout
    # spills: v1 has none, v2's spiller spills (ptxas -v says so)
    assert gate(v1.path, "--no-spills").returncode == 0
    proc = gate(v2.path, "--no-spills")
    assert proc.returncode == 1 and "spiller (sm_90): spills" in proc.stdout
    assert proc.stdout.count("[no-spills]") == 1
    # archs: v1 has sm_80 SASS (runs on sm_86); v2's compute_90 PTX cannot JIT for sm_80
    assert gate(v1.path, "--require-arch", "sm_86", "--require-arch", "sm_90").returncode == 0
    assert gate(v2.path, "--require-arch", "sm_120").returncode == 0  # PTX floor JIT
    proc = gate(v2.path, "--require-arch", "sm_80")
    assert proc.returncode == 1
    assert proc.stdout.count("[require-arch]") == 6  # every kernel of the library
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in proc.stdout
    # drivers: cubins built by CUDA 13 need a 13.x driver
    assert gate(v1.path, "--max-min-driver", "13.0").returncode == 0
    proc = gate(v1.path, "--max-min-driver", "12.8")
    assert proc.returncode == 1 and "need driver (CUDA) 13.0 > 12.8" in proc.stdout
    assert gate(v1.path, "--require-arch", "sm_90", "--driver", "12.8").returncode == 1
    # size: the sum of stored device code, per arch or in total
    from fatbinkit.diff import snapshot

    (lib,) = snapshot(v1.path).libraries
    total = sum(a.stored for a in lib.archs)
    # sm_90 selects SASS and PTX of SM 9.0, as ls --arch does
    sm90 = sum(a.stored for a in lib.archs if a.arch in ("sm_90", "compute_90"))
    assert gate(v1.path, "--max-size", total).returncode == 0
    assert gate(v1.path, "--max-size", total - 1).returncode == 1
    assert gate(v1.path, "--max-size", f"sm_90={sm90}").returncode == 0
    proc = gate(v1.path, "--max-size", f"sm_90={sm90 - 1}")
    assert proc.returncode == 1 and f"({sm90} bytes)" in proc.stdout


def _kernels(path: Path) -> tuple[Any, ...]:
    from fatbinkit.diff import snapshot

    (lib,) = snapshot(path).libraries
    return lib.kernels


def test_baseline_ratchet(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, v2 = libs
    base = tmp_path / "base.json"
    proc = gate(v1.path, "--write-baseline", base)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(base.read_text())["format"] == "fatbinkit-snapshot/1"
    assert gate(v1.path, "--baseline", base).returncode == 0  # the same build passes
    proc = gate(v2.path, "--baseline", base)
    assert proc.returncode == 1
    text = proc.stdout
    assert "regs (sm_90): registers" in text and "[baseline:registers]" in text
    assert "spiller (sm_90): spill_stores 0 ->" in text and "[baseline:spill_stores]" in text
    assert "stable (sm_80): lost its sm_80 image (kept for other archs) [baseline:lost-arch]" \
        in text
    assert "no SASS for sm_80 any more [baseline:lost-coverage]" in text
    assert "renamed_v1" not in text  # removed or renamed kernels are not regressions
    # a tolerance lets the register rise pass; the spills and the lost arch still fail
    rise = next(k.registers for k in _kernels(v2.path) if k.kernel == "regs") - next(
        k.registers for k in _kernels(v1.path) if k.kernel == "regs" and k.arch == "sm_90")
    tolerant = gate(v2.path, "--baseline", base, "--tolerance", f"registers={rise}")
    assert tolerant.returncode == 1 and "regs (sm_90): registers" not in tolerant.stdout
    assert "spiller (sm_90): registers" not in tolerant.stdout  # 96 -> 32: a fall
    # GitHub annotations, one per violation
    gh = gate(v2.path, "--baseline", base, "--format", "github")
    errors = [line for line in gh.stdout.splitlines() if line.startswith("::error ")]
    assert errors and len(errors) == text.count("[baseline:")
    assert all(line.startswith(f"::error file={v2.path},title=fatbinkit gate%3A baseline%3A")
               for line in errors)
    doc = json.loads(gate(v2.path, "--baseline", base, "--format", "json").stdout)
    assert not doc["ok"] and {v["rule"] for v in doc["violations"]} == {
        "baseline:registers", "baseline:stack", "baseline:spill_stores", "baseline:spill_loads",
        "baseline:lost-arch", "baseline:lost-coverage"}
    assert {"file", "library", "kernel", "arch", "value", "limit"} <= set(doc["violations"][0])


def test_gate_usage_errors(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, _ = libs
    assert gate(v1.path).returncode == 2  # nothing to check
    assert gate(v1.path, "--max-registers", "0").returncode == 2
    assert gate(v1.path, "--driver", "12.8", "--no-spills").returncode == 2
    assert gate(v1.path, "--baseline", v1.path, "--tolerance", "size=3").returncode == 2
    assert gate(v1.path, "--max-size", "sm_99x=3").returncode == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something else"}')
    proc = gate(v1.path, "--baseline", bad)
    assert proc.returncode == 3 and f"{bad}: not a fatbinkit snapshot" in proc.stderr


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def test_wheels_and_folders(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, v2 = libs
    # two releases: the library's soname version and the extension's ABI tag change
    old = _wheel(tmp_path / "pkg-1.0-py3-none-any.whl", {
        "pkg/lib/libfoo.so.1": v1.path.read_bytes(), "pkg/README": b"x" * 100,
        "pkg/_ext.cpython-311-x86_64-linux-gnu.so": v1.path.read_bytes()})
    new = _wheel(tmp_path / "pkg-2.0-py3-none-any.whl", {
        "pkg/lib/libfoo.so.2": v2.path.read_bytes(),
        "pkg/_ext.cpython-312-x86_64-linux-gnu.so": v2.path.read_bytes()})
    doc = diff_json(old, new)
    assert doc["libraries"]["compared"] == [
        {"old": "pkg/_ext.cpython-311-x86_64-linux-gnu.so",
         "new": "pkg/_ext.cpython-312-x86_64-linux-gnu.so"},
        {"old": "pkg/lib/libfoo.so.1", "new": "pkg/lib/libfoo.so.2"}]
    single = diff_json(v1.path, v2.path)
    assert len(doc["added"]) == 2 * len(single["added"])
    assert len(doc["changed"]) == 2 * len(single["changed"])
    # folders: the same, matched by relative path; symbolic links are not counted twice
    for side, lib in (("a", v1), ("b", v2)):
        (tmp_path / side / "lib").mkdir(parents=True)
        (tmp_path / side / "lib" / "libfoo.so").write_bytes(lib.path.read_bytes())
        (tmp_path / side / "lib" / "libfoo.so.1").symlink_to("libfoo.so")
    folders = diff_json(tmp_path / "a", tmp_path / "b")
    assert folders["libraries"]["compared"] == [{"old": "lib/libfoo.so", "new": "lib/libfoo.so"}]
    assert len(folders["changed"]) == len(single["changed"])
    # gate reads wheels too: the library inside is named
    proc = gate(new, "--no-spills")
    assert proc.returncode == 1 and f"{new}: pkg/lib/libfoo.so.2: spiller (sm_90)" in proc.stdout


def test_bad_inputs_name_the_file(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, _ = libs
    host = tmp_path / "host.so"
    run(["gcc", "-shared", "-fPIC", "-x", "c", "-", "-o", host], input="int f(void){return 1;}")
    proc = fatbinkit("diff", host, v1.path)
    assert proc.returncode == 3 and f"{host}: does not contain device code" in proc.stderr
    cut = tmp_path / "cut.so"
    cut.write_bytes(v1.path.read_bytes()[: v1.path.stat().st_size // 3])
    proc = fatbinkit("diff", v1.path, cut)
    assert proc.returncode == 3 and proc.stderr.startswith(f"fatbinkit: error: {cut}")
    assert "Traceback" not in proc.stderr
    empty = _wheel(tmp_path / "empty-1.0-py3-none-any.whl", {"empty/__init__.py": b"#" * 80})
    proc = fatbinkit("diff", empty, v1.path)
    assert proc.returncode == 3
    assert f"{empty}: this wheel holds no ELF, PE, fatbin or ar archive file" in proc.stderr
    hostonly = _wheel(tmp_path / "host-1.0-py3-none-any.whl", {"h/host.so": host.read_bytes()})
    proc = fatbinkit("gate", hostonly, "--no-spills")
    assert proc.returncode == 3 and f"{hostonly}: does not contain device code" in proc.stderr
    notzip = tmp_path / "broken-1.0-py3-none-any.whl"
    notzip.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    proc = fatbinkit("diff", notzip, v1.path)
    assert proc.returncode == 3 and str(notzip) in proc.stderr and "Traceback" not in \
        proc.stderr


def test_json_documents_validate_against_the_schema(libs: tuple[Lib, Lib],
                                                    tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((DATA.parent.parent / "docs" / "json-schema.json").read_text())

    def validate(doc: Any, what: str) -> None:
        jsonschema.validate(doc, {"$defs": schema["$defs"], "$ref": f"#/$defs/{what}"})
        jsonschema.validate(doc, schema)  # and exactly one of the documents

    v1, v2 = libs
    validate(diff_json(v1.path, v2.path), "diff")
    validate(diff_json(v1.path, v2.path, "--only", "regressions"), "diff")
    base = tmp_path / "base.json"
    proc = gate(v1.path, "--write-baseline", base, "--no-spills", "--format", "json")
    validate(json.loads(proc.stdout), "gate")
    validate(json.loads(base.read_text()), "snapshot")
    proc = gate(v2.path, "--baseline", base, "--require-arch", "sm_80", "--max-size", "1K",
                "--max-min-driver", "12.0", "--max-registers", "8", "--format", "json")
    doc = json.loads(proc.stdout)
    validate(doc, "gate")
    assert {v["rule"].partition(":")[0] for v in doc["violations"]} == {
        "baseline", "require-arch", "max-size", "max-min-driver", "max-registers"}


def test_snapshot_round_trip(libs: tuple[Lib, Lib]) -> None:
    from fatbinkit.diff import Snapshot, diff, snapshot

    for lib in libs:
        snap = snapshot(lib.path)
        back = Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))
        assert back == snap
        assert diff(back, snap).empty


@pytest.mark.parametrize("damage", [
    lambda d: d["libraries"][0]["kernels"][0].__setitem__(5, "many"),   # registers not a count
    lambda d: d["libraries"][0]["kernels"][0].__setitem__(2, float("inf")),
    lambda d: d["libraries"][0]["kernels"][0].pop(),                     # a column short
    lambda d: d["libraries"][0].__setitem__("columns", ["arch", "kernel"]),
    lambda d: d["libraries"][0]["archs"][0].__setitem__("min_driver", "12.x"),
    lambda d: d["libraries"][0]["archs"][0].__setitem__("arch", 5),
    lambda d: d["libraries"][0]["modules"][0].__setitem__("sass", ["tpu90a"]),
    lambda d: d.__setitem__("libraries", {"a": 1}),
    lambda d: d.__setitem__("libraries", "[]"),
])
def test_malformed_baseline_is_a_clear_error(libs: tuple[Lib, Lib], tmp_path: Path,
                                             damage: Any) -> None:
    v1, _ = libs
    base = tmp_path / "base.json"
    assert gate(v1.path, "--write-baseline", base).returncode == 0
    doc = json.loads(base.read_text())
    damage(doc)
    base.write_text(json.dumps(doc))
    proc = gate(v1.path, "--baseline", base)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"fatbinkit: error: {base}: malformed snapshot")


def test_deeply_nested_baseline(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    base = tmp_path / "deep.json"
    base.write_text("[" * 100000 + "]" * 100000)
    proc = gate(libs[0].path, "--baseline", base)
    assert proc.returncode == 3 and f"{base}: not JSON" in proc.stderr


def test_library_pairing_keys() -> None:
    from fatbinkit.collection import member_key

    assert member_key("nvidia/cu13/lib/libcublasLt.so.13") == "nvidia/cu13/lib/libcublasLt.so"
    assert member_key("torch/lib/libgomp-a34b3233.so.1") == "torch/lib/libgomp.so"
    assert member_key("cupy/_core/core.cpython-311-x86_64-linux-gnu.so") == "cupy/_core/core.so"
    assert member_key("x/_C.abi3.so") == "x/_C.so"


def test_wheel_members_that_cannot_be_read(libs: tuple[Lib, Lib], tmp_path: Path) -> None:
    v1, _ = libs
    data = v1.path.read_bytes()
    # a member compressed with LZMA whose data is damaged: a clear error naming it
    lz = tmp_path / "lz-1.0-py3-none-any.whl"
    with zipfile.ZipFile(lz, "w", zipfile.ZIP_LZMA) as z:
        z.writestr("p/libk.so", data)
    raw = bytearray(lz.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 64] = b"\xff" * 64
    lz.write_bytes(bytes(raw))
    proc = fatbinkit("gate", lz, "--no-spills")
    assert proc.returncode == 3 and str(lz) in proc.stderr and "Traceback" not in proc.stderr
    # a bomb: declared far larger than its compressed bytes could honestly hold
    bomb = _wheel(tmp_path / "bomb-1.0-py3-none-any.whl",
                  {"p/libk.so": data[:64] + b"\0" * (400 << 20)})
    proc = fatbinkit("gate", bomb, "--no-spills")
    assert proc.returncode == 3 and "more than the" in proc.stderr


def test_gate_inputs_with_one_library_name_and_a_baseline(libs: tuple[Lib, Lib],
                                                          tmp_path: Path) -> None:
    v1, _ = libs
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "libx.so").write_bytes(v1.path.read_bytes())
    a, b = tmp_path / "a" / "libx.so", tmp_path / "b" / "libx.so"
    assert gate(a, b, "--no-spills").returncode == 0  # absolute rules: fine
    base = tmp_path / "base.json"
    proc = gate(a, b, "--write-baseline", base)
    assert proc.returncode == 0
    proc = gate(a, b, "--baseline", base)
    assert proc.returncode == 3 and "two libraries are named libx.so" in proc.stderr


def test_images_read_once_across_the_two_sides(libs: tuple[Lib, Lib],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import fatbinkit.diff as fd

    v1, v2 = libs
    fresh = [fd.snapshot(v1.path), fd.snapshot(v2.path)]
    calls: list[int] = []
    real = fd._outline
    monkeypatch.setattr(fd, "_outline", lambda code: calls.append(1) or real(code))
    again = fd.snapshot(v1.path, like=fresh[0])
    assert again == fresh[0] and calls == []  # every image known: none inflated or parsed
    other = fd.snapshot(v2.path, like=fresh[0])
    assert other == fresh[1] and len(calls) == sum(
        1 for it in fatbinkit_open(v2.path).select() if it.kind in ("sass", "ptx"))


def fatbinkit_open(path: Path) -> Any:
    import fatbinkit

    return fatbinkit.open(path)


def test_images_taken_from_the_other_side_are_placed_in_this_file(libs: tuple[Lib, Lib],
                                                                 tmp_path: Path) -> None:
    """The same fatbin as a bare file and inside the library (objcopy takes it out): every
    image is taken from the library's snapshot, and the modules gate decides with equal
    :func:`fatbinkit.compat.image_sets` of the bare file (labels and offsets of this file)."""
    from fatbinkit.compat import image_sets
    from fatbinkit.diff import snapshot

    v1, _ = libs
    bare = tmp_path / "v1.fatbin"
    run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", v1.path, bare])
    old = snapshot(v1.path)
    (lib,) = snapshot(bare, like=old).libraries
    assert lib.sets == image_sets(bare)
    assert lib.kernels == tuple(replace(k, library="v1.fatbin")
                                for k in old.libraries[0].kernels)


@pytest.mark.parametrize(("old", "new", "regression"), [
    ((0, 0, 11), (0, 0, 13), False),  # no code for the GPU before or after (cuRAND 13's sm_50)
    ((11, 0, 0), (13, 0, 0), False),  # native, more modules
    ((11, 0, 0), (11, 0, 2), True),   # native -> partial
    ((5, 0, 2), (5, 0, 3), True),     # partial, one more module that cannot load
    ((5, 0, 2), (6, 0, 1), False),    # partial, fewer
    ((0, 4, 0), (4, 0, 0), False),    # jit -> native
    ((4, 0, 0), (0, 4, 0), True),     # native -> jit
    ((4, 0, 0), (0, 0, 4), True),     # native -> none
])
def test_device_regressions(old: tuple[int, int, int], new: tuple[int, int, int],
                            regression: bool) -> None:
    """A GPU regresses when its verdict gets worse or more modules hold nothing for it where
    some loaded before; modules added to a library that never had code for it are not one."""
    from fatbinkit.binary import DeviceSummary
    from fatbinkit.diff import DeviceChange

    def summary(counts: tuple[int, int, int]) -> DeviceSummary:
        return DeviceSummary("sm_50", "Maxwell", *counts, ())

    assert DeviceChange("lib.so", summary(old), summary(new)).regression is regression
