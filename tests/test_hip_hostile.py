"""Hostile HIP inputs through the front door: clang-built objects (tests/hipbuild.py) with bytes
of their ``.hip_fatbin`` patched, read by ``fatbinkit.open`` and ``fatbinkit ls``.

Each is one fatbinkit error (exit status 3, one ``fatbinkit: error:`` line naming the problem and
its offset), never a traceback, a hang or a big allocation. The layouts patched are LLVM's
(``clang/lib/Driver/OffloadBundler.cpp``: ``BinaryFileHandler::ReadHeader``, the CCOB v3 header
of ``CompressedOffloadBundle``). The oracle is clang-offload-bundler 22 ``--list`` on the
patched ``.hip_fatbin`` (dumped by llvm-objcopy 22): it crashes (SIGSEGV) on the lying count and
offset, runs out of memory on a 1 TiB inflated size, fails on a short one, and lists the four
entries as if nothing were wrong when the total size, a long inflated size or the hash lie
(``--list`` reads to the end and checks the hash only with ``-verbose``). fatbinkit refuses all.
"""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard
from hipbuild import build
from llvm import run_llvm

import fatbinkit
from fatbinkit.errors import DecompressionError, FormatError, TruncatedError

MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, timeout=60, check=False)


def _patched(name: str, patch: str) -> bytes:
    """Fixture ``name`` with one field of its ``.hip_fatbin`` changed (``patch`` says which)."""
    d = bytearray(build(name).read_bytes())
    if patch in ("count", "offset"):
        at = d.find(MAGIC)
        if patch == "count":
            struct.pack_into("<Q", d, at + 24, 1 << 32)
        else:  # entry 1 (after the host entry): its offset, 1 TiB
            first = at + 32 + 24 + struct.unpack_from("<Q", d, at + 32 + 16)[0]
            struct.pack_into("<Q", d, first, 1 << 40)
        return bytes(d)
    at = d.find(b"CCOB")
    field, width, value = {"total": (8, 8, 1 << 40), "short": (16, 8, -1), "long": (16, 8, 1),
                           "huge": (16, 8, 1 << 40), "hash": (24, 8, 1)}[patch]
    old = int.from_bytes(d[at + field:at + field + width], "little")
    new = value if value > 2 else (old ^ 1 if patch == "hash" else old + value)
    d[at + field:at + field + width] = new.to_bytes(width, "little")
    return bytes(d)


CASES = [  # fixture, patch, error class, message, clang-offload-bundler 22 --list
    ("obj19", "count", TruncatedError, "bundle records 4294967296 entries: at least "
     "107374182400 header bytes, only 40456 left", "crash"),
    ("lib19mix", "count", TruncatedError, "bundle records 4294967296 entries", "crash"),
    ("obj19", "offset", TruncatedError, "(hipv4-amdgcn-amd-amdhsa--gfx1100: 11848 bytes at "
     "0x10000000000) runs past the end of the 40488 bytes available", "crash"),
    ("obj22z", "total", TruncatedError, "compressed bundle records 1099511627776 bytes, only "
     "8772 left", "lists"),
    ("obj22z", "short", DecompressionError, "zstd payload inflates to 50464+ bytes, header "
     "records 50463", "error"),
    ("obj22z", "long", DecompressionError, "zstd payload inflates to 50464 bytes, header "
     "records 50465", "lists"),
    ("obj22z", "huge", DecompressionError, "records an inflated size of 1099511627776 bytes, "
     "above the limit of 1073741824", "crash"),
    ("obj22z", "hash", FormatError, "compressed bundle hash mismatch", "lists"),
]


def _oracle(path: Path, tmp: Path) -> str:
    """What clang-offload-bundler 22 ``--list`` makes of the file's ``.hip_fatbin``."""
    section = tmp / "hip_fatbin"
    dump = run_llvm(22, "llvm-objcopy", f"--dump-section=.hip_fatbin={section}", path,
                    tmp / "scratch")
    assert dump.returncode == 0, dump.stderr
    proc = run_llvm(22, "clang-offload-bundler", "--list", "--type=o", f"--input={section}")
    if proc.returncode < 0:
        return "crash"
    if proc.returncode:
        return "error"
    assert len(proc.stdout.split()) == 4, proc.stdout
    return "lists"


