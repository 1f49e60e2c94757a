"""The ``adaptive`` table: per adaptive-batch job (lyasub --adaptive-batch), what its step report
last said (batch, phi, statistical efficiency, base steps done) and the batch the service last
handed it at a (re)start. A table of its own, created when first written (schema.py: tables a
file lacks are created at today's layout), so files without adaptive jobs are unchanged; readers
find none in a file that has no such table.
"""

from __future__ import annotations

from typing import Any, Sequence

import sqlite_utils

TABLE = "adaptive"
COLUMNS: dict[str, type] = {
    "uid": str,
    "slurm_id": str,
    "batch": int,  # the global batch the job reported running at
    "local": int,  # its per-GPU micro-batch
    "accum": int,  # gradient accumulation steps
    "m0": int,  # its base batch
    "phi": float,  # smoothed gradient noise scale (null: not estimated yet)
    "eff": float,  # statistical efficiency (phi + M0)/(phi + M)
    "base": float,  # base steps done
    "lr": float,  # learning-rate factor
    "step": int,  # the report's step index of that line
    "reported": float,  # the job's time of the report
    "seen": float,  # when the service read it
    "chosen": int,  # the batch the service handed it at its last (re)start
    "chosen_at": float,
}


def ensure(db: sqlite_utils.Database) -> None:
    db.table(TABLE).create(COLUMNS, pk="uid", if_not_exists=True)


def record_status(db: sqlite_utils.Database, uid: str, slurm_id: str, status: dict, now: float) -> None:
    """Store a job's latest adaptive report (`lyasched.live.adaptive.parse_status`)."""
    ensure(db)
    row = {k: status.get(k) for k in ("batch", "local", "accum", "m0", "phi", "eff", "base", "lr", "step")}
    db.table(TABLE).upsert({"uid": uid, "slurm_id": slurm_id, **row, "reported": status.get("time"), "seen": now},
                           pk="uid")


def record_chosen(db: sqlite_utils.Database, uid: str, slurm_id: str, batch: int, now: float) -> None:
    ensure(db)
    db.table(TABLE).upsert({"uid": uid, "slurm_id": slurm_id, "chosen": int(batch), "chosen_at": now}, pk="uid")


def get_many(db: sqlite_utils.Database, uids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """uid -> row for the uids that have one (none when the file has no such table)."""
    if not uids or TABLE not in db.table_names():
        return {}
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(uids), 500):
        part = list(uids[i:i + 500])
        marks = ",".join("?" * len(part))
        cur = db.execute(f"SELECT * FROM {TABLE} WHERE uid IN ({marks})", part)
        cols = [c[0] for c in cur.description]
        for r in cur.fetchall():
            row = dict(zip(cols, r))
            out[row["uid"]] = row
    return out


def get(db: sqlite_utils.Database, uid: str) -> dict[str, Any] | None:
    return get_many(db, [uid]).get(uid)
