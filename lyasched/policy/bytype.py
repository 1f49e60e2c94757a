"""The type dimension of a typed slot (docs/types.md), shared by lyapunov and elastic.

A typed cluster is decided one GPU type at a time, each type a cluster of its own, by the
policy's untyped rule: so a job never mixes types and chooses its type with its count. A job
joins a slower type's queue only when its run there beats waiting for its fastest type
(`TypeMemo`, `_queues`). Kept out of lyapunov.py so that the rule for one type and the walk over
types read apart.
"""

from __future__ import annotations

import math
from dataclasses import replace as _replace
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from lyasched.policy.rowcache import RowCache
from lyasched.policy.state import (Decision, SlotResult, SlotState, WaitingJob, capabilities, type_nodes, type_slice,
                                   unslice, untyped)

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


class TypeMemo:
    """Per waiting job, what a typed slot reads of it, as arrays over the cluster's types: its view
    on each type (`WaitingJob.by_type`; None where it does not allow the type, the job itself on
    every type when it is untyped), its best run there (inf where not allowed; -inf when untyped:
    never left out), its fastest type, the GPU-seconds of its request there (the one-node run at the
    requested count, else the several-node one, else its best run, times the count), its id, work
    and submit time. Kept across slots, since the simulator and the service hand over the same
    `WaitingJob` objects slot after slot (as `rowcache.RowCache`): a slot then reads them with numpy
    instead of a Python step per job and type. Entries hold their object, so an id is not reused
    while cached. A pure memo: results are unchanged."""

    _FIELDS = ("view", "best", "fast", "gsec", "ids", "work", "submit")

    def __init__(self) -> None:
        self._reset((), 0)

    def _reset(self, types: tuple[str, ...], capacity: int) -> None:
        self.gen = object()  # a new one at each reset: the rows' numbers start over (`RowCache.cut`'s keys)
        self.types = types
        self.index: dict[int, int] = {}
        self.keep: list[WaitingJob] = []
        self.by_job: dict[str, int] = {}  # job id -> its latest row (a start's row, `decide_by_type`)
        # `select`'s last (jobs, their rows), and the (jobs, rows) its next call most likely begins with
        # (the same, less the jobs that started: `left`): checked object by object, never trusted
        self._last: tuple[Sequence[WaitingJob], np.ndarray] | None = None
        self._next: tuple[Sequence[WaitingJob], np.ndarray] | None = None
        self._gone: list[bool] | None = None  # ``_next`` is ``_last`` less the jobs False here (`left`)
        # the slot's walk over types, kept while what it reads is the same: (node types, each type's
        # nodes), and (the first waiting jobs `type_order` samples, the order it gave)
        self.nodes: tuple[Sequence[str], dict[str, tuple[int, ...]]] | None = None
        self.order: tuple[Sequence[WaitingJob], list[str]] | None = None
        width = len(types)
        self.view = np.empty((capacity, width), dtype=object)
        self.best = np.empty((capacity, width))
        self.fast = np.empty(capacity, dtype=np.intp)
        self.gsec = np.empty(capacity)
        self.ids = np.empty(capacity, dtype=object)
        self.work = np.empty(capacity)
        self.submit = np.empty(capacity)

    def select(self, jobs: Sequence[WaitingJob], types: tuple[str, ...]) -> np.ndarray:
        """The memo's rows of ``jobs``, in order (added for the jobs not seen before)."""
        n = len(jobs)
        if types != self.types or len(self.index) > 4 * n + 4096:
            self._reset(types, max(1024, 2 * n))
        last = self._last
        if last is not None and last[0] is jobs:
            return last[1]
        nxt, keep = self._next, self._gone
        k = 0
        sel = np.empty(n, dtype=np.intp)
        if nxt is not None and keep is not None:  # the last jobs less those that started, compared lazily
            m = sum(keep)
            if m <= n and all(map(is_, jobs, compress(nxt[0], keep))):
                k = m
                sel[:k] = nxt[1][keep]
        elif nxt is not None and len(nxt[0]) <= n and all(map(is_, jobs, nxt[0])):  # (map stops at the shorter)
            k = len(nxt[0])
            sel[:k] = nxt[1]
        if k < n:  # no Python frame per job: -1 for the jobs not seen before
            got = np.fromiter(map(self.index.get, map(id, jobs[k:]), repeat(-1)), dtype=np.intp, count=n - k)
            for pos in np.flatnonzero(got < 0).tolist():
                got[pos] = self._add(jobs[k + pos])
            sel[k:] = got
        self._last = self._next = (jobs, sel)
        self._gone = None
        return sel

    def left(self, jobs: Sequence[WaitingJob], started: list[int]) -> None:
        """The jobs at positions ``started`` of ``jobs`` (the last `select` call's) start now: the next
        call's jobs are likely the others, in order, then new ones (`select` checks)."""
        last = self._last
        if last is not None and last[0] is jobs and started:
            keep = [True] * len(jobs)
            for p in started:
                keep[p] = False
            self._next, self._gone = last, keep

    def walk(self, state: SlotState) -> tuple[list[str], dict[str, tuple[int, ...]]]:
        """`type_order` and `type_nodes` of ``state``, kept while the node types and the first
        waiting jobs (`type_order`'s sample) are the same objects."""
        nt = state.node_types
        if self.nodes is None or not (self.nodes[0] is nt or self.nodes[0] == nt):
            self.nodes = (nt, type_nodes(nt))
            self.order = None
        head = state.waiting[:_SAMPLE]
        order = self.order
        if order is None or len(order[0]) != len(head) or not all(map(is_, head, order[0])):
            order = self.order = (head, type_order(state, _SAMPLE))
        return order[1], self.nodes[1]

    def _add(self, w: WaitingJob) -> int:
        i = len(self.keep)
        if i >= self.best.shape[0]:
            grow = max(1024, i)
            for name in self._FIELDS:
                a = getattr(self, name)
                setattr(self, name, np.concatenate([a, np.empty((grow, *a.shape[1:]), dtype=a.dtype)]))
        self.ids[i], self.work[i], self.submit[i] = w.job_id, w.work, w.submit_time
        if w.by_type is None:  # untyped: its own rows everywhere, never left out of a type
            self.view[i] = [w] * len(self.types)
            self.best[i] = -math.inf
            self.fast[i] = 0
            self.gsec[i] = 0.0
        else:
            views = [w.by_type.get(t) for t in self.types]
            row = [v.best_run if v is not None else math.inf for v in views]
            f = int(np.argmin(row))
            v = views[f]
            g = max(1, w.requested_gpus)
            run = math.inf
            if v is not None:
                run = min(v.run_time(g, False), v.run_time(g, True))
                if not math.isfinite(run):
                    run = v.best_run
            self.view[i] = views
            self.best[i] = row
            self.fast[i] = f
            self.gsec[i] = run * g if math.isfinite(run) else 0.0
        self.keep.append(w)
        self.index[id(w)] = i
        self.by_job[w.job_id] = i
        return i


