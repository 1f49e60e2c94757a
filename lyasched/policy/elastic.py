"""Elastic Lyapunov: the drift-plus-penalty core, plus shrinking, growing and suspending
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
   made only with a positive score. A job that no single swap admits may instead be part of a
   **group swap**: one movable job larger than it suspended for a batch of waiting jobs (it and
   the shorter ones after it) that takes all of the victim's GPUs, scored the same way summed
   over the batch, the victim's cost being the batch's longest run plus its move cost, and made
   only when it also lowers the forecast total completion time (docs/model.md, section 3);
3. **grow**: when no job is left waiting, free GPUs go to movable jobs whose remaining run
   shrinks by more than twice their move cost (the grow and the shrink back it may need) plus
   the expected wait of arrivals that need those GPUs while the pool is short of them: until
   the running jobs' predicted releases give as many back (`_grow_hold`).

Suspended jobs are waiting jobs again: they count in Q (their remaining work) and Z (their
wait), which is what restarts them (and the minimum interval, longer than the move cost,
guarantees progress between two moves: no job starves). Each move is judged on its own slot, so
a long job can be moved again and again, each time for a gain that the next move takes back:
with ``move_backoff = "linear"`` (in benchmarks/experiments/variants/swaps.py: measured, not adopted) a
job moved m times runs (m + 1) intervals before it may move again, so over a run of T it moves at most about
sqrt(2T / interval) times instead of T / interval (the count is the job's completed moves, read
off the state: the simulator's checkpoints, the service's done moves). Pure and deterministic: the only
state is the core's memo of rows.

Adaptive jobs (a batch chosen with the GPUs, lyasched.costmodel.goodput) need nothing of their
own here: their rows, waiting or running, are their time left at their best batch per count from
their progress, so every score, swap and grow above values a count by the goodput it buys, and a
start's ``Decision.batch`` stays None (the executor's best batch for that count; docs/elastic.md,
"Adaptive jobs"). Their one rule of their own is the core's (`lyasched.policy.adaptive`, through
`LyapunovPolicy._scores`): while others wait, no count above their request across nodes.

Two optional checks on a swap the score accepts, measured and not adopted (docs/model.md,
section 3, "Robust swaps"), live in benchmarks/experiments/variants/swaps.py: they act through the
extension points `_swap_check` (a per-slot check that may veto a swap) and `_swap_credit`.
"""

from __future__ import annotations

import heapq
import math
import operator
from bisect import bisect_left
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
from typing import ClassVar, Protocol, Sequence

from lyasched.policy.common import PerJob, Shape
from lyasched.policy.bytype import decide_by_type
from lyasched.policy.lyapunov import LyapunovPolicy, quiet_for
from lyasched.policy.movable import MovableJob
from lyasched.policy.moveplan import Path, Quiet, Releases, SlotMemo, arrival_rate, candidate, fade_rate, fit_counts, trial_nodes
from lyasched.policy.params import PARAMS
from lyasched.policy.state import Capabilities, Decision, FreeGpus, Placement, SlotResult, SlotState, WaitingJob
from lyasched.policy.typemoves import with_type_moves

Chosen = list[tuple[MovableJob, tuple[int, Placement] | None, float, str]]  # victims: (job, shrunk to | None, cost, why)


class SwapCheck(Protocol):
    """One slot's extra test of the swaps the score accepts (benchmarks/experiments/variants/swaps.py)."""

    def started(self, w: WaitingJob, g: int, pl: Placement) -> None:
        """``w`` started on ``pl`` (GPUs earlier moves left free), no swap needed."""

    def accept(self, w: WaitingJob, g: int, pl: Placement, run_j: float, pen_j: float, saved: float, cost: float,
               chosen: Chosen, free: list[int], avail: list[int]) -> bool:
        """Whether the swap (``w`` on ``pl`` after moving ``chosen``; ``free`` before the moves,
        ``avail`` after them) is made; True commits it to the check's view of the slot."""


