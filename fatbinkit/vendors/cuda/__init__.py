"""NVIDIA CUDA: fatbins, cubins and PTX, NVIDIA's driver tables (:mod:`.driver`) and the driver's
loading rules (:mod:`.loading`)."""

from __future__ import annotations

__all__: list[str] = []
