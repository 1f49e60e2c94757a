"""`lyasched serve` on the real Slurm test cluster (issue 4's acceptance tests).

Jobs are submitted with `lyasub` by the unprivileged test user, the service (root, 2 s slots,
its own database) resizes and releases them, they run DDP (gloo on CPU) over Slurm's fake
GPUs, and `lyastat` shows predicted vs observed run times. Needs `slurm/cluster up` and
LYASCHED_SLURM=1. The service schedules only the test user's jobs (service.users).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.slurm import query as q
from lyasched.store import records
from conftest import CLUSTER

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[1]
TRAIN = REPO / "jobscripts" / "train_example.py"
FINAL = q.TERMINAL_STATES

WRAPPER = """\
import os, runpy, subprocess, sys
# Rank 0 records which Unix user the job really ran as, then trains.
if os.environ.get("RANK", "0") == "0":
    who = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join({out!r}, os.environ["SLURM_JOB_ID"] + ".user"), "w") as f:
        f.write(who + "\\n")
sys.argv = [{train!r}] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


def squeue_jobs(ids: list[str]) -> dict[str, q.SlurmJob]:
    out = subprocess.run(q.squeue_args(job_ids=ids), capture_output=True, text=True, timeout=30).stdout
    return {j.job_id: j for j in q.parse_squeue(out)}


def show_job(job_id: str) -> q.SlurmJob:
    out = subprocess.run(q.show_job_args(job_id), capture_output=True, text=True, timeout=30).stdout
    return q.parse_show_job(out)[0]


@pytest.fixture
def work(job_dir: Path, cluster) -> Path:
    d = job_dir / "svc"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    if cluster.service_uid:  # the service's account writes its database there
        os.chown(d, cluster.service_uid, cluster.service_uid)
    (job_dir / "train.py").write_text(WRAPPER.format(out=str(job_dir), train=str(TRAIN)))
    (job_dir / "train.py").chmod(0o644)
    return d


