"""Fatbins made by NVIDIA's tools, and by ours, checked against cuobjdump and nvFatbin (oracles)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fatbin_kernels import (
    CUBIN_ARCHS,
    PTX_ARCHS,
    Kernels,
    cuobjdump_extract,
    cuobjdump_fields,
    cuobjdump_list,
    kernels_in,
    system_tool,
)

from fatbinkit.build import BACKENDS, Image, build, nvcc_command
from fatbinkit.cli import main
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import EntryKind, Fatbin
from fatbinkit.scan import listed, scan
from fatbinkit.toolchain import find_tool

FATBINARY_MODES = ("default", "size", "speed", "balance", "none", "compress-all")
NVCC_MODES = ("default", "size", "speed", "balance", "none")


@pytest.fixture(scope="session")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    return kernels_in(tmp_path_factory)


def _images(k: Kernels, identifier: str = "", options: str = "") -> list[Image]:
    out = [
        Image.from_file(EntryKind.ELF, Arch.parse(a), k.cubins[a], identifier=identifier)
        for a in CUBIN_ARCHS
    ]
    out += [
        Image.from_file(
            EntryKind.PTX, Arch.parse(a), k.ptx[a], identifier=identifier, options=options
        )
        for a in PTX_ARCHS
    ]
    return out


def _image3(k: Kernels) -> list[str]:
    args = [f"--image3=kind=elf,sm={a[3:]},file={k.cubins[a]}" for a in CUBIN_ARCHS]
    return args + [f"--image3=kind=ptx,sm={a[3:]},file={k.ptx[a]}" for a in PTX_ARCHS]


@pytest.fixture(scope="session")
def nvidia_fatbins(kernels: Kernels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Fatbins from nvcc, fatbinary in every compression mode, and nvFatbin."""
    root = tmp_path_factory.mktemp("nvidia")
    out: dict[str, Path] = {}
    for mode in NVCC_MODES:
        nvcc = root / f"nvcc-{mode}.fatbin"
        subprocess.run(
            [
                system_tool("nvcc"), "-fatbin", str(kernels.source), "-o", str(nvcc),
                "-gencode", "arch=compute_90,code=sm_90",
                "-gencode", "arch=compute_90,code=compute_90",
                "-gencode", "arch=compute_100f,code=sm_100f",
                "-gencode", "arch=compute_120,code=compute_120",
                *([] if mode == "default" else [f"--compress-mode={mode}"]),
            ],
            check=True,
        )
        out[f"nvcc-{mode}"] = nvcc
    # containers back to back, with zero padding between them, as in .nv_fatbin sections
    both = root / "concatenated.fatbin"
    first = out["nvcc-default"].read_bytes()
    both.write_bytes(first + bytes(8) + out["nvcc-speed"].read_bytes())
    out["concatenated"] = both
    for mode in FATBINARY_MODES:
        path = root / f"fatbinary-{mode}.fatbin"
        flags = ["--compress-all"] if mode == "compress-all" else [f"--compress-mode={mode}"]
        if mode == "none":  # one variant with an identifier path and ptxas options
            flags += ["--ident=some/dir/kernels.cu", "--cmdline=-O3 -lineinfo"]
        subprocess.run(
            [system_tool("fatbinary"), "-64", f"--create={path}", *_image3(kernels), *flags],
            check=True,
        )
        out[f"fatbinary-{mode}"] = path
    for name, compression in (("nvfatbin", None), ("nvfatbin-zstd", "zstd")):
        path = root / f"{name}.fatbin"
        data = build(_images(kernels, "nvf"), backend="nvfatbin", compression=compression)
        path.write_bytes(data)
        out[name] = path
    return out


NVIDIA_NAMES = [
    *(f"nvcc-{m}" for m in NVCC_MODES),
    "concatenated",
    *(f"fatbinary-{m}" for m in FATBINARY_MODES),
    "nvfatbin",
    "nvfatbin-zstd",
]


def _our_listing(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["ls", *args, str(path)]) == 0
    return capsys.readouterr().out.splitlines()


def _our_extract(path: Path, out: Path, *args: str) -> dict[str, bytes]:
    assert main(["extract", *args, str(path), "-o", str(out)]) == 0
    return {p.name: p.read_bytes() for p in out.iterdir()}


