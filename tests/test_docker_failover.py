"""The service's host goes away, on the docker cluster (the real daemons, the service in its own
container as its account; docs/service.md, "When the service stops"):

- its container stopped while jobs wait: the fail-safe (run from the login host, as the service
  account) releases them after the grace, they run as their user at their request; the container
  comes back, a new service adopts them and schedules a late job (none started twice);
- a standby on another host (login) takes over within 3 slots when the active is frozen (SIGSTOP:
  a host that hangs); the old active, woken, is fenced and does not act; restarted as a standby it
  stays one;
- the fail-safe and the frozen service waking at the same moment: every job released once, by
  exactly one of them.

Each test prints a ``FAILOVER`` line with its measured times (docs/reliability.md reports them).
Needs LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker (make test-docker)."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import CLUSTER, ClusterProcess
from lyasched.live import lease as leases
from lyasched.store import records
from test_docker_cluster import sleeper_job, starts
from test_failsafe_slurm import GRACE, fail_open_and_back, fill_the_gpus, run_failsafe, start_service, stop_service, \
    wait_recorded_waiting, wait_until, write_config
from test_serve_slurm import REPO, squeue_jobs, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

SLOT = 2.0  # the tests' slot (write_config)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def wait_host(container: str, timeout: float = 90) -> None:
    """The container answers Slurm as the service account (munged up again after a start)."""
    wait_until(f"{container} to reach Slurm", lambda: docker("exec", "-u", CLUSTER.service_user, container,
                                                             "squeue", "-h", check=False).returncode == 0,
               timeout=timeout, every=1)


@pytest.fixture
def svc_host_back():
    """The service's container is running again at teardown, whatever the test did to it."""
    yield
    docker("start", CLUSTER.service_host, check=False)
    wait_host(CLUSTER.service_host)


def report(what: str, **figures) -> None:
    print("FAILOVER " + json.dumps({"test": what, **figures}))


def decided(db_path: Path) -> dict[str, list[str]]:
    """Slurm id -> the actions that started it (``start`` by a service, ``failsafe`` adopted)."""
    db = records.open_readonly(db_path)
    try:
        out: dict[str, list[str]] = {}
        for d in db.query("select slurm_id, action from decisions where action in ('start', 'failsafe') order by id"):
            out.setdefault(d["slurm_id"], []).append(d["action"])
        assert records.consistency_problems(db) == []
        return out
    finally:
        db.conn.close()


def test_service_container_stopped_fails_open_and_comes_back(work, job_dir, test_user, other_user, as_user,
                                                             slurm_jobs, cluster, svc_host_back):
    def stop(svc) -> None:  # the host goes: every process in it, the service's included
        docker("stop", "-t", "1", cluster.service_host)
        svc.wait(timeout=30)

    def restart() -> None:
        docker("start", cluster.service_host)
        wait_host(cluster.service_host)

    timing = fail_open_and_back(work, job_dir, test_user, other_user, as_user, slurm_jobs, cluster, stop=stop,
                                restart=restart, label="service container stopped")
    report("container-stopped", **timing)


