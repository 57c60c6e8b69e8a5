# Two commands do everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
SHARED_ANNOTATIONS := $(abspath ../shared/rococo-data/annotations)
ifneq ($(wildcard $(SHARED_ANNOTATIONS)),)
export ROCOCO_ANNOTATIONS_DIR ?= $(SHARED_ANNOTATIONS)
endif

.PHONY: run test test-fast test-numpy1 reference-env test-reference bench dist clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch goes in first, pinned, so no other package resolves a multi-GB CUDA build.
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet "torch==2.13.0"
	$(BIN)/pip install --quiet -e ".[test]"
	# open_clip without its torchvision: PyPI's torchvision cannot load beside the CPU torch (docs/cli.md).
	$(BIN)/pip install --quiet --no-deps "open_clip_torch==3.3.0"
	touch $@

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[app]"
	touch $@

# The test extra holds the app extra (pyproject.toml): after `make test`, while pyproject.toml is no newer than that
# install, the Space starts as it is, with nothing to install (and no network).
TESTS_INSTALLED := $(shell [ -f $(VENV)/.installed-test ] && [ ! pyproject.toml -nt $(VENV)/.installed-test ] && \
	echo $(VENV)/.installed-test)
run: $(or $(TESTS_INSTALLED),$(VENV)/.installed-run)
	$(BIN)/python app.py

