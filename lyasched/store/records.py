"""What the service records: jobs, slots and decisions (the tables `lyastat` reads).

- ``jobs``: one row per lyasched job (key: the cost summary's uid): its summary, Slurm id and
  user, lyasched state (waiting, released, running, finished, vanished, invalid), the
  predicted run time at the GPU count it got, the observed run time once finished, and the
  predicted run time for every GPU count (JSON lists, one node / several nodes).
- ``slots``: one row per slot: time, Q, Z, free GPUs, decisions, how long the slot took.
- ``decisions``: one row per action on a job (start, hold, skip, failed) and why.
- ``intents``: one row per start the service is about to apply (written *before*
  ``scontrol update``, closed after ``scontrol release`` is recorded): after a crash, the open
  ones are reconciled against Slurm (docs/reliability.md).
- ``moves``: one row per move of a running job, its intent record and its history
  (lyasched.store.moves).

Writes are short (one statement, or one slot's rows in one transaction) so readers in WAL
mode never wait. The service creates the file 0644 so that users can read it (see docs/service.md).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Sequence

import sqlite_utils

from lyasched.store import moves, open_db, schema  # moves: of running jobs (docs/elastic.md)
from lyasched.store.steprows import clean as _clean
from lyasched.store.steprows import mark_step_row, open_step_row, open_step_rows, transaction

SCHEMA_VERSION = 3  # 2: intents table (created on open, nothing else changed); 3: moves.run_started (added on open)

JOB_COLUMNS: dict[str, type] = {
    "uid": str,
    "slurm_id": str,
    "user": str,
    "name": str,
    "summary": str,
    "sig": str,
    "state": str,  # lyasched's view: waiting, released, running, finished, vanished, invalid
    "slurm_state": str,  # Slurm's last JobState
    "submit_time": float,
    "released_at": float,
    "started": float,
    "ended": float,
    "gpus": int,
    "nodes": str,  # JSON list of node names
    "placement": str,  # JSON [[node, gpus], ...]
    "predicted": float,  # predicted run time at the GPUs it got (s)
    "observed": float,  # observed run time (s)
    "work": float,  # the job's size in Q (s on one GPU)
    "time_limit": float,
    "pred_one": str,  # JSON list: predicted run time on 1..G GPUs on one node (null = not allowed)
    "pred_multi": str,  # JSON list: the same spread over several nodes
    "reason": str,  # latest reason (why waiting, why held again, why invalid)
    "first_seen": float,
    "last_seen": float,
    "refined": int,  # 1 once the observed time was fed to the cost table
}
SLOT_COLUMNS: dict[str, type] = {
    "id": int,
    "time": float,
    "q": float,
    "z": float,
    "free_gpus": int,
    "free": str,  # JSON {node: free GPUs}
    "waiting": int,
    "running": int,
    "decisions": str,  # JSON list of {job, gpus, nodes, score, reason}
    "duration": float,
    "policy": str,
    "error": str,
}
DECISION_COLUMNS: dict[str, type] = {
    "id": int,
    "slot": int,
    "time": float,
    "uid": str,
    "slurm_id": str,
    "action": str,  # start, hold, skip, failed
    "gpus": int,
    "nodes": str,  # JSON list of node names
    "placement": str,  # JSON [[node, gpus], ...]
    "score": float,
    "predicted": float,
    "reason": str,
}
INTENT_COLUMNS: dict[str, type] = {
    "id": int,
    "uid": str,
    "slurm_id": str,
    "created": float,  # slot time the start was decided
    "gpus": int,
    "per_node": int,
    "nodes": str,  # JSON list of node names
    "placement": str,  # JSON [[node, gpus], ...]
    "predicted": float,
    "score": float,
    "reason": str,  # the policy's reason
    "step": str,  # last step done: decided (row written), updated (scontrol update returned)
    "state": str,  # open, applied (released and recorded), aborted (not released: re-decided)
    "resolved": float,
    "resolution": str,  # how it was closed (in the slot, or by reconciliation after a restart)
}


def ensure_schema(db: sqlite_utils.Database) -> None:
    db.table("jobs").create(JOB_COLUMNS, pk="uid", if_not_exists=True)
    db.table("slots").create(SLOT_COLUMNS, pk="id", if_not_exists=True)
    db.table("decisions").create(DECISION_COLUMNS, pk="id", if_not_exists=True)
    db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db.table("intents").create(INTENT_COLUMNS, pk="id", if_not_exists=True)
    db.table("intents").create_index(["state"], if_not_exists=True)
    moves.ensure(db)
    db.table("jobs").create_index(["slurm_id"], if_not_exists=True)
    db.table("jobs").create_index(["user"], if_not_exists=True)
    db.table("jobs").create_index(["state"], if_not_exists=True)  # the followed records (active_count)
    db.table("decisions").create_index(["uid"], if_not_exists=True)
    db.table("meta").upsert({"key": "schema_version", "value": str(SCHEMA_VERSION)}, pk="key")
    ensure_jobs_rev(db)


# meta key: a count that every change a slot's record sync reads from a job row moves on (insert,
# delete, an update of a BRIEF_COLUMNS column), kept by triggers whoever writes (any connection or
# process, any version): while it stands still, rows read before are still the rows (the sync's
# memo of a long held queue, lyasched.live.sync). Writes of other columns (predictions, reasons)
# leave it: nothing the sync memoises reads them.
JOBS_REV = "jobs_rev"
_REV_TRIGGERS = ("jobs_rev_insert", "jobs_rev_delete", "jobs_rev_update_brief1")  # renamed if BRIEF_COLUMNS change


def ensure_jobs_rev(db: sqlite_utils.Database) -> None:
    """The `JOBS_REV` row and its triggers (idempotent)."""
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, '0')", [JOBS_REV])
    bump = f"UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = '{JOBS_REV}';"
    whens = ("AFTER INSERT ON jobs", "AFTER DELETE ON jobs", f"AFTER UPDATE OF {', '.join(BRIEF_COLUMNS)} ON jobs")
    for name, when in zip(_REV_TRIGGERS, whens):
        db.execute(f"CREATE TRIGGER IF NOT EXISTS {name} {when} BEGIN {bump} END")


def jobs_rev(db: sqlite_utils.Database) -> int | None:
    """The current `JOBS_REV` (None where the records have none)."""
    try:
        r = db.conn.execute("select value from meta where key = ?", [JOBS_REV]).fetchone()
    except sqlite3.OperationalError:  # no meta table (records made without ensure_schema)
        return None
    return int(r[0]) if r is not None and r[0] is not None else None


def open_records(path: str | os.PathLike) -> sqlite_utils.Database:
    """Open (creating) the service database, readable by everyone (0644), with its tables."""
    p = Path(path)
    fresh = str(p) != ":memory:" and not p.exists()
    db = open_db(p, what="service database")
    ensure_schema(db)
    if fresh:
        for f in (p, Path(f"{p}-wal"), Path(f"{p}-shm")):
            try:
                os.chmod(f, 0o644)
            except OSError:
                pass
    return db


class RecordsUnavailable(RuntimeError):
    pass


def open_readonly(path: str | os.PathLike) -> sqlite_utils.Database:
    """Open the service database read-only (users of lyastat): never creates or writes it."""
    p = Path(path)
    try:
        exists = p.exists()
    except PermissionError:
        raise RecordsUnavailable(f"{p}: permission denied (ask the operator for read access, docs/service.md)") from None
    if not exists:
        raise RecordsUnavailable(f"{p}: no lyasched database (is `lyasched serve` running? see --db)")
    # mode=ro works while the service runs (its -wal/-shm files exist, 0644). When it is stopped
    # they are gone and a reader that may not create files in the directory cannot open a WAL
    # database read-only; then nobody is writing, so reading it as immutable is exact.
    last: Exception | None = None
    for query in ("mode=ro", "mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{p}?{query}", uri=True, timeout=30)
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("select count(*) from sqlite_master").fetchone()
            break
        except sqlite3.Error as e:
            last = e
    else:
        raise RecordsUnavailable(f"{p}: cannot read lyasched database: {last}")
    try:
        found = schema.user_version(conn)
    except sqlite3.Error as e:
        conn.close()
        raise RecordsUnavailable(schema.damaged_line(p, str(e), "service database")) from None
    if found > schema.SCHEMA_VERSION:  # its tables may mean something else now: read nothing
        conn.close()
        raise RecordsUnavailable(schema.newer_line(p, found))
    return sqlite_utils.Database(conn)


# ---------------------------------------------------------------- jobs


def get_job(db: sqlite_utils.Database, uid: str) -> dict | None:
    rows = list(db.query("select * from jobs where uid = ?", [uid]))
    return rows[0] if rows else None


def _dicts(cur: sqlite3.Cursor) -> list[dict]:
    """A cursor's rows as dicts, as `db.query` gives them (built in one comprehension: a slot
    reads a row per job, and sqlite-utils' row generator costs twice as much)."""
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


