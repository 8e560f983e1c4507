"""fatbinkit's fuzz harness: structure-aware mutants of the test fixtures through every reader.

``python -m fuzz`` (``make fuzz``) runs campaigns; ``tests/test_fuzz.py`` runs a short, fixed one.
"""