@pytest.mark.parametrize(("fixture", "patch", "error", "message", "oracle"), CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_a_lying_header_is_one_error(fixture: str, patch: str, error: type[FormatError],
                                     message: str, oracle: str, tmp_path: Path) -> None:
    data = _patched(fixture, patch)
    path = tmp_path / "k.o"
    path.write_bytes(data)
    with pytest.raises(error) as info:
        fatbinkit.open(path)
    assert message in str(info.value)
    proc = _cli("ls", path, "--max-decompressed", "1M")
    assert proc.returncode == 3 and proc.stdout == "", proc
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"fatbinkit: error: {path}: .hip_fatbin: ") and message in line
    assert "(at offset 0x" in line
    assert _oracle(path, tmp_path) == oracle
    assert _oracle(build(fixture), tmp_path) == "lists"


def _bomb(size: int, right_hash: bool) -> bytes:
    """A CCOB v3 whose small zstd frame inflates to a plain bundle of no entries and ``size``
    zeros (streamed: never all in memory here), its header recording that size."""
    inner_head = MAGIC + bytes(8)
    co, md5 = zstandard.ZstdCompressor(level=19).compressobj(), hashlib.md5(inner_head)
    parts, chunk = [co.compress(inner_head)], bytes(1 << 20)
    for _ in range(size >> 20):
        parts.append(co.compress(chunk))
        md5.update(chunk)
    parts.append(co.flush())
    frame = b"".join(parts)
    digest = struct.unpack("<Q", md5.digest()[:8])[0] if right_hash else 0
    return struct.pack("<4sHHQQQ", b"CCOB", 3, 1, 32 + len(frame), len(inner_head) + size,
                       digest) + frame


def _in_obj22z(ccob: bytes) -> bytes:
    d = bytearray(build("obj22z").read_bytes())
    at = d.find(b"CCOB")
    total = struct.unpack_from("<Q", d, at + 8)[0]
    assert len(ccob) <= total
    d[at:at + total] = ccob.ljust(total, b"\0")
    return bytes(d)


@pytest.mark.parametrize("gib", [1, 3])
def test_a_zip_bomb_past_the_size_limit_is_refused_before_inflating(gib: int,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "bomb.hipfb"
    path.write_bytes(_bomb(gib << 30, right_hash=True))
    assert path.stat().st_size < 100 << 10
    proc = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "subprocess.run(sys.argv[1:]); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         sys.executable, "-m", "fatbinkit", "ls", str(path)],
        capture_output=True, text=True, timeout=60, check=False)
    assert "above the limit of 1073741824" in proc.stderr and "Traceback" not in proc.stderr
    assert int(proc.stdout) < 200 << 10  # KiB: nothing was inflated


def test_a_zip_bomb_under_the_budget_floor_obeys_max_decompressed(tmp_path: Path) -> None:
    """A 6 KB frame inflating to 200 MiB inside obj22z's .hip_fatbin, its hash right. Today
    ``ls --max-decompressed 1M`` inflates it all (400+ MiB peak) before saying "does not
    contain device code" (its bundle has no entry): the scan reads bundles with a budget of its
    own (``read_bundles(view)`` in ``vendors/hip/finding.py``: 256 MiB + 64x the section)."""
    path = tmp_path / "bomb.o"
    path.write_bytes(_in_obj22z(_bomb(200 << 20, right_hash=True)))
    proc = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stderr.write(p.stderr); "
         "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         sys.executable, "-m", "fatbinkit", "ls", str(path), "--max-decompressed", "1M"],
        capture_output=True, text=True, timeout=60, check=False)
    code, peak = map(int, proc.stdout.split())
    assert "Traceback" not in proc.stderr and code == 3
    assert "decompression budget" in proc.stderr and peak < 200 << 10, (proc.stderr, peak)


def test_a_bomb_whose_header_lies_small_stops_at_the_recorded_size(tmp_path: Path) -> None:
    ccob = bytearray(_bomb(200 << 20, right_hash=True))
    struct.pack_into("<Q", ccob, 16, 4096)  # "inflates to 4096 bytes"
    path = tmp_path / "lie.o"
    path.write_bytes(_in_obj22z(bytes(ccob)))
    proc = _cli("ls", path)
    assert proc.returncode == 3
    assert proc.stderr.endswith("zstd payload inflates to 4097+ bytes, header records 4096 "
                                "(at offset 0x1000)\n")


