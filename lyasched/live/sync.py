"""The records follow Slurm: each slot, the jobs Slurm lists -> record steps applied in one
transaction (`RecordSync.listed`), then the jobs it no longer lists (`RecordSync.vanished`).

The steps themselves are the pure state machine of lyasched.live.step; this module reads the rows
they start from, writes the batch (`step.apply`), logs the steps' warnings and has the cost table
taught from each finished job after the commit (`learning.job_finished`). A record changes here only
because Slurm's view changed; what the service itself does to a job (start, hold again, move) is
written by the actor with its Slurm command (lyasched.live.starter, lyasched.live.mover).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from lyasched.live import learning
from lyasched.live import step
from lyasched.live.context import SlotContext
from lyasched.slurm import Slurm, SlurmError
from lyasched.slurm.types import AccountingRecord, ParseError, SlurmJob
from lyasched.store import records
from lyasched.summary import CostSummary

log = logging.getLogger("lyasched.service")

# uid -> (the Slurm job this slot follows for it, its record after the slot's step; None: not recorded)
Seen = dict[str, tuple[SlurmJob, dict | None]]


class RecordSync:
    """Brings the job records up to date with Slurm. ``db`` as for `Starter` (a callable returning
    this thread's connection, or a connection); ``decode`` a comment -> (cost summary or None, why
    not); ``users`` the users whose jobs are followed (empty: everybody's)."""

    def __init__(self, db: Any, slurm: Slurm, decode: Callable[[str], tuple[CostSummary | None, str]],
                 users: Sequence[str], plain_finished: Callable[[dict], None] | None = None) -> None:
        self._db = db
        self.plain_finished = plain_finished  # a managed partition's plain job ended (lyasched.live.plain)
        self.slurm = slurm
        self.decode = decode
        self.users = users
        self._accounting: bool | None = None  # detected once (scontrol show config), recorded in meta
        self._warned: set[str] = set()  # Slurm ids already warned about as repeating a uid
        # uid -> the brief row of a quiet record (None: no record) as the last slot left it, valid
        # while records.jobs_rev stays at _memo_rev: a long held queue's rows are not read again
        self._memo: dict[str, dict | None] = {}
        self._memo_rev: int | None = None

    @property
    def db(self) -> Any:
        return self._db() if callable(self._db) else self._db

    def listed(self, jobs: Sequence[SlurmJob], ctx: SlotContext) -> Seen:
        """Bring each job's row up to date; returns uid -> (SlurmJob, row or None).

        A uid names one lyasched job (`step.by_uid`: when Slurm lists several jobs with one uid, a
        resubmission after a cancel or a copied comment, which one is it).
        """
        by_uid, dropped = step.by_uid(jobs, self.decode, self.users)
        for drop, uid, keep in dropped:
            if not drop.finished and drop.job_id not in self._warned:
                self._warned.add(drop.job_id)
                log.warning("job %s repeats uid %s of job %s: ignored", drop.job_id, uid, keep.job_id)

        now = ctx.now
        seen: Seen = {}
        steps: list[step.Step] = []
        # Held, waiting and unchanged (most of a long queue): only their brief rows are read, and
        # their step is what step.step would give (nothing changes; nothing is written: their
        # last_seen is the sync's time, records.LISTED_AT, written by `vanished`).
        rev = records.jobs_rev(self.db)
        rows = self._rows(by_uid, rev)
        # One pass sorts the quiet (their step would change nothing and write nothing: step.apply;
        # none is made, their brief row is their record) from the others, whose whole rows are read.
        # ``seen`` takes every uid in Slurm's order now, the others' entries filled (or dropped) below.
        memo: dict[str, dict | None] = {}  # the next slot's memo: quiet rows, and uids with no record
        others: list[str] = []
        for uid, (job, _, _) in by_uid.items():
            r = rows.get(uid)
            if (r is not None and r["slurm_id"] == job.job_id and r["state"] == "waiting" and job.held_by_service
                    and r["slurm_state"] == job.state and r["name"] == job.name):
                seen[uid] = (job, r)
                memo[uid] = r
                continue
            seen[uid] = None  # type: ignore[assignment]  # its place in Slurm's order
            others.append(uid)
        rows.update(records.get_jobs(self.db, [u for u in others if u in rows]))
        for uid in others:
            job, s, err = by_uid[uid]
            row = rows.get(uid)
            replaced = row is not None and row["slurm_id"] != job.job_id  # a resubmission: a new record
            if replaced:
                row = None
            if row is None and job.finished:
                if replaced:  # the old record goes; nothing else is kept of a job never seen unfinished
                    steps.append(step.Step(uid, {"uid": uid, "slurm_id": job.job_id, "first_seen": now}, {},
                                           replaced=True))
                del seen[uid]
                if uid not in rows:  # no record: none is looked for again while nothing changes
                    memo[uid] = None
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
        before, after = step.apply(self.db, steps, now)  # the one place a record changes state: one transaction per slot
        # The memo for the next slot: quiet rows (not written) and uids with no record, if nobody
        # else wrote a job row between this slot's read and its write (else the next slot reads all).
        if rev is not None and before == rev and after is not None:
            self._memo = memo
            self._memo_rev = after
        else:
            self._memo, self._memo_rev = {}, None
        for st in steps:
            for w in st.warnings:
                log.warning("%s", w)
            if st.finished:
                job = seen[st.uid][0]
                ctx.report.finished.append(job.job_id)
                if st.learn is not None:
                    self._finish(ctx, st.row, *st.learn)  # with its start time (lyasched.costmodel.learn)
        return seen

    def _rows(self, by_uid: dict, rev: int | None) -> dict[str, dict]:
        """The brief rows (records.BRIEF_COLUMNS) of these uids' records: from the memo where no job
        row changed since it was taken (records.jobs_rev), the rest read."""
        if rev is None or rev != self._memo_rev:
            self._memo, self._memo_rev = {}, None
            return records.get_jobs(self.db, list(by_uid), columns=records.BRIEF_COLUMNS)
        memo, rows, missing = self._memo, {}, []
        for u in by_uid:
            if u in memo:
                if (r := memo[u]) is not None:
                    rows[u] = r
            else:
                missing.append(u)
        rows.update(records.get_jobs(self.db, missing, columns=records.BRIEF_COLUMNS))
        return rows

    def vanished(self, seen: Seen, ctx: SlotContext) -> None:
        """Jobs we followed that Slurm no longer lists (MinJobAge passed, or slurmctld restarted
        with lost state): ask accounting if there is any, else record what we last saw."""
        listed = records.listed_at(self.db)  # when every followed record was last listed (before this slot)
        with records.transaction(self.db):  # nobody makes a record followed between the check and listed_at
            if self._memo_rev is not None and records.active_count(self.db) == (
                    self._memo_rev, sum(1 for _, r in seen.values() if r is not None and r["state"] in records.ACTIVE_STATES)):
                # no job row changed since the sync's own write (jobs_rev) and every followed record
                # is one Slurm listed: nothing vanished (without reading every followed uid)
                records.set_listed_at(self.db, ctx.now)
                return
            gone_uids = [u for u in records.active_uids(self.db) if u not in seen]
            if not gone_uids:
                records.set_listed_at(self.db, ctx.now)  # every followed record is listed now
                return
        rows = records.get_jobs(self.db, gone_uids)
        gone = [rows[u] for u in gone_uids if u in rows]
        now, report = ctx.now, ctx.report
        acct: dict[str, AccountingRecord] = {}
        if self.accounting_enabled():
            try:
                for a in self.slurm.accounting([r["slurm_id"] for r in gone]):
                    acct.setdefault(a.job_id, a)
            except (SlurmError, ParseError) as e:
                log.warning("sacct failed: %s", e)
        why = "no accounting" if not self.accounting_enabled() else "not in sacct"
        steps = [step.vanished(row, acct.get(row["slurm_id"]), now, why, listed) for row in gone]
        # the record state machine (lyasched.live.step), one transaction; with it, every record
        # still followed was listed now (records.LISTED_AT)
        step.apply(self.db, steps, now, listed_at=now)
        for st in steps:
            for w in st.warnings:
                log.warning("%s", w)
            report.finished.append(st.row["slurm_id"])
            if st.learn is not None:  # after the commit, as for jobs Slurm still lists
                self._finish(ctx, st.row, *st.learn)

    def accounting_enabled(self) -> bool:
        """Whether Slurm keeps accounting (sacct answers): asked once, recorded in ``meta``."""
        if self._accounting is None:
            try:
                self._accounting = self.slurm.config().accounting
            except SlurmError:
                self._accounting = False
            records.set_meta(self.db, "accounting", str(self._accounting))
        return self._accounting

    def _finish(self, ctx: SlotContext, row: dict, slurm_state: str, observed: float | None) -> None:
        """What a finished job teaches the cost table (lyasched.live.learning.job_finished), or,
        for a plain job (no profile), the run-time estimates of the jobs after it."""
        s = self.decode(row["summary"])[0] if row.get("summary") else None
        if s is not None and s.plain:
            if self.plain_finished is not None:
                self.plain_finished({**row, "state": "finished", "slurm_state": slurm_state, "observed": observed})
            return
        # a profile belongs to a (model, GPU type): what the job teaches goes to the type it ran on
        ran = learning.ran_on_type(row, ctx.type_of) if ctx.per_type else ""
        learning.job_finished(self.db, row, slurm_state, observed, ran or ctx.device, ctx.cluster,
                              lambda: learning.workdir_of(self.slurm, row["slurm_id"]),
                              src_type=(s.profile_type if s is not None else "") or ctx.device, table=ctx.gpu_types)
