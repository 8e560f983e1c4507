"""The bundle writer (offload_bundle.write_bundle, compress_bundle) against clang-offload-bundler
19 and 22, on the suite's code objects and on a real wheel's.

The inputs are the code objects of hipbuild's bundle19 (clang 19, COv5), generic19 (generic
targets, COv6) and obj22 (clang 22, COv6) and of cupy-rocm-7-0's ``_generator_api`` (ROCm 7
clang, 9 targets, 5.9 MB; and cupy-rocm-5-0's, ROCm 5.0, COv4, for the driver's own bundle).
The oracles:

- plain: the bytes ``clang-offload-bundler -type=o -bundle-align=4096 -targets=host-...,<ids>
  -input=/dev/null -input=...`` writes (what ``HIP::constructHIPFatbinCommand`` runs), and the
  bundles the clang drivers themselves put in ``.hip_fatbin``;
- compressed (``-compress``, ``COMPRESSED_BUNDLE_FORMAT_VERSION``): the bundler's header fields,
  and its zstd frame against the libzstd the bundler itself loads (found with ``ldd``), called
  through ctypes as ``llvm::compression::zstd::compress`` calls it; python-zstandard bundles
  another zstd version, so fatbinkit's frame may differ (docs/amd-write.md);
- both bundlers read what fatbinkit writes: ``-list`` gives the ids, ``-unbundle`` each entry's
  bytes (LLVM 19 reads no version 3: ../shared/ROCM.md §1.2).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import zstandard
from hipbuild import build
from llvm import llvm_path, run_llvm
from thirdparty import CUPY_ROCM5_RANDOM, CUPY_ROCM7_RANDOM, fetch

from fatbinkit.errors import FormatError, InvalidArgumentError
from fatbinkit.formats import elf
from fatbinkit.formats.offload_bundle import (
    HOST_ID,
    CompressedHeader,
    compress_bundle,
    read_bundle,
    read_bundles,
    write_bundle,
)

Entries = list[tuple[str, bytes]]

# case -> where its code objects come from: (hipbuild fixture or None for the wheel, in a
# .hip_fatbin section or not)
CASES = ("bundle19", "generic19", "obj22", "cupy7")
# and for the clang drivers' own bundles, ROCm 5.0's (cupy-rocm-5-0: COv4, 9 targets)
DRIVERS = (*CASES, "cupy5")
# (bundler that writes, COMPRESSED_BUNDLE_FORMAT_VERSION): LLVM 19 writes version 2 whatever
# the variable says
WRITERS = ((19, 2), (22, 2), (22, 3))


def _file(case: str) -> Path:
    wheels = {"cupy7": CUPY_ROCM7_RANDOM, "cupy5": CUPY_ROCM5_RANDOM}
    return fetch(wheels[case]) if case in wheels else build(case)


@cache
def _clang_bundle(case: str) -> bytes:
    """The plain bundle clang's driver wrote: the bundle file, or the one bundle of the file's
    ``.hip_fatbin``."""
    data = _file(case).read_bytes()
    if case == "bundle19":
        return data
    section = elf.find_section(data, ".hip_fatbin")
    assert section is not None
    (bundle,) = read_bundles(section)
    return bytes(bundle.data)


def _entries(case: str) -> Entries:
    """The device entries of the case's bundle, in its order (clang's: sorted by id)."""
    return [(e.id, bytes(e.data)) for e in read_bundle(_clang_bundle(case)).entries
            if not e.bundle_id.is_host]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Each case's code objects as files, in entry order."""
    out: dict[str, list[Path]] = {}
    for case in CASES:
        folder = tmp_path_factory.mktemp(case)
        out[case] = []
        for n, (_, data) in enumerate(_entries(case)):
            path = folder / f"{n}.co"
            path.write_bytes(data)
            out[case].append(path)
    return out


def _bundle_args(entries: Entries, files: list[Path], output: Path) -> list[str]:
    """The HIP driver's bundler command line (``HIP::constructHIPFatbinCommand``)."""
    ids = ",".join(name for name, _ in entries)
    return ["-type=o", "-bundle-align=4096", f"-targets=host-x86_64-unknown-linux-gnu,{ids}",
            "-input=/dev/null", *(f"-input={f}" for f in files), f"-output={output}"]


