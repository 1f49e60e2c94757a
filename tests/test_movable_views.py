"""The replay's movable views made per slot (`lyasched.sim.moves.policy_view`, `_Fixed.view` and the
builder's preemptive running views) equal `movable_view` made afresh from the same running segment,
field by field, at every call of a replay."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from lyasched.policy.elastic import ElasticPolicy
from lyasched.policy.movable import MovableJob
from lyasched.sim import Simulation
from lyasched.sim import moves as mv
from lyasched.sim.workloads import load_workload, seed_workload

PHILLY = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "traces", "philly.csv")


def same_field(x, y) -> bool:
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and np.array_equal(x, y, equal_nan=True)
    return bool(x == y or (x != x and y != y))  # nan equals nan here


FIELDS = [f.name for f in dataclasses.fields(MovableJob)]


def diff(a: MovableJob, b: MovableJob) -> list:
    """The fields (every dataclass field, as read) that differ."""
    return [(k, getattr(a, k), getattr(b, k)) for k in FIELDS if not same_field(getattr(a, k), getattr(b, k))]


def checked_replay(monkeypatch, sim: Simulation) -> int:
    real = mv.policy_view
    seen = [0]

    def checking(sim_, state, running, records, oracle, moves):
        out = real(sim_, state, running, records, oracle, moves)
        for r, base, got in zip(running.values(), state.running, out.running):
            j = sim_.jobs[r.idx]
            if j.adaptive is not None:
                continue
            want = mv.movable_view(
                base, job=j, template=sim_._template(j, None),
                scale=j.iterations * (float(sim_.factors[r.idx]) if oracle else 1.0), overhead=r.overhead,
                frac_at_start=r.frac_at_start, now=state.now, held_before=records[r.idx].run_s,
                checkpointable=bool(sim_.checkpointable[r.idx]), move_cost=float(sim_.move_costs[r.idx]),
                moves=records[r.idx].preemptions)
            assert isinstance(got, MovableJob) and not diff(got, want), diff(got, want)
            seen[0] += 1
        return out

    monkeypatch.setattr(mv, "policy_view", checking)
    sim.run(ElasticPolicy(), name="elastic")
    return seen[0]


@pytest.mark.skipif(not os.path.exists(PHILLY), reason="shared Philly trace not present")
def test_philly_prefix(monkeypatch):
    w = load_workload(PHILLY, max_jobs=200, load=0.8)
    assert checked_replay(monkeypatch, Simulation(w.jobs, w.cluster, seed=0)) > 1000


def test_seed_workload_with_moves(monkeypatch):
    """Jobs suspended and resized (a running job's held time and moves change between its runs)."""
    w = seed_workload("seed-small-bursty", seed=3, n_jobs=80)
    sim = Simulation(w.jobs, w.cluster, seed=3)
    assert checked_replay(monkeypatch, sim) > 100
