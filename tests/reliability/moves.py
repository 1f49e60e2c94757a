"""Kills of the service during moves of running jobs (issue 13, docs/elastic.md), against the real
local Slurm cluster:

    flock /tmp/lyasched-native-cluster.lock python -m tests.reliability.moves [--kills 10] [--json]

`run_move_kills(n)` runs real ``lyasched serve --policy elastic`` processes (1 s slots,
``min_move_interval`` 4 s, move cost 1 s: elastic grows the jobs onto idle GPUs and makes room
for arrivals) over checkpointable jobs of the unprivileged test user, and SIGKILLs the service
``n`` times at the four named points of a move (cycled), plus one external kill at a random moment after every third (``LYASCHED_CRASH_AT=move_after_signal`` ...
``move_after_release``); a named kill not reached within 45 s is counted as external; after each kill ``serve --once`` restarts it.
At the end the service runs until every job is done, and the suite counts: jobs lost (not
COMPLETED, or not all their steps done), duplicated (two runs of one job at once), held forever,
steps lost beyond the last checkpoint (a run's last step minus the step the next run resumed
after), moves left open, and the records' consistency problems.

A job is a small worker under ``srun`` (the move's signal goes to job steps) that does one
"step" every 0.5 s, saves a lyasched.checkpoint completion marker and exits on SIGUSR1, and
resumes from the marker's step; it logs every start, checkpoint and end.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lyasched.store import moves as move_records
from lyasched.store import records
from lyasched.summary import CostSummary, new_uid

from .faults import Bed, say, squeue
from .users import TEST_USER, as_user


def squeue_user(user: str) -> list:
    from lyasched.slurm import query as q

    out = subprocess.run(q.squeue_args(user=user), capture_output=True, text=True, timeout=120).stdout
    return q.parse_squeue(out)

WORKER = '''\
import json, os, signal, sys, time
uid, target, dt, runs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
stop = []
signal.signal(signal.SIGUSR1, lambda s, f: stop.append(1))
ck = os.path.join(os.getcwd(), ".lyasched", "ckpt-" + uid)
os.makedirs(ck, exist_ok=True)
marker = os.path.join(ck, "complete.json")
try:
    m = json.load(open(marker))
except (OSError, ValueError):
    m = {"step": -1, "n": 0}
jid = os.environ["SLURM_JOB_ID"]
log = open(os.path.join(runs, jid), "a")
k = sum(1 for line in open(os.path.join(runs, jid)) if line.startswith("start"))
log.write("start %.3f %d %s\\n" % (time.time(), m["step"] + 1, os.environ.get("SLURM_JOB_NUM_NODES", "?")))
log.flush()
step = m["step"]
last = os.path.join(runs, "%s.%d.last" % (jid, k))
while step + 1 < target:
    time.sleep(dt)
    step += 1
    with open(last, "w") as f:
        f.write("%d\\n" % step)
    if stop:
        tmp = marker + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"step": step, "n": m["n"] + 1, "stop": True, "time": time.time()}, f)
        os.replace(tmp, marker)
        log.write("ckpt %.3f %d\\n" % (time.time(), step))
        log.close()
        sys.exit(0)
log.write("done %.3f %d\\n" % (time.time(), step))
'''

POINTS = ("move_after_signal", "move_after_requeue", "move_after_resize", "move_after_release")


class MoveBed(Bed):
    """A Bed whose service runs `elastic` and whose jobs are checkpointable workers."""

    def __init__(self, steps: int = 60, dt: float = 0.5, user: str = TEST_USER) -> None:
        # Bed's set-up for ``user``'s jobs (its service schedules that user's jobs only); another
        # run's jobs of that user still waiting would be scheduled too: refused, as Bed does.
        foreign = [j.job_id for j in squeue_user(user) if j.pending]
        if foreign:
            raise RuntimeError(f"{len(foreign)} lyasched job(s) of {user} already wait in the queue: another run's")
        self.backend, self.user = "cli", user
        self.dir = Path(tempfile.mkdtemp(prefix="lyasched-rel-moves-", dir="/tmp"))
        self.dir.chmod(0o1777)
        (self.dir / "runs").mkdir()
        (self.dir / "runs").chmod(0o1777)
        self.db, self.log, self.config = self.dir / "lyasched.db", self.dir / "serve.log", self.dir / "config.toml"
        self.script = self.dir / "job.sh"
        self.ids, self.uids, self.procs = [], {}, []
        self.steps, self.dt = steps, dt
        self.config.write_text(
            "[service]\n"
            f'slot_seconds = 1\nrelease_grace = 60\nslurm_timeout = 10\nmove_timeout = 30\ndb = "{self.db}"\n'
            f'users = ["{user}"]\nlog_level = "INFO"\n'
            '[policy]\nname = "elastic"\n[policy.params]\nmin_move_interval = 4\nmove_cost = 1\n'
            '[slurm]\nbackend = "cli"\n'
        )
        (self.dir / "worker.py").write_text(WORKER)
        (self.dir / "worker.py").chmod(0o644)
        self.script.write_text(f'#!/bin/sh\nexec srun -n1 {sys.executable} {self.dir}/worker.py "$@"\n')
        self.script.chmod(0o755)

    def submit_ck(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            uid = new_uid()
            # predicted ~17 min on one GPU (the workers take ~30 s): elastic sees gains in growing
            comment = CostSummary(uid=uid, sig="cnn:test", global_batch=8, iterations=10000, min_gpus=1, max_gpus=4,
                                  alpha=0.1, beta=0.001, params=1_000_000, checkpointable=True).encode()
            r = as_user(self.user, "sbatch", "--parsable", "-N1", "--gres=gpu:1", "-t", "20", "-o", "/dev/null",
                        "--job-name", f"relmv-{uid[:6]}", f"--comment={comment}", str(self.script), uid,
                        str(self.steps), f"{self.dt:g}", str(self.dir / "runs"), cwd=str(self.dir), timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
            jid = r.stdout.strip().split(";")[0]
            self.ids.append(jid)
            self.uids[jid] = uid
            out.append(jid)
        return out

    def history(self, job_id: str) -> list[tuple[str, float, int]]:
        f = self.dir / "runs" / job_id
        if not f.exists():
            return []
        out = []
        for line in f.read_text().splitlines():
            kind, t, step = line.split()[:3]
            out.append((kind, float(t), int(step)))
        return out

    def audit(self, job_id: str) -> dict[str, int]:
        """Per job: runs, steps lost beyond a checkpoint, overlapping runs, finished with every step."""
        h = self.history(job_id)
        starts = [e for e in h if e[0] == "start"]
        lost = overlap = 0
        for k in range(1, len(starts)):
            f = self.dir / "runs" / f"{job_id}.{k - 1}.last"
            last = int(f.read_text()) if f.exists() else starts[k - 1][2] - 1
            lost += max(0, last - (starts[k][2] - 1))
        # two runs at once: a start while the previous run had not ended (no ckpt/done between)
        open_run = False
        for kind, _, _ in h:
            if kind == "start":
                overlap += open_run
                open_run = True
            else:
                open_run = False
        done = any(e[0] == "done" and e[2] == self.steps - 1 for e in h)
        return {"runs": len(starts), "lost_steps": lost, "overlap": overlap, "done": int(done),
                "checkpoints": sum(e[0] == "ckpt" for e in h)}


def run_move_kills(n: int = 10, seed: int = 13) -> dict[str, Any]:
    rng = random.Random(seed)
    bed = MoveBed()
    # n kills at the move points (cycled), and one random external kill after every third
    plan: list[str] = []
    for i in range(n):
        plan.append(POINTS[i % len(POINTS)])
        if i % 3 == 2:
            plan.append("external")
    tried = survived = 0
    failures: list[str] = []
    points: dict[str, int] = {}
    t0 = time.monotonic()
    try:
        bed.submit_ck(3)
        for i, point in enumerate(plan):
            live = squeue(bed.ids)
            if sum(1 for j in live.values() if not j.finished) < 3:
                bed.submit_ck(2)
            if point == "external":
                p = bed.start()
                time.sleep(rng.uniform(1.0, 6.0))
                p.kill()
            else:
                p = bed.start(crash_at=f"{point}:1")
                try:
                    p.wait(timeout=45)
                except subprocess.TimeoutExpired:
                    point = f"{point}(not reached, external)"
                    p.kill()
            rc = p.wait()
            tried += 1
            points[point] = points.get(point, 0) + 1
            if rc != -signal.SIGKILL:
                failures.append(f"kill {i} at {point}: exit {rc}, not SIGKILL")
                continue
            r = bed.once()
            db = records.open_records(bed.db)
            try:
                probs = records.consistency_problems(db)
            finally:
                db.conn.close()
            overlap = [j for j in bed.ids if bed.audit(j)["overlap"]]
            if r.returncode != 0 or probs or overlap:
                failures.append(f"kill {i} at {point}: restart rc={r.returncode} problems={probs} overlap={overlap} "
                                f"{r.stderr.strip()[-300:]}")
            else:
                survived += 1
            say(f"move kill {i + 1}/{n} at {point}: {'FAILED' if failures and failures[-1].startswith(f'kill {i} ') else 'ok'}")
        # the end: the service runs until every job is done
        p = bed.start()
        jobs = bed.wait(bed.ids, timeout=300)
        time.sleep(4)
        jobs = squeue(bed.ids)
        bed.stop(p)
        audits = {j: bed.audit(j) for j in bed.ids}
        db = records.open_records(bed.db)
        try:
            probs = records.consistency_problems(db)
            mv = list(db.query("select state, kind, resolution from moves"))
            still_open = len(move_records.open_moves(db))
        finally:
            db.conn.close()
        not_done = [j for j in bed.ids if jobs.get(j) is None or jobs[j].state != "COMPLETED" or not audits[j]["done"]]
        held = [j for j in bed.ids if j in jobs and jobs[j].pending]
        kinds: dict[str, int] = {}
        for m in mv:
            k = f"{m['kind']}:{m['state']}"
            kinds[k] = kinds.get(k, 0) + 1
    finally:
        bed.close()
    return {
        "kills_tried": tried,
        "kills_survived": survived,
        "kills_during_moves": sum(v for k, v in points.items() if k in POINTS),
        "kill_points": points,
        "jobs": len(bed.ids),
        "jobs_lost": len(not_done),
        "jobs_duplicated": sum(1 for a in audits.values() if a["overlap"]),
        "jobs_held_forever": len(held),
        "steps_lost_beyond_checkpoint": sum(a["lost_steps"] for a in audits.values()),
        "moves": kinds,
        "moves_left_open": still_open,
        "relaunches": sum(a["runs"] - 1 for a in audits.values() if a["runs"]),
        "db_problems": probs,
        "failures": failures + ([f"not done: {not_done}"] if not_done else []),
        "seconds": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SIGKILLs of the service during moves (issue 13)")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run_move_kills(a.kills)
    if a.json:
        print(json.dumps(res, default=str))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
    bad = res["jobs_lost"] or res["jobs_duplicated"] or res["jobs_held_forever"] or res["steps_lost_beyond_checkpoint"] \
        or res["moves_left_open"] or res["db_problems"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
