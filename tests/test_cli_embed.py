"""``fatbinkit embed`` / ``fatbinkit inject``: outputs checked with binutils, errors as one line."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fatbinkit.cli import main

LIB_SOURCE = "int answer(void) { return 42; }\n"


def fatbinkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fatbinkit", *args], capture_output=True, text=True, cwd=cwd
    )


def build_lib(tmp_path: Path) -> Path:
    src = tmp_path / "l.c"
    src.write_text(LIB_SOURCE)
    lib = tmp_path / "libl.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


def test_embed_ld_style_equals_ld(tmp_path: Path) -> None:
    (tmp_path / "a b.bin").write_bytes(b"first")
    (tmp_path / "c.bin").write_bytes(b"")
    proc = fatbinkit("embed", "-o", "ours.o", "--style", "ld", "--align", "1", "a b.bin", "c.bin",
                     cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == proc.stderr == ""
    subprocess.run(["ld", "-r", "-b", "binary", "-z", "noexecstack", "-o", "ref.o", "a b.bin",
                    "c.bin"], check=True, cwd=tmp_path)  # fmt: skip
    subprocess.run(["objcopy", "--rename-section",
                    ".data=.rodata,alloc,load,readonly,data,contents", "ref.o"],
                   check=True, cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "ours.o").read_bytes() == (tmp_path / "ref.o").read_bytes()


def test_embed_aoti_style_symbols(tmp_path: Path) -> None:
    (tmp_path / "x=y.cubin").write_bytes(b"abc")  # only the first '=' separates the name
    out = tmp_path / "o.o"
    assert (
        main(["embed", "-o", str(out), "--machine", "aarch64", f"k={tmp_path / 'x=y.cubin'}"]) == 0
    )
    readelf = subprocess.run(["readelf", "-hsW", out], capture_output=True, text=True, check=True)
    assert "AArch64" in readelf.stdout
    symbols = {line.split()[-1]: line.split() for line in readelf.stdout.splitlines()
               if line.strip().endswith(("_start", "_end", "_size"))}  # fmt: skip
    assert set(symbols) == {"__k_start", "__k_end", "__k_size"}
    assert symbols["__k_size"][1].endswith("3") and symbols["__k_size"][-2] == "ABS"


@pytest.mark.parametrize(
    ("target", "machine", "form"),
    [
        ("x86_64-pc-windows-msvc", None, "COFF-x86-64"),
        ("aarch64-pc-windows-msvc", "aarch64", "COFF-ARM64"),
        ("x86_64-linux-gnu", None, "elf64-x86-64"),
        ("aarch64-linux-gnu", "aarch64", "elf64-littleaarch64"),
    ],
)
def test_embed_target_picks_the_object_format(
    tmp_path: Path, target: str, machine: str | None, form: str
) -> None:
    """--target gives the format and machine llvm-readobj finds; a --machine that agrees is
    accepted."""
    readobj = shutil.which("llvm-readobj")
    if readobj is None:
        pytest.skip("llvm-readobj missing (.ci/run installs llvm)")
    (tmp_path / "k.bin").write_bytes(b"abc")
    extra = ["--machine", machine] if machine else []
    proc = fatbinkit("embed", "-o", "k.obj", "--target", target, *extra, "k=k.bin", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == proc.stderr == "", proc.stderr
    out = subprocess.run([readobj, "--file-headers", "--symbols", "k.obj"], cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert f"Format: {form}\n" in out
    assert {"__k_start", "__k_end", "__k_size"} <= set(re.findall(r"Name: (\S+)", out))


def test_inject_cli(tmp_path: Path) -> None:
    lib = build_lib(tmp_path)
    (tmp_path / "k.cubin").write_bytes(b"kernel")
    out = tmp_path / "out.so"
    assert main(["inject", str(lib), "-o", str(out), f"k={tmp_path / 'k.cubin'}"]) == 0
    so = ctypes.CDLL(str(out))
    assert so.answer() == 42
    address = ctypes.c_char.in_dll(so, "__k_start")
    assert ctypes.string_at(ctypes.addressof(address), 6) == b"kernel"


def test_help_and_usage_exit_codes() -> None:
    assert fatbinkit("embed", "--help").returncode == 0
    assert fatbinkit("inject", "--help").returncode == 0
    assert fatbinkit("embed", "k=x").returncode == 2  # -o missing
    assert fatbinkit("embed", "-o", "x.o", "--style", "coff", "k=x").returncode == 2
    windows = ["--target", "x86_64-pc-windows-msvc"]
    for args, message in ((["k.bin"], "expected NAME=PATH, got 'k.bin'"),
                          (["--align", "3", "k=k.bin"], "'3' is not a power of two"),
                          ([*windows, "--machine", "aarch64", "k=k.bin"],
                           "--machine aarch64 contradicts --target x86_64-pc-windows-msvc"),
                          ([*windows, "--align", "16384", "k=k.bin"],
                           "alignment 16384 is above COFF's maximum, 8192"),
                          (["--target", "x86_64-pc-windows-gnu", "k=k.bin"],
                           "invalid choice: 'x86_64-pc-windows-gnu'")):
        proc = fatbinkit("embed", "-o", "x.o", *args)
        assert proc.returncode == 2 and proc.stderr.startswith("usage: fatbinkit embed ")
        last = proc.stderr.splitlines()[-1]
        assert last.startswith("fatbinkit embed: error: ") and message in last, proc.stderr


def bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    (tmp_path / "k.bin").write_bytes(b"k")
    (tmp_path / "dir").mkdir()
    lib = build_lib(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    mangled = tmp_path / "mangled.so"
    data = bytearray(lib.read_bytes())
    data[64 : 64 + 4 * 56] = b"\xff" * (4 * 56)  # program headers gone: LIEF reads nonsense
    mangled.write_bytes(data)
    out = str(tmp_path / "out" / "o.o")
    return [
        (["embed", "-o", out, "k=missing.bin"], "cannot read missing.bin: No such file"),
        (["embed", "-o", out, "k=dir"], "cannot read dir: it is a directory"),
        (["embed", "-o", out, "k=k.bin", "k=k.bin"], "duplicate blob name 'k'"),
        (["embed", "-o", out, "1k=k.bin"], "blob name '1k' is not a C identifier"),
        (["embed", "-o", str(tmp_path / "nowhere" / "o.o"), "k=k.bin"], "does not exist"),
        (["embed", "-o", out, "--style", "ld", "missing.bin"], "cannot read missing.bin"),
        (["inject", "notes.txt", "-o", out, "k=k.bin"], "notes.txt is not an ELF file"),
        (["inject", "mangled.so", "-o", out, "k=k.bin"], "LIEF did not map .fatbinkit"),
        (["inject", "libl.so", "-o", out, "k=missing.bin"], "cannot read missing.bin"),
    ]


def test_bad_input_is_one_line_exit_3_and_no_output(tmp_path: Path) -> None:
    cases = bad_cases(tmp_path)
    (tmp_path / "out").mkdir()
    for args, message in cases:
        proc = fatbinkit(*args, cwd=tmp_path)
        assert proc.returncode == 3, (args, proc.stderr)
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("fatbinkit: error: "), proc.stderr
        assert message in lines[0], lines[0]
        assert os.listdir(tmp_path / "out") == []


@pytest.mark.parametrize("style", ["aoti", "ld"])
def test_non_utf8_path_argument(tmp_path: Path, style: str) -> None:
    raw = b"k\xff.bin"
    (tmp_path / os.fsdecode(raw)).write_bytes(b"raw")
    arg = os.fsdecode(raw) if style == "ld" else "k=" + os.fsdecode(raw)
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "embed", "-o", "o.o", "--style",
                           style, arg], cwd=tmp_path, capture_output=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = subprocess.run(["readelf", "-sW", "o.o"], cwd=tmp_path, capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert ("_binary_k__bin_start" if style == "ld" else "__k_start") in names
