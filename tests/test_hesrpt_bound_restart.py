"""benchmarks/experiments/pollux_bound_restart.py: the per-job bound with the wait to the first slot
and a move cost per change of configuration is at most every registered policy's JCT, job by job,
and lies between the free-switch bound (aligned) and the best single configuration (aligned)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks" / "experiments"))

import pollux_bound as B  # noqa: E402
import pollux_bound_restart as R  # noqa: E402

from lyasched.policy import POLICIES, make_policy  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.synth import synth_workload  # noqa: E402


def small() -> Simulation:
    """As tests/test_hesrpt_bound.py: 12 adaptive-family jobs (wide shape), 20% estimate error;
    a 300 s move cost, so a change of count costs more than some switches gain."""
    s = synth_workload("synth:adaptive,ad_nodes=4,jobs=12", 1, load=1.0)
    return Simulation(s.jobs, s.cluster, seed=1, end_fraction=s.end_fraction, restart_overhead=300.0)


def test_switch_run_charges_each_change():
    t = np.array([[1.0, 5.0], [5.0, 1.0], [1.0, 5.0]])
    assert R.switch_run(t, 0.0) == pytest.approx(3.0)  # every piece on its fastest
    assert R.switch_run(t, 1.0) == pytest.approx(5.0)  # two changes at 1 each
    assert R.switch_run(t, 3.0) == pytest.approx(7.0)  # one config throughout: 1 + 5 + 1
    assert R.switch_run(t[:1], 99.0) == pytest.approx(1.0)


def test_between_the_free_switch_bound_and_the_best_single_configuration():
    sim = small()
    rb = R.restart_bounds(sim)
    free = B.aligned(sim, B.job_bounds(sim))
    single = B.aligned(sim, sim.best_true_runs())
    assert np.all(rb >= free * (1 - 1e-9))
    assert np.all(rb <= single * (1 + 1e-9) + 1e-6)
    assert np.any(rb > free * (1 + 1e-6))  # some job's switch is charged


def test_at_most_every_policys_jct_per_job():
    sim = small()
    rb = R.restart_bounds(sim)
    for name in POLICIES:
        r = sim.run(make_policy(name, seed=0), name=name)
        jct = {x.job.job_id: x.jct for x in r.records}
        for i, j in enumerate(sim.jobs):
            assert rb[i] <= jct[j.job_id] * (1 + 1e-9) + 1e-6, (name, j.job_id, rb[i], jct[j.job_id])
