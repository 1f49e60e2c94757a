"""Moves of running jobs in the simulator: which jobs may move, what a move costs, what a
moving policy sees of a running job.

The simulator's preemption machinery (the one tiresias uses) does the rest: a preempted job's
segment ends with its progress kept (`Segment.done`), it waits again with its remaining run
plus its move cost, and its next start pays that cost. A resize is a preemption and a start
of the same job in one slot (`lyasched.policy.movable`); only policies with ``moves = True``
may do that, and only checkpointable jobs are ever preempted (docs/simulator.md).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np

from lyasched.costmodel.jobspec import Job
from lyasched.policy.movable import MovableJob, movable_job, scaled, share_left, waited_so_far
from lyasched.policy.state import RunningJob, SlotState, WaitingJob

CHECKPOINTABLE_MODES = ("all", "declared", "none")


def checkpointable_mask(jobs: Sequence[Job], mode: str) -> np.ndarray:
    """Which jobs may be preempted or resized: every job ("all", the replay default: trace and
    synthetic jobs carry no declaration), those with ``Job.checkpointable`` ("declared", as live
    submissions: `lyasub --checkpointable`), or none."""
    if mode not in CHECKPOINTABLE_MODES:
        raise ValueError(f"checkpointable must be one of {', '.join(CHECKPOINTABLE_MODES)}, got {mode!r}")
    if mode == "all":
        return np.ones(len(jobs), dtype=bool)
    if mode == "none":
        return np.zeros(len(jobs), dtype=bool)
    return np.fromiter((bool(j.checkpointable) for j in jobs), dtype=bool, count=len(jobs))


def move_costs(jobs: Sequence[Job], default: float) -> np.ndarray:
    """Seconds a job loses per move (checkpoint + relaunch): its own ``move_cost_s`` or ``default``."""
    out = np.full(len(jobs), float(default))
    for i, j in enumerate(jobs):
        if j.move_cost_s is not None:
            if not (j.move_cost_s >= 0 and math.isfinite(j.move_cost_s)):
                raise ValueError(f"job {j.job_id}: move cost must be a finite number >= 0, got {j.move_cost_s}")
            out[i] = float(j.move_cost_s)
    return out


def policy_view(sim: Any, state: SlotState, running: Mapping[int, Any], records: Sequence[Any], oracle: bool,
                moves: bool) -> SlotState:
    """The running jobs a preemptive policy sees: ``preemptible`` only when checkpointable, and as
    `MovableJob` for a policy that moves jobs. ``state.running`` is in ``running``'s order (the
    simulator builds the snapshot from it); ``sim`` is the `Simulation`."""
    mask = sim.checkpointable
    if not moves and bool(mask.all()):
        return state
    out: list[RunningJob] = []
    # per running segment, what its view reads that does not change while it runs (`_Fixed`)
    fixed: dict[int, _Fixed] = sim.__dict__.setdefault("_movable_fixed", {})
    if moves and len(fixed) > 4 * len(running) + 64:
        fixed.clear()
    for r, rj in zip(running.values(), state.running):
        if moves:
            f = fixed.get(id(r))
            if f is None or f.seg is not r or f.oracle is not oracle:
                f = fixed[id(r)] = _Fixed(sim, r, oracle, bool(mask[r.idx]))
            if f.adaptive:
                out.append(adaptive_view(sim, rj, r, records[r.idx], oracle, f.checkpointable, state.now, f.gt))
                continue
            out.append(f.view(rj, state.now, records[r.idx]))
        elif not mask[r.idx]:
            out.append(replace(rj, preemptible=False))
        else:
            out.append(rj)
    return replace(state, running=tuple(out))


class _Fixed:
    """One running segment's inputs to `movable_view` that stay put while it runs (its template,
    scale, move cost, request), so each slot computes only what moves with time. `view` gives
    the same `MovableJob` as `movable_view` (same expressions, same order), built without the
    dataclass constructor's per-field checks."""

    __slots__ = ("seg", "oracle", "checkpointable", "gt", "adaptive", "job", "template", "plain", "scale", "move_cost",
                 "requested", "rows")

    def __init__(self, sim: Any, r: Any, oracle: bool, checkpointable: bool) -> None:
        j = sim.jobs[r.idx]
        self.seg, self.oracle, self.checkpointable, self.job = r, oracle, checkpointable, j
        self.gt = r.gtype if getattr(sim, "typed_moves", False) and r.gtype in sim._typed_templates(j) else None
        self.template = t = sim._template(j, self.gt)  # on typed clusters, an aware policy sees its rows on its type
        self.adaptive = j.adaptive is not None
        self.plain = plain_rows(t, sim._plain_rows)
        self.scale = j.iterations * (float(sim.factors[r.idx]) if oracle else 1.0)
        self.move_cost = float(sim.move_costs[r.idx])
        self.requested = max(1, min(j.requested_gpus, len(t.run_one_node)))  # as `movable_job` clamps it
        # both rows in one array when `scaled`'s fast path applies to both: one product per slot
        one, multi = t.run_one_node, t.run_multi_node
        self.rows = np.stack([one, multi]) if self.plain and one.shape == multi.shape and one.ndim == 1 else None

    def view(self, base: RunningJob, now: float, record: Any) -> MovableJob:
        r, t = self.seg, self.template
        start, predicted_end = base.start_time, base.predicted_end
        rem = share_left(r.frac_at_start, predicted_end - now, predicted_end - start - r.overhead)
        scale = self.scale * rem
        out = MovableJob.__new__(MovableJob)
        d = vars(out)
        d.update(vars(base))
        d.update(preemptible=self.checkpointable, requested_gpus=self.requested, move_cost_s=self.move_cost,
                 waited_s=waited_so_far(now, self.job.submit_time, record.run_s, start), work_left=t.work * scale,
                 moves=record.preemptions, adaptive=False)
        if self.rows is not None and 0.0 < scale < math.inf:  # `scaled`'s fast path, elementwise the same product
            d["remaining_one_node"], d["remaining_multi_node"] = self.rows * scale
        else:
            d["remaining_one_node"] = scaled(t.run_one_node, scale, self.plain)
            d["remaining_multi_node"] = scaled(t.run_multi_node, scale, self.plain)
        return out


