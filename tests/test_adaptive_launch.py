"""launch.sbatch of an adaptive-batch job (lyasub --adaptive-batch), run with fake Slurm tools: the
batch the service wrote into the job's cost summary (its Comment, key cb) reaches the script (rounded to the GPU count),
the base batch without one; a fixed-batch job still refuses a batch its GPUs do not split."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lyasched.job.launcher import AdaptiveLaunch, render, write_script

FAKE_SCONTROL = """#!/bin/bash
if [[ "$*" == "show hostnames "* ]]; then echo n1
elif [[ "$*" == "--oneliner show node "* ]]; then echo "NodeName=$4 NodeAddr=10.0.0.1"
elif [[ "$*" == "show job "* ]]; then
    printf 'JobId=%s JobName=x;cb=999\n   %s\n   WorkDir=/tmp/a Comment=lyasched:v1;cb=777\n' "$3" "$FAKE_COMMENT"
else exit 1; fi
"""
FAKE_SRUN = """#!/bin/bash
while [[ "$1" == --* ]]; do shift; done
exec "$@"
"""
FAKE_TORCHRUN = """#!/bin/bash
env | grep '^LYASCHED_' | sort > "$FAKE_OUT"
"""


def launch(tmp_path: Path, comment: str, gpus: int, adaptive: AdaptiveLaunch | None, batch: int = 64):
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    for name, text in (("scontrol", FAKE_SCONTROL), ("srun", FAKE_SRUN), ("torchrun", FAKE_TORCHRUN)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    script = tmp_path / "job.sbatch"
    write_script(render(["train.py"], global_batch=batch, uid="abcdef0123", torchrun=["torchrun"], adaptive=adaptive),
                 script)
    out = tmp_path / "env"
    env = {"PATH": f"{fake}:/usr/bin:/bin", "FAKE_OUT": str(out), "SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "1",
           "SLURM_GPUS_ON_NODE": str(gpus), "SLURM_JOB_NODELIST": "n1", "SLURM_SUBMIT_DIR": str(tmp_path),
           "FAKE_COMMENT": comment}
    p = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    got = dict(line.split("=", 1) for line in out.read_text().splitlines()) if p.returncode == 0 else {}
    return p, got


AD = AdaptiveLaunch(max_batch=1024, lr_rule="adascale", alpha=0.01, beta=2e-4, max_local=48, knee=12.0)


SUMMARY = "Comment=lyasched:v1;id=abcdef0123;sig=m;b=64;it=9;gmin=1;gmax=8;a=0.01;bt=0.0002;p=9;bpp=4;m0=0;m1=0;src=e"


@pytest.mark.parametrize("comment, gpus, batch", [
    (SUMMARY + ";mb=1024;lr=adascale;cb=256 ", 4, 256),
    (SUMMARY + ";mb=1024;lr=adascale;cb=258", 4, 256),  # rounded down to what 4 GPUs split
    (SUMMARY + ";mb=1024;lr=adascale", 4, 64),  # no batch set by the service: the base batch
    ("", 4, 64),
    ("Comment=somebody-else;cb=128", 4, 64),  # (and a job name or path posing as one is not read: 999, 777)
    (SUMMARY + ";mb=1024;lr=adascale;cb=2", 4, 4),  # never below one sample per GPU
])
def test_adaptive_job_takes_the_service_batch(tmp_path, comment, gpus, batch):
    p, env = launch(tmp_path, comment, gpus, AD)
    assert p.returncode == 0, p.stderr
    assert env["LYASCHED_GLOBAL_BATCH"] == str(batch)
    assert env["LYASCHED_BATCH_PER_GPU"] == str(batch // gpus) and "LYASCHED_LOCAL_BATCH" not in env
    assert env["LYASCHED_BASE_BATCH"] == "64"
    assert (env["LYASCHED_ADAPTIVE"], env["LYASCHED_MAX_BATCH"], env["LYASCHED_LR_RULE"]) == ("1", "1024", "adascale")
    assert (env["LYASCHED_STEP_ALPHA"], env["LYASCHED_STEP_BETA"], env["LYASCHED_MAX_LOCAL_BATCH"]) == ("0.01", "0.0002", "48")
    assert env["LYASCHED_STEP_KNEE"] == "12.0"


def test_fixed_batch_job_ignores_a_chosen_batch_and_checks_the_split(tmp_path):
    p, env = launch(tmp_path, SUMMARY + ";cb=256", 4, None)
    assert p.returncode == 0, p.stderr
    assert (env["LYASCHED_GLOBAL_BATCH"], env["LYASCHED_ADAPTIVE"]) == ("64", "0")
    assert "LYASCHED_MAX_BATCH" not in env
    p, _ = launch(tmp_path, "", 3, None)
    assert p.returncode != 0 and "not divisible by 3 GPUs" in p.stderr
