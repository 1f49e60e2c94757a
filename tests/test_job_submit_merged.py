"""A site's job_submit.lua merged with lyasched's (slurm/templates/job_submit.site-merge.lua) on
the real (native) test cluster: lyasched jobs are still held and guarded, the site's rules still
apply. The merged file replaces the cluster's job_submit.lua for the test and the original is put
back after it (slurmctld reloads the file when its mtime changes). The same file under a plain Lua
interpreter: tests/test_job_submit_lua.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_job_submit import DENIED, squeue, submit, submitted, summary

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent
MERGE = REPO / "slurm" / "templates" / "job_submit.site-merge.lua"
PLUGIN = REPO / "slurm" / "job_submit.lua"


def conf_dir() -> Path:
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "SLURM_CONF":
            return Path(value.strip()).parent
    return Path("/etc/slurm")


@pytest.fixture
def merged_plugin(cluster):
    """The merged file as the cluster's job_submit.lua, lyasched's beside it; the original restored."""
    if cluster.kind != "native":
        pytest.skip("installs a job_submit.lua on this host's controller: the native test cluster only")
    d = conf_dir()
    main, lib, keep = d / "job_submit.lua", d / "lyasched_job_submit.lua", d / "job_submit.lua.before-merge-test"
    shutil.copy2(main, keep)
    try:
        shutil.copy(PLUGIN, lib)
        shutil.copy(MERGE, main)
        os.utime(main, (time.time() + 1, time.time() + 1))  # a new mtime even within the same second
        yield d
    finally:
        shutil.copy(keep, main)
        os.utime(main, (time.time() + 2, time.time() + 2))
        keep.unlink()
        lib.unlink(missing_ok=True)


def test_merged_file_still_holds_lyasched_jobs(merged_plugin, as_user, test_user, slurm_jobs, wait_job):
    held = submitted(submit(as_user, test_user, "--gres=gpu:1", "--wrap", "true", comment=summary()), slurm_jobs)
    time.sleep(2.5)  # longer than sched_interval: a job that could start would have started
    assert squeue(held, "%T|%r|%Q") == "PENDING|JobHeldUser|0"
    assert squeue(held, "%l") == "1:00:00"  # the site's default time limit applied too
    assert squeue(held, "%k") == summary()
    proc = as_user(test_user, "scontrol", "release", held)  # the owner still cannot release it
    assert proc.returncode != 0 and DENIED in proc.stderr
    urgent = submit(as_user, test_user, "--gres=gpu:1", "--account=urgent", "--wrap", "true", comment=summary())
    if urgent.returncode == 0:  # where the account exists: the site's priority does not lift lyasched's hold
        job = submitted(urgent, slurm_jobs)
        time.sleep(2.5)
        assert squeue(job, "%T|%Q") == "PENDING|0"


def test_merged_file_keeps_the_sites_rules(merged_plugin, as_user, test_user, slurm_jobs, wait_job):
    plain = submitted(submit(as_user, test_user, "--wrap", "true"), slurm_jobs)
    assert wait_job(plain) == "COMPLETED"
    refused = submit(as_user, test_user, "-J", "refused-by-site", "--wrap", "true")
    assert refused.returncode != 0 and "site: this job name is not allowed here" in refused.stderr
    bad = submit(as_user, test_user, "--wrap", "true", comment=summary(b="0"))
    assert bad.returncode != 0 and "invalid cost summary" in bad.stderr
