"""Intel XPU device code, listed: SPIR-V (dpnp's SYCL section, compared with spirv-dis), ocloc's
fat binary (Debian's ocloc 22.43, compared with llvm-ar), a zebin (built here by hand from
IGC's documented layout: no tool here writes one; compared with llvm-readelf), and the
``.ze_info`` reader's refusals (tests/xpubuild.py says where each oracle comes from)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import jsonschema
import pytest
from llvm import run_llvm
from thirdparty import fetch
from xpubuild import DPNP_TENSOR, ocloc_fat, run_tool

from fatbinkit import vendors
from fatbinkit.cli import main
from fatbinkit.decision import JIT, NATIVE, NONE
from fatbinkit.errors import FormatError
from fatbinkit.formats import spirv, zebin
from fatbinkit.formats.elf import sections
from fatbinkit.scan import scan

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
SYCL_SECTION = "__CLANG_OFFLOAD_BUNDLE__sycl-spir64"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def _spirv_dis(files: list[Path]) -> list[tuple[str, str, list[str]]]:
    """(version, bound, OpEntryPoint Kernel names) of each file, from spirv-dis."""
    script = "for f in \"$@\"; do echo '@@@'; \"$DIS\" --raw-id \"$f\" || exit 1; done"
    probe = run_tool("spirv-dis", "--version")
    assert probe.returncode == 0, probe.stderr
    dis = next(p for p in probe.args if p.endswith("spirv-dis"))
    proc = subprocess.run(["bash", "-c", script, "dis", *map(str, files)], capture_output=True,
                          text=True, check=False, env={"DIS": dis, "LD_LIBRARY_PATH": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = []
    for block in proc.stdout.split("@@@\n")[1:]:
        version = re.search(r"^; Version: (\S+)$", block, re.M)
        bound = re.search(r"^; Bound: (\d+)$", block, re.M)
        names = re.findall(r'OpEntryPoint Kernel %\d+ "([^"]*)"', block)
        assert version and bound
        out.append((version[1], bound[1], names))
    return out


# --- SPIR-V: dpnp's SYCL library --------------------------------------------------------------


def test_dpnp_sycl_spirv_matches_spirv_dis(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    """Every module of dpnp's ``sycl-spir64`` section, as spirv-dis reads it: version, bound,
    kernel entry points; ``ls`` counts them as spirv-dis does."""
    lib = fetch(DPNP_TENSOR)
    codes = scan(lib)
    assert {c.vendor for c in codes} == {"xpu"}
    assert {(c.kind, c.target, c.source) for c in codes} == {("spirv", "spir64", SYCL_SECTION)}
    data = lib.read_bytes()
    files = []
    for n, c in enumerate(codes):
        f = tmp_path / f"{n}.spv"
        f.write_bytes(data[c.offset : c.offset + c.stored])
        files.append(f)
    oracle = _spirv_dis(files)
    assert len(oracle) == len(codes) == 4642
    names: list[str] = []
    for c, (version, bound, kernels) in zip(codes, oracle, strict=True):
        module = spirv.read_spirv(c.view)
        assert (f"{module.version[0]}.{module.version[1]}", str(module.bound),
                list(module.kernels)) == (version, bound, kernels), c
        names += kernels
    doc = json.loads(_cli(capsys, "ls", "--summary", "--kernels", "--json", str(lib)))
    jsonschema.validate(doc, SCHEMA)
    (row,) = doc["archs"]
    assert (row["kind"], row["arch"], row["entries"]) == ("spirv", "spir64", len(oracle))
    assert row["kernels"] == len(set(names))
    assert doc["modules"] == len(oracle)
    listing = json.loads(_cli(capsys, "ls", "--json", str(lib)))
    jsonschema.validate(listing, SCHEMA)
    assert len(listing["entries"]) == len(oracle)


def test_dpnp_modules_are_the_tgtimg_table(capsys: pytest.CaptureFixture[str]) -> None:
    """The modules fatbinkit splits the section into are the images the library's ``.tgtimg``
    table lists (start: its RELATIVE relocations, as llvm-readelf prints them; size: the table's
    second word)."""
    lib = fetch(DPNP_TENSOR)
    data = lib.read_bytes()
    table = next(s for s in sections(data) if s.name == ".tgtimg").header
    relocs = run_llvm(22, "llvm-readelf", "-r", "--wide", lib)
    assert relocs.returncode == 0, relocs.stderr
    starts = {}
    for line in relocs.stdout.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] == "R_X86_64_RELATIVE":
            at = int(f[0], 16)
            if table.addr <= at < table.addr + table.size:
                starts[at] = int(f[3], 16)
    sycl = next(s for s in sections(data) if s.name == SYCL_SECTION).header
    images = []
    for at in sorted(starts):
        (size,) = struct.unpack_from("<Q", data, table.offset + at - table.addr + 8)
        images.append((starts[at] - sycl.addr + sycl.offset, size))
    assert [(c.offset, c.stored) for c in scan(lib)] == images


def test_spirv_big_endian_and_errors() -> None:
    """A module byte-swapped word by word reads the same (the magic gives the order); a cut
    instruction, a missing name terminator and trailing bytes are refused."""
    lib = fetch(DPNP_TENSOR)
    first = scan(lib)[0]
    le = bytes(first.view)
    words = struct.unpack(f"<{len(le) // 4}I", le)
    be = struct.pack(f">{len(words)}I", *words)
    a, b = spirv.read_spirv(le), spirv.read_spirv(be)
    assert b.big_endian and not a.big_endian
    assert (a.version, a.bound, a.kernels) == (b.version, b.bound, b.kernels) and a.kernels
    head = struct.pack("<5I", spirv.MAGIC, 0x10000, 0, 5, 0)
    with pytest.raises(FormatError, match="runs past"):  # 5 words announced, 2 there
        spirv.read_spirv(head + struct.pack("<2I", (5 << 16) | 15, 6))
    with pytest.raises(FormatError, match="into a word"):
        spirv.read_spirv(le + b"\x01\0")
    with pytest.raises(FormatError, match="0 words"):  # a word count of 0 (hostile: no loop)
        spirv.read_spirv(le + b"\x01\0\0\0")
    with pytest.raises(FormatError, match="not padding"):
        spirv.read_spirv(le + b"\0\0\0\0\x01\0\0\0")
    with pytest.raises(FormatError, match="shorter than"):
        spirv.read_spirv(le[:12])
    # an OpEntryPoint whose name has no NUL inside the instruction
    bad = struct.pack("<5I", spirv.MAGIC, 0x10000, 0, 5, 0) + struct.pack(
        "<4I", (4 << 16) | 15, 6, 1, 0x41414141)
    with pytest.raises(FormatError, match="NUL"):
        spirv.read_spirv(bad)


# --- ocloc's fat binary -----------------------------------------------------------------------


def test_ocloc_fat_binary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``ocloc compile -device tgllp,acm-g10``: one module, one image per device member, named
    as llvm-ar lists them (padding left out), bytes as ``llvm-ar p`` prints them."""
    fat = ocloc_fat(ROOT / "tests" / "data" / "xpu" / "k.cl", "tgllp,acm-g10")
    members = run_llvm(22, "llvm-ar", "t", fat)
    assert members.returncode == 0, members.stderr
    names = [n for n in members.stdout.split() if not n.startswith("pad_")]
    assert names == ["64.12.0.0", "64.12.55.8"]
    codes = scan(fat)
    assert [(c.kind, c.target, c.container) for c in codes] == [
        ("opencl-elf", "12.0.0", 0), ("opencl-elf", "12.55.8", 0)]
    for name, c in zip(names, codes, strict=True):
        assert run_llvm(22, "llvm-ar", "x", fat, name, cwd=tmp_path).returncode == 0
        assert bytes(c.view) == (tmp_path / name).read_bytes()
    doc = json.loads(_cli(capsys, "ls", "--json", str(fat)))
    jsonschema.validate(doc, SCHEMA)
    assert [e["member_name"] for e in doc["entries"]] == names


