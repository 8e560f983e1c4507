"""AMDGPU code objects and target IDs (fatbinkit.formats.amdgpu, .hsaco) against real code
objects built on this GPU-less machine by Triton's pip wheel (its bundled AMD LLVM: the compiler
for gfx942, gfx90a, gfx1100 and gfx950, and its assembler for code object v4/v6, generic targets
and explicit sramecc/xnack settings), checked with the oracles: the system llvm-readelf/readobj
(LLVM 14: the metadata note as YAML, the ELF header flags it can name), pyelftools (header,
symbols, descriptor bytes) and the LLVM assembler's own e_flags for a target ID it was given.
Hostile inputs are real code objects with one field broken."""

from __future__ import annotations

import io
import mmap
import os
import re
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hipbuild import build, remarks
from llvm import run_llvm
from thirdparty import (
    CUPY_ROCM5_RANDOM,
    CUPY_ROCM7_RANDOM,
    JAX_ROCM7_PRNG,
    JAX_ROCM7_SOLVER,
    WheelMember,
    fetch,
)

pytest.importorskip("triton")

from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_TYPE, ENUM_EI_OSABI
from elftools.elf.sections import SymbolTableSection

from fatbinkit.errors import (
    FormatError,
    InvalidArgumentError,
    NotFoundError,
    TruncatedError,
    UnsupportedError,
)
from fatbinkit.formats import amdgpu, elf, hsaco
from fatbinkit.formats.amdgpu import MACH, TargetId, amdgpu_arch, parse_triple
from fatbinkit.formats.hsaco import (
    CodeObject,
    FeatureSetting,
    KernelDescriptor,
    is_code_object,
    read_code_object,
    read_header,
)
from fatbinkit.formats.offload_bundle import read_bundle, read_bundles

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton
from triton.backends.amd.compiler import assemble_amdgcn
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import fatbinkit.demo.kernels as tk

READELF = "/usr/bin/llvm-readelf"
READOBJ = "/usr/bin/llvm-readobj"


@dataclass(frozen=True)
class Built:
    """A code object and what its producer was asked for (the target ID given to LLVM)."""

    name: str
    data: bytes
    path: Path
    asked: str  # the target ID LLVM compiled or assembled for
    code_object_version: int


def _compile(fn: Any, signature: dict[str, str], constexprs: dict[str, int], arch: str) -> Any:
    warp = 32 if int(re.match(r"gfx(\d+)", arch)[1]) >= 100 else 64  # type: ignore[index]
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                          target=GPUTarget("hip", arch, warp))


def _assemble(source: str, processor: str, features: str, version: int) -> bytes:
    """Re-assemble Triton's AMDGCN for another code object version / processor / features
    with the wheel's LLVM, linked as Triton links it."""
    from triton._C.libtriton import amd  # the wheel's lld entry point

    source = re.sub(r'\.amdgcn_target "[^"]*"', "", source)
    source = re.sub(r"\.amdhsa_code_object_version \d", f".amdhsa_code_object_version {version}",
                    source)
    if "-xnack" in features:
        source = source.replace(".amdhsa_reserve_xnack_mask 1", ".amdhsa_reserve_xnack_mask 0")
    obj = assemble_amdgcn(source, processor, features)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "in.o").write_bytes(obj)
        amd.link_hsaco(str(Path(tmp) / "in.o"), str(Path(tmp) / "out.hsaco"))
        return (Path(tmp) / "out.hsaco").read_bytes()


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """Every code object of the suite, compiled once per session."""
    out: dict[str, Built] = {}
    tmp = tmp_path_factory.mktemp("hsaco")

    def keep(name: str, data: bytes, asked: str, version: int) -> None:
        path = tmp / f"{name}.hsaco"
        path.write_bytes(data)
        out[name] = Built(name, data, path, asked, version)

    asm = {}
    for arch in ("gfx942", "gfx90a", "gfx1100", "gfx950"):
        k = _compile(tk.add_kernel, tk.ADD_SIGNATURE, tk.ADD_CONSTEXPRS, arch)
        keep(f"add_{arch}", k.asm["hsaco"], arch, 5)
        asm[arch] = k.asm["amdgcn"]
    k = _compile(tk.matmul_kernel, tk.MATMUL_SIGNATURE, tk.MATMUL_CONSTEXPRS, "gfx942")
    keep("matmul_gfx942", k.asm["hsaco"], "gfx942", 5)
    for name, arch, processor, features, version, asked in [
        ("v6_gfx942", "gfx942", "gfx942", "", 6, "gfx942"),
        ("v6_gfx942_sx", "gfx942", "gfx942", "+sramecc,-xnack", 6, "gfx942:sramecc+:xnack-"),
        ("v4_gfx90a_x", "gfx90a", "gfx90a", "+xnack", 4, "gfx90a:xnack+"),
        ("v6_gfx9_4_generic", "gfx942", "gfx9-4-generic", "", 6, "gfx9-4-generic"),
        ("v6_gfx11_generic", "gfx1100", "gfx11-generic", "", 6, "gfx11-generic"),
        ("v4_gfx1100", "gfx1100", "gfx1100", "", 4, "gfx1100"),
    ]:
        keep(name, _assemble(asm[arch], processor, features, version), asked, version)
    return out


@pytest.fixture(params=["add_gfx942", "add_gfx90a", "add_gfx1100", "add_gfx950", "matmul_gfx942",
                        "v6_gfx942", "v6_gfx942_sx", "v4_gfx90a_x", "v6_gfx9_4_generic",
                        "v6_gfx11_generic", "v4_gfx1100"])
