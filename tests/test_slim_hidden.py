"""``prune``/``recompress --everywhere`` (issue 31): hidden fatbin containers slimmed in place.

cuRAND 10.4.5.25 keeps 1,747 single-entry fatbin containers in ``.data``, which the library
loads itself. Pruned ``--for sm_90 --everywhere``, each container the sm_90 GPU loads nothing
from loses its entry, and every other one stays byte for byte. Each rewritten container
starts where it did, and its freed tail is zero-filled; the file outside those containers
equals plain ``prune``'s output. The oracles are:

- cuobjdump on the output's hidden containers, written back to back into one fatbin: its
  listing, and the SHA-256 of the images it extracts, against a rule written here from the
  input's listing (keep SASS sm_90 and every PTX);
- readelf for the layout.

The H200 run (docs/gpu.md) loads the pruned cuBLASLt and cuFFT in torch and compares the results.
"""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from fatbin_kernels import cuobjdump, cuobjdump_list
from thirdparty import CACHE, CUBLASLT131, CURAND13, fetch

from fatbinkit.device_code import DeviceCode
from fatbinkit.scan import scan
from fatbinkit.slim import prune, recompress


def _containers(path: Path) -> dict[int, tuple[int, int]]:
    """The hidden fatbin containers of ``path``, ``{container: (start, end)}`` in the file,
    read from the bytes at the deep scan's offsets (a 16-byte header before the first entry)."""
    data = path.read_bytes()
    out: dict[int, tuple[int, int]] = {}
    for c in scan(path, everywhere=True):
        if c.hidden and data[c.offset - 16:c.offset - 12] == b"\x50\xed\x55\xba":
            start = c.offset - 16
            end = start + 16 + int.from_bytes(data[start + 8:start + 16], "little")
            out[c.container] = (start, end)
    return out


def _joined(path: Path, spans: list[tuple[int, int]], out: Path) -> Path:
    """The containers at ``spans`` of ``path`` back to back: one fatbin file for cuobjdump."""
    data = path.read_bytes()
    out.write_bytes(b"".join(data[a:b] + bytes(-(b - a) % 8) for a, b in spans))
    return out


def _extracted(fatbin: Path, folder: Path) -> Counter[str]:
    """The SHA-256 of each image cuobjdump extracts from ``fatbin`` (a multiset)."""
    folder.mkdir()
    cuobjdump("-xelf", "all", "-xptx", "all", fatbin.resolve(), cwd=folder)
    return Counter(hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir())


@pytest.fixture(scope="module")
def pruned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, object]:
    lib = fetch(CURAND13)
    tmp = tmp_path_factory.mktemp("slim_hidden")
    plain = tmp / "plain.so"
    deep = tmp / "deep.so"
    prune(lib, plain, ["sm_90"])
    report = prune(lib, deep, ["sm_90"], everywhere=True)
    return lib, plain, deep, report


