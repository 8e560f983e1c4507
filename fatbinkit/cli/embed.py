"""CLI commands of this group (placeholder until implemented)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this group's sub-commands to the parser."""
