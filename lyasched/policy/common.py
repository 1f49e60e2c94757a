"""Shared pieces of the baseline policies: allowed counts, fitting, the FIFO queue memo, per-job memos,
the strict-FIFO family's loop. Every baseline is pure: it reads a `SlotState` and returns a
`SlotResult`, with no I/O and no clock, so the simulator and the live service get the same decisions
for the same state. Starts never use more than ``state.free`` on any node; placement goes through
`lyasched.policy.state.place` (one node first, then several). docs/baselines.md describes each rule.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Generic, Iterable, Sequence, TypeVar, cast

import numpy as np

from lyasched.policy.state import (
    Capabilities,
    Decision,
    Placement,
    RunningJob,
    SlotResult,
    SlotState,
    WaitingJob,
    apply,
    place,
)


def allowed_counts(w: WaitingJob) -> list[int]:
    """GPU counts the job may run on: the finite entries of either run row."""
    ok = np.isfinite(w.run_one_node) | np.isfinite(w.run_multi_node)
    return [int(i) + 1 for i in np.flatnonzero(ok)]


def nearest_allowed(w: WaitingJob, g: int) -> int | None:
    """``g`` if allowed, else the nearest allowed count (the smaller one on a tie); None if none."""
    if 1 <= g <= len(w.run_one_node):
        if math.isfinite(w.run_one_node[g - 1]) or math.isfinite(w.run_multi_node[g - 1]):
            return g
    counts = allowed_counts(w)
    if not counts:
        return None
    return min(counts, key=lambda c: (abs(c - g), c))


@dataclass(frozen=True)
class Fit:
    placement: Placement
    run_time: float  # predicted run time for this placement (one-node or multi-node row)


class Pool:
    """Free GPUs per node, with placements memoised until the next change.

    `place` scans (and for several nodes sorts) every node; in one slot thousands of waiting
    jobs ask for the same few GPU counts against the same free vector, so the answer is cached.
    """

    def __init__(self, free: Iterable[int]) -> None:
        self.free = list(free)
        self.total = sum(self.free)
        self._memo: dict[tuple[int, bool], Placement | None] = {}

    def place(self, g: int, one_node: bool) -> Placement | None:
        key = (g, one_node)
        if key not in self._memo:
            self._memo[key] = place(self.free, g, one_node) if g <= self.total else None
        return self._memo[key]

    def take(self, placement: Placement) -> None:
        apply(self.free, placement)
        self.total -= sum(n for _, n in placement)
        self._memo.clear()


def fit(w: WaitingJob, g: int, free: Sequence[int] | Pool) -> Fit | None:
    """Place ``w`` on ``g`` GPUs in ``free``: packed on one node if possible, else over several."""
    if not 1 <= g <= len(w.run_one_node):
        return None
    pool = free if isinstance(free, Pool) else None
    t1 = float(w.run_one_node[g - 1])
    if math.isfinite(t1):
        p = pool.place(g, True) if pool else place(cast(Sequence[int], free), g, one_node=True)
        if p is not None:
            return Fit(p, t1)
    tm = float(w.run_multi_node[g - 1])
    if math.isfinite(tm):
        p = pool.place(g, False) if pool else place(cast(Sequence[int], free), g, one_node=False)
        if p is not None:
            return Fit(p, tm)
    return None


Shape = tuple[int, bool, bool]  # (GPU count, one-node row finite, multi-node row finite)


def shape_of(w: WaitingJob, g: int) -> Shape:
    """What `fit` looks at in a job: jobs of one shape fit the same way on the same free GPUs."""
    return g, math.isfinite(w.run_one_node[g - 1]), math.isfinite(w.run_multi_node[g - 1])


def fit_shape(shape: Shape, free: Sequence[int] | Pool) -> Placement | None:
    """`fit`'s placement for any job of this shape."""
    g, one, multi = shape
    pool = free if isinstance(free, Pool) else None
    p = None
    if one:
        p = pool.place(g, True) if pool else place(cast(Sequence[int], free), g, one_node=True)
    if p is None and multi:
        p = pool.place(g, False) if pool else place(cast(Sequence[int], free), g, one_node=False)
    return p


