"""Storage: every SQLite file lyasched writes is opened here.

WAL mode and a busy timeout so that many `lyasub` processes and the service can share one
database without users ever seeing "database is locked"; short transactions are the
callers' part. Tables live in submodules: `costtable` (profiles), `records` (service state).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Callable

import sqlite_utils

from lyasched.store import schema

DEFAULT_DB_ENV = "LYASCHED_DB"
BUSY_TIMEOUT_MS = 30_000


def default_path() -> Path:
    """`$LYASCHED_DB`, else `~/.local/share/lyasched/lyasched.db`."""
    env = os.environ.get(DEFAULT_DB_ENV)
    if env:
        return Path(env)
    return Path.home() / ".local" / "share" / "lyasched" / "lyasched.db"


def open_db(path: str | os.PathLike | None = None, *, what: str = "lyasched database") -> sqlite_utils.Database:
    """Open (creating if needed) a lyasched database with WAL and a busy timeout, checked and
    migrated to this lyasched's schema (`lyasched.store.schema`, once per process and file).

    Raises `schema.DatabaseUnusable` (one line: the file and what to do) for a file that cannot
    be opened, is damaged, or was written by a newer lyasched; ``what`` names the file in it."""
    p = Path(path) if path is not None else default_path()
    memory = str(p) == ":memory:"
    ident = None
    if not memory:
        ident = schema.check_file(p, what)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise schema.DatabaseUnusable(schema.unreadable_line(p, f"its directory: {e.strerror or e}", what)) from None
    try:
        conn = sqlite3.connect(str(p), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as e:
        raise schema.DatabaseUnusable(schema.unreadable_line(p, str(e), what)) from None
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        schema.prepare(conn, p, ident, what)  # first: a refused file is left exactly as it was
        if not memory:
            conn.execute("PRAGMA journal_mode=WAL")
            schema.opened(p)  # from now on its header is not read with open() in this process
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.Error as e:
        conn.close()
        if schema.is_busy(e):
            raise
        line = (schema.unreadable_line(p, str(e), what) if "unable to open" in str(e)
                else schema.damaged_line(p, str(e), what))
        raise schema.DatabaseUnusable(line) from None
    except BaseException:
        conn.close()
        raise
    return sqlite_utils.Database(conn)


class PerThread:
    """A database connection per thread: SQLite connections belong to the thread that opened them,
    and the service runs slots in a worker thread (APScheduler). Given an opener, each thread that
    calls opens its own connection; given a connection, every thread gets that one."""

    def __init__(self, db: sqlite_utils.Database | Callable[[], sqlite_utils.Database]) -> None:
        self._open = db if callable(db) else None
        self._dbs: dict[int, sqlite_utils.Database] = {} if callable(db) else {threading.get_ident(): db}
        self._any = None if callable(db) else db

    def __call__(self) -> sqlite_utils.Database:
        if self._open is None:
            assert self._any is not None  # one of the two is always given
            return self._any
        t = threading.get_ident()
        if t not in self._dbs:
            self._dbs[t] = self._open()
        return self._dbs[t]
