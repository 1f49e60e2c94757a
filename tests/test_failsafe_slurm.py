"""When the service stops, on the real Slurm test cluster (marker ``slurm``; docs/service.md, "When
the service stops"): the service is killed (SIGKILL) while lyasched jobs wait, `lyasched failsafe`
releases them once the lease is stale, they run as their user at what they asked for, and a
restarted service records them as the fail-safe's (none started twice) and schedules the rest.

The jobs wait because another user's plain job holds all 12 GPUs while the service runs; it is
cancelled as the service is killed, so from then on only the service's absence keeps them held.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lyasched.live import failsafe as fs
from lyasched.live import lease as leases
from lyasched.slurm import submit as sub
from lyasched.store import records
from test_serve_slurm import REPO, lyasub, show_job, squeue_jobs, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = pytest.mark.slurm

GRACE = 60  # [failsafe] grace of the test: the least serve and failsafe accept (production default: 5 slots, at least 60 s)


def write_config(work: Path, test_user: str) -> Path:
    cfg = work / "config.toml"
    cfg.write_text(
        "[service]\n"
        f"slot_seconds = 2\nrelease_grace = 20\ndb = {json.dumps(str(work / 'lyasched.db'))}\n"
        f"users = [{json.dumps(test_user)}]\nlog_level = \"INFO\"\n"
        '[policy]\nname = "lyapunov"\n[slurm]\nbackend = "cli"\n'
        f"[failsafe]\ngrace = {GRACE}\n"
    )
    return cfg


def start_service(cluster, cfg: Path, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "LYASCHED_SLURM_BACKEND"}
    with open(log, "w") as out:
        return cluster.popen(cluster.service_user, cluster.which("lyasched"), "serve", "--config", str(cfg),
                             stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)


def fill_the_gpus(as_user, other_user: str, job_dir: Path, slurm_jobs: list[str]) -> str:
    """Another user's plain job on all 12 GPUs, running: lyasched jobs wait behind it."""
    r = as_user(other_user, "sbatch", "--parsable", "--nodes=3", "--gres=gpu:4", "--time=5",
                f"--chdir={job_dir}", "--output=/dev/null", "--wrap", "sleep 300")
    assert r.returncode == 0, r.stderr
    plain = r.stdout.strip()
    slurm_jobs.append(plain)
    wait_until("the plain job to run", lambda: squeue_jobs_any(plain) == "RUNNING")
    return plain


def wait_recorded_waiting(db_path: Path, ids) -> None:
    """Until the service's records list every one of ``ids`` as waiting."""
    want = set(ids)

    def recorded() -> bool:
        try:
            rows = records.list_jobs(records.open_readonly(db_path))
        except Exception:  # noqa: BLE001 - not created yet (the service is starting)
            return False
        return {r["slurm_id"] for r in rows if r["state"] == "waiting"} >= want

    wait_until("the service to record the jobs", recorded, timeout=60)


