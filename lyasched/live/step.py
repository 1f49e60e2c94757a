"""The job record state machine: Slurm's view of a job folded into lyasched's record, purely.

`by_uid(jobs, decode)` picks the Slurm job each lyasched uid names; `step(row, job, now)` returns
the change and what happened (started, finished, warnings);
`vanished(row, acct, now, why)` the same for a job Slurm no longer lists; `apply(db, steps, now)`
writes a batch of changes in one transaction. The service's own actions change a record through
`released` (a start) and `held_again`, written by the starter with its Slurm command. States:
``waiting`` (held, ours to decide) -> ``released`` (a start sent) -> ``running`` -> ``finished``;
``vanished`` when Slurm forgot a job unseen; ``invalid`` for a job whose cost summary does not decode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import sqlite_utils

from lyasched.slurm.types import RAN_STATES, AccountingRecord, SlurmJob  # RAN_STATES: job states are classified in slurm.types
from lyasched.store import records
from lyasched.store.placement import NodePlacement, nodes_to_json
from lyasched.summary import CostSummary


@dataclass
class Step:
    """One job's record after this slot, and the events that got it there."""

    uid: str
    row: dict  # the record after the update
    update: dict[str, Any]  # the columns that change ({}: none; last_seen as `apply` says)
    new: bool = False  # the record did not exist before this slot
    replaced: bool = False  # a resubmission under a known uid: the old record is dropped first
    finished: bool = False
    learn: tuple[str, float | None] | None = None  # (Slurm state, observed run time) for the cost table
    warnings: list[str] = field(default_factory=list)
    seen: bool = True  # listed by Slurm this slot (last_seen is now: `apply`); False for a vanished job


def names_uid(a: SlurmJob, b: SlurmJob) -> bool:
    """Whether ``a`` rather than ``b`` is the job a shared uid names (unfinished first, then newest).

    Uids are visible to everybody in squeue: a job of ANOTHER user that copies one never takes it
    over (the first submitted keeps it), or anybody could hide anybody's job from the service."""
    if a.user != b.user:
        def first(j: SlurmJob) -> tuple:
            return (j.submit_time or 0.0, int(j.job_id) if j.job_id.isdigit() else 0)

        return first(a) <= first(b)

    def key(j: SlurmJob) -> tuple:
        return (not j.finished, j.submit_time or 0.0, int(j.job_id) if j.job_id.isdigit() else 0)

    return key(a) >= key(b)


def by_uid(jobs: Sequence[SlurmJob], decode: Callable[[str], tuple[CostSummary | None, str]],
           users: Sequence[str] = ()) -> tuple[dict[str, tuple[SlurmJob, CostSummary | None, str]],
                                              list[tuple[SlurmJob, str, SlurmJob]]]:
    """The job each uid names, with its decoded summary (or None and why): uid -> (job, summary,
    error). ``users``: only their jobs (all when empty). A uid names one lyasched job; when Slurm
    lists several with one uid (a resubmission after a cancel, or a copied comment) `names_uid`
    picks it. Also returns the others as (job dropped, uid, job kept). A job whose summary does not
    decode gets the uid ``slurm-<id>``. Pure."""
    out: dict[str, tuple[SlurmJob, CostSummary | None, str]] = {}
    dropped: list[tuple[SlurmJob, str, SlurmJob]] = []
    for job in jobs:
        if users and job.user not in users:
            continue
        s, err = decode(job.comment)
        uid = s.uid if s is not None else f"slurm-{job.job_id}"
        old = out.get(uid)
        if old is not None:
            keep, drop = (old[0], job) if names_uid(old[0], job) else (job, old[0])
            dropped.append((drop, uid, keep))
            if keep is old[0]:
                continue
        out[uid] = (job, s, err)
    return out, dropped


def new_record(uid: str, job: SlurmJob, sig: str, err: str, now: float) -> dict:
    """The record of a job first seen now (``err``: why its cost summary is invalid, '' if valid)."""
    row: dict[str, Any] = {c: None for c in records.JOB_COLUMNS}
    row.update(
        uid=uid, slurm_id=job.job_id, user=job.user, name=job.name, summary=job.comment, sig=sig,
        submit_time=job.submit_time, time_limit=job.time_limit, first_seen=now,
        state="invalid" if err else "waiting",
        reason=f"invalid cost summary: {err}" if err else "waiting for a slot",
    )
    return row