@dataclass
class ElasticPolicy(LyapunovPolicy):
    """Lyapunov core + shrink / grow / suspend of checkpointable running jobs, each move charged."""

    min_move_interval: float = 600.0  # a job runs at least this long after a start or a move before it is moved
    move_cost: float = 30.0  # checkpoint + relaunch (s) of a job that carries none
    grow: bool = True  # give idle GPUs to running jobs when nothing waits
    max_candidates: int = 1024  # waiting jobs considered for a swap per slot (shortest GPU-time first)
    max_searches: int = 64  # of those, how many may search for victims per slot (a forecast wait above the run)
    min_window: float = 3600.0  # window of the recent arrival rate that prices a grow (s)
    group: bool = True  # a victim larger than the job may be suspended for a batch of waiting jobs that takes all its GPUs
    # how long a grow's GPUs are priced as held: "release" (until the running jobs' predicted releases give as many
    # back, at least min_move_interval, at most the grown run; tenth pass) or "interval" (min_move_interval, before)
    grow_hold: str = "release"
    type_moves: bool = True  # typed slots: running jobs move onto another type's free GPUs when that pays (typemoves.py)
    name: str = "elastic"

    # its preemptions must be carried out, and a job preempted and started in one slot is a resize;
    # running jobs are read as MovableJob (the live service cannot do either yet: docs/elastic.md)
    capabilities: ClassVar[Capabilities] = Capabilities(preemptive=True, moves=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        holds = PARAMS["elastic"]["grow_hold"].choices  # one list of values: the parameter table's
        if self.grow_hold not in holds:
            raise ValueError(f"grow_hold must be one of {', '.join(holds)}, not {self.grow_hold!r}")
        self._cands = PerJob(candidate)
        self._runs_best: PerJob[float] = PerJob(lambda w: w.best_run)  # a waiting job's rows do not change while it waits
        self._quiet: Quiet | None = None  # this call's record of what keeps make-room a no-op (`_quiet_wake`)
        # the last call's jobs left after the core, its swap candidates and their order: a candidate
        # is a function of its job alone (`moveplan.candidate`), so the same jobs give the same ones
        self._last_order: tuple[list[WaitingJob], list, list] | None = None

    def _swap_check(self, state: SlotState, left: list[WaitingJob], base_starts: Sequence[Decision]) -> SwapCheck | None:
        """Extension point (benchmarks/experiments/variants/swaps.py): a check of this slot's swaps beyond
        their score, given the jobs still waiting and the core's starts. Shipped: none."""
        return None

    def _swap_credit(self, w: WaitingJob, mean_work: float) -> float:
        """A swapped-in job's actual-queue credit, as the core's: its work capped at the mean work
        (an extension point, ``q_credit`` in variants)."""
        return min(w.work, mean_work)

    def _ahead_of(self, left: list[WaitingJob], cands: list) -> list[int] | None:
        """Per position in ``left``, the GPUs its wait forecast counts ahead of it, given the swap
        candidates (entries ``(gpu_time, id, position, gpus, run, shape)``): an extension point,
        ``wait_order`` in variants. Shipped: None, the shorter jobs still waiting are counted, as
        a shortest-first start would serve them (the scan's order)."""
        return None

    def _swap_tenants(self, state: SlotState):
        """The tenant term of a swap (docs/model.md, section 5): per tenant its credit per GPU over
        V*Theta, the core's, so a job of a tenant behind may take GPUs from one ahead; None when
        the term is off or changes nothing this slot."""
        if state.tenants is None or self.tenant_weight <= 0:
            return None
        total = max(1, sum(state.free) + sum(r.gpus for r in state.running))
        if self._tenants_behind(state, [w.user for w in state.waiting], total) is None:
            return None
        memo: dict[str, float] = {}  # per tenant, for the slot: asked per swap and per victim

        def behind(k: str) -> float:
            hit = memo.get(k)
            if hit is None:
                hit = memo[k] = self.tenant_behind(state, k)
            return hit
        return behind

    def _move_interval(self, r: MovableJob) -> float:
        """How long ``r`` runs after its last start or move before it may move (an extension point,
        ``move_backoff`` in variants). Shipped: `min_move_interval`, whatever its moves so far."""
        return self.min_move_interval

    def _grow_hold(self, state: SlotState, ends: Releases | None, r2: float, k: int) -> float:
        """How long a grow keeps the ``k`` GPUs it takes out of the free pool, given the grown run
        ``r2`` and the running jobs' releases ``ends``. A lent GPU comes back when the job ends or
        a swap takes it, and swaps take it only for a job whose forecast wait exceeds its run, so
        ("release") the pool is short of ``k`` GPUs until the releases give ``k`` back: at least
        `min_move_interval` (before that the job cannot move), at most ``r2``. ("interval": the
        interval alone, the rule before the tenth pass.)"""
        if ends is None:  # built only for "release" (`_grow`)
            return self.min_move_interval
        return min(r2, max(self.min_move_interval, ends.wait(0, k, state.now)))

    def _cost(self, r: MovableJob) -> float:
        return r.cost(self.move_cost)

    def _movable(self, state: SlotState) -> tuple[list[MovableJob], float]:
        """Running jobs that may move now, and when the next one becomes movable (inf: none)."""
        out, soon = [], math.inf
        for r in state.running:
            if not isinstance(r, MovableJob) or not r.preemptible or r.remaining_one_node is None:
                continue
            c = self._cost(r)
            if c >= self.min_move_interval:  # it could lose more to moves than it runs between them
                continue
            ready = r.start_time + self._move_interval(r)
            if state.now >= ready:
                out.append(r)
            else:
                soon = min(soon, ready)
        return out, soon

    def decide(self, state: SlotState) -> SlotResult:
        if state.node_types:  # one type at a time (bytype.decide_by_type), then moves across types
            res = decide_by_type(self, state, ElasticPolicy.decide)
            return with_type_moves(self, state, res) if self.type_moves and self.types_aware else res
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
        inert = False
        quiet = None
        if left:
            self._quiet = self._quiet_start(state, movable)
            try:
                more, pre, q, z, moved, inert = self._make_room(state, left, movable, free, q, z, base.starts)
                quiet = self._quiet
            finally:
                self._quiet = None
            starts += more
            preempt += pre
        elif self.grow and sum(free) > 0:
            more, pre, moved = self._grow(state, movable, free)
            starts += more
            preempt += pre
        if not preempt:
            if left and quiet is not None and (not inert or quiet.tests or quiet.credits):
                # a swap's score and a tenant's credit change with time: skip only as far as the
                # margins recorded while searching allow (inert: no swap was weighed, only tenants')
                wake = self._quiet_wake(state, base, soon, quiet)
                info = {k: v for k, v in base.info.items() if k != "wake_at"}
                if wake is not None and not base.starts and not more:
                    info["wake_at"] = wake
                return replace(base, info=info)
            if left and not inert:  # a variant's make-room step: no bound on its terms, no skipping
                return replace(base, info={k: v for k, v in base.info.items() if k != "wake_at"})
            if not left and self.grow and sum(free) > 0:
                quiet_s = self._grow_quiet(state, movable, free)
                if not quiet_s > 0:
                    return replace(base, info={k: v for k, v in base.info.items() if k != "wake_at"})
                soon = min(soon, state.now + quiet_s)
            # nothing waits and no grow can become worth it, or the make-room step is inert (no
            # waiting candidate fits or has a forecast wait above its run: that forecast only
            # falls as time passes, so the step stays a no-op until the cluster changes): the
            # core's wake_at says when to ask again
            return self._with_wake(base, soon, bool(left))
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

    # ------------------------------------------------------------------ wake-up
    _SHIPPED = ("_swap_check", "_swap_credit", "_ahead_of", "_move_interval", "_cost", "_make_room", "_victims", "_group")

    def _quiet_start(self, state: SlotState, movable: list[MovableJob]) -> Quiet | None:
        """A `Quiet` for this slot's make-room step, or None where no wake-up is offered: a variant
        that replaces a step or extension point (their terms are not bounded here), an adaptive
        movable job (its rows are not linear in its progress). Capped at the first predicted end of
        a running job (it stops being a victim, and its rows stop shrinking)."""
        cls = type(self)
        if any(getattr(cls, name) is not getattr(ElasticPolicy, name) for name in self._SHIPPED):
            return None
        if any(r.adaptive for r in movable):
            return None
        cap = min((r.predicted_end - state.now for r in state.running if r.predicted_end > state.now), default=math.inf)
        return Quiet(cap, state.now)

    def _quiet_wake(self, state: SlotState, base: SlotResult, soon: float, quiet: Quiet | None) -> float | None:
        """When to ask again after a make-room step that moved nothing although it searched: the
        core's own wake-up, the next job to become movable, and the recorded margins (`Quiet`),
        whichever is first; None when that is within a slot (ask every slot)."""
        core = base.info.get("wake_at")
        if quiet is None or core is None or not quiet.cap > state.slot_len:
            return None
        d = quiet_for(quiet.holds, state.slot_len)
        if not d > 0:
            return None
        return min(float(core), soon, state.now + d)

    def _quiet_tenants(self, state: SlotState, q: Quiet):
        """Per tenant of a waiting job, a bound over [now, now + d] on its swap credit per GPU over
        V*Theta (`TenantBound`, memoised per d), or None when the tenant term cannot act before
        an event (off, or fewer than two tenants waiting)."""
        users = self._tenants_of(state)
        if users is None:
            return None
        bound = self._tenant_bound(state, users)
        col = {k: i for i, k in enumerate(bound.names)}
        memo: dict[float, object] = {}
        ends: dict[float, tuple[np.ndarray, float, np.ndarray, np.ndarray, float]] = {}
        now_at: dict[float, tuple[np.ndarray, np.ndarray, float, float]] = {}  # `TenantBound._at(0.0)`, a pure function

        def per(user: str, d: float) -> float:
            hit = memo.get(d)
            if hit is None:
                hit = memo[d] = bound.per_gpu(d)
            return float(hit[col[user]])  # type: ignore[index]

        def at_ends(d: float) -> tuple[np.ndarray, float, np.ndarray, np.ndarray, float]:
            """Over [now, now + d]: each tenant's least shortfall, the largest the floor can be,
            each one's least and largest GPU-seconds owed, the scale now. Each shortfall and each
            amount owed (max(0, a linear function)) is monotone, so lies between its ends; the
            floor is the least shortfall, so at most the least of their larger ends; the scale
            (the mean entitlement) only grows."""
            hit = ends.get(d)
            if hit is None:
                if 0.0 not in now_at:  # the same for every d: once a call
                    now_at[0.0] = bound._at(0.0)
                ent0, _, _, scale0 = now_at[0.0]
                ent1, y1, _, _ = bound._at(d)
                o0, o1 = bound.y0 * ent0, y1 * ent1
                hit = ends[d] = (np.minimum(bound.y0, y1), float(np.maximum(bound.y0, y1).min()),
                                 np.minimum(o0, o1), np.maximum(o0, o1), scale0)
            return hit

        def least(user: str, d: float) -> float:
            """A lower bound on its credit per GPU over V*Theta over [now, now + d]."""
            lo, top, _, _, scale0 = at_ends(d)
            return scale0 * max(0.0, float(lo[col[user]]) - top)

        def owed(user: str, d: float) -> tuple[float, float]:
            """Bounds (least, largest) on its GPU-seconds owed (Y_k) over [now, now + d]."""
            _, _, olo, ohi, _ = at_ends(d)
            return float(olo[col[user]]), float(ohi[col[user]])

        def vector(d: float) -> np.ndarray:
            hit = memo.get(d)
            if hit is None:
                hit = memo[d] = bound.per_gpu(d)
            return hit  # type: ignore[return-value]

        per.least = least  # type: ignore[attr-defined]
        per.owed = owed  # type: ignore[attr-defined]
        per.owed_hi = lambda d: at_ends(d)[3]  # type: ignore[attr-defined]  # `owed`'s largest, every tenant
        per.vector = vector  # type: ignore[attr-defined]
        per.col = col  # type: ignore[attr-defined]
        return per

    def _quiet_rank(self, memo: SlotMemo, qt: Quiet) -> None:
        """The victims' order (longest remaining run first within the same over-request flag), as
        far as the victims walks read it (`SlotMemo.depth`), holds while no two neighbours there can
        swap places: each value only falls, so one that stays above its neighbour stays above every
        victim after it, and the walks see the same victims in the same order. (The group step
        reads the order too, but only to pick the first victim whose swap scores > 0: in a slot
        that moved nothing none did, and each stays so by its own margin, whatever the order.)"""
        us = memo.usable[: memo.depth + 1]
        for va, vb in zip(us, us[1:]):
            ra, rb = va.job, vb.job
            if (ra.gpus > ra.requested_gpus) != (rb.gpus > rb.requested_gpus):
                continue
            ka, kb = qt.fade(ra), qt.fade(rb)
            if va.r_now > vb.r_now:  # the second's only falls: the first's fall closes the gap
                qt.keep(va.r_now - vb.r_now, va.r_now * ka)
            elif ka > 0 or kb > 0:
                qt.fail()  # a tie broken by id: time may break it the other way

    def _quiet_swap(self, qt: Quiet, per, now: float, n: int, theta: float, z: float, q: float, s0: float, w0: float,
                    x0: float, plan: Path, g: int, user: str) -> None:
        """A swap scored <= 0 stays so while s0 + a*d + b*d^2 (plus its tenant's credit bound) is
        negative: a bound on how much the score can rise within d. ``s0``: its score without the
        tenant term; ``w0``: the bracket Z multiplies (grows at 1/s); ``x0``: the bracket V*Theta
        multiplies (pen + cost - saved). Z and Theta grow by n per second; the suspended victims'
        work shrinks (the score rises) at most at their `fade_rate`; a shrink's added run shrinks
        too (x falls, the score rises), at most at its fade rate; the saved wait only falls (x
        rises, the score falls), so it is left out."""
        wk, cs = plan.fades(qt)
        # z*w rises by z0*d + n*w0*d + n*d^2; -V*theta*x by V*theta0*cs*d + V*n*max(0, -x0)*d + V*n*cs*d^2
        a = self.q_weight * q * wk + z + n * max(0.0, w0) + self.V * (theta * cs + n * max(0.0, -x0))
        b = n + self.V * n * cs
        if per is None:
            qt.keep(-s0, a, b)
            return
        # s0 + a*d + b*d^2 + V*(theta + n*d)*g*per(user, d) < 0, tested for all swaps at once (`Quiet.holds`)
        qt.swap(s0, a, b, theta, n, g, per.col[user], self.V, per.vector)

    def _grow_quiet(self, state: SlotState, movable: list[MovableJob], free: list[int]) -> float:
        """How long a grow step that moved nothing stays a no-op while nothing arrives or ends
        (seconds, 0: ask every slot). A grow needs a count whose gain r_now - r2 exceeds twice the
        move cost plus the arrivals' expected wait, rate * hold^2 / 2 / F * (GPUs taken). Over
        [now, now + d] the gain only falls (both runs shrink by one factor), the recent arrival rate
        only falls (no arrival: its value at now + d is the least), and the hold is at least the
        grown run faded (`fade_rate`) or the interval or the releases' forecast less d; the grow
        stays too dear while the gain now is at most the cost with those lower bounds."""
        cls = type(self)
        if any(getattr(cls, n) is not getattr(ElasticPolicy, n) for n in ("_grow", "_grow_hold", "_cost", "_move_interval")):
            return 0.0
        now, nfree = state.now, sum(free)
        ends = Releases(state.running) if self.grow_hold == "release" else None
        live = []  # (gain now, 2c, r2, its fade rate, GPUs taken, release wait now)
        for r in movable:
            if r.adaptive:
                return 0.0  # its rows are not one factor of its progress
            r_now, _ = r.best_remaining(r.gpus)
            if not math.isfinite(r_now) or r.remaining_one_node is None:
                continue
            c, kr = self._cost(r), fade_rate(r, now)
            avail = list(free)
            for node, k in r.placement:
                avail[node] += k
            for g2 in range(r.gpus + 1, min(nfree + r.gpus, len(r.remaining_one_node)) + 1):
                for spans in (False, True):
                    r2 = r.remaining(g2, spans)
                    # no layout on the free GPUs and its own: never (they stay as they are)
                    if (math.isfinite(r2) and r_now - r2 > 2 * c
                            and FreeGpus(tuple(avail), state.gpus_per_node).take(g2, not spans) is not None):
                        wait = ends.wait(0, g2 - r.gpus, now) if ends is not None else 0.0
                        live.append((r_now - r2, 2 * c, r2, kr, g2 - r.gpus, wait))
        if not live:
            return math.inf
        cap = min((r.predicted_end - now for r in state.running if r.predicted_end > now), default=math.inf)
        per = max(1, nfree)

        def holds(d: float) -> bool:
            if not d < cap:
                return False
            rate = arrival_rate(SimpleNamespace(arrivals_t=state.arrivals_t, now=now + d, slot_len=state.slot_len),  # type: ignore[arg-type]
                                self.min_window)
            for gain, c2, r2, kr, dg, wait in live:
                r2_lo = r2 * max(0.0, 1.0 - kr * d)
                if ends is None:
                    hold = self.min_move_interval
                else:
                    hold = min(r2_lo, max(self.min_move_interval, wait - d))
                if not gain <= c2 + rate * hold * hold / 2 / per * dg:
                    return False
            return True

        return quiet_for(holds, state.slot_len)

    # ------------------------------------------------------------------ make room
    def _make_room(
        self, state: SlotState, left: list[WaitingJob], movable: list[MovableJob], free: list[int], q: float, z: float,
        base_starts: Sequence[Decision] = (),
    ) -> tuple[list[Decision], list[str], float, float, dict[str, str], bool]:
        """Swaps: waiting jobs started on GPUs taken from movable jobs (shrunk or suspended) when
        the swap's score is positive. Returns (starts, preempted ids, Q after, Z after, move notes,
        inert): inert when no candidate fitted and none had a forecast wait above its run, so that
        nothing was tried that the passing of time alone could turn into a move (`decide`'s wake_at)."""
        now, slot = state.now, state.slot_len
        theta = q + z
        mean_work = (q / max(1, len(left))) if left else 0.0
        waits = [max(0.0, now - w.submit_time) for w in left]
        ends = Releases(state.running)  # the release forecast
        used: set[str] = set()
        starts: list[Decision] = []
        preempt: list[str] = []
        moved: dict[str, str] = {}
        # the victims in order: longest remaining run first within the same over-request flag (sorted at the first search)
        memo = SlotMemo(self, movable, ordered=False)
        self._cands.prune(state.waiting)
        self._runs_best.prune(state.waiting)
        last = self._last_order
        if last is not None and len(last[0]) == len(left) and all(map(operator.is_, last[0], left)):
            cands, order = last[1], last[2]  # the same jobs left, in the same order: the same candidates
        else:
            cands = []
            for pos, w in enumerate(left):
                cand = self._cands(w)
                if cand is not None:
                    cands.append((cand[0], w.job_id, pos, cand[1], cand[2], cand[3]))
            order = heapq.nsmallest(self.max_candidates, cands)  # shortest first, whatever the tenant (as the fill)
            self._last_order = (left, cands, order)
        ahead = 0  # GPUs asked by shorter jobs still waiting: they take released GPUs before j
        older = self._ahead_of(left, cands)
        check = self._swap_check(state, left, base_starts)
        behind = self._swap_tenants(state)
        owed_memo: dict[str, float] = {}  # per tenant, for the call (`tenant_owed` reads only the slot's state)

        def owed(user: str) -> float:
            hit = owed_memo.get(user)
            if hit is None:
                hit = owed_memo[user] = self.tenant_owed(state, user)
            return hit
        qt = self._quiet
        per = self._quiet_tenants(state, qt) if qt is not None else None
        n_wait = len(state.waiting)  # Z grows by n_wait per second while nothing changes
        ranked = False  # a candidate searched: the victims' order it read is recorded at the end (`_quiet_rank`)
        flips: list[tuple[float, str, int, float]] = []  # per searching candidate: its forecast wait's margin over its run, its tenant, GPUs, best run
        taken: set[int] = set()  # positions in `left` started by a group swap earlier in this slot
        inert = True
        searches = 0
        nfree = sum(free)  # kept with `free`: most candidates are turned away on the count alone
        free_t = tuple(free)  # kept with `free` too: the victims walks and the group step key on it
        for k, (_, _, pos, g, t_j, shape) in enumerate(order):
            if pos in taken:
                continue
            w = left[pos]
            pl = memo.fit(shape, free_t) if nfree >= g else None
            if pl is not None:  # GPUs earlier moves left over: start it as the fill would
                inert = False
                self._take(free, pl)
                nfree, free_t = sum(free), tuple(free)
                if check is not None:
                    check.started(w, g, pl)
                starts.append(Decision(w.job_id, g, pl, 0.0, f"elastic: fits on GPUs freed this slot, {g} GPUs"))
                q -= min(w.work, mean_work)
                z -= waits[pos]
                continue
            wait_j = ends.wait(nfree, (ahead if older is None else older[pos]) + g, now)
            ahead += g
            # a swap helps only a job that would wait longer than it runs; its tenant's credit
            # counts as wait it saves (the score's bracket), for the GPUs that repay what the
            # tenant is owed (`repaying`, on its best run: the most it can count)
            lift = 0.0
            if behind is not None and not wait_j > t_j:
                lift = behind(w.user) * repaying(g, owed(w.user), t_j)
            if not wait_j + lift > t_j:
                if qt is not None and per is not None:  # its tenant falling further behind would make it search
                    qt.credit(per.col[w.user], g, t_j, t_j - wait_j, per)
                continue  # not even a free swap would help it
            inert = False
            # it may stop searching (its forecast wait falls by one second a second; its tenant's
            # credit may fall): that changes nothing while its search moves nothing, unless the
            # search budget is spent (a later candidate would search in its place)
            flips.append((wait_j - t_j, w.user, g, t_j))
            if searches >= self.max_searches:
                continue
            searches += 1
            ranked = True
            plan = self._victims(shape, g, t_j, free_t, nfree, memo, used)
            score = -math.inf
            if plan is not None:
                place = plan.place
                cost = plan.cost(t_j)
                run_j = w.run_time(g, len(place) > 1)
                pen_j = run_j - self._runs_best(w)
                credit_j = self._swap_credit(w, mean_work)
                gain = self.q_weight * q * (credit_j - plan.work(mean_work))
                gain += z * ((waits[pos] + slot) - plan.waited(slot))
                # j gains the wait it skips, at most until the victims' GPUs would come back anyway
                saved = min(wait_j, plan.r_max)
                score = gain - self.V * theta * (pen_j + cost - saved)
                if behind is not None:  # j's tenant gains g GPUs (at most what repays it), each victim's loses what it gives up
                    given = plan.given(behind)
                    g_rep = repaying(g, owed(w.user), run_j)
                    score += self.V * theta * (behind(w.user) * g_rep - given)
                if score > 0 and check is not None and not check.accept(w, g, place, run_j, pen_j, saved, cost,
                                                                        plan.chosen(t_j), free, list(plan.avail)):
                    continue
                if qt is not None and not score > 0:
                    tenant_now = 0.0
                    if behind is not None:
                        tenant_now = self.V * theta * (behind(w.user) * g_rep - given)
                    w0 = (waits[pos] + slot) - plan.waited(slot)
                    self._quiet_swap(qt, per, now, n_wait, theta, z, q, score - tenant_now, w0, pen_j + cost - saved,
                                     plan, g, w.user)
            if not score > 0:
                if self.group and check is None:
                    grp = self._group(state, order, k, wait_j, ahead - g, ends, left, waits, taken, free, free_t, nfree,
                                      memo, used, q, z, mean_work)
                    if grp is not None:
                        more, victim, dq, dz = grp
                        starts += more
                        preempt.append(victim)
                        ids = [d.job_id for d in more]
                        moved[victim] = (f"suspend ({next(r.gpus for r in movable if r.job_id == victim)} GPUs) for {len(ids)} jobs: " + ", ".join(ids[:5])
                                         + (", ..." if len(ids) > 5 else ""))
                        used.add(victim)
                        nfree, free_t = sum(free), tuple(free)
                        ahead -= g
                        q += dq
                        z += dz
                continue
            assert plan is not None
            ahead -= g
            # carry it out: victims first (their GPUs are free for this slot's starts), then j
            free[:] = plan.avail
            self._take(free, place)
            nfree, free_t = sum(free), tuple(free)
            for r, new, c, why in plan.chosen(t_j):
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
            starts.append(Decision(w.job_id, g, place, float(score),
                                   f"elastic swap: score {score:.3g}, saves {saved:.0f}s wait for {cost:.0f}s of moves"))
            q -= credit_j
            z -= waits[pos]
        if qt is not None and ranked:
            self._quiet_rank(memo, qt)
        if qt is not None and searches >= self.max_searches:
            for m, user, g, t in flips:
                if m > 0:
                    qt.keep(m, 1.0)
                elif per is not None:  # searching for its tenant's credit: it must stay above the gap
                    qt.tests.append(lambda d, u=user, g=g, t=t, m=m: m - d + per.least(u, d) * repaying(g, per.owed(u, d)[0], t) > 0)
                else:
                    qt.fail()
        return starts, preempt, q, z, moved, inert

    def _group(
        self, state: SlotState, order: list, k: int, wait_j: float, ahead: int, ends: Releases,
        left: list[WaitingJob], waits: list[float], taken: set[int], free: list[int], free_t: tuple[int, ...], nfree: int,
        memo: SlotMemo, used: set[str], q: float, z: float, mean_work: float,
    ) -> tuple[list[Decision], str, float, float] | None:
        """A group swap: one movable job larger than candidate ``order[k]`` suspended, its GPUs
        taken by that job and the shorter-first waiting candidates after it that fit, all of its
        GPUs used (the exchange argument: the victim waits about the batch's longest run plus its
        move cost). Scored as a swap, summed over the batch; the first victim (longest remaining
        first) with a positive score is taken, the free vector updated. Returns (the batch's
        starts, the victim's id, the change of Q, the change of Z), or None."""
        now, slot = state.now, state.slot_len
        theta = q + z
        g_j = order[k][3]
        free_total = nfree  # sum(free), kept by the caller
        # each candidate's forecast wait depends on the GPUs asked ahead of it, not on the victim:
        # the candidates that would gain from a swap (forecast wait above their run) are listed
        # once per call, in the scan's order (`_batch` passes over those asking more GPUs than are left)
        _, _, pos_k, _, t_k, shape_k = order[k]
        if not wait_j > t_k:
            return None
        qt = self._quiet
        rows, first, closest = self._forecast_after(order, k, ahead, free_total, taken, ends, now, memo)
        closest = min(wait_j - t_k, closest)  # the least margin of a forecast wait above its run (each falls at 1/s)
        if qt is not None:
            qt.keep(closest, 1.0)
        head = (pos_k, g_j, shape_k, wait_j)  # the scan: this candidate, then rows[first:] (pos, g, shape, forecast wait)
        batches: dict[tuple[int, ...], tuple] = {}  # per victim's counts (`_batch`), for this call
        # the batch is placed on the nodes with a free GPU and the victim's (as `moveplan.fit_on`): a victim
        # costs its batch, not a pass over every node; those nodes and their counts are a pure function
        # of the free vector and the victim's placement (`moveplan.trial_nodes`, kept across calls)
        if memo.trial_free is not free_t:  # per victim, `trial_nodes` on this free vector: asked by every candidate
            memo.trial_free, memo.trials = free_t, {}
        trials = memo.trials
        for v in memo.bigger(g_j):
            r = v.job
            if r.job_id in used:
                continue
            got_t = trials.get(r.job_id)
            if got_t is None:
                got_t = trials[r.job_id] = trial_nodes(free_t, r.placement)
            nodes, key, trial_total = got_t
            if g_j > trial_total:
                continue  # the candidate itself cannot fit there
            # the batch over positions in ``trial`` depends on the counts alone (the placement
            # rule reads only counts, ties by lowest index) and on the scan: victims whose nodes
            # give the same counts share it (`_batch`)
            got = batches.get(key)
            if got is None:
                got = batches[key] = self._batch(head, rows, first, list(key), trial_total, free_total, left, waits, slot,
                                                 mean_work)
            subs, trial_total, pen, credit, wsum, longest = got
            if not subs or trial_total > free_total:
                continue  # the batch leaves some of r's GPUs to other jobs: r's wait is not bounded by it
            saved = 0.0
            for sub_i in subs:
                saved += min(sub_i[4], v.r_now)
            gain = self.q_weight * q * (credit - min(r.work_left, mean_work)) + z * (wsum - (r.waited_s + slot))
            score = gain - self.V * theta * (pen + longest + v.cost - saved)
            if not (score > 0 and saved > pen + longest + v.cost):
                if qt is not None and saved > pen + longest + v.cost:  # else it stays so: the saved wait only falls
                    # how much the score can rise within d (`_quiet_swap`): the victim's work
                    # shrinks, Z and the batch's waits grow; the saved wait only falls
                    n, nb, kr = len(state.waiting), len(subs), qt.fade(r)
                    w0 = wsum - (r.waited_s + slot)
                    x0 = pen + longest + v.cost - saved
                    a = self.q_weight * q * r.work_left * kr + z * nb + n * max(0.0, w0) + self.V * n * max(0.0, -x0)
                    qt.keep(-score, a, n * nb)
                continue
            # the batch's placements over node ids: only a swap that is made needs them
            batch = [(pos, g, tuple((nodes[a], n) for a, n in sub), run_i) for pos, g, sub, run_i, _ in subs]
            for node, n in r.placement:
                free[node] += n
            for _, _, pl, _ in batch:
                self._take(free, pl)
            starts = []
            for pos, g, pl, run_i in batch:
                taken.add(pos)
                starts.append(Decision(left[pos].job_id, g, pl, float(score),
                                       f"elastic group swap: {r.job_id} ({r.gpus} GPUs) suspended for {len(batch)} jobs, "
                                       f"score {score:.3g}, saves {saved:.0f}s wait for {longest + v.cost:.0f}s"))
            dq = min(r.work_left, mean_work) - credit
            dz = r.waited_s - sum(waits[pos] for pos, _, _, _ in batch)
            return starts, r.job_id, dq, dz
        return None

    def _batch(
        self, head: tuple[int, int, Shape, float], rows: list[tuple[int, int, Shape, float]], first: int, trial: list[int],
        trial_total: int, free_total: int, left: list[WaitingJob], waits: list[float], slot: float, mean_work: float,
    ) -> tuple[list[tuple[int, int, Placement, float, float]], int, float, float, float, float]:
        """A group swap's batch on free counts ``trial`` (``trial_total`` of them; taken in place):
        of the scan, ``head`` (the candidate, which must fit) then ``rows[first:]`` (entries (pos,
        g, shape, forecast wait)), the candidates that fit, shorter first, until no more than
        ``free_total`` are left: per start (pos, g, placement over positions in ``trial``, run,
        forecast wait), the count left, and the batch's penalty, credit, waits (each plus a slot)
        and longest run, summed in the scan's order. A candidate asking more GPUs than are left is
        passed over without a placement, whatever its shape."""
        subs: list[tuple[int, int, Placement, float, float]] = []
        pen = credit = wsum = 0.0
        longest = 0.0
        i, end = first - 1, len(rows)
        pos, g, shape, wait_i = head
        while True:
            sub = fit_counts(shape, tuple(trial)) if g <= trial_total else None
            if sub is None:
                if i < first:
                    break  # the candidate itself does not fit
            else:
                self._take(trial, sub)
                w = left[pos]
                run_i = w.run_time(g, len(sub) > 1)
                trial_total -= sum(n for _, n in sub)
                subs.append((pos, g, sub, run_i, wait_i))
                pen += run_i - self._runs_best(w)
                credit += self._swap_credit(w, mean_work)
                wsum += waits[pos] + slot
                longest = max(longest, run_i)
                if trial_total <= free_total:
                    break
            i += 1
            while i < end and rows[i][1] > trial_total:  # asks more than are left: never fits
                i += 1
            if i >= end:
                break
            pos, g, shape, wait_i = rows[i]
        return subs, trial_total, pen, credit, wsum, longest

    @staticmethod
    def _forecast_after(
        order: list, k: int, ahead: int, free_total: int, taken: set[int], ends: Releases, now: float, memo: SlotMemo
    ) -> tuple[list[tuple[int, int, Shape, float]], int, float]:
        """The candidates after ``order[k]`` (not taken) whose forecast wait exceeds their run, in
        the scan's order as (pos, g, shape, wait): ``rows[first:]`` of the returned (rows, first,
        least margin); the least such margin is inf when there are none. Each
        one's wait counts the GPUs asked ahead of it: ``ahead`` before ``order[k]``, then the
        candidates between. Those counts differ from one candidate's call to the next's by the
        same offset while nothing starts, so the waits are listed once per (free GPUs, starts,
        offset) in the slot (`SlotMemo.forecasts`) and each call reads the tail after its own."""
        fc = memo.forecasts
        pre = memo.asked.get(len(taken))  # per position in order, the GPUs asked before it (taken ones not counted)
        if pre is None:
            acc, pre = 0, [0]
            for e in order:
                if e[2] not in taken:
                    acc += e[3]
                pre.append(acc)
            memo.asked[len(taken)] = pre
        off = ahead - pre[k]
        key = (free_total, len(taken), off)
        hit = fc.get(key)
        if hit is None or hit[0] > k + 1:
            at: list[int] = []
            rows: list[tuple[int, int, Shape, float]] = []
            margins: list[float] = []
            for i in range(k + 1, len(order)):
                _, _, pos, g, t_i, shape = order[i]
                if pos in taken:
                    continue
                wait_i = ends.wait(free_total, off + pre[i] + g, now)
                if wait_i > t_i:
                    at.append(i)
                    rows.append((pos, g, shape, wait_i))
                    margins.append(wait_i - t_i)
            least = [math.inf] * (len(margins) + 1)  # least margin from each row on
            for a in range(len(margins) - 1, -1, -1):
                least[a] = min(margins[a], least[a + 1])
            hit = fc[key] = (k + 1, at, rows, least)
        _, at, rows, least = hit
        a = bisect_left(at, k + 1)
        return rows, a, least[a]

    def _victims(self, shape: Shape, g: int, t_j: float, free: tuple[int, ...], nfree: int, memo: SlotMemo,
                 used: set[str]) -> Path | None:
        """The victims (shrunk or suspended, in order) whose GPUs let a job of ``shape`` that runs
        ``t_j`` fit, with the free GPUs after the moves and the job's placement (`Path`); None if
        no set of movable jobs does (``free``: the free GPUs per node, ``nfree`` their sum). A walk that
        no choice of shrink against suspend shaped is kept for the slot and the next job of the shape
        on the same GPUs reads it (`SlotMemo.paths`)."""
        # the GPUs of every victim still usable and the free ones cannot hold g: nothing fits (exact prune)
        if nfree + memo.gpus_left(used) < g:
            return None
        key = (shape, free, len(used))  # `used` only grows within a slot: its size keys it
        hit = memo.paths.get(key, memo)  # (memo: not kept; a kept walk may be None)
        if hit is not memo:
            return hit  # type: ignore[return-value]
        path, fixed = self._walk(shape, g, t_j, free, memo, used)
        if fixed:
            memo.paths[key] = path
        return path

    def _walk(
        self, shape: Shape, g: int, t_j: float, avail: tuple[int, ...], memo: SlotMemo, used: set[str]
    ) -> tuple[Path | None, bool]:
        """`_victims`' walk: the usable victims in order, each shrunk or suspended, until the job
        fits; and whether no step's choice depended on ``t_j`` (then it holds for any run)."""
        steps: list = []
        fixed = True
        qt = self._quiet
        for depth, v in enumerate(memo.usable, 1):
            r = v.job
            if r.job_id in used:
                continue
            memo.depth = max(memo.depth, depth)
            trial, option = memo.shrink(v, shape, avail)
            # Suspended, r waits about j's run (the exchange argument) only if j uses all of r's
            # GPUs: GPUs j does not need go to other jobs and r would wait for them too. So a
            # victim larger than j is only ever shrunk.
            if option is not None and r.gpus <= g:  # shrink or suspend: which is cheaper (depends on t_j)
                fixed = False
                susp_cost = t_j + v.cost
                if qt is not None:
                    qt.keep(abs(susp_cost - option[1]), abs(option[1] - v.cost) * qt.fade(r))
                if option[1] < susp_cost:
                    new, cost, avail, why = option
                else:
                    new, cost, avail, why = None, susp_cost, trial, ""
            elif option is not None:
                new, cost, avail, why = option
            elif r.gpus <= g:
                new, cost, avail, why = None, 0.0, trial, ""
            else:
                continue
            steps.append((v, new, cost, why))
            pl = memo.fit(shape, avail)
            if pl is not None:
                return Path(steps, list(avail), pl, fixed), fixed
        return None, fixed

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
        # A grown job holds the GPUs it took for H (`_grow_hold`): arrivals meanwhile that need
        # them wait up to that long. Expected cost per GPU taken from the F free ones:
        # rate * H * H/2 / F (rate: recent arrivals per second off the state; 0 without history).
        rate, nfree = arrival_rate(state, self.min_window), max(1, sum(free))
        ends = Releases(state.running) if self.grow_hold == "release" else None
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
                    if not math.isfinite(r2):
                        continue
                    hold = self._grow_hold(state, ends, r2, g2 - r.gpus)
                    if r_now - r2 <= 2 * c + rate * hold * hold / 2 / nfree * (g2 - r.gpus):
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


@dataclass
class ElasticUnaware(ElasticPolicy):
    """The heterogeneity-unaware reference of `ElasticPolicy` (`lyapunov.LyapunovUnaware`)."""

    types_aware: ClassVar[bool] = False
    name: str = "elastic-unaware"


def repaying(g: int, owed: float, run: float) -> float:
    """The GPUs a start's tenant credit counts for (`lyapunov.repaying_gpus`, for one start): g,
    at most the owed GPU-seconds over the run; 0 for a run that is not positive and finite."""
    return min(float(g), owed / run) if 0 < run < math.inf else 0.0
