"""fatbinkit.formats.elf_writer against GNU binutils: ld -r -b binary + objcopy are the oracle, gcc
links."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fatbinkit.errors import InputError, InvalidArgumentError
from fatbinkit.formats.elf_writer import Blob, ld_mangle, object_bytes, symbol_names, write_object

RENAME = ".data=.rodata,alloc,load,readonly,data,contents"
CROSS = "aarch64-linux-gnu-"
needs_cross = pytest.mark.skipif(
    shutil.which(CROSS + "gcc") is None,
    reason="aarch64 cross binutils/gcc missing (.ci/run installs gcc-aarch64-linux-gnu)",
)


def run(*cmd: str | bytes | os.PathLike[str], cwd: Path | None = None) -> str:
    """Run a tool; fail the test with its stderr if it fails."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True)
    assert proc.returncode == 0, f"{cmd!r} failed: {proc.stderr.decode(errors='replace')}"
    return proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")


def ld_binary(cwd: Path, names: list[bytes], out: str = "ref.o", prefix: str = "") -> Path:
    """What ld -r -b binary + objcopy --rename-section make of files named ``names`` in ``cwd``."""
    run(f"{prefix}ld", "-r", "-b", "binary", "-z", "noexecstack", "-o", out, *names, cwd=cwd)
    run(f"{prefix}objcopy", "--rename-section", RENAME, out, cwd=cwd)
    return cwd / out


def make_files(cwd: Path, sizes: dict[bytes, int], seed: int = 0) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    contents = {}
    for name, size in sizes.items():
        contents[name] = rng.randbytes(size)
        (Path(os.fsdecode(cwd)) / os.fsdecode(name)).write_bytes(contents[name])
    return contents


def elf_view(path: Path) -> dict[str, object]:
    """Sections (type, flags, align, bytes) and symbols (value, bind, type, shndx, size)."""
    with open(path, "rb") as f:
        e = ELFFile(f)
        sections = {
            s.name: (s["sh_type"], s["sh_flags"], s["sh_addralign"], s.data())
            for s in e.iter_sections()
            if s.name not in (".symtab", ".strtab", ".shstrtab")
        }
        symtab = e.get_section_by_name(".symtab")
        symbols = sorted(
            (
                s.name,
                s["st_value"],
                s["st_info"]["bind"],
                s["st_info"]["type"],
                s["st_shndx"],
                s["st_size"],
            )
            for s in symtab.iter_symbols()
        )
        return {
            "machine": e["e_machine"],
            "sections": sections,
            "symbols": symbols,
            "locals": symtab["sh_info"],
        }