def test_standby_on_another_host_takes_over_and_the_woken_active_is_fenced(work, job_dir, test_user, as_user,
                                                                           slurm_jobs, cluster):
    cfg = write_config(work, test_user)
    db_path, lease_path = work / "lyasched.db", work / "lease.json"
    active = start_service(cluster, cfg, work / "active.log")
    first = wait_until("the active to take the lease", lambda: leases.read(lease_path), timeout=60)
    assert first.holder.startswith("svc:") and first.epoch == 1
    with open(work / "standby.log", "w") as out:  # same config and shared storage, on the login host
        standby = ClusterProcess(cluster.login, cluster.service_user,
                                 ["lyasched", "serve", "--config", str(cfg), "--standby"], str(REPO), out,
                                 subprocess.STDOUT)
    procs = [active, standby]
    try:
        a = sleeper_job(as_user, test_user, job_dir, "before", 2)
        slurm_jobs.append(a)
        wait_all([a], timeout=120, log=work / "active.log")
        time.sleep(3 * SLOT)
        assert "taken with epoch" not in (work / "standby.log").read_text()  # the active renews: it stands by

        active.send_signal(signal.SIGSTOP)  # the active's host hangs
        frozen = time.time()
        lease = wait_until("the standby to take the lease",
                           lambda: (cur := leases.read(lease_path)) is not None and cur.epoch == 2 and cur, timeout=30,
                           every=0.1)
        took = time.time() - frozen
        assert lease.holder.startswith("login:") and lease.role == leases.SERVICE

        b = [sleeper_job(as_user, test_user, job_dir, f"during{k}", 2) for k in range(2)]
        slurm_jobs.extend(b)
        wait_all(b, timeout=120, log=work / "standby.log")

        active.send_signal(signal.SIGCONT)  # it wakes up with epoch 1: it must see epoch 2 and stand by
        woke = wait_until("the woken active to see it lost the lease",
                          lambda: "lost to" in (work / "active.log").read_text(), timeout=30)
        c = sleeper_job(as_user, test_user, job_dir, "after", 2)
        slurm_jobs.append(c)
        wait_all([c], timeout=120, log=work / "standby.log")

        active.send_signal(signal.SIGKILL)  # the admin restarts it, as the standby it now is
        active.wait(timeout=30)
        with open(work / "restarted.log", "w") as out:
            restarted = ClusterProcess(cluster.service_host, cluster.service_user,
                                       ["lyasched", "serve", "--config", str(cfg), "--standby"], str(REPO), out,
                                       subprocess.STDOUT)
        procs.append(restarted)
        d = sleeper_job(as_user, test_user, job_dir, "last", 2)
        slurm_jobs.append(d)
        wait_all([d], timeout=120, log=work / "standby.log")
        time.sleep(3 * SLOT)
        end = leases.read(lease_path)
        assert end.epoch == 2 and end.holder == lease.holder  # nobody took it from the live standby
        assert "taken with epoch" not in (work / "restarted.log").read_text()

        ids = [a, *b, c, d]
        got = decided(db_path)
        assert {i: got.get(i) for i in ids} == {i: ["start"] for i in ids}  # each started once
        assert all(len(starts(job_dir, i)) == 1 for i in ids), {i: starts(job_dir, i) for i in ids}
        assert woke and "Traceback" not in (work / "active.log").read_text() + (work / "standby.log").read_text()
        report("standby-takeover", frozen_to_taken_s=round(took, 1), slots=round(took / SLOT, 2), slot_s=SLOT,
               takeover_slots=2, jobs=len(ids), started_twice=0)
    finally:
        for p in procs:
            stop_service(p)


@pytest.mark.parametrize("order", ["together", "failsafe-first"])
def test_failsafe_and_the_woken_service_at_the_same_moment(order, work, job_dir, test_user, other_user, as_user,
                                                           slurm_jobs, cluster):
    """``together``: SIGCONT and the fail-safe's run at one barrier (whichever takes the lease lock
    first wins); ``failsafe-first``: the service wakes the moment the fail-safe's run returns (it
    released everything): the woken service is fenced, takes the lease back and adopts."""
    cfg = write_config(work, test_user)
    db_path, lease_path = work / "lyasched.db", work / "lease.json"
    plain = fill_the_gpus(as_user, other_user, job_dir, slurm_jobs)
    ids = [sleeper_job(as_user, test_user, job_dir, f"w{k}", 2, gpus=g) for k, g in enumerate((1, 2, 4))]
    slurm_jobs.extend(ids)
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        wait_recorded_waiting(db_path, ids)
        svc.send_signal(signal.SIGSTOP)  # frozen with the jobs waiting
        subprocess.run(["scancel", plain], check=True, timeout=30)
        renewed = leases.read(lease_path).renewed_at
        time.sleep(max(0.0, renewed + GRACE + 1 - time.time()))  # the lease is stale now

        go = threading.Barrier(2)
        out: dict[str, object] = {}

        def wake() -> None:
            go.wait()
            if order == "failsafe-first":
                done.wait(timeout=120)
            svc.send_signal(signal.SIGCONT)

        def failsafe() -> None:
            go.wait()
            out["res"] = run_failsafe(cluster, cfg)
            done.set()

        done = threading.Event()
        threads = [threading.Thread(target=wake), threading.Thread(target=failsafe)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        res = out["res"]
        assert isinstance(res, dict)
        if order == "failsafe-first":
            assert res["action"] == "released" and len(res["released"]) == len(ids), res
        final = wait_all(ids, timeout=150, log=work / "serve.log")
        assert {i: j.state for i, j in final.items()} == {i: "COMPLETED" for i in ids}

        def followed() -> bool:
            rows = {r["slurm_id"]: r for r in records.list_jobs(records.open_readonly(db_path))}
            return all(rows.get(i, {}).get("state") == "finished" for i in ids)

        wait_until("the records to follow the jobs to the end", followed, timeout=30)
        released = {e["job_id"] for e in res["released"]}
        got = decided(db_path)
        # each job once, by exactly one of them: the fail-safe's (adopted) or the service's own start
        assert {i: got.get(i) for i in ids} == {i: ["failsafe"] if i in released else ["start"] for i in ids}, \
            (res["action"], released, got)
        assert all(len(starts(job_dir, i)) == 1 for i in ids), {i: starts(job_dir, i) for i in ids}
        assert "Traceback" not in (work / "serve.log").read_text()
        report(f"failsafe-vs-waking-service ({order})", failsafe_action=res["action"], released_by_failsafe=len(released),
               started_by_service=len(ids) - len(released), started_twice=0)
    finally:
        stop_service(svc)
