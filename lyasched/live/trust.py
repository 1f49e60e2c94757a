"""The service's `TrustBook` (lyasched.estimates.trust), fed from its records' finished jobs.

Each finished job whose record has both its predicted run time (the claim it was started with,
before any trust factor: the starter records the row it was given) and its observed run time is
fed once, in end order. Jobs moved while running (a row in ``moves``) are left out: their
``predicted`` is the remaining run of their last piece, not the whole run. After a restart the
book is rebuilt from the records, as the simulator's is from its finished jobs.

`known_over_claim` is the service's ``ClusterSnapshot.known`` for one job: its model's shared
cost-table profile against the profile its rows were made from (its claim, or what the model's
runs taught), so a forged summary of a known model is replaced by what is known of it.
"""

from __future__ import annotations

import copy
import math
import sqlite3

from dataclasses import replace

import sqlite_utils

from lyasched.costmodel.cost import CostModel, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.estimates.trust import TrustBook, TrustParams
from lyasched.policy.snapshot import requested_gpu_s
from lyasched.policy.state import waiting_job
from lyasched.store import costtable

_FINISHED = (
    "select uid, user, predicted, observed, ended from jobs"
    " where state = 'finished' and predicted is not null and observed is not null and ended is not null"
    " and (ended > ? or (ended = ? and uid > ?)){moved} order by ended, uid"
)


class LiveTrust:
    """Reads the records' newly finished jobs into one `TrustBook` each slot."""

    def __init__(self, params: TrustParams | None = None) -> None:
        self.book = TrustBook(params or TrustParams())
        self._after: tuple[float, str] = (-math.inf, "")  # (ended, uid) of the last job fed

    def update(self, db: sqlite_utils.Database) -> TrustBook:
        """Feed the jobs finished since the last call; the book. A book once returned is never
        changed: new jobs are fed into a copy (only in a slot where some finished), so each slot's
        snapshot keeps the factors it was decided with."""
        moved = " and uid not in (select uid from moves)" if "moves" in db.table_names() else ""
        t, uid = self._after
        try:
            rows = db.conn.execute(_FINISHED.format(moved=moved), [t, t, uid]).fetchall()
        except sqlite3.OperationalError:  # records without a jobs table yet
            return self.book
        if rows:  # copy on write: a book handed out (a slot's snapshot, `Service.last_snapshot`) stays as it was
            self.book = copy.deepcopy(self.book)
        for uid, user, pred, obs, ended in rows:
            self.book.observe(str(user or ""), float(pred), float(obs))
            self._after = (float(ended), str(uid))
        return self.book


def known_over_claim(cost: CostModel, job: Job, shared: Profile | None) -> float | None:
    """What is already known of a job's run time over what its claim predicts: its run on its
    requested count (`requested_gpu_s`) with its model's shared profile on this device (the cost
    table's: learned from every user's reports where there are some, else profiled) over the
    same with the profile the job is predicted with (``job.profile``). None when nothing is known
    or either is not finite; `lyasched.estimates.trust.known_scale` decides whether it is far
    enough below to be replaced (`ClusterSnapshot.known`)."""
    if shared is None:
        return None
    n = cost.cluster.total_gpus
    claim = requested_gpu_s(waiting_job(job, cost, n))
    known = requested_gpu_s(waiting_job(replace(job, profile=shared), cost, n))
    if not (claim > 0 and math.isfinite(claim) and math.isfinite(known)):
        return None
    return known / claim


def shared_profile(db: sqlite_utils.Database, sig: str, device: str) -> Profile | None:
    """The cost table's profile of (sig, device) shared by all users, uncorrected; None if none."""
    try:
        return costtable.get_profile(db, sig, device, corrected=False)
    except sqlite3.OperationalError:
        return None
