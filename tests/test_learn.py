"""Learning from every run: the in-job step-time reporter, the step-file reader, the profile
refit, the cost table's runs/history/provenance, the start-up term, and the service hook."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.costmodel import startup
from lyasched.cli import main as lyasched_main
from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.costmodel.learn import Run, StepReport, predict_step, read_steps, refit, steps_path
from lyasched.live.learning import job_ended
from lyasched.job.steptimes import StepTimes
from lyasched.store import costtable, open_db, records

CLUSTER = ClusterSpec(nodes=3, gpus_per_node=4, intra=Link(1e9, 0.0), inter=Link(1e8, 0.0))


def write_report(path: Path, world: int, per_rank_steps: list[list[float]], first: float = 1000.0,
                 nnodes: int = 1, local_bsz: int = 16, launcher: str = "srun+torchrun", monkeypatch=None) -> None:
    """Write a step file the way `StepTimes` does, rank by rank (real class, fake clocks)."""
    for rank, steps in enumerate(per_rank_steps):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        monkeypatch.setenv("LYASCHED_NNODES", str(nnodes))
        monkeypatch.setenv("LYASCHED_GPUS_PER_NODE", str(world // nnodes))
        monkeypatch.setenv("LYASCHED_LAUNCHER", launcher)
        monkeypatch.setenv("SLURM_CLUSTER_NAME", "testc")
        monkeypatch.setenv("LYASCHED_MODEL", "resnet")
        st = StepTimes(path, local_bsz=local_bsz)
        t = first
        for d in steps:
            st._buf.append(f"S\t{rank}\t{st._step}\t{t:.6f}\t{d:.6f}\n")
            st._step += 1
            t += d
        st.close()


def test_reporter_is_a_no_op_without_a_file(monkeypatch, tmp_path):
    monkeypatch.delenv("LYASCHED_STEPS_FILE", raising=False)
    st = StepTimes()
    assert not st.enabled
    st.begin()
    st.end()
    st.close()
    assert list(tmp_path.iterdir()) == []


def test_reporter_appends_real_steps_and_reader_takes_the_slowest_rank(monkeypatch, tmp_path):
    path = tmp_path / ".lyasched" / "steps-7.tsv"
    monkeypatch.setenv("LYASCHED_STEPS_FILE", str(path))
    monkeypatch.setenv("RANK", "0")
    st = StepTimes(flush_every=3)
    for _ in range(5):
        st.begin()
        sum(range(1000))
        st.end()
    st.close()
    lines = path.read_text().splitlines()
    assert lines[0].startswith("M\t0\t") and sum(1 for x in lines if x.startswith("S\t0\t")) == 5
    rep = read_steps(path)
    assert rep.steps == 3 and rep.ranks == 1 and 0 < rep.step_time < 1

    two = tmp_path / "two.tsv"
    write_report(two, 2, [[0.5, 0.5, 0.1, 0.1, 0.1, 0.1], [0.5, 0.5, 0.2, 0.3, 0.2, 0.2]], monkeypatch=monkeypatch)
    with two.open("a") as fh:
        fh.write("S\t1\tgarbage\n" "S\t0\t6\t1e3\n")  # a torn line and a short one are skipped
    rep = read_steps(two)
    assert rep.placement == (2,) and rep.local_bsz == 16 and rep.ranks == 2 and rep.steps == 4
    assert rep.step_time == pytest.approx(0.2) and rep.first_begin == pytest.approx(1000.0)
    assert rep.launcher == "srun+torchrun" and rep.cluster == "testc"
    (tmp_path / "empty.tsv").write_text("M\t0\t{}\n")
    assert read_steps(tmp_path / "empty.tsv") is None


def truth(base: Profile) -> Profile:
    """A 'real' model that computes 30% slower than profiled and all-reduces 6x (intra) and 3x
    (inter) the ring model's time."""
    return replace(base, alpha=base.alpha * 1.3, beta=base.beta * 1.3, comm_scale_intra=6.0, comm_scale_inter=3.0)


