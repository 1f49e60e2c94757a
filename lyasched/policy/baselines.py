"""Baseline scheduling policies the Lyapunov policy is compared against.

Every policy is pure: it reads a `SlotState` and returns a `SlotResult`, with no I/O and no
clock, so the simulator and the live service get the same decisions for the same state.
Starts never use more than ``state.free`` on any node; placement goes through
`lyasched.policy.state.place` (one node first, then several). docs/baselines.md describes
each rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from dataclasses import dataclass
from operator import attrgetter
from typing import Callable, Generic, Iterable, Sequence, TypeVar

import numpy as np

from lyasched.policy.state import (
    Decision,
    Placement,
    RunningJob,
    SlotResult,
    SlotState,
    WaitingJob,
    apply,
    place,
)

__all__ = [
    "FixedOne",
    "RandomGpus",
    "Fifo",
    "Backfill",
    "SjfOracle",
    "Optimus",
    "Tiresias",
    "allowed_counts",
    "fit",
    "nearest_allowed",
]


# --------------------------------------------------------------------------- helpers


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
        p = pool.place(g, True) if pool else place(free, g, one_node=True)
        if p is not None:
            return Fit(p, t1)
    tm = float(w.run_multi_node[g - 1])
    if math.isfinite(tm):
        p = pool.place(g, False) if pool else place(free, g, one_node=False)
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
        p = pool.place(g, True) if pool else place(free, g, one_node=True)
    if p is None and multi:
        p = pool.place(g, False) if pool else place(free, g, one_node=False)
    return p


def _release(free: list[int], placement: Placement) -> None:
    for node, n in placement:
        free[node] += n


def fifo_order(waiting: Iterable[WaitingJob]) -> list[WaitingJob]:
    return sorted(waiting, key=lambda w: (w.submit_time, w.job_id))


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
    slot (as `lyasched.policy.lyapunov.RowCache` relies on), so deriving a job's data once
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
        self.make = {"submit": _submit, "work": _work, **columns}
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
    needs_true_runtimes = False

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def __repr__(self) -> str:
        return f"{type(self).__name__}(seed={self.seed})"


# --------------------------------------------------------------------------- strict FIFO family


class _StrictFifo(_Base):
    """Start jobs in submit order on ``count(w)`` GPUs; stop at the first that does not fit."""

    time_invariant = True  # the decision reads no clock: nothing changes until a job arrives or ends

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


class FixedOne(_StrictFifo):
    """Every job on one GPU, FIFO: the seed talk's baseline."""

    name = "fixed-1"

    def count(self, w: WaitingJob) -> int | None:
        counts = allowed_counts(w)
        return counts[0] if counts else None  # 1, unless memory forbids it

    def why(self, w: WaitingJob, g: int) -> str:
        return "fifo, 1 gpu" if g == 1 else f"fifo, 1 gpu not allowed, smallest allowed {g}"


def _hash_index(seed: int, job_id: str, n: int) -> int:
    """Uniform index in [0, n) from (seed, job_id): stable across processes (unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x00{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


class RandomGpus(_StrictFifo):
    """FIFO on a GPU count drawn uniformly from the job's allowed counts, once per job."""

    name = "random"

    def count(self, w: WaitingJob) -> int | None:
        counts = allowed_counts(w)
        return counts[_hash_index(self.seed, w.job_id, len(counts))] if counts else None

    def why(self, w: WaitingJob, g: int) -> str:
        return f"fifo, random count {g}"


class Fifo(_StrictFifo):
    """FIFO on the requested count, no skipping: Slurm without backfill."""

    name = "fifo"

    def count(self, w: WaitingJob) -> int | None:
        return nearest_allowed(w, w.requested_gpus)

    def why(self, w: WaitingJob, g: int) -> str:
        if g == w.requested_gpus:
            return f"fifo, requested {g}"
        return f"fifo, requested {w.requested_gpus} not allowed, nearest {g}"


# --------------------------------------------------------------------------- EASY backfill


