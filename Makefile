# promptweave developer commands. `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
REF_PINS := opencompass==0.5.4 ais-bench-benchmark==3.1.20260630
# the reference wheels are installed without their (heavy, GPU) dependencies; these are the ones
# their prompt-building modules import (see ../shared/spec/golden/refload.py)
REF_DEPS := mmengine-lite numpy datasets transformers==5.24.0 packaging addict pyyaml rich termcolor yapf

.PHONY: help
help:  ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "maturin>=1.9.4,<2" pytest hypothesis pytest-benchmark mypy ruff click pyarrow jinja2 minijinja
	$(PIP) install -q --no-deps $(REF_PINS)
	$(PIP) install -q $(REF_DEPS)
	touch $@

.PHONY: install
install: $(VENV)/.installed  ## create .venv with the dev tools and the two reference wheels

.PHONY: build-dev
build-dev: install  ## build the extension (debug) into .venv
	rm -f python/promptweave/*.so
	$(VENV)/bin/maturin develop --locked -q

.PHONY: build-prod
build-prod: install  ## build the extension (release) into .venv
	rm -f python/promptweave/*.so
	$(VENV)/bin/maturin develop --locked --release -q

.PHONY: demo
demo: build-prod  ## install and render the built-in demo
	$(PY) -m promptweave demo

.PHONY: format
format: install  ## format Rust and Python
	cargo fmt --all
	$(VENV)/bin/ruff format python tests benches
	$(VENV)/bin/ruff check --fix python tests benches

.PHONY: lint-rust
lint-rust:  ## rustfmt check and clippy (warnings are errors)
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --locked -- -D warnings

.PHONY: lint-python
lint-python: build-dev  ## ruff, mypy --strict and stubtest
	$(VENV)/bin/ruff check python tests benches
	$(VENV)/bin/ruff format --check python tests benches
	$(VENV)/bin/mypy --strict python/promptweave
	$(PY) -m mypy.stubtest promptweave._core --allowlist .mypy-stubtest-allowlist

.PHONY: test-rust
test-rust:  ## the Rust core's tests (units, golden fixtures, properties)
	cargo test -p promptweave-core --locked

.PHONY: test-python
test-python: build-dev  ## pytest (the reference must be importable: it is installed by `install`)
	PROMPTWEAVE_REQUIRE_REFERENCE=1 $(PY) -m pytest -q
	PROMPTWEAVE_REQUIRE_REFERENCE=1 $(PY) -m pytest -q benches --benchmark-disable

.PHONY: test
test: install test-rust test-python  ## install everything, then run the whole test suite

.PHONY: test-slow
test-slow: build-dev  ## the parity property tests with 1000 examples each
	HYPOTHESIS_PROFILE=slow PROMPTWEAVE_REQUIRE_REFERENCE=1 $(PY) -m pytest -q tests/test_parity.py

.PHONY: bench
bench: build-prod  ## benchmarks against the reference (release build), with ratios
	$(PY) benches/report.py

.PHONY: fuzz
fuzz:  ## fuzz the core for 5 minutes per target
	for target in format markers meta template; do \
		RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir rust/fuzz $$target -- -max_total_time=300 || exit 1; \
	done

.PHONY: all
all: format lint-rust lint-python test  ## format, lint and test
