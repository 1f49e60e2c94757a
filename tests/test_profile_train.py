"""jobscripts/train_example.py: a real DDP run (gloo, 2 processes under torchrun) and a single process."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "jobscripts" / "train_example.py"
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_single_process_without_torchrun():
    p = subprocess.run([sys.executable, str(SCRIPT), "--model", "mlp", "--arg", "width=16", "--batch-per-gpu", "4",
                        "--iterations", "4", "--json"], capture_output=True, text=True, env=ENV, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["world_size"] == 1 and summary["backend"] is None and summary["timed_iterations"] == 2
    assert "mlp: 1 rank(s) x batch 4, 4 iterations" in p.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun not on PATH")
def test_two_ranks_under_torchrun_with_gloo():
    env = {**ENV, "LYASCHED_BATCH_PER_GPU": "4", "LYASCHED_ITERATIONS": "5"}  # the launcher's env interface
    p = subprocess.run(["torchrun", "--standalone", "--nproc-per-node", "2", str(SCRIPT), "--model", "resnet",
                        "--arg", "width=8", "--threads", "1", "--json"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1  # rank 0 only
    s = json.loads(lines[0])
    assert s["world_size"] == 2 and s["backend"] == "gloo" and s["global_batch"] == 8 and s["iterations"] == 5
    assert s["median_s"] > 0 and s["samples_per_s"] > 0
