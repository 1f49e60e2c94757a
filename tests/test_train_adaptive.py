"""jobscripts/train_example.py --adaptive-batch on CPU (gloo): the batch grows from the measured
noise scale, a move to another GPU count and batch (checkpoint, resume) loses no base-step
progress, and a replay of the logged batch schedule on one process ends with the same loss as
the moved run (what the real-cluster test checks at full size)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "jobscripts" / "train_example.py"
ARGS = ["--model", "mlp", "--arg", "width=32", "--arg", "input_dim=24", "--threads", "1", "--json", "--seed", "7",
        "--adaptive-batch", "--base-batch", "16", "--max-batch", "256", "--retune-every", "3", "--iterations", "150"]


def run(nproc: int, *extra: str, env_extra: dict | None = None) -> tuple[dict | None, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           # a flat prior step time: a bigger batch looks nearly free until the job has measured two
           "LYASCHED_STEP_ALPHA": "0.05", "LYASCHED_STEP_BETA": "1e-5", **(env_extra or {})}
    for k in ("LYASCHED_CHECKPOINT_DIR", "LYASCHED_GLOBAL_BATCH", "LYASCHED_ADAPTIVE", "LYASCHED_MAX_BATCH",
              "LYASCHED_BASE_BATCH", "LYASCHED_STEPS_FILE"):
        if k not in (env_extra or {}):
            env.pop(k, None)
    argv = [*ARGS, *extra]
    cmd = ([sys.executable, str(SCRIPT), *argv] if nproc == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), str(SCRIPT), *argv])
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout[-1500:]}\nstderr: {p.stderr[-3000:]}"
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    return (json.loads(lines[0]) if lines else None), p.stdout


@pytest.mark.slow
def test_moved_adaptive_run_matches_a_replay_of_its_schedule(tmp_path: Path) -> None:
    ck, sched, report = tmp_path / "ck", tmp_path / "schedule.tsv", tmp_path / "steps-5.tsv"
    # 2 ranks at the service's batch 32, moved (signal) after step 5 ...
    first, out = run(2, "--global-batch", "32", "--checkpoint-dir", str(ck), "--stop-at-step", "5",
                     env_extra={"LYASCHED_STEPS_FILE": str(report)})
    assert first is None and "checkpointed after step 6" in out
    # ... resumed on 1 rank at the batch the service chose for it (48: accumulation past 16 per GPU)
    moved, out = run(1, "--global-batch", "48", "--max-local-batch", "16", "--checkpoint-dir", str(ck),
                     "--schedule-out", str(sched), env_extra={"LYASCHED_STEPS_FILE": str(report)})
    assert "resumed from checkpoint at step 6" in out and "batch 48 on 1 rank" in out
    schedule = [line.split("\t") for line in sched.read_text().splitlines()[1:]]
    assert [int(s[0]) for s in schedule] == list(range(moved["steps"]))  # every step once, the moved ones included
    assert int(schedule[0][1]) == 32 and int(schedule[6][1]) == 48
    # the job re-tuned its batch from phi: grown past the service's (a flat prior: nearly free), and
    # after measuring its own step times (CPU: no fixed cost to amortise) wherever they put it
    assert len(moved["batches"]) >= 3 and max(moved["batches"]) > 48
    assert moved["base_steps"] >= 150 > moved["base_steps"] - max(float(s[3]) for s in schedule)
    # progress is the sum of the logged gains: nothing lost across the move
    assert moved["base_steps"] == pytest.approx(sum(float(s[3]) for s in schedule), rel=1e-12)
    # the report carries phi and the batch (A lines, rank 0)
    a_lines = [json.loads(line.split("\t")[3]) for line in report.read_text().splitlines() if line.startswith("A\t")]
    assert {a["batch"] for a in a_lines} >= {32, 48} and any(a["phi"] for a in a_lines)
    # an uninterrupted run of the same schedule, on one process without a move
    ref, _ = run(1, "--global-batch", "32", "--max-local-batch", "64", "--batch-schedule", str(sched))
    assert ref["steps"] == moved["steps"] and ref["base_steps"] == moved["base_steps"]
    assert ref["final_loss"] == pytest.approx(moved["final_loss"], rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_a_job_killed_during_a_batch_change_resumes_from_its_last_checkpoint_and_loses_no_progress(tmp_path: Path) -> None:
    """Issue 35: a kill (SIGKILL to the whole job, as a node failure: no signal handler, no
    checkpoint) in the first step at a new batch the job chose for itself. The requeued job resumes
    from its last complete checkpoint: its agent's progress and batch schedule are those of that
    checkpoint (the steps since are done again, not counted twice), and the run ends with the loss
    of an uninterrupted replay of its schedule."""
    ck, sched = tmp_path / "ck", tmp_path / "schedule.tsv"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
           "LYASCHED_STEP_ALPHA": "0.05", "LYASCHED_STEP_BETA": "1e-5"}
    for k in ("LYASCHED_CHECKPOINT_DIR", "LYASCHED_GLOBAL_BATCH", "LYASCHED_ADAPTIVE", "LYASCHED_MAX_BATCH",
              "LYASCHED_BASE_BATCH", "LYASCHED_STEPS_FILE"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT), *ARGS,
           "--global-batch", "32", "--checkpoint-dir", str(ck), "--checkpoint-every", "2", "--crash-at-batch-change", "1"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400, start_new_session=True)
    # rank 0 SIGKILLed (torchrun runs each worker in its own session: it sees the kill, stops the other rank and fails)
    assert p.returncode != 0 and "Signal 9 (SIGKILL)" in p.stderr, f"exit {p.returncode}\nstdout: {p.stdout[-1500:]}\nstderr: {p.stderr[-3000:]}"
    crash = [line for line in p.stdout.splitlines() if line.startswith("crashing in step ")]
    assert len(crash) == 1 and not [line for line in p.stdout.splitlines() if line.startswith("{")]
    crashed_at = int(crash[0].split()[3])
    marker = json.loads((ck / "complete.json").read_text())
    saved = sorted(ck.glob("step-*.pt"))
    assert len(saved) == 1 and not list(ck.glob(".*.tmp"))  # one complete checkpoint, no half-written file
    saved_step = int(saved[0].stem.split("-")[1])
    assert saved_step < crashed_at and (saved_step + 1) % 2 == 0
    assert marker["step"] == saved_step and marker["stop"] is False  # what the service sees: a periodic save
    # requeued (on 1 rank, at the batch the service chose for it)
    moved, out = run(1, "--global-batch", "48", "--max-local-batch", "16", "--checkpoint-dir", str(ck),
                     "--schedule-out", str(sched))
    assert f"resumed from checkpoint at step {saved_step + 1} " in out and "batch 48 on 1 rank" in out
    schedule = [line.split("\t") for line in sched.read_text().splitlines()[1:]]
    assert [int(s[0]) for s in schedule] == list(range(moved["steps"]))  # every step once: the re-done ones once
    assert moved["base_steps"] == pytest.approx(sum(float(s[3]) for s in schedule), rel=1e-12)
    assert moved["base_steps"] >= 150 > moved["base_steps"] - max(float(s[3]) for s in schedule)
    assert int(schedule[saved_step + 1][1]) == 48 and {int(s[1]) for s in schedule[:saved_step + 1]} == {32}
    ref, _ = run(1, "--global-batch", "32", "--max-local-batch", "64", "--batch-schedule", str(sched))
    assert ref["steps"] == moved["steps"] and ref["base_steps"] == moved["base_steps"]
    assert ref["final_loss"] == pytest.approx(moved["final_loss"], rel=1e-5, abs=1e-6)
