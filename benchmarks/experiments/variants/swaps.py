"""`ElasticVariant`: the elastic policy with the Lyapunov core's variants (`core.LyapunovVariant`)
and two checks on a swap the score accepts, measured and not adopted (docs/model.md, section 3,
"Robust swaps: measured, not adopted"): both off by default, the shipped decision.

* ``margin`` z > 0: a swap's forecast net gain (saved_j - sum cost_r - p_j) must clear z standard
  errors of the estimates' error (SIGMA on j's run and the victims' remaining runs);
* ``rollout`` n > 0: a rollout of the core (at most n decisions, no arrivals) with the swap must
  beat the one without it (by the margin).

A third option, ``move_backoff = "linear"`` (docs/model.md, section 3, "Move backoff"), spaces a
job's moves by its completed ones, through `ElasticPolicy._move_interval`. A fourth,
``wait_order = "submitted"`` (docs/model.md, section 3, "By job length, and the wait forecast's
order"), counts the jobs submitted before a swap candidate ahead of it in its wait forecast instead
of the shorter ones, through `ElasticPolicy._ahead_of`; ``"fitting"`` counts only those of them
that ask no more GPUs than the candidate (ninth pass: better against lyapunov on one held-out
test, worse against tiresias on the second; not adopted).

The two checks act through `ElasticPolicy._swap_check`: one `_Checks` per slot keeps the rollout's view of
the slot (jobs running after the core's starts and the swaps made so far, jobs waiting).
"""

from __future__ import annotations

import heapq
import math
from itertools import accumulate
from dataclasses import dataclass, fields
from typing import ClassVar, Sequence

import numpy as np

from lyasched.policy.elastic import Chosen, ElasticPolicy, SwapCheck
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import Decision, Placement, RunningJob, SlotState, WaitingJob
from variants.core import LyapunovVariant


@dataclass
class ElasticVariant(ElasticPolicy, LyapunovVariant):
    """`ElasticPolicy` plus the core's variants and the swap checks; all off, it decides identically."""

    margin: float = 0.0
    rollout: int = 0
    # "linear": a job moved m times runs (m + 1) x min_move_interval before its next move; "none": the interval
    # alone (docs/model.md section 3, "Move backoff": better on the family it was designed on, not on held-out ones)
    move_backoff: str = "none"
    # whom a swap candidate's wait forecast counts ahead of it: "shortest" (shorter jobs, shipped), "submitted"
    # (jobs submitted before it; issue 13, seventh pass) or "fitting" (those of them asking no more GPUs than it;
    # ninth pass): both measured, not adopted
    wait_order: str = "shortest"

    SIGMA: ClassVar[float] = 0.2  # sigma of the run-time estimates' log-normal error (docs/simulator.md; the replay default)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._shadow: LyapunovVariant | None = None  # the core for rollouts (its caches apart from ours)

    def _swap_credit(self, w: WaitingJob, mean_work: float) -> float:
        """``q_credit``: work uncapped with "work", the mean work with "mean" or "peaked"."""
        return {"capped": min(w.work, mean_work), "work": w.work}.get(self.q_credit, mean_work)

    def _ahead_of(self, left: list[WaitingJob], cands: list) -> list[int] | None:
        """``wait_order = "submitted"``: the GPUs asked by the jobs submitted before each;
        ``"fitting"``: only those of the older jobs asking no more GPUs than it (a larger older job
        cannot start on the GPUs that free up for it first, so backfill would start it after)."""
        if self.wait_order not in ("submitted", "fitting"):
            return None
        asked = [0] * len(left)
        for _, _, pos, g, _, _ in cands:
            asked[pos] = g
        by_age = sorted(range(len(left)), key=lambda i: (left[i].submit_time, left[i].job_id))
        if self.wait_order == "fitting":
            return _older_fitting(asked, by_age)
        older = [0] * len(left)
        for i, before in zip(by_age, accumulate((asked[i] for i in by_age), initial=0)):
            older[i] = before
        return older

    def _move_interval(self, r: MovableJob) -> float:
        return self.min_move_interval * (1 + r.moves if self.move_backoff == "linear" else 1)

    def _swap_check(self, state: SlotState, left: list[WaitingJob], base_starts: Sequence[Decision]) -> SwapCheck | None:
        if self.margin > 0 or self.rollout > 0:
            return _Checks(self, state, left, base_starts)
        return None

    def _core(self) -> LyapunovVariant:
        if self._shadow is None:
            kw = {f.name: getattr(self, f.name) for f in fields(LyapunovVariant) if f.init}
            self._shadow = LyapunovVariant(**kw)
        return self._shadow

    def _rollout(self, state: SlotState, free: Sequence[int], running: list[tuple[float, Placement, int]],
                 waiting: list[WaitingJob]) -> float:
        """Sum of the predicted completion times of ``waiting`` when the core alone schedules them
        from now on, without arrivals, onto ``free`` and the GPUs of ``running`` ((predicted end,
        placement, GPUs)) as they are released; at most ``rollout`` core decisions, jobs still
        waiting after that counted as starting then on their best configuration."""
        core = self._core()
        t = state.now
        fr = list(free)
        heap = [(e, i, pl, g) for i, (e, pl, g) in enumerate(running)]
        heapq.heapify(heap)
        n = len(heap)
        pending = {w.job_id: w for w in waiting}
        total = 0.0
        for _ in range(self.rollout):
            if not pending:
                break
            run = tuple(RunningJob(f"~{i}", g, pl, state.now, e, predicted_end=e) for e, i, pl, g in heap)
            st = SlotState(now=t, slot_len=state.slot_len, free=tuple(fr), gpus_per_node=state.gpus_per_node,
                           waiting=tuple(pending.values()), running=run, arrivals_t=state.arrivals_t,
                           arrivals_cum_gpu_s=state.arrivals_cum_gpu_s)
            res = core.decide(st) if sum(fr) > 0 else None
            if res is not None:
                for d in res.starts:
                    w = pending.pop(d.job_id)
                    end = t + w.run_time(d.gpus, d.spans_nodes)
                    total += end
                    for node, k in d.placement:
                        fr[node] -= k
                    heapq.heappush(heap, (end, n, d.placement, d.gpus))
                    n += 1
            nxt = heap[0][0] if heap else math.inf
            wake = float(res.info.get("wake_at", math.inf)) if res is not None and not res.starts else math.inf
            if res is not None and not res.starts and "wake_at" not in res.info:
                wake = t + state.slot_len  # the core reads the clock: ask again next slot
            t_next = min(nxt, wake) if wake > t else nxt
            if not math.isfinite(t_next):
                break
            t = max(t, t_next)
            while heap and heap[0][0] <= t:
                _, _, pl, _ = heapq.heappop(heap)
                for node, k in pl:
                    fr[node] += k
        return total + sum(t + w.best_run for w in pending.values())


