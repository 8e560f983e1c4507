"""The contract every ``fatbinkit`` command keeps (see fatbinkit/cli/__init__.py and the README):

- ``--help`` exits 0, every argument has help text, every command has an ``examples:`` epilog;
- usage errors (unknown option, malformed ``KEY=PATH``, arch, size, number; conflicting options)
  exit 2 with the sub-command's usage line and ``fatbinkit COMMAND: error: ...``;
- failures (FatbinkitError) exit 3 with one ``fatbinkit: error: ...`` line naming the file,
  verdicts that fail exit 1 (check, gate, diff --exit-code);
- ``build`` refuses labels its images contradict, checked against NVIDIA's tools.

Commands are read from the parser, so a new command is covered without editing this file.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fatbin_kernels import Kernels, kernels_in, system_tool

import fatbinkit
from fatbinkit import cli
from fatbinkit.cli import build_parser, main
from fatbinkit.errors import FormatError
from fatbinkit.scan import scan

PTX = ".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tret;\n}\n"


def commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


COMMANDS = sorted(commands())


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``main(argv)``: (exit status, stdout, stderr), whether it returns or exits."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return status, out, err


def assert_usage_error(command: str, argv: list[str], capsys: pytest.CaptureFixture[str],
                       message: str = "") -> None:
    status, _, err = run(argv, capsys)
    assert status == 2, (argv, err)
    assert err.startswith(f"usage: fatbinkit {command} "), err
    last = err.splitlines()[-1]
    assert last.startswith(f"fatbinkit {command}: error: ") and message in last, err


def assert_failure(argv: list[str], capsys: pytest.CaptureFixture[str], *names: str) -> str:
    """Exit 3, one ``fatbinkit: error:`` line that names every one of ``names``."""
    status, _, err = run(argv, capsys)
    assert status == 3, (argv, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fatbinkit: error: "), err
    for name in names:
        assert name in lines[0], (name, lines[0])
    return lines[0]


# -- arguments a command needs, so that only the argument under test is wrong ----------------

_SAMPLES = ("x", "sm_90", "k=x")


def _sample(action: argparse.Action) -> str:
    if action.choices:
        return str(next(c for c in action.choices if c != "none"))
    for text in _SAMPLES:
        try:
            if callable(action.type):
                action.type(text)
        except (argparse.ArgumentTypeError, TypeError, ValueError):
            continue
        return text
    raise AssertionError(f"no sample value for {action.dest}")


def required_args(p: argparse.ArgumentParser, **given: str) -> list[str]:
    """The arguments ``p`` requires, with values its types accept (``given`` by dest)."""
    argv: list[str] = []
    for a in p._actions:
        if a.option_strings and a.required:
            argv += [a.option_strings[0], given.get(a.dest) or _sample(a)]
        elif not a.option_strings and a.nargs != 0:
            argv.append(given.get(a.dest) or _sample(a))
    return argv


# -- help, version ---------------------------------------------------------------------------

def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(["--version"], capsys)
    assert status == 0 and out == f"fatbinkit {fatbinkit.__version__}\n" == "fatbinkit 0.1.0\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run([command, "--help"], capsys)
    assert status == 0 and out.startswith(f"usage: fatbinkit {command} ")
    p = commands()[command]
    problems = [f"argument {a.dest} has no help text" for a in p._actions
                if not a.help or a.help == argparse.SUPPRESS]
    if not p.description:
        problems.append("no description")
    if "\nexamples:\n  fatbinkit " not in out:
        problems.append("no examples: section")
    else:
        problems += [f"example {line!r} is not a {command} command line"
                     for line in out.split("\nexamples:\n", 1)[1].splitlines()
                     if line.strip() and not line.startswith(f"  fatbinkit {command} ")]
    assert not problems, f"{command} --help: {problems}"


# the commands whose verdict can be "no" (exit 1), and only those
FAILING = {"check", "diff", "gate", "demo"}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_gives_the_exit_statuses(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run([command, "--help"], capsys)
    assert status == 0 and "\nexit status:\n" in out
    table = out.split("\nexit status:\n", 1)[1].split("\n\n", 1)[0]
    codes = [int(line.split()[0]) for line in table.splitlines() if line[2:3].isdigit()]
    assert codes == ([0, 1] if command in FAILING else [0]) + [2, 3, 130, 141], table


def test_a_failing_verdict_and_an_unreadable_input_exit_differently(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI must tell "the answer is no" (1) from "could not read it" (3): check, gate and diff
    --exit-code on a fatbin that fails (PTX for sm_80 and sm_90: nothing loads on sm_70), then
    on a file that is not there."""
    fatbin = str(_fatbin(tmp_path))
    other = tmp_path / "other.fatbin"
    ptx = tmp_path / "k.ptx"
    assert main(["build", "-o", str(other), "--ptx", f"sm_80={ptx}"]) == 0
    missing = str(tmp_path / "missing.so")
    for argv, verdict in ((["check", "{}", "--arch", "sm_70"], 1),
                          (["check", "{}", "--arch", "sm_90"], 0),
                          (["gate", "{}", "--require-arch", "sm_70"], 1),
                          (["diff", "{}", str(other), "--exit-code"], 1),
                          (["diff", "{}", fatbin, "--exit-code"], 0)):
        assert run([a.format(fatbin) for a in argv], capsys)[0] == verdict, argv
        status, _, err = run([a.format(missing) for a in argv], capsys)
        assert status == 3 and err == (f"fatbinkit: error: cannot read {missing}: No such file "
                                       "or directory\n"), argv

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("fatbinkit.binary.open", interrupted)
    assert run(["ls", fatbin], capsys)[0] == 130


