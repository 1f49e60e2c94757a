"""Simulator invariants, with small policies defined here and the registered ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyasched.costmodel.cost import ClusterSpec, CostModel
from lyasched.costmodel.jobspec import Job
from lyasched.policy import POLICIES, Decision, SlotResult, SlotState, make_policy, waiting_job
from lyasched.policy.state import Capabilities, place
from lyasched.sim import InvalidDecision, Simulation, true_factors
from lyasched.sim.models import profile
from lyasched.sim.workloads import seed_workload


class GreedyFifo:
    """Start waiting jobs in order on ``g`` GPUs (or their smallest allowed count) while they fit."""

    name = "greedy"

    def __init__(self, g: int = 1) -> None:
        self.g = g
        self.calls: list[SlotState] = []

    def decide(self, state: SlotState) -> SlotResult:
        self.calls.append(state)
        free = list(state.free)
        starts = []
        for w in sorted(state.waiting, key=lambda w: (w.submit_time, w.job_id)):
            counts = [g for g in range(1, len(w.run_one_node) + 1) if math.isfinite(w.run_time(g, False)) or math.isfinite(w.run_time(g, True))]
            g = self.g if self.g in counts else counts[0]
            p = place(free, g, True) if math.isfinite(w.run_time(g, False)) else None
            if p is None and math.isfinite(w.run_time(g, True)):
                p = place(free, g, False)
            if p is None:
                break
            for node, k in p:
                free[node] -= k
            starts.append(Decision(w.job_id, g, p))
        q = sum(w.work for w in state.waiting)
        return SlotResult(starts=tuple(starts), q=q, z=float(len(state.waiting)))


class Preempter:
    """Round robin: every slot preempt everything that ran at least ``quantum`` and start the oldest waiting."""

    name = "rr"
    capabilities = Capabilities(preemptive=True)

    def __init__(self, quantum: float = 600.0) -> None:
        self.quantum = quantum

    def decide(self, state: SlotState) -> SlotResult:
        out = [r for r in state.running if state.now - r.start_time >= self.quantum]
        free = list(state.free)
        for r in out:
            for node, k in r.placement:
                free[node] += k
        starts = []
        for w in sorted(state.waiting, key=lambda w: (w.attained, w.submit_time)):
            g = 1 if math.isfinite(w.run_time(1, False)) else 2
            p = place(free, g, True)
            if p is None:
                continue
            for node, k in p:
                free[node] -= k
            starts.append(Decision(w.job_id, g, p))
        return SlotResult(starts=tuple(starts), preempt=tuple(r.job_id for r in out))


def small_jobs(n: int = 30, seed: int = 1, iters: tuple[int, int] = (500, 5000)) -> tuple[list[Job], ClusterSpec]:
    cluster = ClusterSpec(nodes=2, gpus_per_node=2)
    rng = np.random.default_rng(seed)
    prof = profile("resnet18", "cifar10")
    jobs = [
        Job(
            job_id=f"a{i:03d}",
            profile=prof,
            global_batch=128,
            iterations=int(rng.integers(*iters)),
            submit_time=float(rng.uniform(0, 3600)),
            max_gpus=4,
            requested_gpus=int(rng.choice([1, 2, 4])),
            time_limit=7200.0,
        )
        for i in range(n)
    ]
    return jobs, cluster


def check_capacity(res, cluster: ClusterSpec) -> None:
    """Rebuild GPU occupancy from the job segments: never above the cluster at any instant."""
    ev = []
    for r in res.records:
        for s in r.segments:
            ev.append((s.start, 1, s.gpus))
            ev.append((s.end, 0, -s.gpus))  # ends before starts at the same instant
    busy = 0
    for _, _, d in sorted(ev):
        busy += d
        assert 0 <= busy <= cluster.total_gpus
    assert max(res.util_busy) <= cluster.total_gpus
    assert min(res.util_busy) >= 0


def test_rows_equal_waiting_job():
    w = seed_workload("seed-large-scattered", 3)
    sim = Simulation(w.jobs, w.cluster, seed=3)
    cost = CostModel(w.cluster)
    for i in range(0, len(sim.jobs), 17):
        ref = waiting_job(sim.jobs[i], cost, sim.row_len)
        got = sim.predicted(i)
        np.testing.assert_array_equal(got.run_one_node, ref.run_one_node)
        np.testing.assert_array_equal(got.run_multi_node, ref.run_multi_node)
        assert got.work == ref.work and got.requested_gpus == ref.requested_gpus
        assert got.time_limit == ref.time_limit


def test_greedy_single_gpu_basic_invariants():
    jobs, cluster = small_jobs()
    sim = Simulation(jobs, cluster, estimate_error=0.3, seed=5)
    pol = GreedyFifo(1)
    res = sim.run(pol)
    assert len(res.records) == len(jobs)
    ids = [r.job.job_id for r in res.records]
    assert sorted(ids) == sorted(j.job_id for j in jobs)
    for r in res.records:
        assert len(r.segments) == 1  # finished exactly once, never restarted
        assert r.first_start >= r.job.submit_time
        assert r.end > r.first_start
        assert r.jct >= r.best_true_run * (1 - 1e-9)
        # decisions only at slot boundaries
        assert r.first_start / sim.slot_len == pytest.approx(round(r.first_start / sim.slot_len))
        # the job ran factor x the predicted time of the configuration it got
        pred = sim.predicted(sim.jobs.index(r.job)).run_time(r.gpus, r.spans_nodes)
        assert r.run_s == pytest.approx(pred * r.factor)
    check_capacity(res, cluster)
    for st in pol.calls:
        assert sum(st.free) + sum(x.gpus for x in st.running) == cluster.total_gpus
        assert all(w.submit_time <= st.now for w in st.waiting)
        assert st.waiting  # never called with nothing to decide


def test_idle_slots_are_skipped():
    prof = profile("resnet18", "cifar10")
    jobs = [Job("x", prof, 128, 200, submit_time=0.0), Job("y", prof, 128, 200, submit_time=1e6)]
    pol = GreedyFifo(1)
    res = Simulation(jobs, ClusterSpec(1, 1), estimate_error=0).run(pol)
    assert len(pol.calls) == 2  # not 1e6 / 30 slots
    assert res.records[1].first_start == pytest.approx(math.ceil(1e6 / 30) * 30)


def test_full_cluster_waits_for_completion():
    prof = profile("resnet18", "cifar10")
    jobs = [Job("x", prof, 128, 2000, submit_time=0.0), Job("y", prof, 128, 10, submit_time=1.0)]
    res = Simulation(jobs, ClusterSpec(1, 1), estimate_error=0).run(GreedyFifo(1))
    x, y = res.records
    assert y.first_start >= x.end and y.first_start == pytest.approx(math.ceil(x.end / 30) * 30)
    assert y.wait == pytest.approx(y.first_start - 1.0)


def test_deterministic_for_a_seed():
    w = seed_workload("seed-small-bursty", 7)
    a = Simulation(w.jobs, w.cluster, seed=7).run(GreedyFifo(2))
    b = Simulation(w.jobs, w.cluster, seed=7).run(GreedyFifo(2))
    c = Simulation(w.jobs, w.cluster, seed=8).run(GreedyFifo(2))
    assert [r.end for r in a.records] == [r.end for r in b.records]
    assert [r.end for r in a.records] != [r.end for r in c.records]


def test_true_factors():
    assert np.all(true_factors(10, 0.0, 1) == 1.0)
    f = true_factors(20000, 0.2, 1)
    assert np.all(f > 0) and abs(np.median(np.log(f))) < 0.01 and np.std(np.log(f)) == pytest.approx(0.2, rel=0.05)
    assert np.array_equal(f, true_factors(20000, 0.2, 1))


def test_estimate_error_zero_runs_exactly_predicted():
    jobs, cluster = small_jobs(10)
    res = Simulation(jobs, cluster, estimate_error=0.0).run(GreedyFifo(1))
    for r in res.records:
        assert r.factor == 1.0 and r.run_s == pytest.approx(r.jct - r.wait)


class OverAllocator:
    name = "bad"

    def decide(self, state):
        w = state.waiting[0]
        return SlotResult(starts=(Decision(w.job_id, state.gpus_per_node + 1, ((0, state.gpus_per_node + 1),)),))


class DoubleStart:
    name = "bad2"

    def decide(self, state):
        w = state.waiting[0]
        d = Decision(w.job_id, 1, ((0, 1),))
        return SlotResult(starts=(d, d))


class WrongSum:
    name = "bad3"

    def decide(self, state):
        return SlotResult(starts=(Decision(state.waiting[0].job_id, 2, ((0, 1),)),))


class GhostPreempt:
    name = "bad4"
    capabilities = Capabilities(preemptive=True)

    def decide(self, state):
        return SlotResult(starts=(), preempt=("nope",))


@pytest.mark.parametrize("pol", [OverAllocator(), DoubleStart(), WrongSum(), GhostPreempt()])
def test_bad_decisions_raise(pol):
    jobs, cluster = small_jobs(4)
    with pytest.raises(InvalidDecision):
        Simulation(jobs, cluster).run(pol)


def test_disallowed_count_raises():
    prof = profile("resnet18", "cifar10")
    jobs = [Job("x", prof, 6, 100, max_gpus=4)]  # 4 GPUs do not divide a batch of 6

    class FourGpus:
        name = "four"

        def decide(self, state):
            return SlotResult(starts=(Decision("x", 4, ((0, 4),)),))

    with pytest.raises(InvalidDecision, match="not an allowed"):
        Simulation(jobs, ClusterSpec(1, 4)).run(FourGpus())


def test_preemption_conserves_work():
    jobs, cluster = small_jobs(12, iters=(10_000, 60_000))  # 7-45 min on one GPU
    sim = Simulation(jobs, cluster, estimate_error=0.25, seed=2, restart_overhead=45.0)
    res = sim.run(Preempter(quantum=300.0))
    assert sum(r.preemptions for r in res.records) > 5
    cost = CostModel(cluster)
    for r in res.records:
        assert len(r.segments) == r.preemptions + 1
        assert sum(s.done for s in r.segments) == pytest.approx(1.0)
        assert r.run_s == pytest.approx(sum(s.end - s.start for s in r.segments))
        for k, s in enumerate(r.segments):
            assert s.overhead == (45.0 if k else 0.0)
            full = r.job.run_time(cost, s.gpus, s.spans_nodes) * r.factor
            assert s.end - s.start == pytest.approx(s.overhead + s.done * full, rel=1e-9, abs=1e-6)
        assert r.gpu_s == pytest.approx(sum((s.end - s.start) * s.gpus for s in r.segments))
    check_capacity(res, cluster)


def test_preempted_job_rows_rescaled_and_attained():
    prof = profile("resnet18", "cifar10")
    jobs = [Job("x", prof, 128, 20000, submit_time=0.0), Job("y", prof, 128, 20000, submit_time=0.0)]
    seen = []

    class Swap:
        name = "swap"
        capabilities = Capabilities(preemptive=True)

        def decide(self, state):
            seen.append(state)
            if state.running and state.now >= 600 and not any(w.attained for w in state.waiting):
                r = state.running[0]
                w = state.waiting[0]
                return SlotResult(starts=(Decision(w.job_id, 1, ((0, 1),)),), preempt=(r.job_id,))
            if not state.running and state.waiting:
                w = max(state.waiting, key=lambda w: w.attained)
                return SlotResult(starts=(Decision(w.job_id, 1, ((0, 1),)),))
            return SlotResult(starts=())

    sim = Simulation(jobs, ClusterSpec(1, 1), estimate_error=0.0, restart_overhead=30.0)
    res = sim.run(Swap())
    back = [s for s in seen if any(w.attained > 0 for w in s.waiting)][0]
    w = [w for w in back.waiting if w.attained > 0][0]
    full = sim.predicted(0).run_time(1, False)
    assert w.attained == pytest.approx(600.0)  # 1 GPU x 600 s
    assert w.run_time(1, False) == pytest.approx(full * (1 - 600.0 / full) + 30.0)
    assert w.work == pytest.approx(sim.predicted(0).work * (1 - 600.0 / full))
    running_later = [s for s in seen if s.running and s.now > 600][0]
    r = running_later.running[0]
    assert r.attained == pytest.approx(running_later.now - r.start_time)
    assert sum(rec.preemptions for rec in res.records) == 1


def test_oracle_sees_true_rows():
    jobs, cluster = small_jobs(5)
    seen = {}

    class Oracle(GreedyFifo):
        name = "oracle"
        capabilities = Capabilities(needs_true_runtimes=True)

        def decide(self, state):
            for w in state.waiting:
                seen.setdefault(w.job_id, w)
            return super().decide(state)

    sim = Simulation(jobs, cluster, estimate_error=0.5, seed=4)
    res = sim.run(Oracle(1))
    for i, j in enumerate(sim.jobs):
        assert seen[j.job_id].run_time(1, False) == pytest.approx(sim.predicted(i).run_time(1, False) * sim.factors[i])
    for r in res.records:
        assert r.run_s == pytest.approx(seen[r.job.job_id].run_time(r.gpus, r.spans_nodes))


def test_unrunnable_job_rejected():
    prof = profile("vgg16", "imagenet")
    with pytest.raises(ValueError, match="cannot run"):
        Simulation([Job("big", prof, 4096, 10, max_gpus=2)], ClusterSpec(1, 2))


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_registered_policies_on_a_seed_group(name):
    w = seed_workload("seed-small-bursty", 11, n_jobs=40)
    res = Simulation(w.jobs, w.cluster, seed=11).run(make_policy(name, seed=11), name=name)
    assert all(math.isfinite(r.end) for r in res.records)
    assert all(r.jct >= r.best_true_run * (1 - 1e-9) for r in res.records)
    assert all(r.wait >= -1e-6 for r in res.records)
    assert len(res.slot_q) == res.decide_calls > 0
    check_capacity(res, w.cluster)


def test_starving_policy_is_an_error_not_a_hang():
    class Never:
        name = "never"

        def decide(self, state):
            return SlotResult(starts=())

    from lyasched.sim import Unfinished

    jobs, cluster = small_jobs(2)
    with pytest.raises(Unfinished, match="2 of 2 jobs never finish") as e:
        Simulation(jobs, cluster).run(Never())
    assert (e.value.left, e.value.total, e.value.policy) == (2, 2, "never")


def test_progress_is_a_line_a_minute_off_a_terminal():
    """Off a terminal a long replay says how far it has got in plain lines (here every 0 s), to stderr
    or the stream given; none for a replay shorter than the interval."""
    import io

    from lyasched.sim.progress import Progress

    jobs, cluster = small_jobs(3)
    out = io.StringIO()
    Simulation(jobs, cluster).run(GreedyFifo(), progress=Progress(len(jobs), "fifo1", tty=False, stream=out, interval=0.0))
    lines = out.getvalue().splitlines()
    assert lines and lines[-1].startswith("replay fifo1: 3/3 jobs finished, simulated ")
    quiet = io.StringIO()
    Simulation(jobs, cluster).run(GreedyFifo(), progress=Progress(len(jobs), "fifo1", tty=False, stream=quiet))
    assert quiet.getvalue() == ""


# --------------------------------------------------------------------------- adaptive jobs (issue 35)
def adaptive_jobs(n: int = 12, seed: int = 2, iters: tuple[int, int] = (20_000, 80_000)):
    from dataclasses import replace as _replace

    from lyasched.costmodel.goodput import Adaptive, NoiseScale

    jobs, cluster = small_jobs(n, seed=seed, iters=iters)
    curves = ("0:50;1:2000", "300", "0:100;0.6:100;1:3000")
    return [_replace(j, adaptive=Adaptive(2048, NoiseScale.parse(curves[k % 3]))) if k % 4 else j
            for k, j in enumerate(jobs)], cluster


def test_adaptive_rows_equal_waiting_job():
    jobs, cluster = adaptive_jobs()
    sim = Simulation(jobs, cluster, seed=1)
    cost = CostModel(cluster)
    for i, j in enumerate(sim.jobs):
        ref = waiting_job(j, cost, sim.row_len)
        got = sim.predicted(i)
        np.testing.assert_allclose(got.run_one_node, ref.run_one_node, rtol=1e-12)
        np.testing.assert_allclose(got.run_multi_node, ref.run_multi_node, rtol=1e-12)


def test_adaptive_preemption_conserves_base_steps():
    """Each segment of an adaptive job lasts its overhead plus the true time the goodput model gives
    for the base steps it did (re-tuning its batch as it goes), and the segments add up to the job."""
    from lyasched.costmodel import goodput

    jobs, cluster = adaptive_jobs()
    sim = Simulation(jobs, cluster, estimate_error=0.25, seed=2, restart_overhead=45.0)
    res = sim.run(Preempter(quantum=300.0))
    cost = CostModel(cluster)
    adaptive = [r for r in res.records if r.job.adaptive is not None]
    assert adaptive and sum(r.preemptions for r in adaptive) > 3
    for r in adaptive:
        assert sum(s.done for s in r.segments) == pytest.approx(1.0)
        f = 0.0
        for s in r.segments:
            compute = goodput.run_time(cost, r.job, s.gpus, s.spans_nodes, f) - goodput.run_time(
                cost, r.job, s.gpus, s.spans_nodes, f + s.done)
            assert s.end - s.start == pytest.approx(s.overhead + compute * r.factor, rel=1e-9, abs=1e-6)
            assert s.batch == goodput.best_batch(cost, r.job, s.gpus, s.spans_nodes, f)
            f += s.done
    check_capacity(res, cluster)


def test_decision_batch_sets_the_first_piece():
    from lyasched.costmodel import goodput
    from lyasched.costmodel.goodput import Adaptive, NoiseScale

    prof = profile("resnet50")
    job = Job("x", prof, 64, 4000, max_gpus=4, adaptive=Adaptive(4096, NoiseScale.parse("5000")))

    class At:
        name = "at"

        def __init__(self, batch):
            self.batch = batch

        def decide(self, state):
            if not state.waiting:
                return SlotResult(starts=())
            return SlotResult(starts=(Decision("x", 4, ((0, 4),), batch=self.batch),))

    cluster = ClusterSpec(nodes=1, gpus_per_node=4)
    cost = CostModel(cluster)
    runs = {}
    for b in (None, 64, 4096):
        res = Simulation([job], cluster, estimate_error=0.0).run(At(b))
        rec = res.records[0]
        runs[b] = rec.end - rec.first_start
        assert runs[b] == pytest.approx(goodput.run_time(cost, job, 4, False, 0.0, b))
        assert rec.segments[0].batch == (b or goodput.best_batch(cost, job, 4, False))
    assert runs[None] <= min(runs[64], runs[4096]) + 1e-9 and runs[64] > runs[None]
