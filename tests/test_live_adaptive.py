"""The service's side of an adaptive-batch job (lyasched.live.adaptive), against the fake Slurm
runner of test_service: the batch handed at the start (the Comment's cb, before the resize), phi
and progress read from the running job's report into the records, fed to the policy's rows, shown
by lyastat (text and --json); a fixed-batch job is untouched."""

from __future__ import annotations

from dataclasses import replace

import getpass
import json

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.cli.lyastat import main as lyastat
from lyasched.costmodel.cost import CostModel
from lyasched.costmodel.goodput import Adaptive, NoiseScale, best_batch
from lyasched.costmodel.jobspec import Job
from lyasched.live import adaptive
from lyasched.policy.movable import MovableJob
from lyasched.store import adaptive as adaptive_store
from lyasched.store import records
from lyasched.slurm import SlurmError
from lyasched.summary import CostSummary
from test_service import FakeJob, FakeSlurm, StartAs, service, summary

ME = getpass.getuser()


def adaptive_summary(uid: str, b: int = 64, mb: int = 1024, it: int = 200) -> str:
    return CostSummary(uid=uid, sig="cnn:test", global_batch=b, iterations=it, min_gpus=1, max_gpus=8, alpha=0.01,
                       beta=0.002, params=1_000_000, max_batch=mb, lr_rule="adascale").encode()


class WorkdirSlurm(FakeSlurm):
    """FakeSlurm that also answers ``scontrol show job`` (the job's working directory)."""

    workdir: str = ""

    def run(self, args, *, idempotent=True, input=None):
        args = list(args)
        if args[:3] == ["scontrol", "show", "job"]:
            self.calls.append(args)
            return f"JobId={args[-1]} JobName=train UserId={ME}(1001) JobState=RUNNING WorkDir={self.workdir}\n"
        return super().run(args, idempotent=idempotent, input=input)


@pytest.fixture
def db():
    return records.open_records(":memory:")


def comments(slurm) -> list[list[str]]:
    """The Comment updates: how the chosen batch is handed (key cb of the job's cost summary)."""
    return [c for c in slurm.actions("update") if any(a.startswith("Comment=") for a in c)]


def handed(comment: str, batch: int) -> str:
    """The Comment the service writes: the job's summary with cb=batch."""
    return "Comment=" + replace(CostSummary.decode(comment), chosen_batch=batch).encode()


def test_parse_status_is_bounded_and_typed():
    good = {"batch": 128, "local": 32, "accum": 1, "m0": 64, "phi": 512.5, "eff": 0.8, "base": 12.5, "lr": 1.6,
            "step": 40, "time": 1e9}
    got = adaptive.parse_status(json.dumps(good).encode())
    assert got is not None and got["batch"] == 128 and got["phi"] == 512.5
    assert adaptive.parse_status(json.dumps({**good, "phi": None}).encode())["phi"] is None
    for bad in (b"", b"[]", b"{", json.dumps({**good, "batch": 0}).encode(), json.dumps({**good, "batch": -4}).encode(),
                json.dumps({k: v for k, v in good.items() if k != "m0"}).encode(), "\udcff".encode("utf-8", "surrogatepass")):
        assert adaptive.parse_status(bad) is None
    assert adaptive.parse_status(json.dumps({**good, "phi": "inf"}).encode())["phi"] is None  # not finite: dropped