def test_refit_learns_compute_and_per_link_allreduce_and_predicts_a_held_out_count():
    base = Profile("m", alpha=0.01, beta=0.001, params=2_000_000)
    real = truth(base)
    runs = [Run(p, 16, predict_step(real, CLUSTER, p, 16) * f) for p, f in
            [((1,), 1.02), ((2,), 0.98), ((4,), 1.01), ((2, 2), 1.0)]]
    learned, why = refit(base, CLUSTER, runs)
    assert learned.alpha == pytest.approx(0.013, rel=0.05) and learned.beta == pytest.approx(0.0013, rel=0.05)
    assert learned.comm_scale_intra == pytest.approx(6.0, rel=0.1) and learned.comm_scale_inter == pytest.approx(3.0, rel=0.1)
    assert any("intra" in w for w in why) and any("inter" in w for w in why) and any("compute" in w for w in why)
    held = (3,)
    measured = predict_step(real, CLUSTER, held, 16)
    err_first = abs(predict_step(base, CLUSTER, held, 16) / measured - 1)
    err_learned = abs(predict_step(learned, CLUSTER, held, 16) / measured - 1)
    assert err_learned < 0.05 < err_first
    # two batch sizes on one GPU: alpha and beta are refitted separately
    two = [Run((1,), 8, real.step_time(8)), Run((1,), 32, real.step_time(32))]
    lp, why = refit(base, CLUSTER, two)
    assert (lp.alpha, lp.beta) == (pytest.approx(real.alpha), pytest.approx(real.beta)) and "refitted" in why[0]


def put_entry(db, sig="sig1", model="mlp"):
    return costtable.put(db, {"signature": sig, "device_type": "gpu", "model": model, "alpha": 0.01, "beta": 0.001,
                              "params": 2_000_000, "source": "measured"})


def test_cost_table_learns_with_provenance_history_and_a_new_profile_restarts(tmp_path):
    db = open_db(tmp_path / "c.db")
    put_entry(db)
    costtable.refine(db, "sig1", "gpu", 10.0, 15.0)
    assert costtable.get(db, "sig1", "gpu").provenance == "profiled"
    real = truth(Profile("mlp", 0.01, 0.001, 2_000_000))
    for i, p in enumerate([(1,), (2,), (4,)]):
        e = costtable.learn(db, "sig1", "gpu", Run(p, 16, predict_step(real, CLUSTER, p, 16), str(100 + i), "alice"),
                            CLUSTER)
    assert e.provenance == "learned from 3 runs" and e.correction == 1.0
    # alice's own jobs are predicted from her runs; everybody else's from the shared profile, which
    # one user's reports move by at most LEARN_BOUND (3x here: the all-reduce factor 6 is held at 3)
    prof = costtable.learned_profile(db, "sig1", "gpu", "alice")
    assert prof.comm_scale_intra == pytest.approx(6.0, rel=0.05) and prof.alpha == pytest.approx(0.013, rel=1e-3)
    shared = e.profile()
    assert shared.comm_scale_intra == pytest.approx(3.0) and shared.alpha == pytest.approx(0.013, rel=1e-3)
    assert costtable.learned_profile(db, "sig1", "gpu", "bob") == costtable.learned_profile(db, "sig1", "gpu")
    # no multi-node run yet: the inter link borrows the intra factor, so spanning nodes never looks cheaper
    assert prof.comm_scale_inter == prof.comm_scale_intra
    assert CostModel(CLUSTER).iter_time(prof, 48, 3, True) > CostModel(CLUSTER).iter_time(prof, 48, 3, False)
    assert e.profile(learned=False).alpha == 0.01  # the profiled fit is kept next to the learned one
    hist = costtable.events(db, "sig1", "gpu")
    assert [h["event"] for h in hist] == ["profiled", "run-time correction", "learned from 1 run",
                                          "learned from 2 runs", "learned from 3 runs"]
    assert "job 102 on 4" in hist[-1]["detail"] and "intra-node all-reduce" in hist[-1]["detail"]
    assert [r["placement"] for r in costtable.runs(db, "sig1", "gpu")] == ["1", "2", "4"]

    out = CliRunner().invoke(lyasched_main, ["profiles", "show", "mlp", "--db", str(tmp_path / "c.db")])
    assert out.exit_code == 0, out.output
    assert "learned from 3 runs" in out.output and "history" in out.output and "run-time correction" in out.output
    js = json.loads(CliRunner().invoke(lyasched_main, ["profiles", "show", "mlp", "--db", str(tmp_path / "c.db"),
                                                        "--json"]).output)
    assert js["provenance"] == "learned from 3 runs" and len(js["runs"]) == 3 and js["learned"]["why"]

    put_entry(db)  # profiled again: the new fit is the baseline, learning restarts
    e = costtable.get(db, "sig1", "gpu")
    assert e.provenance == "profiled" and e.learned is None and e.profile().comm_scale_intra == 1.0


