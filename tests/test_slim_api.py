"""The Python API of prune/recompress as a library (issue 27, points 2, 5 and 6 for slim).

- The output is never the input: the same path, a symbolic link or a hard link to it is an
  InvalidArgumentError from every entry point, before the input is read (garbage in the input
  still gives that error), and the input's bytes are unchanged.
- Typed keyword arguments (no ``**options``; mypy --strict sees a typo and which report comes
  back), bytes in and bytes out (``report.data``), the path written (``report.output``).
- A prune after which no arch asked for loads anything is refused on every path (raw fatbin,
  library, object, archive, wheel; also where PTX kept by ``ptx="keep"`` is all that is left)
  unless ``allow_empty``, the advice in Python terms from the API, in flags from the CLI.
- ``jobs``, ``progress`` and ``max_decompressed`` as everywhere else.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import os
import subprocess
import typing
import zipfile
from pathlib import Path

import pytest
from fatbin_kernels import cuobjdump_list, system_tool
from thirdparty import CUPY12_RANDOM, CUPY13_RANDOM_WIN, fetch

from fatbinkit import slim as slim_module
from fatbinkit.cli import main
from fatbinkit.errors import (
    CompatibilityError,
    DecompressionError,
    EmptiedError,
    InvalidArgumentError,
)
from fatbinkit.formats.fatbin import DecompressionBudget, Fatbin
from fatbinkit.progress import Step
from fatbinkit.slim import (
    SlimReport,
    WheelReport,
    prune,
    recompress,
    slim,
    slim_archive,
    slim_wheel,
)

ROOT = Path(__file__).resolve().parent.parent
NVCC = system_tool("nvcc")
KERNEL = "__global__ void twice(float *x) { x[threadIdx.x] *= 2.0f; }\n"
# SASS sm_80 and sm_90, PTX compute_90
GENCODE = ["-gencode", "arch=compute_80,code=sm_80", "-gencode",
           "arch=compute_90,code=[sm_90,compute_90]"]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_wheel(path: Path, members: dict[str, bytes]) -> Path:
    """A wheel of ``members`` with its RECORD."""
    record = "demo-1.0.dist-info/RECORD"
    def digest(data: bytes) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

    lines = [f"{name},sha256={digest(data)},{len(data)}" for name, data in members.items()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """k.cu as a library, an object, a static library of it, a raw fatbin and a wheel; and
    p.cu (SASS sm_90 and PTX compute_90 only) as a library."""
    root = tmp_path_factory.mktemp("api")
    (root / "k.cu").write_text(KERNEL)
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", *GENCODE, str(root / "k.cu"),
                    "-o", str(root / "libk.so")], check=True)
    subprocess.run([NVCC, "-c", "-Xcompiler", "-fPIC", *GENCODE, str(root / "k.cu"),
                    "-o", str(root / "k.o")], check=True)
    subprocess.run(["ar", "rcs", str(root / "libk.a"), str(root / "k.o")], check=True)
    subprocess.run([NVCC, "-fatbin", *GENCODE, str(root / "k.cu"), "-o", str(root / "k.fatbin")],
                   check=True)
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-gencode",
                    "arch=compute_90,code=[sm_90,compute_90]", str(root / "k.cu"),
                    "-o", str(root / "libp.so")], check=True)
    make_wheel(root / "demo-1.0-py3-none-linux_x86_64.whl",
               {"demo/__init__.py": b"", "demo/libk.so": (root / "libk.so").read_bytes()})
    return root


# -- point 2 of the issue: the output is never the input --------------------------------------


def _same_file_names(src: Path, tmp_path: Path) -> dict[str, Path]:
    """The input under its own path, through a symbolic link and through a hard link."""
    link, hard = tmp_path / f"link-{src.name}", tmp_path / f"hard-{src.name}"
    link.symlink_to(src)
    os.link(src, hard)
    return {"same path": src, "symlink": link, "hard link": hard}


ENTRY_POINTS = {
    "prune": lambda src, out: prune(src, out, archs=["sm_90"]),
    "recompress": lambda src, out: recompress(src, out, codec="lz4"),
    "slim": lambda src, out: slim(src, out, archs=["sm_90"]),
    "slim_archive": lambda src, out: slim_archive(src, out, archs=["sm_90"]),
}


@pytest.mark.parametrize("call", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_output_that_is_the_input_is_refused(built: Path, tmp_path: Path, call: str,
                                             how: str) -> None:
    """``prune(x, x)`` replaced a 167 MB library by its 53 MB pruned copy: every entry point
    refuses the input's own file as output, however it is named, before reading the input (a
    garbage input gives that error, not a FormatError); the input's bytes stay."""
    name = "libk.a" if call == "slim_archive" else "libk.so"
    src = tmp_path / name
    src.write_bytes((built / name).read_bytes())
    before = sha(src)
    out = _same_file_names(src, tmp_path)[how]
    with pytest.raises(InvalidArgumentError, match="is the input"):
        ENTRY_POINTS[call](src, out)
    assert sha(src) == before and out.exists()
    src.write_bytes(b"not a binary at all")
    with pytest.raises(InvalidArgumentError, match="is the input"):
        ENTRY_POINTS[call](src, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [name, f"link-{name}", f"hard-{name}"])


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_wheel_written_over_itself_is_refused(built: Path, tmp_path: Path, how: str) -> None:
    """A wheel is written into a folder under its own name: a folder where that name is the
    input (the input's own folder, a link to it there) is refused, for slim_wheel and prune."""
    src = tmp_path / "in" / "demo-1.0-py3-none-linux_x86_64.whl"
    src.parent.mkdir()
    src.write_bytes((built / src.name).read_bytes())
    before = sha(src)
    folder = tmp_path / "out"
    folder.mkdir()
    if how == "symlink":
        (folder / src.name).symlink_to(src)
    elif how == "hard link":
        os.link(src, folder / src.name)
    else:
        folder = src.parent
    for call in (lambda: slim_wheel(src, folder, archs=["sm_90"]),
                 lambda: prune(src, folder, archs=["sm_90"])):
        with pytest.raises(InvalidArgumentError, match="is the input"):
            call()
    assert sha(src) == before


