"""The job record state machine (lyasched.live.step): pure folds of Slurm's view into a record,
and `apply`, which writes a batch of them in one transaction."""

from __future__ import annotations

import time

import sqlite_utils

from lyasched.live import step
from lyasched.slurm.types import AccountingRecord, SlurmJob
from lyasched.store import records

NOW = 2_000_000.0


def job(state: str = "PENDING", reason: str = "JobHeldUser", start: float | None = None, end: float | None = None,
        nodes: tuple[str, ...] = (), gpn: int = 1) -> SlurmJob:
    return SlurmJob(job_id="42", user="alice", unix_uid=1001, state=state, reason=reason, priority=0,
                    submit_time=NOW - 100, start_time=start, end_time=end, time_limit=600.0,
                    num_nodes=max(1, len(nodes)), gpus_per_node=gpn, nodes=nodes, partition="gpu",
                    comment="lyasched:v1;id=uid-00000042", name="train")


def record(state: str, **kw) -> dict:
    row = step.new_record("uid-00000042", job(), "cnn:x", "", NOW - 100)
    row.update(state=state, slurm_state="PENDING", last_seen=NOW - 30, **kw)
    return row


def test_a_held_job_that_starts_running_is_recorded_running_with_its_placement():
    st = step.step(record("released", released_at=NOW - 30), job("RUNNING", "None", start=NOW - 10,
                                                                 nodes=("n1", "n2"), gpn=2), NOW)
    assert st.update["state"] == "running" and st.update["started"] == NOW - 10 and st.update["gpus"] == 4
    assert st.update["placement"] == '[["n1", 2], ["n2", 2]]'
    assert not st.finished and st.learn is None


def test_a_finished_job_is_learned_from_only_when_it_ran():
    ran = step.step(record("running", started=NOW - 60), job("COMPLETED", "None", NOW - 60, NOW - 5), NOW)
    assert ran.finished and ran.learn == ("COMPLETED", 55.0) and ran.update["observed"] == 55.0
    cancelled = step.step(record("waiting"), job("CANCELLED", "None"), NOW)
    assert cancelled.finished and cancelled.learn == ("CANCELLED", None) and "observed" not in cancelled.update


def test_an_unchanged_held_job_changes_nothing():
    st = step.step(record("waiting", name="train"), job(), NOW)
    assert st.update == {}


def test_a_vanished_job_is_finished_from_accounting_when_it_has_the_times():
    st = step.vanished(record("running", started=NOW - 60), AccountingRecord("42", "COMPLETED", NOW - 60, NOW - 20, 40.0),
                       NOW, "not in sacct")
    assert st.update == dict(state="finished", slurm_state="COMPLETED", started=NOW - 60, ended=NOW - 20, observed=40.0,
                             reason="finished: COMPLETED (from sacct)")
    assert st.finished and st.learn == ("COMPLETED", 40.0) and not st.seen and not st.warnings


def test_a_vanished_job_without_accounting_is_recorded_unknown_with_one_warning():
    st = step.vanished(record("running"), None, NOW, "no accounting")
    assert st.update["state"] == "vanished" and st.update["slurm_state"] == "UNKNOWN_COMPLETED"
    assert st.update["reason"].startswith("final state unknown: purged by Slurm") and "(no accounting)" in st.update["reason"]
    assert st.learn is None and len(st.warnings) == 1 and "UNKNOWN_COMPLETED" in st.warnings[0]


def records_with_one_job(tmp_path, listed_at: float | None = NOW) -> sqlite_utils.Database:
    """Records holding uid-00000042, new at NOW, written by step.apply (listed_at as given)."""
    db = sqlite_utils.Database(tmp_path / "r.db")
    records.ensure_schema(db)
    new = step.step(step.new_record("uid-00000042", job(), "cnn:x", "", NOW), job(), NOW)
    new.new = True
    step.apply(db, [new], NOW, listed_at=listed_at)
    return db


def test_apply_writes_a_batch_in_one_transaction_and_keeps_last_seen_of_vanished_jobs(tmp_path):
    db = records_with_one_job(tmp_path, listed_at=None)
    assert records.get_job(db, "uid-00000042")["last_seen"] == NOW
    gone = step.vanished(records.get_job(db, "uid-00000042"), None, NOW + 60, "no accounting")
    step.apply(db, [gone], NOW + 60)
    row = records.get_job(db, "uid-00000042")
    assert row["state"] == "vanished" and row["last_seen"] == NOW  # last seen when Slurm last listed it


