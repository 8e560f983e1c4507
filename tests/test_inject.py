"""fatbinkit.inject: blobs added to linked libraries are found by dlopen + dlsym, no relink."""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from fatbinkit.errors import FormatError, InputError, TruncatedError, UnsupportedError
from fatbinkit.formats import elf
from fatbinkit.formats.elf_writer import Blob
from fatbinkit.inject import inject

PF_R = 4
LIBZ = Path("/lib/x86_64-linux-gnu/libz.so.1")

LIB_SOURCE = """#include <stddef.h>
extern const unsigned char __k_start[], __k_end[];
const unsigned char *get_k(void) { return __k_start; }
size_t get_k_len(void) { return (size_t)(__k_end - __k_start); }
int answer(void) { return 42; }
const unsigned char __taken_start[1];
"""

_libdl = ctypes.CDLL(None)
_dlsym = _libdl.dlsym
_dlsym.restype = ctypes.c_void_p
_dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def dlsym(lib: ctypes.CDLL, name: str) -> int | None:
    value: int | None = _dlsym(lib._handle, name.encode())
    return value


def gcc(tmp_path: Path, *args: str, source: str = LIB_SOURCE, name: str = "libt.so") -> Path:
    src = tmp_path / "t.c"
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["gcc", *args, "-o", str(out), str(src)], check=True, capture_output=True)
    return out


def assert_blobs_exported(lib: ctypes.CDLL, contents: dict[str, bytes]) -> None:
    for name, content in contents.items():
        start, end = dlsym(lib, f"__{name}_start"), dlsym(lib, f"__{name}_end")
        assert start is not None and end is not None, name
        assert end - start == len(content)
        assert (dlsym(lib, f"__{name}_size") or 0) == len(content)  # absolute: the value itself
        assert ctypes.string_at(start, len(content)) == content


def load_flags(path: Path) -> list[int]:
    """p_flags of every PT_LOAD segment."""
    with open(path, "rb") as f:
        return [s["p_flags"] for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]


def blob_segment_flags(path: Path) -> list[int]:
    """p_flags of the PT_LOAD segments holding the .fatbinkit section."""
    with open(path, "rb") as f:
        e = ELFFile(f)
        sec = e.get_section_by_name(".fatbinkit")
        return [
            s["p_flags"]
            for s in e.iter_segments()
            if s["p_type"] == "PT_LOAD" and s.section_in_segment(sec)
        ]