def obj(request: pytest.FixtureRequest, built: dict[str, Built]) -> Built:
    return built[request.param]


def _symtab(e: ELFFile) -> SymbolTableSection:
    section = e.get_section_by_name(".symtab")
    assert isinstance(section, SymbolTableSection)
    return section


def _symbol(symtab: SymbolTableSection, name: str) -> Any:
    found = symtab.get_symbol_by_name(name)
    assert found is not None and len(found) == 1
    return found[0]


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


# --- a small reader for the YAML llvm-readelf --notes prints (block style, as LLVM writes it)

def _scalar(text: str) -> Any:
    if text.startswith("'") and text.endswith("'"):
        return text[1:-1].replace("''", "'")
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [_scalar(t.strip()) for t in inner.split(",")] if inner else []
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"0x[0-9a-fA-F]+", text):
        return int(text, 16)
    if text in ("true", "false"):
        return text == "true"
    return text


def _block(lines: list[tuple[int, str]], pos: int, indent: int) -> tuple[Any, int]:
    if lines[pos][1].startswith("- ") or lines[pos][1] == "-":
        items = []
        while pos < len(lines) and lines[pos][0] == indent and lines[pos][1].startswith("-"):
            rest = lines[pos][1][1:].lstrip()
            if not rest:
                value, pos = _block(lines, pos + 1, lines[pos + 1][0])
            elif re.match(r"^[^'\"\[][^:]*:( |$)", rest):
                lines[pos] = (indent + 2, rest)
                value, pos = _block(lines, pos, indent + 2)
            else:
                value, pos = _scalar(rest), pos + 1
            items.append(value)
        return items, pos
    mapping: dict[str, Any] = {}
    while pos < len(lines) and lines[pos][0] == indent and not lines[pos][1].startswith("- "):
        key, _, value = lines[pos][1].partition(":")
        value = value.strip()
        if value:
            mapping[key] = _scalar(value)
            pos += 1
        else:
            deeper = lines[pos + 1][0]
            mapping[key], pos = _block(lines, pos + 1, deeper)
    return mapping, pos


def readelf_metadata(path: Path, text: str | None = None) -> dict[str, Any]:
    """The AMDGPU metadata map as ``llvm-readelf --notes`` prints it (the system's, or
    ``text``, another's output)."""
    text = _run(READELF, "--notes", str(path)) if text is None else text
    body = re.split(r"\n\s*---\n", text.split("AMDGPU Metadata:", 1)[1], maxsplit=1)[1]
    body = body.split("\n...", 1)[0]
    lines = [(len(line) - len(line.lstrip(" ")), line.strip()) for line in body.splitlines()
             if line.strip()]
    value, end = _block(lines, 0, 0)
    assert end == len(lines)
    return value  # type: ignore[no-any-return]


def readobj_flags(paths: list[Path]) -> list[set[str]]:
    """The names ``llvm-readobj -h`` prints in each file's Flags list."""
    text = _run(READOBJ, "-h", *map(str, paths))
    blocks = re.findall(r"Flags \[ \(0x[0-9A-F]+\)\n(.*?)\s*\]", text, re.S)
    assert len(blocks) == len(paths), text[:2000]
    return [set(re.findall(r"(EF_AMDGPU_\w+)", b)) for b in blocks]


# --- code objects against the oracles

def test_header_matches_pyelftools(obj: Built) -> None:
    co = read_code_object(obj.data)
    with open(obj.path, "rb") as f:
        h = ELFFile(f).header
    # pyelftools names OSABI 64 after ARM (ELFOSABI_ARM_AEABI, the same number)
    assert co.osabi == hsaco.ELFOSABI_AMDGPU_HSA == ENUM_EI_OSABI[h.e_ident.EI_OSABI]
    assert h.e_machine == "EM_AMDGPU"
    assert co.abi_version == h.e_ident.EI_ABIVERSION
    assert co.elf_type == ENUM_E_TYPE[h.e_type]
    assert co.flags == h.e_flags
    assert co.mach == h.e_flags & 0xFF
    assert co.code_object_version == obj.code_object_version
    assert is_code_object(obj.data)


def test_target_id_is_what_llvm_was_asked(obj: Built) -> None:
    """LLVM encoded the target ID it was given into e_flags; reading e_flags gives it back."""
    co = read_code_object(obj.data)
    assert str(co.target_id) == obj.asked
    assert co.target_id == TargetId.parse(obj.asked)
    assert co.processor == obj.asked.split(":")[0]
    assert co.generic_version == (1 if co.target_id and co.target_id.is_generic else
                                  0 if obj.code_object_version == 6 else None)
    # what listing reads: the header alone says the same, and reads no note
    head = read_header(obj.data)
    assert (head.target_id, head.code_object_version, head.generic_version) == (
        co.target_id, co.code_object_version, co.generic_version)
    assert (head.metadata, head.kernels) == (None, ())


def test_flags_match_llvm_readobj(built: dict[str, Built]) -> None:
    """LLVM 14 names the v4 feature fields (it reads EI_ABIVERSION 2 and 3 alike) and the MACH
    values it knew; every name it prints is what we decode."""
    objs = [b for b in built.values() if b.code_object_version in (4, 5)]
    names = readobj_flags([b.path for b in objs])
    compared = 0
    for b, seen in zip(objs, names, strict=True):
        co = read_code_object(b.data)
        for feature in ("XNACK", "SRAMECC"):
            setting = getattr(co, feature.lower())
            printed = [n for n in seen if n.startswith(f"EF_AMDGPU_FEATURE_{feature}_")]
            if setting == FeatureSetting.UNSUPPORTED:
                assert printed in ([], [f"EF_AMDGPU_FEATURE_{feature}_UNSUPPORTED_V4"])
            else:
                assert printed == [f"EF_AMDGPU_FEATURE_{feature}_{setting.name}_V4"]
                compared += 1
        mach = [n for n in seen if n.startswith("EF_AMDGPU_MACH_AMDGCN_")]
        if mach:
            assert mach == [f"EF_AMDGPU_MACH_AMDGCN_{co.processor.upper()}"]  # type: ignore[union-attr]
            compared += 1
    assert compared >= 8


