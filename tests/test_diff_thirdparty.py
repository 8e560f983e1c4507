"""``fatbinkit diff`` on real libraries from the package registry, against cuobjdump.

Three pairs: two releases of one package (cuRAND 10.4.0.35, built by CUDA 13.0, and 10.4.5.25,
by CUDA 13.4: archs and kernels come and go), the same CuPy module for CUDA 12 and CUDA 13, and
cuRAND for CUDA 11 and CUDA 13. The oracle is the pipeline a user would otherwise script: the
two ``cuobjdump -res-usage`` listings, each function keyed by (name, arch, n-th occurrence of
that name for that arch in file order), compared figure by figure. The added, removed and
changed SASS images that ``fatbinkit diff --json`` reports, restricted to the figures cuobjdump
prints, must be exactly those sets.

cuobjdump 13 refuses the CUDA 11 cuRAND ("Support for 'sm_35' has been removed"): its listing
comes from cuobjdump 11.8 (Debian's, as in test_old_eras), which prints the same fields.

Arch names need no mapping: cuobjdump prints the arch of the fatbin entry header, as fatbinkit
does, with the ``a`` and ``f`` suffixes (``sm_90a``, ``sm_100f``, ``sm_120f``: checked on CuPy
for CUDA 12/13 and on an nvcc 13.5 fatbin with sm_90a, sm_100a and sm_100f). Only a bare sm_100f
cubin (no fatbin header) reads as ``sm_100``, and cuobjdump prints no arch for one at all.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cudabuild import CUOBJDUMP, res_usage_blocks
from thirdparty import (
    CUDA_TOOLKIT_118,
    CUPY12_RANDOM,
    CUPY13_RANDOM,
    CURAND11,
    CURAND13,
    CURAND130,
    WheelMember,
    debian_tool,
    fetch,
)

from fatbinkit.diff import FIELDS

# cuobjdump's names for the figures fatbinkit compares; CONSTANT[N] is constant[N]. TEXTURE,
# SURFACE and SAMPLER are not compared by diff; spills and SASS size are not in the listing.
CUOBJDUMP_FIELDS = {"REG": "registers", "STACK": "stack", "SHARED": "shared", "LOCAL": "local"}

Key = tuple[str, str, int]  # (mangled name, arch, n-th occurrence)
Change = tuple[str, str, int, str, int | None, int | None]  # key, field, old, new

# (old, new, cuobjdump 11.8 for the old side)
PAIRS: dict[str, tuple[WheelMember, WheelMember, bool]] = {
    "curand-13.0-vs-13.4": (CURAND130, CURAND13, False),
    "cupy-cuda12-vs-cuda13": (CUPY12_RANDOM, CUPY13_RANDOM, False),
    "curand-cuda11-vs-cuda13": (CURAND11, CURAND13, True),
}


def _listing(path: Path, tool: Path) -> dict[Key, dict[str, int]]:
    """(function, arch, n-th occurrence) -> cuobjdump's figures under fatbinkit's field names."""
    out: dict[Key, dict[str, int]] = {}
    seen: dict[tuple[str, str], int] = {}
    for arch, usage in res_usage_blocks(path, tool):
        for name, fields in usage.functions:
            n = seen[name, arch] = seen.get((name, arch), -1) + 1
            out[name, arch, n] = {CUOBJDUMP_FIELDS.get(k, k.lower()): v
                                  for k, v in fields.items()
                                  if k in CUOBJDUMP_FIELDS or k.startswith("CONSTANT[")}
    return out


def _changes(old: dict[Key, dict[str, int]], new: dict[Key, dict[str, int]]) -> set[Change]:
    out: set[Change] = set()
    for key in old.keys() & new.keys():
        a, b = old[key], new[key]
        out |= {(*key, f, a.get(f), b.get(f)) for f in a.keys() | b.keys() if a.get(f) != b.get(f)}
    return out


def _listed(field: str) -> bool:
    return field in CUOBJDUMP_FIELDS.values() or field.startswith("constant[")


def _sass(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [k for k in items if k["arch"].startswith("sm_")]


@pytest.mark.slow
@pytest.mark.parametrize("pair", PAIRS)
def test_diff_equals_the_two_cuobjdump_listings(pair: str) -> None:
    old_member, new_member, old_era = PAIRS[pair]
    old, new = fetch(old_member), fetch(new_member)
    old_tool = debian_tool(CUDA_TOOLKIT_118, "cuobjdump") if old_era else CUOBJDUMP
    before, after = _listing(old, old_tool), _listing(new, CUOBJDUMP)

    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "diff", str(old), str(new),
                           "--json"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["libraries"]["compared"] == [{"old": old.name, "new": new.name}]

    added = {(k["kernel"], k["arch"], k["instance"]) for k in _sass(doc["added"])}
    removed = {(k["kernel"], k["arch"], k["instance"]) for k in _sass(doc["removed"])}
    changed = {(c["kernel"], c["arch"], c["instance"], c["field"], c["old"], c["new"])
               for c in _sass(doc["changed"]) if _listed(c["field"])}
    expected = _changes(before, after)
    assert added == after.keys() - before.keys()
    assert removed == before.keys() - after.keys()
    assert changed == expected
    # every pair has real changes of cuobjdump's figures, and kernel images that went away
    assert expected and removed

    # the other figures diff compares are fatbinkit's own (spills, SASS size): nothing else
    fields = {c["field"] for c in doc["changed"]}
    assert all(f in FIELDS or f.startswith("constant[") for f in fields), fields
    # PTX entries carry no figures: they are only ever added or removed
    assert all(c["arch"].startswith("sm_") for c in doc["changed"])
    # counts: an image is changed once however many fields moved; the SASS images present on
    # both sides are either changed or unchanged (the rest of `unchanged` is PTX)
    summary = doc["summary"]
    assert (summary["added"], summary["removed"]) == (len(doc["added"]), len(doc["removed"]))
    changed_images = {(c["kernel"], c["arch"], c["instance"]) for c in doc["changed"]}
    assert summary["changed"] == len(changed_images)
    assert changed_images <= before.keys() & after.keys()
    both = len(before.keys() & after.keys())
    assert 0 <= both - len(changed_images) <= summary["unchanged"]


def test_modules_equal_what_check_reads() -> None:
    """The modules a snapshot builds from the images it reads (what ``gate --require-arch``
    decides with) equal :func:`fatbinkit.compat.image_sets` of the same file, image for image,
    also when images are taken from the other side of a diff."""
    from fatbinkit.compat import image_sets
    from fatbinkit.diff import snapshot

    old = snapshot(fetch(CURAND130))
    for member, like in ((CURAND130, None), (CURAND13, old), (CUPY13_RANDOM, None)):
        path = fetch(member)
        (lib,) = snapshot(path, like=like).libraries
        assert lib.sets == image_sets(path)
