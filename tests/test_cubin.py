"""Cubin resources against ``cuobjdump`` on every test cubin, and malformed cubins.

Oracle: cuobjdump 13.5 (pip nvidia-cuda-cuobjdump). Cubins: our kernels built by nvcc 13.0 and
ptxas 13.5 (sm_75 .. sm_121, ``a`` variants, relocatable), and CuPy's CUDA 12 cubins (ELF ABI v1).
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
from pathlib import Path

import pytest
from cudabuild import Builds, builds, elf_dump, res_usage  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fatbinkit.errors import FormatError, TruncatedError, UnsupportedError
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.cubin import Cubin, is_cubin
from fatbinkit.formats.elf import sections
from fatbinkit.formats.nvinfo import FMT_SVAL, NvInfoRecord, parse_records

# every test here runs on both cubin readers: the C walk and the pure one (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cubin_reader")

_COMMON_CONST_RE = re.compile(r"CONSTANT\[(\d+)\]")


def _ours(fn: object) -> dict[str, int]:
    from fatbinkit.formats.cubin import CubinFunction

    assert isinstance(fn, CubinFunction)
    fields = {"REG": fn.registers, "STACK": fn.stack, "SHARED": fn.shared, "LOCAL": fn.local}
    fields.update({f"CONSTANT[{b}]": size for b, size in fn.constant.items()})
    fields.update({"TEXTURE": fn.texture, "SURFACE": fn.surface, "SAMPLER": fn.sampler})
    return fields


def test_every_function_matches_cuobjdump_res_usage(builds: Builds) -> None:  # noqa: F811
    checked = 0
    for path in builds.cubins:
        oracle = res_usage(path)
        cubin = Cubin.from_bytes(path.read_bytes())
        ours = [(f.name, _ours(f)) for f in cubin.functions]
        assert [n for n, _ in ours] == [n for n, _ in oracle.functions], path.name
        for (name, mine), (_, theirs) in zip(ours, oracle.functions, strict=True):
            assert mine == theirs, f"{path.name} {name}"
            # same keys in the same order: constant banks as cuobjdump lists them
            assert list(mine) == list(theirs), f"{path.name} {name}"
        common = {f"CONSTANT[{b}]": s for b, s in cubin.constant.items()}
        common["GLOBAL"] = cubin.global_size
        assert common == oracle.common, path.name
        checked += len(ours)
    assert checked > 300  # 48 functions in each of 12 CuPy cubins, plus ours


def test_arch_toolkit_and_abi_match_cuobjdump_elf_header(builds: Builds) -> None:  # noqa: F811
    seen: set[str] = set()
    for path in builds.cubins:
        header = elf_dump(path).header
        cubin = Cubin.from_bytes(path.read_bytes())
        fields = dict(re.findall(r"(\w+)=([\w.]+)", header))
        assert cubin.arch.sm == f"sm_{fields['sm']}", path.name
        assert str(cubin.abi_version) == fields["abi" if "abi" in fields else "ABI"], path.name
        assert cubin.toolkit is not None
        tk = fields["toolkit"]  # "13.0" (ABI v2 listing) or "129" (ABI v1 listing)
        expected = tuple(int(x) for x in tk.split(".")) if "." in tk else divmod(int(tk), 10)
        assert cubin.toolkit == expected, path.name
        seen.add(cubin.arch.sm)
    # both ELF ABIs and `a` variants from both toolkits were covered
    assert {"sm_50", "sm_75", "sm_90a", "sm_100a", "sm_103a", "sm_110", "sm_120a",
            "sm_121"} <= seen
    assert {Cubin.from_bytes(p.read_bytes()).abi_version for p in builds.cubins} == {7, 8}


def test_kernel_parameters_match_cuobjdump_kparam_info(builds: Builds) -> None:  # noqa: F811
    for path in builds.own:
        dump = elf_dump(path)
        cubin = Cubin.from_bytes(path.read_bytes())
        for fn in cubin.functions:
            items = dump.attributes.get(f".nv.info.{fn.name}", [])
            oracle = []
            for name, value in items:
                if name == "EIATTR_KPARAM_INFO":
                    f = dict(re.findall(r"(Ordinal|Offset|Size)\s*:\s*(0x[0-9a-f]+)", value))
                    oracle.append((int(f["Ordinal"], 16), int(f["Offset"], 16),
                                   int(f["Size"], 16)))
            ours = [(p.ordinal, p.offset, p.size) for p in fn.params]
            assert ours == sorted(oracle), f"{path.name} {fn.name}"
            if fn.entry:
                size = next((int(v, 16) for n, v in items if n == "EIATTR_CBANK_PARAM_SIZE"), 0)
                assert (fn.param_size or 0) == size
                assert sum(p.size for p in fn.params) <= size


def test_known_parameter_layout(builds: Builds) -> None:  # noqa: F811
    cubin = Cubin.from_bytes((builds.root / "nvcc_sm90.cubin").read_bytes())
    k = cubin.function("k_params")
    # float*, char, short, double, Big (48 bytes, align 8), float2, long long, unsigned char
    assert [p.size for p in k.params] == [8, 1, 2, 8, 48, 8, 8, 1]
    assert k.max_threads == (256, 1, 1)
    assert cubin.function("k_maxnreg").maxreg == 40
    assert cubin.function("k_huge_param").params[0].size == 400
    assert cubin.function("k_noparams").params == ()
    assert cubin.function("k_noparams").entry


def test_attribute_names_match_cuobjdump(builds: Builds) -> None:  # noqa: F811
    named = 0
    for path in builds.own + builds.cupy12[-3:]:
        dump = elf_dump(path)
        data = path.read_bytes()
        for section, items in dump.attributes.items():
            body = _section_body(data, section)
            records = parse_records(body, compat=section == ".nv.compat")
            assert len(records) == len(items), f"{path.name} {section}"
            for rec, (name, _) in zip(records, items, strict=True):
                if name != "unknown Attribute":
                    assert rec.name == name, f"{path.name} {section} {rec.attribute:#x}"
                    named += 1
    assert named > 100


def test_to_dict_is_json_with_the_documented_keys(builds: Builds) -> None:  # noqa: F811
    cubin = Cubin.from_bytes((builds.root / "nvcc_sm75.cubin").read_bytes())
    for f in cubin.functions:
        d = json.loads(json.dumps(f.to_dict()))
        assert list(d) == ["name", "entry", "registers", "stack", "shared", "local", "constant",
                           "texture", "surface", "sampler", "params", "size", "spill_stores",
                           "spill_loads"]
        assert all(isinstance(k, str) for k in d["constant"])
    k = cubin.function("k_simple").to_dict()
    assert k["entry"] is True and k["constant"]["0"] > 0
    assert [p["size"] for p in k["params"]] == [8, 8, 4]


def test_device_functions_are_listed_with_entry_false(builds: Builds) -> None:  # noqa: F811
    cubin = Cubin.from_bytes((builds.root / "nvcc_rdc_sm80.cubin").read_bytes())
    helper = cubin.function("_Z6helperfi")
    assert not helper.entry and helper.registers > 0 and 0 not in helper.constant
    assert cubin.function("k_simple").entry


def test_memoryview_and_sniffing(builds: Builds) -> None:  # noqa: F811
    data = (builds.root / "nvcc_sm80.cubin").read_bytes()
    assert Cubin.from_bytes(memoryview(data)) == Cubin.from_bytes(data)
    assert is_cubin(data) and not is_cubin(b"\x7fELF" + bytes(60)) and not is_cubin(b"")
    assert Cubin.from_bytes(data).arch == Arch(80)


# -- malformed input ----------------------------------------------------------------------------

def _section_body(data: bytes, name: str) -> bytes:
    off, size = _section_span(data, name)
    return data[off:off + size]


def _section_span(data: bytes, name: str) -> tuple[int, int]:
    for s in sections(data):
        if s.name == name:
            return s.header.offset, s.header.size
    raise KeyError(name)


@pytest.fixture(scope="module")
def sm90(builds: Builds) -> bytes:  # noqa: F811
    return (builds.root / "nvcc_sm90a.cubin").read_bytes()


def test_truncated_cubin_is_a_truncated_error(sm90: bytes) -> None:
    for cut in (0, 10, 63, 64, len(sm90) // 2, len(sm90) - 1):
        with pytest.raises((TruncatedError, FormatError)):
            Cubin.from_bytes(sm90[:cut])
    with pytest.raises(TruncatedError, match="shorter than an ELF64 header"):
        Cubin.from_bytes(sm90[:40])


def test_not_a_cubin(sm90: bytes) -> None:
    with pytest.raises(FormatError, match="bad magic"):
        Cubin.from_bytes(b"\0" * 100)
    x86 = bytearray(sm90)
    x86[18:20] = struct.pack("<H", 62)
    with pytest.raises(FormatError, match="EM_CUDA"):
        Cubin.from_bytes(bytes(x86))
    be = bytearray(sm90)
    be[5] = 2
    with pytest.raises(UnsupportedError, match="little-endian"):
        Cubin.from_bytes(bytes(be))
    abi = bytearray(sm90)
    abi[8] = 99
    abi[7] = 65
    with pytest.raises(UnsupportedError, match="ABI version 99"):
        Cubin.from_bytes(bytes(abi))


def test_malformed_nv_info_records(sm90: bytes) -> None:
    off, size = _section_span(sm90, ".nv.info.k_params")
    # an SVAL record whose size runs past its section
    bad = bytearray(sm90)
    bad[off:off + 4] = bytes([FMT_SVAL, 0x37]) + struct.pack("<H", 0xFFF0)
    with pytest.raises(TruncatedError, match=r"attribute 0x37 value of 65520 bytes") as e:
        Cubin.from_bytes(bytes(bad))
    assert e.value.offset == off
    # an unknown record format
    bad = bytearray(sm90)
    bad[off] = 9
    with pytest.raises(FormatError, match=r"format 9 is not 1\.\.4"):
        Cubin.from_bytes(bytes(bad))
    # a KPARAM_INFO record of the wrong size
    records = parse_records(sm90[off:off + size], base=off)
    kp = next(r for r in records if r.attribute == 0x17)
    bad = bytearray(sm90)
    bad[kp.offset + 2:kp.offset + 4] = struct.pack("<H", 8)
    with pytest.raises(FormatError):
        Cubin.from_bytes(bytes(bad))


def test_unknown_attributes_are_kept_raw() -> None:
    body = bytes([4, 0x7E]) + struct.pack("<H", 4) + b"\x01\x02\x03\x04" + bytes([3, 0x7F, 5, 0])
    records = parse_records(body)
    assert records == (NvInfoRecord(4, 0x7E, b"\x01\x02\x03\x04", 0),
                       NvInfoRecord(3, 0x7F, 5, 8))
    assert records[0].name == "EIATTR_0x7e"
    with pytest.raises(TruncatedError):
        parse_records(b"\x04\x37")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_cubins_raise_only_fatbinkit_errors(sm90: bytes, data: st.DataObject) -> None:
    blob = bytearray(sm90)
    if data.draw(st.booleans()):
        blob = blob[:data.draw(st.integers(0, len(blob)))]
    else:
        for _ in range(data.draw(st.integers(1, 16))):
            if not blob:
                break
            blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(FormatError, UnsupportedError):
        Cubin.from_bytes(bytes(blob))


def test_abi_v1_cubin_reads_arch_from_low_byte(builds: Builds) -> None:  # noqa: F811
    v1 = [p for p in builds.cupy12 if Cubin.from_bytes(p.read_bytes()).abi_version == 7]
    assert len(v1) >= 9
    for p in v1:
        c = Cubin.from_bytes(p.read_bytes())
        assert p.name.endswith(f".{c.arch.sm}.cubin")  # cuobjdump -xelf names them by arch
        assert c.virtual_arch == Arch(c.arch.number)


def test_a_variant_only_from_the_cubin_itself(builds: Builds) -> None:  # noqa: F811
    plain = Cubin.from_bytes((builds.root / "nvcc_sm100.cubin").read_bytes())
    specific = Cubin.from_bytes((builds.root / "nvcc_sm100a.cubin").read_bytes())
    assert plain.arch == Arch(100) and specific.arch == Arch(100, "a")
    assert specific.virtual_arch == Arch(100, "a")


def test_shared_memory_figures(builds: Builds) -> None:  # noqa: F811
    sm80 = Cubin.from_bytes((builds.root / "nvcc_sm80.cubin").read_bytes())
    sm90 = Cubin.from_bytes((builds.root / "nvcc_sm90.cubin").read_bytes())
    assert sm80.function("k_params").shared == 2048  # float tile[512]
    assert sm90.function("k_params").shared == 2048 + 1024  # sm_90+ reserve 1 KiB
    assert sm80.function("k_dynamic_shared").stack >= 400  # volatile float arr[100]


def test_paths_are_not_content(tmp_path: Path) -> None:
    with pytest.raises(FormatError):
        Cubin.from_bytes(str(tmp_path).encode())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_fuzzed_nv_info_sections(sm90: bytes, data: st.DataObject) -> None:
    """Mutations aimed at the attribute sections: any outcome but a non-fatbinkit exception."""
    section = data.draw(st.sampled_from([".nv.info", ".nv.info.k_params", ".nv.info.k_simple",
                                         ".nv.compat"]))
    off, size = _section_span(sm90, section)
    blob = bytearray(sm90)
    for _ in range(data.draw(st.integers(1, 6))):
        blob[off + data.draw(st.integers(0, size - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(FormatError, UnsupportedError):
        cubin = Cubin.from_bytes(bytes(blob))
        json.dumps([f.to_dict() for f in cubin.functions])


@pytest.mark.parametrize("descsz, toolkit", [(8, (13, 0)), (6, (13, 0)), (4, (13, 0))])
def test_short_cuinfo_descriptors(sm90: bytes, descsz: int, toolkit: tuple[int, int],
                                  tmp_path: Path) -> None:
    """cuBLASLt 13.0 ships sm_75 cubins whose .note.nv.cuinfo says descsz 6 (a u16 toolkit); a
    4-byte one has no toolkit, which then comes from EIATTR_CUDA_API_VERSION. cuobjdump reads
    all three; the toolkit is nvcc 13.0's either way."""
    from cudabuild import CUOBJDUMP, run

    at, _ = _section_span(sm90, ".note.nv.cuinfo")
    patched = bytearray(sm90)
    struct.pack_into("<I", patched, at + 4, descsz)  # Elf64_Nhdr: namesz, descsz, type
    c = Cubin.from_bytes(bytes(patched))
    assert c.toolkit == toolkit and c.virtual_arch == Arch(90, "a")
    path = tmp_path / "short-note.cubin"
    path.write_bytes(bytes(patched))
    assert "Function" in run([CUOBJDUMP, "-res-usage", path]).stdout
    struct.pack_into("<I", patched, at + 4, 2)
    with pytest.raises(TruncatedError, match="cuinfo"):
        Cubin.from_bytes(bytes(patched))


