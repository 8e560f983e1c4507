"""Progress of long calls: one convention for every entry point of the API.

Every call that can take long (reading a wheel or a folder, reading every image of a large
library, pruning, compiling) takes ``progress``:

- ``False`` or ``None`` (the default): nothing is shown;
- ``True``: a progress bar on stderr (`tqdm <https://tqdm.github.io>`_);
- a callable: called with a :class:`Step` each time a unit of work is done (a file of a wheel or
  folder, a library of a wheel, a chunk of a file's images...), from the calling thread.

An exception raised by the callable stops the call and comes out of it unchanged (a way to
cancel). For example, to log a wheel's libraries as ``gate`` reads them::

    def log(step: fatbinkit.progress.Step) -> None:
        print(f"{step.done}/{step.total} {step.name}")

    fatbinkit.gate.gate(["torch.whl"], rules, progress=log)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeAlias

from .errors import InvalidArgumentError

__all__ = ["Progress", "Reporter", "Step", "check", "reporter"]


@dataclass(frozen=True)
class Step:
    """One unit of work done: ``done`` of ``total`` (None: not known ahead) ``unit``\\ s, the
    last one ``name`` (a file's path inside a wheel; empty where units have no name)."""

    done: int
    total: int | None
    unit: str
    name: str = ""

    def __str__(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        return f"{self.done}{of} {self.unit}s" + (f": {self.name}" if self.name else "")


#: what ``progress=`` takes, everywhere
Progress: TypeAlias = "bool | Callable[[Step], None] | None"


class Reporter:
    """Reports the steps of one call to what ``progress`` asked for; a context manager (the bar
    is closed on the way out). Made by :func:`reporter`."""

    def __init__(self, progress: Progress, total: int | None, unit: str, desc: str) -> None:
        check(progress)
        self.total, self.unit, self.done = total, unit, 0
        self._call = progress if callable(progress) else None
        self._bar: Any = None
        if progress is True:
            import sys

            from tqdm import tqdm

            self._bar = tqdm(total=total, unit=unit, desc=desc, leave=False, file=sys.stderr)

    @property
    def active(self) -> bool:
        """Whether anything is reported (callers skip work done only for the report)."""
        return self._call is not None or self._bar is not None

    def advance(self, n: int = 1, name: str = "") -> None:
        """``n`` more units done, the last one ``name``."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            if name:
                self._bar.set_postfix_str(name, refresh=False)
        if self._call is not None:
            self._call(Step(self.done, self.total, self.unit, name))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def check(progress: object) -> None:
    """Refuse, at the call, a ``progress`` that is none of the accepted values
    (:class:`~fatbinkit.errors.InvalidArgumentError`)."""
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise InvalidArgumentError(f"progress must be True, False, None or a callable taking "
                                   f"a fatbinkit.progress.Step, not {progress!r}")


def reporter(progress: Progress, total: int | None, unit: str, desc: str = "") -> Reporter:
    """The :class:`Reporter` of one call: ``total`` units (None: unknown) named ``unit``
    (singular), the bar labelled ``desc``. ``progress`` that is none of the accepted values is
    an :class:`~fatbinkit.errors.InvalidArgumentError`."""
    return Reporter(progress, total, unit, desc)
