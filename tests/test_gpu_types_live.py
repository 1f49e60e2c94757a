"""The live service gives the policy the typed input replay gives it: each node's GPU type
(`SlotState.node_types`) and each waiting job's rows on every type it allows (`WaitingJob.by_type`),
made by the one builder (`lyasched.policy.snapshot.type_rows`), so lyapunov chooses the type with
the count under ``serve`` as under ``replay``. On recorded-format fake Slurm (test_service).

Cluster: node1, node2 with gpu:a100:4, node3 with gpu:t4:4 (the test clusters' layout)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lyasched.config import Config
from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.goodput import NoiseScale
from lyasched.costmodel.jobspec import Job
from lyasched.costmodel.roofline import lookup
from lyasched.live import adaptive
from lyasched.policy import make_policy
from lyasched.policy.state import SlotResult, SlotState
from lyasched.sim.hetero import NodeGroup, TypedCluster
from lyasched.sim.simulator import Simulation
from lyasched.store import records
from lyasched.summary import CostSummary
from test_gpu_types import TypedJob, cost, resizes, typed_nodes_of
from test_mover import MoveAs, MovingSlurm, make
from test_service import FakeSlurm, service

T0 = 1_000_100.0


class Watch:
    """lyapunov, keeping each slot's input."""

    name = "lyapunov"

    def __init__(self) -> None:
        self.policy = make_policy("lyapunov")
        self.states: list[SlotState] = []

    def decide(self, state: SlotState) -> SlotResult:
        self.states.append(state)
        return self.policy.decide(state)


@pytest.fixture
def db():
    return records.open_records(":memory:")


def _summary(uid: str, types: tuple[str, ...] = (), gmin: int = 4, gmax: int = 4, **kw) -> str:
    return replace(cost(uid, types, gmin=gmin, gmax=gmax), profile_type="a100", **kw).encode()


def test_a_job_that_gains_much_from_a100s_starts_on_them_and_a_t4_only_job_on_the_t4(db):
    """Both kinds free: the service's input is typed (the simulator's), the job of any type starts
    on the a100s (4x faster by the roofline), the t4-only job on node3, each release on its type."""
    fast = TypedJob("101", _summary("uid-00000001"), gpn=4)
    slow = TypedJob("102", _summary("uid-00000002", ("t4",)), gpn=4, gtype="t4")
    slurm = FakeSlurm(jobs=[fast, slow])
    typed_nodes_of(slurm)
    pol = Watch()
    svc = service(db, slurm, pol)
    svc.run_slot()
    (state,) = pol.states
    assert state.node_types == ("a100", "a100", "t4")
    w = {j.job_id: j for j in state.waiting}
    assert set(w["101"].by_type) == {"a100", "t4"} and set(w["102"].by_type) == {"t4"}
    a, t = w["101"].by_type["a100"], w["101"].by_type["t4"]
    assert t.run_time(4, False) > 2 * a.run_time(4, False)  # the a100 gains much
    assert w["101"].by_type["a100"].best_any == pytest.approx(a.best_run)
    # the job's own rows (lyastat, Q) stay its fastest type's, as before
    np.testing.assert_allclose(w["101"].run_one_node, a.run_one_node)
    placed = {u["JobId"]: u for u in resizes(slurm)}
    assert placed["101"]["ReqNodeList"] in ("node1", "node2") and placed["101"]["TresPerNode"] == "gres:gpu:4"
    assert (placed["102"]["ReqNodeList"], placed["102"]["TresPerNode"]) == ("node3", "gres:gpu:t4:4")
    # each start's prediction is its rows on the type it landed on
    assert records.get_job(db, "uid-00000002")["predicted"] == pytest.approx(w["102"].by_type["t4"].run_time(4, False))
    assert records.get_job(db, "uid-00000001")["predicted"] == pytest.approx(a.run_time(4, False))


