"""fatbinkit.formats.coff against the Windows toolchains: mingw-w64's objcopy and ld (binary input)
are the layout oracle, llvm-readobj reads the objects, lld-link and mingw ld link them into EXEs
and DLLs, and Wine runs the x64 ones, which print every blob back through its symbols."""

from __future__ import annotations

import mmap
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fatbinkit.errors import InvalidArgumentError, UnsupportedError
from fatbinkit.formats.coff import object_bytes, write_object
from fatbinkit.formats.elf_writer import Blob

MINGW = "x86_64-w64-mingw32-"
RENAME = ".data=.rdata,alloc,load,readonly,data,contents"
KERNEL32 = Path("/usr/x86_64-w64-mingw32/lib/libkernel32.a")
BASE = 0x180000000  # preferred base of every EXE and DLL linked below: a DLL has to move
MACHINE_NAMES = {"x86_64": ("x64", "COFF-x86-64"), "aarch64": ("arm64", "COFF-ARM64")}


def tool(name: str) -> str:
    """The path of ``name``; skip the test where it is not installed."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} missing (.ci/run installs mingw-w64, lld, llvm and wine)")
    return found


def run(*cmd: str | os.PathLike[str], cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 120) -> str:  # fmt: skip
    """Run a tool; fail the test with its output if it fails; its stdout."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"{cmd!r} failed:\n{out}\n{proc.stderr.decode(errors='replace')}"
    return out


