"""elastic on adaptive jobs (issue 35): a configuration is (GPUs, batch) valued by the goodput it
buys. The rows an adaptive job hands the policy are its time left at its best batch per GPU count
(lyasched.costmodel.goodput), so the GPU count the policy picks comes with that batch; the
executor runs the job at it (`Decision.batch` None: the best batch for the count)."""

import math
from dataclasses import replace

import numpy as np

from lyasched.costmodel import goodput
from lyasched.costmodel.cost import ClusterSpec, CostModel
from lyasched.costmodel.goodput import Adaptive, NoiseScale
from lyasched.costmodel.jobspec import Job
from lyasched.policy import make_policy
from lyasched.policy.movable import movable_job
from lyasched.policy.state import RunningJob, SlotState, waiting_job
from lyasched.sim import Simulation
from lyasched.sim.models import profile

CLUSTER = ClusterSpec(nodes=2, gpus_per_node=4)
# vgg16 at M0 = 128: across two nodes its fixed batch is slower on 8 GPUs than on 4 (all-reduce
# bound); with a large noise scale a larger batch amortises the all-reduce and 8 GPUs pay
VGG = profile("vgg16", "imagenet")
RISES = NoiseScale.parse("0:8;0.5:8;0.55:4000")  # phi grows 500-fold half-way through


def _job(noise: NoiseScale | None, iterations: int = 40_000) -> Job:
    ad = Adaptive(128 * 32, noise) if noise is not None else None
    return Job("a", VGG, 128, iterations, min_gpus=1, max_gpus=8, requested_gpus=4, adaptive=ad)


def test_an_adaptive_start_takes_the_count_its_goodput_pays_for_and_runs_at_its_best_batch():
    cost = CostModel(CLUSTER)
    job = _job(NoiseScale.constant(4000.0))
    rows = waiting_job(job, cost, 8)
    fixed_rows = waiting_job(replace(job, adaptive=None), cost, 8)
    # the batch choice changes which count is fastest: 8 GPUs across nodes adaptive, 4 on one node fixed
    assert rows.run_multi_node[7] < rows.run_one_node[3]
    assert fixed_rows.run_multi_node[7] > fixed_rows.run_one_node[3]
    for j, want in ((job, 8), (replace(job, adaptive=None), 4)):
        rec = Simulation([j], CLUSTER, estimate_error=0.0).run(make_policy("elastic")).records[0]
        seg = rec.segments[0]
        assert seg.gpus == want
        assert seg.batch == goodput.best_batch(cost, j, seg.gpus, seg.spans_nodes, 0.0)
    assert rec.segments[0].batch == 128  # the fixed job ran at its own batch
    # the adaptive job's batch grew with the GPUs (more than M0 per 4 GPUs)
    ad_rec = Simulation([job], CLUSTER, estimate_error=0.0).run(make_policy("elastic")).records[0]
    assert ad_rec.segments[0].batch > 2 * 128


def _running(job: Job, progress: float, *, adaptive: bool = True) -> SlotState:
    """``job`` running on node 0's 4 GPUs at ``progress`` (its base steps), started long enough ago
    to move; node 1 idle; nothing waiting."""
    cost = CostModel(CLUSTER)
    if adaptive:
        one, multi = goodput.remaining_rows(cost, job, 8, progress)
    else:
        w = waiting_job(job, cost, 8)
        one, multi = w.run_one_node * (1 - progress), w.run_multi_node * (1 - progress)
    now = 5000.0
    base = RunningJob(job.job_id, 4, ((0, 4),), start_time=now - 1000.0, expected_end=math.inf,
                      preemptible=True, predicted_end=now + float(one[3]))
    mj = movable_job(base, one=one, multi=multi, work=float(one[0]), scale=1.0, requested=4, move_cost=math.nan,
                     waited=0.0, checkpointable=True)
    return SlotState(now=now, slot_len=30.0, free=(0, 4), gpus_per_node=4, waiting=(), running=(mj,))


def test_a_running_adaptive_job_whose_phi_grew_is_grown_onto_free_gpus():
    res = make_policy("elastic").decide(_running(_job(RISES), 0.6))
    assert res.preempt == ("a",)
    (d,) = res.starts
    assert d.job_id == "a" and d.gpus == 8 and d.placement == ((0, 4), (1, 4))
    assert d.batch is None  # the executor runs it at its best batch for 8 GPUs at its progress


def test_grows_follow_the_goodput_of_what_is_left():
    """Grown exactly when 8 GPUs save more than two moves (the grow and a shrink back) on what is
    left: the same job whose phi stayed small is left alone, and so is its fixed-batch self."""
    cases = {
        "phi stayed small": (_running(_job(NoiseScale.constant(8.0)), 0.6), False),
        "phi grew": (_running(_job(RISES), 0.6), True),
        "phi grows later in what is left": (_running(_job(RISES), 0.1), True),
        "fixed batch": (_running(_job(None), 0.6, adaptive=False), False),
    }
    for why, (state, want) in cases.items():
        mj = state.running[0]
        assert mj.remaining_one_node is not None and mj.remaining_multi_node is not None
        saves = float(mj.remaining_one_node[3]) - float(mj.remaining_multi_node[7])
        assert (saves > 2 * 30.0) == want, why
        res = make_policy("elastic").decide(state)
        assert bool(res.preempt) == want, why
        assert [d.gpus for d in res.starts] == ([8] if want else []), why


