"""The start-up term: seconds between Slurm starting a job and its first training step.

Launch (srun, torchrun), Python imports, model construction and rendezvous cost tens of
seconds whatever the model; the per-iteration cost model cannot see them, so a prediction
without them is wrong by that much for every job (`make demo`: PRED 0.01 s next to OBS 32 s).
Each job that reports its steps (`lyasched.job.steptimes`) gives one sample: first step's begin
minus Slurm's start time. Samples are kept per (cluster, launcher) in table ``startup``; the
term is the median over users of each user's median of their last `WINDOW` samples (robust to
one slow node, and to one user whose reports lie: a user is one vote however many jobs they
run); a sample counts at most `MAX_SECONDS`. With no sample the term is 0 and the prediction
says so. docs/model.md ("Start-up term").
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

TABLE = "startup"
WINDOW = 20  # samples of one user the median is taken over, newest first
MAX_SECONDS = 600.0  # one sample counts at most this much (launch, imports and rendezvous take far less)
USERS = 50  # the newest users' medians are voted over
DEFAULT_LAUNCHER = "srun+torchrun"  # what lyasched/templates/launch.sbatch runs


@dataclass(frozen=True)
class StartupTerm:
    cluster: str
    launcher: str
    seconds: float
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "launcher": self.launcher, "seconds": self.seconds, "samples": self.samples}


def _ensure(db: Any) -> None:
    db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (cluster TEXT, launcher TEXT, job_id TEXT, seconds REAL, "
               "time REAL, user TEXT DEFAULT '')")


def observe(db: Any, cluster: str, launcher: str, seconds: float, job_id: str = "", user: str = "") -> None:
    """Record one job's start-up time (ignored when negative or not finite; at most `MAX_SECONDS`)."""
    if not (seconds >= 0 and seconds < 1e9):
        return
    _ensure(db)
    db.execute(f"INSERT INTO {TABLE} (cluster, launcher, job_id, seconds, time, user) VALUES (?, ?, ?, ?, ?, ?)",
               [cluster, launcher, job_id, min(float(seconds), MAX_SECONDS), time.time(), user])


def term(db: Any, launcher: str = DEFAULT_LAUNCHER, cluster: str | None = None) -> StartupTerm | None:
    """The learned start-up term for ``launcher`` on ``cluster`` (None: the cluster with the most
    samples of that launcher, i.e. the service's own in a one-cluster database); None if no sample."""
    if TABLE not in db.table_names():
        return None
    if cluster is None:
        row = db.execute(f"SELECT cluster FROM {TABLE} WHERE launcher = ? GROUP BY cluster ORDER BY COUNT(*) DESC "
                         "LIMIT 1", [launcher]).fetchone()
        if row is None:
            return None
        cluster = row[0]
    per_user: dict[str, list[float]] = {}
    for sec, user in db.execute(f"SELECT seconds, user FROM {TABLE} WHERE cluster = ? AND launcher = ? "
                                "ORDER BY rowid DESC LIMIT ?", [cluster, launcher, WINDOW * USERS]).fetchall():
        if len(per_user.setdefault(user or "", [])) < WINDOW:
            per_user[user or ""].append(min(float(sec), MAX_SECONDS))
    if not per_user:
        return None
    medians = [statistics.median(v) for v in per_user.values()]
    return StartupTerm(cluster, launcher, float(statistics.median(medians)), sum(map(len, per_user.values())))


def terms(db: Any) -> list[StartupTerm]:
    """Every (cluster, launcher) with samples (lyastat --queue shows them)."""
    if TABLE not in db.table_names():
        return []
    pairs = db.execute(f"SELECT DISTINCT cluster, launcher FROM {TABLE} ORDER BY cluster, launcher").fetchall()
    return [t for c, lz in pairs if (t := term(db, lz, c)) is not None]


def seconds(db: Any, launcher: str = DEFAULT_LAUNCHER) -> float:
    """The term in seconds (0 without samples): what the service adds to every prediction."""
    t = term(db, launcher)
    return t.seconds if t else 0.0


def steady(pred: float, observed: float, startup_s: float) -> tuple[float, float]:
    """(predicted, observed) without the start-up term, for the run-time correction: the
    correction scales iterations, not launch time. Never below a tenth of the input."""
    return max(pred - startup_s, 0.1 * pred), max(observed - startup_s, 0.1 * observed)


def with_startup(wj: Any, startup_s: float, limit: float | None = None) -> Any:
    """A `WaitingJob` whose predicted run times include the start-up term (capped at the Slurm
    time limit like the rest of the prediction)."""
    import dataclasses

    import numpy as np

    if startup_s <= 0:
        return wj
    cap = limit if limit else np.inf

    def add(row: Any) -> Any:  # a count that is not allowed (inf) stays not allowed, not "the time limit"
        return np.where(np.isfinite(row), np.minimum(row + startup_s, cap), row)

    return dataclasses.replace(wj, run_one_node=add(wj.run_one_node), run_multi_node=add(wj.run_multi_node))