def readobj(path: Path, *options: str) -> str:
    """``llvm-readobj`` of ``path``, checked to say nothing on stderr and warn about nothing."""
    proc = subprocess.run([tool("llvm-readobj"), *options, path], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "warning" not in proc.stdout.lower()
    return proc.stdout


Sym = tuple[str, int, str, int]  # name, value, section name, section number


@dataclass(frozen=True)
class CoffView:
    """What llvm-readobj says of an object with one section: the format, the file flags and
    time stamp, the section's name and flags, its bytes, and the symbols in order (all of them
    external, of no type, with no auxiliary records)."""

    format: str
    characteristics: int
    stamp: int
    section: tuple[str, int]
    data: bytes
    symbols: list[Sym]

    def values(self) -> dict[str, tuple[int, str, int]]:
        return {name: (value, section, number) for name, value, section, number in self.symbols}


def coff_view(path: Path) -> CoffView:
    out = readobj(path, "--file-headers", "--sections", "--symbols")
    (section,) = re.findall(
        r"Name: (\S+) .*?RawDataSize: (\d+)\s+PointerToRawData: 0x([0-9A-F]+).*?"
        r"Characteristics \[ \(0x([0-9A-F]+)\)", out.split("Sections [", 1)[1], re.S)
    name, size, offset, flags = section
    symbols = re.findall(r"Name: (\S+)\s+Value: (\d+)\s+Section: (\S+) \((-?\d+)\)\s+"
                         r"BaseType: Null \(0x0\)\s+ComplexType: Null \(0x0\)\s+"
                         r"StorageClass: External \(0x2\)\s+AuxSymbolCount: 0", out)  # fmt: skip
    header = re.search(r"Format: (\S+).*?TimeDateStamp: .*? \((0x[0-9A-F]+)\).*?SymbolCount: "
                       r"(\d+).*?Characteristics \[ \(0x([0-9A-F]+)\)", out, re.S)  # fmt: skip
    assert header is not None and len(symbols) == int(header[3])
    return CoffView(
        format=header[1],
        characteristics=int(header[4], 16),
        stamp=int(header[2], 16),
        section=(name, int(flags, 16)),
        data=path.read_bytes()[int(offset, 16) : int(offset, 16) + int(size)],
        symbols=[(n, int(v), sec, int(i)) for n, v, sec, i in symbols],
    )


def blob_views(view: CoffView) -> dict[str, tuple[bytes, int]]:
    """Each blob's bytes (``_start`` to ``_end``) and the value its ``_size`` symbol stands for
    (read as C reads it: 8 little-endian bytes at its address), by the symbols' common stem."""
    values = view.values()
    blobs = {}
    for name, (start, _, section) in values.items():
        if name.endswith("_start"):
            stem = name.removesuffix("_start")
            end, size_at = values[stem + "_end"][0], values[stem + "_size"][0]
            assert section == values[stem + "_end"][2] == values[stem + "_size"][2] == 1
            data = view.data
            blobs[stem] = data[start:end], int.from_bytes(data[size_at : size_at + 8], "little")
    return blobs


@pytest.mark.parametrize(
    ("name", "size"), [("k.bin", 1), ("k.bin", 12), ("with space.cubin", 13), ("k.bin", 1 << 20)]
)
def test_layout_and_symbols_match_mingw_objcopy(tmp_path: Path, name: str, size: int) -> None:
    """objcopy -I binary -O pe-x86-64 embeds one file; so does style "ld" at align 1, with these
    differences on purpose: ``_size`` is a data symbol (the address of an 8-byte size after the
    blob, so the section is aligned to 8) where objcopy's is absolute (section -1, value the
    size), and the file flags are 0 as MSVC and clang-cl write them where objcopy sets
    RELOCS_STRIPPED | LINE_NUMS_STRIPPED (0x5). Everything else llvm-readobj shows is equal."""
    content = random.Random(size).randbytes(size)
    (tmp_path / name).write_bytes(content)
    run(tool(MINGW + "objcopy"), "-I", "binary", "-O", "pe-x86-64", "-B", "i386:x86-64",
        "--rename-section", RENAME, name, "ref.o", cwd=tmp_path)  # fmt: skip
    ours = tmp_path / "ours.o"
    write_object(ours, [Blob(name, tmp_path / name)], machine="x86_64", style="ld", align=1)
    ref, got = coff_view(tmp_path / "ref.o"), coff_view(ours)
    assert (ref.format, ref.stamp, ref.characteristics) == ("COFF-x86-64", 0, 0x5)
    assert (got.format, got.stamp, got.characteristics) == ("COFF-x86-64", 0, 0)
    assert ref.section == (".rdata", 0x40100040)  # ALIGN_1BYTES | INITIALIZED_DATA | READ
    assert got.section == (".rdata", 0x40400040)  # ALIGN_8BYTES: the size is 8-aligned
    assert got.data[:size] == ref.data == content
    stem = "_binary_" + re.sub("[^A-Za-z0-9]", "_", name)
    assert [s[0] for s in ref.symbols] == [s[0] for s in got.symbols] == [
        stem + "_start", stem + "_end", stem + "_size"
    ]
    assert ref.symbols[:2] == got.symbols[:2]
    assert ref.symbols[2][1:] == (size, "IMAGE_SYM_ABSOLUTE", -1)
    assert got.symbols[2][1:] == ((size + 7) & -8, ".rdata", 1)
    assert blob_views(got) == {stem: (content, size)}


def test_many_blobs_match_mingw_ld_binary_input(tmp_path: Path) -> None:
    """``ld -r -b binary`` packs several files back to back: the same offsets and names as style
    "ld" at align 1 (ld's symbol order differs, and its ``_size`` is absolute, as objcopy's)."""
    files = {"a.bin": 13, "b c.bin": 0, "d.bin": 4099, "e.bin": 1}
    rng = random.Random(3)
    contents = {n: rng.randbytes(s) for n, s in files.items()}
    for n, c in contents.items():
        (tmp_path / n).write_bytes(c)
    run(tool(MINGW + "ld"), "-r", "-b", "binary", "-o", "ref.o", *files, cwd=tmp_path)
    # ld -r adds an empty .rdata of its own
    run(tool(MINGW + "objcopy"), "-R", ".rdata", "--rename-section", RENAME, "ref.o", cwd=tmp_path)
    ref = coff_view(tmp_path / "ref.o")
    ours = tmp_path / "ours.o"
    write_object(ours, [Blob(n, tmp_path / n) for n in files], machine="x86_64", style="ld",
                 align=1)  # fmt: skip
    got = coff_view(ours)
    total = sum(files.values())  # ld pads its section to 16 bytes, we append the sizes
    assert got.data[:total] == ref.data[:total] == b"".join(contents.values())
    ref_values, got_values = ref.values(), got.values()
    assert set(ref_values) == set(got_values)
    for name, where in ref_values.items():
        if name.endswith("_size"):
            assert where[1:] == ("IMAGE_SYM_ABSOLUTE", -1)
            assert got_values[name][1:] == (".rdata", 1)
        else:
            assert got_values[name] == (where[0], ".rdata", 1)
            assert where[1:] == (".rdata", 1)
    sizes = {stem: size for stem, (_, size) in blob_views(got).items()}
    assert sizes == {name.removesuffix("_size"): v[0] for name, v in ref_values.items()
                     if name.endswith("_size")}  # fmt: skip


BLOBS = {  # name: (size, alignment): empty, packed, page-aligned, COFF's largest, the default
    "empty": (0, None),
    "one": (1, 1),
    "page": (4096 + 3, 4096),
    "top": (100, 8192),
    "big": (70_000, None),
}


def make_blobs(tmp_path: Path) -> dict[str, bytes]:
    rng = random.Random(11)
    contents = {}
    for name, (size, _) in BLOBS.items():
        contents[name] = rng.randbytes(size)
        (tmp_path / f"{name}.bin").write_bytes(contents[name])
    return contents


def blobs_of(tmp_path: Path) -> list[Blob]:
    return [Blob(n, tmp_path / f"{n}.bin", align=a) for n, (_, a) in BLOBS.items()]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_llvm_readobj_reads_every_blob(tmp_path: Path, machine: str) -> None:
    contents = make_blobs(tmp_path)
    obj = tmp_path / "blobs.obj"
    write_object(obj, blobs_of(tmp_path), machine=machine)
    view = coff_view(obj)
    assert view.format == MACHINE_NAMES[machine][1]
    assert view.section == (".rdata", 0x40E00040)  # ALIGN_8192BYTES, the largest blob's
    assert [s[0] for s in view.symbols] == [
        f"__{n}_{part}" for n in BLOBS for part in ("start", "end", "size")
    ]
    values = view.values()
    for name, (_, align) in BLOBS.items():
        assert values[f"__{name}_start"][0] % (align or 16) == 0
    assert blob_views(view) == {f"__{n}": (c, len(c)) for n, c in contents.items()}


def test_deterministic_and_object_bytes_equals_file(tmp_path: Path) -> None:
    make_blobs(tmp_path)
    out = tmp_path / "o.obj"
    write_object(out, blobs_of(tmp_path), machine="aarch64")
    first = out.read_bytes()
    time.sleep(1.1)  # a time stamp would differ by now
    write_object(out, blobs_of(tmp_path), machine="aarch64")
    assert out.read_bytes() == first == object_bytes(blobs_of(tmp_path), machine="aarch64")


def exported(dll: Path) -> dict[str, tuple[int, int]]:
    """Each exported name's RVA and file offset in ``dll``, from llvm-readobj's exports and
    sections."""
    out = readobj(dll, "--coff-exports", "--sections")
    sections = [
        (int(va, 16), int(raw, 16))
        for va, raw in re.findall(
            r"VirtualAddress: 0x([0-9A-F]+)\s+RawDataSize: \d+\s+PointerToRawData: 0x([0-9A-F]+)",
            out,
        )
    ]
    found = {}
    for name, hex_rva in re.findall(r"Name: (\S+)\s+RVA: 0x([0-9A-F]+)", out):
        rva = int(hex_rva, 16)
        va, raw = max((s for s in sections if s[0] <= rva), key=lambda s: s[0])
        found[name] = rva, rva - va + raw
    return found


ARM64_REFS = """\
    .text
    .globl size_of_top
size_of_top:  // what MSVC makes of `return __top_size;`: a page, then the 12 low bits
    adrp x0, __top_size
    ldr x0, [x0, :lo12:__top_size]
    ret
    .data
    .globl table
    .p2align 3
table:
    .quad __one_start, __one_end, __one_size, __top_start, __top_end, __top_size
"""


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_lld_link_dll_exports_every_blob(tmp_path: Path, machine: str) -> None:
    """lld-link makes a data-only DLL of the object (no entry point, so no C runtime): each
    exported ``_start`` leads to the blob's bytes in the DLL, each ``_size`` to its size. On arm64
    an assembled object also references the symbols, through ADRP/LDR and 64-bit addresses."""
    contents = make_blobs(tmp_path)
    obj = tmp_path / "blobs.obj"
    write_object(obj, blobs_of(tmp_path), machine=machine)
    arch = MACHINE_NAMES[machine][0]
    exports = [f"/export:__{n}_{p},DATA" for n in BLOBS for p in ("start", "end", "size")]
    inputs = [obj]
    if machine == "aarch64":
        (tmp_path / "refs.s").write_text(ARM64_REFS)
        run(tool("llvm-mc"), "-triple", "aarch64-pc-windows-msvc", "-filetype=obj",
            "-o", tmp_path / "refs.obj", tmp_path / "refs.s")  # fmt: skip
        inputs.append(tmp_path / "refs.obj")
        exports += ["/export:table,DATA", "/export:size_of_top"]
    dll = tmp_path / "blobs.dll"
    run(tool("lld-link"), "/nologo", "/dll", "/noentry", f"/machine:{arch}", f"/base:{BASE:#x}",
        f"/out:{dll}", *exports, *inputs)  # fmt: skip
    assert f"Format: {MACHINE_NAMES[machine][1]}" in readobj(dll)
    found = exported(dll)
    data = dll.read_bytes()
    for name, content in contents.items():
        (rva, start), (_, end) = found[f"__{name}_start"], found[f"__{name}_end"]
        assert data[start:end] == content
        # lld-link starts sections on 4 KiB pages only: it keeps alignments up to 4096 (GNU ld
        # keeps 8192: test_mingw_ld_exe_and_dll_run_under_wine)
        assert rva % min(BLOBS[name][1] or 16, 4096) == 0
        size_at = found[f"__{name}_size"][1]
        assert int.from_bytes(data[size_at : size_at + 8], "little") == len(content)
    if machine == "aarch64":  # the addresses lld-link wrote for the table: image base + RVA
        at = found["table"][1]
        table = [int.from_bytes(data[at + 8 * i : at + 8 * i + 8], "little") for i in range(6)]
        names = [f"__{n}_{p}" for n in ("one", "top") for p in ("start", "end", "size")]
        assert table == [BASE + found[n][0] for n in names]


PRINT = r"""#include <windows.h>
extern const IMAGE_DOS_HEADER __ImageBase;
static char out[1 << 20], *p;
static void num(unsigned long long v) {
  char t[24]; int n = 0;
  do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (n) *p++ = t[--n];
  *p++ = ' ';
}
static void hex(const unsigned char *b, const unsigned char *e) {
  for (; b < e; b++) { *p++ = "0123456789abcdef"[*b >> 4]; *p++ = "0123456789abcdef"[*b & 15]; }
  *p++ = '\n';
}
static void begin(void) { p = out; num((unsigned long long)&__ImageBase); p[-1] = '\n'; }
static int end(void) {
  DWORD written;
  return !WriteFile(GetStdHandle(STD_OUTPUT_HANDLE), out, (DWORD)(p - out), &written, NULL);
}
#ifdef DLL
__declspec(dllexport)
#endif
int report(void);
"""
USER = r"""#include <windows.h>
#ifdef IMPORT
__declspec(dllimport)
#endif
int report(void);
#ifdef ENTRY
void start(void) { ExitProcess(report()); }  /* no C runtime: the linker's entry point */
#else
int main(void) { return report(); }
#endif
"""


def accessor(names: list[str]) -> str:
    """C reading each blob the documented way, directly and through tables of addresses (which a
    DLL loaded away from its preferred base has relocated): after a line with the image's base
    address, a line per blob, ``size size length length hex``."""
    lines = [PRINT]
    for n in names:
        lines += [f"extern const unsigned char __{n}_start[], __{n}_end[];",
                  f"extern const unsigned long long __{n}_size;"]  # fmt: skip
    for table, form in (("starts", "__{}_start"), ("ends", "__{}_end")):
        items = ", ".join(form.format(n) for n in names)
        lines.append(f"static const unsigned char *const {table}[] = {{{items}}};")
    items = ", ".join(f"&__{n}_size" for n in names)
    lines += [f"static const unsigned long long *const sizes[] = {{{items}}};",
              "int report(void) {", "  begin();"]  # fmt: skip
    for i, n in enumerate(names):
        lines.append(
            f"  num(__{n}_size); num(*sizes[{i}]);"
            f" num((unsigned long long)(__{n}_end - __{n}_start));"
            f" num((unsigned long long)(ends[{i}] - starts[{i}])); hex(__{n}_start, __{n}_end);"
        )
    return "\n".join([*lines, "  return end();", "}", ""])


@pytest.fixture(scope="module")
def wine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment for running programs under Wine, in a prefix of the tests' own (no Mono
    or Gecko: nothing asks to install them). Making the prefix costs seconds: once per module.

    Wine's output goes to files, not pipes: the Wine server it starts inherits them and stays
    for seconds after the program exits, and a pipe would be read until the server is gone."""
    tool("wine")
    env = dict(os.environ, WINEPREFIX=str(tmp_path_factory.mktemp("wineprefix")),
               WINEDEBUG="-all", WINEDLLOVERRIDES="mscoree,mshtml=")  # fmt: skip
    env.pop("DISPLAY", None)
    quiet = subprocess.DEVNULL
    subprocess.run([tool("wineboot"), "--init"], env=env, stdout=quiet, stderr=quiet, check=True,
                   timeout=300)  # fmt: skip
    yield env
    subprocess.run([tool("wineserver"), "--kill"], env=env, stdout=quiet, stderr=quiet, timeout=60)


def expected_report(contents: dict[str, bytes]) -> list[str]:
    return [f"{len(c)} {len(c)} {len(c)} {len(c)} {c.hex()}" for c in contents.values()]


def gcc(tmp_path: Path, source: str, obj: str, *flags: str) -> Path:
    """Compile with mingw gcc without the C runtime's help (``-ffreestanding``), addressing data
    as MSVC and clang-cl do (``-mcmodel=small``: 32-bit RIP-relative, no ``.refptr`` pointers)."""
    (tmp_path / (obj + ".c")).write_text(source)
    run(tool(MINGW + "gcc"), "-c", "-O1", "-ffreestanding", "-mcmodel=small", *flags,
        "-o", obj + ".o", obj + ".c", cwd=tmp_path)  # fmt: skip
    return tmp_path / (obj + ".o")


def lld_link(tmp_path: Path, out: str, *args: str | os.PathLike[str]) -> Path:
    run(tool("lld-link"), "/nologo", "/machine:x64", f"/base:{BASE:#x}", f"/out:{out}", *args,
        KERNEL32, cwd=tmp_path)  # fmt: skip
    return tmp_path / out


def run_wine(env: dict[str, str], exe: Path) -> tuple[int, list[str]]:
    """The image base a program run under Wine printed first, and its other lines."""
    out, err = exe.with_suffix(".out"), exe.with_suffix(".err")
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        code = subprocess.run([tool("wine"), exe.name], cwd=exe.parent, env=env, stdout=stdout,
                              stderr=stderr, timeout=120).returncode  # fmt: skip
    assert code == 0, f"{exe.name} under Wine: exit status {code}\n{err.read_text()}"
    lines = out.read_text().splitlines()
    return int(lines[0]), lines[1:]


@pytest.mark.parametrize("kind", ["exe", "dll"])
def test_lld_link_exe_and_dll_run_under_wine(
    tmp_path: Path, wine: dict[str, str], kind: str
) -> None:
    """lld-link links the object with C compiled the MSVC way; the C runtime is left out (the
    entry point calls ``report`` then ``ExitProcess``, output goes through ``WriteFile``), so
    only kernel32's import library (mingw's) is needed. The DLL case: an EXE importing ``report``
    from a DLL that holds the blobs, both wanting the same base, so Wine moves the DLL and its
    base relocations must fix the address tables."""
    tool(MINGW + "gcc")
    contents = make_blobs(tmp_path)
    write_object(tmp_path / "blobs.obj", blobs_of(tmp_path), machine="x86_64")
    if kind == "exe":
        acc = gcc(tmp_path, accessor(list(contents)), "acc")
        user = gcc(tmp_path, USER, "user", "-DENTRY")
        exe = lld_link(tmp_path, "acc.exe", "/entry:start", "/subsystem:console", acc, user,
                       "blobs.obj")  # fmt: skip
    else:
        acc = gcc(tmp_path, accessor(list(contents)), "acc", "-DDLL")
        lld_link(tmp_path, "acc.dll", "/dll", "/noentry", acc, "blobs.obj")
        user = gcc(tmp_path, USER, "user", "-DENTRY", "-DIMPORT")
        exe = lld_link(tmp_path, "user.exe", "/entry:start", "/subsystem:console", user,
                       "acc.lib")  # fmt: skip
    base, lines = run_wine(wine, exe)
    assert lines == expected_report(contents)
    assert (base == BASE) == (kind == "exe")  # the DLL was moved


@pytest.mark.parametrize("kind", ["exe", "dll"])
def test_mingw_ld_exe_and_dll_run_under_wine(
    tmp_path: Path, wine: dict[str, str], kind: str
) -> None:
    """mingw gcc and GNU ld, the C runtime included (a ``main``), gcc's own code model (external
    data through ``.refptr`` pointers); the DLL again loaded away from its preferred base."""
    tool(MINGW + "gcc")
    contents = make_blobs(tmp_path)
    write_object(tmp_path / "blobs.obj", blobs_of(tmp_path), machine="x86_64")
    (tmp_path / "acc.c").write_text(accessor(list(contents)))
    (tmp_path / "user.c").write_text(USER)
    gcc_ = [tool(MINGW + "gcc"), "-O1", f"-Wl,--image-base,{BASE:#x}"]
    if kind == "exe":
        run(*gcc_, "-o", "acc.exe", "acc.c", "user.c", "blobs.obj", cwd=tmp_path)
        exe = tmp_path / "acc.exe"
    else:
        run(*gcc_, "-shared", "-DDLL", "-o", "acc.dll", "acc.c", "blobs.obj", cwd=tmp_path)
        run(*gcc_, "-DIMPORT", "-o", "user.exe", "user.c", "acc.dll", cwd=tmp_path)
        exe = tmp_path / "user.exe"
    base, lines = run_wine(wine, exe)
    assert lines == expected_report(contents)
    assert (base == BASE) == (kind == "exe")
    image = tmp_path / f"acc.{kind}"
    symbols = {f[2]: int(f[0], 16) for f in map(str.split, run(tool(MINGW + "nm"), image)
                                                  .splitlines()) if len(f) == 3}  # fmt: skip
    for name, (_, align) in BLOBS.items():  # GNU ld keeps every alignment, 8192 included
        assert symbols[f"__{name}_start"] % (align or 16) == 0


def test_absolute_size_fails_msvc_style_code(tmp_path: Path, wine: dict[str, str]) -> None:
    """Why ``_size`` is data on COFF: objcopy's absolute ``_binary_k_bin_size`` (value 12), read
    as ``(size_t)_binary_k_bin_size`` from C compiled the MSVC way (a RIP-relative ``lea``): GNU
    ld refuses the link, lld-link links it and the program reads a wrong number."""
    (tmp_path / "k.bin").write_bytes(b"hello world!")
    run(tool(MINGW + "objcopy"), "-I", "binary", "-O", "pe-x86-64", "-B", "i386:x86-64",
        "--rename-section", RENAME, "k.bin", "k.obj", cwd=tmp_path)  # fmt: skip
    source = PRINT + ("extern const char _binary_k_bin_size[];\n"
                      "int report(void) {\n"
                      "  begin(); num((size_t)_binary_k_bin_size); return end();\n"
                      "}\n")  # fmt: skip
    acc = gcc(tmp_path, source, "acc")
    user = gcc(tmp_path, USER, "user", "-DENTRY")
    proc = subprocess.run([tool(MINGW + "ld"), "-o", "ld.exe", "-e", "start", acc, user, "k.obj",
                           KERNEL32], cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode != 0 and "relocation truncated to fit" in proc.stderr
    exe = lld_link(tmp_path, "acc.exe", "/entry:start", "/subsystem:console", acc, user, "k.obj")
    _, lines = run_wine(wine, exe)
    assert lines[0].split() != ["12"]


@pytest.mark.parametrize(
    ("blobs", "kwargs", "error", "message"),
    [
        ([Blob("a", b"x", align=16384)], {}, InvalidArgumentError,
         r"alignment 16384 is not a power of two in 1\.\.8192"),
        ([Blob("a", b"x")], {"align": 65536}, InvalidArgumentError, r"in 1\.\.8192"),
        ([Blob("a-b", b"x")], {}, InvalidArgumentError, "not a C identifier"),
        ([Blob("a", b"x"), Blob("a", b"y")], {}, InvalidArgumentError, "duplicate blob name"),
        ([], {}, InvalidArgumentError, "no blobs"),
        ([Blob("a", b"x")], {"machine": "i386"}, InvalidArgumentError,
         "unknown machine 'i386'; use one of x86_64, aarch64"),
        ([Blob("a", b"x")], {"style": "coff"}, InvalidArgumentError, "unknown symbol style"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused(
    tmp_path: Path, blobs: list[Blob], kwargs: dict[str, object], error: type[Exception],
    message: str,
) -> None:  # fmt: skip
    with pytest.raises(error, match=message):
        write_object(tmp_path / "o.obj", blobs, **kwargs)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_more_than_4_gib_is_refused_before_writing(tmp_path: Path) -> None:
    """COFF's section sizes and file offsets are 32-bit: a 4 GiB blob (an anonymous mapping that
    is never touched) is refused, nothing written."""
    huge = memoryview(mmap.mmap(-1, 1 << 32))  # unmapped when the last view goes
    blobs = [Blob("small", b"x" * 100), Blob("huge", huge)]
    with pytest.raises(UnsupportedError, match="up to __huge take 4294967408 bytes"):
        write_object(tmp_path / "o.obj", blobs, machine="x86_64")
    assert list(tmp_path.iterdir()) == []


def test_aoti_switch_embeds_for_windows(tmp_path: Path, wine: dict[str, str]) -> None:
    """AOTInductor on Windows, where torch's own embedding refuses ("Windows is not supported
    yet"): inside ``fatbinkit.aoti.packaging(target="x86_64-pc-windows-msvc")``, torch's
    ``batch_convert_cubins_to_obj`` (the switch's drop-in) writes a COFF ``.obj``; lld-link links
    it with C that declares the kernels as AOTInductor's generated code does
    (``extern const unsigned char __<kernel>_start[]``), and the program run under Wine prints
    every kernel byte for byte. Outside the block the same drop-in writes ELF again."""
    import torch._inductor.codecache as codecache

    import fatbinkit.aoti

    tool(MINGW + "gcc")
    contents = {"triton_poi_fused_add_0": os.urandom(3000),
                "triton_red_fused_sum_1": os.urandom(777)}
    kernels = []
    for name, data in contents.items():
        (tmp_path / f"{name}.cubin").write_bytes(data)
        kernels.append((str(tmp_path / f"{name}.cubin"), name))
    with fatbinkit.aoti.packaging(target="x86_64-pc-windows-msvc"):
        obj = codecache.batch_convert_cubins_to_obj(kernels, str(tmp_path))
        one = fatbinkit.aoti.convert_cubin_to_obj(*kernels[0])  # torch <= 2.11's form
    assert one == kernels[0][0] + ".obj"
    assert "Format: COFF-x86-64" in readobj(Path(one), "--file-headers")
    assert obj == str(tmp_path / "cubins_combined.obj")
    assert "Format: COFF-x86-64" in readobj(Path(obj), "--file-headers")
    acc = gcc(tmp_path, accessor(list(contents)), "acc")
    user = gcc(tmp_path, USER, "user", "-DENTRY")
    exe = lld_link(tmp_path, "aoti.exe", "/entry:start", "/subsystem:console", acc, user, obj)
    _, lines = run_wine(wine, exe)
    assert lines == expected_report(contents)
    (tmp_path / "linux").mkdir()
    elf = fatbinkit.aoti.batch_convert_cubins_to_obj(kernels, str(tmp_path / "linux"))
    assert elf.endswith("cubins_combined.o") and Path(elf).read_bytes()[:4] == b"\x7fELF"
