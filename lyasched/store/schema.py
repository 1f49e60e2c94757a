"""The schema version of every SQLite file lyasched writes, its migrations, and the checks at open.

A lyasched database (the service's records, a cost table, or one file holding both) carries its
layout's version in ``PRAGMA user_version``. `lyasched.store.open_db` calls `prepare` once per
process and file (again if the file was replaced or changed on disk since):

- a file that cannot be opened (a directory in its place, no permission), that is not an SQLite
  database, or that fails ``PRAGMA quick_check`` (truncated, corrupt) raises `DatabaseUnusable`:
  one line naming the file and what to do. Nothing decides from a damaged file.
- version 0 (no version: every file written before versioning) or older than `SCHEMA_VERSION`:
  migrated in place, every step after the file's version in order, in ONE transaction (a
  process killed halfway leaves the file as it was; a second process waits, then finds it done).
- newer than `SCHEMA_VERSION` (written by a newer lyasched): refused with one line; this
  lyasched neither reads nor writes it.

Versions (`MIGRATIONS`):

1. The layout of the last unversioned lyasched, stamped: the columns older lyasched versions
   added when they opened a table (``profiles.learned_json``/``learned_runs``,
   ``profile_runs.user``, ``startup.user``, ``moves.run_started``, filled from the move history)
   are added where the table exists without them. Tables a file lacks are created when first
   used, as before, at today's layout. (The records' own ``meta.schema_version`` row, 3, is the
   history of the records tables before the file had a version; it is kept as it is.)

A new layout adds a `Migration` with the next number (ALTERs, data moves) and bumps
`SCHEMA_VERSION`. This module imports nothing else of lyasched (`open_db` uses it).
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SCHEMA_VERSION = 1
HEADER = b"SQLite format 3\x00"

# moves.run_started of a row from before it was kept, where the history says it exactly: a run that
# began with a resize's relaunch started at that move's restarted_at (lyasched.store.moves)
RUN_STARTED_FILL = (
    "UPDATE moves SET run_started = (SELECT p.restarted_at FROM moves p WHERE p.uid = moves.uid "
    "AND p.id < moves.id AND p.state = 'done' ORDER BY p.id DESC LIMIT 1) WHERE state IN ('done', 'open')"
)

WHAT_TO_DO = "restore it from a backup, or move it aside (lyasched then creates a fresh one)"


class DatabaseUnusable(RuntimeError):
    """A lyasched database this lyasched must not use; ``str()`` is one line naming the file and
    what to do. Not an `sqlite3.Error`: no caller that tolerates a database error swallows it."""


class NewerSchema(DatabaseUnusable):
    pass


def newer_line(path: str | os.PathLike, found: int) -> str:
    return (f"{path}: written by a newer lyasched (schema {found}, this one knows {SCHEMA_VERSION}): "
            "upgrade lyasched or point db at another file")


def damaged_line(path: str | os.PathLike, why: str, what: str = "lyasched database") -> str:
    return f"{path}: damaged {what} ({_one_line(why)}): {WHAT_TO_DO}"


def unreadable_line(path: str | os.PathLike, why: str, what: str = "lyasched database") -> str:
    return (f"{path}: cannot open the {what} ({_one_line(why)}): fix its path or permissions, "
            f"or move it aside (lyasched then creates a fresh one)")


def _one_line(s: str) -> str:
    return " ".join(str(s).split())[:200]


# ---------------------------------------------------------------- migrations


@dataclass(frozen=True)
class Migration:
    version: int  # the version a file has after it
    what: str
    apply: Callable[[sqlite3.Connection], None]  # runs inside the migration's transaction


def _columns(conn: sqlite3.Connection, table: str) -> set[str] | None:
    """The table's columns, None when the file has no such table."""
    rows = conn.execute(f"PRAGMA table_info({table})").fetchall()
    return {r[1] for r in rows} if rows else None


# the columns unversioned lyasched added on open (ALTER TABLE ADD COLUMN), by table
UNVERSIONED_ADDED: dict[str, tuple[tuple[str, str], ...]] = {
    "profiles": (("learned_json", "TEXT"), ("learned_runs", "INTEGER DEFAULT 0")),
    "profile_runs": (("user", "TEXT DEFAULT ''"),),
    "startup": (("user", "TEXT DEFAULT ''"),),
    "moves": (("run_started", "FLOAT"),),
}


