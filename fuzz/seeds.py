"""The seed corpus: the test suite's kernels built by the real tools, plus real third-party images.

Built once into ``.fixtures/fuzz-seeds`` (``$FATBINKIT_FIXTURES``): the inspection kernels of
``tests/data/inspect_kernels.cu`` as nvcc 13.0 PTX, ptxas cubins (sm_75, sm_90a, sm_100 with its
``.nv.compat``), an ``nvcc -fatbin`` fatbin, a host object and a shared library with a
``.nv_fatbin``; fatbinkit's writer's fatbins (uncompressed, LZ4, zstd, identifiers and options) and
an embedding object; a PE32+ DLL image and a COFF object holding that fatbin in ``.nv_fatb`` (laid
out here after Microsoft's PE Format specification: the fuzz targets read, never load them);
small gcc shared libraries for ``inject``; and the three smallest cubins and PTX of CuPy's CUDA
12 wheel (the test suite's fixture).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fatbin_kernels import system_tool  # noqa: E402
from thirdparty import CACHE, CUPY12_RANDOM, fetch  # noqa: E402

from fatbinkit.formats.arch import Arch  # noqa: E402
from fatbinkit.formats.elf_writer import Blob, object_bytes  # noqa: E402
from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry  # noqa: E402
from fatbinkit.scan import scan  # noqa: E402

__all__ = ["SEEDS", "corpus"]

SEEDS = CACHE / "fuzz-seeds" / "v4"  # v4: a library with device code outside .nv_fatbin
SOURCE = ROOT / "tests" / "data" / "inspect_kernels.cu"
LIB_SOURCE = """
extern const unsigned char __kernel_start[];  /* resolved by inject: defined in place */
int answer(void) { return 42; }
const unsigned char *blob(void) { return __kernel_start; }
"""

#: which seed files each family holds (by suffix)
FAMILIES = {
    "fatbin": (".fatbin",),
    "cubin": (".cubin",),
    "ptx": (".ptx",),
    "host": (".o", ".so", ".a", ".dll", ".obj"),
    "library": (".lib.so",),
    "hidden": (".hidden.so",),  # fatbins, a zstd and a bare cubin in .data (issue 31)
}


def _run(*cmd: str | Path, cwd: Path | None = None) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True, cwd=cwd)


def _build(out: Path) -> None:
    nvcc = system_tool("nvcc")  # the CUDA toolkit's, as the test suite's builds use
    src = out / "kernels.cu"
    shutil.copyfile(SOURCE, src)
    for virt in ("compute_80", "compute_100f"):
        _run(nvcc, "-ptx", f"-arch={virt}", src, "-o", out / f"nvcc_{virt}.ptx")
    for arch in ("sm_75", "sm_90a", "sm_100"):
        _run(nvcc, "-cubin", f"-arch={arch}", src, "-o", out / f"nvcc_{arch}.cubin")
    gencode = ["-gencode=arch=compute_80,code=[sm_80,compute_80]",
               "-gencode=arch=compute_90,code=sm_90"]
    _run(nvcc, "-fatbin", *gencode, src, "-o", out / "nvcc.fatbin")
    _run(nvcc, "-c", "-Xcompiler", "-fPIC", *gencode, src, "-o", out / "nvcc_host.o")
    _run("ar", "rcs", out / "nvcc_host.a", out / "nvcc_host.o")  # a static library
    _run(nvcc, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *gencode, src,
         "-o", out / "nvcc_host.so")

    cubin = (out / "nvcc_sm_100.cubin").read_bytes()
    ptx = (out / "nvcc_compute_80.ptx").read_bytes()
    for codec in (None, "lz4", "zstd"):
        entries = [make_entry(EntryKind.ELF, Arch(100), cubin, compression=codec,
                              identifier="kernels.cu"),
                   make_entry(EntryKind.PTX, Arch(80), ptx, compression=codec,
                              options="-O3 -lineinfo")]
        name = codec or "plain"
        (out / f"writer_{name}.fatbin").write_bytes(build_fatbin(entries))
    fat = (out / "writer_zstd.fatbin").read_bytes()
    (out / "writer_embed.o").write_bytes(object_bytes([Blob("kernels", fat, 16)]))
    (out / "pe_image.dll").write_bytes(_pe_image(fat))
    (out / "pe_object.obj").write_bytes(_coff_object(fat))

    import zstandard

    hidden = {"hid_zstd": fat, "hid_lz4": (out / "writer_lz4.fatbin").read_bytes(),
              "hid_frame": zstandard.ZstdCompressor().compress(cubin),
              "hid_bare": (out / "nvcc_sm_75.cubin").read_bytes()}
    (out / "hidden.c").write_text("".join(
        f"__attribute__((used, aligned(8))) unsigned char {name}[{len(blob)}] = "
        f"{{{','.join(map(str, blob))}}};\n" for name, blob in hidden.items()))
    _run("gcc", "-shared", "-fPIC", "-o", out / "gcc.hidden.so", out / "hidden.c")
    (out / "hidden.c").unlink()
    (out / "lib.c").write_text(LIB_SOURCE)
    _run("gcc", "-shared", "-fPIC", "-O1", "-o", out / "gcc.lib.so", out / "lib.c")
    _run("gcc", "-shared", "-fPIC", "-O1", "-Wl,--hash-style=sysv", "-o", out / "sysv.lib.so",
         out / "lib.c")

    cupy = sorted(scan(fetch(CUPY12_RANDOM)), key=lambda c: c.entry.data_size)
    for kind, suffix in ((EntryKind.ELF, "cubin"), (EntryKind.PTX, "ptx")):
        for i, c in enumerate([c for c in cupy if c.entry.header.kind == kind][:3]):
            (out / f"cupy12_{i}.{suffix}").write_bytes(c.entry.data())
    for f in (src, out / "lib.c"):
        f.unlink()


def _up(n: int, align: int) -> int:
    return -(-n // align) * align


def _pe_image(fatbin: bytes) -> bytes:
    """A minimal x64 PE32+ DLL image whose one section, ``.nv_fatb``, holds ``fatbin``."""
    file_align, section_align, lfanew = 0x200, 0x1000, 0x40
    optional = 112 + 16 * 8  # PE32+ fixed fields, then 16 empty data directories
    headers = _up(lfanew + 4 + 20 + optional + 40, file_align)
    raw = _up(len(fatbin), file_align)
    dos = b"MZ".ljust(0x3C, b"\0") + lfanew.to_bytes(4, "little")
    coff = struct.pack("<HHIIIHH", 0x8664, 1, 0, 0, 0, optional, 0x2022)  # an image, a DLL
    opt = struct.pack("<H2B5IQ2I6H4I2H4QII", 0x20B, 14, 0, 0, raw, 0, 0, 0, 0x180000000,
                      section_align, file_align, 6, 0, 0, 0, 6, 0, 0,
                      section_align + _up(len(fatbin), section_align), headers, 0, 2, 0x160,
                      1 << 20, 1 << 12, 1 << 20, 1 << 12, 0, 16) + bytes(16 * 8)
    section = struct.pack("<8sIIIIIIHHI", b".nv_fatb", len(fatbin), section_align, raw, headers,
                          0, 0, 0, 0, 0x40000040)  # initialised data, read
    head = (dos.ljust(lfanew, b"\0") + b"PE\0\0" + coff + opt + section).ljust(headers, b"\0")
    return head + fatbin.ljust(raw, b"\0")


def _coff_object(fatbin: bytes) -> bytes:
    """A minimal x64 COFF object whose one section holds ``fatbin``, its long name
    ``.nv_fatbin`` kept in the string table (``/4``), as objects keep long names."""
    data = 20 + 40
    strings = b".nv_fatbin\0"
    coff = struct.pack("<HHIIIHH", 0x8664, 1, 0, data + len(fatbin), 0, 0, 0)
    section = struct.pack("<8sIIIIIIHHI", b"/4", 0, 0, len(fatbin), data, 0, 0, 0, 0,
                          0x40000040)
    return coff + section + fatbin + (4 + len(strings)).to_bytes(4, "little") + strings


def corpus() -> dict[str, list[bytes]]:
    """The seed files by family, built on first use."""
    if not (SEEDS / "done").is_file():
        work = SEEDS.with_name(SEEDS.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        _build(work)
        (work / "done").touch()
        shutil.rmtree(SEEDS, ignore_errors=True)
        work.rename(SEEDS)
    files = sorted(p for p in SEEDS.iterdir() if p.name != "done")
    out: dict[str, list[bytes]] = {}
    for family, suffixes in FAMILIES.items():
        chosen = [p for p in files if p.name.endswith(suffixes)]
        if family == "host":
            chosen = [p for p in chosen if not p.name.endswith((".lib.so", ".hidden.so"))]
        out[family] = [p.read_bytes() for p in chosen]
    from .amd_seeds import amd_corpus  # built apart: a CUDA seed change rebuilds no AMD seed

    out.update(amd_corpus())
    return out
