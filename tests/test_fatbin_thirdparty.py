"""Real libraries from the package registry (CuPy for CUDA 12: LZ4, for CUDA 13: zstd; cuRAND):
listings and extracted bytes agree with cuobjdump entry for entry, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fatbin_kernels import cuobjdump_extract, cuobjdump_fields, cuobjdump_list
from thirdparty import CUPY12_RANDOM, CUPY13_RANDOM, CURAND13, WheelMember, fetch

from fatbinkit.cli import main
from fatbinkit.formats.fatbin import EntryKind, Fatbin
from fatbinkit.scan import listed, scan

MEMBERS = {"cupy12": CUPY12_RANDOM, "cupy13": CUPY13_RANDOM, "curand13": CURAND13}
CODEC = {"cupy12": "lz4", "cupy13": "zstd", "curand13": "zstd"}


def _path(name: str) -> Path:
    member: WheelMember = MEMBERS[name]
    return fetch(member)


@pytest.mark.parametrize("name", MEMBERS)
@pytest.mark.parametrize("all_", [False, True])
def test_listing_matches_cuobjdump(
    name: str, all_: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _path(name)
    expected = cuobjdump_list(path, all=all_)
    assert len(expected) >= 8
    assert main(["ls", *(["--all"] if all_ else []), str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.parametrize("name", MEMBERS)
def test_fields_and_codec_match_cuobjdump(name: str) -> None:
    path = _path(name)
    blocks = cuobjdump_fields(path)
    entries = [c.entry for c in listed(scan(path))]
    assert [(b["kind"], b["arch"], "compressed" in b) for b in blocks] == [
        ("elf" if e.kind == EntryKind.ELF else "ptx", e.arch.sm, e.compression is not None)
        for e in entries
    ]
    assert CODEC[name] in {e.compression for e in entries}


@pytest.mark.parametrize("name", MEMBERS)
def test_extract_matches_cuobjdump(name: str, tmp_path: Path) -> None:
    path = _path(name)
    expected = cuobjdump_extract(path, tmp_path / "cuobjdump")
    assert main(["extract", str(path), "-o", str(tmp_path / "ours")]) == 0
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    assert sorted(ours) == sorted(expected)
    assert ours == expected


@pytest.mark.parametrize("name", MEMBERS)
def test_sections_round_trip(name: str) -> None:
    """Re-serialising every container reproduces the section bytes exactly."""
    from elftools.elf.elffile import ELFFile

    path = _path(name)
    with open(path, "rb") as f:
        data = ELFFile(f).get_section_by_name(".nv_fatbin").data()
    assert Fatbin.from_bytes(data).to_bytes() == data


def test_json_listing(capsys: pytest.CaptureFixture[str]) -> None:
    path = _path("cupy13")
    assert main(["ls", "--json", str(path)]) == 0
    rows = json.loads(capsys.readouterr().out)["entries"]
    blocks = cuobjdump_fields(path)
    assert len(rows) == len(blocks)
    for row, block in zip(rows, blocks, strict=True):
        assert set(row) == {
            "number", "name", "kind", "arch", "member", "section", "symbol", "container", "offset",
            "compression", "stored", "uncompressed", "identifier", "vendor", "ptx_version",
        }
        assert row["vendor"] == "cuda"
        assert row["section"] == ".nv_fatbin" and row["symbol"] is None
        kind = "elf" if row["kind"] == "sass" else row["kind"]
        assert (kind, row["arch"].replace("compute_", "sm_")) == (block["kind"], block["arch"])
        assert row["compression"] in ("zstd", None)
        assert row["stored"] % 8 == 0 and row["uncompressed"] > 0
    assert [r["container"] for r in rows] == sorted(r["container"] for r in rows)


@pytest.mark.parametrize("name", MEMBERS)
def test_section_table_matches_pyelftools(name: str) -> None:
    """The scanner's own section-header reader agrees with pyelftools on real libraries."""
    from elftools.elf.elffile import ELFFile

    from fatbinkit.formats.elf import sections as elf_sections
    from fatbinkit.formats.fatbin import Reader

    path = _path(name)
    with open(path, "rb") as f:
        expected = [
            (s.name, s["sh_offset"], s["sh_size"], s["sh_addr"]) for s in ELFFile(f).iter_sections()
        ]
        sections = elf_sections(Reader(memoryview(path.read_bytes()), f.fileno()))
    assert [(s.name, s.header.offset, s.header.size, s.header.addr) for s in sections] == expected