def _to_1(conn: sqlite3.Connection) -> None:
    for table, added in UNVERSIONED_ADDED.items():
        have = _columns(conn, table)
        if have is None:
            continue
        for col, sqltype in added:
            if col not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {col} {sqltype}")
                if (table, col) == ("moves", "run_started"):
                    conn.execute(RUN_STARTED_FILL)


MIGRATIONS: list[Migration] = [
    Migration(1, "stamp the unversioned layout; add the columns older versions added on open", _to_1),
]


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def migrate(conn: sqlite3.Connection, path: str | os.PathLike) -> int:
    """Bring the file to `SCHEMA_VERSION` in one ``BEGIN IMMEDIATE`` transaction; the version it had.
    ``conn`` is in autocommit mode (``isolation_level=None``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = user_version(conn)  # again, under the write lock: another process may have done it
        if found > SCHEMA_VERSION:
            raise NewerSchema(newer_line(path, found))
        for m in sorted(MIGRATIONS, key=lambda m: m.version):
            if found < m.version <= SCHEMA_VERSION:
                m.apply(conn)
        conn.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")
    except BaseException:
        if conn.in_transaction:  # (SQLite may have rolled back already, e.g. disk full)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return found


# ---------------------------------------------------------------- checks at open

# the files this process checked, as (st_dev, st_ino, st_size, st_mtime_ns): a file replaced, or
# rewritten by someone else, since is checked again (the service's opens are one per thread, lyasub's a few)
Ident = tuple[int, int, int, int]
_checked: set[Ident] = set()
# files (st_dev, st_ino) this process has opened with SQLite: their header is never read again with a
# plain open(). Closing *any* descriptor of a file drops all of the process's POSIX locks on it,
# SQLite's included; another process closing its last connection then believes it is the last one,
# checkpoints and deletes the WAL under us, and our later writes go to a deleted file (lost).
_opened: set[tuple[int, int]] = set()


def opened(path: str | os.PathLike) -> None:
    """Say that this process now holds an SQLite connection to ``path`` (see ``_opened``)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    _opened.add((st.st_dev, st.st_ino))


def check_file(path: str | os.PathLike, what: str = "lyasched database") -> Ident | None:
    """Before SQLite opens ``path``: a directory in its place, no permission to read it, or a
    file that is not an SQLite database (its header) raise `DatabaseUnusable`. Returns the
    file's identity, None when it does not exist (or is empty: a fresh database)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DatabaseUnusable(unreadable_line(p, e.strerror or str(e), what)) from None
    if (st.st_dev, st.st_ino) in _opened:  # checked when first opened; reading it now would drop our locks
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns
    try:
        with open(p, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise DatabaseUnusable(unreadable_line(p, e.strerror or str(e), what)) from None
    if not head:
        return None
    if not head.startswith(HEADER[: len(head)]) or len(head) < len(HEADER):
        raise DatabaseUnusable(damaged_line(p, "not an SQLite database", what))
    if len(head) < 100:
        raise DatabaseUnusable(damaged_line(p, f"truncated: {st.st_size} bytes", what))
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def is_busy(e: sqlite3.Error) -> bool:
    """A lock held by another process (waited for, and out of time): not damage."""
    msg = str(e).lower()
    return "locked" in msg or "busy" in msg


def prepare(conn: sqlite3.Connection, path: str | os.PathLike, ident: Ident | None,
            what: str = "lyasched database") -> None:
    """Check and migrate a freshly opened file (see the module docstring). ``ident`` is what
    `check_file` returned (None: a fresh file, or ``:memory:``). Once per process and file, while
    the file is unchanged (``_checked``)."""
    if ident is not None and ident in _checked:
        return
    try:
        found = user_version(conn)
        if found > SCHEMA_VERSION:
            raise NewerSchema(newer_line(path, found))
        if ident is not None:
            rows = conn.execute("PRAGMA quick_check(1)").fetchall()
            if [tuple(r) for r in rows] != [("ok",)]:
                raise DatabaseUnusable(damaged_line(path, f"quick_check: {rows[0][0] if rows else 'no answer'}", what))
        if found < SCHEMA_VERSION:
            try:
                migrate(conn, path)
            except sqlite3.OperationalError as e:
                if "readonly" not in str(e).lower():
                    raise
                # a file we may only read (a shared cost table): used as it is, as before versioning
    except sqlite3.Error as e:
        if is_busy(e):
            raise
        raise DatabaseUnusable(damaged_line(path, str(e), what)) from None
    if ident is not None:
        _checked.add(ident)
        try:  # as it is now, after a migration's write
            st = os.stat(path)
            _checked.add((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            pass
