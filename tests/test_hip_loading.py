"""Which code object the HIP runtime loads, from a table written by hand from AMD's rules, not
from fatbinkit's code (issue 29).

The rules, as ROCm's sources state them (``../shared/ROCM.md`` §1.5): comgr's
``lookUpCodeObject``/``isCompatibleIsaName`` and ROCr's ``Isa::IsCompatible`` take a code object
for the device's processor whose every *specified* feature (sramecc, xnack) equals the
device's; CLR (``hip_fatbin.cpp``) tries the native processor first, then the generic target of
``TargetGenericMap`` (generic version >= 1), then SPIR-V, else "No compatible code objects found".
A device given as ``gfx942`` runs xnack off (``HSA_XNACK`` unset) and sramecc on (an Instinct
board); ``gfx906`` is also an Instinct part (MI50/MI60) in these rows.
"""

from __future__ import annotations

import pytest

from fatbinkit.decision import ImageInfo
from fatbinkit.errors import InvalidArgumentError
from fatbinkit.formats.amdgpu import TargetId
from fatbinkit.vendors.hip import HIP
from fatbinkit.vendors.hip.loading import CodeTarget


def _image(spec: str) -> ImageInfo:
    """``gfx942:xnack+`` a code object; ``gfx11-generic@1`` a generic one of generic version
    1; ``spirv`` SPIR-V."""
    if spec == "spirv":
        return ImageInfo("spirv", CodeTarget(TargetId("amdgcnspirv")))
    target, _, version = spec.partition("@")
    return ImageInfo("hsaco", CodeTarget(TargetId.parse(target),
                                         int(version) if version else None))


# (bundle entries in header order, device, what loads: an entry, "spirv", or None: a miss)
TABLE = [
    (["gfx90a", "gfx942"], "gfx942", "gfx942"),
    (["gfx90a", "gfx942"], "gfx90a", "gfx90a"),
    (["gfx90a", "gfx942"], "gfx950", None),  # no generic code: CDNA4 runs none of these
    (["gfx906"], "gfx908", None),  # intel/llvm#7993: no compatibility across processors
    (["gfx90a:xnack+"], "gfx90a", None),  # xnack+ code, device runs xnack-
    (["gfx90a:xnack+"], "gfx90a:xnack+", "gfx90a:xnack+"),
    (["gfx90a:xnack-", "gfx90a:xnack+"], "gfx90a:xnack+", "gfx90a:xnack+"),
    (["gfx90a:xnack-", "gfx90a:xnack+"], "gfx90a", "gfx90a:xnack-"),
    (["gfx90a", "gfx90a:xnack+"], "gfx90a:xnack+", "gfx90a"),  # first compatible in order
    (["gfx942:sramecc+:xnack-"], "gfx942", "gfx942:sramecc+:xnack-"),
    (["gfx942:sramecc-"], "gfx942", None),
    (["gfx942:sramecc-"], "gfx942:sramecc-", "gfx942:sramecc-"),
    (["gfx1100"], "gfx1101", None),
    (["gfx1030"], "gfx1031", None),  # HSA_OVERRIDE_GFX_VERSION=10.3.0 territory
    (["gfx11-generic@1"], "gfx1101", "gfx11-generic@1"),
    (["gfx11-generic@1"], "gfx1151", "gfx11-generic@1"),
    (["gfx11-generic@1"], "gfx1201", None),
    (["gfx11-generic@1"], "gfx1030", None),
    (["gfx1100", "gfx11-generic@1"], "gfx1100", "gfx1100"),
    (["gfx1100", "gfx11-generic@1"], "gfx1102", "gfx11-generic@1"),
    (["gfx11-generic@0"], "gfx1100", None),  # generic version below ROCr's minimum, 1
    (["gfx9-4-generic@1"], "gfx950", "gfx9-4-generic@1"),
    (["gfx9-4-generic@1"], "gfx942", "gfx9-4-generic@1"),
    (["gfx9-4-generic@1"], "gfx90a", None),  # gfx90a has no generic target
    (["gfx9-generic:xnack-@1"], "gfx906", "gfx9-generic:xnack-@1"),
    (["gfx9-generic:xnack-@1"], "gfx906:xnack+", None),
    (["gfx9-generic@1"], "gfx908", None),
    (["gfx10-3-generic@1"], "gfx1036", "gfx10-3-generic@1"),
    (["gfx12-generic@1"], "gfx1200", "gfx12-generic@1"),
    (["spirv"], "gfx1201", "spirv"),
    (["gfx1201", "spirv"], "gfx1201", "gfx1201"),
    (["spirv", "gfx1201"], "gfx1201", "gfx1201"),  # native before SPIR-V, whatever the order
    (["gfx11-generic@1", "spirv"], "gfx1100", "gfx11-generic@1"),  # generic before SPIR-V
    ([], "gfx942", None),
]


