"""Issue 13's real-cluster target: a two-node 8-GPU checkpointable job is shrunk to 4 GPUs when
another job arrives, grown back to 8 when that one ends, and ends with the same final loss as an
uninterrupted run with the same seed; both jobs run as their submitter.

The service is the real one (`lyasched.service.Service`, its slot, the mover, the CLI backend,
running as root in this process); the *decisions* are scripted (`ShrinkGrow`, a policy object
with elastic's capabilities), because on this 12-GPU cluster with two tiny jobs `elastic` would
not choose this exact sequence deterministically. A third, plain (non-lyasched) job holds node3,
so that the second job's 4 GPUs must come from the first. Native cluster only: the in-process
service reads the jobs' checkpoint markers on this host's filesystem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CLUSTER, CLUSTER_KIND
from lyasched.config import Config
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
from lyasched.service import Service
from lyasched.store import moves, records
from test_serve_slurm import WRAPPER, show_job

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(CLUSTER_KIND != "native", reason="native cluster only")]

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "jobscripts" / "train_example.py"
ITERATIONS = 300
MODEL = ["--model", "mlp", "--model-arg", "width=16", "--model-arg", "input_dim=16"]
TRAIN_ARGS = ["--model", "mlp", "--arg", "width=16", "--arg", "input_dim=16", "--threads", "1", "--json",
              "--warmup", "0"]


class ShrinkGrow:
    """Start A on 8 GPUs (node1+node2); when B waits, shrink A to node1's 4; start B on node2; when
    B is gone, grow A back to 8. Pure: everything it needs is in the state and the two ids."""

    name = "scripted-shrink-grow"
    capabilities = Capabilities(preemptive=True, moves=True)

    def __init__(self, a: str, b: str | None = None):
        self.a, self.b = a, b
        self.b_seen = False

    def decide(self, state: SlotState) -> SlotResult:
        waiting = {w.job_id for w in state.waiting}
        running = {r.job_id: r for r in state.running}
        ra = running.get(self.a)
        movable = isinstance(ra, MovableJob) and ra.preemptible
        starts, pre, notes = [], [], {}
        if self.a in waiting:
            starts.append(Decision(self.a, 8, ((0, 4), (1, 4)), 1.0, "start on 8"))
        if self.b is not None and (self.b in waiting or self.b in running):
            self.b_seen = True
        if self.b in waiting:
            if movable and ra is not None and ra.gpus == 8:
                pre.append(self.a)
                starts.append(Decision(self.a, 4, ((0, 4),), 1.0, "shrink"))
                notes[self.a] = f"shrunk to 4 GPUs: job {self.b} arrived"
            elif state.free[1] >= 4:
                starts.append(Decision(self.b, 4, ((1, 4),), 1.0, "start on node2"))
        b_gone = self.b_seen and self.b not in waiting and self.b not in running
        if b_gone and movable and ra is not None and ra.gpus == 4 and state.free[1] >= 4:
            pre.append(self.a)
            starts.append(Decision(self.a, 8, ((0, 4), (1, 4)), 1.0, "grow"))
            notes[self.a] = f"grown back to 8 GPUs: job {self.b} finished"
        return SlotResult(starts=tuple(starts), preempt=tuple(pre), q=float(len(waiting)), z=0.0,
                          info={"moves": notes})


def _lyasub(as_user, user: str, job_dir: Path, iterations: int, *train_args: str, extra: tuple[str, ...] = ()) -> str:
    r = as_user(user, CLUSTER.which("lyasub"), "--parsable", "--no-profile", "--db", str(job_dir / f"{user}.db"),
                "--time", "15", "--output", str(job_dir / "%j.out"), "--checkpointable", *MODEL, "-b", "8",
                "-n", str(iterations), "--min-gpus", "1", "--max-gpus", "8", *extra, "--",
                str(job_dir / "train.py"), *train_args, cwd=str(job_dir), timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def _final(out: Path) -> dict:
    lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
    assert lines, out.read_text()[-3000:]
    return json.loads(lines[-1])


def test_a_job_is_shrunk_for_an_arrival_grown_back_and_ends_with_the_uninterrupted_loss(
        job_dir, test_user, as_user, slurm_jobs):
    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    # node3 is busy with somebody else's (plain) job: B's GPUs must come from A
    r = as_user(test_user, "sbatch", "--parsable", "--gres=gpu:4", "-w", "node3", "-o", "/dev/null",
                "--wrap", "sleep 1200", cwd=str(job_dir))
    assert r.returncode == 0, r.stderr
    slurm_jobs.append(r.stdout.strip())

    a = _lyasub(as_user, test_user, job_dir, ITERATIONS, *TRAIN_ARGS, "--step-sleep", "0.3",
                "--checkpoint-every", "10")
    slurm_jobs.append(a)
    db = records.open_records(job_dir / "svc.db")
    policy = ShrinkGrow(a)
    svc = Service(Config(slot_seconds=2, release_grace=120, move_timeout=120, users=(test_user,)), db,
                  policy=policy)
    ck = None
    b = None
    deadline = time.monotonic() + 540
    timeline: list[str] = []  # what each slot saw (shown when an assertion fails)
    while time.monotonic() < deadline:
        rep = svc.run_slot()
        assert not rep.error, rep.error
        ja = show_job(a)
        state = ja.state
        line = f"{time.strftime('%H:%M:%S')} A {state} {ja.reason} {ja.num_nodes}x{ja.gpus_per_node}"
        if b is not None:
            jb = show_job(b)
            line += f" B {jb.state} {jb.reason}"
        line += f" free {sum(rep.free.values())} started {[s['slurm_id'] for s in rep.started]}"
        if not timeline or timeline[-1][9:] != line[9:]:
            timeline.append(line)
        if b is None and state == "RUNNING":
            row = records.get_job(db, records.job_by_slurm_id(db, a)["uid"])
            ck = job_dir / ".lyasched" / f"ckpt-{row['uid']}"
            if (ck / "complete.json").exists():  # A trains (a periodic save was made): B arrives
                b = _lyasub(as_user, test_user, job_dir, 20, *TRAIN_ARGS, "--step-sleep", "0.2")
                slurm_jobs.append(b)
                policy.b = b
        # a job that exits for a move ends (COMPLETED, or FAILED when a torchrun agent trips over
        # the rendezvous going away) until the service requeues it: done only once its record is
        row = records.job_by_slurm_id(db, a)
        if row is not None and row["state"] == "finished" and not moves.open_moves(db):
            break
        time.sleep(2)
    log = (job_dir / f"{a}.out").read_text()[-3000:] if (job_dir / f"{a}.out").exists() else ""
    assert show_job(a).state == "COMPLETED", log + "\n".join(timeline)
    assert b is not None and show_job(b).state == "COMPLETED"

    uid = records.job_by_slurm_id(db, a)["uid"]
    done = [(m["kind"], m["from_gpus"], m["to_gpus"], m["state"]) for m in moves.for_job(db, uid)]
    history = "\n".join(timeline) + "\n" + "\n".join(
        f"{d['slurm_id']} {d['action']} {d['gpus']} {d['reason']}" for u in (uid, records.job_by_slurm_id(db, b)["uid"])
        for d in records.decisions_for(db, u))
    assert done == [("shrink", 8, 4, "done"), ("grow", 4, 8, "done")], history
    steps = [m["ckpt_step"] for m in moves.for_job(db, uid)]
    assert 0 < steps[0] < steps[1] < ITERATIONS - 1
    assert all(m["cost_s"] is not None and m["cost_s"] > 0 for m in moves.for_job(db, uid))
    assert records.consistency_problems(db) == []

    final = _final(job_dir / f"{a}.out")
    assert final["world_size"] == 8 and final["global_batch"] == 8 and final["iterations"] == ITERATIONS

    # the uninterrupted run, same seed and global batch (one process: the loss does not depend on it)
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("LYASCHED_CHECKPOINT_DIR", None)
    p = subprocess.run([sys.executable, str(TRAIN), *TRAIN_ARGS, "--global-batch", "8", "--iterations",
                        str(ITERATIONS)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    whole = json.loads(p.stdout.strip().splitlines()[-1])
    assert final["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5, abs=1e-7)

    for job in (a, b):  # both ran as their submitter (the wrapper records it at every (re)start)
        assert (job_dir / f"{job}.user").read_text().strip() == test_user


def test_the_owner_cannot_release_or_requeue_a_job_a_move_requeued_held(job_dir, test_user, as_user, slurm_jobs):
    """job_submit.lua still guards a lyasched job held by a move: its owner cannot release it,
    requeue it, or make it requeueable (the service does those as root)."""
    from lyasched.slurm.cli import CliSlurm

    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    a = _lyasub(as_user, test_user, job_dir, 1000, *TRAIN_ARGS, "--step-sleep", "0.5")
    slurm_jobs.append(a)
    slurm = CliSlurm()
    slurm.resize(a, 1, 1, ["node1"])
    slurm.release(a)
    deadline = time.monotonic() + 60
    while show_job(a).state != "RUNNING" and time.monotonic() < deadline:
        time.sleep(1)
    assert show_job(a).state == "RUNNING"
    slurm.set_requeue(a, True)
    slurm.requeue_hold(a)
    slurm.set_requeue(a, False)
    deadline = time.monotonic() + 30
    while show_job(a).state == "COMPLETING" and time.monotonic() < deadline:  # its processes end first
        time.sleep(1)
    job = show_job(a)
    assert job.pending and job.held_by_service, (job.state, job.reason)
    for argv in (["scontrol", "release", a], ["scontrol", "requeue", a],
                 ["scontrol", "update", f"JobId={a}", "Requeue=1"], ["scontrol", "update", f"JobId={a}", "Priority=100"]):
        r = as_user(test_user, *argv)
        assert r.returncode != 0, (argv, r.stdout, r.stderr)
    job = show_job(a)
    assert job.pending and job.held_by_service, (job.state, job.reason)
