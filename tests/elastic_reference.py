"""REFERENCE COPY for tests only (tests/test_elastic.py): the elastic policy as it was before the
speed-ups (commit 6c951f9), kept so that the tests check the fast policy decides exactly as this one.
Do not edit; do not import from the package. (Two lines changed when the core's not-adopted
options left LyapunovPolicy for benchmarks/experiments/variants: ``min_window`` declared here, the
swap credit written for ``q_credit`` "capped", the default and only value the core now has.)

Elastic Lyapunov: the drift-plus-penalty core, plus shrinking, growing and suspending
running checkpointable jobs (docs/model.md, section 3, derives it; docs/elastic.md says how
the moves are carried out).

Each slot:

1. the Lyapunov core (`LyapunovPolicy.decide`, unchanged) starts waiting jobs on the free GPUs;
2. **make room**: for each job still waiting (shortest GPU-time at its request first), the
   policy considers taking GPUs from movable running jobs (checkpointable, not moved for
   ``min_move_interval`` seconds): shrinking them (first those running above their request,
   back to it) or suspending them. The swap is scored like a start, with the victims' own
   drift terms taken back and the move's effect on completion time as the penalty:

       score = q_w*Q*(c_j - sum_susp c_r) + Z*((w_j + D) - sum_susp (w_r + D))
               - V*(Q + Z) * (p_j + sum_r cost_r - W_j)

   where W_j is how long j would otherwise wait (the earliest predicted release that lets it
   fit), cost_r the victim's added completion time (its move cost plus, suspended, j's run;
   shrunk, its longer remaining run) and p_j j's own penalty in the core's sense. The swap is
   made only with a positive score;
3. **grow**: when no job is left waiting, free GPUs go to movable jobs whose remaining run
   shrinks by more than twice their move cost (the grow and the shrink back it may need) plus
   the expected wait of arrivals that need those GPUs before the job may move again.

Suspended jobs are waiting jobs again: they count in Q (their remaining work) and Z (their
wait), which is what restarts them (and the minimum interval, longer than the move cost,
guarantees progress between two moves: no job starves). Pure and deterministic: the only
state is the core's memo of rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from lyasched.policy.common import Shape, fit_shape, nearest_allowed, shape_of
from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import equal_placement, one_node_placement
from lyasched.policy.state import Capabilities, Decision, FreeGpus, Placement, SlotResult, SlotState, WaitingJob


@dataclass
class ReferenceElasticPolicy(LyapunovPolicy):
    """Lyapunov core + shrink / grow / suspend of checkpointable running jobs, each move charged."""

    min_move_interval: float = 600.0  # a job runs at least this long after a start or a move before it is moved
    move_cost: float = 30.0  # checkpoint + relaunch (s) of a job that carries none
    grow: bool = True  # give idle GPUs to running jobs when nothing waits
    max_candidates: int = 64  # waiting jobs considered for a swap per slot (shortest GPU-time first)
    min_window: float = 3600.0  # was LyapunovPolicy's until its variants moved out (benchmarks/experiments/variants)
    name: str = "elastic"

    # its preemptions must be carried out, and a job preempted and started in one slot is a resize;
    # running jobs are read as MovableJob (the live service cannot do either yet: docs/elastic.md)
    capabilities: ClassVar[Capabilities] = Capabilities(preemptive=True, moves=True)

    def _cost(self, r: MovableJob) -> float:
        return self.move_cost if math.isnan(r.move_cost_s) else float(r.move_cost_s)

    def _movable(self, state: SlotState) -> tuple[list[MovableJob], float]:
        """Running jobs that may move now, and when the next one becomes movable (inf: none)."""
        out, soon = [], math.inf
        for r in state.running:
            if not isinstance(r, MovableJob) or not r.preemptible or r.remaining_one_node is None:
                continue
            c = self._cost(r)
            if c >= self.min_move_interval:  # it could lose more to moves than it runs between them
                continue
            ready = r.start_time + self.min_move_interval
            if state.now >= ready:
                out.append(r)
            else:
                soon = min(soon, ready)
        return out, soon

    def decide(self, state: SlotState) -> SlotResult:
        movable, soon = self._movable(state)
        base = LyapunovPolicy.decide(self, state)
        if not movable:
            return self._with_wake(base, soon, bool(state.waiting))
        free = list(state.free)
        for d in base.starts:
            for node, k in d.placement:
                free[node] -= k
        started = {d.job_id for d in base.starts}
        left = [w for w in state.waiting if w.job_id not in started]
        starts = list(base.starts)
        preempt: list[str] = []
        moved: dict[str, str] = {}
        q, z = base.q, base.z
        if left:
            more, pre, q, z, moved = self._make_room(state, left, movable, free, q, z)
            starts += more
            preempt += pre
        elif self.grow and sum(free) > 0:
            more, pre, moved = self._grow(state, movable, free)
            starts += more
            preempt += pre
        if not preempt:
            # with movable jobs and jobs waiting, a swap's score changes with time: no skipping
            if left:
                return replace(base, info={k: v for k, v in base.info.items() if k != "wake_at"})
            return self._with_wake(base, soon, False)
        info = dict(base.info)
        info.pop("wake_at", None)
        info["moves"] = moved
        return SlotResult(starts=tuple(starts), preempt=tuple(preempt), q=q, z=z, info=info)

    @staticmethod
    def _with_wake(res: SlotResult, soon: float, waiting: bool) -> SlotResult:
        """A slot that moved nothing: deciding again changes nothing before ``soon`` (a job becomes
        movable) unless the core says earlier (with jobs waiting); a caller may skip to then."""
        if res.starts or res.preempt or (waiting and "wake_at" not in res.info):
            return res
        info = dict(res.info)
        info["wake_at"] = min(float(info.get("wake_at", math.inf)), soon)
        return replace(res, info=info)

    # ------------------------------------------------------------------ make room
    def _make_room(
        self, state: SlotState, left: list[WaitingJob], movable: list[MovableJob], free: list[int], q: float, z: float
    ) -> tuple[list[Decision], list[str], float, float, dict[str, str]]:
        """Swaps: waiting jobs started on GPUs taken from movable jobs (shrunk or suspended) when
        the swap's score is positive. Returns (starts, preempted ids, Q after, Z after, move notes)."""
        now, slot = state.now, state.slot_len
        theta = q + z
        mean_work = (q / max(1, len(left))) if left else 0.0
        waits = [max(0.0, now - w.submit_time) for w in left]
        # release forecast: (predicted end, GPUs) of every running job
        ends = sorted((r.predicted_end if math.isfinite(r.predicted_end) else math.inf, r.gpus) for r in state.running)
        victims = sorted(movable, key=lambda r: (-(r.gpus > r.requested_gpus), -r.best_remaining(r.gpus)[0], r.job_id))
        used: set[str] = set()
        starts: list[Decision] = []
        preempt: list[str] = []
        moved: dict[str, str] = {}
        cands = []
        for pos, w in enumerate(left):
            g = nearest_allowed(w, w.requested_gpus)
            if g is None:
                continue
            t = min(w.run_time(g, False), w.run_time(g, True))
            cands.append((g * t, w.job_id, pos, g, t))
        cands.sort()
        ahead = 0  # GPUs asked by shorter jobs still waiting: they take released GPUs before j
        for _, _, pos, g, t_j in cands[: self.max_candidates]:
            w = left[pos]
            shape = shape_of(w, g)
            pl = fit_shape(shape, free)
            if pl is not None:  # GPUs earlier moves left over: start it as the fill would
                self._take(free, pl)
                starts.append(Decision(w.job_id, g, pl, 0.0, f"elastic: fits on GPUs freed this slot, {g} GPUs"))
                q -= min(w.work, mean_work)
                z -= waits[pos]
                continue
            wait_j = _forecast_wait(ends, sum(free), ahead + g, now)
            ahead += g
            if not wait_j > t_j:  # not even a free swap would help it
                continue
            plan = self._victims(w, shape, g, t_j, free, victims, used)
            if plan is None:
                continue
            avail, pl, chosen = plan
            cost = sum(c for _, _, c, _ in chosen)
            susp = [r for r, new, _, _ in chosen if new is None]
            run_j = w.run_time(g, len(pl) > 1)
            pen_j = run_j - w.best_run
            credit_j = min(w.work, mean_work)  # q_credit "capped", the only value LyapunovPolicy has (benchmarks/experiments/variants)
            gain = self.q_weight * q * (credit_j - sum(min(r.work_left, mean_work) for r in susp))
            gain += z * ((waits[pos] + slot) - sum(r.waited_s + slot for r in susp))
            # j gains the wait it skips, at most until the victims' GPUs would come back anyway
            saved = min(wait_j, max(r.best_remaining(r.gpus)[0] for r, _, _, _ in chosen))
            score = gain - self.V * theta * (pen_j + cost - saved)
            if not score > 0:
                continue
            ahead -= g
            # carry it out: victims first (their GPUs are free for this slot's starts), then j
            free[:] = avail
            self._take(free, pl)
            for r, new, c, why in chosen:
                used.add(r.job_id)
                preempt.append(r.job_id)
                if new is not None:
                    g2, pl2 = new
                    starts.append(Decision(r.job_id, g2, pl2, 0.0, f"elastic shrink {r.gpus}->{g2} for {w.job_id}: {why}"))
                    moved[r.job_id] = f"shrink {r.gpus}->{g2}"
                else:
                    moved[r.job_id] = f"suspend ({r.gpus} GPUs) for {w.job_id}: {why}"
                    q += min(r.work_left, mean_work)
                    z += r.waited_s
            starts.append(Decision(w.job_id, g, pl, float(score),
                                   f"elastic swap: score {score:.3g}, saves {saved:.0f}s wait for {cost:.0f}s of moves"))
            q -= credit_j
            z -= waits[pos]
        return starts, preempt, q, z, moved

    def _victims(
        self, w: WaitingJob, shape: Shape, g: int, t_j: float, free: list[int], victims: list[MovableJob], used: set[str]
    ) -> tuple[list[int], Placement, list[tuple[MovableJob, tuple[int, Placement] | None, float, str]]] | None:
        """Victims (shrunk or suspended) whose GPUs let ``w`` fit: [(job, (g, placement) | None, cost, why)],
        the free GPUs after the moves and ``w``'s placement; None if no set of movable jobs does."""
        avail = list(free)
        chosen: list[tuple[MovableJob, tuple[int, Placement] | None, float, str]] = []
        for r in victims:
            if r.job_id in used or r.gpus <= 0:
                continue
            r_now, _ = r.best_remaining(r.gpus)
            if not math.isfinite(r_now) or r_now <= 0:
                continue
            c = self._cost(r)
            trial = list(avail)
            for node, k in r.placement:
                trial[node] += k
            option = None
            # shrink: the largest allowed count below its current one that lets w fit, within
            # max_stretch of its run at the request (the core's no-sliver rule)
            req = max(1, r.requested_gpus)
            assert r.remaining_one_node is not None  # a movable view always carries its rows
            r_req, _ = r.best_remaining(min(req, len(r.remaining_one_node)))
            for g2 in range(r.gpus - 1, 0, -1):
                r2, spans = r.best_remaining(g2)
                if not math.isfinite(r2) or (g2 < req and r2 > self.max_stretch * r_req):
                    continue
                pl2 = _subset(r.placement, g2, spans)
                if pl2 is None:
                    continue
                t2 = list(trial)
                for node, k in pl2:
                    t2[node] -= k
                if fit_shape(shape, t2) is not None:
                    option = ((g2, pl2), r2 + c - r_now, t2, f"run {r_now:.0f}s -> {r2:.0f}s + {c:.0f}s move")
                    break
            # Suspended, r waits about j's run (the exchange argument) only if j uses all of r's
            # GPUs: GPUs j does not need go to other jobs and r would wait for them too. So a
            # victim larger than j is only ever shrunk.
            susp_cost = t_j + c
            if option is not None and (option[1] < susp_cost or r.gpus > g):
                new, cost, avail, why = option
            elif r.gpus <= g:
                new, cost, avail, why = None, susp_cost, trial, f"waits ~{t_j:.0f}s + {c:.0f}s move, {r_now:.0f}s left"
            else:
                continue
            chosen.append((r, new, cost, why))
            pl = fit_shape(shape, avail)
            if pl is not None:
                return avail, pl, chosen
        return None

    @staticmethod
    def _take(free: list[int], pl: Placement) -> None:
        for node, k in pl:
            free[node] -= k

    # ------------------------------------------------------------------ grow
    def _grow(
        self, state: SlotState, movable: list[MovableJob], free: list[int]
    ) -> tuple[list[Decision], list[str], dict[str, str]]:
        """Grows onto idle GPUs (nothing waits): (starts at the new counts, preempted ids, move notes)."""
        starts: list[Decision] = []
        preempt: list[str] = []
        moved: dict[str, str] = {}
        # A grown job cannot give GPUs back for min_move_interval: arrivals meanwhile that need
        # them wait up to that long. Expected cost per GPU taken from the F free ones:
        # rate * I * I/2 / F (rate: recent arrivals per second off the state; 0 without history).
        interval = self.min_move_interval
        risk_per_gpu = _arrival_rate(state, self.min_window) * interval * interval / 2 / max(1, sum(free))
        for r in sorted(movable, key=lambda r: (-r.best_remaining(r.gpus)[0], r.job_id)):
            if sum(free) == 0:
                break
            r_now, _ = r.best_remaining(r.gpus)
            c = self._cost(r)
            if not math.isfinite(r_now):
                continue
            avail = list(free)
            for node, k in r.placement:
                avail[node] += k
            best = None
            assert r.remaining_one_node is not None
            for g2 in range(r.gpus + 1, min(sum(avail), len(r.remaining_one_node)) + 1):
                for spans in (False, True):
                    r2 = r.remaining(g2, spans)
                    if not math.isfinite(r2) or r_now - r2 <= 2 * c + risk_per_gpu * (g2 - r.gpus):
                        continue
                    pl = FreeGpus(tuple(avail), state.gpus_per_node).take(g2, not spans)
                    if pl is not None and (best is None or r2 < best[0]):
                        best = (r2, g2, pl)
            if best is None:
                continue
            r2, g2, pl = best
            for node, k in pl:
                avail[node] -= k
            free[:] = avail
            preempt.append(r.job_id)
            starts.append(Decision(r.job_id, g2, pl, 0.0, f"elastic grow {r.gpus}->{g2}: run {r_now:.0f}s -> {r2:.0f}s + {c:.0f}s move"))
            moved[r.job_id] = f"grow {r.gpus}->{g2}"
        return starts, preempt, moved


def _arrival_rate(state: SlotState, window: float) -> float:
    """Jobs submitted per second over the last ``window`` seconds (0 when the state has no history)."""
    t = state.arrivals_t
    if t is None or len(t) == 0:
        return 0.0
    span = max(min(window, state.now - float(t[0])), state.slot_len)
    lo = int(np.searchsorted(t, state.now - span, side="left"))
    return (len(t) - lo) / span


def _forecast_wait(ends: list[tuple[float, int]], free_now: int, g: int, now: float) -> float:
    """Seconds until the running jobs' predicted releases give ``g`` GPUs (counts only, no shape)."""
    have = free_now
    for end, k in ends:
        have += k
        if have >= g:
            return max(0.0, end - now)
    return math.inf


def _subset(placement: Placement, g: int, spans: bool) -> Placement | None:
    """``g`` of a job's GPUs kept on its own nodes, by the placement rule (one node, or k nodes x
    g/k GPUs); None when its nodes cannot hold such a layout."""
    own = [0] * (max(node for node, _ in placement) + 1)
    for node, k in placement:
        own[node] = k
    return equal_placement(own, g) if spans else one_node_placement(own, g)
