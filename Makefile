# Two commands set everything up on a fresh machine:
#   make demo   - create .venv, install everything, run the live CPU training demo
#   make test   - create .venv, install everything, run the whole test suite: lint, the
#                 suite, the built wheel in a clean environment, and the base suite on the
#                 oldest and the newest Python the project declares
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch is pinned to the CPU build for the offline demo and tests.
TORCH  ?= torch==2.13.0
# Other Pythons for the base suite: on PATH, or installed by pyenv.
find_python = $(firstword $(shell python$(1) -c 'import sys; print(sys.executable)' 2>/dev/null) $(wildcard $(HOME)/.pyenv/versions/$(1).*/bin/python$(1)))
PY_OLDEST ?= $(call find_python,3.10)
PY_NEWEST ?= $(call find_python,3.13)
BUILD  := build/ci

.PHONY: demo test suite lint wheel-check base-suites base-suite-on base-suite bench install screenshots screencast tools browser ray slurm \
	screenshot-browser

$(BIN)/carl-tui: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[all,dev]"
	touch $@

install: $(BIN)/carl-tui

demo: install
	$(BIN)/carl-tui demo

test: install lint suite wheel-check base-suites

suite: install tools
	$(BIN)/python -m pytest -q

# Test tools from the system's package manager, installed where it can (root, or sudo
# without a password, with apt-get; brew for logrotate): logrotate for the tests of following
# a rotated file, Chromium for the browser tests of `carl-tui serve`, Slurm and munge for
# the tests on a real single-node Slurm cluster (tests/slurm_cluster.py starts it as the
# user running the tests). Elsewhere those tests skip saying why (under CI the browser and
# Slurm tests fail instead). `env` passes DEBIAN_FRONTEND through sudo, which drops the
# environment it is given: no package may stop to ask.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo -n)
tools: browser ray slurm
	@command -v logrotate >/dev/null 2>&1 || test -x /usr/sbin/logrotate || \
	  { command -v apt-get >/dev/null 2>&1 && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq logrotate >/dev/null; } || \
	  { command -v brew >/dev/null 2>&1 && brew install logrotate; } || \
	  echo "logrotate is not installed: the log rotation tests will skip"

browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	  { command -v apt-get >/dev/null && $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "make: no Chromium here (not root nor password-less sudo, or no apt-get): the browser tests will skip"

# A real Ray head for the Ray Jobs tests (tests/ray_cluster.py), in its own virtual environment,
# never the project's: `ray[default]` from the package index. Elsewhere those tests skip
# saying why (under CI they fail instead).
ray:
	@test -x build/ray-venv/bin/ray || \
	  { $(PYTHON) -m venv build/ray-venv && build/ray-venv/bin/pip install -q 'ray[default]==2.60.0'; } || \
	  echo "make: Ray could not be installed into build/ray-venv: the Ray tests will skip"

slurm:
	@command -v sbatch >/dev/null && { command -v slurmctld || test -x /usr/sbin/slurmctld; } >/dev/null || \
	  { command -v apt-get >/dev/null && $(SUDO) apt-get update -qq && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null; } || \
	  echo "make: no Slurm here (not root nor password-less sudo, or no apt-get): the Slurm tests will skip"

lint: install
	$(BIN)/ruff check carl_tui tests benchmarks screenshots

# The wheel, installed with only the base dependencies into a fresh environment, outside
# the checkout: help, a replay and a theme switch (tests/wheel_smoke.py).
wheel-check: install
	rm -rf $(BUILD)/dist $(BUILD)/wheel-venv
	$(BIN)/pip wheel --quiet --no-deps --wheel-dir $(BUILD)/dist .
	$(PYTHON) -m venv $(BUILD)/wheel-venv
	$(BUILD)/wheel-venv/bin/pip install --quiet $(BUILD)/dist/carl_tui-*.whl
	cd $(BUILD) && wheel-venv/bin/carl-tui --help > /dev/null
	cd $(BUILD) && wheel-venv/bin/python $(CURDIR)/tests/wheel_smoke.py $(CURDIR)/recordings/tiny-demo.jsonl

# The base suite (no extras: the tests that need torch, trackio, the Hub, Claude, W&B or
# TensorBoard skip) on the oldest and the newest declared Python, where each is installed;
# one line says which is skipped. Under CI (CI set) both must run.
base-suites: install tools
	@$(MAKE) --no-print-directory base-suite-on PY="$(PY_OLDEST)" NAME=oldest VERSION=3.10 VAR=PY_OLDEST
	@$(MAKE) --no-print-directory base-suite-on PY="$(PY_NEWEST)" NAME=newest VERSION=3.13 VAR=PY_NEWEST

base-suite-on:
	@if [ -n "$(PY)" ]; then \
		$(MAKE) --no-print-directory base-suite PY="$(PY)" NAME=$(NAME); \
	elif [ -n "$(CI)" ]; then \
		echo "make test (CI): no Python $(VERSION) for the base suite (set $(VAR)=/path/to/python$(VERSION))"; \
		exit 1; \
	else \
		echo "make test: skipping the base suite on Python $(VERSION): not installed (set $(VAR)=/path/to/python$(VERSION))"; \
	fi

# Snapshots of screens that need an extra (the Hub's and Claude's dialogs) go unused here:
# said, not failed.
base-suite:
	test -x $(BUILD)/base-$(NAME)/bin/python || $(PY) -m venv $(BUILD)/base-$(NAME)
	$(BUILD)/base-$(NAME)/bin/pip install --quiet --upgrade pip
	$(BUILD)/base-$(NAME)/bin/pip install --quiet -e ".[test]"
	$(BUILD)/base-$(NAME)/bin/python -m pytest -q -p no:cacheprovider --snapshot-warn-unused

bench: install
	$(BIN)/python -m benchmarks

screenshots: install
	$(BIN)/python screenshots/make.py
	$(BIN)/python screenshots/fleet.py
	$(BIN)/python screenshots/health.py
	$(BIN)/python screenshots/phases_figure.py

# The README's picture of `carl-tui serve` in a browser (needs Chromium: see browser).
screenshot-browser: install browser
	$(BIN)/python screenshots/browser.py

# The README's animation, from the recording of a real demo run (needs the [screencast] extra).
screencast: install
	$(BIN)/pip install --quiet -e ".[screencast]"
	$(BIN)/python screenshots/screencast.py
