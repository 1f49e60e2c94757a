"""Hostile users on the real Slurm test cluster: jobs that end by replacing their step report
with a FIFO, a link to a root-only file, a link to /dev/zero, a 16 GiB sparse file, a report
named for another user's job, or a report of absurd step times. The service (2 s slots) must
keep its cadence, another user's job must start and finish as before, nothing of the hostile
files may reach the service's log or database, and the absurd report may move the other user's
prediction by at most the stated bound (lyasched.costmodel.learn.LEARN_BOUND). Needs `slurm/cluster up`
and LYASCHED_SLURM=1; unit versions: tests/test_userfiles.py."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

import pytest

from lyasched.costmodel.learn import LEARN_BOUND
from lyasched.store import costtable, records
from test_serve_slurm import REPO, TRAIN, lyasub, serve, wait_all, work  # noqa: F401 -- fixtures

pytestmark = pytest.mark.slurm

SLOT = 2.0  # the serve fixture's slot_seconds

HOSTILE = """\
import atexit, os, runpy, sys
kind = sys.argv.pop(1)
path = os.environ["LYASCHED_STEPS_FILE"]
def hostile():  # registered first, so it runs after the step reporter's own flush at exit
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "secret":
        os.symlink({secret!r}, path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.write(b"S\\t0\\t0\\t1\\t0.5\\n")
            f.truncate(16 << 30)
    elif kind == "other":
        with open(os.path.join(os.path.dirname(path), "steps-" + {other!r} + ".tsv"), "w") as f:
            f.write("M\\t0\\t{{}}\\n" + "".join("S\\t0\\t%d\\t%d\\t3000\\n" % (i, 1e9 + i) for i in range(20)))
    elif kind == "absurd":
        with open(path, "w") as f:
            f.write('M\\t0\\t{{"local_bsz": 8, "model": "mlp\\\\u001b[31m"}}\\n')
            f.write("".join("S\\t0\\t%d\\t%d\\t80000\\n" % (i, 1e9 + i) for i in range(50)))
atexit.register(hostile)
sys.argv = [{train!r}] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


def _submit(as_user, user: str, d: Path, script: str, name: str, *extra: str) -> str:
    from conftest import CLUSTER

    r = as_user(user, CLUSTER.which("lyasub"), "--parsable", "--no-profile", "--db", str(d / f"{user}.db"),
                "--time", "5", "--output", str(d / "%j.out"), "--job-name", name, "--model", "mlp",
                "--global-batch", "8", "--iterations", "30", "--min-gpus", "1", "--max-gpus", "1", "--",
                str(d / script), *extra, "--model", "mlp", cwd=str(d), timeout=120)
    assert r.returncode == 0, r.stderr
    jid = r.stdout.strip().splitlines()[-1]
    assert jid.isdigit(), r.stdout
    return jid


def test_hostile_step_reports_neither_stall_nor_leak_nor_steer(serve, work, job_dir, test_user, other_user,  # noqa: F811
                                                               as_user, slurm_jobs):
    secret = job_dir / "secret"
    token = "TOPSECRET-" + secrets.token_hex(8)
    secret.write_text(token + "\n")
    secret.chmod(0o600)  # root's alone: a job of the test user cannot read it, the service (root) could
    mine, theirs = job_dir / "mine", job_dir / "theirs"
    for d, user in ((mine, test_user), (theirs, other_user)):
        d.mkdir()
        uid = int(as_user(user, "id", "-u").stdout)
        os.chown(d, uid, uid)
        (d / "train.py").write_text(f"import runpy, sys\nsys.argv = [{str(TRAIN)!r}] + sys.argv[1:]\n"
                                    f"runpy.run_path({str(TRAIN)!r}, run_name='__main__')\n")
    proc, db_path = serve(users=[test_user, other_user])
    # the other user's honest job first: its id is what one hostile report claims to be
    honest0 = _submit(as_user, other_user, theirs, "train.py", "honest0")
    slurm_jobs.append(honest0)
    (mine / "hostile.py").write_text(HOSTILE.format(secret=str(secret), other=honest0, train=str(TRAIN)))
    kinds = ["fifo", "secret", "zero", "huge", "other", "absurd"]
    hostile = {k: _submit(as_user, test_user, mine, "hostile.py", f"hostile-{k}", k) for k in kinds}
    slurm_jobs.extend(hostile.values())
    log = work / "serve.log"
    done = wait_all([honest0, *hostile.values()], timeout=240, log=log)
    assert all(j.state == "COMPLETED" for j in done.values()), {i: j.state for i, j in done.items()}

    # every finished job has been through the service's learning step (the hostile reads included)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = [records.job_by_slurm_id(records.open_readonly(db_path), j) for j in [honest0, *hostile.values()]]
        if all(r and r["refined"] for r in rows):
            break
        time.sleep(1)
    assert all(r and r["refined"] for r in rows), log.read_text()[-3000:]
    t_after = time.time()
    # ... and then another user's job still starts and finishes as before
    honest1 = _submit(as_user, other_user, theirs, "train.py", "honest1")
    slurm_jobs.append(honest1)
    assert wait_all([honest1], timeout=120, log=log)[honest1].state == "COMPLETED"
    assert proc.poll() is None, log.read_text()[-3000:]

    text = log.read_text(errors="replace")
    db = records.open_records(db_path)
    slots = [r for r in db.query("select time, duration, error from slots order by id")]
    times = [r["time"] for r in slots]
    gaps = [b - a for a, b in zip(times, times[1:])]
    # the cadence: every slot within one slot's normal duration of when it was due
    assert max(gaps) <= 2 * SLOT, (max(gaps), text[-3000:])
    assert max(r["duration"] for r in slots) < SLOT and not any(r["error"] for r in slots)
    assert any(t > t_after for t in times)

    # each refused file is said once in the log, with the reason, never its content
    for kind, reason in (("fifo", "is a FIFO"), ("secret", "is a symbolic link"), ("zero", "is a symbolic link"),
                         ("huge", "its first part used")):
        said = [ln for ln in text.splitlines() if f"job {hostile[kind]}: step report ignored" in ln]
        assert len(said) == 1 and reason in said[0], (kind, said)
    blobs = [text.encode()] + [Path(f"{db_path}{s}").read_bytes() for s in ("", "-wal") if Path(f"{db_path}{s}").exists()]
    assert not any(token.encode() in b or b"\x1b[31m" in b for b in blobs)

    # the absurd report (80000 s steps) taught its own user's profile and moved the shared one (what
    # other users' jobs are predicted with) by at most LEARN_BOUND; the other user's own is hers alone
    (entry,) = costtable.list_entries(db)
    base, shared = entry.profile(learned=False), entry.profile()
    assert 1 / LEARN_BOUND - 1e-9 <= shared.step_time(8) / base.step_time(8) <= LEARN_BOUND + 1e-9
    theirs_prof = costtable.learned_profile(db, entry.signature, entry.device_type, other_user)
    assert theirs_prof is not None and theirs_prof.step_time(8) < 60  # honest steps are well under a second
    runs = [r["job_id"] for r in db.query("select job_id from profile_runs")]
    assert hostile["absurd"] in runs and honest0 in runs and hostile["other"] not in runs
