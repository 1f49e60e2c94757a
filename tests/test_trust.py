"""The trust factor (lyasched.estimates.trust), its application in the one builder, and the
simulator's liars."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.estimates.trust import Overruns, TrustBook, TrustParams, distrusted, scaled_row
from lyasched.policy.snapshot import ClusterSnapshot, RunningObs, SlotStateBuilder
from lyasched.policy.state import Capabilities, WaitingJob
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload


def wj(job_id: str, user: str, run: float = 100.0, limit: float = math.inf) -> WaitingJob:
    row = np.array([run, run / 2, math.inf])
    return WaitingJob(job_id, 0.0, run, row, row.copy(), requested_gpus=1, time_limit=limit, user=user)


def test_factor_acted_on_when_far_above_noise_and_never_below_one():
    b = TrustBook()
    b.observe("liar", 1.0, 100.0)
    assert b.factor("liar") == pytest.approx(100.0)  # one 100x run is far beyond noise
    b.observe("twice", 100.0, 200.0)
    assert b.raw("twice") == pytest.approx(2.0)
    assert b.factor("twice") == 1.0  # one 2x run could be noise (bar: exp(3 x 0.4) = 3.3)
    for _ in range(8):
        b.observe("twice", 100.0, 200.0)
    assert b.bar(9) == pytest.approx(1.5)
    assert b.factor("twice") == pytest.approx(2.0)  # nine are not
    for _ in range(5):
        b.observe("modest", 100.0, 10.0)  # ran 10x shorter than claimed
    assert b.raw("modest") == pytest.approx(0.1)
    assert b.factor("modest") == 1.0  # never shorter than claimed
    assert b.factor("nobody") == 1.0
    assert TrustBook(TrustParams(min_jobs=3)).factor("liar") == 1.0


def test_honest_noise_is_not_acted_on():
    rng = np.random.default_rng(0)
    b = TrustBook()
    for u in range(20):
        for r in np.exp(rng.normal(0.0, 0.2, 30)):
            b.observe(f"u{u}", 100.0, 100.0 * r)
    assert b.factors() == {}
    assert max(b.raw(f"u{u}") for u in range(20)) < TrustParams().threshold


def test_window_forgets_old_runs_and_bad_input_is_ignored():
    b = TrustBook(TrustParams(window=3))
    for _ in range(3):
        b.observe("u", 1.0, 50.0)
    assert b.factor("u") == pytest.approx(50.0)
    for _ in range(3):
        b.observe("u", 10.0, 10.0)
    assert b.factor("u") == 1.0
    v = b.version
    b.observe("u", math.nan, 10.0)
    b.observe("u", 0.0, 10.0)
    b.observe("u", 10.0, math.inf)
    assert b.version == v


def test_fresh_user_gets_the_accounts_factor():
    b = TrustBook()
    for _ in range(3):
        b.observe("old", 1.0, 20.0, account="lab")
    b.note_account("fresh", "lab")
    assert b.factor("fresh") == pytest.approx(20.0)
    for _ in range(3):
        b.observe("fresh", 10.0, 10.0, account="lab")
    assert b.factor("fresh") == 1.0  # their own record, once long enough


def test_scaled_row_capped_by_the_limit_never_below_the_claim():
    row = np.array([10.0, 500.0, math.inf])
    assert list(scaled_row(row, 3.0, 100.0)) == [30.0, 500.0, math.inf]
    assert list(scaled_row(row, 3.0, math.inf)) == [30.0, 1500.0, math.inf]
    w = distrusted(wj("a", "u", run=10.0, limit=25.0), 10.0)
    assert list(w.run_one_node[:2]) == [25.0, 25.0]
    assert w.work == pytest.approx(10.0 * 25.0 / 5.0)


def test_builder_applies_the_factor_to_the_users_jobs_only():
    b = TrustBook()
    for _ in range(3):
        b.observe("liar", 1.0, 100.0)
    honest, liar = wj("h", "ann"), wj("l", "liar")
    run = RunningObs("r", ((0, 1),), 0.0, predicted_run=10.0, user="liar")
    snap = ClusterSnapshot(now=0.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4,
                           waiting=(honest, liar), running=(run,), trust=b)
    builder = SlotStateBuilder(Capabilities())
    s = builder.build(snap)
    assert s.waiting[0] is honest
    assert s.waiting[1].run_one_node[0] == pytest.approx(100.0 * 100.0)
    assert s.running[0].predicted_end == pytest.approx(1000.0)
    assert builder.build(snap).waiting[1] is s.waiting[1]  # same object while unchanged (policy memos)
    plain = SlotStateBuilder(Capabilities()).build(ClusterSnapshot(
        now=0.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4, waiting=(honest, liar)))
    assert plain.waiting[1] is liar


def test_a_running_job_past_its_claim_is_evidence_before_it_ends():
    b = TrustBook()
    liar = wj("l", "liar")
    run = RunningObs("r", ((0, 1),), 0.0, predicted_run=10.0, user="liar")
    honest = RunningObs("h", ((0, 1),), 0.0, predicted_run=1000.0, user="ann")
    builder = SlotStateBuilder(Capabilities())

    def shown(now: float) -> float:
        snap = ClusterSnapshot(now=now, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4,
                               waiting=(liar, wj("h2", "ann")), running=(run, honest), trust=b)
        s = builder.build(snap)
        assert s.waiting[1].run_one_node[0] == 100.0  # the honest user's claim as it is
        return float(s.waiting[0].run_one_node[0])

    assert shown(30.0) == 100.0  # 3x its claim: within the noise of one honest job (bar 3.3x)
    assert shown(60.0) == pytest.approx(600.0)  # 6x: counted, a lower bound on its ratio
    assert shown(600.0) == pytest.approx(6000.0)  # and it grows while the job runs
    gone = ClusterSnapshot(now=630.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4,
                           waiting=(liar,), running=(honest,), trust=b)
    assert builder.build(gone).waiting[0] is liar  # ended and not observed: no evidence left
    b.observe("liar", 10.0, 700.0)
    assert builder.build(gone).waiting[0].run_one_node[0] == pytest.approx(7000.0)


def test_overrun_evidence_with_finished_runs():
    b = TrustBook()
    for _ in range(4):
        b.observe("u", 100.0, 100.0)  # honest so far
    assert b.factors_with([("u", math.log(4.0))]) == {}  # one 4x overrun among five: mean 1.32x, not past 2.1x
    assert b.factors_with([("u", math.log(50.0))])["u"] == pytest.approx(50.0 ** 0.2)
    for _ in range(4):
        b.observe("liar", 1.0, 100.0)
    assert b.factors_with([("liar", math.log(5.0))])["liar"] == pytest.approx(100.0)  # never lowers a factor
    assert "new" not in b.factors_with([("new", math.log(3.0))])  # below one job's bar (3.3x)


def test_overruns_kept_as_the_running_set_changes():
    o = Overruns()
    a = RunningObs("a", ((0, 1),), 0.0, predicted_run=10.0, user="x")
    c = RunningObs("c", ((0, 1),), 5.0, predicted_run=math.nan, user="y")
    d = RunningObs("d", ((0, 1),), 0.0, predicted_run=100.0, user="z")
    run = (a, c, d)
    assert o.update(run, 30.0) == ()
    assert o.update(run, 40.0) == (("x", pytest.approx(math.log(4.0))),)
    assert o.update((c, d), 40.0) == ()  # a ended
    assert o.update((c, d), 400.0) == (("z", pytest.approx(math.log(4.0))),)  # nan: no claim to outrun
    for t in range(100):  # the service makes new objects every slot: the heap stays bounded
        o.update(tuple(dataclasses.replace(x) for x in (a, c, d)), 1000.0 + t)
    assert len(o._heap) <= 4 * 3 + 64


def test_in_order_finds_new_jobs_anywhere_in_the_snapshot_order():
    """`in_order` (the new running jobs, walked from the end): the same list as a walk over all,
    wherever the new ones are and when some ids are not there."""
    import random

    from lyasched.estimates.trust import in_order

    rng = random.Random(5)
    for _ in range(300):
        items = [object() for _ in range(rng.randint(0, 40))]
        pick = {id(o) for o in items if rng.random() < 0.2} | ({id(object())} if rng.random() < 0.3 else set())
        assert in_order(items, pick) == [o for o in items if id(o) in pick]


def test_overruns_told_the_new_jobs_answer_as_when_finding_them():
    """`Overruns.update` given each call's new running jobs (as the builder knows them from its
    views) answers as one that finds them itself, call for call, in the same order, with jobs
    ending and starting anywhere in the running set."""
    import random

    from lyasched.policy.snapshot import ClusterSnapshot, SlotStateBuilder
    from lyasched.policy.state import Capabilities

    rng = random.Random(7)
    finds, told = Overruns(), Overruns()
    builder = SlotStateBuilder(Capabilities())
    running: list[RunningObs] = []
    last: tuple = ()
    overran = 0
    for slot in range(600):
        now = 10.0 * slot
        while running and rng.random() < 0.3:
            running.pop(rng.randrange(len(running)))
        for _ in range(rng.randint(0, 3)):
            pred = rng.choice([1.0, 5.0, 30.0, math.nan])
            o = RunningObs(f"j{slot}.{_}", ((0, 1),), now - rng.uniform(0, 20), predicted_run=pred, user=f"u{rng.randrange(3)}")
            running.insert(rng.randrange(len(running) + 1), o)
        cur = tuple(running) if rng.random() < 0.8 or not last else last  # the same set again, sometimes
        new = builder._find_unseen(cur)
        assert new is None or new == [o for o in cur if all(o is not x for x in last)]
        if new is not None:
            builder._running(ClusterSnapshot(now, 10.0, (), (), 8, (), cur))
        got = told.update(cur, now, new)
        assert got == finds.update(cur, now)
        overran += bool(got)
        last = cur
        running = list(cur)
    assert overran > 100


def test_liars_change_claims_not_truth():
    w = load_workload("seed-small-scattered", seed=0)
    honest = Simulation(w.jobs, w.cluster, seed=0)
    lying = Simulation(w.jobs, w.cluster, seed=0, liars={"user3": 0.01})
    np.testing.assert_allclose(lying.best_true_runs(), honest.best_true_runs())
    for i, j in enumerate(lying.jobs):
        a, b = honest.predicted(i).best_run, lying.predicted(i).best_run
        assert b == pytest.approx(a * (0.01 if j.user == "user3" else 1.0))
    with pytest.raises(ValueError):
        Simulation(w.jobs, w.cluster, liars={"user3": 0.0})


def test_trust_makes_lying_not_pay_in_a_replay():
    from lyasched.policy import make_policy

    w = load_workload("seed-small-bursty", seed=0)
    waits = {}
    for trust in (False, True):
        res = Simulation(w.jobs, w.cluster, seed=0, liars={"user6": 0.01}, trust=trust).run(make_policy("lyapunov"))
        lied = sorted((r for r in res.records if r.job.user == "user6"), key=lambda r: r.end)[10:]
        waits[trust] = np.mean([r.wait for r in lied])
    assert waits[True] > 1.5 * waits[False]


@pytest.mark.parametrize("arg,needle", [("user3", "USER=X"), ("user3=0", "USER=X"), ("user3=x", "USER=X"),
                                        ("nosuch=0.5", "no job of user nosuch")])
def test_bad_liars_one_line(arg, needle):
    r = CliRunner().invoke(main, ["replay", "-w", "seed-small-scattered", "-p", "fifo", "--liars", arg])
    assert r.exit_code == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_service_feeds_the_book_from_its_records(tmp_path):
    from lyasched.live.trust import LiveTrust
    from lyasched.store import moves, records

    db = records.open_records(tmp_path / "r.db")
    for k in range(3):
        records.upsert_job(db, f"l{k}", user="liar", state="finished", predicted=10.0, observed=1000.0, ended=100.0 + k)
        records.upsert_job(db, f"h{k}", user="ann", state="finished", predicted=100.0, observed=110.0, ended=100.0 + k)
    records.upsert_job(db, "run", user="bob", state="running", predicted=1.0, ended=None)
    live = LiveTrust()
    book = live.update(db)
    assert book.factors() == {"liar": pytest.approx(100.0)}
    v = book.version
    assert live.update(db).version == v  # each job fed once
    for k in range(3):  # moved jobs' predicted is their last piece's: left out
        records.upsert_job(db, f"m{k}", user="bob", state="finished", predicted=1.0, observed=100.0, ended=200.0 + k)
        db["moves"].insert({"uid": f"m{k}"}, alter=False)
    assert live.update(db).factor("bob") == 1.0
    records.upsert_job(db, "late", user="ann", state="finished", predicted=1.0, observed=1000.0, ended=300.0)
    assert live.update(db).version == v + 1


def test_claim_far_below_what_is_known_is_replaced():
    from lyasched.estimates.trust import known_scale

    assert known_scale(100.0) == 100.0
    assert known_scale(2.0) == 1.0  # within honest noise of one job: the claim stands
    assert known_scale(0.01) == 1.0  # a claim above what is known stands (never shorter than claimed)
    w, h = wj("l", "new"), wj("h", "ann")
    snap = ClusterSnapshot(now=0.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4,
                           waiting=(h, w), known={"l": 50.0, "h": 1.5})
    s = SlotStateBuilder(Capabilities()).build(snap)
    assert s.waiting[0] is h
    assert s.waiting[1].run_one_node[0] == pytest.approx(100.0 * 50.0)
    b = TrustBook()
    b.observe("new", 1.0, 80.0)  # the larger of the two estimates, never their product
    s = SlotStateBuilder(Capabilities()).build(ClusterSnapshot(
        now=0.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4, waiting=(h, w), known={"l": 50.0}, trust=b))
    assert s.waiting[1].run_one_node[0] == pytest.approx(100.0 * 80.0)


def test_known_claims_in_the_simulator():
    w = load_workload("seed-small-scattered", seed=0)
    assert Simulation(w.jobs, w.cluster, liars={"user3": 0.01}).known == {
        j.job_id: pytest.approx(100.0) for j in w.jobs if j.user == "user3"}
    assert Simulation(w.jobs, w.cluster, liars={"user3": 0.01}, trust=False).known == {}
    assert Simulation(w.jobs, w.cluster).known == {}


def test_service_shows_a_liars_next_job_with_their_factor():
    """A job that ran far longer than it was predicted: the same user's next job reaches the
    policy predicted longer by their factor (capped by its time limit), another user's does not."""
    from test_service import FakeJob, FakeSlurm, StartAs, service, summary

    from lyasched.store import records

    db = records.open_records(":memory:")
    first = FakeJob("31", summary("uid-00000031"), limit="1-00:00:00")
    slurm = FakeSlurm(jobs=[first])
    pol = StartAs({"31": ((0, 1),)})
    svc = service(db, slurm, pol)
    svc.run_slot()
    pred1 = records.get_job(db, "uid-00000031")["predicted"]
    first.state, first.reason, first.start, first.nodes = "RUNNING", "None", 1_000_101.0, ("node1",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    first.state, first.end = "COMPLETED", 1_000_101.0 + 50 * pred1
    svc.clock_state["t"] += 50 * pred1 + 2
    svc.run_slot()
    t = svc.clock_state["t"]
    slurm.jobs += [FakeJob("32", summary("uid-00000032"), submit=t, limit="1-00:00:00"),
                   FakeJob("33", summary("uid-00000033"), user="bob", submit=t, limit="1-00:00:00")]
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert svc.trust.book.factor("alice") == pytest.approx(50.0, rel=0.01)
    raw = {w.job_id: w for w in svc.last_snapshot.waiting}
    shown = {w.job_id: w for w in pol.states[-1].waiting}
    assert shown["33"] is raw["33"]
    assert shown["32"].run_one_node[0] == pytest.approx(raw["32"].run_one_node[0] * 50.0, rel=0.01)


def test_replay_liars_and_no_trust():
    import json

    def avg_wait(*extra):
        r = CliRunner().invoke(main, ["replay", "-w", "seed-small-bursty", "-p", "lyapunov", "--json", *extra])
        assert r.exit_code == 0, r.stderr
        out = json.loads(r.stdout)
        return out, out["policies"]["lyapunov"]["avg_wait_s"]

    honest, w0 = avg_wait()
    lied, w1 = avg_wait("--liars", "user1=0.01", "--no-trust")
    assert lied["liars"] == {"user1": 0.01} and lied["trust"] is False and honest["trust"] is True
    assert w1 != w0


def test_known_reaches_running_jobs():
    run = RunningObs("r", ((0, 1),), 0.0, predicted_run=10.0, user="new")
    s = SlotStateBuilder(Capabilities()).build(ClusterSnapshot(
        now=0.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4, waiting=(), running=(run,), known={"r": 40.0}))
    assert s.running[0].predicted_end == pytest.approx(400.0)


def test_service_replaces_a_forged_claim_by_the_models_shared_profile():
    """A hand-written summary of a profiled model claiming 1% of its step time: the service's
    snapshot knows the model's profile (`ClusterSnapshot.known`) and the policy sees the job
    predicted as the profile says; an honest summary of the same model is shown as it is."""
    from test_service import FakeJob, FakeSlurm, StartAs, service

    from lyasched.store import costtable, records
    from lyasched.summary import CostSummary

    def summ(uid: str, scale: float) -> str:
        return CostSummary(uid=uid, sig="cnn:test", global_batch=64, iterations=200, min_gpus=1, max_gpus=8,
                           alpha=0.01 * scale, beta=0.002 * scale, params=1_000_000).encode()

    db = records.open_records(":memory:")
    costtable.put(db, {"signature": "cnn:test", "device_type": "gpu", "model": "cnn", "device_name": "gpu",
                       "source": "measured", "alpha": 0.01, "beta": 0.002, "params": 1_000_000})
    slurm = FakeSlurm(jobs=[FakeJob("41", summ("uid-00000041", 0.01)), FakeJob("42", summ("uid-00000042", 1.0), user="bob")])
    pol = StartAs({})
    svc = service(db, slurm, pol)
    svc.run_slot()
    known = svc.last_snapshot.known or {}
    assert known.get("41") == pytest.approx(100.0, rel=0.05) and "42" not in known
    raw = {w.job_id: w for w in svc.last_snapshot.waiting}
    shown = {w.job_id: w for w in pol.states[-1].waiting}
    assert shown["42"] is raw["42"]
    assert shown["41"].best_run == pytest.approx(raw["41"].best_run * known["41"], rel=1e-6)
    assert shown["41"].run_one_node[0] == pytest.approx(raw["42"].run_one_node[0], rel=0.05)  # as long as the honest one


def test_trust_reaches_a_moving_policys_view_of_running_jobs():
    """elastic reads running jobs as MovableJob (remaining rows): a liar's are scaled by their
    factor, at most the time left to their limit, never below the claim; others' untouched."""
    from lyasched.policy.movable import movable_job

    b = TrustBook()
    b.observe("liar", 1.0, 50.0)
    obs = (RunningObs("l", ((0, 1),), 0.0, predicted_run=10.0, time_limit=400.0, user="liar"),
           RunningObs("h", ((0, 1),), 0.0, predicted_run=90.0, user="ann"))  # within its claim's noise
    builder = SlotStateBuilder(Capabilities(preemptive=True, moves=True))
    s = builder.build(ClusterSnapshot(now=100.0, slot_len=30.0, nodes=("n0",), free=(2,), gpus_per_node=4,
                                      waiting=(), running=obs, trust=b))
    row = np.array([10.0, 6.0, np.inf, 20.0])
    views = tuple(movable_job(r, one=row, multi=row, work=10.0, scale=1.0, requested=1, move_cost=0.0,
                              waited=0.0, checkpointable=True) for r in s.running)
    m = builder.movable(dataclasses.replace(s, running=views))
    liar, honest = m.running
    assert honest is views[1]
    # 50 x, capped at 400 - 100 s left to the limit; the disallowed count stays disallowed
    assert list(liar.remaining_one_node) == pytest.approx([300.0, 300.0, math.inf, 300.0])
    assert liar.work_left == pytest.approx(10.0 * 300.0 / 6.0)
    assert SlotStateBuilder(Capabilities(preemptive=True, moves=True)).movable(s) is s  # no trust input: as is


def test_last_snapshot_is_a_record_of_its_slot():
    """`Service.last_snapshot` stays what that slot decided on: a job that finishes later (its
    owner found to run 50x their claims) changes the trust of the slots after it, never the record
    of an earlier slot, so the earlier snapshot rebuilt by a fresh builder gives the rows the
    policy was shown then."""
    from test_service import FakeJob, FakeSlurm, StartAs, service, summary

    from lyasched.policy.state import capabilities
    from lyasched.store import records

    db = records.open_records(":memory:")
    first = FakeJob("31", summary("uid-00000031"), limit="1-00:00:00")
    waits = FakeJob("32", summary("uid-00000032"), limit="1-00:00:00")  # waits throughout (not in the plan)
    slurm = FakeSlurm(jobs=[first, waits])
    pol = StartAs({"31": ((0, 1),)})
    svc = service(db, slurm, pol)
    svc.run_slot()
    pred1 = records.get_job(db, "uid-00000031")["predicted"]
    first.state, first.reason, first.start, first.nodes = "RUNNING", "None", 1_000_101.0, ("node1",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    snap, shown = svc.last_snapshot, pol.states[-1]
    assert snap is not None and snap.trust is not None and snap.trust.factor("alice") == 1.0
    first.state, first.end = "COMPLETED", 1_000_101.0 + 50 * pred1
    svc.clock_state["t"] += 50 * pred1 + 2
    svc.run_slot()
    svc.run_slot()
    assert svc.last_snapshot.trust.factor("alice") == pytest.approx(50.0, rel=0.01)  # the later slots' trust
    assert snap.trust.factor("alice") == 1.0  # the earlier record's, unchanged
    again = SlotStateBuilder(capabilities(pol)).build(snap)
    assert [(w.job_id, w.work, w.run_one_node.tolist()) for w in again.waiting] == [
        (w.job_id, w.work, w.run_one_node.tolist()) for w in shown.waiting]
