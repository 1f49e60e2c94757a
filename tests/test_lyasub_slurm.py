"""lyasub against the real local Slurm cluster (docs/test-cluster.md), as the test user.

A submitted job is held, owned by the user, with the cost summary in its comment; root
resizes and releases it (what `lyasched serve` does) and the example DDP job runs to
completion under torchrun on one node and across two. Every job is cancelled at teardown.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from lyasched.summary import CostSummary

pytestmark = pytest.mark.slurm

TRAIN = str(Path(__file__).resolve().parent.parent / "jobscripts" / "train_example.py")


@pytest.fixture
def lyasub(as_user, test_user, cluster_python, job_dir, slurm_jobs):
    """Run lyasub as the test user in ``job_dir``; submitted job ids are cleaned up."""

    def run(*args: str, user: str | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        p = as_user(user or test_user, cluster_python, "-m", "lyasched.cli.lyasub", "--db", str(job_dir / "db.sqlite"),
                    "--output", str(job_dir / "out-%j.txt"), *args, cwd=job_dir, timeout=timeout)
        out = p.stdout.strip()
        if p.returncode == 0 and out:
            if out.startswith("{"):
                slurm_jobs.append(json.loads(out)["job_id"])
            elif out.isdigit():
                slurm_jobs.append(out)
            else:  # "Submitted lyasched job N (...)" / "Found existing lyasched job N (...)"
                words = out.split()
                slurm_jobs.append(words[words.index("job") + 1])
        return p

    return run


def squeue_row(job_id: str) -> dict[str, str]:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%u|%T|%r|%D|%b|%N|%k"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    user, state, reason, nodes, tres, nodelist, comment = out.split("|", 6)
    return dict(user=user, state=state, reason=reason, nodes=nodes, tres=tres, nodelist=nodelist, comment=comment)


def resize_and_release(job_id: str, nodes: int, gpus_per_node: int) -> None:
    """What the service does before releasing a job (docs/test-cluster.md, verified on 22.05)."""
    subprocess.run(["scontrol", "update", f"jobid={job_id}", f"NumNodes={nodes}-{nodes}", f"NumTasks={nodes}",
                    f"NumCPUs={nodes}", f"TresPerNode=gres:gpu:{gpus_per_node}"], check=True, timeout=30)
    subprocess.run(["scontrol", "release", job_id], check=True, timeout=30)


BASE = ("--model", "mlp", "--global-batch", "8", "--iterations", "5")
ARGS = ("--", TRAIN, "--device", "cpu", "--threads", "1")


def test_held_job_owned_by_user_with_summary(lyasub, as_user, test_user) -> None:
    p = lyasub(*BASE, "--no-profile", "--json", *ARGS)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    row = squeue_row(d["job_id"])
    assert row["user"] == test_user
    assert row["state"] == "PENDING" and row["reason"].startswith("JobHeld")
    assert row["nodes"] == "1" and row["tres"] == "gres:gpu:1"  # placeholders until the scheduler sizes it
    s = CostSummary.decode(row["comment"])
    assert s.uid == d["uid"] and s.global_batch == 8 and s.iterations == 5 and s.source == "e"
    # only the scheduler (root here) may lift the hold
    r = as_user(test_user, "scontrol", "release", d["job_id"])
    assert r.returncode != 0
    assert squeue_row(d["job_id"])["state"] == "PENDING"
    # resubmitting with the same uid finds the job instead of duplicating it
    again = lyasub(*BASE, "--no-profile", "--uid", d["uid"], "--parsable", *ARGS)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == d["job_id"]


# One node is the 1-node case of the same script; two nodes also check srun spreads torchrun.
@pytest.mark.parametrize("nodes, gpus", [(2, 2)])
def test_released_job_runs_torchrun_as_user(lyasub, wait_job, job_dir, test_user, nodes: int, gpus: int) -> None:
    p = lyasub(*BASE, "--no-profile", "--parsable", *ARGS)
    assert p.returncode == 0, p.stderr
    job_id = p.stdout.strip()
    resize_and_release(job_id, nodes, gpus)
    state = wait_job(job_id, timeout=180)
    out = (job_dir / f"out-{job_id}.txt").read_text()
    assert state == "COMPLETED", out
    row = squeue_row(job_id)
    assert row["user"] == test_user and row["nodes"] == str(nodes)
    assert f"{nodes} node(s) x {gpus} GPU(s), global batch 8, batch per GPU {8 // (nodes * gpus)}" in out
    assert f"mlp: {nodes * gpus} rank(s) x batch {8 // (nodes * gpus)}, 5 iterations" in out
    assert (job_dir / f"out-{job_id}.txt").owner() == test_user


def test_profiling_job_then_cached_profile(lyasub, job_dir) -> None:
    p = lyasub(*BASE, "--json", *ARGS)
    assert p.returncode == 0, p.stderr
    # the test clusters' nodes are typed (a100, t4): a job of any type is profiled on the fastest
    assert "profiling mlp on one a100 GPU: Slurm job" in p.stderr
    d = json.loads(p.stdout)
    assert d["profile_source"] == "profiled" and d["source"] == "m" and d["profile_type"] == "a100"
    assert CostSummary.decode(d["comment"]).alpha == d["alpha"]
    p2 = lyasub(*BASE, "--json", *ARGS)
    assert p2.returncode == 0, p2.stderr
    d2 = json.loads(p2.stdout)
    assert d2["profile_source"] == "cache" and "profiling" not in p2.stderr
    assert (d2["alpha"], d2["beta"]) == (d["alpha"], d["beta"])


def test_bad_input_submits_nothing(lyasub) -> None:
    name = f"lyasub-bad-input-{uuid.uuid4().hex[:8]}"
    p = lyasub("--model", "mlp", "--global-batch", "7", "--iterations", "5", "--min-gpus", "2", "--max-gpus", "6",
               "--job-name", name, *ARGS)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1].startswith("lyasub: error: global batch 7 cannot be split")
    out = subprocess.run(["squeue", "-h", "-t", "all", "-n", name, "-o", "%i"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == ""
