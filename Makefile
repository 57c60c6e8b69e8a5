# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SHARED_ANNOTATIONS := $(abspath ../shared/rococo-data/annotations)
ifneq ($(wildcard $(SHARED_ANNOTATIONS)),)
export ROCOCO_ANNOTATIONS_DIR ?= $(SHARED_ANNOTATIONS)
endif

.PHONY: run test test-fast bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch goes in first, pinned, so no other package resolves a multi-GB CUDA build.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[test]"
	# open_clip without its torchvision: PyPI's torchvision cannot load beside the CPU torch (see README).
	$(BIN)/pip install --quiet --no-deps "open_clip_torch==3.3.0"
	touch $@

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[app]"
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/python app.py

# The browser test drives Debian's chromium (Playwright's own browser download cannot run here).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install chromium (Debian package 'chromium') for the browser test"; exit 1; }
	$(SUDO) apt-get update -qq
	$(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

test: $(VENV)/.installed-test $(CHROMIUM)
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed-test $(CHROMIUM)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_metric.py

clean:
	rm -rf $(VENV) build *.egg-info