class _Checks:
    """One slot's margin and rollout checks (`SwapCheck`)."""

    def __init__(self, pol: ElasticVariant, state: SlotState, left: list[WaitingJob], base_starts: Sequence[Decision]) -> None:
        self.pol, self.state, self.now = pol, state, state.now
        # the rollout's view of the slot: jobs running after the core's starts (predicted end,
        # placement, GPUs) by id, and the jobs waiting; the total without a swap is computed lazily
        self.run: dict[str, tuple[float, Placement, int]] = {}
        self.wait: dict[str, WaitingJob] = {}
        self.base: list[float] = []
        if pol.rollout > 0:
            now = self.now
            for r in state.running:
                e = r.predicted_end if math.isfinite(r.predicted_end) else now + 1e9
                self.run[r.job_id] = (e, r.placement, r.gpus)
            by_id = {x.job_id: x for x in state.waiting}
            for d in base_starts:
                wj = by_id[d.job_id]
                self.run[d.job_id] = (now + wj.run_time(d.gpus, d.spans_nodes), d.placement, d.gpus)
            self.wait = {x.job_id: x for x in left}

    def started(self, w: WaitingJob, g: int, pl: Placement) -> None:
        if self.pol.rollout > 0:
            self.wait.pop(w.job_id, None)
            self.run[w.job_id] = (self.now + w.run_time(g, len(pl) > 1), pl, g)
            self.base.clear()

    def accept(self, w: WaitingJob, g: int, pl: Placement, run_j: float, pen_j: float, saved: float, cost: float,
               chosen: Chosen, free: list[int], avail: list[int]) -> bool:
        pol, state, now = self.pol, self.state, self.now
        err = 0.0
        if pol.margin > 0:
            # within the estimates' noise the swap may as well lose: not made
            err = pol.margin * pol.SIGMA * math.hypot(run_j, *(v.best_remaining(v.gpus)[0] for v, _, _, _ in chosen))
            if not saved - cost - pen_j > err:
                return False
        if pol.rollout > 0:
            # the same jobs' total completion time, the core scheduling the rest, with and without
            if not self.base:
                self.base.append(pol._rollout(state, free, list(self.run.values()), list(self.wait.values())))
            run2 = dict(self.run)
            wait2 = dict(self.wait)
            del wait2[w.job_id]
            j_end = now + run_j
            run2[w.job_id] = (j_end, pl, g)
            extra = j_end
            old_ends = 0.0
            for r, new, c, _ in chosen:
                old_ends += self.run[r.job_id][0]
                del run2[r.job_id]
                if new is not None:
                    e2 = now + r.best_remaining(new[0])[0] + pol._cost(r)
                    run2[r.job_id] = (e2, new[1], new[0])
                    extra += e2
                else:
                    wait2[r.job_id] = _as_waiting(r, now, pol._cost(r))
            free2 = list(avail)
            pol._take(free2, pl)
            with_total = pol._rollout(state, free2, list(run2.values()), list(wait2.values())) + extra
            without_total = self.base[0] + old_ends
            if not with_total + err < without_total:
                return False
            self.run, self.wait = run2, wait2
            self.base[:] = [with_total - extra]
        return True


def _as_waiting(r: MovableJob, now: float, cost: float) -> WaitingJob:
    """A suspended job as the rollout sees it: waiting again with its remaining run plus its move
    cost on every count, its wait so far, its remaining work."""
    one = r.remaining_one_node
    multi = r.remaining_multi_node
    assert one is not None
    return WaitingJob(job_id=r.job_id, submit_time=now - r.waited_s, work=r.work_left, run_one_node=one + cost,
                      run_multi_node=(multi if multi is not None else np.full(len(one), np.inf)) + cost,
                      requested_gpus=max(1, r.requested_gpus))


def _older_fitting(asked: list[int], by_age: list[int]) -> list[int]:
    """Per position, the sum of ``asked`` over the positions earlier in ``by_age`` whose ask is at
    most its own: a Fenwick tree over the distinct asks, O(n log k) for n jobs and k distinct asks."""
    sizes = sorted(set(asked))
    rank = {g: r + 1 for r, g in enumerate(sizes)}
    tree = [0] * (len(sizes) + 1)
    out = [0] * len(asked)
    for i in by_age:
        r = rank[asked[i]]
        total, k = 0, r
        while k > 0:
            total += tree[k]
            k -= k & -k
        out[i] = total
        k = r
        while k < len(tree):
            tree[k] += asked[i]
            k += k & -k
    return out