def test_non_adaptive_decisions_do_not_depend_on_the_goodput_model():
    """A workload without adaptive jobs is decided as before: elastic's decisions on the
    synth:adaptive workload with every batch fixed are those on the same spec with no job adaptive
    (the family draws its opt-ins from an RNG stream of its own)."""
    from lyasched.sim.synth import synth_workload

    a = synth_workload("synth:adaptive,jobs=40", 3)
    b = synth_workload("synth:adaptive,jobs=40,adaptive=0", 3)
    stripped = tuple(replace(j, adaptive=None) for j in a.jobs)
    assert stripped == b.jobs and any(j.adaptive is not None for j in a.jobs)
    runs = [Simulation(jobs, a.cluster, seed=3, end_fraction=a.end_fraction).run(make_policy("elastic"))
            for jobs in (stripped, b.jobs)]
    segs = [[(r.job.job_id, [(s.start, s.end, s.gpus, s.batch) for s in r.segments]) for r in res.records] for res in runs]
    assert segs[0] == segs[1]
    assert np.array_equal(runs[0].slot_q, runs[1].slot_q)


def test_the_policy_input_says_which_jobs_are_adaptive():
    """`WaitingJob.adaptive` / `MovableJob.adaptive`: set by the one builder (`waiting_job`) and the
    movable builder, False for every job that does not opt in."""
    cost = CostModel(CLUSTER)
    job = _job(NoiseScale.constant(4000.0))
    assert waiting_job(job, cost, 8).adaptive
    assert not waiting_job(replace(job, adaptive=None), cost, 8).adaptive
    assert _running(job, 0.3).running[0].adaptive is False  # movable_job's default: not adaptive
    base = _running(job, 0.3).running[0]
    one, multi = goodput.remaining_rows(cost, job, 8, 0.3)
    mj = movable_job(base, one=one, multi=multi, work=float(one[0]), scale=1.0, requested=4, move_cost=math.nan,
                     waited=0.0, checkpointable=True, adaptive=True)
    assert mj.adaptive


class _Seen:
    """elastic, recording which jobs each slot's input marks adaptive (waiting and running)."""

    def __init__(self) -> None:
        self.inner = make_policy("elastic")
        self.name, self.capabilities = "seen", self.inner.capabilities
        self.waiting: dict[str, set[bool]] = {}
        self.running: dict[str, set[bool]] = {}

    def decide(self, state: SlotState):
        for w in state.waiting:
            self.waiting.setdefault(w.job_id, set()).add(w.adaptive)
        for r in state.running:
            self.running.setdefault(r.job_id, set()).add(getattr(r, "adaptive", None))
        return self.inner.decide(state)


def test_the_simulator_hands_a_moving_policy_the_adaptive_marks():
    """Replayed, a moving policy sees every adaptive job marked adaptive, waiting and running, and
    no other job marked: the same input the service builds (`waiting_job`)."""
    from lyasched.sim.synth import synth_workload

    w = synth_workload("synth:adaptive,jobs=24,load=2", 5)
    ad = {j.job_id for j in w.jobs if j.adaptive is not None}
    assert ad and len(ad) < len(w.jobs)
    pol = _Seen()
    Simulation(w.jobs, w.cluster, seed=5, end_fraction=w.end_fraction).run(pol)
    assert pol.waiting and pol.running
    for seen in (pol.waiting, pol.running):
        for jid, marks in seen.items():
            assert marks == {jid in ad}, jid


def test_an_adaptive_job_stays_on_one_node_while_others_wait():
    """lyasched.policy.adaptive: with another job waiting, an adaptive job takes no count above its
    request across nodes (its rows alone would spread it: the larger batch amortises the all-reduce);
    the same rows unmarked (a fixed-batch job that fast) spread as before, and alone it still spreads."""
    cost = CostModel(CLUSTER)
    a = waiting_job(_job(NoiseScale.constant(4000.0)), cost, 8)
    b = waiting_job(Job("b", profile("resnet50", "imagenet"), 128, 2000, min_gpus=1, max_gpus=8, requested_gpus=2), cost, 8)
    unmarked = replace(a, adaptive=False)
    assert a.adaptive and float(np.argmin(np.fmin(a.run_one_node, a.run_multi_node))) + 1 > a.requested_gpus
    for name in ("elastic", "lyapunov"):
        def starts(*waiting):
            st = SlotState(now=600.0, slot_len=30.0, free=(4, 4), gpus_per_node=4, waiting=waiting)
            return {d.job_id: d for d in make_policy(name).decide(st).starts}

        both = starts(a, b)
        assert not both["a"].spans_nodes and both["a"].gpus <= a.requested_gpus, name
        assert "b" in both, name
        spread = starts(unmarked, b)
        assert spread["a"].spans_nodes and spread["a"].gpus > a.requested_gpus, name
        alone = starts(a)
        assert alone["a"].spans_nodes and alone["a"].gpus == 8, name
