"""The live scheduler, one slot at a time: Slurm state in, policy decision, Slurm updates out.

`Service` wires the parts of lyasched.live; each slot (`Service.run_slot`, then `_slot`):

1. observe (lyasched.live.observe): read every lyasched job (``slurm.jobs()``, comment tagged
   ``lyasched:v1;``) and every node's GPUs (``slurm.nodes()``; GPUs held by any job, lyasched or
   not, are busy; a drained or down node has none free), through the cluster view lyasub uses too
   (lyasched.clusterview);
2. close the starts a crash left open (`Starter.reconcile`) and advance open moves (`Mover.go_on`);
3. bring the records up to date (lyasched.live.sync): the pure state machine (lyasched.live.step)
   in one transaction, jobs Slurm no longer lists, the cost table taught from finished jobs
   (`learning.job_finished`); then sort the jobs into waiting and running (`observe.sort_jobs`),
   holding again a job released more than ``release_grace`` ago that Slurm has not started (its
   GPUs were taken meanwhile);
4. decide: the jobs' rows and the `ClusterSnapshot` (lyasched.live.inputs) -> the one
   `SlotStateBuilder` the simulator uses -> ``policy.decide``;
5. act: the starts through `Starter.carry_out` (each: intent, ``scontrol update``, ``release``; the
   placement rule of lyasched.policy.placement re-places or skips what Slurm cannot express), the
   moves through `Mover.carry_out`; record the slot and its decisions (lyasched.live.report).

Slurm is reached through the `Slurm` interface (lyasched.slurm.backend): its CLI tools or pyslurm,
the same calls and errors either way (docs/slurm-backends.md). The service only ever calls Slurm,
never user code. Crash consistency: lyasched.live.starter, lyasched.live.mover, docs/reliability.md.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any, Callable

import sqlite_utils

from lyasched import gcpause  # GC pause
from lyasched.live import learning  # a job's working directory (moves' checkpoints)
from lyasched.config import Config
from lyasched.costmodel.cost import CostModel
from lyasched.live import observe
from lyasched.live import adaptive  # adaptive-batch jobs: phi and batch from their reports, the batch handed at a start
from lyasched.live import report as slot_report
from lyasched.live.context import SlotContext
from lyasched.live.crash import CrashPoints
from lyasched.live import failsafe  # when the service stops: the fail-safe's releases, adopted
from lyasched.live.inputs import PolicyInputs
from lyasched.live import limits  # Slurm's GPU limits: no release into one
from lyasched.live.lease import LeaseError, LeaseKeeper
from lyasched.live.limits import LimitsWatch
from lyasched.live.tenants import META_KEY, LiveTenants, SharesWatch, book_json, finished_rows
from lyasched.live.mover import Mover
from lyasched.live.report import Outage, SlotReport
from lyasched.live.starter import Starter
from lyasched.live.sync import RecordSync
from lyasched.policy import make_policy
from lyasched.policy.placement import EQUAL_PER_NODE
from lyasched.live.trust import LiveTrust
from lyasched.policy.snapshot import ClusterSnapshot, SlotStateBuilder
from lyasched.policy.state import Capabilities, Policy, SlotState, capabilities
from lyasched.slurm import Slurm, SlurmCLI, SlurmError, as_backend
from lyasched.slurm.backend import SlurmMoves
from lyasched.slurm.types import ParseError
from lyasched.store import PerThread, records

__all__ = ["Service", "SlotReport", "UnsupportedPolicy", "cannot_serve"]

log = logging.getLogger("lyasched.service")


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
        lease: LeaseKeeper | None = None,
        limits: LimitsWatch | None = None,
        shares: SharesWatch | None = None,
    ) -> None:
        self.config = config
        self.shares = shares  # lyasched.live.tenants: Slurm's fair-share tree (None: config or equal shares)
        self.limits = limits  # lyasched.live.limits: Slurm's GPU limits (None: not read)
        # lyasched.live.tenants: each tenant's GPU-time received and entitled, as replay keeps it
        self.tenants = LiveTenants(config.tenant_shares)
        self.trust = LiveTrust()  # users' observed / predicted run-time factors (lyasched.live.trust)
        # lyasched.live.lease: held each slot before acting (None: no lease, e.g. tests and tools)
        self.lease = lease
        self._adopt = False  # the lease was just taken: adopt what the fail-safe released meanwhile
        # APScheduler runs slots in a worker thread: given an opener, each thread opens its own connection
        self._db = PerThread(db)
        self.slurm: Slurm = as_backend(slurm if slurm is not None else SlurmCLI(timeout=config.slurm_timeout))
        self.policy = policy if policy is not None else make_policy(config.policy, **dict(config.params))
        caps = capabilities(self.policy)
        if why := cannot_serve(caps):
            raise UnsupportedPolicy(f"policy {self.policy_name!r} cannot run under serve: {why}")
        if caps.moves and not isinstance(self.slurm, SlurmMoves):
            raise UnsupportedPolicy(f"policy {self.policy_name!r} moves jobs, "
                                    f"and the Slurm backend {getattr(self.slurm, 'name', '?')!r} cannot signal or requeue")
        self.caps = caps
        self.builder = SlotStateBuilder(caps)  # the one place a slot's policy input is built
        self.clock = clock
        self.stop_requested = threading.Event()
        self.busy = threading.Lock()
        self.starter = Starter(self._db, self.slurm, CrashPoints.from_env(), config.release_grace)
        # moves of running checkpointable jobs (lyasched.live.mover), for a policy that moves jobs
        self.mover = Mover(self._db, self.slurm, self.starter.crash, config.move_timeout,
                           workdir=lambda job_id: learning.workdir_of(self.slurm, job_id))
        # the last slot's input, as observed: a record of that slot that later slots do not change (its
        # jobs, rows and books are immutable or fresh each slot; the trust book is copied on write)
        self.last_snapshot: ClusterSnapshot | None = None
        self.last_state: SlotState | None = None  # ... and as the policy saw it
        self.outage = Outage()  # one log line each way per Slurm outage (lyasched.live.report)
        records.ensure_schema(self.db)
        self.inputs = PolicyInputs(self._db, clock, self.slurm)  # each job as the policy's input (lyasched.live.inputs)
        self.adaptive = adaptive.Watch()  # adaptive-batch jobs' reports (lyasched.live.adaptive)
        self.sync = RecordSync(self._db, self.slurm, self.inputs.decode, config.users,  # records follow Slurm
                               plain_finished=self.inputs.plain.finished)
        # Slot hooks: called with (ctx, slurm_failed) after each slot is recorded (lyasched.live.metrics);
        # a hook's failure is logged, never the slot's.
        self.slot_hooks: list[Callable[[SlotContext, bool], None]] = []

    @property
    def policy_name(self) -> str:
        """The policy's name as the slots record it (its class name if it has none)."""
        return getattr(self.policy, "name", type(self.policy).__name__)

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
        """This thread's records connection."""
        return self._db()

    # ------------------------------------------------------------ one slot

    def run_slot(self) -> SlotReport:
        """Run one slot; never raises for Slurm trouble (the slot is recorded with its error)."""
        with self.busy, gcpause.paused():  # lyasched.gcpause: no heap scans in a slot over a long queue
            if (standby := self._lease_slot()) is not None:  # another holds the lease: no slot, nothing recorded
                return standby
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
            self.outage.note(slurm_failed, now, report)
            report.duration = time.monotonic() - t0
            self.crash.reach("before_slot_record")
            report.slot_id = slot_report.record(self.db, ctx, self.policy_name)
            log.log(logging.INFO if self.outage.logs(slurm_failed) else logging.DEBUG, "%s", report.line())
            self._after_slot(ctx, slurm_failed)
            return report

    def _after_slot(self, ctx: SlotContext, slurm_failed: bool) -> None:
        """Run the slot hooks (`slot_hooks`) on a recorded slot."""
        for hook in self.slot_hooks:
            try:
                hook(ctx, slurm_failed)
            except Exception:  # noqa: BLE001 - monitoring must not stop the service
                log.exception("slot hook %r failed", hook)

    def _lease_slot(self) -> SlotReport | None:
        """Renew (or take) the lease before the slot (lyasched.live.lease); a report saying why not
        when this service must not act (another live service holds it, or it cannot be written)."""
        if self.lease is None:
            return None
        try:
            what, cur = self.lease.hold()
        except (LeaseError, OSError) as e:
            what, why = "", f"lease: {e}"
            log.error("%s: not acting", why)
        else:
            why = "" if what or cur is None else f"standby: lease held by {cur.holder} (epoch {cur.epoch})"
        if what == "taken":
            self._adopt = True
        return None if what else SlotReport(slot_id=None, time=self.clock(), duration=0.0, error=why)

    def _slot(self, ctx: SlotContext) -> None:
        """Observe (Slurm -> records -> snapshot), decide (the policy), act (the starter, the mover)."""
        report = ctx.report
        obs = observe.read(self.slurm, self.config, self.db)
        cluster = self.inputs.cluster(obs.view.spec)
        ctx.cluster, ctx.cost, ctx.names, ctx.types = cluster, CostModel(cluster), obs.names, obs.types  # lyasched.costmodel.learn refits against it
        ctx.device, ctx.gpu_types = obs.view.device_type, self.config.gpu_types
        ctx.gpus = [n.gpus_total for n in obs.nodes]
        ctx.features = [frozenset(n.features) for n in obs.nodes]  # what a job's --constraint names (gputypes.room)
        ctx.type_costs = self.inputs.type_costs(ctx)  # typed nodes: each type's cost model ({} untyped)

        self.crash.reach("after_read")
        self.starter.reconcile(obs.jobs, ctx)
        moving = self.mover.go_on(obs, ctx) if self.caps.moves else {}  # open moves first; their jobs read again
        seen = self.sync.listed(obs.jobs, ctx)
        self.adaptive.observe(self.db, self.slurm, seen, ctx.now, self.inputs.decode)  # running adaptive jobs' phi and batch
        if self._adopt and self.lease is not None:  # lease taken back: the fail-safe's releases are recorded, left to Slurm
            failsafe.adopt(self.db, seen, self.lease.path, ctx.now)
            self._adopt = False
        self.sync.vanished(seen, ctx)
        waiting, running = observe.sort_jobs(obs, seen, ctx, self.inputs, self.config.release_grace,
                                             self._hold_again)

        view = None
        if self.limits is not None:  # Slurm's QOS/association GPU limits: never release into one
            released = {j.job_id for j, row in seen.values() if row and row.get("state") == "released"}
            view = self.limits.view(obs.jobs, released, ctx.now)
            if view is not None:
                waiting, kept_out = limits.cap(waiting, view)
                ctx.limit_why = kept_out
        free = obs.free
        snap = self.inputs.snapshot(ctx, self.config.slot_seconds, free, cluster.gpus_per_node, waiting, running)
        slurm_shares = self.shares.read(ctx.now) if self.shares is not None else None
        if slurm_shares is not None and slurm_shares != self.tenants.shares:
            self.tenants.set_shares(slurm_shares)
        if self.tenants.ledger is None:  # first slot: the records' past (a restart forgets nothing)
            self.tenants.rebuild(finished_rows(self.db), cluster.total_gpus)
        snap = replace(snap, tenants=self.tenants.book(ctx.now, cluster.total_gpus, snap.waiting, snap.running),
                       trust=self.trust.update(self.db))  # lyasched.live.trust: claims against runs
        if snap.tenants is not None:  # `lyastat --tenants`
            records.set_meta(self.db, META_KEY, book_json(snap.tenants, ctx.now))
        self.last_snapshot = snap
        state = self.builder.build(snap)
        movable = 0
        if self.caps.moves:
            state, movable = self.inputs.movable(ctx, state, seen, moving)
            state = self.builder.movable(state)  # claims scaled by trust in the movers' view too
        self.last_state = state
        report.free = dict(zip(ctx.names, free))
        report.waiting, report.running = len(waiting), len(running)
        result = self.policy.decide(state) if waiting or (movable and sum(free) > 0) else None
        ctx.free = list(free)  # as the starts and moves take them
        if result is None:
            if view is not None:
                self._note_limits(seen, ctx.limit_why)
            return
        if self.lease is not None and (lost := self.lease.lost()):  # fencing: a newer epoch acts, not this one
            report.error = f"fenced, not acting: {lost}"
            log.warning("%s", report.error)
            return
        if view is not None:  # the slot's starts together (two may each fit a limit, not both)
            result, refused = limits.admit(result, view)
            ctx.limit_why.update(refused)
            self._note_limits(seen, ctx.limit_why)
        report.q, report.z = float(result.q), float(result.z)  # Q and Z after the slot's decisions (none: both 0)
        if result.preempt:  # moves: lyasched.live.mover (the decision -> Slurm commands of a move)
            self.mover.carry_out(result, seen, state, ctx, self.stop_requested)
        self.starter.carry_out(result, waiting, seen, ctx, self.stop_requested)  # lyasched.live.starter

    def _note_limits(self, seen: dict, why: dict[str, str]) -> None:
        """The records of waiting jobs a Slurm limit kept out this slot say which (lyastat); the
        others' old limit reason is cleared."""
        for uid, (job, row) in seen.items():
            if row is None or row.get("state") != "waiting":
                continue
            old = str(row.get("reason") or "")
            reason = f"{limits.REASON}: {why[job.job_id]}" if job.job_id in why else ""
            if reason and old != reason:
                records.upsert_job(self.db, uid, reason=reason)
                log.info("job %s: not started: %s", job.job_id, reason)
            elif not reason and old.startswith(limits.REASON):
                records.upsert_job(self.db, uid, reason="")

    def _hold_again(self, job: Any, row: dict, ctx: SlotContext) -> None:
        """A released job Slurm has not started is held again, unless the fail-safe released it."""
        if not failsafe.released_by_failsafe(row):
            self.starter.hold_again(job, row, ctx)
