"""Argument parsing shared by the command groups."""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgumentError


def key_path(spec: str, key: str, *, option: str = "", example: str = "") -> tuple[str, Path]:
    """Split a ``KEY=PATH`` argument (``NAME=PATH``, ``ARCH=PATH``); both halves must be given."""
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        where = f"{option} " if option else ""
        hint = f", e.g. {example}" if example else ""
        raise InvalidArgumentError(f"{where}expected {key}=PATH, got {spec!r}{hint}")
    return name, Path(path)
