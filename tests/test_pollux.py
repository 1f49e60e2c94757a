"""The pollux baseline (lyasched.policy.pollux): its objective, restart penalty, placement rules,
and whole replays the simulator accepts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyasched.policy import POLICIES, capabilities_of, make_policy
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import SlotState, WaitingJob
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload

INF = math.inf


def rows(times: dict[int, float], n: int, gpn: int) -> tuple[np.ndarray, np.ndarray]:
    one, multi = np.full(n, INF), np.full(n, INF)
    for g, t in times.items():
        if g <= gpn:
            one[g - 1] = t
        if g > 1:
            multi[g - 1] = t * (1.1 if g <= gpn else 1.0)
    return one, multi


def waiting(jid: str, times: dict[int, float], n: int = 8, gpn: int = 4, submit: float = 0.0) -> WaitingJob:
    one, multi = rows(times, n, gpn)
    return WaitingJob(jid, submit, work=times[min(times)], run_one_node=one, run_multi_node=multi)


def state(waiting_jobs, running=(), free=(4, 4), now=1000.0) -> SlotState:
    return SlotState(now=now, slot_len=30.0, free=tuple(free), gpus_per_node=4, waiting=tuple(waiting_jobs),
                     running=tuple(running))


def test_registered_and_moves():
    assert "pollux" in POLICIES
    caps = capabilities_of("pollux")
    assert caps.moves and caps.preemptive and not caps.needs_true_runtimes


def test_gpus_go_to_the_job_that_gains():
    scales = waiting("scales", {g: 1000.0 / g for g in (1, 2, 4, 8)}, submit=0.0)
    flat = waiting("flat", {g: 1000.0 * (1 + 0.01 * g) for g in (1, 2, 4, 8)}, submit=1.0)
    res = make_policy("pollux").decide(state([scales, flat]))
    got = {d.job_id: d.gpus for d in res.starts}
    assert got["flat"] == 1 and got["scales"] == 4  # 8 would need both nodes whole
    assert sum(got.values()) <= 8 and not res.preempt


def test_one_job_takes_whole_nodes_when_it_scales():
    j = waiting("a", {g: 1000.0 / g for g in (1, 2, 3, 4, 8)})
    (d,) = make_policy("pollux").decide(state([j])).starts
    assert d.gpus == 8 and sorted(d.placement) == [(0, 4), (1, 4)]


def test_more_jobs_than_gpus_oldest_admitted():
    jobs = [waiting(f"j{k}", {1: 100.0 + k}, submit=float(10 - k)) for k in range(10)]
    res = make_policy("pollux").decide(state(jobs))
    assert {d.job_id for d in res.starts} == {f"j{k}" for k in range(2, 10)}  # submitted at 1..8


def movable(jid: str, g: int, placement, start: float, waited: float, moves: int, times: dict[int, float]) -> MovableJob:
    one, multi = rows(times, 8, 4)
    return MovableJob(job_id=jid, gpus=g, placement=tuple(placement), start_time=start, expected_end=INF,
                      preemptible=True, predicted_end=start + times[g], requested_gpus=1, move_cost_s=30.0,
                      waited_s=waited, moves=moves, remaining_one_node=one, remaining_multi_node=multi)


def test_restart_penalty_keeps_young_jobs_where_they_are():
    times = {g: 1000.0 / g for g in (1, 2, 4, 8)}
    young = movable("r", 1, [(0, 1)], start=990.0, waited=0.0, moves=1, times=times)  # age 10 s, one restart
    res = make_policy("pollux").decide(state([], [young], free=(3, 4), now=1000.0))
    assert not res.preempt and not res.starts
    old = movable("r", 1, [(0, 1)], start=0.0, waited=0.0, moves=0, times=times)  # age 1000 s: grows
    res = make_policy("pollux").decide(state([], [old], free=(3, 4), now=1000.0))
    assert res.preempt == ("r",) and res.starts[0].gpus == 8


def test_kept_jobs_keep_their_gpus():
    times = {1: 1000.0, 2: 1000.0}  # no gain from a second GPU
    a = movable("a", 1, [(1, 1)], start=0.0, waited=0.0, moves=0, times=times)
    b = waiting("b", {1: 500.0, 2: 260.0}, submit=2000.0)
    res = make_policy("pollux").decide(state([b], [a], free=(4, 3), now=3000.0))
    assert "a" not in res.preempt
    assert all(n != 1 or k <= 3 for d in res.starts for n, k in d.placement)


class Checked:
    """pollux, with its placement rules checked on every decision against the running set."""

    name = "pollux"

    def __init__(self) -> None:
        self.inner = make_policy("pollux")
        self.capabilities = self.inner.capabilities
        self.calls = 0

    def decide(self, state):
        res = self.inner.decide(state)
        self.calls += 1
        held = {r.job_id: r.placement for r in state.running if r.job_id not in res.preempt}
        for d in res.starts:
            held[d.job_id] = d.placement
        owners: dict[int, list[str]] = {}
        for jid, pl in held.items():
            if len(pl) > 1:
                assert all(k == state.gpus_per_node for _, k in pl), (jid, pl)  # whole nodes
            for n, _ in pl:
                owners.setdefault(n, []).append(jid)
        for n, js in owners.items():
            multi = [j for j in js if len(held[j]) > 1]
            assert not multi or len(js) == 1, (n, js)  # a multi-node job's node holds nothing else
        return res


@pytest.mark.parametrize("spec", ["synth:adaptive,jobs=40", "synth:mixed160,jobs=40"])
def test_replays_follow_the_rules_and_finish(spec):
    w = load_workload(spec, seed=1)
    sim = Simulation(w.jobs, w.cluster, seed=1)
    pol = Checked()
    res = sim.run(pol)
    assert pol.calls > 0 and all(math.isfinite(r.end) for r in res.records)
    again = sim.run(make_policy("pollux"))
    assert [(r.end, r.preemptions) for r in again.records] == [(r.end, r.preemptions) for r in res.records]
