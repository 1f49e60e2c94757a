"""benchmarks/experiments/pollux_bound.py: each job's least JCT under the simulator's model is at
most its JCT under every registered policy, it is the simulator's own run time (no wait added),
and switching counts between pieces is what makes it lower than the best single configuration."""

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks" / "experiments"))

import pollux_bound as B  # noqa: E402

from lyasched.costmodel import goodput  # noqa: E402
from lyasched.policy import POLICIES, make_policy  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.synth import synth_workload  # noqa: E402

POLICY_NAMES = tuple(POLICIES)  # every registered policy


def small() -> Simulation:
    """12 jobs of the adaptive family's wide shape (adaptive jobs up to 4 nodes; at seed 1 two of
    them run fastest on other counts in later pieces), 20% estimate error: factors differ from 1."""
    s = synth_workload("synth:adaptive,ad_nodes=4,jobs=12", 1, load=1.0)
    return Simulation(s.jobs, s.cluster, seed=1, end_fraction=s.end_fraction)


def test_bound_is_at_most_every_policys_jct_per_job():
    sim = small()
    b = B.job_bounds(sim)
    al = B.aligned(sim, b)
    assert np.all(b <= al)
    assert any(j.adaptive is not None for j in sim.jobs)
    for name in POLICY_NAMES:
        r = sim.run(make_policy(name, seed=0), name=name)
        jct = {x.job.job_id: x.jct for x in r.records}
        for i, j in enumerate(sim.jobs):
            assert al[i] <= jct[j.job_id] * (1 + 1e-9) + 1e-6, (name, j.job_id, al[i], jct[j.job_id])


def test_bound_is_the_simulators_run_on_the_best_configuration_per_piece():
    """No job's bound exceeds the simulator's own run from the start on any one count (so nothing
    such as a wait or the estimate factor is added), and for an adaptive job it is the sum over
    pieces of the least piece time the simulator's progress walk gives."""
    sim = small()
    b = B.job_bounds(sim)
    gpn = sim.cluster.gpus_per_node
    lower = 0
    for i, j in enumerate(sim.jobs):
        configs = [(g, spans) for g in goodput.allowed_counts(sim.cost, j) if g <= sim.row_len
                   for spans in (False, True) if (spans or g <= gpn) and (g > 1 or not spans)]
        runs = [sim.true_left(i, g, spans, 1.0) for g, spans in configs]
        best = min(r for r in runs if math.isfinite(r))
        assert b[i] <= best * (1 + 1e-9)
        if j.adaptive is None:
            assert b[i] == pytest.approx(best, rel=1e-9)
            continue
        lower += b[i] < best * (1 - 1e-6)
        # each piece on its own fastest count, timed by the simulator's run_time over one piece
        n = j.adaptive.pieces
        per = 0.0
        for k in range(n):
            per += min(sim.true_left(i, g, spans, 1.0 - k / n) - sim.true_left(i, g, spans, 1.0 - (k + 1) / n)
                       for g, spans in configs if math.isfinite(sim.true_left(i, g, spans, 1.0 - k / n)))
        assert b[i] == pytest.approx(per, rel=1e-9)
    assert lower >= 1  # some adaptive job's fastest count changes between its pieces


def test_bound_is_reached_by_a_job_alone():
    """One fixed-batch job submitted on a slot boundary, alone: some policy gives it its best
    configuration at once, so its JCT equals the bound (a bound with any wait added fails here)."""
    s = synth_workload("synth:adaptive,jobs=12", 0, load=1.0)
    job = next(j for j in s.jobs if j.adaptive is None)
    one = replace(job, submit_time=0.0)
    sim = Simulation([one], s.cluster, seed=0, estimate_error=0.0)
    b = float(B.job_bounds(sim)[0])
    assert b == pytest.approx(float(sim.best_true_runs()[0]), rel=1e-12)
    jcts = [sim.run(make_policy(p, seed=0), name=p).records[0].jct for p in ("elastic", "lyapunov", "pollux")]
    assert min(jcts) == pytest.approx(b, rel=1e-9)
    assert all(x >= b * (1 - 1e-9) for x in jcts)


def test_aligned_adds_the_wait_to_the_next_slot():
    s = synth_workload("synth:adaptive,jobs=12", 0, load=1.0)
    sim = Simulation(s.jobs, s.cluster, seed=0, slot_len=60.0)
    b = B.job_bounds(sim)
    al = B.aligned(sim, b)
    for i, j in enumerate(sim.jobs):
        assert al[i] - b[i] == pytest.approx(math.ceil(j.submit_time / 60.0) * 60.0 - j.submit_time, abs=1e-6)


def test_capacity_bound_between_the_per_job_bound_and_every_policy():
    """The LP that also counts the cluster's GPUs is at least the per-job bound's mean (C_j >= r_j +
    T_j) and at most every registered policy's average JCT; on a one-node cluster, where jobs that
    arrive together cannot all run at their best, it is above the per-job bound."""
    sim = small()
    cb = B.capacity_bound(sim, 60.0)
    assert cb >= float(B.job_bounds(sim).mean()) * (1 - 1e-6)
    for name in POLICY_NAMES:
        r = sim.run(make_policy(name, seed=0), name=name)
        assert cb <= float(np.mean([x.jct for x in r.records])) * (1 + 1e-6), name
    s = synth_workload("synth:adaptive,jobs=12", 0, load=1.0)
    crowded = [replace(j, submit_time=0.0, job_id=f"{j.job_id}-{k}") for k in range(3) for j in s.jobs[:2]]
    one = Simulation(crowded, replace(s.cluster, nodes=1), seed=0, estimate_error=0.0)
    cb1 = B.capacity_bound(one, 60.0)
    assert cb1 > float(B.job_bounds(one).mean()) * 1.05
    for name in ("pollux", "hesrpt", "elastic", "fifo"):
        assert cb1 <= float(np.mean([x.jct for x in one.run(make_policy(name, seed=0)).records])) * (1 + 1e-6)