def test_a_job_that_fits_only_the_a100s_waits_for_them(db):
    """node1 and node2 busy, node3 (t4) free: a job whose batch the t4's 16 GiB cannot hold has no
    t4 rows, so the policy leaves it waiting (before, the policy placed it on node3 and the
    release's fit refused it every slot); the t4-only job behind it starts."""
    big = _summary("uid-00000001", gmin=1, gmax=1, mem_base=2e9, mem_per_sample=3e8)  # 64 samples: 21 GB on one GPU
    slurm = FakeSlurm(nodes=[("node1", 4, 4, "ALLOCATED"), ("node2", 4, 4, "ALLOCATED"), ("node3", 4, 0, "IDLE")],
                      jobs=[TypedJob("101", big, gpn=1),
                            TypedJob("102", _summary("uid-00000002", ("t4",)), gpn=4, gtype="t4", submit=1_000_001.0)])
    typed_nodes_of(slurm)
    pol = Watch()
    svc = service(db, slurm, pol)
    svc.run_slot()
    w = {j.job_id: j for j in pol.states[0].waiting}
    assert set(w["101"].by_type) == {"a100"}
    assert [u["JobId"] for u in resizes(slurm)] == ["102"]
    assert records.get_job(db, "uid-00000001")["state"] == "waiting"


def test_an_untyped_cluster_gets_the_untyped_input(db):
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001"), gpn=4)])
    pol = Watch()
    service(db, slurm, pol).run_slot()
    (state,) = pol.states
    assert state.node_types == () and state.waiting[0].by_type is None
    # the admin's one device key for every type: untyped too
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000003"), gpn=4)])
    typed_nodes_of(slurm)
    pol = Watch()
    service(records.open_records(":memory:"), slurm, pol, device="gpu").run_slot()
    assert pol.states[0].node_types == () and pol.states[0].waiting[0].by_type is None


def test_the_service_and_replay_build_the_same_typed_rows_for_the_same_job(db):
    """The same job (profile measured on an a100, no cost-table entry, no start-up term) on the
    same typed nodes and links: the service's by_type rows are replay's, type by type."""
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001", gmin=1, gmax=8), gpn=1, limit="UNLIMITED")])
    typed_nodes_of(slurm)
    pol = Watch()
    svc = service(db, slurm, pol)
    svc.run_slot()
    live = pol.states[0].waiting[0]

    s = cost("uid-00000001", (), gmin=1, gmax=8)
    conf = Config()
    cluster = ClusterSpec(nodes=3, gpus_per_node=4, gpu_mem=lookup("a100").memory, intra=conf.intra, inter=conf.inter,
                          shape=conf.shape)
    typed = TypedCluster((NodeGroup("a100", 2, 4), NodeGroup("t4", 1, 4)), base="a100")
    job = Job(job_id="101", profile=s.to_profile(), global_batch=s.global_batch, iterations=s.iterations,
              submit_time=0.0, min_gpus=1, max_gpus=8, requested_gpus=1)
    sim = Simulation([job], cluster, typed=typed, estimate_error=0.0)
    replay = sim.predicted(0)
    assert typed.node_types == pol.states[0].node_types
    assert set(replay.by_type) == set(live.by_type) == {"a100", "t4"}
    n = len(replay.run_one_node)  # replay's rows stop at the job's largest count, the service's at the cluster's GPUs
    for t in ("a100", "t4"):
        lv, rp = live.by_type[t], replay.by_type[t]
        np.testing.assert_allclose(lv.run_one_node[:n], rp.run_one_node, rtol=1e-9)
        np.testing.assert_allclose(lv.run_multi_node[:n], rp.run_multi_node, rtol=1e-9)
        assert np.isinf(lv.run_one_node[n:]).all() and np.isinf(lv.run_multi_node[n:]).all()
    assert live.by_type["t4"].best_any == pytest.approx(replay.by_type["t4"].best_any, rel=1e-9)
    assert math.isinf(live.by_type["t4"].run_multi_node[7])  # 8 GPUs cannot be laid out on one t4 node


