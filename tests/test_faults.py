"""Faults of issue 5 on the real Slurm test cluster (marker ``slurm``): the suites of
tests/reliability/faults.py at CI sizes (6 kills instead of 20, a 20 s controller outage instead
of 120 s; the benchmark runs the full sizes), once per Slurm backend of the service (cli, pyslurm:
the `slurm_backend` fixture). Hold the shared-cluster lock:

    flock /run/lock/lyasched-rel.lock env LYASCHED_SLURM=1 python -m pytest -q tests/test_faults.py
"""

from __future__ import annotations

import pytest
from reliability import faults as rel

pytestmark = pytest.mark.slurm


def test_sigkill_at_named_points_and_random_moments(monkeypatch, slurm_backend):
    monkeypatch.delenv("LYASCHED_CRASH_AT", raising=False)
    r = rel.run_kills(6, backend=slurm_backend)  # before_update, external, after_update (update done, release not), external, ...
    assert r["kills_tried"] == 6 and r["kills_survived"] == 6, r["failures"]
    assert any(k.startswith("after_update") for k in r["kill_points"]), r["kill_points"]
    assert r["jobs_lost"] == 0 and r["jobs_duplicated"] == 0 and r["jobs_held_forever"] == 0, r
    assert r["jobs_not_recorded_finished"] == 0 and r["db_problems"] == [] and r["final_stop_rc"] == 0, r


def test_slurmctld_outage(slurm_backend):
    r = rel.run_outage(20, backend=slurm_backend)
    assert r["service_alive_during"] and r["service_alive_after"] and r["service_stop_rc"] == 0, r
    assert r["slurm_state_kept"], r
    assert r["outage_error_lines"] == 1 and r["recovery_lines"] == 1 and r["traceback_lines"] == 0, r
    assert r["failed_slots"] >= 1, r  # seen and recorded (a failing slot lasts timeouts x retries), logged once
    assert r["jobs_lost"] == 0 and r["jobs_duplicated"] == 0 and r["jobs_not_recorded_finished"] == 0, r
    assert r["db_problems"] == [] and r["outages_survived"] == 1, r


def test_failing_and_hanging_slurm_commands(slurm_backend):
    r = rel.run_flaky(backend=slurm_backend)
    s, u = r["service"], r["lyasub"]
    assert s["injected_by_kind"]["fail"] >= 6 and s["injected_by_kind"]["hang"] >= 1, s
    assert s["failed_slots_recorded"] >= 1 and s["failed_starts_recorded"] >= 1 and s["error_log_lines"] >= 2, s
    assert s["service_alive"] and s["stop_rc"] == 0 and s["db_problems"] == [], s
    assert u["as_expected"] == u["tried"] == 4, u["cases"]
    assert r["silent"] == 0 and r["jobs_lost"] == 0 and r["jobs_duplicated"] == 0, r


def test_job_purged_while_the_service_was_down(slurm_backend):
    r = rel.run_minjobage(backend=slurm_backend)
    assert r["seen_running"] == r["jobs"] == 2 and r["restart_rc"] == 0, r
    assert r["resolved"] == 2 and r["accounting"] == "False", r["recorded"]
    assert r["relisted_followed_to_end"] == 2 and r["db_problems"] == [], r
