"""Fault suites of issue 5 against the real local Slurm cluster (docs/reliability.md, "Faults").

    flock /run/lock/lyasched-rel.lock python -m tests.reliability.faults [--json] [--kills 20] [--outage 120]
                                                                         [--only kills,outage,flaky,minjobage]

Each ``run_*`` function drives real ``lyasched serve`` processes, real ``sbatch``/``scontrol``
and real jobs of the unprivileged test user, and returns counts (`benchmarks/reliability.py`
runs them at full size; `tests/test_faults.py` calls them with small sizes):

- `run_kills(n)`: SIGKILL the service n times at named points of a slot (``LYASCHED_CRASH_AT``,
  including between ``scontrol update`` and ``release``) and at random moments; after each kill
  a restart (``serve --once``) must reconcile and leave the records consistent; at the end every
  job completed exactly once.
- `run_outage(seconds)`: stop slurmctld (SIGTERM, by the pid the cluster script recorded) for
  ``seconds`` while jobs run and wait, start it again the way ``slurm/cluster up`` does.
- `run_flaky()`: Slurm commands failing, hanging and losing answers (`flaky_slurm`) under
  the service and under ``lyasub``.
- `run_minjobage()`: a job finishes while the service is down and is then purged (MinJobAge,
  shown by the wrapper hiding it, see docs): its final state is resolved and recorded.

The caller must hold the shared-cluster lock (``flock /run/lock/lyasched-rel.lock``); nothing
here starts or stops the cluster except slurmctld in `run_outage`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lyasched.slurm import query as q
from lyasched.store import records
from lyasched.summary import CostSummary, new_uid

from . import flaky_slurm
from .users import CLUSTER_STATE, OTHER_USER, TEST_USER, as_user

REPO = Path(__file__).resolve().parents[2]
# The suites' services schedule only TEST_USER's jobs (as every test's service does); the shared
# cluster lock keeps other tests' jobs out of the queue while a suite runs.
CRASH_POINTS = ("before_update", "after_update", "after_release", "after_record", "after_read", "slot_start",
                "before_slot_record")
LYASCHED = shutil.which("lyasched") or "lyasched"
LYASUB = shutil.which("lyasub") or "lyasub"


def say(msg: str) -> None:
    print(f"[rel_faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def squeue(ids: list[str]) -> dict[str, q.SlurmJob]:
    if not ids:
        return {}
    out = subprocess.run(q.squeue_args(job_ids=ids), capture_output=True, text=True, timeout=60).stdout
    return {j.job_id: j for j in q.parse_squeue(out)}


def others_waiting() -> list[str]:
    """Ids of TEST_USER's lyasched jobs that still wait (held or pending): left by another run."""
    out = subprocess.run(q.squeue_args(user=TEST_USER), capture_output=True, text=True, timeout=120).stdout
    return [j.job_id for j in q.parse_squeue(out) if j.pending]


