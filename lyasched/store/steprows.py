"""Rows written before an action on Slurm and marked after each step (start intents in
`lyasched.store.records`, moves in `lyasched.store.moves`), and the short write transaction
both use."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator

import sqlite_utils


@contextmanager
def transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """One short write transaction (the connection is in autocommit mode otherwise)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    else:
        db.execute("COMMIT")


def clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def open_step_row(db: sqlite_utils.Database, table: str, columns: dict[str, Any], what: str,
                  fields: dict[str, Any]) -> int:
    """Insert an open step record (a start intent, a move: written before acting on Slurm) in
    ``table``; returns its id. ``what`` names the record in the error on an unknown column."""
    unknown = set(fields) - set(columns)
    if unknown:
        raise KeyError(f"unknown {what} column(s): {', '.join(sorted(unknown))}")
    with transaction(db):
        db.table(table).insert({"step": "decided", "state": "open", **{k: clean(v) for k, v in fields.items()}},
                               columns=columns)
        return int(db.execute("select last_insert_rowid()").fetchone()[0])


def mark_step_row(db: sqlite_utils.Database, table: str, row_id: int, fields: dict[str, Any]) -> None:
    sets = ", ".join(f"{k} = ?" for k in fields)
    db.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*(clean(v) for v in fields.values()), row_id])


def open_step_rows(db: sqlite_utils.Database, table: str) -> list[dict]:
    return list(db.query(f"select * from {table} where state = 'open' order by id"))