def step(row: dict, job: SlurmJob, now: float) -> Step:
    """Fold Slurm's view of one job into its record (start, end, observed run time). Pure."""
    upd: dict[str, Any] = {"slurm_state": job.state, "name": job.name}
    out = Step(uid=row["uid"], row=row, update=upd)
    st = row["state"]
    if st == "invalid":
        return _done(out, row, upd)
    if st == "vanished":
        # Slurm lists it again (it was missing from one answer, e.g. right after a controller
        # restart): follow it again rather than leave it held forever.
        st = "running" if job.running else "released" if (job.pending and not job.held_by_service) else "waiting"
        upd.update(state=st, reason="listed by Slurm again")
        out.warnings.append(f"job {job.job_id}: listed by Slurm again after it had vanished")
        row = {**row, "state": st}  # for the branches below; the update is judged against the record
    if job.running and st in ("waiting", "released"):
        upd.update(state="running", started=job.start_time, gpus=job.gpus, nodes=nodes_to_json(job.nodes))
        upd["reason"] = "running"
        if not row["placement"]:
            upd["placement"] = NodePlacement.from_slurm(job.nodes, job.gpus_per_node).to_json()
    elif job.finished and st in ("waiting", "released", "running"):
        ran = st == "running" or job.state in RAN_STATES
        observed = job.run_seconds if ran else None
        upd.update(state="finished", ended=job.end_time, reason=f"finished: {job.state}")
        if ran:
            upd.update(started=job.start_time, observed=observed)
        out.finished, out.learn = True, (job.state, observed)
    elif job.pending and not job.held_by_service and st == "waiting":
        # Released by someone else (an operator) or by a slot that died before recording it.
        upd.update(state="released", released_at=now, reason="released outside this slot")
    elif job.pending and not job.held_by_service and st == "running":
        # Requeued and released again (a move, lyasched.live.mover): committed to its new GPUs.
        upd.update(state="released", released_at=row.get("released_at") or now, reason="released again after a requeue")
    elif job.held_by_service and st in ("released", "running"):
        upd.update(state="waiting", reason="held (by an operator)")
    return _done(out, row, upd)


def released(intent: dict, state: str | None, released_at: float, reason: str) -> dict[str, Any]:
    """The record's change when the service released a job (a start, `lyasched.live.starter`):
    the intent's GPUs, nodes, placement and prediction; ``waiting`` (or no record state yet)
    becomes ``released``, a record Slurm already moved on keeps its state. ``reason``: the
    record's new reason ('' keeps it). Pure."""
    upd: dict[str, Any] = dict(gpus=intent["gpus"], nodes=intent["nodes"], placement=intent["placement"],
                               predicted=intent["predicted"], released_at=released_at)
    if state in (None, "waiting"):
        upd["state"] = "released"
    if reason:
        upd["reason"] = reason
    return upd


def held_again(why: str) -> dict[str, Any]:
    """The record's change when the service held a released job again (Slurm did not start it
    within ``release_grace``): waiting, no longer released. Pure."""
    return dict(state="waiting", released_at=None, reason=f"waiting: {why}")


def suspended(why: str) -> dict[str, Any]:
    """The record's change when a move left its job held with its checkpoint (a suspension, or a
    resize that could not be finished, `lyasched.live.mover`): waiting again for the policy, no
    longer released, its predictions to be refined from the progress saved. Pure."""
    return dict(state="waiting", released_at=None, reason=why, refined=1)


def released_after_move(move: Mapping[str, Any], nodes_json: str, released_at: float) -> dict[str, Any]:
    """The record's change when the mover released a resized job on its new GPUs: the move's
    count, nodes, placement and prediction, released (Slurm starts it). Pure."""
    return dict(state="released", released_at=released_at, gpus=move["to_gpus"], nodes=nodes_json,
                placement=move["to_placement"], predicted=move["predicted"],
                reason=f"released after a {move['kind']}: {move['reason'] or 'by the policy'}", refined=1)


