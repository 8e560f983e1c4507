"""GPU architecture names: ``sm_90a``, ``compute_100f``, ... as one small value type.

SM numbers follow NVIDIA's convention ``major * 10 + minor`` (sm_121 is compute capability 12.1).
Suffix ``a`` is arch-specific (runs on exactly that CC), ``f`` is family-specific (same major,
equal or higher minor); see :mod:`fatbinkit.compat` for the loading rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TypeAlias

from ..errors import InvalidArgumentError

__all__ = ["SUFFIXES", "Arch", "ArchLike", "as_arch"]

_ARCH_RE = re.compile(r"^(?:(sm|compute|lto)_?)?(\d{2,3})([af]?)$")
SUFFIXES = ("", "a", "f")


@dataclass(frozen=True, order=True)
class Arch:
    """A GPU architecture: SM number plus optional ``a``/``f`` suffix. ``future`` marks a device
    arch named on purpose although NVIDIA's device table does not know it
    (:func:`fatbinkit.driver.as_device`); it takes no part in comparisons."""

    number: int
    suffix: str = ""
    future: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 10 <= self.number <= 999:
            raise InvalidArgumentError(f"SM number {self.number} out of range 10..999")
        if self.suffix not in SUFFIXES:
            raise InvalidArgumentError(f"arch suffix {self.suffix!r} is not one of '', 'a', 'f'")

    @classmethod
    def parse(cls, text: str) -> Arch:
        """Parse ``sm_90a``, ``compute_90``, ``lto_90``, ``sm90`` or ``90a``."""
        m = _ARCH_RE.match(text.strip().lower())
        if not m:
            raise InvalidArgumentError(
                f"not a GPU arch: {text!r} (expected e.g. sm_90, sm_90a, compute_100f)"
            )
        return cls(int(m.group(2)), m.group(3))

    @property
    def major(self) -> int:
        return self.number // 10

    @property
    def minor(self) -> int:
        return self.number % 10

    @property
    def sm(self) -> str:
        """The SASS name, e.g. ``sm_90a``."""
        return f"sm_{self.number}{self.suffix}"

    @property
    def compute(self) -> str:
        """The virtual (PTX) name, e.g. ``compute_90a``."""
        return f"compute_{self.number}{self.suffix}"

    def __str__(self) -> str:
        return self.sm


#: what :func:`as_arch` accepts: an :class:`Arch`, a name (``"sm_90a"``, ``"compute_90"``,
#: ``"90"``) or an SM number (``90``)
ArchLike: TypeAlias = Arch | str | int


def as_arch(value: object, what: str = "arch") -> Arch:
    """``value`` as an :class:`Arch`: an Arch, a name :meth:`Arch.parse` reads (``"sm_90a"``,
    ``"compute_100f"``, ``"90"``) or an SM number (``90``); else :class:`InvalidArgumentError`."""
    if isinstance(value, Arch):
        return value
    if isinstance(value, str):
        try:
            return Arch.parse(value)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{what}: {e}") from e
    if isinstance(value, int) and not isinstance(value, bool):
        return Arch(value)
    raise InvalidArgumentError(
        f"{what} is an Arch, a name like 'sm_90' or an SM number, not {type(value).__name__}")
