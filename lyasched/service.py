"""The live scheduler, one slot at a time: Slurm state in, policy decision, Slurm updates out.

`Service` wires the parts of lyasched.live; each slot (`Service.run_slot`, then `_slot`):

1. observe: read every lyasched job (``slurm.jobs()``, comment tagged ``lyasched:v1;``) and every
   node's GPUs (``slurm.nodes()``; GPUs held by any job, lyasched or not, are busy; a drained or
   down node has none free), through the cluster view lyasub uses too (lyasched.clusterview);
2. close the starts a crash left open (`Starter.reconcile`) and advance open moves (`Mover`);
3. bring the records up to date: the pure state machine (lyasched.live.step) in one transaction,
   the cost table taught from finished jobs (`learn.job_finished`); hold again a job released more than
   ``release_grace`` ago that Slurm has not started (its GPUs were taken meanwhile);
4. decide: the jobs' rows and the `ClusterSnapshot` (lyasched.live.inputs) -> the one
   `SlotStateBuilder` the simulator uses -> ``policy.decide``;
5. act: each start through `Starter.start` (intent, ``scontrol update``, ``release``; the placement
   rule of lyasched.policy.placement re-places or skips what Slurm cannot express), each move
   through `Mover.begin`; record the slot and its decisions.

Slurm is reached through the `Slurm` interface (lyasched.slurm.backend): its CLI tools or pyslurm,
the same calls and errors either way (docs/slurm-backends.md). The service only ever calls Slurm,
never user code. Crash consistency: lyasched.live.starter, lyasched.live.mover, docs/reliability.md.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import sqlite_utils

from lyasched import gcpause, learn  # GC pause; learning from finished jobs (cost table, step reports)
from lyasched.config import Config
from lyasched.cost import CostModel
from lyasched.policy import make_policy
from lyasched.policy.placement import EQUAL_PER_NODE
from lyasched.policy.snapshot import ClusterSnapshot, RunningObs, SlotStateBuilder
from lyasched.policy.state import Capabilities, Policy, SlotState, WaitingJob, capabilities
from lyasched.live import step
from lyasched.live.context import SlotContext
from lyasched.live.crash import CrashPoints
from lyasched.live.mover import Mover
from lyasched.live.inputs import PolicyInputs
from lyasched.live.starter import Starter
from lyasched.slurm.backend import SlurmMoves
from lyasched.slurm import Slurm, SlurmCLI, SlurmError, as_backend
from lyasched.slurm.types import AccountingRecord, ParseError, SlurmJob
from lyasched.store import records
from lyasched.clusterview import cluster_view, gpu_nodes
from lyasched.store.placement import NodePlacement

log = logging.getLogger("lyasched.service")


class _QuietDuringOutage(logging.Filter):
    """Drops SlurmCLI's per-retry warnings while an outage is already logged (one line per outage)."""

    def __init__(self) -> None:
        super().__init__()
        self.active = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.active or record.levelno >= logging.ERROR


_QUIET = _QuietDuringOutage()  # one per process (one service runs per process); reset by each Service
logging.getLogger("lyasched.slurm").addFilter(_QUIET)



@dataclass
class SlotReport:
    """What one slot did (also what `lyasched serve --once` prints)."""

    slot_id: int | None
    time: float
    duration: float
    q: float = 0.0
    z: float = 0.0
    free: dict[str, int] = field(default_factory=dict)
    waiting: int = 0
    running: int = 0
    started: list[dict] = field(default_factory=list)
    held_again: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    error: str = ""

    def line(self) -> str:
        if self.error:
            return f"slot {self.slot_id}: error: {self.error} ({self.duration * 1000:.0f} ms)"
        starts = ", ".join(f"{s['slurm_id']}:{s['gpus']}gpu@{'+'.join(s['nodes'])}" for s in self.started) or "-"
        return (
            f"slot {self.slot_id}: {self.waiting} waiting, {self.running} running, "
            f"free {sum(self.free.values())} GPUs, started {starts}, held again {len(self.held_again)}, "
            f"finished {len(self.finished)}, Q={self.q:.1f} Z={self.z:.1f} in {self.duration * 1000:.0f} ms"
        )


