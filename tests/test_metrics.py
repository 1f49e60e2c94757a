"""Health and metrics of the service (lyasched.live.metrics, `lyasched health`): the real slot
against the fake Slurm of tests/test_service.py, its metrics scraped over HTTP and compared with
what the slots recorded; `lyasched health` through CliRunner on fresh, stale, failing and missing
databases. Expectations come from the records, not from constants."""

from __future__ import annotations

import json
import time
import urllib.request
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from lyasched.cli import main as lyasched_main
from lyasched.cli.serve import start_metrics
from lyasched.config import Config, ConfigError, from_mapping
from lyasched.live.context import SlotContext
from lyasched.live.metrics import ServiceMetrics, move_kind
from lyasched.live.report import SlotReport
from lyasched.store import records
from test_service import FakeJob, FakeSlurm, StartAs, service, summary

SLOT = 2.0  # the slot length of test_service.service()


def scrape(port: int) -> dict[str, float]:
    """``/metrics`` as {sample name{labels}: value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def run_slots(db, slurm, policy, n: int, now: float | None = None, metrics: ServiceMetrics | None = None):
    svc = service(db, slurm, policy, now=time.time() if now is None else now)
    if metrics is not None:
        svc.slot_hooks.append(metrics.observe_slot)
    return svc, [svc.run_slot() for _ in range(n)]


def three_jobs() -> FakeSlurm:
    return FakeSlurm(jobs=[FakeJob(str(j), summary(f"uid-{j:08d}")) for j in (51, 52, 53)])


@pytest.fixture
def served(tmp_path):
    """A service on a database file with its metrics served on a free port (serve's own start_metrics)."""
    db = records.open_records(tmp_path / "lyasched.db")
    slurm = three_jobs()
    # 51's start fails in Slurm (scontrol update), 52 starts, 53 waits
    slurm.fail_on = "JobId=51"
    svc = service(db, slurm, StartAs({"51": ((1, 1),), "52": ((1, 2),)}), now=time.time())
    cfg = Config(slot_seconds=SLOT, metrics_port=0, metrics_address="127.0.0.1")
    metrics = start_metrics(svc, cfg)
    assert metrics is not None and svc.slot_hooks == [metrics.observe_slot]
    port = metrics._server.server_address[1]
    yield svc, slurm, db, metrics, port
    metrics.stop()


def expected_from_records(db) -> dict[str, float]:
    slots = list(db.query("select * from slots order by id"))
    decisions = list(db.query("select * from decisions"))
    good = [s for s in slots if not s["error"]]
    last_good = good[-1]
    slurm_failed = [s for s in slots if s["error"] and not s["error"].startswith("internal error")]
    return {
        "lyasched_slots_total": len(slots),
        "lyasched_slot_errors_total": sum(1 for s in slots if s["error"]),
        "lyasched_slurm_errors_total": len(slurm_failed) + sum(1 for d in decisions if d["action"] == "failed"),
        "lyasched_jobs_started_total": sum(1 for d in decisions if d["action"] == "start"),
        "lyasched_slot_duration_seconds_count": len(slots),
        "lyasched_slot_duration_seconds_sum": sum(s["duration"] for s in slots),
        "lyasched_last_slot_timestamp_seconds": slots[-1]["time"],
        "lyasched_last_successful_slot_timestamp_seconds": last_good["time"],
        "lyasched_jobs_waiting": last_good["waiting"],
        "lyasched_jobs_running": last_good["running"],
        "lyasched_free_gpus": last_good["free_gpus"],
        "lyasched_queue_q_seconds": last_good["q"],
        "lyasched_queue_z_seconds": last_good["z"],
    }


def test_scraped_metrics_match_the_recorded_slots(served):
    svc, slurm, db, metrics, port = served
    svc.run_slot()  # 51 fails to start (a Slurm error), 52 starts
    svc.clock_state["t"] += SLOT
    slurm.fail_on = "squeue"
    svc.run_slot()  # Slurm does not answer: the slot fails
    svc.clock_state["t"] += SLOT
    slurm.fail_on = ""
    svc.run_slot()  # 51 starts now
    svc.clock_state["t"] += SLOT
    slurm.fail_on = "squeue"
    svc.run_slot()  # failed again: the queue gauges keep the last good slot's values

    got = scrape(port)
    want = expected_from_records(db)
    # the scenario is what it claims (else the comparison below proves little)
    assert want["lyasched_slot_errors_total"] == 2 and want["lyasched_jobs_started_total"] == 2
    assert want["lyasched_slurm_errors_total"] == 3 and want["lyasched_jobs_waiting"] > 0
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-9), name
    # histogram buckets: cumulative counts of the recorded durations
    durations = [r["duration"] for r in db.query("select duration from slots")]
    for le in ("0.01", "1.0", "+Inf"):
        bound = float(le)
        assert got[f"lyasched_slot_duration_seconds_bucket{{le={le}}}"] == sum(1 for d in durations if d <= bound)
    assert got["lyasched_role{lyasched_role=active}"] == 1 and got["lyasched_role{lyasched_role=standby}"] == 0
    assert got["lyasched_moves_total{kind=shrink}"] == 0  # lyapunov moves nothing


