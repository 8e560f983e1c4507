"""The vendor seam is real: a vendor defined here, with a toy format, plugs in through
:func:`fatbinkit.vendors.registered` alone, and ``ls``, ``ls --summary``, ``extract``, ``check``
and ``diff`` work on it, in Python and on the command line, with no change to binary, collection,
diff or gate (issue 28).

The toy format: a file (or a blob embedded in an ELF object between ``__X_start``/``__X_end``
symbols, written here by gcc's assembler with ``.incbin``) that starts ``TOYGPU1\\n``, then a line
``target toyN`` and one line ``kernel NAME`` per kernel. A toy GPU ``toyM`` (M = 1..4) loads an
image built for ``toyN`` when N <= M, the newest such. The expected answers below follow from
that rule, written out by hand.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import subprocess
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import fatbinkit
from fatbinkit import vendors
from fatbinkit.cli import main
from fatbinkit.decision import LOADS, NATIVE, NO_IMAGE, NONE, Decision, ImageInfo, Verdict
from fatbinkit.device_code import DeviceCode, EntrylessContainer, Place
from fatbinkit.diff import diff, snapshot
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.imagesets import ImageSet
from fatbinkit.report import report

MAGIC = b"TOYGPU1\n"
_TARGET = re.compile(r"toy([1-4])")


@dataclass(frozen=True, order=True)
class ToyGpu:
    """A toy target: an image's (``toy2``) or a GPU's."""

    n: int

    def __str__(self) -> str:
        return f"toy{self.n}"


def _parse(data: bytes) -> tuple[ToyGpu, list[str]]:
    lines = data.decode().splitlines()[1:]
    target = ToyGpu(int(lines[0].removeprefix("target toy")))
    return target, [line.removeprefix("kernel ") for line in lines[1:]]


@dataclass(frozen=True)
class ToyPayload:
    """The toy vendor's record of one image (a :class:`fatbinkit.device_code.Payload`)."""

    stored: Any
    offset: int = 0
    vendor = "toy"
    image_kind = "toyk"

    @property
    def target(self) -> str:
        return str(_parse(bytes(self.stored))[0])

    @property
    def size(self) -> int:
        return len(self.stored)

    @property
    def data_size(self) -> int:
        return len(self.stored)

    compression = None
    identifier = ""

    @property
    def name(self) -> str:
        return f"TOY {self.target}"

    def data(self, max_size: int = 1 << 30, budget: object = None) -> bytes:
        return bytes(self.stored)

    def detached(self) -> ToyPayload:
        return replace(self, stored=bytes(self.stored))


@dataclass(frozen=True)
class ToyFilter:
    """``--arch toy3``: the images built for toy3 (and the toy3 GPU)."""

    target: str

    def matches(self, kind: str, target: str) -> bool:
        return target == self.target

    def matches_device(self, device: str) -> bool:
        return device == self.target

    def __str__(self) -> str:
        return self.target


