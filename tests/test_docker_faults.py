"""Faults only the docker cluster can inject, with `lyasched serve` (as its service account) running:
a node container killed mid-job, the controller container stopped for two minutes, a node's network
link cut and restored. After each: the service survives, records what happened, nothing is lost or
started twice (records.consistency_problems, one start line per job), and the cluster heals.
Needs LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker (make test-docker)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.store import records
from test_docker_cluster import db_rows, sleeper_job, starts, wait_rows
from test_serve_slurm import serve, squeue_jobs, wait_all, work  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slurm, pytest.mark.docker, pytest.mark.slow]

NET = os.environ.get("LYASCHED_DOCKER_NET", "lyasched-net")  # as docker/cluster names and numbers them
NODE_IP = os.environ.get("LYASCHED_DOCKER_SUBNET", "172.31.77.0/24").rsplit(".", 1)[0] + ".{}"  # node K: 20 + K


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


def node_states() -> dict[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t"], capture_output=True, text=True,
                         timeout=60).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_nodes(pred, timeout: float, what: str) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = node_states()
        if states and pred(states):
            return states
        time.sleep(2)
    pytest.fail(f"nodes not {what} after {timeout}s: {states}")


def all_up(states: dict[str, str]) -> bool:
    return len(states) == 3 and all(s in {"idle", "mix", "alloc"} for s in states.values())


def wait_started(job_dir: Path, job: str, timeout: float = 90) -> None:
    """Slurm's RUNNING is the batch script; rank 0 logs its start a moment later (srun step, torchrun,
    Python import). A fault meant to hit a job mid-training waits for that line."""
    deadline = time.monotonic() + timeout
    while not starts(job_dir, job):
        assert time.monotonic() < deadline, f"job {job} RUNNING but its rank 0 never started"
        time.sleep(1)


def check_records(db_path: Path, job_dir: Path, ids: list[str], log: Path) -> None:
    """Nothing lost or started twice, and the service never crashed."""
    db = records.open_readonly(db_path)
    try:
        assert records.consistency_problems(db) == []
        n = {r["slurm_id"]: r["n"] for r in db.query("select slurm_id, count(*) n from decisions where action='start' "
                                                      "group by slurm_id")}
    finally:
        db.conn.close()
    for i in ids:
        assert n.get(i) == 1, (i, n)
        assert len(starts(job_dir, i)) == 1, (i, starts(job_dir, i))
    assert "Traceback" not in log.read_text()


@pytest.fixture
def healed():
    """Whatever a test broke is restored at teardown: containers running, links up, nodes resumed."""
    yield
    for c in ("lyasched-ctl", "lyasched-node1", "lyasched-node2", "lyasched-node3"):
        docker("start", c, check=False)
    for k in (1, 2, 3):
        docker("network", "connect", "--ip", NODE_IP.format(20 + k), NET, f"lyasched-node{k}", check=False)
    subprocess.run(["scontrol", "update", "nodename=node[1-3]", "state=resume"], capture_output=True, timeout=60)


def test_node_container_killed_mid_job(serve, work, job_dir, test_user, as_user, slurm_jobs, healed):
    proc, db_path = serve()
    victim = sleeper_job(as_user, test_user, job_dir, "victim", 600, gpus=4)  # a whole node
    other = sleeper_job(as_user, test_user, job_dir, "other", 30, gpus=2)
    slurm_jobs.extend([victim, other])
    running = wait_all([victim], states={"RUNNING"}, timeout=90, log=work / "serve.log")
    node = running[victim].nodes[0]
    wait_started(job_dir, victim)  # killed before rank 0 ran, it would leave no start line to check
    docker("kill", f"lyasched-{node}")

    # Slurm declares the node dead (SlurmdTimeout=30) and the job NODE_FAIL; lyasched jobs are not requeued.
    done = wait_all([victim], timeout=180, log=work / "serve.log")
    assert done[victim].state == "NODE_FAIL"
    rows = wait_rows(db_path, [victim], lambda r: r["state"] == "finished")
    assert rows[victim]["slurm_state"] == "NODE_FAIL"
    assert wait_all([other], timeout=180, log=work / "serve.log")[other].state == "COMPLETED"

    docker("start", f"lyasched-{node}")  # slurmd registers again: ReturnToService=2 brings the node back
    wait_nodes(lambda s: s.get(node) == "idle", 120, f"{node} idle again")
    after = sleeper_job(as_user, test_user, job_dir, "after", 1, gpus=4)
    slurm_jobs.append(after)
    assert wait_all([after], timeout=150, log=work / "serve.log")[after].state == "COMPLETED"
    assert proc.poll() is None
    check_records(db_path, job_dir, [victim, other, after], work / "serve.log")


def test_controller_stopped_two_minutes_and_restarted(serve, work, job_dir, test_user, as_user, slurm_jobs, healed):
    proc, db_path = serve()
    before = sleeper_job(as_user, test_user, job_dir, "before", 45)
    slurm_jobs.append(before)
    wait_all([before], states={"RUNNING"}, timeout=90, log=work / "serve.log")
    # Its srun step is created after RUNNING and needs the controller: stop it once rank 0 runs.
    wait_started(job_dir, before)
    docker("stop", "lyasched-ctl")
    t_stop = time.monotonic()
    time.sleep(120)  # the job finishes meanwhile; the service's slots fail to reach slurmctld
    assert proc.poll() is None, "the service died while the controller was down"
    docker("start", "lyasched-ctl")
    wait_nodes(all_up, 120, "back after the controller restart")
    assert time.monotonic() - t_stop >= 120

    after = sleeper_job(as_user, test_user, job_dir, "after", 1)
    slurm_jobs.append(after)
    done = wait_all([before, after], timeout=150, log=work / "serve.log")
    assert {i: j.state for i, j in done.items()} == {before: "COMPLETED", after: "COMPLETED"}
    rows = wait_rows(db_path, [before, after], lambda r: r["state"] == "finished" and r["observed"])
    assert rows[before]["observed"] >= 40
    db = records.open_readonly(db_path)
    try:  # slots went on during the outage (with errors) and after it (without)
        slots = list(db.query("select time, error from slots order by id"))
    finally:
        db.conn.close()
    assert any(s["error"] for s in slots) and not slots[-1]["error"]
    assert proc.poll() is None
    check_records(db_path, job_dir, [before, after], work / "serve.log")


def test_node_network_link_cut_and_restored(serve, work, job_dir, test_user, as_user, slurm_jobs, healed):
    proc, db_path = serve()
    docker("network", "disconnect", NET, "lyasched-node2")
    wait_nodes(lambda s: s.get("node2", "").endswith("*") or s.get("node2") in {"down", "down*"}, 120,
               "showing node2 unreachable")
    # Eight GPUs of one type need both a100 nodes (a job never mixes GPU types, and node3's are
    # t4): held while node2 is cut off. A 4-GPU job runs meanwhile, on node1 or node3.
    wide = sleeper_job(as_user, test_user, job_dir, "wide", 1, gpus=8)
    small = sleeper_job(as_user, test_user, job_dir, "small", 1, gpus=4)
    slurm_jobs.extend([wide, small])
    done = wait_all([small], timeout=150, log=work / "serve.log")
    assert done[small].state == "COMPLETED" and "node2" not in done[small].nodes
    j = squeue_jobs([wide])[wide]
    assert j.pending and j.held_by_service, (j.state, j.reason)

    docker("network", "connect", "--ip", NODE_IP.format(22), NET, "lyasched-node2")
    wait_nodes(all_up, 180, "all up after the link came back")
    done = wait_all([wide], timeout=180, log=work / "serve.log")
    assert done[wide].state == "COMPLETED" and sorted(done[wide].nodes) == ["node1", "node2"]
    assert proc.poll() is None
    check_records(db_path, job_dir, [wide, small], work / "serve.log")
    rows = db_rows(db_path)
    assert json.loads(rows[wide]["nodes"]) and rows[wide]["gpus"] == 8
