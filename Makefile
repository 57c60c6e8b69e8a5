# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
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
	touch $@

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[app]"
	touch $@

run: $(VENV)/.installed-run
	$(BIN)/python examples/quickstart.py

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_metric.py

clean:
	rm -rf $(VENV) build *.egg-info
