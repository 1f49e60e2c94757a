"""The ``moves`` table: one row per move of a running job (shrink, grow, suspend), written before
each Slurm action and updated after it, so it is both the move's intent record (a restarted
service finishes or rolls back the open ones: lyasched.live.mover) and its history (lyastat).

Steps, in order: ``decided`` (row written, nothing sent), ``signalled`` (requeue allowed, the
checkpoint signal sent), ``requeued`` (checkpoint complete, ``scontrol requeuehold`` returned),
``resized`` (``scontrol update`` returned), ``released``. States: ``open``, ``done``, ``failed``
(no checkpoint in time, or the job ended first: the job was left as it was), ``rolled_back``.

Every ``done`` move ended one run of its job (``scontrol requeuehold``): ``run_started`` (Slurm's
StartTime of that run, written with the row) to ``requeued_at``. Their sum is the time the job
held GPUs before its current run (`JobMoves.held_before`), what its wait leaves out as the simulator's does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

import sqlite_utils

from lyasched.store import schema, steprows

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
    "run_started": float,  # Slurm's StartTime of the run this move ends (null in rows from before it was kept)
    "cost_s": float,  # measured move cost: signal -> running again
    "resolved": float,
    "resolution": str,
}


def ensure(db: sqlite_utils.Database) -> None:
    if "moves" in db.table_names():
        _add_run_started(db)
    db.table("moves").create(MOVE_COLUMNS, pk="id", if_not_exists=True)
    db.table("moves").create_index(["state"], if_not_exists=True)
    db.table("moves").create_index(["uid"], if_not_exists=True)


def _add_run_started(db: sqlite_utils.Database) -> None:
    """A table from before ``run_started``: the column added and filled, in one transaction (a
    process killed halfway leaves neither; a second process waits, then finds the column), where
    the history says it exactly: a run that began with a resize's relaunch started at that move's
    ``restarted_at``. A job's first run, and a run the policy started after a suspension, stay
    unknown: null, counted as no time held (the wait as the service counted it before)."""
    def has() -> bool:
        return "run_started" in {r[1] for r in db.execute("PRAGMA table_info(moves)").fetchall()}

    if has():  # the usual case: no write lock taken
        return
    with steprows.transaction(db):
        if has():
            return
        db.execute("ALTER TABLE moves ADD COLUMN run_started FLOAT")
        db.execute(schema.RUN_STARTED_FILL)  # what the schema's migration 1 does (lyasched.store.schema)


def open_move(db: sqlite_utils.Database, **fields: Any) -> int:
    return steprows.open_step_row(db, "moves", MOVE_COLUMNS, "move", fields)


def mark(db: sqlite_utils.Database, move_id: int, **fields: Any) -> None:
    steprows.mark_step_row(db, "moves", move_id, fields)


def open_moves(db: sqlite_utils.Database) -> list[dict]:
    return steprows.open_step_rows(db, "moves")


def unfinished_restarts(db: sqlite_utils.Database) -> list[dict]:
    """Done resizes whose relaunch has not been seen running yet (their cost is measured then)."""
    return list(db.query("select * from moves where state = 'done' and kind != 'suspend' and cost_s is null"))


def for_job(db: sqlite_utils.Database, uid: str) -> list[dict]:
    if "moves" not in db.table_names():  # a database written before moves existed (lyastat reads old ones)
        return []
    return list(db.query("select * from moves where uid = ? order by id", [uid]))


@dataclass(frozen=True)
class JobMoves:
    """What a job's moves so far tell the next slot (`history`): its last completed move (the
    progress saved), the time its earlier runs held GPUs, its completed moves and its own move cost."""

    last_done: dict | None = None  # the last completed move's row (the progress saved)
    held_before: float = 0.0  # ``run_started`` to ``requeued_at`` of the runs its completed moves ended (unknown start: 0)
    done: int = 0  # completed moves, as the simulator counts a job's checkpoints (`ElasticVariant.move_backoff`)
    cost_s: float | None = None  # mean measured signal-to-running-again time of its moves (None when none)


def history(db: sqlite_utils.Database, uids: Iterable[str] | None = None) -> dict[str, JobMoves]:
    """uid -> `JobMoves`, for every job with a move, or only for ``uids`` (the service asks for its
    running checkpointable jobs: the table keeps every move ever made, and a long-lived service
    would otherwise read all of it each slot). Two indexed reads, whatever the number of jobs."""
    if "moves" not in db.table_names():
        return {}
    where, args = "", []
    if uids is not None:  # one JSON parameter, whatever the count (no limit on bound variables)
        where, args = "uid in (select value from json_each(?))", [json.dumps(sorted(set(uids)))]
    last: dict[str, dict] = {}
    for r in db.query(f"select * from moves where state = 'done' {'and ' + where if where else ''} order by id", args):
        last[r["uid"]] = r
    out: dict[str, JobMoves] = {}
    for uid, held, done, cost in db.execute(
        "select uid, sum(case when state = 'done' and run_started is not null and requeued_at is not null "
        "then max(0, requeued_at - run_started) else 0 end), sum(state = 'done'), avg(cost_s) "
        f"from moves {'where ' + where if where else ''} group by uid", args
    ).fetchall():
        out[uid] = JobMoves(last.get(uid), float(held or 0.0), int(done or 0),
                            float(cost) if cost is not None else None)
    return out