def test_read_only_commands_leave_at_once_with_all_their_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ls, check, diff and gate, run as the process's own command, leave through os._exit
    (their records not freed one by one): the output, block-buffered into a pipe, is all there
    and the exit status is the command's, as when main() returns it in this process; an exit
    handler registered before shows which way each left."""
    fatbin = str(_fatbin(tmp_path))
    other = tmp_path / "other.fatbin"
    assert main(["build", "-o", str(other), "--ptx", f"sm_80={tmp_path / 'k.ptx'}"]) == 0
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    program = ("import atexit, sys; atexit.register(lambda: print('exit handlers ran', "
               "file=sys.stderr)); from fatbinkit.cli import main; sys.exit(main())")
    for argv, leaves in ((["ls", fatbin], True), (["ls", "--resources", fatbin, "--json"], True),
                         (["check", fatbin, "--arch", "sm_70"], True),
                         (["check", fatbin, "--arch", "sm_90", "--json"], True),
                         (["gate", fatbin, "--require-arch", "sm_70"], True),
                         (["diff", fatbin, str(other)], True),
                         (["extract", fatbin, "-o", str(tmp_path / "x")], False)):
        expected = run(argv, capsys)
        proc = subprocess.run([sys.executable, "-c", program, *argv], capture_output=True,
                              text=True, timeout=300, env=buffered)
        assert (proc.returncode, proc.stdout) == expected[:2], argv
        assert ("exit handlers ran" in proc.stderr) is not leaves, argv


def test_every_command_has_a_summary() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(a.dest for a in sub._choices_actions if a.help) == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_imports_its_own_group_alone(command: str) -> None:
    """``fatbinkit COMMAND`` builds the parser of COMMAND's group alone: it knows exactly the
    group's commands (so the table of groups names what each registers) and parses and helps
    as the whole parser does; a fresh interpreter running ``check`` never imports the object
    writers, nor ``ls`` the report (each test fails where the group is found wrong or every
    group is imported)."""
    lean = build_parser(command)
    sub = next(a for a in lean._actions if isinstance(a, argparse._SubParsersAction))
    group = next(g for g, names in cli._GROUPS.items() if command in names)
    assert tuple(sub.choices) == cli._GROUPS[group]
    assert sub.choices[command].format_help() == commands()[command].format_help()


@pytest.mark.parametrize(("command", "absent"), [("check", "fatbinkit.formats.elf_writer"),
                                                 ("ls", "fatbinkit.report"),
                                                 ("diff", "fatbinkit.cli.embed")])
def test_a_command_leaves_the_other_groups_unimported(command: str, absent: str,
                                                      tmp_path: Path) -> None:
    program = ("import sys; from fatbinkit.cli import main\n"
               "try: main(sys.argv[1:])\nexcept SystemExit: pass\n"
               f"print({absent!r} in sys.modules, 'fatbinkit.cli.' + {command!r} in sys.modules "
               "or 'fatbinkit.cli.fatbin' in sys.modules)")
    missing = tmp_path / "missing.so"
    proc = subprocess.run([sys.executable, "-c", program, command, str(missing), str(missing)],
                          capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr


# -- usage errors: exit 2, the sub-command's usage -------------------------------------------

@pytest.mark.parametrize("command", COMMANDS)
def test_unknown_option(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [command, *required_args(commands()[command]), "--bogus"]
    assert_usage_error(command, argv, capsys, "unrecognized arguments: --bogus")


def test_unknown_option_as_a_user_types_it() -> None:
    proc = subprocess.run([sys.executable, "-m", "fatbinkit", "ls", "x", "--bogus"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: fatbinkit ls ")
    assert proc.stderr.splitlines()[-1] == "fatbinkit ls: error: unrecognized arguments: --bogus"


def _key_path_args() -> list[tuple[str, str]]:
    """(command, dest) of every ``KEY=PATH`` argument."""
    return [(name, a.dest) for name, p in sorted(commands().items()) for a in p._actions
            if "=PATH" in str(a.metavar).split("|")[0]]


def test_key_path_arguments_are_found() -> None:
    assert {c for c, _ in _key_path_args()} == {"build", "embed", "inject"}


@pytest.mark.parametrize(("command", "dest"), _key_path_args())
@pytest.mark.parametrize("spec", ["k.bin", "=k.bin", "sm_90=", "="])
def test_bad_key_path(command: str, dest: str, spec: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    p = commands()[command]
    action = next(a for a in p._actions if a.dest == dest)
    if action.option_strings:
        argv = [command, *required_args(p), action.option_strings[0], spec]
    else:
        argv = [command, *required_args(p, **{dest: spec})]
    assert_usage_error(command, argv, capsys, "=PATH, got")


USAGE_ERRORS = [
    # bad arch names
    (["build", "-o", "o.fatbin", "--cubin", "sm_9=k.cubin"], "not a GPU arch: 'sm_9'"),
    (["build", "-o", "o.fatbin", "--ptx", "sm90x=k.ptx"], "not a GPU arch"),
    (["build", "-o", "o.fatbin", "--cubin", "compute_90a=k.cubin"],
     "compute_90a is a virtual (PTX) arch, not the arch of a cubin: give sm_90a=k.cubin"),
    (["build", "-o", "o.fatbin", "--ptx", "lto_90=k.ptx"], "lto_90 is an LTO-IR arch"),
    (["prune", "x.so", "-o", "y.so", "--for", "sm_9"], "not a GPU arch"),
    (["check", "x.so", "--arch", "tpu90a"], "not a GPU arch"),
    # bad sizes and numbers
    (["ls", "x.so", "--max-decompressed", "4X"], "not a size"),
    (["prune", "x.so", "-o", "y.so", "--for", "sm_90", "--max-decompressed", "-1"], "not a size"),
    (["embed", "-o", "x.o", "--align", "3", "k=x"], "not a power of two"),
    (["inject", "l.so", "-o", "x.so", "--align", "0", "k=x"], "not a power of two"),
    (["recompress", "x.so", "-o", "y.so", "--codec", "zstd", "--level", "30"],
     "zstd levels are 1..22"),
    (["load", "k.fatbin", "--device", "-1"], "not a device ordinal"),
    # conflicting or missing options
    (["build", "-o", "o.fatbin"], "nothing to build"),
    (["build", "-o", "o.fatbin", "--backend", "nvcc", "--cubin", "sm_90=k.cubin"],
     "takes no --cubin"),
    (["build", "-o", "o.fatbin", "--backend", "nvcc", "--compress", "zstd", "--ptx", "sm_90=k"],
     "drop --compress"),
    (["prune", "x.so", "-o", "y.so", "--for", "sm_90", "--level", "3"], "--level needs --codec"),
    (["check", "x.so", "--min-driver", "--driver", "13.0"], "takes no --driver"),
    (["check", "x.so"], "required"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS)
def test_usage_errors(argv: list[str], message: str, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                      ) -> None:
    monkeypatch.chdir(tmp_path)  # nothing is read or written: no such files exist
    assert_usage_error(argv[0], argv, capsys, message)
    assert not list(tmp_path.iterdir())


# -- failures about a file: exit 3, one line naming the file ---------------------------------

def _fatbin(tmp_path: Path) -> Path:
    ptx = tmp_path / "k.ptx"
    ptx.write_text(PTX)
    out = tmp_path / "k.fatbin"
    assert main(["build", "-o", str(out), "--ptx", f"sm_80={ptx}", "--ptx", f"sm_90={ptx}"]) == 0
    return out


# each command with FILE where the file under test goes; OUT an output path
FILE_COMMANDS: dict[str, Callable[[str, str], list[str]]] = {
    "ls": lambda f, o: ["ls", f],
    "extract": lambda f, o: ["extract", f, "-o", o],
    "check": lambda f, o: ["check", f, "--arch", "sm_90"],
    "prune": lambda f, o: ["prune", f, "-o", o, "--for", "sm_90"],
    "recompress": lambda f, o: ["recompress", f, "-o", o, "--codec", "zstd"],
    "load": lambda f, o: ["load", f],
    "build --cubin": lambda f, o: ["build", "-o", o, "--cubin", f"sm_90={f}"],
    "build --ptx": lambda f, o: ["build", "-o", o, "--ptx", f"sm_90={f}"],
    "inject": lambda f, o: ["inject", f, "-o", o, f"k={f}"],
    "diff OLD": lambda f, o: ["diff", f, f],
    "diff NEW": lambda f, o: ["diff", str(_fatbin(Path(o).parent.parent)), f],
    "gate": lambda f, o: ["gate", f, "--no-spills"],
    "report": lambda f, o: ["report", f, "-o", o],
    "report OLD": lambda f, o: ["report", str(_fatbin(Path(o).parent.parent)), f, "-o", o],
}
# a folder is an input: an empty one holds none
FOLDER_COMMANDS = ("check", "diff", "extract", "gate", "ls", "report")


def test_every_file_command_is_covered() -> None:
    taking_files = {name for name, p in commands().items()
                    if any(a.dest in ("file", "library", "old", "files") or
                           "=PATH" in str(a.metavar)
                           for a in p._actions)}
    assert taking_files == {c.split()[0] for c in FILE_COMMANDS} | {"embed"}


@pytest.mark.parametrize("command", sorted(FILE_COMMANDS))
@pytest.mark.parametrize("case", ["missing", "directory", "empty", "truncated"])
def test_file_errors_name_the_file(command: str, case: str, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{case}.in"
    if case == "directory":
        path.mkdir()
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        data = _fatbin(tmp_path).read_bytes()
        path.write_bytes(data[: len(data) // 2])
    out = tmp_path / "out" / "o"
    line = assert_failure(FILE_COMMANDS[command](str(path), str(out)), capsys, str(path))
    expected = {"missing": "No such file or directory", "directory": "it is a directory",
                "empty": "empty file", "truncated": ""}[case]
    if case == "directory" and command.split()[0] in FOLDER_COMMANDS:
        expected = "this folder holds no ELF, PE, fatbin or ar archive file"
    assert expected in line
    assert not out.parent.exists()


def test_embed_names_its_inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    for name, message in (("missing", "No such file"), ("d", "it is a directory")):
        assert_failure(["embed", "-o", str(tmp_path / "o.o"), f"k={tmp_path / name}"], capsys,
                       f"cannot read {tmp_path / name}: {message}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _fatbin(tmp_path)
    path.chmod(0)
    assert_failure(["ls", str(path)], capsys, f"cannot read {path}: Permission denied")


def test_scan_errors_start_with_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    """A host object whose .nv_fatbin is damaged: the error names the file, then the section,
    and keeps its class and offset."""
    blob = tmp_path / "bad.bin"
    blob.write_bytes(b"\x50\xed\x55\xba" + b"\xff" * 60)  # the fatbin magic, then nonsense
    obj = tmp_path / "bad.o"
    assert main(["embed", "-o", str(tmp_path / "k.o"), f"k={blob}"]) == 0
    subprocess.run(["objcopy", f"--add-section=.nv_fatbin={blob}", str(tmp_path / "k.o"),
                    str(obj)], check=True)
    with pytest.raises(FormatError) as info:
        scan(obj)
    assert str(info.value).startswith(f"{obj}: .nv_fatbin: ") and info.value.offset is not None
    assert_failure(["ls", str(obj)], capsys, f"{obj}: .nv_fatbin: ")
    empty = tmp_path / "x.so"
    empty.write_bytes(b"")
    with pytest.raises(FormatError, match=f"^{empty}: empty file, no device code$"):
        scan(empty)


# -- build's labels against the real cubins and PTX ------------------------------------------

@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    return kernels_in(tmp_path_factory)


def _tool(name: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([system_tool(name), *map(str, args)], capture_output=True, text=True,
                          check=False)


def _built_archs(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    import json

    assert main(["ls", "--json", str(path)]) == 0
    return [r["arch"] for r in json.loads(capsys.readouterr().out)["entries"]]


def test_cubin_label_must_be_its_sm(kernels: Kernels, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    cubin, out = kernels.cubins["sm_90"], tmp_path / "o.fatbin"
    # fatbinary refuses another SM: "elf arch does not match user-specified arch"
    oracle = _tool("fatbinary", "-64", f"--create={out}", f"--image3=kind=elf,sm=80,file={cubin}")
    assert oracle.returncode != 0 and "does not match" in oracle.stdout + oracle.stderr
    assert_failure(["build", "-o", str(out), "--cubin", f"sm_80={cubin}"], capsys,
                   f"{cubin}: the cubin is for sm_90, labelled sm_80")
    assert not out.exists()
    assert main(["build", "-o", str(out), "--cubin", f"sm_90={cubin}"]) == 0
    assert _built_archs(out, capsys) == ["sm_90"]


def test_cubin_label_keeps_the_a(kernels: Kernels, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    """fatbinary compares the SM number only; fatbinkit is stricter about `a` (arch-specific
    SASS labelled plain would be offered to other GPUs of the family) and accepts `f` or none
    for a cubin without the `a` flag, which its ELF header cannot tell apart."""
    a_cubin, out = kernels.cubins["sm_90a"], tmp_path / "o.fatbin"
    oracle = _tool("fatbinary", "-64", f"--create={out}",
                   f"--image3=kind=elf,sm=90,file={a_cubin}")
    assert oracle.returncode == 0
    assert_failure(["build", "-o", str(out), "--cubin", f"sm_90={a_cubin}"], capsys,
                   f"{a_cubin}: the cubin is for sm_90a, labelled sm_90: label it sm_90a")
    assert_failure(["build", "-o", str(out), "--cubin", f"sm_90a={kernels.cubins['sm_90']}"],
                   capsys, "the cubin is for sm_90, labelled sm_90a")
    for label in ("sm_100", "sm_100f"):
        assert main(["build", "-o", str(out), "--cubin",
                     f"{label}={kernels.cubins['sm_100f']}"]) == 0
        assert _built_archs(out, capsys) == [label]


def test_cubin_label_is_never_virtual(kernels: Kernels, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    # nvcc: "Option '--cubin' is not allowed when compiling for a virtual compute architecture"
    oracle = _tool("nvcc", "-cubin", "-arch=compute_90a", kernels.source, "-o", os.devnull)
    assert oracle.returncode != 0 and "virtual" in oracle.stderr
    assert_usage_error("build", ["build", "-o", "o.fatbin", "--cubin",
                                 f"compute_90a={kernels.cubins['sm_90a']}"], capsys, "sm_90a=")


@pytest.mark.parametrize(("ptx", "label", "ptxas_arch"), [
    ("sm_90", "compute_80", "sm_80"),  # ptxas: SM version specified by .target is higher
    ("sm_100f", "compute_100", "sm_120"),  # a plain label offers family PTX to sm_120
])
def test_ptx_label_it_cannot_compile_for(ptx: str, label: str, ptxas_arch: str,
                                         kernels: Kernels, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU the label admits would JIT the PTX and fail: ptxas, the driver's compiler offline,
    refuses it. fatbinary and `nvcc -fatbin k.ptx` wrap it under any label."""
    path, out = kernels.ptx[ptx], tmp_path / "o.fatbin"
    assert _tool("ptxas", f"-arch={ptxas_arch}", path, "-o", os.devnull).returncode != 0
    oracle = _tool("fatbinary", "-64", f"--create={out}",
                   f"--image3=kind=ptx,sm={label.split('_')[1]},file={path}")
    assert oracle.returncode == 0
    out.unlink()
    assert_failure(["build", "-o", str(out), "--ptx", f"{label}={path}"], capsys,
                   f"{path}: the PTX's .target is {ptx}, labelled {label}")
    assert not out.exists()


def test_ptx_labels_it_compiles_for(kernels: Kernels, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Its own .target, or a newer arch (the nvcc backend labels one PTX with several)."""
    out = tmp_path / "o.fatbin"
    for ptx, label, ptxas_arch in (("sm_80", "sm_80", "sm_80"), ("sm_80", "compute_90", "sm_90"),
                                   ("sm_100f", "compute_100f", "sm_100"),
                                   ("sm_100f", "sm_103f", "sm_103")):
        path = kernels.ptx[ptx]
        assert _tool("ptxas", f"-arch={ptxas_arch}", path, "-o", os.devnull).returncode == 0
        assert main(["build", "-o", str(out), "--ptx", f"{label}={path}"]) == 0, label
        assert _built_archs(out, capsys) == ["compute_" + label.split("_", 1)[1]]