def assert_readelf_clean(path: Path) -> None:
    proc = subprocess.run(["readelf", "-aW", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""
    assert "warning" not in proc.stdout.lower()


def test_injected_blobs_resolve_references_and_dlsym(tmp_path: Path) -> None:
    lib = gcc(tmp_path, "-shared", "-fPIC", "-O1")
    rng = random.Random(1)
    contents = {
        "k": b"kernel bytes\x00\x01",
        "empty": b"",
        "one": b"\x7f",
        "big": rng.randbytes(200_000),
        **{f"r{i}": rng.randbytes(rng.randrange(1, 3000)) for i in range(20)},
    }
    src_file = tmp_path / "big.bin"
    src_file.write_bytes(contents["big"])
    blobs = [Blob(n, src_file if n == "big" else c) for n, c in contents.items()]
    out = tmp_path / "libt-injected.so"
    inject(lib, out, blobs)

    assert blob_segment_flags(out) == [PF_R]  # one segment, read-only
    before, after = load_flags(lib), load_flags(out)
    added = list(after)
    for flags in before:
        added.remove(flags)
    assert PF_R in added and all(flags == PF_R for flags in added)  # nothing writable/executable
    assert_readelf_clean(out)
    assert os.stat(out).st_mode == os.stat(lib).st_mode

    so = ctypes.CDLL(str(out))
    assert so.answer() == 42
    so.get_k.restype = ctypes.c_void_p
    so.get_k_len.restype = ctypes.c_size_t
    assert ctypes.string_at(so.get_k(), so.get_k_len()) == contents["k"]
    assert so.get_k() == dlsym(so, "__k_start")
    assert_blobs_exported(so, contents)


def test_copy_of_system_libz_keeps_working(tmp_path: Path) -> None:
    if not LIBZ.exists():
        pytest.fail(f"{LIBZ} missing: install zlib1g (.ci/run does)")
    lib = tmp_path / "libz.so.1"
    shutil.copy(LIBZ, lib)
    contents = {f"kernel_{i}": random.Random(i).randbytes(100 * i + 3) for i in range(10)}
    out = tmp_path / "libz-injected.so"
    inject(lib, out, [Blob(n, c) for n, c in contents.items()])
    assert_readelf_clean(out)

    z = ctypes.CDLL(str(out))
    z.zlibVersion.restype = ctypes.c_char_p
    assert z.zlibVersion().decode() == zlib.ZLIB_RUNTIME_VERSION
    z.crc32.restype = ctypes.c_ulong
    z.crc32.argtypes = [ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint]
    data = b"fatbinkit" * 1000
    assert z.crc32(0, data, len(data)) == zlib.crc32(data)
    bound = ctypes.c_ulong(len(data) + 1000)
    packed = ctypes.create_string_buffer(bound.value)
    assert z.compress(packed, ctypes.byref(bound), data, ctypes.c_ulong(len(data))) == 0
    assert zlib.decompress(packed.raw[: bound.value]) == data
    assert_blobs_exported(z, contents)


def test_inject_in_place(tmp_path: Path) -> None:
    lib = gcc(tmp_path, "-shared", "-fPIC")
    inject(lib, lib, [Blob("k", b"in place")])
    so = ctypes.CDLL(str(lib))
    assert_blobs_exported(so, {"k": b"in place"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libt.so", "t.c"]


def test_refusals_leave_no_output(tmp_path: Path) -> None:
    lib = gcc(tmp_path, "-shared", "-fPIC")
    out = tmp_path / "out.so"
    text = tmp_path / "notes.txt"
    text.write_text("not an ELF file at all\n")
    obj = gcc(tmp_path, "-c", "-fPIC", name="t.o")
    exe = gcc(tmp_path, "-no-pie", source="int main(void) { return 0; }\n", name="exe")
    truncated = tmp_path / "trunc.so"
    truncated.write_bytes(lib.read_bytes()[:200])
    mangled = tmp_path / "mangled.so"  # program headers overwritten: LIEF reads nonsense
    data = bytearray(lib.read_bytes())
    data[64 : 64 + 4 * 56] = b"\xff" * (4 * 56)
    mangled.write_bytes(data)
    injected = tmp_path / "once.so"
    inject(lib, injected, [Blob("k", b"x")])

    cases: list[tuple[Path, list[Blob], type[Exception], str]] = [
        (text, [Blob("k", b"x")], FormatError, "not an ELF file"),
        (obj, [Blob("k", b"x")], UnsupportedError, "not a shared library"),
        (exe, [Blob("k", b"x")], UnsupportedError, "not a shared library"),
        (truncated, [Blob("k", b"x")], TruncatedError, "past the file end"),
        (mangled, [Blob("k", b"x")], UnsupportedError, "LIEF did not map .fatbinkit read-only"),
        (lib, [Blob("taken", b"x")], UnsupportedError, "already defines __taken_start"),
        (injected, [Blob("j", b"x")], UnsupportedError, "already has a .fatbinkit section"),
        (tmp_path / "missing.so", [Blob("k", b"x")], InputError, "No such file"),
        (tmp_path, [Blob("k", b"x")], InputError, "is a directory"),
        (lib, [Blob("k", tmp_path / "missing.bin")], InputError, "No such file"),
    ]
    for library, blobs, error, message in cases:
        with pytest.raises(error, match=message):
            inject(library, out, blobs)
        assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None,
    reason="aarch64 cross gcc missing (.ci/run installs gcc-aarch64-linux-gnu)",
)
def test_aarch64_library_checked_with_cross_readelf(tmp_path: Path) -> None:
    """No aarch64 CPU here: the injected library is checked statically with the cross tools."""
    src = tmp_path / "t.c"
    src.write_text(LIB_SOURCE)
    lib = tmp_path / "liba64.so"
    subprocess.run(
        ["aarch64-linux-gnu-gcc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True
    )
    contents = {"k": b"aarch64 kernel", "big": random.Random(3).randbytes(70_000)}
    out = tmp_path / "liba64-injected.so"
    inject(lib, out, [Blob(n, c) for n, c in contents.items()])
    proc = subprocess.run(
        ["aarch64-linux-gnu-readelf", "-aW", str(out)], capture_output=True, text=True, check=True
    )
    assert proc.stderr == "" and "warning" not in proc.stdout.lower()
    assert blob_segment_flags(out) == [PF_R]
    with open(out, "rb") as f:
        e = ELFFile(f)
        assert e["e_machine"] == "EM_AARCH64"
        page = max(s["p_align"] for s in e.iter_segments() if s["p_type"] == "PT_LOAD")
        for seg in e.iter_segments():
            if seg["p_type"] == "PT_LOAD":
                assert (seg["p_offset"] - seg["p_vaddr"]) % page == 0
        dynsym = {s.name: s for s in e.get_section_by_name(".dynsym").iter_symbols()}
        for name, content in contents.items():
            start, end = dynsym[f"__{name}_start"], dynsym[f"__{name}_end"]
            assert dynsym[f"__{name}_size"]["st_shndx"] == "SHN_ABS"
            assert dynsym[f"__{name}_size"]["st_value"] == len(content)
            assert e.get_section(start["st_shndx"]).name == ".fatbinkit"
            assert end["st_value"] - start["st_value"] == len(content)
            f.seek(next(e.address_offsets(start["st_value"], len(content))))
            assert f.read(len(content)) == content
        # The library's own GOT entry for __k_start now names a defined symbol.
        relocs = e.get_section_by_name(".rela.dyn")
        symtab = e.get_section(relocs["sh_link"])
        named = {symtab.get_symbol(r["r_info_sym"]).name for r in relocs.iter_relocations()}
        assert "__k_start" in named and dynsym["__k_start"]["st_shndx"] != "SHN_UNDEF"


def test_output_path_that_is_not_utf8(tmp_path: Path) -> None:
    """LIEF's write(path) failed with std::bad_cast on such a name; the bytes go through Python."""
    lib = gcc(tmp_path, "-shared", "-fPIC")
    out = Path(os.fsdecode(bytes(tmp_path) + b"/lib\xff k.so"))
    inject(lib, out, [Blob("k", b"kernel bytes")])
    assert_readelf_clean(out)
    so = ctypes.CDLL(os.fsdecode(out))
    assert so.answer() == 42
    assert_blobs_exported(so, {"k": b"kernel bytes"})
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_lief_runs_in_a_child_held_to_its_limits(tmp_path: Path) -> None:
    """LIEF parses and writes in its own process: a time or memory limit it runs into ends
    that process, not this one, and the output is not touched (an existing one stays as it
    was)."""
    from fatbinkit.errors import InjectError

    lib = gcc(tmp_path, "-shared", "-fPIC")
    out = tmp_path / "out.so"
    out.write_bytes(b"previous output")
    with pytest.raises(InjectError, match="ran past"):
        inject(lib, out, [Blob("k", b"x")], timeout=0.01)
    with pytest.raises(InjectError, match="memory"):
        inject(lib, out, [Blob("k", b"x")], memory=64 << 20)  # below what Python + LIEF need
    assert out.read_bytes() == b"previous output"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    inject(lib, out, [Blob("k", b"x")])  # default limits
    assert_blobs_exported(ctypes.CDLL(str(out)), {"k": b"x"})


def test_own_reader_refuses_a_broken_section_table_before_lief(tmp_path: Path) -> None:
    lib = gcc(tmp_path, "-shared", "-fPIC")
    data = bytearray(lib.read_bytes())
    head = elf.file_header(data)
    data[0x3E:0x40] = (head.shnum + 5).to_bytes(2, "little")  # e_shstrndx past the table
    broken = tmp_path / "broken.so"
    broken.write_bytes(data)
    with pytest.raises(FormatError, match="section name table index"):
        inject(broken, tmp_path / "out.so", [Blob("k", b"x")])


def test_what_needs_no_lief_is_refused_before_its_child_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """From the fuzz campaign (2.11 s, over its 2 s bound: LIEF's import alone is ~1.3 s): a
    library whose ``.dynsym`` name is mangled is refused by fatbinkit's own reader, as LIEF's
    child refused it; a library injected once already, likewise. readelf agrees that the first
    has no ``.dynsym``. (The child launcher is replaced to prove it is not reached.)"""
    import fatbinkit.inject as module

    lib = gcc(tmp_path, "-shared", "-fPIC")
    data = bytearray(lib.read_bytes())
    at = data.rindex(b".dynsym\0")
    data[at : at + 7] = b".dynsyz"
    nodyn = tmp_path / "nodyn.so"
    nodyn.write_bytes(data)
    sections = subprocess.run(["readelf", "-S", "-W", str(nodyn)], capture_output=True,
                              text=True, check=True).stdout
    assert ".dynsyz" in sections and " .dynsym " not in sections
    injected = tmp_path / "once.so"
    inject(lib, injected, [Blob("k", b"x")])

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("LIEF's child was started")

    monkeypatch.setattr(module, "run_worker", no_child)
    with pytest.raises(UnsupportedError, match="no dynamic symbol table"):
        inject(nodyn, tmp_path / "out.so", [Blob("k", b"x")])
    with pytest.raises(UnsupportedError, match=r"already has a \.fatbinkit section"):
        inject(injected, tmp_path / "out.so", [Blob("j", b"x")])
    assert not (tmp_path / "out.so").exists()


@pytest.mark.parametrize("word, signal_name", [(0, "SIGFPE"), (2, "SIGSEGV")])
def test_a_library_that_crashes_lief_is_an_error_not_a_dead_process(
    tmp_path: Path, word: int, signal_name: str,
) -> None:
    """Reproducers from a mutation campaign (30,889 single-field mutants of small gcc
    libraries, 268 killed LIEF 1.0 by a signal): `.gnu.hash` with nbuckets = 0 (SIGFPE) or
    bloom_size = 0 (SIGSEGV) passes every header check, LIEF parses it, and
    `write_to_bytes()` dies. In the child, that is an InjectError; this process lives on."""
    from fatbinkit.errors import InjectError

    lib = gcc(tmp_path, "-shared", "-fPIC", "-O1")
    data = bytearray(lib.read_bytes())
    gnu_hash = next(s for s in elf.sections(data) if s.name == ".gnu.hash")
    data[gnu_hash.header.offset + 4 * word : gnu_hash.header.offset + 4 * word + 4] = bytes(4)
    crasher = tmp_path / "crasher.so"
    crasher.write_bytes(data)
    out = tmp_path / "out.so"
    with pytest.raises(InjectError, match=f"LIEF crashed \\({signal_name}\\)"):
        inject(crasher, out, [Blob("k", b"x")])
    assert not out.exists()
