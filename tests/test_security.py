"""Security (issue 5): jobs run as their submitter, the service never runs user strings in a shell,
nobody acts on another user's job through lyasched, cost summaries are bounded, and the
service's config and database are writable only by the service user (docs/reliability.md).

Unit tests run everywhere; the ones marked ``slurm`` use the real test cluster as the test users.
"""

from __future__ import annotations

import ast
import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from lyasched.cli import main as lyasched_main
from lyasched.security import CORRECTION_BOUNDS, bounded_correction, check_permissions, clamp_run_times, service_paths
from lyasched.store import costtable, records
from lyasched.summary import CostSummary, new_uid

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "lyasched"

sys.path.insert(0, str(Path(__file__).parent))
from test_service import FakeJob, FakeSlurm, StartAs, service  # noqa: E402  (the service's fake Slurm)

# ---------------------------------------------------------------- no shell, no user code


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def _name(func: ast.AST) -> str:
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    return func.id if isinstance(func, ast.Name) else ""


def test_no_shell_anywhere_in_lyasched() -> None:
    """No subprocess call with shell=True (or a non-literal shell=), no os.system/os.popen, no
    subprocess.getoutput: every process lyasched starts is an argv list."""
    offenders = []
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 20
    for f in files:
        tree = ast.parse(f.read_text(), filename=str(f))
        for call in _calls(tree):
            name = _name(call.func)
            if name in {"os.system", "os.popen", "subprocess.getoutput", "subprocess.getstatusoutput",
                        "os.execl", "os.execlp", "os.spawnl", "os.spawnlp", "pty.spawn"}:
                offenders.append(f"{f.relative_to(REPO)}:{call.lineno} {name}")
            for kw in call.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    offenders.append(f"{f.relative_to(REPO)}:{call.lineno} {name}(shell=...)")
    assert offenders == []


def test_the_service_starts_processes_only_through_slurm_cli() -> None:
    """service.py has no process-starting code of its own: everything goes through SlurmCLI.run,
    which runs only argv lists of Slurm tools."""
    src = (PKG / "service.py").read_text()
    tree = ast.parse(src)
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names} | {n.module.split(".")[0] for n in ast.walk(tree)
                                      if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"subprocess", "pty", "shlex"}
    assert "os.system" not in src and "Popen" not in src


SHELLY = "$(touch /tmp/lyasched-pwned)`id`;rm -rf ~ #\n'\""


def test_service_runs_only_slurm_tools_and_never_user_strings(tmp_path) -> None:
    """A slot over jobs whose name and comment are shell bait: the service's argv lists name only
    squeue/scontrol/sacct, and no argument carries the user's strings."""
    db = records.open_records(":memory:")
    good = CostSummary(uid="uid-shell-0001", sig="cnn:test", global_batch=8, iterations=10, min_gpus=1, max_gpus=4,
                       alpha=0.01, beta=0.001, params=1000).encode()
    slurm = FakeSlurm(jobs=[FakeJob("201", good, name=SHELLY.replace("\n", " ")),
                            FakeJob("202", "lyasched:v1;id=$(id);sig=`x`", name="x")])
    svc = service(db, slurm, StartAs({"201": ((0, 1),)}))
    svc.run_slot()
    assert {c[0] for c in slurm.calls} <= {"squeue", "scontrol", "sacct"}
    assert slurm.actions("release") == [["scontrol", "release", "201"]]
    for c in slurm.calls:
        assert not any("$(" in a or "`" in a or "rm -rf" in a for a in c), c
    assert records.get_job(db, "slurm-202")["state"] == "invalid"  # a forged comment is never released
    assert not Path("/tmp/lyasched-pwned").exists()


# ---------------------------------------------------------------- nobody acts for another user


def test_another_users_job_copying_a_uid_cannot_hide_the_original() -> None:
    """uids are visible in squeue: mallory resubmitting alice's uid must not take alice's job over."""
    uid = "uid-victim-0001"
    s = CostSummary(uid=uid, sig="cnn:test", global_batch=8, iterations=10, min_gpus=1, max_gpus=4, alpha=0.01,
                    beta=0.001, params=1000).encode()
    for order in (1, -1):
        db = records.open_records(":memory:")
        jobs = [FakeJob("301", s, user="alice", submit=1_000_000.0), FakeJob("302", s, user="mallory", submit=1_000_050.0)]
        pol = StartAs({})
        service(db, FakeSlurm(jobs=jobs[::order]), pol).run_slot()
        assert [w.job_id for w in pol.states[0].waiting] == ["301"]
        assert records.get_job(db, uid)["user"] == "alice"


