# Two entry points for users: `make demo` (whole system on this machine) and `make test`.
# Everything runs in a virtual environment of the project (.venv), never the system Python: a
# dependency that pyproject.toml forgets to declare then fails here, not on a user's machine.
VENV ?= .venv
PY ?= $(VENV)/bin/python

.PHONY: install ensure-install test test-unit typecheck demo pyslurm docker-up docker-down test-docker figures

install: $(VENV)/bin/python
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,profile]'

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# Installs into .venv first when its Python cannot import what the suite and the demo need.
ensure-install:
	@$(PY) -c 'import torch, lyasched, pytest' 2>/dev/null || $(MAKE) install

# The README's test command: the whole suite. Installs when needed; as root it also starts the
# local Slurm test cluster when it is down (left running; `slurm/cluster down` stops it) and
# runs the real-cluster tests. Not root: those are skipped (and say so). .ci/run calls it with
# the cluster already up and LYASCHED_SLURM=1.
test: ensure-install
	@if [ -z "$${LYASCHED_SLURM:-}" ] && [ "$$(id -u)" = 0 ]; then \
	  slurm/cluster status >/dev/null 2>&1 || PYTHON=$(abspath $(PY)) slurm/cluster up; \
	  export LYASCHED_SLURM=1; fi; \
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit: ensure-install
	$(PY) -m pytest -q -m "not slurm" tests

# docs/results.md and docs/results-headline.md regenerated from the user-facing benchmarks
# (benchmarks/figures.py; FIGURES_ARGS=--quick for the few-minute version).
figures:
	$(PY) benchmarks/figures.py $(FIGURES_ARGS)

# mypy over lyasched/ with the settings of pyproject.toml ([tool.mypy]); .ci/run calls it before the tests.
typecheck:
	$(PY) -m mypy

# The whole system on this machine (root): Slurm test cluster up, `lyasched serve` in the background,
# example jobs submitted with lyasub, wait until finished, lyastat, service stopped (slurm/demo.sh).
demo: ensure-install
	PY=$(PY) bash slurm/demo.sh

# The dockerized Slurm cluster (controller + slurmdbd, 3 nodes, login, service host: docker/cluster,
# docs/test-cluster.md) and the real-cluster tests against it, as root.
docker-up:
	docker/cluster up

docker-down:
	docker/cluster down

# The slurm-marked suite plus the docker-only tests (multi-host DDP, accounting, faults).
test-docker:
	LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker $(PY) -m pytest -q -p no:cacheprovider -m slurm tests

# PySlurm 22.5.3 (matches Debian bookworm's Slurm 22.05; the package index only has 25.11) for the
# `pyslurm` Slurm backend (docs/slurm-backends.md). Built once from ../shared/vendor into .whl/ (ignored,
# cached: ~5 min on 2 cores), then installed into the venv. Needs apt's libslurm-dev (installed if missing).
SHARED ?= $(firstword $(wildcard ../shared ../../shared /work/shared))
PYSLURM_VERSION = 22.5.3
PYSLURM_WHEEL_DIR ?= .whl

pyslurm: $(VENV)/bin/python
	PY=$(PY) SHARED=$(SHARED) WHEEL_DIR=$(PYSLURM_WHEEL_DIR) VERSION=$(PYSLURM_VERSION) bash slurm/pyslurm-wheel