def _release(free: list[int], placement: Placement) -> None:
    for node, n in placement:
        free[node] += n


_work = attrgetter("work")
_submit = attrgetter("submit_time")
_job_id = attrgetter("job_id")
_start_time = attrgetter("start_time")
_preemptible = attrgetter("preemptible")
_attained = attrgetter("attained")
_gpus = attrgetter("gpus")
T = TypeVar("T")


class PerJob(Generic[T]):
    """Per-job derived data (allowed count, sort key...) memoised by `WaitingJob` identity.

    The simulator and the service hand a policy the same `WaitingJob` objects slot after
    slot (as `lyasched.policy.rowcache.RowCache` relies on), so deriving a job's data once
    per job instead of once per slot keeps a decision over thousands of waiting jobs cheap.
    Entries hold their object, so an id cannot be reused while cached. A pure memo: a new
    object (or a cleared cache) gives the same value.
    """

    def __init__(self, make: Callable[[WaitingJob], T]) -> None:
        self.make = make
        self.memo: dict[int, tuple[WaitingJob, T]] = {}

    def __call__(self, w: WaitingJob) -> T:
        e = self.memo.get(id(w))
        if e is None:
            e = self.memo[id(w)] = (w, self.make(w))
        return e[1]

    def prune(self, waiting: Sequence[WaitingJob]) -> None:
        """Forget jobs no longer waiting, once the memo holds many more than are waiting."""
        if len(self.memo) > 2 * len(waiting) + 4096:
            memo = self.memo
            self.memo = {k: memo[k] for k in map(id, waiting) if k in memo}


class Queue:
    """The waiting jobs' submit times, work (and any ``columns``) as arrays, kept across slots.

    Between two slots the simulator (and the service) removes the jobs the policy started and
    appends arrivals, reusing the other `WaitingJob` objects. When the new queue is exactly
    that (checked by identity, at C speed), the arrays are updated by deleting and appending;
    otherwise they are rebuilt. A pure memo: the arrays always equal the state's. q and z are
    summed left to right with ``cumsum``, bit-identical to ``sum()`` over the jobs left waiting.
    """

    def __init__(self, **columns: Callable[[WaitingJob], float]) -> None:
        self.make: dict[str, Callable[[WaitingJob], float]] = {"submit": _submit, "work": _work, **columns}
        self.cols = {k: np.empty(0) for k in self.make}
        self.jobs: tuple[WaitingJob, ...] = ()
        self.ordered = True  # self.jobs is in FIFO order (submit time, then id)
        self.gone: list[int] = []  # positions the last result() started
        self.left = self.cols  # the columns without those
        self.now = 0.0

    @property
    def submit(self) -> np.ndarray:
        return self.cols["submit"]

    def load(self, state: SlotState) -> Queue:
        cur = state.waiting
        self.now = state.now
        if cur is self.jobs:
            self.gone = []
            return self
        prev, gone = self.jobs, self.gone
        if _is_prefix(gone):
            keep = prev[len(gone) :]
        else:
            keep_l = list(prev)
            for i in sorted(gone, reverse=True):  # memmove per started job, no Python loop per job
                del keep_l[i]
            keep = tuple(keep_l)
        m = len(keep)
        try:
            same = len(cur) >= m and (cur if len(cur) == m else cur[:m]) == keep
        except ValueError:  # two distinct but equal-looking jobs: compare numpy rows -> ambiguous
            same = False
        if same:
            new = cur[m:]
            left = self.left if gone else self.cols
            for k, f in self.make.items():
                col = left[k]
                if new:
                    col = np.concatenate([col, np.fromiter(map(f, new), dtype=float, count=len(new))])
                self.cols[k] = col
            start = max(m - 1, 0) if self.ordered else 0
        else:
            for k, f in self.make.items():
                self.cols[k] = np.fromiter(map(f, cur), dtype=float, count=len(cur))
            start = 0
        self.jobs, self.gone = cur, []
        self.ordered = _in_order(cur, self.submit, start)
        return self

    def fifo(self) -> Sequence[int]:
        """Positions in FIFO order: ``range(n)`` when already so ordered, as the simulator's queue is."""
        waiting = self.jobs
        if self.ordered:
            return range(len(waiting))
        return sorted(range(len(waiting)), key=lambda i: (waiting[i].submit_time, waiting[i].job_id))

    def result(self, starts: list[Decision], started: Iterable[int], preempt: Sequence[str] = (), **info) -> SlotResult:
        """The SlotResult, with q (work left waiting) and z (waiting time of jobs left waiting).

        ``started``: positions in ``state.waiting`` of the jobs in ``starts``."""
        gone = list(started)
        self.gone = gone
        self.left = left = _drop(self.cols, gone)  # the next slot's columns, if it only lost these jobs
        work, submit = left["work"], left["submit"]
        q = float(np.cumsum(work)[-1]) if len(work) else 0.0
        z = float(np.cumsum(self.now - submit)[-1]) if len(work) else 0.0
        return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=q, z=z, info=dict(info))


