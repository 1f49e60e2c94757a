"""Elastic's moves of running jobs across GPU types (docs/types.md, "Moves across types").

A typed slot decides one type at a time (`bytype.decide_by_type`), so elastic's shrink, grow and
suspend see only the running jobs of the slot's type. After the slot, a running checkpointable job
that the slot left alone, on one type, and that has run ``min_move_interval`` since its last start
or move (elastic's rule for every move) moves to one node of another type it allows whose GPUs the
slot left free, when its predicted time left there (at the count that gives its least time left
on the free GPUs of that type's node with most free GPUs) plus its move cost is below its time
left where it runs: the change of its completion time, the only term such a move changes (no job
starts or waits the more for it, none leaves Q or Z). Largest gain first, each placed by the
placement rule on the type's nodes.

A running job's rows on another type are those it had when it last waited (`bytype.TypeMemo`, the
builder's rows on each type it allows), scaled by how its time left on its own type has changed
since, as sia does. Pure apart from that memo, which both replay and `serve` keep in the policy.
The steps below `type_moves` are also those of the variants not adopted (benchmarks/experiments/
sia_gap.py, type_replan.py), which differ only where they say.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

import numpy as np

from lyasched.policy.bytype import TypeMemo
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import Placement, one_node_placement
from lyasched.policy.state import Decision, RunningJob, SlotResult, SlotState, WaitingJob

if TYPE_CHECKING:
    from lyasched.policy.elastic import ElasticPolicy


def with_type_moves(policy: ElasticPolicy, state: SlotState, res: SlotResult) -> SlotResult:
    """``res`` (a typed slot's result) with the moves across types added (module docstring)."""
    memo = vars(policy).get("_type_memo")
    if not state.running or not isinstance(memo, TypeMemo):
        return res
    more, gone = type_moves(policy, state, memo, res)
    if not more:
        return res
    info = dict(res.info)
    info.pop("wake_at", None)
    info.setdefault("moves", {}).update({d.job_id: d.reason for d in more})
    return SlotResult(starts=tuple(res.starts) + tuple(more), preempt=tuple(res.preempt) + tuple(gone),
                      q=res.q, z=res.z, info=info)


def type_moves(policy: ElasticPolicy, state: SlotState, memo: TypeMemo, res: SlotResult) -> tuple[list[Decision], list[str]]:
    """The moves across types after ``res``: the resizes (starts) and the jobs they preempt."""
    types = state.node_types
    running = {r.job_id: r for r in state.running}
    free, touched = left_free(state, res, running)

    def room(t: str) -> int:
        return max((free[n] for n, x in enumerate(types) if x == t), default=0)

    cands: list[tuple[float, str, str, int]] = []  # (change of its completion time, job, type, count)
    for r in left_alone(state, touched):
        if state.now < r.start_time + policy._move_interval(r):
            continue
        seen = rows_now(memo, types, r)
        if seen is None:
            continue
        u, left, scale, rows = seen
        cost = policy._cost(r)
        if cost >= policy.min_move_interval:  # as elastic's `_movable`
            continue
        for t, v in rows.items():
            k = room(t)
            if t == u or k <= 0:
                continue
            est, g = least_left(v.run_one_node, k, scale, cost)
            if est < left:
                cands.append((est - left, r.job_id, t, g))
    return take(cands, running, free, lambda t, g: one_node_placement([f if types[n] == t else 0 for n, f in enumerate(free)], g))


def left_free(state: SlotState, res: SlotResult, running: dict[str, RunningJob]) -> tuple[list[int], set[str]]:
    """Each node's GPUs free after ``res`` (its preemptions given back, its starts taken) and the
    jobs it touched; ``running``: the state's running jobs by id."""
    free = list(state.free)
    for jid in res.preempt:
        r0 = running.get(jid)
        if r0 is not None:
            for n, k in r0.placement:
                free[n] += k
    for d in res.starts:
        for n, k in d.placement:
            free[n] -= k
    return free, set(res.preempt) | {d.job_id for d in res.starts}


def left_alone(state: SlotState, touched: set[str]) -> Iterator[MovableJob]:
    """The running checkpointable jobs with rows to move by that the slot left alone (``touched``:
    those it started or preempted), in the state's order."""
    for r in state.running:
        if r.job_id not in touched and isinstance(r, MovableJob) and r.preemptible and r.remaining_one_node is not None:
            yield r


def rows_now(memo: TypeMemo, types: tuple[str, ...], r: MovableJob) -> tuple[str, float, float, Mapping[str, WaitingJob]] | None:
    """A running job on one type: that type, its time left there, the scale from its rows of when
    it last waited (``memo``) to now (time left over its run there then, as sia does), and those
    rows by type; None when it spans types, has no rows, or either time is not positive and finite."""
    on = {types[n] for n, _ in r.placement}
    row = memo.by_job.get(r.job_id)
    if len(on) != 1 or row is None:
        return None
    u = on.pop()
    seen = memo.keep[row].by_type or {}
    if u not in seen:
        return None
    spans = len(r.placement) > 1
    left = r.remaining(r.gpus, spans)
    then = seen[u].run_time(r.gpus, spans)
    if not (0.0 < then < math.inf and 0.0 < left < math.inf):
        return None
    return u, left, left / then, seen


def least_left(row: np.ndarray, k: int, scale: float, cost: float) -> tuple[float, int]:
    """A move's least predicted time left on one node of up to ``k`` GPUs (``row``, a run there,
    times ``scale``, plus the move ``cost``) and the count that gives it."""
    ests = np.asarray(row[:k], dtype=float) * scale + cost
    g = int(np.argmin(ests))
    return float(ests[g]), g + 1


def take(cands: list[tuple[float, str, str, int]], running: dict[str, RunningJob], free: list[int],
         place: Callable[[str, int], Placement | None]) -> tuple[list[Decision], list[str]]:
    """The moves (change of completion time, job, type, count) made largest gain first, each job
    once, each where ``place(type, count)`` puts it on ``free`` (updated as they are made)."""
    more: list[Decision] = []
    gone: list[str] = []
    for _gain, jid, t, g in sorted(cands):
        if jid in gone:
            continue
        pl = place(t, g)
        if pl is None:
            continue
        free[pl[0][0]] -= g
        for m, k in running[jid].placement:
            free[m] += k
        gone.append(jid)
        more.append(Decision(jid, g, pl, reason=f"moved to {g} GPUs of type {t}"))
    return more, gone
