"""The one place a decision becomes Slurm commands: start (intent, resize, release), hold again,
and the reconciliation of starts a crashed or failed slot left open.

Crash consistency (docs/reliability.md): each start is written as an *intent* before the resize
(``scontrol update``) and closed, with the job's row and its decision, in one transaction after the
release. Every slot first reconciles the open intents with Slurm, the source of truth: a job Slurm
shows released (pending without the hold, running or finished) was started, and the intent is
applied; a job still held was not, so the intent is aborted and the job is decided again (its
leftover ``update`` is harmless: a held job does not run, and the next start rewrites every field).
A job id runs once in Slurm (requeue is refused by the plugin), and the service only releases a job
it sees held in the same slot, so a restart cannot start a job twice.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from typing import Any, Sequence

from lyasched.live.context import SlotContext
from lyasched.live import adaptive, gputypes, plain, step
from lyasched.live.crash import CrashPoints
from lyasched.live.inputs import on_its_type
from lyasched.policy.state import Decision, SlotResult, WaitingJob
from lyasched.slurm import Slurm, SlurmError
from lyasched.slurm.types import SlurmJob
from lyasched.store import records
from lyasched.store.placement import NodePlacement, nodes_to_json

log = logging.getLogger("lyasched.service")


class Starter:
    """Owns the start path: ``db`` for intents and records, ``slurm`` for the commands."""

    def __init__(self, db: Any, slurm: Slurm, crash: CrashPoints, release_grace: float) -> None:
        self._db = db  # a callable returning this thread's connection, or a connection
        self.slurm = slurm
        self.crash = crash
        self.release_grace = release_grace

    @property
    def db(self) -> Any:
        return self._db() if callable(self._db) else self._db

    def reconcile(self, jobs: Sequence[SlurmJob], ctx: SlotContext) -> list[dict]:
        """Close the starts a previous run (or a failed release) left open, from Slurm's view.

        - Slurm shows the job released (pending without the hold, running, or finished): the
          release went through; the intent is applied (job row, ``start`` decision) as if the
          slot had finished.
        - Slurm still shows it held: it was not released (crash before, or between, ``update``
          and ``release``). The intent is aborted and the job is decided again by this slot's
          policy call rather than released with the old decision: the free GPUs may have changed
          while the service was down, and a stale release could take GPUs the policy now gives
          to others. The leftover ``update`` is harmless (a held job does not run; the next
          start sets every field again).
        - Slurm no longer lists it: aborted; the job's row is resolved like any vanished job.

        Returns the intents it closed, with ``resolution``."""
        now = ctx.now
        intents = records.open_intents(self.db)
        if not intents:
            return []
        by_id = {j.job_id: j for j in jobs}
        closed = []
        for it in intents:
            job = by_id.get(it["slurm_id"])
            if job is None:
                res, applied = "aborted: job no longer in Slurm", False
            elif job.held_by_service or (job.pending and job.reason.startswith("JobHeld")):
                res, applied = f"aborted: still held after step {it['step']!r}, decided again", False
            elif job.pending or job.running or job.finished:
                res, applied = f"applied: Slurm shows it {job.state} (released before the service stopped)", True
            else:
                res, applied = f"aborted: unexpected Slurm state {job.state}/{job.reason}", False
            if applied:
                row = records.get_job(self.db, it["uid"]) or {}
                pred = it["predicted"]
                dec = dict(time=it["created"], uid=it["uid"], slurm_id=it["slurm_id"], action="start",
                           gpus=it["gpus"], nodes=it["nodes"], placement=it["placement"], score=it["score"],
                           predicted=pred, reason=f"{it['reason'] or 'chosen by the policy'} (recovered: {res})")
                reason = f"released: {it['reason'] or 'chosen by the policy'}" if row.get("state") == "waiting" else ""
                ctx.decision_ids.append(records.apply_start(
                    self.db, it, now, res, step.released(it, row.get("state"), it["created"], reason), decision=dec,
                ))
            else:
                records.mark_intent(self.db, it["id"], state="aborted", resolved=now, resolution=res)
            log.warning("job %s: start left open by a previous slot %s", it["slurm_id"], res)
            closed.append({**it, "resolution": res, "state": "applied" if applied else "aborted"})
        return closed

    def carry_out(self, result: SlotResult, waiting: Sequence[WaitingJob], seen: dict, ctx: SlotContext,
                  stop: threading.Event) -> None:
        """Start what the policy decided, in its order (a job it also preempts is a move: the
        mover's); ``seen``: the slot's uid -> (job, record); ``stop`` set: the remaining starts are
        dropped (those jobs stay held, decided again by the next service run)."""
        preempt = set(result.preempt)
        starts = tuple(d for d in result.starts if d.job_id not in preempt)
        by_id = {w.job_id: w for w in waiting} if starts else {}
        jobs_by_id = {job.job_id: (job, row) for job, row in seen.values()} if starts else {}
        for d in starts:
            if stop.is_set():
                log.info("stop requested: the slot's remaining start decisions are dropped (jobs stay held)")
                break
            wj = by_id.get(d.job_id)
            if wj is None:
                log.warning("policy started unknown job %s: ignored", d.job_id)
                continue
            job, row = jobs_by_id[d.job_id]
            self.start(job, row, wj, d, ctx)

    def start(self, job: SlurmJob, row: dict, wj: WaitingJob, d: Decision, ctx: SlotContext) -> None:
        """Carry out one start decision: intent, ``scontrol update`` (resize), ``release``, record."""
        now, free, names, report = ctx.now, ctx.free, ctx.names, ctx.report
        allowed = gputypes.allowed_types(job, row.get("summary"))
        room = gputypes.room(free, ctx, job, row.get("summary"))  # its --constraint's nodes only
        placement = gputypes.fit_typed(d.gpus, d.placement, room, ctx.types, allowed)
        base = dict(time=now, uid=row["uid"], slurm_id=job.job_id, gpus=d.gpus, score=d.score)
        if placement is None:
            why = "no placement Slurm can express (equal GPUs per node) fits the free GPUs"
            if allowed:
                why += f" of its GPU type{'s' if len(allowed) > 1 else ''} ({', '.join(allowed)})"
            if room != list(free):
                why += " on the nodes its --constraint allows"
            ctx.decisions.append({**base, "action": "skip", "placement": _named(d.placement, names), "reason": why})
            records.upsert_job(self.db, row["uid"], reason=f"waiting: {why}")
            log.info("job %s: %d GPUs chosen but %s", job.job_id, d.gpus, why)
            return
        spans = len(placement) > 1
        named = NodePlacement.from_indices(placement, names)  # the one placement shape after the policy
        node_names = list(named.nodes)
        per_node = placement[0][1]
        pred = on_its_type(wj, placement, ctx.types).run_time(d.gpus, spans)  # typed: its rows on the type it lands on
        place_json = named.to_json()
        why = d.reason or "chosen by the policy"
        # Never start twice: only a job this slot saw pending and held by the service is released
        # (Slurm runs a job id once; the plugin refuses requeue), and no other start is open for it.
        if not (job.pending and job.held_by_service) or row["state"] != "waiting":
            log.error("job %s: not held (%s/%s, record %s): start dropped", job.job_id, job.state, job.reason, row["state"])
            return
        intent = dict(uid=row["uid"], slurm_id=job.job_id, created=now, gpus=d.gpus, per_node=per_node,
                      nodes=nodes_to_json(node_names), placement=place_json,
                      predicted=pred if math.isfinite(pred) else None, score=d.score, reason=why)
        intent["id"] = records.open_intent(self.db, **intent)
        self.crash.reach("before_update")
        try:
            # A plain job of a managed partition keeps the shape its user asked for (its script may
            # count on its nodes and tasks): released as submitted, Slurm places it. A lyasub job
            # runs one launcher per node: it is given the policy's nodes and GPUs.
            if not plain.is_plain(row.get("summary")):
                batch = adaptive.batch_on(ctx, job.job_id, d, placement)
                if batch is not None:  # the batch the policy chose (for its type), read by launch.sbatch
                    adaptive.hand_batch(self.db, self.slurm, row["uid"], job.job_id, batch, now, job.comment)
                self.slurm.resize(job.job_id, len(placement), per_node, node_names,
                                  gputypes.release_type(allowed, node_names, ctx.type_of))
        except SlurmError as e:
            # The job is still held (a held job never runs), whether or not the update reached Slurm.
            msg = str(e).splitlines()[0][:300]
            records.mark_intent(self.db, intent["id"], state="aborted", resolved=now, resolution=f"update failed: {msg}")
            self._start_failed(ctx, job, row, base, place_json, node_names, msg)
            return
        records.mark_intent(self.db, intent["id"], step="updated")
        self.crash.reach("after_update")
        try:
            self.slurm.release(job.job_id)
        except SlurmError as e:
            # A release that timed out may still have happened: the intent stays open and the next
            # slot's reconcile() asks Slurm (released -> applied, still held -> decided again).
            msg = str(e).splitlines()[0][:300]
            self._start_failed(ctx, job, row, base, place_json, node_names, msg + " (reconciled next slot)")
            return
        self.crash.reach("after_release")
        for i, c in placement:
            free[i] -= c
        released = step.released(intent, "waiting", now, f"released: {why}")  # the record's change
        ctx.decision_ids.append(records.apply_start(
            self.db, intent, now, "applied: released in its slot", released,
            decision={**base, "action": "start", "placement": place_json, "nodes": nodes_to_json(node_names),
                      "predicted": intent["predicted"], "reason": why},
        ))
        self.crash.reach("after_record")
        report.started.append(
            {"slurm_id": job.job_id, "uid": row["uid"], "gpus": d.gpus, "nodes": node_names, "per_node": per_node,
             "predicted": pred if math.isfinite(pred) else None, "score": d.score, "reason": why}
        )

    def _start_failed(self, ctx: SlotContext, job: SlurmJob, row: dict, base: dict, place_json: str,
                      node_names: list[str], msg: str) -> None:
        log.error("job %s: could not start: %s", job.job_id, msg)
        ctx.decisions.append(
            {**base, "action": "failed", "placement": place_json, "nodes": nodes_to_json(node_names), "reason": msg}
        )
        records.upsert_job(self.db, row["uid"], reason=f"waiting: start failed: {msg}")

    def hold_again(self, job: SlurmJob, row: dict, ctx: SlotContext) -> None:
        """Hold again a released job Slurm has not started within the grace (its GPUs were taken)."""
        now, report = ctx.now, ctx.report
        why = f"not started within {self.release_grace:g}s of its release (GPUs taken meanwhile): held again"
        try:
            self.slurm.hold(job.job_id)
        except SlurmError as e:
            log.error("job %s: could not hold again: %s", job.job_id, e)
            return
        records.upsert_job(self.db, row["uid"], **step.held_again(why))
        ctx.decisions.append(
            {"time": now, "uid": row["uid"], "slurm_id": job.job_id, "action": "hold", "gpus": row["gpus"],
             "placement": row["placement"], "nodes": row["nodes"], "reason": why}
        )
        report.held_again.append(job.job_id)
        log.info("job %s: %s", job.job_id, why)


def _named(placement: Sequence[tuple[int, int]], names: Sequence[str]) -> str:
    """A (possibly malformed) policy placement in the records' form, for a skipped decision: named
    nodes where it is a valid placement, else the raw index pairs as the policy gave them."""
    try:
        return NodePlacement.from_indices(placement, names).to_json()
    except (ValueError, IndexError):
        return json.dumps([[i, g] for i, g in placement])