# -- spills and code size -----------------------------------------------------------------------

SPILL_SOURCE = Path(__file__).resolve().parent / "data" / "spill_kernels.cu"
SPILL_ARCHS = ("75", "80", "86", "87", "88", "89", "90", "90a", "100", "100a", "103", "110",
               "120", "121")
_PTXAS_V_RE = re.compile(r"Function properties for (\w+)\n\s+\d+ bytes stack frame, (\d+) "
                         r"bytes spill stores, (\d+) bytes spill loads")


def _ptxas_v(log: str) -> dict[str, tuple[int, int]]:
    """``name -> (spill stores, spill loads)`` from ``ptxas -v`` output: the oracle."""
    return {m[0]: (int(m[1]), int(m[2])) for m in _PTXAS_V_RE.findall(log)}


@pytest.fixture(scope="module")
def spill_builds(tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, tuple[Path, dict[str, tuple[int, int]]]]:
    """``sm -> (cubin, ptxas -v figures)``: SPILL_SOURCE by nvcc 13.0 with -maxrregcount=24."""
    from concurrent.futures import ThreadPoolExecutor

    from cudabuild import NVCC, need, run

    root = tmp_path_factory.mktemp("spills")

    def build(sm: str) -> tuple[Path, dict[str, tuple[int, int]]]:
        out = root / f"sm{sm}.cubin"
        proc = run([need(NVCC), "-cubin", f"-arch=sm_{sm}", "-maxrregcount=24", "-Xptxas", "-v",
                    "-o", out, SPILL_SOURCE])
        return out, _ptxas_v(proc.stdout + proc.stderr)

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(SPILL_ARCHS, pool.map(build, SPILL_ARCHS), strict=True))


