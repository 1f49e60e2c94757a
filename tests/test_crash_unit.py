"""Crash consistency of the slot logic with a fake Slurm runner (no cluster): a slot cut short at
each named point, then a fresh `Service` on the same database, as after a SIGKILL and a restart;
release failures; the outage log lines; jobs that vanish (MinJobAge) and reappear."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from lyasched.config import Config
from lyasched.policy import make_policy
from lyasched.live.crash import CRASH_POINTS, CrashPoints
from lyasched.service import Service
from lyasched.slurm import SlurmError
from lyasched.store import records
from test_service import FakeJob, FakeSlurm, StartAs, summary


class Killed(BaseException):
    """Stands in for SIGKILL inside one process: not caught by the slot, open transactions roll back."""


class KillAt:
    def __init__(self, point: str) -> None:
        self.point = point

    def reach(self, name: str) -> None:
        if name == self.point:
            raise Killed(name)


class LossySlurm(FakeSlurm):
    """`scontrol release` of the listed jobs takes effect but its answer is lost (exit 1)."""

    lose: tuple[str, ...] = ()

    def run(self, args, *, idempotent=True, input=None):
        out = super().run(args, idempotent=idempotent, input=input)
        if list(args[:2]) == ["scontrol", "release"] and args[2] in self.lose:
            raise SlurmError(list(args), "Socket timed out on send/recv operation")
        return out


def make(db, slurm, plan, point: str | None = None, now: float = 1_000_100.0) -> Service:
    svc = Service(Config(slot_seconds=2, release_grace=60), db, slurm=slurm, policy=StartAs(plan), clock=lambda: now)
    if point:
        svc.crash = KillAt(point)  # type: ignore[assignment]
    return svc


@pytest.fixture
def db(tmp_path):
    return records.open_records(tmp_path / "svc.db")


def starts(db) -> list[dict]:
    return list(db.query("select * from decisions where action = 'start'"))


@pytest.mark.parametrize("point", ["before_update", "after_update"])
def test_killed_before_release_the_job_stays_held_and_is_decided_again(db, point):
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))])
    with pytest.raises(Killed):
        make(db, slurm, {"101": ((0, 2),)}, point).run_slot()
    assert len(slurm.actions("release")) == 0
    (it,) = records.open_intents(db)
    assert it["slurm_id"] == "101" and it["step"] == ("updated" if point == "after_update" else "decided")

    # Restart: Slurm still shows the job held, so the old start is aborted and the policy decides again.
    rep = make(db, slurm, {"101": ((1, 2),)}).run_slot()
    assert not records.open_intents(db)
    (ab,) = db.query("select * from intents where state = 'aborted'")
    assert "still held" in ab["resolution"]
    assert [s["slurm_id"] for s in rep.started] == ["101"]
    assert slurm.actions("release") == [["scontrol", "release", "101"]]  # released once, with the new decision
    assert slurm.actions("update")[-1][-1] == "ReqNodeList=node2"  # the new update rewrites the leftover one
    row = records.get_job(db, "uid-00000101")
    assert row["state"] == "released" and json.loads(row["nodes"]) == ["node2"]
    assert len(starts(db)) == 1 and records.consistency_problems(db) == []


def test_killed_after_release_is_recovered_without_a_second_release(db):
    slurm = FakeSlurm(jobs=[FakeJob("102", summary("uid-00000102"))])
    with pytest.raises(Killed):
        make(db, slurm, {"102": ((2, 1),)}, "after_release").run_slot()
    assert records.get_job(db, "uid-00000102")["state"] == "waiting"  # the kill came before the record
    assert len(records.open_intents(db)) == 1

    rep = make(db, slurm, {"102": ((0, 1),)}, now=1_000_105.0).run_slot()
    assert rep.started == [] and len(slurm.actions("release")) == 1 and len(slurm.actions("update")) == 1
    row = records.get_job(db, "uid-00000102")
    assert row["state"] == "released" and json.loads(row["nodes"]) == ["node3"] and row["released_at"] == 1_000_100.0
    (dec,) = starts(db)
    assert "recovered" in dec["reason"] and dec["slot"] == rep.slot_id
    assert records.consistency_problems(db) == []
    # and the policy saw it as running on its GPUs, not as waiting
    assert rep.waiting == 0 and rep.running == 1 and rep.free["node3"] == 3


@pytest.mark.parametrize("point", ["after_record", "before_slot_record", "slot_start", "after_read"])
def test_killed_elsewhere_leaves_nothing_open(db, point):
    slurm = FakeSlurm(jobs=[FakeJob("103", summary("uid-00000103"))])
    with pytest.raises(Killed):
        make(db, slurm, {"103": ((0, 1),)}, point).run_slot()
    assert not records.open_intents(db)
    make(db, slurm, {"103": ((0, 1),)}).run_slot()
    assert len(slurm.actions("release")) == 1 and len(starts(db)) == 1
    assert records.get_job(db, "uid-00000103")["state"] == "released"
    assert records.consistency_problems(db) == []


def test_every_named_point_is_reached_in_a_starting_slot(db):
    hit: list[str] = []

    class Spy:
        def reach(self, name):
            hit.append(name)

    svc = make(db, FakeSlurm(jobs=[FakeJob("104", summary("uid-00000104"))]), {"104": ((0, 1),)})
    svc.crash = Spy()  # type: ignore[assignment]
    svc.run_slot()
    assert hit == ["slot_start", "after_read", "before_update", "after_update", "after_release", "after_record",
                   "before_slot_record"]
    assert set(hit) == {p for p in CRASH_POINTS if not p.startswith("move_")}  # a move's: tests/test_mover.py


def test_release_answer_lost_is_reconciled_next_slot(db):
    slurm = LossySlurm(jobs=[FakeJob("105", summary("uid-00000105"))])
    slurm.lose = ("105",)
    rep = make(db, slurm, {"105": ((0, 1),)}).run_slot()
    assert rep.started == []
    (failed,) = db.query("select * from decisions where action = 'failed'")
    assert "reconciled next slot" in failed["reason"]
    assert len(records.open_intents(db)) == 1  # unknown whether it was released: Slurm will say

    slurm.lose = ()
    make(db, slurm, {"105": ((0, 1),)}).run_slot()
    assert len(slurm.actions("release")) == 1  # the fake applied it; never released again
    assert records.get_job(db, "uid-00000105")["state"] == "released"
    assert records.consistency_problems(db) == []


def test_release_failed_for_real_is_decided_again(db):
    slurm = FakeSlurm(jobs=[FakeJob("106", summary("uid-00000106"))], fail_on="106")  # `scontrol release 106` fails
    make(db, slurm, {"106": ((0, 1),)}).run_slot()
    assert len(records.open_intents(db)) == 1 and records.get_job(db, "uid-00000106")["state"] == "waiting"
    slurm.fail_on = ""
    make(db, slurm, {"106": ((0, 1),)}).run_slot()  # still held in Slurm: aborted, decided again, released
    assert [c[2] for c in slurm.actions("release")] == ["106", "106"]  # the failed try, then the one that worked
    states = [r["state"] for r in db.query("select state from intents order by id")]
    assert states == ["aborted", "applied"] and len(starts(db)) == 1
    assert records.get_job(db, "uid-00000106")["state"] == "released"
    assert records.consistency_problems(db) == []


def test_outage_logs_one_line_each_way(db, caplog):
    slurm = FakeSlurm(jobs=[FakeJob("107", summary("uid-00000107"))], fail_on="squeue")
    svc = make(db, slurm, {})
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            svc.run_slot()
            logging.getLogger("lyasched.slurm").warning("squeue failed (x), retry 1/2")  # what SlurmCLI says
        slurm.fail_on = ""
        rep = svc.run_slot()
        svc.run_slot()
    text = caplog.text
    assert text.count("Slurm unavailable") == 1 and text.count("Slurm available again") == 1
    assert text.count("retry 1/2") == 0  # retries are not logged once the outage is
    assert "(5 failed slot(s))" in text and not rep.error
    assert db.execute("select count(*) from slots where error != ''").fetchone()[0] == 5
    caplog.clear()
    with caplog.at_level(logging.INFO):
        logging.getLogger("lyasched.slurm").warning("squeue failed (y), retry 1/2")
    assert "retry 1/2" in caplog.text  # back to normal after recovery


def test_vanished_job_is_recorded_unknown_then_followed_if_listed_again(db):
    job = FakeJob("108", summary("uid-00000108"), state="RUNNING", reason="None", start=1_000_090.0, nodes=("node1",))
    slurm = FakeSlurm(jobs=[job])
    make(db, slurm, {}).run_slot()
    assert records.get_job(db, "uid-00000108")["state"] == "running"
    slurm.jobs = []  # finished while the service was down, then purged (MinJobAge)
    rep = make(db, slurm, {}, now=1_010_000.0).run_slot()
    row = records.get_job(db, "uid-00000108")
    assert row["state"] == "vanished" and row["slurm_state"] == "UNKNOWN_COMPLETED"
    assert "last seen RUNNING" in row["reason"] and "no accounting" in row["reason"] and "108" in rep.finished
    # Listed again (it was only missing from one answer): followed to its real end.
    job.state, job.end = "COMPLETED", 1_000_150.0
    slurm.jobs = [job]
    make(db, slurm, {}, now=1_010_002.0).run_slot()
    row = records.get_job(db, "uid-00000108")
    assert row["state"] == "finished" and row["slurm_state"] == "COMPLETED" and row["observed"] == pytest.approx(60)


def test_a_vanished_held_job_listed_again_is_decided_again(db):
    job = FakeJob("109", summary("uid-00000109"))
    slurm = FakeSlurm(jobs=[job])
    make(db, slurm, {}).run_slot()
    slurm.jobs = []
    make(db, slurm, {}).run_slot()
    assert records.get_job(db, "uid-00000109")["state"] == "vanished"
    slurm.jobs = [job]
    rep = make(db, slurm, {"109": ((0, 1),)}).run_slot()
    assert [s["slurm_id"] for s in rep.started] == ["109"]  # not held forever


def test_a_vanished_held_job_listed_again_is_waiting_in_the_records(db):
    """Listed again and not started this slot: the stored record says waiting again (it stayed
    vanished: the update was judged against the already-moved row)."""
    job = FakeJob("110", summary("uid-00000110"))
    slurm = FakeSlurm(jobs=[job])
    make(db, slurm, {}).run_slot()
    slurm.jobs = []
    make(db, slurm, {}).run_slot()
    assert records.get_job(db, "uid-00000110")["state"] == "vanished"
    slurm.jobs = [job]
    make(db, slurm, {}).run_slot()
    row = records.get_job(db, "uid-00000110")
    assert row["state"] == "waiting" and row["reason"] == "listed by Slurm again"


def test_crash_points_parse_and_kill_for_real():
    with pytest.raises(ValueError, match="unknown point"):
        CrashPoints("after_lunch:1")
    cp = CrashPoints("after_update:3,before_update")
    assert cp.at == {"after_update": 3, "before_update": 1}
    code = ("from lyasched.live.crash import CrashPoints\n"
            "c = CrashPoints('after_update:3')\n"
            "for i in range(5):\n    c.reach('after_update'); print(i, flush=True)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == -9 and p.stdout.split() == ["0", "1"]


def test_policy_name_used_in_default_config(db):
    # The hook is off unless the variable is set: a normal service has no crash points.
    svc = Service(Config(slot_seconds=2), db, slurm=FakeSlurm(), policy=make_policy("lyapunov"))
    assert svc.crash.at == {}


def test_a_name_with_newlines_does_not_stop_every_slot(db):
    """Any user can name a job ``evil\\nname|x``; it stays in ``squeue -t all`` for MinJobAge, and
    used to fail every slot's parse (an outage caused by one sbatch)."""
    good = FakeJob("110", summary("uid-00000110"))
    evil = FakeJob("111", "c\nd", user="mallory", reason="None", name="evil\nname|x")
    slurm = FakeSlurm(jobs=[good, evil])
    rep = make(db, slurm, {"110": ((0, 1),)}).run_slot()
    assert not rep.error and [s["slurm_id"] for s in rep.started] == ["110"]
    # A name forging another job's line (same id twice): neither line is trusted, nothing is started.
    forged = FakeJob("113", summary("uid-00000113"), user="mallory").line()
    forger = FakeJob("112", "x", user="mallory", reason="None", name="n\n" + forged)
    slurm2 = FakeSlurm(jobs=[FakeJob("113", summary("uid-00000113")), forger])
    rep2 = make(db, slurm2, {"113": ((0, 1),)}).run_slot()
    assert not rep2.error and rep2.started == [] and not slurm2.actions("release")
