# One command per job. Both create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# numba compiles each kernel on its first call and caches it on disk (app/core/__pycache__,
# keyed on the source's contents): the install compiles them all (`neardup warm-up`, some
# 20 s), so that a start only loads them; $(VENV)/.kernels compiles again after a change.
KERNEL_SOURCES := $(wildcard app/core/*.py) app/warmup.py

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	$(BIN)/neardup warm-up
	touch $@ $(VENV)/.kernels

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/neardup warm-up
	touch $@ $(VENV)/.installed-run $(VENV)/.kernels

$(VENV)/.kernels: $(KERNEL_SOURCES) | $(VENV)/.installed-run
	$(BIN)/neardup warm-up
	touch $@

run: $(VENV)/.installed-run $(VENV)/.kernels
	NEARDUP_DATA_DIR=$${NEARDUP_DATA_DIR:-./data} $(BIN)/neardup serve

lint: $(VENV)/.installed-test
	$(BIN)/ruff check app tests bench loadtest
	$(BIN)/ruff format --check app tests bench loadtest
	$(BIN)/mypy --strict app

test: lint
	$(BIN)/pytest -q

bench: $(VENV)/.installed-test
	$(BIN)/python bench/fingerprints.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
