"""Moves of running checkpointable jobs on Slurm: shrink, grow, suspend (docs/elastic.md).

A move is carried out across slots, never blocking one:

1. ``begin`` (the slot the policy decides it): the move's row is written (step ``decided``), the
   job made requeueable (``scontrol update Requeue=1``: job_submit.lua submits lyasched jobs
   non-requeueable) and signalled (USR1, what launch.sbatch arranges; the script saves a
   checkpoint after its current step and exits), step ``signalled``;
2. ``advance`` (every later slot, before the records are synced): once the job's checkpoint
   marker (lyasched.job.checkpoint.read_marker) shows a save made for the move,
   ``scontrol requeuehold`` (step ``requeued``); a resize then gets ``scontrol update`` to its
   new count and placement (step ``resized``), ``Requeue=0`` again and ``scontrol release``
   (step ``released``, done: Slurm starts it on the new GPUs, the script resumes from the
   checkpoint). A suspension stops after ``requeuehold``: the job waits again, held, its progress
   kept, and the policy starts it later like any waiting job.

A job whose checkpoint does not appear within ``timeout`` is left running (``Requeue=0`` again)
and the move recorded ``failed``; only jobs submitted with ``lyasub --checkpointable`` (``ck=1``)
are ever touched.

Crash safety: the row is written before every Slurm action and each step is judged again from
Slurm's view and the marker, so a service killed at any point finishes the move on restart:
killed after the signal, the marker still shows the save and the move goes on (or times out,
the job left running); killed after ``requeuehold``, Slurm shows the job held and the move
goes on from there; killed after the release, Slurm shows it released and the move is done. A
resize whose ``update`` or ``release`` fails leaves the job held: it becomes a suspension (the
policy restarts it), never a job held forever. No progress is lost beyond the checkpoint: the
job is only requeued once its checkpoint is complete.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from lyasched import userfiles
from lyasched.job.checkpoint import MARKER, MARKER_MAX_BYTES, checkpoint_dir, parse_marker
from lyasched.live.context import SlotContext
from lyasched.live import step as step_rules  # the record changes (one place: the state machine)
from lyasched.live import adaptive, gputypes
from lyasched.live.crash import CrashPoints
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import Placement
from lyasched.policy.state import SlotResult, SlotState
from lyasched.slurm import SlurmError
from lyasched.slurm.types import SlurmJob
from lyasched.store import adaptive as adaptive_store
from lyasched.store import moves, records
from lyasched.store.placement import NodePlacement, nodes_to_json
from lyasched.summary import CostSummary

if TYPE_CHECKING:
    from lyasched.live.observe import Observation

log = logging.getLogger("lyasched.service")

MOVE_SIGNAL = "USR1"  # launch.sbatch: LYASCHED_CHECKPOINT_SIGNAL=USR1
# The signal again, every this many seconds, until the move's checkpoint shows: a job (re)started
# moments before its move is still importing, and its training process ignores USR1 until the
# checkpoint helper installs its handler (launch.sbatch has torchrun ignore it, and its children
# inherit that), so a first signal can be lost. A second one only sets the helper's flag again.
RESIGNAL_S = 10.0



def read_marker(ckdir: str | os.PathLike, user: str | None, job_id: str) -> dict | None:
    """The checkpoint marker in a job's ``ckdir`` (``<work dir>/.lyasched/ckpt-<uid>``), read as
    a file of the job's user (`lyasched.userfiles`): None when missing, refused or malformed
    (logged once per job), so a move waits for it and at worst times out."""
    owner = userfiles.uid_of(user)
    if owner is None:
        userfiles.warn_once(f"job {job_id}", "checkpoint marker", f"the job's user {user!r} is unknown here")
        return None
    p = Path(ckdir)
    try:
        got = userfiles.read_user_file(p.parent.parent, [p.parent.name, p.name, MARKER], owner, MARKER_MAX_BYTES)
    except userfiles.UserFileError as e:
        if "No such file" not in str(e):  # no save yet is the normal case
            userfiles.warn_once(f"job {job_id}", "checkpoint marker", e)
        return None
    if got.truncated:
        userfiles.warn_once(f"job {job_id}", "checkpoint marker", f"longer than {MARKER_MAX_BYTES} bytes")
        return None
    return parse_marker(got.data)

@dataclass(frozen=True)
class MoveOrder:
    """One move the policy decided: ``gpus == 0`` suspends; else the new count and placement
    (node index pairs, already made expressible by the placement rule)."""

    job_id: str
    gpus: int
    placement: Placement
    reason: str
    predicted: float = math.nan  # predicted remaining run on the new configuration


def checkpointable(row: dict) -> bool:
    """Whether the job's cost summary says ``ck=1`` (only such jobs are ever moved)."""
    try:
        return bool(CostSummary.decode(row.get("summary") or "").checkpointable)
    except ValueError:
        return False


