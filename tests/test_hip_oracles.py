"""The HIP fixtures are what tests/hipbuild.py says they are, and the LLVM oracles behave as
../shared/ROCM.md §3.3 records, failures included (fatbinkit has to do better than each of them).

Every test here asks LLVM 19 or 22 (tests/llvm.py), never fatbinkit. If an oracle failure
recorded here goes away (a fixed LLVM), the test fails so that the record can be updated.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from hipbuild import GENERIC, TARGETS, build, remarks
from llvm import run_llvm
from thirdparty import (
    CUPY_ROCM5_RANDOM,
    CUPY_ROCM7_RANDOM,
    JAX_ROCM7_LINALG,
    JAX_ROCM7_PRNG,
    JAX_ROCM7_SOLVER,
    WheelMember,
    fetch,
)

HIPV4 = "hipv4-amdgcn-amd-amdhsa--"
HOST19 = "host-x86_64-unknown-linux--"  # clang 19's host entry
HOST22 = "host-x86_64-unknown-linux-gnu-"  # clang 22's and ROCm 7's


def bundle_ids(host: str, targets: str | tuple[str, ...]) -> set[str]:
    """The ids of a bundle: its host entry and ``hipv4`` entries for ``targets``."""
    names = targets.split() if isinstance(targets, str) else targets
    return {host, *(HIPV4 + t for t in names)}


IDS19 = bundle_ids(HOST19, TARGETS)
IDS22 = bundle_ids(HOST22, TARGETS)
# jax-rocm7-plugin 0.10.2: the 27 targets of its bundles (ROCM.md §4).
JAX_IDS = bundle_ids(HOST22, "gfx1010 gfx1011 gfx1012 gfx1030 gfx1031 gfx1032 gfx1033 gfx1034 "
                     "gfx1035 gfx1036 gfx1100 gfx1101 gfx1102 gfx1103 gfx1150 gfx1151 gfx1152 "
                     "gfx1153 gfx1200 gfx1201 gfx900 gfx906 gfx908 gfx90a gfx90c gfx942 gfx950")
CUPY_IDS = {
    CUPY_ROCM7_RANDOM: bundle_ids(HOST22, "gfx1030 gfx1100 gfx1101 gfx1200 gfx1201 gfx908 "
                                  "gfx90a gfx942 gfx950"),
    # ROCm 5's clang spells the host entry with 4 components.
    CUPY_ROCM5_RANDOM: bundle_ids("host-x86_64-unknown-linux", "gfx1010 gfx1011 gfx1012 gfx801 "
                                  "gfx802 gfx803 gfx900 gfx906 gfx908"),
}
UNKNOWN_FRAME = "Unknown frame descriptor"  # LLVM 19's bundler reading a CCOB v3
SRC_SIZE = "Src size is incorrect"  # LLVM 22's bundler reading two CCOBs in one section


def check(major: int, tool: str, *args: str | Path, cwd: Path | None = None) -> str:
    proc = run_llvm(major, tool, *args, cwd=cwd)
    assert proc.returncode == 0, (tool, major, args, proc.stderr[-2000:])
    return proc.stdout


def sections(path: Path) -> dict[str, tuple[str, int, str, int]]:
    """``llvm-readelf -S`` (22) of an ELF file: name -> (type, size, flags, alignment)."""
    out: dict[str, tuple[str, int, str, int]] = {}
    for line in check(22, "llvm-readelf", "-S", "--wide", path).splitlines():
        if not line.lstrip().startswith("[") or "Nr]" in line:
            continue
        name, kind, _addr, _off, size, _es, *rest = line.split("]", 1)[1].split()
        flags = rest[0] if len(rest) == 4 else ""
        out[name] = (kind, int(size, 16), flags, int(rest[-1]))
    return out


def dump(path: Path, section: str, tmp_path: Path) -> Path:
    """The bytes of ``section`` of ``path``, written by llvm-objcopy 22 into a file."""
    out = tmp_path / f"{path.name}{section}"
    check(22, "llvm-objcopy", f"--dump-section={section}={out}", path, tmp_path / "discard")
    return out


def bundler_list(major: int, bundle: Path) -> tuple[set[str], str]:
    """``clang-offload-bundler --list`` of a bundle file: the ids (as a set: it prints in
    hash order) and the error text (empty on success)."""
    proc = run_llvm(major, "clang-offload-bundler", "--list", "--type=o", f"--input={bundle}")
    ids = set(proc.stdout.split()) if proc.returncode == 0 else set()
    return ids, proc.stderr if proc.returncode != 0 else ""


def ccobs(data: bytes) -> list[tuple[int, int, int]]:
    """(section offset, version, method) of each ``CCOB`` at a 4096-aligned offset."""
    return [(off, *struct.unpack_from("<HH", data, off + 4))
            for off in range(0, len(data), 4096) if data[off:off + 4] == b"CCOB"]


# -- the fixtures -----------------------------------------------------------------------------


@pytest.mark.parametrize("major", [19, 22])
def test_plain_bundle_ids(major: int) -> None:
    bundle = build("bundle19")
    assert bundle.read_bytes()[:32] == b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", 4)
    assert bundler_list(major, bundle) == (IDS19, "")


@pytest.mark.parametrize(("name", "wrappers"), [
    ("obj19", 1), ("obj19z", 1), ("obj22", 1), ("obj22z", 1), ("generic19", 1),
    ("lib19mix", 2), ("lib22zz", 2)])
def test_hip_sections(name: str, wrappers: int) -> None:
    """`.hip_fatbin` (A, align 4096) and one 24-byte `.hipFatBinSegment` record (WA) per
    bundle, in objects and in libraries (ROCM.md §1.3)."""
    found = sections(build(name))
    kind, _size, flags, align = found[".hip_fatbin"]
    assert (kind, flags, align) == ("PROGBITS", "A", 4096)
    assert found[".hipFatBinSegment"] == ("PROGBITS", 24 * wrappers, "WA", 8)


@pytest.mark.parametrize(("name", "version", "major_ok", "major_fails"), [
    ("obj19z", 2, (19, 22), ()), ("obj22z", 3, (22,), (19,))])
def test_ccob_version(name: str, version: int, major_ok: tuple[int, ...],
                      major_fails: tuple[int, ...], tmp_path: Path) -> None:
    """clang 19 writes CCOB v2, clang 22 v3 (both zstd); LLVM 19 cannot read v3."""
    fatbin = dump(build(name), ".hip_fatbin", tmp_path)
    assert ccobs(fatbin.read_bytes()) == [(0, version, 1)]
    host = HOST19 if name.endswith("19z") else HOST22
    for major in major_ok:
        assert bundler_list(major, fatbin) == (bundle_ids(host, TARGETS), "")
    for major in major_fails:
        ids, error = bundler_list(major, fatbin)
        assert not ids and UNKNOWN_FRAME in error


def test_plain_object_and_clang22(tmp_path: Path) -> None:
    """clang 22's uncompressed bundle: host entry spelled with -gnu-, code object v6."""
    fatbin = dump(build("obj22"), ".hip_fatbin", tmp_path)
    assert fatbin.read_bytes().startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    assert bundler_list(19, fatbin) == (IDS22, "")
    co = tmp_path / "gfx942.co"
    check(22, "clang-offload-bundler", "--unbundle", "--type=o", f"--input={fatbin}",
          f"--targets={HIPV4}gfx942", f"--output={co}")
    header = check(22, "llvm-readelf", "-h", co)
    assert "ABI Version:                       4" in header
    assert "Flags:                             0x54c, gfx942, xnack, sramecc" in header


