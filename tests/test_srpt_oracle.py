"""srpt-oracle: the preemptive reference (true remaining times at the request) on hand-built slots and a replay."""

from __future__ import annotations

import numpy as np

from lyasched.policy import make_policy
from lyasched.policy.movable import MovableJob
from lyasched.policy.srpt_oracle import SrptOracle
from lyasched.policy.state import SlotState
from lyasched.sim import Simulation
from lyasched.sim.synth import synth_workload
from test_baselines import COST, wj


def running(job_id: str, remaining: float, placement, *, preemptible: bool = True, cost: float = float("nan")):
    """A running job as a moving policy sees it, ``remaining`` seconds left at any count."""
    gpus = sum(k for _, k in placement)
    row = np.full(COST.cluster.total_gpus, float(remaining))
    return MovableJob(job_id=job_id, gpus=gpus, placement=tuple(placement), start_time=0.0,
                      expected_end=1e9, preemptible=preemptible, requested_gpus=gpus, move_cost_s=cost,
                      remaining_one_node=row, remaining_multi_node=row)


def slot(waiting, running=(), free=(0, 0)):
    return SlotState(now=1000.0, slot_len=30.0, free=tuple(free), gpus_per_node=4,
                     waiting=tuple(waiting), running=tuple(running))


def test_a_short_job_suspends_the_longest_running_job_it_needs():
    short = wj("short", iters=100)  # a few seconds on 1 GPU
    res = SrptOracle().decide(slot([short], [running("mid", 5_000, [(0, 4)]), running("long", 90_000, [(1, 4)])]))
    assert res.preempt == ("long",)
    assert [(d.job_id, d.placement) for d in res.starts] == [("short", ((1, 1),))]
    assert "suspends long" in res.starts[0].reason


def test_no_suspension_for_a_gain_below_the_move_cost_or_of_a_job_that_cannot_move():
    short = wj("short", iters=100)
    t = short.run_one_node[0]
    near = running("near", t + 29.0, [(0, 4)])  # longer, but not by the 30 s a move costs
    rigid = running("rigid", 90_000, [(1, 4)], preemptible=False)
    res = SrptOracle().decide(slot([short], [near, rigid]))
    assert res.preempt == () and res.starts == ()
    # the job's own move cost counts when it carries one
    res = SrptOracle().decide(slot([short], [running("near", t + 29.0, [(0, 4)], cost=1.0)]))
    assert res.preempt == ("near",)


def test_suspends_only_the_jobs_the_placement_needs():
    wide = wj("wide", iters=100, requested=4)
    # longest first: 'a' (node 0, 2 GPUs) does not make room for 4 on one node, 'b' (node 1, 4) does
    jobs = [running("a", 80_000, [(0, 2)]), running("b", 70_000, [(1, 4)]), running("c", 60_000, [(0, 2)])]
    res = SrptOracle().decide(slot([wide], jobs))
    assert res.preempt == ("b",)
    assert [d.job_id for d in res.starts] == ["wide"]


def test_free_gpus_go_shortest_first_before_anything_is_suspended():
    a, b = wj("a", 0.0, iters=3000), wj("b", 1.0, iters=200)
    res = SrptOracle().decide(slot([a, b], [running("long", 90_000, [(1, 4)])], free=(1, 0)))
    assert [d.job_id for d in res.starts] == ["b", "a"]  # b on the free GPU, a by suspending 'long'
    assert res.preempt == ("long",)


def test_replay_is_valid_reproducible_and_beats_its_non_preemptive_twin():
    w = synth_workload("synth:jobs=120,nodes=2,gpn=4,one_gpu=0.8,max_req=4,dur=heavy,load=1.0", seed=3)
    sim = Simulation(w.jobs, w.cluster, seed=3, end_fraction=w.end_fraction)
    one = sim.run(make_policy("srpt-oracle"), name="srpt-oracle")
    two = sim.run(make_policy("srpt-oracle"), name="srpt-oracle")
    assert [r.end for r in one.records] == [r.end for r in two.records]
    assert sum(r.preemptions for r in one.records) > 0
    sjf = sim.run(make_policy("sjf-oracle"), name="sjf-oracle")
    jct = lambda res: np.mean([r.end - r.job.submit_time for r in res.records])  # noqa: E731
    assert jct(one) < jct(sjf)  # heavy-tailed runs under load: preempting the long ones pays


def test_serve_cannot_run_it():
    from lyasched.service import cannot_serve

    assert cannot_serve(SrptOracle.capabilities) == "it needs true run times (an oracle), which only the simulator knows"


def test_several_suspensions_must_gain_more_than_they_delay():
    wide = wj("wide", iters=100, requested=4)
    t = wide.run_one_node[3]
    four = lambda rem: [running(f"r{i}", rem, [(1, 1)]) for i in range(4)]  # noqa: E731
    # each victim is longer than the job by more than a move, but four of them lose 4 x (t + 30) for it
    res = SrptOracle().decide(slot([wide], four(2 * (t + 30.0))))
    assert res.preempt == () and res.starts == ()
    res = SrptOracle().decide(slot([wide], four(4 * (t + 30.0) + 1.0)))
    assert sorted(res.preempt) == ["r0", "r1", "r2", "r3"] and [d.job_id for d in res.starts] == ["wide"]