def test_lyastat_shows_only_your_jobs_by_default(tmp_path) -> None:
    """Default view = the caller's jobs (like `squeue --me`); --all shows everybody's (the records are
    world-readable by design, docs/reliability.md)."""
    from lyasched.cli.lyastat import main as lyastat

    path = tmp_path / "svc.db"
    db = records.open_records(path)
    me = pwd.getpwuid(os.getuid()).pw_name
    records.upsert_job(db, "uid-mine-0001", slurm_id="11", user=me, name="mine", state="waiting")
    records.upsert_job(db, "uid-them-0001", slurm_id="12", user="someoneelse", name="secret-project", state="waiting")
    db.conn.close()
    r = CliRunner().invoke(lyastat, ["--db", str(path), "--no-slurm", "--json"])
    assert r.exit_code == 0, r.output
    assert [j["jobid"] for j in json.loads(r.stdout)["jobs"]] == ["11"]
    assert "secret-project" not in r.stdout
    r = CliRunner().invoke(lyastat, ["--db", str(path), "--no-slurm", "--json", "--all"])
    assert sorted(j["jobid"] for j in json.loads(r.stdout)["jobs"]) == ["11", "12"]


# ---------------------------------------------------------------- forged or oversized cost summaries


def test_oversized_summary_is_clamped_to_the_slurm_time_limit() -> None:
    """The largest summary the grammar allows (1e9 iterations of 1000 s each) on a job with a 10-minute
    limit: no prediction the policy sees exceeds 600 s, nor the work bound 600 s x gmax."""
    huge = CostSummary(uid="uid-huge-0001", sig="cnn:test", global_batch=1024, iterations=1_000_000_000,
                       min_gpus=1, max_gpus=8, alpha=1000.0, beta=1000.0, params=10**12, bytes_per_param=8).encode()
    db = records.open_records(":memory:")
    pol = StartAs({})
    service(db, FakeSlurm(jobs=[FakeJob("401", huge, limit="10:00")]), pol).run_slot()
    (w,) = pol.states[0].waiting
    for row in (w.run_one_node, w.run_multi_node):
        assert np.all(row[np.isfinite(row)] <= 600)
    assert w.work <= 600 * 8
    stored = [x for x in json.loads(records.get_job(db, "uid-huge-0001")["pred_one"]) if x is not None]
    assert stored and max(stored) <= 600


def test_tiny_claim_is_corrected_by_observed_run_times_within_bounds(tmp_path) -> None:
    """A summary claiming 1 s for a job that really takes 1000 s: each observation moves the learned
    correction by a bounded step, and it saturates at CORRECTION_BOUNDS[1] (never beyond)."""
    db = records.open_records(tmp_path / "svc.db")
    costtable.put(db, {"signature": "liar", "device_type": "gpu", "model": "liar", "alpha": 1e-6, "beta": 0.0,
                       "params": 10, "source": "measured"})
    c_prev, steps = 1.0, []
    for _ in range(20):
        e = costtable.refine(db, "liar", "gpu", predicted_s=1.0 * c_prev, observed_s=1000.0)
        steps.append(e.correction - c_prev)
        c_prev = e.correction
    assert c_prev == pytest.approx(CORRECTION_BOUNDS[1])
    assert max(steps) <= costtable.REFINE_WEIGHT * costtable.RATIO_BOUNDS[1] + 1e-9  # one lie, one bounded step
    assert clamp_run_times([1.0, 0.5, np.inf], time_limit=600, correction=c_prev).tolist() == [2.0, 1.0, np.inf]
    # and the other way: a summary can never make the correction leave its bounds
    assert bounded_correction(1e9) == CORRECTION_BOUNDS[1] and bounded_correction(1e-9) == CORRECTION_BOUNDS[0]
    assert bounded_correction(float("nan")) == 1.0 and bounded_correction(None) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=16),
       st.one_of(st.none(), st.floats(min_value=1, max_value=1e7)),
       st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
def test_clamp_run_times_bounds(row, limit, correction) -> None:
    out = clamp_run_times(row, limit, correction)
    assert out.shape == (len(row),)
    a = np.asarray(row, dtype=float)
    assert np.all(np.isinf(out) == ~np.isfinite(a))  # not allowed stays not allowed, and only that
    fin = out[np.isfinite(out)]
    assert np.all(fin >= 0)
    if limit is not None:
        assert np.all(fin <= limit)


# ---------------------------------------------------------------- file permissions


