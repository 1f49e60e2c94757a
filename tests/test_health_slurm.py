"""Monitoring a running service on the real cluster (marker ``slurm``; both clusters; unit tests:
tests/test_metrics.py): `lyasched serve --metrics-port` is scraped over HTTP on its host while it
schedules a job, and `lyasched health` says OK (exit 0) while it runs, DOWN (exit 2) once it has
been frozen for more than 5 slots, and OK again when it resumes."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from test_failsafe_slurm import stop_service, wait_until, write_config
from test_serve_slurm import REPO, lyasub, wait_all, work  # noqa: F401 (work: a fixture)

pytestmark = pytest.mark.slurm

SCRAPE = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())"


def on_service_host(cluster, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run as the service account on the service's host (docker: the svc container)."""
    where = {"container": cluster.service_host} if cluster.kind == "docker" else {}
    return cluster.run(cluster.service_user, *argv, timeout=timeout, **where)


def scrape(cluster, port: int) -> dict[str, float]:
    """name{labels} -> value, from the service's /metrics page (fetched on its host)."""
    r = on_service_host(cluster, cluster.python, "-c", SCRAPE, f"http://127.0.0.1:{port}/metrics")
    assert r.returncode == 0, r.stderr
    out = {}
    for fam in text_string_to_metric_families(r.stdout):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def health(cluster, cfg) -> tuple[int, str]:
    r = on_service_host(cluster, cluster.which("lyasched"), "health", "--config", str(cfg))
    return r.returncode, r.stdout.strip()


def test_metrics_and_health_of_a_running_service(work, job_dir, test_user, as_user, slurm_jobs, cluster):
    cfg = write_config(work, test_user)  # 2 s slots
    port = 9310 + os.getpid() % 500
    env = {k: v for k, v in os.environ.items() if k != "LYASCHED_SLURM_BACKEND"}
    with open(work / "serve.log", "w") as out:
        svc = cluster.popen(cluster.service_user, cluster.which("lyasched"), "serve", "--config", str(cfg),
                            "--metrics-port", str(port), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        wait_until("the first slots", lambda: health(cluster, cfg)[0] == 0, timeout=60, every=1)
        job = lyasub(as_user, test_user, job_dir, "--job-name", "scraped", "--model", "mlp", "--iterations", "3",
                     "--min-gpus", "1", "--max-gpus", "1", "--global-batch", "8")
        slurm_jobs.append(job)
        assert wait_all([job], log=work / "serve.log")[job].state == "COMPLETED"
        m = wait_until("the finish in the metrics", lambda: (m := scrape(cluster, port))["lyasched_jobs_running"] == 0
                       and m, timeout=30, every=1)
        assert m["lyasched_role{lyasched_role=active}"] == 1 and m["lyasched_role{lyasched_role=standby}"] == 0
        assert m["lyasched_jobs_started_total"] == 1 and m["lyasched_jobs_waiting"] == 0
        assert m["lyasched_slots_total"] >= 3 and m["lyasched_slot_duration_seconds_count"] == m["lyasched_slots_total"]
        assert 1 <= m["lyasched_free_gpus"] <= 12  # this job's GPU back (others' jobs may hold some)
        assert m["lyasched_slot_errors_total"] == 0 and m["lyasched_slurm_errors_total"] == 0
        assert time.time() - m["lyasched_last_successful_slot_timestamp_seconds"] < 10
        code, line = health(cluster, cfg)
        assert code == 0 and line.startswith("OK:"), line

        svc.send_signal(signal.SIGSTOP)  # hung: no slot completes
        frozen = time.monotonic()
        code, line = wait_until("health to say DOWN", lambda: (h := health(cluster, cfg))[0] == 2 and h, timeout=40,
                                every=1)
        assert line.startswith("DOWN:") and time.monotonic() - frozen >= 5 * 2 - 2, line  # 5 slots, not sooner
        svc.send_signal(signal.SIGCONT)
        code, line = wait_until("health OK again", lambda: (h := health(cluster, cfg))[0] == 0 and h, timeout=30,
                                every=1)
        assert line.startswith("OK:"), line
        assert "Traceback" not in (work / "serve.log").read_text()
    finally:
        stop_service(svc)