def assert_readelf_clean(path: Path, readelf: str = "readelf") -> str:
    proc = subprocess.run([readelf, "-aW", path], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert "warning" not in proc.stdout.lower()
    return proc.stdout


SIZE_SETS = {
    "empty": {b"empty.bin": 0},
    "one-byte": {b"one.bin": 1},
    "mib": {b"big.cubin": 1 << 20},
    "random": {f"k{i}.cubin".encode(): random.Random(i).randrange(0, 5000) for i in range(25)},
    "odd-names": {
        b"with space.cubin": 7,
        "caf\u00e9 k\u00f6rnel.bin".encode(): 33,  # non-ASCII UTF-8: one '_' per byte
        b"raw\xff\xfebytes.bin": 5,  # not UTF-8 at all
        b"x": 1,
        b"a_binary_x": 2,  # its symbols end with x's: libbfd shares the string tails
        b"dots.and-dashes+plus=eq": 3,
    },
}


@pytest.mark.parametrize("case", sorted(SIZE_SETS))
def test_ld_style_is_byte_identical_to_ld_and_objcopy(tmp_path: Path, case: str) -> None:
    sizes = SIZE_SETS[case]
    make_files(tmp_path, sizes)
    ref = ld_binary(tmp_path, list(sizes))
    ours = tmp_path / "ours.o"
    blobs = [Blob(name, Path(os.fsdecode(tmp_path / os.fsdecode(name)))) for name in sizes]
    write_object(ours, blobs, machine="x86_64", style="ld", align=1)
    assert elf_view(ours) == elf_view(ref)
    assert ours.read_bytes() == ref.read_bytes()
    assert_readelf_clean(ours)


def test_ld_style_1100_blobs_byte_identical(tmp_path: Path) -> None:
    """Past 3038 symbols ld's hash table grows, which reorders its symbol output."""
    sizes = {f"b{i}.bin".encode(): i % 61 for i in range(1100)}
    make_files(tmp_path, sizes)
    ref = ld_binary(tmp_path, list(sizes))
    blobs = [Blob(n, (tmp_path / n.decode()).read_bytes()) for n in sizes]
    assert object_bytes(blobs, machine="x86_64", style="ld", align=1) == ref.read_bytes()


def test_ld_style_from_many_files_byte_identical(tmp_path: Path) -> None:
    """Files read into the writer's buffer across many flushes, with streamed ones between."""
    rng = random.Random(7)
    sizes = {f"f{i}.bin".encode(): rng.randrange(0, 8192) for i in range(300)}
    sizes[b"f100.bin"] = 300_000  # streamed (not gathered), between gathered ones
    sizes[b"f200.bin"] = (1 << 20) + 5
    make_files(tmp_path, sizes)
    ref = ld_binary(tmp_path, list(sizes))
    out = tmp_path / "ours.o"
    blobs = [Blob(n, tmp_path / n.decode()) for n in sizes]
    write_object(out, blobs, machine="x86_64", style="ld", align=1)
    assert out.read_bytes() == ref.read_bytes()


def test_ld_mangle_matches_ld_symbol_names(tmp_path: Path) -> None:
    names = list(SIZE_SETS["odd-names"])
    make_files(tmp_path, SIZE_SETS["odd-names"])
    ref = elf_view(ld_binary(tmp_path, names))
    ref_names = {s[0] for s in ref["symbols"]}  # type: ignore[attr-defined]
    for name in names:
        assert set(symbol_names(name, "ld")) <= ref_names
    assert ld_mangle("caf\u00e9") == "caf__"


def aoti_pipeline(cwd: Path, kernels: dict[str, bytes]) -> Path:
    """AOTInductor's three commands, for many kernels in one ld call."""
    ref = ld_binary(cwd, [n.encode() for n in kernels])
    redefine = []
    for name in kernels:
        stem = ld_mangle(name)
        for part in ("start", "size", "end"):
            redefine += ["--redefine-sym", f"_binary_{stem}_{part}=__{name.split('.')[0]}_{part}"]
    run("objcopy", *redefine, ref, cwd=cwd)
    return ref


def test_aoti_style_matches_aoti_commands(tmp_path: Path) -> None:
    sizes = {"k0.cubin": 0, "k1.cubin": 1, "k2.cubin": 1 << 20, "k3.cubin": 777, "k4.cubin": 3}
    sizes |= {"x__k3.cubin": 5, "_k1.cubin": 9}  # __k3_end ends __x__k3_end: shared string tails
    contents = make_files(tmp_path, {n.encode(): s for n, s in sizes.items()})
    ref = aoti_pipeline(tmp_path, dict.fromkeys(sizes, b""))
    ours = tmp_path / "ours.o"
    blobs = [Blob(n.split(".")[0], contents[n.encode()]) for n in sizes]
    write_object(ours, blobs, machine="x86_64", align=1)
    assert elf_view(ours) == elf_view(ref)
    # Same size and bytes everywhere but in the symbol/string tables, whose order ld picks.
    a, b = ours.read_bytes(), ref.read_bytes()
    assert len(a) == len(b)
    with open(ref, "rb") as f:
        e = ELFFile(f)
        lo = e.get_section_by_name(".symtab")["sh_offset"]
        hi = e.get_section_by_name(".strtab")
        hi = hi["sh_offset"] + hi["sh_size"]
    assert a[:lo] == b[:lo] and a[hi:] == b[hi:]
    assert_readelf_clean(ours)


def test_default_alignment_places_each_blob_on_16_bytes(tmp_path: Path) -> None:
    rng = random.Random(5)
    contents = {f"k{i}": rng.randbytes(rng.randrange(0, 100)) for i in range(30)}
    ours = tmp_path / "a.o"
    write_object(ours, [Blob(n, c) for n, c in contents.items()], machine="x86_64")
    with open(ours, "rb") as f:
        e = ELFFile(f)
        rodata = e.get_section_by_name(".rodata")
        assert rodata["sh_addralign"] == 16
        assert rodata["sh_offset"] % 16 == 0
        assert rodata["sh_flags"] == 2  # SHF_ALLOC only: read-only, not executable
        data = rodata.data()
        syms = {s.name: s for s in e.get_section_by_name(".symtab").iter_symbols()}
    for name, content in contents.items():
        start, end, size = (syms[f"__{name}_{p}"] for p in ("start", "end", "size"))
        assert start["st_value"] % 16 == 0
        assert size["st_shndx"] == "SHN_ABS" and size["st_value"] == len(content)
        assert data[start["st_value"] : end["st_value"]] == content
        assert start["st_info"]["bind"] == end["st_info"]["bind"] == "STB_GLOBAL"
    assert "GNU-stack" in assert_readelf_clean(ours)


def test_per_blob_alignment_overrides_default(tmp_path: Path) -> None:
    data = object_bytes(
        [Blob("a", b"x"), Blob("b", b"y", align=4096), Blob("c", b"z", align=1)],
        machine="x86_64",
        align=8,
    )
    path = tmp_path / "a.o"
    path.write_bytes(data)
    out = assert_readelf_clean(path)
    values = {
        line.split()[-1]: int(line.split()[1], 16) for line in out.splitlines() if "__" in line
    }
    assert values["__a_start"] == 0 and values["__b_start"] == 4096 and values["__c_start"] == 4097
    with open(path, "rb") as f:
        rodata = ELFFile(f).get_section_by_name(".rodata")
        assert rodata["sh_addralign"] == 4096 and rodata["sh_offset"] % 4096 == 0


def c_accessor(names: list[str]) -> str:
    decls = "".join(f"extern const unsigned char __{n}_start[], __{n}_end[];\n" for n in names)
    starts = ",".join(f"__{n}_start" for n in names)
    ends = ",".join(f"__{n}_end" for n in names)
    return f"""#include <stddef.h>
#include <stdio.h>
{decls}
static const unsigned char *const starts[] = {{{starts}}};
static const unsigned char *const ends[] = {{{ends}}};
size_t blob_count(void) {{ return {len(names)}; }}
const unsigned char *blob(size_t i, size_t *n) {{
  *n = (size_t)(ends[i] - starts[i]);
  return starts[i];
}}
#ifdef MAIN
int main(void) {{
  for (size_t i = 0; i < blob_count(); i++) {{
    size_t n; const unsigned char *p = blob(i, &n);
    printf("%zu:", n);
    for (size_t j = 0; j < n; j++) printf("%02x", p[j]);
    printf("\\n");
  }}
  return 0;
}}
#endif
"""


@pytest.mark.parametrize("count", [1, 1000])
def test_linked_library_and_executable_return_the_blobs(tmp_path: Path, count: int) -> None:
    rng = random.Random(count)
    contents = {f"k{i}": rng.randbytes(rng.choice([0, 1, 17, 300])) for i in range(count)}
    obj = tmp_path / "blobs.o"
    write_object(obj, [Blob(n, c) for n, c in contents.items()])
    src = tmp_path / "acc.c"
    src.write_text(c_accessor(list(contents)))
    lib = tmp_path / "libacc.so"
    run("gcc", "-shared", "-fPIC", "-O1", "-o", lib, src, obj)
    exe = tmp_path / "acc"
    run("gcc", "-DMAIN", "-O1", "-o", exe, src, obj)

    gnu_stack = [ln for ln in run("readelf", "-lW", lib).splitlines() if "GNU_STACK" in ln]
    assert len(gnu_stack) == 1 and "E" not in gnu_stack[0].split()[-2:][0]

    so = ctypes.CDLL(str(lib))
    so.blob.restype = ctypes.c_void_p
    so.blob.argtypes = [ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    assert so.blob_count() == count
    for i, content in enumerate(contents.values()):
        n = ctypes.c_size_t()
        p = so.blob(i, ctypes.byref(n))
        assert ctypes.string_at(p, n.value) == content

    lines = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines()
    assert lines == [f"{len(c)}:{c.hex()}" for c in contents.values()]


@needs_cross
def test_aarch64_ld_style_byte_identical_and_links(tmp_path: Path) -> None:
    sizes = {b"a.cubin": 0, b"b c.cubin": 9, b"d.cubin": 4096 + 3}
    contents = make_files(tmp_path, sizes)
    ref = ld_binary(tmp_path, list(sizes), prefix=CROSS)
    ours = tmp_path / "ours.o"
    write_object(
        ours, [Blob(n, contents[n]) for n in sizes], machine="aarch64", style="ld", align=1
    )
    assert ours.read_bytes() == ref.read_bytes()
    assert_readelf_clean(ours, CROSS + "readelf")

    kernels = {"ka": contents[b"a.cubin"], "kb": contents[b"b c.cubin"], "kd": contents[b"d.cubin"]}
    aoti = tmp_path / "aoti.o"
    write_object(aoti, [Blob(n, c) for n, c in kernels.items()], machine="aarch64")
    src = tmp_path / "acc.c"
    src.write_text(c_accessor(list(kernels)))
    lib = tmp_path / "libacc.so"
    run(CROSS + "gcc", "-shared", "-fPIC", "-o", lib, src, aoti)
    stack = [ln for ln in run(CROSS + "readelf", "-lW", lib).splitlines() if "GNU_STACK" in ln]
    assert len(stack) == 1 and stack[0].split()[-2] == "RW"
    with open(lib, "rb") as f:
        e = ELFFile(f)
        assert e["e_machine"] == "EM_AARCH64"
        dynsym = {s.name: s["st_value"] for s in e.get_section_by_name(".dynsym").iter_symbols()}
        for name, content in kernels.items():
            start, end = dynsym[f"__{name}_start"], dynsym[f"__{name}_end"]
            assert end - start == len(content)
            offsets = list(e.address_offsets(start, max(1, len(content))))
            f.seek(offsets[0])
            assert f.read(len(content)) == content


def test_object_bytes_equals_written_file_and_is_deterministic(tmp_path: Path) -> None:
    src = tmp_path / "k.bin"
    src.write_bytes(b"\x01" * (3 << 20))  # past the in-memory threshold: streamed
    blobs = [
        Blob("a", b"abc"),
        Blob("b", bytearray(b"de")),
        Blob("c", memoryview(b"f")),
        Blob("d", src),
    ]
    out = tmp_path / "o.o"
    write_object(out, blobs, machine="aarch64")
    first = out.read_bytes()
    write_object(out, blobs, machine="aarch64")
    assert out.read_bytes() == first == object_bytes(blobs, machine="aarch64")


def test_big_blob_is_streamed_not_loaded(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(64 << 20)
        f.seek((64 << 20) - 4)
        f.write(b"tail")
    tracemalloc.start()
    try:
        write_object(tmp_path / "big.o", [Blob("big", big)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    with open(tmp_path / "big.o", "rb") as f:
        e = ELFFile(f)
        rodata = e.get_section_by_name(".rodata")
        assert rodata["sh_size"] == 64 << 20
        f.seek(rodata["sh_offset"] + (64 << 20) - 4)
        assert f.read(4) == b"tail"


@pytest.mark.parametrize("name", ["", "1a", "a-b", "a b", "caf\u00e9", "a=b", b"raw"])
def test_invalid_aoti_names_are_refused(tmp_path: Path, name: str | bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="not a C identifier"):
        write_object(tmp_path / "o.o", [Blob(name, b"x")])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("blobs", "style", "message"),
    [
        ([Blob("a", b"x"), Blob("a", b"y")], "aoti", "duplicate blob name 'a'"),
        ([Blob("a b", b"x"), Blob("a_b", b"y")], "ld", "both give symbol _binary_a_b_start"),
        ([], "aoti", "no blobs"),
        ([Blob("a", b"x", align=3)], "aoti", "not a power of two"),
        ([Blob("a", b"x", align=0)], "aoti", "not a power of two"),
        ([Blob("a", 12)], "aoti", "not int"),  # type: ignore[arg-type]
        ([b"x"], "aoti", "not bytes"),
        ([Blob("a", b"x")], "elf", "unknown symbol style"),
        ([Blob("", b"x")], "ld", "non-empty file name"),
    ],
)
def test_bad_arguments_are_refused(
    tmp_path: Path, blobs: list[Blob], style: str, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        write_object(tmp_path / "o.o", blobs, style=style)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_unknown_machine_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown machine 'mips'"):
        write_object(tmp_path / "o.o", [Blob("a", b"x")], machine="mips")


def test_unreadable_inputs_leave_no_output(tmp_path: Path) -> None:
    good = tmp_path / "good.bin"
    good.write_bytes(b"ok")
    out = tmp_path / "out" / "o.o"
    out.parent.mkdir()
    with pytest.raises(InputError, match="No such file"):
        write_object(out, [Blob("a", good), Blob("b", tmp_path / "missing.bin")])
    with pytest.raises(InputError, match="is a directory"):
        write_object(out, [Blob("a", good), Blob("b", tmp_path)])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        write_object(out, [Blob("a", good), Blob("b", fifo)])
    if os.geteuid() != 0:  # root reads anything
        locked = tmp_path / "locked.bin"
        locked.write_bytes(b"x")
        locked.chmod(0)
        with pytest.raises(InputError, match="Permission denied"):
            write_object(out, [Blob("a", good), Blob("b", locked)])
    assert list(out.parent.iterdir()) == []


_NAME_BYTES = st.binary(min_size=1, max_size=30).map(
    lambda b: b"f" + bytes(c for c in b if c not in (0, 0x2F))  # no NUL or '/', never an option
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.dictionaries(_NAME_BYTES, st.integers(0, 300), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_ld_style_identical_for_any_file_names(
    tmp_path_factory: pytest.TempPathFactory, files: dict[bytes, int], seed: int
) -> None:
    cwd = tmp_path_factory.mktemp("names")
    mangled = [ld_mangle(name) for name in files]
    assume(len(set(mangled)) == len(mangled))  # ld itself rejects such pairs (duplicates)
    contents = make_files(cwd, files, seed)
    ref = ld_binary(cwd, list(files))
    ours = object_bytes(
        [Blob(n, c) for n, c in contents.items()], machine="x86_64", style="ld", align=1
    )
    assert ours == ref.read_bytes()
