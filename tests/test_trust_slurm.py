"""A forged cost summary on the real Slurm test cluster (marker ``slurm``; needs `slurm/cluster up`
and LYASCHED_SLURM=1). Unit versions: tests/test_trust.py.

Any user can submit with plain ``sbatch --comment`` and a hand-written summary that passes the
grammar. Here one claims 1% of its model's step time, a model the service's cost table knows
(profiled). Every GPU but one is held by other jobs, an honest job of the same model waits
beside it, shorter than the truth of the forged one and ten times longer than its claim: the
service must start the honest one on the free GPU (it sees the forged job at its model's
profile: `ClusterSnapshot.known`), where believing the claim would start the forged one.
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.store import costtable, records
from lyasched.summary import CostSummary
from reliability.load import cluster_device_keys
from test_serve_slurm import serve, wait_all, work  # noqa: F401 -- fixtures

pytestmark = pytest.mark.slurm

SIG = "forged-test:mlp"
ALPHA, BETA, BATCH = 0.1, 0.01, 8  # the profiled step: 0.18 s at batch 8 on one GPU


def _summary(iterations: int, scale: float) -> str:
    return CostSummary(uid=f"uid-{secrets.token_hex(6)}", sig=SIG, global_batch=BATCH, iterations=iterations,
                       min_gpus=1, max_gpus=1, alpha=ALPHA * scale, beta=BETA * scale, params=100_000).encode()


def _seed(db_path: Path, service_uid: int | None) -> None:
    """The model's profiled entry in the service's cost table, under every device key of the cluster."""
    db = records.open_records(db_path)
    for device in sorted(cluster_device_keys()):
        costtable.put(db, {"signature": SIG, "device_type": device, "model": "mlp", "source": "measured",
                           "alpha": ALPHA, "beta": BETA, "params": 100_000, "bytes_per_param": 4})
    db.conn.close()
    if service_uid:
        for f in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
            if f.exists():
                os.chown(f, service_uid, service_uid)


def _gpu_nodes() -> list[tuple[str, int]]:
    out = subprocess.run(["sinfo", "-h", "-p", "gpu", "-N", "-o", "%N|%G"], capture_output=True, text=True,
                         timeout=30).stdout
    nodes = {}
    for line in out.split():
        name, _, gres = line.partition("|")
        m = re.search(r"gpu:(?:[A-Za-z][\w.-]*:)?(\d+)", gres)
        if m:
            nodes[name] = int(m.group(1))
    return sorted(nodes.items())


def _sbatch(as_user, user: str, job_dir: Path, *args: str) -> str:
    r = as_user(user, "sbatch", "--parsable", "--partition=gpu", "--time=5", f"--chdir={job_dir}", "--output=/dev/null",
                *args, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0]


def test_a_forged_summary_of_a_known_model_does_not_jump_the_queue(serve, work, job_dir, test_user,  # noqa: F811
                                                                   other_user, as_user, slurm_jobs, cluster):
    nodes = _gpu_nodes()
    assert nodes, "no GPU nodes in partition gpu"
    # other users' plain jobs hold every GPU but one (one blocker per node, one GPU short on the last)
    blockers = [_sbatch(as_user, other_user, job_dir, "--nodes=1", f"--nodelist={name}",
                        f"--gres=gpu:{n - (k == len(nodes) - 1)}", "--wrap=sleep 300")
                for k, (name, n) in enumerate(nodes) if n - (k == len(nodes) - 1) > 0]
    slurm_jobs.extend(blockers)
    deadline = time.monotonic() + 30
    while True:
        states = subprocess.run(["squeue", "-h", "-j", ",".join(blockers), "-o", "%T"], capture_output=True,
                                text=True).stdout.split()
        if states and all(s == "RUNNING" for s in states):
            break
        assert time.monotonic() < deadline, f"blockers {blockers}: {states}"
        time.sleep(0.5)

    # truth: 1000 x 0.18 s = 180 s; claimed 1.8 s. The honest job: 100 x 0.18 s = 18 s.
    forged = _sbatch(as_user, test_user, job_dir, "--nodes=1", "--gres=gpu:1", f"--comment={_summary(1000, 0.01)}",
                     "--wrap=sleep 1")
    honest = _sbatch(as_user, test_user, job_dir, "--nodes=1", "--gres=gpu:1", f"--comment={_summary(100, 1.0)}",
                     "--wrap=sleep 1")
    slurm_jobs.extend([forged, honest])
    db_path = work / "lyasched.db"
    _seed(db_path, cluster.service_uid)
    serve()

    wait_all([honest], log=work / "serve.log", timeout=40)  # started on the free GPU, and done
    db = records.open_readonly(db_path)
    starts = [d["slurm_id"] for d in db.query("select slurm_id from decisions where action = 'start' order by time")]
    # the forged job may start on that GPU once the honest one is done (sleep 1), but never before it
    assert starts and starts[0] == honest, starts