def vanished(row: dict, acct: AccountingRecord | None, now: float, why: str, listed_at: float | None = None) -> Step:
    """A job the service followed that Slurm no longer lists (MinJobAge passed, or slurmctld
    restarted with lost state): finished as accounting recorded it (``acct``, when it has both
    times), else ``vanished`` with what was last seen (``why``: why accounting could not say).
    ``listed_at``: the last completed sync (`records.LISTED_AT`), when Slurm last listed it if
    later than its last_seen column; the record keeps that time (no longer followed). Pure."""
    out = Step(uid=row["uid"], row=row, update={}, finished=True, seen=False)
    seen = records.last_seen(row, listed_at)
    if acct is not None and acct.start_time and acct.end_time:
        observed = acct.elapsed if acct.elapsed is not None else acct.end_time - acct.start_time
        upd: dict[str, Any] = dict(state="finished", slurm_state=acct.state, started=acct.start_time,
                                   ended=acct.end_time, observed=observed, reason=f"finished: {acct.state} (from sacct)")
        out.learn = (acct.state, observed)
    else:
        # Best effort without accounting: the job ended (or was cancelled) at some time between
        # when it was last seen and now; which way is unknown. Record exactly that.
        last = row["slurm_state"] or "?"
        seen_at = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(seen or now))
        upd = dict(state="vanished", slurm_state="UNKNOWN_COMPLETED", reason=(
            f"final state unknown: purged by Slurm (MinJobAge) while not watched; last seen {last} "
            f"at {seen_at}, gone by {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(now))} ({why})"))
        out.warnings.append(f"job {row['slurm_id']}: no longer known to Slurm (last seen {last}): "
                            "recorded UNKNOWN_COMPLETED")
    if seen != row.get("last_seen"):
        upd["last_seen"] = seen  # exact in the column once the record is no longer followed
    out.update = upd
    out.row = {**row, **upd}
    return out


def _done(out: Step, row: dict, upd: dict[str, Any]) -> Step:
    """The update is what differs from the record as stored (``out.row``), not from ``row``, which
    the vanished branch has already moved on (its state change would be lost otherwise)."""
    out.update = {k: v for k, v in upd.items() if out.row.get(k) != v}
    out.row = {**row, **upd}
    return out


def apply(db: sqlite_utils.Database, steps: Sequence[Step], now: float,
          listed_at: float | None = None) -> tuple[int | None, int | None]:
    """Write a slot's record changes, all or none: changed and new records (last_seen ``now`` if
    listed), last_seen of unchanged listed records no longer followed, and ``listed_at`` (the
    meta `records.LISTED_AT`: the sync is complete, every followed record was listed then) if
    given. An unchanged listed record still followed is not written: its last_seen is that meta
    time (`records.last_seen`), so a slot over a long held queue writes only what changed, and
    its row (``Step.row``) stays as read. Returns `records.jobs_rev` before and after these
    writes, both read inside the transaction (whether anybody else wrote since the rows were read)."""
    touch = []
    with records.transaction(db):
        before = records.jobs_rev(db)
        for s in steps:
            if s.replaced:
                db.execute("DELETE FROM jobs WHERE uid = ?", [s.uid])
            if s.new or s.replaced:
                fields = {k: v for k, v in s.row.items() if k != "uid" and v is not None}
                records.upsert_job(db, s.uid, **{**fields, "last_seen": now})
            elif s.update:
                records.upsert_job(db, s.uid, **({"last_seen": now} if s.seen else {}), **s.update)
            elif s.seen and s.row.get("state") not in records.ACTIVE_STATES:
                touch.append((now, s.uid))  # e.g. a finished job Slurm still lists (MinJobAge)
        if touch:
            db.conn.executemany("UPDATE jobs SET last_seen = ? WHERE uid = ?", touch)
        if listed_at is not None:
            records.set_listed_at(db, listed_at)
        after = records.jobs_rev(db)
    for s in steps:
        if s.seen and (s.new or s.replaced or s.update or s.row.get("state") not in records.ACTIVE_STATES):
            s.row["last_seen"] = now  # as written
    return before, after