def test_the_movers_view_shows_a_running_job_on_the_type_of_its_nodes(db, tmp_path):
    """A checkpointable job of any type running on node3 (a t4): its `MovableJob` rows are its t4
    rows, not its a100 ones (the fastest type's, its own rows)."""
    summary = replace(cost("uid-00000001", (), ck=True, gmin=1, gmax=4), profile_type="a100").encode()
    slurm = MovingSlurm(nodes=[("node1", 4, 0, "IDLE"), ("node2", 4, 0, "IDLE"), ("node3", 4, 2, "MIXED")],
                        jobs=[TypedJob("101", summary, state="RUNNING", reason="None", start=T0 - 10,
                                       nodes=("node3",), gpn=2)])
    typed_nodes_of(slurm)
    mv = MoveAs({})
    svc = make(db, slurm, mv, tmp_path)
    svc.run_slot()
    state = svc.last_state
    assert state is not None and state.node_types == ("a100", "a100", "t4")
    (r,) = state.running
    rows = svc.inputs.waiting(svc_ctx(svc), svc.inputs.decode(summary)[0], as_slurm_job(slurm, "101"))
    rem = r.remaining_one_node
    ok = np.isfinite(rem)
    on_t4 = rem[ok] / rows.by_type["t4"].run_one_node[ok]  # the share left, the same at every count
    on_a100 = rem[ok] / rows.by_type["a100"].run_one_node[ok]
    np.testing.assert_allclose(on_t4, on_t4[0], rtol=1e-9)
    assert 0 < on_t4[0] <= 1 and on_a100.min() > 2 * on_t4[0], (on_t4, on_a100)  # not the a100 rows


def svc_ctx(svc):
    """A slot context as the last slot's, for asking the service's inputs again."""
    from lyasched.costmodel.cost import CostModel
    from lyasched.live import observe
    from lyasched.live.context import SlotContext
    from lyasched.live.report import SlotReport

    obs = observe.read(svc.slurm, svc.config, svc.db)
    ctx = SlotContext(now=svc.clock_state["t"], report=SlotReport(slot_id=None, time=0.0, duration=0.0))
    ctx.cluster = svc.inputs.cluster(obs.view.spec)
    ctx.cost, ctx.names, ctx.types, ctx.device = CostModel(ctx.cluster), obs.names, obs.types, obs.view.device_type
    ctx.gpus = [n.gpus_total for n in obs.nodes]
    ctx.type_costs = svc.inputs.type_costs(ctx)
    return ctx


def as_slurm_job(slurm, job_id):
    from lyasched.slurm import query as q

    (job,) = [j for j in q.parse_squeue(slurm.run(["squeue"])) if j.job_id == job_id]
    return job


def test_an_adaptive_jobs_batch_is_chosen_for_the_type_it_lands_on(db):
    """An adaptive job of any type (large noise scale: it wants large batches; 0.25 GB a sample):
    started on node3 its batch is the best a t4's speed and 16 GiB allow, on node1 an a100's."""
    from lyasched.policy.state import Decision

    comment = CostSummary(uid="uid-00000001", sig="cnn:test", global_batch=64, iterations=200, min_gpus=1, max_gpus=4,
                          alpha=0.01, beta=0.002, params=1_000_000, mem_base=1e9, mem_per_sample=2.5e8, max_batch=4096,
                          lr_rule="adascale", profile_type="a100").encode()
    slurm = FakeSlurm(jobs=[TypedJob("101", comment, gpn=1)])
    typed_nodes_of(slurm)
    svc = service(db, slurm, Watch())
    svc.run_slot()
    ctx = svc_ctx(svc)
    s = svc.inputs.decode(comment)[0]
    svc.inputs.waiting(ctx, s, as_slurm_job(slurm, "101"))
    job, frac, on = ctx.adaptive["101"]
    job = replace(job, adaptive=replace(job.adaptive, noise=NoiseScale.constant(1e6)))  # as if it reported a large phi
    ctx.adaptive["101"] = (job, frac, {t: (c, replace(j, adaptive=job.adaptive)) for t, (c, j) in on.items()})
    d = Decision("101", 1, ((0, 1),), 1.0, "")
    on_a100 = adaptive.batch_on(ctx, "101", d, ((0, 1),))
    on_t4 = adaptive.batch_on(ctx, "101", replace(d, placement=((2, 1),)), ((2, 1),))
    t4_holds = (lookup("t4").memory - 1e9) / 2.5e8
    assert on_t4 is not None and on_a100 is not None
    assert on_t4 <= t4_holds < on_a100, (on_t4, on_a100, t4_holds)


