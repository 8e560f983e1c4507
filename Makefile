# Quick start: `make demo` (the whole pipeline on the bundled example), `make test` (the test suite).
# Both create ./.venv on first use and install everything the project needs into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint gpu-test bench fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cuda,toolchain,triton,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m fatbinkit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check fatbinkit tests benchmarks fuzz
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q tests

gpu-test: $(STAMP)
	$(PY) -m pytest -q tests/gpu

bench: $(STAMP)
	$(PY) benchmarks/embed.py
	$(PY) benchmarks/fatbin.py
	$(PY) benchmarks/inspection.py --write docs/benchmarks-inspect.md

# Every fuzz target for FUZZ_SECONDS each, two at a time; reproducers and the report in out/fuzz.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	$(PY) -m fuzz --seconds $(FUZZ_SECONDS) --jobs 2 --out out/fuzz --json out/fuzz/report.json

clean:
	rm -rf $(VENV) .fixtures