@pytest.mark.parametrize("sm", SPILL_ARCHS)
def test_spills_match_ptxas_v(spill_builds: dict[str, tuple[Path, dict[str, tuple[int, int]]]],
                              sm: str) -> None:
    from elftools.elf.elffile import ELFFile

    path, oracle = spill_builds[sm]
    cubin = Cubin.from_bytes(path.read_bytes())
    ours = {f.name: (f.spill_stores, f.spill_loads) for f in cubin.functions}
    assert ours == oracle
    assert all(oracle[k] != (0, 0) for k in ("k_spill32", "k_spill64", "k_spill_float4"))
    # the local array's STL/LDL are not spills; a function without spills has no annotation
    assert ours["k_local_array"] == ours["k_no_spill"] == (0, 0)
    assert cubin.function("k_local_array").local == 0 and cubin.function("k_local_array").stack
    with path.open("rb") as f:
        texts = {s.name[6:]: s["sh_size"] for s in ELFFile(f).iter_sections()
                 if s.name.startswith(".text.")}
    assert {f.name: f.size for f in cubin.functions} == texts
    assert all(f.to_dict()["spill_stores"] == f.spill_stores for f in cubin.functions)


def _bare_ptxas_cubin(ptxas: Path, ptx: str, sm: str, out: Path) -> tuple[Cubin, dict[str, tuple[
        int, int]]]:
    from cudabuild import run

    src = out.with_suffix(".ptx")
    src.write_text(ptx)
    proc = run([ptxas, f"-arch=sm_{sm}", "-v", "-maxrregcount=24", "-o", out, src])
    return Cubin.from_bytes(out.read_bytes()), _ptxas_v(proc.stdout + proc.stderr)


