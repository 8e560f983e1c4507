# The per-function walk of a cubin in C (_cubin.c): see fatbinkit/formats/cubin.py's _walked.
from typing import Any

def walk(data: bytes, mode: int, param: type, function: type, /) -> tuple[Any, ...] | None: ...
