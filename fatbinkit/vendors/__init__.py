"""GPU vendors: each one's device-code formats, targets, runtimes and loading rules behind one
interface, which the operations (binary, collection, slim, diff, gate, the CLI) call without
knowing which vendor they hold. CUDA's is :mod:`fatbinkit.vendors.cuda`."""

from __future__ import annotations

__all__: list[str] = []