def test_hidden_containers_pruned_in_place(pruned: tuple[Path, Path, Path, object],
                                           tmp_path: Path) -> None:
    lib, plain, deep, report = pruned
    spans = _containers(lib)
    before = cuobjdump_list(_joined(lib, list(spans.values()), tmp_path / "in.fatbin"))
    assert len(before) == len(spans) == 1747  # one entry each, all listed by cuobjdump
    # the rule, from cuobjdump's listing of the input: an sm_90 GPU loads SASS sm_90, or PTX
    keep = [line for line in before if line.endswith((".sm_90.cubin", ".ptx"))]
    dropped = len(before) - len(keep)
    out_spans = _containers(deep)
    kept_spans = [s for s in out_spans.values() if s[1] - s[0] > 16]
    after = cuobjdump_list(_joined(deep, kept_spans, tmp_path / "out.fatbin"))
    strip = [line.split(":", 1)[1].split(".", 2)[-1] for line in keep]  # "sm_90.cubin", ...
    assert sorted(line.split(":", 1)[1].split(".", 2)[-1] for line in after) == sorted(strip)
    # the images themselves, as cuobjdump extracts them: the kept ones, unchanged
    kept_in = _joined(lib, [spans[c] for c, (a, b) in sorted(_containers(deep).items())
                            if b - a > 16], tmp_path / "kept.fatbin")
    assert _extracted(tmp_path / "out.fatbin", tmp_path / "x_out") == \
        _extracted(kept_in, tmp_path / "x_in")
    # in place: every container where it was (the file offsets shift only by what plain prune
    # cut from .nv_fatbin), its tail zero-filled, and everything else as plain prune wrote it
    shift = lib.stat().st_size - deep.stat().st_size
    assert deep.stat().st_size == plain.stat().st_size
    old, new, base = lib.read_bytes(), deep.read_bytes(), plain.read_bytes()
    emptied = 0
    for a, b in spans.values():
        at, end = a - shift, b - shift
        size = 16 + int.from_bytes(new[at + 8:at + 16], "little")
        assert new[at:at + 4] == b"\x50\xed\x55\xba" and size <= b - a
        assert new[at + size:end] == bytes(end - at - size)
        if size == b - a:
            assert new[at:end] == old[a:b]
        else:
            emptied += 1
    assert emptied == dropped
    holes = sorted((a - shift, b - shift) for a, b in spans.values())
    pos, rest_new, rest_base = 0, [], []
    for a, b in holes:
        rest_new.append(new[pos:a])
        rest_base.append(base[pos:a])
        pos = b
    assert b"".join(rest_new) + new[pos:] == b"".join(rest_base) + base[pos:]
    hidden = report.hidden  # type: ignore[attr-defined]
    assert (hidden.modules, hidden.rewritten, hidden.emptied, hidden.left) == \
        (1747, dropped, dropped, ())
    # freed: the dropped entries; an emptied container keeps its 16-byte header
    assert hidden.zero_filled == sum(b - a for a, b in spans.values()) - \
        sum(b - a for a, b in _containers(deep).values()) - 16 * emptied


def test_layout_is_plain_prunes(pruned: tuple[Path, Path, Path, object]) -> None:
    _, plain, deep, _ = pruned

    def table(path: Path) -> str:
        return subprocess.run(["readelf", "-lSW", str(path)], capture_output=True, text=True,
                              check=True).stdout.replace(str(path), "FILE")

    assert table(deep) == table(plain)


def test_output_read_back_judges_as_the_input(pruned: tuple[Path, Path, Path, object]) -> None:
    """``check --everywhere`` of the output: the same modules load on sm_90 as in the input;
    the emptied ones are empty containers, built for other GPUs as before."""
    import fatbinkit

    lib, _, deep, _ = pruned
    before = fatbinkit.open(lib, everywhere=True).check(["sm_90"]).verdicts[0]
    after = fatbinkit.open(deep, everywhere=True).check(["sm_90"]).verdicts[0]
    assert (after.modules, len(after.loading), len(after.restricted), len(after.jit)) == \
        (before.modules, len(before.loading), len(before.restricted), len(before.jit))
    assert len(after.entryless) > 0 and not before.entryless


def test_a_wheel_shrinks_through_the_zero_fill(tmp_path: Path) -> None:
    fetch(CURAND13)
    (wheel,) = sorted((CACHE / "wheels").glob("nvidia_curand-10.4.5.25-*manylinux*.whl"))
    plain = prune(wheel, tmp_path / "plain", ["sm_90"])
    deep = prune(wheel, tmp_path / "deep", ["sm_90"], everywhere=True)
    a, b = (plain.output, deep.output)  # type: ignore[union-attr]
    assert b.stat().st_size < a.stat().st_size  # type: ignore[union-attr]
    one = prune(fetch(CURAND13), None, ["sm_90"], everywhere=True)
    with zipfile.ZipFile(b) as z:  # type: ignore[arg-type]
        member = next(n for n in z.namelist() if n.endswith("libcurand.so.10"))
        assert z.read(member) == one.data


def _hidden_codes(path: Path) -> list[DeviceCode]:
    return [c for c in scan(path, everywhere=True) if c.hidden]


