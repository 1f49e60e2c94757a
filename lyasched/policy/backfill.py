"""Backfill: EASY backfill on the requested count, planning with users' time limits.

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from lyasched.policy.common import (
    Decision,
    PerJob,
    Placement,
    Pool,
    Queue,
    SlotResult,
    SlotState,
    WaitingJob,
    _Base,
    _decision,
    _release,
    apply,
    fit,
    fit_shape,
    nearest_allowed,
    shape_of,
)


class Backfill(_Base):
    """EASY backfill on the requested count, planning with users' time limits.

    Jobs start in FIFO order while they fit. The first that does not fit (the head) gets a
    reservation at the shadow time: the earliest expected end of running jobs after which it
    fits. A later job may start now if it fits now and either ends (now + time limit) by the
    shadow time, or leaves enough GPUs at the shadow time for the head (the "extra" GPUs).
    """

    name = "backfill"
    order_name = "fifo"  # what orders the queue (the reason a job in order starts)

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
        order = self._order(state, queue)
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
            starts.append(_decision(w, f, g, f"{self.order_name}, requested {g}"))
            started.append(i)
        if head is None:  # every job started, or none can ever run: only an event changes that
            done: dict[str, Any] = {} if starts else {"wake_at": math.inf}
            return queue.result(starts, started, head=None, shadow=None, **done)

        hw = waiting[order[head]]
        hg = self._job(hw)[0]
        assert hg is not None  # the head is a job with an allowed GPU count (the loop above skips the others)
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
            f = fit(w, g, free) if g is not None else None
            assert g is not None and f is not None  # its shape fits the free GPUs (ok[j] above)
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
        info: dict[str, Any] = {"head": hw.job_id, "shadow": shadow if future is not None else None}
        if not starts:
            info["wake_at"] = self._wake_at(state)
        return queue.result(starts, started, **info)

    def _order(self, state: SlotState, queue: Queue) -> Sequence[int]:
        """Positions in ``state.waiting`` in the order jobs are tried: submit order here (a
        subclass orders by priority, lyasched.policy.fairshare)."""
        return queue.fifo()

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
