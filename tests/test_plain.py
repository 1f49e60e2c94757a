"""Plain jobs of managed partitions in the service, without a cluster (docs/managed.md): the tag
job_submit.lua writes, the estimate from history, a release that keeps the user's shape, the
fail-safe doing the same, and the estimator rebuilt from the records after a restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lyasched.live import plain
from lyasched.store import costtable, records
from lyasched.summary import CostSummary
from test_failsafe import fresh_lease, run_failsafe, T0
from test_service import FakeJob, FakeSlurm, StartAs, db, service  # noqa: F401 (db: a fixture)

# what job_submit.lua writes for `sbatch -p managed --gres=gpu:2` (tests/test_managed_slurm.py checks it does)
LUA_TAG = "lyasched:v1;id={uid};sig=plain;b=2;it=1;gmin=2;gmax=2;a=0;bt=0;p=1;bpp=4;m0=0;m1=0;src=e;pl=1"


def tag(uid: str) -> str:
    return LUA_TAG.format(uid=uid)


def test_the_plugins_tag_decodes_as_a_rigid_plain_job():
    s = CostSummary.decode(tag("m0123456789abcdef"))
    assert s.plain and (s.min_gpus, s.max_gpus) == (2, 2) and not s.checkpointable
    assert CostSummary.decode(s.encode()) == s
    with pytest.raises(ValueError, match="pl="):
        CostSummary.decode(tag("m0123456789abcdef").replace("pl=1", "pl=2"))


def test_a_plain_job_is_released_as_submitted_and_predicted_from_its_limit(db):
    slurm = FakeSlurm(jobs=[FakeJob("201", tag("m0000000000000201"), limit="30:00", gpn=2)])
    svc = service(db, slurm, StartAs({"201": ((0, 2),)}))
    svc.run_slot()
    assert slurm.actions("update") == []  # no resize: the user's nodes, tasks and GPUs stay as asked
    assert slurm.actions("release") == [["scontrol", "release", "201"]]
    row = records.get_job(db, "m0000000000000201")
    pred = json.loads(row["pred_one"])
    assert pred[0] is None and pred[1] == pytest.approx(1800.0)  # rigid at 2; no history: its limit
    assert row["state"] == "released"


def test_the_service_shows_the_policy_a_plain_job_past_its_estimate_as_the_history_says(db):
    """Live side of the outlived rule (whatif --managed replays the same): predicted from its 30 min
    limit, the job runs past it (no history: the limit is all it knows); the policy then sees it
    ending later than now, never in the past."""
    job = FakeJob("211", tag("m0000000000000211"), limit="30:00", gpn=2)
    other = FakeJob("212", tag("m0000000000000212"), limit="30:00", gpn=2)  # waits: the policy is asked each slot
    slurm = FakeSlurm(jobs=[job, other])
    policy = StartAs({"211": ((0, 2),)})
    svc = service(db, slurm, policy)
    svc.run_slot()
    now = svc.clock_state["t"]
    job.state, job.reason, job.start, job.nodes = "RUNNING", "None", now - 1700.0, ("node1",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    [r] = policy.states[-1].running
    assert r.expected_end == pytest.approx(job.start + 1800.0)  # not reached yet: its estimate
    job.start = svc.clock_state["t"] - 2500.0  # past its estimate (and its limit, as a job's end can lag)
    svc.clock_state["t"] += 2
    svc.run_slot()
    [r] = policy.states[-1].running
    assert r.expected_end > svc.clock_state["t"]  # still running: never planned as already ended


def finished_row(uid: str, user: str, name: str, observed: float, end: float) -> dict:
    return {"uid": uid, "slurm_id": uid[-3:], "user": user, "name": name, "summary": tag(uid), "state": "finished",
            "slurm_state": "COMPLETED", "submit_time": end - observed - 5, "started": end - observed, "ended": end,
            "observed": observed, "time_limit": 1800.0}


def test_the_estimate_comes_from_the_users_similar_jobs_that_ended_before():
    jobs = plain.PlainJobs([finished_row("m0000000000000101", "alice", "sweep", 100.0, T0 - 500),
                            finished_row("m0000000000000102", "alice", "sweep", 300.0, T0 - 100),
                            finished_row("m0000000000000103", "bob", "other", 5.0, T0 - 50)])
    job = FakeJob("301", tag("m0000000000000301"), name="sweep", limit="30:00", gpn=2)
    from lyasched.slurm import query as q
    sj = q.parse_squeue(job.line() + "\n")[0]
    s = CostSummary.decode(sj.comment)
    est = jobs.estimate(sj, s, T0)
    assert est.mean_s == pytest.approx(200.0) and est.source.startswith("user+name") and est.n == 2
    assert jobs.estimate(sj, s, T0 - 200).mean_s == pytest.approx(100.0)  # only what had ended by then
    assert jobs.estimate(sj, s, T0 - 1000).source in ("limit", "default")


def test_a_running_plain_job_past_its_estimate_is_shown_what_similar_jobs_ran_never_past_its_limit():
    jobs = plain.PlainJobs([finished_row("m0000000000000101", "alice", "sweep", 100.0, T0 - 2000),
                            finished_row("m0000000000000102", "alice", "sweep", 900.0, T0 - 1500),
                            finished_row("m0000000000000103", "alice", "sweep", 100.0, T0 - 100)])
    from lyasched.slurm import query as q
    start = T0 - 1400.0
    job = FakeJob("301", tag("m0000000000000301"), state="RUNNING", reason="None", start=start, name="sweep",
                  limit="30:00", gpn=2)
    sj = q.parse_squeue(job.line() + "\n")[0]
    s = CostSummary.decode(sj.comment)
    est = jobs.estimate(sj, s, start)
    assert est.mean_s == pytest.approx(500.0)  # (100 + 900) / 2
    assert jobs.expected_run(sj, s, est.mean_s, start + 300.0) == est.mean_s  # not reached yet
    assert jobs.expected_run(sj, s, est.mean_s, start + 600.0) == pytest.approx(900.0)  # the one that ran > 600 s
    # past every similar run: twice its run so far, capped at its 30 min limit, never ending before now
    assert jobs.expected_run(sj, s, 900.0, start + 1000.0) == pytest.approx(1800.0)
    assert jobs.expected_run(sj, s, 1800.0, start + 1800.0) > 1800.0


def test_the_service_rebuilds_the_estimates_from_its_records(db):
    for r in (finished_row("m0000000000000111", "alice", "train", 60.0, T0 - 300),
              finished_row("m0000000000000112", "alice", "train", 80.0, T0 - 200)):
        records.upsert_job(db, r["uid"], **{k: v for k, v in r.items() if k != "uid"})
    slurm = FakeSlurm(jobs=[FakeJob("401", tag("m0000000000000401"), name="train", limit="30:00")])
    svc = service(db, slurm, StartAs({}))
    svc.run_slot()
    row = records.get_job(db, "m0000000000000401")
    assert json.loads(row["pred_one"])[1] == pytest.approx(70.0)


def test_a_finished_plain_job_teaches_the_next_and_not_the_cost_table(db):
    slurm = FakeSlurm(jobs=[FakeJob("501", tag("m0000000000000501"), name="eval", limit="30:00")])
    svc = service(db, slurm, StartAs({"501": ((0, 2),)}))
    svc.run_slot()
    svc.clock_state["t"] += 40  # type: ignore[attr-defined]
    slurm.jobs[0].state, slurm.jobs[0].reason = "RUNNING", "None"
    slurm.jobs[0].start, slurm.jobs[0].nodes = svc.clock_state["t"] - 38, ("node1",)  # type: ignore[attr-defined]
    svc.run_slot()
    svc.clock_state["t"] += 50  # type: ignore[attr-defined]
    slurm.jobs[0].state, slurm.jobs[0].end = "COMPLETED", svc.clock_state["t"] - 2  # type: ignore[attr-defined]
    slurm.jobs.append(FakeJob("502", tag("m0000000000000502"), name="eval", limit="30:00",
                              submit=svc.clock_state["t"] - 1))  # type: ignore[attr-defined]
    svc.run_slot()
    assert records.get_job(db, "m0000000000000501")["state"] == "finished"
    assert json.loads(records.get_job(db, "m0000000000000502")["pred_one"])[1] == pytest.approx(86.0)  # ran 2 -> 88
    assert costtable.TABLE not in db.table_names() or not list(db[costtable.TABLE].rows_where("signature = ?", ["plain"]))


def test_the_failsafe_releases_a_plain_job_as_submitted(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 61, epoch=1)
    slurm = FakeSlurm(jobs=[FakeJob("601", tag("m0000000000000601"), gpn=2)])
    res = run_failsafe(slurm, path, T0)
    assert [e["job_id"] for e in res.released] == ["601"]
    assert [u for u in slurm.actions("update") if any("TresPerNode" in a for a in u)] == []
    assert slurm.actions("release") == [["scontrol", "release", "601"]]
    assert (res.released[0]["nodes"], res.released[0]["per_node"]) == (1, 2)


class AccountingSlurm:
    """A Slurm with accounting whose sacct answers with a recorded history."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.asked: list[tuple] = []

    def config(self):
        return type("Config", (), {"accounting": True})()

    def history(self, since, until, partition, fields):
        self.asked.append((since, tuple(fields)))
        return self.text