@pytest.mark.parametrize(("entries", "device", "loads"), TABLE)
def test_the_runtime_picks_as_amds_rules_say(entries: list[str], device: str,
                                              loads: str | None) -> None:
    images = [_image(e) for e in entries]
    decision = HIP.decide(images, device)
    if loads is None:
        assert decision.image is None and decision.error == "hipErrorNoBinaryForGpu"
        assert decision.outcome == "no-image"
        assert "No compatible code objects found for" in decision.reason
    else:
        assert decision.image == _image(loads)
        assert decision.outcome == "loads"
        assert decision.how == ("ptx-jit" if loads == "spirv" else "sass")


@pytest.mark.parametrize(("device", "message"), [
    ("gfx11-generic", "generic target, not a GPU"),
    ("gfx1100:xnack+", "gfx1100 has no xnack"),
    ("gfx999", "no AMD GPU has processor 'gfx999'"),
    ("gfx942:xnack", "bad feature"),
])
def test_a_device_that_is_not_one_is_refused(device: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        HIP.decide([_image("gfx942")], device)


def test_a_miss_names_what_would_have_loaded() -> None:
    d = HIP.decide([_image("gfx1100"), _image("gfx90a")], "gfx1101")
    assert "gfx1100, gfx90a" in d.reason and "gfx1101 or gfx11-generic" in d.reason
    why = {str(v.image.arch): v.reason for v in d.verdicts}
    assert why["gfx1100"] == "gfx1100 is code for gfx1100, not gfx1101"


def test_a_feature_mismatch_says_how_to_turn_it_on() -> None:
    d = HIP.decide([_image("gfx90a:xnack+")], "gfx90a")
    assert "HSA_XNACK=1" in d.verdicts[0].reason


# ROCm floors, written from AMD's sources and release history (fatbinkit/vendors/hip/floors.py
# cites each; the expectations here restate them, not the code): code object v4 ROCm 4.1, v5
# 5.2, v6 6.2; compressed bundles (CCOB) v2 6.2, v3 6.4; generic targets and SPIR-V 6.4;
# gfx942 5.7, gfx1201 6.2. (image, device, ROCm release, loads?, the floor that fails)
def _floored(spec: str) -> ImageInfo:
    """``gfx942/5`` a code object v5; ``gfx942/6/3`` v6 in a CCOB v3; ``spirv``."""
    if spec == "spirv":
        return ImageInfo("spirv", CodeTarget(TargetId("amdgcnspirv")))
    target, co, *ccob = spec.split("/")
    generic = 1 if "generic" in target else None
    return ImageInfo("hsaco", CodeTarget(TargetId.parse(target), generic, int(co),
                                         int(ccob[0]) if ccob else None))


FLOORS = [
    ("gfx90a/4", "gfx90a", "4.1", True, None),
    ("gfx90a/4", "gfx90a", "4.0", False, "code-object"),
    ("gfx90a/5", "gfx90a", "5.1", False, "code-object"),
    ("gfx90a/5", "gfx90a", "5.2", True, None),
    ("gfx90a/6", "gfx90a", "6.1", False, "code-object"),
    ("gfx90a/6", "gfx90a", "6.2", True, None),
    ("gfx942/5", "gfx942", "5.6", False, "device"),
    ("gfx942/5", "gfx942", "5.7", True, None),
    ("gfx1201/6", "gfx1201", "6.1", False, "device"),  # both fail: the GPU first
    ("gfx1201/5", "gfx1201", "6.1", False, "device"),
    ("gfx1201/6", "gfx1201", "6.2", True, None),
    ("gfx90a/5/2", "gfx90a", "6.1", False, "compression"),
    ("gfx90a/5/2", "gfx90a", "6.2", True, None),
    ("gfx90a/6/3", "gfx90a", "6.3", False, "compression"),
    ("gfx90a/6/3", "gfx90a", "6.4", True, None),
    ("gfx11-generic/6", "gfx1101", "6.3", False, None),  # not a candidate before 6.4
    ("gfx11-generic/6", "gfx1101", "6.4", True, None),
    ("spirv", "gfx1201", "6.3", False, None),
    ("spirv", "gfx1201", "6.4", True, None),
]


@pytest.mark.parametrize(("image", "device", "rocm", "loads", "floor"), FLOORS)
def test_rocm_floors_as_amds_releases_say(image: str, device: str, rocm: str, loads: bool,
                                          floor: str | None) -> None:
    d = HIP.decide([_floored(image)], device, rocm)
    assert d.loadable == loads
    assert (d.floor.what if d.floor else None) == floor
    if floor == "compression":
        assert d.error == "hipErrorNotSupported"
    if not loads and floor is None:
        assert d.error == "hipErrorNoBinaryForGpu"