@pytest.fixture(scope="module")
def spill_ptx(tmp_path_factory: pytest.TempPathFactory) -> str:
    from cudabuild import NVCC, need, run

    out = tmp_path_factory.mktemp("spill-ptx") / "spill.ptx"
    run([need(NVCC), "-ptx", "-arch=compute_80", "-o", out, SPILL_SOURCE])
    return out.read_text()


def test_spills_of_older_ptxas(spill_ptx: str, tmp_path: Path) -> None:
    """Triton's bare ptxas 12.9 writes the annotations (its cubins have no cuinfo note: the
    toolkit is the kernels' EIATTR_CUDA_API_VERSION, 129); Debian's ptxas 11.8 writes none for
    the same spilling kernels, so it gets None, not 0."""
    import importlib.util

    from thirdparty import CUDA_TOOLKIT_118, debian_tool

    triton = importlib.util.find_spec("triton")
    assert triton is not None and triton.origin is not None, "Triton is not installed"
    ptxas129 = Path(triton.origin).parent / "backends" / "nvidia" / "bin" / "ptxas"
    ptx = re.sub(r"^\.version \d+\.\d+", ".version 7.8", spill_ptx, flags=re.M)
    new, oracle = _bare_ptxas_cubin(ptxas129, ptx, "80", tmp_path / "p129.cubin")
    assert new.toolkit == (12, 9)
    assert {f.name: (f.spill_stores, f.spill_loads) for f in new.functions} == oracle
    # sm_101 (Thor up to CUDA 12.9; CUDA 13 calls it sm_110 and builds no sm_101)
    ptx101 = re.sub(r"^\.version \d+\.\d+", ".version 8.8", spill_ptx, flags=re.M)
    new, oracle = _bare_ptxas_cubin(ptxas129, ptx101.replace(".target sm_80", ".target sm_101"),
                                    "101", tmp_path / "p129-101.cubin")
    assert new.arch.number == 101 and oracle["k_spill32"] != (0, 0)
    assert {f.name: (f.spill_stores, f.spill_loads) for f in new.functions} == oracle
    old, oracle = _bare_ptxas_cubin(debian_tool(CUDA_TOOLKIT_118, "ptxas"), ptx, "80",
                                    tmp_path / "p118.cubin")
    assert old.toolkit == (11, 8) and oracle["k_spill64"] != (0, 0)
    assert all((f.spill_stores, f.spill_loads) == (None, None) and f.size for f in old.functions)