class Backfill(_Base):
    """EASY backfill on the requested count, planning with users' time limits.

    Jobs start in FIFO order while they fit. The first that does not fit (the head) gets a
    reservation at the shadow time: the earliest expected end of running jobs after which it
    fits. A later job may start now if it fits now and either ends (now + time limit) by the
    shadow time, or leaves enough GPUs at the shadow time for the head (the "extra" GPUs).
    """

    name = "backfill"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        # a job's GPU count and "shape" (count, one-node allowed, multi-node allowed): whether
        # and where it fits depends on nothing else, so the scan treats jobs shape by shape
        self._shapes: dict[tuple[int, bool, bool], int] = {}
        self._shape_list: list[tuple[int, bool, bool]] = []
        self._job = PerJob(self._shape_of)
        self._queue = Queue(shape=lambda w: self._job(w)[1], limit=attrgetter("time_limit"))

    def _shape_of(self, w: WaitingJob) -> tuple[int | None, int]:
        g = nearest_allowed(w, w.requested_gpus)
        if g is None:
            return None, -1
        key = shape_of(w, g)
        if key not in self._shapes:
            self._shapes[key] = len(self._shape_list)
            self._shape_list.append(key)
        return g, self._shapes[key]

    def decide(self, state: SlotState) -> SlotResult:
        now = state.now
        queue = self._queue.load(state)
        self._job.prune(state.waiting)
        waiting = state.waiting
        order = queue.fifo()
        free = Pool(state.free)
        ends: list[tuple[float, Placement]] = [(max(r.expected_end, now), r.placement) for r in state.running]
        starts: list[Decision] = []
        started: list[int] = []
        head = None
        for k, i in enumerate(order):
            w = waiting[i]
            g = self._job(w)[0]
            if g is None:
                continue
            f = fit(w, g, free)
            if f is None:
                head = k
                break
            free.take(f.placement)
            ends.append((now + w.time_limit, f.placement))
            starts.append(_decision(w, f, g, f"fifo, requested {g}"))
            started.append(i)
        if head is None:  # every job started, or none can ever run: only an event changes that
            return queue.result(starts, started, head=None, shadow=None, **({} if starts else {"wake_at": math.inf}))

        hw = waiting[order[head]]
        hg = self._job(hw)[0]
        shadow, future = self._reservation(hw, hg, free.free, ends)
        # The later jobs in FIFO order, scanned as EASY backfill does one by one, but a shape at a
        # time: between two starts the free GPUs do not change, so every job of a shape fits the
        # same way (or not at all), and the next start is the first job whose shape may start.
        rest = np.arange(head + 1, len(order)) if isinstance(order, range) else np.asarray(order[head + 1 :], dtype=np.intp)
        rshape = queue.cols["shape"][rest].astype(np.intp)  # -1: no allowed count
        rend = now + queue.cols["limit"][rest]
        ends_by_shadow = np.isfinite(rend) & (rend <= shadow)
        live = [int(s) for s in np.flatnonzero(np.bincount(rshape + 1, minlength=len(self._shape_list) + 1)[1:])]
        delays_head: dict[Placement, bool] = {}  # candidate placement -> would it delay the head
        at = 0  # jobs rest[:at] have been passed over
        while free.total > 0 and at < len(rest):
            # per shape: every job may start (True), only those ending by the shadow time (False)
            any_job = np.zeros(len(self._shape_list) + 1, dtype=bool)  # last entry: shape -1
            by_shadow = np.zeros(len(self._shape_list) + 1, dtype=bool)
            for sid in live:  # all of them each time: a multi-node shape may fit once a node fills
                p = fit_shape(self._shape_list[sid], free)
                if p is None:
                    continue
                if future is not None and p not in delays_head:
                    after = list(future)  # future >= free on every node, so this never goes negative
                    apply(after, p)
                    delays_head[p] = fit(hw, hg, after) is None
                if future is None or not delays_head[p]:
                    any_job[sid] = True
                else:
                    by_shadow[sid] = True
            ok = any_job[rshape[at:]] | (by_shadow[rshape[at:]] & ends_by_shadow[at:])
            j = int(np.argmax(ok)) if len(ok) else 0
            if not len(ok) or not ok[j]:
                break
            at += j + 1
            i = int(rest[at - 1])
            w = waiting[i]
            g = self._job(w)[0]
            f = fit(w, g, free)
            end = now + w.time_limit
            if future is None:
                reason = f"backfill, head {hw.job_id} cannot start even when all running jobs end"
            elif math.isfinite(end) and end <= shadow:
                reason = f"backfill, ends by shadow time {shadow:.0f}"
            else:
                apply(future, f.placement)
                delays_head.clear()
                reason = f"backfill, uses extra gpus beyond head {hw.job_id}'s reservation"
            free.take(f.placement)
            starts.append(_decision(w, f, g, reason))
            started.append(i)
        info = {"head": hw.job_id, "shadow": shadow if future is not None else None}
        if not starts:
            info["wake_at"] = self._wake_at(state)
        return queue.result(starts, started, **info)

    @staticmethod
    def _wake_at(state: SlotState) -> float:
        """When a slot that started nothing could decide otherwise with no arrival or completion.

        Time enters only through running jobs' expected ends clamped to now, ``max(end, now)``:
        until ``now`` reaches the next expected end the reservation walks them in the same
        order and reaches the same free GPUs, and a job that did not end by the shadow time
        ends later still. (A shadow clamped to now moves with now, but ``now + limit <= now``
        stays false.) So nothing can change before that end.
        """
        now = state.now
        return min((r.expected_end for r in state.running if r.expected_end > now), default=math.inf)

    @staticmethod
    def _reservation(
        w: WaitingJob, g: int, free: Sequence[int], ends: list[tuple[float, Placement]]
    ) -> tuple[float, list[int] | None]:
        """Shadow time and the free GPUs per node at that time; (inf, None) if it never fits."""
        future = list(free)
        total = sum(future)
        for end, placement in sorted(ends, key=lambda e: e[0]):
            _release(future, placement)
            total += sum(n for _, n in placement)
            if total >= g and fit(w, g, future) is not None:
                return end, future
        return math.inf, None


