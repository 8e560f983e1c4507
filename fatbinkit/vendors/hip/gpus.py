"""AMD GPUs as the HIP runtime sees them: each processor's generation, wavefront size and the
target features (``sramecc``, ``xnack``) it has, and a device's default feature settings.

Sources: LLVM's ``AMDGPUUsage.rst`` ("Processors": the generation and products of each
processor) and the ROCm "GPU architecture specifications" page for the product names; which
features a processor has is the format's table (CLR ``getProcName``, ROCr
``ISAREG_ENTRY_GEN``). A device's features as its agent reports them: xnack is off unless
the process runs with ``HSA_XNACK=1`` (ROCm "Unified memory" docs; ROCr reads ``HSA_XNACK``),
sramecc is on for Instinct boards, which ship with ECC on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import InvalidArgumentError
from ...formats.amdgpu import PROCESSOR_FEATURES, TargetId

__all__ = ["GPUS", "Gpu", "GpuTarget", "as_device", "default_target"]


@dataclass(frozen=True)
class Gpu:
    """One processor of the tables: its generation and products, and ``ecc``: whether its
    boards run with sramecc on (Instinct). Whether it has sramecc/xnack at all, and its
    wavefront size, are the format's table (:data:`fatbinkit.formats.amdgpu.PROCESSOR_FEATURES`,
    from CLR and ROCr); a processor that table lacks has neither feature."""

    processor: str
    generation: str
    products: str
    ecc: bool = False

    @property
    def sramecc(self) -> bool:
        f = PROCESSOR_FEATURES.get(self.processor)
        return f is not None and f.sramecc

    @property
    def xnack(self) -> bool:
        f = PROCESSOR_FEATURES.get(self.processor)
        return f is not None and f.xnack


def _gpus(*rows: Gpu) -> dict[str, Gpu]:
    return {g.processor: g for g in rows}


#: every AMD GPU processor of the tables, oldest first
GPUS: dict[str, Gpu] = _gpus(
    Gpu("gfx801", "GCN3", "Carrizo APU"),
    Gpu("gfx802", "GCN3", "Tonga"),
    Gpu("gfx803", "GCN4", "Fiji, Polaris (RX 480/580)"),
    Gpu("gfx805", "GCN3", "Tongapro"),
    Gpu("gfx810", "GCN3", "Stoney APU"),
    Gpu("gfx900", "GCN5", "Vega 10 (MI25, Vega 56/64)"),
    Gpu("gfx902", "GCN5", "Raven Ridge APU"),
    Gpu("gfx904", "GCN5", "Vega 12"),
    Gpu("gfx906", "GCN5", "Vega 20 (MI50, MI60, Radeon VII)", ecc=True),
    Gpu("gfx908", "CDNA", "MI100", ecc=True),
    Gpu("gfx909", "GCN5", "Raven Ridge 2 APU"),
    Gpu("gfx90a", "CDNA2", "MI200 (MI210, MI250, MI250X)", ecc=True),
    Gpu("gfx90c", "GCN5", "Renoir APU"),
    Gpu("gfx940", "CDNA3", "MI300 (early)", ecc=True),
    Gpu("gfx941", "CDNA3", "MI300 (early)", ecc=True),
    Gpu("gfx942", "CDNA3", "MI300A, MI300X, MI325X", ecc=True),
    Gpu("gfx950", "CDNA4", "MI350X, MI355X", ecc=True),
    Gpu("gfx1010", "RDNA1", "Navi 10 (RX 5700)"),
    Gpu("gfx1011", "RDNA1", "Navi 12 (Radeon Pro V520)"),
    Gpu("gfx1012", "RDNA1", "Navi 14 (RX 5500)"),
    Gpu("gfx1013", "RDNA1", "Cyan Skillfish"),
    Gpu("gfx1030", "RDNA2", "Navi 21 (RX 6800/6900, Radeon Pro W6800)"),
    Gpu("gfx1031", "RDNA2", "Navi 22 (RX 6700)"),
    Gpu("gfx1032", "RDNA2", "Navi 23 (RX 6600)"),
    Gpu("gfx1033", "RDNA2", "Van Gogh APU"),
    Gpu("gfx1034", "RDNA2", "Navi 24 (RX 6500)"),
    Gpu("gfx1035", "RDNA2", "Rembrandt APU"),
    Gpu("gfx1036", "RDNA2", "Raphael APU"),
    Gpu("gfx1100", "RDNA3", "Navi 31 (RX 7900, Radeon Pro W7900)"),
    Gpu("gfx1101", "RDNA3", "Navi 32 (RX 7800/7700)"),
    Gpu("gfx1102", "RDNA3", "Navi 33 (RX 7600)"),
    Gpu("gfx1103", "RDNA3", "Phoenix APU"),
    Gpu("gfx1150", "RDNA3.5", "Strix Point APU"),
    Gpu("gfx1151", "RDNA3.5", "Strix Halo APU"),
    Gpu("gfx1152", "RDNA3.5", "Krackan APU"),
    Gpu("gfx1153", "RDNA3.5", "Strix APU"),
    Gpu("gfx1200", "RDNA4", "Navi 44 (RX 9060)"),
    Gpu("gfx1201", "RDNA4", "Navi 48 (RX 9070)"),
    Gpu("gfx1250", "GFX12.5", "not released (LLVM: TBA)"),
)


@dataclass(frozen=True)
class GpuTarget:
    """A device: its processor's row and the features its agent runs with (``target``: every
    feature the processor has is set, + or -)."""

    gpu: Gpu
    target: TargetId

    def __str__(self) -> str:
        return str(self.target)


def default_target(gpu: Gpu) -> TargetId:
    """The ISA name a device reports by default: ``sramecc+`` on boards with ECC on,
    ``xnack-`` (``HSA_XNACK`` unset)."""
    return TargetId(gpu.processor, sramecc=gpu.ecc if gpu.sramecc else None,
                    xnack=False if gpu.xnack else None)


def as_device(value: object, what: str = "GPU arch") -> GpuTarget:
    """A device from ``gfx942`` (its default features), ``gfx942:xnack+`` (a feature given
    overrides the default) or a :class:`GpuTarget`; an
    :class:`~fatbinkit.errors.InvalidArgumentError` naming ``what`` for a generic target, a
    processor the tables do not list, or a feature the processor lacks."""
    if isinstance(value, GpuTarget):
        return value
    text = str(value)
    target = TargetId.parse(text)
    gpu = GPUS.get(target.processor)
    if gpu is None:
        if target.is_generic:
            raise InvalidArgumentError(f"{what} {text!r} is a generic target, not a GPU: give "
                                       "the device's processor (gfx1100, not gfx11-generic)")
        raise InvalidArgumentError(f"{what} {text!r}: no AMD GPU has processor "
                                   f"{target.processor!r} (known: {', '.join(GPUS)})")
    for feature in ("sramecc", "xnack"):
        if getattr(target, feature) is not None and not getattr(gpu, feature):
            raise InvalidArgumentError(f"{what} {text!r}: {gpu.processor} has no {feature}")
    base = default_target(gpu)
    return GpuTarget(gpu, TargetId(
        gpu.processor,
        sramecc=base.sramecc if target.sramecc is None else target.sramecc,
        xnack=base.xnack if target.xnack is None else target.xnack))
