# Quick start: `make demo` (the whole pipeline on the bundled example), `make test` (the test suite).
# Both create ./.venv on first use and install everything the project needs into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The editable install is "strict": site-packages gets a plain path entry (.pth) to a tree of
# links to the package (build/__editable__.*), which mypy, IDEs and other static tools read like
# any installed package (py.typed included). setuptools' default for this layout is an import
# hook that only the interpreter runs: mypy run outside the repository saw no fatbinkit. The
# link tree knows the files that existed when it was made, so the install runs again when a
# folder of the package changes (a module added or removed), or the C walk of cubins (built in
# place by the install) changes.
PACKAGE_DIRS := $(shell find fatbinkit -type d -not -name __pycache__)

.PHONY: demo test lint gpu-test bench fuzz clean

$(STAMP): pyproject.toml $(PACKAGE_DIRS) fatbinkit/formats/_cubin.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cuda,toolchain,triton,report,survey,test]' --config-settings editable_mode=strict
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m fatbinkit demo

lint: $(STAMP)
	$(VENV)/bin/ruff check fatbinkit tests benchmarks fuzz docs/examples
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest -q tests

gpu-test: $(STAMP)
	$(PY) -m pytest -q tests/gpu

bench: $(STAMP)
	$(PY) benchmarks/embed.py
	$(PY) benchmarks/fatbin.py
	$(PY) benchmarks/inspection.py --write docs/benchmarks-inspect.md
	$(PY) benchmarks/amd.py --write docs/benchmarks-amd.md
	$(PY) benchmarks/hidden.py --write docs/benchmarks-hidden.md
	$(PY) benchmarks/speed.py --write docs/benchmarks-speed.md
	$(PY) benchmarks/report.py --write docs/benchmarks-report.md --screenshots docs/report
	$(PY) benchmarks/survey.py --write docs/benchmarks-survey.md

# Every fuzz target for FUZZ_SECONDS each, two at a time; reproducers and the report in out/fuzz.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	$(PY) -m fuzz --seconds $(FUZZ_SECONDS) --jobs 2 --out out/fuzz --json out/fuzz/report.json

clean:
	rm -rf $(VENV) .fixtures build