def test_with_the_t4_node_partly_taken_a_job_of_any_type_still_goes_to_an_a100(db):
    """node3 (t4) has 2 free GPUs, node1 and node2 (a100) 4 each: an untyped view's best fit for
    2 GPUs is node3 (where the service released it before its input was typed); the typed input starts it on the a100s.
    (The real-cluster twin: test_gpu_types_slurm.py.)"""
    slurm = FakeSlurm(nodes=[("node1", 4, 0, "IDLE"), ("node2", 4, 0, "IDLE"), ("node3", 4, 2, "MIXED")],
                      jobs=[TypedJob("101", _summary("uid-00000001", gmin=2, gmax=2), gpn=2)])
    typed_nodes_of(slurm)
    service(db, slurm).run_slot()
    (u,) = resizes(slurm)
    assert u["ReqNodeList"] in ("node1", "node2") and u["TresPerNode"] == "gres:gpu:2", u


# ---------------------------------------------------------------- replay = serve on typed nodes

TYPED = {"node1": "a100", "node2": "a100", "node3": "t4"}


@pytest.mark.parametrize("cross_type", [False, True])
def test_replay_and_serve_decide_alike_on_typed_nodes(tmp_path, cross_type):
    """test_parity's history on node1, node2 (a100 x 4) and node3 (t4 x 4), jobs allowing any type,
    the a100 only or the t4 only: every slot the simulator decides, the service's input has the
    same node types and the same by_type rows (and best_any) for every waiting job, and lyapunov
    (with and without the cross-type penalty) starts the same jobs on the same GPUs."""
    from lyasched.service import Service
    from test_parity import LIMIT_S, SLOT, T0, Recorder, ReplayedSlurm, _Job, workload

    allowed = {}
    history = []
    for k, (jid, t, s) in enumerate(workload()):
        allowed[jid] = [(), ("a100",), ("t4",), ("a100", "t4")][k % 4]
        history.append((jid, t, replace(s, profile_type="a100", gpu_types=allowed[jid])))
    cfg = Config(slot_seconds=SLOT, db=tmp_path / "p.db")
    cluster = ClusterSpec(nodes=3, gpus_per_node=4, gpu_mem=lookup("a100").memory, intra=cfg.intra, inter=cfg.inter,
                          shape=cfg.shape)
    typed = TypedCluster((NodeGroup("a100", 2, 4), NodeGroup("t4", 1, 4)), base="a100")
    jobs = [Job(job_id=jid, profile=s.to_profile(), global_batch=s.global_batch, iterations=s.iterations,
                submit_time=t, min_gpus=s.min_gpus, max_gpus=s.max_gpus, requested_gpus=s.min_gpus,
                time_limit=LIMIT_S, user="alice") for jid, t, s in history]
    sim_pol = Recorder(make_policy("lyapunov", cross_type=cross_type))
    res = Simulation(jobs, cluster, slot_len=SLOT, estimate_error=0.0, seed=0, typed=typed,
                     gpu_types={j: a for j, a in allowed.items() if a}).run(sim_pol, name="lyapunov")
    end = max(r.end for r in res.records)

    slurm = ReplayedSlurm([_Job(jid, s.encode(), t) for jid, t, s in history], nodes=("node1", "node2", "node3"))
    base_run = slurm.run

    def run(args, *, idempotent=True, input=None):  # each node's Gres names its type
        out = base_run(args, idempotent=idempotent, input=input)
        if list(args[:3]) == ["scontrol", "show", "node"]:
            out = "\n".join(ln.replace("Gres=gpu:", f"Gres=gpu:{TYPED[ln.split()[0][9:]]}:", 1) if ln else ln
                            for ln in out.split("\n"))
        return out

    slurm.run = run  # type: ignore[method-assign]
    db = records.open_records(str(tmp_path / "p.db"))
    clock = {"t": T0}
    live_pol = Recorder(make_policy("lyapunov", cross_type=cross_type))
    svc = Service(cfg, db, slurm=slurm, policy=live_pol, clock=lambda: clock["t"])
    run_time: dict[str, float] = {}
    live = {}
    t = T0
    while t <= end + SLOT:
        clock["t"] = t
        slurm.advance(t, run_time)
        n = len(live_pol.calls)
        report = svc.run_slot()
        assert not report.error, report.error
        for st in report.started:
            run_time[st["slurm_id"]] = records.get_job(db, f"uid-{int(st['slurm_id']) - 500:08d}")["predicted"]
        if len(live_pol.calls) > n:
            live[t] = live_pol.calls[-1]
        t += SLOT
    assert len(sim_pol.calls) >= 5
    for state, starts, _, _ in sim_pol.calls:
        assert state.now in live, f"slot {state.now}: the simulator decided, the service did not"
        lstate, lstarts, _, _ = live[state.now]
        assert (state.node_types, state.free) == (lstate.node_types, lstate.free), state.now
        assert [w.job_id for w in state.waiting] == [w.job_id for w in lstate.waiting]
        # the arrival history: each job's request on its fastest allowed type, in both
        assert np.array_equal(state.arrivals_t, lstate.arrivals_t), state.now
        assert np.allclose(state.arrivals_cum_gpu_s, lstate.arrivals_cum_gpu_s, rtol=1e-9), state.now
        for a, b in zip(state.waiting, lstate.waiting):
            assert set(a.by_type) == set(b.by_type), a.job_id
            n = len(a.run_one_node)
            # its own rows: those of its fastest allowed type (its work in Q; serve's own rows also hold
            # the counts beyond that type's nodes, at its speed, which replay leaves out)
            assert math.isclose(a.work, b.work, rel_tol=1e-9), a.job_id
            for x, y in ((a.run_one_node, b.run_one_node[:n]), (a.run_multi_node, b.run_multi_node[:n])):
                assert np.allclose(x[np.isfinite(x)], y[np.isfinite(x)], rtol=1e-9), a.job_id
            for gt in a.by_type:
                x, y = a.by_type[gt], b.by_type[gt]
                assert np.allclose(x.run_one_node, y.run_one_node[:n], rtol=1e-9), (a.job_id, gt)
                assert np.allclose(x.run_multi_node, y.run_multi_node[:n], rtol=1e-9), (a.job_id, gt)
                assert math.isclose(x.best_any, y.best_any, rel_tol=1e-9), (a.job_id, gt)
        assert starts == lstarts, f"slot {state.now}: {starts} vs {lstarts}"
    started = {d[0]: d[2] for _, s, _, _ in sim_pol.calls for d in s}
    assert len(started) == len(history)
    for j, p in started.items():  # every job on one type it allows
        kinds = {typed.node_types[n] for n, _ in p}
        assert len(kinds) == 1 and (not allowed[j] or kinds <= set(allowed[j])), (j, allowed[j], p)