@dataclass(frozen=True)
class ToyVendor:
    """The toy rules as a :class:`fatbinkit.vendors.Vendor`."""

    name: str = "toy"
    kinds: tuple[str, ...] = ("toyk",)
    function_kinds: frozenset[str] = frozenset()
    compressed_apart: bool = True
    loadable: frozenset[str] = frozenset({"toyk"})
    machines: frozenset[int] = frozenset()
    not_found: str = "TOY_ERROR_NOT_FOUND"

    def sections(self, present: Collection[str], all: bool, pe: bool) -> frozenset[str]:
        return frozenset()

    def read(self, place: Place, claimed: bool,
             ) -> tuple[list[DeviceCode], list[EntrylessContainer]] | None:
        if bytes(place.view[:len(MAGIC)]) != MAGIC:
            return None
        return [DeviceCode(place.source, -1, ToyPayload(place.view, place.base), place.base)], []

    def device(self, value: object, what: str = "GPU arch") -> ToyGpu | None:
        if isinstance(value, ToyGpu):
            return value
        m = _TARGET.fullmatch(str(value))
        return ToyGpu(int(m.group(1))) if m else None

    def runtime(self, value: object, what: str = "driver") -> tuple[int, int]:
        raise InvalidArgumentError("toy GPUs have no driver")

    runtime_label: str = "toy"
    words: Any = field(compare=False, default_factory=lambda: {
        "native": "toy code", "native_key": "toy", "jit": "toy JIT", "floors": "toy floors",
        "version": "", "versions_key": "",
        "runtime": "toy runtime", "unchecked": "toy floors not checked",
        "jit_note": "toy JIT: never"})

    def runtime_text(self, version: tuple[int, int], host: str | None = None,
                     release: Any = None) -> str:
        return f"toy runtime {version[0]}.{version[1]}"

    def runtime_name(self, version: tuple[int, int]) -> str:
        return f"{version[0]}.{version[1]}"

    def last_runtime(self, device: Any) -> tuple[int, int] | None:
        return None

    def gap(self, device: Any, need: tuple[int, int]) -> str | None:
        return None

    def every_device(self, codes: Sequence[DeviceCode] = ()) -> tuple[ToyGpu, ...]:
        return tuple(ToyGpu(n) for n in range(1, 5))

    def target_filter(self, value: object) -> ToyFilter | None:
        return ToyFilter(str(value)) if _TARGET.fullmatch(str(value)) else None

    def sort_key(self, kind: str, target: str) -> tuple[Any, ...]:
        return (int(target.removeprefix("toy")),)

    def target_kind(self, target: str) -> str | None:
        return "toyk" if _TARGET.fullmatch(target) else None

    def target_key(self, target: str) -> tuple[Any, ...]:
        return (int(target.removeprefix("toy")),)

    def fingerprint(self, code: DeviceCode) -> bytes:
        return code.target.encode()

    def profile(self, code: DeviceCode) -> tuple[ImageInfo, list[tuple[Any, ...]]]:
        image = self.image(code)
        return image, [(k, True) for k in sorted(image.kernels or ())]

    def file_suffix(self, code: DeviceCode) -> str:
        return f".{code.target}.toy"

    def version(self, code: DeviceCode) -> str | None:
        return None

    def details(self, code: DeviceCode) -> dict[str, Any]:
        return {"toy_kernels": len(_parse(code.data())[1])}

    def image_details(self, image: ImageInfo) -> dict[str, Any]:
        return {}

    def runtime_numbers(self, release: Any, host: str | None) -> dict[str, Any]:
        return {}

    def outline(self, code: DeviceCode) -> tuple[list[str], tuple[int, int] | None]:
        return sorted(_parse(code.data())[1]), None

    def toolkit_name(self, toolkit: tuple[int, int]) -> str:
        return f"toy {toolkit}"

    def functions(self, code: DeviceCode) -> tuple[Any, ...]:
        return ()

    def function_code(self, code: DeviceCode, data: bytes) -> tuple[tuple[str, bytes], ...]:
        return ()

    def search(self, place: Place) -> tuple[list[DeviceCode], list[EntrylessContainer]]:
        return [], []

    def header_image(self, code: DeviceCode, label: str = "") -> ImageInfo | None:
        return ImageInfo("toyk", _parse(code.data())[0], label=label)

    def image(self, code: DeviceCode, budget: object = None) -> ImageInfo:
        target, kernels = _parse(code.data())
        return ImageInfo("toyk", target, label=f"image at {code.offset:#x}",
                         kernels=frozenset(kernels), offset=code.offset)

    def may_load(self, image: ImageInfo, device: Any) -> bool:
        return bool(image.arch.n <= device.n)

    def extracted(self, code: DeviceCode, budget: object = None) -> bytes:
        return code.data()

    def devices(self, images: Iterable[ImageInfo]) -> tuple[str, ...]:
        return tuple(str(d) for d in self.every_device())

    def generation(self, device: str) -> str:
        return f"Toy {device.removeprefix('toy')}"

    def decide(self, images: Iterable[ImageInfo], device: Any, runtime: Any = None, *,
               raw: bool = False) -> Decision:
        images = tuple(images)
        gpu = self.device(device)
        assert gpu is not None
        fits = [i for i in images if self.may_load(i, gpu)]
        verdicts = tuple(Verdict(i, i in fits, f"{i.arch} {'<=' if i in fits else '>'} {gpu}")
                         for i in images)
        if not fits:
            return Decision(gpu, None, None, NONE, f"nothing for {gpu}", "TOY_ERROR_NO_IMAGE",
                            verdicts, outcome=NO_IMAGE)
        best = max(fits, key=lambda i: i.arch)
        return Decision(gpu, None, best, NATIVE, f"{best.arch} runs on {gpu}", None, verdicts,
                        outcome=LOADS)

    def floors(self, image: ImageInfo) -> tuple[tuple[Any, ...], tuple[str, ...]]:
        return (), ()

    def decision_key(self, image: ImageInfo, device: Any) -> Any:
        return image.kind, image.arch