def _err(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]


class Mover:
    """Carries out moves (see the module docstring). ``workdir(job_id)`` gives the job's working
    directory (where launch.sbatch puts its checkpoints); ``db`` as for `Starter`."""

    def __init__(self, db: Any, slurm: Any, crash: CrashPoints, timeout: float,
                 workdir: Callable[[str], str | None]) -> None:
        self._db = db
        self.slurm = slurm
        self.crash = crash
        self.timeout = timeout
        self.workdir = workdir
        self._resignalled: dict[int, float] = {}  # move id -> when it was last signalled again

    @property
    def db(self) -> Any:
        return self._db() if callable(self._db) else self._db

    # ------------------------------------------------------------ what is moving

    def moving(self) -> dict[str, dict]:
        """Slurm id -> open move: these jobs are neither movable nor startable until it closes."""
        return {m["slurm_id"]: m for m in moves.open_moves(self.db)}

    def reserved(self, index: dict[str, int]) -> list[tuple[int, int]]:
        """GPUs an open grow will take beyond what its job holds: kept from other starts meanwhile."""
        out = []
        for m in moves.open_moves(self.db):
            if not m["to_placement"]:
                continue
            have = dict(NodePlacement.from_json(m["from_placement"]).parts)
            for node, g in NodePlacement.from_json(m["to_placement"]).parts:
                extra = g - have.get(node, 0)
                if extra > 0 and node in index:
                    out.append((index[node], extra))
        return out

    def go_on(self, obs: Observation, ctx: SlotContext) -> dict[str, dict]:
        """A slot's open moves, first thing after reading Slurm: each goes on (`advance`), the jobs
        it changed are read again into ``obs.jobs``, and the GPUs an open grow will take are kept
        from ``obs.free``. Returns `moving`."""
        changed = self.advance(obs.jobs, ctx)
        if changed:
            fresh = {j.job_id: j for j in self.slurm.jobs(job_ids=changed)}
            obs.jobs = [fresh.get(j.job_id, j) if j.job_id in changed else j for j in obs.jobs]
        moving = self.moving()
        obs.take(self.reserved(obs.index))  # GPUs an open grow will take
        return moving

    # ------------------------------------------------------------ a new move

    def carry_out(self, result: SlotResult, seen: dict, state: SlotState, ctx: SlotContext,
                  stop: threading.Event) -> None:
        """Begin the moves the policy decided: a job in ``preempt`` is suspended, or resized when
        it is also in ``starts`` (its new count placed by the one placement rule on the GPUs it
        holds plus the free ones); a grow's extra GPUs are taken from ``ctx.free``. ``seen``: the
        slot's Slurm id -> (job, record); ``stop`` set: the remaining moves are dropped."""
        by_id = {job.job_id: (job, row) for job, row in seen.values() if row is not None}
        views = {r.job_id: r for r in state.running}
        starts = {d.job_id: d for d in result.starts}
        notes = result.info.get("moves", {}) if isinstance(result.info, dict) else {}
        for jid in result.preempt:
            if stop.is_set():
                break
            job, row = by_id.get(jid, (None, None))
            view = views.get(jid)
            if job is None or row is None or not isinstance(view, MovableJob) or not view.preemptible:
                log.error("policy moved job %s, which is not a movable running job: ignored", jid)
                continue
            why = str(notes.get(jid) or "chosen by the policy")
            d = starts.get(jid)
            if d is None:
                order = MoveOrder(jid, 0, (), why)
            else:
                room = list(ctx.free)
                for i, c in view.placement:
                    room[i] += c
                allowed = gputypes.allowed_types(job, row.get("summary"))  # a typed job moves within its types
                room = gputypes.room(room, ctx, job, row.get("summary"))  # and within its --constraint's nodes
                placement = gputypes.fit_typed(d.gpus, d.placement, room, ctx.types, allowed)
                if placement is None:
                    log.info("job %s: resize to %d GPUs has no expressible placement%s: not moved", jid, d.gpus,
                             f" of GPU type {', '.join(allowed)}" if allowed else "")
                    continue
                rem, _ = view.best_remaining(d.gpus)
                order = MoveOrder(jid, d.gpus, tuple(placement), why, predicted=rem)
                batch = adaptive.batch_on(ctx, jid, d, tuple(placement))
                if batch is not None:  # its batch on the new GPUs (for their type), handed at the resize
                    adaptive_store.record_chosen(self.db, row["uid"], jid, batch, ctx.now)
            if self.begin(job, row, order, ctx) and order.gpus:
                for i, c in order.placement:  # the grow's extra GPUs are kept from this slot's starts
                    ctx.free[i] = max(0, ctx.free[i] - max(0, c - dict(view.placement).get(i, 0)))

    def begin(self, job: SlurmJob, row: dict, order: MoveOrder, ctx: SlotContext) -> bool:
        """Start a move (signal); False when it cannot be (not movable, or Slurm refused)."""
        now, names = ctx.now, ctx.names
        if not job.running or not checkpointable(row) or row.get("state") != "running":
            log.error("job %s: move refused (running %s, checkpointable %s, record %s)", job.job_id, job.running,
                      checkpointable(row), row.get("state"))
            return False
        if job.job_id in self.moving():
            return False
        wd = self.workdir(job.job_id)
        if not wd:
            log.warning("job %s: no working directory from Slurm: not moved", job.job_id)
            return False
        ckdir = checkpoint_dir(wd, row["uid"])
        before = (read_marker(ckdir, job.user, job.job_id) or {}).get("n", 0)
        cur = NodePlacement.from_slurm(job.nodes, job.gpus_per_node)
        to = NodePlacement.from_indices(order.placement, names).to_json() if order.gpus else ""
        kind = "suspend" if not order.gpus else (
            "shrink" if order.gpus < job.gpus else "grow" if order.gpus > job.gpus else "resize")
        mid = moves.open_move(
            self.db, uid=row["uid"], slurm_id=job.job_id, kind=kind, reason=order.reason, created=now,
            from_gpus=job.gpus, from_placement=cur.to_json(), to_gpus=order.gpus, to_placement=to,
            per_node=order.placement[0][1] if order.gpus else 0, predicted=order.predicted,
            ckpt_dir=str(ckdir), ckpt_before=before, run_started=job.start_time,
        )
        try:
            self.slurm.set_requeue(job.job_id, True)
            self.slurm.signal(job.job_id, MOVE_SIGNAL)
        except SlurmError as e:
            self._close(mid, job.job_id, "failed", now, f"signal failed: {_err(e)}: left running")
            self._no_requeue(job.job_id)
            return False
        moves.mark(self.db, mid, step="signalled", signalled_at=now)
        self.crash.reach("move_after_signal")
        ctx.decisions.append({"time": now, "uid": row["uid"], "slurm_id": job.job_id, "action": "move",
                              "gpus": order.gpus, "placement": to, "reason": f"{kind}: {order.reason} (signalled)"})
        log.info("job %s: %s %d -> %d GPUs: signalled (%s)", job.job_id, kind, job.gpus, order.gpus, order.reason)
        return True

    # ------------------------------------------------------------ the open moves, every slot

    def advance(self, jobs: Sequence[SlurmJob], ctx: SlotContext) -> list[str]:
        """Take every open move as far as it can go now; the Slurm ids whose state it changed
        (the caller reads them again before syncing the records)."""
        by_id = {j.job_id: j for j in jobs}
        changed = []
        open_now = moves.open_moves(self.db)
        self._resignalled = {k: v for k, v in self._resignalled.items() if k in {m["id"] for m in open_now}}
        for m in open_now:
            try:
                if self._advance(m, by_id.get(m["slurm_id"]), ctx):
                    changed.append(m["slurm_id"])
            except SlurmError as e:  # this move waits for the next slot; the others go on
                log.warning("job %s: move step %s: %s (retried next slot)", m["slurm_id"], m["step"], _err(e))
                changed.append(m["slurm_id"])
        self._measure(by_id, ctx.now)
        return changed

    def _advance(self, m: dict, job: SlurmJob | None, ctx: SlotContext) -> bool:
        now, mid, jid = ctx.now, m["id"], m["slurm_id"]
        step = m["step"]
        if step in ("decided", "signalled"):
            if job is None:
                self._close(mid, jid, "failed", now, "the job is no longer known to Slurm")
                return False
            marker = read_marker(m["ckpt_dir"], job.user, jid) if m["ckpt_dir"] else None
            saved = marker is not None and marker["stop"] and marker["n"] > (m["ckpt_before"] or 0)
            if job.pending and not job.held_by_service and (m["signalled_at"] or 0) and step == "signalled":
                # Requeued by its owner in the move's window (Requeue=1 from the signal to the
                # requeue: Slurm refuses requeuehold otherwise): hold it, the move goes on from there.
                self.slurm.hold(jid)
                job = self.slurm.job(jid) or job
            if job.running and job.start_time and m["signalled_at"] and job.start_time > m["signalled_at"] + 1:
                self._no_requeue(jid)
                self._close(mid, jid, "failed", now, "restarted outside the move (requeued by its owner): left running")
                return False
            if job.held_by_service:  # requeued before a restart (the mark was not written)
                step = "requeued"
                m = {**m, "ckpt_step": marker["step"] if saved and marker else m["ckpt_step"]}
                moves.mark(self.db, mid, step=step, requeued_at=now, checkpointed_at=m["checkpointed_at"] or now,
                           ckpt_step=marker["step"] if saved and marker else None)
            elif saved:
                assert marker is not None
                moves.mark(self.db, mid, checkpointed_at=now, ckpt_step=marker["step"])
                m = {**m, "ckpt_step": marker["step"]}
                self.slurm.requeue_hold(jid)
                moves.mark(self.db, mid, step="requeued", requeued_at=now)
                self.crash.reach("move_after_requeue")
                step = "requeued"
                job = self.slurm.job(jid)
                if job is None:
                    self._close(mid, jid, "failed", now, "the job vanished from Slurm after its requeue")
                    return True
            elif step == "decided":  # killed before the signal went out (or before it was marked)
                if not job.running:
                    self._close(mid, jid, "rolled_back", now, "not signalled and no longer running: nothing to undo")
                    self._no_requeue(jid)
                    return False
                self.slurm.set_requeue(jid, True)
                self.slurm.signal(jid, MOVE_SIGNAL)
                moves.mark(self.db, mid, step="signalled", signalled_at=now)
                return False
            elif job.finished:
                self._close(mid, jid, "failed", now, f"the job ended ({job.state}) without the move's checkpoint")
                return False
            elif now - (m["signalled_at"] or now) > self.timeout:
                self._no_requeue(jid)
                self._close(mid, jid, "failed", now, f"no checkpoint within {self.timeout:g}s of the signal: left running")
                self._decision(ctx, m, "move-failed", f"{m['kind']}: no checkpoint within {self.timeout:g}s: left running")
                return False
            else:  # still checkpointing
                last = self._resignalled.get(mid, m["signalled_at"] or now)
                if job.running and now - last >= RESIGNAL_S:
                    self._resignalled[mid] = now
                    self.slurm.signal(jid, MOVE_SIGNAL)
                    log.info("job %s: %s: no checkpoint %.0fs after the signal: signalled again", jid, m["kind"],
                             now - (m["signalled_at"] or now))
                return False
        if job is None:
            return False
        if step == "resized" and not job.held_by_service:  # released before a restart
            self._released(m, ctx, "released before the service stopped")
            return True
        if not job.pending:  # requeued while its processes still end (COMPLETING): next slot
            return True
        if m["kind"] == "suspend" or not m["to_placement"]:
            self._no_requeue(jid)
            why = f"suspended: {m['reason'] or 'by the policy'} (checkpoint at step {m['ckpt_step']})"
            with records.transaction(self.db):
                records.upsert_job(self.db, m["uid"], **step_rules.suspended(why))
                moves.mark(self.db, mid, state="done", resolved=now, resolution="suspended: held, waits for the policy",
                           cost_s=max(0.0, now - (m["signalled_at"] or now)))
            self._decision(ctx, m, "suspend", why)
            return True
        placement = NodePlacement.from_json(m["to_placement"])
        nodes = list(placement.nodes)
        try:
            if step == "requeued":
                chosen = (adaptive_store.get(self.db, m["uid"]) or {}).get("chosen")
                if chosen:  # an adaptive job: the batch chosen with the move, read by launch.sbatch
                    adaptive.hand_batch(self.db, self.slurm, m["uid"], jid, int(chosen), now, job.comment)
                gtype = gputypes.release_type(gputypes.allowed_types(job), nodes, ctx.type_of)
                self.slurm.resize(jid, len(nodes), int(m["per_node"]), nodes, gtype)
                moves.mark(self.db, mid, step="resized")
                self.crash.reach("move_after_resize")
            self._no_requeue(jid)
            self.slurm.release(jid)
        except (SlurmError, ValueError) as e:
            # Held, with its checkpoint: a suspension now (the policy starts it again later). ValueError:
            # its new nodes are no longer all of one of its GPU types (gone from the partition).
            why = f"{m['kind']} not finished ({_err(e)}): suspended, waits for the policy"
            with records.transaction(self.db):
                records.upsert_job(self.db, m["uid"], **step_rules.suspended(why))
                moves.mark(self.db, mid, state="done", kind="suspend", resolved=now, resolution=why)
            self._decision(ctx, m, "suspend", why)
            return True
        self.crash.reach("move_after_release")
        self._released(m, ctx, "released in its slot")
        return True

    def _released(self, m: dict, ctx: SlotContext, how: str) -> None:
        now = ctx.now
        p = NodePlacement.from_json(m["to_placement"])
        with records.transaction(self.db):
            records.upsert_job(self.db, m["uid"], **step_rules.released_after_move(m, nodes_to_json(p.nodes), now))
            moves.mark(self.db, m["id"], step="released", state="done", released_at=now, resolved=now,
                       resolution=f"{how} (checkpoint at step {m['ckpt_step']})")
        self._decision(ctx, m, m["kind"], f"{m['kind']} {m['from_gpus']} -> {m['to_gpus']} GPUs: {m['reason']} "
                                          f"(resumes from step {m['ckpt_step']})")
        log.info("job %s: %s to %d GPUs released (%s)", m["slurm_id"], m["kind"], m["to_gpus"], how)

    def _measure(self, by_id: dict[str, SlurmJob], now: float) -> None:
        """A resized job seen running again: its move cost, signal to running again."""
        for m in moves.unfinished_restarts(self.db):
            job = by_id.get(m["slurm_id"])
            if job is not None and job.running and job.start_time and m["signalled_at"]:
                if job.start_time >= (m["requeued_at"] or 0) - 1:
                    moves.mark(self.db, m["id"], restarted_at=job.start_time,
                               cost_s=max(0.0, job.start_time - m["signalled_at"]))

    # ------------------------------------------------------------ helpers

    def _close(self, mid: int, jid: str, state: str, now: float, why: str) -> None:
        moves.mark(self.db, mid, state=state, resolved=now, resolution=why)
        (log.warning if state == "failed" else log.info)("job %s: move %s: %s", jid, state, why)

    def _no_requeue(self, jid: str) -> None:
        """Requeue=0 again (best effort: a finished job cannot be updated, and needs none)."""
        try:
            self.slurm.set_requeue(jid, False)
        except SlurmError as e:
            log.info("job %s: Requeue=0 not set: %s", jid, _err(e))

    def _decision(self, ctx: SlotContext, m: dict, action: str, why: str) -> None:
        ctx.decisions.append({"time": ctx.now, "uid": m["uid"], "slurm_id": m["slurm_id"], "action": action,
                              "gpus": m["to_gpus"], "placement": m["to_placement"] or "", "reason": why})
