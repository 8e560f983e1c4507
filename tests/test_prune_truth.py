"""Verdicts that stay true after ``prune`` (issue 26, points 1, 3 and 7a).

- A module that no kept arch loads is left as a container with no entry; the CUDA runtime still
  registers it (its ``__fatbinwrap`` record stays: counted with readelf), so ``check`` counts it
  as a module with no image for the arch and ``gate --require-arch`` as a violation, as they
  judge the module it was. ``check --strict`` and ``gate --require-arch`` give the same verdict
  on the original and the pruned copy of every real library of the suite.
- A library no kept arch loads is refused (nothing written) unless allowed; ``ls`` of a file of
  empty containers says so; corrupt LZ4/zstd payloads are refused, never copied; a wheel prune
  that fails leaves nothing behind.
- recompress says what it did to each entry; ``prune``/``recompress --json`` follow the schema.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
from fatbin_kernels import cuobjdump_extract, cuobjdump_list, system_tool
from thirdparty import ALL_TEST_MEMBERS, CACHE, CUPY13_RANDOM, WheelMember, fetch

from fatbinkit.binary import open as open_binary
from fatbinkit.cli import main
from fatbinkit.errors import DecompressionError, EmptiedError, OutputError
from fatbinkit.formats.arch import Arch
from fatbinkit.formats.fatbin import EntryKind, Fatbin, build_fatbin, make_entry
from fatbinkit.gate import Rules, gate
from fatbinkit.slim import prune, recompress

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "json-schema.json").read_text())
NVCC = system_tool("nvcc")
ONLY_120A = "__global__ void only_blackwell(float *x) { x[threadIdx.x] *= 2.0f; }\n"
EVERYWHERE = "__global__ void everywhere(float *x) { x[threadIdx.x] += 1.0f; }\n"
# a kernel only the sm_80 image has (cuFFT 11 builds its bf16 kernels so): the host registers it
GUARDED = """__global__ void everywhere(float *x) { x[threadIdx.x] += 1.0f; }
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__global__ void ampere_up(float *x) { x[threadIdx.x] -= 1.0f; }
#endif
"""
# (archs kept, --ptx): no PTX left, so modules with no sm_90 SASS become empty containers; and
# two generations with every PTX (sm_120 JITs it)
KEPT = ((("sm_90",), "none"), (("sm_75", "sm_120"), "keep"))
CUPY13_LIBRARIES = ("cupy/cuda/cub.cpython-311-x86_64-linux-gnu.so",
                    "cupy/cuda/thrust.cpython-311-x86_64-linux-gnu.so",
                    "cupy/random/_generator_api.cpython-311-x86_64-linux-gnu.so")


def validate(doc: object, what: str) -> None:
    jsonschema.validate(doc, {"$defs": SCHEMA["$defs"], "$ref": f"#/$defs/{what}"})
    jsonschema.validate(doc, SCHEMA)


def verdicts(path: Path, archs: list[str]) -> dict[str, tuple[bool, bool]]:
    """Per arch: does ``check --strict`` pass (every image read, as --strict reads them), does
    ``gate --require-arch`` pass."""
    c = open_binary(path).check(archs, every_image=True)
    failing = {v.arch for v in gate([path], Rules(require_archs=tuple(
        Arch.parse(a) for a in archs))).violations}
    return {v.device.sm: (v.strict_ok, v.device.sm not in failing) for v in c.verdicts}


def wrappers(path: Path) -> int:
    """The ``__fatbinwrap`` records the runtime registers, by readelf's section size."""
    out = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True,
                         check=True).stdout
    line = next(ln for ln in out.splitlines() if ".nvFatBinSegment" in ln)
    cols = line.split("]", 1)[1].split()
    return int(cols[4], 16) // 24


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """libmix.so: a module of SASS sm_120a only (as onnxruntime-gpu's CUDA provider has) beside
    one of SASS sm_80 and sm_90, linked by ``nvcc -shared`` (which adds a third module, with no
    kernel: an empty one); and a raw fatbin of the sm_120a module alone."""
    root = tmp_path_factory.mktemp("truth")
    (root / "a.cu").write_text(ONLY_120A)
    (root / "b.cu").write_text(EVERYWHERE)
    for name, gencode in (("a", ["-gencode", "arch=compute_120a,code=sm_120a"]),
                          ("b", ["-gencode", "arch=compute_80,code=sm_80",
                                 "-gencode", "arch=compute_90,code=sm_90"])):
        subprocess.run([NVCC, "-c", "-Xcompiler", "-fPIC", *gencode, str(root / f"{name}.cu"),
                        "-o", str(root / f"{name}.o")], check=True)
    subprocess.run([NVCC, "-shared", str(root / "a.o"), str(root / "b.o"), "-o",
                    str(root / "libmix.so")], check=True)
    subprocess.run([NVCC, "-fatbin", "-gencode", "arch=compute_120a,code=sm_120a",
                    str(root / "a.cu"), "-o", str(root / "a.fatbin")], check=True)
    (root / "g.cu").write_text(GUARDED)
    subprocess.run([NVCC, "-shared", "-Xcompiler", "-fPIC", "-gencode",
                    "arch=compute_75,code=sm_75", "-gencode", "arch=compute_80,code=sm_80",
                    str(root / "g.cu"), "-o", str(root / "libguard.so")], check=True)
    return root


