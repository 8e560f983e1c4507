"""A judgement decides each shape of module once (ImageSet.judged with ``shapes``): a module
whose images the vendor reads alike gets the decision made for the first such module, naming its
own images. The expected decisions are the modules' own, made without sharing anything: every field
equal, image included (ImageInfo's equality compares kernels, label and offset, so a decision
that named the first module's image would differ).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from thirdparty import ALL_TEST_MEMBERS, ROCM_TEST_MEMBERS, WheelMember, fetch

from fatbinkit import vendors
from fatbinkit.binary import judge
from fatbinkit.binary import open as open_binary
from fatbinkit.compat import ImageSet
from fatbinkit.decision import PTX, SASS, Decision, ImageInfo, Verdict
from fatbinkit.device_code import LINUX, WINDOWS
from fatbinkit.driver import as_cuda_version
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.arch import Arch
from fatbinkit.imagesets import Shapes, image_sets


def _sass(n: int, kernels: set[str], label: str, toolkit: tuple[int, int] | None = (12, 8),
          host: str | None = LINUX, offset: int = 0) -> ImageInfo:
    return ImageInfo(SASS, Arch(n), kernels=frozenset(kernels), label=label, toolkit=toolkit,
                     abi_version=None if toolkit else 7, host=host, offset=offset)


def _ptx(n: int, kernels: set[str], label: str, version: tuple[int, int] = (8, 7),
         target: Arch | None = None) -> ImageInfo:
    return ImageInfo(PTX, Arch(n), version, label=label, kernels=frozenset(kernels),
                     target=target, host=LINUX)


# modules, each with images written out: some of one shape (same archs, toolkits, PTX versions)
# and other kernels, labels and offsets; others that differ in one thing a decision reads
MODULES = [
    ImageSet("a", (_sass(80, {"a1"}, "entry at 0x10", offset=16), _sass(90, {"a1"}, "x"),
                   _ptx(90, {"a1"}, "p"))),
    ImageSet("b", (_sass(80, {"b1", "b2"}, "entry at 0x90", offset=144),
                   _sass(90, {"b1"}, "y"), _ptx(90, {"b1", "b2"}, "q"))),  # a's shape
    ImageSet("c", (_sass(80, {"c1"}, "c0"), _sass(90, {"c1"}, "c1"),
                   _ptx(90, {"c1"}, "c2", (9, 0)))),  # PTX ISA 9.0: another shape
    ImageSet("d", (_sass(80, {"d1"}, "d0", host=WINDOWS), _sass(90, {"d1"}, "d1", host=WINDOWS),
                   _ptx(90, {"d1"}, "d2"))),  # Windows: other driver numbers
    ImageSet("e", (_sass(80, {"e"}, "old one", toolkit=None),)),  # no toolkit: warns, naming it
    ImageSet("f", (_sass(80, {"f"}, "old two", toolkit=None),)),  # the same, another label
    ImageSet("g", (_ptx(90, {"g"}, "g", target=Arch(90, "a")),)),  # .target sm_90a
    ImageSet("h", (_ptx(90, {"h"}, "h"),)),
    ImageSet("i", (_ptx(90, {"i"}, "i"),), raw=True),  # a bare PTX: the JIT refuses
    ImageSet("j", (_sass(120, {"j"}, "j", toolkit=(12, 9)),)),
    ImageSet("k", (_sass(120, {"k"}, "k", toolkit=(13, 0)),)),  # a newer producer
    ImageSet("l", (_sass(120, {"l"}, "l", toolkit=(12, 9)),)),  # j's shape
    # torch's modules: cubins of other archs left unread (no toolkit known), labelled by their
    # offsets: alike on the GPUs those do not run on (90 and up), apart on the 7.x ones
    ImageSet("m", (_sass(75, {"m"}, "entry at 0x100", toolkit=None),
                   _sass(90, {"m"}, "m", toolkit=(13, 0)))),
    ImageSet("n", (_sass(75, {"n"}, "entry at 0x900", toolkit=None),
                   _sass(90, {"n"}, "n", toolkit=(13, 0)))),
]
GPUS = [Arch(n) for n in (75, 80, 86, 89, 90, 100, 120)]


@pytest.mark.parametrize("driver", [None, (12, 4), (12, 8), "575.51.03", (13, 0)])
def test_alike_modules_get_their_own_decisions(driver: object) -> None:
    shapes: Shapes = {}
    for module in MODULES:
        shared = module.judged(GPUS, driver, shapes)  # type: ignore[arg-type]
        own = module.judged(GPUS, driver)  # type: ignore[arg-type]
        assert shared == own, module.label
        for _, decisions in shared:
            for d in decisions:
                assert d.image is None or any(d.image is i for i in module.images)
                assert all(any(v.image is i for i in module.images) for v in d.verdicts)
    # a's and b's shape, j's and l's on every GPU; e's and f's where sm_80 does not run (75,
    # 90, 100, 120); m's and n's where sm_75 does not run (all but 75): each decided once
    alike = 2 * len(GPUS) + 4 + len(GPUS) - 1
    assert sum(len(per) for per in shapes.values()) == len(MODULES) * len(GPUS) - alike
    # the warning of a cubin with no toolkit names its own module's image, not the first's
    f = dict(MODULES[5].judged([Arch(86)], (13, 0), shapes))["f"][0]
    assert any("old two" in w for w in f.warnings) and not any("old one" in w for w in f.warnings)
    n = dict(MODULES[13].judged([Arch(75)], (13, 0), shapes))["n"][0]
    assert any("0x900" in w for w in n.warnings) and not any("0x100" in w for w in n.warnings)


def test_one_dict_over_drivers_and_future_gpus() -> None:
    """A dict kept over several judgements tells drivers apart by what they are (the driver
    450.51.06 equals the CUDA version 11.0 it stands for, and its floors are another's) and a
    future GPU from the one it is named after (an Arch's future flag is not part of its
    equality)."""
    module = ImageSet("m", (_sass(80, {"k"}, "m", toolkit=(11, 1)),))
    twin = ImageSet("t", (_sass(80, {"t"}, "t", toolkit=(11, 1)),))
    shapes: Shapes = {}
    for driver in [(11, 0), as_cuda_version("450.51.06"), as_cuda_version("450.80.02"), None]:
        for gpus in ([Arch(80)], [Arch(80, future=True)]):
            module.judged(gpus, driver, shapes)  # type: ignore[arg-type]
            assert twin.judged(gpus, driver, shapes) == twin.judged(gpus, driver)  # type: ignore[arg-type]
    assert twin.judged([Arch(80, future=True)], None, shapes)[0][1][0].device.future


def test_moved_keeps_every_field() -> None:
    """_moved makes a decision and its verdicts field by field (dataclasses.replace was too
    slow): a field added to either must be added there too."""
    import dataclasses

    assert [f.name for f in dataclasses.fields(Decision)] == [
        "device", "driver", "image", "how", "reason", "error", "verdicts", "floors", "floor",
        "warnings", "outcome"]
    assert [f.name for f in dataclasses.fields(Verdict)] == [
        "image", "usable", "reason", "error", "floor"]


def test_placing_and_keying_an_image_equal_replace() -> None:
    """ImageInfo.at is dataclasses.replace of offset and host, and ImageInfo.key(*without)
    tells two images apart exactly when replace(..., each of without cleared) does: over every
    image of MODULES, pairwise."""
    import dataclasses

    images = [i for m in MODULES for i in m.images]
    for image in images:
        placed = image.at(4096, WINDOWS)
        assert placed == dataclasses.replace(image, offset=4096, host=WINDOWS)
        assert placed is not image and image.offset != 4096 and type(placed) is ImageInfo
    without = ("kernels", "offset", "label")

    def cleared(i: ImageInfo) -> ImageInfo:
        return dataclasses.replace(i, kernels=None, offset=None, label="")

    for a in images:
        for b in images:
            assert (a.key(*without) == b.key(*without)) == (cleared(a) == cleared(b))
    with pytest.raises(InvalidArgumentError, match="no field 'kernel'"):
        images[0].key("kernel")


def _library(item: WheelMember) -> Path:
    return fetch(item)


@pytest.mark.parametrize("item", [*ALL_TEST_MEMBERS, *ROCM_TEST_MEMBERS],
                         ids=lambda m: f"{m.package}:{m.member.rpartition('/')[2]}")
def test_judge_equals_each_module_judged_alone(item: WheelMember) -> None:
    """``judge`` (check's and the report's path, sharing decisions among alike modules) equals
    each module judged on its own, on the suite's real libraries; on some of them modules do
    share a shape, so the sharing is exercised."""
    path = _library(item)
    binary = open_binary(path)
    sets = image_sets(path)
    devices = [d for _, d in (vendors.device(s.device, "GPU arch")
                              for s in binary.summary().devices)]
    drivers = [None, (12, 8)] if all(s.vendor == "cuda" for s in sets) else [None]
    for driver in drivers:
        checked = judge(path.name, sets, devices, driver)
        alone = [(s, s.judged(devices, driver)) for s in sets]
        assert [(s, ks) for s, ks in checked.rows] == alone


def test_real_libraries_share_shapes() -> None:
    """The sharing is not idle on real code: jax's CUDA 12 solver and cuFFT 11 have many
    modules of few shapes."""
    counted = []
    for item in ALL_TEST_MEMBERS:
        sets = image_sets(_library(item))
        shapes: Shapes = {}
        for s in sets:
            s.judged([Arch(90)], None, shapes)
        counted.append((len(sets), len(shapes)))
    assert any(shapes < modules for modules, shapes in counted), counted
