# The newcomer path: `make demo` runs the main job, `make test` runs the tests.
# Both create the virtual environment (.venv) on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3
# The CPU build of torch; an unpinned install would pull a multi-GB CUDA build.
# On a GPU machine: make setup TORCH=torch
TORCH ?= torch==2.13.0

.PHONY: setup demo check test lint bench

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	# BFCL's data and backends; --no-deps because its metadata pulls every model vendor's SDK.
	$(PY) -m pip install -q --no-deps "bfcl-eval==2026.3.23"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/agentgym train

check: setup
	$(VENV)/bin/agentgym envs check --all

test: setup
	$(PY) -m pytest -q

lint: setup
	$(VENV)/bin/ruff check agentgym envs trainers containers tests bench

bench: setup
	$(PY) bench/env_server.py
	$(PY) bench/sandbox.py
	$(PY) bench/envs.py
	$(PY) bench/rollout.py
	$(PY) bench/trainer.py
	$(PY) bench/async.py
	$(PY) bench/weight_sync.py