def test_generic_targets(tmp_path: Path) -> None:
    """Code object v6 generic targets, as llvm-readelf names them from e_flags."""
    fatbin = dump(build("generic19"), ".hip_fatbin", tmp_path)
    assert bundler_list(19, fatbin) == (bundle_ids(HOST19, GENERIC), "")
    expect = {"gfx11-generic": "0x1000054, gfx11-generic, generic_v1",
              "gfx9-generic:xnack-": "0x1000251, gfx9-generic, xnack-, generic_v1",
              "gfx942:sramecc+:xnack-": "0xE4C, gfx942, xnack-, sramecc+"}
    for target, flags in expect.items():
        co = tmp_path / f"{target}.co"
        check(19, "clang-offload-bundler", "--unbundle", "--type=o", f"--input={fatbin}",
              f"--targets={HIPV4}{target}", f"--output={co}")
        header = check(19, "llvm-readelf", "-h", co)
        assert "ABI Version:                       4" in header
        assert f"Flags:                             {flags}" in header


def test_rdc_object_handler_sections() -> None:
    """-fgpu-rdc -c: one `__CLANG_OFFLOAD_BUNDLE__<id>` section per entry (flag E), bitcode
    under the `hip` kind, a 1-byte host section; the bundler lists them from the object."""
    obj = build("rdc19")
    ids = {"host-x86_64-pc-linux-gnu-", *(f"hip-amdgcn-amd-amdhsa--{t}" for t in TARGETS)}
    found = sections(obj)
    assert ".hip_fatbin" not in found
    bundles = {n[len("__CLANG_OFFLOAD_BUNDLE__"):]: v for n, v in found.items()
               if n.startswith("__CLANG_OFFLOAD_BUNDLE__")}
    assert set(bundles) == ids
    assert all(flags == "E" for _, _, flags, _ in bundles.values())
    assert bundles["host-x86_64-pc-linux-gnu-"][1] == 1
    assert bundler_list(19, obj) == (ids, "")