def test_the_sites_accounting_teaches_the_estimates_without_counting_a_recorded_job_twice(db):
    text = (Path(__file__).parent / "data" / "sacct_parsable_elapsed.txt").read_text()
    slurm = AccountingSlurm(text)
    got = plain.accounting(slurm, set())
    assert got and all(f.request.gpus > 0 for f in got) and slurm.asked[0][0] == plain.HISTORY_SINCE
    assert "JobName" in slurm.asked[0][1]
    first = got[0]
    assert any(f.request.name == "train resnet" and f.request.user == "alice" for f in got)
    assert len(plain.accounting(slurm, {"2001"})) == len(got) - 1  # already in the records: not again
    assert first.elapsed > 0
    broken = AccountingSlurm("JobID|User\nnot a table")
    assert plain.accounting(broken, set()) == []  # a history that does not parse: records only, logged


def test_the_script_key_the_plugin_writes_is_the_first_key_of_the_estimate():
    assert plain.script_of("plain:5e9b9148459f10ed") == "5e9b9148459f10ed"
    assert plain.script_of("plain") == "" and plain.script_of("resnet:plain") == ""
    s = CostSummary.decode(tag("m0000000000000701").replace("sig=plain;", "sig=plain:5e9b9148459f10ed;"))
    row = {**finished_row("m0000000000000701", "alice", "a-name", 40.0, T0 - 10), "summary": s.encode()}
    jobs = plain.PlainJobs([row])
    job = FakeJob("702", s.encode().replace("m0000000000000701", "m0000000000000702"), name="other-name",
                  limit="30:00", gpn=2)
    from lyasched.slurm import query as q
    sj = q.parse_squeue(job.line() + "\n")[0]
    est = jobs.estimate(sj, CostSummary.decode(sj.comment), T0)
    assert est.source == "user+script+gpus" and est.mean_s == pytest.approx(40.0)


def test_the_sites_accounting_is_read_once_when_the_first_plain_job_is_estimated():
    calls = []
    older = plain.Finished(plain.request_of("alice", "sweep", 2, 1800.0), submit=T0 - 900, start=T0 - 890,
                           elapsed=500.0)

    def history():
        calls.append(1)
        return [older]

    jobs = plain.PlainJobs([finished_row("m0000000000000801", "alice", "sweep", 100.0, T0 - 100)], history)
    assert calls == []  # a service without plain jobs never reads sacct
    from lyasched.slurm import query as q
    sj = q.parse_squeue(FakeJob("802", tag("m0000000000000802"), name="sweep", limit="30:00", gpn=2).line() + "\n")[0]
    s = CostSummary.decode(sj.comment)
    assert jobs.estimate(sj, s, T0).mean_s == pytest.approx(300.0)  # the records' 100 s and sacct's 500 s
    jobs.estimate(sj, s, T0)
    assert calls == [1]