def test_old_cost_table_gains_the_learning_columns(tmp_path):
    db = open_db(tmp_path / "old.db")
    cols = ", ".join(f"{c} TEXT" for c in costtable.COLUMNS if c not in ("learned_json", "learned_runs"))
    db.execute(f"CREATE TABLE profiles ({cols}, PRIMARY KEY (signature, device_type))")
    put_entry(db)
    assert costtable.learn(db, "sig1", "gpu", Run((1,), 16, 0.05), CLUSTER).learned_runs == 1


def test_startup_term_is_a_median_per_cluster_and_launcher(tmp_path):
    db = open_db(tmp_path / "s.db")
    assert startup.term(db) is None and startup.seconds(db) == 0.0
    for s in (30.0, 10.0, 12.0, 11.0, -5.0, float("nan")):
        startup.observe(db, "c1", "srun+torchrun", s)
    startup.observe(db, "c1", "mpirun", 99.0)
    t = startup.term(db)
    assert (t.cluster, t.launcher, t.samples, t.seconds) == ("c1", "srun+torchrun", 4, 11.5)
    assert startup.term(db, "mpirun").seconds == 99.0 and len(startup.terms(db)) == 2
    assert startup.steady(100.0, 130.0, 11.5) == (88.5, 118.5)
    assert startup.steady(10.0, 13.0, 50.0) == (1.0, pytest.approx(1.3))


def test_startup_term_keeps_counts_that_are_not_allowed_out():
    """The start-up term is added to the counts a job may run on and capped at its time limit; a
    count it may not run on (inf) stays inf, not the time limit (a 4-GPU-only job was started on
    1 GPU once the service had learned a start-up time: tests/test_serve_slurm.py)."""
    from lyasched.policy.state import WaitingJob

    inf = np.inf
    wj = WaitingJob("j", 0.0, 1.0, np.array([inf, inf, inf, 2.0]), np.array([inf, inf, inf, 500.0]), requested_gpus=4,
                    time_limit=300.0)
    got = startup.with_startup(wj, 4.5, 300.0)
    assert got.run_one_node.tolist() == [inf, inf, inf, 6.5]
    assert got.run_multi_node.tolist() == [inf, inf, inf, 300.0]


# ---------------------------------------------------------------- through the service


