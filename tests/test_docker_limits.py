"""Slurm's GPU limits honoured by the service, on the docker cluster (slurmdbd, associations and
QOS enforced: docker/render.py). A QOS with ``MaxTRESPerUser=gres/gpu=2`` is the test user's
default; three one-GPU lyasched jobs wait. The service starts two, keeps the third held (never
released into the limit, so never pending with Slurm's ``QOSMaxGRESPerUser``), says why in its
record and in `lyastat`, and starts it when a GPU of the user's comes free. Unit tests:
tests/test_limits.py. Needs LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker (make test-docker)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from lyasched.live.limits import REASON
from lyasched.store import records
from test_docker_cluster import sleeper_job, starts
from test_failsafe_slurm import start_service, wait_until, write_config
from test_serve_slurm import squeue_jobs, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = [pytest.mark.slurm, pytest.mark.docker]

QOS = "lyagpu2"
CTL = "lyasched-ctl"


def sacctmgr(*args: str) -> None:
    r = subprocess.run(["docker", "exec", CTL, "sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def qos_limit(test_user):
    sacctmgr("add", "qos", QOS, "set", "MaxTRESPerUser=gres/gpu=2")
    sacctmgr("modify", "user", test_user, "set", f"qos+={QOS}", f"defaultqos={QOS}")
    yield QOS
    sacctmgr("modify", "user", test_user, "set", "defaultqos=normal", f"qos-={QOS}")
    sacctmgr("delete", "qos", QOS)


def test_service_never_releases_a_job_into_a_qos_limit(work, job_dir, test_user, as_user, slurm_jobs, cluster,
                                                       qos_limit):
    cfg = write_config(work, test_user)  # 2 s slots; [slurm] limits: auto (accounting is on here)
    db_path = work / "lyasched.db"
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        ids = [sleeper_job(as_user, test_user, job_dir, f"q{k}", 20) for k in range(3)]
        slurm_jobs.extend(ids)
        seen_running: list[int] = []
        pending_reasons: set[str] = set()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            jobs = squeue_jobs(ids)
            seen_running.append(sum(j.state == "RUNNING" for j in jobs.values()))
            pending_reasons |= {j.reason for j in jobs.values() if j.pending and not j.held_by_service}
            if len(jobs) == 3 and all(j.finished for j in jobs.values()):
                break
            time.sleep(1)
        done = wait_all(ids, timeout=10, log=work / "serve.log")
        assert {i: j.state for i, j in done.items()} == {i: "COMPLETED" for i in ids}
        assert max(seen_running) == 2, seen_running  # the limit was reached and never exceeded
        assert not any(r.startswith("QOS") for r in pending_reasons), pending_reasons  # never released into it

        db = records.open_readonly(db_path)
        try:
            kept = [d for d in db.query("select * from decisions where action = 'start'")]
            assert sorted(d["slurm_id"] for d in kept) == sorted(ids)  # each started once
            assert records.consistency_problems(db) == []
        finally:
            db.conn.close()
        log = (work / "serve.log").read_text()
        third = [i for i in ids if f"job {i}: not started: {REASON}: QOS {QOS} MaxTRESPerUser gres/gpu=2 (2 held)"
                 in log]
        assert len(third) == 1, log[-3000:]  # the one kept back, and why
        assert all(len(starts(job_dir, i)) == 1 for i in ids)
    finally:
        svc.terminate()
        svc.wait(timeout=30)


def test_lyastat_shows_the_limit_keeping_a_job_back(work, job_dir, test_user, as_user, slurm_jobs, cluster,
                                                    qos_limit):
    cfg = write_config(work, test_user)
    db_path = work / "lyasched.db"
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        ids = [sleeper_job(as_user, test_user, job_dir, f"s{k}", 60, gpus=g) for k, g in enumerate((2, 1))]
        slurm_jobs.extend(ids)
        wait_all(ids[:1], states={"RUNNING"}, timeout=90, log=work / "serve.log")

        def kept_back():
            rows = {r["slurm_id"]: r for r in records.list_jobs(records.open_readonly(db_path))}
            return str(rows.get(ids[1], {}).get("reason") or "").startswith(REASON) and rows

        wait_until("the second job's record to name the limit", kept_back, timeout=30)
        r = as_user(test_user, "lyastat", "--db", str(db_path), "--json", ids[1])
        assert r.returncode == 0, r.stderr
        shown = json.dumps(json.loads(r.stdout))
        assert f"QOS {QOS} MaxTRESPerUser gres/gpu=2 (2 held)" in shown, shown
        assert squeue_jobs([ids[1]])[ids[1]].held_by_service  # still held: no GPU kept idle for it
    finally:
        svc.terminate()
        svc.wait(timeout=30)


@pytest.fixture
def shares_3_to_1(test_user, other_user):
    sacctmgr("modify", "user", test_user, "set", "fairshare=3")
    sacctmgr("modify", "user", other_user, "set", "fairshare=1")
    yield
    for u in (test_user, other_user):
        sacctmgr("modify", "user", u, "set", "fairshare=1")


def test_the_tenants_shares_are_slurms_fair_share_tree(work, job_dir, test_user, other_user, as_user, slurm_jobs,
                                                       cluster, shares_3_to_1):
    cfg = write_config(work, test_user)
    text = cfg.read_text().replace(f"users = [{json.dumps(test_user)}]",
                                   f"users = [{json.dumps(test_user)}, {json.dumps(other_user)}]")
    assert text != cfg.read_text()
    cfg.write_text(text)  # no [tenants] shares: the service reads sshare
    db_path = work / "lyasched.db"
    svc = start_service(cluster, cfg, work / "serve.log")
    try:
        ids = [sleeper_job(as_user, u, job_dir, f"t{k}", 5) for k, u in enumerate((test_user, other_user))]
        slurm_jobs.extend(ids)

        def book():
            r = as_user(test_user, "lyastat", "--db", str(db_path), "--tenants", "--json")
            if r.returncode:
                return None
            got = json.loads(r.stdout)
            tenants = (got.get("tenants") or {}).get("tenants") or {}  # {"tenants": the book}
            return tenants if test_user in tenants and other_user in tenants else None

        tenants = wait_until("lyastat --tenants to show both users", book, timeout=90)
        ratio = tenants[test_user]["share"] / tenants[other_user]["share"]
        assert ratio == pytest.approx(3.0), tenants  # fairshare=3 vs 1 in the same account
        assert "tenants' shares from Slurm's fair-share tree" in (work / "serve.log").read_text()
        wait_all(ids, timeout=120, log=work / "serve.log")
    finally:
        svc.terminate()
        svc.wait(timeout=30)