def _queues(memo: TypeMemo, sel: np.ndarray, state: SlotState) -> np.ndarray:
    """Which waiting jobs (the memo's rows ``sel``) join each type's queue this slot (jobs x types):
    those that allow the type and whose best run there is at most their best on their fastest type
    plus that type's backlog, the GPU-seconds left of the jobs running on it (to their predicted
    end) and of the waiting jobs whose fastest type it is (at their request), over its GPUs: a fluid
    estimate of the wait for the fast type. A job the fast GPUs would finish sooner, even after that
    wait, does not take slow ones just because they are free; when the fast type is swamped it does."""
    best, fast, gsec = memo.best[sel], memo.fast[sel], memo.gsec[sel]
    width = len(memo.types)
    col = {t: i for i, t in enumerate(memo.types)}
    node_t = np.fromiter(map(col.__getitem__, state.node_types), dtype=np.intp, count=len(state.node_types))
    cap = np.bincount(node_t, weights=np.asarray(state.free, dtype=float), minlength=width)
    busy = np.bincount(fast, weights=gsec, minlength=width).astype(float)
    for r in state.running:
        for n, g in r.placement:
            cap[node_t[n]] += g
        ts = {int(node_t[n]) for n, _ in r.placement}
        if len(ts) == 1 and math.isfinite(r.predicted_end):
            busy[ts.pop()] += max(0.0, r.predicted_end - state.now) * r.gpus
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = np.where(cap > 0, busy / np.maximum(cap, 1.0), math.inf)
    limit = best[np.arange(len(fast)), fast] + wait[fast]
    return best <= limit[:, None]