@pytest.mark.parametrize("seen_running", [True, False])
def test_service_learns_from_a_reporting_job_and_predicts_with_the_start_up_term(tmp_path, monkeypatch, seen_running):
    from test_service import FakeJob, FakeSlurm, StartAs, service, summary

    from lyasched import userfiles

    # the fake user 'alice' is this test's own uid: her report (written here) belongs to her
    monkeypatch.setattr(userfiles, "uid_of", lambda user: os.getuid() if user == "alice" else None)

    class Slurm(FakeSlurm):
        def run(self, args, *, idempotent=True, input=None):
            if list(args[:3]) == ["scontrol", "show", "job"]:
                self.calls.append(list(args))
                return f"JobId={args[-1]} JobName=train UserId=alice(1001) JobState=COMPLETED WorkDir={tmp_path}\n"
            return super().run(args, idempotent=idempotent, input=input)

    db = records.open_records(":memory:")
    first = FakeJob("41", summary("uid-00000041"))
    slurm = Slurm(jobs=[first])
    svc = service(db, slurm, StartAs({"41": ((0, 2),), "42": ((0, 2),)}))
    svc.run_slot()
    pred1 = records.get_job(db, "uid-00000041")["predicted"]
    start = 1_000_101.0
    first.state, first.reason, first.start, first.nodes, first.gpn = "RUNNING", "None", start, ("node1",), 2
    if seen_running:  # else it starts and ends between two slots: its start time comes with its end
        svc.clock_state["t"] += 2
        svc.run_slot()
    # the job reports: its first step began 25 s after Slurm started it; 200 steps of 0.3 s
    write_report(steps_path(str(tmp_path), "41"), 2, [[0.3] * 200, [0.31] * 200], first=start + 25.0,
                 local_bsz=32, monkeypatch=monkeypatch)
    first.state, first.end = "COMPLETED", start + 25 + 200 * 0.31
    svc.clock_state["t"] = first.end + 2
    svc.run_slot()
    e = costtable.get(db, "cnn:test", "gpu")
    assert e.provenance == "learned from 1 run" and e.observations == 0  # learned, not corrected
    assert e.model == "resnet"  # the reported model name replaces the signature placeholder
    assert startup.term(db).seconds == pytest.approx(25.0) and startup.term(db).cluster == "testc"
    second = FakeJob("42", summary("uid-00000042"), submit=svc.clock_state["t"])
    slurm.jobs.append(second)
    svc.clock_state["t"] += 2
    svc.run_slot()
    pred2 = records.get_job(db, "uid-00000042")["predicted"]
    observed1 = first.end - start
    assert abs(pred2 / observed1 - 1) < 0.05 < abs(pred1 / observed1 - 1)


def test_loao_protocol_never_reads_the_held_out_rows(tmp_path):
    """Changing every row of the held-out app that the protocol may not see changes no fitted
    parameter of it (only its errors): it cannot be tuned to its test set."""
    from lyasched.costmodel.calibration import AppData, leave_one_app_out, read_placements_csv

    data = Path(__file__).parent / "data"
    cifar = read_placements_csv(data / "placements_cifar10_subset.csv")
    imnet = read_placements_csv(data / "placements_imagenet_subset.csv")
    apps = [AppData("cifar10", "pollux", cifar), AppData("imagenet", "pollux", imnet)]
    base = leave_one_app_out(apps)
    fp = (2, 2, 2, 2)
    moved = [replace(r, step_time=r.step_time * 3) if r.gpus > 1 and r.placement != fp else r for r in cifar]
    other = leave_one_app_out([AppData("cifar10", "pollux", moved), apps[1]])
    assert base[0].fitted_on == other[0].fitted_on == "2222"
    assert base[0].v == other[0].v and base[0].shape == other[0].shape and base[0].profile == other[0].profile
    assert base[0].placements.median_abs_rel_err < 0.2 < other[0].placements.median_abs_rel_err
    # ... while the other app's fit (which trains on cifar10's rows) does change
    assert base[1].shape != other[1].shape