class Bed:
    """A work directory, a service config and database, and the jobs submitted for one suite."""

    def __init__(self, name: str, slot: float = 1.0, grace: float = 30, slurm_timeout: float = 10,
                 backend: str = "cli") -> None:
        foreign = others_waiting()
        if foreign:
            raise RuntimeError(f"{len(foreign)} lyasched job(s) of {TEST_USER} already wait in the queue "
                               f"({', '.join(foreign[:5])}...): another run's; this suite's service would schedule "
                               "them too. Cancel them or wait for that run (hold the shared-cluster lock).")
        self.backend = backend
        self.dir = Path(tempfile.mkdtemp(prefix=f"lyasched-rel-{name}-", dir="/tmp"))
        self.dir.chmod(0o1777)
        (self.dir / "runs").mkdir()
        (self.dir / "runs").chmod(0o1777)
        self.db = self.dir / "lyasched.db"
        self.log = self.dir / "serve.log"
        self.config = self.dir / "config.toml"
        self.config.write_text(
            "[service]\n"
            f"slot_seconds = {slot}\nrelease_grace = {grace}\nslurm_timeout = {slurm_timeout}\n"
            f'db = "{self.db}"\nusers = ["{TEST_USER}"]\nlog_level = "INFO"\n'
            '[policy]\nname = "lyapunov"\n'
            f'[slurm]\nbackend = "{backend}"\n'
        )
        self.script = self.dir / "job.sh"
        # One line per start of the job: a job started twice would leave two lines.
        self.script.write_text(
            "#!/bin/sh\n"
            f'echo "$SLURM_JOB_ID $(date +%s.%N) $SLURM_JOB_NODELIST" >> {self.dir}/runs/$SLURM_JOB_ID\n'
            'sleep "$1"\n'
        )
        self.script.chmod(0o755)
        self.ids: list[str] = []
        self.uids: dict[str, str] = {}
        self.procs: list[subprocess.Popen] = []

    # --------------------------------------------------------- jobs
    def submit(self, n: int, sleep: float = 2, gmin: int = 1, gmax: int = 2, user: str = TEST_USER,
               gpu_type: str = "") -> list[str]:
        """``n`` held lyasched jobs of ``user``, each ``sleep`` seconds; ``gpu_type``: a typed request
        (``--gres=gpu:TYPE:N``), the job runs on that type only."""
        gres = f"gpu:{gpu_type}:{gmin}" if gpu_type else f"gpu:{gmin}"
        out = []
        for _ in range(n):
            uid = new_uid()
            comment = CostSummary(uid=uid, sig="cnn:test", global_batch=8, iterations=100, min_gpus=gmin,
                                  max_gpus=gmax, alpha=0.01, beta=0.002, params=1_000_000).encode()
            r = as_user(user, "sbatch", "--parsable", "-N1", f"--gres={gres}", "-t", "10", "-o", "/dev/null",
                        "--job-name", f"rel-{uid[:6]}", f"--comment={comment}", str(self.script), f"{sleep:g}",
                        cwd=str(self.dir), timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
            jid = r.stdout.strip().split(";")[0]
            self.ids.append(jid)
            self.uids[jid] = uid
            out.append(jid)
        return out

    def runs(self, job_id: str) -> int:
        f = self.dir / "runs" / job_id
        return len(f.read_text().splitlines()) if f.exists() else 0

    def wait(self, ids: list[str], states=q.TERMINAL_STATES, timeout: float = 120) -> dict[str, q.SlurmJob]:
        deadline = time.monotonic() + timeout
        jobs: dict[str, q.SlurmJob] = {}
        while time.monotonic() < deadline:
            jobs = squeue(ids)
            if len(jobs) == len(ids) and all(j.state in states for j in jobs.values()):
                break
            time.sleep(1)
        return jobs

    # --------------------------------------------------------- service
    def start(self, crash_at: str = "", env: dict | None = None) -> subprocess.Popen:
        e = {**os.environ, **(env or {}), "LYASCHED_SLURM_BACKEND": self.backend}
        e.pop("LYASCHED_CRASH_AT", None)
        if crash_at:
            e["LYASCHED_CRASH_AT"] = crash_at
        log = open(self.log, "a")
        log.write(f"---- start {time.time():.3f} crash_at={crash_at or '-'}\n")
        log.flush()
        p = subprocess.Popen([LYASCHED, "serve", "--config", str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                             env=e, cwd=REPO)
        self.procs.append(p)
        return p

    def once(self, env: dict | None = None) -> subprocess.CompletedProcess:
        e = {**os.environ, **(env or {}), "LYASCHED_SLURM_BACKEND": self.backend}
        e.pop("LYASCHED_CRASH_AT", None)
        r = subprocess.run([LYASCHED, "serve", "--config", str(self.config), "--once"], capture_output=True,
                           text=True, env=e, cwd=REPO, timeout=120)
        with open(self.log, "a") as log:
            log.write(f"---- once rc={r.returncode}\n{r.stderr}{r.stdout}")
        return r

    @staticmethod
    def stop(p: subprocess.Popen, timeout: float = 60) -> int | None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                return None
        return p.returncode

    def rows(self) -> dict[str, dict]:
        db = records.open_readonly(self.db)
        try:
            return {r["slurm_id"]: r for r in db.query("select * from jobs")}
        finally:
            db.conn.close()

    def problems(self) -> list[str]:
        db = records.open_records(self.db)
        try:
            return records.consistency_problems(db)
        finally:
            db.conn.close()

    def duplicated(self) -> list[str]:
        """Jobs that started more than once (marker lines), or uids Slurm holds twice."""
        dup = [j for j in self.ids if self.runs(j) > 1]
        per_uid: dict[str, int] = {}
        for j in squeue(self.ids).values():
            per_uid[j.comment] = per_uid.get(j.comment, 0) + 1
        return dup + [c[:40] for c, n in per_uid.items() if n > 1]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if self.ids:
            subprocess.run(["scancel", *self.ids], capture_output=True, timeout=60)
        if os.environ.get("LYASCHED_REL_KEEP"):
            say(f"kept {self.dir}")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def _final(bed: Bed, timeout: float = 180) -> dict[str, Any]:
    """Run the service until every job is final; count lost / duplicated / held / inconsistent."""
    p = bed.start()
    jobs = bed.wait(bed.ids, timeout=timeout)
    time.sleep(3)  # let a slot record the last ends
    rc = bed.stop(p)
    rows = bed.rows()
    not_done = [j for j in bed.ids if jobs.get(j) is None or jobs[j].state != "COMPLETED"]
    unknown = [j for j in bed.ids if j not in rows]
    held = [j for j in bed.ids if j in jobs and jobs[j].pending]
    unrecorded = [j for j in bed.ids if j in rows and rows[j]["state"] != "finished"]
    return {
        "jobs": len(bed.ids),
        "jobs_lost": len(set(not_done) | set(unknown)),
        "jobs_duplicated": len(bed.duplicated()),
        "jobs_held_forever": len(held),
        "jobs_not_recorded_finished": len(unrecorded),
        "db_problems": bed.problems(),
        "final_stop_rc": rc,
        "details": {"not_done": not_done, "unknown": unknown, "held": held, "unrecorded": unrecorded},
    }


# ===================================================================== kills


def run_kills(n: int = 20, seed: int = 5, backend: str = "cli") -> dict[str, Any]:
    """SIGKILL the service ``n`` times: named points (cycled, so ``after_update`` = between update and
    release comes up every few kills) and random external kills during slots."""
    rng = random.Random(seed)
    bed = Bed("kills", slot=1.0, backend=backend)
    # Every other kill at a named point, the update/release gap most often; the rest at random moments.
    named = ["after_update", "before_update", "after_update", "after_release", "after_update", "after_record",
             "after_read", "slot_start", "before_slot_record"]
    plan = [named[i // 2 % len(named)] if i % 2 == 0 else "external" for i in range(n)]
    tried = survived = 0
    failures: list[str] = []
    points: dict[str, int] = {}
    t0 = time.monotonic()
    try:
        bed.submit(6, sleep=2)
        for i, point in enumerate(plan):
            held = [j for j in squeue(bed.ids).values() if j.held_by_service]
            if len(held) < 3:
                bed.submit(4, sleep=2)
            if point == "external":
                p = bed.start()
                time.sleep(rng.uniform(0.8, 3.5))  # start-up is ~0.5 s: the kill lands in or between slots
                p.kill()
            else:
                p = bed.start(crash_at=f"{point}:{rng.randint(1, 2)}")
                try:
                    p.wait(timeout=25)
                except subprocess.TimeoutExpired:  # the point was not reached (nothing to start): kill anyway
                    point = f"{point}(not reached, external)"
                    p.kill()
            rc = p.wait()
            tried += 1
            points[point] = points.get(point, 0) + 1
            if rc != -signal.SIGKILL:
                failures.append(f"kill {i} at {point}: exit {rc}, not SIGKILL")
                continue
            # Restart: one slot reconciles what the killed run left; the records must be consistent.
            r = bed.once()
            probs = bed.problems()
            rows = bed.rows()
            listed = squeue(bed.ids)
            unknown = [j for j in bed.ids if j in listed and j not in rows]
            dup = bed.duplicated()
            if r.returncode != 0 or probs or unknown or dup:
                failures.append(f"kill {i} at {point}: restart rc={r.returncode} problems={probs} unknown={unknown} "
                                f"duplicated={dup} {r.stderr.strip()[-300:]}")
            else:
                survived += 1
            say(f"kill {i + 1}/{n} at {point}: {'ok' if not failures or not failures[-1].startswith(f'kill {i} ') else 'FAILED'}")
        final = _final(bed)
        db = records.open_readonly(bed.db)
        intents = {r["k"]: r["n"] for r in db.query(
            "select case when state = 'applied' and resolution like 'applied: Slurm shows%' then 'applied_on_restart' "
            "when state = 'aborted' and resolution like '%still held%' then 'aborted_redecided' "
            "else state end k, count(*) n from intents group by k")}
        db.conn.close()
    finally:
        bed.close()
    return {
        "kills_tried": tried,
        "kills_survived": survived,
        "kill_points": points,
        "intents": intents,  # applied (in their slot), applied_on_restart, aborted_redecided, ...
        **{k: v for k, v in final.items() if k != "details"},
        "failures": failures + ([str(final["details"])] if any(final["details"].values()) else []),
        "seconds": round(time.monotonic() - t0, 1),
    }


# ===================================================================== outage


def ctld_pid() -> int | None:
    f = CLUSTER_STATE / "run" / "slurmctld.pid"
    try:
        pid = int(f.read_text().strip())
        return pid if Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld" else None
    except (OSError, ValueError):
        return None


def stop_ctld(timeout: float = 30) -> int:
    pid = ctld_pid()
    if pid is None:
        raise RuntimeError("slurmctld is not running (slurm/cluster up)")
    os.kill(pid, signal.SIGTERM)  # a clean stop writes its state to StateSaveLocation
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists():
        raise RuntimeError(f"slurmctld {pid} did not stop")
    return pid


def start_ctld(timeout: float = 60) -> int:
    """As `slurm/cluster up` does: ``slurmctld`` (it recovers its saved state), lock fds closed."""
    subprocess.run(["slurmctld"], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, close_fds=True, timeout=60)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout.count("UP") and ctld_pid():
            return ctld_pid() or 0
        time.sleep(0.5)
    raise RuntimeError("slurmctld did not answer after restart")


def run_outage(seconds: float = 120, backend: str = "cli") -> dict[str, Any]:
    """Stop slurmctld for ``seconds`` while lyasched jobs run (they end during the outage) and wait
    (blocked by another user's plain job that also ends during it); start it again."""
    bed = Bed("outage", slot=2.0, slurm_timeout=5, backend=backend)
    t0 = time.monotonic()
    blocker = None
    result: dict[str, Any] = {"outage_s": seconds}
    stopped = False
    try:
        # Another user's plain job takes 3 GPUs of every node for part of the outage.
        r = as_user(OTHER_USER, "sbatch", "--parsable", "--nodes=3", "--gres=gpu:3", "-t", "10", "-o", "/dev/null",
                    f"--chdir={bed.dir}", "--wrap", f"sleep {seconds * 0.6 + 10:.0f}", timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch blocker: {r.stderr.strip()}")
        blocker = r.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 60  # a plain job: not in q.parse_squeue (lyasched jobs only)
        while subprocess.run(["squeue", "-h", "-j", blocker, "-o", "%T"], capture_output=True, text=True
                             ).stdout.strip() != "RUNNING":
            if time.monotonic() > deadline:
                raise RuntimeError("blocker did not start")
            time.sleep(0.5)
        # one per node: fit the 3 free GPUs. The t4 one is typed: an untyped job rather waits for an
        # a100 (predicted 5x faster, and soon free) than take the t4 (docs/types.md, the backlog rule)
        running = bed.submit(2, sleep=seconds * 0.4 + 8, gmin=1, gmax=1)
        running += bed.submit(1, sleep=seconds * 0.4 + 8, gmin=1, gmax=1, gpu_type="t4")
        queued = bed.submit(3, sleep=3, gmin=2, gmax=2)  # need 2 GPUs on one node: wait for the blocker
        p = bed.start()
        started = bed.wait(running, states={"RUNNING"}, timeout=60)
        if len(started) != 3 or any(not j.running for j in started.values()):
            raise RuntimeError(f"jobs did not start before the outage: {[(i, j.state) for i, j in started.items()]}")
        time.sleep(3)  # a slot records them running
        before = {j: s.state for j, s in squeue(bed.ids).items()}
        pid = stop_ctld()
        stopped = True
        say(f"slurmctld {pid} stopped for {seconds:g}s (jobs: {before})")
        time.sleep(seconds)
        alive_during = p.poll() is None
        new = start_ctld()
        stopped = False
        say(f"slurmctld started again (pid {new})")
        after = squeue(bed.ids)
        state_kept = len(after) == len(bed.ids)
        done = bed.wait(bed.ids, timeout=150)
        time.sleep(4)
        alive_after = p.poll() is None
        rc = bed.stop(p)
        log = bed.log.read_text()
        rows = bed.rows()
        lost = [j for j in bed.ids if j not in rows or done.get(j) is None or done[j].state != "COMPLETED"]
        unrecorded = [j for j in bed.ids if j in rows and rows[j]["state"] != "finished"]
        result.update(
            outages_tried=1,
            service_alive_during=alive_during,
            service_alive_after=alive_after,
            service_stop_rc=rc,
            slurm_state_kept=state_kept,
            outage_error_lines=log.count("Slurm unavailable"),
            recovery_lines=log.count("Slurm available again"),
            retry_lines=log.count("retry "),
            traceback_lines=log.count("Traceback"),
            failed_slots=_failed_slots(bed),
            jobs=len(bed.ids),
            jobs_lost=len(lost),
            jobs_duplicated=len(bed.duplicated()),
            jobs_not_recorded_finished=len(unrecorded),
            queued_started_after=sum(1 for j in queued if rows.get(j, {}).get("released_at", 0) or 0),
            db_problems=bed.problems(),
        )
        result["outages_survived"] = int(
            alive_during and alive_after and rc == 0 and state_kept and not lost and not result["jobs_duplicated"]
            and not unrecorded and result["outage_error_lines"] == 1 and result["recovery_lines"] == 1
            and not result["db_problems"]
        )
        result["log_excerpt"] = [ln for ln in log.splitlines() if "Slurm unavailable" in ln or "available again" in ln]
    finally:
        if stopped:
            start_ctld()
        if blocker:
            subprocess.run(["scancel", blocker], capture_output=True, timeout=60)
        bed.close()
    result["seconds"] = round(time.monotonic() - t0, 1)
    return result


def _failed_slots(bed: Bed) -> int:
    db = records.open_readonly(bed.db)
    try:
        return db.execute("select count(*) from slots where error != ''").fetchone()[0]
    finally:
        db.conn.close()


# ===================================================================== failing / hanging commands


def run_flaky(backend: str = "cli") -> dict[str, Any]:
    """Failing, hanging and answer-losing Slurm commands under the service and under lyasub."""
    t0 = time.monotonic()
    out: dict[str, Any] = {}
    bed = Bed("flaky", slot=1.0, slurm_timeout=2, backend=backend)
    fdir = bed.dir / "flaky"
    fdir.mkdir()
    fdir.chmod(0o1777)
    try:
        # ---- the service: deterministic faults on its first calls, then random ones (seeded)
        ids = bed.submit(6, sleep=2)
        env = {
            "LYASCHED_SLURM_PREFIX": flaky_slurm.prefix(),
            "FLAKY_DIR": str(fdir), "FLAKY_HANG_S": "30",
            "FLAKY_RULES": ("squeue#1=fail;squeue#2=fail;squeue#3=fail;scontrol show#2=hang;"
                            "scontrol update#1=fail;scontrol update#2=fail;scontrol update#3=fail;"
                            "scontrol release#2=lost;scontrol release#3=hang"),
            "FLAKY_SEED": "7", "FLAKY_P": "0.1", "FLAKY_P_HANG": "0.03",
        }
        p = bed.start(env=env)
        jobs = bed.wait(ids, timeout=150)
        time.sleep(3)
        alive = p.poll() is None
        rc = bed.stop(p)
        calls = (fdir / "calls.log").read_text().splitlines()
        injected = [c for c in calls if c.split()[-2] != "run"]  # "N KEY#n ACTION TIME" (KEY may hold a space)
        log = bed.log.read_text()
        rows = bed.rows()
        db = records.open_readonly(bed.db)
        failed_decisions = db.execute("select count(*) from decisions where action = 'failed'").fetchone()[0]
        failed_slots = db.execute("select count(*) from slots where error != ''").fetchone()[0]
        db.conn.close()
        lost = [j for j in ids if jobs.get(j) is None or jobs[j].state != "COMPLETED" or j not in rows]
        out["service"] = {
            "calls": len(calls), "injected": len(injected),
            "injected_by_kind": {k: sum(1 for c in injected if c.split()[-2] == k) for k in ("fail", "hang", "lost")},
            "failed_slots_recorded": failed_slots, "failed_starts_recorded": failed_decisions,
            "error_log_lines": sum(1 for ln in log.splitlines() if " ERROR " in ln),
            "service_alive": alive, "stop_rc": rc,
            "jobs": len(ids), "jobs_lost": len(lost), "jobs_duplicated": len(bed.duplicated()),
            "db_problems": bed.problems(),
        }
        # ---- lyasub through PATH shims
        out["lyasub"] = _flaky_lyasub(bed)
    finally:
        bed.close()
    svc, sub = out["service"], out["lyasub"]
    out["faults_tried"] = svc["injected"] + sub["tried"]
    out["silent"] = (0 if (svc["failed_slots_recorded"] + svc["failed_starts_recorded"]) and svc["error_log_lines"] else 1) \
        + sub["silent"]
    out["jobs_lost"] = svc["jobs_lost"] + sub["lost"]
    out["jobs_duplicated"] = svc["jobs_duplicated"] + sub["duplicated"]
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def _flaky_lyasub(bed: Bed) -> dict[str, Any]:
    shims = flaky_slurm.install_shims(bed.dir / "shims", python=str(CLUSTER_STATE / "python")
                                      if (CLUSTER_STATE / "python").exists() else sys.executable)
    for f in [shims, *shims.iterdir()]:
        f.chmod(0o755)
    cases = [
        # (name, rules, expect: "one job" | "error, no job")
        ("sbatch answer lost", "sbatch#1=lost", "one job"),
        ("sbatch fails", "sbatch#*=fail", "error, no job"),
        ("squeue fails once (retried)", "squeue#1=fail", "one job"),
        ("controller unreachable", "squeue#*=fail;sbatch#*=fail;scontrol#*=fail", "error, no job"),
    ]
    res: dict[str, Any] = {"tried": 0, "as_expected": 0, "silent": 0, "lost": 0, "duplicated": 0, "cases": []}
    for name, rules, expect in cases:
        fdir = Path(tempfile.mkdtemp(prefix="flaky-", dir=bed.dir))
        fdir.chmod(0o1777)
        uid = new_uid()
        env = {**os.environ, "PATH": f"{shims}:{os.environ['PATH']}", "FLAKY_DIR": str(fdir), "FLAKY_RULES": rules,
               "LYASCHED_SLURM_BACKEND": bed.backend}
        if bed.backend != "cli":  # the pyslurm worker goes through the injector as a prefix (PATH shims: the CLI)
            env["LYASCHED_SLURM_PREFIX"] = flaky_slurm.prefix()
        r = as_user(TEST_USER, LYASUB, "--parsable", "--no-profile", "--uid", uid, "--db", str(bed.dir / "sub.db"),
                    "--time", "5", "--output", "/dev/null", "--model", "mlp", "--global-batch", "8",
                    "--iterations", "3", "--", str(bed.script), "1", env=env, cwd=str(bed.dir), timeout=180)
        found = [j for j in q.parse_squeue(subprocess.run(q.squeue_args(user=TEST_USER), capture_output=True,
                                                          text=True).stdout) if f"id={uid}" in j.comment]
        for j in found:
            bed.ids.append(j.job_id)  # cancelled at the end
        err = r.stderr.strip().splitlines()
        if expect == "one job":
            ok = r.returncode == 0 and len(found) == 1 and r.stdout.strip().splitlines()[-1] == found[0].job_id
        else:
            ok = r.returncode != 0 and not found and len(err) >= 1 and err[-1].startswith(("lyasub: error", "Error"))
        res["tried"] += 1
        res["as_expected"] += ok
        res["silent"] += int(r.returncode != 0 and not err)
        res["lost"] += int(expect == "one job" and not found)
        res["duplicated"] += max(0, len(found) - 1)
        res["cases"].append({"case": name, "rc": r.returncode, "jobs_with_uid": len(found), "ok": ok,
                             "stderr_last": err[-1][:200] if err else ""})
    return res


# ===================================================================== MinJobAge


def run_minjobage(backend: str = "cli") -> dict[str, Any]:
    """A job the service saw running finishes while the service is down and is then purged by Slurm.

    Purging needs MinJobAge to pass (3600 s here; lowering it changes the cluster for everyone),
    so the purge is shown by `flaky_slurm` hiding the finished job from ``squeue`` and
    ``scontrol show job``, exactly what both print for a purged job; everything else is real."""
    t0 = time.monotonic()
    bed = Bed("minjobage", slot=1.0, backend=backend)
    fdir = bed.dir / "flaky"
    fdir.mkdir()
    try:
        ids = bed.submit(2, sleep=10)  # long enough that a slot sees them running even on a loaded machine
        p = bed.start()
        bed.wait(ids, states={"RUNNING"}, timeout=60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(bed.rows().get(j, {}).get("state") != "running" for j in ids):
            time.sleep(0.5)
        seen_running = sum(bed.rows().get(j, {}).get("state") == "running" for j in ids)
        bed.stop(p)  # the service is down ...
        bed.wait(ids, timeout=60)  # ... while the jobs finish ...
        env = {"LYASCHED_SLURM_PREFIX": flaky_slurm.prefix(),
               "FLAKY_DIR": str(fdir), "FLAKY_HIDE_JOBS": ",".join(ids)}  # ... and are purged
        r = bed.once(env=env)
        rows = bed.rows()
        resolved = [j for j in ids if rows[j]["state"] == "vanished" and rows[j]["slurm_state"] == "UNKNOWN_COMPLETED"
                    and "last seen RUNNING" in (rows[j]["reason"] or "")]
        # If Slurm lists the job again (the purge was only a missing answer), it is followed to its real end.
        r2 = bed.once()
        rows2 = bed.rows()
        revived = [j for j in ids if rows2[j]["state"] == "finished" and rows2[j]["slurm_state"] == "COMPLETED"
                   and rows2[j]["observed"]]
        acct = records.get_meta(records.open_readonly(bed.db), "accounting")
        out = {
            "jobs": len(ids), "seen_running": seen_running, "restart_rc": r.returncode,
            "resolved": len(resolved), "accounting": acct,
            "recorded": {j: {k: rows[j][k] for k in ("state", "slurm_state", "reason")} for j in ids},
            "relisted_followed_to_end": len(revived), "relist_rc": r2.returncode,
            "jobs_lost": len(ids) - len(resolved), "db_problems": bed.problems(),
        }
    finally:
        bed.close()
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


# ===================================================================== main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--outage", type=float, default=120, help="seconds slurmctld stays down")
    ap.add_argument("--only", default="kills,outage,flaky,minjobage")
    ap.add_argument("--backend", default="cli", choices=["cli", "pyslurm", "auto"], help="the service's Slurm backend")
    a = ap.parse_args(argv)
    which = set(a.only.split(","))
    res: dict[str, Any] = {}
    if "kills" in which:
        res["kills"] = run_kills(a.kills, backend=a.backend)
    if "outage" in which:
        res["outage"] = run_outage(a.outage, backend=a.backend)
    if "flaky" in which:
        res["flaky"] = run_flaky(backend=a.backend)
    if "minjobage" in which:
        res["minjobage"] = run_minjobage(backend=a.backend)
    if a.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        print("\n".join(report_lines(res)))
    return 0


def report_lines(res: dict[str, Any]) -> list[str]:
    """The human-readable figures of a result (``python -c`` on a saved --json gives the same lines)."""
    out: list[str] = []
    print = out.append  # noqa: A001 - the lines below were prints
    if "kills" in res:
        k = res["kills"]
        print(f"kills survived / tried: {k['kills_survived']} / {k['kills_tried']} (points {k['kill_points']}, "
              f"starts: {k['intents']})")
        print(f"  jobs {k['jobs']}: lost {k['jobs_lost']}, duplicated {k['jobs_duplicated']}, held forever "
              f"{k['jobs_held_forever']}, db problems {len(k['db_problems'])} ({k['seconds']} s)")
    if "outage" in res:
        o = res["outage"]
        print(f"outages survived: {o.get('outages_survived', 0)} / 1 (slurmctld down {o['outage_s']:g} s; "
              f"service alive {o.get('service_alive_during')}/{o.get('service_alive_after')}, state kept "
              f"{o.get('slurm_state_kept')}, log: {o.get('outage_error_lines')} outage + {o.get('recovery_lines')} "
              f"recovery line(s), {o.get('failed_slots')} failed slots recorded)")
        print(f"  jobs {o.get('jobs')}: lost {o.get('jobs_lost')}, duplicated {o.get('jobs_duplicated')} ({o['seconds']} s)")
    if "flaky" in res:
        f = res["flaky"]
        s, u = f["service"], f["lyasub"]
        print(f"flaky Slurm: {f['faults_tried']} faults injected, silent {f['silent']}, jobs lost {f['jobs_lost']}, "
              f"duplicated {f['jobs_duplicated']} ({f['seconds']} s)")
        print(f"  service: {s['injected']} of {s['calls']} calls ({s['injected_by_kind']}), "
              f"{s['failed_slots_recorded']} failed slots + {s['failed_starts_recorded']} failed starts recorded, "
              f"{s['error_log_lines']} ERROR log lines, all {s['jobs']} jobs completed: {not s['jobs_lost']}")
        print(f"  lyasub: {u['as_expected']} / {u['tried']} cases as expected: "
              + "; ".join(f"{c['case']}: rc {c['rc']}, {c['jobs_with_uid']} job(s)" for c in u["cases"]))
    if "minjobage" in res:
        m = res["minjobage"]
        print(f"MinJobAge: {m['resolved']} / {m['jobs']} purged jobs resolved (accounting={m['accounting']}: "
              f"recorded UNKNOWN_COMPLETED with last seen state/time), relisted ones followed to the end "
              f"{m['relisted_followed_to_end']} / {m['jobs']} ({m['seconds']} s)")
    return out


if __name__ == "__main__":
    sys.exit(main())