def test_recompress_in_place_keeps_every_image(tmp_path: Path) -> None:
    lib = fetch(CURAND13)
    out = tmp_path / "zstd.so"
    report = recompress(lib, out, codec="zstd", everywhere=True)
    before, after = _hidden_codes(lib), _hidden_codes(out)
    assert [(c.kind, c.target) for c in before] == [(c.kind, c.target) for c in after]
    assert report.hidden.rewritten > 0  # type: ignore[union-attr]
    assert sum(c.stored for c in after) < sum(c.stored for c in before)
    spans = list(_containers(lib).values())
    new_spans = list(_containers(out).values())
    assert _extracted(_joined(lib, spans, tmp_path / "a.fatbin"), tmp_path / "xa") == \
        _extracted(_joined(out, new_spans, tmp_path / "b.fatbin"), tmp_path / "xb")


def _c_array(name: str, data: bytes) -> str:
    body = ",".join(str(b) for b in data)
    return (f"__attribute__((used, aligned(8))) unsigned char {name}[{len(data)}] = "
            f"{{{body}}};\n")


def test_a_library_of_hidden_containers_alone(tmp_path: Path) -> None:
    """gcc builds a library with no ``.nv_fatbin`` whose ``.data`` holds two containers:
    SASS sm_80 + SASS sm_90 + PTX (LZ4), and a zstd PTX alone. ``prune --for sm_90
    --everywhere`` drops the sm_80 cubin where it is; ``recompress --codec lz4 --everywhere``
    leaves the zstd PTX's container as it was (LZ4 stores it larger: it would not fit), and
    says so; cuobjdump lists the output's containers as the rule says."""
    import lz4.block
    from cudabuild import NVCC, need, run
    from fatbin_kernels import SOURCE

    from fatbinkit.formats.arch import Arch
    from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry

    nvcc = need(NVCC)
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    images = {}
    for flag, name in (("-cubin -arch=sm_80", "k80"), ("-cubin -arch=sm_90", "k90"),
                       ("-ptx -arch=compute_90", "ptx")):
        run([nvcc, *flag.split(), "-o", tmp_path / name, src])
        images[name] = (tmp_path / name).read_bytes()
    mixed = build_fatbin([
        make_entry(EntryKind.ELF, Arch(80), images["k80"], compression="lz4"),
        make_entry(EntryKind.ELF, Arch(90), images["k90"], compression="lz4"),
        make_entry(EntryKind.PTX, Arch(90), images["ptx"], compression="lz4")])
    zstd_ptx = make_entry(EntryKind.PTX, Arch(90), images["ptx"], compression="zstd")
    ptx_only = build_fatbin([zstd_ptx])
    # LZ4 stores this PTX larger than zstd does (padded to 8): rewritten, it would not fit
    assert len(lz4.block.compress(images["ptx"], store_size=False)) > zstd_ptx.header.size + 8
    (tmp_path / "host.c").write_text(_c_array("hid_mixed", mixed) +
                                     _c_array("hid_ptx", ptx_only))
    lib = tmp_path / "libhost.so"
    run(["gcc", "-shared", "-fPIC", "-o", lib, tmp_path / "host.c"])
    assert scan(lib) == ()
    spans = sorted(_containers(lib).values())
    assert len(spans) == 2

    out = tmp_path / "pruned.so"
    report = prune(lib, out, ["sm_90"], everywhere=True)
    assert out.stat().st_size == lib.stat().st_size
    listing = cuobjdump_list(_joined(out, sorted(_containers(out).values()),
                                     tmp_path / "p.fatbin"))
    assert [line.split(":", 1)[1].rsplit(".", 2)[-2:] for line in listing] == \
        [["sm_90", "cubin"], ["sm_90", "ptx"], ["sm_90", "ptx"]]
    assert (report.hidden.modules, report.hidden.rewritten) == (2, 1)  # type: ignore[union-attr]

    same = tmp_path / "lz4.so"
    report = recompress(lib, same, codec="lz4", everywhere=True)
    (a, b) = spans[1]
    assert report.hidden.left == (  # type: ignore[union-attr]
        ("containers that rewritten would not fit in place", 1, b - a),)
    assert same.read_bytes()[a:b] == lib.read_bytes()[a:b]