# What a slot reads of every job first: enough to see that a held, waiting job is unchanged (most
# of a long queue, whose rows are then never read whole) and to keep following it this slot.
BRIEF_COLUMNS = ("uid", "slurm_id", "state", "slurm_state", "name", "released_at", "placement", "last_seen")


def get_jobs(db: sqlite_utils.Database, uids: Sequence[str], columns: Sequence[str] = ()) -> dict[str, dict]:
    """Rows of many jobs by uid (one query per 500 uids); only ``columns`` (with uid) if given."""
    unknown = set(columns) - set(JOB_COLUMNS)
    if unknown:
        raise KeyError(f"unknown job column(s): {', '.join(sorted(unknown))}")
    what = ", ".join(dict.fromkeys(["uid", *columns])) if columns else "*"
    out: dict[str, dict] = {}
    for i in range(0, len(uids), 500):
        chunk = list(uids[i : i + 500])
        sql = f"select {what} from jobs where uid in ({', '.join('?' * len(chunk))})"
        out.update({r["uid"]: r for r in _dicts(db.conn.execute(sql, chunk))})
    return out


def job_by_slurm_id(db: sqlite_utils.Database, slurm_id: str) -> dict | None:
    rows = list(db.query("select * from jobs where slurm_id = ? order by first_seen desc limit 1", [str(slurm_id)]))
    return rows[0] if rows else None


