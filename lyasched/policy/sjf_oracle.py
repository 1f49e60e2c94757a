"""SjfOracle: shortest true run time first on the requested count (sees true run times).

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import math

from lyasched.policy.common import (
    Capabilities,
    Decision,
    PerJob,
    Pool,
    Queue,
    SlotResult,
    SlotState,
    WaitingJob,
    _Base,
    _decision,
    fit,
    nearest_allowed,
)


class SjfOracle(_Base):
    """Shortest true run time first on the requested count, skipping jobs that do not fit."""

    name = "sjf-oracle"
    # the simulator builds this policy's rows from true run times; it reads no clock
    capabilities = Capabilities(needs_true_runtimes=True, time_invariant=True)

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

    def _order(self, state: SlotState) -> tuple[Queue, list[tuple[tuple[float, float, str, int], int]]]:
        """The queue memo loaded with ``state``, and (key, position) of every waiting job with an
        allowed count, shortest true time first (then submit time, then id)."""
        queue = self._queue.load(state)
        self._key.prune(state.waiting)
        keys = [(k, i) for i, k in enumerate(map(self._key, state.waiting)) if k is not None]
        keys.sort(key=lambda ki: ki[0][:3])
        return queue, keys

    def decide(self, state: SlotState) -> SlotResult:
        queue, keys = self._order(state)
        free = Pool(state.free)
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