def decide_by_type(policy: LyapunovPolicy, state: SlotState, decide: Callable[[Any, SlotState], SlotResult],
                   backlog: bool = True) -> SlotResult:
    """The type dimension of a slot (docs/types.md): each GPU type in turn, fastest
    first, is a cluster of its own (`type_slice`: its nodes, its running jobs, the waiting jobs
    that allow it with their rows there), decided by the untyped rule ``decide``; the jobs it
    starts leave the later types' queues. So a job runs on one type only, chooses its type with
    its count (the fastest where the scores start it), and a job that the fast type leaves
    waiting competes for the next type's GPUs with its rows there, if its run there beats
    waiting for its fastest type (`_queues`; ``backlog`` False: always, the rule measured before
    it in docs/experiments.md). Q and Z are those left after the slot. An unaware policy
    (``types_aware`` False) decides on `untyped` instead."""
    if not policy.types_aware:
        return decide(policy, untyped(state))
    waiting = state.waiting
    n = len(waiting)
    memo = vars(policy).get("_type_memo")
    if not isinstance(memo, TypeMemo):
        memo = vars(policy)["_type_memo"] = TypeMemo()
    types = tuple(dict.fromkeys(state.node_types))
    sel = memo.select(waiting, types)
    joins = memo.best[sel] < math.inf  # the types it allows
    if backlog:
        joins &= _queues(memo, sel, state)
    rows: dict[str, RowCache] = vars(policy).setdefault("_type_rows", {})  # GPU type -> its `RowCache`
    where: np.ndarray | None = None  # memo row -> index in ``waiting`` (-1: not waiting), at the first start
    pos: dict[str, int] | None = None  # job id -> index in ``waiting``, built only if ``where`` cannot tell
    starts: list[Decision] = []
    preempt: list[str] = []
    info: dict = {"solver": "by-type"}
    wake = math.inf
    done: list[int] = []
    caps = capabilities(policy)
    order, nodes_of = memo.walk(state)
    for t in order:
        nodes, idx = type_slice(state, t, (), nodes_of[t])
        col = types.index(t)
        msel = sel[joins[:, col]]
        jobs: tuple[WaitingJob, ...] = tuple(memo.view[msel, col].tolist())  # their rows there
        if not jobs and not (caps.moves and nodes.running):
            continue
        if sum(nodes.free) == 0 and not caps.preemptive:
            continue  # nothing starts there before a release (an event)
        sub = _replace(nodes, waiting=jobs)
        if policy.cross_type:
            policy._type_best = np.fromiter(map(_BEST_ANY, jobs), dtype=float, count=len(jobs))
        # each type its own row cache: one shared by queues of very different sizes would be
        # cleared by the small one (`RowCache` keeps about 4x its last call's jobs) and refilled
        # by the large one, every slot
        own = policy._rows
        mine = rows.get(t)
        policy._rows = mine if mine is not None else rows.setdefault(t, RowCache())
        policy._type_keys = (memo.gen, msel, jobs)  # the row cache finds the jobs by their memo rows
        try:
            res = decide(policy, sub)
        finally:
            policy._type_best = None
            policy._type_keys = None
            policy._rows = own
        if res.starts:
            if where is None:
                where = np.full(len(memo.keep), -1, dtype=np.intp)
                where[sel] = np.arange(n)
            # each start's index in ``waiting``, by its latest memo row (no Python step per start)
            rs = np.fromiter(map(memo.by_job.get, map(_JOB_ID, res.starts), repeat(-1)), dtype=np.intp,
                             count=len(res.starts))
            at = np.where(rs >= 0, where[rs], -1)
            for k in np.flatnonzero(at < 0).tolist():  # not its latest row (or not waiting: elastic restarts running jobs)
                if pos is None:
                    pos = dict(zip(memo.ids[sel].tolist(), range(n)))
                i = pos.get(res.starts[k].job_id)
                at[k] = -1 if i is None else i
            at = at[at >= 0]
            joins[at] = False  # the later types' queues drop them
            done += at.tolist()
            starts += [unslice(d, idx) for d in res.starts]
        preempt += res.preempt
        w = res.info.get("wake_at") if isinstance(res.info, dict) else None
        wake = min(wake, math.inf if w is None and not jobs else (state.now if w is None else float(w)))
        if "moves" in res.info:
            info.setdefault("moves", {}).update(res.info["moves"])
    if not starts and not preempt:
        info["wake_at"] = wake
    work = memo.work[sel]
    wait = state.now - memo.submit[sel]
    np.maximum(wait, 0.0, out=wait)
    if done:
        memo.left(waiting, done)
        keep = np.ones(n, dtype=bool)
        keep[done] = False
        work, wait = work[keep], wait[keep]
    return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=float(work.sum()), z=float(wait.sum()), info=info)


_BEST_ANY = attrgetter("best_any")
_JOB_ID = attrgetter("job_id")
_SAMPLE = 32  # `type_order`'s sample of waiting jobs
