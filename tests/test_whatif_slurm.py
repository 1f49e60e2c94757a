"""`lyasched whatif --since` on a real Slurm cluster with accounting: run a few jobs, read them
back through sacct, replay them. Needs slurmdbd: the native test cluster has none (sacct says
"Slurm accounting storage is disabled"), so there the test skips and says so; it runs on a
cluster that keeps accounting (the docker cluster with slurmdbd)."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.slurm.query import accounting_enabled

pytestmark = pytest.mark.slurm

NO_ACCOUNTING = ("this cluster keeps no accounting (sacct: 'Slurm accounting storage is disabled', "
                 "AccountingStorageType=accounting_storage/none, no slurmdbd): `lyasched whatif --since` has no "
                 "history to read; the test runs on a cluster with slurmdbd (the docker cluster)")


def _require_accounting() -> None:
    p = subprocess.run(["sacct", "-X", "-n", "--starttime=now-1minutes"], capture_output=True, text=True, timeout=60)
    cfg = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    if "accounting storage is disabled" in (p.stdout + p.stderr) or not accounting_enabled(cfg):
        pytest.skip(NO_ACCOUNTING)
    tres = next((ln.split("=", 1)[1] for ln in cfg.splitlines() if ln.split("=")[0].strip() == "AccountingStorageTRES"), "")
    assert "gres/gpu" in tres, (f"AccountingStorageTRES = {tres.strip()}: without gres/gpu, sacct's AllocTRES carries no "
                                "GPU counts and every job reads as CPU-only; add AccountingStorageTRES=gres/gpu (docs/whatif.md)")


def _sbatch(as_user, user: str, *args: str) -> str:
    p = as_user(user, "sbatch", "--parsable", "--time=5", *args)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().split(";")[0]


def _ended_in_sacct(ids: list[str], timeout: float = 120) -> None:
    """Wait until slurmdbd has every job with an end time (it lags the controller a little)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        last = subprocess.run(["sacct", "-X", "-n", "-P", "--format=JobID,End", "-j", ",".join(ids)],
                              capture_output=True, text=True, timeout=60).stdout
        ended = {ln.split("|")[0] for ln in last.splitlines() if "|" in ln and ln.split("|")[1] not in ("", "Unknown")}
        if set(ids) <= ended:
            return
        time.sleep(2)
    pytest.fail(f"jobs {ids} not ended in sacct after {timeout:g} s: {last!r}")


def test_whatif_since_replays_the_jobs_just_run(as_user, test_user, slurm_jobs, tmp_path):
    _require_accounting()
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 5))
    gpu = [_sbatch(as_user, test_user, "--gres=gpu:1", "--wrap", "sleep 3"),
           _sbatch(as_user, test_user, "--gres=gpu:2", "--wrap", "sleep 5"),
           _sbatch(as_user, test_user, "-N2", "--gres=gpu:1", "--wrap", "sleep 4")]  # 2 GPUs on 2 nodes
    cpu = _sbatch(as_user, test_user, "--wrap", "sleep 2")
    held = _sbatch(as_user, test_user, "--hold", "--gres=gpu:1", "--wrap", "sleep 1")
    slurm_jobs.extend([*gpu, cpu, held])
    subprocess.run(["scancel", held], check=True, timeout=30)  # cancelled before it ever started
    _ended_in_sacct([*gpu, cpu, held])

    out = tmp_path / "report"
    r = CliRunner().invoke(main, ["whatif", "--since", since, "-p", "lyapunov,fifo", "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    # other tests may have run jobs in the same window: ours are a lower bound. The held job cancelled
    # before it became eligible is not in the window at all: Slurm 22.05's `sacct --starttime` never
    # lists a job whose Eligible is Unknown (docs/whatif.md); the parser tests cover how whatif counts
    # such records when a saved file has them.
    assert s["jobs"]["gpu"] >= 3 and s["jobs"]["cpu_only"] >= 1
    mine = s["users"][test_user]
    assert mine["jobs"] >= 3 and mine["gpu_hours"] > 0
    assert set(mine["policies"]) == {"lyapunov", "fifo"}
    assert s["cluster"]["source"] == "scontrol" and s["cluster"]["total_gpus"] >= 2
    assert s["policies"]["fifo"]["jobs"] == s["jobs"]["gpu"] == s["actual"]["jobs"]
    assert "sacct --starttime=" + since in s["source"]
    assert (out / "report.html").read_text(encoding="utf-8").count("data:image/svg+xml;base64,") == 3
