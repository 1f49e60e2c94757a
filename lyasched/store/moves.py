"""The ``moves`` table: one row per move of a running job (shrink, grow, suspend), written before
each Slurm action and updated after it, so it is both the move's intent record (a restarted
service finishes or rolls back the open ones: lyasched.live.mover) and its history (lyastat).

Steps, in order: ``decided`` (row written, nothing sent), ``signalled`` (requeue allowed, the
checkpoint signal sent), ``requeued`` (checkpoint complete, ``scontrol requeuehold`` returned),
``resized`` (``scontrol update`` returned), ``released``. States: ``open``, ``done``, ``failed``
(no checkpoint in time, or the job ended first: the job was left as it was), ``rolled_back``.
"""

from __future__ import annotations

from typing import Any

import sqlite_utils

from lyasched.store import records

MOVE_COLUMNS: dict[str, type] = {
    "id": int,
    "uid": str,
    "slurm_id": str,
    "kind": str,  # suspend, shrink, grow (resize to the same count on other nodes: "resize")
    "reason": str,  # the policy's reason
    "created": float,  # slot time it was decided
    "from_gpus": int,
    "from_placement": str,  # JSON [[node, gpus], ...]
    "to_gpus": int,  # 0 for a suspension
    "to_placement": str,
    "per_node": int,
    "predicted": float,  # predicted remaining run on the new configuration (s)
    "ckpt_dir": str,
    "ckpt_before": int,  # the marker's save count before the signal (0: no save yet)
    "ckpt_step": int,  # the step the move's checkpoint saved
    "step": str,
    "state": str,
    "signalled_at": float,
    "checkpointed_at": float,  # when the service saw the checkpoint complete
    "requeued_at": float,
    "released_at": float,
    "restarted_at": float,  # when Slurm ran the job again (from its start time)
    "cost_s": float,  # measured move cost: signal -> running again
    "resolved": float,
    "resolution": str,
}


def ensure(db: sqlite_utils.Database) -> None:
    db.table("moves").create(MOVE_COLUMNS, pk="id", if_not_exists=True)
    db.table("moves").create_index(["state"], if_not_exists=True)
    db.table("moves").create_index(["uid"], if_not_exists=True)


def open_move(db: sqlite_utils.Database, **fields: Any) -> int:
    return records.open_step_row(db, "moves", MOVE_COLUMNS, "move", fields)


def mark(db: sqlite_utils.Database, move_id: int, **fields: Any) -> None:
    records.mark_step_row(db, "moves", move_id, fields)


def open_moves(db: sqlite_utils.Database) -> list[dict]:
    return records.open_step_rows(db, "moves")


def unfinished_restarts(db: sqlite_utils.Database) -> list[dict]:
    """Done resizes whose relaunch has not been seen running yet (their cost is measured then)."""
    return list(db.query("select * from moves where state = 'done' and kind != 'suspend' and cost_s is null"))


def for_job(db: sqlite_utils.Database, uid: str) -> list[dict]:
    if "moves" not in db.table_names():  # a database written before moves existed (lyastat reads old ones)
        return []
    return list(db.query("select * from moves where uid = ? order by id", [uid]))


def last_done(db: sqlite_utils.Database) -> dict[str, dict]:
    """uid -> its last completed move (the progress saved, for a suspended job's remaining work)."""
    out: dict[str, dict] = {}
    for r in db.query("select * from moves where state = 'done' order by id"):
        out[r["uid"]] = r
    return out


def measured_cost(db: sqlite_utils.Database, uid: str) -> float | None:
    """The job's own move cost: the mean measured signal-to-running-again time of its previous
    moves (None when it has none)."""
    row = db.execute("select avg(cost_s) from moves where uid = ? and cost_s is not null", [uid]).fetchone()
    return float(row[0]) if row and row[0] is not None else None
