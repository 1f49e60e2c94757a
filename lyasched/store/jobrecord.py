"""Typed rows of the service database (lyasched.store.records): a job, a decision, a slot, a move.

The tables keep JSON in text columns (node lists, placements, predicted run times, the cost
summary as its ``lyasched:v1;`` text). These classes are the one place that decodes them:
``from_row`` takes a row as sqlite returns it, ``to_row`` gives the columns back. Readers
(lyastat, learn) work with the typed values, never with the JSON. The service's own paths
(lyasched.live: step, starter, mover) still pass rows as dicts, with node lists and placements
written through the codecs of lyasched.store.placement; start intents have no typed class.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np
import sqlite_utils

from lyasched.store.placement import NodePlacement, nodes_from_json, nodes_to_json
from lyasched.summary import CostSummary


def encode_times(row: Sequence[float]) -> str:
    """Predicted run times per GPU count as JSON (null where a count is not allowed: inf).

    The text ``json.dumps`` gives for the list of ``round(x, 3)`` and None, written out here: a
    row has one entry per GPU of the cluster, most of them null, and a first slot writes two rows
    per held job."""
    vals = np.asarray(row, dtype=float)
    parts = ["null"] * len(vals)
    listed = vals.tolist()
    for i in np.flatnonzero(np.isfinite(vals)).tolist():
        parts[i] = repr(round(listed[i], 3))  # json.dumps writes a float as its repr
    return "[" + ", ".join(parts) + "]"


def decode_times(text: str | None) -> tuple[float, ...]:
    """`encode_times` back: inf where a count is not allowed."""
    return tuple(math.inf if x is None else float(x) for x in (json.loads(text) if text else []))


@dataclass(frozen=True)
class JobRecord:
    """One lyasched job as the service recorded it (table ``jobs``; columns in records.JOB_COLUMNS).

    ``uid`` is the lyasched job id (the cost summary's ``id``), not a Unix uid."""

    uid: str
    slurm_id: str | None = None
    user: str | None = None
    name: str | None = None
    summary: str | None = None  # the cost summary's text; `cost_summary()` decodes it
    sig: str | None = None
    state: str | None = None  # waiting, released, running, finished, vanished, invalid
    slurm_state: str | None = None
    submit_time: float | None = None
    released_at: float | None = None
    started: float | None = None
    ended: float | None = None
    gpus: int | None = None
    nodes: tuple[str, ...] = ()
    placement: NodePlacement = NodePlacement()
    predicted: float | None = None
    observed: float | None = None
    work: float | None = None
    time_limit: float | None = None
    pred_one: tuple[float, ...] = ()  # predicted run time on 1..G GPUs on one node (inf: not allowed)
    pred_multi: tuple[float, ...] = ()  # the same over several nodes
    reason: str | None = None
    first_seen: float | None = None
    last_seen: float | None = None
    refined: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobRecord:
        """A ``jobs`` row (a dict from sqlite-utils); missing columns stay at their defaults."""
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in row.items() if k in names}
        d["nodes"] = nodes_from_json(row.get("nodes"))
        d["placement"] = NodePlacement.from_json(row.get("placement"))
        d["pred_one"] = decode_times(row.get("pred_one"))
        d["pred_multi"] = decode_times(row.get("pred_multi"))
        return cls(**d)

    def to_row(self) -> dict[str, Any]:
        """The columns (JSON text where the table keeps JSON); what `records.upsert_job` takes."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["nodes"] = nodes_to_json(self.nodes)
        d["placement"] = self.placement.to_json() if self.placement else None
        d["pred_one"] = encode_times(self.pred_one)
        d["pred_multi"] = encode_times(self.pred_multi)
        return d

    def cost_summary(self) -> CostSummary | None:
        """The job's cost summary (None for a job recorded invalid: its text did not decode)."""
        try:
            return CostSummary.decode(self.summary or "")
        except ValueError:
            return None

    @property
    def best_predicted(self) -> float | None:
        """The predicted run time at the GPUs it got, else the shortest over the allowed counts."""
        if self.predicted is not None:
            return self.predicted
        finite = [x for x in self.pred_one + self.pred_multi if math.isfinite(x)]
        return min(finite) if finite else None