def _bundler(major: int, *args: str | Path, env: dict[str, str] | None = None) -> str:
    proc = run_llvm(major, "clang-offload-bundler", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@cache
def _llvm_libzstd(major: int) -> ctypes.CDLL:
    """The libzstd LLVM ``major``'s bundler loads (its libLLVM links it), as ldd resolves it."""
    tool = llvm_path(major, "clang-offload-bundler")
    libs = f"{tool.parents[2] / 'x86_64-linux-gnu'}:{tool.parents[1] / 'lib'}"
    out = subprocess.run(["ldd", str(tool)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, LD_LIBRARY_PATH=libs)).stdout
    found = re.search(r"libzstd\.so\S* => (\S+)", out)
    assert found, out
    lib = ctypes.CDLL(found[1])
    lib.ZSTD_createCCtx.restype = ctypes.c_void_p
    lib.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
    lib.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
    lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    lib.ZSTD_compressBound.restype = ctypes.c_size_t
    lib.ZSTD_compress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                   ctypes.c_char_p, ctypes.c_size_t]
    lib.ZSTD_compress2.restype = ctypes.c_size_t
    lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
    lib.ZSTD_versionNumber.restype = ctypes.c_uint
    return lib


def _llvm_zstd(major: int, data: bytes, level: int = 3) -> bytes:
    """``llvm::compression::zstd::compress(Input, Output, Level, /*EnableLdm=*/true)``: a
    context with ``ZSTD_c_compressionLevel`` (100) and ``ZSTD_c_enableLongDistanceMatching``
    (160) set, then ``ZSTD_compress2`` (llvm/lib/Support/Compression.cpp)."""
    lib = _llvm_libzstd(major)
    ctx = lib.ZSTD_createCCtx()
    try:
        assert not lib.ZSTD_isError(lib.ZSTD_CCtx_setParameter(ctx, 100, level))
        assert not lib.ZSTD_isError(lib.ZSTD_CCtx_setParameter(ctx, 160, 1))
        out = ctypes.create_string_buffer(lib.ZSTD_compressBound(len(data)))
        size = lib.ZSTD_compress2(ctx, out, len(out), data, len(data))
        assert not lib.ZSTD_isError(size)
        return out.raw[:size]
    finally:
        lib.ZSTD_freeCCtx(ctx)


def _zstd_version(number: int) -> tuple[int, int, int]:
    return number // 10000, number // 100 % 100, number % 100


# --- plain -----------------------------------------------------------------------------------


@pytest.mark.parametrize("major", [19, 22])
@pytest.mark.parametrize("case", CASES)
def test_plain_equals_bundler(case: str, major: int, inputs: dict[str, list[Path]],
                              tmp_path: Path) -> None:
    entries = _entries(case)
    _bundler(major, *_bundle_args(entries, inputs[case], tmp_path / "out"))
    clang = (tmp_path / "out").read_bytes()
    names = _bundler_ids(major, entries, clang)
    assert write_bundle(list(zip(names, (d for _, d in entries), strict=True))) == clang


def _bundler_ids(major: int, entries: Entries, clang: bytes) -> list[str]:
    """The device ids the bundler wrote: ours, but for processors LLVM 19 predates, which its
    target-id parse ends with a ``-`` (``gfx950-``: gfx950 came with LLVM 20)."""
    names = [e.id for e in read_bundle(clang).entries if not e.bundle_id.is_host]
    changed = {a: b for (a, _), b in zip(entries, names, strict=True) if a != b}
    assert changed == ({a: a + "-" for a, _ in entries if a.endswith("--gfx950")}
                       if major == 19 else {})
    return names


@pytest.mark.parametrize("case", DRIVERS)
def test_plain_equals_clang_driver(case: str) -> None:
    """The bundle clang 19, clang 22, ROCm 7's and ROCm 5's clang wrote themselves, host entry
    as they spell it."""
    clang = _clang_bundle(case)
    host = read_bundle(clang).entries[0].id
    assert write_bundle(_entries(case), host=host) == clang


