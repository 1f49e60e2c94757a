"""Kills of the service during moves of running jobs (issue 13, docs/elastic.md), against the real
local Slurm cluster:

    cd tests && flock /tmp/lyasched-native-cluster.lock python -m reliability.moves [--kills 12] [--json]

`run_move_kills(n)` runs real ``lyasched serve --policy elastic`` processes (1 s slots,
``min_move_interval`` 20 s, move cost 1 s, grows priced over that interval) over checkpointable jobs of the unprivileged test user
and SIGKILLs the service ``n`` times at the four named points of a move (``LYASCHED_CRASH_AT=
move_after_signal`` ... ``move_after_release``, cycled), plus one external kill at a random
moment after every third; after each kill ``serve --once`` restarts it.

Each named kill gets a move to land in, built before the point is armed. elastic is not told what
to do: the cluster is shaped so that its one good decision is a move (`stage_move`). First an
unarmed service runs until no move is open and no relaunch is pending. Then, alternating:

- **grow**: plain jobs of another user take every free GPU but one on a node with room; a fresh
  checkpointable job (1 GPU asked, 4 allowed) starts on it under the armed service; the blockers
  are cancelled; once the job has run ``min_move_interval`` with idle GPUs next to it and nothing
  waiting, elastic grows it;
- **shrink**: a checkpointable job already on 2+ GPUs (grown before; if none, one is grown first
  by an unarmed service) is the victim; every free GPU is blocked; a short job arrives under the
  armed service and finds no GPU free; elastic makes room by shrinking the victim.

The armed point of that move (or of any other move the service makes first) is reached; the kind
of move it landed in is read from the records right after the kill. A point not reached within
``POINT_WAIT_S`` is still a SIGKILL, counted apart as external (not at a move point).

At the end the service runs until every job is done, and the suite counts: jobs lost (not
COMPLETED, or not all their steps done), duplicated (two runs of one job at once), held forever,
steps lost beyond the last checkpoint (a run's last step minus the step the next run resumed
after), moves left open, the records' consistency problems, and runs not made as the submitter
(the worker's uid, and Slurm's user of the job).

A job is a small worker under ``srun`` (the move's signal goes to job steps) that does one
"step" every 0.5 s, saves a lyasched.job.checkpoint completion marker and exits on SIGUSR1, and
resumes from the marker's step; it logs every start (with its uid), checkpoint and end.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lyasched.slurm import query as q
from lyasched.store import moves as move_records
from lyasched.store import records
from lyasched.summary import CostSummary, new_uid

from .faults import Bed, say, squeue
from .users import OTHER_USER, TEST_USER, as_user

# Timeouts generous enough for a 2-core machine shared with other work (load average 5-10): a
# Python start-up of the service then takes several seconds, a Slurm start up to a few more.
POINT_WAIT_S = 120.0  # an armed service must reach its point within this
SETTLE_S = 300.0  # no move open and no relaunch pending, a node with room
START_WAIT_S = 90.0  # a blocker or the fresh job running
FINAL_S = 600.0  # every job done at the end
BLOCK_NAME = "relmv-block"
# elastic's min_move_interval: above a move's measured cost (signal to running again, ~12 s here:
# the mover's StartTime=now+10), or a job moved once would never be moved again (elastic skips jobs
# whose move cost is not below the interval), and the shrink scenario needs such jobs.
MOVE_INTERVAL_S = 20.0


def squeue_user(user: str) -> list:
    out = subprocess.run(q.squeue_args(user=user), capture_output=True, text=True, timeout=120).stdout
    return q.parse_squeue(out)


def free_gpus() -> dict[str, int]:
    """Free GPUs per usable node, as Slurm allocates them (every job's GPUs count as busy)."""
    out = subprocess.run(q.node_args(), capture_output=True, text=True, timeout=60).stdout
    return {n.name: n.gpus_free for n in q.parse_nodes(out) if n.gpus_total > 0}


def plain_states(ids: list[str]) -> dict[str, str]:
    """Slurm state of plain (non-lyasched) jobs: ``q.parse_squeue`` lists lyasched jobs only."""
    if not ids:
        return {}
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(ids), "-o", "%i %T"], capture_output=True,
                         text=True, timeout=60).stdout
    return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)


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
log.write("start %.3f %d %s %d\\n" % (time.time(), m["step"] + 1, os.environ.get("SLURM_JOB_NUM_NODES", "?"),
                                      os.getuid()))
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
    """A Bed whose service runs `elastic` and whose jobs are checkpointable workers; it can also
    shape the cluster with plain jobs of another user (blockers) so that elastic has a move to make."""

    def __init__(self, steps: int = 120, dt: float = 0.5, user: str = TEST_USER, backend: str = "cli") -> None:
        # Bed's set-up for ``user``'s jobs (its service schedules that user's jobs only); another
        # run's jobs of that user still waiting would be scheduled too: refused, as Bed does.
        foreign = [j.job_id for j in squeue_user(user) if j.pending]
        if foreign:
            raise RuntimeError(f"{len(foreign)} lyasched job(s) of {user} already wait in the queue: another run's")
        self.backend, self.user = backend, user  # the service's Slurm backend (its move calls included)
        self.dir = Path(tempfile.mkdtemp(prefix="lyasched-rel-moves-", dir="/tmp"))
        self.dir.chmod(0o1777)
        (self.dir / "runs").mkdir()
        (self.dir / "runs").chmod(0o1777)
        self.db, self.log, self.config = self.dir / "lyasched.db", self.dir / "serve.log", self.dir / "config.toml"
        self.script = self.dir / "job.sh"
        self.ids: list[str] = []
        self.uids: dict[str, str] = {}
        self.procs: list[subprocess.Popen] = []
        self.blockers: list[str] = []
        self.steps, self.dt = steps, dt
        self.targets: dict[str, int] = {}  # job -> its steps
        self.ck: set[str] = set()  # the checkpointable ones
        self.config.write_text(
            "[service]\n"
            f'slot_seconds = 1\nrelease_grace = 60\nslurm_timeout = 10\nmove_timeout = 30\ndb = "{self.db}"\n'
            f'users = ["{user}"]\nlog_level = "INFO"\n'
            f'[policy]\nname = "elastic"\n[policy.params]\nmin_move_interval = {MOVE_INTERVAL_S:g}\nmove_cost = 1\n'
            # the grow is priced over the interval (the rule before issue 13's tenth pass): under the
            # default price the GPUs count as held for up to the grown run (~16 min here), so a ~1 min
            # gain pays only below about one arrival per two hours, and this suite submits several
            # jobs an hour; the grow moves are what its kills land in
            'grow_hold = "interval"\n'
            f'[slurm]\nbackend = "{backend}"\n'
        )
        (self.dir / "worker.py").write_text(WORKER)
        (self.dir / "worker.py").chmod(0o644)
        self.script.write_text(f'#!/bin/sh\nexec srun -n1 {sys.executable} {self.dir}/worker.py "$@"\n')
        self.script.chmod(0o755)

    def submit_ck(self, n: int) -> list[str]:
        """``n`` checkpointable workers asking one GPU (up to 4 allowed), predicted ~17 min on one GPU,
        ~1 min less on four (a fixed per-step time dominates; they take ~60 s): growing onto idle
        GPUs gains more than two move costs, and shrinking one for an arrival costs it little."""
        ids = [self._submit(True, 1, self.steps, "cnn:test", batch=8, iterations=10000, alpha=0.1, beta=0.001)
               for _ in range(n)]
        self.ck.update(ids)
        return ids

    def submit_short(self) -> str:
        """A short job that is not checkpointable (never moved), predicted a few seconds on one GPU:
        the arrival that elastic makes room for. Its own model name, so its run times never
        correct the workers' predictions."""
        return self._submit(False, 1, 8, "cnn:short", batch=8, iterations=100, alpha=0.01, beta=0.001, gmax=1)

    def _submit(self, ck: bool, gpus: int, steps: int, sig: str, batch: int, iterations: int, alpha: float,
                beta: float, gmin: int = 1, gmax: int = 4) -> str:
        uid = new_uid()
        comment = CostSummary(uid=uid, sig=sig, global_batch=batch, iterations=iterations, min_gpus=gmin,
                              max_gpus=gmax, alpha=alpha, beta=beta, params=1_000_000, checkpointable=ck).encode()
        r = as_user(self.user, "sbatch", "--parsable", "-N1", f"--gres=gpu:{gpus}", "-t", "20", "-o", "/dev/null",
                    "--job-name", f"relmv-{uid[:6]}", f"--comment={comment}", str(self.script), uid,
                    str(steps), f"{self.dt:g}", str(self.dir / "runs"), cwd=str(self.dir), timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")
        jid = r.stdout.strip().split(";")[0]
        self.ids.append(jid)
        self.uids[jid] = uid
        self.targets[jid] = steps
        return jid

    # --------------------------------------------------------- shaping the cluster
    def block(self, node: str, gpus: int) -> str:
        """A plain job of another user holding ``gpus`` GPUs of ``node`` (the service never schedules it)."""
        r = as_user(OTHER_USER, "sbatch", "--parsable", "-N1", "-w", node, f"--gres=gpu:{gpus}", "-t", "10",
                    "-o", "/dev/null", "-J", BLOCK_NAME, f"--chdir={self.dir}", "--wrap", "sleep 600", timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch blocker on {node}: {r.stderr.strip()}")
        jid = r.stdout.strip().split(";")[0]
        self.blockers.append(jid)
        return jid

    def unblock(self) -> None:
        if self.blockers:
            subprocess.run(["scancel", *self.blockers], capture_output=True, timeout=60)
        self.blockers = []

    def open_moves(self) -> int:
        if not self.db.exists():
            return 0
        db = records.open_readonly(self.db)
        try:
            return len(move_records.open_moves(db))
        finally:
            db.conn.close()

    def settle(self, need: int = 2, timeout: float = SETTLE_S) -> tuple[str, dict[str, int]] | None:
        """Run an unarmed service until no move is open, none of the suite's jobs is pending (a
        relaunch would take GPUs that look free) and a node has ``need`` free GPUs; the roomiest
        such node and the free GPUs per node, or None on timeout."""
        p = self.start()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                time.sleep(1)
                if self.open_moves():
                    continue
                if any(j.pending for j in squeue(self.ids).values()):
                    continue
                free = free_gpus()
                room = sorted((-f, n) for n, f in free.items() if f >= need)
                if room:
                    return room[0][1], free
            return None
        finally:
            self.stop(p)

    def wait_running(self, ids: list[str], plain: bool, timeout: float = START_WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if plain:
                st = plain_states(ids)
                if all(st.get(j) == "RUNNING" for j in ids):
                    return True
            else:
                st2 = squeue(ids)
                if all(j in st2 and st2[j].running for j in ids):
                    return True
            time.sleep(0.5)
        return False

    def kill_lines(self) -> list[str]:
        """The crash hook's own log lines (one per SIGKILL it made), in order."""
        if not self.log.exists():
            return []
        return re.findall(r"SIGKILL at (\w+) #\d+", self.log.read_text(errors="replace"))

    def open_move_rows(self) -> list[dict]:
        """The moves open now (right after a kill: the one killed, and any other in flight)."""
        if not self.db.exists():
            return []
        db = records.open_readonly(self.db)
        try:
            return [{k: m[k] for k in ("id", "slurm_id", "kind", "from_gpus", "to_gpus", "step")}
                    for m in move_records.open_moves(db)]
        finally:
            db.conn.close()

    def step_now(self, job_id: str) -> int:
        """The last step the job's latest run has done: its ``.last`` file, or, before the run's first
        step, the step it resumed after (-1 before any run). Read as -1 there, a job relaunched a
        moment ago looked as if it had every step left: a shrink was staged on a victim that ended
        before elastic could move it."""
        starts = [e for e in self.history(job_id) if e[0] == "start"]
        if not starts:
            return -1
        f = self.dir / "runs" / f"{job_id}.{len(starts) - 1}.last"
        try:
            return int(f.read_text())
        except (OSError, ValueError):
            return starts[-1][2] - 1

    def victims(self) -> list[str]:
        """Checkpointable jobs running on 2+ GPUs with no move open that will still run well past the
        moment elastic may move them again (``MOVE_INTERVAL_S`` after their start): a shrink's victims."""
        moving = {m["slurm_id"] for m in self.open_move_rows()}
        now, out = time.time(), []
        for jid, j in squeue(sorted(self.ck)).items():
            if not j.running or j.gpus < 2 or jid in moving or not j.start_time:
                continue
            left = (self.targets[jid] - 1 - self.step_now(jid)) * self.dt
            if left >= max(0.0, j.start_time + MOVE_INTERVAL_S - now) + 15:
                out.append(jid)
        return out

    def close(self) -> None:
        self.unblock()
        super().close()

    # --------------------------------------------------------- what the jobs did
    def history(self, job_id: str) -> list[tuple[str, float, int, int | None]]:
        """(kind, time, step, uid of a start) per line of the job's run log."""
        f = self.dir / "runs" / job_id
        if not f.exists():
            return []
        out = []
        for line in f.read_text().splitlines():
            parts = line.split()
            uid = int(parts[4]) if parts[0] == "start" and len(parts) > 4 else None
            out.append((parts[0], float(parts[1]), int(parts[2]), uid))
        return out

    def audit(self, job_id: str) -> dict[str, int]:
        """Per job: runs, steps lost beyond a checkpoint, overlapping runs, finished with every step,
        runs made as another uid than the submitter's."""
        h = self.history(job_id)
        starts = [e for e in h if e[0] == "start"]
        lost = overlap = 0
        for k in range(1, len(starts)):
            f = self.dir / "runs" / f"{job_id}.{k - 1}.last"
            last = int(f.read_text()) if f.exists() else starts[k - 1][2] - 1
            lost += max(0, last - (starts[k][2] - 1))
        # two runs at once: a start while the previous run had not ended (no ckpt/done between)
        open_run = False
        for kind, _, _, _ in h:
            if kind == "start":
                overlap += open_run
                open_run = True
            else:
                open_run = False
        done = any(e[0] == "done" and e[2] == self.targets.get(job_id, self.steps) - 1 for e in h)
        want = pwd.getpwnam(self.user).pw_uid
        return {"runs": len(starts), "lost_steps": lost, "overlap": overlap, "done": int(done),
                "checkpoints": sum(e[0] == "ckpt" for e in h), "other_uid": sum(e[3] != want for e in starts)}


SCENARIOS = ("grow", "shrink")


def plan_kills(n: int, scenarios: tuple[str, ...] = SCENARIOS) -> list[tuple[str, str]]:
    """``n`` kills at the move points (cycled, so each point comes up n/4 times), each with its
    scenario (alternating, shifted by one every round of four points: every point comes up in
    each scenario), and one random external kill after every third: [(point, scenario)]."""
    plan: list[tuple[str, str]] = []
    for i in range(n):
        plan.append((POINTS[i % len(POINTS)], scenarios[(i + i // len(POINTS)) % len(scenarios)]))
        if i % 3 == 2:
            plan.append(("external", ""))
    return plan


def block_all_but(bed: MoveBed, node: str, keep: int, free: dict[str, int]) -> str:
    """Block every free GPU but ``keep`` on ``node``; a note if the blockers did not all start."""
    for n, f in sorted(free.items()):
        k = f - keep if n == node else f
        if k > 0:
            bed.block(n, k)
    if bed.blockers and not bed.wait_running(bed.blockers, plain=True):
        return "; blockers not all running"
    return ""


def stage_grow(bed: MoveBed, crash_at: str) -> tuple[subprocess.Popen, str, str]:
    """Settle; block every free GPU but one on the roomiest node; a fresh job asking one GPU starts
    there under a service started with ``crash_at`` ("" for none); the blockers are cancelled: idle
    GPUs next to it and nothing waiting, elastic grows it once it has run ``MOVE_INTERVAL_S``."""
    settled = bed.settle(2)
    if settled is None:
        note = f"grow: not settled within {SETTLE_S:g}s"
        node, free = "", free_gpus()
    else:
        node, free = settled
        note = f"grow: {node} {free[node]} free"
    note += block_all_but(bed, node, 1, free)
    job = bed.submit_ck(1)[0]
    p = bed.start(crash_at=crash_at)
    if not bed.wait_running([job], plain=False):
        note += "; job not started"
    j = squeue([job]).get(job)
    note += f"; {job} started on {j.gpus if j else '?'} GPU(s)"
    bed.unblock()
    return p, note, job


def stage_shrink(bed: MoveBed, crash_at: str) -> tuple[subprocess.Popen, str, str]:
    """Settle; if no job can be a victim (`MoveBed.victims`), make one: a grow run by an unarmed
    service (`stage_grow`) until the job runs on its new GPUs. Then block every free GPU, start the
    service with ``crash_at`` and submit a short job: it waits with no GPU free, and elastic makes
    room by shrinking a movable job (once the victim has run ``MOVE_INTERVAL_S``). The blockers
    stay until the kill."""
    note = "shrink:"
    if bed.settle(0) is None:
        note += f" not settled within {SETTLE_S:g}s;"
    if not bed.victims():
        p, grown, job = stage_grow(bed, "")
        note += f" pre-grow ({grown})"
        deadline = time.monotonic() + POINT_WAIT_S
        while time.monotonic() < deadline and job not in bed.victims():
            time.sleep(1)
        bed.stop(p)
        if bed.settle(0) is None:
            note += f"; not settled within {SETTLE_S:g}s"
    victims = bed.victims()
    note += f"; victims {victims}"
    note += block_all_but(bed, "", 0, free_gpus())
    p = bed.start(crash_at=crash_at)
    note += f"; short arrival {bed.submit_short()}"
    return p, note, ",".join(victims)


def stage_move(bed: MoveBed, point: str, scenario: str) -> tuple[subprocess.Popen, str, str]:
    """Build a move for the service armed at ``point`` to make (module doc): `stage_grow` or
    `stage_shrink`. Returns (service, note, the job(s) meant to move). Which move the point was
    reached in is read from the records (`run_move_kills`)."""
    stage = stage_shrink if scenario == "shrink" else stage_grow
    return stage(bed, f"{point}:1")


# The step a move's record shows when the service is killed at each point (the mark before it).
STEP_AT = {"move_after_signal": "signalled", "move_after_requeue": "requeued", "move_after_resize": "resized",
           "move_after_release": "resized"}


def killed_move(point: str, open_rows: list[dict]) -> str:
    """The kind of move a kill at ``point`` landed in, from the moves open right after it: the one
    open move at the point's step ("?" if none or several are)."""
    at = [m for m in open_rows if m["step"] == STEP_AT.get(point)]
    return at[0]["kind"] if len(at) == 1 else "?"


def by_kind(kills: list[dict[str, Any]]) -> dict[str, int]:
    """Kills that landed at a move point, per kind of move and point ("grow:move_after_signal": 2)."""
    out: dict[str, int] = {}
    for k in kills:
        if k["point"] in POINTS:
            key = f"{k['killed_move']}:{k['point']}"
            out[key] = out.get(key, 0) + 1
    return out


def run_move_kills(n: int = 12, seed: int = 13, scenarios: tuple[str, ...] = SCENARIOS,
                   backend: str = "cli") -> dict[str, Any]:
    """The suite (module doc), the service on Slurm backend ``backend``; a dict of counts, per-kill
    details and the wall time."""
    rng = random.Random(seed)
    bed = MoveBed(backend=backend)
    plan = plan_kills(n, scenarios)
    tried = survived = 0
    failures: list[str] = []
    points: dict[str, int] = {}
    kills: list[dict[str, Any]] = []
    load0 = os.getloadavg()
    t0 = time.monotonic()
    try:
        for i, (point, scenario) in enumerate(plan):
            t_kill = time.monotonic()
            before = len(bed.kill_lines())
            note, job = "", ""
            if point == "external":
                p = bed.start()
                time.sleep(rng.uniform(1.0, 6.0))
                p.kill()
            else:
                p, note, job = stage_move(bed, point, scenario)
                try:
                    p.wait(timeout=POINT_WAIT_S)
                except subprocess.TimeoutExpired:
                    point = f"{point}(not reached, external)"
                    p.kill()
            rc = p.wait()
            bed.unblock()
            hooked = bed.kill_lines()[before:]
            if point in POINTS and hooked != [point]:  # the hook's own line must name this point
                failures.append(f"kill {i} at {point}: the crash hook logged {hooked}")
            tried += 1
            points[point] = points.get(point, 0) + 1
            open_rows = bed.open_move_rows()
            kills.append({"point": point, "scenario": scenario, "staged": note, "job": job, "open_moves": open_rows,
                          "killed_move": killed_move(point, open_rows) if point in POINTS else "",
                          "s": round(time.monotonic() - t_kill, 1)})
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
            ok = not (failures and failures[-1].startswith(f"kill {i} "))
            say(f"move kill {i + 1}/{len(plan)} at {point}: {'ok' if ok else 'FAILED'} ({note or 'external'}; "
                f"killed in {kills[-1]['killed_move'] or '-'}; open {kills[-1]['open_moves']})")
        # the end: the service runs until every job is done
        bed.unblock()
        p = bed.start()
        bed.wait(bed.ids, timeout=FINAL_S)
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
        # every service of the run used the backend asked for (serve logs its choice at start-up)
        chosen = set(re.findall(r"Slurm backend: (\w+)", bed.log.read_text(errors="replace")))
        if chosen != {backend}:
            failures.append(f"services ran on Slurm backends {sorted(chosen)}, not {backend}")
        not_done = [j for j in bed.ids if jobs.get(j) is None or jobs[j].state != "COMPLETED" or not audits[j]["done"]]
        held = [j for j in bed.ids if j in jobs and jobs[j].pending]
        not_as_submitter = [j for j in bed.ids if audits[j]["other_uid"] or (j in jobs and jobs[j].user != bed.user)]
        kinds: dict[str, int] = {}
        for m in mv:
            k = f"{m['kind']}:{m['state']}"
            kinds[k] = kinds.get(k, 0) + 1
    finally:
        bed.close()
    return {
        "backend": backend,
        "kills_tried": tried,
        "kills_survived": survived,
        "kills_during_moves": sum(v for k, v in points.items() if k in POINTS),
        "kill_points": points,
        "kill_points_by_move": by_kind(kills),
        "jobs": len(bed.ids),
        "jobs_lost": len(not_done),
        "jobs_duplicated": sum(1 for a in audits.values() if a["overlap"]),
        "jobs_held_forever": len(held),
        "jobs_not_as_submitter": len(not_as_submitter),
        "steps_lost_beyond_checkpoint": sum(a["lost_steps"] for a in audits.values()),
        "moves": kinds,
        "moves_left_open": still_open,
        "relaunches": sum(a["runs"] - 1 for a in audits.values() if a["runs"]),
        "db_problems": probs,
        "failures": failures + ([f"not done: {not_done}"] if not_done else [])
        + ([f"not as submitter: {not_as_submitter}"] if not_as_submitter else []),
        "kills": kills,
        "loadavg_start": [round(x, 2) for x in load0],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - t0, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SIGKILLs of the service during moves (issue 13)")
    ap.add_argument("--kills", type=int, default=12, help="kills at move points (plus one external per three)")
    ap.add_argument("--backend", choices=("cli", "pyslurm"), default="cli", help="the service's Slurm backend")
    ap.add_argument("--scenario", choices=("both", *SCENARIOS), default="both", help="moves to build (default: alternate)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    res = run_move_kills(a.kills, scenarios=SCENARIOS if a.scenario == "both" else (a.scenario,), backend=a.backend)
    if a.json:
        print(json.dumps(res, default=str))
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
    bad = res["jobs_lost"] or res["jobs_duplicated"] or res["jobs_held_forever"] or res["steps_lost_beyond_checkpoint"] \
        or res["moves_left_open"] or res["db_problems"] or res["jobs_not_as_submitter"] or res["failures"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
