"""The reliability harness of issue 5: fault, load and bad-input suites against the real Slurm
test cluster (docs/reliability.md).

The tests import it as a package (``from reliability import faults``: tests/ is on pytest's path)
and call its suites at CI sizes; ``benchmarks/reliability.py`` runs the same suites at full size
and prints the figures. Modules:

- `users`: the test users and ``as_user`` (run a command as one of them);
- `faults`: service kills, a slurmctld outage, failing Slurm commands, a purged job;
- `load`: a burst of lyasub submissions, one slot over many held jobs; the shared-cluster lock;
- `badinput`: the table of malformed inputs;
- `flaky_slurm`: the fault injector in front of the real Slurm tools (also run as a script).
"""
