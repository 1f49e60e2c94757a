"""Elastic's wake_at (`ElasticPolicy._quiet_wake`, `moveplan.Quiet`): a replay that skips the slots
elastic says cannot change anything schedules every job as a replay that asks it every slot."""

from __future__ import annotations

import dataclasses
import os

import pytest

from lyasched.policy.elastic import ElasticPolicy
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload, seed_workload

PHILLY = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "traces", "philly.csv")


class EverySlot(ElasticPolicy):
    """Elastic asked every slot: its answers without wake_at."""

    def decide(self, state):
        res = super().decide(state)
        return dataclasses.replace(res, info={k: v for k, v in res.info.items() if k != "wake_at"})


def schedule(result):
    return [(r.job.job_id, [(s.start, s.end, s.gpus, s.spans_nodes) for s in r.segments], r.first_start, r.end,
             r.preemptions, r.resizes) for r in result.records]


def same_as_every_slot(sim: Simulation, **params) -> tuple[int, int]:
    skip = sim.run(ElasticPolicy(**params), name="elastic")
    every = sim.run(EverySlot(**params), name="elastic")
    assert schedule(skip) == schedule(every)
    assert sum(r.preemptions for r in skip.records) > 0  # moves were made: the swaps were weighed
    return skip.decide_calls, every.decide_calls


@pytest.mark.parametrize("tenants", [True, False])
def test_seed_workload_with_and_without_tenants(tenants):
    """seed-small-bursty (eight tenants) at seed 3: a grow the old nothing-waits skip missed (it
    assumed a grow's worth does not change while nothing waits) is made at the same slot."""
    w = seed_workload("seed-small-bursty", seed=3, n_jobs=80)
    sim = Simulation(w.jobs, w.cluster, seed=3, tenant_input=tenants)
    assert sim.tenant_input == tenants
    skip, every = same_as_every_slot(sim)
    assert skip < every


@pytest.mark.parametrize("seed", [0, 1])
def test_synthetic_mix(seed):
    w = load_workload("synth:mixed160", seed=seed)
    sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction)
    skip, every = same_as_every_slot(sim)
    assert skip < every


@pytest.mark.skipif(not os.path.exists(PHILLY), reason="shared Philly trace not present")
def test_philly_window_with_long_jobs():
    """The first 12 Philly jobs at load 1 (virtual clusters as tenants): weeks-long jobs run while
    others wait and elastic weighs swaps every slot; the replay skips nearly all of those slots."""
    w = load_workload(PHILLY, max_jobs=12, load=1.0)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    skip, every = same_as_every_slot(sim)
    assert skip * 10 < every
