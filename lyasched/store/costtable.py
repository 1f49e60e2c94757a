"""The cost table: one profile per (model signature, device type), refined by observed run times.

Table ``profiles`` in the lyasched database (`lyasched.store.open_db`). Writes are single short
``BEGIN IMMEDIATE`` transactions in plain SQL (sqlite-utils' own writers would commit early
inside them), so concurrent `lyasub`/service/profiler processes never interleave a
read-modify-write. No torch here: profiles arrive as `ProfileResult`s or their dicts.

Online refinement (docs/profiling.md): each entry carries a correction factor c (start 1).
When a job finishes, r = observed / uncorrected-prediction is clamped to [0.25, 4] and
c <- clamp((1 - W) * c + W * r, 0.5, 2) with W = 0.3; the corrected profile scales alpha and
beta by c. A fresh measurement of the same key resets c (the new fit is the new baseline).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

import sqlite_utils

from lyasched.cost import Profile
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
}


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

    def profile(self, corrected: bool = True) -> Profile:
        """The cost model's `Profile`; ``corrected`` scales alpha and beta by the correction factor."""
        c = self.correction if corrected else 1.0
        return Profile(
            model=self.model, alpha=self.alpha * c, beta=self.beta * c, params=self.params,
            bytes_per_param=self.bytes_per_param, mem_base=self.m0, mem_per_sample=self.m1, source=self.source,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _finite(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def ensure_table(db: sqlite_utils.Database) -> None:
    if TABLE not in db.table_names():
        db[TABLE].create(
            COLUMNS, pk=("signature", "device_type"), if_not_exists=True,
            not_null={"model", "source", "alpha", "beta", "params", "correction", "observations"},
            defaults={"correction": 1.0, "observations": 0},
        )


def _entry(row: dict[str, Any]) -> CostEntry:
    d = {k: row.get(k) for k in CostEntry.__dataclass_fields__}
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
        "result_json": json.dumps(d),
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
        stored = _select(db, row["signature"], dev)
    assert stored is not None
    return _entry(stored)


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
        db.execute(
            f"UPDATE {TABLE} SET correction = ?, observations = observations + 1, last_ratio = ?, updated = ? "
            "WHERE signature = ? AND device_type = ?",
            [next_correction(c, ratio), ratio, _now(), sig, dev],
        )
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
