# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install everything, run the live CPU training demo
#   make test   - create .venv, install everything, run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned to the CPU build for the offline demo and tests.
TORCH  ?= torch==2.13.0

.PHONY: demo test bench install lint screenshots

$(BIN)/carl-tui: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[all,dev]"
	touch $@

install: $(BIN)/carl-tui

demo: install
	$(BIN)/carl-tui demo

test: install
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/python -m benchmarks

lint: install
	$(BIN)/ruff check carl_tui tests benchmarks

screenshots: install
	$(BIN)/python screenshots/make.py