def test_metadata_matches_llvm_readelf(obj: Built) -> None:
    """The whole decoded note equals what llvm-readelf --notes prints, and each kernel field
    is its key."""
    co = read_code_object(obj.data)
    theirs = readelf_metadata(obj.path)
    assert co.metadata == theirs
    assert co.target_string == theirs["amdhsa.target"]
    kernels = theirs["amdhsa.kernels"]
    assert [k.name for k in co.kernels] == [k[".name"] for k in kernels] and kernels
    for k, t in zip(co.kernels, kernels, strict=True):
        assert k.symbol == t[".symbol"] == k.name + ".kd"
        for field in ("sgpr_count", "vgpr_count", "agpr_count", "sgpr_spill_count",
                      "vgpr_spill_count", "group_segment_fixed_size",
                      "private_segment_fixed_size", "kernarg_segment_size",
                      "kernarg_segment_align", "wavefront_size", "max_flat_workgroup_size",
                      "uses_dynamic_stack"):
            assert getattr(k, field) == t.get("." + field), field


def test_descriptor_matches_pyelftools(obj: Built) -> None:
    """The .kd symbol's 64 bytes as pyelftools finds them; the entry offset lands on the
    kernel's code symbol; pack() gives the bytes back."""
    co = read_code_object(obj.data)
    with open(obj.path, "rb") as f:
        e = ELFFile(f)
        symtab = _symtab(e)
        for k in co.kernels:
            kd, code = _symbol(symtab, k.name + ".kd"), _symbol(symtab, k.name)
            assert kd["st_size"] == 64 and kd["st_info"]["type"] == "STT_OBJECT"
            section = e.get_section(kd["st_shndx"])
            at = kd["st_value"] - section["sh_addr"]
            raw = section.data()[at:at + 64]
            assert k.descriptor is not None
            assert k.descriptor.pack() == raw
            assert KernelDescriptor.unpack(raw) == k.descriptor
            assert kd["st_value"] + k.descriptor.kernel_code_entry_byte_offset == code["st_value"]