# --------------------------------------------------------------------------- SJF oracle


class SjfOracle(_Base):
    """Shortest true run time first on the requested count, skipping jobs that do not fit."""

    name = "sjf-oracle"
    needs_true_runtimes = True  # the simulator builds this policy's rows from true run times

    @staticmethod
    def _time(w: WaitingJob, g: int) -> float:
        t = float(w.run_one_node[g - 1])
        return t if math.isfinite(t) else float(w.run_multi_node[g - 1])

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._key = PerJob(self._key_of)
        self._queue = Queue()

    def _key_of(self, w: WaitingJob) -> tuple[float, float, str, int] | None:
        g = nearest_allowed(w, w.requested_gpus)
        return None if g is None else (self._time(w, g), w.submit_time, w.job_id, g)

    def decide(self, state: SlotState) -> SlotResult:
        queue = self._queue.load(state)
        self._key.prune(state.waiting)
        free = Pool(state.free)
        keys = [(k, i) for i, k in enumerate(map(self._key, state.waiting)) if k is not None]
        keys.sort(key=lambda ki: ki[0][:3])
        starts: list[Decision] = []
        started: list[int] = []
        for (t, _, _, g), i in keys:
            if free.total == 0:
                break
            w = state.waiting[i]
            f = fit(w, g, free)
            if f is None:
                continue
            free.take(f.placement)
            starts.append(_decision(w, f, g, f"sjf, true time {t:.0f}s on {g}", score=t))
            started.append(i)
        return queue.result(starts, started)


# --------------------------------------------------------------------------- Optimus-style greedy