def test_new_driver_offloading(tmp_path: Path) -> None:
    """--offload-new-driver -fgpu-rdc -c: `.llvm.offloading` (OffloadBinary v1, bitcode).
    LLVM 19 names the producer hip, LLVM 22 reads the old kind enum as none (ROCM.md §1.4)."""
    obj = tmp_path / "knd.o"
    shutil.copyfile(build("newdrv19"), obj)
    assert sections(obj)[".llvm.offloading"][0] == "LLVM_OFFLOADING"
    out19 = check(19, "llvm-objdump", "--offloading", obj)
    assert sorted(line.split()[-1] for line in out19.splitlines()
                  if line.startswith("arch")) == sorted(TARGETS)
    assert out19.count("producer        hip") == 3 and out19.count("kind            llvm ir") == 3
    out22 = check(22, "llvm-objdump", "--offloading", obj)
    assert out22.count("producer        none") == 3


def test_libraries_and_llvm22_readelf(tmp_path: Path) -> None:
    """lib19mix: an uncompressed bundle then a CCOB v2; llvm-readelf 22 --offloading lists
    only the first. lib22zz: two CCOB v3; LLVM 22's bundler fails on the section
    (the jax _solver.so case) while readelf 22 lists both."""
    mix = build("lib19mix")
    data = dump(mix, ".hip_fatbin", tmp_path).read_bytes()
    assert data.startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    [(off, version, method)] = ccobs(data)
    assert off > 0 and (version, method) == (2, 1)
    listed = check(22, "llvm-readelf", "--offloading", mix).split()
    assert sorted(w for w in listed if not w.startswith("file:")) == sorted(IDS19)

    zz = build("lib22zz")
    fatbin = dump(zz, ".hip_fatbin", tmp_path)
    found = ccobs(fatbin.read_bytes())
    assert [(v, m) for _, v, m in found] == [(3, 1), (3, 1)] and found[0][0] == 0
    ids, error = bundler_list(22, fatbin)
    assert not ids and SRC_SIZE in error
    listed = check(22, "llvm-readelf", "--offloading", zz).split()
    assert sorted(w for w in listed if not w.startswith("file:")) == sorted([*IDS22, *IDS22])


def test_archive_members() -> None:
    archive = build("ar19")
    assert check(19, "llvm-ar", "t", archive).split() == ["kernels.o", "second.o"]
    out = check(22, "llvm-readelf", "-S", "--wide", archive)
    assert out.count("] .hip_fatbin ") == 2 and out.count("] .hipFatBinSegment ") == 2


@pytest.mark.parametrize("major", [19, 22])
def test_rdc_archive_unbundles(major: int, tmp_path: Path) -> None:
    """clang-offload-bundler --type=a: one bitcode member per archive member for the target
    (a hipv4 request matches the hip entries; ':' becomes '_' in the member names)."""
    out = tmp_path / "gfx90a.a"
    check(major, "clang-offload-bundler", "--unbundle", "--type=a",
          f"--input={build('ar19rdc')}", f"--targets={HIPV4}gfx90a:xnack+", f"--output={out}")
    members = check(19, "llvm-ar", "t", out).split()
    assert members == [f"{m}-hip-amdgcn-amd-amdhsa--gfx90a_xnack+{m}.bc"
                       for m in ("kernels", "second")]
    check(19, "llvm-ar", "x", out, cwd=tmp_path)
    assert all((tmp_path / m).read_bytes()[:4] == b"BC\xc0\xde" for m in members)