def test_role_follows_the_lease(served):
    svc, slurm, db, metrics, port = served
    assert svc.lease is None  # no lease (tests): active
    got = scrape(port)
    assert got["lyasched_role{lyasched_role=active}"] == 1 and got["lyasched_role{lyasched_role=standby}"] == 0
    svc.lease = SimpleNamespace(epoch=None)  # a LeaseKeeper that does not hold the lease: standby
    got = scrape(port)
    assert got["lyasched_role{lyasched_role=active}"] == 0 and got["lyasched_role{lyasched_role=standby}"] == 1
    svc.lease = SimpleNamespace(epoch=4)
    assert scrape(port)["lyasched_role{lyasched_role=active}"] == 1
    m = ServiceMetrics()  # without a service: set by hand
    m.set_role("standby")
    assert m.registry.get_sample_value("lyasched_role", {"lyasched_role": "standby"}) == 1
    with pytest.raises(ValueError):
        m.set_role("failsafe")


def test_metrics_registry_is_its_own(served):
    svc, *_ = served
    svc.run_slot()
    assert REGISTRY.get_sample_value("lyasched_slots_total") is None
    other = ServiceMetrics()  # a second one in the same process: no duplicate-name error, own values
    assert other.registry.get_sample_value("lyasched_slots_total") == 0


def test_moves_counted_by_kind_from_the_decision_rows():
    rows = [
        {"action": "move", "reason": "shrink: smaller is better (signalled)"},
        {"action": "move", "reason": "grow: free GPUs (signalled)"},
        {"action": "move", "reason": "shrink: again (signalled)"},
        {"action": "suspend", "reason": "suspend: ..."},  # the move's end, not a new move
        {"action": "start", "reason": "chosen"},
        {"action": "failed", "reason": "update failed"},
    ]
    m = ServiceMetrics()
    ctx = SlotContext(now=1.0, report=SlotReport(slot_id=1, time=1.0, duration=0.5), decisions=rows)
    m.observe_slot(ctx, False)
    kinds = [k for k in map(move_kind, rows) if k]
    for kind in ("shrink", "grow", "suspend"):
        assert m.registry.get_sample_value("lyasched_moves_total", {"kind": kind}) == kinds.count(kind)
    assert m.registry.get_sample_value("lyasched_slurm_errors_total") == sum(r["action"] == "failed" for r in rows)


def test_a_failing_hook_does_not_fail_the_slot(tmp_path):
    db = records.open_records(tmp_path / "lyasched.db")
    svc = service(db, three_jobs(), StartAs({}), now=time.time())

    def broken(ctx, failed):
        raise RuntimeError("boom")

    seen = []
    svc.slot_hooks += [broken, lambda ctx, failed: seen.append((ctx.report.slot_id, failed))]
    rep = svc.run_slot()
    assert not rep.error and seen == [(rep.slot_id, False)]


def test_metrics_options_and_config():
    cfg = from_mapping({"metrics": {"port": 9464, "address": "0.0.0.0"}})
    assert (cfg.metrics_port, cfg.metrics_address) == (9464, "0.0.0.0")
    assert (Config().metrics_port, Config().metrics_address) == (None, "127.0.0.1")  # off by default
    for bad in ({"port": 70000}, {"port": "9464"}, {"port": True}, {"address": ""}, {"bind": "x"}):
        with pytest.raises(ConfigError, match="metrics"):
            from_mapping({"metrics": bad})
    r = CliRunner().invoke(lyasched_main, ["serve", "--once", "--metrics-port", "70000", "--db", "/nonexistent/x.db"])
    assert r.exit_code == 2 and "--metrics-port must be a port number" in r.output
    assert start_metrics(SimpleNamespace(slot_hooks=[]), Config()) is None