def upsert_job(db: sqlite_utils.Database, uid: str, **fields: Any) -> None:
    """Insert or update one job's row (only the given columns change)."""
    unknown = set(fields) - set(JOB_COLUMNS)
    if unknown:
        raise KeyError(f"unknown job column(s): {', '.join(sorted(unknown))}")
    cols = ["uid", *fields]
    vals = [uid, *(_clean(v) for v in fields.values())]
    # Plain SQL: sqlite-utils' upsert introspects the table on every call (~1 ms; a slot writes
    # one row per changed job).
    sets = ", ".join(f"{c} = excluded.{c}" for c in fields) or "uid = excluded.uid"
    db.execute(
        f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT(uid) DO UPDATE SET {sets}",
        vals,
    )


def upsert_jobs(db: sqlite_utils.Database, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """`upsert_job` of many jobs, the same ``columns`` each (``rows``: uid, then the values), in one
    statement and one transaction (inside the caller's if one is open): a first slot over a long
    queue writes a row per job."""
    unknown = set(columns) - set(JOB_COLUMNS)
    if unknown:
        raise KeyError(f"unknown job column(s): {', '.join(sorted(unknown))}")
    if not rows:
        return
    cols = ["uid", *columns]
    sets = ", ".join(f"{c} = excluded.{c}" for c in columns) or "uid = excluded.uid"
    sql = (f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
           f"ON CONFLICT(uid) DO UPDATE SET {sets}")
    vals = [[r[0], *(_clean(v) for v in r[1:])] for r in rows]
    if db.conn.in_transaction:
        db.conn.executemany(sql, vals)
        return
    with transaction(db):
        db.conn.executemany(sql, vals)


def touch_jobs(db: sqlite_utils.Database, uids: Sequence[str], now: float) -> None:
    """Set last_seen of many jobs in one statement."""
    if uids:
        with transaction(db):
            db.conn.executemany("UPDATE jobs SET last_seen = ? WHERE uid = ?", [(now, u) for u in uids])


ACTIVE_STATES = ("waiting", "released", "running")  # the records the service still follows

# meta key: the slot time of the last slot whose records sync completed (listed and vanished jobs).
# Every record in an ACTIVE_STATES state was listed by Slurm then (one not listed was marked
# vanished in that slot's transaction), so its last_seen column is only written when the row
# changes, not for each of a long queue's unchanged jobs every slot: see `last_seen`.
LISTED_AT = "listed_at"


def active_uids(db: sqlite_utils.Database) -> list[str]:
    """The uids of the jobs the service still follows (not finished, vanished or invalid), in table order (a slot checks them all against Slurm's list; it
    needs the rows of the few that vanished only)."""
    sql = f"select uid from jobs where state in ({', '.join(repr(s) for s in ACTIVE_STATES)}) order by rowid"
    return [r[0] for r in db.conn.execute(sql)]


def active_count(db: sqlite_utils.Database) -> tuple[int | None, int]:
    """(`jobs_rev`, how many records are followed) read together (one statement: one snapshot)."""
    sql = (f"select (select value from meta where key = '{JOBS_REV}'), "
           f"(select count(*) from jobs where state in ({', '.join(repr(s) for s in ACTIVE_STATES)}))")
    rev, n = db.conn.execute(sql).fetchone()
    return (int(rev) if rev is not None else None), n


def listed_at(db: sqlite_utils.Database) -> float | None:
    """The `LISTED_AT` time (None before the first completed sync, or in records of an older service)."""
    v = get_meta(db, LISTED_AT)
    return float(v) if v else None


def set_listed_at(db: sqlite_utils.Database, now: float) -> None:
    """Record `LISTED_AT` (plain SQL: once per slot, inside the sync's transaction when it has one)."""
    db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
               [LISTED_AT, repr(float(now))])


