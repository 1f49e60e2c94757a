"""Elastic's group-step fast path (`ElasticPolicy._group_asks`, ``skip_idle_groups``): passing over
group steps that have no victim and whose forecast margin an earlier candidate already kept gives,
at every call of a replay, the same answer as asking every group step (the slow path), wake_at
included."""

from __future__ import annotations

import os

import pytest

from lyasched.policy.elastic import ElasticPolicy
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload, seed_workload

PHILLY = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "traces", "philly.csv")


class Both(ElasticPolicy):
    """The fast path, checked against the slow path on every call's state."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.slow = ElasticPolicy()
        self.slow.skip_idle_groups = False  # type: ignore[misc]
        self.calls = self.skipped = 0

    def _group_asks(self, memo, k, g, t_j, wait_j, ahead, nfree, taken) -> bool:
        asks = super()._group_asks(memo, k, g, t_j, wait_j, ahead, nfree, taken)
        self.skipped += wait_j > t_j and not asks
        return asks

    def decide(self, state):
        res = super().decide(state)
        assert res == self.slow.decide(state)
        self.calls += 1
        return res


def check(sim: Simulation) -> Both:
    pol = Both()
    pol.slow.skip_idle_groups = False  # type: ignore[misc]
    sim.run(pol, name="elastic")
    assert pol.calls > 0 and pol.skipped > 0  # the fast path was taken
    return pol


@pytest.mark.skipif(not os.path.exists(PHILLY), reason="shared Philly trace not present")
def test_philly_prefix():
    """The first 300 Philly jobs (virtual clusters as tenants): long jobs hold the GPUs, dozens wait."""
    w = load_workload(PHILLY, max_jobs=300, load=0.8)
    pol = check(Simulation(w.jobs, w.cluster, seed=0))
    assert pol.skipped > pol.calls


@pytest.mark.parametrize("tenants", [True, False])
def test_seed_workload(tenants):
    w = seed_workload("seed-small-bursty", seed=3, n_jobs=80)
    check(Simulation(w.jobs, w.cluster, seed=3, tenant_input=tenants))


def test_synthetic_mix():
    w = load_workload("synth:mixed160", seed=0)
    check(Simulation(w.jobs, w.cluster, seed=0, end_fraction=w.end_fraction))


def test_slow_path_asks_every_group_step():
    """With the switch off, `_group_asks` passes over only the steps that stop at once."""
    w = load_workload("synth:mixed160", seed=1)
    slow = type("Slow", (Both,), {"skip_idle_groups": False})()
    slow.slow.skip_idle_groups = False  # type: ignore[misc]
    Simulation(w.jobs, w.cluster, seed=1, end_fraction=w.end_fraction).run(slow, name="elastic")
    assert slow.calls > 0 and slow.skipped == 0
