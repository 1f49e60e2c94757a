"""Baseline policies: each one's defining behaviour on hand-built slots, plus properties all share."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.policy import POLICIES, capabilities, capabilities_of, make_policy

PREEMPTIVE = frozenset(p for p in POLICIES if capabilities_of(p).preemptive)
from lyasched.policy.backfill import Backfill
from lyasched.policy.common import allowed_counts, nearest_allowed
from lyasched.policy.fifo import Fifo
from lyasched.policy.fixed_one import FixedOne
from lyasched.policy.optimus import Optimus
from lyasched.policy.random_gpus import RandomGpus
from lyasched.policy.sjf_oracle import SjfOracle
from lyasched.policy.tiresias import Tiresias
from lyasched.policy.state import RunningJob, SlotState, waiting_job

BASELINES = [n for n in POLICIES if n != "lyapunov"]

PROF = Profile(model="compute", alpha=0.01, beta=0.002, params=5_000_000)
# communication-heavy: 400 MB of gradients per step, little compute
COMM = Profile(model="comm", alpha=0.001, beta=0.00001, params=100_000_000)


def cost_for(nodes: int = 2, gpn: int = 4, **kw) -> CostModel:
    return CostModel(ClusterSpec(nodes=nodes, gpus_per_node=gpn, **kw))


COST = cost_for()
COST1 = cost_for(nodes=1, gpn=4)


def wj(job_id, submit=0.0, *, batch=64, iters=1000, requested=1, time_limit=None, profile=PROF,
       attained=0.0, cost=COST):
    """A WaitingJob built the way the simulator builds it: from a Job through the cost model."""
    job = Job(job_id=job_id, profile=profile, global_batch=batch, iterations=iters, submit_time=submit,
              requested_gpus=requested, time_limit=time_limit, max_gpus=cost.cluster.total_gpus)
    w = waiting_job(job, cost, cost.cluster.total_gpus)
    return dataclasses.replace(w, attained=attained) if attained else w


def slot(waiting, free=(4, 4), running=(), now=1000.0, gpn=4):
    return SlotState(now=now, slot_len=60.0, free=tuple(free), gpus_per_node=gpn,
                     waiting=tuple(waiting), running=tuple(running))


def started(res):
    return {d.job_id: d.gpus for d in res.starts}


# --------------------------------------------------------------------------- fixed-1


def test_fixed_one_starts_fifo_on_one_gpu_each():
    jobs = [wj(f"j{i}", submit=float(10 - i)) for i in range(6)]  # j5 submitted first
    res = FixedOne().decide(slot(jobs, free=(1, 2)))
    assert started(res) == {"j5": 1, "j4": 1, "j3": 1}
    assert [d.job_id for d in res.starts] == ["j5", "j4", "j3"]
    assert all(len(d.placement) == 1 for d in res.starts)


def test_fixed_one_uses_smallest_allowed_count_when_one_gpu_is_not_allowed():
    # 16 GB of activations at batch 64 does not fit one 10 GB GPU; 2 GPUs (8 GB + 1 GB) do
    big = Profile(model="big", alpha=0.01, beta=0.001, params=1_000_000, mem_base=1e9, mem_per_sample=0.25e9)
    cost = cost_for(gpu_mem=10e9)
    w = wj("a", profile=big, cost=cost)
    assert allowed_counts(w)[0] == 2
    res = FixedOne().decide(slot([w]))
    assert started(res) == {"a": 2}


# --------------------------------------------------------------------------- fifo


def test_fifo_does_not_skip_the_blocked_head():
    jobs = [wj("head", 0.0, requested=4), wj("small", 1.0, requested=1)]
    assert started(Fifo().decide(slot(jobs, free=(3, 0)))) == {}
    res = Fifo().decide(slot(jobs, free=(4, 1)))
    assert started(res) == {"head": 4, "small": 1}


def test_fifo_falls_back_to_nearest_allowed_count_and_spans_nodes():
    w = wj("a", batch=6, requested=4)  # 6 GPUs: counts 1, 2, 3, 6
    assert allowed_counts(w) == [1, 2, 3, 6]
    assert nearest_allowed(w, 4) == 3
    assert started(Fifo().decide(slot([w]))) == {"a": 3}
    res = Fifo().decide(slot([wj("b", requested=8)]))
    assert res.starts[0].placement == ((0, 4), (1, 4))
    assert res.starts[0].spans_nodes


# --------------------------------------------------------------------------- random


def test_random_count_is_allowed_fixed_per_job_and_seed_dependent():
    w = wj("a", batch=12)  # counts 1, 2, 3, 4, 6
    counts = allowed_counts(w)
    p = RandomGpus(seed=3)
    g = started(p.decide(slot([w])))["a"]
    assert g in counts
    # the same job, re-decided in a different slot with other jobs around, gets the same count
    others = [wj(f"x{i}", submit=5.0) for i in range(3)]
    assert started(p.decide(slot([w, *others], free=(4, 4))))["a"] == g
    draws = Counter(RandomGpus(seed=s).count(w) for s in range(2000))
    assert set(draws) == set(counts)
    assert all(300 < draws[c] < 500 for c in counts)  # uniform: 400 each


def test_random_keeps_fifo_order_without_skipping():
    p = RandomGpus(seed=0)
    jobs = [wj(f"j{i}", float(i), batch=8) for i in range(40)]
    counts = [p.count(w) for w in jobs]
    free = (2, 2)
    res = p.decide(slot(jobs, free=free))
    # the started jobs are exactly a FIFO prefix
    ids = [d.job_id for d in res.starts]
    assert ids == [f"j{i}" for i in range(len(ids))]
    k = len(ids)
    assert k < len(jobs)
    assert sum(counts[:k]) <= 4 and counts[k] > 4 - sum(counts[:k])  # the head did not fit
    blocked = jobs[len(ids)]
    assert res.info["blocked_by"] == blocked.job_id


def test_random_draws_only_counts_an_empty_cluster_can_hold():
    """On two 4-GPU nodes a job allowed 1..8 GPUs may not run on 5 or 7 (no layout: one node, or
    k nodes x g/k GPUs): random never draws them, so no job blocks the queue for ever."""
    w = wj("a", batch=8 * 5 * 7 * 3)  # every count 1..8 allowed
    assert allowed_counts(w) == list(range(1, 9))
    draws = set()
    for s in range(200):
        res = RandomGpus(seed=s).decide(slot([w], free=(4, 4)))
        draws.add(started(res)["a"])
    assert draws == {1, 2, 3, 4, 6, 8}


# --------------------------------------------------------------------------- backfill


def test_backfill_starts_short_job_before_shadow_but_not_long_one():
    running = [RunningJob("r", 2, ((0, 2),), start_time=0.0, expected_end=2000.0)]
    jobs = [
        wj("head", 0.0, requested=4, time_limit=5000, cost=COST1),
        wj("long", 1.0, requested=2, time_limit=5000, cost=COST1),
        wj("short", 2.0, requested=2, time_limit=900, cost=COST1),  # ends at 1900 <= shadow 2000
    ]
    state = slot(jobs, free=(2,), running=running, now=1000.0)
    res = Backfill().decide(state)
    assert started(res) == {"short": 2}
    assert res.info["head"] == "head" and res.info["shadow"] == 2000.0
    assert "shadow" in res.starts[0].reason
    assert started(Fifo().decide(state)) == {}


def test_backfill_long_job_may_use_only_the_extra_gpus():
    cost = cost_for(nodes=1, gpn=8)
    running = [RunningJob("r", 5, ((0, 5),), start_time=0.0, expected_end=3000.0)]
    jobs = [
        wj("head", 0.0, batch=48, requested=6, time_limit=5000, cost=cost),  # at 3000: 8 free, 2 extra
        wj("long2", 1.0, requested=2, cost=cost),  # no time limit: never ends by the shadow time
        wj("long1", 2.0, requested=1, cost=cost),  # would eat into the head's 6
    ]
    res = Backfill().decide(slot(jobs, free=(3,), running=running, gpn=8))
    assert started(res) == {"long2": 2}
    assert "extra" in res.starts[0].reason


def test_backfill_counts_jobs_it_just_started_in_the_reservation():
    # a job started this slot holds its GPUs until its time limit, which pushes the shadow time
    cost = cost_for(nodes=1, gpn=4)
    running = [RunningJob("r", 2, ((0, 2),), start_time=0.0, expected_end=1500.0)]
    jobs = [
        wj("first", 0.0, requested=2, time_limit=4000, cost=cost),  # starts now, ends 5000
        wj("head", 1.0, requested=4, time_limit=100, cost=cost),  # needs everything: shadow 5000
        wj("mid", 2.0, requested=2, time_limit=3000, cost=cost),  # r's GPUs free at 1500
    ]
    res = Backfill().decide(slot(jobs, free=(2,), running=running, gpn=4))
    assert started(res) == {"first": 2}
    assert res.info["shadow"] == 5000.0


# --------------------------------------------------------------------------- sjf-oracle


def test_sjf_orders_by_true_time_and_skips_jobs_that_do_not_fit():
    assert SjfOracle.capabilities.needs_true_runtimes and not Fifo.capabilities.needs_true_runtimes
    jobs = [
        wj("long", 0.0, iters=9000),
        wj("tiny_but_wide", 1.0, iters=10, requested=8),
        wj("short", 2.0, iters=100),
        wj("mid", 3.0, iters=1000),
    ]
    res = SjfOracle().decide(slot(jobs, free=(2, 0)))
    assert [d.job_id for d in res.starts] == ["short", "mid"]


# --------------------------------------------------------------------------- optimus


def test_optimus_gives_extra_gpus_to_the_best_marginal_gain():
    cost = cost_for(nodes=1, gpn=4, intra=Link(bandwidth=5e9, latency=1e-5))
    a = wj("scales", 0.0, iters=5000, cost=cost)  # compute-bound: 1 -> 2 GPUs nearly halves it
    b = wj("comm", 1.0, iters=5000, profile=COMM, cost=cost)  # all-reduce costs more than it saves
    assert a.run_one_node[1] < a.run_one_node[0]
    assert b.run_one_node[1] > b.run_one_node[0]
    res = Optimus().decide(slot([a, b], free=(4,), gpn=4))
    # both start on 1; of the 2 left, 'scales' gains; counts are 1, 2, 4 so 2 -> 4 needs 2 more: no
    assert started(res) == {"scales": 2, "comm": 1}
    assert res.info["growth_steps"] == 1


def test_optimus_picks_the_largest_gain_per_gpu():
    cost = cost_for(nodes=1, gpn=4)
    fixed_cost = Profile(model="fixed", alpha=0.1, beta=0.002, params=5_000_000)  # scales worse
    small = wj("small", 0.0, iters=100, cost=cost)
    big = wj("big", 1.0, iters=10000, profile=fixed_cost, cost=cost)
    absolute = {w.job_id: w.run_one_node[0] - w.run_one_node[1] for w in (small, big)}
    relative = {w.job_id: absolute[w.job_id] / w.run_one_node[0] for w in (small, big)}
    assert absolute["big"] > absolute["small"] > 0
    assert relative["small"] > relative["big"] > 0
    res = Optimus().decide(slot([small, big], free=(3,), gpn=4))
    assert started(res) == {"small": 1, "big": 2}
    res = Optimus(gain="relative").decide(slot([small, big], free=(3,), gpn=4))
    assert started(res) == {"small": 2, "big": 1}


def test_optimus_leaves_gpus_idle_when_no_step_helps():
    cost = cost_for(nodes=1, gpn=4, intra=Link(bandwidth=5e9, latency=1e-5))
    b = wj("comm", 0.0, profile=COMM, cost=cost)
    res = Optimus().decide(slot([b], free=(4,), gpn=4))
    assert started(res) == {"comm": 1}
    with pytest.raises(ValueError):
        Optimus(gain="sideways")


# --------------------------------------------------------------------------- tiresias


def _one_node(jobs):
    """The same jobs on the one-node, 4-GPU cluster (rows of length 4)."""
    return [wj(j.job_id, j.submit_time, requested=j.requested_gpus, attained=j.attained, cost=COST1) for j in jobs]


def test_tiresias_preempts_high_attained_job_for_a_fresh_one_then_starts_it():
    t = Tiresias()
    assert t.restart_overhead_s == 30.0
    now = 5000.0
    # 4 GPUs x 1000 s = 4000 GPU-s > 3600 (attained includes the current run): queue 1
    old = RunningJob("old", 4, ((0, 4),), start_time=now - 1000, expected_end=math.inf, attained=4000.0,
                     preemptible=True)
    fresh = _one_node([wj("fresh", now - 10, requested=2)])
    res = t.decide(slot(fresh, free=(0,), running=[old], now=now))
    assert res.preempt == ("old",)
    assert res.starts == ()  # starts never exceed state.free; the GPUs are held for it
    assert res.info["held"] == {"fresh": 2}
    # next slot: the simulator has freed old's GPUs and re-queued it with its attained service
    back = _one_node([wj("old", 0.0, requested=4, attained=4000.0)])
    res2 = t.decide(slot([*back, *fresh], free=(4,), now=now + 60))
    assert started(res2) == {"fresh": 2}
    assert res2.preempt == ()


def test_tiresias_respects_min_run_time_preemptible_flag_and_queue_order():
    t = Tiresias(min_run_s=600)
    now = 5000.0
    fresh = _one_node([wj("fresh", now - 10, requested=2)])
    # restarted recently with 5000 GPU-s already attained: queue 1, but has run only 100 s
    young = RunningJob("young", 4, ((0, 4),), start_time=now - 100, expected_end=math.inf,
                       attained=5000.0, preemptible=True)
    assert t.decide(slot(fresh, free=(0,), running=[young], now=now)).preempt == ()
    pinned = dataclasses.replace(young, start_time=now - 1000, preemptible=False)
    assert t.decide(slot(fresh, free=(0,), running=[pinned], now=now)).preempt == ()
    # same queue as the waiting job: no preemption either
    peer = RunningJob("peer", 4, ((0, 4),), start_time=now - 700, expected_end=math.inf, attained=2800.0,
                      preemptible=True)
    assert t.queue_of(t.running_attained(peer, now)) == 0
    assert t.decide(slot(fresh, free=(0,), running=[peer], now=now)).preempt == ()


def test_tiresias_preempts_as_few_and_as_low_priority_jobs_as_needed():
    t = Tiresias()
    now = 100_000.0
    a = RunningJob("a", 2, ((0, 2),), start_time=now - 2000, expected_end=math.inf, attained=4000.0,
                   preemptible=True)  # queue 1
    b = RunningJob("b", 2, ((0, 2),), start_time=now - 20000, expected_end=math.inf, attained=40000.0,
                   preemptible=True)  # queue 2
    fresh = _one_node([wj("fresh", now - 5, requested=2)])
    res = t.decide(slot(fresh, free=(0,), running=[a, b], now=now))
    assert res.preempt == ("b",)  # the lowest queue goes first


def test_tiresias_orders_by_attained_service_then_fifo():
    t = Tiresias()
    jobs = _one_node([
        wj("veteran", 0.0, requested=2, attained=50_000.0),
        wj("late", 20.0, requested=2),
        wj("early", 10.0, requested=2),
    ])
    res = t.decide(slot(jobs, free=(4,)))
    assert [d.job_id for d in res.starts] == ["early", "late"]
    with pytest.raises(ValueError):
        Tiresias(thresholds=(100.0, 50.0))


# --------------------------------------------------------------------------- q and z


def test_q_and_z_sum_the_jobs_left_waiting():
    jobs = [wj("a", 100.0, requested=4), wj("b", 400.0, requested=4), wj("c", 700.0, requested=4)]
    res = Fifo().decide(slot(jobs, free=(4, 0), now=1000.0))
    assert started(res) == {"a": 4}
    assert res.q == pytest.approx(jobs[1].work + jobs[2].work)
    assert res.z == pytest.approx(600.0 + 300.0)


def test_make_policy_builds_every_baseline_with_a_seed():
    for name in BASELINES:
        p = make_policy(name, seed=7)
        assert p.name == name and p.seed == 7


# --------------------------------------------------------------------------- properties of all


PROFILES = [
    PROF,
    COMM,
    Profile(model="mem", alpha=0.02, beta=0.001, params=20_000_000, mem_base=1e9, mem_per_sample=0.1e9),
]


@st.composite
def slot_states(draw):
    nodes = draw(st.integers(1, 3))
    gpn = draw(st.sampled_from([1, 2, 4]))
    cost = CostModel(ClusterSpec(nodes=nodes, gpus_per_node=gpn, gpu_mem=draw(st.sampled_from([3e9, 32e9]))))
    total = nodes * gpn
    now = 10_000.0
    free = tuple(draw(st.integers(0, gpn)) for _ in range(nodes))
    running = []
    for node in range(nodes):
        used = gpn - free[node]
        while used > 0:
            n = draw(st.integers(1, used))
            used -= n
            start = draw(st.floats(0.0, now))
            running.append(RunningJob(
                job_id=f"r{len(running)}", gpus=n, placement=((node, n),), start_time=start,
                expected_end=draw(st.one_of(st.just(math.inf), st.floats(now - 100, now + 20_000))),
                attained=draw(st.floats(0.0, 60_000.0)), preemptible=draw(st.booleans())))
    waiting = []
    for i in range(draw(st.integers(0, 8))):
        job = Job(
            job_id=f"w{i}", profile=draw(st.sampled_from(PROFILES)),
            global_batch=draw(st.sampled_from([1, 2, 3, 6, 8, 12, 64, 96])),
            iterations=draw(st.integers(1, 20_000)),
            submit_time=draw(st.sampled_from([0.0, 500.0, 500.0, 9000.0])),
            min_gpus=1, max_gpus=total,
            requested_gpus=draw(st.integers(1, total)),
            time_limit=draw(st.one_of(st.none(), st.floats(10.0, 50_000.0))),
        )
        w = waiting_job(job, cost, total)
        waiting.append(dataclasses.replace(w, attained=draw(st.floats(0.0, 60_000.0))))
    return SlotState(now=now, slot_len=60.0, free=free, gpus_per_node=gpn,
                     waiting=tuple(waiting), running=tuple(running))


@pytest.mark.parametrize("name", BASELINES)
@settings(max_examples=50, deadline=None)
@given(state=slot_states(), seed=st.integers(0, 3))
def test_every_baseline_respects_capacity_and_allowed_counts(name, state, seed):
    policy = make_policy(name, seed=seed)
    res = policy.decide(state)
    waiting = {w.job_id: w for w in state.waiting}
    ids = [d.job_id for d in res.starts]
    assert len(ids) == len(set(ids)), "a job started twice"
    assert set(ids) <= set(waiting), "started a job that is not waiting"
    used = [0] * len(state.free)
    for d in res.starts:
        nodes = [n for n, _ in d.placement]
        assert len(nodes) == len(set(nodes)) and all(k >= 1 for _, k in d.placement)
        assert sum(k for _, k in d.placement) == d.gpus
        for node, k in d.placement:
            used[node] += k
        row = waiting[d.job_id].run_multi_node if d.spans_nodes else waiting[d.job_id].run_one_node
        assert math.isfinite(row[d.gpus - 1]), f"{d.job_id} on a forbidden count {d.gpus}"
        assert d.reason
    assert all(u <= f for u, f in zip(used, state.free)), "over capacity on a node"
    running = {r.job_id for r in state.running}
    assert len(res.preempt) == len(set(res.preempt)) and set(res.preempt) <= running
    if name not in PREEMPTIVE:
        assert res.preempt == ()
    left = [w for w in state.waiting if w.job_id not in set(ids)]
    assert res.q == pytest.approx(sum(w.work for w in left))
    assert res.z == pytest.approx(sum(state.now - w.submit_time for w in left))
    # deterministic: the same instance twice, and a fresh instance with the same seed
    assert policy.decide(state) == res
    assert make_policy(name, seed=seed).decide(state) == res


# --------------------------------------------------------------------------- through the simulator


@pytest.mark.parametrize("name", BASELINES)
def test_every_baseline_replays_a_seed_workload_to_completion(name):
    """The real consumer: the simulator validates every decision (InvalidDecision) and must finish."""
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import seed_workload

    w = seed_workload("seed-small-bursty", seed=1, n_jobs=40)
    res = Simulation(w.jobs, w.cluster, seed=1).run(make_policy(name, seed=1), name=name)
    assert all(math.isfinite(r.end) and r.end >= r.job.submit_time for r in res.records)
    assert len(res.slot_q) == res.decide_calls
    if name not in PREEMPTIVE:
        assert all(r.preemptions == 0 for r in res.records)


class _Cold:
    """The policy rebuilt for every slot (no memo carried over), optionally ignoring wake_at."""

    def __init__(self, name, seed, keep_wake=True):
        self.name, self.seed, self.keep_wake = name, seed, keep_wake
        proto = make_policy(name, seed=seed)
        self.capabilities = capabilities(proto)

    def decide(self, state):
        res = make_policy(self.name, seed=self.seed).decide(state)
        if not self.keep_wake and "wake_at" in res.info:
            res = dataclasses.replace(res, info={k: v for k, v in res.info.items() if k != "wake_at"})
        return res


@pytest.mark.parametrize("name", BASELINES)
def test_memos_and_wake_at_do_not_change_a_replay(name):
    """Per-job memos and the arrays kept across slots are pure: a policy kept across slots decides
    as one rebuilt every slot; and skipping the slots before wake_at changes no job's schedule."""
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import seed_workload

    w = seed_workload("seed-small-bursty", seed=2, n_jobs=60)
    sim = Simulation(w.jobs, w.cluster, seed=2)
    warm = sim.run(make_policy(name, seed=2), name=name)
    cold = sim.run(_Cold(name, 2), name=name)
    every_slot = sim.run(_Cold(name, 2, keep_wake=False), name=name)
    sched = lambda r: [(x.first_start, x.end, x.gpus, x.preemptions) for x in r.records]  # noqa: E731
    assert sched(warm) == sched(cold) == sched(every_slot)
    assert list(warm.slot_q) == list(cold.slot_q) and list(warm.slot_z) == list(cold.slot_z)
    if name in ("backfill", "tiresias"):  # not time-invariant: wake_at is what skips their idle slots
        assert every_slot.decide_calls > warm.decide_calls


