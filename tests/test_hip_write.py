"""``fatbinkit build --hsaco`` (build.build_bundle) and ``fatbinkit embed --hip``
(elf_writer.write_hip_object), checked with clang's own output and LLVM's and binutils' tools.

- build: the bundle equals the one clang 22's driver put in hipbuild obj22's ``.hip_fatbin``
  and the one ROCm 7's clang put in cupy-rocm-7-0's ``_generator_api`` (labels given in any
  order); generic targets equal clang-offload-bundler 22's; compressed, the header fields equal
  obj22z's (clang 22 ``--offload-compress``) or the bundler's, and LLVM unbundles each entry.
- embed --hip: the sections have the type, flags and alignment of obj19's (clang 19 ``-c``),
  the record's relocation is clang's; linked by ld.lld 19 and 22 (``clang -fuse-ld=lld
  -shared``) and GNU ld, the library lists in fatbinkit (which checks each ``HIPF`` record
  against the bundle it points to) and in LLVM 22's ``llvm-readelf --offloading``, and the
  code objects extract byte-identical.
- AOTInductor-style blobs (``embed NAME=bundle``) read back as HIP code, in the object and
  in a library.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hipbuild import SOURCES, build
from llvm import run_llvm
from thirdparty import CUPY_ROCM5_RANDOM, CUPY_ROCM7_RANDOM, fetch

from fatbinkit.build import CodeObjectImage, build_bundle
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats import coff, elf, pe
from fatbinkit.formats.elf_writer import hip_object_bytes
from fatbinkit.formats.offload_bundle import (
    CompressedHeader,
    read_bundle,
    read_bundles,
    write_bundle,
)

Entries = list[tuple[str, bytes]]


def fatbinkit(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


@cache
def _section_bundle(path: Path) -> bytes:
    """The one bundle of ``path``'s ``.hip_fatbin``, as stored."""
    section = elf.find_section(path.read_bytes(), ".hip_fatbin")
    assert section is not None
    (bundle,) = read_bundles(section)
    return bytes(section[:bundle.stored_size])


def _entries(bundle: bytes) -> Entries:
    return [(e.id, bytes(e.data)) for e in read_bundle(bundle).entries
            if not e.bundle_id.is_host]


def _target(bundle_id: str) -> str:
    return bundle_id.split("-", 5)[5]


def _hsaco_args(entries: Entries, folder: Path) -> list[str]:
    """``--hsaco TARGET=PATH`` for each entry, in reverse order (build sorts them)."""
    args = []
    for n, (name, data) in reversed(list(enumerate(entries))):
        path = folder / f"{n}.hsaco"
        path.write_bytes(data)
        args += ["--hsaco", f"{_target(name)}={path}"]
    return args


def _ok(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


# --- build --hsaco ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["obj22", "cupy7"])
def test_build_equals_clang_driver(source: str, tmp_path: Path) -> None:
    clang = _section_bundle(fetch(CUPY_ROCM7_RANDOM) if source == "cupy7" else build(source))
    _ok(fatbinkit("build", "-o", tmp_path / "k.hipfb", *_hsaco_args(_entries(clang), tmp_path)))
    assert (tmp_path / "k.hipfb").read_bytes() == clang


def test_build_generic_equals_bundler(tmp_path: Path) -> None:
    entries = _entries(_section_bundle(build("generic19")))
    assert [_target(n) for n, _ in entries] == ["gfx11-generic", "gfx9-generic:xnack-",
                                                "gfx942:sramecc+:xnack-"]
    args = _hsaco_args(entries, tmp_path)
    _ok(fatbinkit("build", "-o", tmp_path / "k.hipfb", *args))
    files = [f"-input={tmp_path / f'{n}.hsaco'}" for n in range(len(entries))]
    proc = run_llvm(22, "clang-offload-bundler", "-type=o", "-bundle-align=4096",
                    "-targets=host-x86_64-unknown-linux-gnu," + ",".join(n for n, _ in entries),
                    "-input=/dev/null", *files, f"-output={tmp_path / 'clang'}")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "k.hipfb").read_bytes() == (tmp_path / "clang").read_bytes()


