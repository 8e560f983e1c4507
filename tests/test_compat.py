"""The loading rules on every arch pair from sm_75 to sm_121, from NVIDIA's documented rules.

The expected answers are written here from the documents, in compute-capability terms, not taken
from the implementation:

* CUDA C++ Programming Guide, "Binary Compatibility": "binary compatibility is guaranteed from one
  minor revision to the next one, but not from one minor revision to the previous one or across
  major revisions" -- a cubin for X.y runs on X.z with z >= y.
* Same guide, "PTX Compatibility": PTX for a compute capability compiles to binary code of greater
  or equal compute capability.
* Same guide, "Feature Set Compiler Targets", and the PTX ISA ``.target`` notes: ``a`` (arch-
  specific) code runs only on exactly its compute capability; ``f`` (family-specific) code runs on
  devices of the same family with an equal or higher minor (NVIDIA blog "NVIDIA Blackwell and
  NVIDIA CUDA 12.9 Introduce Family-Specific Architecture Features": sm_100f on 10.0 and 10.3).
* PTX ISA release history: the CUDA release that introduced each PTX ISA version; a driver JITs
  only PTX ISA versions it knows (CUDA_ERROR_UNSUPPORTED_PTX_VERSION otherwise).
"""

from __future__ import annotations

import json
import struct

import pytest
from cudabuild import Builds, builds  # noqa: F401

from fatbinkit.compat import (
    INVALID_PTX,
    NO_BINARY,
    PTX,
    SASS,
    UNSUPPORTED_PTX,
    ImageInfo,
    decide,
    image_from_bytes,
    image_sets,
    predict_load,
    ptx_jits_for,
    sass_runs_on,
)
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.arch import Arch

# Devices from compute capability 7.5 to 12.1 (CUDA 13 supports sm_75 and newer).
DEVICES = ["7.5", "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1"]
# Targets: plain for every CC; `a` from 9.0 on (sm_90a is the first); `f` from 10.0 on.
TARGETS = [(cc, "") for cc in DEVICES] + [(cc, "a") for cc in DEVICES if int(cc.split(".")[0]) >= 9]
TARGETS += [(cc, "f") for cc in DEVICES if int(cc.split(".")[0]) >= 10]


