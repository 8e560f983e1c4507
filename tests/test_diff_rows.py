"""``diff`` over the workers' rows (issue 32): a snapshot keeps each library's kernels as the rows
its workers sent and makes :class:`~fatbinkit.diff.KernelImage` objects only when asked.

The oracle for the rows path is the :class:`~fatbinkit.diff.KernelImage` path: the same
snapshot written and read back (:meth:`~fatbinkit.diff.Snapshot.to_dict`,
:meth:`~fatbinkit.diff.Snapshot.from_dict`, what a ``gate`` baseline is) holds KernelImage
objects only, and :func:`~fatbinkit.diff.diff` of any mix of the two gives the same
:class:`~fatbinkit.diff.Diff`, text and JSON. The kernels' figures themselves are held to
``cuobjdump -res-usage`` by tests/test_diff_thirdparty.py and tests/test_diff.py. Inputs: two
real cuRAND releases (tests/thirdparty.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from thirdparty import CURAND13, CURAND130, fetch

import fatbinkit
import fatbinkit.diff as fd
import fatbinkit.parallel
from fatbinkit.diff import FIELDS, KernelImage, Snapshot, diff, read_library, snapshot


@pytest.fixture(scope="module")
def pair() -> tuple[Path, Path]:
    return fetch(CURAND130), fetch(CURAND13)


def _as_kernel_images(s: Snapshot) -> Snapshot:
    back = Snapshot.from_dict(s.to_dict())
    assert all("_rows" not in lib.__dict__ for lib in back.libraries)
    return back


def _values(s: Snapshot) -> dict[tuple[str, str, int], dict[str, int | None]]:
    (lib,) = s.libraries
    return {(k.kernel, k.arch, k.instance): k.values() for k in lib.kernels}


def test_rows_and_kernel_images_diff_alike(pair: tuple[Path, Path]) -> None:
    old = snapshot(pair[0])
    new = snapshot(pair[1], like=old)
    assert all("_rows" in lib.__dict__ for lib in (*old.libraries, *new.libraries))
    rows = diff(old, new)
    assert rows.changed and rows.added and rows.removed and rows.unchanged  # a real change
    # what changed, worked out here from the kernels' values(), key by key
    before, after = _values(old), _values(new)
    assert {(c.kernel, c.arch, c.instance, c.field, c.old, c.new) for c in rows.changed} == {
        (*key, f, a.get(f), b.get(f)) for key in before.keys() & after.keys()
        for a, b in [(before[key], after[key])] for f in {*a, *b} if a.get(f) != b.get(f)}
    assert {(k.kernel, k.arch, k.instance) for k in rows.added} == after.keys() - before.keys()
    assert {(k.kernel, k.arch, k.instance) for k in rows.removed} == \
        before.keys() - after.keys()
    kernel_images = diff(_as_kernel_images(old), _as_kernel_images(new))
    for d in (kernel_images, diff(old, _as_kernel_images(new)),
              diff(_as_kernel_images(old), new)):
        assert d == rows
        assert d.to_dict() == rows.to_dict()
        assert list(d.lines(top=50)) == list(rows.lines(top=50))
    # kernels made from the rows: those read back, in the same (file) order, made once
    (lib,) = new.libraries
    assert lib.kernels == _as_kernel_images(new).libraries[0].kernels
    assert lib.kernels is lib.kernels
    # gate's absolute rules read the same figures from the rows as from the kernels (SASS only)
    sass = [(k.kernel, k.arch, k.registers, k.spill_stores, k.spill_loads) for k in lib.kernels
            if k.arch.startswith("sm_")]
    assert sass and list(fd._resources(lib)) == sass
    assert list(fd._resources(_as_kernel_images(new).libraries[0])) == sass
    assert len(lib.kernels) == fd._count_kernels(lib) and f"kernels={len(lib.kernels)}" in repr(lib)


def test_each_payload_is_hashed_once(pair: tuple[Path, Path],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """On the ``like=`` side only the images whose header is a known one's are hashed before
    reading; the others are hashed where they are read; no image twice."""
    old = snapshot(pair[0], jobs=1)
    calls: list[int] = []
    real = fd._payload
    monkeypatch.setattr(fd, "_payload", lambda code: calls.append(1) or real(code))
    with fatbinkit.open(pair[1]) as binary:
        loadable = [it.code for it in binary.select() if it.kind in ("sass", "ptx")]
        digests = {fd._digest(c) for c in loadable}
    calls.clear()
    new = snapshot(pair[1], like=old, jobs=1)
    (lib,) = new.libraries
    assert len(calls) == len(loadable)
    assert set(lib.read) == digests  # every image under its digest, as a next like= finds it
    calls.clear()
    again = snapshot(pair[1], like=new, jobs=1)  # every image known: hashed, none read
    assert len(calls) == len(loadable) and again == new


def test_a_known_header_with_other_bytes_is_read(pair: tuple[Path, Path],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """An image whose header is a known one's but whose payload is not (hashed in the caller
    before the pool forks) is read by a worker and kept under its own digest."""
    monkeypatch.setattr(fatbinkit.parallel, "PARALLEL_MIN_BYTES", 0)  # a pool, whatever size
    with fatbinkit.open(pair[0]) as binary:
        fresh = read_library(binary, "lib", jobs=2)
        # the same headers, other payloads: a digest no image has
        fake: dict[bytes, Any] = {d[:fd._HEAD] + bytes(20): r for d, r in fresh.read.items()}
        seen = read_library(binary, "lib", known=fake, jobs=2)
        images = [it.code for it in binary.select() if it.kind in ("sass", "ptx")]
        digests = set(map(fd._digest, images))
    assert seen == fresh and seen.sets == fresh.sets
    assert set(seen.read) == set(fresh.read) == digests
    calls: list[int] = []
    real = fd._payload
    monkeypatch.setattr(fd, "_payload", lambda code: calls.append(1) or real(code))
    with fatbinkit.open(pair[0]) as binary:  # in this process: the calls are counted here
        assert read_library(binary, "lib", known=fake, jobs=1) == fresh
    assert len(calls) == len(images)  # each hashed before reading, not again when read


def test_the_payload_digest_is_the_faster_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """_payload_hash is SHA-256 or BLAKE2b cut to 20 bytes, whichever hashes faster: a SHA-256
    made slow here gives BLAKE2b, one made fast gives SHA-256 (the choice is made once per
    process, and a pool's workers inherit it: test_a_known_header_with_other_bytes_is_read
    reads with workers, its digests equal to this process's)."""
    import hashlib
    import time as time_module

    data = b"payload" * 1000
    made = {"sha256": hashlib.sha256(data).digest()[:20],
            "blake2b": hashlib.blake2b(data, digest_size=20).digest()}
    saved = fd._payload_hash()
    assert saved(data) in made.values() and len(saved(memoryview(data))) == 20
    real, real_b2 = hashlib.sha256, hashlib.blake2b

    for slow, expected in ((True, "blake2b"), (False, "sha256")):
        def timed(*args: Any, slow: bool = slow) -> Any:
            if slow:
                time_module.sleep(0.01)
            return real(*args)

        def b2(*args: Any, slow: bool = slow, **kwargs: Any) -> Any:
            if not slow:
                time_module.sleep(0.01)
            return real_b2(*args, **kwargs)

        monkeypatch.setattr(hashlib, "sha256", timed)
        monkeypatch.setattr(hashlib, "blake2b", b2)
        fd._payload_hash.cache_clear()
        try:
            assert fd._payload_hash()(data) == made[expected]
        finally:
            monkeypatch.undo()
            fd._payload_hash.cache_clear()


def test_kernel_image_dict_is_its_values() -> None:
    """``to_dict`` spells out :meth:`KernelImage.values` (FIELDS, then the banks in order)."""
    for k in (KernelImage("l", "k", "sm_90", 0, 1, True, 32, 0, 4, 8, 1024, 0, 512,
                          {3: 8, 0: 360}),
              KernelImage("l", "k", "compute_90", 0, 1, True)):
        doc = k.to_dict()
        assert list(doc)[:7] == ["library", "kernel", "arch", "kind", "instance", "module",
                                 "entry"]
        assert list(doc.items())[7:] == list(k.values().items())
        assert list(doc)[7:14] == list(FIELDS)
