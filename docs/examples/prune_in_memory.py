"""Prune in memory: a library's bytes in, the pruned bytes out, no file written by fatbinkit (a
service that slims what it downloads, an object store to an object store).

    python docs/examples/prune_in_memory.py INPUT OUTPUT ARCH...

Keeps what GPUs of ``ARCH`` load (``sm_90``: SASS for sm_90 and the PTX they JIT) and drops the
rest; ``INPUT`` is never written to, ``OUTPUT`` is written here, by the script.
"""

from __future__ import annotations

import sys
from pathlib import Path

import fatbinkit.slim


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: prune_in_memory.py INPUT OUTPUT ARCH...", file=sys.stderr)
        return 2
    source, target, archs = Path(argv[0]), Path(argv[1]), argv[2:]
    data = source.read_bytes()
    try:
        report = fatbinkit.slim.prune(data, archs=archs)
    except fatbinkit.FatbinkitError as error:  # nothing would be left, unreadable input...
        print(f"prune_in_memory: error: {error}", file=sys.stderr)
        return 3
    pruned = report.data
    if not isinstance(pruned, bytes):
        raise TypeError(f"prune of bytes returned no bytes: {type(pruned).__name__}")
    target.write_bytes(pruned)
    print(report)
    print(f"{len(data):,} -> {len(pruned):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
