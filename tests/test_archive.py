"""Static libraries (``ar`` archives) read member by member, against cuobjdump.

Archives built here with GNU ar from nvcc objects: whole-program (SASS + PTX), relocatable
(``-rdc``), LTO-IR only, a host-only object, a name longer than GNU ar's 15 characters (the
``//`` long-name table), a thin archive (``ar T``); and the CUDA toolkit's own
``libcudadevrt.a``. ``fatbinkit ls`` must print what ``cuobjdump -lelf -lptx`` prints, member
lines included; ``extract`` must write its files, byte for byte. A BSD-format archive
(``llvm-ar --format=bsd``), which cuobjdump 13 does not read, must list as the GNU one does.
Malformed archives get one error line naming the file and the member.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cudabuild import NVCC, run
from fatbin_kernels import cuobjdump, cuobjdump_extract

CUDA_LIB = Path(NVCC).resolve().parent.parent / "lib64"
KERNEL_A = "__global__ void ka(float *x) { x[threadIdx.x] = 1; }\n"
KERNEL_B = "__global__ void kb(float *x) { x[threadIdx.x] = 2; }\n"
LONG = "an_object_with_a_name_longer_than_fifteen.o"


@pytest.fixture(scope="module")
def objs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("archive")
    (root / "a.cu").write_text(KERNEL_A)
    (root / "b.cu").write_text(KERNEL_B)
    (root / "h.c").write_text("int host(void) { return 1; }\n")
    run([NVCC, "-c", "-gencode", "arch=compute_80,code=[sm_80,compute_80]", "a.cu", "-o",
         "a.o"], cwd=root)
    run([NVCC, "-c", "-rdc=true", "-arch=sm_90", "b.cu", "-o", "b.o"], cwd=root)
    run([NVCC, "-c", "-rdc=true", "-gencode", "arch=compute_90,code=lto_90", "b.cu", "-o",
         "lto.o"], cwd=root)
    run(["gcc", "-c", "h.c", "-o", "h.o"], cwd=root)
    shutil.copy(root / "a.o", root / LONG)
    run(["ar", "rcs", "libmix.a", "a.o", "h.o", "b.o", "lto.o", LONG], cwd=root)
    run(["ar", "rcsT", "libthin.a", "a.o", "b.o", LONG], cwd=root)
    run(["llvm-ar", "--format=bsd", "rcs", "libbsd.a", "a.o", "h.o", "b.o", LONG], cwd=root)
    run(["ar", "rcs", "libgnu.a", "a.o", "h.o", "b.o", LONG], cwd=root)
    return root


def fatbinkit(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    return subprocess.run([sys.executable, "-m", "fatbinkit", *map(str, args)],
                          capture_output=True, text=True, check=False, cwd=cwd, env=env)


def _archives(objs: Path) -> list[Path]:
    return [objs / "libmix.a", objs / "libthin.a", objs / "libgnu.a",
            CUDA_LIB / "libcudadevrt.a"]


def test_listing_equals_cuobjdump_member_by_member(objs: Path) -> None:
    for lib in _archives(objs):
        for given, cwd in ((lib, None), (Path(lib.name), lib.parent)):  # relative paths too
            proc = fatbinkit("ls", given, cwd=cwd)
            assert proc.returncode == 0, proc.stderr
            # cuobjdump opens a thin archive's members from the working folder ("Could not open
            # input file 'a.o'" elsewhere); ar and ld, and fatbinkit, from the archive's folder
            want = subprocess.run([str(_cuobjdump()), "-lelf", "-lptx", str(given)],
                                  cwd=lib.parent if lib.name == "libthin.a" else cwd,
                                  capture_output=True, text=True, check=True).stdout
            assert proc.stdout == want, lib
    text = fatbinkit("ls", objs / "libmix.a").stdout
    assert f"\nmember {objs / 'libmix.a'}:h.o:\n" in text  # no device code: listed as cuobjdump
    assert f"member {objs / 'libmix.a'}:{LONG}:" in text


def _cuobjdump() -> Path:
    from fatbinkit.toolchain import find_tool

    return Path(find_tool("cuobjdump"))


def test_json_names_the_member(objs: Path) -> None:
    rows = json.loads(fatbinkit("ls", objs / "libmix.a", "--json", "--all").stdout)["entries"]
    assert [(r["member"], r["kind"], r["arch"]) for r in rows] == [
        ("a.o", "sass", "sm_80"), ("a.o", "ptx", "compute_80"),
        ("b.o", "sass", "sm_90"), ("b.o", "ptx", "compute_90"),
        ("lto.o", "ltoir", "sm_90"),
        (LONG, "sass", "sm_80"), (LONG, "ptx", "compute_80")]
    assert [r["container"] for r in rows] == [0, 0, 1, 1, 2, 3, 3]  # numbered across members
    data = (objs / "libmix.a").read_bytes()
    for r in rows:  # offsets are the archive's: the entry header is there
        kind = {"ptx": 1, "sass": 2, "ltoir": 8}[r["kind"]]
        assert int.from_bytes(data[r["offset"]:r["offset"] + 2], "little") == kind
    plain = json.loads(fatbinkit("ls", objs / "a.o", "--json").stdout)["entries"]
    assert {r["member"] for r in plain} == {None}


def test_extract_equals_cuobjdump(objs: Path, tmp_path: Path) -> None:
    for lib in _archives(objs):
        if lib.name == "libthin.a":  # cuobjdump finds the members from its working folder only
            work = tmp_path / "c-thin"
            work.mkdir()
            for m in ("a.o", "b.o", LONG):
                shutil.copy(objs / m, work / m)
            for what in ("-xelf", "-xptx"):
                subprocess.run([str(_cuobjdump()), what, "all", str(lib)], cwd=work,
                               capture_output=True, check=True)
            want = {p.name: p.read_bytes() for p in work.iterdir() if p.suffix != ".o"}
        else:
            want = cuobjdump_extract(lib, tmp_path / f"c-{lib.name}")
        out = tmp_path / f"f-{lib.name}"
        proc = fatbinkit("extract", lib, "-o", out)
        assert proc.returncode == 0, proc.stderr
        got = {p.name: p.read_bytes() for p in out.iterdir()}
        assert got == want, lib
        assert want


def test_bsd_archive_lists_as_the_gnu_one(objs: Path) -> None:
    bsd = fatbinkit("ls", objs / "libbsd.a", "--json").stdout
    gnu = fatbinkit("ls", objs / "libgnu.a", "--json").stdout
    strip = [{k: v for k, v in r.items() if k not in ("name", "offset")}
             for r in json.loads(bsd)["entries"]]
    assert strip == [{k: v for k, v in r.items() if k not in ("name", "offset")}
                     for r in json.loads(gnu)["entries"]]
    assert "does not contain device code" in cuobjdump("-lelf", objs / "libbsd.a") + \
        subprocess.run([str(_cuobjdump()), "-lelf", str(objs / "libbsd.a")], capture_output=True,
                       text=True, check=False).stderr  # cuobjdump 13 does not read BSD archives


def test_check_summary_and_diff_read_archives(objs: Path) -> None:
    proc = fatbinkit("check", objs / "libmix.a", "--arch", "sm_90", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verdicts"]["sm_90"]["status"] == "works"
    summary = json.loads(fatbinkit("ls", objs / "libmix.a", "--summary", "--json").stdout)
    assert summary["modules"] == 3 and summary["entries"] == 6
    diff = json.loads(fatbinkit("diff", objs / "libgnu.a", objs / "libmix.a", "--json").stdout)
    assert (diff["added"], diff["removed"], diff["changed"]) == ([], [], [])


def _member_header(name: bytes, size: int) -> bytes:
    return (name.ljust(16) + b"0".ljust(12) + b"0".ljust(6) + b"0".ljust(6) + b"644".ljust(8)
            + str(size).encode().ljust(10) + b"`\n")


@pytest.mark.parametrize("archive, message", [
    (b"!<arch>\n" + _member_header(b"a.o/", 10)[:-2] + b"XX", "member 1: bad header end"),
    (b"!<arch>\n" + _member_header(b"a.o/", 10).replace(b"10 ", b"1x "),
     "member 1: size '1x"),
    (b"!<arch>\n" + _member_header(b"a.o/", 9999999999), "member 1 (a.o/): its 9999999999 bytes"
     " run past the end"),
    (b"!<arch>\n" + _member_header(b"//", 4) + b"ab/\n" + _member_header(b"/99", 2) + b"xx",
     "member 2: long name at 99 is outside the name table"),
    (b"!<arch>\n" + _member_header(b"#1/50", 4) + b"abcd", "member 1: BSD name of 50 bytes"),
    (b"!<arch>\n" + b"a.o/   short", "member 1: header cut short"),
])
def test_malformed_archives(tmp_path: Path, archive: bytes, message: str) -> None:
    path = tmp_path / "bad.a"
    path.write_bytes(archive)
    proc = fatbinkit("ls", path)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"fatbinkit: error: {path}: ")
    assert message in lines[0]


def test_members_that_are_not_objects_are_skipped(objs: Path, tmp_path: Path) -> None:
    lib = tmp_path / "libtext.a"
    (tmp_path / "notes.txt").write_text("not an object\n" * 10)
    shutil.copy(objs / "a.o", tmp_path / "a.o")
    run(["ar", "rcs", lib, tmp_path / "notes.txt", tmp_path / "a.o"])
    text = fatbinkit("ls", lib).stdout
    assert text == f"\nmember {lib}:a.o:\nELF file    1: libtext.1.sm_80.cubin\n" \
        f"PTX file    1: libtext.1.sm_80.ptx\n"


def test_thin_archive_needs_its_folder(objs: Path) -> None:
    import fatbinkit as fk
    from fatbinkit.errors import FormatError

    with pytest.raises(FormatError, match=r"thin archive member a\.o"):
        fk.open((objs / "libthin.a").read_bytes())
    assert len(fk.open(objs / "libthin.a").codes) == 6


# -- prune and recompress static libraries, as nvprune does ---------------------------------------

def _nvprune() -> Path:
    from thirdparty import CUDA_TOOLKIT_118, debian_tool

    return debian_tool(CUDA_TOOLKIT_118, "nvprune")


def _listing(lib: Path) -> str:
    """cuobjdump's listing with the archive's own name taken out (names use its stem)."""
    out = subprocess.run([str(_cuobjdump()), "-lelf", "-lptx", str(lib)], capture_output=True,
                         text=True, check=False).stdout
    return out.replace(str(lib), "LIB").replace(lib.stem, "STEM")


def _as_gnu(lib: Path, work: Path) -> Path:
    """The members of ``lib``, taken out by llvm-ar, in a GNU archive of the same stem."""
    work.mkdir()
    names = subprocess.run(["llvm-ar", "t", str(lib)], capture_output=True, text=True,
                           check=True).stdout.split()
    run(["llvm-ar", "x", lib], cwd=work)
    out = work / lib.name
    run(["ar", "rcs", out, *names], cwd=work)
    return out


def _index(lib: Path) -> str:
    """The symbol index as nm prints it (``symbol in member``)."""
    return subprocess.run(["llvm-nm", "--print-armap", str(lib)], capture_output=True, text=True,
                          check=True).stdout.split("\n\n")[0]


@pytest.mark.parametrize("archive, oracle", [("libgnu.a", "libgnu.a"), ("libmix.a", "libmix.a"),
                                             ("libbsd.a", "libgnu.a")])
def test_exact_prune_equals_nvprune(objs: Path, tmp_path: Path, archive: str,
                                    oracle: str) -> None:
    """``prune --exact --for sm_80`` keeps, member by member, what ``nvprune -arch sm_80``
    (CUDA 11.8) keeps: the same cuobjdump listing and the same image bytes; the symbol index
    still names the right members (GNU and BSD indexes); objects without device code, the
    LTO-IR member and member order are untouched. nvprune 11.8 dies (SIGSEGV) on the BSD
    archive: its oracle is nvprune on the GNU archive of the same objects."""
    src = objs / archive
    ours, theirs = tmp_path / f"ours-{archive}", tmp_path / f"theirs-{archive}"
    proc = fatbinkit("prune", src, "-o", ours, "--for", "sm_80", "--exact", "--ptx", "none")
    assert proc.returncode == 0, proc.stderr
    subprocess.run([str(_nvprune()), "-arch", "sm_80", str(objs / oracle), "-o", str(theirs)],
                   check=True)
    if archive == "libbsd.a":  # cuobjdump reads GNU archives only: llvm-ar takes ours apart
        ours = _as_gnu(ours, tmp_path / "gnu")
    assert _listing(ours) == _listing(theirs)
    assert "sm_90" not in _listing(ours) and "sm_80.cubin" in _listing(ours)
    got = cuobjdump_extract(ours, tmp_path / "x-ours")
    want = cuobjdump_extract(theirs, tmp_path / "x-theirs")
    assert sorted(got.values()) == sorted(want.values()) and got
    assert _index(ours) == _index(src)
    names = subprocess.run(["llvm-ar", "t", str(ours)], capture_output=True, text=True,
                           check=True).stdout
    assert names == subprocess.run(["llvm-ar", "t", str(src)], capture_output=True, text=True,
                                   check=True).stdout
    assert ours.stat().st_size < src.stat().st_size


def test_pruned_archive_links_and_runs(tmp_path: Path) -> None:
    """The demo library's object in a static library, pruned for sm_89 (it keeps the sm_86 SASS
    an 8.9 GPU runs): gcc's linker takes it through nvcc, and the program runs."""
    from test_slim import GENCODE, LIBRARY, PROGRAM_OUTPUT, run_program

    from fatbinkit.slim import prune

    obj, lib, out = tmp_path / "slim.o", tmp_path / "libslim.a", tmp_path / "libslim-89.a"
    run([NVCC, "-c", "-Xcompiler", "-fPIC", "-o", obj, LIBRARY, *GENCODE])
    run(["ar", "rcs", lib, obj])
    report = prune(lib, out, ["sm_89"], ptx="none")
    assert "objects" in str(report) and "sm_89: same image in every module" in str(report)
    assert _listing(out).count("ELF file") == 1 and "sm_86.cubin" in _listing(out)
    exe = tmp_path / "prog"
    run([NVCC, "-o", exe, Path(__file__).parent / "data" / "slim_main.cpp", out])
    assert run_program(exe) == PROGRAM_OUTPUT


