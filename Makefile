# The two commands a new user needs: `make run` (the quick-start pipeline) and `make test`.
# Both create .venv on first use and install what they need, pinned in constraints.txt:
# `make run` the runtime only, `make test` also the test and lint tools and the cluster's extras.
SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -c
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV    := $(VENV)/.installed-dev
KERNELS := $(VENV)/.kernels
CONFIG ?= configs/quickstart.yaml
ARGS   ?=

# pip warns once per package about every index in the machine's pip.conf that is missing
# (hundreds of lines); keep the rest of what pip prints, and its exit status (pipefail).
QUIET_PIP := { grep -v "^WARNING: Location 'file:.*' is ignored" || true; }

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_LOGGING_LEVEL ?= WARNING
# Prefect gives its temporary server 20 s to start; a first start (database migrations) on a
# busy two-core machine can take longer.
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export NUMBA_CACHE_DIR ?= $(CURDIR)/.numba_cache

.PHONY: run test test-fast bench ui lint clean-venv

# --no-compile: no bytecode for the 20,000 files installed, only for the modules imported, the
# first time each is (uv's default): the install from a fresh clone took 88 and 91 s instead of
# 170 and 156, and the first run 13 and 19 s longer (docs/benchmarks.md, "The install").
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip 2>&1 | $(QUIET_PIP)
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e . 2>&1 | $(QUIET_PIP)
	touch $(STAMP)

$(DEV): $(STAMP) pyproject.toml constraints.txt
	$(BIN)/python -m pip install -q --no-compile -c constraints.txt -e '.[dev]' 2>&1 | $(QUIET_PIP)
	touch $(DEV)

# numba's compile of self-play's kernels (about 40 CPU-s of one core) once after the install,
# and again when their sources or the config change, so that the quick start's first iteration
# loads them from the cache instead of spending its budget compiling.
$(KERNELS): $(STAMP) $(wildcard $(CONFIG)) $(shell find tabula model -name '*.py' 2>/dev/null)
	$(BIN)/tabula compile --config $(CONFIG)
	touch $(KERNELS)

run: $(STAMP) $(KERNELS)
	$(BIN)/tabula run --config $(CONFIG) $(ARGS)

test: $(DEV)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(ARGS)

test-fast: $(DEV)
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[bench]' 2>&1 | $(QUIET_PIP)
	mkdir -p bench/results
	for b in engine network selfplay train; do \
		[ -f bench/$$b.py ] && $(BIN)/python -m bench.$$b --json bench/results/$$b.json || exit 1; \
	done

ui: $(STAMP)
	$(BIN)/tabula ui

lint: $(DEV)
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean-venv:
	rm -rf $(VENV)