def test_start_hands_the_batch_then_reads_phi_and_lyastat_shows_it(tmp_path):
    db_path = tmp_path / "svc.db"
    db = records.open_records(db_path)
    job = FakeJob("301", adaptive_summary("uid-00000301"), user=ME)
    fixed = FakeJob("302", summary("uid-00000302"), user=ME)
    slurm = WorkdirSlurm(jobs=[job, fixed])
    slurm.workdir = str(tmp_path)
    svc = service(db, slurm, StartAs({"301": ((0, 4),), "302": ((1, 2),)}))
    svc.run_slot()
    [ac] = comments(slurm)
    cluster = svc.inputs._last_cluster
    j = Job("301", CostSummary.decode(job.comment).to_profile(), 64, 200, min_gpus=1, max_gpus=8,
            adaptive=Adaptive(1024, NoiseScale.constant(adaptive.PRIOR_PHI)))
    expect = best_batch(CostModel(cluster), j, 4, False, 0.0)
    assert ac == ["scontrol", "update", "JobId=301", handed(job.comment, expect)]
    assert expect == 64  # no phi yet: its base batch is its best
    # handed before the resize, and only to the adaptive job
    resize = next(c for c in slurm.actions("update") if c[2] == "JobId=301" and c is not ac)
    assert slurm.calls.index(ac) < slurm.calls.index(resize)
    assert not any(c[2] == "JobId=302" for c in comments(slurm))
    assert adaptive_store.get(db, "uid-00000301")["chosen"] == 64
    # running: the job reports phi and a grown batch in its sidecar
    job.state, job.reason, job.start, job.nodes, job.gpn = "RUNNING", "None", 1_000_101.0, ("node1",), 4
    (tmp_path / ".lyasched").mkdir()
    (tmp_path / ".lyasched" / "steps-301.adaptive.json").write_text(json.dumps(
        {"step": 30, "time": 1_000_150.0, "batch": 256, "local": 64, "accum": 1, "m0": 64, "phi": 900.0,
         "eff": (900 + 64) / (900 + 256), "base": 80.0, "lr": 3.3, "rule": "adascale"}))
    svc.clock_state["t"] += 2
    svc.run_slot()
    row = adaptive_store.get(db, "uid-00000301")
    assert (row["batch"], row["phi"], row["base"], row["chosen"]) == (256, 900.0, 80.0, 64)
    db.conn.close()
    r = CliRunner().invoke(lyastat, ["--db", str(db_path), "--no-slurm", "301"], catch_exceptions=False)
    assert "batch       adaptive 64..1024 (adascale learning rate): now 256, phi 900" in r.output
    assert "statistical efficiency 0.834" in r.output and "80.0 of 200 base steps" in r.output
    out = json.loads(CliRunner().invoke(lyastat, ["--db", str(db_path), "--no-slurm", "--json", "301"]).output)
    assert out["adaptive"]["phi"] == 900.0 and out["adaptive"]["batch"] == 256 and out["adaptive"]["chosen"] == 64
    plain = json.loads(CliRunner().invoke(lyastat, ["--db", str(db_path), "--no-slurm", "--json", "302"]).output)
    assert plain["adaptive"] is None


def test_policy_rows_follow_the_reported_phi_and_progress(db):
    """Two identical adaptive jobs waiting; one has reported (as before a suspension) phi 5000 and
    half its base steps: its rows are shorter at every GPU count, and its best batch larger."""
    a, b = FakeJob("401", adaptive_summary("uid-00000401")), FakeJob("402", adaptive_summary("uid-00000402"))
    slurm = FakeSlurm(jobs=[a, b])
    policy = StartAs({})
    svc = service(db, slurm, policy)
    adaptive_store.record_status(db, "uid-00000401", "401", {"batch": 512, "m0": 64, "phi": 5000.0, "base": 100.0}, 0.0)
    svc.run_slot()
    rows = {w.job_id: w for w in policy.states[-1].waiting}
    assert rows["401"].adaptive and rows["402"].adaptive  # the one builder marks them (WaitingJob.adaptive)
    one_a, one_b = rows["401"].run_one_node, rows["402"].run_one_node
    ok = np.isfinite(one_b)
    assert ok.any() and np.all(one_a[ok] < one_b[ok])
    cost = CostModel(svc.inputs._last_cluster)
    j = lambda phi: Job("x", CostSummary.decode(a.comment).to_profile(), 64, 200, max_gpus=8,  # noqa: E731
                        adaptive=Adaptive(1024, NoiseScale.constant(phi)))
    assert best_batch(cost, j(5000.0), 4, False, 0.5) > best_batch(cost, j(adaptive.PRIOR_PHI), 4, False, 0.0) == 64


def test_fixed_batch_jobs_rows_are_unchanged_by_the_feature(db):
    """A fixed-batch job's rows as before (the adaptive path is not taken: no record read, no key)."""
    slurm = FakeSlurm(jobs=[FakeJob("501", summary("uid-00000501"))])
    policy = StartAs({})
    svc = service(db, slurm, policy)
    svc.run_slot()
    assert "adaptive" not in db.table_names()


