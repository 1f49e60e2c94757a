"""`lyasched health`: is the service scheduling? One line, Nagios style, and exit 0 / 1 / 2.

    OK: last slot 3 s ago (2 s slots), 4 waiting, 0 errors in the last 10 slots | age=3s;;10 ...
    DEGRADED: ... 2 errors in the last 10 slots; last error: slurm_load_jobs error: ...
    DOWN: last slot 312 s ago, more than 150 s (5 slots of 30 s)

Reads the service database read-only (``--db``, else $LYASCHED_DB, else ``service.db`` of the
config), never Slurm:

- **down** (exit 2): the database is missing or unreadable, no slot is recorded, or the last slot
  completed more than ``--max-age`` seconds ago (default: 5 slot lengths; the slot length is
  ``service.slot_seconds`` of the config, or ``--slot-seconds``);
- **degraded** (exit 1): one of the last ``--slots`` (10) slots recorded an error (Slurm did not
  answer, or an internal error), or took longer than the slot length;
- **ok** (exit 0) otherwise.

A check for Nagios/Icinga, a systemd timer, or a cron job (docs/service.md, Monitoring).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click

OK, DEGRADED, DOWN = 0, 1, 2
STATUS = {OK: "OK", DEGRADED: "DEGRADED", DOWN: "DOWN"}
DEFAULT_STALE_SLOTS = 5  # down when no slot completed within this many slot lengths
DEFAULT_WINDOW = 10  # degraded when one of this many last slots had an error or overran


@dataclass
class Health:
    """The verdict (`code`: OK, DEGRADED, DOWN) and what it was judged from."""

    code: int
    message: str
    db: str
    slot_seconds: float
    max_age: float
    last_slot: int | None = None  # its id
    age: float | None = None  # seconds since the last slot completed (its time + duration)
    waiting: int | None = None  # of the last slot without an error in the window
    running: int | None = None
    slots: int = 0  # slots looked at (the window)
    errors: int = 0
    slow: int = 0  # slots longer than slot_seconds
    last_error: str = ""
    perf: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return STATUS[self.code]

    def line(self) -> str:
        """The one line: ``STATUS: message`` and Nagios performance data after ``|``."""
        out = f"{self.status}: {self.message}"
        if self.perf:
            out += " | " + " ".join(f"{k}={v}" for k, v in self.perf.items())
        return out

    def as_json(self) -> str:
        return json.dumps({"status": self.status.lower(), **asdict(self)}, separators=(",", ":"))


def _fold(text: str, n: int = 200) -> str:
    return " ".join(str(text).split())[:n]


def check(db_path: str | os.PathLike, slot_seconds: float, max_age: float | None = None,
          window: int = DEFAULT_WINDOW, now: float | None = None) -> Health:
    """Judge the service from its database (read-only)."""
    from lyasched.store import records

    now = time.time() if now is None else now
    limit = DEFAULT_STALE_SLOTS * slot_seconds if max_age is None else max_age
    h = Health(DOWN, "", str(db_path), slot_seconds, limit)
    try:
        rdb = records.open_readonly(db_path)
    except (records.RecordsUnavailable, sqlite3.Error, OSError) as e:
        h.message = _fold(str(e), 300)
        return h
    try:
        if "slots" not in rdb.table_names():
            h.message = f"{db_path}: not a lyasched service database (no slots table)"
            return h
        cur = rdb.conn.execute("select id, time, duration, waiting, running, error from slots "
                               "order by id desc limit ?", [max(1, window)])
        rows = [dict(zip(("id", "time", "duration", "waiting", "running", "error"), r)) for r in cur.fetchall()]
    except sqlite3.Error as e:
        h.message = _fold(f"{db_path}: cannot read the slots: {e}", 300)
        return h
    finally:
        rdb.conn.close()
    if not rows:
        h.message = f"no slot recorded in {db_path} (is `lyasched serve` running?)"
        return h

    last = rows[0]
    h.last_slot = last["id"]
    h.age = max(0.0, now - ((last["time"] or 0.0) + (last["duration"] or 0.0)))
    h.slots = len(rows)
    failed = [r for r in rows if r["error"]]
    h.errors = len(failed)
    h.slow = sum(1 for r in rows if (r["duration"] or 0.0) > slot_seconds)
    h.last_error = _fold(failed[0]["error"]) if failed else ""
    good = next((r for r in rows if not r["error"]), None)
    if good is not None:
        h.waiting, h.running = good["waiting"], good["running"]
    h.perf = {"age": f"{h.age:.0f}s;;{limit:g}", "waiting": h.waiting if h.waiting is not None else "U",
              "errors": f"{h.errors};1", "slow": f"{h.slow};1", "duration": f"{last['duration'] or 0.0:.3f}s;{slot_seconds:g}"}

    if h.age > limit:
        h.message = (f"last slot {h.age:.0f} s ago, more than {limit:g} s"
                     + (f" ({DEFAULT_STALE_SLOTS} slots of {slot_seconds:g} s)" if max_age is None else "")
                     + f"; {h.errors} errors in the last {h.slots} slots")
        return h
    h.code = DEGRADED if (h.errors or h.slow) else OK
    waiting = f"{h.waiting} waiting" if h.waiting is not None else "waiting unknown"
    h.message = (f"last slot {h.age:.0f} s ago ({slot_seconds:g} s slots), {waiting}, "
                 f"{h.errors} errors in the last {h.slots} slots")
    if h.slow:
        h.message += f", {h.slow} longer than the slot"
    if h.last_error:
        h.message += f"; last error: {h.last_error}"
    return h


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Service config: its service.db and service.slot_seconds (default: $LYASCHED_CONFIG, "
                   "else /etc/lyasched/config.toml, else built-in defaults).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
              help="Service database (default: $LYASCHED_DB, else service.db of the config).")
@click.option("--slot-seconds", type=float, default=None, help="Override service.slot_seconds.")
@click.option("--max-age", type=float, default=None,
              help=f"Down when no slot completed within this many seconds (default: {DEFAULT_STALE_SLOTS} slot lengths).")
@click.option("--slots", "window", type=click.IntRange(min=1), default=DEFAULT_WINDOW, show_default=True,
              help="Degraded when one of this many last slots had an error or overran.")
@click.option("--json", "as_json", is_flag=True, help="One line of JSON instead.")
@click.pass_context
def health(ctx: click.Context, config_path, db_path, slot_seconds, max_age, window, as_json) -> None:
    """Check the service from its database: exit 0 ok, 1 degraded, 2 down; one line (Nagios style)."""
    from lyasched.config import ConfigError, load_config
    from lyasched.store import DEFAULT_DB_ENV

    for name, v in (("--slot-seconds", slot_seconds), ("--max-age", max_age)):
        if v is not None and not v > 0:
            raise click.BadParameter(f"must be > 0, got {v:g}", param_hint=name)
    try:
        cfg = load_config(config_path)
    except ConfigError as e:
        h = Health(DOWN, _fold(f"config: {e}", 300), str(db_path or ""), slot_seconds or 0.0, max_age or 0.0)
    else:
        path = Path(db_path) if db_path else Path(os.environ.get(DEFAULT_DB_ENV) or cfg.db)
        h = check(path, slot_seconds or cfg.slot_seconds, max_age, window)
    click.echo(h.as_json() if as_json else h.line())
    ctx.exit(h.code)