@pytest.mark.parametrize("name", NVIDIA_NAMES)
def test_listing_matches_cuobjdump(
    name: str, nvidia_fatbins: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = nvidia_fatbins[name]
    expected = cuobjdump_list(path)
    assert len(expected) >= 4
    assert _our_listing(path, capsys) == expected


@pytest.mark.parametrize("name", NVIDIA_NAMES)
def test_fields_match_cuobjdump(name: str, nvidia_fatbins: dict[str, Path]) -> None:
    """arch (with a/f), code version, identifier, compression, ptxas options: as cuobjdump says."""
    path = nvidia_fatbins[name]
    blocks = cuobjdump_fields(path)
    entries = [c.entry for c in listed(scan(path))]
    assert len(entries) == len(blocks)
    for entry, block in zip(entries, blocks, strict=True):
        assert block["kind"] == ("elf" if entry.kind == EntryKind.ELF else "ptx")
        assert block["arch"] == entry.arch.sm
        assert block["code version"] == "[{},{}]".format(*entry.code_version)
        assert block.get("identifier", "") == entry.identifier
        assert ("compressed" in block) == (entry.compression is not None)
        if entry.kind == EntryKind.PTX:
            assert block["ptxasOptions"] == entry.options
        assert block["host"] == "linux" and block["compile_size"] == "64bit"


@pytest.mark.parametrize("name", NVIDIA_NAMES)
def test_extract_matches_cuobjdump(
    name: str, nvidia_fatbins: dict[str, Path], tmp_path: Path
) -> None:
    path = nvidia_fatbins[name]
    expected = cuobjdump_extract(path, tmp_path / "cuobjdump")
    assert expected
    assert _our_extract(path, tmp_path / "ours") == expected


def test_compression_modes_seen(nvidia_fatbins: dict[str, Path]) -> None:
    """The codec each fatbinary mode picks, as we read it (cuobjdump agrees: tests above)."""
    seen = {
        name: {c.entry.compression for c in scan(path)} for name, path in nvidia_fatbins.items()
    }
    assert seen["fatbinary-none"] == {None}
    assert seen["fatbinary-speed"] == {None, "lz4"}
    assert seen["fatbinary-size"] == {"zstd"}
    assert seen["fatbinary-compress-all"] == {"zstd"}
    assert "zstd" in seen["fatbinary-default"]


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_pure_writer_read_by_cuobjdump(
    compression: str | None, kernels: Kernels, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """cuobjdump lists what the pure writer made and extracts exactly the input images."""
    images = _images(kernels)
    path = tmp_path / "k.fatbin"
    path.write_bytes(build(images, compression=compression))
    listing = cuobjdump_list(path)
    assert len(listing) == len(images)
    assert _our_listing(path, capsys) == listing
    blocks = cuobjdump_fields(path)
    assert [b["arch"] for b in blocks] == [i.arch.sm for i in images]
    assert all(("compressed" in b) == (compression is not None) for b in blocks)
    extracted = cuobjdump_extract(path, tmp_path / "x")
    elf = [n for n in listing if n.startswith("ELF")]
    assert len(elf) == len(CUBIN_ARCHS)
    cubins = sorted(v for k, v in extracted.items() if k.endswith(".cubin"))
    ptxs = sorted(v for k, v in extracted.items() if k.endswith(".ptx"))
    assert cubins == sorted(i.data for i in images if i.kind == EntryKind.ELF)
    assert ptxs == sorted(i.data.rstrip(b"\0") for i in images if i.kind == EntryKind.PTX)
    assert _our_extract(path, tmp_path / "ours") == extracted


def _stripped_ptx(kernels: Kernels, tmp_path: Path) -> dict[str, bytes]:
    """PTX as NVIDIA stores it (comments stripped): cuobjdump -xptx of nvFatbin's output."""
    images = [Image.from_file(EntryKind.PTX, Arch.parse(a), kernels.ptx[a]) for a in PTX_ARCHS]
    path = tmp_path / "strip.fatbin"
    path.write_bytes(build(images, backend="nvfatbin"))
    files = cuobjdump_extract(path, tmp_path / "strip")
    return {a: files[f"strip.{n}.{a}.ptx"] for n, a in enumerate(PTX_ARCHS, 1)}


@pytest.mark.parametrize(
    ("identifier", "options"), [("", ""), ("kernels.cu", "-O3"), ("a/b/long_name.cu", "")]
)
def test_pure_bytes_equal_nvfatbin_and_fatbinary(
    identifier: str, options: str, kernels: Kernels, tmp_path: Path
) -> None:
    """Uncompressed: the pure writer reproduces nvFatbin 13.x and fatbinary byte for byte."""
    ptx = _stripped_ptx(kernels, tmp_path)
    images = [
        Image.from_file(EntryKind.ELF, Arch.parse(a), kernels.cubins[a], identifier=identifier)
        for a in CUBIN_ARCHS
    ] + [Image(EntryKind.PTX, Arch.parse(a), ptx[a], identifier, options) for a in PTX_ARCHS]
    pure = build(images)
    assert pure == build(images, backend="nvfatbin")
    assert pure == build(images, backend="fatbinary")
    assert Fatbin.from_bytes(pure).to_bytes() == pure


@pytest.mark.parametrize("backend", BACKENDS[:3])
@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
def test_backends_agree_under_cuobjdump(
    backend: str, compression: str | None, kernels: Kernels, tmp_path: Path
) -> None:
    """Every builder and codec: cuobjdump extracts exactly the input images (NVIDIA's tools strip
    PTX comments, so the PTX given is already stripped)."""
    ptx = _stripped_ptx(kernels, tmp_path)
    images = [*_images(kernels)[:3], Image(EntryKind.PTX, Arch.parse("sm_120"), ptx["sm_120"])]
    path = tmp_path / "k.fatbin"
    path.write_bytes(build(images, backend=backend, compression=compression))
    files = cuobjdump_extract(path, tmp_path / "x")
    assert sorted(files.values()) == sorted(
        i.data.rstrip(b"\0") if i.kind == EntryKind.PTX else i.data for i in images
    )
    codecs = {c.entry.compression for c in scan(path)}
    assert codecs == {compression}


@pytest.mark.parametrize("current_arch", ["90a", "80"])
def test_nvcc_backend_is_aoti_recipe(current_arch: str, kernels: Kernels, tmp_path: Path) -> None:
    """The command is AOTInductor's (torch/_inductor/codecache.py, emit_multi_arch_kernel; on an
    H100/H200 its _nvcc_arch_as_compile_option() gives "90a") and its output is what that
    command produces when run by hand."""
    arch = Arch.parse(current_arch)
    asm_file, cubin_file = tmp_path / "k.ptx", tmp_path / "aoti.fatbin"
    asm_file.write_bytes(kernels.ptx[arch.sm].read_bytes())
    nvcc = str(find_tool("nvcc"))
    # AOTInductor's command, verbatim apart from the compiler path.
    cmd = (
        f"{nvcc} -fatbin {asm_file} -o {cubin_file} "
        f"-gencode arch=compute_{current_arch},code=compute_{current_arch} "
        f"-gencode arch=compute_{current_arch},code=sm_{current_arch} "
    )
    assert cmd.split() == [nvcc, *nvcc_command(asm_file, cubin_file, [arch])]
    subprocess.run(cmd.split(), check=True, capture_output=True)
    ours = build([Image.from_file(EntryKind.PTX, arch, asm_file)], backend="nvcc")
    assert ours == cubin_file.read_bytes()
    assert [(c.entry.kind, c.entry.arch.sm) for c in scan(cubin_file)] == [
        (EntryKind.ELF, arch.sm), (EntryKind.PTX, arch.sm),
    ]


def test_nvcc_backend_several_archs(kernels: Kernels, tmp_path: Path) -> None:
    """PTX and SASS for each requested arch from one PTX source, as cuobjdump lists them."""
    ptx = kernels.ptx["sm_80"].read_bytes()
    out = tmp_path / "multi.fatbin"
    images = [Image(EntryKind.PTX, Arch(80), ptx), Image(EntryKind.PTX, Arch(90), ptx)]
    out.write_bytes(build(images, backend="nvcc"))
    names = [line.split(": ")[1] for line in cuobjdump_list(out)]
    assert sorted(names) == sorted([
        "multi.1.sm_80.cubin", "multi.1.sm_80.ptx", "multi.2.sm_90.cubin", "multi.2.sm_90.ptx"
    ])


def test_ltoir_entries_kept_and_skipped_like_cuobjdump(
    kernels: Kernels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """nvcc -dlto puts LTO-IR (kind 8) entries in the fatbin: kept raw, round-tripped, listed by
    cuobjdump -lelf -lptx as nothing, and by us only with --all."""
    out = tmp_path / "lto.fatbin"
    subprocess.run(
        [system_tool("nvcc"), "-fatbin", "-gencode", "arch=compute_90,code=lto_90",
         "-gencode", "arch=compute_90,code=sm_90", str(kernels.source), "-o", str(out)],
        check=True,
    )
    data = out.read_bytes()
    fb = Fatbin.from_bytes(data)
    assert fb.to_bytes() == data
    kinds = [e.kind for e in fb.entries]
    assert EntryKind.LTOIR in kinds
    assert main(["ls", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == cuobjdump_list(out)
    assert main(["ls", "--all", "--json", str(out)]) == 0
    assert "ltoir" in capsys.readouterr().out
