"""Issue 35's real-cluster target: an adaptive-batch job (lyasub --adaptive-batch) whose batch grows
during training (it measures its gradient noise scale and re-tunes itself) and changes across a
move (the service hands it the batch chosen for its new GPUs, key ``cb`` of its cost summary),
loses no progress across the move, and ends with the loss a one-process replay of the same batch
schedule reaches.

As in tests/test_elastic_slurm.py the service is the real one in this process (its slot, the mover,
the CLI backend) and the *decisions* are scripted (`Grow`: start on 2 GPUs, grow to 4 once the
service has read the job's noise scale), so the move happens at a known point. Native cluster only:
the in-process service reads the job's files on this host's filesystem.
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
from lyasched.live import adaptive
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
from lyasched.service import Service
from lyasched.store import adaptive as adaptive_store
from lyasched.store import moves, records
from lyasched.summary import CostSummary
from test_elastic_slurm import _final
from test_serve_slurm import WRAPPER, show_job

pytestmark = [pytest.mark.slurm, pytest.mark.skipif(CLUSTER_KIND != "native", reason="native cluster only")]

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "jobscripts" / "train_example.py"
BASE_STEPS = 3000
MODEL = ["--model", "mlp", "--model-arg", "width=16", "--model-arg", "input_dim=16"]
TRAIN_ARGS = ["--model", "mlp", "--arg", "width=16", "--arg", "input_dim=16", "--threads", "1", "--json",
              "--warmup", "0", "--seed", "11", "--retune-every", "5", "--prior-step-times",
              # at most 32 samples per GPU and step (beyond: accumulation), so the batch the job's
              # own agent can afford depends on its GPUs: 2 GPUs settle lower than 4
              "--max-local-batch", "32"]


class Grow:
    """Start the job on 2 GPUs of node1; once ``ready()`` (the service has its noise scale), grow it
    to 4 GPUs there (a move: checkpoint, requeue, the batch for 4 GPUs handed, release)."""

    name = "scripted-grow"
    capabilities = Capabilities(preemptive=True, moves=True)

    def __init__(self, job: str, ready) -> None:
        self.job, self.ready, self.grown = job, ready, False

    def decide(self, state: SlotState) -> SlotResult:
        waiting = {w.job_id for w in state.waiting}
        running = {r.job_id: r for r in state.running}
        r = running.get(self.job)
        starts, pre, notes = [], [], {}
        if self.job in waiting and not self.grown:
            starts.append(Decision(self.job, 2, ((0, 2),), 1.0, "start on 2"))
        elif (isinstance(r, MovableJob) and r.preemptible and r.gpus == 2 and not self.grown and self.ready()
              and state.free[0] >= 2):
            self.grown = True
            pre.append(self.job)
            starts.append(Decision(self.job, 4, ((0, 4),), 1.0, "grow"))
            notes[self.job] = "grown to 4 GPUs"
        return SlotResult(starts=tuple(starts), preempt=tuple(pre), q=float(len(waiting)), z=0.0,
                          info={"moves": notes})


def test_an_adaptive_job_grows_its_batch_changes_it_across_a_move_and_ends_with_its_schedules_loss(
        job_dir, test_user, as_user, slurm_jobs):
    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    sched = job_dir / "schedule.tsv"
    r = as_user(test_user, CLUSTER.which("lyasub"), "--parsable", "--no-profile", "--db", str(job_dir / "u.db"),
                "--time", "15", "--output", str(job_dir / "%j.out"), "--checkpointable", *MODEL, "-b", "8",
                "-n", str(BASE_STEPS), "--min-gpus", "1", "--max-gpus", "4", "--adaptive-batch", "--max-batch", "256",
                "--lr-rule", "linear", "--", str(job_dir / "train.py"), *TRAIN_ARGS, "--step-sleep", "0.3",
                "--checkpoint-every", "5", "--schedule-out", str(sched), cwd=str(job_dir), timeout=120)
    assert r.returncode == 0, r.stderr
    a = r.stdout.strip().splitlines()[-1]
    slurm_jobs.append(a)
    db = records.open_records(job_dir / "svc.db")

    def uid() -> str:
        return records.job_by_slurm_id(db, a)["uid"]

    def phi_read() -> bool:
        st = adaptive_store.get(db, uid())
        return bool(st and st.get("phi") and st.get("batch") and st["batch"] > 8)  # measured, and already grown

    policy = Grow(a, phi_read)
    svc = Service(Config(slot_seconds=2, release_grace=120, move_timeout=120, users=(test_user,)), db, policy=policy)
    svc.adaptive = adaptive.Watch(read_every=2.0)  # the job's report read each slot (every 60 s in service)
    deadline = time.monotonic() + 540
    timeline: list[str] = []
    while time.monotonic() < deadline:
        rep = svc.run_slot()
        assert not rep.error, rep.error
        ja = show_job(a)
        st = adaptive_store.get(db, uid()) if records.job_by_slurm_id(db, a) else None
        line = (f"A {ja.state} {ja.reason} {ja.num_nodes}x{ja.gpus_per_node} started {[s['slurm_id'] for s in rep.started]}"
                f" batch {st and st.get('batch')} phi {st and st.get('phi')}")
        if not timeline or timeline[-1] != line:
            timeline.append(line)
        row = records.job_by_slurm_id(db, a)
        if row is not None and row["state"] == "finished" and not moves.open_moves(db):
            break
        time.sleep(2)
    out = (job_dir / f"{a}.out").read_text()[-3000:] if (job_dir / f"{a}.out").exists() else ""
    assert show_job(a).state == "COMPLETED", out + "\n".join(timeline)
    done = [(m["kind"], m["from_gpus"], m["to_gpus"], m["state"]) for m in moves.for_job(db, uid())]
    assert done == [("grow", 2, 4, "done")], "\n".join(timeline)

    # the batch the service chose for 4 GPUs is in the job's comment (cb) and is what it restarted at
    chosen = adaptive_store.get(db, uid())["chosen"]
    comment = show_job(a).comment  # Slurm keeps it after the job ends (MinJobAge)
    assert CostSummary.decode(comment).chosen_batch == chosen, comment
    schedule = [line.split("\t") for line in sched.read_text().splitlines()[1:]]
    batches = [int(s[1]) for s in schedule]
    ckpt = moves.for_job(db, uid())[0]["ckpt_step"]
    before, after = batches[: ckpt + 1], batches[ckpt + 1:]
    assert max(before) > batches[0], batches  # grown during training, before any move
    assert after[0] == chosen // 4 * 4 and after[0] != before[-1], (before[-3:], after[:3], chosen)  # changed at the move

    print(f"batches: start {batches[0]}, before the move {sorted(set(before))}, chosen for 4 GPUs {chosen}, "
          f"after {sorted(set(after))}; checkpoint at step {ckpt} of {len(batches)}")
    # nothing lost: the final base steps are the sum of every step's gain, at least the job's length
    final = _final(job_dir / f"{a}.out")
    assert final["world_size"] == 4 and final["steps"] == len(schedule)
    assert final["base_steps"] == pytest.approx(sum(float(s[3]) for s in schedule), rel=1e-12)
    assert final["base_steps"] >= BASE_STEPS

    # the same batch schedule replayed on one process, uninterrupted: the same loss
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for k in [k for k in env if k.startswith("LYASCHED_")]:
        env.pop(k)
    p = subprocess.run([sys.executable, str(TRAIN), *TRAIN_ARGS, "--adaptive-batch", "--base-batch", "8",
                        "--max-batch", "256", "--lr-rule", "linear", "--iterations", str(BASE_STEPS),
                        "--batch-schedule", str(sched)], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    whole = json.loads([x for x in p.stdout.splitlines() if x.startswith("{")][-1])
    assert whole["steps"] == final["steps"]
    assert final["final_loss"] == pytest.approx(whole["final_loss"], rel=1e-5, abs=1e-7)
    assert (job_dir / f"{a}.user").read_text().strip() == test_user  # ran as its submitter

    shown = as_user(test_user, CLUSTER.which("lyastat"), "--db", str(job_dir / "svc.db"), a)
    assert shown.returncode == 0 and "phi" in shown.stdout, shown.stdout
