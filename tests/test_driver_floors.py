"""What a CUDA driver loads, checked against a table written from NVIDIA's documents.

Every expected outcome below was derived by hand, independently of fatbinkit's implementation,
from these sources (summarised in the project's research notes on driver floors):

- CUDA C++ Programming Guide, section 5.1 (compute capabilities; ``a`` targets run only on the
  exact CC, ``f`` targets on the same family; cubin on same major and same-or-higher minor;
  PTX JIT on any higher CC).
- Blackwell Compatibility Guide, section 1.2 (cubin compatibility across minor revisions).
- CUDA Compatibility guide (minor-version compatibility from CUDA 11 on; PTX is not covered
  by it: "Applications using PTX will see runtime issues").
- CUDA Toolkit Release Notes, section 2.2, Tables 2 and 3 (driver branch per CUDA version; R550 =
  12.4, R580 = 13.0, R590 = 13.1) and the sm_101 -> sm_110 rename in CUDA 13.0.
- PTX ISA release history (PTX ISA version -> first CUDA version that loads it).
- NVIDIA's "Unix graphics feature deprecation schedule" (R580 is the last branch for Maxwell,
  Pascal and Volta) and NVIDIA's rapids-cmake notes (size/balance fatbin compression, i.e.
  zstd, needs 550.54.14 = CUDA 12.4).
- One observation on an H200 with an R580 driver: the driver picks an image by architecture
  alone and does not fall back to another image when the picked one fails a driver floor.

Not from the implementation. Each row's comment names the rule that decides it.
"""

from __future__ import annotations

import pytest

from fatbinkit.compat import PTX, SASS, ImageInfo, decide
from fatbinkit.formats.arch import Arch

NOBIN = "CUDA_ERROR_NO_BINARY_FOR_GPU"
BADPTXV = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
BADPTX = "CUDA_ERROR_INVALID_PTX"
BADIMG = "CUDA_ERROR_INVALID_IMAGE"
NODEV = "CUDA_ERROR_NO_DEVICE"


