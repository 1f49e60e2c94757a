"""The cost table: one profile per (model signature, device type), refined by observed run times.

Table ``profiles`` in the lyasched database (`lyasched.store.open_db`). Writes are single short
``BEGIN IMMEDIATE`` transactions in plain SQL (sqlite-utils' own writers would commit early
inside them), so concurrent `lyasub`/service/profiler processes never interleave a
read-modify-write. No torch here: profiles arrive as `ProfileResult`s or their dicts.

Online refinement (docs/profiling.md): each entry carries a correction factor c (start 1).
When a job finishes, r = observed / uncorrected-prediction is clamped to [0.25, 4] and
c <- clamp((1 - W) * c + W * r, 0.5, 2) with W = 0.3; the corrected profile scales alpha and
beta by c. A fresh measurement of the same key resets c (the new fit is the new baseline).

Learning from every run (`lyasched.costmodel.learn`, docs/profiling.md): a job that reports its step
times adds a row to ``profile_runs``; the entry's learned profile (compute and per-link
all-reduce factors, ``learned_json``) is refitted from every run since the entry was last
profiled, c is reset (the learned fit is the new baseline), and ``profile_events`` keeps one
line per change and why, which `lyasched profiles show` prints. Provenance: "profiled",
"estimated", or "learned from N runs".
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any

import sqlite_utils

from lyasched.costmodel.cost import Profile
from lyasched.profile.signature import device_type as normalise_device

TABLE = "profiles"
REFINE_WEIGHT = 0.3  # W: weight of the newest observation in the moving mean
RATIO_BOUNDS = (0.25, 4.0)  # one observation's observed/predicted ratio is clamped to this
CORRECTION_BOUNDS = (0.5, 2.0)  # the correction factor never leaves this

COLUMNS: dict[str, type] = {
    "signature": str, "device_type": str, "model": str, "device_name": str, "source": str,
    "alpha": float, "beta": float, "r2": float, "m0": float, "m1": float, "mem_r2": float,
    "step_points": str, "mem_points": str, "params": int, "bytes_per_param": int, "grad_bytes": int,
    "torch_version": str, "cuda_version": str, "created": str, "updated": str,
    "correction": float, "observations": int, "last_ratio": float, "result_json": str,
    "learned_json": str, "learned_runs": int,
}
RUNS = "profile_runs"
OWN = "profile_own"  # each user's own learned profile of a model: what that user's jobs are predicted with
EVENTS = "profile_events"


@dataclass(frozen=True)
class CostEntry:
    signature: str
    device_type: str
    model: str
    device_name: str
    source: str  # "measured" or "estimated"
    alpha: float
    beta: float
    r2: float | None
    m0: float
    m1: float
    mem_r2: float | None
    step_points: dict[str, list]  # {"batches": [...], "seconds": [...]}
    mem_points: dict[str, list]  # {"batches": [...], "bytes": [...]}
    params: int
    bytes_per_param: int
    grad_bytes: int
    torch_version: str | None
    cuda_version: str | None
    created: str
    updated: str
    correction: float = 1.0
    observations: int = 0
    last_ratio: float | None = None  # last observed / uncorrected-predicted run time (unclamped)
    learned_json: str | None = None  # the profile learned from reported runs (lyasched.costmodel.learn), if any
    learned_runs: int | None = 0

    @property
    def learned(self) -> dict[str, Any] | None:
        return json.loads(self.learned_json) if self.learned_json else None

    @property
    def provenance(self) -> str:
        """profiled / estimated / learned from N runs."""
        if self.learned_runs:
            return f"learned from {self.learned_runs} run{'s' if self.learned_runs != 1 else ''}"
        return "profiled" if self.source == "measured" else "estimated"

    def profile(self, corrected: bool = True, learned: bool = True) -> Profile:
        """The cost model's `Profile`: the learned one where runs were reported (``learned``),
        else the profiled one; ``corrected`` scales alpha and beta by the correction factor."""
        c = self.correction if corrected else 1.0
        lp = (self.learned or {}) if learned else {}
        return Profile(
            model=self.model, alpha=float(lp.get("alpha", self.alpha)) * c, beta=float(lp.get("beta", self.beta)) * c,
            params=self.params, bytes_per_param=self.bytes_per_param, mem_base=self.m0, mem_per_sample=self.m1,
            source=self.source, comm_scale_intra=float(lp.get("comm_scale_intra", 1.0)),
            comm_scale_inter=float(lp.get("comm_scale_inter", 1.0)),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def ensure_table(db: sqlite_utils.Database) -> None:
    if TABLE not in db.table_names():
        db.table(TABLE).create(
            COLUMNS, pk=("signature", "device_type"), if_not_exists=True,
            not_null={"model", "source", "alpha", "beta", "params", "correction", "observations"},
            defaults={"correction": 1.0, "observations": 0},
        )
    else:  # a table from before learning: add its columns
        have = {r[1] for r in db.execute(f"PRAGMA table_info({TABLE})").fetchall()}
        for col, sqltype in (("learned_json", "TEXT"), ("learned_runs", "INTEGER DEFAULT 0")):
            if col not in have:
                try:
                    db.execute(f"ALTER TABLE {TABLE} ADD COLUMN {col} {sqltype}")
                except Exception:  # another process added it first
                    pass
    db.execute(f"CREATE TABLE IF NOT EXISTS {RUNS} (signature TEXT, device_type TEXT, job_id TEXT, "
               "placement TEXT, local_bsz REAL, step_time REAL, time TEXT, user TEXT DEFAULT '')")
    db.execute(f"CREATE TABLE IF NOT EXISTS {EVENTS} (signature TEXT, device_type TEXT, time TEXT, event TEXT, "
               "detail TEXT, alpha REAL, beta REAL, comm_scale_intra REAL, comm_scale_inter REAL)")
    db.execute(f"CREATE TABLE IF NOT EXISTS {OWN} (signature TEXT, device_type TEXT, user TEXT, learned_json TEXT, "
               "runs INTEGER, PRIMARY KEY (signature, device_type, user))")



def _entry(row: dict[str, Any]) -> CostEntry:
    d: dict[str, Any] = {k: row.get(k) for k in CostEntry.__dataclass_fields__}
    d["step_points"] = json.loads(row.get("step_points") or "{}")
    d["mem_points"] = json.loads(row.get("mem_points") or "{}")
    return CostEntry(**d)


def _select(db: sqlite_utils.Database, sig: str, dev: str) -> dict[str, Any] | None:
    cur = db.execute(f"SELECT * FROM {TABLE} WHERE signature = ? AND device_type = ?", [sig, dev])
    row = cur.fetchone()
    return dict(zip([c[0] for c in cur.description], row)) if row else None


class _Immediate:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.conn = db.conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def get(db: sqlite_utils.Database, sig: str, device: str) -> CostEntry | None:
    """The entry for (signature, device type), or None. ``device`` may be a full device name."""
    ensure_table(db)
    row = _select(db, sig, normalise_device(device))
    return _entry(row) if row else None


def learned_profile(db: sqlite_utils.Database, sig: str, device: str, user: str | None = None) -> Profile | None:
    """The learned, uncorrected profile of (sig, device) when its jobs reported runs, else None:
    ``user``'s own (fitted on that user's runs alone) when they reported any, else the one
    shared by all users (`lyasched.costmodel.learn.refit_shared`: robust to any one user's reports).
    Indexed reads and no DDL (the service calls it for every waiting model every slot)."""
    import sqlite3

    try:
        row = _select(db, sig, normalise_device(device))
    except sqlite3.OperationalError:  # no table yet
        return None
    if not row or not row.get("learned_runs"):
        return None
    entry = _entry(row)
    if user:
        try:
            own = db.execute(f"SELECT learned_json, runs FROM {OWN} WHERE signature = ? AND device_type = ? AND "
                             "user = ?", [sig, normalise_device(device), user]).fetchone()
        except sqlite3.OperationalError:  # a table from before profiles were kept per user
            own = None
        if own is not None:
            entry = replace(entry, learned_json=own[0], learned_runs=own[1])
    return entry.profile(corrected=False)


def get_profile(db: sqlite_utils.Database, sig: str, device: str, corrected: bool = True) -> Profile | None:
    """The (by default refinement-corrected) `Profile` for (signature, device), or None."""
    e = get(db, sig, device)
    return e.profile(corrected) if e else None


def put(db: sqlite_utils.Database, result: Any) -> CostEntry:
    """Upsert a profiling result (a `ProfileResult` or its dict) and return the stored entry.

    An estimate never replaces a measured entry (the measured one is returned unchanged); a
    new result otherwise replaces the fit and resets the refinement state.
    """
    d = result.to_dict() if hasattr(result, "to_dict") else dict(result)
    missing = [k for k in ("signature", "device_type", "model", "alpha", "beta", "params") if d.get(k) is None]
    if missing:
        raise ValueError(f"profile lacks {', '.join(missing)}")
    for k in ("alpha", "beta", "m0", "m1"):
        v = float(d.get(k) or 0.0)
        if not math.isfinite(v) or v < 0:
            raise ValueError(f"profile {k}={v} must be finite and >= 0")
    source = d.get("source", "measured")
    if source not in ("measured", "estimated"):
        raise ValueError(f"profile source {source!r} must be measured or estimated")
    dev = normalise_device(d["device_type"])
    ensure_table(db)
    now = _now()
    batches = list(d.get("batches") or [])
    row = {
        "signature": d["signature"], "device_type": dev, "model": d["model"],
        "device_name": d.get("device_name") or dev, "source": source,
        "alpha": float(d["alpha"]), "beta": float(d["beta"]), "r2": _finite(d.get("r2")),
        "m0": float(d.get("m0") or 0.0), "m1": float(d.get("m1") or 0.0), "mem_r2": _finite(d.get("mem_r2")),
        "step_points": json.dumps({"batches": batches, "seconds": list(d.get("step_times") or [])}),
        "mem_points": json.dumps({"batches": batches, "bytes": list(d.get("mem_points") or [])}),
        "params": int(d["params"]), "bytes_per_param": int(d.get("bytes_per_param") or 4),
        "grad_bytes": int(d["params"]) * int(d.get("bytes_per_param") or 4),
        "torch_version": d.get("torch_version"), "cuda_version": d.get("cuda_version"),
        "created": now, "updated": now, "correction": 1.0, "observations": 0, "last_ratio": None,
        "result_json": json.dumps(d), "learned_json": None, "learned_runs": 0,
    }
    cols = list(row)
    keep_created = [c for c in cols if c not in ("signature", "device_type", "created")]
    sql = (
        f"INSERT INTO {TABLE} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)}) "
        f"ON CONFLICT(signature, device_type) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in keep_created)
    )
    with _Immediate(db):
        old = _select(db, row["signature"], dev)
        if old is not None and old["source"] == "measured" and source == "estimated":
            return _entry(old)
        db.execute(sql, [row[c] for c in cols])
        db.execute(f"DELETE FROM {OWN} WHERE signature = ? AND device_type = ?", [row["signature"], dev])
        _event(db, row["signature"], dev, now, "profiled" if source == "measured" else "estimated",
               "new profile" + (" (replaces the previous one; learned runs restart)" if old else ""),
               row["alpha"], row["beta"], 1.0, 1.0)
        stored = _select(db, row["signature"], dev)
    assert stored is not None
    return _entry(stored)


def _event(db: sqlite_utils.Database, sig: str, dev: str, when: str, event: str, detail: str, alpha: float,
           beta: float, ci: float | None, ce: float | None) -> None:
    db.execute(f"INSERT INTO {EVENTS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [sig, dev, when, event, detail, alpha, beta, ci, ce])


def _rows_of(db: sqlite_utils.Database, table: str, sig: str, device: str) -> list[dict[str, Any]]:
    ensure_table(db)
    cur = db.execute(f"SELECT * FROM {table} WHERE signature = ? AND device_type = ? ORDER BY rowid",
                     [sig, normalise_device(device)])
    names = [c[0] for c in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def events(db: sqlite_utils.Database, sig: str, device: str) -> list[dict[str, Any]]:
    """How (sig, device)'s profile changed and why, oldest first."""
    return _rows_of(db, EVENTS, sig, device)


def runs(db: sqlite_utils.Database, sig: str, device: str) -> list[dict[str, Any]]:
    """The reported runs the learned profile of (sig, device) is fitted on, oldest first."""
    return _rows_of(db, RUNS, sig, device)


def learn(db: sqlite_utils.Database, sig: str, device: str, run: Any, cluster: Any, model: str = "") -> CostEntry | None:
    """Record one reported run (a `lyasched.costmodel.learn.Run`) and refit the entry's learned profile
    from every run since it was profiled (`lyasched.costmodel.learn.refit` against ``cluster``, a
    `ClusterSpec`). Resets the correction factor. ``model`` (the name the job reported) replaces
    a placeholder model name (the service creates entries named by their signature). None when
    there is no entry."""
    from lyasched.costmodel.learn import Run, refit, refit_shared

    dev = normalise_device(device)
    ensure_table(db)
    now = _now()
    label = "".join(map(str, run.placement)) if max(run.placement) < 10 else "-".join(map(str, run.placement))
    with _Immediate(db):
        old = _select(db, sig, dev)
        if old is None:
            return None
        db.execute(f"INSERT INTO {RUNS} (signature, device_type, job_id, placement, local_bsz, step_time, time, "
                   "user) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   [sig, dev, run.job_id, label, float(run.local_bsz), float(run.step_time), now, run.user])
        cur = db.execute(f"SELECT placement, local_bsz, step_time, job_id, user FROM {RUNS} WHERE signature = ? AND "
                         "device_type = ? AND time >= ? ORDER BY rowid", [sig, dev, old["created"]])
        seen = [Run(tuple(int(x) for x in (p.split("-") if "-" in p else p)), b, t, j, u or "")
                for p, b, t, j, u in cur.fetchall()]
        base = _entry(old).profile(corrected=False, learned=False)
        prof, why = refit_shared(base, cluster, seen)
        mine = [r for r in seen if r.user == run.user]
        own, own_why = refit(base, cluster, mine)
        db.execute(f"INSERT OR REPLACE INTO {OWN} VALUES (?, ?, ?, ?, ?)",
                   [sig, dev, run.user, json.dumps({"alpha": own.alpha, "beta": own.beta,
                                                    "comm_scale_intra": own.comm_scale_intra,
                                                    "comm_scale_inter": own.comm_scale_inter, "why": own_why}),
                    len(mine)])
        learned = {"alpha": prof.alpha, "beta": prof.beta, "comm_scale_intra": prof.comm_scale_intra,
                   "comm_scale_inter": prof.comm_scale_inter, "why": why}
        name = model if model and old["model"] == sig else old["model"]
        db.execute(f"UPDATE {TABLE} SET learned_json = ?, learned_runs = ?, correction = 1.0, updated = ?, model = ? "
                   "WHERE signature = ? AND device_type = ?", [json.dumps(learned), len(seen), now, name, sig, dev])
        _event(db, sig, dev, now, f"learned from {len(seen)} run{'s' if len(seen) != 1 else ''}",
               f"job {run.job_id or '?'} on {label} at local batch {run.local_bsz:g}: {run.step_time * 1e3:.2f} ms/step; "
               + ("; ".join(why) or "nothing to refit"), prof.alpha, prof.beta, prof.comm_scale_intra,
               prof.comm_scale_inter)
        new = _select(db, sig, dev)
    return _entry(new) if new else None


def list_entries(db: sqlite_utils.Database) -> list[CostEntry]:
    """Every entry, most recently updated first."""
    ensure_table(db)
    return [_entry(r) for r in db[TABLE].rows_where(order_by="updated DESC, signature, device_type")]


def next_correction(c: float, ratio: float) -> float:
    """The refinement rule: one (unclamped) observed/uncorrected-predicted ratio moves c."""
    r = min(max(ratio, RATIO_BOUNDS[0]), RATIO_BOUNDS[1])
    return min(max((1.0 - REFINE_WEIGHT) * c + REFINE_WEIGHT * r, CORRECTION_BOUNDS[0]), CORRECTION_BOUNDS[1])


def refine(
    db: sqlite_utils.Database, sig: str, device: str, predicted_s: float, observed_s: float, corrected: bool = True
) -> CostEntry | None:
    """Fold one finished job's run time into (sig, device)'s correction factor.

    ``predicted_s`` is the run time the scheduler predicted from this entry's profile:
    from the corrected profile (`get_profile`, the default) or, with ``corrected=False``, the
    raw one. Returns the updated entry, or None when there is no entry to refine.
    """
    for name, v in (("predicted_s", predicted_s), ("observed_s", observed_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name}={v!r} must be a finite positive number of seconds")
    dev = normalise_device(device)
    ensure_table(db)
    with _Immediate(db):
        old = _select(db, sig, dev)
        if old is None:
            return None
        c = float(old["correction"])
        ratio = observed_s / predicted_s * (c if corrected else 1.0)
        now, c_new = _now(), next_correction(c, ratio)
        db.execute(
            f"UPDATE {TABLE} SET correction = ?, observations = observations + 1, last_ratio = ?, updated = ? "
            "WHERE signature = ? AND device_type = ?",
            [c_new, ratio, now, sig, dev],
        )
        _event(db, sig, dev, now, "run-time correction",
               f"a job that did not report steps ran {ratio:.3f}x the uncorrected prediction: correction "
               f"{c:.3f} -> {c_new:.3f}", float(old["alpha"]), float(old["beta"]), None, None)
        new = _select(db, sig, dev)
    return _entry(new) if new else None


# ---------------------------------------------------------------- model signatures

SIGNATURES = "signatures"


def get_signature(db: sqlite_utils.Database, key: str) -> str | None:
    """A model signature remembered under ``key`` (see `lyasched.submitter.signature_key`), or None.

    Computing a signature builds the model (imports torch: seconds per `lyasub`); remembering
    it lets a submission with a cached profile skip torch entirely."""
    if SIGNATURES not in db.table_names():
        return None
    row = db.execute(f"SELECT signature FROM {SIGNATURES} WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def put_signature(db: sqlite_utils.Database, key: str, sig: str) -> None:
    """Remember ``sig`` under ``key`` (one short statement; the same key always gives the same sig)."""
    db.execute(f"CREATE TABLE IF NOT EXISTS {SIGNATURES} (key TEXT PRIMARY KEY, signature TEXT NOT NULL, created TEXT)")
    db.execute(f"INSERT OR REPLACE INTO {SIGNATURES} (key, signature, created) VALUES (?, ?, ?)", [key, sig, _now()])