class Optimus(_Base):
    """Greedy GPU counts by marginal speed-up, as Optimus allocates by marginal gain.

    Each slot: in FIFO order start every waiting job that fits on its smallest allowed count;
    then, while GPUs remain, move the started job with the largest marginal gain to its next
    allowed count. Gain is ``(T(g) - T(g')) / (g' - g)``: seconds of predicted run time saved per
    extra GPU (``gain="absolute"``, the default, because the sum of completion times falls by
    exactly the seconds saved) or that divided by ``T(g)`` (``gain="relative"``). Stops when no
    step has a positive gain. Running jobs are never resized (no preemption).
    """

    name = "optimus"

    def __init__(self, seed: int = 0, gain: str = "absolute") -> None:
        super().__init__(seed)
        if gain not in ("absolute", "relative"):
            raise ValueError(f"gain must be 'absolute' or 'relative', not {gain!r}")
        self.gain = gain
        self._counts = PerJob(allowed_counts)
        self._queue = Queue()

    def decide(self, state: SlotState) -> SlotResult:
        queue = self._queue.load(state)
        self._counts.prune(state.waiting)
        pool = Pool(state.free)
        # per started job: [w, allowed counts, index into counts, Fit]
        alloc: list[list] = []
        started: list[int] = []
        for i in queue.fifo():
            if pool.total == 0:
                break
            w = state.waiting[i]
            counts = self._counts(w)
            if not counts:
                continue
            f = fit(w, counts[0], pool)
            if f is None:
                continue
            pool.take(f.placement)
            alloc.append([w, counts, 0, f])
            started.append(i)

        free = pool.free
        steps = 0
        while any(free):
            best = None  # (gain, fifo rank, new Fit, free after the step); ties go to the earlier job
            for rank, (w, counts, k, f) in enumerate(alloc):
                if k + 1 >= len(counts):
                    continue
                g0, g1 = counts[k], counts[k + 1]
                trial = list(free)
                _release(trial, f.placement)
                nf = fit(w, g1, trial)
                if nf is None:
                    continue
                gain = (f.run_time - nf.run_time) / (g1 - g0)
                if self.gain == "relative" and f.run_time > 0:
                    gain /= f.run_time
                if gain > 0 and (best is None or gain > best[0]):
                    apply(trial, nf.placement)
                    best = (gain, rank, nf, trial)
            if best is None:
                break
            gain, rank, nf, trial = best
            free = trial
            alloc[rank][2] += 1
            alloc[rank][3] = nf
            steps += 1

        starts = []
        for w, counts, k, f in alloc:
            g = counts[k]
            why = "optimus, smallest count" if k == 0 else f"optimus, grown to {g} by marginal gain"
            starts.append(_decision(w, f, g, why, score=f.run_time))
        return queue.result(starts, started, growth_steps=steps)


# --------------------------------------------------------------------------- Tiresias (2D-LAS)


