"""CUDA 10 and 11 era libraries read as their era's cuobjdump (11.8, from Debian) reads them:
listings, extracted bytes and per-function resources, entry for entry.

Their PTX entries have a 72-byte header whose options pair (at offset 64) is (0, 0): no options.
Before, every one of these files was refused ("options data [0x0, +0) lies outside the 72-byte
entry header"); cuobjdump 13 refuses them too ("Support for 'sm_35' has been removed").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cudabuild import res_usage_blocks
from fatbin_kernels import cuobjdump_extract, cuobjdump_fields, cuobjdump_list
from thirdparty import (
    CUDA_TOOLKIT_118,
    CUFFT11,
    CUPY11_RANDOM,
    CUPY102_RANDOM,
    CURAND11,
    WheelMember,
    debian_tool,
    fetch,
)

from fatbinkit.cli import main
from fatbinkit.formats.cubin import Cubin
from fatbinkit.formats.fatbin import EntryKind
from fatbinkit.scan import listed, scan

MEMBERS = {"cupy102": CUPY102_RANDOM, "cupy11": CUPY11_RANDOM, "curand11": CURAND11,
           "cufft11": CUFFT11}
# lowest SASS/PTX arch of each: what makes cuobjdump 13 give up on them
OLDEST = {"cupy102": "sm_30", "cupy11": "sm_35", "curand11": "sm_35", "cufft11": "sm_35"}


@pytest.fixture(scope="module")
def cuobjdump118() -> Path:
    return debian_tool(CUDA_TOOLKIT_118, "cuobjdump")


def _path(name: str) -> Path:
    member: WheelMember = MEMBERS[name]
    return fetch(member)


@pytest.mark.parametrize("name", MEMBERS)
@pytest.mark.parametrize("all_", [False, True])
def test_listing_matches_cuobjdump_118(name: str, all_: bool, cuobjdump118: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = _path(name)
    expected = cuobjdump_list(path, all=all_, tool=cuobjdump118)
    assert len(expected) >= 7 and any(OLDEST[name] in line for line in expected)
    assert main(["ls", *(["--all"] if all_ else []), str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.parametrize("name", MEMBERS)
def test_kinds_archs_and_codec_match_cuobjdump_118(name: str, cuobjdump118: Path) -> None:
    blocks = cuobjdump_fields(_path(name), tool=cuobjdump118)
    entries = [c.entry for c in listed(scan(_path(name)))]
    assert [(b["kind"], b["arch"], "compressed" in b) for b in blocks] == [
        ("elf" if e.kind == EntryKind.ELF else "ptx", e.arch.sm, e.compression is not None)
        for e in entries]
    ptx = [e for e in entries if e.kind == EntryKind.PTX]
    assert ptx and {e.header.header_size for e in ptx} == {72}  # the era's PTX header
    assert {e.options_data for e in ptx} == {b""}


@pytest.mark.parametrize("name", MEMBERS)
def test_extract_matches_cuobjdump_118(name: str, cuobjdump118: Path, tmp_path: Path) -> None:
    path = _path(name)
    expected = cuobjdump_extract(path, tmp_path / "cuobjdump", tool=cuobjdump118)
    assert main(["extract", str(path), "-o", str(tmp_path / "ours")]) == 0
    ours = {p.name: p.read_bytes() for p in (tmp_path / "ours").iterdir()}
    assert sorted(ours) == sorted(expected)
    assert ours == expected


@pytest.mark.parametrize("name", MEMBERS)
def test_resources_match_cuobjdump_118(name: str, cuobjdump118: Path) -> None:
    path = _path(name)
    oracle = res_usage_blocks(path, cuobjdump118)
    cubins = [c.entry for c in listed(scan(path)) if c.entry.header.kind == EntryKind.ELF]
    assert len(cubins) >= 4 and [arch for arch, _ in oracle] == [e.arch.sm for e in cubins]
    for (_, usage), entry in zip(oracle, cubins, strict=True):
        cubin = Cubin.from_bytes(entry.data())
        ours = [(f.name, {"REG": f.registers, "STACK": f.stack, "SHARED": f.shared,
                          "LOCAL": f.local,
                          **{f"CONSTANT[{b}]": s for b, s in f.constant.items()},
                          "TEXTURE": f.texture, "SURFACE": f.surface, "SAMPLER": f.sampler})
                for f in cubin.functions]
        assert ours == usage.functions


def test_check_on_kepler_names_the_driver_that_dropped_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    """CUDA 11 CuPy carries sm_35 SASS: it loads on a Kepler GPU under a CUDA 11.4 driver (R470,
    the last for Kepler) and under no newer one; the sm_90 SASS loads on 13.0."""
    path = str(_path("cupy11"))
    assert main(["check", path, "--arch", "sm_35", "--arch", "sm_90", "--driver", "11.4"]) == 1
    out = capsys.readouterr().out  # sm_90 needs 11.8: 11.4 cannot drive an H100
    assert "sm_35  works" in out and "sm_90  FAILS" in out
    assert main(["check", path, "--arch", "sm_35", "--driver", "11.4"]) == 0
    capsys.readouterr()
    assert main(["check", path, "--arch", "sm_35", "--arch", "sm_90", "--driver", "13.0"]) == 1
    out = capsys.readouterr().out
    assert "sm_90  works" in out
    assert ("[device floor] a driver for CUDA 13.0 no longer drives sm_35 GPUs: the last is CUDA "
            "11.4 (NVIDIA ended Kepler support with R470)") in out
