"""slurm/job_submit.lua and a site's file merged with it (slurm/templates/job_submit.site-merge.lua)
run by a plain Lua interpreter, with a stand-in for the ``slurm`` table slurmctld provides: no
Slurm needed. What slurmctld itself does with the result (a held job stays pending) is checked on
the real cluster by tests/test_job_submit.py and tests/test_job_submit_merged.py (marker slurm).
Skipped where no ``lua`` interpreter is installed (Debian: apt-get install lua5.4)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lyasched.summary import CostSummary

REPO = Path(__file__).resolve().parent.parent
PLUGIN = REPO / "slurm" / "job_submit.lua"
MERGE = REPO / "slurm" / "templates" / "job_submit.site-merge.lua"
LUA = next((p for p in (shutil.which(n) for n in ("lua5.4", "lua5.3", "lua", "luajit")) if p), None)

pytestmark = pytest.mark.skipif(LUA is None, reason="no lua interpreter (apt-get install lua5.4)")

# the stand-in for Slurm's table (the values are Slurm 22.05's), the plugin loaded; each case file follows it
PRELUDE = r"""
slurm = { SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002, NO_VAL = 4294967294, NO_VAL16 = 65534 }
local said = {}
function slurm.log_user(fmt, ...) said[#said + 1] = string.format(fmt, ...) end
function slurm.log_info(fmt, ...) end
function slurm.log_debug(fmt, ...) end
assert(dofile(arg[1]) == slurm.SUCCESS)
"""

# the cases, one line of output each
HARNESS = PRELUDE + r"""
local function show(v) if v == nil then return "nil" end return tostring(v) end
local function submit(name, desc)
  said = {}
  desc.time_limit = desc.time_limit or slurm.NO_VAL
  local rc = slurm_job_submit(desc, {}, 1000)
  print(table.concat({name, show(rc), show(desc.priority), show(desc.time_limit), show(desc.requeue),
                      (desc.comment or ""):sub(1, 12), said[1] or ""}, "|"))
end
local function modify(name, desc, rec, uid)
  said = {}
  local rc = slurm_job_modify(desc, rec, {}, uid)
  print(table.concat({name, show(rc), said[1] or ""}, "|"))
end
local SUMMARY = arg[2]
submit("lyasched", { name = "train", comment = SUMMARY, script = "#!/bin/bash\nsrun train\n" })
submit("lyasched-with-time", { name = "train", comment = SUMMARY, time_limit = 30 })
submit("plain", { name = "plain", script = "#!/bin/bash\ntrue\n" })
submit("malformed", { name = "bad", comment = "lyasched:v1;id=x" })
submit("lyasched-urgent", { name = "train", comment = SUMMARY, account = "urgent" })
submit("plain-urgent", { name = "plain", account = "urgent", script = "#!/bin/bash\ntrue\n" })
submit("site-refused", { name = "refused-by-site", comment = SUMMARY })
submit("managed", { name = "mjob", partition = "gpu", tres_per_node = "gres/gpu:2", script = "#!/bin/bash\nsrun train\n" })
modify("owner-release", { priority = 100 }, { comment = SUMMARY, job_id = 7, time_limit = 60 }, 1000)
modify("owner-rename", { name = "renamed" }, { comment = SUMMARY, job_id = 7, time_limit = 60 }, 1000)
modify("root-release", { priority = 100 }, { comment = SUMMARY, job_id = 7, time_limit = 60 }, 0)
modify("plain-release", { priority = 100 }, { comment = "", job_id = 8, time_limit = 60 }, 1000)
"""


def summary() -> str:
    s = CostSummary(uid="0f3c9a7e-test", sig="resnet:cifar", global_batch=64, iterations=100, min_gpus=1,
                    max_gpus=4, alpha=0.01, beta=1e-4, params=78042, bytes_per_param=4, mem_base=1e9,
                    mem_per_sample=1e6, source="m")
    return s.encode()


def run(tmp_path: Path, main: Path, *, merged: bool) -> dict[str, list[str]]:
    d = tmp_path / "etc-slurm"
    d.mkdir()
    if merged:
        shutil.copy(PLUGIN, d / "lyasched_job_submit.lua")
        shutil.copy(MERGE, d / "job_submit.lua")
    else:
        shutil.copy(PLUGIN, d / "job_submit.lua")
    (d / "lyasched-managed.conf").write_text("partitions = gpu\n")
    (tmp_path / "cases.lua").write_text(HARNESS)
    p = subprocess.run([LUA, str(tmp_path / "cases.lua"), str(d / "job_submit.lua"), summary()],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return {line.split("|")[0]: line.split("|")[1:] for line in p.stdout.splitlines()}


@pytest.mark.parametrize("merged", [False, True], ids=["plugin", "merged"])
def test_lyasched_jobs_are_held_and_guarded(tmp_path, merged):
    out = run(tmp_path, PLUGIN, merged=merged)
    rc, prio, _limit, requeue, comment, _ = out["lyasched"]
    assert (rc, prio, requeue, comment) == ("0", "0", "0", "lyasched:v1;")  # held, not requeueable
    assert out["malformed"][0] == "-1" and "invalid cost summary" in out["malformed"][5]
    assert out["plain"][:2] == ["0", "nil"]  # a plain job outside a managed partition: untouched
    m = out["managed"]
    assert m[:2] == ["0", "0"] and m[4] == "lyasched:v1;"  # taken in the managed partition
    assert out["owner-release"][0] == "2002" and "managed by lyasched" in out["owner-release"][1]
    assert out["owner-rename"][0] == "0" and out["root-release"][0] == "0" and out["plain-release"][0] == "0"


def test_merged_file_keeps_the_sites_rules(tmp_path):
    out = run(tmp_path, MERGE, merged=True)
    assert out["plain"][2] == "60" and out["lyasched"][2] == "60"  # the site's default time limit, both jobs
    assert out["lyasched-with-time"][1:3] == ["0", "30"]  # held; the user's own limit kept
    assert out["plain-urgent"][1] == "1000000" and out["lyasched-urgent"][1] == "0"  # the site's priority, not on a held job
    assert out["site-refused"][0] == "-1" and out["site-refused"][5].startswith("site: ")
    (tmp_path / "alone").mkdir()
    alone = run(tmp_path / "alone", PLUGIN, merged=False)
    assert alone["plain"][2] == alone["lyasched"][2] == "4294967294"  # lyasched's plugin alone sets no limit


CONSTRAINT_CASES = PRELUDE + r"""
local function submit(name, desc)
  said = {}
  desc.time_limit = desc.time_limit or slurm.NO_VAL
  local rc = slurm_job_submit(desc, {}, 1000)
  print(table.concat({name, tostring(rc), desc.comment or "", said[1] or ""}, "\t"))
end
local S = arg[2]
submit("ft-matches", { name = "t", comment = S .. ";ft=a100&ib/h100", features = "a100&ib|h100" })
submit("ft-differs", { name = "t", comment = S .. ";ft=a100", features = "t4" })
submit("ft-missing", { name = "t", comment = S, features = "a100" })
submit("ft-without-features", { name = "t", comment = S .. ";ft=a100" })
submit("ft-bad", { name = "t", comment = S .. ";ft=a100*2", features = "a100*2" })
submit("managed-ft", { name = "m", partition = "gpu", tres_per_node = "gres/gpu:2", features = "a100|h100",
                       script = "#!/bin/bash\nsrun train\n" })
submit("managed-brackets", { name = "m", partition = "gpu", tres_per_node = "gres/gpu:2", features = "[a100|h100]",
                             script = "#!/bin/bash\nsrun train\n" })
"""


def test_the_constraint_key_must_be_the_jobs_own_features(tmp_path):
    """``ft`` (the job's --constraint, / for |) is accepted only when it is the job's Features; a
    managed partition's plain job gets it from its Features, and one lyasched cannot place by
    (brackets) is refused with one line."""
    d = tmp_path / "etc-slurm"
    d.mkdir()
    shutil.copy(PLUGIN, d / "job_submit.lua")
    (d / "lyasched-managed.conf").write_text("partitions = gpu\n")
    (tmp_path / "cases.lua").write_text(CONSTRAINT_CASES)
    p = subprocess.run([LUA, str(tmp_path / "cases.lua"), str(d / "job_submit.lua"), summary()],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    out = {ln.split("\t")[0]: tuple(ln.split("\t")[1:]) for ln in p.stdout.splitlines()}
    assert out["ft-matches"][0] == "0"
    assert CostSummary.decode(summary() + ";ft=a100&ib/h100").constraint == "a100&ib|h100"  # Python agrees
    for case in ("ft-differs", "ft-missing", "ft-without-features"):
        assert out[case][0] == "-1" and "is not the job's --constraint" in out[case][2], (case, out[case])
    assert out["ft-bad"][0] == "-1" and "ft=a100*2: must be node features" in out["ft-bad"][2]
    rc, comment, _ = out["managed-ft"]
    assert rc == "0" and comment.endswith(";pl=1;ft=a100/h100") and CostSummary.decode(comment).constraint == "a100|h100"
    assert out["managed-brackets"][0] == "-1" and "supports node features joined by & and | only" in out["managed-brackets"][2]
