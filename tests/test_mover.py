"""Moves of running checkpointable jobs (lyasched.live.mover) through the service's slot, against
test_service's fake Slurm runner (22.05 text formats) taught signal / requeue / requeuehold:
the order of the Slurm commands, the records, the timeout, only checkpointable jobs, and a
service that dies at every step of a move and is started again."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from lyasched.job.checkpoint import MARKER, checkpoint_dir, read_marker
from lyasched.config import Config
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
from lyasched.service import Service
from lyasched.store import moves, records
from lyasched.summary import CostSummary
from test_service import FakeJob, FakeSlurm

T0 = 1_000_100.0


def ck_summary(uid: str, ck: bool = True, it: int = 200) -> str:
    return CostSummary(uid=uid, sig="cnn:test", global_batch=64, iterations=it, min_gpus=1, max_gpus=8,
                       alpha=0.01, beta=0.002, params=1_000_000, checkpointable=ck).encode()


@dataclass
class MovingSlurm(FakeSlurm):
    """FakeSlurm plus what a move sends: scancel --signal, Requeue=, requeuehold."""

    requeueable: dict[str, bool] = field(default_factory=dict)

    def run(self, args, *, idempotent=True, input=None):
        args = list(args)
        if args[0] == "scancel" and args[1].startswith("--signal="):
            self.calls.append(args)
            job = self._job(args[2])
            if job is None or job.state != "RUNNING":
                raise AssertionError(f"signal to a job not running: {args}")
            return ""
        if args[:2] == ["scontrol", "update"] and args[3:] == ["StartTime=now+10"]:
            self.calls.append(args)
            return ""
        if args[:2] == ["scontrol", "update"] and any(a.startswith("Requeue=") for a in args):
            self.calls.append(args)
            jid = args[2].removeprefix("JobId=")
            self.requeueable[jid] = args[3] == "Requeue=1"
            return ""
        if args[:2] == ["scontrol", "requeuehold"]:
            self.calls.append(args)
            job = self._job(args[2])
            assert job is not None and self.requeueable.get(job.job_id), "requeue of a job that is not requeueable"
            assert job.state in ("RUNNING", "COMPLETED"), f"requeue of a {job.state} job"
            job.state, job.reason, job.start, job.nodes = "PENDING", "job requeued in held state", None, ()
            return ""
        if args[0] == "squeue" and "--jobs" in " ".join(args):
            self.calls.append(args)
            return "".join(j.line() + "\n" for j in self.jobs)
        return super().run(args, idempotent=idempotent, input=input)

    def _job(self, jid: str) -> FakeJob | None:
        return next((j for j in self.jobs if j.job_id == jid), None)

    def sent(self) -> list[list[str]]:
        """The commands that change a job, in order (reads left out)."""
        return [c for c in self.calls if c[0] == "scancel" or c[1] in ("update", "requeuehold", "release", "hold")]


class MoveAs:
    """A scripted moving policy: moves each listed job once when it sees it movable; placement ()
    suspends it, else resizes it there."""

    name = "scripted-moves"
    capabilities = Capabilities(preemptive=True, moves=True)

    def __init__(self, plan: dict[str, tuple[tuple[int, int], ...]]):
        self.plan = dict(plan)
        self.states: list[SlotState] = []

    def decide(self, state: SlotState) -> SlotResult:
        self.states.append(state)
        pre, starts = [], []
        for r in state.running:
            if r.job_id in self.plan and isinstance(r, MovableJob) and r.preemptible:
                p = self.plan.pop(r.job_id)
                pre.append(r.job_id)
                if p:
                    starts.append(Decision(r.job_id, sum(n for _, n in p), p, 1.0, "scripted"))
        return SlotResult(starts=tuple(starts), preempt=tuple(pre), info={"moves": {j: "scripted move" for j in pre}})


@pytest.fixture
def db():
    return records.open_records(":memory:")


def make(db, slurm, policy, tmp_path, now=T0, **cfg) -> Service:
    clock = {"t": now}
    svc = Service(Config(slot_seconds=2, **cfg), db, slurm=slurm, policy=policy, clock=lambda: clock["t"])
    svc.mover.workdir = lambda job_id: str(tmp_path)
    svc.clock_state = clock  # type: ignore[attr-defined]
    return svc


def running_job(jid="101", uid="uid-00000001", ck=True, nodes=("node1",), gpn=4, it=200) -> FakeJob:
    return FakeJob(jid, ck_summary(uid, ck, it), state="RUNNING", reason="None", start=T0 - 1000, nodes=nodes, gpn=gpn)


def save_marker(tmp_path, uid="uid-00000001", step=41, stop=True) -> None:
    d = checkpoint_dir(str(tmp_path), uid)
    d.mkdir(parents=True, exist_ok=True)
    prev = read_marker(d) or {"n": 0}
    (d / MARKER).write_text(json.dumps({"step": step, "n": prev["n"] + 1, "stop": stop, "time": 0}))


def test_a_shrink_signals_then_requeues_resizes_and_releases_once_the_checkpoint_is_complete(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job()])
    slurm.nodes[0] = ("node1", 4, 4, "ALLOCATED")
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path)
    svc.run_slot()
    assert slurm.sent() == [["scontrol", "update", "JobId=101", "Requeue=1"], ["scancel", "--signal=USR1", "101"]]
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["kind"], m["step"], m["state"], m["from_gpus"], m["to_gpus"]) == ("shrink", "signalled", "open", 4, 2)
    assert json.loads(m["to_placement"]) == [["node1", 2]]

    svc.clock_state["t"] += 2
    svc.run_slot()  # no checkpoint yet: nothing more is sent, the job keeps running
    assert len(slurm.sent()) == 2 and records.get_job(db, "uid-00000001")["state"] == "running"

    save_marker(tmp_path, step=41)
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert slurm.sent()[2:] == [
        ["scontrol", "requeuehold", "101"],
        ["scontrol", "update", "JobId=101", "StartTime=now+10"],
        ["scontrol", "update", "JobId=101", "NumNodes=1-1", "NumTasks=1", "NumCPUs=1", "TresPerNode=gres:gpu:2",
         "ReqNodeList=node1"],
        ["scontrol", "update", "JobId=101", "Requeue=0"],
        ["scontrol", "release", "101"],
    ]
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["step"], m["state"], m["ckpt_step"]) == ("released", "done", 41)
    row = records.get_job(db, "uid-00000001")
    assert row["state"] == "released" and row["gpus"] == 2 and json.loads(row["nodes"]) == ["node1"]
    assert not slurm.requeueable["101"]  # its owner cannot requeue it after the move
    actions = [d["action"] for d in records.decisions_for(db, "uid-00000001")]
    assert actions == ["move", "shrink"]

    # Slurm runs it again on 2 GPUs: the move's cost is measured (signal -> running again)
    job = slurm.jobs[0]
    job.state, job.reason, job.start, job.nodes, job.gpn = "RUNNING", "None", svc.clock_state["t"] + 5, ("node1",), 2
    svc.clock_state["t"] += 10
    svc.run_slot()
    (m,) = moves.for_job(db, "uid-00000001")
    assert m["cost_s"] == pytest.approx(9.0)
    assert records.get_job(db, "uid-00000001")["state"] == "running"
    # ... and is its move cost the next time the policy sees it
    view = next(r for r in svc.last_state.running if r.job_id == "101")
    assert isinstance(view, MovableJob) and view.move_cost_s == pytest.approx(9.0) and view.gpus == 2


def test_a_suspension_leaves_the_job_held_and_waiting_for_the_policy(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ()}), tmp_path)
    svc.run_slot()
    save_marker(tmp_path, step=10)
    svc.clock_state["t"] += 2
    rep = svc.run_slot()
    assert [c[1] for c in slurm.sent()] == ["update", "--signal=USR1", "requeuehold", "update", "update"]
    assert slurm.sent()[-1][-1] == "Requeue=0"
    row = records.get_job(db, "uid-00000001")
    assert row["state"] == "waiting" and row["reason"].startswith("suspended")
    assert rep.waiting == 1  # the policy saw it waiting in the same slot
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["kind"], m["state"]) == ("suspend", "done")


def test_no_checkpoint_in_time_leaves_the_job_running_and_records_the_failure(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path, move_timeout=60)
    svc.run_slot()
    save_marker(tmp_path, step=3, stop=False)  # a periodic save is not the move's checkpoint
    svc.clock_state["t"] += 61
    svc.run_slot()
    assert [c[1] for c in slurm.sent()] == ["update", "--signal=USR1", "update"]
    assert slurm.sent()[-1][-1] == "Requeue=0"
    (m,) = moves.for_job(db, "uid-00000001")
    assert m["state"] == "failed" and "no checkpoint within 60s" in m["resolution"]
    assert records.get_job(db, "uid-00000001")["state"] == "running"
    assert slurm.jobs[0].state == "RUNNING"


def test_only_checkpointable_jobs_are_ever_movable(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job(ck=False), running_job("102", "uid-00000002", nodes=("node2",))])
    pol = MoveAs({"101": ((0, 2),), "102": ((1, 2),)})
    svc = make(db, slurm, pol, tmp_path)
    svc.run_slot()
    views = {r.job_id: r for r in pol.states[-1].running}
    assert not views["101"].preemptible and not isinstance(views["101"], MovableJob)
    assert isinstance(views["102"], MovableJob) and views["102"].preemptible
    assert all(c[-1] != "101" and "JobId=101" not in c for c in slurm.sent())
    assert [m["slurm_id"] for m in moves.open_moves(db)] == ["102"]


def test_serve_accepts_elastic_and_grows_a_job_onto_idle_gpus(db, tmp_path):
    from lyasched.policy import make_policy

    job = running_job(nodes=("node1",), gpn=2, it=200_000)  # about 4 h on 2 GPUs: a grow pays
    job.limit = "1-00:00:00"
    slurm = MovingSlurm(jobs=[job])
    slurm.nodes[0] = ("node1", 4, 2, "MIXED")
    svc = make(db, slurm, make_policy("elastic", min_move_interval=60), tmp_path)
    svc.run_slot()
    (m,) = moves.for_job(db, "uid-00000001")
    assert m["kind"] == "grow" and m["to_gpus"] > 2 and m["reason"]


MOVE_POINTS = ["move_after_signal", "move_after_requeue", "move_after_resize", "move_after_release"]


def test_the_move_crash_points_are_all_named():
    from lyasched.live.crash import CRASH_POINTS

    assert {p for p in CRASH_POINTS if p.startswith("move_")} == set(MOVE_POINTS)


@pytest.mark.parametrize("point", MOVE_POINTS)
def test_a_service_killed_during_a_move_finishes_it_on_restart(db, tmp_path, point):
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path)

    class Die(Exception):
        pass

    fired: list[str] = []

    class CrashAt:
        def reach(self, name):
            if name == point:
                fired.append(name)
                raise Die(name)

    svc.crash = CrashAt()
    save_marker(tmp_path, step=0, stop=False)  # a checkpoint from before the move
    svc.run_slot()
    if point != "move_after_signal":
        save_marker(tmp_path, step=41)
        svc.clock_state["t"] += 2
        svc.run_slot()  # dies at the point (the slot is recorded with the error)
    assert fired == [point]
    # a fresh service on the same records (a restart), a policy that moves nothing
    svc2 = make(db, slurm, MoveAs({}), tmp_path, now=svc.clock_state["t"] + 5)
    if point == "move_after_signal":
        save_marker(tmp_path, step=41)
    svc2.run_slot()
    svc2.clock_state["t"] += 2
    svc2.run_slot()
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["state"], m["step"]) == ("done", "released"), m
    # the run the move ended, as written with the move's first row (its wait leaves it out)
    assert m["run_started"] == T0 - 1000 and m["requeued_at"] is not None
    assert moves.history(db)["uid-00000001"].held_before == m["requeued_at"] - (T0 - 1000)
    sent = slurm.sent()
    assert sum(c[1] == "requeuehold" for c in sent) == 1 and sum(c[1] == "release" for c in sent) == 1
    assert sent[-1] == ["scontrol", "release", "101"] or sent[-1][-1] == "Requeue=0"
    assert records.get_job(db, "uid-00000001")["state"] == "released"
    assert slurm.jobs[0].reason == "Resources"  # released, not held
    assert records.consistency_problems(db) == []


def test_marker_is_read_safely(tmp_path):
    d = tmp_path / "ck"
    d.mkdir()
    assert read_marker(d) is None
    (d / MARKER).write_text("not json")
    assert read_marker(d) is None
    (d / MARKER).unlink()
    (tmp_path / "secret").write_text(json.dumps({"step": 1, "n": 1, "stop": True}))
    (d / MARKER).symlink_to(tmp_path / "secret")
    assert read_marker(d) is None  # never through a symlink (the service reads users' directories)
    (d / MARKER).unlink()
    (d / MARKER).write_text(json.dumps({"step": 7, "n": 2, "stop": True, "time": 1.5}))
    assert read_marker(d) == {"step": 7, "n": 2, "stop": True, "time": 1.5}


def test_lyastat_shows_every_move_with_its_reason_and_cost(tmp_path):
    from click.testing import CliRunner

    from lyasched.cli.lyastat import main

    path = tmp_path / "svc.db"
    db = records.open_records(path)
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path, move_timeout=30)
    svc.run_slot()
    save_marker(tmp_path, step=41)
    svc.clock_state["t"] += 2
    svc.run_slot()
    job = slurm.jobs[0]
    job.state, job.reason, job.start, job.nodes, job.gpn = "RUNNING", "None", svc.clock_state["t"] + 5, ("node1",), 2
    svc.clock_state["t"] += 1000
    svc.policy.plan = {"101": ()}  # a second move, whose checkpoint never comes
    svc.run_slot()
    svc.clock_state["t"] += 31
    svc.run_slot()
    db.conn.close()
    out = CliRunner().invoke(main, ["--db", str(path), "--no-slurm", "101"], catch_exceptions=False).output
    assert "moves (checkpoint, requeue, relaunch" in out
    assert "shrink  4 -> 2 GPUs: scripted move [done, checkpoint at step 41, cost 7.00s]" in out
    assert "suspend 2 -> suspended: scripted move [failed, cost -] no checkpoint within 30s" in out
    j = json.loads(CliRunner().invoke(main, ["--db", str(path), "--no-slurm", "--json", "101"]).output)
    assert [(m["kind"], m["state"], m["cost_s"]) for m in j["moves"]] == [("shrink", "done", 7.0),
                                                                           ("suspend", "failed", None)]


def test_a_job_its_owner_requeues_during_the_move_is_held_and_the_move_goes_on(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path)
    svc.run_slot()
    job = slurm.jobs[0]  # `scontrol requeue` by its owner: pending, not held
    job.state, job.reason, job.start, job.nodes = "PENDING", "BeginTime", None, ()
    save_marker(tmp_path, step=41)
    svc.clock_state["t"] += 2
    svc.run_slot()
    sent = [c[1:] if c[0] == "scontrol" else c for c in slurm.sent()]
    assert ["hold", "101"] in sent and ["requeuehold", "101"] not in sent
    assert sent[-1] == ["release", "101"]
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["state"], m["step"]) == ("done", "released")


def test_a_job_still_completing_after_its_requeue_is_resized_the_next_slot(db, tmp_path):
    slurm = MovingSlurm(jobs=[running_job()])
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path)
    svc.run_slot()
    save_marker(tmp_path, step=41)
    orig = slurm.run

    def completing(args, **kw):  # Slurm shows a requeued job COMPLETING until its processes are gone
        out = orig(args, **kw)
        if list(args[:2]) == ["scontrol", "requeuehold"]:
            slurm.jobs[0].state, slurm.jobs[0].nodes = "COMPLETING", ("node1",)
        return out

    slurm.run = completing  # type: ignore[method-assign]
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert [c[1] for c in slurm.sent()][-1] == "update" and moves.for_job(db, "uid-00000001")[0]["step"] == "requeued"
    assert records.get_job(db, "uid-00000001")["state"] == "running"
    slurm.jobs[0].state, slurm.jobs[0].nodes = "PENDING", ()
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert slurm.sent()[-1] == ["scontrol", "release", "101"]
    assert records.get_job(db, "uid-00000001")["state"] == "released"


def test_a_signal_lost_while_the_job_starts_is_sent_again_until_the_checkpoint_shows(db, tmp_path):
    """A job (re)started moments before its move ignores USR1 until its checkpoint helper is
    installed (the lost grow signal in CI): the mover signals again every RESIGNAL_S seconds,
    never before, and stops once the checkpoint is there."""
    from lyasched.live.mover import RESIGNAL_S

    slurm = MovingSlurm(jobs=[running_job()])
    slurm.nodes[0] = ("node1", 4, 4, "ALLOCATED")
    svc = make(db, slurm, MoveAs({"101": ((0, 2),)}), tmp_path, move_timeout=120)
    svc.run_slot()
    signals = lambda: [c for c in slurm.sent() if c[0] == "scancel"]  # noqa: E731
    assert len(signals()) == 1
    svc.clock_state["t"] += RESIGNAL_S - 1
    svc.run_slot()
    assert len(signals()) == 1  # not yet
    svc.clock_state["t"] += 1
    svc.run_slot()
    assert len(signals()) == 2 and signals()[-1] == ["scancel", "--signal=USR1", "101"]
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert len(signals()) == 2  # the interval counts from the last signal
    svc.clock_state["t"] += RESIGNAL_S
    svc.run_slot()
    assert len(signals()) == 3
    save_marker(tmp_path, step=7)
    svc.clock_state["t"] += RESIGNAL_S
    svc.run_slot()
    assert len(signals()) == 3  # the checkpoint is there: requeued, not signalled
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["state"], m["ckpt_step"]) == ("done", 7)


def test_an_elastic_group_swap_suspends_a_node_wide_job_and_its_gpus_go_to_the_short_jobs(db, tmp_path):
    """The real elastic policy through the service: a checkpointable job that runs on 4 GPUs only holds
    the one node, four 1-GPU jobs of minutes wait. The slot suspends it for the four (a group swap:
    docs/model.md section 3); their starts find no free GPU in that slot and stay held; once it is
    requeued and Slurm shows the node free, the four are started and it waits."""
    from lyasched.policy import make_policy

    def summary(uid: str, it: int, gpus: int, ck: bool) -> str:
        return CostSummary(uid=uid, sig=f"cnn:{uid}", global_batch=64, iterations=it, min_gpus=gpus, max_gpus=gpus,
                           alpha=0.01, beta=0.002, params=1_000_000, checkpointable=ck).encode()

    big = FakeJob("101", summary("uid-00000001", 400_000, 4, True), state="RUNNING", reason="None", start=T0 - 1000,
                  nodes=("node1",), gpn=4, limit="2-00:00:00")
    short = [FakeJob(str(201 + k), summary(f"uid-0000010{k}", 2_000, 1, False), submit=T0 - 600) for k in range(4)]
    slurm = MovingSlurm(jobs=[big, *short])
    slurm.nodes[:] = [("node1", 4, 4, "ALLOCATED")]
    svc = make(db, slurm, make_policy("elastic", min_move_interval=60), tmp_path)
    svc.run_slot()
    (m,) = moves.for_job(db, "uid-00000001")
    assert m["kind"] == "suspend" and "for 4 jobs" in m["reason"]
    assert slurm.actions("release") == []  # no GPU free yet: the four stay held

    save_marker(tmp_path, step=10)
    svc.clock_state["t"] += 2
    svc.run_slot()  # the checkpoint is complete: requeued held
    assert records.get_job(db, "uid-00000001")["state"] == "waiting"
    slurm.nodes[:] = [("node1", 4, 0, "IDLE")]  # Slurm frees the node
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert sorted(a[2] for a in slurm.actions("release")) == ["201", "202", "203", "204"]
    assert records.get_job(db, "uid-00000001")["state"] == "waiting"
