# `make test` and `make demo` are the whole set-up: each installs what it needs first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
SWORD := /usr/share/sword/modules/texts/ztext
STAMP := $(VENV)/.installed

.PHONY: setup sword lint format test demo own ladder bench clean

setup: $(STAMP)

# torch first, from the CPU build pinned here (a bare `torch` would fetch CUDA);
# fairseq with --no-deps (it declares torchaudio); its real deps from requirements.txt.
$(STAMP): requirements.txt pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q --no-deps ve-fairseq==0.12.3
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PY) -c "import torch, fairseq, luong_plugin; print('torch', torch.__version__, 'fairseq', fairseq.__version__)"
	touch $@

# Debian packages: the Bible texts (public domain) for the demo and the end-to-end
# tests, tcmalloc, which recipes/with_tcmalloc preloads for the demo, ladder and bench,
# and chromium, the real browser the explorer's page is tested in (tests/test_explore.py,
# driven by PyPI's playwright; no browser is downloaded at run time).
sword:
	@if [ ! -d $(SWORD)/spaRV1909eb ] || [ ! -d $(SWORD)/engWEB2015eb ] \
	   || ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep -q 'libtcmalloc_minimal\.so\.4 ' \
	   || ! command -v chromium >/dev/null; then \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq \
	  && $$SUDO apt-get install -y -qq sword-text-sparv sword-text-web libtcmalloc-minimal4 chromium; \
	fi

# black and isort as configured in pyproject.toml; flake8 (.flake8) for real errors
# only: syntax errors, undefined or unused names. `make format` rewrites the tree.
LINTED := luong_plugin tests bench recipes experiments configs
lint: setup
	$(PY) -m black --check --quiet $(LINTED)
	$(PY) -m isort --check-only --quiet $(LINTED)
	$(PY) -m flake8 $(LINTED)

format: setup
	$(PY) -m isort --quiet $(LINTED)
	$(PY) -m black --quiet $(LINTED)

# The suite in TEST_JOBS processes (pytest-xdist), a file's tests in one process, so that
# a file's module fixtures are built once (session fixtures once per process); every test
# runs on one thread (tests/conftest.py), its fairseq subprocesses too.
TEST_JOBS ?= 2
test: setup sword lint
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadfile tests

# The main job: real Spanish->English text, trained and evaluated on the CPU (~20 min).
demo: setup sword
	bash recipes/bible_es_en/demo.sh

# The demo's model on your own parallel text (recipes/own_text/README.md):
#   make own SRC=my.de TGT=my.en OUT=runs/my_de_en [ARGS="--minutes 60"]
own: setup
	@[ -n "$(SRC)" ] && [ -n "$(TGT)" ] && [ -n "$(OUT)" ] \
	  || { echo "usage: make own SRC=FILE TGT=FILE OUT=DIR [ARGS=...]" >&2; exit 2; }
	bash recipes/own_text/run.sh --src "$(SRC)" --tgt "$(TGT)" --out "$(OUT)" $(ARGS)

# The papers' Tables 1 and 4, RNNsearch/RNNencdec and fairseq's lstm at CPU scale, word level,
# two seeds, one budget for all (1 h 23 min on 2 cores from a fresh clone); resumes where it stopped;
# writes docs/experiments/ladder/*.json, docs/RESULTS.md and docs/img/ladder.png.
ladder: setup sword
	bash recipes/bible_es_en/prepare.sh
	recipes/with_tcmalloc $(PY) -m experiments.ladder

# Benchmarks against fairseq's own lstm (~12 min on 2 cores), one page per kind of CPU: on a CPU
# with AMX (lscpu lists amx_bf16) docs/BENCHMARKS_AMX.md and its run's results in
# docs/experiments/bench_amx/, on others docs/BENCHMARKS.md and docs/experiments/bench/
AMX := $(if $(shell grep -m1 -ow amx_bf16 /proc/cpuinfo 2>/dev/null),yes,)
BENCH_PAGE := docs/BENCHMARKS$(if $(AMX),_AMX,).md
BENCH_DATA := docs/experiments/bench$(if $(AMX),_amx,)
bench: setup sword
	recipes/with_tcmalloc $(PY) bench/run.py --out $(BENCH_PAGE) \
		--json $(BENCH_DATA)/make_bench_$$(git rev-parse --short HEAD).json

clean:
	rm -rf $(VENV) data data-bin checkpoints runs