@pytest.mark.parametrize(("codec", "version"), [("zstd", 3), ("zstd", 2), ("zlib", 2),
                                                ("zlib", 3)])
def test_build_compressed(codec: str, version: int, tmp_path: Path) -> None:
    """From obj22z's code objects (not obj22's: each compile names its own ``__hip_cuid_``)."""
    entries = _entries(bytes(read_bundle(_section_bundle(build("obj22z"))).data))
    _ok(fatbinkit("build", "-o", tmp_path / "k.hipfb", "--compress", codec, "--ccob-version",
                  str(version), *_hsaco_args(entries, tmp_path)))
    ours = CompressedHeader.unpack((tmp_path / "k.hipfb").read_bytes())
    if version == 3:  # what clang 22 --offload-compress put in obj22z, from the same source
        clang = CompressedHeader.unpack(_section_bundle(build("obj22z")))
    else:
        ids = ",".join(n for n, _ in entries)
        files = [f"-input={tmp_path / f'{n}.hsaco'}" for n in range(len(entries))]
        proc = run_llvm(22, "clang-offload-bundler", "-type=o", "-bundle-align=4096",
                        f"-targets=host-x86_64-unknown-linux-gnu,{ids}", "-input=/dev/null",
                        *files, f"-output={tmp_path / 'clang'}", "-compress",
                        env={"COMPRESSED_BUNDLE_FORMAT_VERSION": "2"})
        assert proc.returncode == 0, proc.stderr
        clang = CompressedHeader.unpack((tmp_path / "clang").read_bytes())
    assert (ours.version, ours.uncompressed_size, ours.hash) == (
        clang.version, clang.uncompressed_size, clang.hash)
    assert ours.codec == codec
    outs = [tmp_path / f"{n}.out" for n in range(len(entries))]
    for major in (19, 22) if version == 2 else (22,):
        proc = run_llvm(major, "clang-offload-bundler", "-unbundle", "-type=o",
                        "-targets=" + ",".join(n for n, _ in entries),
                        f"-input={tmp_path / 'k.hipfb'}", *(f"-output={o}" for o in outs))
        assert proc.returncode == 0, proc.stderr
        assert [o.read_bytes() for o in outs] == [d for _, d in entries]


def _gfx90a_xnack(tmp_path: Path) -> Path:
    """obj22's gfx90a:xnack+ code object (code object v6: xnack on, sramecc any)."""
    (data,) = [d for n, d in _entries(_section_bundle(build("obj22")))
               if n.endswith("gfx90a:xnack+")]
    path = tmp_path / "k.hsaco"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(("label", "message"), [
    ("gfx942", "the code object is for gfx90a, labelled gfx942: label it gfx90a:xnack+"),
    ("gfx90a", "the code object is for gfx90a:xnack+, labelled gfx90a: label it gfx90a:xnack+"),
    ("gfx90a:xnack-", "for gfx90a:xnack+, labelled gfx90a:xnack-"),
    ("gfx90a:sramecc+:xnack+", "for gfx90a:xnack+, labelled gfx90a:sramecc+:xnack+"),
])
def test_build_refuses_a_wrong_label(label: str, message: str, tmp_path: Path) -> None:
    path = _gfx90a_xnack(tmp_path)
    proc = fatbinkit("build", "-o", tmp_path / "k.hipfb", "--hsaco", f"{label}={path}")
    assert proc.returncode == 3
    assert message in proc.stderr and str(path) in proc.stderr
    assert not (tmp_path / "k.hipfb").exists()


