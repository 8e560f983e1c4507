"""The producer toolkit of a cubin, read from every place a cubin records it, against cuobjdump.

cuobjdump -elf prints each cubin's "toolkit=" (``toolkit=118`` in an ABI v1 listing,
``toolkit=12.9`` in an ABI v2 one): ABI v1 cubins keep it in the ELF header's ``e_version``,
ABI v2 cubins in ``.note.nv.cuinfo`` (ptxas 13) or ``.note.nv.tkinfo`` (ptxas 12.9).
Kernel-less cubins (module variables only) record it the same way, and their toolkit floor is
checked like any other. The cubins are built here by four ptxas releases (11.8, 12.9, 13.4,
13.5) and nvcc 13.0,
and taken from CUDA 10.2 and 11.8 era wheels (CuPy 10.2, cuRAND 11), each compared with the
cuobjdump of its era; fields are then patched to show which one each reader takes.
"""

from __future__ import annotations

import importlib.util
import re
import struct
from pathlib import Path

import pytest
from cudabuild import CUOBJDUMP, NVCC, PTXAS_PIP, need, run
from thirdparty import CUDA_TOOLKIT_118, CUPY102_RANDOM, CURAND11, debian_tool, fetch

from fatbinkit.compat import image_floors, image_from_cubin
from fatbinkit.formats.cubin import ABI_V1, ABI_V2, Cubin, cubin_outline, cubin_toolkit
from fatbinkit.formats.fatbin import EntryKind
from fatbinkit.scan import scan

# every test here runs on both cubin readers: the C walk and the pure one (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cubin_reader")

# a module with variables and no kernels, and one with a kernel (PTX ISA 7.0: every ptxas here)
VARIABLES_PTX = """.version 7.0
.target sm_80
.address_size 64
.global .align 4 .b8 table[256];
.global .align 4 .f32 scale = 0f40000000;
"""
KERNEL_PTX = VARIABLES_PTX + """
.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<3>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    ld.global.u32 %r1, [table];
    st.global.u32 [%rd2], %r1;
    ret;
}
"""
VARIABLES_CU = "__device__ int table[64];\n__device__ float scale = 2.0f;\n"


def _triton_ptxas(name: str) -> Path:
    spec = importlib.util.find_spec("triton")
    assert spec is not None and spec.origin is not None, "Triton is not installed"
    return need(Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name)


def cuobjdump_toolkit(path: Path, tool: Path = CUOBJDUMP) -> tuple[int, int]:
    """cuobjdump -elf's "toolkit=" of a cubin: ``118`` (ABI v1 listing) or ``12.9`` (ABI v2)."""
    text = run([tool, "-elf", path]).stdout
    figure = re.search(r"toolkit=([\d.]+)", text)
    assert figure is not None, text[:500]
    tk = figure.group(1)
    if "." in tk:
        major, minor = tk.split(".")
        return int(major), int(minor)
    return divmod(int(tk), 10)


def ours(data: bytes) -> tuple[int, int] | None:
    """The toolkit by each of the three readers, which must agree."""
    full, outline, quick = (Cubin.from_bytes(data).toolkit, cubin_outline(data).toolkit,
                            cubin_toolkit(data))
    assert full == outline == quick
    return full


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> cubin: kernel-less (``vars``) and kernel (``kern``) modules by each ptxas."""
    root = tmp_path_factory.mktemp("toolkits")
    (root / "vars.ptx").write_text(VARIABLES_PTX)
    (root / "kern.ptx").write_text(KERNEL_PTX)
    (root / "vars.cu").write_text(VARIABLES_CU)
    tools = {"118": debian_tool(CUDA_TOOLKIT_118, "ptxas"), "129": _triton_ptxas("ptxas"),
             "134": _triton_ptxas("ptxas-blackwell"), "135": need(PTXAS_PIP)}
    out: dict[str, Path] = {}
    for tk, ptxas in tools.items():
        for sm in ("80", "100") if tk != "118" else ("80",):
            for module in ("vars", "kern"):
                path = root / f"{module}_{tk}_sm{sm}.cubin"
                run([ptxas, f"-arch=sm_{sm}", "-o", path, root / f"{module}.ptx"])
                out[path.stem] = path
    path = root / "vars_nvcc130_sm80.cubin"
    run([need(NVCC), "-cubin", "-arch=sm_80", "-o", path, root / "vars.cu"])
    out[path.stem] = path
    return out


def test_every_toolkit_and_abi_matches_cuobjdump(built: dict[str, Path]) -> None:
    abis = set()
    for name, path in built.items():
        data = path.read_bytes()
        assert ours(data) == cuobjdump_toolkit(path), name
        abis.add((name.split("_")[1], data[8]))
    # ABI v1 from 11.8 and 12.9 (sm_80), ABI v2 from 12.9 (sm_100) and every 13.x
    assert {("118", ABI_V1), ("129", ABI_V1), ("129", ABI_V2), ("135", ABI_V2),
            ("nvcc130", ABI_V2)} <= abis


def test_kernel_less_cubins_record_their_toolkit(built: dict[str, Path]) -> None:
    """The case the kernels' EIATTR_CUDA_API_VERSION cannot serve: no kernels."""
    for name in ("vars_118_sm80", "vars_129_sm80", "vars_129_sm100", "vars_135_sm80",
                 "vars_nvcc130_sm80"):
        data = built[name].read_bytes()
        assert not any(f.entry for f in Cubin.from_bytes(data).functions)
        assert ours(data) == cuobjdump_toolkit(built[name]) is not None, name