def test_a_module_left_with_no_image_is_still_judged(mixed: Path, tmp_path: Path) -> None:
    """The sm_120a-only module: restricted on sm_90 before pruning (check --strict fails, gate
    names its kernel); after, an empty container the runtime still registers (readelf: the
    same wrappers), so the verdicts stay: check counts it as built for other GPUs, gate names
    the container."""
    src, out = mixed / "libmix.so", tmp_path / "libmix.so"
    report = prune(src, out, [Arch(90)], ptx="none")
    assert verdicts(src, ["sm_90"]) == verdicts(out, ["sm_90"]) == {"sm_90": (False, False)}
    assert wrappers(out) == wrappers(src) == 3
    assert cuobjdump_list(out) == ["ELF file    1: libmix.1.sm_75.cubin",
                                   "ELF file    2: libmix.2.sm_90.cubin"]
    assert report.no_image == 1 and not report.emptied
    assert "1 of 3 modules left with no image" in str(report)
    before, after = (open_binary(p).check(["sm_90"], every_image=True).verdicts[0]
                     for p in (src, out))
    assert (before.status, len(before.restricted), len(before.empty)) == \
        (after.status, len(after.restricted), len(after.empty)) == ("partial", 1, 1)
    assert after.entryless == (".nv_fatbin container 1",)
    g = gate([out], Rules(require_archs=(Arch(90),)))
    assert [(v.rule, v.kernel, v.arch) for v in g.violations] == [
        ("require-arch", None, "sm_90")]
    assert "container 1 is an empty fatbin container" in g.violations[0].message


def test_ls_summary_agrees_after_prune(mixed: Path, tmp_path: Path) -> None:
    """``ls --summary``'s per-GPU line counts the container prune left with no image as a
    module with no image for every GPU, as the original's sm_120a-only module is on sm_90."""
    src, out = mixed / "libmix.so", tmp_path / "libmix.so"
    prune(src, out, [Arch(90)], ptx="none")
    before, after = (open_binary(p).summary() for p in (src, out))
    assert before.modules == after.modules == 3
    sm90 = [next(d for d in s.devices if d.device == "sm_90") for s in (before, after)]
    assert (sm90[0].sass, sm90[0].jit, sm90[0].none) == (sm90[1].sass, sm90[1].jit,
                                                         sm90[1].none)
    assert sm90[1].none >= 1 and sm90[1].sass >= 1


def test_an_empty_module_keeps_an_image(mixed: Path, tmp_path: Path) -> None:
    """The module nvcc -shared adds (sm_75 SASS, no kernel, no variable) is never loaded; where
    no kept arch loads it, it keeps its image, so check still counts it as empty (an empty
    container would be judged as a module whose kernels are unknown)."""
    src, out = mixed / "libmix.so", tmp_path / "libmix.so"
    prune(src, out, [Arch(90)], ptx="none")
    empty = [s for s in open_binary(out).check(["sm_90"]).rows if s[0].empty]
    assert [s.images[0].name for s, _ in empty] == ["sm_75"]


def test_kernels_only_other_archs_hold_stay_known(mixed: Path, tmp_path: Path) -> None:
    """libguard.so: ampere_up is in the sm_80 image only; on sm_75 the runtime registers it and
    the driver answers CUDA_ERROR_NOT_FOUND (check --strict and gate fail). Pruned for sm_75,
    the sm_80 image stays for its name (no sm_75 GPU loads it), so both still fail."""
    src, out = mixed / "libguard.so", tmp_path / "libguard.so"
    report = prune(src, out, [Arch(75)], ptx="none")
    assert verdicts(src, ["sm_75"]) == verdicts(out, ["sm_75"]) == {"sm_75": (False, False)}
    assert report.for_kernels == 1 and "kept 1 image(s) no arch in archs loads" in str(report)
    assert sorted(line.rsplit(".", 2)[1] for line in cuobjdump_list(out)) == [
        "sm_75", "sm_75", "sm_80"]  # the nvcc -shared module's, g.cu's and its sm_80
    v = open_binary(out).check(["sm_75"], every_image=True).verdicts[0]
    assert [k for _, k in v.missing] == ["_Z9ampere_upPf"]