@dataclass(frozen=True)
class DecisionRecord:
    """One action of the service on a job (table ``decisions``: start, hold, skip, failed)."""

    id: int | None
    slot: int | None
    time: float | None
    uid: str
    slurm_id: str | None
    action: str
    gpus: int | None = None
    nodes: tuple[str, ...] = ()
    placement: NodePlacement = NodePlacement()
    score: float | None = None
    predicted: float | None = None
    reason: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> DecisionRecord:
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in row.items() if k in names}
        d["nodes"] = nodes_from_json(row.get("nodes"))
        d["placement"] = NodePlacement.from_json(row.get("placement"))
        return cls(**d)

    def to_row(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["nodes"] = nodes_to_json(self.nodes)
        d["placement"] = self.placement.to_json() if self.placement else None
        return d


@dataclass(frozen=True)
class MoveRecord:
    """One move of a running job (table ``moves``, columns in store.moves.MOVE_COLUMNS: shrink, grow,
    suspend), as lyastat shows it; the mover itself works on the rows (lyasched.live.mover)."""

    id: int
    uid: str
    slurm_id: str
    kind: str
    reason: str | None = None
    created: float | None = None
    from_gpus: int | None = None
    from_placement: NodePlacement = NodePlacement()
    to_gpus: int | None = None  # 0 for a suspension
    to_placement: NodePlacement = NodePlacement()
    per_node: int | None = None
    predicted: float | None = None
    ckpt_dir: str | None = None
    ckpt_before: int | None = None
    ckpt_step: int | None = None
    step: str | None = None
    state: str | None = None
    signalled_at: float | None = None
    checkpointed_at: float | None = None
    requeued_at: float | None = None
    released_at: float | None = None
    restarted_at: float | None = None
    cost_s: float | None = None
    resolved: float | None = None
    resolution: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> MoveRecord:
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in row.items() if k in names}
        d["from_placement"] = _placement(row.get("from_placement"))
        d["to_placement"] = _placement(row.get("to_placement"))
        return cls(**d)


def _placement(text: str | None) -> NodePlacement:
    """A placement column, empty when unreadable (a row written by an older version)."""
    try:
        return NodePlacement.from_json(text)
    except (ValueError, TypeError):
        return NodePlacement()


def _json(text: str | None, default: Any) -> Any:
    """A JSON column, ``default`` when empty or unreadable (a row written by an older version)."""
    try:
        return json.loads(text) if text else default
    except ValueError:
        return default


@dataclass(frozen=True)
class SlotRecord:
    """One slot of the service (table ``slots``): its queues, free GPUs per node and the starts it made."""

    id: int
    time: float
    q: float = 0.0
    z: float = 0.0
    free_gpus: int = 0
    free: Mapping[str, int] = field(default_factory=dict)  # node -> free GPUs
    waiting: int = 0
    running: int = 0
    started: tuple[dict, ...] = ()  # the slot report's starts (column ``decisions``)
    duration: float = 0.0
    policy: str = ""
    error: str = ""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SlotRecord:
        return cls(
            id=int(row["id"]), time=float(row["time"]), q=row.get("q") or 0.0, z=row.get("z") or 0.0,
            free_gpus=row.get("free_gpus") or 0, free=_json(row.get("free"), {}), waiting=row.get("waiting") or 0,
            running=row.get("running") or 0, started=tuple(_json(row.get("decisions"), [])),
            duration=row.get("duration") or 0.0, policy=row.get("policy") or "", error=row.get("error") or "",
        )


# ---------------------------------------------------------------- reading typed rows


def job(db: sqlite_utils.Database, uid: str) -> JobRecord | None:
    from lyasched.store import records

    row = records.get_job(db, uid)
    return JobRecord.from_row(row) if row else None


def job_by_slurm_id(db: sqlite_utils.Database, slurm_id: str) -> JobRecord | None:
    from lyasched.store import records

    row = records.job_by_slurm_id(db, slurm_id)
    return JobRecord.from_row(row) if row else None


def jobs(db: sqlite_utils.Database, user: str | None = None, limit: int | None = None) -> list[JobRecord]:
    from lyasched.store import records

    return [JobRecord.from_row(r) for r in records.list_jobs(db, user=user, limit=limit)]


def decisions(db: sqlite_utils.Database, uid: str) -> list[DecisionRecord]:
    from lyasched.store import records

    return [DecisionRecord.from_row(r) for r in records.decisions_for(db, uid)]


def moves(db: sqlite_utils.Database, uid: str) -> list[MoveRecord]:
    """The job's moves, oldest first (none in a database written before moves existed)."""
    from lyasched.store import moves as move_rows

    return [MoveRecord.from_row(r) for r in move_rows.for_job(db, uid)]


def last_slot(db: sqlite_utils.Database) -> SlotRecord | None:
    from lyasched.store import records

    row = records.last_slot(db)
    return SlotRecord.from_row(row) if row else None