def test_build_label_spellings(tmp_path: Path) -> None:
    """Features in any order, as clang accepts them; the entry says them in clang's."""
    path = _gfx90a_xnack(tmp_path)
    image = CodeObjectImage.from_file("gfx90a:xnack+", path)
    assert image.bundle_id == "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+"
    assert str(image) == f"gfx90a:xnack+ code object v6, {path.stat().st_size} bytes"
    cupy = _entries(_section_bundle(fetch(CUPY_ROCM7_RANDOM)))
    (gfx942,) = [d for n, d in cupy if n.endswith("--gfx942")]
    assert CodeObjectImage("gfx942", gfx942).code_object_version == 6


def _as_v3(data: bytes, xnack: bool) -> bytes:
    """A code object v4 with its header rewritten as v3's (``EI_ABIVERSION`` 1, the xnack
    and sramecc single bits of ``getEFlagsV3``): LLVM 19 and later write no v3 ("invalid
    integral value '3' in '-mcode-object-version=3'"), ROCm 5 and older did."""
    out = bytearray(data)
    out[8] = 1
    flags = int.from_bytes(out[48:52], "little") & 0xFF  # EF_AMDGPU_MACH
    out[48:52] = (flags | (0x100 if xnack else 0)).to_bytes(4, "little")
    return bytes(out)


def test_code_object_v3_labels() -> None:
    """A v3 header records on or off for each feature the processor has (CLR's
    ``getProcName``): a label may leave it out, not contradict it; the entry kind is ``hip``
    (HIPUtility.cpp: "For code object version 2 and 3, the offload kind in bundle ID is
    'hip'")."""
    cupy = _entries(_section_bundle(fetch(CUPY_ROCM5_RANDOM)))
    (gfx906,) = [d for n, d in cupy if n.endswith("--gfx906")]
    assert CodeObjectImage("gfx906", gfx906).bundle_id == "hipv4-amdgcn-amd-amdhsa--gfx906"
    v3 = _as_v3(gfx906, xnack=True)
    for label in ("gfx906", "gfx906:xnack+", "gfx906:sramecc-:xnack+"):
        image = CodeObjectImage(label, v3)
        assert (image.code_object_version, image.bundle_id) == (
            3, f"hip-amdgcn-amd-amdhsa--{label}")
    for label in ("gfx906:xnack-", "gfx906:sramecc+"):
        with pytest.raises(InvalidArgumentError, match=re.escape(f"labelled {label}: its")):
            CodeObjectImage(label, v3)
    with pytest.raises(InvalidArgumentError, match="labelled gfx908"):
        CodeObjectImage("gfx908", v3)


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--hsaco", "gfx942"], 2, "expected TARGET=PATH"),
    (["--hsaco", "gfx942:xnack=k.hsaco"], 2, "bad feature 'xnack'"),
    (["--hsaco", "gfx942=k.hsaco", "--compress", "lz4"], 2, "zstd or zlib, not lz4"),
    (["--hsaco", "gfx942=k.hsaco", "--ccob-version", "2"], 2, "add --compress"),
    (["--hsaco", "gfx942=k.hsaco", "--cubin", "sm_90=k.cubin"], 2, "no --cubin or --ptx"),
    (["--hsaco", "gfx942=k.hsaco", "--backend", "fatbinary"], 2, "drop --backend"),
    (["--cubin", "sm_90=k.cubin", "--compress", "zlib"], 2, "zlib is for --hsaco"),
    (["--cubin", "sm_90=k.cubin", "--ccob-version", "3"], 2, "--ccob-version is for --hsaco"),
    (["--hsaco", "gfx942=notes.txt"], 3, "not an AMD code object"),
    (["--hsaco", "gfx942=k.hsaco", "--hsaco", "gfx942=k.hsaco"], 3, "two code objects for "
     "gfx942"),
])
def test_build_usage(args: list[str], status: int, message: str, tmp_path: Path) -> None:
    (gfx942,) = [d for n, d in _entries(_section_bundle(build("obj22"))) if n.endswith("gfx942")]
    (tmp_path / "k.hsaco").write_bytes(gfx942)
    (tmp_path / "notes.txt").write_text("not a code object\n" * 10)
    proc = fatbinkit("build", "-o", "k.hipfb", *args, cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "k.hipfb").exists()


