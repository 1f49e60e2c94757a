"""GPU types at the service's edge: which nodes a job may be placed on, and the type its release names.

A job may be limited to GPU types: ``gt`` in its cost summary (`lyasub --gpu-type a100,h100`), else the
type its own Slurm request names (a plain job of a managed partition submitted with
``--gres=gpu:a100:2``); neither means any type. The policy core places on free GPUs without types:
its placement is fitted again here, by the one placement rule (`fit_placement`), onto the nodes of
the job's types only (the others' free GPUs read as 0), and the job waits when none fits. Every
``scontrol update`` of a typed job names the type of the nodes it goes to (`release_type`): the
update replaces the job's whole GPU request, and an untyped one would let Slurm run it anywhere.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from lyasched.policy.placement import Placement, fit_placement
from lyasched.slurm.types import SlurmJob
from lyasched.summary import CostSummary


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