def test_unaligned_equals_bundler(inputs: dict[str, list[Path]], tmp_path: Path) -> None:
    """The bundler's default alignment (1: entries back to back) and an odd one."""
    entries = _entries("bundle19")
    for align in (1, 24):
        args = _bundle_args(entries, inputs["bundle19"], tmp_path / "out")
        args[1] = f"-bundle-align={align}"
        _bundler(22, *args)
        assert write_bundle(entries, align=align) == (tmp_path / "out").read_bytes()


# --- compressed ------------------------------------------------------------------------------


@pytest.mark.parametrize(("major", "version"), WRITERS)
@pytest.mark.parametrize("case", CASES)
def test_compressed_matches_bundler(case: str, major: int, version: int,
                                    inputs: dict[str, list[Path]], tmp_path: Path) -> None:
    entries = _entries(case)
    _bundler(major, *_bundle_args(entries, inputs[case], tmp_path / "out"), "-compress",
             env={"COMPRESSED_BUNDLE_FORMAT_VERSION": str(version)})
    clang = (tmp_path / "out").read_bytes()
    theirs = CompressedHeader.unpack(clang)
    plain = write_bundle(list(zip(_bundler_ids(major, entries, bytes(read_bundle(clang).data)),
                                  (d for _, d in entries), strict=True)))
    ours_bytes = compress_bundle(plain, version=version)
    ours = CompressedHeader.unpack(ours_bytes)
    assert (ours.version, ours.method, ours.uncompressed_size, ours.hash) == (
        theirs.version, theirs.method, theirs.uncompressed_size, theirs.hash)
    assert ours.total_size == len(ours_bytes)
    assert bytes(read_bundle(ours_bytes).data) == plain
    # the bundler's frame is libzstd's at LLVM's settings: with the same library, ours too
    frame = _llvm_zstd(major, plain)
    assert clang == CompressedHeader(version, 1, theirs.header_size + len(frame),
                                     len(plain), theirs.hash).pack() + frame
    system = _zstd_version(_llvm_libzstd(major).ZSTD_versionNumber())
    if system == zstandard.ZSTD_VERSION:
        assert ours_bytes == clang


# --- LLVM reads what fatbinkit writes --------------------------------------------------------

READS = [(reader, version, codec) for reader in (19, 22) for version in (2, 3)
         for codec in ("zstd", "zlib") if (reader, version) != (19, 3)]


def _known(major: int, entries: Entries) -> Entries:
    """The entries LLVM ``major`` can unbundle: LLVM 19 looks for ``gfx950-`` when asked for
    gfx950 (see :func:`_bundler_ids`) and finds none, in ROCm's bundle as in ours."""
    return [(n, d) for n, d in entries if major != 19 or not n.endswith("--gfx950")]


def _unbundled(major: int, bundle: Path, ids: list[str], folder: Path) -> list[bytes]:
    outs = [folder / f"{n}.out" for n in range(len(ids))]
    _bundler(major, "-unbundle", "-type=o", f"-targets={','.join(ids)}", f"-input={bundle}",
             *(f"-output={o}" for o in outs))
    return [o.read_bytes() for o in outs]


@pytest.mark.parametrize("reader", [19, 22])
@pytest.mark.parametrize("case", CASES)
def test_llvm_reads_plain(case: str, reader: int, tmp_path: Path) -> None:
    entries = _entries(case)
    (tmp_path / "b").write_bytes(write_bundle(entries))
    listed = _bundler(reader, "-list", "-type=o", f"-input={tmp_path / 'b'}").split()
    assert sorted(listed) == sorted([HOST_ID, *(name for name, _ in entries)])
    known = _known(reader, entries)
    got = _unbundled(reader, tmp_path / "b", [name for name, _ in known], tmp_path)
    assert got == [data for _, data in known]


@pytest.mark.parametrize(("reader", "version", "codec"), READS)
@pytest.mark.parametrize("case", CASES)
def test_llvm_reads_compressed(case: str, reader: int, version: int, codec: str,
                               tmp_path: Path) -> None:
    entries = _entries(case)
    (tmp_path / "b").write_bytes(compress_bundle(write_bundle(entries), version=version,
                                                 codec=codec))
    listed = _bundler(reader, "-list", "-type=o", f"-input={tmp_path / 'b'}").split()
    assert sorted(listed) == sorted([HOST_ID, *(name for name, _ in entries)])
    known = _known(reader, entries)
    got = _unbundled(reader, tmp_path / "b", [name for name, _ in known], tmp_path)
    assert got == [data for _, data in known]


