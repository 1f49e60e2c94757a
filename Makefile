# Two entry points for users: `make demo` (whole system on this machine) and `make test`.
PY ?= python3

.PHONY: install test test-unit demo

install:
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,profile]'

# The README's test command; .ci/run calls it (with the Slurm cluster up and LYASCHED_SLURM=1).
test:
	$(PY) -m pytest -q -p no:cacheprovider tests

test-unit:
	$(PY) -m pytest -q -m "not slurm" tests

# The whole system on this machine (root): Slurm test cluster up, `lyasched serve` in the background,
# example jobs submitted with lyasub, wait until finished, lyastat, service stopped (slurm/demo.sh).
demo:
	PY=$(PY) bash slurm/demo.sh