def test_cli_output_that_is_the_input(built: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "libk.so"
    src.write_bytes((built / "libk.so").read_bytes())
    (tmp_path / "hard.so").hardlink_to(src)
    before = sha(src)
    assert main(["prune", str(src), "-o", str(tmp_path / "hard.so"), "--for", "sm_90"]) == 3
    assert "is the input" in capsys.readouterr().err and sha(src) == before


# -- point 5: typed keywords, bytes in and out, the output's path ------------------------------


def test_no_untyped_options_in_public_signatures() -> None:
    """No ``**options: Any``: every keyword is named (a typo is a TypeError at the call)."""
    for fn in (prune, recompress, slim, slim_archive, slim_wheel):
        kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
        assert inspect.Parameter.VAR_KEYWORD not in kinds, fn.__name__
    for fn in (prune, recompress):
        assert len(typing.get_overloads(fn)) == 2
    for fn in (prune, slim, slim_archive, slim_wheel):
        params = inspect.signature(fn).parameters
        assert {"jobs", "progress", "max_decompressed", "allow_empty"} <= set(params)
        assert "budget" not in params


def test_mypy_sees_typos_and_the_report_type(tmp_path: Path) -> None:
    """mypy --strict on a script: bytes in give a SlimReport (``.data``), a path may give a
    WheelReport; a misspelt keyword and a codec that does not exist are errors."""
    api = pytest.importorskip("mypy.api")
    script = tmp_path / "use_prune.py"
    script.write_text(
        "from pathlib import Path\n"
        "from fatbinkit.slim import prune, recompress\n"
        "data = Path('libk.so').read_bytes()\n"
        "reveal_type(prune(data, archs=['sm_90']))\n"
        "reveal_type(prune(Path('libk.so'), Path('out.so'), archs=['sm_90']))\n"
        "out: bytes | None = prune(data, archs=['sm_90']).data\n"
        "prune(data, archs=['sm_90'], ptxx='none')\n"
        "recompress(data, codec='zst')\n")
    stdout, _, status = api.run(["--strict", "--no-incremental", "--follow-imports=silent",
                                 str(script)])
    lines = [ln.split(": ", 1)[1] for ln in stdout.splitlines() if ": " in ln]
    assert status == 1
    assert 'note: Revealed type is "fatbinkit.slim.SlimReport"' in lines, stdout
    assert ('note: Revealed type is "fatbinkit.slim.SlimReport | fatbinkit.slim.WheelReport"'
            in lines or 'note: Revealed type is "Union[fatbinkit.slim.SlimReport, '
            'fatbinkit.slim.WheelReport]"' in lines), stdout
    assert sum(ln.startswith("error: No overload variant") for ln in lines) == 2, stdout


@pytest.mark.parametrize("name", ["libk.so", "k.o", "k.fatbin"])
def test_bytes_in_bytes_out(built: Path, tmp_path: Path, name: str) -> None:
    """``prune(data, archs=...)`` gives the same bytes as pruning the file; with a path, the
    report names the file written."""
    src = built / name
    out = tmp_path / name
    on_disk = prune(src, out, archs=["sm_90"], ptx="none")
    assert isinstance(on_disk, SlimReport)
    assert on_disk.output == out and on_disk.data is None
    in_memory = prune(src.read_bytes(), archs=["sm_90"], ptx="none")
    assert in_memory.output is None and in_memory.data == out.read_bytes()
    assert in_memory.to_dict() == on_disk.to_dict()
    assert prune(bytearray(src.read_bytes()), archs=["sm_90"], ptx="none").data == \
        out.read_bytes()
    path_to_bytes = prune(src, None, archs=["sm_90"], ptx="none")
    assert isinstance(path_to_bytes, SlimReport) and path_to_bytes.data == out.read_bytes()
    (tmp_path / "mem").write_bytes(in_memory.data or b"")
    assert {ln.split(".")[-2] for ln in cuobjdump_list(tmp_path / "mem", all=True)} == {"sm_90"}
    packed = recompress(memoryview(src.read_bytes()), codec="zstd", allow_newer_driver=True)
    assert packed.data is not None and packed.codec == "zstd"
    assert len(packed.data) == packed.output_size
    assert "data=<" in repr(packed) and len(repr(packed)) < 400


def test_bytes_of_an_archive_or_a_wheel(built: Path, tmp_path: Path) -> None:
    """prune/recompress of bytes take one binary (a SlimReport comes back, as mypy is told):
    the bytes of a static library or a wheel are refused, naming the call that takes them;
    slim_archive and slim_wheel take bytes and give the new archive's or wheel's bytes."""
    archive = (built / "libk.a").read_bytes()
    wheel_path = built / "demo-1.0-py3-none-linux_x86_64.whl"
    with pytest.raises(InvalidArgumentError, match=r"slim_archive\(data"):
        prune(archive, archs=["sm_90"])
    with pytest.raises(InvalidArgumentError, match=r"slim_wheel\(data"):
        recompress(wheel_path.read_bytes(), codec="lz4")
    on_disk = slim_archive(built / "libk.a", tmp_path / "libk.a", archs=["sm_90"])
    in_memory = slim_archive(archive, archs=["sm_90"])
    assert on_disk.output == tmp_path / "libk.a" and on_disk.data is None
    assert in_memory.data == (tmp_path / "libk.a").read_bytes() and in_memory.output is None
    pruned = prune(built / "libk.a", None, archs=["sm_90"])
    assert isinstance(pruned, WheelReport) and pruned.data == in_memory.data

    report = slim_wheel(wheel_path.read_bytes(), archs=["sm_90"], ptx="none")
    assert report.output is None and report.data is not None
    (tmp_path / "w.whl").write_bytes(report.data)
    with zipfile.ZipFile(tmp_path / "w.whl") as zf:
        (tmp_path / "lib.so").write_bytes(zf.read("demo/libk.so"))
    assert {ln.split(".")[-2] for ln in cuobjdump_list(tmp_path / "lib.so", all=True)} == \
        {"sm_90"}
    with pytest.raises(InvalidArgumentError, match="no file name"):
        slim_wheel(wheel_path.read_bytes(), tmp_path / "dist", archs=["sm_90"])
    written = prune(wheel_path, tmp_path / "dist", archs=["sm_90"], ptx="none")
    assert written.output == tmp_path / "dist" / wheel_path.name
    assert written.output.is_file() and len(repr(written)) < 400


def test_bad_keywords_name_themselves(built: Path, tmp_path: Path) -> None:
    lib = built / "libk.so"
    bad: list[tuple[dict[str, object], str]] = [
        ({"ptx": "some"}, "ptx="), ({"codec": "zip"}, "codec="),
        ({"level": "3", "codec": "zstd"}, "level"), ({"same_size": "yes"}, "same_size"),
        ({"allow_empty": 1}, "allow_empty"), ({"jobs": 0}, "jobs"),
        ({"progress": "bar"}, "progress"), ({"max_decompressed": "1G"}, "max_decompressed")]
    for kwargs, word in bad:
        with pytest.raises(InvalidArgumentError, match=word):
            prune(lib, tmp_path / "o.so", archs=["sm_90"], **kwargs)  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        prune(lib, tmp_path / "o.so", archs=["sm_90"], budget=None)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="archs"):
        prune(lib.read_bytes(), archs=[])
    assert not list(tmp_path.iterdir())