def test_apply_writes_no_unchanged_followed_record_and_listed_at_stands_for_its_last_seen(tmp_path):
    db = records_with_one_job(tmp_path)
    quiet = step.step(records.get_job(db, "uid-00000042"), job(), NOW + 30)
    assert quiet.update == {}
    step.apply(db, [quiet], NOW + 30, listed_at=NOW + 30)
    row = records.get_job(db, "uid-00000042")
    assert row["last_seen"] == NOW  # not written ...
    assert records.listed_at(db) == NOW + 30 and records.last_seen(row, NOW + 30) == NOW + 30  # ... but known
    # a record no longer followed keeps its own column
    assert records.last_seen({**row, "state": "finished"}, NOW + 30) == NOW


def test_a_vanished_record_keeps_when_it_was_last_listed_from_listed_at(tmp_path):
    db = records_with_one_job(tmp_path)
    step.apply(db, [step.step(records.get_job(db, "uid-00000042"), job(), NOW + 30)], NOW + 30, listed_at=NOW + 30)
    gone = step.vanished(records.get_job(db, "uid-00000042"), None, NOW + 60, "no accounting", records.listed_at(db))
    assert gone.update["last_seen"] == NOW + 30
    assert time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(NOW + 30)) in gone.update["reason"]
    step.apply(db, [gone], NOW + 60, listed_at=NOW + 60)
    row = records.get_job(db, "uid-00000042")
    assert row["state"] == "vanished" and row["last_seen"] == NOW + 30
    assert records.last_seen(row, records.listed_at(db)) == NOW + 30  # not followed: the column, exact


def test_by_uid_keeps_the_job_a_uid_names_and_reports_the_others():
    from dataclasses import replace

    from lyasched.summary import CostSummary

    def decode(comment: str):
        try:
            return CostSummary.decode(comment), ""
        except ValueError as e:
            return None, str(e)

    s = CostSummary(uid="uid-00000042", sig="cnn:x", global_batch=8, iterations=10, min_gpus=1, max_gpus=2,
                    alpha=0.01, beta=0.001, params=1000)
    old = replace(job("CANCELLED", "None"), job_id="40", comment=s.encode(), submit_time=NOW - 500)
    new = replace(job(), job_id="41", comment=s.encode(), submit_time=NOW - 100)
    copy = replace(job(), job_id="45", user="mallory", comment=s.encode(), submit_time=NOW - 50)
    bad = replace(job(), job_id="46", comment="lyasched:v1;garbage")
    got, dropped = step.by_uid([old, new, copy, bad], decode)
    assert got[s.uid][0] is new  # the unfinished resubmission; another user's copy never takes a uid over
    assert [(d.job_id, u, k.job_id) for d, u, k in dropped] == [("40", s.uid, "41"), ("45", s.uid, "41")]
    assert got["slurm-46"][1] is None and got["slurm-46"][2]
    assert set(step.by_uid([old, new, copy], decode, users=("mallory",))[0]) == {s.uid}


def test_the_service_own_transitions_are_pure_and_keep_a_moved_on_record():
    """A start releases a waiting record (or one not written yet) with the intent's placement; a
    record Slurm already moved on (running) keeps its state; holding again makes it waiting."""
    intent = {"gpus": 4, "nodes": '["n1", "n2"]', "placement": '[["n1", 2], ["n2", 2]]', "predicted": 60.0}
    upd = step.released(intent, "waiting", 100.0, "released: chosen")
    assert upd == {"gpus": 4, "nodes": '["n1", "n2"]', "placement": '[["n1", 2], ["n2", 2]]', "predicted": 60.0,
                   "released_at": 100.0, "state": "released", "reason": "released: chosen"}
    assert step.released(intent, None, 100.0, "")["state"] == "released"
    assert "reason" not in step.released(intent, None, 100.0, "")
    assert "state" not in step.released(intent, "running", 100.0, "")
    assert step.held_again("not started") == {"state": "waiting", "released_at": None, "reason": "waiting: not started"}


def test_a_moves_record_changes_are_the_state_machines_too():
    """The mover writes a suspension and a release after a resize through these, not by hand."""
    assert step.suspended("suspended: by the policy") == {
        "state": "waiting", "released_at": None, "reason": "suspended: by the policy", "refined": 1}
    move = {"to_gpus": 4, "to_placement": '[["node1", 2], ["node2", 2]]', "predicted": 812.5, "kind": "shrink",
            "reason": None}
    upd = step.released_after_move(move, '["node1", "node2"]', 1000.0)
    assert upd == {"state": "released", "released_at": 1000.0, "gpus": 4, "nodes": '["node1", "node2"]',
                   "placement": '[["node1", 2], ["node2", 2]]', "predicted": 812.5,
                   "reason": "released after a shrink: by the policy", "refined": 1}
