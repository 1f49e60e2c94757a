"""The service's `TrustBook` (lyasched.estimates.trust), fed from its records' finished jobs.

Each finished job whose record has both its predicted run time (the claim it was started with,
before any trust factor: the starter records the row it was given) and its observed run time is
fed once, in end order. Jobs moved while running (a row in ``moves``) are left out: their
``predicted`` is the remaining run of their last piece, not the whole run. After a restart the
book is rebuilt from the records, as the simulator's is from its finished jobs.
"""

from __future__ import annotations

import math
import sqlite3

import sqlite_utils

from lyasched.estimates.trust import TrustBook, TrustParams

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
        """Feed the jobs finished since the last call; the book."""
        moved = " and uid not in (select uid from moves)" if "moves" in db.table_names() else ""
        t, uid = self._after
        try:
            rows = db.conn.execute(_FINISHED.format(moved=moved), [t, t, uid]).fetchall()
        except sqlite3.OperationalError:  # records without a jobs table yet
            return self.book
        for uid, user, pred, obs, ended in rows:
            self.book.observe(str(user or ""), float(pred), float(obs))
            self._after = (float(ended), str(uid))
        return self.book
