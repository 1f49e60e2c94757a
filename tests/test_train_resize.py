"""jobscripts/train_example.py gives the same result on any GPU count and across a resize: the
global batch of a step is a function of (seed, step, sample index), each rank takes its slice,
DDP averages the gradients. Real runs: gloo on CPU, 1 and 2 processes (torch.distributed.run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "jobscripts" / "train_example.py"
ARGS = ["--model", "mlp", "--arg", "width=32", "--arg", "input_dim=24", "--global-batch", "8", "--threads", "1",
        "--warmup", "0", "--json", "--seed", "7"]


def run(nproc: int, iterations: int, ckdir: Path | None = None, every: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    env.pop("LYASCHED_CHECKPOINT_DIR", None)
    env.pop("LYASCHED_GLOBAL_BATCH", None)
    if ckdir is not None:
        env["LYASCHED_CHECKPOINT_DIR"] = str(ckdir)
    argv = [*ARGS, "--iterations", str(iterations)] + (["--checkpoint-every", str(every)] if every else [])
    if nproc == 1:
        cmd = [sys.executable, str(SCRIPT), *argv]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               str(SCRIPT), *argv]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout: {p.stdout[-1500:]}\nstderr: {p.stderr[-3000:]}"
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, p.stdout  # rank 0 only
    return json.loads(lines[0])


@pytest.mark.slow
def test_same_final_loss_on_one_and_two_ranks_and_across_a_resize(tmp_path):
    one = run(1, 10)
    two = run(2, 10)
    assert one["global_batch"] == two["global_batch"] == 8 and two["world_size"] == 2
    assert two["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5, abs=1e-7)
    # 2 ranks for 5 steps (checkpoint), then resumed on 1 rank to 10: the same loss
    d = tmp_path / "a"
    run(2, 5, d, every=5)
    assert (d / "latest").read_text().strip() == "step-4.pt"
    shrunk = run(1, 10, d)
    assert shrunk["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5, abs=1e-7)
    # and the other way: 1 rank, then grown to 2
    d = tmp_path / "b"
    run(1, 5, d, every=5)
    grown = run(2, 10, d)
    assert grown["final_loss"] == pytest.approx(one["final_loss"], rel=1e-5, abs=1e-7)
    # a different seed is a different run (the comparison can fail)
    other = json.loads(subprocess.run(
        [sys.executable, str(SCRIPT), *ARGS[:-1], "8", "--iterations", "10"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}, timeout=300,
    ).stdout.strip().splitlines()[-1])
    assert other["final_loss"] != pytest.approx(one["final_loss"], rel=1e-5, abs=1e-7)
