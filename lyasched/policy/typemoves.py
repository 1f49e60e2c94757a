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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lyasched.policy.bytype import TypeMemo
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import one_node_placement
from lyasched.policy.state import Decision, SlotResult, SlotState

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
    free = list(state.free)
    running = {r.job_id: r for r in state.running}
    for jid in res.preempt:
        r0 = running.get(jid)
        if r0 is not None:
            for n, k in r0.placement:
                free[n] += k
    for d in res.starts:
        for n, k in d.placement:
            free[n] -= k
    touched = set(res.preempt) | {d.job_id for d in res.starts}

    def room(t: str) -> int:
        return max((free[n] for n, x in enumerate(types) if x == t), default=0)

    cands: list[tuple[float, str, str, int]] = []  # (change of its completion time, job, type, count)
    for r in state.running:
        if r.job_id in touched or not isinstance(r, MovableJob) or not r.preemptible or r.remaining_one_node is None:
            continue
        if state.now < r.start_time + policy._move_interval(r):
            continue
        on = {types[n] for n, _ in r.placement}
        row = memo.by_job.get(r.job_id)
        if len(on) != 1 or row is None:
            continue
        u = on.pop()
        seen = memo.keep[row].by_type or {}
        if u not in seen:
            continue
        spans = len(r.placement) > 1
        left = r.remaining(r.gpus, spans)
        then = seen[u].run_time(r.gpus, spans)
        if not (0.0 < then < math.inf and 0.0 < left < math.inf):
            continue
        scale, cost = left / then, policy._cost(r)
        if cost >= policy.min_move_interval:  # as elastic's `_movable`
            continue
        for t, v in seen.items():
            k = room(t)
            if t == u or k <= 0:
                continue
            ests = np.asarray(v.run_one_node[:k], dtype=float) * scale + cost
            g = int(np.argmin(ests))
            if ests[g] < left:
                cands.append((float(ests[g]) - left, r.job_id, t, g + 1))
    more: list[Decision] = []
    gone: list[str] = []
    for _gain, jid, t, g in sorted(cands):
        if jid in gone:
            continue
        pl = one_node_placement([f if types[n] == t else 0 for n, f in enumerate(free)], g)
        if pl is None:
            continue
        free[pl[0][0]] -= g
        for m, k in running[jid].placement:
            free[m] += k
        gone.append(jid)
        more.append(Decision(jid, g, pl, reason=f"moved to {g} GPUs of type {t}"))
    return more, gone