# ---------------------------------------------------------------- lyasched health


def health(*args: str):
    r = CliRunner().invoke(lyasched_main, ["health", *args], env={"LYASCHED_DB": None, "LYASCHED_CONFIG": None})
    lines = r.output.strip().splitlines()
    assert len(lines) == 1, r.output
    return r.exit_code, lines[0]


def filled(tmp_path, n: int = 3, now: float | None = None, fail_last: int = 0, fail_first: int = 0,
           name: str = "lyasched.db"):
    """A database with ``n`` slots of the real service (the first ``fail_first`` and the last
    ``fail_last`` with Slurm down)."""
    path = tmp_path / name
    db = records.open_records(path)
    slurm = three_jobs()
    svc = service(db, slurm, StartAs({"51": ((1, 1),)}), now=time.time() if now is None else now)
    for i in range(n):
        slurm.fail_on = "squeue" if i >= n - fail_last or i < fail_first else ""
        svc.run_slot()
        svc.clock_state["t"] += SLOT
    return path, db


def test_health_ok_on_fresh_slots(tmp_path):
    path, db = filled(tmp_path)
    last = records.last_slot(db)
    code, line = health("--db", str(path), "--slot-seconds", str(SLOT), "--max-age", "3600")
    assert code == 0 and line.startswith("OK: last slot "), line
    assert f"{last['waiting']} waiting" in line and "0 errors in the last 3 slots" in line
    assert f"({SLOT:g} s slots)" in line


def test_health_down_on_stale_slots(tmp_path):
    path, db = filled(tmp_path, now=time.time() - 1000 * SLOT)
    code, line = health("--db", str(path), "--slot-seconds", str(SLOT))
    assert code == 2 and line.startswith("DOWN: last slot "), line
    assert f"more than {5 * SLOT:g} s (5 slots of {SLOT:g} s)" in line
    code, line = health("--db", str(path), "--slot-seconds", str(SLOT), "--max-age", str(2000 * SLOT))
    assert code == 0, line  # --max-age moves the limit


def test_health_degraded_on_errors(tmp_path):
    path, db = filled(tmp_path, n=4, fail_last=2)
    errors = [r["error"] for r in db.query("select error from slots order by id desc") if r["error"]]
    assert len(errors) == 2
    code, line = health("--db", str(path), "--slot-seconds", str(SLOT), "--max-age", "3600")
    assert code == 1 and line.startswith("DEGRADED: "), line
    assert f"{len(errors)} errors in the last 4 slots" in line and errors[0].split()[0] in line
    # waiting: of the last slot that did not fail (a failed slot records 0)
    good = next(r for r in db.query("select waiting from slots where error = '' order by id desc"))
    assert f"{good['waiting']} waiting" in line



def test_health_errors_only_count_in_the_window(tmp_path):
    path, db = filled(tmp_path, n=4, fail_first=1)  # an old failed slot, then 3 good ones
    failed = [r["id"] for r in db.query("select id from slots where error != '' order by id")]
    ids = [r["id"] for r in db.query("select id from slots order by id")]
    window = len(ids) - ids.index(failed[-1]) - 1  # the last slots after the failed one
    assert window > 0
    opts = ("--db", str(path), "--slot-seconds", str(SLOT), "--max-age", "3600")
    assert health(*opts, "--slots", str(window))[0] == 0
    code, line = health(*opts, "--slots", str(window + 1))
    assert code == 1 and f"1 errors in the last {window + 1} slots" in line, line


def test_health_degraded_on_slow_slots(tmp_path):
    path, db = filled(tmp_path)
    tiny = 1e-6  # every real slot takes longer
    slow = sum(1 for r in db.query("select duration from slots") if r["duration"] > tiny)
    assert slow > 0
    code, line = health("--db", str(path), "--slot-seconds", str(tiny), "--max-age", "3600")
    assert code == 1 and f"{slow} longer than the slot" in line, line


