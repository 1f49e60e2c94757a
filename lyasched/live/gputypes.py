"""GPU types at the service's edge: which nodes a job may be placed on, and the type its release names.

A job may be limited to GPU types: ``gt`` in its cost summary (`lyasub --gpu-type a100,h100`), else the
type its own Slurm request names (a plain job of a managed partition submitted with
``--gres=gpu:a100:2``); neither means any type. The policy core places on free GPUs without types:
its placement is fitted again here, by the one placement rule (`fit_placement`), onto the nodes of
the job's types only (the others' free GPUs read as 0), and the job waits when none fits. Every
``scontrol update`` of a typed job names the type of the nodes it goes to (`release_type`): the
update replaces the job's whole GPU request, and an untyped one would let Slurm run it anywhere.
A job's ``--constraint`` (summary key ``ft``) limits it further to the nodes whose Slurm Features
satisfy it (`room`, by the placement rule's `constrained`; its rows are made only on the types with
such a node: `featured`). A held job that no type it allows can ever hold (more GPUs than any one
type's nodes have, a batch no type's memory holds, a type no node has, no node of its features) is
marked so in its record (`never_placeable`), which `lyastat` shows, rather than waiting silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

from lyasched.policy.placement import (Constraint, Placement, constrained, featured_types, fit_placement,
                                       parse_constraint)
from lyasched.slurm.types import SlurmJob
from lyasched.summary import CostSummary

if TYPE_CHECKING:
    from lyasched.live.context import SlotContext
    from lyasched.policy.state import WaitingJob

NEVER = "waiting: never placeable"  # the record reason's prefix (`never_placeable`)


def allowed_types(job: SlurmJob, summary: str | None = None) -> tuple[str, ...]:
    """The GPU types ``job`` may run on (() = any): its summary's ``gt``, else its request's type."""
    text = summary if summary is not None else job.comment
    if text:
        try:
            gt = CostSummary.decode(text).gpu_types
        except ValueError:
            gt = ()
        if gt:
            return gt
    return (job.gpu_type,) if job.gpu_type else ()


def constraint_of(job: SlurmJob, summary: str | None = None) -> Constraint:
    """The node features ``job`` needs: its summary's ``ft`` (its --constraint; the plugin checked it
    is the job's own Features), () for none or one lyasched cannot parse."""
    text = summary if summary is not None else job.comment
    try:
        return parse_constraint(CostSummary.decode(text).constraint) if text else ()
    except ValueError:
        return ()


def room(free: Sequence[int], ctx: SlotContext, job: SlurmJob, summary: str | None = None) -> list[int]:
    """``free`` on the nodes ``job`` may run on by its --constraint (the others at 0:
    `lyasched.policy.placement.constrained`, Slurm's node Features from ``ctx``)."""
    return constrained(free, ctx.features, constraint_of(job, summary))


def featured(ctx: SlotContext, constraint: str) -> frozenset[str]:
    """The GPU types with at least one node whose Features satisfy ``constraint`` (every type when
    there is none): the types a constrained job's rows are made on (`PolicyInputs.types_of`)."""
    return featured_types(ctx.types, ctx.features, parse_constraint(constraint) if constraint else ())


def masked(free: Sequence[int], node_types: Sequence[str], allowed: Sequence[str]) -> list[int]:
    """``free`` with the nodes of other types at 0 (all of it when ``allowed`` is empty)."""
    if not allowed:
        return list(free)
    ok = set(allowed)
    return [f if i < len(node_types) and node_types[i] in ok else 0 for i, f in enumerate(free)]


def fit_typed(gpus: int, placement: Placement, free: Sequence[int], node_types: Sequence[str],
              allowed: Sequence[str]) -> Placement | None:
    """The policy's placement fitted onto the nodes of the ``allowed`` types (`fit_placement` on the
    masked free GPUs); None when no placement of one allowed type fits. A job of several types
    never mixes them: each type is tried alone, the policy's own nodes' type first."""
    if not allowed:
        return fit_placement(gpus, placement, free)
    chosen = [node_types[i] for i, _ in placement if 0 <= i < len(node_types)]
    order = sorted(dict.fromkeys(allowed), key=lambda t: (-chosen.count(t), list(allowed).index(t)))
    for t in order:
        p = fit_placement(gpus, placement, masked(free, node_types, (t,)))
        if p is not None:
            return p
    return None


def release_type(allowed: Sequence[str], nodes: Sequence[str], type_of: Mapping[str, str]) -> str:
    """The type a release (or resize) onto ``nodes`` names: '' for a job of any type (its request
    stays untyped), else the one type of those nodes; ValueError when they are not all of one
    allowed type (the placement step should have prevented it)."""
    if not allowed:
        return ""
    types = {type_of.get(n, "") for n in nodes}
    if len(types) != 1 or next(iter(types)) not in allowed:
        raise ValueError(f"nodes {list(nodes)} are not all of one allowed GPU type {list(allowed)}: {sorted(types)}")
    return next(iter(types))


def never_placeable(wj: WaitingJob, job: SlurmJob, ctx: SlotContext, gmin: int, gmax: int) -> str:
    """The record reason of a held job no GPU type it allows can ever run (on typed nodes: no row
    on any type, `lyasched.policy.snapshot.type_rows`); '' when one can, or the nodes are untyped.
    ``gmin``..``gmax``: the GPU counts it allows."""
    if not ctx.type_costs or wj.by_type:
        return ""
    counts = f"{gmin}-{gmax}" if gmax > gmin else str(gmin)
    allowed = allowed_types(job)
    groups: dict[str, list[int]] = {}
    for t, g in zip(ctx.types, ctx.gpus):
        groups.setdefault(t or "untyped", []).append(g)
    have = ", ".join(f"{t} {len(g)}x{max(g)}" for t, g in groups.items() if not allowed or t in allowed)
    which = ", ".join(allowed) if allowed else "any"
    c = constraint_of(job)
    feats = f" with its --constraint's features ({'|'.join('&'.join(sorted(t)) for t in c)})" if c else ""
    return (f"{NEVER}: a job runs on one GPU type, and no type it allows ({which}) can hold {counts} GPUs of its "
            f"batch on its nodes{feats} ({have or 'none'})")