# --- zebin, by hand ---------------------------------------------------------------------------

ZE_INFO = """---
version:         '1.15'
kernels:
  - name:            add
    execution_env:
      grf_count:       128
      simd_size:       16
      slm_size:        1024
    per_thread_memory_buffers:
      - type:            scratch
        usage:           single_space
        size:            64
  - name:            lds_reverse
    user_attributes:
      work_group_size_hint: [1,1,1]
    execution_env:
      grf_count:       256
      simd_size:       32
...
"""


def _note(owner: bytes, kind: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(owner) + 1, len(desc), kind) + pad(owner + b"\0") + pad(desc)


def _zebin(ip: tuple[int, int, int] = (12, 55, 8), spv: bytes = b"") -> bytes:
    """A relocatable zebin as IGC's ZEBinary.md lays it out: .text.<kernel> per kernel,
    .ze_info (SHT_ZEBIN_ZEINFO), .note.intelgt.compat (owner IntelGT: product family 1270,
    GFX core 3079, zebin version "1.15", product config), optional .spv."""
    config = (ip[0] << 22) | (ip[1] << 14) | ip[2]
    notes = (_note(b"IntelGT", 1, struct.pack("<I", 1270)) +
             _note(b"IntelGT", 2, struct.pack("<I", 3079)) +
             _note(b"IntelGT", 4, b"1.15\0") + _note(b"IntelGT", 6, struct.pack("<I", config)))
    secs = [(".text.add", 1, b"\0" * 64), (".text.lds_reverse", 1, b"\0" * 32),
            (".ze_info", 0xFF000011, ZE_INFO.encode()), (".note.intelgt.compat", 7, notes)]
    if spv:
        secs.append((".spv", 0xFF000009, spv))
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _, _ in secs) + b".shstrtab\0"
    secs.append((".shstrtab", 3, names))
    body, headers, pos = b"", [b"\0" * 64], 64
    for name, kind, data in secs:
        pos_name = names.index(name.encode() + b"\0")
        headers.append(struct.pack("<IIQQQQIIQQ", pos_name, kind, 0, 0, pos, len(data), 0, 0,
                                   4, 0))
        body += data + b"\0" * (-len(data) % 8)
        pos = 64 + len(body)
    ident = b"\x7fELF\x02\x01\x01\x00\x01" + b"\0" * 7
    head = struct.pack("<16sHHIQQQIHHHHHH", ident, 0xFF11, 205, 1, 0, 0, pos, 0, 64, 0, 0, 64,
                       len(headers), len(headers) - 1)
    return head + body + b"".join(headers)