# -- "succeeds when nothing is kept": EmptiedError on every path -------------------------------


@pytest.mark.parametrize("name", ["libk.so", "k.o", "k.fatbin", "libk.a", "wheel", "pyd",
                                  "libp.so"])
def test_nothing_kept_is_refused_everywhere(built: Path, tmp_path: Path, name: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """sm_70 loads nothing of k.cu (SASS sm_80, sm_90, PTX compute_90) nor of CuPy 13's
    Windows .pyd (SASS sm_75 and up; no PTX kept): refused on every path,
    bytes or file, nothing written, the advice in Python terms (``allow_empty=True``) from the
    API and as a flag from the CLI; allowed with it. libp.so (SASS sm_90 and its PTX) pruned for
    sm_80 keeps the PTX (``ptx="keep"``), which sm_80 cannot JIT: written before, refused now."""
    src = (fetch(CUPY13_RANDOM_WIN) if name == "pyd" else
           built / ("demo-1.0-py3-none-linux_x86_64.whl" if name == "wheel" else name))
    arch, ptx = ("sm_80", "keep") if name == "libp.so" else ("sm_70", "none")
    out = tmp_path / ("dist" if name == "wheel" else src.name)
    with pytest.raises(EmptiedError) as e:
        prune(src, out, archs=[arch], ptx=ptx)  # type: ignore[call-overload]
    message = str(e.value)
    assert "allow_empty=True" in message and "--allow-empty" not in message
    assert "--for" not in message and "arch in archs" in message
    assert not out.exists()
    if name not in ("libk.a", "wheel"):
        with pytest.raises(EmptiedError, match="allow_empty=True"):
            prune(src.read_bytes(), archs=[arch], ptx=ptx)  # type: ignore[call-overload]
    assert main(["prune", str(src), "-o", str(out), "--for", arch, "--ptx", ptx]) == 3
    err = capsys.readouterr().err
    assert "--allow-empty" in err and "allow_empty=True" not in err and "--for arch" in err
    assert not out.exists()
    report = prune(src, out, archs=[arch], ptx=ptx, allow_empty=True)  # type: ignore[call-overload]
    assert report.output is not None and report.output.exists()
    if name == "libp.so":
        assert isinstance(report, SlimReport) and not report.emptied
        assert report.archs[0].modules == 0


def test_a_kept_ptx_that_loads_keeps_the_file(built: Path, tmp_path: Path) -> None:
    """libp.so pruned for sm_100 (which JITs the compute_90 PTX it keeps): written, as before."""
    report = prune(built / "libp.so", tmp_path / "o.so", archs=["sm_100"])
    assert isinstance(report, SlimReport) and report.archs[0].modules >= 1


# -- point 6: jobs, progress, max_decompressed; errors in Python terms -------------------------


def test_jobs_progress_and_budget(built: Path, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Pools are sized by ``jobs`` (FATBINKIT_JOBS when None), never by os.cpu_count();
    progress callables are told of each entry recompressed and each library of a wheel;
    max_decompressed caps what is inflated (a number, or a budget shared by calls)."""
    def no_cpu_count() -> int:
        raise AssertionError("os.cpu_count() sizes no pool")

    monkeypatch.setattr(os, "cpu_count", no_cpu_count)
    sizes: list[int | None] = []
    real_threads = slim_module.ThreadPoolExecutor
    real_processes = slim_module.ProcessPoolExecutor

    def threads(max_workers: int | None = None) -> object:
        sizes.append(max_workers)
        return real_threads(max_workers=max_workers)

    def processes(max_workers: int | None = None) -> object:
        sizes.append(max_workers)
        return real_processes(max_workers=max_workers)

    monkeypatch.setattr(slim_module, "ThreadPoolExecutor", threads)
    monkeypatch.setattr(slim_module, "ProcessPoolExecutor", processes)
    steps: list[Step] = []
    packed = recompress(built / "libk.so", tmp_path / "z.so", codec="zstd", jobs=3,
                        allow_newer_driver=True, progress=steps.append)
    assert sizes and set(sizes) == {3}
    assert isinstance(packed, SlimReport)
    assert [s.unit for s in steps] == ["entry"] * packed.entries_after
    assert steps[-1].done == steps[-1].total == packed.entries_after
    monkeypatch.setenv("FATBINKIT_JOBS", "2")
    sizes.clear()
    prune(built / "libk.so", tmp_path / "p.so", archs=["sm_90"])
    assert set(sizes) == {2}
    sizes.clear()
    steps.clear()
    lib = (built / "libk.so").read_bytes()
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-linux_x86_64.whl",
                       {f"demo/lib{k}.so": lib for k in "abc"})
    slim_wheel(wheel, tmp_path / "dist", archs=["sm_90"], progress=steps.append)
    assert sizes == [2]  # 3 libraries on FATBINKIT_JOBS processes
    assert sorted(s.name for s in steps) == ["demo/liba.so", "demo/libb.so", "demo/libc.so"]
    assert [(s.done, s.total, s.unit) for s in steps] == [(k, 3, "library") for k in (1, 2, 3)]

    with pytest.raises(DecompressionError, match="max_decompressed=SIZE"):
        prune(packed.output or Path(), tmp_path / "p.so", archs=["sm_90"], max_decompressed=100)
    shared = DecompressionBudget(1 << 30)
    prune(packed.output or Path(), tmp_path / "p.so", archs=["sm_90"], max_decompressed=shared)
    assert shared.used > 0
    used = shared.used
    packed_wheel = make_wheel(tmp_path / "packed-1.0-py3-none-linux_x86_64.whl",
                              {"demo/libz.so": (packed.output or Path()).read_bytes()})
    slim_wheel(packed_wheel, tmp_path / "dist2", archs=["sm_90"], max_decompressed=shared)
    assert shared.used > used  # charged with what the worker process inflated
    with pytest.raises(DecompressionError, match=r"demo/libz\.so"):
        slim_wheel(packed_wheel, tmp_path / "dist3", archs=["sm_90"],
                   max_decompressed=DecompressionBudget(100))
    assert not (tmp_path / "dist3").exists()


def test_errors_name_keywords_in_the_api_and_flags_in_the_cli(
        built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """zstd raises the minimum driver: the API says allow_newer_driver=True, the CLI
    --allow-newer-driver; a level without a codec names codec=; --exact's refusal exact=True."""
    lib = fetch(CUPY12_RANDOM)  # LZ4: zstd needs a 12.4 driver
    with pytest.raises(CompatibilityError, match=r"allow_newer_driver=True\)"):
        recompress(lib, tmp_path / "z.so", codec="zstd")
    assert main(["recompress", str(lib), "-o", str(tmp_path / "z.so"), "--codec", "zstd"]) != 0
    assert "(allow it with --allow-newer-driver)" in capsys.readouterr().err
    with pytest.raises(InvalidArgumentError, match="codec='lz4', codec='zstd' or codec='zlib'"):
        prune(lib, tmp_path / "o.so", archs=["sm_90"], level=3)
    with pytest.raises(EmptiedError, match="exact=True keeps no SASS for exactly sm_89"):
        prune(built / "libk.so", tmp_path / "o.so", archs=["sm_89"], exact=True, ptx="none")
    assert not list(tmp_path.iterdir())


def test_fatbin_of_the_output_is_what_the_report_says(built: Path) -> None:
    report = prune((built / "k.fatbin").read_bytes(), archs=["sm_80"], ptx="floor")
    assert report.data is not None
    fat = Fatbin.from_bytes(report.data)
    assert len(fat.entries) == report.entries_after == 2
