"""Learning from every run on the real Slurm test cluster: a job submitted with lyasub reports
its step times (jobscripts/train_example.py uses lyasched.job.steptimes) into its directory, and the
service learns the model's profile and the start-up term when it ends. Needs `slurm/cluster up`
and LYASCHED_SLURM=1. The full first-vs-learned comparison is benchmarks/profile_accuracy.py --cluster."""

from __future__ import annotations

import json
import time

import pytest

from lyasched.costmodel import startup
from lyasched.costmodel.learn import read_steps, steps_path
from lyasched.store import costtable, records
from test_serve_slurm import lyasub, serve, wait_all, work  # noqa: F401 -- fixtures

pytestmark = pytest.mark.slurm


def test_reporting_job_teaches_profile_and_start_up_term(serve, work, job_dir, test_user, as_user,  # noqa: F811
                                                          slurm_jobs):
    proc, db_path = serve()
    jid = lyasub(as_user, test_user, job_dir, "--job-name", "learn", "--model", "mlp", "--global-batch", "8",
                 "--iterations", "40", "--min-gpus", "2", "--max-gpus", "2")
    slurm_jobs.append(jid)
    done = wait_all([jid], log=work / "serve.log")
    assert done[jid].state == "COMPLETED", (work / "serve.log").read_text()[-2000:]

    rep = read_steps(steps_path(str(job_dir), jid))  # the job's own directory
    assert rep is not None and rep.placement == (2,) and rep.ranks == 2 and rep.local_bsz == 4
    assert rep.steps == 38 and rep.launcher == "srun+torchrun" and rep.step_time > 0

    deadline = time.monotonic() + 30
    row = None
    while time.monotonic() < deadline:
        row = records.job_by_slurm_id(records.open_readonly(db_path), jid)
        if row and row["refined"]:
            break
        time.sleep(1)
    assert row and row["refined"], (work / "serve.log").read_text()[-2000:]
    db = records.open_records(db_path)
    (entry,) = costtable.list_entries(db)
    assert entry.provenance == "learned from 1 run" and entry.observations == 0 and entry.model == "mlp"
    assert "intra-node all-reduce" in entry.learned["why"][0]
    (run,) = costtable.runs(db, entry.signature, entry.device_type)
    assert run["job_id"] == jid and run["placement"] == "2" and run["step_time"] == pytest.approx(rep.step_time)
    term = startup.term(db)
    assert term is not None and term.samples == 1 and term.launcher == "srun+torchrun"
    # Slurm's start and end times are whole seconds (truncated) and the first step's time is not,
    # so the start-up term can exceed the observed run time by up to one second on a short run.
    assert 0 < term.seconds < row["observed"] + 1.0
    # lyastat (as the user) shows the learned start-up term
    r = as_user(test_user, "lyastat", "--db", str(db_path), "--queue", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["startup"][0]["samples"] == 1