# what CUDA 13 no longer builds: Maxwell and Pascal (64-bit instructions), Volta; then two others
SPILL_ARCHS_12 = ("50", "52", "60", "61", "70", "72", "80", "90")


def test_spills_of_ptxas_12_6_and_12_5(spill_ptx: str, tmp_path: Path) -> None:
    """ptxas 12.6 (its first release) is the first to annotate spills: its figures equal its own
    ``ptxas -v``'s; ptxas 12.5 writes no annotation for the same spilling kernels (None)."""
    from thirdparty import PTXAS125, PTXAS126, fetch

    ptx = re.sub(r"^\.version \d+\.\d+", ".version 8.4", spill_ptx, flags=re.M)
    found = {}
    for member in (PTXAS125, PTXAS126):
        ptxas = fetch(member)
        ptxas.chmod(0o755)
        for sm in SPILL_ARCHS_12:
            text = ptx if sm >= "80" else ptx.replace(".target sm_80", f".target sm_{sm}")
            found[member.version, sm] = _bare_ptxas_cubin(ptxas, text, sm,
                                                          tmp_path / f"{member.version}-{sm}.cubin")
    for sm in SPILL_ARCHS_12:
        new, oracle = found["12.6.20", sm]
        assert new.toolkit == (12, 6) and oracle["k_spill32"] != (0, 0)
        assert {f.name: (f.spill_stores, f.spill_loads) for f in new.functions} == oracle
        old, oracle = found["12.5.82", sm]
        assert old.toolkit == (12, 5) and oracle["k_spill32"] != (0, 0)
        assert not any(r.attribute == 0x55 for f in old.functions for r in f.attributes)
        assert all((f.spill_stores, f.spill_loads) == (None, None) for f in old.functions)
    # Maxwell: an annotation on a control word (the first 8 bytes of each 32) does not check out
    data = (tmp_path / "12.6.20-50.cubin").read_bytes()
    off, size = _section_span(data, ".nv.info.k_spill32")
    note = next(r for r in parse_records(data[off:off + size], base=off) if r.attribute == 0x55)
    bad = bytearray(data)
    struct.pack_into("<II", bad, note.offset + 4, 1, 32)
    f = Cubin.from_bytes(bytes(bad)).function("k_spill32")
    assert (f.spill_stores, f.spill_loads) == (None, None)


