"""Shared test fixtures (third-party binaries: see tests/thirdparty.py)."""
