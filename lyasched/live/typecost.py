"""A job's cost on each GPU type: which type lyasub profiles on, and a profile for every type.

A profile belongs to a (model, GPU type) pair: the cost table's device key is the type
(`lyasched.clusterview.device_key`). lyasub measures one type, the fastest the job may run on
(`profile_type`); the service learns each type the model's jobs ran on from their step reports
(lyasched.live.learning, keyed by the type of the job's nodes). A type nobody measured is
predicted by the roofline (`lyasched.costmodel.roofline.on_type`, as replay does) from a measured one
(`type_profile`). A type the roofline table does not know (add it in ``[cluster.gpu_types]``)
cannot be predicted: it gets the source type's profile unchanged.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from lyasched.costmodel.cost import Profile
from lyasched.costmodel.roofline import DEFAULT_INTENSITY, KNOWN_TYPES, GpuType, largest_batch, on_type


def _table(table: Mapping[str, GpuType] | None) -> Mapping[str, GpuType]:
    return KNOWN_TYPES if table is None else table


def seconds_per_flop(name: str, table: Mapping[str, GpuType] | None = None) -> float:
    """The roofline's time per FLOP of ``name`` at the default training intensity (inf: unknown type)."""
    t = _table(table).get(name.lower())
    return t.time_per_flop(DEFAULT_INTENSITY) if t is not None else math.inf


def fastest(types: Iterable[str], table: Mapping[str, GpuType] | None = None) -> str:
    """The fastest of ``types`` by the roofline (unknown types last, ties in the given order); '' if none."""
    ts = [t for t in dict.fromkeys(types) if t]
    if not ts:
        return ""
    return min(ts, key=lambda t: (seconds_per_flop(t, table), ts.index(t)))


def profile_type(allowed: Sequence[str], present: Iterable[str], table: Mapping[str, GpuType] | None = None) -> str:
    """The type a job is profiled (and first predicted) on: the fastest of its ``allowed`` types that
    a node has, or of every type ``present`` for a job of any type; '' when the nodes are untyped."""
    have = [t for t in dict.fromkeys(present) if t]
    cands = [t for t in allowed if t in have] if allowed else have
    return fastest(cands, table)


def type_profile(db: Any, sig: str, dst: str, fallback: Profile, fallback_type: str,
                 table: Mapping[str, GpuType] | None = None, user: str | None = None,
                 measured_types: Sequence[str] = ()) -> tuple[Profile, str]:
    """(profile, how) of model ``sig`` on type ``dst``: its learned profile there when jobs reported
    on ``dst``; else the learned or measured profile of another type (``measured_types`` first, then
    ``fallback_type``) predicted by the roofline; else ``fallback`` (the job's cost summary, of type
    ``fallback_type``) predicted by the roofline. ``how``: 'learned', 'measured', 'roofline from TYPE'."""
    from lyasched.store import costtable

    if db is not None:
        learned = costtable.learned_profile(db, sig, dst, user)
        if learned is not None:
            return learned, "learned"
        for src in dict.fromkeys([dst, *measured_types, fallback_type]):
            if not src:
                continue
            p = costtable.learned_profile(db, sig, src, user)
            entry = costtable.get(db, sig, src) if p is None else None
            if entry is not None and entry.source == "measured":
                p = entry.profile(corrected=False)
            if p is not None:
                return on_type(p, src, dst, table), ("measured" if src == dst else f"roofline from {src}")
    if not fallback_type or fallback_type == dst:
        return fallback, "summary"
    return on_type(fallback, fallback_type, dst, table), f"roofline from {fallback_type}"


def too_small(profile: Profile, types: Sequence[str], smallest_local_batch: float,
              table: Mapping[str, GpuType] | None = None) -> list[tuple[str, float]]:
    """The ``types`` whose memory cannot hold ``smallest_local_batch`` samples per GPU, with the
    largest per-GPU batch each holds (unknown types are not judged)."""
    tab = _table(table)
    out = []
    for t in types:
        gt = tab.get(t.lower())
        if gt is not None and largest_batch(profile, gt) < smallest_local_batch:
            out.append((t, largest_batch(profile, gt)))
    return out


def node_groups(nodes: Sequence[Any]) -> dict[str, list[int]]:
    """GPU type -> the GPUs of each node of that type (Slurm's order; '' = untyped)."""
    out: dict[str, list[int]] = {}
    for n in nodes:
        out.setdefault(n.gpu_type or "", []).append(n.gpus_total)
    return out