def test_llvm19_refuses_v3_as_it_refuses_clang22s(inputs: dict[str, list[Path]],
                                                  tmp_path: Path) -> None:
    """LLVM 19 reads no version 3 (its V2-only header parse); ours fails the same way as
    clang 22's own."""
    entries = _entries("bundle19")
    _bundler(22, *_bundle_args(entries, inputs["bundle19"], tmp_path / "clang"), "-compress",
             env={"COMPRESSED_BUNDLE_FORMAT_VERSION": "3"})
    (tmp_path / "ours").write_bytes(compress_bundle(write_bundle(entries), version=3))
    errors = []
    for name in ("clang", "ours"):
        proc = run_llvm(19, "clang-offload-bundler", "-list", "-type=o",
                        f"-input={tmp_path / name}")
        assert proc.returncode != 0
        errors.append(proc.stderr.replace(str(tmp_path / name), "FILE"))
    assert errors[0] == errors[1]
    assert "Unknown frame descriptor" in errors[0]


# --- errors ----------------------------------------------------------------------------------

CO = b"\x7fELF" + bytes(60)


@pytest.mark.parametrize("entries", [
    [("hipv4-amdgcn-amd-amdhsa--gfx942", CO), ("hipv4-amdgcn-amd-amdhsa--gfx942", CO)],
    [(HOST_ID, b""), ("hipv4-amdgcn-amd-amdhsa--gfx942", CO), (HOST_ID, b"")],
])
def test_duplicate_ids(entries: Entries) -> None:
    with pytest.raises(InvalidArgumentError, match="given twice"):
        write_bundle(entries)


@pytest.mark.parametrize("align", [0, -4096, True, 4096.0, "4096"])
def test_bad_align(align: object) -> None:
    with pytest.raises(InvalidArgumentError, match="align"):
        write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", CO)], align=align)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["gfx942", "hipv4 amdgcn-amd-amdhsa--gfx942", "-amdgcn", ""])
def test_bad_id(name: str) -> None:
    with pytest.raises(FormatError, match="malformed bundle entry id"):
        write_bundle([(name, CO)])


def test_host_given_is_kept_and_none_writes_none() -> None:
    gfx = ("hipv4-amdgcn-amd-amdhsa--gfx942", CO)
    host = "host-x86_64-unknown-linux--"
    assert read_bundle(write_bundle([(host, b""), gfx])).ids == (host, gfx[0])
    assert read_bundle(write_bundle([gfx], host=None)).ids == (gfx[0],)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"codec": "lz4"}, "codec 'lz4'"),
    ({"codec": "ZSTD"}, "codec 'ZSTD'"),
    ({"version": 1}, "version 1"),
    ({"version": 4}, "version 4"),
])
def test_bad_compression(kwargs: dict[str, object], match: str) -> None:
    plain = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", CO)])
    with pytest.raises(InvalidArgumentError, match=match):
        compress_bundle(plain, **kwargs)  # type: ignore[arg-type]


def test_compress_takes_plain_bundles_only() -> None:
    plain = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", CO)])
    with pytest.raises(InvalidArgumentError, match="plain bundle"):
        compress_bundle(compress_bundle(plain))
    with pytest.raises(InvalidArgumentError, match="plain bundle"):
        compress_bundle(CO)


def test_v2_refuses_4gib_before_compressing() -> None:
    """A 4 GiB bundle is refused for version 2 before a byte is read: an anonymous private
    mapping costs no memory until touched, and only its first page is."""
    size = 1 << 32
    try:
        area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError as e:  # address space limited (ulimit -v)
        pytest.skip(f"cannot map 4 GiB of address space: {e}")
    with area:
        head = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx942", CO)])
        area[:len(head)] = head
        view = memoryview(area)
        try:
            with pytest.raises(InvalidArgumentError, match="version 2's 32-bit sizes"):
                compress_bundle(view, version=2)
        finally:
            view.release()