def test_a_typed_plain_job_has_its_estimate_on_its_requests_type_only(db):
    plain = "lyasched:v1;id=pl-0000000001;sig=plain;b=2;it=1;gmin=2;gmax=2;a=0.0;bt=0.0;p=1;bpp=4;m0=0.0;m1=0.0;src=e;pl=1"
    other = plain.replace("pl-0000000001", "pl-0000000002")
    slurm = FakeSlurm(nodes=[("node1", 4, 4, "ALLOCATED"), ("node2", 4, 4, "ALLOCATED"), ("node3", 4, 4, "ALLOCATED")],
                      jobs=[TypedJob("101", plain, gpn=2, gtype="t4"), TypedJob("102", other, gpn=2)])
    typed_nodes_of(slurm)
    pol = Watch()
    service(db, slurm, pol).run_slot()
    w = {j.job_id: j for j in pol.states[0].waiting}
    assert set(w["101"].by_type) == {"t4"} and set(w["102"].by_type) == {"a100", "t4"}
    # no speed per type is known of a plain job: its estimate, the same on each
    assert w["102"].by_type["t4"].run_time(2, False) == w["102"].by_type["a100"].run_time(2, False) == w["102"].run_time(2, False)


def test_a_held_job_larger_than_every_type_it_allows_says_why(tmp_path, monkeypatch):
    """12 GPUs (an adopted or old job: lyasub refuses it now) fit the a100 x2 + t4 nodes only by
    mixing types, which a job never does: its record says why it waits, lyastat shows it (and
    --json carries it), and the reason is cleared once a type can hold it."""
    from click.testing import CliRunner

    from lyasched.cli.lyastat import main as lyastat
    from lyasched.live import gputypes

    path = tmp_path / "svc.db"
    db = records.open_records(path)
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001", gmin=12, gmax=12, global_batch=48), gpn=4),
                            TypedJob("102", _summary("uid-00000002", ("a100",)), gpn=4, gtype="a100")])
    typed_nodes_of(slurm)
    svc = service(db, slurm, Watch())
    svc.run_slot()
    why = records.get_job(db, "uid-00000001")["reason"]
    assert why.startswith(gputypes.NEVER) and "(any)" in why and "12 GPUs" in why and "a100 2x4, t4 1x4" in why
    assert not str(records.get_job(db, "uid-00000002")["reason"] or "").startswith(gputypes.NEVER)
    assert [u["JobId"] for u in resizes(slurm)] == ["102"]
    r = CliRunner().invoke(lyastat, ["--db", str(path), "--no-slurm", "--all", "--json"])
    assert r.exit_code == 0, r.output
    (row,) = [x for x in __import__("json").loads(r.output)["jobs"] if x["uid"] == "uid-00000001"]
    assert row["reason"] == why
    r = CliRunner().invoke(lyastat, ["--db", str(path), "--no-slurm", "--all"])
    assert gputypes.NEVER in r.output
    # the nodes change: three a100 nodes hold 12 GPUs of one type, and the reason goes
    import test_gpu_types

    monkeypatch.setitem(test_gpu_types.TYPES, "node3", "a100")
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert not str(records.get_job(db, "uid-00000001")["reason"] or "").startswith(gputypes.NEVER)