def test_a_move_hands_the_batch_chosen_for_the_new_gpus_before_its_resize(db, tmp_path):
    """An adaptive checkpointable job shrunk 4 -> 2 GPUs: the batch best for 2 GPUs at its reported
    phi and progress goes into its cost summary (Comment, cb) after the requeue, before the resize."""
    from test_mover import MoveAs, MovingSlurm, make, save_marker

    comment = CostSummary(uid="uid-00000001", sig="cnn:test", global_batch=64, iterations=200, min_gpus=1,
                          max_gpus=8, alpha=0.01, beta=0.002, params=1_000_000, checkpointable=True, max_batch=1024,
                          lr_rule="sqrt").encode()
    job = FakeJob("101", comment, state="RUNNING", reason="None", start=1_000_100.0 - 1000, nodes=("node1",), gpn=4)
    slurm = MovingSlurm(jobs=[job])
    slurm.nodes[0] = ("node1", 4, 4, "ALLOCATED")
    adaptive_store.record_status(db, "uid-00000001", "101", {"batch": 256, "m0": 64, "phi": 5000.0, "base": 50.0}, 0.0)
    policy = MoveAs({"101": ((0, 2),)})
    svc = make(db, slurm, policy, tmp_path)
    svc.run_slot()
    [seen] = policy.states[0].running
    assert isinstance(seen, MovableJob) and seen.adaptive  # marked as the simulator marks it (sim.moves)
    chosen = adaptive_store.get(db, "uid-00000001")["chosen"]
    j = Job("101", CostSummary.decode(comment).to_profile(), 64, 200, max_gpus=8,
            adaptive=Adaptive(1024, NoiseScale.constant(5000.0)))
    assert chosen == best_batch(CostModel(svc.inputs._last_cluster), j, 2, False, 0.25) > 64
    assert comments(slurm) == []  # nothing handed until the job is requeued
    save_marker(tmp_path, step=41)
    svc.clock_state["t"] += 2
    svc.run_slot()
    sent = slurm.sent()
    ac = ["scontrol", "update", "JobId=101", handed(comment, chosen)]
    assert ac in sent
    resize = next(c for c in sent if any(a.startswith("NumNodes=") for a in c))
    assert sent.index(["scontrol", "requeuehold", "101"]) < sent.index(ac) < sent.index(resize)


def test_a_refused_comment_update_still_starts_the_job_at_its_base_batch(db):
    """Slurm refuses the Comment update: the job is resized and released all the same (it starts at
    its base batch and re-tunes itself)."""

    class Refusing(FakeSlurm):
        def run(self, args, *, idempotent=True, input=None):
            if any(str(a).startswith("Comment=") for a in args):
                self.calls.append(list(args))
                raise SlurmError(list(args), "Access/permission denied for job 601")
            return super().run(args, idempotent=idempotent, input=input)

    slurm = Refusing(jobs=[FakeJob("601", adaptive_summary("uid-00000601"))])
    svc = service(db, slurm, StartAs({"601": ((0, 2),)}))
    svc.run_slot()
    assert len(comments(slurm)) == 1 and slurm.actions("release") == [["scontrol", "release", "601"]]
    assert records.get_job(db, "uid-00000601")["state"] == "released"
    assert adaptive_store.get(db, "uid-00000601") is None  # nothing handed, nothing recorded as chosen


@pytest.mark.parametrize("policy", ["lyapunov", "elastic", "pollux", "hesrpt"])
def test_the_shipped_policies_start_an_adaptive_job_at_its_best_batch(db, policy):
    """With a real policy: the batch handed is the best for the GPUs it chose at the reported phi
    and progress (the policy's Decision.batch, or goodput.best_batch: the same number)."""
    from lyasched.policy import make_policy

    slurm = FakeSlurm(jobs=[FakeJob("701", adaptive_summary("uid-00000701", mb=4096))])
    adaptive_store.record_status(db, "uid-00000701", "701", {"batch": 512, "m0": 64, "phi": 20000.0, "base": 20.0}, 0.0)
    svc = service(db, slurm, make_policy(policy))
    svc.run_slot()
    [ac] = comments(slurm)
    (dec,) = [d for d in records.decisions_for(db, "uid-00000701") if d["action"] == "start"]
    nodes = json.loads(dec["nodes"])
    j = Job("701", CostSummary.decode(slurm.jobs[0].comment).to_profile(), 64, 200, max_gpus=8,
            adaptive=Adaptive(4096, NoiseScale.constant(20000.0)))
    best = best_batch(CostModel(svc.inputs._last_cluster), j, dec["gpus"], len(nodes) > 1, 0.1)
    assert ac[-1] == handed(slurm.jobs[0].comment, best) and best > 64