def test_health_down_on_missing_or_unreadable_db(tmp_path):
    code, line = health("--db", str(tmp_path / "none.db"), "--slot-seconds", "2")
    assert code == 2 and line.startswith("DOWN: ") and "none.db" in line, line
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    code, line = health("--db", str(junk), "--slot-seconds", "2")
    assert code == 2 and line.startswith("DOWN: "), line
    empty = tmp_path / "empty.db"
    records.open_records(empty).conn.close()  # the service started but recorded no slot
    code, line = health("--db", str(empty), "--slot-seconds", "2")
    assert code == 2 and "no slot recorded" in line, line


def test_health_json_and_config(tmp_path):
    path, db = filled(tmp_path)
    conf = tmp_path / "config.toml"
    conf.write_text(f'[service]\nslot_seconds = {SLOT}\ndb = "{path.name}"\n')
    code, line = health("--config", str(conf), "--json")
    doc = json.loads(line)
    last = records.last_slot(db)
    assert code == 0 and doc["status"] == "ok" and doc["code"] == 0
    assert doc["last_slot"] == last["id"] and doc["waiting"] == last["waiting"] and doc["slot_seconds"] == SLOT
    assert doc["age"] == pytest.approx(time.time() - last["time"] - last["duration"], abs=60)
    code, line = health("--config", str(tmp_path / "missing.toml"))
    assert code == 2 and line.startswith("DOWN: config: "), line


def test_service_role_of_a_real_lease_keeper(tmp_path):
    from lyasched.live.lease import LeaseKeeper
    from lyasched.live.metrics import service_role

    keeper = LeaseKeeper(tmp_path / "lease.json", SLOT)
    svc = SimpleNamespace(lease=keeper)
    assert service_role(svc) == "standby"  # not holding it yet
    what, _ = keeper.hold()
    assert what == "taken" and service_role(svc) == "active"
    assert service_role(SimpleNamespace(lease=None)) == "active"


def test_serve_metrics_port_end_to_end(tmp_path):
    """`lyasched serve --metrics-port 0` as a process, against tests/fake_slurm.py on PATH: its
    /metrics follow the slots it records, and `lyasched health` finds it ok."""
    import os
    import re
    import signal
    import subprocess
    import sys
    from pathlib import Path

    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("squeue", "scontrol"):
        (bindir / tool).symlink_to(Path(__file__).with_name("fake_slurm.py"))
    (tmp_path / "slurm").mkdir()
    (tmp_path / "config.toml").write_text(f'[service]\nslot_seconds = 1\ndb = "db/lyasched.db"\n'
                                          '[metrics]\naddress = "127.0.0.1"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LYASCHED_", "FAKE_"))}
    env.update(PATH=f"{bindir}{os.pathsep}{env['PATH']}", FAKE_SLURM_DIR=str(tmp_path / "slurm"),
               LYASCHED_SLURM_BACKEND="cli")
    exe = Path(sys.executable).with_name("lyasched")
    proc = subprocess.Popen([str(exe), "serve", "--config", str(tmp_path / "config.toml"), "--metrics-port", "0"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        port = None
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "serve exited"
            if m := re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", line):
                port = int(m.group(1))
        assert port is not None
        got: dict[str, float] = {}
        while got.get("lyasched_slots_total", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
            got = scrape(port)
        db = records.open_readonly(tmp_path / "db" / "lyasched.db")
        slots = list(db.query("select * from slots order by id"))
        assert 2 <= got["lyasched_slots_total"] <= len(slots)  # the records may be a slot ahead
        seen = slots[int(got["lyasched_slots_total"]) - 1]  # the last slot the scrape had seen
        assert got["lyasched_last_slot_timestamp_seconds"] == pytest.approx(seen["time"])
        assert got["lyasched_free_gpus"] == seen["free_gpus"] and got["lyasched_jobs_waiting"] == seen["waiting"]
        assert got["lyasched_role{lyasched_role=active}"] == 1
        r = CliRunner().invoke(lyasched_main, ["health", "--config", str(tmp_path / "config.toml")],
                               env={"LYASCHED_DB": None})
        assert r.exit_code == 0 and r.output.startswith("OK: "), r.output
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    assert proc.returncode == 0


def test_metrics_port_in_use_is_one_line(tmp_path):
    import socket

    import click

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        svc = SimpleNamespace(slot_hooks=[], lease=None)
        with pytest.raises(click.ClickException, match=f"metrics: cannot listen on 127.0.0.1:{port}"):
            start_metrics(svc, Config(metrics_port=port))
        assert svc.slot_hooks == []  # nothing fed when nothing serves