def adaptive_view(sim: Any, base: RunningJob, r: Any, record: Any, oracle: bool, checkpointable: bool,
                  now: float, gtype: str | None = None) -> MovableJob:
    """An adaptive job (lyasched.costmodel.goodput) as a moving policy sees it: its progress in
    base steps estimated from the prediction as `movable_view` does (the predicted compute done
    so far, walked through its re-tuning pieces), its rows the time left from there."""
    from lyasched.costmodel import goodput

    j = sim.jobs[r.idx]
    factor = float(sim.factors[r.idx]) if oracle else 1.0
    segment = base.predicted_end - base.start_time - r.overhead
    ahead = base.predicted_end - now
    done_s = max(0.0, segment - max(0.0, ahead)) if math.isfinite(segment) else 0.0
    p0 = 1.0 - r.frac_at_start
    cost, on = (sim.cost, j) if gtype is None else sim._typed_job(j, gtype)
    p = goodput.progress_after(cost, on, r.gpus, r.spans, p0, done_s / factor, r.batch)
    one, multi = sim._pieces(j, gtype).rows(p)
    tpl = WaitingJob(job_id="", submit_time=0.0, work=sim._template(j, gtype).work * (1.0 - p), run_one_node=one,
                     run_multi_node=multi)
    return movable_job(
        base, one=tpl.run_one_node, multi=tpl.run_multi_node, work=tpl.work, scale=j.iterations * factor,
        requested=j.requested_gpus, move_cost=float(sim.move_costs[r.idx]), checkpointable=checkpointable,
        waited=waited_so_far(now, j.submit_time, record.run_s, base.start_time), moves=record.preemptions,
        adaptive=True, pieces=goodput.PiecesLeft(sim._pieces(j, gtype), p, j.iterations * factor),
    )


def plain_rows(template: WaitingJob, memo: dict[int, tuple[WaitingJob, bool]]) -> bool:
    """Whether the template's rows hold no nan or -inf, memoised by the template's identity (the
    simulator keeps its templates, and the memo keeps each one it was asked about)."""
    hit = memo.get(id(template))
    if hit is None or hit[0] is not template:
        ok = all(not np.isnan(row).any() and not np.isneginf(row).any()
                 for row in (template.run_one_node, template.run_multi_node))
        hit = memo[id(template)] = (template, bool(ok))
    return hit[1]


def movable_view(
    base: RunningJob,
    *,
    job: Job,
    template: WaitingJob,
    scale: float,
    overhead: float,
    frac_at_start: float,
    now: float,
    held_before: float,
    checkpointable: bool,
    move_cost: float,
    plain: bool = False,
    moves: int = 0,
) -> MovableJob:
    """A running job as a moving policy sees it: ``base`` plus predicted remaining time on every count.

    The remaining share of the job is estimated from the prediction, as the live service would
    (the policy never sees the true progress): the segment's predicted compute
    ``predicted_end - start - overhead`` covers ``frac_at_start`` of the job, and the share
    still to do is what of it lies after ``now``. ``scale`` is iterations (x the true factor for
    oracles); ``held_before`` the time the job held GPUs in earlier segments; ``plain``: the
    template's rows hold no nan or -inf (`plain_rows`); ``moves`` the checkpoints it has taken.
    """
    start, predicted_end = base.start_time, base.predicted_end
    rem = share_left(frac_at_start, predicted_end - now, predicted_end - start - overhead)
    return movable_job(
        base, one=template.run_one_node, multi=template.run_multi_node, work=template.work, scale=scale * rem,
        requested=job.requested_gpus, move_cost=move_cost, checkpointable=checkpointable, plain=plain,
        waited=waited_so_far(now, job.submit_time, held_before, start), moves=moves,
    )