def test_raw_zstd_cubins_are_left_and_reported(tmp_path: Path) -> None:
    """cuBLASLt 13.1.1.3: its 383 ``.cask_resource`` containers (sm_100a/f, sm_103f, sm_120f
    SASS only) are emptied for sm_90; its 393 zstd-compressed cubins, whose sizes its tables
    record, are left as they were, byte for byte."""
    lib = fetch(CUBLASLT131)
    out = tmp_path / "lt.so"
    report = prune(lib, out, ["sm_90"], everywhere=True)
    containers = _containers(lib)
    raw = [c for c in _hidden_codes(lib) if c.compression == "zstd" and
           c.container not in containers]
    hidden = report.hidden  # type: ignore[attr-defined]
    assert hidden.left == (("zstd-compressed cubins", len(raw), sum(c.stored for c in raw)),)
    assert (hidden.modules, hidden.emptied) == (383, 383)
    shift = lib.stat().st_size - out.stat().st_size
    old, new = lib.read_bytes(), out.read_bytes()
    for c in raw:
        assert new[c.offset - shift:c.offset - shift + c.stored] == \
            old[c.offset:c.offset + c.stored]


def test_cli_report_in_json_and_text(tmp_path: Path) -> None:
    import json
    import sys

    import jsonschema

    root = Path(__file__).resolve().parent.parent
    schema = json.loads((root / "docs" / "json-schema.json").read_text())
    lib = fetch(CURAND13)
    run = subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o",
                          str(tmp_path / "o.so"), "--for", "sm_90", "--everywhere", "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(run.stdout)
    jsonschema.validate(doc, schema)
    assert doc["hidden"]["modules"] == len(_containers(lib))
    text = subprocess.run([sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o",
                           str(tmp_path / "t.so"), "--for", "sm_90", "--everywhere"],
                          capture_output=True, text=True, check=True).stdout
    assert f"hidden (outside .nv_fatbin): {doc['hidden']['rewritten']} of " \
           f"{doc['hidden']['modules']} containers rewritten in place" in text
    plain = json.loads(subprocess.run(
        [sys.executable, "-m", "fatbinkit", "prune", str(lib), "-o", str(tmp_path / "p.so"),
         "--for", "sm_90", "--json"], capture_output=True, text=True, check=True).stdout)
    assert "hidden" not in plain


def test_a_windows_dll(tmp_path: Path) -> None:
    """cuRAND's DLL keeps the same 1,747 containers in ``.data``: pruned in place as in the
    ELF library (cuobjdump's listing of the rewritten containers by the same rule), and the
    section table as plain ``prune`` writes it (pefile)."""
    import pefile
    from thirdparty import CURAND13_WIN

    dll = fetch(CURAND13_WIN)
    plain, deep = tmp_path / "plain.dll", tmp_path / "deep.dll"
    prune(dll, plain, ["sm_90"], strip_signature=True)
    report = prune(dll, deep, ["sm_90"], strip_signature=True, everywhere=True)

    def table(path: Path) -> list[tuple[bytes, int, int, int, int]]:
        pe = pefile.PE(str(path), fast_load=True)
        return [(s.Name, s.VirtualAddress, s.Misc_VirtualSize, s.PointerToRawData,
                 s.SizeOfRawData) for s in pe.sections]

    assert table(deep) == table(plain)
    before = cuobjdump_list(_joined(dll, list(_containers(dll).values()), tmp_path / "a.fatbin"))
    keep = sorted(line.split(":", 1)[1].split(".", 2)[-1] for line in before
                  if line.endswith((".sm_90.cubin", ".ptx")))
    kept = [s for s in _containers(deep).values() if s[1] - s[0] > 16]
    after = cuobjdump_list(_joined(deep, kept, tmp_path / "b.fatbin"))
    assert sorted(line.split(":", 1)[1].split(".", 2)[-1] for line in after) == keep
    hidden = report.hidden  # type: ignore[union-attr]
    assert (hidden.modules, hidden.emptied) == (len(before), len(before) - len(keep))
