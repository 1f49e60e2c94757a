"""The deployment the docs ship is the one tested: slurm/lyasched.service passes
`systemd-analyze verify`, and `lyasched serve` run inside that unit's sandbox (slurm/unit-sandbox:
its ProtectSystem, ProtectHome, PrivateTmp, paths, user, in a private mount namespace; systemd is
not PID 1 here) still learns from a job's step report in the job's directory and keeps its
database. The sandbox's own fidelity is checked against the settings the unit once had
(PrivateTmp=yes, ProtectHome=yes), under which job directories in /tmp and /home are invisible."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lyasched.store import costtable, records
from test_serve_slurm import REPO, lyasub, wait_all, work  # noqa: F401 -- fixtures

UNIT = REPO / "slurm" / "lyasched.service"
SANDBOX = REPO / "slurm" / "unit-sandbox"
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="mounts: root and unshare")


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("name", ["lyasched.service", "lyasched-failsafe.service", "lyasched-failsafe.timer"])
def test_the_shipped_units_verify(tmp_path: Path, name: str) -> None:
    lyasched = shutil.which("lyasched") or str(Path(os.sys.executable).parent / "lyasched")
    for shipped in UNIT.parent.glob("lyasched*.*"):  # as shipped, with ExecStart where lyasched is installed here
        if shipped.suffix in {".service", ".timer"}:
            (tmp_path / shipped.name).write_text(shipped.read_text().replace("/usr/local/bin/lyasched", lyasched))
    r = subprocess.run(["systemd-analyze", "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{name}:" not in r.stderr and "lyasched" not in r.stderr, r.stderr  # no warning about our units


@needs_root
@pytest.mark.parametrize("settings, visible", [
    ([], True),  # the shipped unit: job directories are readable
    (["-p", "PrivateTmp=yes"], False),  # what it had: a private /tmp hides /tmp's job directories
])
def test_job_directories_in_tmp_are_visible_under_the_unit(tmp_path: Path, settings: list[str], visible: bool) -> None:
    d = Path("/tmp") / f"unit-sandbox-{os.getpid()}"
    d.mkdir(exist_ok=True)
    try:
        (d / "report").write_text("x")
        r = subprocess.run([str(SANDBOX), str(UNIT), "-p", "User=root", "-p", "Group=root", *settings, "--", "cat", str(d / "report")],
                           capture_output=True, text=True, timeout=60)
        assert (r.returncode == 0 and r.stdout == "x") == visible, r.stderr
        w = subprocess.run([str(SANDBOX), str(UNIT), "-p", "User=root", "-p", "Group=root", *settings, "--", "touch", str(d / "new")],
                           capture_output=True, text=True, timeout=60)
        assert w.returncode != 0 and not (d / "new").exists()  # read-only, or not there at all
    finally:
        shutil.rmtree(d, ignore_errors=True)


@needs_root
def test_home_is_read_only_not_hidden() -> None:
    r = subprocess.run([str(SANDBOX), str(UNIT), "-p", "User=root", "-p", "Group=root", "--", "sh", "-c", "ls -d /root && touch /root/x"],
                       capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "/root" and "Read-only file system" in r.stderr


@pytest.mark.slurm
@needs_root
def test_the_service_under_the_shipped_unit_learns_from_a_job_in_tmp(work, job_dir, test_user, as_user, cluster,  # noqa: F811
                                                                     slurm_jobs):
    cfg = work / "config.toml"
    settings = {"slot_seconds": 2, "release_grace": 20, "db": str(work / "lyasched.db"), "users": [test_user],
                "log_level": "INFO"}
    cfg.write_text("[service]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
                   + '[policy]\nname = "lyapunov"\n[slurm]\nbackend = "cli"\n')
    log = open(work / "serve.log", "w")
    # the unit's sandbox, with its user as the test cluster's privileged account (root here: the
    # unit's `slurm` is SlurmUser on a real cluster) and this test's database directory writable
    proc = subprocess.Popen([str(SANDBOX), str(UNIT), "-p", f"User={cluster.service_user}",
                             "-p", f"Group={cluster.service_user}", "-p", f"ReadWritePaths={work}", "--",
                             cluster.which("lyasched"), "serve", "--config", str(cfg)],
                            stdout=log, stderr=subprocess.STDOUT, cwd="/")
    try:
        jid = lyasub(as_user, test_user, job_dir, "--job-name", "unit", "--model", "mlp", "--global-batch", "8",
                     "--iterations", "30", "--min-gpus", "1", "--max-gpus", "1")
        slurm_jobs.append(jid)
        assert wait_all([jid], log=work / "serve.log")[jid].state == "COMPLETED"
        deadline = time.monotonic() + 30
        entries: list = []
        while time.monotonic() < deadline:
            entries = costtable.list_entries(records.open_readonly(work / "lyasched.db"))
            if entries and entries[0].learned_runs:
                break
            time.sleep(1)
        text = (work / "serve.log").read_text()
        assert entries and entries[0].provenance == "learned from 1 run", text[-3000:]
        assert "not emulated" in text and proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
