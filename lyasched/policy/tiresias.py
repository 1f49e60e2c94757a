"""Tiresias: discretised two-dimensional least-attained-service, preemptive.

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterable, Sequence

import numpy as np

from lyasched.policy.common import (
    Capabilities,
    Decision,
    PerJob,
    Queue,
    RunningJob,
    Shape,
    SlotResult,
    SlotState,
    WaitingJob,
    _Base,
    _attained,
    _decision,
    _gpus,
    _job_id,
    _preemptible,
    _release,
    _start_time,
    apply,
    fit,
    fit_shape,
    nearest_allowed,
    shape_of,
)


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
    capabilities = Capabilities(preemptive=True)  # its SlotResult.preempt must be carried out
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
                assert f is not None  # can_act: its shape fits the free GPUs
                apply(free, f.placement)
                left -= g
                starts.append(_decision(w, f, g, f"tiresias queue {qw}, requested {g}", score=qw))
                started.append(i)
                continue
            victims = victims_of[c]
            assert victims is not None  # can_act[c]: a victim set was found
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
