"""What only the multi-host docker cluster (docker/cluster) can show: DDP across two hosts over the
network, and the service's accounting path (sacct) for jobs that left squeue while it was stopped.
Needs LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker (make test-docker)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.store import records
from test_serve_slurm import serve, squeue_jobs, wait_all, work  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

CTL = "lyasched-ctl"

DDP = """
import os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
master = socket.gethostbyname(os.environ["MASTER_ADDR"])
print(f"rank={dist.get_rank()} world={dist.get_world_size()} host={socket.gethostname()} master={master} "
      f"sum={x.item():g}", flush=True)
dist.destroy_process_group()
"""

SLEEPER = """
import os, sys, time
# Rank 0 appends one line per start of the job (a job started twice shows two), then sleeps.
if os.environ.get("RANK", "0") == "0":
    with open(os.path.join({out!r}, os.environ["SLURM_JOB_ID"] + ".starts"), "a") as f:
        f.write(f"{{time.time()}} {{os.uname().nodename}}\\n")
time.sleep(float(sys.argv[1]))
"""


def sleeper_job(as_user, user: str, job_dir: Path, name: str, seconds: float, gpus: int = 1, nodes: int = 1) -> str:
    """Submit, with lyasub, a lyasched job that sleeps ``seconds`` on ``gpus`` GPUs (held until the service
    starts it); returns its Slurm id. Rank 0 logs each start in JOBID.starts."""
    script = job_dir / "sleeper.py"
    if not script.exists():
        script.write_text(SLEEPER.format(out=str(job_dir)))
    r = as_user(user, "lyasub", "--parsable", "--no-profile", "--db", str(job_dir / f"{user}.db"), "--time", "10",
                "--output", str(job_dir / "%j.out"), "--job-name", name, "--model", "mlp",
                "--global-batch", str(8 * gpus), "--iterations", "3", "--min-gpus", str(gpus), "--max-gpus", str(gpus),
                "--", str(script), str(seconds), cwd=str(job_dir), timeout=120)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().splitlines()[-1]
    assert job.isdigit(), r.stdout
    return job


def starts(job_dir: Path, job: str) -> list[str]:
    f = job_dir / f"{job}.starts"
    return f.read_text().splitlines() if f.exists() else []


def db_rows(db_path: Path) -> dict[str, dict]:
    db = records.open_readonly(db_path)
    try:
        return {r["slurm_id"]: r for r in db.query("select * from jobs")}
    finally:
        db.conn.close()


def test_ddp_rendezvous_across_two_hosts_over_the_network(as_user, test_user, job_dir, slurm_jobs, wait_job,
                                                           cluster_python):
    (job_dir / "ddp.py").write_text(DDP)
    out = job_dir / "ddp.out"
    launch = (f'srun -N2 -n2 --ntasks-per-node=1 bash -c "{cluster_python} -m torch.distributed.run '
              f'--nnodes=2 --nproc_per_node=1 --node_rank=\\$SLURM_NODEID --master_addr=\\$(scontrol show hostnames '
              f'\\$SLURM_JOB_NODELIST | head -n1) --master_port=29511 {job_dir / "ddp.py"}"')
    r = as_user(test_user, "sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--gres=gpu:1", "-o", str(out),
                "--wrap", launch)
    assert r.returncode == 0, r.stderr
    slurm_jobs.append(r.stdout.strip())
    state = wait_job(slurm_jobs[-1], timeout=240)
    text = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", text
    rows = [dict(kv.split("=", 1) for kv in ln.split()) for ln in text.splitlines() if ln.startswith("rank=")]
    assert sorted(r["rank"] for r in rows) == ["0", "1"], text
    assert all(r["world"] == "2" and r["sum"] == "3" for r in rows), text
    assert len({r["host"] for r in rows}) == 2, text  # two containers: two hosts
    master = rows[0]["master"]
    assert not master.startswith("127."), text  # rendezvous over the cluster network, not loopback


def wait_rows(db_path: Path, ids: list[str], pred, timeout: float = 60) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    rows: dict[str, dict] = {}
    while time.monotonic() < deadline:
        rows = db_rows(db_path)
        if all(i in rows and pred(rows[i]) for i in ids):
            return rows
        time.sleep(1)
    pytest.fail(f"service records not as expected: { {i: (rows.get(i) or {}).get('state') for i in ids} }")


def set_min_job_age(seconds: int) -> None:
    """MinJobAge on the controller (the only daemon that uses it), then `scontrol reconfigure`."""
    subprocess.run(["docker", "exec", CTL, "sed", "-i", f"s/^MinJobAge=.*/MinJobAge={seconds}/",
                    "/etc/slurm/slurm.conf"], check=True, timeout=30)
    subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60)


def sacct_elapsed(job_id: str) -> float:
    out = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "ElapsedRaw"], capture_output=True,
                         text=True, check=True, timeout=30).stdout.split()
    return float(out[0])


@pytest.mark.slow
def test_service_reads_sacct_for_jobs_that_left_squeue_while_it_was_stopped(serve, work, job_dir, test_user,
                                                                            as_user, slurm_jobs):
    ids = [sleeper_job(as_user, test_user, job_dir, f"acct{i}", 20) for i in range(2)]
    slurm_jobs.extend(ids)

    proc, db_path = serve()
    wait_all(ids, states={"RUNNING"}, timeout=120, log=work / "serve.log")
    wait_rows(db_path, ids, lambda r: r["state"] == "running")  # and the service saw them run
    proc.send_signal(signal.SIGTERM)  # the service stops while its jobs run...
    assert proc.wait(timeout=60) == 0
    wait_all(ids, timeout=120)  # ...they finish...
    try:
        set_min_job_age(2)  # ...and leave squeue (purged within about a minute)
        deadline = time.monotonic() + 240
        while squeue_jobs(ids) and time.monotonic() < deadline:
            time.sleep(2)
        assert not squeue_jobs(ids), "jobs still in squeue"
    finally:
        set_min_job_age(600)

    db = records.open_readonly(db_path)
    assert {r["state"] for r in db.query(f"select state from jobs where slurm_id in ({','.join(ids)})")} == {"running"}
    db.conn.close()
    proc2, _ = serve()  # a new service on the same database catches up from accounting
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = db_rows(db_path)
        if all(rows.get(i, {}).get("state") == "finished" for i in ids):
            break
        time.sleep(1)
    for i in ids:
        row = rows[i]
        assert row["state"] == "finished" and row["slurm_state"] == "COMPLETED", row
        assert "(from sacct)" in row["reason"], row
        assert row["observed"] == pytest.approx(sacct_elapsed(i), abs=1) and row["observed"] >= 15, row
        assert len(starts(job_dir, i)) == 1
        assert row["started"] and row["ended"] and row["ended"] - row["started"] == pytest.approx(row["observed"], abs=1)
    r = as_user(test_user, "lyastat", "--db", str(db_path), "--json")
    assert r.returncode == 0, r.stderr
    mine = {j["jobid"]: j for j in json.loads(r.stdout)["jobs"]}
    assert all(mine[i]["observed"] and mine[i]["state"] == "COMPLETED" for i in ids), mine
    proc2.send_signal(signal.SIGTERM)
    assert proc2.wait(timeout=60) == 0
    assert "Traceback" not in Path(work / "serve.log").read_text()