def test_a_library_no_kept_arch_loads_is_refused(mixed: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """sm_70 loads nothing of libmix.so: refused, nothing written, unless --allow-empty; then
    the report says so loudly."""
    src, out = mixed / "libmix.so", tmp_path / "libmix.so"
    with pytest.raises(EmptiedError, match=r"no arch in archs \(sm_70\) loads an image of any of "
                       r"its 2 module\(s\) \(it holds SASS sm_120a, SASS sm_80, SASS sm_90\)"):
        prune(src, out, [Arch(70)])
    assert main(["prune", str(src), "-o", str(out), "--for", "sm_70"]) != 0
    assert "--allow-empty" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    assert main(["prune", str(src), "-o", str(out), "--for", "sm_70", "--allow-empty"]) == 0
    text = capsys.readouterr().out
    assert "NO IMAGE LEFT: none of the 2 modules holds an image" in text
    assert verdicts(out, ["sm_70"]) == verdicts(src, ["sm_70"]) == {"sm_70": (False, False)}


def test_ls_of_empty_containers_says_what_the_file_has(mixed: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A raw fatbin of the sm_120a module pruned for sm_90 (allowed): one container with no
    entry; ls says so (text and JSON), check fails it as holding no image."""
    out = tmp_path / "e.fatbin"
    prune(mixed / "a.fatbin", out, [Arch(90)], allow_empty=True)
    assert len(Fatbin.from_bytes(out.read_bytes()).containers) == 1
    assert main(["ls", str(out)]) == 0
    assert capsys.readouterr().out == (
        f"{out}: 1 empty fatbin container (no entries: no image for any GPU, e.g. left by "
        "prune)\n")
    assert main(["ls", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"entries": [], "empty_containers": 1}
    validate(doc, "listing")
    assert main(["check", str(out), "--arch", "sm_90"]) != 0
    assert "no module holds an image for sm_90 (1 of 1 module empty containers" in \
        capsys.readouterr().out
    assert main(["extract", str(out), "-o", str(tmp_path / "x")]) != 0
    assert "1 empty fatbin container" in capsys.readouterr().err


def _compressed_fatbin(mixed: Path, codec: str) -> bytes:
    """The sm_80 and sm_90 cubins of b.cu and its compute_90 PTX, each stored as ``codec``."""
    out = mixed / f"b-{codec}"
    cubins = cuobjdump_extract(mixed / "b.o", out)
    ptx = mixed / "b.ptx"
    subprocess.run([NVCC, "-ptx", "-arch=compute_90", str(mixed / "b.cu"), "-o", str(ptx)],
                   check=True)
    entries = [make_entry(EntryKind.ELF, Arch.parse(name.split(".")[-2]), data,
                          compression=codec)
               for name, data in sorted(cubins.items())]
    entries.append(make_entry(EntryKind.PTX, Arch(90), ptx.read_bytes(), compression=codec))
    return build_fatbin(entries)


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_corrupt_payload_is_refused(mixed: Path, tmp_path: Path, codec: str) -> None:
    """A kept entry copied as stored is inflated to its recorded size first: a damaged payload
    (the compute_90 PTX, kept by --ptx keep, which no --for arch picks: nothing read it) is
    refused with one error and nothing written (before, it was copied, exit 0)."""
    good = _compressed_fatbin(mixed, codec)
    fat = Fatbin.from_bytes(good)
    entry = next(e for e in fat.entries if e.header.kind == EntryKind.PTX)
    start = entry.offset + entry.header.header_size
    bad = bytearray(good)
    bad[start : start + entry.header.compressed_size] = b"\xff" * entry.header.compressed_size
    src = tmp_path / "bad.fatbin"
    src.write_bytes(bad)
    (tmp_path / "good.fatbin").write_bytes(good)
    prune(tmp_path / "good.fatbin", tmp_path / "ok.fatbin", [Arch(90)])  # the intact one
    with pytest.raises(DecompressionError):
        prune(src, tmp_path / "out.fatbin", [Arch(90)])
    assert not (tmp_path / "out.fatbin").exists()
    assert main(["prune", str(src), "-o", str(tmp_path / "out.fatbin"), "--for", "sm_90"]) != 0
    assert not (tmp_path / "out.fatbin").exists()


def test_wheel_output_errors_leave_nothing(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`prune WHEEL -o FILE`: one clear error (not a traceback); a wheel every library of which
    would be emptied (CuPy for CUDA 13 has nothing sm_70 loads; no PTX kept): each named, no
    folder left."""
    fetch(CUPY13_RANDOM)
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))
    file = tmp_path / "a-file"
    file.write_text("x")
    with pytest.raises(OutputError, match="it is a file, not a folder"):
        prune(src, file, [Arch(90)])
    assert main(["prune", str(src), "-o", str(file), "--for", "sm_90"]) != 0
    err = capsys.readouterr().err
    assert "it is a file, not a folder" in err and "Traceback" not in err
    dist = tmp_path / "new" / "dist"
    with pytest.raises(EmptiedError) as e:
        prune(src, dist, [Arch(70)], ptx="none")
    assert "in 3 of the 3 libraries" in str(e.value)
    assert all(n in str(e.value) for n in CUPY13_LIBRARIES)
    assert not (tmp_path / "new").exists()