def test_a_header_past_the_runtime_window_is_read(tmp_path: Path) -> None:
    """A device-only bundle of bundle19's code objects described 100 times over (a 6 KB
    header): fatbinkit reads every entry. The HIP runtime reads only the first 4096 bytes of the
    header (``RUNTIME_HEADER_WINDOW``), so it never sees entries described past them;
    ``Bundle.header_fits_window`` says so, but ``ls`` and ``check`` report nothing yet."""
    from fatbinkit.formats.offload_bundle import read_bundle

    bundle = read_bundle(build("bundle19").read_bytes())
    codes = [e for e in bundle.entries if e.size]
    ids = [f"hipv4-amdgcn-amd-amdhsa--gfx{900 + i}" for i in range(100)]
    head = sum(24 + len(i) for i in ids) + 32
    offsets, body = [], b""
    for i in range(100):
        offsets.append(head + len(body))
        body += bytes(codes[i % len(codes)].data)
    data = MAGIC + struct.pack("<Q", 100) + b"".join(
        struct.pack("<QQQ", off, codes[i % len(codes)].size, len(ids[i])) + ids[i].encode()
        for i, off in enumerate(offsets)) + body
    read = read_bundle(data)
    assert read.header_size == head > 4096 and not read.header_fits_window
    path = tmp_path / "wide.bundle"
    path.write_bytes(data)
    proc = _cli("ls", path)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
    assert len(proc.stdout.splitlines()) == 100
    # each descriptor is 24 + 31 bytes after the 32-byte head: 73 end within 4096 bytes
    rows = json.loads(_cli("ls", "--json", path).stdout)["entries"]
    assert [r["past_header_window"] for r in rows] == [False] * 73 + [True] * 27
    # bundle19's code objects in header order are gfx1100, gfx90a:xnack+, gfx942: 80 entries
    # of the first two, then gfx942's, described past the window: gfx942 gets nothing
    order = [i % 2 for i in range(80)] + [2]
    ids = [f"hipv4-amdgcn-amd-amdhsa--gfx{900 + i}" for i in range(len(order))]
    head = sum(24 + len(i) for i in ids) + 32
    offsets, body = [], b""
    for c in order:
        offsets.append(head + len(body))
        body += bytes(codes[c].data)
    data = MAGIC + struct.pack("<Q", len(order)) + b"".join(
        struct.pack("<QQQ", off, codes[c].size, len(name)) + name.encode()
        for c, off, name in zip(order, offsets, ids, strict=True)) + body
    path.write_bytes(data)
    lib = fatbinkit.open(path)
    status = {str(v.device).split(":")[0]: v for v in lib.check(["gfx942", "gfx1100"]).verdicts}
    assert status["gfx1100"].status == "works"
    assert status["gfx942"].status == "fails"
    assert "past the first 4096 bytes" in str(lib.check(["gfx942"]).rows[0][1][0][1][0].verdicts)


def test_a_bomb_within_the_budget_is_held_once(tmp_path: Path) -> None:
    """A 200 MiB bomb within the default budget (256 MiB + 64x the input), its frame without a
    content size (read in steps, as any frame whose header does not record the size): it is
    inflated, hashed (the hash is wrong: one error) and held once. Joining the steps' chunks at
    the end held it twice: 444 MiB peak, 238 MiB since (``codec.decompress``)."""
    path = tmp_path / "bomb.o"
    path.write_bytes(_in_obj22z(_bomb(200 << 20, right_hash=False)))
    proc = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
         "sys.stderr.write(p.stderr); "
         "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         sys.executable, "-m", "fatbinkit", "ls", str(path)],
        capture_output=True, text=True, timeout=60, check=False)
    code, peak = map(int, proc.stdout.split())
    assert code == 3 and "compressed bundle hash mismatch" in proc.stderr, proc.stderr
    assert 200 << 10 < peak < 300 << 10, peak  # KiB: inflated, once
