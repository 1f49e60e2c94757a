"""Real clients submit to a managed partition (marker ``slurm``; both clusters; docs/managed.md).

As a test user, with the tools users already have (installed from their packages): plain
``sbatch`` (tests/test_managed_slurm.py), **submitit**'s ``AutoExecutor`` and **dask-jobqueue**'s
``SLURMCluster``. Each job is taken by job_submit.lua, scheduled and released by the service, runs
as its user and finishes (dask's workers are cancelled when the client closes its cluster); each
is started once (one start decision per job in the service's records).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lyasched.store import records
from lyasched.summary import CostSummary
from test_failsafe_slurm import start_service, stop_service, write_config
from test_managed_slurm import PARTITION
from test_serve_slurm import work  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slurm

SUBMITIT = """\
import json, sys
import submitit

def work(x):
    import getpass, os
    return [getpass.getuser(), os.environ.get("SLURM_JOB_PARTITION"), os.environ.get("SLURM_GPUS_ON_NODE"), x * 2]

ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(slurm_partition={partition!r}, gpus_per_node=1, nodes=1, tasks_per_node=1, cpus_per_task=1,
                     mem_gb=1, timeout_min=5)
jobs = [ex.submit(work, x) for x in (1, 2)]
print("IDS", json.dumps([j.job_id for j in jobs]), flush=True)
print("RESULT", json.dumps([j.result() for j in jobs]), flush=True)
"""

DASK = """\
import json, os, socket, sys
from dask_jobqueue import SLURMCluster
from distributed import Client

os.makedirs(sys.argv[1], exist_ok=True)  # the workers' output directory

def who(x):
    import getpass, os
    return [getpass.getuser(), os.environ.get("SLURM_JOB_ID"), x + 1]

host = socket.gethostbyname(socket.gethostname())
cluster = SLURMCluster(queue={partition!r}, cores=1, processes=1, memory="1GB", walltime="00:05:00",
                       job_extra_directives=["--gres=gpu:1", "--output=" + sys.argv[1] + "/dask-%j.out"],
                       scheduler_options={{"host": host}}, python=sys.executable)
cluster.scale(jobs=2)
ids = []
with Client(cluster) as client:
    client.wait_for_workers(2, timeout=240)
    ids = sorted({{w.job_id for w in cluster.workers.values()}})
    print("IDS", json.dumps(ids), flush=True)
    out = client.gather(client.map(who, range(8)))
    print("RESULT", json.dumps(out), flush=True)
cluster.close()
"""


def run_client(cluster, user: str, job_dir: Path, name: str, source: str, timeout: float) -> dict[str, list]:
    path = job_dir / f"client_{name}.py"  # not {name}.py: it would shadow the package it imports
    path.write_text(source.format(partition=PARTITION))
    path.chmod(0o644)
    folder = job_dir / name
    r = cluster.run(user, cluster.python, str(path), str(folder), cwd=str(job_dir), timeout=timeout)
    assert r.returncode == 0, f"{name} client failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    got = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("IDS", "RESULT"):
            got[key] = json.loads(value)
    assert set(got) == {"IDS", "RESULT"}, r.stdout
    return got


def started_once(db_path: Path, ids: list[str], user: str) -> None:
    """Each job is a plain job of ``user`` in the service's records, released by one start decision."""
    db = records.open_readonly(db_path)
    rows = {r["slurm_id"]: r for r in records.list_jobs(db)}
    for job_id in ids:
        row = rows.get(str(job_id))
        assert row is not None, f"job {job_id} never reached the service ({sorted(rows)})"
        assert row["user"] == user and CostSummary.decode(row["summary"]).plain, row
        starts = [d for d in records.decisions_for(db, row["uid"]) if d["action"] == "start"]
        assert len(starts) == 1, starts


@pytest.fixture
def service(work, test_user, cluster):
    svc = start_service(cluster, write_config(work, test_user), work / "serve.log")
    yield work / "lyasched.db"
    stop_service(svc)
    subprocess.run(["scancel", "-u", test_user, "-p", PARTITION], capture_output=True, timeout=30)


def test_submitit_jobs_are_scheduled_and_run_as_their_user(service, job_dir, test_user, cluster):
    got = run_client(cluster, test_user, job_dir, "submitit", SUBMITIT, timeout=300)
    assert got["RESULT"] == [[test_user, PARTITION, "1", 2], [test_user, PARTITION, "1", 4]]
    started_once(service, got["IDS"], test_user)


def test_dask_jobqueue_workers_are_scheduled_and_compute(service, job_dir, test_user, cluster):
    got = run_client(cluster, test_user, job_dir, "dask", DASK, timeout=400)
    assert len(got["IDS"]) == 2
    assert sorted(r[2] for r in got["RESULT"]) == list(range(1, 9))
    assert {r[0] for r in got["RESULT"]} == {test_user}
    assert {r[1] for r in got["RESULT"]} <= set(got["IDS"])
    started_once(service, got["IDS"], test_user)