def test_a_constrained_job_has_rows_only_on_types_with_a_node_of_its_features(db):
    """--constraint t4 on the test clusters' layout (each node's Features = its type): the policy's
    input (by_type, the one builder) has the t4 rows only, so lyapunov starts it on node3 itself
    (not the a100s it would pick for a job of any type); a constraint no node meets leaves no row,
    and the record says why."""
    from test_gpu_types import featured_nodes_of

    from lyasched.live import gputypes

    feats = {"node1": "a100", "node2": "a100", "node3": "t4"}
    slurm = FakeSlurm(jobs=[TypedJob("101", _summary("uid-00000001", constraint="t4"), gpn=4),
                            TypedJob("102", _summary("uid-00000002", constraint="h100|ib"), gpn=4)])
    featured_nodes_of(slurm, feats)
    pol = Watch()
    service(db, slurm, pol).run_slot()
    w = {j.job_id: j for j in pol.states[0].waiting}
    assert set(w["101"].by_type) == {"t4"} and w["102"].by_type == {}
    (u,) = resizes(slurm)
    assert (u["JobId"], u["ReqNodeList"]) == ("101", "node3")
    why = records.get_job(db, "uid-00000002")["reason"]
    assert why.startswith(gputypes.NEVER) and "with its --constraint's features (h100|ib)" in why