def test_build_bundle_api_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="at least one code object"):
        build_bundle([])
    with pytest.raises(InvalidArgumentError, match="compression 'lz4'"):
        build_bundle([], compression="lz4")
    with pytest.raises(InvalidArgumentError, match="version 1"):
        build_bundle([], compression="zstd", ccob_version=1)
    with pytest.raises(InvalidArgumentError, match="CodeObjectImage values"):
        build_bundle([b"\x7fELF"])  # type: ignore[list-item]


# --- embed --hip -----------------------------------------------------------------------------


def _readelf_sections(path: Path) -> dict[str, tuple[str, str, int]]:
    """binutils ``readelf -SW``: section name -> (type, flags, alignment)."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    rows = {}
    for m in re.finditer(r"\]\s+(\S+)\s+(\S+)\s+[0-9a-f]{16} [0-9a-f]+ [0-9a-f]+ [0-9a-f]{2}\s+"
                         r"([A-Za-z]*)\s+\d+\s+\d+\s+(\d+)$", out, re.M):
        rows[m[1]] = (m[2], m[3], int(m[4]))
    return rows


def _readelf(args: str, path: Path) -> str:
    return subprocess.run(["readelf", args, str(path)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Bundles written by ``fatbinkit build``: obj22's code objects plain, in CCOB v3 zstd and
    CCOB v2 zlib; generic19's plain."""
    folder = tmp_path_factory.mktemp("bundles")
    out = {}
    for name, source, extra in (("plain", "obj22", ()), ("v3", "obj22", ("--compress", "zstd")),
                                ("v2", "obj22", ("--compress", "zlib", "--ccob-version", "2")),
                                ("generic", "generic19", ())):
        args = _hsaco_args(_entries(_section_bundle(build(source))), folder)
        out[name] = folder / f"{name}.hipfb"
        _ok(fatbinkit("build", "-o", out[name], *extra, *args))
    return out


def _code_objects(bundle: Path) -> list[bytes]:
    return [d for _, d in _entries(bytes(read_bundle(bundle.read_bytes()).data))]


def test_hip_object_like_clangs(bundles: dict[str, Path], tmp_path: Path) -> None:
    _ok(fatbinkit("embed", "--hip", "-o", tmp_path / "k.o", bundles["plain"]))
    ours, clang = tmp_path / "k.o", build("obj19")
    for name in (".hip_fatbin", ".hipFatBinSegment", ".rela.hipFatBinSegment"):
        assert _readelf_sections(ours)[name] == _readelf_sections(clang)[name]
    reloc = re.compile(r"^0000000000000008 +\S+ R_X86_64_64 +0+ \.hip_fatbin \+ 0$", re.M)
    assert reloc.search(_readelf("-rW", clang)) and reloc.search(_readelf("-rW", ours))
    wrapper = re.compile(r"24 OBJECT  LOCAL  DEFAULT +\d+ __hip_fatbin_wrapper$", re.M)
    assert wrapper.search(_readelf("-sW", clang)) and wrapper.search(_readelf("-sW", ours))
    assert _section_bundle(ours) == bundles["plain"].read_bytes()


def _link(linker: str, objects: list[Path], out: Path) -> None:
    if linker == "gnu":
        proc = subprocess.run(["gcc", "-shared", "-o", str(out), *map(str, objects)],
                              capture_output=True, text=True)
    else:
        proc = run_llvm(int(linker[-2:]), "clang", "-fuse-ld=lld", "-shared", "-o", out,
                        *objects)
    assert proc.returncode == 0, proc.stderr