@pytest.mark.parametrize("name", ["backfill", "tiresias"])
@settings(max_examples=50, deadline=None)
@given(state=slot_states(), frac=st.sampled_from([0.0, 0.3, 0.999]))
def test_wake_at_promises_nothing_changes_before_it(name, state, frac):
    """A slot that did nothing and said wake_at=T does nothing at any time before T either
    (running jobs' attained service grows by their GPUs per second meanwhile)."""
    res = make_policy(name).decide(state)
    if "wake_at" not in res.info:
        assert res.starts or res.preempt
        return
    assert not res.starts and not res.preempt
    wake = res.info["wake_at"]
    assert wake >= state.now - 1.0
    later = state.now + frac * ((wake if math.isfinite(wake) else state.now + 1e6) - state.now)
    grown = tuple(dataclasses.replace(r, attained=r.attained + r.gpus * (later - state.now)) for r in state.running)
    res2 = make_policy(name).decide(dataclasses.replace(state, now=later, running=grown))
    assert not res2.starts and not res2.preempt


def test_backfill_wakes_when_a_running_job_reaches_its_expected_end():
    # b (listed first) is expected to end at 2000, a is overdue. Before 2000 the reservation
    # releases a first: the head fits on node 1 right away, and c there would delay it. From
    # 2000 on both are clamped to now and released in list order: b frees node 0 for the head,
    # so c may take node 1's extra GPUs.
    running = (RunningJob("b", 4, ((0, 4),), start_time=0.0, expected_end=2000.0),
               RunningJob("a", 2, ((1, 2),), start_time=0.0, expected_end=950.0))
    jobs = [wj("h", submit=0.0, requested=4), wj("c", submit=1.0, requested=2)]
    res = Backfill().decide(slot(jobs, free=(0, 2), running=running, now=1000.0))
    assert not res.starts and res.info["wake_at"] == 2000.0
    assert not Backfill().decide(slot(jobs, free=(0, 2), running=running, now=1999.0)).starts
    assert started(Backfill().decide(slot(jobs, free=(0, 2), running=running, now=2000.0))) == {"c": 2}