def _ver(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def img(spec: str) -> ImageInfo:
    """Build an ImageInfo from e.g. "sass sm_90 tk=13.0 zstd" or "ptx compute_100 isa=8.8 lz4".

    Tokens after the arch: tk=M.m (toolkit that built a cubin), isa=M.m (PTX ISA version),
    abi=N (ELF ABI version), zstd / lz4 (compression). The label is the spec itself.
    """
    kind, arch, *rest = spec.split()
    assert kind in (SASS, PTX), spec
    kw: dict[str, object] = {}
    for tok in rest:
        if tok.startswith("tk="):
            kw["toolkit"] = _ver(tok[3:])
        elif tok.startswith("isa="):
            kw["ptx_version"] = _ver(tok[4:])
        elif tok.startswith("abi="):
            kw["abi_version"] = int(tok[4:])
        elif tok in ("zstd", "lz4"):
            kw["compression"] = tok
        else:
            raise AssertionError(f"bad token {tok!r} in {spec!r}")
    return ImageInfo(kind, Arch.parse(arch), label=spec, **kw)  # type: ignore[arg-type]


# A CUDA 12.9 build with default (LZ4) compression: floors toolkit 12.0, variant f 12.9,
# PTX ISA 8.8 -> 12.9.
LIB129 = [
    "sass sm_80 tk=12.9 lz4",
    "sass sm_90 tk=12.9 lz4",
    "sass sm_100f tk=12.9 lz4",
    "sass sm_120f tk=12.9 lz4",
    "ptx compute_100 isa=8.8 lz4",
]
# A CUDA 13.2 build with zstd ("size") compression: floors toolkit 13.0, zstd 12.4,
# variant f 12.9, PTX ISA 9.2 -> 13.2.
LIB132 = [
    "sass sm_75 tk=13.2 zstd",
    "sass sm_80 tk=13.2 zstd",
    "sass sm_86 tk=13.2 zstd",
    "sass sm_89 tk=13.2 zstd",
    "sass sm_90 tk=13.2 zstd",
    "sass sm_100f tk=13.2 zstd",
    "sass sm_110f tk=13.2 zstd",
    "sass sm_120f tk=13.2 zstd",
    "ptx compute_120 isa=9.2 zstd",
]

# Rules (numbers as in the brief): R1 arch selection, R2 no fall back, R3 device floor,
# R4 toolkit floor, R5 variant floor, R6 compression floor, R7 PTX ISA floor,
# R8 min_driver = max of floors, R9 a failing device floor is what gets reported.
# Per the contract, d.image is None when not loadable. min_driver belongs to the image the
# driver picks by arch (R2), so a row whose picked image fails a floor still has one (R8); it is
# None only when no image fits the device by arch.
# A floor given as a tuple means "either of these": the image fails more than one floor with the
# same error, and no document says which of them the driver names.
#
# (images, device, driver) -> (loadable, picked, error, floor, min_driver)
ROWS = [
    # ---- toolkit floor (R4) ----
    # CUDA 13.2 cubin: needs a 13.x driver; 12.9 is too old.
    (["sass sm_90 tk=13.2"], "sm_90", (12, 9), False, None, BADIMG, "toolkit", (13, 0)),
    # same cubin on 13.0: minor-version compatibility within 13.x.
    (["sass sm_90 tk=13.2"], "sm_90", (13, 0), True, "sass sm_90 tk=13.2", None, None, (13, 0)),
    # CUDA 12.9 cubin on a 12.0 driver: minor-version compatibility within 12.x.
    (["sass sm_90 tk=12.9"], "sm_90", (12, 0), True, "sass sm_90 tk=12.9", None, None, (12, 0)),
    # CUDA 12.9 cubin on 11.8 (device sm_90 exists from 11.8): another major, too old.
    (["sass sm_90 tk=12.9"], "sm_90", (11, 8), False, None, BADIMG, "toolkit", (12, 0)),
    # CUDA 10.2 cubin (pre-11: exact version or newer) on 10.1: too old.
    (["sass sm_75 tk=10.2"], "sm_75", (10, 1), False, None, BADIMG, "toolkit", (10, 2)),
    # ... on 10.2: fine; sm_75 device exists from 10.0.
    (["sass sm_75 tk=10.2"], "sm_75", (10, 2), True, "sass sm_75 tk=10.2", None, None, (10, 2)),
    # CUDA 11.8 cubin on 11.0: minor-version compatibility within 11.x.
    (["sass sm_80 tk=11.8"], "sm_80", (11, 0), True, "sass sm_80 tk=11.8", None, None, (11, 0)),
    # CUDA 11.8 cubin on a 10.2 driver (sm_75 device exists from 10.0): needs 11.0.
    (["sass sm_75 tk=11.8"], "sm_75", (10, 2), False, None, BADIMG, "toolkit", (11, 0)),
    # Old cubin on a much newer driver: binary backward compatibility (10.2 -> 13.0).
    (["sass sm_75 tk=10.2"], "sm_75", (13, 0), True, "sass sm_75 tk=10.2", None, None, (10, 2)),
    # ELF ABI v2, no toolkit known, sm >= 100: ptxas 12.8 writes it -> floor 12.8.
    (["sass sm_100 abi=8"], "sm_100", (12, 8), True, "sass sm_100 abi=8", None, None, (12, 8)),
    # ELF ABI v2, sm < 100: only ptxas 13 writes it -> floor 13.0; 12.9 fails.
    (["sass sm_90 abi=8"], "sm_90", (12, 9), False, None, BADIMG, "toolkit", (13, 0)),
    # ... and 13.0 passes.
    (["sass sm_90 abi=8"], "sm_90", (13, 0), True, "sass sm_90 abi=8", None, None, (13, 0)),
    # ELF ABI v1 and no toolkit: no toolkit floor; min_driver is the device floor (8.0 -> 11.0).
    (["sass sm_80 abi=7"], "sm_80", (11, 0), True, "sass sm_80 abi=7", None, None, (11, 0)),
    # ---- variant floor (R5) ----
    # sm_100f SASS on 12.8 (device sm_100 exists from 12.8): f needs 12.9.
    (["sass sm_100f"], "sm_100", (12, 8), False, None, BADIMG, "variant", (12, 9)),
    # ... on 12.9: fine.
    (["sass sm_100f"], "sm_100", (12, 9), True, "sass sm_100f", None, None, (12, 9)),
    # compute_100f PTX (ISA 8.7 -> 12.8 is fine) on 12.8: f needs 12.9; PTX error.
    (["ptx compute_100f isa=8.7"], "sm_100", (12, 8), False, None, BADPTX, "variant", (12, 9)),
    # sm_90a SASS on 11.8 (sm_90 device exists from 11.8): a needs 12.0.
    (["sass sm_90a"], "sm_90", (11, 8), False, None, BADIMG, "variant", (12, 0)),
    # ... on 12.0: fine.
    (["sass sm_90a"], "sm_90", (12, 0), True, "sass sm_90a", None, None, (12, 0)),
    # compute_90a PTX (ISA 7.8 -> 11.8 is fine) on 11.8: a needs 12.0; PTX error.
    (["ptx compute_90a isa=7.8"], "sm_90", (11, 8), False, None, BADPTX, "variant", (12, 0)),
    # ---- compression floor (R6) ----
    # zstd SASS on 12.3: zstd needs 12.4 (R550).
    (["sass sm_90 tk=12.0 zstd"], "sm_90", (12, 3), False, None, BADIMG, "compression",
     (12, 4)),
    # ... on 12.4: fine.
    (["sass sm_90 tk=12.0 zstd"], "sm_90", (12, 4), True, "sass sm_90 tk=12.0 zstd", None, None,
     (12, 4)),
    # zstd PTX (ISA 8.0 -> 12.0 is fine) on 12.3: zstd needs 12.4; PTX error.
    (["ptx compute_90 isa=8.0 zstd"], "sm_90", (12, 3), False, None, BADPTX, "compression",
     (12, 4)),
    # ... on 12.4: fine, JIT.
    (["ptx compute_90 isa=8.0 zstd"], "sm_90", (12, 4), True, "ptx compute_90 isa=8.0 zstd",
     None, None, (12, 4)),
    # LZ4 needs only 10.0: on an 11.0 driver the floor is the device's (8.0 -> 11.0).
    (["sass sm_80 lz4"], "sm_80", (11, 0), True, "sass sm_80 lz4", None, None, (11, 0)),
    # ---- PTX ISA floor (R7) ----
    # PTX 8.6 needs 12.7: a 12.6 driver fails.
    (["ptx compute_90 isa=8.6"], "sm_90", (12, 6), False, None, BADPTXV, "ptx-isa", (12, 7)),
    # ... 12.8 JITs it; min_driver 12.7 (the table's value, though 12.7 was never released).
    (["ptx compute_90 isa=8.6"], "sm_90", (12, 8), True, "ptx compute_90 isa=8.6", None, None,
     (12, 7)),
    # PTX 9.4 needs 13.4: a 13.0 driver fails (minor-version compatibility does not cover PTX).
    (["ptx compute_90 isa=9.4"], "sm_90", (13, 0), False, None, BADPTXV, "ptx-isa", (13, 4)),
    # PTX 9.0 needs 13.0: a 12.9 driver fails.
    (["ptx compute_80 isa=9.0"], "sm_80", (12, 9), False, None, BADPTXV, "ptx-isa", (13, 0)),
    # PTX 8.5 needs 12.5: a 12.4 driver fails.
    (["ptx compute_80 isa=8.5"], "sm_80", (12, 4), False, None, BADPTXV, "ptx-isa", (12, 5)),
    # ... 12.5 JITs it.
    (["ptx compute_80 isa=8.5"], "sm_80", (12, 5), True, "ptx compute_80 isa=8.5", None, None,
     (12, 5)),
    # PTX 7.0 -> 11.0, device 8.0 -> 11.0.
    (["ptx compute_80 isa=7.0"], "sm_80", (11, 0), True, "ptx compute_80 isa=7.0", None, None,
     (11, 0)),
    # ---- device floor (R3, R9) ----
    # sm_121 exists from 12.9: a 12.8 driver has no such device.
    (["sass sm_120 tk=12.8"], "sm_121", (12, 8), False, None, NODEV, "device", (12, 9)),
    # ... on 12.9 the sm_120 cubin runs on CC 12.1 (same major, higher minor).
    (["sass sm_120 tk=12.8"], "sm_121", (12, 9), True, "sass sm_120 tk=12.8", None, None,
     (12, 9)),
    # sm_100 exists from 12.8: a 12.6 driver has no such device.
    (["sass sm_100 tk=12.8"], "sm_100", (12, 6), False, None, NODEV, "device", (12, 8)),
    # sm_70 (Volta): R580 = 13.0 is the last branch; a CUDA 12.0 cubin still loads there.
    (["sass sm_70 tk=12.0"], "sm_70", (13, 0), True, "sass sm_70 tk=12.0", None, None, (12, 0)),
    # ... a 13.1 (R590) driver no longer drives Volta.
    (["sass sm_70 tk=12.0"], "sm_70", (13, 1), False, None, NODEV, "device", (12, 0)),
    # sm_61 (Pascal) on 13.1: dropped, like Volta.
    (["sass sm_61 tk=12.0"], "sm_61", (13, 1), False, None, NODEV, "device", (12, 0)),
    # sm_101 (Thor, CUDA 12.8..12.9 name): a 12.9 driver knows it.
    (["sass sm_101 tk=12.8"], "sm_101", (12, 9), True, "sass sm_101 tk=12.8", None, None,
     (12, 8)),
    # ... a 13.0 driver calls it 11.0: no sm_101 device.
    (["sass sm_101 tk=12.8"], "sm_101", (13, 0), False, None, NODEV, "device", (12, 8)),
    # sm_110 exists from 13.0: on 12.9 the device floor is reported (R9), although the 13.0
    # cubin would also fail its toolkit floor.
    (["sass sm_110 tk=13.0"], "sm_110", (12, 9), False, None, NODEV, "device", (13, 0)),
    # ... on 13.0: fine.
    (["sass sm_110 tk=13.0"], "sm_110", (13, 0), True, "sass sm_110 tk=13.0", None, None,
     (13, 0)),
    # sm_120 device on 12.6 with no fitting image at all: the device floor wins (R9); nothing is
    # picked by arch, so min_driver is None (as for the same images on a 12.8 driver).
    (["sass sm_90"], "sm_120", (12, 6), False, None, NODEV, "device", None),
    # ---- arch selection (R1) ----
    # Nothing fits: sm_90 SASS is another CC than 8.0, and no PTX.
    (["sass sm_90"], "sm_80", (12, 8), False, None, NOBIN, None, None),
    # Exact-CC SASS over a lower compatible one.
    (["sass sm_80", "sass sm_86"], "sm_86", (12, 0), True, "sass sm_86", None, None, (11, 1)),
    # No exact SASS: the highest compatible one (8.6 <= 8.9, same major).
    (["sass sm_80", "sass sm_86"], "sm_89", (12, 0), True, "sass sm_86", None, None, (11, 8)),
    # Any compatible SASS beats PTX, even PTX for a higher arch.
    (["sass sm_80", "ptx compute_86 isa=7.1"], "sm_86", (12, 0), True, "sass sm_80", None, None,
     (11, 1)),
    # Exact CC: a > f > plain.
    (["sass sm_100", "sass sm_100f", "sass sm_100a"], "sm_100", (12, 9), True, "sass sm_100a",
     None, None, (12, 8)),
    # Exact CC: f > plain.
    (["sass sm_100", "sass sm_100f"], "sm_100", (12, 9), True, "sass sm_100f", None, None,
     (12, 9)),
    # sm_100a only runs on exactly 10.0: on 10.3 the plain compute_100 PTX is JITed.
    (["sass sm_100a", "ptx compute_100 isa=8.7"], "sm_103", (12, 9), True,
     "ptx compute_100 isa=8.7", None, None, (12, 9)),
    # compute_90a PTX only on exactly 9.0: nothing for sm_100.
    (["ptx compute_90a isa=8.0"], "sm_100", (12, 8), False, None, NOBIN, None, None),
    # compute_100f PTX on 10.3 (same family).
    (["ptx compute_100f isa=8.8"], "sm_103", (12, 9), True, "ptx compute_100f isa=8.8", None,
     None, (12, 9)),
    # compute_100f PTX not on 12.0 (another family).
    (["ptx compute_100f isa=8.8"], "sm_120", (12, 9), False, None, NOBIN, None, None),
    # Highest-arch compatible PTX.
    (["ptx compute_80 isa=7.0", "ptx compute_90 isa=8.0"], "sm_100", (12, 8), True,
     "ptx compute_90 isa=8.0", None, None, (12, 8)),
    # ---- no fall back (R2) ----
    # Picked SASS fails its toolkit floor; the fitting older PTX is not tried.
    (["sass sm_90 tk=13.2", "ptx compute_90 isa=8.0"], "sm_90", (12, 9), False, None, BADIMG,
     "toolkit", (13, 0)),
    # Picked PTX (highest arch) is too new; the usable lower PTX is not tried.
    (["ptx compute_90 isa=9.0", "ptx compute_80 isa=7.0"], "sm_90", (12, 8), False, None, BADPTXV,
     "ptx-isa", (13, 0)),
    # Picked zstd SASS on 12.3; the plain sm_80 SASS is not tried.
    (["sass sm_90 zstd", "sass sm_80"], "sm_90", (12, 3), False, None, BADIMG, "compression",
     (12, 4)),
    # Picked sm_90a (exact, a > plain) fails its variant floor on 11.8; plain sm_90 not tried.
    (["sass sm_90a", "sass sm_90"], "sm_90", (11, 8), False, None, BADIMG, "variant", (12, 0)),
    # ---- a failing image that is not the pick does not matter ----
    # sm_80 zstd SASS is irrelevant on sm_90 where an uncompressed sm_90 SASS is picked.
    (["sass sm_80 tk=12.0 zstd", "sass sm_90 tk=12.0"], "sm_90", (12, 0), True,
     "sass sm_90 tk=12.0", None, None, (12, 0)),
    # Too-new PTX is irrelevant when a SASS is picked.
    (["sass sm_90 tk=12.4", "ptx compute_90 isa=9.0"], "sm_90", (12, 8), True,
     "sass sm_90 tk=12.4", None, None, (12, 0)),
    # sm_100f SASS (needs 12.8 device + 12.9 variant) is irrelevant on sm_90.
    (["sass sm_100f", "sass sm_90 tk=12.0"], "sm_90", (12, 0), True, "sass sm_90 tk=12.0", None,
     None, (12, 0)),
    # ---- driver None: arch rules only, min_driver still computed (R8) ----
    # 13.2 zstd cubin: max(device 11.8, toolkit 13.0, zstd 12.4) = 13.0.
    (["sass sm_90 tk=13.2 zstd"], "sm_90", None, True, "sass sm_90 tk=13.2 zstd", None, None,
     (13, 0)),
    # PTX 9.4 on sm_100: max(12.8, 13.4) = 13.4.
    (["ptx compute_100 isa=9.4"], "sm_100", None, True, "ptx compute_100 isa=9.4", None, None,
     (13, 4)),
    # sm_101 device: floor 12.8.
    (["sass sm_101 tk=12.8"], "sm_101", None, True, "sass sm_101 tk=12.8", None, None, (12, 8)),
    # ABI v2 sm_100f: max(device 12.8, abi 12.8, variant 12.9) = 12.9.
    (["sass sm_100f abi=8"], "sm_100", None, True, "sass sm_100f abi=8", None, None, (12, 9)),
    # Arch rules still apply: nothing for sm_80.
    (["sass sm_90"], "sm_80", None, False, None, NOBIN, None, None),
    # ---- realistic: CUDA 12.9 LZ4 library ----
    # sm_80: exact SASS; max(device 11.0, toolkit 12.0) = 12.0.
    (LIB129, "sm_80", (12, 0), True, "sass sm_80 tk=12.9 lz4", None, None, (12, 0)),
    # sm_80 on 11.8: the 12.9 cubin needs a 12.x driver.
    (LIB129, "sm_80", (11, 8), False, None, BADIMG, "toolkit", (12, 0)),
    # sm_90 on 12.4.
    (LIB129, "sm_90", (12, 4), True, "sass sm_90 tk=12.9 lz4", None, None, (12, 0)),
    # sm_100 on 12.4: device 10.0 exists from 12.8.
    (LIB129, "sm_100", (12, 4), False, None, NODEV, "device", (12, 9)),
    # sm_100 on 12.8: sm_100f picked (exact CC), f needs 12.9; no fall back to compute_100 PTX
    # (which would fail too: ISA 8.8 -> 12.9).
    (LIB129, "sm_100", (12, 8), False, None, BADIMG, "variant", (12, 9)),
    # sm_100 on 12.9.
    (LIB129, "sm_100", (12, 9), True, "sass sm_100f tk=12.9 lz4", None, None, (12, 9)),
    # sm_103 on 12.8: device 10.3 exists from 12.9.
    (LIB129, "sm_103", (12, 8), False, None, NODEV, "device", (12, 9)),
    # sm_103 on 12.9: sm_100f runs on the family member 10.3.
    (LIB129, "sm_103", (12, 9), True, "sass sm_100f tk=12.9 lz4", None, None, (12, 9)),
    # sm_120 on 12.8: sm_120f picked, f needs 12.9.
    (LIB129, "sm_120", (12, 8), False, None, BADIMG, "variant", (12, 9)),
    # sm_120 on 13.0: binary backward compatibility.
    (LIB129, "sm_120", (13, 0), True, "sass sm_120f tk=12.9 lz4", None, None, (12, 9)),
    # sm_121 on 12.9: sm_120f runs on 12.1.
    (LIB129, "sm_121", (12, 9), True, "sass sm_120f tk=12.9 lz4", None, None, (12, 9)),
    # sm_110 on 13.0: no SASS of major 11; compute_100 PTX JITs; max(13.0, 12.9) = 13.0.
    (LIB129, "sm_110", (13, 0), True, "ptx compute_100 isa=8.8 lz4", None, None, (13, 0)),
    # sm_75: nothing fits (sm_80 SASS and compute_100 PTX are both above 7.5).
    (LIB129, "sm_75", (12, 9), False, None, NOBIN, None, None),
    # ---- realistic: CUDA 13.2 zstd library ----
    # sm_80 on 12.9: the 13.2 cubin needs a 13.x driver.
    (LIB132, "sm_80", (12, 9), False, None, BADIMG, "toolkit", (13, 0)),
    # sm_80 on 12.0: toolkit (13.0) and zstd (12.4) both fail, both INVALID_IMAGE.
    (LIB132, "sm_80", (12, 0), False, None, BADIMG, ("toolkit", "compression"), (13, 0)),
    # sm_90 on 12.4: zstd fine, toolkit not.
    (LIB132, "sm_90", (12, 4), False, None, BADIMG, "toolkit", (13, 0)),
    # sm_90 on 13.0.
    (LIB132, "sm_90", (13, 0), True, "sass sm_90 tk=13.2 zstd", None, None, (13, 0)),
    # sm_100 on 12.8: sm_100f fails toolkit (13.0) and variant (12.9), both INVALID_IMAGE.
    (LIB132, "sm_100", (12, 8), False, None, BADIMG, ("toolkit", "variant"), (13, 0)),
    # sm_100 on 12.9: variant fine, toolkit not.
    (LIB132, "sm_100", (12, 9), False, None, BADIMG, "toolkit", (13, 0)),
    # sm_100 on 13.0.
    (LIB132, "sm_100", (13, 0), True, "sass sm_100f tk=13.2 zstd", None, None, (13, 0)),
    # sm_103 on 13.0: sm_100f (family).
    (LIB132, "sm_103", (13, 0), True, "sass sm_100f tk=13.2 zstd", None, None, (13, 0)),
    # sm_110 on 13.0: exact sm_110f.
    (LIB132, "sm_110", (13, 0), True, "sass sm_110f tk=13.2 zstd", None, None, (13, 0)),
    # sm_120 on 13.0: exact sm_120f beats the compute_120 PTX.
    (LIB132, "sm_120", (13, 0), True, "sass sm_120f tk=13.2 zstd", None, None, (13, 0)),
    # sm_121 on 12.8: device 12.1 exists from 12.9.
    (LIB132, "sm_121", (12, 8), False, None, NODEV, "device", (13, 0)),
    # sm_121 on 13.0: sm_120f (family); the PTX 9.2 (needs 13.2) is not the pick.
    (LIB132, "sm_121", (13, 0), True, "sass sm_120f tk=13.2 zstd", None, None, (13, 0)),
    # sm_75 on 13.0.
    (LIB132, "sm_75", (13, 0), True, "sass sm_75 tk=13.2 zstd", None, None, (13, 0)),
    # sm_70 on 13.0: the driver still drives Volta, but sm_75 SASS needs minor >= 5.
    (LIB132, "sm_70", (13, 0), False, None, NOBIN, None, None),
    # sm_70 on 13.1: Volta dropped (R9: device reported); nothing fits by arch, so min_driver is
    # None, as in the 13.0 row above.
    (LIB132, "sm_70", (13, 1), False, None, NODEV, "device", None),
]


def params(rows: list[tuple[object, ...]], named: dict[str, list[str]]) -> list[object]:
    """``rows`` as pytest params, each id naming its images (a library of ``named`` by its key),
    device and driver: ``03-lib129@sm_90/drv12.8``."""
    def row_id(row: tuple[object, ...]) -> str:
        images, device, driver = row[0], row[1], row[2]
        name = next((key for key, lib in named.items() if images is lib), None) or "+".join(
            s.split()[1] for s in images  # type: ignore[attr-defined]
        )
        drv = "none" if driver is None else "{}.{}".format(*driver)  # type: ignore[misc]
        return f"{name}@{device}/drv{drv}"

    return [pytest.param(row, id=f"{i:02d}-{row_id(row)}") for i, row in enumerate(rows)]


def check_row(
    images: list[str],
    device: str,
    driver: tuple[int, int] | None,
    loadable: bool,
    pick: str | None,
    error: str | None,
    floor: str | tuple[str, ...] | None,
    min_driver: tuple[int, int] | None,
) -> None:
    """Assert what :func:`decide` says of one table row."""
    d = decide([img(s) for s in images], Arch.parse(device), driver)
    got = {
        "loadable": d.loadable,
        "pick": None if d.image is None else d.image.label,
        "error": d.error,
        "floor": None if d.floor is None else d.floor.what,
        "min_driver": None if d.min_driver is None else tuple(d.min_driver),
        "how": d.how,
    }
    if isinstance(floor, tuple):
        assert got["floor"] in floor, got
        got["floor"] = floor
    how = "none" if not loadable else "sass" if pick and pick.startswith("sass") else "ptx-jit"
    want = {
        "loadable": loadable,
        "pick": pick,
        "error": error,
        "floor": floor,
        "min_driver": min_driver,
        "how": how,
    }
    assert got == want


PARAMS = params(ROWS, {"lib129": LIB129, "lib132": LIB132})


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 40


@pytest.mark.parametrize("row", PARAMS)
def test_driver_floors(row: tuple[object, ...]) -> None:
    check_row(*row)  # type: ignore[arg-type]