def last_seen(row: dict, listed: float | None) -> float | None:
    """When Slurm last listed this record's job: its ``last_seen`` column, or for a record still
    followed (state in ACTIVE_STATES) the later `LISTED_AT` time ``listed`` (`listed_at`)."""
    seen = row.get("last_seen")
    if listed is not None and row.get("state") in ACTIVE_STATES and (seen is None or listed > seen):
        return listed
    return seen


def list_jobs(db: sqlite_utils.Database, user: str | None = None, limit: int | None = None) -> list[dict]:
    sql = "select * from jobs"
    args: list[Any] = []
    if user is not None:
        sql += " where user = ?"
        args.append(user)
    sql += " order by submit_time, cast(slurm_id as integer)"
    if limit:
        sql += f" limit {int(limit)}"
    return list(db.query(sql, args))


# ---------------------------------------------------------------- slots and decisions


def record_slot(db: sqlite_utils.Database, decision_rows: Sequence[dict] = (), decision_ids: Sequence[int] = (),
                **fields: Any) -> int:
    """Write one slot (``fields``: slots columns) and its decision rows in one transaction; returns the slot id."""
    unknown = set(fields) - set(SLOT_COLUMNS)
    if unknown:
        raise KeyError(f"unknown slot column(s): {', '.join(sorted(unknown))}")
    with transaction(db):
        db.table("slots").insert({k: _clean(v) for k, v in fields.items()}, columns=SLOT_COLUMNS)
        slot_id = db.execute("select last_insert_rowid()").fetchone()[0]
        for d in decision_rows:
            db.table("decisions").insert({**{k: _clean(v) for k, v in d.items()}, "slot": slot_id}, columns=DECISION_COLUMNS)
        if decision_ids:  # decisions written earlier in the slot (starts, with their intents)
            db.conn.executemany("UPDATE decisions SET slot = ? WHERE id = ?", [(slot_id, i) for i in decision_ids])
    return int(slot_id)