# The browser test drives Debian's chromium (Playwright's own browser download cannot run here).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "install chromium (Debian package 'chromium') for the browser test"; exit 1; }
	$(SUDO) apt-get update -qq
	$(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null

# The caption attacks read WordNet 3.0 from Debian's wordnet-base (sha256-checked by rococo_eval/lexicon.py).
WORDNET := /usr/share/wordnet/data.noun
$(WORDNET):
	@command -v apt-get >/dev/null || { echo "install WordNet 3.0 (Debian package 'wordnet-base') or set ROCOCO_WORDNET_DIR"; exit 1; }
	$(SUDO) apt-get update -qq
	$(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wordnet-base >/dev/null

# The suite runs in one worker more than there are cores (pytest-xdist; a worker that waits on a command, a server or
# a lock leaves its core to the others), one test file per worker at a time, the longest files first (tests/conftest.py's
# LONGEST_FIRST; docs/index.md). On 2 cores: 684 s with 2 workers, 631 s with 3.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PARALLEL := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
# The workers, and the commands, torchrun ranks and Spaces they start, read the package's bytecode (compiled first,
# into the ignored __pycache__ folders) instead of compiling it again in every process, as they do where the
# environment sets PYTHONDONTWRITEBYTECODE (this machine's does): 622 s of pytest before, 561 s after (2 cores).
BYTECODE := env -u PYTHONDONTWRITEBYTECODE
test: $(VENV)/.installed-test $(CHROMIUM) $(WORDNET) test-numpy1 reference-env
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir build/site  # the docs (mkdocs.yml)
	$(BYTECODE) $(BIN)/python -m compileall -q rococo_eval app.py rococo_recall.py rococo_dataset.py tests/helpers
	# tests/test_docs.py reads the site just built in chromium instead of building its own.
	ROCOCO_DOCS_SITE=$(CURDIR)/build/site ROCOCO_REQUIRE_PY39=1 ROCOCO_REQUIRE_REFERENCE=1 \
		$(BYTECODE) $(BIN)/python -m pytest -q $(PARALLEL) --durations=10

# evaluate copies rococo_recall.py alone into whatever environment loads it, as old as Python 3.9 with NumPy 1.24 (no
# np.bitwise_count there). The metric's tests also run in such an environment: Python 3.9, NumPy 1.24, no torch.
# pyproject's filterwarnings names pandas 3's Pandas4Warning, and pandas 3 needs Python 3.11: -o drops it here.
PY39 ?= $(firstword $(wildcard /root/.pyenv/versions/3.9.18/bin/python) $(shell command -v python3.9 2>/dev/null))
NUMPY1_VENV := .venv-numpy1
METRIC_TESTS := rococo_recall.py tests/metric/test_metric.py tests/metric/test_metric_wrapper.py \
	tests/metric/test_distributed.py tests/metric/test_metric_standalone.py
$(NUMPY1_VENV)/.installed: Makefile
	@[ -n "$(PY39)" ] && "$(PY39)" -c 'import sys; assert sys.version_info[:2] == (3, 9)' 2>/dev/null || { \
		echo "test-numpy1 needs Python 3.9 (PY39='$(PY39)' is not one): install it (pyenv install 3.9.18, or" \
			"python3.9 on PATH) or pass PY39=/path/to/python3.9"; exit 1; }
	rm -rf $(NUMPY1_VENV)
	$(PY39) -m venv $(NUMPY1_VENV)
	$(NUMPY1_VENV)/bin/pip install --quiet --upgrade pip
	# pyarrow 25 and newer import only with NumPy 2 (Python 3.9 gets pyarrow 21 at most anyway).
	$(NUMPY1_VENV)/bin/pip install --quiet "numpy==1.24.4" "pyarrow<25" "evaluate==0.4.6" datasets pillow requests \
		tqdm pyyaml "pytest>=8" "hypothesis>=6.100" ml_dtypes
	touch $@

test-numpy1: $(NUMPY1_VENV)/.installed
	$(NUMPY1_VENV)/bin/python -c 'import sys, numpy; assert sys.version_info[:2] == (3, 9) and \
		numpy.__version__.startswith("1.24.") and not hasattr(numpy, "bitwise_count"), (sys.version, numpy.__version__)'
	PYTHONPATH=. $(NUMPY1_VENV)/bin/python -m pytest -q -o 'filterwarnings=ignore::DeprecationWarning:evaluate.*' \
		$(METRIC_TESTS) -k "not torch"  # no torch there

# The official code of BLIP, VSE infinity and PCME++ (../shared/reference/*-official) runs in one environment of its
# own, for the parity tests tests/models/test_{blip,vse_infty,pcmepp}_official.py. One environment fits all three:
# BLIP's med.py needs transformers 4 (5 removed what it imports), VSE infinity's README says transformers 4.4 and
# newer reproduce it (its EncoderText calls BertModel(ids, mask)), and PCME++ needs only torch. What each adds:
# - BLIP: timm and fairscale without their dependencies beside the pinned torch (unpinned, they pulled a CUDA torch of
#   several GB); torchvision, which timm imports, cannot load beside that torch, so tests/helpers/stand_ins stands in
#   for it (and pycocoevalcap) in BLIP's runs.
# - VSE infinity: imageio 2.9.0 (its pinned version, which its loader's imread decodes with), OpenCV (its resize; the
#   project's version, as both sides must resize alike), and torchvision 0.28 (this torch's) for torch.hub's WSL
#   ResNeXt, in a folder of its own on the VSE runs' path only (transformers would take it for BLIP's stand-in), loaded
#   with its C++ operators' meta registrations stubbed out (tests/helpers/vse_infty_official_run.py).
# - PCME++: ftfy, eccv_caption (its evaluation.py imports it), and huggingface_hub 0.22.2 in a folder of its own:
#   from 0.23 on, from_pretrained turns the config's dicts into dataclasses, which HfPCMEPPModel indexes as dicts.
# Pillow is the project environment's own version: 13.0 resizes portrait images (bicubic) up to 5/255 apart from 12.3,
# and both sides must read the same pixels.
REFERENCE_VENV := .venv-reference
project_version = $$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("$(1)"))')
$(REFERENCE_VENV)/.installed: Makefile $(VENV)/.installed-test
	rm -rf $(REFERENCE_VENV)
	$(PYTHON) -m venv $(REFERENCE_VENV)
	$(REFERENCE_VENV)/bin/pip install --quiet --upgrade pip
	$(REFERENCE_VENV)/bin/pip install --quiet "torch==2.13.0" "transformers==4.46.3" "tokenizers==0.20.3" "numpy==2.4.6" \
		"pyyaml==6.0.4" "pycocotools==2.0.11" "ftfy==$(call project_version,ftfy)" "pillow==$(call project_version,pillow)" \
		"opencv-python-headless==$(call project_version,opencv-python-headless)"
	$(REFERENCE_VENV)/bin/pip install --quiet --no-deps "torch==2.13.0" "timm==1.0.31" "fairscale==0.4.13" \
		"imageio==2.9.0" "eccv_caption==0.1.0"
	$(REFERENCE_VENV)/bin/pip install --quiet --no-deps --target $(REFERENCE_VENV)/torchvision-0.28.0 "torchvision==0.28.0"
	$(REFERENCE_VENV)/bin/pip install --quiet --no-deps --target $(REFERENCE_VENV)/huggingface_hub-0.22.2 \
		"huggingface_hub==0.22.2"
	touch $@

reference-env: $(REFERENCE_VENV)/.installed

test-reference: $(VENV)/.installed-test reference-env
	ROCOCO_REQUIRE_REFERENCE=1 $(BIN)/python -m pytest -q tests/models/test_blip_official.py \
		tests/models/test_vse_infty_official.py tests/models/test_pcmepp_official.py

test-fast: $(VENV)/.installed-test $(CHROMIUM) $(WORDNET)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

bench: $(VENV)/.installed-test
	$(BIN)/python benchmarks/bench_metric.py
	nice $(BIN)/python benchmarks/bench_pipeline.py --repeat 3

# The sdist and the wheel in dist/ (README, "Install"), checked by twine. `python -m build` makes the sdist, then the
# wheel from the sdist, as pip does. It builds in a copy of the files git sees, as a fresh clone holds them: in the
# checkout, setuptools would also pack whatever an old rococo_eval.egg-info/SOURCES.txt lists. tests/test_packaging.py
# builds the same way and installs the wheel in a clean environment.
dist: $(VENV)/.installed-test
	rm -rf dist
	tree=$$(mktemp -d) && trap 'rm -rf "$$tree"' EXIT && \
		git ls-files -z --cached --others --exclude-standard | \
			tar --null --files-from=- --ignore-failed-read --warning=no-failed-read -cf - | tar -xf - -C "$$tree" && \
		$(BIN)/python -m build --outdir "$(CURDIR)/dist" "$$tree"
	$(BIN)/twine check --strict dist/*

clean:
	rm -rf $(VENV) $(NUMPY1_VENV) $(REFERENCE_VENV) build dist *.egg-info