def test_check_permissions(tmp_path) -> None:
    d = tmp_path / "svc"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    cfg = d / "config.toml"
    cfg.write_text("")
    cfg.chmod(0o644)
    assert check_permissions([d, cfg, d / "missing.db", None]) == []
    d.chmod(0o775)
    assert check_permissions([d]) == [f"{d}: group-writable (mode 0775); run chmod go-w {d}"]
    d.chmod(0o777)
    assert "group- and world-writable (mode 0777)" in check_permissions([d])[0]
    d.chmod(0o1777)  # sticky, like /tmp: others cannot replace our files; the files are checked themselves
    assert check_permissions([d]) == []
    cfg.chmod(0o646)
    assert check_permissions([cfg]) == [f"{cfg}: world-writable (mode 0646); run chmod go-w {cfg}"]
    cfg.chmod(0o644)
    other = 4242 if os.geteuid() != 4242 else 4243
    if os.geteuid() == 0:  # a file root owns is trusted whoever runs the service; one of another user is not
        assert check_permissions([cfg], uid=other) == []
        os.chown(cfg, other, -1)
        msg = check_permissions([cfg])
        assert len(msg) == 1 and f"owned by uid {other}, not by the service user" in msg[0]
        assert check_permissions([cfg], uid=other) == []
    else:
        assert "not by the service user" in check_permissions([cfg], uid=other)[0]


def test_service_paths(tmp_path) -> None:
    p = service_paths(str(tmp_path / "c.toml"), tmp_path / "a" / "b" / "x.db")
    assert p[0] == tmp_path / "c.toml" and p[-1] == tmp_path  # the nearest existing parent of a new db
    assert service_paths("<defaults>", ":memory:") == []


@pytest.mark.parametrize("what", ["config-world-writable", "db-dir-group-writable", "db-world-writable"])
def test_serve_refuses_to_start_on_writable_config_or_db(tmp_path, what) -> None:
    d = tmp_path / "svc"
    d.mkdir()
    d.chmod(0o755)
    db = d / "lyasched.db"
    cfg = d / "config.toml"
    cfg.write_text(f'[service]\ndb = "{db}"\nslurm_timeout = 1\n')
    cfg.chmod(0o644)
    if what == "config-world-writable":
        cfg.chmod(0o666)
    elif what == "db-dir-group-writable":
        d.chmod(0o775)
    else:
        records.open_records(db).conn.close()
        db.chmod(0o666)
    before = sorted(p.name for p in d.iterdir())
    r = CliRunner().invoke(lyasched_main, ["serve", "--config", str(cfg), "--once"])
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: refusing to start: ") and "writable" in lines[0]
    assert sorted(p.name for p in d.iterdir()) == before  # nothing created: no database, no slot


# ---------------------------------------------------------------- real cluster


def _summary() -> str:
    return CostSummary(uid=new_uid(), sig="sec:test", global_batch=8, iterations=5, min_gpus=1, max_gpus=4,
                       alpha=0.01, beta=0.001, params=1000).encode()


def _squeue(job: str, fmt: str) -> str:
    return subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-o", fmt], capture_output=True, text=True,
                          timeout=30).stdout.strip()


@pytest.fixture
def held(as_user, test_user, slurm_jobs, job_dir):
    """A held lyasched job of test_user that writes `id -un` into job_dir/who when it runs."""
    def submit(wrap: str = f"id -un > {job_dir}/who") -> str:
        p = as_user(test_user, "sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1", "--time=2",
                    f"--comment={_summary()}", "--wrap", wrap)
        assert p.returncode == 0, p.stderr
        job = p.stdout.strip().split(";")[0]
        slurm_jobs.append(job)
        return job
    return submit


@pytest.mark.slurm
def test_job_released_by_the_service_path_runs_as_its_submitter(held, test_user, job_dir, wait_job) -> None:
    """The service (root here) resizes and releases with the argv it uses in production; the job runs
    as the user who submitted it, not as the service."""
    from lyasched.slurm import SlurmCLI
    from lyasched.slurm import commands

    job = held()
    assert _squeue(job, "%T|%r") == "PENDING|JobHeldUser"
    cli = SlurmCLI(timeout=30)
    cli.run(commands.update_args(job, 1, 1))
    cli.run(commands.release_args(job))
    assert wait_job(job, timeout=90) == "COMPLETED"
    who = job_dir / "who"
    assert who.read_text().strip() == test_user
    assert who.stat().st_uid == pwd.getpwnam(test_user).pw_uid
    assert _squeue(job, "%u") == test_user