class UnsupportedPolicy(ValueError):
    """The policy needs something the live service cannot do (its capabilities say so)."""


def cannot_serve(caps: Capabilities) -> str:
    """Why the live service cannot carry out a policy with these capabilities ('' if it can)."""
    if caps.preemptive and not caps.moves:
        return "it preempts running jobs, and the service only moves checkpointable jobs through checkpoints (moves)"
    if caps.needs_true_runtimes:
        return "it needs true run times (an oracle), which only the simulator knows"
    if caps.placement != EQUAL_PER_NODE:
        return f"its placements follow {caps.placement!r}; Slurm can only give every node the same GPU count"
    return ""


class Service:
    """The slot logic as a library. ``slurm`` is a `Slurm` backend (lyasched.slurm.backend), or a
    CLI runner (``run(argv, idempotent=...)``: a `SlurmCLI`, or a fake in tests) that the CLI
    backend drives; ``policy`` overrides the configured one."""

    def __init__(
        self,
        config: Config,
        db: sqlite_utils.Database | Callable[[], sqlite_utils.Database],
        slurm: Any | None = None,
        policy: Policy | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        # SQLite connections belong to the thread that opened them, and APScheduler runs slots in
        # a worker thread: given an opener, each thread that runs a slot opens its own connection.
        self._db_open = db if callable(db) else None
        self._dbs: dict[int, sqlite_utils.Database] = {} if callable(db) else {threading.get_ident(): db}
        self._db_any = None if callable(db) else db
        self.slurm: Slurm = as_backend(slurm if slurm is not None else SlurmCLI(timeout=config.slurm_timeout))
        self.policy = policy if policy is not None else make_policy(config.policy, **dict(config.params))
        caps = capabilities(self.policy)
        if why := cannot_serve(caps):
            raise UnsupportedPolicy(f"policy {getattr(self.policy, 'name', type(self.policy).__name__)!r} "
                                    f"cannot run under serve: {why}")
        if caps.moves and not isinstance(self.slurm, SlurmMoves):
            raise UnsupportedPolicy(f"policy {getattr(self.policy, 'name', type(self.policy).__name__)!r} moves jobs, "
                                    f"and the Slurm backend {getattr(self.slurm, 'name', '?')!r} cannot signal or requeue")
        self.caps = caps
        self.builder = SlotStateBuilder(caps)  # the one place a slot's policy input is built
        self.clock = clock
        self.stop_requested = threading.Event()
        self.busy = threading.Lock()
        self._accounting: bool | None = None
        self._warned: set[str] = set()
        self.starter = Starter(lambda: self.db, self.slurm, CrashPoints.from_env(), config.release_grace)
        # moves of running checkpointable jobs (lyasched.live.mover), for a policy that moves jobs
        self.mover = Mover(lambda: self.db, self.slurm, self.starter.crash, config.move_timeout,
                           workdir=lambda job_id: learn.workdir_of(self.slurm, job_id))
        self.last_snapshot: ClusterSnapshot | None = None  # the last slot's input, as observed
        self.last_state: SlotState | None = None  # ... and as the policy saw it
        self.outage_since: float | None = None  # first failed slot of the current Slurm outage
        self.outage_slots = 0
        self._quiet = _QUIET
        self._quiet.active = False
        records.ensure_schema(self.db)
        self.inputs = PolicyInputs(lambda: self.db, clock)  # each job as the policy's input (lyasched.live.inputs)

    @property
    def crash(self) -> CrashPoints:
        """The crash hook (tests replace it); the starter reaches the same one."""
        return self.starter.crash

    @crash.setter
    def crash(self, value: CrashPoints) -> None:
        self.starter.crash = value
        self.mover.crash = value

    @property
    def db(self) -> sqlite_utils.Database:
        if self._db_open is None:
            assert self._db_any is not None  # one of the two is always given
            return self._db_any
        t = threading.get_ident()
        if t not in self._dbs:
            self._dbs[t] = self._db_open()
        return self._dbs[t]

    # ------------------------------------------------------------ one slot

    def run_slot(self) -> SlotReport:
        """Run one slot; never raises for Slurm trouble (the slot is recorded with its error)."""
        with self.busy, gcpause.paused():  # lyasched.gcpause: no heap scans in a slot over a long queue
            t0 = time.monotonic()
            now = self.clock()
            report = SlotReport(slot_id=None, time=now, duration=0.0)
            ctx = SlotContext(now=now, report=report)
            self.crash.reach("slot_start")
            slurm_failed = False
            try:
                self._slot(ctx)
            except (SlurmError, ParseError) as e:
                report.error = str(e).splitlines()[0][:500]
                slurm_failed = True
            except Exception as e:  # noqa: BLE001 - a bug must not stop the service; the next slot retries
                report.error = f"internal error: {type(e).__name__}: {e}"[:500]
                log.exception("slot failed")
            self.inputs.end_slot(ctx)
            self._outage(slurm_failed, now, report)
            report.duration = time.monotonic() - t0
            self.crash.reach("before_slot_record")
            report.slot_id = records.record_slot(
                self.db,
                decision_rows=ctx.decisions,
                decision_ids=ctx.decision_ids,
                time=now,
                q=report.q,
                z=report.z,
                free_gpus=sum(report.free.values()),
                free=json.dumps(report.free),
                waiting=report.waiting,
                running=report.running,
                decisions=json.dumps(report.started),
                duration=report.duration,
                policy=getattr(self.policy, "name", type(self.policy).__name__),
                error=report.error,
            )
            log.log(logging.DEBUG if slurm_failed and self.outage_slots > 1 else logging.INFO, "%s", report.line())
            return report

    def _outage(self, failed: bool, now: float, report: SlotReport) -> None:
        """One ERROR line when Slurm stops answering, one WARNING line when it answers again;
        the failed slots between are recorded in `slots` (error column) but not logged."""
        if failed:
            self.outage_slots += 1
            if self.outage_since is None:
                self.outage_since = now
                self._quiet.active = True
                log.error("Slurm unavailable, slots fail until it answers (logged once): %s", report.error)
            return
        if self.outage_since is not None:
            log.warning("Slurm available again after %.0f s (%d failed slot(s)): catching up",
                        now - self.outage_since, self.outage_slots)
            self.outage_since, self.outage_slots = None, 0
            self._quiet.active = False

    def _slot(self, ctx: SlotContext) -> None:
        """Observe (Slurm -> records -> snapshot), decide (the policy), act (the starter)."""
        now, report = ctx.now, ctx.report
        nodes = gpu_nodes(self.slurm.nodes(), self.config.partition)
        jobs = self.slurm.jobs()
        if not nodes:
            where = f" in partition {self.config.partition}" if self.config.partition else ""
            raise SlurmError(["scontrol"], f"no nodes with GPUs{where}")
        names = [n.name for n in nodes]
        index = {name: i for i, name in enumerate(names)}
        free = [n.gpus_free for n in nodes]
        view = cluster_view(nodes, self.config, self.db)  # lyasub's view too: same device key, calibrated links
        cluster = self.inputs.cluster(view.spec)
        ctx.cluster, ctx.cost, ctx.names = cluster, CostModel(cluster), names  # lyasched.learn refits against it
        ctx.device = view.device_type

        self.crash.reach("after_read")
        self.starter.reconcile(jobs, ctx)
        moving: dict[str, dict] = {}
        if self.caps.moves:  # open moves go on first (lyasched.live.mover); their jobs are read again
            changed = self.mover.advance(jobs, ctx)
            if changed:
                fresh = {j.job_id: j for j in self.slurm.jobs(job_ids=changed)}
                jobs = [fresh.get(j.job_id, j) if j.job_id in changed else j for j in jobs]
            moving = self.mover.moving()
            for i, c in self.mover.reserved(index):  # GPUs an open grow will take
                free[i] = max(0, free[i] - c)
        seen = self._sync(jobs, ctx)
        self._vanished(seen, ctx)

        waiting: list[WaitingJob] = []
        running: list[RunningObs] = []
        for job, row in seen.values():
            if row is None or row["state"] == "invalid":
                continue
            if row["state"] == "released" and job.pending and not job.held_by_service:
                if now - (row["released_at"] or now) > self.config.release_grace:
                    self.starter.hold_again(job, row, ctx)
                    continue
                # Committed: Slurm will start it on these GPUs; nobody else may get them.
                placement = NodePlacement.from_json(row["placement"]).to_indices(index)
                for i, c in placement:
                    free[i] = max(0, free[i] - c)
                running.append(self.inputs.running(job, row, placement, now))
            elif job.running:
                placement = NodePlacement.from_slurm(job.nodes, job.gpus_per_node).to_indices(index)
                running.append(self.inputs.running(job, row, placement, now))
            elif row["state"] == "waiting" and job.held_by_service:
                s, _ = self.inputs.decode(job.comment)
                assert s is not None  # a record with an invalid summary is "invalid", never "waiting"
                waiting.append(self.inputs.waiting(ctx, s, job))

        snap = self.inputs.snapshot(ctx, self.config.slot_seconds, free, cluster.gpus_per_node, waiting, running)
        self.last_snapshot = snap
        state = self.builder.build(snap)
        movable = 0
        if self.caps.moves:
            state, movable = self.inputs.movable(ctx, state, seen, moving)
        self.last_state = state
        report.free = dict(zip(names, free))
        report.waiting, report.running = len(waiting), len(running)
        result = self.policy.decide(state) if waiting or (movable and sum(free) > 0) else None
        if result is not None:  # Q and Z after the slot's decisions (no waiting job: both 0)
            report.q, report.z = float(result.q), float(result.z)

        ctx.free = list(free)
        preempt = set(result.preempt) if result is not None else set()
        if preempt and result is not None:  # moves: lyasched.live.mover (the decision -> Slurm commands of a move)
            self.mover.carry_out(result, seen, state, ctx, self.stop_requested)
        starts = tuple(d for d in result.starts if d.job_id not in preempt) if result is not None else ()
        by_id = {w.job_id: w for w in waiting} if starts else {}
        jobs_by_id = {job.job_id: (job, row) for job, row in seen.values()} if starts else {}
        for d in starts:
            if self.stop_requested.is_set():
                log.info("stop requested: the slot's remaining start decisions are dropped (jobs stay held)")
                break
            wj = by_id.get(d.job_id)
            if wj is None:
                log.warning("policy started unknown job %s: ignored", d.job_id)
                continue
            job, row = jobs_by_id[d.job_id]
            self.starter.start(job, row, wj, d, ctx)

    # ------------------------------------------------------------ records

    def _sync(self, jobs: Sequence[SlurmJob], ctx: SlotContext) -> dict:
        """Bring each job's row up to date; returns uid -> (SlurmJob, row or None).

        A uid names one lyasched job (`step.by_uid`: when Slurm lists several jobs with one uid, a
        resubmission after a cancel or a copied comment, which one is it).
        """
        by_uid, dropped = step.by_uid(jobs, self.inputs.decode, self.config.users)
        for drop, uid, keep in dropped:
            if not drop.finished and drop.job_id not in self._warned:
                self._warned.add(drop.job_id)
                log.warning("job %s repeats uid %s of job %s: ignored", drop.job_id, uid, keep.job_id)

        now = ctx.now
        seen: dict[str, tuple[SlurmJob, dict | None]] = {}
        steps: list[step.Step] = []
        # Held, waiting and unchanged (most of a long queue): only their brief rows are read, and
        # their step is what step.step would give (nothing changes but last_seen).
        rows = records.get_jobs(self.db, list(by_uid), columns=records.BRIEF_COLUMNS)
        quiet = {uid for uid, (job, _, _) in by_uid.items() if (r := rows.get(uid)) is not None
                 and r["slurm_id"] == job.job_id and r["state"] == "waiting" and job.held_by_service
                 and r["slurm_state"] == job.state and r["name"] == job.name}
        rows.update(records.get_jobs(self.db, [u for u in by_uid if u not in quiet and u in rows]))
        for uid, (job, s, err) in by_uid.items():
            row = rows.get(uid)
            if uid in quiet:
                assert row is not None  # quiet: its brief row was read
                steps.append(step.Step(uid, row, {}))
                seen[uid] = (job, row)
                continue
            replaced = row is not None and row["slurm_id"] != job.job_id  # a resubmission: a new record
            if replaced:
                row = None
            if row is None and job.finished:
                if replaced:  # the old record goes; nothing else is kept of a job never seen unfinished
                    steps.append(step.Step(uid, {"uid": uid, "slurm_id": job.job_id, "first_seen": now}, {},
                                           replaced=True))
                continue  # finished before this service ever saw it: nothing it decided, nothing to learn
            new = row is None
            if row is None:
                row = step.new_record(uid, job, s.sig if s else "", "" if s is not None else err, now)
                if s is None:
                    log.warning("job %s: %s (never released by lyasched)", job.job_id, err)
            st = step.step(row, job, now)
            st.new, st.replaced = new, replaced
            steps.append(st)
            seen[uid] = (job, st.row)
        step.apply(self.db, steps, now)  # the one place a record changes state: one transaction per slot
        for st in steps:
            for w in st.warnings:
                log.warning("%s", w)
            if st.finished:
                job = seen[st.uid][0]
                ctx.report.finished.append(job.job_id)
                if st.learn is not None:
                    self._finish(ctx, st.row, *st.learn)  # with its start time (lyasched.learn)
        return seen

    def _finish(self, ctx: SlotContext, row: dict, slurm_state: str, observed: float | None) -> None:
        """What a finished job teaches the cost table (lyasched.learn.job_finished)."""
        learn.job_finished(self.db, row, slurm_state, observed, ctx.device, ctx.cluster,
                           lambda: learn.workdir_of(self.slurm, row["slurm_id"]))

    def _vanished(self, seen: dict, ctx: SlotContext) -> None:
        """Jobs we followed that Slurm no longer lists (MinJobAge passed, or slurmctld restarted
        with lost state): ask accounting if there is any, else record what we last saw."""
        gone_uids = [u for u in records.active_uids(self.db) if u not in seen]
        if not gone_uids:
            return
        rows = records.get_jobs(self.db, gone_uids)
        gone = [rows[u] for u in gone_uids if u in rows]
        now, report = ctx.now, ctx.report
        acct: dict[str, AccountingRecord] = {}
        if self._accounting_enabled():
            try:
                for a in self.slurm.accounting([r["slurm_id"] for r in gone]):
                    acct.setdefault(a.job_id, a)
            except (SlurmError, ParseError) as e:
                log.warning("sacct failed: %s", e)
        why = "no accounting" if not self._accounting_enabled() else "not in sacct"
        steps = [step.vanished(row, acct.get(row["slurm_id"]), now, why) for row in gone]
        step.apply(self.db, steps, now)  # the record state machine (lyasched.live.step), one transaction
        for st in steps:
            for w in st.warnings:
                log.warning("%s", w)
            report.finished.append(st.row["slurm_id"])
            if st.learn is not None:  # after the commit, as for jobs Slurm still lists
                self._finish(ctx, st.row, *st.learn)

    def _accounting_enabled(self) -> bool:
        if self._accounting is None:
            try:
                self._accounting = self.slurm.config().accounting
            except SlurmError:
                self._accounting = False
            records.set_meta(self.db, "accounting", str(self._accounting))
        return self._accounting
