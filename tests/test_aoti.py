"""fatbinkit.aoti drop-ins against AOTInductor's own three commands (ld + objcopy + objcopy)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from elftools.elf.elffile import ELFFile

from fatbinkit.aoti import convert_cubin_to_obj, convert_cubins_to_obj


def aoti_original(cubin_file: str, kernel_name: str) -> str:
    """torch/_inductor/codecache.py's convert_cubin_to_obj, commands as it runs them."""
    obj_file = cubin_file + ".o"
    subprocess.run(
        ["ld", "-r", "-b", "binary", "-z", "noexecstack", "-o", obj_file, cubin_file], check=True
    )
    subprocess.run(
        [
            "objcopy",
            "--rename-section",
            ".data=.rodata,alloc,load,readonly,data,contents",
            obj_file,
        ],
        check=True,
    )
    file_name = re.sub(r"[\W]", "_", cubin_file)
    cmd = ["objcopy"]
    for part in ("start", "size", "end"):
        cmd += ["--redefine-sym", f"_binary_{file_name}_{part}=__{kernel_name}_{part}"]
    subprocess.run([*cmd, obj_file], check=True)
    return obj_file


def view(path: str) -> tuple[dict[str, tuple[object, ...]], dict[str, tuple[object, ...]]]:
    with open(path, "rb") as f:
        e = ELFFile(f)
        sections = {
            s.name: (s["sh_type"], s["sh_flags"], s.data())
            for s in e.iter_sections()
            if s.name not in (".symtab", ".strtab", ".shstrtab")
        }
        symbols = {
            s.name: (s["st_value"], s["st_info"]["bind"], s["st_info"]["type"], s["st_shndx"])
            for s in e.get_section_by_name(".symtab").iter_symbols()
            if s.name
        }
    return sections, symbols


def test_convert_cubin_to_obj_matches_aotinductor(tmp_path: Path) -> None:
    ours_dir, ref_dir = tmp_path / "ours", tmp_path / "ref"
    ours_dir.mkdir()
    ref_dir.mkdir()
    content = bytes(range(256)) * 37 + b"tail"
    for d in (ours_dir, ref_dir):
        (d / "triton_poi_fused_0.cubin").write_bytes(content)

    ours = convert_cubin_to_obj(
        str(ours_dir / "triton_poi_fused_0.cubin"), "triton_poi_fused_0", "ld", "objcopy"
    )
    ref = aoti_original(str(ref_dir / "triton_poi_fused_0.cubin"), "triton_poi_fused_0")
    assert ours == str(ours_dir / "triton_poi_fused_0.cubin.o")
    assert view(ours) == view(ref)
    assert {"__triton_poi_fused_0_start", "__triton_poi_fused_0_size"} <= set(view(ours)[1])


def test_non_ascii_path_defeats_aotinductor_but_not_us(tmp_path: Path) -> None:
    """AOTInductor mangles with Python's \\W (keeps 'é'); ld replaces each UTF-8 byte."""
    cubin = tmp_path / "caf\u00e9.cubin"
    cubin.write_bytes(b"\x7fELF kernel")
    ref_symbols = view(aoti_original(str(cubin), "k"))[1]
    assert "__k_start" not in ref_symbols  # objcopy --redefine-sym silently did nothing
    ours = convert_cubin_to_obj(str(cubin), "k", "ld", "objcopy")
    sections, symbols = view(ours)
    start, end = symbols["__k_start"][0], symbols["__k_end"][0]
    assert sections[".rodata"][2][start:end] == b"\x7fELF kernel"  # type: ignore[index]


def test_batch_writes_one_object_with_every_kernel(tmp_path: Path) -> None:
    kernels = []
    for i in range(5):
        path = tmp_path / f"k {i}.cubin"  # spaces split AOTInductor's command lines
        path.write_bytes(bytes([i]) * (i * 10 + 1))
        kernels.append((path, f"kernel_{i}"))
    out = tmp_path / "kernels.o"
    assert convert_cubins_to_obj(kernels, out) == str(out)
    sections, symbols = view(str(out))
    data = sections[".rodata"][2]
    for i, (path, name) in enumerate(kernels):
        start, end = symbols[f"__{name}_start"][0], symbols[f"__{name}_end"][0]
        assert start % 16 == 0  # type: ignore[operator]
        assert data[start:end] == path.read_bytes()  # type: ignore[index]
        assert symbols[f"__{name}_size"] == (i * 10 + 1, "STB_GLOBAL", "STT_NOTYPE", "SHN_ABS")
