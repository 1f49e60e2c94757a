"""`lyastat` via CliRunner against a database the service itself filled (fake Slurm runner), and
(marker slurm) as a test user against the real cluster's squeue."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lyasched.cli.lyastat import fmt_seconds, main
from lyasched.config import Config
from lyasched.service import Service
from lyasched.store import records
from test_service import FakeJob, FakeSlurm, StartAs, summary


@pytest.fixture
def service_db(tmp_path):
    return fill_db(tmp_path / "svc.db")


def fill_db(path):
    """Two users' jobs after three slots: alice's 201 finished (2 GPUs), 202 waiting; bob's 203 running."""
    db = records.open_records(path)
    a1 = FakeJob("201", summary("uid-00000201"), name="resnet-a")
    a2 = FakeJob("202", summary("uid-00000202", gmin=8, gmax=8), submit=1_000_005.0, name="big")
    b1 = FakeJob("203", summary("uid-00000203"), user="bob", name="bobs")
    slurm = FakeSlurm(jobs=[a1, a2, b1])
    clock = {"t": 1_000_100.0}
    svc = Service(Config(slot_seconds=2), db, slurm=slurm, policy=StartAs({"201": ((0, 2),), "203": ((1, 1),)}),
                  clock=lambda: clock["t"])
    svc.run_slot()
    for j, start in ((a1, 1_000_101.0), (b1, 1_000_102.0)):
        j.state, j.reason, j.start, j.nodes = "RUNNING", "None", start, ("node1",) if j is a1 else ("node2",)
    j.gpn = 1
    a1.gpn = 2
    clock["t"] += 2
    svc.run_slot()
    a1.state, a1.end = "COMPLETED", 1_000_131.0
    clock["t"] += 30
    svc.run_slot()
    db.conn.close()
    return path


def run(args, **kw):
    return CliRunner().invoke(main, args, catch_exceptions=False, **kw)