def test_recompress_says_what_it_did(mixed: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """zstd entries recompressed as zstd: without --level they are left as stored (and the
    report says so, not "recompressed"); with --level 19 each is encoded anew, and cuobjdump
    extracts the same cubins."""
    src = tmp_path / "z.fatbin"
    src.write_bytes(_compressed_fatbin(mixed, "zstd"))
    same = recompress(src, tmp_path / "same.fatbin", "zstd")
    assert same.recompressed == 0
    assert same.stored_as == (("left as stored: already zstd, no level given", 3),)
    assert (tmp_path / "same.fatbin").read_bytes() == src.read_bytes()
    assert main(["recompress", str(src), "-o", str(tmp_path / "l19.fatbin"), "--codec", "zstd",
                 "--level", "19", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "slim")
    assert doc["level"] == 19 and doc["recompressed"] == 3
    assert {r["how"] for r in doc["stored_as"]} <= {"re-encoded", "re-encoded to the same bytes"}
    after = sorted(cuobjdump_extract(tmp_path / "l19.fatbin", tmp_path / "x19").values())
    assert len(after) == 3 and after == sorted(cuobjdump_extract(src, tmp_path / "x0").values())
    assert main(["recompress", str(src), "-o", str(tmp_path / "t.fatbin"), "--codec", "zstd"]) == 0
    text = capsys.readouterr().out
    assert "as zstd: 3 left as stored: already zstd, no level given" in text
    assert "recompressed as" not in text


def test_prune_json_follows_the_schema(mixed: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    """prune --json of a library and of a wheel (rows by `file`, the path inside the wheel, as
    ls and check name them)."""
    assert main(["prune", str(mixed / "libmix.so"), "-o", str(tmp_path / "m.so"), "--for",
                 "sm_90", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "slim")
    assert doc["modules_without_image"] == 1 and doc["emptied"] is False
    fetch(CUPY13_RANDOM)
    src = next((CACHE / "wheels").glob("cupy_cuda13x-14.2.0-*linux*.whl"))
    assert main(["prune", str(src), "-o", str(tmp_path / "dist"), "--for", "sm_90",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc, "slims")
    assert doc["kind"] == "wheel" and all("file" in f and "member" not in f
                                          for f in doc["files"])


# -- every real library of the suite: the same verdicts before and after ----------------------


@pytest.mark.parametrize("member", ALL_TEST_MEMBERS, ids=lambda m: m.name)
def test_verdicts_agree_after_prune(member: WheelMember, tmp_path: Path) -> None:
    """For each kept arch: check --strict and gate --require-arch pass or fail alike on the
    original and on the copy pruned for it (libraries emptied allowed, to be judged too)."""
    src = fetch(member)
    before = verdicts(src, sorted({a for kept, _ in KEPT for a in kept}))
    for kept, ptx in KEPT:
        out = tmp_path / f"{'-'.join(kept)}{src.suffix}"
        prune(src, out, [Arch.parse(a) for a in kept], ptx=ptx, allow_empty=True,
              strip_signature=True)
        after = verdicts(out, list(kept))
        assert after == {a: before[a] for a in kept}, (kept, before, after)
