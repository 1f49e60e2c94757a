"""Optimus: greedy GPU counts by marginal speed-up.

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

from lyasched.policy.common import (
    Capabilities,
    Fit,
    PerJob,
    Pool,
    Queue,
    SlotResult,
    SlotState,
    _Base,
    _decision,
    _release,
    allowed_counts,
    apply,
    fit,
)


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
    capabilities = Capabilities(time_invariant=True)  # reads no clock

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