def cc(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def arch_of(text: str, suffix: str) -> Arch:
    major, minor = cc(text)
    return Arch.parse(f"sm_{major}{minor}{suffix}")


def documented_sass(target: str, suffix: str, device: str) -> bool:
    t, d = cc(target), cc(device)
    if suffix == "a":
        return t == d  # arch-specific: that compute capability only
    return t[0] == d[0] and d[1] >= t[1]  # same major revision, same or next minor revisions


def documented_ptx(target: str, suffix: str, device: str) -> bool:
    t, d = cc(target), cc(device)
    if suffix == "a":
        return t == d  # arch-specific PTX is not forward compatible
    if suffix == "f":
        return t[0] == d[0] and d[1] >= t[1]  # family: same major, equal or higher minor
    return d >= t  # greater or equal compute capability


@pytest.mark.parametrize("device", DEVICES)
def test_every_pair(device: str) -> None:
    dev = arch_of(device, "")
    for target, suffix in TARGETS:
        image = arch_of(target, suffix)
        assert sass_runs_on(image, dev) == documented_sass(target, suffix, device), (image, dev)
        assert ptx_jits_for(image, dev) == documented_ptx(target, suffix, device), (image, dev)
        # the engine agrees with the predicates, image by image, without a driver limit
        sass = decide([ImageInfo(SASS, image)], dev)
        assert sass.loadable == documented_sass(target, suffix, device)
        assert sass.error == (None if sass.loadable else NO_BINARY)
        ptx = decide([ImageInfo(PTX, image, (9, 0))], dev, (13, 0))
        assert ptx.loadable == documented_ptx(target, suffix, device)
        assert ptx.how == ("ptx-jit" if ptx.loadable else "none")


def test_documented_examples() -> None:
    A = Arch.parse
    assert sass_runs_on(A("sm_86"), A("sm_89")) and not sass_runs_on(A("sm_86"), A("sm_80"))
    assert not sass_runs_on(A("sm_80"), A("sm_90"))  # never across major revisions
    assert [d for d in DEVICES if sass_runs_on(A("sm_100f"), arch_of(d, ""))] == ["10.0", "10.3"]
    assert [d for d in DEVICES if sass_runs_on(A("sm_120f"), arch_of(d, ""))] == ["12.0", "12.1"]
    assert [d for d in DEVICES if ptx_jits_for(A("compute_90a"), arch_of(d, ""))] == ["9.0"]
    assert [d for d in DEVICES if ptx_jits_for(A("compute_80"), arch_of(d, ""))] == DEVICES[1:]


def _img(name: str, isa: tuple[int, int] | None = None) -> ImageInfo:
    arch = Arch.parse(name)
    return ImageInfo(PTX if name.startswith("compute") else SASS, arch, isa)


@pytest.mark.parametrize("images, device, expected", [
    (["sm_90", "sm_90a"], "sm_90", "sm_90a"),  # exact arch-specific SASS first
    (["sm_90a", "sm_90"], "sm_90", "sm_90a"),
    (["sm_80", "sm_86"], "sm_89", "sm_86"),  # highest compatible minor
    (["sm_80", "compute_86"], "sm_86", "sm_80"),  # compatible SASS before PTX JIT
    (["compute_80", "compute_90"], "sm_90", "compute_90"),  # highest compatible PTX
    (["compute_90a", "compute_80"], "sm_100", "compute_80"),  # `a` PTX never moves
    (["sm_100f", "sm_100"], "sm_103", "sm_100f"),
    (["sm_120", "compute_100f"], "sm_103", "compute_100f"),
])
def test_preference(images: list[str], device: str, expected: str) -> None:
    d = decide([_img(n, (9, 0) if n.startswith("compute") else None) for n in images],
               Arch.parse(device), (13, 0))
    assert d.image is not None
    assert (d.image.arch.compute if d.image.kind == PTX else d.image.arch.sm) == expected


def test_driver_limits_ptx_but_not_sass() -> None:
    A = Arch.parse
    # PTX ISA 9.1 came with CUDA 13.1: a 13.0 driver refuses it
    d = decide([_img("compute_80", (9, 1))], A("sm_90"), (13, 0))
    assert not d.loadable and d.error == UNSUPPORTED_PTX and "13.1" in d.reason
    assert decide([_img("compute_80", (9, 0))], A("sm_90"), (13, 0)).how == "ptx-jit"
    # PTX ISA 8.6 came with 12.7, not 12.6 (minor-version compatibility does not cover PTX)
    assert decide([_img("compute_80", (8, 6))], A("sm_90"), (12, 6)).error == UNSUPPORTED_PTX
    # an absurd future ISA is refused, and reported as unknown
    d = decide([_img("compute_80", (9, 9))], A("sm_90"), (13, 0))
    assert d.error == UNSUPPORTED_PTX and "newer than any known" in d.reason
    # no driver given: no PTX version limit
    assert decide([_img("compute_80", (9, 9))], A("sm_90")).loadable
    # SASS does not need a PTX-capable driver
    assert decide([_img("sm_90"), _img("compute_90", (9, 9))], A("sm_90"), (12, 0)).how == "sass"
    # the driver picks the highest-arch PTX first and fails if it is too new, with no fall
    # back to an older usable one (seen on the H200, R580: tests/gpu/test_check_gpu.py)
    d = decide([_img("compute_90", (9, 9)), _img("compute_80", (8, 0))], A("sm_90"), (13, 0))
    assert d.image is None and d.error == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    assert "does not fall back to compute_80" in d.reason


def test_errors_name_what_is_there() -> None:
    A = Arch.parse
    d = decide([_img("sm_80"), _img("sm_100")], A("sm_90"), (13, 0))
    assert d.error == NO_BINARY and "sm_100" in d.reason and "sm_80" in d.reason
    assert decide([], A("sm_90")).error == NO_BINARY
    # a bare PTX whose target the device cannot take fails in the JIT, not in image selection
    assert decide([_img("compute_100", (9, 0))], A("sm_90"), raw=True).error == INVALID_PTX
    assert decide([_img("compute_100", (9, 0))], A("sm_90")).error == NO_BINARY
    # the device is a compute capability: a suffix on it is ignored
    assert decide([_img("sm_90a")], A("sm_90a")).device == A("sm_90")
    assert json.loads(json.dumps(d.to_dict()))["error"] == NO_BINARY


def test_image_validation() -> None:
    with pytest.raises(InvalidArgumentError):
        ImageInfo("elf", Arch(90))
    with pytest.raises(InvalidArgumentError):
        ImageInfo(PTX, Arch(90))


def test_images_from_built_binaries(builds: Builds) -> None:  # noqa: F811
    img = image_from_bytes((builds.root / "nvcc_sm90a.cubin").read_bytes(), "k.cubin")
    assert (img.kind, img.arch, img.label) == (SASS, Arch(90, "a"), "k.cubin")
    assert img.kernels is not None and "k_simple" in img.kernels
    assert "_Z6helperfi" not in img.kernels
    ptx = image_from_bytes(builds.ptx["compute_100f"].read_bytes())
    assert (ptx.kind, ptx.arch, ptx.ptx_version) == (PTX, Arch(100, "f"), (9, 0))
    with pytest.raises(InvalidArgumentError):
        image_from_bytes(b"hello")


def test_predict_load_reads_the_first_container_only(builds: Builds) -> None:  # noqa: F811
    from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry

    sm80 = (builds.root / "nvcc_sm80.cubin").read_bytes()
    sm90 = (builds.root / "nvcc_sm90.cubin").read_bytes()
    first = build_fatbin([make_entry(EntryKind.ELF, Arch(80), sm80)])
    second = build_fatbin([make_entry(EntryKind.ELF, Arch(90), sm90)])
    picked = predict_load(first + second, Arch(86)).image
    assert picked is not None and (picked.kind, picked.arch) == (SASS, Arch(80))
    assert predict_load(first + second, Arch(90)).error == NO_BINARY
    assert predict_load(sm90, Arch(90), (13, 0)).how == "sass"


def test_an_unreadable_cubin_does_not_hide_the_verdict(builds: Builds) -> None:  # noqa: F811
    """A cubin fatbinkit cannot parse (here: its symbol table links to a missing section) is
    kept as an image of its entry's arch, with a warning, instead of failing the whole file."""
    from fatbinkit.formats import elf
    from fatbinkit.formats.fatbin import EntryKind, build_fatbin, make_entry

    sm80 = bytearray((builds.root / "nvcc_sm80.cubin").read_bytes())
    head = elf.file_header(sm80)
    symtab = next(s for s in elf.sections(sm80, head) if s.name == ".symtab")
    struct.pack_into("<I", sm80, head.shoff + symtab.index * head.shentsize + 40, 999)
    sm90 = (builds.root / "nvcc_sm90.cubin").read_bytes()
    blob = build_fatbin([make_entry(EntryKind.ELF, Arch(80), bytes(sm80)),
                         make_entry(EntryKind.ELF, Arch(90), sm90)])
    (s,) = image_sets(blob)
    broken = next(i for i in s.images if i.arch == Arch(80))
    assert broken.unread and broken.kernels is None and broken.toolkit is None
    d = s.decide(Arch(86), (13, 0))
    assert d.how == "sass" and d.image is broken
    assert any("could not be read" in w for w in d.warnings)
    assert s.decide(Arch(90), (13, 0)).image.toolkit == (13, 0)  # type: ignore[union-attr]


def test_one_image_per_module_and_file_verdicts() -> None:
    """The driver loads one image per module (cuModuleLoadData), then cuModuleGetFunction finds
    a kernel in that image or returns CUDA_ERROR_NOT_FOUND: another image holding the kernel
    does not help. A file where only data-only modules load does not work."""
    from fatbinkit.compat import NOT_FOUND, ArchVerdict, ImageSet, file_verdict

    sass = ImageInfo(SASS, Arch(90), kernels=frozenset({"a"}), toolkit=(13, 0))
    ptx = ImageInfo(PTX, Arch(80), (8, 0), kernels=frozenset({"a", "b"}))
    module = ImageSet("m", (sass, ptx))
    assert module.decide(Arch(90), (13, 0), "a").image is sass
    b = module.decide(Arch(90), (13, 0), "b")
    assert b.error == NOT_FOUND and b.restricted and "compute_80" in b.reason
    assert module.decide(Arch(86), (13, 0), "b").how == "ptx-jit"  # no SASS for 8.6
    v = file_verdict([module], Arch(90), (13, 0))
    assert v.status == "partial" and v.missing == (("m", "b"),) and v.loading == ("m",)
    # kernels only for sm_100, data for everything: no kernel can run on sm_90
    kern = ImageSet("kern", (ImageInfo(SASS, Arch(100), kernels=frozenset({"k"})),))
    data = ImageSet("data", (ImageInfo(PTX, Arch(50), (8, 0), kernels=frozenset(),
                                       variables=True),))
    v = file_verdict([kern, data], Arch(90), (13, 0))
    assert v.status == "fails" and not v.ok and "no module with kernels" in v.reason
    assert isinstance(v, ArchVerdict)



def test_judged_equals_the_one_kernel_decisions() -> None:
    """ImageSet.judged (check's per-module path: one pick per GPU, the kernels every pick holds
    sharing one list) says for each kernel and GPU what decide(device, driver, kernel) says,
    with kernels that some GPUs' picks lack and GPUs that pick nothing."""
    from fatbinkit.compat import ImageSet

    images = (ImageInfo(SASS, Arch(80), kernels=frozenset({"a", "b"}), toolkit=(12, 4)),
              ImageInfo(SASS, Arch(90), kernels=frozenset({"a"}), toolkit=(12, 4)),
              ImageInfo(SASS, Arch(120), kernels=frozenset({"c"}), toolkit=(12, 8)),
              ImageInfo(PTX, Arch(90), (8, 4), kernels=frozenset({"a", "b", "c"})))
    module = ImageSet("m", images)
    gpus = [Arch(n) for n in (75, 80, 86, 90, 100, 120)]
    for driver in (None, (12, 4)):
        rows = module.judged(gpus, driver)
        assert [k for k, _ in rows] == ["a", "b", "c"]
        for kernel, decisions in rows:
            assert kernel is not None
            for gpu, d in zip(gpus, decisions, strict=True):
                one = module.decide(gpu, driver, kernel)
                assert (d.image, d.how, d.outcome, d.reason, d.error) == \
                    (one.image, one.how, one.outcome, one.reason, one.error), (kernel, gpu)
        by_kernel = dict(rows)
        assert by_kernel["b"][3].restricted and by_kernel["a"][3].image is images[1]
        assert by_kernel["c"][0].how == "none"
        assert by_kernel["c"][5].image is (images[2] if driver is None else None)  # 12.4: no sm_120
    empty = ImageSet("data", (ImageInfo(PTX, Arch(50), (8, 0), kernels=frozenset()),))
    assert [k for k, _ in empty.judged(gpus)] == [None]

def test_warnings_name_only_the_picked_image() -> None:
    unknown = ImageInfo(SASS, Arch(80), abi_version=7, label="old")  # no toolkit recorded
    known = ImageInfo(SASS, Arch(86), toolkit=(12, 9))
    assert decide([unknown, known], Arch(86), (13, 0)).warnings == ()
    (w,) = decide([unknown], Arch(86), (13, 0)).warnings
    assert "sm_80 (old)" in w and "not recorded" in w