def toy_image(target: str, *kernels: str) -> bytes:
    return MAGIC + f"target {target}\n".encode() + b"".join(
        f"kernel {k}\n".encode() for k in kernels)


@pytest.fixture(autouse=True)
def toy() -> Iterator[ToyVendor]:
    with vendors.registered(ToyVendor()) as vendor:
        yield vendor  # type: ignore[misc]


def _object(tmp_path: Path, name: str, blobs: dict[str, bytes]) -> Path:
    """An ELF object holding each blob between ``__NAME_start`` and ``__NAME_end`` (gcc)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is needed to write an ELF object")
    asm = [".section .rodata"]
    for key, data in blobs.items():
        path = tmp_path / f"{name}.{key}.bin"
        path.write_bytes(data)
        asm += [f".globl __{key}_start", f"__{key}_start:", f'.incbin "{path}"',
                f".globl __{key}_end", f"__{key}_end:"]
    src = tmp_path / f"{name}.s"
    src.write_text("\n".join(asm) + "\n")
    out = tmp_path / f"{name}.o"
    subprocess.run([gcc, "-c", str(src), "-o", str(out)], check=True)
    return out


def test_a_bare_toy_file_lists(tmp_path: Path) -> None:
    path = tmp_path / "k.toy"
    path.write_bytes(toy_image("toy2", "add", "mul"))
    with fatbinkit.open(path) as lib:
        (item,) = lib.select()
        assert (item.kind, item.arch, item.stored, item.uncompressed) == (
            "toyk", "toy2", path.stat().st_size, path.stat().st_size)
        assert item.code.vendor == "toy"
        row = item.to_dict()
        assert (row["kind"], row["arch"], row["section"], row["container"]) == (
            "toyk", "toy2", None, None)
        assert (row["vendor"], row["toy_kernels"]) == ("toy", 2)  # the vendor's own members
        assert "ptx_version" not in row
        assert pickle.loads(pickle.dumps(item)).code.data() == path.read_bytes()
        summary = lib.summary(kernels=True)
        (arch,) = summary.archs
        assert (arch.kind, arch.arch, arch.entries, arch.kernels) == ("toyk", "toy2", 1, 2)
        verdicts = {d.device: d.verdict for d in summary.devices}
        assert verdicts == {"toy1": "none", "toy2": "native", "toy3": "native",
                            "toy4": "native"}
        out = tmp_path / "out"
        assert [p.name for p in lib.extract(out)] == ["k.toy2.toy"]
        assert (out / "k.toy2.toy").read_bytes() == path.read_bytes()


def test_embedded_toy_blobs_list_and_check(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    obj = _object(tmp_path, "lib", {"old": toy_image("toy1", "add"),
                                    "new": toy_image("toy3", "add", "mul")})
    lib = fatbinkit.open(obj)
    assert [(i.arch, i.code.source) for i in lib.select()] == [
        ("toy1", "__old_start"), ("toy3", "__new_start")]
    assert [i.arch for i in lib.select(kernel="mul")] == ["toy3"]
    assert [i.arch for i in lib.select(arch="toy1")] == ["toy1"]
    assert [i.arch for i in lib.select(arch=["sm_90", "toy3"])] == ["toy3"]
    check = lib.check(["toy1", "toy2", "toy3"])
    status = {str(v.device): v.status for v in check.verdicts}
    # toy1 and toy2 load only the toy1 image (its module); the toy3 module is built for others
    assert status == {"toy1": "partial", "toy2": "partial", "toy3": "works"}
    assert check.ok and not check.strict_ok
    assert main(["check", str(obj), "--arch", "toy3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["archs"] == ["toy3"] and doc["verdicts"]["toy3"]["status"] == "works"
    assert main(["check", str(obj), "--arch", "toy1", "--strict"]) == 1
    capsys.readouterr()
    assert main(["ls", "--arch", "toy3", "--json", str(obj)]) == 0
    assert [e["arch"] for e in json.loads(capsys.readouterr().out)["entries"]] == ["toy3"]
    assert main(["ls", "--summary", "--json", str(obj)]) == 0
    rows = json.loads(capsys.readouterr().out)["archs"]
    assert [(r["kind"], r["arch"]) for r in rows] == [("toyk", "toy1"), ("toyk", "toy3")]


def test_diff_of_two_toy_builds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = _object(tmp_path, "old", {"k": toy_image("toy2", "add", "mul")})
    new = _object(tmp_path, "new", {"k": toy_image("toy2", "add")})
    d = diff(snapshot(old), snapshot(new))
    assert [(k.kernel, k.arch, k.kind) for k in d.removed] == [("mul", "toy2", "toyk")]
    assert not d.added and d.unchanged == 1
    assert main(["diff", str(old), str(new), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [k["kernel"] for k in doc["removed"]] == ["mul"]


def test_a_report_of_toy_builds(tmp_path: Path) -> None:
    """`fatbinkit report` on a toy library, against an older one, with no change to the
    report: its coverage cells are check's verdicts, its what-if weighs the toy GPUs asked
    for, the comparison is diff's, the page is written."""
    pytest.importorskip("plotly", reason="the page needs the report extra (plotly)")
    old = _object(tmp_path, "old", {"k": toy_image("toy2", "add", "mul")})
    new = _object(tmp_path, "new", {"a": toy_image("toy1", "add"),
                                    "b": toy_image("toy3", "add", "mul")})
    made = report(new, old, keep=[["toy1"], ["toy3"]])
    doc = made.to_dict()
    (lib,) = doc["libraries"]
    check = fatbinkit.open(new).check(doc["devices"])
    assert {d: c["verdict"] for d, c in lib["coverage"].items()} == {
        str(v.device): v.status for v in check.verdicts}
    device_code = sum(i.stored for i in fatbinkit.open(new).select())
    assert [w["gpus"] for w in lib["what_if"]] == [["toy1"], ["toy3"]]
    assert all(w["kept"] + w["dropped"] == device_code for w in lib["what_if"])
    assert doc["comparison"]["summary"] == diff(snapshot(old), snapshot(new)).to_dict()["summary"]
    page = tmp_path / "r.html"
    made.write(page)
    assert 'id="fatbinkit-report"' in page.read_text()