def test_cost_model_with_a_cluster_shape_uses_it_and_without_one_is_unchanged():
    from lyasched.costmodel.commshape import CommShape
    from lyasched.costmodel.cost import ring_allreduce_time

    p = Profile("m", alpha=0.01, beta=0.001, params=5_000_000)
    plain = CostModel(CLUSTER)
    assert plain.iter_time(p, 64, 4) == pytest.approx(p.step_time(16) + ring_allreduce_time(p.grad_bytes, 4, CLUSTER.intra))
    shape = CommShape(gamma=3.0, s_multi=0.05, sigma=0.02, inter_ratio=4.0, d_intra=0.1, d_inter=0.02, d_nodes=0.1)
    shaped = CostModel(replace(CLUSTER, shape=shape))
    v = ring_allreduce_time(p.grad_bytes, 2, CLUSTER.intra)
    assert shaped.iter_time(p, 64, 4) == pytest.approx(shape.step_time(p.step_time(16), v, (4,)))
    assert shaped.iter_time(p, 96, 6, True) == pytest.approx(shape.step_time(p.step_time(16), v, (3, 3)))
    assert shaped.iter_time(p, 64, 1) == p.step_time(64)
    # the all-reduce keeps growing with nodes under the shape, where the ring term saturates
    assert shaped.iter_time(p, 12 * 16, 12, True) > shaped.iter_time(p, 8 * 16, 8, True)


def test_lyastat_shows_the_start_up_term(tmp_path):
    from test_lyastat import fill_db, run as lyastat

    path = fill_db(tmp_path / "svc.db")
    r = lyastat(["--db", str(path), "--no-slurm", "201"])
    assert "start-up    0 s in predictions: none learned yet" in r.output
    db = open_db(path)
    for s in (20.0, 24.0, 22.0):
        startup.observe(db, "cl", "srun+torchrun", s)
    db.conn.close()
    r = lyastat(["--db", str(path), "--no-slurm", "201"])
    assert "start-up    22.0s included in predictions (srun+torchrun on cl, median of 3 job(s))" in r.output
    assert "start-up    22.0s" in lyastat(["--db", str(path), "--queue"]).output
    q = json.loads(lyastat(["--db", str(path), "--queue", "--json"]).output)
    assert q["startup"] == [{"cluster": "cl", "launcher": "srun+torchrun", "seconds": 22.0, "samples": 3}]
    j = json.loads(lyastat(["--db", str(path), "--no-slurm", "--json", "201"]).output)
    assert j["startup"]["seconds"] == 22.0


def test_lyasub_predictions_use_the_services_lookup(tmp_path):
    """lyasub prints what serve decides with: the learned start-up term (and profile) from the
    same `waiting_inputs` lookup, on top of the summary's iteration cost."""
    from lyasched.live.learning import submit_predictions, waiting_inputs
    from lyasched.summary import CostSummary, new_uid

    prof = Profile(model="m", alpha=0.01, beta=0.001, params=1_000_000)
    s = CostSummary.from_profile(prof, uid=new_uid(), sig="m:sig", global_batch=64, iterations=100, min_gpus=1,
                                 max_gpus=4)
    cost = CostModel(CLUSTER)
    path = tmp_path / "db.sqlite"
    bare = submit_predictions(path, s, "gpu", cost, [1, 2, 4])  # no database yet: no start-up term
    assert not path.exists()
    assert bare[1] == pytest.approx(cost.run_time(s.to_profile(), 64, 100, 1, False))
    db = open_db(path)
    for sec in (30.0, 34.0, 32.0):
        startup.observe(db, "c1", startup.DEFAULT_LAUNCHER, sec)
    got = submit_predictions(path, s, "gpu", cost, [1, 2, 4])
    _, startup_s = waiting_inputs(open_db(path), s, "gpu")
    assert startup_s == pytest.approx(32.0)
    assert all(got[g] == pytest.approx(bare[g] + 32.0) for g in (1, 2, 4))
    # the model's bounded run-time correction scales the iterations, not the start-up term
    costtable.put(db, {"signature": "m:sig", "device_type": "gpu", "model": "m", "alpha": 0.01, "beta": 0.001,
                       "params": 1_000_000, "source": "measured"})
    costtable.refine(db, "m:sig", "gpu", 10.0, 15.0)
    corr = costtable.get(db, "m:sig", "gpu").correction
    assert corr > 1.0
    got = submit_predictions(path, s, "gpu", cost, [1, 2, 4])
    assert all(got[g] == pytest.approx(corr * bare[g] + 32.0) for g in (1, 2, 4))


