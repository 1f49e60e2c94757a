# Two entry points for users: `make demo` (whole system on this machine) and `make test`.
# Everything runs in a virtual environment of the project (.venv), never the system Python: a
# dependency that pyproject.toml forgets to declare then fails here, not on a user's machine.
VENV ?= .venv
PY ?= $(VENV)/bin/python

.PHONY: install test test-unit typecheck demo pyslurm docker-up docker-down test-docker

install: $(VENV)/bin/python
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,profile]'

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# The README's test command; .ci/run calls it (with the Slurm cluster up and LYASCHED_SLURM=1).
test:
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit:
	$(PY) -m pytest -q -m "not slurm" tests

# mypy over lyasched/ with the settings of pyproject.toml ([tool.mypy]); .ci/run calls it before the tests.
typecheck:
	$(PY) -m mypy

# The whole system on this machine (root): Slurm test cluster up, `lyasched serve` in the background,
# example jobs submitted with lyasub, wait until finished, lyastat, service stopped (slurm/demo.sh).
demo:
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