def test_a_cuda_gpu_and_a_toy_module_do_not_mix(tmp_path: Path) -> None:
    path = tmp_path / "k.toy"
    path.write_bytes(toy_image("toy2", "add"))
    check = fatbinkit.open(path).check(["sm_90", "toy2"])
    status = {str(v.device): v.status for v in check.verdicts}
    assert status == {"sm_90": "fails", "toy2": "works"}
    assert "no module holds an image for sm_90" in check.verdicts[0].reason


def test_a_vendor_name_is_registered_once() -> None:
    with pytest.raises(InvalidArgumentError, match="registered already"):
        vendors.register(ToyVendor())
    with pytest.raises(InvalidArgumentError, match="no vendor named 'amd'"):
        ImageSet("m", (), vendor="amd")


def test_cuda_is_asked_first_and_speaks_as_before() -> None:
    """With another vendor registered, NVIDIA's spellings still mean what they meant, in the
    order and words the tests of the CUDA side pin down (a table written by hand)."""
    assert vendors.target_kind("compute_90") == "ptx"
    assert vendors.target_kind("sm_90a") == "sass"
    assert vendors.target_kind("toy2") == "toyk"
    names = ["toy2", "compute_90", "sm_100", "sm_90a", "sm_80", "toy1"]
    assert sorted(names, key=vendors.target_key) == [
        "sm_80", "sm_90a", "sm_100", "compute_90", "toy1", "toy2"]
    rows = [("sass", "sm_90"), ("ptx", "compute_90"), ("ltoir", "sm_90"), ("sass", "sm_80"),
            ("toyk", "toy3")]
    assert sorted(rows, key=lambda r: vendors.row_key(*r)) == [
        ("ptx", "compute_90"), ("sass", "sm_80"), ("sass", "sm_90"), ("ltoir", "sm_90"),
        ("toyk", "toy3")]
    assert vendors.device("toy4")[1] == ToyGpu(4)
    with pytest.raises(InvalidArgumentError, match=r"no NVIDIA GPU has compute capability 9\.1"):
        vendors.device("sm_91")
    with pytest.raises(InvalidArgumentError, match="device"):
        vendors.device("toy9", "device")


def test_a_driver_goes_with_one_vendors_gpus(tmp_path: Path) -> None:
    path = tmp_path / "k.toy"
    path.write_bytes(toy_image("toy2", "add"))
    lib = fatbinkit.open(path)
    with pytest.raises(InvalidArgumentError, match="GPUs of one vendor, not of cuda and toy"):
        lib.check(["sm_90", "toy2"], "12.8")
    # the lowest driver per GPU of the vendors the file has images of (the toy's: no driver)
    assert [str(a.device) for a in lib.min_driver().archs] == ["toy1", "toy2", "toy3", "toy4"]
