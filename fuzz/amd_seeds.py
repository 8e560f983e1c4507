"""AMD seeds: small HIP device-code files cut from the test suite's HIP fixtures by LLVM's tools.

Built once into ``.fixtures/fuzz-seeds/amd-v1`` (``$FATBINKIT_FIXTURES``) from
``tests/hipbuild.py``'s fixtures (clang 19 and 22, no ROCm) with LLVM's own tools, never with
fatbinkit's readers (they are what is fuzzed):

========================= ===================================================================
file                      what it is, how it is made
========================= ===================================================================
gfx942.hsaco              bundle19's gfx942 code object (``clang-offload-bundler-19
                          --unbundle``): ELF, ``NT_AMDGPU_METADATA`` note, five ``.kd``
plain.bundle              a plain bundle of a host entry of size 0 and that code object
                          (``clang-offload-bundler-19 --type=o``): the shape of a device-only
                          bundle, one target instead of three
ccob_v2.hipfb             obj19z's ``.hip_fatbin`` (``llvm-objcopy-19 --dump-section``): one
                          CCOB v2 (zstd) of three targets
ccob_v3.hipfb             obj22z's: one CCOB v3 (zstd)
mix.hipfb                 lib19mix's: a plain bundle, then a CCOB v2, 4096-aligned
newdrv.offbin             newdrv19's ``.llvm.offloading``: three OffloadBinary v1 blobs
ccob_v2.o, ccob_v3.o      obj19z and obj22z themselves (host objects: the front door)
plain.o                   obj19 (a host object with a plain bundle)
========================= ===================================================================
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hipbuild import build  # noqa: E402
from llvm import run_llvm  # noqa: E402
from thirdparty import CACHE  # noqa: E402

__all__ = ["AMD_FAMILIES", "AMD_SEEDS", "amd_corpus"]

AMD_SEEDS = CACHE / "fuzz-seeds" / "amd-v1"
#: which seed files each AMD family holds (by suffix)
AMD_FAMILIES = {
    "hipfb": (".hipfb", ".bundle"),  # what read_bundles reads: a .hip_fatbin, a bundle file
    "hsaco": (".hsaco",),
    "offbin": (".offbin",),
    "amdfile": (".o", ".bundle", ".hsaco"),  # what a user hands the CLI
}
_GFX942 = "hipv4-amdgcn-amd-amdhsa--gfx942"
_HOST = "host-x86_64-unknown-linux--"


def _tool(major: int, tool: str, *args: str | Path, cwd: Path) -> None:
    proc = run_llvm(major, tool, *args, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool}-{major} {' '.join(map(str, args))}: {proc.stderr}")


def _build(out: Path) -> None:
    _tool(19, "clang-offload-bundler", "--type=o", "--unbundle", f"--input={build('bundle19')}",
          f"--targets={_GFX942}", "--output=gfx942.hsaco", cwd=out)
    empty = out / "empty"
    empty.touch()
    _tool(19, "clang-offload-bundler", "--type=o", f"--targets={_HOST},{_GFX942}",
          "--input=empty", "--input=gfx942.hsaco", "--output=plain.bundle", cwd=out)
    empty.unlink()
    for name, fixture, section in (("ccob_v2.hipfb", "obj19z", ".hip_fatbin"),
                                   ("ccob_v3.hipfb", "obj22z", ".hip_fatbin"),
                                   ("mix.hipfb", "lib19mix", ".hip_fatbin"),
                                   ("newdrv.offbin", "newdrv19", ".llvm.offloading")):
        _tool(19, "llvm-objcopy", f"--dump-section={section}={name}", build(fixture),
              out / "scratch", cwd=out)
        (out / "scratch").unlink()
    for name, fixture in (("ccob_v2.o", "obj19z"), ("ccob_v3.o", "obj22z"), ("plain.o", "obj19")):
        shutil.copyfile(build(fixture), out / name)


def amd_corpus() -> dict[str, list[bytes]]:
    """The AMD seed files by family, built on first use."""
    if not (AMD_SEEDS / "done").is_file():
        work = AMD_SEEDS.with_name(AMD_SEEDS.name + ".tmp")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        _build(work)
        (work / "done").touch()
        shutil.rmtree(AMD_SEEDS, ignore_errors=True)
        work.rename(AMD_SEEDS)
    files = sorted(p for p in AMD_SEEDS.iterdir() if p.name != "done")
    return {family: [p.read_bytes() for p in files if p.name.endswith(suffixes)]
            for family, suffixes in AMD_FAMILIES.items()}
