"""SrptOracle: shortest true remaining time first on the requested count, preemptive (sees true run times).

A reference, not a scheduler: what preemption with perfect knowledge of run times buys at the
requested GPU counts, against which the preemptive targets of issue 13 (elastic against tiresias)
can be read. docs/baselines.md describes the rule.
"""

from __future__ import annotations

import math

from lyasched.policy.common import Capabilities, Decision, Pool, SlotResult, SlotState, WaitingJob, _decision, fit
from lyasched.policy.movable import MovableJob
from lyasched.policy.sjf_oracle import SjfOracle


class SrptOracle(SjfOracle):
    """Shortest true remaining time first on the requested count; a waiting job that does not fit
    suspends running checkpointable jobs, longest remaining first, as few as it needs, when that
    lowers the sum of completion times to first order: each victim is delayed by the job's run
    plus its move cost, and the job waits no longer for the first of them to end, so the
    shortest remaining time among the victims must exceed the sum of those delays (one victim:
    shortest remaining time first with the move cost as margin).

    The margin is what keeps it from thrashing: a job started by a suspension is shorter than
    its victims by more than a move, so no victim can take its GPUs back. Long jobs can starve
    while shorter ones keep arriving (SRPT's nature; it is an oracle, not something to deploy).
    """

    name = "srpt-oracle"
    # true remaining times of running jobs come as MovableJob rows (moves); its suspensions must be carried out
    capabilities = Capabilities(needs_true_runtimes=True, preemptive=True, moves=True)

    def __init__(self, seed: int = 0, move_cost: float = 30.0) -> None:
        super().__init__(seed)  # sjf-oracle's order of the waiting jobs (true time at the request)
        if not (move_cost >= 0 and math.isfinite(move_cost)):
            raise ValueError("move_cost must be a finite number >= 0")
        self.move_cost = float(move_cost)

    def decide(self, state: SlotState) -> SlotResult:
        queue, keys = self._order(state)
        free = Pool(state.free)
        # (true remaining time at its count, job): the suspendable running jobs, longest first
        victims = sorted(
            ((r.remaining(r.gpus, r.spans_nodes), r) for r in state.running
             if isinstance(r, MovableJob) and r.preemptible),
            key=lambda v: (-v[0], v[1].job_id),
        )
        starts: list[Decision] = []
        started: list[int] = []
        preempt: list[str] = []
        gone: set[str] = set()
        for (t, _, _, g), i in keys:
            if free.total == 0 and next((rem for rem, r in victims if r.job_id not in gone), -math.inf) <= t:
                break  # the waiting jobs from here on are longer: none can start or suspend
            w = state.waiting[i]
            f = fit(w, g, free)
            why = f"srpt, true time {t:.0f}s on {g}"
            if f is None:
                chosen = self._victims(w, g, t, free.free, victims, gone)
                if chosen is None:
                    continue
                trial = list(free.free)
                for r in chosen:
                    for node, k in r.placement:
                        trial[node] += k
                    gone.add(r.job_id)
                    preempt.append(r.job_id)
                free = Pool(trial)
                f = fit(w, g, free)
                assert f is not None  # _victims checked it
                why += ", suspends " + " ".join(r.job_id for r in chosen)
            free.take(f.placement)
            starts.append(_decision(w, f, g, why, score=t))
            started.append(i)
        return queue.result(starts, started, preempt)

    def _victims(self, w: WaitingJob, g: int, t: float, free: list[int],
                 victims: list[tuple[float, MovableJob]], gone: set[str]) -> list[MovableJob] | None:
        """The running jobs to suspend for ``w`` (``g`` GPUs, run ``t``): longest remaining first
        among those longer than ``t`` plus their move cost until ``w`` fits, then any that the
        placement turns out not to need dropped again (shortest first). None when they cannot
        make room, or when the suspensions cost more than they gain (the class docstring)."""
        trial = list(free)
        chosen: list[tuple[float, MovableJob]] = []
        for rem, r in victims:
            if r.job_id in gone or not rem > t + r.cost(self.move_cost):
                continue
            for node, k in r.placement:
                trial[node] += k
            chosen.append((rem, r))
            if fit(w, g, trial) is not None:
                break
        else:
            return None
        for i in range(len(chosen) - 2, -1, -1):  # the last one made it fit: try without each earlier one
            less = list(trial)
            for node, k in chosen[i][1].placement:
                less[node] -= k
            if fit(w, g, less) is not None:
                trial = less
                del chosen[i]
        if not min(rem for rem, _ in chosen) > sum(t + r.cost(self.move_cost) for _, r in chosen):
            return None
        return [r for _, r in chosen]