def test_spill_annotations_of_a_real_library() -> None:
    """CuPy 12's CUB module (CUDA 12.9, Maxwell to Blackwell): every annotation of every cubin
    marks an STL or LDL (a figure, never None), and kernels spill on the 64-bit (sm_5x/6x) and
    the 128-bit encodings alike."""
    from thirdparty import CUPY12_CUB, fetch

    import fatbinkit

    lib = fatbinkit.open(fetch(CUPY12_CUB))
    spilling: dict[bool, int] = {True: 0, False: 0}
    for item in lib.select(None):
        if item.kind != "sass":
            continue
        cubin = Cubin.from_bytes(item.code.entry.data())
        assert cubin.toolkit == (12, 9)
        for f in cubin.functions:
            assert f.spill_stores is not None and f.spill_loads is not None, (item.name, f.name)
            annotated = any(r.attribute == 0x55 for r in f.attributes)
            assert annotated == bool(f.spill_stores or f.spill_loads), (item.name, f.name)
            spilling[cubin.arch.number < 70] += annotated
    assert spilling[True] and spilling[False], spilling


def test_bad_annotations_give_none(
        spill_builds: dict[str, tuple[Path, dict[str, tuple[int, int]]]]) -> None:
    data = spill_builds["90"][0].read_bytes()
    off, size = _section_span(data, ".nv.info.k_spill64")
    note = next(r for r in parse_records(data[off:off + size], base=off) if r.attribute == 0x55)
    assert note.name == "EIATTR_ANNOTATIONS"
    text = _section_span(data, ".text.k_spill64")[1]
    first = note.offset + 4  # the first (type, offset) pair
    for pair in ((1, text), (1, text + 4096), (1, 8), (2, 0), (1, 0)):  # (1, 0): not STL/LDL
        bad = bytearray(data)
        struct.pack_into("<II", bad, first, *pair)
        cubin = Cubin.from_bytes(bytes(bad))
        f = cubin.function("k_spill64")
        assert (f.spill_stores, f.spill_loads) == (None, None), pair
        assert cubin.function("k_spill32").spill_stores == spill_builds["90"][1]["k_spill32"][0]