def stop_service(proc) -> None:
    """End a service a test started, frozen or not (SIGCONT, SIGTERM, then SIGKILL after 30 s)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGCONT)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def run_failsafe(cluster, cfg: Path) -> dict:
    r = cluster.run(cluster.service_user, cluster.which("lyasched"), "failsafe", "--config", str(cfg), "--json",
                    timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def wait_until(what, check, timeout: float = 60, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


def test_killed_service_fails_open_to_slurm_and_takes_back_over(work, job_dir, test_user, other_user, as_user,
                                                                 slurm_jobs, cluster):
    fail_open_and_back(work, job_dir, test_user, other_user, as_user, slurm_jobs, cluster,
                       stop=lambda svc: (svc.send_signal(signal.SIGKILL), svc.wait(timeout=30)), restart=lambda: None,
                       label="process SIGKILLed")


def fail_open_and_back(work, job_dir, test_user, other_user, as_user, slurm_jobs, cluster, stop, restart,
                       label: str) -> dict:
    """The scenario: jobs wait, ``stop(svc)`` takes the service away (its process, or its host),
    the fail-safe releases them after the grace, they run as the user, ``restart()`` brings the
    host back and a new service adopts them and schedules a late job. Returns the timing."""
    cfg = write_config(work, test_user)
    db_path, lease_path = work / "lyasched.db", work / "lease.json"
    # another user's plain job takes every GPU: the service sees the lyasched jobs but cannot start them
    plain = fill_the_gpus(as_user, other_user, job_dir, slurm_jobs)

    asks = {  # (lyasub options, what the fail-safe must give: nodes, GPUs per node)
        "one": (("--min-gpus", "1", "--max-gpus", "4", "--global-batch", "8"), (1, 1)),
        "wide": (("--min-gpus", "8", "--max-gpus", "8", "--global-batch", "16"), (2, 4)),
        "two": (("--min-gpus", "2", "--max-gpus", "2", "--global-batch", "8"), (1, 2)),
    }
    with ThreadPoolExecutor(3) as pool:
        ids = dict(zip(asks, pool.map(
            lambda n: lyasub(as_user, test_user, job_dir, "--job-name", n, "--model", "mlp", "--iterations", "3",
                             *asks[n][0]), asks)))
    slurm_jobs.extend(ids.values())

    svc = start_service(cluster, cfg, work / "serve1.log")

    wait_recorded_waiting(db_path, ids.values())
    first = leases.read(lease_path)
    assert first is not None and first.role == leases.SERVICE and first.slot_seconds == 2

    # the service dies (no clean stop), and the GPUs come free at the same moment
    stop(svc)
    stopped = time.time()
    subprocess.run(["scancel", plain], check=True, timeout=30)

    # the timer's first run comes while the lease is still fresh: nothing happens
    res = run_failsafe(cluster, cfg)
    assert res["action"] == "none" and "lease fresh" in res["why"], res
    assert all(j.held_by_service for j in squeue_jobs(list(ids.values())).values())

    # the timer (here every 2 s): once the lease is older than the grace, the jobs are released
    res = wait_until("the fail-safe to act", lambda: (r := run_failsafe(cluster, cfg))["action"] == "released" and r,
                     timeout=GRACE + 30, every=2)
    released_at = time.time()
    assert {e["job_id"] for e in res["released"]} == set(ids.values()), res
    assert res["epoch"] == first.epoch + 1 and not res["failed"] and not res["skipped"]

    def all_started():
        jobs = squeue_jobs(list(ids.values()))
        return len(jobs) == len(ids) and all(not j.pending for j in jobs.values()) and jobs

    started = wait_until("the released jobs to start", all_started, timeout=90, every=0.25)
    running_at = time.time()
    timing = {"stop_to_release_s": round(released_at - stopped, 1), "stop_to_all_running_s": round(running_at - stopped, 1),
              "grace_s": GRACE, "timer_period_s": 2, "stop": label, "cluster": cluster.kind}
    print("FAILSAFE-TIMING " + json.dumps(timing))
    (job_dir.parent / f"failsafe-timing-{int(stopped)}.json").write_text(json.dumps(timing))

    logged = {e["job_id"]: e for e in leases.read_log(leases.log_path(lease_path))}
    assert set(logged) == set(ids.values()), logged
    for name, job_id in ids.items():
        n, per = asks[name][1]
        info = show_job(job_id)
        assert info.user == test_user
        assert (started[job_id].num_nodes, started[job_id].gpus_per_node) == (n, per) or \
            (info.num_nodes, info.gpus_per_node) == (n, per), (name, info)
        out = subprocess.run(sub.scontrol_show_job_command(job_id), capture_output=True, text=True, timeout=30).stdout
        note = sub.parse_scontrol_show(out).get("AdminComment", "")
        entry = logged[job_id]
        assert entry["by"].startswith("failsafe@") and "did not renew its lease" in entry["why"], entry
        if cluster.service_user == "root":  # a Slurm administrator: the note is in the job itself
            assert entry["admin_comment"] is True
            assert note.startswith(fs.ADMIN_TAG) and "did not renew its lease" in note, note
        else:  # an Operator may release but not set AdminComment: released anyway, the log says so
            assert entry["admin_comment"] is False and "denied" in entry["admin_comment_error"], entry

    # a job submitted while the service is still away (the fail-safe's next run is not needed)
    late = lyasub(as_user, test_user, job_dir, "--job-name", "late", "--model", "mlp", "--iterations", "3",
                  "--min-gpus", "1", "--max-gpus", "1", "--global-batch", "8")
    slurm_jobs.append(late)

    # the service comes back: it takes the lease back, records the fail-safe's jobs, schedules the late one
    restart()
    svc2 = start_service(cluster, cfg, work / "serve2.log")
    all_ids = [*ids.values(), late]
    done = wait_all(all_ids, log=work / "serve2.log")
    assert {i: j.state for i, j in done.items()} == {i: "COMPLETED" for i in all_ids}

    def followed_to_the_end() -> bool:  # the service's next slot sees the last one finish
        rows = {r["slurm_id"]: r for r in records.list_jobs(records.open_readonly(db_path))}
        return all(rows.get(i, {}).get("state") == "finished" for i in all_ids)

    wait_until("the records to follow the jobs to the end", followed_to_the_end, timeout=30)
    svc2.send_signal(signal.SIGTERM)
    assert svc2.wait(timeout=30) == 0
    for job_id in all_ids:
        assert (job_dir / f"{job_id}.user").read_text().strip() == test_user  # `id -un` inside the job

    back = leases.read(lease_path)
    assert back.role == leases.SERVICE and back.epoch == first.epoch + 2
    db = records.open_readonly(db_path)
    decisions = list(db.query("select slurm_id, action from decisions where action in ('start', 'failsafe')"))
    assert sorted((d["slurm_id"], d["action"]) for d in decisions) == sorted(
        [(i, "failsafe") for i in ids.values()] + [(late, "start")])  # none started twice
    rows = {r["slurm_id"]: r for r in records.list_jobs(db)}
    assert all(rows[i]["state"] == "finished" for i in all_ids)
    assert records.consistency_problems(db) == []
    log2 = (work / "serve2.log").read_text()
    assert "taken with epoch" in log2 and "Traceback" not in log2
    return timing


def squeue_jobs_any(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True,
                          timeout=30).stdout.strip()
