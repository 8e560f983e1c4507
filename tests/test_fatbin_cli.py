"""``fatbinkit ls/extract/build`` as a user runs them; cuobjdump is the oracle for names/bytes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fatbin_kernels import Kernels, cuobjdump_extract, cuobjdump_list, kernels_in

from fatbinkit.cli import main
from fatbinkit.formats.fatbin import align8
from fatbinkit.scan import scan


@pytest.fixture(scope="session")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    return kernels_in(tmp_path_factory)


def _build(out: Path, k: Kernels, *extra: str) -> None:
    args = ["build", "-o", str(out), "--cubin", f"sm_90={k.cubins['sm_90']}",
            "--cubin", f"sm_100f={k.cubins['sm_100f']}", "--ptx", f"sm_120={k.ptx['sm_120']}"]
    assert main([*args, *extra]) == 0


@pytest.mark.parametrize("compress", ["none", "lz4", "zstd"])
def test_build_then_ls_json(
    compress: str, kernels: Kernels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k.fatbin"
    _build(out, kernels, "--compress", compress, "--identifier", "k.cu")
    assert main(["ls", "--json", str(out)]) == 0
    rows = json.loads(capsys.readouterr().out)["entries"]
    codec = None if compress == "none" else compress
    assert [(r["kind"], r["arch"], r["compression"], r["identifier"]) for r in rows] == [
        ("sass", "sm_90", codec, "k.cu"), ("sass", "sm_100f", codec, "k.cu"),
        ("ptx", "compute_120", codec, "k.cu"),
    ]
    assert rows[0]["uncompressed"] == kernels.cubins["sm_90"].stat().st_size
    ptx_size = kernels.ptx["sm_120"].stat().st_size + 1  # NUL added
    # compressed: the exact recorded size; plain: the stored size, padded to 8
    assert rows[2]["uncompressed"] == (ptx_size if codec else align8(ptx_size))
    assert all(r["section"] is None and r["symbol"] is None and r["container"] == 0
               for r in rows)
    assert main(["ls", str(out)]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing == cuobjdump_list(out)
    # the JSON row names what the text lists, and its offset is the entry header's
    assert [f"{'ELF' if r['kind'] == 'sass' else 'PTX'} file {r['number']:4d}: {r['name']}"
            for r in rows] == listing
    data = out.read_bytes()
    assert all(int.from_bytes(data[r["offset"] + 8 : r["offset"] + 16], "little")
               == r["stored"] for r in rows)


def test_extract_selection(kernels: Kernels, tmp_path: Path) -> None:
    out = tmp_path / "k.fatbin"
    _build(out, kernels)
    assert main(["extract", "--ptx", str(out), "-o", str(tmp_path / "ptx")]) == 0
    assert [p.name for p in (tmp_path / "ptx").iterdir()] == ["k.1.sm_120.ptx"]
    assert main(["extract", "--elf", str(out), "-o", str(tmp_path / "elf")]) == 0
    assert sorted(p.name for p in (tmp_path / "elf").iterdir()) == [
        "k.1.sm_90.cubin", "k.2.sm_100.cubin"
    ]


@pytest.mark.parametrize("ident", ["../../evil.cu", "/abs/dir/x.y.cu", "dir/", "..", "a\x01b"])
def test_extract_names_cannot_escape(
    ident: str, kernels: Kernels, tmp_path: Path
) -> None:
    """Hostile identifiers: the same names as cuobjdump, all inside the output folder."""
    fatbin = tmp_path / "e.fatbin"
    _build(fatbin, kernels, "--identifier", ident)
    out = tmp_path / "deep" / "out"
    assert main(["extract", str(fatbin), "-o", str(out)]) == 0
    ours = {p.name: p.read_bytes() for p in out.iterdir()}
    everything = {p for p in tmp_path.rglob("*") if p.is_file()}
    assert everything == {fatbin, *(out / n for n in ours)}
    if "\x01" not in ident:  # cuobjdump keeps control characters; we replace them
        assert ours == cuobjdump_extract(fatbin, tmp_path / "deep" / "c")


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ls", str(tmp_path / "missing")]) == 3
    assert capsys.readouterr().err.startswith("fatbinkit: error: cannot read")
    (tmp_path / "x.cubin").write_bytes(b"nope")
    assert main(["build", "-o", str(tmp_path / "o.fatbin"), "--cubin",
                 f"sm_90={tmp_path / 'x.cubin'}"]) == 3
    assert f"{tmp_path / 'x.cubin'}: not a cubin" in capsys.readouterr().err
    assert not (tmp_path / "o.fatbin").exists()
    for usage in (["--cubin", "sm_90"], [], ["--compress", "gzip"]):  # exit 2: usage errors
        with pytest.raises(SystemExit) as info:
            main(["build", "-o", str(tmp_path / "o.fatbin"), *usage])
        assert info.value.code == 2
    assert "ARCH=PATH" in capsys.readouterr().err


def test_build_output_is_deterministic(kernels: Kernels, tmp_path: Path) -> None:
    a, b = tmp_path / "a.fatbin", tmp_path / "b.fatbin"
    _build(a, kernels, "--compress", "zstd")
    _build(b, kernels, "--compress", "zstd")
    assert a.read_bytes() == b.read_bytes()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert len(scan(a)) == 3
