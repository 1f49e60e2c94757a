"""The type dimension of a typed slot (docs/types.md), shared by lyapunov and elastic.

A typed cluster is decided one GPU type at a time, each type a cluster of its own, by the
policy's untyped rule: so a job never mixes types and chooses its type with its count.
Kept out of lyapunov.py so that the rule for one type and the walk over types read apart.
"""

from __future__ import annotations

import math
from dataclasses import replace as _replace
from itertools import repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from lyasched.policy.state import (Decision, SlotResult, SlotState, WaitingJob, capabilities, type_slice, unslice,
                                   untyped)

if TYPE_CHECKING:
    from lyasched.policy.lyapunov import LyapunovPolicy


def type_order(state: SlotState, sample: int = 32) -> list[str]:
    """The cluster's GPU types, fastest first for the waiting jobs: by the mean, over the first
    ``sample`` typed waiting jobs, of their best run on the type over their best on any type."""
    types = list(dict.fromkeys(state.node_types))
    ref: dict[str, list[float]] = {t: [] for t in types}
    for w in state.waiting[:sample]:
        if w.by_type is None:
            continue
        runs = {t: v.best_run for t, v in w.by_type.items() if t in ref}
        base = min(runs.values(), default=math.inf)
        if math.isfinite(base) and base > 0:
            for t, r in runs.items():
                ref[t].append(r / base)
    return sorted(types, key=lambda t: (float(np.mean(ref[t])) if ref[t] else math.inf, types.index(t)))


def decide_by_type(policy: LyapunovPolicy, state: SlotState, decide: Callable[[Any, SlotState], SlotResult]) -> SlotResult:
    """The type dimension of a slot (docs/types.md): each GPU type in turn, fastest
    first, is a cluster of its own (`type_slice`: its nodes, its running jobs, the waiting jobs
    that allow it with their rows there), decided by the untyped rule ``decide``; the jobs it
    starts leave the later types' queues. So a job runs on one type only, chooses its type with
    its count (the fastest where the scores start it), and a job that the fast type leaves
    waiting competes for the next type's GPUs with its rows there. Q and Z are those left after
    the slot. An unaware policy (``types_aware`` False) decides on `untyped` instead."""
    if not policy.types_aware:
        return decide(policy, untyped(state))
    waiting = state.waiting
    n = len(waiting)
    order = type_order(state)
    # Each waiting job's rows by type, shared by all the types' slices: a started job's entry
    # becomes empty, so the later types' slices drop it (C-speed maps: no Python frame per job).
    views: list[dict[str, WaitingJob]] = list(map(_BY_TYPE, waiting))
    if set(map(type, views)) != {dict}:  # an untyped job (None): its own rows on every type
        views = [{t: w for t in order} if v is None else dict(v) for w, v in zip(waiting, views)]
    pos: dict[str, int] | None = None  # job id -> index in ``waiting``, built at the first start
    starts: list[Decision] = []
    preempt: list[str] = []
    info: dict = {"solver": "by-type"}
    wake = math.inf
    done: list[int] = []
    caps = capabilities(policy)
    for t in order:
        nodes, idx = type_slice(state, t, ())
        jobs = tuple(filter(None, map(_GET, views, repeat(t))))
        if not jobs and not (caps.moves and nodes.running):
            continue
        if sum(nodes.free) == 0 and not caps.preemptive:
            continue  # nothing starts there before a release (an event)
        sub = _replace(nodes, waiting=jobs)
        if policy.cross_type:
            policy._type_best = np.fromiter(map(_BEST_ANY, jobs), dtype=float, count=len(jobs))
        try:
            res = decide(policy, sub)
        finally:
            policy._type_best = None
        if res.starts:
            if pos is None:
                pos = dict(zip(map(_JOB_ID, waiting), range(n)))
            for d in res.starts:
                i = pos.get(d.job_id)
                if i is not None:  # (elastic also restarts running jobs: not in ``waiting``)
                    views[i] = _GONE
                    done.append(i)
            starts += [unslice(d, idx) for d in res.starts]
        preempt += res.preempt
        w = res.info.get("wake_at") if isinstance(res.info, dict) else None
        wake = min(wake, math.inf if w is None and not jobs else (state.now if w is None else float(w)))
        if "moves" in res.info:
            info.setdefault("moves", {}).update(res.info["moves"])
    if not starts and not preempt:
        info["wake_at"] = wake
    work = np.fromiter(map(_WORK, waiting), dtype=float, count=n)
    wait = state.now - np.fromiter(map(_SUBMIT, waiting), dtype=float, count=n)
    np.maximum(wait, 0.0, out=wait)
    if done:
        keep = np.ones(n, dtype=bool)
        keep[done] = False
        work, wait = work[keep], wait[keep]
    return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=float(work.sum()), z=float(wait.sum()), info=info)


_JOB_ID, _WORK, _SUBMIT = attrgetter("job_id"), attrgetter("work"), attrgetter("submit_time")
_BEST_ANY, _BY_TYPE = attrgetter("best_any"), attrgetter("by_type")
_GET = dict.get
_GONE: dict[str, WaitingJob] = {}  # a started job's views: none left
