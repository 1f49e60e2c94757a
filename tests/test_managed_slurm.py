"""Managed partitions on the real Slurm test clusters (marker ``slurm``; docs/managed.md).

The clusters have a partition ``managed`` on the same nodes as ``gpu``, listed in
slurm/templates/lyasched-managed.conf. job_submit.lua takes every GPU batch job submitted there,
by any tool, and the service schedules it; interactive allocations and pass-through accounts are
left to Slurm; bad requests are rejected at submission. The real Python clients (submitit,
dask-jobqueue) are in tests/test_managed_clients.py.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.live import plain
from lyasched.store import records
from lyasched.summary import CostSummary
from test_failsafe_slurm import start_service, stop_service, wait_until, write_config  # noqa: F401 (write_config: test_managed_clients)
from test_serve_slurm import squeue_jobs, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = pytest.mark.slurm

PARTITION = "managed"


def sbatch(as_user, user: str, job_dir: Path, *args: str, script: str = "") -> subprocess.CompletedProcess:
    body = script or 'echo "$(id -un) $SLURM_JOB_NUM_NODES $SLURM_GPUS_ON_NODE"\n'
    path = job_dir / f"job-{time.monotonic_ns()}.sh"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return as_user(user, "sbatch", "--parsable", f"--chdir={job_dir}", "--output=%j.out", *args, str(path),
                   cwd=str(job_dir))


def submitted(proc: subprocess.CompletedProcess, slurm_jobs: list[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    job = proc.stdout.strip().split(";")[0]
    slurm_jobs.append(job)
    return job


def test_the_plugin_takes_batch_gpu_jobs_and_leaves_the_rest(as_user, test_user, job_dir, slurm_jobs, cluster):
    # a GPU batch job in the managed partition: tagged (rigid, its GPU count) and held
    two = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "--gres=gpu:2", "--time=5"), slurm_jobs)
    wide = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "-N2", "--gres=gpu:1", "--time=5"),
                     slurm_jobs)
    per_job = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "--gpus=3", "--time=5"), slurm_jobs)
    # not lyasched's: no GPUs, a pass-through account, another partition
    cpu = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "--time=5"), slurm_jobs)
    passed = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "-A", "lyapass", "--gres=gpu:1",
                              "--time=5"), slurm_jobs) if cluster.kind == "native" else None
    time.sleep(2.5)  # longer than sched_interval: a job that could start would have
    jobs = squeue_jobs([two, wide, per_job])
    for job_id, gpus in ((two, 2), (wide, 2), (per_job, 3)):
        j = jobs[job_id]
        s = CostSummary.decode(j.comment)
        assert (j.state, j.priority, s.plain, s.min_gpus, s.max_gpus) == ("PENDING", 0, True, gpus, gpus), j
    for job_id in filter(None, (cpu, passed)):
        wait_until(f"job {job_id} to run without lyasched",
                   lambda: subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%k"],
                                          capture_output=True, text=True).stdout.strip() in
                   {"RUNNING|(null)", "COMPLETED|(null)", "COMPLETING|(null)"}, timeout=30)
    # the same script again (other name, directives, comments, indentation): the same script key
    again = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "-J", "again", "--gres=gpu:1", "--time=5",
                             script='#SBATCH --nice=0\n# another comment\n\n  echo "$(id -un) $SLURM_JOB_NUM_NODES $SLURM_GPUS_ON_NODE"\n'),
                      slurm_jobs)
    other = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "--gres=gpu:1", "--time=5",
                             script="echo something else\n"), slurm_jobs)
    keys = {i: plain.script_of(CostSummary.decode(j.comment).sig) for i, j in squeue_jobs([two, again, other]).items()}
    assert len(keys[two]) == 16 and keys[again] == keys[two] != keys[other], keys
    # an interactive allocation is not delayed
    t0 = time.monotonic()
    r = as_user(test_user, "srun", "-p", PARTITION, "--gres=gpu:1", "--time=1", "true", timeout=60)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 30
    # bad requests: Slurm's usual one-line rejection, no job left held
    for args, why in ((["--gres=gpu:5"], "Requested node configuration is not available"),
                      (["--gpus=99"], "Requested node configuration is not available"),
                      (["--gres=gpu:1", "--comment=mine"], "--comment is reserved"),
                      (["-p", "gpu,managed"], "cannot list a managed partition together")):
        part = [] if args[0] == "-p" else ["-p", PARTITION]
        r = sbatch(as_user, test_user, job_dir, *part, *args, "--gres=gpu:1" if args[0] == "-p" else "--time=5")
        assert r.returncode != 0 and why in r.stderr, (args, r.stdout, r.stderr)
    # the owner keeps scancel; releasing the hold is the scheduler's
    r = as_user(test_user, "scontrol", "release", two)
    assert r.returncode != 0
    assert as_user(test_user, "scancel", two).returncode == 0
    wait_until("the cancelled job to end", lambda: squeue_jobs([two]).get(two) is None
               or squeue_jobs([two])[two].state == "CANCELLED", timeout=30)


def test_the_service_runs_plain_jobs_as_their_user_and_learns_their_run_times(
        work, job_dir, test_user, as_user, slurm_jobs, cluster):
    cfg = write_config(work, test_user)
    db_path = work / "lyasched.db"
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        script = 'sleep 3; echo "$(id -un) $SLURM_JOB_NUM_NODES $SLURM_GPUS_ON_NODE"\n'
        first = [submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "-J", "sweep", *a, "--time=10",
                                  script=script), slurm_jobs)
                 for a in (["--gres=gpu:2"], ["-N2", "--gres=gpu:1"])]
        done = wait_all(first, timeout=150, log=work / "serve.log")
        assert {j.state for j in done.values()} == {"COMPLETED"}
        outs = {i: (job_dir / f"{i}.out").read_text().split() for i in first}
        assert outs[first[0]] == [test_user, "1", "2"], outs  # as asked: 1 node x 2 GPUs, as its user
        assert outs[first[1]] == [test_user, "2", "1"], outs  # 2 nodes x 1 GPU: the user's shape kept

        def finished() -> list[dict]:
            rows = records.list_jobs(records.open_readonly(db_path))
            return [r for r in rows if r["slurm_id"] in first and r["state"] == "finished"]

        wait_until("the service to record both as finished", lambda: len(finished()) == 2, timeout=60)
        # the next job with the same name, user and GPU count is estimated from them, not from its limit
        later = submitted(sbatch(as_user, test_user, job_dir, "-p", PARTITION, "-J", "sweep", "--gres=gpu:2",
                                 "--time=10", script=script), slurm_jobs)

        wait_all([later], timeout=120, log=work / "serve.log")
        row = next(r for r in records.list_jobs(records.open_readonly(db_path)) if r["slurm_id"] == later)
        assert row["state"] in {"finished", "running", "released"}
        assert row["pred_one"], row
        pred = json.loads(row["pred_one"])
        assert pred[1] is not None and pred[1] < 120, pred  # ~3-5 s learned, far below the 600 s limit
        assert row["user"] == test_user
        shown = cluster.run(test_user, cluster.which("lyastat"), "--db", str(db_path), later, timeout=60)
        assert shown.returncode == 0 and "plain job of a managed partition, 2 GPUs" in shown.stdout, shown
    finally:
        stop_service(svc)