def _is_prefix(positions: list[int]) -> bool:
    return bool(positions) and positions[0] == 0 and positions[-1] == len(positions) - 1 and positions == sorted(positions)


def _drop(cols: dict[str, np.ndarray], gone: list[int]) -> dict[str, np.ndarray]:
    """The columns without the rows at ``gone``: views when those are the first rows (FIFO starts)."""
    if not gone:
        return cols
    if _is_prefix(gone):
        return {k: c[len(gone) :] for k, c in cols.items()}
    keep = np.ones(len(cols["work"]), dtype=bool)
    keep[gone] = False
    return {k: c[keep] for k, c in cols.items()}


def _in_order(jobs: Sequence[WaitingJob], submit: np.ndarray, start: int) -> bool:
    """Are ``jobs[start:]`` in FIFO order (submit time, then id)?"""
    d = np.diff(submit[start:])
    if (d < 0).any():
        return False
    return not any(jobs[i].job_id > jobs[i + 1].job_id for i in (np.flatnonzero(d == 0) + start).tolist())


def _decision(w: WaitingJob, f: Fit, g: int, reason: str, score: float = 0.0) -> Decision:
    return Decision(job_id=w.job_id, gpus=g, placement=f.placement, score=score, reason=reason)


class _Base:
    name = ""
    capabilities = Capabilities()

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed})"


# --------------------------------------------------------------------------- strict FIFO family


class _StrictFifo(_Base):
    """Start jobs in submit order on ``count(w)`` GPUs; stop at the first that does not fit."""

    capabilities = Capabilities(time_invariant=True)  # reads no clock: nothing changes until a job arrives or ends

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._count = PerJob(self.count)
        self._queue = Queue()

    def count(self, w: WaitingJob) -> int | None:
        raise NotImplementedError

    def why(self, w: WaitingJob, g: int) -> str:
        raise NotImplementedError

    def decide(self, state: SlotState) -> SlotResult:
        queue = self._queue.load(state)
        self._count.prune(state.waiting)
        free = Pool(state.free)
        starts: list[Decision] = []
        started: list[int] = []
        blocked = None
        waiting = state.waiting
        for i in queue.fifo():
            w = waiting[i]
            g = self._count(w)
            if g is None:  # no allowed count at all: it can never run, so it must not block
                continue
            f = fit(w, g, free)
            if f is None:
                blocked = w.job_id
                break
            free.take(f.placement)
            starts.append(_decision(w, f, g, self.why(w, g)))
            started.append(i)
        return queue.result(starts, started, blocked_by=blocked)