class Tiresias(_Base):
    """Discretised two-dimensional least-attained-service, preemptive.

    Attained service is GPU-seconds received so far: ``WaitingJob.attained`` and
    ``RunningJob.attained`` (which, as state.py and the simulator define it, already includes the
    current run's elapsed x gpus, so nothing is added here). Queue k holds jobs with
    ``thresholds[k-1] <= attained < thresholds[k]``; lower k is higher priority; FIFO by submit
    time within a queue. Jobs run on their requested count. A waiting job that does not fit may
    preempt running jobs of strictly lower-priority queues that are ``preemptible`` and have run
    at least ``min_run_s``. Its GPUs are held for it: it starts in the next slot, when the
    preempted jobs' GPUs appear in ``state.free`` (starts never exceed ``state.free``).
    """

    name = "tiresias"
    restart_overhead_s = 30.0  # what the simulator charges a preempted job when it restarts

    def __init__(
        self,
        seed: int = 0,
        thresholds: Sequence[float] = (3600.0, 36000.0),
        min_run_s: float = 600.0,
        restart_overhead_s: float | None = None,
    ) -> None:
        super().__init__(seed)
        th = tuple(float(t) for t in thresholds)
        if any(b <= a for a, b in zip(th, th[1:])) or any(t <= 0 for t in th):
            raise ValueError("thresholds must be positive and increasing")
        if min_run_s < 0:
            raise ValueError("min_run_s must be >= 0")
        self.thresholds = th
        self.min_run_s = float(min_run_s)
        if restart_overhead_s is not None:
            self.restart_overhead_s = float(restart_overhead_s)
        # a job's class (LAS queue, GPU count, shape): all that the slot's scan looks at in a job
        self._classes: dict[tuple[int, Shape], int] = {}
        self._class_list: list[tuple[int, Shape]] = []
        self._job = PerJob(self._class_of)
        self._queue = Queue(cls=lambda w: self._job(w)[1], las=lambda w: self.queue_of(w.attained))

    def queue_of(self, attained: float) -> int:
        return bisect.bisect_right(self.thresholds, attained)

    def running_attained(self, r: RunningJob, now: float) -> float:
        return r.attained  # includes the current run (see the class docstring)

    def _running_queues(self, state: SlotState) -> tuple[np.ndarray, np.ndarray]:
        """Running jobs' attained service and LAS queue (``queue_of``, vectorised)."""
        running = state.running
        if type(self).running_attained is Tiresias.running_attained:
            att = np.fromiter(map(_attained, running), dtype=float, count=len(running))
        else:
            att = np.array([self.running_attained(r, state.now) for r in running], dtype=float)
        return att, np.searchsorted(np.asarray(self.thresholds), att, side="right")

    def _class_of(self, w: WaitingJob) -> tuple[int | None, int]:
        g = nearest_allowed(w, w.requested_gpus)
        if g is None:
            return None, -1
        key = (self.queue_of(w.attained), shape_of(w, g))
        if key not in self._classes:
            self._classes[key] = len(self._class_list)
            self._class_list.append(key)
        return g, self._classes[key]

    def decide(self, state: SlotState) -> SlotResult:
        now = state.now
        queue = self._queue.load(state)
        self._job.prune(state.waiting)
        waiting = state.waiting
        free = list(state.free)  # usable now
        pending = [0] * len(free)  # freed by this slot's preemptions: usable from next slot
        running = state.running
        att, rq = self._running_queues(state)
        start = np.fromiter(map(_start_time, running), dtype=float, count=len(running))
        gpus = np.fromiter(map(_gpus, running), dtype=int, count=len(running))
        eligible = np.fromiter(map(_preemptible, running), dtype=bool, count=len(running)) & (now - start >= self.min_run_s)
        preempted: list[str] = []
        taken: set[str] = set()
        held: dict[str, int] = {}
        starts: list[Decision] = []
        started: list[int] = []
        # GPUs that preemption could still free, per queue: a cheap bound that skips hopeless searches
        victim_gpus = np.bincount(rq[eligible], weights=gpus[eligible], minlength=len(self.thresholds) + 1).astype(int).tolist()
        victims_q: dict[str, int] = {}
        preemptable: list[RunningJob] = []

        def victim_order() -> None:
            """Preemptable jobs by (-queue, -attained, id), lowest priority first: only built when needed."""
            if victims_q or not running:
                return
            victims_q.update(zip(map(_job_id, running), rq.tolist()))
            idx = np.flatnonzero(eligible)
            if len(idx):
                ids = np.array([running[i].job_id for i in idx.tolist()])
                idx = idx[np.lexsort((ids, -att[idx], -rq[idx]))]
            preemptable.extend(running[i] for i in idx.tolist())

        left, pend = sum(free), 0

        # waiting jobs by (LAS queue, submit time, id): the queue's FIFO order split by LAS queue
        las = queue.cols["las"]
        if queue.ordered:
            order = np.concatenate([np.flatnonzero(las == k) for k in range(len(self.thresholds) + 1)])
        else:
            key = lambda i: (self.queue_of(waiting[i].attained), waiting[i].submit_time, waiting[i].job_id)  # noqa: E731
            order = np.asarray(sorted(range(len(waiting)), key=key), dtype=np.intp)
        cls = queue.cols["cls"][order].astype(np.intp)  # -1: no allowed count
        live = [int(c) for c in np.flatnonzero(np.bincount(cls + 1, minlength=len(self._class_list) + 1)[1:])]
        # Scanned as Tiresias does job by job, but a class at a time: until the next start or
        # hold, every job of a class fits, finds victims or does neither alike, so the next
        # start/hold is the first job (in priority order) of a class that can act.
        at = 0
        while at < len(order):
            can_act = np.zeros(len(self._class_list) + 1, dtype=bool)  # last entry: class -1
            victims_of: dict[int, list[RunningJob] | None] = {}
            for c in live:
                qw, shape = self._class_list[c]
                g = shape[0]
                if g <= left and fit_shape(shape, free) is not None:
                    can_act[c] = True
                elif g <= left + pend + sum(victim_gpus[qw + 1 :]):
                    victim_order()
                    victims_of[c] = self._victims(shape, qw, free, pending, preemptable, victims_q, taken)
                    can_act[c] = victims_of[c] is not None
            ok = can_act[cls[at:]]
            j = int(np.argmax(ok)) if len(ok) else 0
            if not len(ok) or not ok[j]:
                break
            at += j + 1
            i = int(order[at - 1])
            c = int(cls[at - 1])
            w = waiting[i]
            qw, shape = self._class_list[c]
            g = shape[0]
            if c not in victims_of:
                f = fit(w, g, free)
                apply(free, f.placement)
                left -= g
                starts.append(_decision(w, f, g, f"tiresias queue {qw}, requested {g}", score=qw))
                started.append(i)
                continue
            victims = victims_of[c]
            self._hold(w, g, free, pending, victims)
            left, pend = sum(free), sum(pending)
            for r in victims:
                taken.add(r.job_id)
                victim_gpus[victims_q[r.job_id]] -= r.gpus
                preempted.append(r.job_id)
            held[w.job_id] = g
        info: dict = {"held": held}
        if not starts and not preempted:
            info["wake_at"] = self._wake_at(state, np.unique(las).astype(int).tolist())
        return queue.result(starts, started, preempted, **info)

    def _wake_at(self, state: SlotState, waiting_queues: Iterable[int]) -> float:
        """When a slot that started and preempted nothing could decide otherwise with no event.

        With the same jobs and free GPUs, time changes only the running jobs' LAS queues (their
        attained service grows by ``gpus`` per second) and which have run ``min_run_s``; which
        victims are tried first does not matter when no set of them would do. So only the set
        of possible victims of each waiting job's queue ``qw`` (preemptible, run ``min_run_s``,
        queue > qw) matters, and it changes when a preemptible job becomes old enough in a queue
        above the lowest waiting one, or, old enough, moves up from a queue some waiting job is
        in. This returns a moment before the first such change (a margin for float rounding;
        borderline cases count as changes).
        """
        qs = sorted(set(waiting_queues))
        now, running = state.now, state.running
        if not running or not qs:
            return math.inf
        att, rq = self._running_queues(state)
        n = len(running)
        start = np.fromiter(map(_start_time, running), dtype=float, count=n)
        gpus = np.fromiter(map(_gpus, running), dtype=float, count=n)
        pre = np.fromiter(map(_preemptible, running), dtype=bool, count=n) & (gpus > 0)
        th = np.asarray(self.thresholds)
        ready = start + self.min_run_s  # old enough from then on
        young = pre & (now - start < self.min_run_s)
        soon = math.inf
        if young.any():  # becomes a victim for queues below its queue then (checked a second late)
            q_then = np.searchsorted(th, att[young] + gpus[young] * (ready[young] + 1.0 - now), side="right")
            hit = q_then > qs[0]
            if hit.any():
                soon = float(ready[young][hit].min())
        for k in qs:  # moving from queue k to k+1 makes it a victim for waiting jobs of queue k
            if k >= len(th):
                continue
            cand = pre & (rq <= k)
            if cand.any():
                t = now + (th[k] - att[cand]) / gpus[cand]
                t = t[t >= ready[cand] - 1.0]  # before it is old enough the move changes nothing
                if len(t):
                    soon = min(soon, float(t.min()))
        return soon - 1e-6 * max(1.0, abs(soon)) if math.isfinite(soon) else soon

    def _victims(self, shape, qw, free, pending, preemptable, queues, taken) -> list[RunningJob] | None:
        """Fewest lowest-priority preemptable jobs whose GPUs let a job of ``shape`` fit; None if none do."""
        avail = [f + p for f, p in zip(free, pending)]
        g, one, multi = shape
        total, most = sum(avail), max(avail, default=0)  # no fit below these (avail only grows here)
        chosen: list[RunningJob] = []
        for r in preemptable:
            if r.job_id in taken or queues[r.job_id] <= qw:
                continue
            chosen.append(r)
            for node, n in r.placement:
                avail[node] += n
                total += n
                most = max(most, avail[node])
            if total >= g and (multi or most >= g) and fit_shape(shape, avail) is not None:
                break
        else:
            return None
        # drop victims the job does not need after all (keep the last one, it completed the fit)
        for r in list(chosen[:-1]):
            trial = list(avail)
            for node, n in r.placement:
                trial[node] -= n
            if fit_shape(shape, trial) is not None:
                chosen.remove(r)
                avail = trial
        return chosen

    @staticmethod
    def _hold(w, g, free, pending, victims) -> None:
        """Reserve the job's future placement: from victims' GPUs first, then earlier frees, then free ones."""
        freed = [0] * len(free)
        for r in victims:
            _release(freed, r.placement)
        avail = [a + b + c for a, b, c in zip(free, pending, freed)]
        f = fit(w, g, avail)
        assert f is not None
        for node, n in f.placement:
            take = min(n, freed[node])
            freed[node] -= take
            n -= take
            take = min(n, pending[node])
            pending[node] -= take
            n -= take
            free[node] -= n
        for node, n in enumerate(freed):
            pending[node] += n