def test_llvm22_objdump_misreads_ccob(tmp_path: Path) -> None:
    """llvm-objdump 22 --offloading copies a CCOB's *decompressed* offsets from the file, so
    no extracted code object is an ELF (fixed after 22.1.8 by llvm/llvm-project PR #192729);
    it may also crash on the way."""
    obj = tmp_path / "kc.o"
    shutil.copyfile(build("obj19z"), obj)
    run_llvm(22, "llvm-objdump", "--offloading", obj, cwd=tmp_path)
    extracted = list(tmp_path.glob("kc.o.0.hipv4-*"))
    assert extracted and not any(p.read_bytes()[:4] == b"\x7fELF" for p in extracted)


def test_resource_remarks() -> None:
    """clang's remarks (the resource oracle) show what each kernel was written to exercise."""
    found = remarks("obj19")
    assert set(found) == {("kernels", t) for t in TARGETS}
    for target in TARGETS:
        kernels = found[("kernels", target)]
        assert set(kernels) == {"add", "lds_reverse", "scratch", "spill",
                                "_ZN3fbk5scaleIfEEvPT_S1_i"}
        assert kernels["lds_reverse"]["LDS Size [bytes/block]"] == "1024"
        assert int(kernels["scratch"]["ScratchSize [bytes/lane]"]) > 0
        assert int(kernels["spill"]["VGPRs Spill"]) > 0
        assert kernels["add"]["ScratchSize [bytes/lane]"] == "0"
    assert set(remarks("lib19mix")) == {(s, t) for s in ("kernels", "second") for t in TARGETS}
    assert set(remarks("generic19")) == {("kernels", t) for t in GENERIC}
    assert remarks("rdc19") == {}


# -- real ROCm libraries ----------------------------------------------------------------------


@pytest.mark.parametrize(("member", "bundles"), [
    (JAX_ROCM7_LINALG, 1), (JAX_ROCM7_PRNG, 1), (JAX_ROCM7_SOLVER, 2)])
def test_jax_rocm7(member: WheelMember, bundles: int, tmp_path: Path) -> None:
    """jax-rocm7-plugin: CCOB v3 (LLVM 19 cannot read it); LLVM 22's bundler reads one CCOB
    but fails on _solver.so's two, which llvm-readelf 22 lists."""
    lib = fetch(member)
    assert sections(lib)[".hipFatBinSegment"][1] == 24 * bundles
    fatbin = dump(lib, ".hip_fatbin", tmp_path)
    assert [(v, m) for _, v, m in ccobs(fatbin.read_bytes())] == [(3, 1)] * bundles
    ids, error = bundler_list(19, fatbin)
    assert not ids and UNKNOWN_FRAME in error
    ids, error = bundler_list(22, fatbin)
    if bundles == 1:
        assert (ids, error) == (JAX_IDS, "")
    else:
        assert not ids and SRC_SIZE in error
    listed = check(22, "llvm-readelf", "--offloading", lib).split()
    assert sorted(w for w in listed if not w.startswith("file:")) == sorted(
        [*JAX_IDS] * bundles)


@pytest.mark.parametrize("member", [CUPY_ROCM7_RANDOM, CUPY_ROCM5_RANDOM],
                         ids=["rocm7", "rocm5"])
def test_cupy_rocm(member: WheelMember, tmp_path: Path) -> None:
    """CuPy for ROCm: one uncompressed bundle, which both bundlers list."""
    lib = fetch(member)
    assert sections(lib)[".hipFatBinSegment"][1] == 24
    fatbin = dump(lib, ".hip_fatbin", tmp_path)
    assert fatbin.read_bytes()[:24] == b"__CLANG_OFFLOAD_BUNDLE__"
    for major in (19, 22):
        assert bundler_list(major, fatbin) == (CUPY_IDS[member], "")
