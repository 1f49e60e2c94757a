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
    rows: _Rows = sim.__dict__.setdefault("_movable_rows", _Rows())
    if moves and (len(fixed) > 4 * len(running) + 64 or rows.n > 8 * len(running) + 256):  # drop the segments gone
        fixed.clear()
        rows.clear()
    # the views whose rows are their template times one scale (`_Fixed.view`'s fast path): those
    # products are made in one array operation after the loop (`_Rows`)
    fast: list[tuple[dict, int, float]] = []
    now = state.now
    for r, rj in zip(running.values(), state.running):
        if moves:
            f = fixed.get(id(r))
            if f is None or f.seg is not r or f.oracle is not oracle:
                f = fixed[id(r)] = _Fixed(sim, r, oracle, bool(mask[r.idx]), rows)
            if f.adaptive:
                out.append(adaptive_view(sim, rj, r, records[r.idx], oracle, f.checkpointable, now, f.gt))
                continue
            out.append(f.view(rj, now, records[r.idx], fast))
        elif not mask[r.idx]:
            out.append(replace(rj, preemptible=False))
        else:
            out.append(rj)
    if fast:
        rows.fill(fast)
    return replace(state, running=tuple(out))


class _Rows:
    """The fast-path views' rows of one slot as one product. Each `_Fixed` with plain rows of
    the pool's shape puts its template's row pair in a row of ``pool`` once (``slot``); a slot's
    views gather theirs and multiply by their scales in one array operation. Elementwise the same
    float64 products as each view's ``rows * scale``, so the same values."""

    def __init__(self) -> None:
        self.pool: np.ndarray | None = None
        self.n = 0

    def clear(self) -> None:
        """Forget every slot (the `_Fixed` entries were dropped: those made later take new ones)."""
        self.n = 0

    def add(self, rows: np.ndarray) -> int:
        """A slot holding ``rows``, or -1 when its shape is not the pool's (its view multiplies alone)."""
        pool = self.pool
        if pool is None:
            pool = self.pool = np.empty((64, *rows.shape))
        elif rows.shape != pool.shape[1:]:
            return -1
        if self.n == len(pool):
            pool = self.pool = np.concatenate([pool, np.empty_like(pool)])
        pool[self.n] = rows
        self.n += 1
        return self.n - 1

    def fill(self, fast: list[tuple[dict, int, float]]) -> None:
        """Sets each listed view's rows (its fields, its slot, its scale)."""
        assert self.pool is not None
        prod = self.pool[np.array([k for _, k, _ in fast], dtype=np.intp)] * np.array([s for _, _, s in fast])[:, None, None]
        flat = list(prod.reshape(-1, prod.shape[-1]))
        for i, (d, _, _) in enumerate(fast):
            d["remaining_one_node"], d["remaining_multi_node"] = flat[2 * i], flat[2 * i + 1]


class _Fixed:
    """One running segment's inputs to `movable_view` that stay put while it runs (its template,
    scale, move cost, request), so each slot computes only what moves with time. `view` gives
    the same `MovableJob` as `movable_view` (same expressions, same order), built without the
    dataclass constructor's per-field checks."""

    __slots__ = ("seg", "oracle", "checkpointable", "gt", "adaptive", "job", "template", "plain", "scale", "move_cost",
                 "requested", "rows", "const", "slot")

    def __init__(self, sim: Any, r: Any, oracle: bool, checkpointable: bool, pool: _Rows | None = None) -> None:
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
        # the view's fields that stay put, in `movable_job`'s terms
        self.slot = pool.add(self.rows) if pool is not None and self.rows is not None else -1  # its row in ``pool``
        self.const = {"preemptible": checkpointable, "requested_gpus": self.requested, "move_cost_s": self.move_cost,
                      "adaptive": False}

    def view(self, base: RunningJob, now: float, record: Any, fast: list | None = None) -> MovableJob:
        """The view at ``now``. With ``fast`` (a list), a view whose rows take `scaled`'s fast
        path is listed there as (its fields, its slot, its scale) and its rows are left for the caller
        to set (`_Rows`)."""
        r, t = self.seg, self.template
        start, predicted_end = base.start_time, base.predicted_end
        rem = share_left(r.frac_at_start, predicted_end - now, predicted_end - start - r.overhead)
        scale = self.scale * rem
        out = MovableJob.__new__(MovableJob)
        d = vars(out)
        d.update(vars(base))
        d.update(self.const)
        d["waited_s"] = waited_so_far(now, self.job.submit_time, record.run_s, start)
        d["work_left"] = t.work * scale
        d["moves"] = record.preemptions
        if self.rows is not None and 0.0 < scale < math.inf:  # `scaled`'s fast path, elementwise the same product
            if fast is not None and self.slot >= 0:
                fast.append((d, self.slot, scale))
            else:
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