@pytest.mark.slurm
@pytest.mark.parametrize("actor", ["owner", "other"])
def test_nobody_but_the_service_releases_or_changes_a_lyasched_job(held, as_user, test_user, other_user, actor):
    job = held()
    user = test_user if actor == "owner" else other_user
    comment = _squeue(job, "%k")
    attempts = [["scontrol", "release", job], ["scontrol", "update", f"jobid={job}", "priority=1000000"],
                ["scontrol", "update", f"jobid={job}", "comment=lyasched:v1;forged"],
                ["scontrol", "update", f"jobid={job}", "TimeLimit=30"], ["scontrol", "requeue", job]]
    if actor == "other":
        attempts.append(["scontrol", "update", f"jobid={job}", "TimeLimit=1"])  # the owner may shorten it (below)
    if actor == "other":
        attempts.append(["scancel", job])
    for argv in attempts:
        p = as_user(user, *argv)
        assert p.returncode != 0, (argv, p.stdout)
        assert p.stderr.strip(), argv
    time.sleep(0.5)
    assert _squeue(job, "%T|%r|%Q") == "PENDING|JobHeldUser|0"
    assert _squeue(job, "%k") == comment
    if actor == "owner":  # a shorter time limit of its own job is the owner's (Slurm's right); the hold stays
        assert as_user(user, "scontrol", "update", f"jobid={job}", "TimeLimit=1").returncode == 0
        assert _squeue(job, "%T|%r|%Q|%l") == "PENDING|JobHeldUser|0|1:00"


@pytest.mark.slurm
def test_lyasub_uid_of_another_users_job_does_not_return_it(held, as_user, test_user, other_user, slurm_jobs,
                                                           job_dir, cluster) -> None:
    """lyasub's idempotent lookup searches only the caller's jobs: reusing someone's uid gets your own new job."""
    victim = held("sleep 60")
    uid = CostSummary.decode(_squeue(victim, "%k")).uid
    script = job_dir / "train.py"
    script.write_text("print('x')\n")
    script.chmod(0o644)
    lyasub = cluster.which("lyasub")
    p = as_user(other_user, lyasub, "--db", f"{job_dir}/other.db", "--model", "mlp", "--global-batch", "8",
                "--iterations", "5", "--no-profile", "--parsable", "--uid", uid, "--output", "/dev/null", "--",
                str(script), timeout=180)
    assert p.returncode == 0, p.stderr
    mine = p.stdout.strip()
    slurm_jobs.append(mine)
    assert mine != victim
    assert _squeue(mine, "%u") == other_user and _squeue(victim, "%u") == test_user


def test_a_line_break_in_a_job_name_does_not_stop_the_queue_parser() -> None:
    """`squeue -o` does not escape: the name's newline splits the job's line (output recorded on the
    22.05 cluster). The plugin now refuses such names; the parser (R1) also survives them."""
    from lyasched.slurm import query as q

    out = "2633|lyaother|1002|PENDING|JobHeldUser|0|2026-11-22T15:00:00|N/A|N/A|UNLIMITED|1|gres:gpu:1||gpu|c\nd|evil\nname|x\n"
    assert q.parse_squeue(out) == []
    [job] = q.parse_squeue(out, lyasched_only=False)
    assert job.job_id == "2633" and job.user == "lyaother"


@pytest.mark.slurm
@pytest.mark.parametrize("name", ["evil\nname", "a\u2028b", "cr\rx", "vt\x0bx"])
def test_plugin_refuses_line_breaks_in_names_and_comments(as_user, other_user, slurm_jobs, name) -> None:
    for opt in (f"--job-name={name}", f"--comment={name}"):
        p = as_user(other_user, "sbatch", "--parsable", "--hold", "-o", "/dev/null", opt, "--wrap", "true")
        if p.returncode == 0:
            slurm_jobs.append(p.stdout.strip())
        assert p.returncode != 0 and "must not contain control characters or line separators" in p.stderr, opt


@pytest.mark.slurm
def test_plugin_refuses_renaming_a_job_with_a_line_break(as_user, other_user, slurm_jobs) -> None:
    p = as_user(other_user, "sbatch", "--parsable", "--hold", "-o", "/dev/null", "--job-name=plain", "--wrap", "true")
    assert p.returncode == 0, p.stderr
    job = p.stdout.strip()
    slurm_jobs.append(job)
    r = as_user(other_user, "scontrol", "update", f"jobid={job}", "name=x\ny")
    assert r.returncode != 0
    assert _squeue(job, "%j") == "plain"
    out = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