def record_decision(db: sqlite_utils.Database, **fields: Any) -> None:
    unknown = set(fields) - set(DECISION_COLUMNS)
    if unknown:
        raise KeyError(f"unknown decision column(s): {', '.join(sorted(unknown))}")
    db.table("decisions").insert({k: _clean(v) for k, v in fields.items()}, columns=DECISION_COLUMNS)


def last_slot(db: sqlite_utils.Database) -> dict | None:
    if "slots" not in db.table_names():
        return None
    rows = list(db.query("select * from slots order by id desc limit 1"))
    return rows[0] if rows else None


def slot_count(db: sqlite_utils.Database) -> int:
    return db["slots"].count if "slots" in db.table_names() else 0


def decisions_for(db: sqlite_utils.Database, uid: str) -> list[dict]:
    return list(db.query("select * from decisions where uid = ? order by id", [uid]))


def get_meta(db: sqlite_utils.Database, key: str) -> str | None:
    rows = list(db.query("select value from meta where key = ?", [key])) if "meta" in db.table_names() else []
    return rows[0]["value"] if rows else None


def set_meta(db: sqlite_utils.Database, key: str, value: str) -> None:
    db.table("meta").upsert({"key": key, "value": value}, pk="key")


# ---------------------------------------------------------------- start intents (crash consistency)


def open_intent(db: sqlite_utils.Database, **fields: Any) -> int:
    """Record that a start is about to be applied (before ``scontrol update``); returns its id."""
    return open_step_row(db, "intents", INTENT_COLUMNS, "intent", fields)


def mark_intent(db: sqlite_utils.Database, intent_id: int, **fields: Any) -> None:
    mark_step_row(db, "intents", intent_id, fields)


def open_intents(db: sqlite_utils.Database) -> list[dict]:
    return open_step_rows(db, "intents")


def apply_start(db: sqlite_utils.Database, intent: dict, now: float, resolution: str, job_update: dict,
                decision: dict) -> int:
    """A start is done (Slurm released the job): the job row (``job_update``, lyasched.live.step.released),
    its ``start`` decision and the intent change in one transaction, so a crash leaves all or none
    (then the intent is reconciled). Returns the decision's id (its slot is set when the slot is recorded)."""
    with transaction(db):
        upsert_job(db, intent["uid"], **job_update)
        mark_intent(db, intent["id"], state="applied", resolved=now, resolution=resolution)
        db.table("decisions").insert({k: _clean(v) for k, v in decision.items()}, columns=DECISION_COLUMNS)
        return int(db.execute("select last_insert_rowid()").fetchone()[0])


def consistency_problems(db: sqlite_utils.Database) -> list[str]:
    """What is wrong with the records (empty = consistent): SQLite's own check, open intents,
    one Slurm job under two uids, released/running jobs without a placement, start decisions
    without an applied intent."""
    out: list[str] = []
    ok = db.execute("PRAGMA integrity_check").fetchone()[0]
    if ok != "ok":
        out.append(f"integrity_check: {ok}")
    for r in db.query("select id, slurm_id from intents where state = 'open'"):
        out.append(f"intent {r['id']} (job {r['slurm_id']}) still open")
    for r in db.query("select slurm_id, count(*) n from jobs group by slurm_id having n > 1"):
        out.append(f"Slurm job {r['slurm_id']} recorded under {r['n']} uids")
    for r in db.query("select uid, slurm_id, state from jobs where state in ('released', 'running') "
                      "and (placement is null or placement = '')"):
        out.append(f"job {r['slurm_id']} {r['state']} without a placement")
    n_int = {r["slurm_id"]: r["n"] for r in db.query(
        "select slurm_id, count(*) n from intents where state = 'applied' group by slurm_id")}
    n_dec = {r["slurm_id"]: r["n"] for r in db.query(
        "select slurm_id, count(*) n from decisions where action = 'start' group by slurm_id")}
    for sid in set(n_int) | set(n_dec):
        if n_int.get(sid, 0) != n_dec.get(sid, 0):
            out.append(f"job {sid}: {n_dec.get(sid, 0)} start decision(s) but {n_int.get(sid, 0)} applied intent(s)")
    return out