@pytest.fixture
def serve(work: Path, test_user: str, slurm_backend: str, cluster):
    """Start `lyasched serve` in the background (2 s slots) as the cluster's service account, with
    each Slurm backend (cli, pyslurm);
    stop it with SIGTERM at teardown."""
    procs: list[subprocess.Popen] = []

    def start(**service) -> tuple[subprocess.Popen, Path]:
        cfg = work / "config.toml"
        settings = {"slot_seconds": 2, "release_grace": 20, "db": str(work / "lyasched.db"), "users": [test_user],
                    "log_level": "INFO", **service}
        cfg.write_text("[service]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
                       + '[policy]\nname = "lyapunov"\n' + f'[slurm]\nbackend = "{slurm_backend}"\n')
        log = open(work / "serve.log", "w")
        env = {k: v for k, v in os.environ.items() if k != "LYASCHED_SLURM_BACKEND"}
        p = cluster.popen(cluster.service_user, cluster.which("lyasched"), "serve", "--config", str(cfg),
                          stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        procs.append(p)
        return p, work / "lyasched.db"

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def lyasub(as_user, user: str, job_dir: Path, *args: str) -> str:
    r = as_user(
        user, CLUSTER.which("lyasub"), "--parsable", "--no-profile", "--db", str(job_dir / f"{user}.db"),
        "--time", "5", "--output", str(job_dir / "%j.out"), *args, "--", str(job_dir / "train.py"), "--model", "mlp",
        cwd=str(job_dir), timeout=120,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip().splitlines()[-1]
    assert job_id.isdigit(), r.stdout
    return job_id


def wait_all(ids: list[str], states=FINAL, timeout: float = 150, log: Path | None = None) -> dict[str, q.SlurmJob]:
    deadline = time.monotonic() + timeout
    jobs: dict[str, q.SlurmJob] = {}
    while time.monotonic() < deadline:
        jobs = squeue_jobs(ids)
        if len(jobs) == len(ids) and all(j.state in states for j in jobs.values()):
            return jobs
        time.sleep(1)
    tail = "\n".join(log.read_text().splitlines()[-30:]) if log and log.exists() else ""
    pytest.fail("jobs not done in time: " + ", ".join(f"{i}:{jobs[i].state if i in jobs else '?'}" for i in ids)
                + ("\nservice log:\n" + tail if tail else ""))


def test_six_lyasub_jobs_run_as_the_user_one_across_two_nodes(serve, work, job_dir, test_user, as_user, slurm_jobs,
                                                              slurm_backend):
    small = [("--job-name", f"small{i}", "--model", "mlp", "--global-batch", "8", "--iterations", "3",
              "--max-gpus", "2") for i in range(5)]  # small jobs: 1..2 GPUs
    # Wants more GPUs than a node has (4): the policy must place it on two nodes.
    wide = ("--job-name", "big", "--model", "mlp", "--global-batch", "16", "--iterations", "3",
            "--min-gpus", "8", "--max-gpus", "8")
    with ThreadPoolExecutor(6) as pool:  # lyasub starts Python and costs the model: submit side by side
        ids = list(pool.map(lambda a: lyasub(as_user, test_user, job_dir, *a), [*small, wide]))
    big = ids[-1]
    slurm_jobs.extend(ids)
    held = squeue_jobs(ids)
    assert all(j.held_by_service for j in held.values()), {i: (j.state, j.reason) for i, j in held.items()}

    proc, db_path = serve()
    done = wait_all(ids, log=work / "serve.log")
    assert {i: j.state for i, j in done.items()} == {i: "COMPLETED" for i in ids}, (work / "serve.log").read_text()

    for i in ids:
        info = show_job(i)
        assert info.user == test_user  # Slurm's UserId
        assert (job_dir / f"{i}.user").read_text().strip() == test_user  # what `id -un` said inside the job
    assert done[big].num_nodes == 2 and len(done[big].nodes) == 2 and done[big].gpus == 8

    # lyastat (as the user) shows predicted vs observed times once the service has seen them finish.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r = as_user(test_user, "lyastat", "--db", str(db_path), "--json")
        assert r.returncode == 0, r.stderr
        mine = {j["jobid"]: j for j in json.loads(r.stdout)["jobs"]}
        if all(mine.get(i, {}).get("observed") is not None for i in ids):
            break
        time.sleep(1)
    assert set(ids) <= set(mine)
    for i in ids:
        assert mine[i]["predicted"] > 0 and mine[i]["observed"] > 0 and mine[i]["user"] == test_user
        assert mine[i]["state"] == "COMPLETED" and mine[i]["gpus"] >= 1
    assert mine[big]["gpus"] == 8 and len(mine[big]["nodes"]) == 2
    table = as_user(test_user, "lyastat", "--db", str(db_path)).stdout
    assert table.splitlines()[0].split()[:9] == ["JOBID", "USER", "NAME", "STATE", "GPUS", "NODES", "PRED", "OBS", "WAIT"]
    assert any(ln.split()[0] == big and "node" in ln for ln in table.splitlines()[1:])

    # SIGTERM: the service stops cleanly.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    log = (work / "serve.log").read_text()
    assert "lyasched serve: stopped" in log and "Traceback" not in log
    assert f"Slurm backend: {slurm_backend} (configured" in log
    db = records.open_readonly(db_path)
    slots = list(db.query("select duration, error from slots"))
    assert slots and not any(s["error"] for s in slots)


def test_gpus_held_by_other_jobs_are_respected(serve, work, job_dir, test_user, other_user, as_user, slurm_jobs):
    # A plain (non-lyasched) job of another user takes 3 of the 4 GPUs on every node: 3 left, one per node.
    r = as_user(other_user, "sbatch", "--parsable", "--nodes=3", "--gres=gpu:3", "--time=5",
                f"--chdir={job_dir}", "--output=/dev/null", "--wrap", "sleep 300")
    assert r.returncode == 0, r.stderr
    plain = r.stdout.strip()
    slurm_jobs.append(plain)
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(["squeue", "-h", "-j", plain, "-o", "%T"], capture_output=True, text=True).stdout.strip()
        if out == "RUNNING":
            break
        assert time.monotonic() < deadline, f"plain job {plain} is {out}"
        time.sleep(0.5)

    wide = lyasub(as_user, test_user, job_dir, "--job-name", "wide", "--model", "mlp", "--global-batch", "8",
                  "--iterations", "3", "--min-gpus", "4", "--max-gpus", "4")
    one = lyasub(as_user, test_user, job_dir, "--job-name", "one", "--model", "mlp", "--global-batch", "8",
                 "--iterations", "3", "--min-gpus", "1", "--max-gpus", "1")
    slurm_jobs.extend([wide, one])
    _, db_path = serve()

    # The 1-GPU job fits in what is left and runs; the 4-GPU one must stay held meanwhile.
    assert wait_all([one], log=work / "serve.log")[one].state == "COMPLETED"
    time.sleep(4)  # two more slots
    j = squeue_jobs([wide])[wide]
    assert j.pending and j.held_by_service, (j.state, j.reason)
    db = records.open_readonly(db_path)
    starts = {d["slurm_id"]: d for d in db.query("select * from decisions where action = 'start'")}
    assert wide not in starts and one in starts
    for s in db.query("select free from slots"):
        assert sum(json.loads(s["free"]).values()) <= 3  # never more free GPUs than the plain job left

    # Once the plain job ends, the service gives the wide job its 4 GPUs.
    subprocess.run(["scancel", plain], check=True, timeout=30)
    done = wait_all([wide], timeout=90, log=work / "serve.log")
    assert done[wide].state == "COMPLETED" and done[wide].gpus == 4