def test_descriptor_agrees_with_metadata(obj: Built) -> None:
    """The consistency check finds nothing in what LLVM wrote, and the register fields fit the
    metadata counts: granulated VGPRs = ceil(vgpr_count / granule) - 1, the granule being 8
    for gfx90a/gfx942/gfx950 and for wave32 GFX11, 4 for wave64 GFX10+ (LLVM
    AMDGPUBaseInfo.cpp getVGPREncodingGranule)."""
    co = read_code_object(obj.data)
    for k in co.kernels:
        d = k.descriptor
        assert d is not None and d.disagreements(k) == ()
        assert d.wave32 == (k.wavefront_size == 32)
        assert d.uses_dynamic_stack is False
        assert d.enable_private_segment == bool(k.private_segment_fixed_size)
        granule = 8 if d.wave32 or co.processor in ("gfx90a", "gfx942", "gfx950",
                                                    "gfx9-4-generic") else 4
        assert d.granulated_vgpr_count == -(-k.vgpr_count // granule) - 1  # type: ignore[operator]


def test_descriptor_check_reports_each_difference(built: dict[str, Built]) -> None:
    k = read_code_object(built["add_gfx942"].data).kernels[0]
    d = k.descriptor
    assert d is not None
    from dataclasses import replace
    bad = replace(d, group_segment_fixed_size=1024, kernarg_size=20,
                  kernel_code_properties=d.kernel_code_properties | 1 << 10 | 1 << 11)
    assert bad.disagreements(k) == (
        "group_segment_fixed_size: descriptor 1024, metadata 0",
        "kernarg_size: descriptor 20, metadata 48",
        "uses_dynamic_stack: descriptor True, metadata False",
        "wavefront_size: descriptor 32, metadata 64",
    )
    assert replace(k, group_segment_fixed_size=None).descriptor.disagreements(  # type: ignore[union-attr]
        replace(k, group_segment_fixed_size=None)) == ()


def test_strings(built: dict[str, Built]) -> None:
    assert str(read_code_object(built["add_gfx942"].data)) == "gfx942 COv5 (1 kernel)"
    assert str(read_code_object(built["v6_gfx942_sx"].data)) == \
        "gfx942:sramecc+:xnack- COv6 (1 kernel)"
    assert str(read_code_object(built["v6_gfx11_generic"].data)) == \
        "gfx11-generic COv6 generic v1 (1 kernel)"
    k = read_code_object(built["add_gfx1100"].data).kernel("add_kernel")
    assert str(k).startswith("kernel add_kernel: ") and "wave32" in str(k)
    m = read_code_object(built["matmul_gfx942"].data).kernels[0]
    assert f"{m.agpr_count} AGPRs" in str(m) and "spills" in str(m)
    assert str(FeatureSetting.ANY) == "any"


def test_target_string_spellings(obj: Built) -> None:
    """Newest LLVM writes amdgpuX.YZ-amd-amdhsa-unknown-<proc>; its arch is amdgpu_arch()."""
    co = read_code_object(obj.data)
    triple = parse_triple(co.target_string)  # type: ignore[arg-type]
    assert triple.arch == amdgpu_arch(triple.processor)  # type: ignore[arg-type]
    assert (triple.vendor, triple.os, triple.environment) == ("amd", "amdhsa", "unknown")
    assert str(triple) == co.target_string
    if obj.name.startswith(("add_", "matmul_")):  # compiled, not re-assembled: same processor
        assert triple.processor == co.processor


def test_kernel_lookup(built: dict[str, Built]) -> None:
    co = read_code_object(built["add_gfx942"].data)
    assert co.kernel("add_kernel") is co.kernels[0]
    with pytest.raises(NotFoundError, match="close: add_kernel"):
        co.kernel("add_kernal")


def test_inputs_and_offset(built: dict[str, Built], tmp_path: Path) -> None:
    data = built["add_gfx90a"].data
    want = read_code_object(data)
    assert read_code_object(bytearray(data)) == want
    assert read_code_object(memoryview(data)) == want
    padded = bytes(4096) + data
    assert read_code_object(padded, 4096) == want
    path = tmp_path / "k.bin"
    path.write_bytes(padded)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert read_code_object(m, 4096) == want
        assert not is_code_object(m)
    with pytest.raises(InvalidArgumentError):
        read_code_object(str(path))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        read_code_object(data, len(data) + 1)


# --- e_flags -> target ID, by hand from llvm/test/CodeGen/AMDGPU/elf-header-flags-mach.ll,
# ELF.h and the code objects ROCM.md lists (clang 19/22, ROCm 5 and 7, Triton)

FLAGS_TABLE = [
    # EI_ABIVERSION, e_flags, target ID, xnack, sramecc, generic version
    (3, 0x54C, "gfx942", "ANY", "ANY", None),  # clang 19 gfx942 (v5)
    (3, 0x73F, "gfx90a:xnack+", "ON", "ANY", None),
    (3, 0x41, "gfx1100", "UNSUPPORTED", "UNSUPPORTED", None),
    (4, 0x1000054, "gfx11-generic", "UNSUPPORTED", "UNSUPPORTED", 1),
    (4, 0x1000251, "gfx9-generic:xnack-", "OFF", "UNSUPPORTED", 1),
    (4, 0xE4C, "gfx942:sramecc+:xnack-", "OFF", "ON", 0),
    (4, 0x1000059, "gfx12-generic", "UNSUPPORTED", "UNSUPPORTED", 1),  # clang 22
    (4, 0x549, "gfx1250", "ANY", "ANY", 0),
    (4, 0x54F, "gfx950", "ANY", "ANY", 0),  # ROCm 7
    (4, 0x36, "gfx1030", "UNSUPPORTED", "UNSUPPORTED", 0),
    (2, 0x52F, "gfx906", "ANY", "ANY", None),  # ROCm 5: 0x500 = sramecc ANY | xnack ANY
    (2, 0x128, "gfx801", "ANY", "UNSUPPORTED", None),
    (2, 0x29, "gfx802", "UNSUPPORTED", "UNSUPPORTED", None),
    (2, 0x133, "gfx1010", "ANY", "UNSUPPORTED", None),
    (2, 0xC40, "gfx940:sramecc+", "UNSUPPORTED", "ON", None),  # removed from LLVM
    (2, 0x84B, "gfx941:sramecc-", "UNSUPPORTED", "OFF", None),
    # v3: single bits, +/- for each feature the processor supports (CLR getProcName)
    (1, 0x33F, "gfx90a:sramecc+:xnack+", "ON", "ON", None),
    (1, 0x13F, "gfx90a:sramecc-:xnack+", "ON", "OFF", None),
    (1, 0x2C, "gfx900:xnack-", "OFF", "OFF", None),
    (1, 0x141, "gfx1100", "ON", "OFF", None),  # xnack bit on a processor without it
    (1, 0x150, "gfx1310:xnack+", "ON", "OFF", None),  # not in CLR's table: the bit says on
    (1, 0x50, "gfx1310", "OFF", "OFF", None),
    (0, 0x12C, "gfx900:xnack+", "ON", "OFF", None),  # v2: LLVM writes the v3 layout
]


def _patched(data: bytes, abi: int, flags: int, osabi: int = 64) -> bytes:
    out = bytearray(data)
    out[7], out[8] = osabi, abi
    struct.pack_into("<I", out, 0x30, flags)
    return bytes(out)


@pytest.mark.parametrize(("abi", "flags", "target", "xnack", "sramecc", "generic"), FLAGS_TABLE)
def test_flags_table(built: dict[str, Built], abi: int, flags: int, target: str, xnack: str,
                     sramecc: str, generic: int | None) -> None:
    co = read_code_object(_patched(built["add_gfx942"].data, abi, flags))
    assert str(co.target_id) == target
    assert (co.xnack.name, co.sramecc.name) == (xnack, sramecc)
    assert co.generic_version == generic
    assert co.code_object_version == abi + 2
    assert co.mach == flags & 0xFF and co.flags == flags


def test_flags_table_matches_llvm_readobj(built: dict[str, Built], tmp_path: Path) -> None:
    """The rows LLVM 14 can read (v3 to v5 and the MACH values it knew), read by it too."""
    rows = [r for r in FLAGS_TABLE if r[0] in (1, 2, 3)]
    paths = []
    for i, (abi, flags, *_rest) in enumerate(rows):
        paths.append(tmp_path / f"{i}.hsaco")
        paths[-1].write_bytes(_patched(built["add_gfx942"].data, abi, flags))
    for (abi, _flags, target, xnack, sramecc, _g), seen in zip(rows, readobj_flags(paths),
                                                            strict=True):
        if abi == 1:
            assert ("EF_AMDGPU_FEATURE_XNACK_V3" in seen) == (xnack == "ON")
            assert ("EF_AMDGPU_FEATURE_SRAMECC_V3" in seen) == (sramecc == "ON")
        elif xnack != "UNSUPPORTED":
            assert f"EF_AMDGPU_FEATURE_XNACK_{xnack}_V4" in seen
        mach = [n for n in seen if n.startswith("EF_AMDGPU_MACH_AMDGCN_")]
        assert mach in ([], [f"EF_AMDGPU_MACH_AMDGCN_{target.split(':')[0].upper()}"])


def test_other_osabi_and_unknown_values(built: dict[str, Built]) -> None:
    data = built["add_gfx942"].data
    pal = read_code_object(_patched(data, 0, 0x33F, osabi=hsaco.ELFOSABI_AMDGPU_PAL))
    assert pal.code_object_version is None and str(pal.target_id) == "gfx90a:sramecc+:xnack+"
    assert str(pal).startswith("gfx90a:sramecc+:xnack+ OSABI 65 ABI 0")
    newer = read_code_object(_patched(data, 9, 0x74C))
    assert (newer.code_object_version, newer.abi_version) == (None, 9)
    assert str(newer.target_id) == "gfx942:xnack+"  # the v4 layout, kept by every version since
    unknown = read_code_object(_patched(data, 3, 0x5FF))
    assert unknown.processor is None and unknown.target_id is None
    assert str(unknown).startswith("MACH 0xff COv5")


def test_mach_table_matches_llvm_assembler() -> None:
    """Every gfx processor of MACH assembled by the wheel's LLVM: the MACH it writes is ours,
    and generic targets carry generic version 1 (gfx940/941 are gone from LLVM: only named)."""
    checked = 0
    for mach, processor in MACH.items():
        if not processor.startswith("gfx") or processor in ("gfx940", "gfx941"):
            continue
        co = read_code_object(assemble_amdgcn(".amdhsa_code_object_version 6\n", processor, ""))
        assert (co.mach, co.processor, co.elf_type) == (mach, processor, 1)
        assert co.generic_version == (1 if amdgpu.is_generic(processor) else 0)
        assert co.metadata is None and co.kernels == ()
        checked += 1
    assert checked == len(MACH) - 16 - 2  # all but the r600 family and gfx940/941


def test_mach_table_matches_llvm_readobj(tmp_path: Path, built: dict[str, Built]) -> None:
    """Every MACH value LLVM 14 names is named the same here."""
    paths = []
    for value in range(0x20, 0x100):
        paths.append(tmp_path / f"{value:02x}.hsaco")
        paths[-1].write_bytes(_patched(built["add_gfx942"].data, 2, value))
    named = 0
    for value, seen in zip(range(0x20, 0x100), readobj_flags(paths), strict=True):
        mach = [n for n in seen if n.startswith("EF_AMDGPU_MACH_AMDGCN_")]
        if mach:
            assert mach == [f"EF_AMDGPU_MACH_AMDGCN_{MACH[value].upper()}"]
            named += 1
    assert named >= 30  # LLVM 14 knows gfx600 to gfx1036 (not gfx940, gfx942 and newer)


def test_processor_features_agree_with_llvm_assembler() -> None:
    """Where CLR's table says a processor has xnack/sramecc, LLVM writes ANY for it in v6, and
    UNSUPPORTED where it says not."""
    assert set(MACH.values()) - set(amdgpu.PROCESSOR_FEATURES) == {  # newer/older than CLR's
        "r600", "r630", "rs880", "rv670", "rv710", "rv730", "rv770", "cedar", "cypress",
        "juniper", "redwood", "sumo", "barts", "caicos", "cayman", "turks", "gfx600", "gfx601",
        "gfx602", "gfx1152", "gfx1153", "gfx1154", "gfx1170", "gfx1171", "gfx1172", "gfx1250",
        "gfx1251", "gfx1310", "gfx11-7-generic", "gfx12-5-generic", "gfx13-generic"}
    for processor, features in amdgpu.PROCESSOR_FEATURES.items():
        if processor in ("gfx940", "gfx941"):
            continue
        co = read_code_object(assemble_amdgcn(".amdhsa_code_object_version 6\n", processor, ""))
        assert (co.xnack != FeatureSetting.UNSUPPORTED) == features.xnack, processor
        assert (co.sramecc != FeatureSetting.UNSUPPORTED) == features.sramecc, processor


def test_target_id_of_every_setting_llvm_writes() -> None:
    """Each processor family x each sramecc/xnack request x code object v4, v5, v6 (v6 also
    generic targets), assembled by the wheel's LLVM: the target ID read from e_flags is the one
    requested, less the features the processor lacks (LLVM warns and writes UNSUPPORTED; CLR
    adds nothing for those). Triton's LLVM no longer writes v2/v3 (it aborts), so those layouts
    are covered by FLAGS_TABLE and llvm-readobj alone."""
    wanted = {"+sramecc": ("sramecc", True), "-sramecc": ("sramecc", False),
              "+xnack": ("xnack", True), "-xnack": ("xnack", False)}
    checked = 0
    for version in (4, 5, 6):
        for processor in ("gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010",
                          "gfx1030", "gfx1100", "gfx9-generic", "gfx9-4-generic",
                          "gfx10-1-generic"):
            if version < 6 and amdgpu.is_generic(processor):
                continue
            support = amdgpu.PROCESSOR_FEATURES[processor]
            for features in ("", "+xnack", "-xnack", "+sramecc", "-sramecc", "+sramecc,-xnack",
                             "-sramecc,+xnack"):
                asked = dict(wanted[f] for f in features.split(",") if f)
                expected = TargetId(processor,
                                    asked.get("sramecc") if support.sramecc else None,
                                    asked.get("xnack") if support.xnack else None)
                co = read_code_object(assemble_amdgcn(
                    f".amdhsa_code_object_version {version}\n", processor, features))
                assert co.code_object_version == version
                assert co.target_id == expected, (version, processor, features, hex(co.flags))
                checked += 1
    assert checked == 210


# --- code objects built by clang 19 and 22 (tests/hipbuild.py), unbundled by fatbinkit

CLANG = ["bundle19", "obj19z", "obj22", "generic19"]  # v5 T3, v5 T3 (CCOB v2), v6 T3, v6 G3


def _clang_objects(name: str) -> list[tuple[str, bytes]]:
    """(bundle entry target ID, code object) for each hipv4 entry of fixture ``name``."""
    path = build(name)
    data = path.read_bytes()
    if name.startswith("bundle"):
        bundles = [read_bundle(data)]
    else:
        section = elf.find_section(data, ".hip_fatbin")
        assert section is not None
        bundles = read_bundles(section)
    out = [(e.bundle_id.target_id, bytes(e.data)) for b in bundles for e in b.entries
           if e.bundle_id.kind == "hipv4"]
    assert len(out) == 3
    return out


@pytest.mark.parametrize("name", CLANG)
def test_clang_code_objects(name: str, tmp_path: Path) -> None:
    """clang named each bundle entry by the target ID it compiled for: e_flags give it back.
    Each kernel's resources are clang's own -Rpass-analysis=kernel-resource-usage figures
    for that target, the metadata equals llvm-readelf 22's YAML and llvm-readelf 22 -h names
    the processor (and generic version)."""
    notes = remarks(name)
    major = 22 if name.endswith("22") else 19
    for target, data in _clang_objects(name):
        co = read_code_object(data)
        assert str(co.target_id) == target
        assert co.code_object_version == (6 if major == 22 or name.startswith("generic") else 5)
        path = tmp_path / f"{target.replace(':', '_')}.hsaco"
        path.write_bytes(data)
        header = run_llvm(22, "llvm-readelf", "-h", path).stdout
        flags = re.search(r"Flags:\s+(0x[0-9a-fA-F]+), (\S+?)(?:,|$)", header, re.M)
        assert flags is not None and int(flags[1], 16) == co.flags and flags[2] == co.processor
        assert ("generic_v1" in header) == bool(co.generic_version)
        theirs = readelf_metadata(path, run_llvm(22, "llvm-readelf", "--notes", path).stdout)
        assert co.metadata == theirs
        clang = notes[("kernels", target)]
        assert sorted(k.name for k in co.kernels) == sorted(clang)
        for k in co.kernels:
            r = clang[k.name]
            assert k.descriptor is not None and k.descriptor.disagreements(k) == ()
            sgprs = r["SGPRs"] if "SGPRs" in r else r["TotalSGPRs"]  # clang 22: TotalSGPRs
            assert (k.sgpr_count, k.vgpr_count) == (int(sgprs), int(r["VGPRs"])), k.name
            # no AGPRs before gfx90a: no remark line, no metadata key
            assert k.agpr_count == (int(r["AGPRs"]) if "AGPRs" in r else None), k.name
            assert k.private_segment_fixed_size == int(r["ScratchSize [bytes/lane]"])
            assert k.group_segment_fixed_size == int(r["LDS Size [bytes/block]"])
            assert (k.sgpr_spill_count, k.vgpr_spill_count) == (
                int(r["SGPRs Spill"]), int(r["VGPRs Spill"])), k.name
            assert k.uses_dynamic_stack == (r["Dynamic Stack"] == "True")
            assert k.descriptor.enable_private_segment == bool(k.private_segment_fixed_size)


def test_clang_kernels_cover_the_resources() -> None:
    """The fixtures exercise what the comparisons compare: LDS, scratch, spills."""
    co = read_code_object(dict(_clang_objects("obj22"))["gfx942"])
    assert co.kernel("lds_reverse").group_segment_fixed_size == 1024
    assert co.kernel("scratch").private_segment_fixed_size
    assert co.kernel("spill").vgpr_spill_count


# --- real ROCm builds from the package registry (tests/thirdparty.py's cache)

ROCM = [  # member, hipv4 entries, code object version
    (CUPY_ROCM5_RANDOM, 9, 4),  # ROCm 5.0's clang
    (CUPY_ROCM7_RANDOM, 9, 6),
    (JAX_ROCM7_PRNG, 27, 6),  # one CCOB v3
    (JAX_ROCM7_SOLVER, 54, 6),  # two CCOB v3
]


@pytest.mark.parametrize(("member", "count", "version"), ROCM,
                         ids=["cupy-rocm5", "cupy-rocm7", "jax-prng", "jax-solver"])
def test_rocm_code_objects(member: WheelMember, count: int, version: int,
                           tmp_path: Path) -> None:
    """Every code object of a ROCm wheel: its e_flags give the target ID clang named its bundle
    entry by, every kernel has a descriptor that agrees with its metadata, and the metadata of
    the first equals llvm-readelf 22's YAML."""
    section = elf.find_section(fetch(member).read_bytes(), ".hip_fatbin")
    assert section is not None
    entries = [e for b in read_bundles(section) for e in b.entries
               if e.bundle_id.kind == "hipv4"]
    assert len(entries) == count
    flags = {}
    for e in entries:
        co = read_code_object(e.data)
        assert str(co.target_id) == e.bundle_id.target_id
        assert co.code_object_version == version and co.kernels
        for k in co.kernels:
            assert k.descriptor is not None and k.descriptor.disagreements(k) == (), k.name
        flags[co.processor] = co.flags
    if member is CUPY_ROCM5_RANDOM:  # ../shared/ROCM.md §2.1, read by hand with readelf
        assert {p: flags[p] for p in ("gfx801", "gfx802", "gfx900", "gfx906", "gfx1010")} == {
            "gfx801": 0x128, "gfx802": 0x29, "gfx900": 0x12C, "gfx906": 0x52F,
            "gfx1010": 0x133}
    path = tmp_path / "first.hsaco"
    path.write_bytes(entries[0].data)
    theirs = readelf_metadata(path, run_llvm(22, "llvm-readelf", "--notes", path).stdout)
    assert read_code_object(entries[0].data).metadata == theirs


# --- TargetId and triples

@pytest.mark.parametrize(("text", "canonical", "sramecc", "xnack"), [
    ("gfx942", "gfx942", None, None),
    ("gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", True, False),
    ("gfx942:xnack-:sramecc+", "gfx942:sramecc+:xnack-", True, False),
    ("gfx90a:xnack+", "gfx90a:xnack+", None, True),
    ("gfx9-4-generic:sramecc-", "gfx9-4-generic:sramecc-", False, None),
])
def test_target_id_parse(text: str, canonical: str, sramecc: bool | None,
                         xnack: bool | None) -> None:
    t = TargetId.parse(text)
    assert (t.sramecc, t.xnack, str(t)) == (sramecc, xnack, canonical)
    assert TargetId.parse(str(t)) == t and hash(TargetId.parse(str(t))) == hash(t)


@pytest.mark.parametrize("text", ["", ":xnack+", "gfx942:xnack", "gfx942:xnack+:xnack-",
                                  "gfx942:sram-ecc+", "gfx942:wavefrontsize64+", "gfx942:",
                                  "gfx942:XNACK+", "gfx 942"])
def test_target_id_parse_rejects(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        TargetId.parse(text)


def test_target_id_order_and_generic() -> None:
    ids = [TargetId.parse(t) for t in ("gfx1100", "gfx942:xnack+", "gfx9-generic", "gfx90a",
                                       "gfx942", "gfx942:xnack-", "gfx9-4-generic", "gfx1030",
                                       "gfx11-generic", "gfx906")]
    assert [str(t) for t in sorted(ids)] == [
        "gfx906", "gfx90a", "gfx9-generic", "gfx942", "gfx942:xnack-", "gfx942:xnack+",
        "gfx9-4-generic", "gfx1030", "gfx1100", "gfx11-generic"]
    assert TargetId("gfx11-generic").is_generic and not TargetId("gfx1100").is_generic
    generic = {"gfx9-generic", "gfx9-4-generic", "gfx10-1-generic", "gfx10-3-generic",
               "gfx11-generic", "gfx11-7-generic", "gfx12-generic", "gfx12-5-generic",
               "gfx13-generic"}
    assert generic == amdgpu.GENERIC_PROCESSORS
    assert len({TargetId("gfx942"), TargetId.parse("gfx942")}) == 1
    with pytest.raises(InvalidArgumentError):
        TargetId("gfx942", xnack=1)  # type: ignore[arg-type]


def test_mach_lookup() -> None:
    assert amdgpu.mach_of("gfx942") == 0x4C and amdgpu.processor_name(0x54C) == "gfx942"
    assert amdgpu.processor_name(0x40) == "gfx940" and amdgpu.processor_name(0x4B) == "gfx941"
    assert amdgpu.processor_name(0xFF) is None
    assert all(amdgpu.MACH_BY_PROCESSOR[p] == m for m, p in MACH.items())
    with pytest.raises(InvalidArgumentError):
        amdgpu.mach_of("gfx999")


def test_triples() -> None:
    old = parse_triple("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-")
    assert (old.arch, old.environment, str(old.target)) == ("amdgcn", "", "gfx942:sramecc+:xnack-")
    assert str(old) == "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
    new = parse_triple("amdgpu9.42-amd-amdhsa-unknown-gfx942")
    assert (new.arch, new.environment, new.processor) == ("amdgpu9.42", "unknown", "gfx942")
    generic = parse_triple("amdgcn-amd-amdhsa--gfx9-4-generic:xnack-")
    assert generic.target == TargetId("gfx9-4-generic", None, False)
    assert parse_triple("amdgpu9.4-amd-amdhsa").processor == "gfx9-4-generic"
    assert parse_triple("amdgpu11-amd-amdhsa-unknown").processor == "gfx11-generic"
    assert parse_triple("amdgcn-amd-amdhsa").processor is None
    assert amdgpu_arch("gfx90a") == "amdgpu9.0a" and amdgpu_arch("gfx1100") == "amdgpu11.00"
    assert amdgpu_arch("gfx10-3-generic") == "amdgpu10.3" and amdgpu_arch("r600") is None
    for bad in ("amdgpu9.42-amd-amdhsa-unknown-gfx90a", "amdgcn-amd", "amdgcn--amdhsa",
                "amdgcn-amd-amdhsa--gfx942:xnack"):
        with pytest.raises(InvalidArgumentError):
            parse_triple(bad)


# --- hostile inputs: one fatbinkit error each

def _note(data: bytes) -> tuple[int, int]:
    """(file offset of the AMDGPU metadata note header, its descsz), as pyelftools finds it."""
    section = ELFFile(io.BytesIO(data)).get_section_by_name(".note")
    assert section is not None
    at = section["sh_offset"]
    assert data[at + 12:at + 18] == b"AMDGPU"
    return at, struct.unpack_from("<I", data, at + 4)[0]


def _with_metadata(data: bytes, value: Any) -> bytes:
    """``data`` with its metadata note replaced by ``value`` packed (no longer than it was)."""
    at, size = _note(data)
    packed = msgpack.packb(value)
    assert len(packed) <= size
    out = bytearray(data)
    struct.pack_into("<I", out, at + 4, len(packed))
    out[at + 20:at + 20 + len(packed)] = packed
    return bytes(out)


def _hostile(built: dict[str, Built]) -> Iterator[tuple[str, bytes, type[Exception]]]:
    data = built["add_gfx942"].data
    at, size = _note(data)
    meta = read_code_object(data).metadata
    assert meta is not None
    kernel = dict(meta["amdhsa.kernels"][0], **{".args": []})

    yield "truncated header", data[:40], TruncatedError
    yield "truncated sections", data[:0x300], TruncatedError
    wrong = bytearray(data)
    struct.pack_into("<H", wrong, 18, 62)
    yield "wrong machine", bytes(wrong), FormatError
    past = bytearray(data)
    struct.pack_into("<I", past, at + 4, 0x7FFFFFF0)
    yield "note descriptor past the end", bytes(past), TruncatedError
    name = bytearray(data)
    struct.pack_into("<I", name, at, 0x10000)
    yield "note name past the end", bytes(name), TruncatedError
    garbage = bytearray(data)
    garbage[at + 20:at + 20 + size] = b"\xc1" * size  # 0xc1: never used in msgpack
    yield "msgpack garbage", bytes(garbage), FormatError
    cut = bytearray(data)
    struct.pack_into("<I", cut, at + 4, size // 2)
    yield "msgpack cut short", bytes(cut), FormatError
    deep = bytearray(data)
    deep[at + 20:at + 20 + size] = b"\x91" * size
    yield "msgpack nested deep", bytes(deep), FormatError
    yield "metadata not a map", _with_metadata(data, [1, 2]), FormatError
    yield "kernels not a list", _with_metadata(data, {"amdhsa.kernels": 3}), FormatError
    yield "kernel without a name", _with_metadata(data, {"amdhsa.kernels": [{}]}), FormatError
    yield "count not an integer", _with_metadata(
        data, {"amdhsa.kernels": [dict(kernel, **{".sgpr_count": "21"})]}), FormatError
    yield "bool for a count", _with_metadata(
        data, {"amdhsa.kernels": [dict(kernel, **{".vgpr_count": True})]}), FormatError
    # found by the fuzz harness (amd_cli, 2026-12-03): a negative spill count got through
    yield "negative count", _with_metadata(
        data, {"amdhsa.kernels": [dict(kernel, **{".sgpr_spill_count": -1})]}), FormatError
    yield "count past 32 bits", _with_metadata(
        data, {"amdhsa.kernels": [dict(kernel, **{".private_segment_fixed_size": 1 << 32})]}),\
        FormatError
    yield "map key not a string", _with_metadata(data, {1: 2}), FormatError

    symtab = _symtab(ELFFile(io.BytesIO(data)))
    kd = _symbol(symtab, "add_kernel.kd")
    index = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == "add_kernel.kd")
    entry = symtab["sh_offset"] + index * 24
    far = bytearray(data)
    struct.pack_into("<Q", far, entry + 8, kd["st_value"] + 0x100000)
    yield "descriptor outside its section", bytes(far), TruncatedError
    small = bytearray(data)
    struct.pack_into("<Q", small, entry + 16, 32)
    yield "descriptor of 32 bytes", bytes(small), FormatError
    shndx = bytearray(data)
    struct.pack_into("<H", shndx, entry + 6, 0x7FFF)
    yield "descriptor in no section", bytes(shndx), FormatError
    strtab = bytearray(data)
    struct.pack_into("<I", strtab, entry, 0x7FFFFFFF)
    yield "symbol name outside its table", bytes(strtab), FormatError


def test_hostile_inputs(built: dict[str, Built]) -> None:
    cases = list(_hostile(built))
    assert len(cases) == 20
    for what, data, error in cases:
        with pytest.raises(error) as caught:
            read_code_object(data)
        assert type(caught.value) is error, what


def test_metadata_size_limit(built: dict[str, Built], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hsaco, "MAX_METADATA_SIZE", 100)
    with pytest.raises(FormatError, match="over the 100-byte limit"):
        read_code_object(built["add_gfx942"].data)


def test_not_code_objects(built: dict[str, Built]) -> None:
    assert not is_code_object(b"")
    elf32 = b"\x7fELF\x01\x01" + bytes(12) + struct.pack("<H", 224) + bytes(44)
    assert not is_code_object(elf32)  # an r600 object: ELF32
    with pytest.raises(UnsupportedError):
        read_code_object(elf32)
    x86 = b"\x7fELF\x02\x01" + bytes(12) + struct.pack("<H", 62) + bytes(44)
    assert not is_code_object(x86)
    with pytest.raises(FormatError, match="not EM_AMDGPU"):
        read_code_object(x86)
    with pytest.raises(FormatError, match="bad magic"):
        read_code_object(b"x" * 64)


def test_code_object_is_frozen(built: dict[str, Built]) -> None:
    co: CodeObject = read_code_object(built["add_gfx942"].data)
    with pytest.raises(AttributeError):
        co.flags = 0  # type: ignore[misc]