def test_own_jobs_table(service_db, monkeypatch):
    monkeypatch.setattr("lyasched.cli.lyastat._caller", lambda: "alice")
    r = run(["--db", str(service_db), "--no-slurm"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["JOBID", "USER", "NAME", "STATE", "GPUS", "NODES", "PRED", "OBS", "WAIT", "REASON"]
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert set(rows) == {"201", "202"}  # not bob's
    f = rows["201"].split()
    assert f[1:6] == ["alice", "resnet-a", "COMPLETED", "2", "node1"]
    assert f[7] == "30.0s"  # observed: 1_000_101 -> 1_000_131
    assert f[8] == "1:41"  # waited from submit (1_000_000) to start (1_000_101)
    assert "finished: COMPLETED" in rows["201"]
    assert rows["202"].split()[4] == "-"  # no GPUs yet


def test_all_and_json(service_db):
    r = run(["--db", str(service_db), "--no-slurm", "--all", "--json"])
    data = json.loads(r.output)
    jobs = {j["jobid"]: j for j in data["jobs"]}
    assert set(jobs) == {"201", "202", "203"} and data["user"] is None
    assert jobs["201"]["observed"] == 30.0 and jobs["201"]["predicted"] > 0
    assert jobs["203"]["user"] == "bob" and jobs["203"]["lyasched_state"] == "running"
    assert jobs["202"]["lyasched_state"] == "waiting" and jobs["202"]["predicted"] > 0  # best predicted time


def test_one_job_details(service_db):
    r = run(["--db", str(service_db), "--no-slurm", "201"])
    assert r.exit_code == 0
    assert "profile     cnn:test" in r.output and "GPUS  ONE-NODE  MULTI-NODE" in r.output
    assert "start  2 GPUs on node1: scripted" in r.output
    j = json.loads(run(["--db", str(service_db), "--no-slurm", "--json", "uid-00000201"]).output)
    assert j["jobid"] == "201" and j["profile"]["global_batch"] == 64
    assert [d["action"] for d in j["decisions"]] == ["start"] and j["decisions"][0]["nodes"] == ["node1"]
    by_g = {p["gpus"]: p for p in j["predicted_by_gpus"]}
    assert by_g[1]["one_node"] > by_g[2]["one_node"] > 0 and by_g[3]["one_node"] is None  # 3 does not divide 64


def test_queue(service_db):
    r = run(["--db", str(service_db), "--queue"])
    assert r.exit_code == 0 and "last slot   #3" in r.output and "free GPUs" in r.output
    q = json.loads(run(["--db", str(service_db), "--queue", "--json"]).output)
    s = q["last_slot"]
    assert q["slots"] == 3 and s["free"] == {"node1": 4, "node2": 4, "node3": 4} and s["duration"] >= 0
    assert q["jobs"] == {"finished": 1, "running": 1, "waiting": 1}


def test_errors_are_one_line(tmp_path, service_db):
    r = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db")])
    assert r.exit_code == 1 and r.output.strip().startswith("lyastat: ") and "no lyasched database" in r.output
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "none.db").exists()
    r = CliRunner().invoke(main, ["--db", str(service_db), "--no-slurm", "999"])
    assert r.exit_code == 1 and "job 999: not a lyasched job" in r.output


def test_db_from_environment(service_db, monkeypatch):
    monkeypatch.setenv("LYASCHED_DB", str(service_db))
    assert "203" in run(["--no-slurm", "--all"]).output


def test_fmt_seconds():
    assert [fmt_seconds(x) for x in (None, float("inf"), 0.4242, 12.34, 245, 3723, 2 * 86400 + 3723)] == [
        "-", "-", "0.42s", "12.3s", "4:05", "1:02:03", "2-01:02:03"]


@pytest.mark.slurm
def test_lyastat_as_user_reads_root_owned_db(test_user, as_user, job_dir):
    """A user can read the service's 0644 database in a world-readable (not writable) directory."""
    d = job_dir / "svc"
    d.mkdir(mode=0o755)
    service_db = fill_db(d / "svc.db")
    assert oct(service_db.stat().st_mode & 0o777) == "0o644"
    r = as_user(test_user, "lyastat", "--db", str(service_db), "--all", "--json")  # service stopped
    assert r.returncode == 0, r.stderr
    assert {j["jobid"] for j in json.loads(r.stdout)["jobs"]} == {"201", "202", "203"}
    live = records.open_records(service_db)  # service running: its -wal/-shm exist
    records.upsert_job(live, "uid-00000204", slurm_id="204", user=test_user, state="waiting", submit_time=1.0)
    r = as_user(test_user, "lyastat", "--db", str(service_db), "--json")
    assert r.returncode == 0, r.stderr
    assert [j["jobid"] for j in json.loads(r.stdout)["jobs"]] == ["204"]  # own jobs, uncheckpointed write seen
    live.conn.close()
    r = as_user(test_user, "lyastat", "--db", str(service_db), "--queue")
    assert r.returncode == 0 and "last slot" in r.stdout
    d.chmod(0o700)  # a directory the user may not enter: one clear line, no traceback
    r = as_user(test_user, "lyastat", "--db", str(service_db))
    assert r.returncode == 1 and r.stderr.startswith("lyastat: ") and len(r.stderr.strip().splitlines()) == 1


def _squeue_shim(tmp_path, monkeypatch, body: str) -> None:
    """A ``squeue`` first on PATH (the CLI backend), answering with ``body`` (a shell script)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text("#!/bin/sh\n" + body)
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("LYASCHED_SLURM_BACKEND", "cli")


def test_failed_squeue_is_not_an_empty_queue(service_db, tmp_path, monkeypatch):
    _squeue_shim(tmp_path, monkeypatch, 'echo "squeue: error: Unable to contact slurm controller" >&2; exit 1\n')
    for args in (["--all"], ["--all", "--json"], ["--user", "alice"]):
        r = CliRunner().invoke(main, ["--db", str(service_db), *args])
        assert r.exit_code == 1, r.output
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
        assert r.stderr.startswith("lyastat: cannot read the queue from Slurm (") and "--no-slurm" in r.stderr
    assert run(["--db", str(service_db), "--all", "--no-slurm"]).exit_code == 0  # the records alone, on request


def test_an_empty_queue_from_slurm_is_fine(service_db, tmp_path, monkeypatch):
    _squeue_shim(tmp_path, monkeypatch, "exit 0\n")
    r = CliRunner().invoke(main, ["--db", str(service_db), "--all"])
    assert r.exit_code == 0, r.output + r.stderr
    assert {ln.split()[0] for ln in r.stdout.splitlines()[1:]} == {"201", "202", "203"}


def test_queue_without_jobs_says_so(tmp_path):
    db = records.open_records(tmp_path / "svc.db")
    Service(Config(slot_seconds=2), db, slurm=FakeSlurm(jobs=[]), policy=StartAs({}), clock=lambda: 1_000_000.0).run_slot()
    db.conn.close()
    r = run(["--db", str(tmp_path / "svc.db"), "--queue"])
    assert r.exit_code == 0
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("jobs")]
    assert line.endswith("0 waiting, 0 running at the last slot; no job recorded"), line
