# One command per job. Both create .venv on first use and reinstall when pyproject.toml changes.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
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