def test_hand_built_zebin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A zebin's sections and notes as llvm-readelf reads them; its kernels, execution
    environment and device from .ze_info and the product-config note; listed as one image."""
    f = tmp_path / "k.zebin"
    f.write_bytes(_zebin())
    z = zebin.read_zebin(f.read_bytes())
    shown = run_llvm(22, "llvm-readelf", "-S", "--notes", "--wide", f)
    assert shown.returncode == 0, shown.stderr
    for name in z.sections:
        assert f" {name} " in shown.stdout
    assert shown.stdout.count("IntelGT") == 4
    head = run_llvm(22, "llvm-readelf", "-h", f).stdout  # LLVM's name for EM_INTELGT (205)
    assert re.search(r"Machine: +Intel Graphics Technology$", head, re.M)
    assert re.search(r"Type: +Processor Specific: \(ff11\)$", head, re.M)
    assert z.type == zebin.ET_ZEBIN_REL and z.ze_info_version == "1.15"
    assert z.notes.ip_version == "12.55.8" and z.notes.product_family == 1270
    assert z.notes.zebin_version == "1.15" and z.notes.gfx_core == 3079
    add, lds = z.kernels
    assert (add.name, add.grf_count, add.simd_size, add.slm_size, add.scratch_size) == (
        "add", 128, 16, 1024, 64)
    assert (lds.name, lds.grf_count, lds.simd_size, lds.slm_size) == ("lds_reverse", 256, 32, 0)
    (code,) = scan(f)
    assert (code.vendor, code.kind, code.target, code.container) == ("xpu", "zebin", "12.55.8",
                                                                     -1)
    assert vendors.of(code).outline(code) == (["add", "lds_reverse"], None)
    doc = json.loads(_cli(capsys, "ls", "--json", str(f)))
    jsonschema.validate(doc, SCHEMA)
    assert doc["entries"][0]["format_version"] == "1.15"


def test_fat_binary_pick(tmp_path: Path) -> None:
    """An ocloc-style archive (written by llvm-ar) of a zebin for 12.55.8 and ``generic_ir``:
    one module; on 12.55.8 the zebin loads, elsewhere the SPIR-V is compiled at load
    (compute-runtime's order), and without ``generic_ir`` nothing loads."""
    lib = fetch(DPNP_TENSOR)
    spv = bytes(scan(lib)[0].view)
    (tmp_path / "64.12.55.8").write_bytes(_zebin())
    (tmp_path / "generic_ir").write_bytes(spv)
    fat = tmp_path / "fat.ar"
    made = run_llvm(22, "llvm-ar", "rcS", fat, "64.12.55.8", "generic_ir", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    codes = scan(fat)
    assert [(c.kind, c.target, c.container) for c in codes] == [
        ("zebin", "12.55.8", 0), ("spirv", "spir64", 0)]
    xpu = vendors.VENDORS["xpu"]
    images = [xpu.image(c) for c in codes]
    assert xpu.decide(images, "12.55.8").how == NATIVE
    assert xpu.decide(images, "12.0.0").how == JIT
    assert xpu.decide(images[:1], "12.0.0").how == NONE


def test_not_an_intel_archive(tmp_path: Path) -> None:
    """A static library is still searched as one (its member names are no device's)."""
    (tmp_path / "a.o").write_bytes(b"\x7fELF" + b"\0" * 60)
    lib = tmp_path / "liba.a"
    assert run_llvm(22, "llvm-ar", "rcS", lib, "a.o", cwd=tmp_path).returncode == 0
    from fatbinkit.vendors.xpu.finding import is_fat_archive

    assert not is_fat_archive(lib.read_bytes())


@pytest.mark.parametrize(("text", "error"), [
    ("version: '1.0'\nkernels:\n\t- name: a\n", "tab"),
    ("version: '1.0\n", "unterminated"),
    ("kernels:\n  - name: a\n      grf_count: 1\n", "indentation"),
    ("a: 1\na: 2\n", "twice"),
    ("a: {b: 1}\n", "unsupported"),
    ("just text\n", "expected 'key: value'"),
])
def test_ze_info_refusals(text: str, error: str) -> None:
    with pytest.raises(FormatError, match=error):
        zebin.parse_ze_info(text)


def test_malformed_zebin() -> None:
    """Notes running past their section, and .ze_info with a nameless kernel, are
    FormatErrors."""
    good = _zebin()
    bad = good.replace(b"  - name:            lds_reverse", b"  - nome:            lds_reverse")
    with pytest.raises(FormatError, match="no name"):
        zebin.read_zebin(bad)
    cut = bytearray(good)
    at = cut.index(b"IntelGT") - 12
    struct.pack_into("<I", cut, at + 4, 4096)  # descsz of the first note
    with pytest.raises(FormatError, match="past the section"):
        zebin.read_zebin(bytes(cut))


# --- A real AOT build: bitsandbytes' XPU library -------------------------------------------------

def test_bitsandbytes_xpu_zstd_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    """bitsandbytes 0.50.2's ``libbitsandbytes_xpu2025.so`` (Intel's 2025 SYCL compiler): its
    two SYCL sections are zstd frames; ``sycl-spir64_gen`` inflates to an ocloc fat binary of
    four zebins and a ``generic_ir`` OpenCL ELF holding SPIR-V, ``sycl-spir64`` to a SPIR-V
    module. Compared with zstandard + binutils' ``ar`` on the section pyelftools cuts out
    (member names and bytes), ``readelf`` (each zebin is an Intel GPU ELF; its ``.ze_info``
    kernel names) and spirv-dis (the SPIR-V's version and entry points)."""
    import zstandard
    from elftools.elf.elffile import ELFFile
    from thirdparty import WheelMember

    lib = fetch(WheelMember("bitsandbytes", "0.50.2", "bitsandbytes/libbitsandbytes_xpu2025.so"))
    with lib.open("rb") as f:
        elf = ELFFile(f)
        packed = {s.name: s.data() for s in elf.iter_sections()
                  if s.name.startswith("__CLANG_OFFLOAD_BUNDLE__sycl")}
    gen = zstandard.ZstdDecompressor().decompressobj().decompress(
        packed["__CLANG_OFFLOAD_BUNDLE__sycl-spir64_gen"])
    (tmp_path / "gen.a").write_bytes(gen)
    (tmp_path / "x").mkdir()
    subprocess.run(["ar", "x", str(tmp_path / "gen.a")], cwd=tmp_path / "x", check=True)
    members = subprocess.run(["ar", "t", str(tmp_path / "gen.a")], capture_output=True,
                             text=True, check=True).stdout.split()
    assert [m for m in members if not m.startswith("pad_")] == [
        "64.12.60.7", "64.12.70.4", "64.12.71.4", "64.12.55.8", "generic_ir"]

    doc = json.loads(_cli(capsys, "ls", "--json", str(lib)))
    jsonschema.validate(doc, SCHEMA)
    rows = doc["entries"]
    assert {(r["kind"], r["arch"], r["compression"]) for r in rows} == {
        ("zebin", "12.60.7", "zstd"), ("zebin", "12.70.4", "zstd"), ("zebin", "12.71.4", "zstd"),
        ("zebin", "12.55.8", "zstd"), ("opencl-elf", "spir64", "zstd"),
        ("spirv", "spir64", "zstd")}
    out = tmp_path / "out"
    assert main(["extract", str(lib), "-o", str(out)]) == 0
    capsys.readouterr()
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    for row in rows:
        if row["kind"] == "zebin":
            member = (tmp_path / "x" / row["member_name"]).read_bytes()
            assert got[row["name"]] == member, row["name"]
            head = subprocess.run(["readelf", "-h", str(tmp_path / "x" / row["member_name"])],
                                  capture_output=True, text=True, check=True).stdout
            assert "Intel Graphics Technology" in head
    # the kernels ls --resources reads from each zebin's .ze_info are the names in it
    doc = json.loads(_cli(capsys, "ls", "--resources", "--json", str(lib)))
    jsonschema.validate(doc, SCHEMA)
    for row in doc["entries"]:
        if row["kind"] != "zebin":
            continue
        with (tmp_path / "x" / row["member_name"]).open("rb") as f:  # pyelftools cuts it
            text = ELFFile(f).get_section_by_name(".ze_info").data().decode()
        block = re.search(r"^kernels:\n(.*?)(?=^\S|\Z)", text, re.M | re.S)  # top level
        assert block
        names = re.findall(r"^  - name:\s*(\S+)\s*$", block[1], re.M)
        assert [f["name"] for f in row["functions"]] == names and names
        assert all(f["grf_count"] and f["simd_size"] for f in row["functions"])
    spv = tmp_path / "k.spv"
    spv.write_bytes(zstandard.ZstdDecompressor().decompressobj().decompress(
        packed["__CLANG_OFFLOAD_BUNDLE__sycl-spir64"]))
    ((version, _, kernels),) = _spirv_dis([spv])
    (row,) = [r for r in rows if r["kind"] == "spirv"]
    assert version.startswith(row["format_version"])  # spirv-dis: "1.4", ours "1.4"
    assert got[row["name"]] == spv.read_bytes() and kernels