def test_recompress_archive_and_refusals(objs: Path, tmp_path: Path) -> None:
    out = tmp_path / "libmix-zstd.a"
    proc = fatbinkit("recompress", objs / "libmix.a", "-o", out, "--codec", "zstd",
                     "--level", "19", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(fatbinkit("ls", out, "--json").stdout)["entries"]
    assert {r["compression"] for r in rows} == {"zstd"}
    assert _listing(out) == _listing(objs / "libmix.a")
    proc = fatbinkit("prune", objs / "libthin.a", "-o", tmp_path / "t.a", "--for", "sm_80")
    assert proc.returncode == 3 and "is a thin archive" in proc.stderr
    assert not (tmp_path / "t.a").exists()


def test_the_toolkits_own_static_libraries(tmp_path: Path) -> None:
    """libcudadevrt.a pruned --exact for sm_80 holds what nvprune 11.8 keeps, image for image;
    libcudart_static.a holds no device code, which both tools say."""
    devrt = CUDA_LIB / "libcudadevrt.a"
    ours, theirs = tmp_path / "ours.a", tmp_path / "theirs.a"
    proc = fatbinkit("prune", devrt, "-o", ours, "--for", "sm_80", "--exact", "--ptx", "none")
    assert proc.returncode == 0, proc.stderr
    subprocess.run([str(_nvprune()), "-arch", "sm_80", str(devrt), "-o", str(theirs)],
                   check=True)
    assert _listing(ours) == _listing(theirs) and "sm_80.cubin" in _listing(ours)
    assert sorted(cuobjdump_extract(ours, tmp_path / "a").values()) == sorted(
        cuobjdump_extract(theirs, tmp_path / "b").values())
    static = CUDA_LIB / "libcudart_static.a"
    proc = fatbinkit("ls", static)
    assert proc.returncode == 3 and f"{static}: does not contain device code" in proc.stderr
    oracle = subprocess.run([str(_cuobjdump()), "-lelf", str(static)], capture_output=True,
                            text=True, check=False)
    assert "does not contain device code" in oracle.stderr
