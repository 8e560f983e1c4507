"""``--everywhere`` in the read commands (issue 31): the deep scan's images stay apart from
cuobjdump's view and every command takes them into account.

The oracle for what the deep scan finds is cuobjdump on the found bytes (tests/test_hidden.py);
here the commands are checked against each other and against cuobjdump's default listing: the
default output does not change, the hidden rows come after it, the summary's figures are the
rows' sums, ``check`` judges the hidden modules, ``extract`` writes their bytes, ``diff`` and
``gate`` see their kernels. cuRAND 10.4.5.25 (cached wheel) holds 1,747 fatbin containers in
``.data`` that cuobjdump does not list.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from thirdparty import CURAND13, CURAND130, fetch

import fatbinkit
from fatbinkit.scan import scan

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())


def _valid(doc: object, what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})


def fatbinkit_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def curand() -> Path:
    return fetch(CURAND13)


@pytest.fixture(scope="module")
def listings(curand: Path) -> tuple[dict, dict]:
    plain = fatbinkit_cli("ls", curand, "--json")
    deep = fatbinkit_cli("ls", curand, "--json", "--everywhere")
    assert plain.returncode == deep.returncode == 0, plain.stderr + deep.stderr
    return json.loads(plain.stdout), json.loads(deep.stdout)


def test_default_listing_unchanged_and_hidden_rows_after_it(listings: tuple[dict, dict],
                                                            curand: Path) -> None:
    plain, deep = listings
    _valid(plain, "listing")
    _valid(deep, "listing")
    n = len(plain["entries"])
    assert deep["entries"][:n] == plain["entries"]  # cuobjdump's view first, unchanged
    hidden = deep["entries"][n:]
    assert hidden and all(r.get("hidden") is True and r["section"] == ".data" for r in hidden)
    assert not any("hidden" in r for r in plain["entries"])
    # the modules are new containers, numbered after the regular ones, in file order
    first = max(r["container"] for r in plain["entries"]) + 1
    assert min(r["container"] for r in hidden) >= first
    assert [r["offset"] for r in hidden] == sorted(r["offset"] for r in hidden)
    # each row's bytes are where it says: the entry header (kind, SM) at that file offset
    data = curand.read_bytes()
    for r in hidden[:: max(1, len(hidden) // 50)]:
        kind, sm = int.from_bytes(data[r["offset"]:][:2], "little"), \
            int.from_bytes(data[r["offset"] + 28:][:4], "little")
        assert kind == {"ptx": 1, "sass": 2}[r["kind"]]
        assert f"_{sm}" in r["arch"]


def test_text_listing_marks_hidden_rows(curand: Path, listings: tuple[dict, dict]) -> None:
    plain_text = fatbinkit_cli("ls", curand).stdout.splitlines()
    deep_text = fatbinkit_cli("ls", curand, "--everywhere").stdout.splitlines()
    assert deep_text[: len(plain_text)] == plain_text
    extra = deep_text[len(plain_text):]
    rows = listings[1]["entries"][len(listings[0]["entries"]):]
    assert len(extra) == len(rows)
    for line, r in zip(extra, rows, strict=True):
        assert line.endswith(f"(hidden: .data at {r['offset']:#x})") and r["name"] in line


def test_summary_counts_hidden_apart(curand: Path, listings: tuple[dict, dict]) -> None:
    plain_doc, deep_doc = listings
    out = fatbinkit_cli("ls", curand, "--summary", "--json", "--everywhere")
    summary = json.loads(out.stdout)
    _valid(summary, "summary")
    hidden_rows = [r for r in deep_doc["entries"] if r.get("hidden")]
    assert summary["entries"] == len(deep_doc["entries"])
    assert summary["hidden"]["images"] == len(hidden_rows)
    assert summary["hidden"]["stored"] == sum(r["stored"] for r in hidden_rows)
    assert summary["hidden"]["modules"] == len({r["container"] for r in hidden_rows})
    assert [s["section"] for s in summary["hidden"]["sections"]] == [".data"]
    plain = json.loads(fatbinkit_cli("ls", curand, "--summary", "--json").stdout)
    assert "hidden" not in plain and plain["entries"] == len(plain_doc["entries"])
    text = fatbinkit_cli("ls", curand, "--summary").stdout
    assert "not searched: --everywhere" in text
    text = fatbinkit_cli("ls", curand, "--summary", "--everywhere").stdout
    assert f"of which hidden (outside cuobjdump's view, loaded by the library itself): " \
           f"{len(hidden_rows)} images" in text


def test_api_binary_pickles_with_everywhere(curand: Path) -> None:
    with fatbinkit.open(curand, everywhere=True) as lib:
        again = pickle.loads(pickle.dumps(lib))
        assert again.everywhere and len(again.codes) == len(lib.codes)
        hidden = [c for c in lib.codes if c.hidden]
        assert [c.hidden for c in again.codes] == [c.hidden for c in lib.codes]
        one = pickle.loads(pickle.dumps(hidden[0]))
        assert one.hidden and one.data() == hidden[0].data()
        assert "(hidden)" in str(hidden[0])
    assert len(scan(curand)) == len(fatbinkit.open(curand).codes)


def test_check_judges_hidden_modules(curand: Path) -> None:
    plain = json.loads(fatbinkit_cli("check", curand, "--arch", "sm_90", "--json").stdout)
    deep = json.loads(fatbinkit_cli("check", curand, "--arch", "sm_90", "--json",
                                    "--everywhere").stdout)
    with fatbinkit.open(curand, everywhere=True) as lib:
        hidden_sets = {c.container for c in lib.codes if c.hidden}
        # a hidden module loads on sm_90 when it holds SASS sm_90 or PTX the GPU JITs
        loading = {c.container for c in lib.codes if c.hidden and (
            c.target == "sm_90" or (c.kind == "ptx" and int(c.target.split("_")[1]) <= 90))}
    p, d = plain["verdicts"]["sm_90"], deep["verdicts"]["sm_90"]
    assert d["modules"] == p["modules"] + len(hidden_sets)
    assert d["loading"] == p["loading"] + len(loading)
    assert len(d["restricted"]) == len(p["restricted"]) + len(hidden_sets - loading)


def test_extract_writes_hidden_images(curand: Path, tmp_path: Path) -> None:
    out = fatbinkit_cli("extract", curand, "-o", tmp_path, "--everywhere", "--arch", "sm_120")
    assert out.returncode == 0, out.stderr
    written = out.stdout.split()
    with fatbinkit.open(curand, everywhere=True) as lib:
        items = lib.select(arch="sm_120")
        assert len(written) == len(items) > len(fatbinkit.open(curand).select(arch="sm_120"))
        for it, path in zip(items, written, strict=True):
            assert Path(path).name == it.name
            data = it.code.data()  # PTX is written as cuobjdump writes it: without its NULs
            assert Path(path).read_bytes() == (data.rstrip(b"\0") if it.kind == "ptx" else data)


def test_diff_and_gate_see_hidden_kernels(curand: Path, tmp_path: Path) -> None:
    old = fetch(CURAND130)
    plain = json.loads(fatbinkit_cli("diff", old, curand, "--json").stdout)
    deep = json.loads(fatbinkit_cli("diff", old, curand, "--json", "--everywhere").stdout)
    count = {k: len(v) for k, v in deep.items() if isinstance(v, list)}
    assert count != {k: len(v) for k, v in plain.items() if isinstance(v, list)}
    with fatbinkit.open(curand, everywhere=True) as lib:
        names = {f.name for fs in lib.functions(lib.select(arch="sm_90")) for f in fs}
    with fatbinkit.open(curand) as lib:
        visible = {f.name for fs in lib.functions(lib.select(arch="sm_90")) for f in fs}
    assert names > visible  # the hidden modules hold kernels cuobjdump's view does not
    plain_gate = json.loads(fatbinkit_cli("gate", curand, "--require-arch", "sm_90",
                                          "--format", "json").stdout)
    gate = fatbinkit_cli("gate", curand, "--require-arch", "sm_90", "--everywhere",
                         "--format", "json", "--write-baseline", tmp_path / "base.json")
    doc = json.loads(gate.stdout)
    _valid(doc, "gate")
    assert doc["kernels"] > plain_gate["kernels"]
    base = json.loads((tmp_path / "base.json").read_text())
    _valid(base, "snapshot")
    kernels = {row[0] for lib in base["libraries"] for row in lib["kernels"]}
    assert names - visible <= kernels


def test_a_cubin_this_reader_cannot_take_is_no_find() -> None:
    """A cubin-like blob in a data section whose ELF ABI version no CUDA writes (9), bare or
    zstd-compressed, is not a find: the rest of the file is still read (it used to stop the
    whole deep scan with an UnsupportedError)."""
    import zstandard

    from fatbinkit.device_code import Place
    from fatbinkit.vendors.cuda.finding import search

    with fatbinkit.open(fetch(CURAND13), everywhere=True) as lib:
        real = next(c for c in lib.codes if c.hidden and c.kind == "sass")
        good = bytearray(real.data())
    odd = bytearray(good)
    odd[8] = 9  # EI_ABIVERSION
    for blob in (bytes(odd), zstandard.ZstdCompressor().compress(bytes(odd))):
        data = memoryview(bytes(64) + blob + bytes(64) + bytes(good) + bytes(64))
        found, _ = search(Place(".data", data, 0, 0))
        assert [c.offset for c in found] == [64 + len(blob) + 64]