def _extracted(path: Path, folder: Path) -> list[bytes]:
    proc = fatbinkit("extract", path, "-o", folder)
    _ok(proc)
    return [Path(line).read_bytes() for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("linker", ["lld19", "lld22", "gnu"])
def test_hip_object_links(linker: str, bundles: dict[str, Path], tmp_path: Path) -> None:
    order = ("plain", "v3", "v2", "generic")
    _ok(fatbinkit("embed", "--hip", "-o", tmp_path / "k.o", *(bundles[n] for n in order)))
    lib = tmp_path / "libk.so"
    _link(linker, [tmp_path / "k.o"], lib)
    expected = [co for name in order for co in _code_objects(bundles[name])]
    assert _extracted(lib, tmp_path / "out") == expected
    sections = _readelf_sections(lib)
    assert sections[".hip_fatbin"] == ("PROGBITS", "A", 4096)
    assert sections[".hipFatBinSegment"] == ("PROGBITS", "WA", 8)
    # each record's slot: R_X86_64_RELATIVE to its bundle, as lld and ld write clang's
    fatbin = re.search(r"\.hip_fatbin +PROGBITS +([0-9a-f]{16})", _readelf("-SW", lib))
    assert fatbin
    starts = [int(fatbin[1], 16) + b.offset for b in
              read_bundles(elf.find_section(lib.read_bytes(), ".hip_fatbin") or b"")]
    relative = [int(a, 16) for a in re.findall(r"R_X86_64_RELATIVE +([0-9a-f]+)$",
                                                _readelf("-rW", lib), re.M)]
    assert starts and set(starts) <= set(relative)


def test_llvm_readelf_lists_ours(bundles: dict[str, Path], tmp_path: Path) -> None:
    """LLVM 22's readelf lists the first bundle of a section (../shared/ROCM.md §3.3): one
    bundle per library here, its URIs' bytes the code objects."""
    for name in ("plain", "generic"):
        _ok(fatbinkit("embed", "--hip", "-o", tmp_path / f"{name}.o", bundles[name]))
        lib = tmp_path / f"lib{name}.so"
        _link("lld22", [tmp_path / f"{name}.o"], lib)
        proc = run_llvm(22, "llvm-readelf", "--offloading", lib)
        assert proc.returncode == 0, proc.stderr
        rows = re.findall(r"^(\S+)\s+file://\S+#offset=(\d+)&size=(\d+)$", proc.stdout, re.M)
        data = lib.read_bytes()
        got = [(n, data[int(o):int(o) + int(s)]) for n, o, s in rows if not n.startswith("host")]
        assert got == _entries(bytes(read_bundle(bundles[name].read_bytes()).data))


def test_hip_object_beside_clangs(bundles: dict[str, Path], tmp_path: Path) -> None:
    """Linked with clang 19's own object: both modules are found, clang's first."""
    _ok(fatbinkit("embed", "--hip", "-o", tmp_path / "k.o", bundles["v3"]))
    lib = tmp_path / "libmix.so"
    _link("lld19", [build("obj19"), tmp_path / "k.o"], lib)
    theirs = _entries(_section_bundle(build("obj19")))
    assert _extracted(lib, tmp_path / "out") == (
        [d for _, d in theirs] + _code_objects(bundles["v3"]))


def test_hip_object_aarch64(bundles: dict[str, Path], tmp_path: Path) -> None:
    _ok(fatbinkit("embed", "--hip", "--machine", "aarch64", "-o", tmp_path / "k.o",
                  bundles["plain"], bundles["v2"]))
    assert "R_AARCH64_ABS64" in _readelf("-rW", tmp_path / "k.o")
    proc = run_llvm(22, "ld.lld", "-shared", "-o", tmp_path / "libk.so", tmp_path / "k.o")
    assert proc.returncode == 0, proc.stderr
    assert _extracted(tmp_path / "libk.so", tmp_path / "out") == (
        _code_objects(bundles["plain"]) + _code_objects(bundles["v2"]))


@pytest.mark.parametrize(("args", "status", "message"), [
    (["--target", "x86_64-pc-windows-msvc", "--machine", "aarch64", "b.hipfb"], 2,
     "contradicts --target"),
    (["--align", "128", "b.hipfb"], 2, "drop --style and --align"),
    (["--style", "ld", "b.hipfb"], 2, "drop --style and --align"),
    (["notes.txt"], 3, "is not a clang offload bundle"),
    (["tail.hipfb"], 3, "4 bytes follow the"),
    (["missing.hipfb"], 3, "missing.hipfb"),
])
def test_embed_hip_usage(args: list[str], status: int, message: str,
                         bundles: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "b.hipfb").write_bytes(bundles["plain"].read_bytes())
    (tmp_path / "tail.hipfb").write_bytes(bundles["plain"].read_bytes() + b"\0\0\0\1")
    (tmp_path / "notes.txt").write_text("not a bundle\n" * 10)
    proc = fatbinkit("embed", "--hip", "-o", "k.o", *args, cwd=tmp_path)
    assert proc.returncode == status, proc.stderr
    assert message in proc.stderr
    assert not (tmp_path / "k.o").exists()


@pytest.mark.parametrize("writer", [hip_object_bytes, coff.hip_object_bytes])
def test_hip_object_api_errors(writer: Callable[..., bytes]) -> None:
    with pytest.raises(InvalidArgumentError, match="no bundles"):
        writer([])
    with pytest.raises(InvalidArgumentError, match="unknown machine"):
        writer([b""], machine="riscv64")
    with pytest.raises(InvalidArgumentError, match="bundle 1 is not a clang offload bundle"):
        writer([write_bundle([]), b"\x7fELF" + bytes(60)])


# --- embed --hip for Windows: COFF -----------------------------------------------------------

COFF_MACHINES = {"x86_64": ("x86_64-pc-windows-msvc", "x64", "IMAGE_REL_AMD64_ADDR64"),
                 "aarch64": ("aarch64-pc-windows-msvc", "arm64", "IMAGE_REL_ARM64_ADDR64")}


@pytest.fixture(scope="module")
def clang_coff(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clang 22's own Windows HIP object (``--target=x86_64-pc-windows-msvc -c``, gfx942)."""
    folder = tmp_path_factory.mktemp("coff")
    for src in SOURCES.iterdir():
        (folder / src.name).write_bytes(src.read_bytes())
    proc = run_llvm(22, "clang", "-x", "hip", "-nogpulib", "-nogpuinc", "-O2",
                    "--offload-arch=gfx942", "--target=x86_64-pc-windows-msvc", "-c", "-o",
                    "kernels.obj", "kernels.hip", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    return folder / "kernels.obj"


def _coff_sections(path: Path) -> dict[str, tuple[int, int]]:
    """llvm-readobj 22 ``--sections``: section name -> (characteristics, relocation count)."""
    proc = run_llvm(22, "llvm-readobj", "--sections", path)
    assert proc.returncode == 0, proc.stderr
    found = re.findall(r"Name: (\S+) \(.*?RelocationCount: (\d+).*?Characteristics \[ "
                       r"\((0x[0-9A-F]+)\)", proc.stdout, re.S)
    return {name: (int(flags, 16), int(count)) for name, count, flags in found}


def test_coff_hip_object_like_clangs(clang_coff: Path, bundles: dict[str, Path],
                                     tmp_path: Path) -> None:
    ours = tmp_path / "k.obj"
    _ok(fatbinkit("embed", "--hip", "--target", "x86_64-pc-windows-msvc", "-o", ours,
                  bundles["plain"]))
    theirs, mine = _coff_sections(clang_coff), _coff_sections(ours)
    for name in (".hip_fatbin", ".hipFatBinSegment"):
        assert mine[name] == theirs[name]
    for path in (clang_coff, ours):
        proc = run_llvm(22, "llvm-readobj", "--relocations", "--symbols", path)
        assert re.search(r"\.hipFatBinSegment \{\s+0x8 IMAGE_REL_AMD64_ADDR64 \.hip_fatbin ",
                         proc.stdout)
        assert re.search(r"Name: __hip_fatbin_wrapper\s+Value: 0\s+Section: "
                         r"\.hipFatBinSegment \(\d+\)[^}]*StorageClass: Static", proc.stdout)


@pytest.mark.parametrize("machine", COFF_MACHINES)
def test_coff_hip_object_links(machine: str, bundles: dict[str, Path], tmp_path: Path) -> None:
    """lld-link 22 makes a DLL of it (section names cut to ``.hip_fat`` and ``.hipFatB``):
    fatbinkit follows each record, through the DLL's base relocations, to its bundle."""
    target, lld_machine, relocation = COFF_MACHINES[machine]
    order = ("plain", "v3", "v2", "generic")
    _ok(fatbinkit("embed", "--hip", "--target", target, "-o", tmp_path / "k.obj",
                  *(bundles[n] for n in order)))
    proc = run_llvm(22, "llvm-readobj", "--relocations", tmp_path / "k.obj")
    assert proc.stdout.count(f"{relocation} .hip_fatbin") == len(order)
    dll = tmp_path / "k.dll"
    proc = run_llvm(22, "lld-link", "/dll", "/noentry", f"/machine:{lld_machine}",
                    f"/out:{dll}", tmp_path / "k.obj")
    assert proc.returncode == 0, proc.stderr
    assert {".hip_fat", ".hipFatB"} <= set(_coff_sections(dll))
    expected = [co for name in order for co in _code_objects(bundles[name])]
    assert _extracted(dll, tmp_path / "out") == expected


def test_coff_hip_object_beside_clangs(clang_coff: Path, bundles: dict[str, Path],
                                       tmp_path: Path) -> None:
    _ok(fatbinkit("embed", "--hip", "--target", "x86_64-pc-windows-msvc", "-o",
                  tmp_path / "k.obj", bundles["v3"]))
    dll = tmp_path / "mix.dll"
    proc = run_llvm(22, "lld-link", "/dll", "/noentry", "/force:unresolved", f"/out:{dll}",
                    clang_coff, tmp_path / "k.obj")
    assert proc.returncode == 0, proc.stderr
    data = clang_coff.read_bytes()
    (section,) = pe.read(data).find(".hip_fatbin")
    theirs = [d for _, d in _entries(data[section.offset:section.offset + section.size])]
    assert _extracted(dll, tmp_path / "out") == theirs + _code_objects(bundles["v3"])


# --- AOTInductor-style blobs -----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["plain", "v3"])
def test_aoti_blob_reads_as_hip(kind: str, bundles: dict[str, Path], tmp_path: Path) -> None:
    """``__triton_add_start``/``_end`` around a bundle in ``.rodata``, as AOTInductor embeds
    each kernel: read as HIP code in the object and in the library lld links from it."""
    _ok(fatbinkit("embed", "-o", tmp_path / "k.o", f"triton_add={bundles[kind]}"))
    _link("lld22", [tmp_path / "k.o"], tmp_path / "libk.so")
    for path in (tmp_path / "k.o", tmp_path / "libk.so"):
        proc = fatbinkit("ls", "--json", path)
        _ok(proc)
        assert {'"symbol": "__triton_add_start"', '"vendor": "hip"'} <= set(
            re.findall(r'"(?:symbol|vendor)": "[^"]*"', proc.stdout))
        assert _extracted(path, tmp_path / f"out-{path.name}") == _code_objects(bundles[kind])


def test_aoti_blob_in_coff_object(bundles: dict[str, Path], tmp_path: Path) -> None:
    """The same blob in a Windows object (``.rdata``) reads as HIP code."""
    obj = tmp_path / "k.obj"
    _ok(fatbinkit("embed", "--target", "x86_64-pc-windows-msvc", "-o", obj,
                  f"triton_add={bundles['v2']}"))
    proc = fatbinkit("ls", "--json", obj)
    _ok(proc)
    assert '"symbol": "__triton_add_start"' in proc.stdout
    assert _extracted(obj, tmp_path / "out") == _code_objects(bundles["v2"])
