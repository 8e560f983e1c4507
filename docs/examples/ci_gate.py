"""A CI gate: fail the build (exit 1) when a library, wheel or folder breaks the project's rules,
printing each violation; exit 0 and one summary line when every rule holds.

    python docs/examples/ci_gate.py [--max-registers N] [--require-arch ARCH]... INPUT...

The rules are this project's policy, given in code (``RULES``); the options tighten them for
one run. Each library read is logged to stderr as the gate goes (``progress``), so a slow CI
job shows where it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import fatbinkit
import fatbinkit.gate
import fatbinkit.progress

#: the policy: every kernel within 255 registers, and loadable on A100s and H100s
RULES = fatbinkit.gate.Rules(
    max_registers=255,
    require_archs=(fatbinkit.Arch(80), fatbinkit.Arch(90)),
)


def log(step: fatbinkit.progress.Step) -> None:
    """One line per library read, on stderr."""
    print(f"gate: {step}", file=sys.stderr)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT")
    parser.add_argument("--max-registers", type=int, default=RULES.max_registers)
    parser.add_argument("--require-arch", action="append", default=[], metavar="ARCH")
    args = parser.parse_args(argv)
    rules = dataclasses.replace(
        RULES, max_registers=args.max_registers,
        require_archs=RULES.require_archs + tuple(
            fatbinkit.Arch.parse(a) for a in args.require_arch))
    try:
        result = fatbinkit.gate.gate(args.inputs, rules, progress=log)
    except fatbinkit.FatbinkitError as error:  # unreadable input: not a verdict
        print(f"ci_gate: error: {error}", file=sys.stderr)
        return 3
    for violation in result.violations:
        print(violation)
    for note in result.notes:
        print(f"note: {note}")
    kernels = sum(len(lib.kernels) for lib in result.snapshot.libraries)
    print(f"{'passed' if result.ok else 'FAILED'}: {len(result.violations)} violation(s) in "
          f"{kernels} kernel images of {len(result.snapshot.libraries)} libraries ({rules})")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