def test_job_finished_teaches_the_cost_table_only_from_a_completed_predicted_job(tmp_path):
    """lyasched.live.learning.job_finished (the service's cost-table teaching): the model's entry made from
    the cost summary the first time, the correction refined when the job wrote no step report."""
    from lyasched.live.learning import job_finished
    from lyasched.summary import CostSummary

    db = open_db(tmp_path / "t.db")
    records.ensure_schema(db)
    s = CostSummary(uid="uid-00000077", sig="cnn:teach", global_batch=64, iterations=1000, min_gpus=1, max_gpus=4,
                    alpha=0.05, beta=0.001, params=1_000_000)
    row = dict(uid=s.uid, slurm_id="77", sig=s.sig, summary=s.encode(), predicted=100.0, refined=None)
    records.upsert_job(db, s.uid, slurm_id="77", sig=s.sig, summary=row["summary"], predicted=100.0, state="finished")

    def no_workdir():
        raise AssertionError("asked for the work directory of a job that teaches nothing")

    job_finished(db, row, "FAILED", 150.0, "gpu", None, no_workdir)
    job_finished(db, {**row, "predicted": None}, "COMPLETED", 150.0, "gpu", None, no_workdir)
    assert costtable.get(db, s.sig, "gpu") is None
    job_finished(db, row, "COMPLETED", 150.0, "gpu", None, lambda: str(tmp_path / "nowhere"))
    entry = costtable.get(db, s.sig, "gpu")
    assert entry is not None and entry.observations == 1 and entry.correction > 1.0
    assert records.get_job(db, s.uid)["refined"] == 1


def test_refit_on_a_shaped_cluster_learns_the_models_own_allreduce_and_predicts_unseen_placements():
    """With a fitted cluster shape, a model whose all-reduce is 3x the ring's and 2x the cluster's
    inter-node ratio: its runs on one node (4 GPUs) and across two nodes (2x2) teach it both, and the
    policy's iter_time then predicts placements it never ran on (8 and 12 GPUs)."""
    from lyasched.costmodel.commshape import CommShape

    shape = CommShape(gamma=2.0, s_multi=0.05, sigma=0.02, inter_ratio=4.0, d_intra=0.1, d_inter=0.02, d_nodes=0.1)
    cl = replace(CLUSTER, shape=shape)
    base = Profile("m", alpha=0.01, beta=1e-4, params=10_000_000)
    truth_v = 3.0 * CostModel(replace(CLUSTER, shape=None)).comm_time(base, 2, False)
    own = replace(shape, inter_ratio=8.0)

    def measured(placement: tuple[int, ...], b: int) -> float:
        return own.step_time(base.step_time(b), truth_v, placement, base.grad_bytes)

    runs = [Run(p, b, measured(p, b)) for p in ((4,), (2, 2)) for b in (16, 64)]
    prof, why = refit(base, cl, runs)
    assert any("the cluster's shape as the prior" in w for w in why)
    assert prof.comm_scale_intra == pytest.approx(3.0, rel=0.05)
    for p in ((4, 4), (4, 4, 4), (2,)):
        got = predict_step(prof, cl, p, 32)
        assert got == pytest.approx(measured(p, 32), rel=0.03)
    # the ring-model refit (no shape) cannot: it learns factors for a different model of the step
    plain, _ = refit(base, CLUSTER, runs)
    assert abs(predict_step(plain, cl, (4, 4, 4), 32) / measured((4, 4, 4), 32) - 1) > 0.05