def _patched(path: Path, tmp: Path, at: int, word: int) -> tuple[Path, bytes]:
    data = bytearray(path.read_bytes())
    struct.pack_into("<I", data, at, word)
    out = tmp / f"patched-{path.name}"
    out.write_bytes(data)
    return out, bytes(data)


def _note_desc(data: bytes, section: str) -> int:
    """File offset of a note section's descriptor."""
    from fatbinkit.formats import elf

    s = next(s for s in elf.sections(data) if s.name == section)
    return s.header.offset + elf.NoteHeader.unpack_from(data, s.header.offset).desc_offset


def test_each_field_is_the_one_cuobjdump_reads(built: dict[str, Path], tmp_path: Path) -> None:
    """A field patched to another release moves cuobjdump's figure and ours alike: ABI v1's
    e_version (offset 20), ABI v2's cuinfo toolkit field, and 12.9's tkinfo first word."""
    v1 = built["vars_118_sm80"]
    path, data = _patched(v1, tmp_path, 20, 115)
    assert ours(data) == cuobjdump_toolkit(path) == (11, 5)
    v2 = built["vars_135_sm80"]
    path, data = _patched(v2, tmp_path, _note_desc(v2.read_bytes(), ".note.nv.cuinfo") + 4, 117)
    assert ours(data) == cuobjdump_toolkit(path) == (11, 7)
    tk = built["vars_129_sm100"]
    path, data = _patched(tk, tmp_path, _note_desc(tk.read_bytes(), ".note.nv.tkinfo"), 127)
    assert ours(data) == cuobjdump_toolkit(path) == (12, 7)
    # ABI v2's e_version (1) is no toolkit: patching it changes nothing for either
    path, data = _patched(v2, tmp_path, 20, 99)
    assert ours(data) == cuobjdump_toolkit(path) == (13, 5)


def _first_cubins(source: Path, want: int) -> list[bytes]:
    """The first ``want`` cubins of a library: kernel-less ones first, then others."""
    cubins = [c.entry.data() for c in scan(source) if c.entry.header.kind == EntryKind.ELF]
    return sorted(cubins, key=lambda d: bool(cubin_outline(d).kernels))[:want]


@pytest.mark.parametrize("member", [CURAND11, CUPY102_RANDOM], ids=["curand11", "cupy102"])
def test_real_old_cubins_match_their_eras_cuobjdump(member: object, tmp_path: Path) -> None:
    """cuRAND 11's kernel-less cubins (its precalc tables) and CuPy 10.2's cubins (no
    EIATTR_CUDA_API_VERSION) record the toolkit only in e_version: cuobjdump 11.8 reads 118 and
    102 there."""
    old_cuobjdump = debian_tool(CUDA_TOOLKIT_118, "cuobjdump")
    for i, data in enumerate(_first_cubins(fetch(member), 3)):  # type: ignore[arg-type]
        path = tmp_path / f"{i}.cubin"
        path.write_bytes(data)
        assert ours(data) == cuobjdump_toolkit(path, old_cuobjdump) is not None


def test_kernel_less_cubin_gets_its_toolkit_floor(built: dict[str, Path]) -> None:
    """A kernel-less ABI v1 cubin by CUDA 11.8: the toolkit floor (a CUDA 11.x driver) instead
    of "producer toolkit is not recorded"."""
    image = image_from_cubin(built["vars_118_sm80"].read_bytes(), "entry at 0x50")
    assert image.toolkit == (11, 8)
    floors, warnings = image_floors(image)
    assert [(f.what, f.need) for f in floors] == [("toolkit", (11, 0))]
    assert warnings == ()
