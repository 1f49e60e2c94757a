"""Security checks of the service (issue 5; docs/reliability.md "Security"), as pure functions.

* `check_permissions`: the files that steer `lyasched serve` (its config, its database and the
  database's directory) must be writable only by the service's user or root. Anybody else who
  can write them can make the service release, resize or hold any job: the service refuses to
  start instead (`lyasched serve` calls this at start-up).
* `clamp_run_times`: what a user-supplied cost summary can make the service believe. A summary
  passes the plugin's grammar bounds (docs/cost-summary.md), but its run-time predictions are
  still only the user's claim: they are scaled by the correction learned from observed run times
  (itself bounded), and never exceed the job's Slurm time limit.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

# The correction factor the cost table learns from observed run times stays in this range: one
# lying summary (or one odd run) moves it by a bounded step.
from lyasched.store.costtable import CORRECTION_BOUNDS  # noqa: E402


def _who(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _nearest_existing(p: Path) -> Path:
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_permissions(paths: Iterable[str | os.PathLike | None], uid: int | None = None) -> list[str]:
    """One line per problem with the files that control the service, [] when all is well.

    Each path (None and missing ones are skipped) must be owned by ``uid`` (default: the
    effective uid) or root and must not be group- or world-writable. A directory with the
    sticky bit (like /tmp) is the exception for write bits: there others cannot replace or
    remove the service's files, only add their own, and the files themselves are checked.
    """
    me = os.geteuid() if uid is None else uid
    problems: list[str] = []
    for raw in paths:
        if raw is None:
            continue
        p = Path(raw)
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        except OSError as e:
            problems.append(f"{p}: cannot check permissions: {e.strerror}")
            continue
        if st.st_uid not in (me, 0):
            problems.append(f"{p}: owned by {_who(st.st_uid)}, not by the service user {_who(me)} or root")
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        sticky_dir = stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
        if writable and not sticky_dir:
            who = "group- and world" if writable == (stat.S_IWGRP | stat.S_IWOTH) else (
                "group" if writable & stat.S_IWGRP else "world")
            problems.append(f"{p}: {who}-writable (mode {stat.S_IMODE(st.st_mode):04o}); run chmod go-w {p}")
    return problems


def service_paths(config_source: str | None, db: str | os.PathLike) -> list[Path]:
    """The paths `check_permissions` looks at for a service: its config file (when it has one),
    its database with the -wal/-shm files, and the database's directory (or, not created yet,
    the nearest existing parent, which is where it will be created)."""
    out: list[Path] = []
    if config_source and not config_source.startswith("<"):
        out.append(Path(config_source))
    dbp = Path(db)
    if str(dbp) != ":memory:":
        out += [dbp, Path(f"{dbp}-wal"), Path(f"{dbp}-shm"), _nearest_existing(dbp.absolute().parent)]
    return out


def bounded_correction(correction: float | None) -> float:
    """A learned observed/predicted correction, kept in CORRECTION_BOUNDS (1.0 when unknown or not finite)."""
    if correction is None or not np.isfinite(correction) or correction <= 0:
        return 1.0
    return float(min(max(correction, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1]))


def clamp_run_times(
    run_times: Sequence[float] | np.ndarray, time_limit: float | None, correction: float | None = None
) -> np.ndarray:
    """Predicted run times per GPU count as the service may believe them.

    ``inf`` (count not allowed) stays ``inf``; finite predictions are multiplied by the bounded
    correction learned from observed run times and capped at the job's Slurm time limit (Slurm
    kills the job there, so no claim can make it longer); a negative claim becomes 0 and NaN inf.
    """
    row = np.asarray(run_times, dtype=float)
    c = bounded_correction(correction)
    finite = np.isfinite(row)
    with np.errstate(over="ignore"):  # a huge claim x 2 must stay a (huge) finite time, not "not allowed"
        scaled = np.minimum(np.maximum(np.nan_to_num(row, nan=0.0, posinf=0.0), 0.0) * c, np.finfo(float).max)
    out = np.where(finite, scaled, np.inf)
    if time_limit is not None and np.isfinite(time_limit) and time_limit > 0:
        out = np.where(np.isfinite(out), np.minimum(out, time_limit), np.inf)
    return out
