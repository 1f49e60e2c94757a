"""`lyasched whatif --since` without a cluster: `sacct` and `scontrol` on PATH are shims that
print recorded output and log their argv, so the real SlurmCLI path runs end to end."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.slurm.sacct import SACCT_FORMAT

DATA = Path(__file__).parent / "data"
NODE = ("NodeName=gpu0{i} Arch=x86_64 CPUAlloc=0 CPUTot=64 Gres=gpu:a100:8 NodeAddr=gpu0{i} Partitions=gpu "
        "State=IDLE CfgTRES=cpu=64,mem=512000M,billing=64,gres/gpu=8 AllocTRES= GresUsed=gpu:a100:0")
SHIM = """#!/bin/sh
echo "$(basename "$0") $* SLURM_TIME_FORMAT=$SLURM_TIME_FORMAT" >> "{d}/calls.txt"
case "$(basename "$0") $1 $2" in
  "scontrol show config") cat "{d}/config.txt" ;;
  "scontrol show node") cat "{d}/nodes.txt" ;;
  sacct*) if [ -f "{d}/sacct_err.txt" ]; then cat "{d}/sacct_err.txt" >&2; exit 1; fi; cat "{d}/sacct.txt" ;;
esac
"""


@pytest.fixture
def slurm_shims(tmp_path, monkeypatch):
    d = tmp_path / "shims"
    d.mkdir()
    for tool in ("sacct", "scontrol"):
        p = d / tool
        p.write_text(SHIM.format(d=d))
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    (d / "config.txt").write_text("AccountingStorageType   = accounting_storage/slurmdbd\n")
    (d / "nodes.txt").write_text("\n".join(NODE.format(i=i) for i in range(1, 5)) + "\n")
    (d / "sacct.txt").write_text((DATA / "sacct_awkward.txt").read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def calls(d: Path) -> list[str]:
    return (d / "calls.txt").read_text().splitlines()


def test_since_reads_sacct_and_scontrol(slurm_shims):
    r = CliRunner().invoke(main, ["whatif", "--since", "now-30days", "--until", "2026-11-01", "--partition", "gpu",
                                  "-p", "fifo", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    s = json.loads(r.stdout)
    assert s["cluster"]["source"] == "scontrol" and (s["cluster"]["nodes"], s["cluster"]["gpus_per_node"]) == (4, 8)
    assert s["jobs"]["gpu"] == 9 and s["jobs"]["other_partition"] == 2  # --partition also filters the records
    (sacct,) = [c for c in calls(slurm_shims) if c.startswith("sacct ")]
    for arg in ("--parsable2", "--allusers", "--allocations", "--duplicates", f"--format={SACCT_FORMAT}",
                "--starttime=now-30days", "--endtime=2026-11-01", "--partition=gpu", "SLURM_TIME_FORMAT=standard"):
        assert arg in sacct.split(), arg


def test_given_cluster_skips_scontrol_node(slurm_shims):
    r = CliRunner().invoke(main, ["whatif", "--since", "2026-10-01", "-p", "fifo", "--nodes", "2",
                                  "--gpus-per-node", "16", "--json"])
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.stdout)["cluster"]["source"] == "options"
    assert not any(c.startswith("scontrol show node") for c in calls(slurm_shims))


def test_accounting_off_is_one_line(slurm_shims, tmp_path):
    (slurm_shims / "config.txt").write_text("AccountingStorageType   = accounting_storage/none\n")
    out = tmp_path / "rep"
    r = CliRunner().invoke(main, ["whatif", "--since", "now-1days", "--out", str(out)])
    assert r.exit_code == 1 and not out.exists()
    assert r.stderr.strip().splitlines()[-1].startswith("Error: accounting is off on this cluster")
    assert not any(c.startswith("sacct ") for c in calls(slurm_shims))


def test_sacct_failure_is_one_line(slurm_shims):
    (slurm_shims / "sacct_err.txt").write_text("sacct: error: Invalid time specification (pos=0): yesterdayy\n")
    r = CliRunner().invoke(main, ["whatif", "--since", "yesterdayy"])
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == "Error: sacct failed: sacct: error: Invalid time specification (pos=0): yesterdayy"


def test_whatif_reads_slurm_through_the_one_interface(slurm_shims):
    """whatif's backend is the Slurm interface's (config, history, nodes), which both backends answer."""
    from lyasched.slurm.backend import SlurmHistory
    from lyasched.slurm.pyslurm_backend import PySlurm
    from lyasched.whatif import live

    slurm = live.make_backend()
    assert isinstance(slurm, SlurmHistory) and callable(getattr(PySlurm, "history", None))
    assert [n.name for n in slurm.nodes()] == [f"gpu0{i}" for i in range(1, 5)]
    text = live.read_sacct(slurm, "2026-10-01", None, None)
    assert text == (DATA / "sacct_awkward.txt").read_text(encoding="utf-8")
    assert [c.split()[0] for c in calls(slurm_shims)] == ["scontrol", "scontrol", "sacct"]
