"""What elastic's make-room step computes within one slot (lyasched/policy/elastic.py): the
movable jobs as victims, memoised placements and shrink options, a waiting job as a swap
candidate, the victims a swap would move (`Path`), the counts-only forecast of a wait
(`Releases`), the recent arrival rate. A `SlotMemo` lives for one `decide` call; what is kept
between slots is pure functions of inputs that do not move with time: placements (`_FITS`: the
shape and the free vector) and the group step's per-victim nodes and counts (`trial_nodes`: the
free vector and the victim's placement), so decisions are those of computing everything afresh.

Why the searches themselves are not kept from one call to the next when only time moved (same
running jobs on the same GPUs, same waiting jobs, same free vector). Over such a gap: each
waiting job's wait grows (Z with them); a forecast wait max(0, t_i - now) falls, though the
release index i that gives the GPUs is integers only and does not move; a running job's rows and
work are its template times one scalar, its share left (`sim.moves`, `share_left`), which falls,
at a different rate per job; the tenant credits step with the ledger. What each part of a
search decides from them:

- the victims' order (over-request flag, then longest remaining run) compares different jobs'
  scaled rows: it can change; checking it is the same pass over the victims as building it;
- a victim's shrink option takes the largest count with r2 <= max_stretch * r_req, both of its
  own rows: the same scalar multiplies both, but each product is rounded (and the stretch product
  twice), so near the boundary the test can flip, and `best_remaining`'s one-node / across-nodes
  choice can tie after rounding; proving it unchanged means redoing the test per count, which is
  the option's cost apart from its placements (memoised across slots already);
- shrink against suspend, whether a candidate searches (forecast wait above its run) and which
  candidates a group batch scans are comparisons of terms that move with time;
- every score and every margin the wake-up reads (`Quiet`) is a sum of such terms. The slot
  digest (each call's Q and Z) depends on when the simulator asks next, that is on these margins
  to the last bit, so they are recomputed on every call; a margin kept from an earlier call is a
  bound, not the value a full search gives.

So a kept search could save only its structure (the walk's placements, the batch's fits), and
those are the parts already memoised across slots; the rest of a search is its own check. On the
first 3,000 Philly jobs at load 1.0, a call searches for about 43 of about 53 waiting jobs and the
time is spread over many small steps (no line of the make-room step above 1.5% of the replay).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate, chain
from typing import TYPE_CHECKING, Sequence

import numpy as np

from lyasched.policy.common import Shape, fit_shape, nearest_allowed, shape_of
from lyasched.policy.movable import MovableJob
from lyasched.policy.placement import equal_placement, one_node_placement
from lyasched.policy.state import Placement, SlotState, WaitingJob

if TYPE_CHECKING:
    from lyasched.policy.elastic import ElasticPolicy


class Victim:
    """A movable job as the make-room step reads it, computed once per slot (a plain class with
    slots: one is made per movable job per slot)."""

    __slots__ = ("job", "r_now", "cost", "usable")

    def __init__(self, job: MovableJob, r_now: float, cost: float, usable: bool) -> None:
        self.job = job
        self.r_now = r_now  # remaining run on its current GPUs
        self.cost = cost  # its move cost
        self.usable = usable  # it has GPUs and a finite, positive remaining run


# A placement depends on the shape and the free vector only (the placement rule reads nothing
# else), so placements are also kept across slots: consecutive slots ask the same ones.
_FITS: dict[tuple[Shape, tuple[int, ...]], Placement | None] = {}
_FITS_MAX = 200_000  # entries; then it starts afresh
_NONE = object()


class SlotMemo:
    """What one slot's make-room step computes again and again, memoised by its inputs: victims'
    remaining runs and move costs, placements of a shape on a free vector, and each victim's
    shrink option for a shape on a free vector, the victims walks (`Path`) and the group step's
    forecasts. Lives for one `decide` call (placements are also kept across slots: `_FITS`), so
    decisions are those of computing everything afresh."""

    def __init__(self, pol: ElasticPolicy, victims: list[MovableJob], *, ordered: bool = True) -> None:
        self.pol = pol
        # ``victims`` in the make-room order, or (``ordered`` False) to be sorted into it: over-request
        # first, then longest remaining run, then id. Read at the first search only (`usable`):
        # most slots search for no victim
        self._jobs, self._ordered = victims, ordered
        self._victims: list[Victim] | None = None
        self._usable: list[Victim] = []
        self._gpus: list[tuple[str, int]] = []
        self._left: dict[int, int] = {}
        self._fits: dict[tuple[Shape, tuple[int, ...]], Placement | None] = {}
        self._shrinks: dict[tuple[str, Shape, tuple[int, ...]], tuple[tuple[int, ...], tuple | None]] = {}
        # a victims walk per (shape, free GPUs, victims used so far) that no job's run changes (`Path.fixed`)
        self.paths: dict[tuple[Shape, tuple[int, ...], int], Path | None] = {}
        self._bigger: dict[int, list[Victim]] = {}
        # the group step's `trial_nodes` per victim id, for the free vector ``trial_free`` (`ElasticPolicy._group`)
        self.trial_free: tuple[int, ...] | None = None
        self.trials: dict[str, tuple[list[int], tuple[int, ...], int]] = {}
        self.depth = 0  # how many of `usable` the deepest victims walk so far looked at
        # the group step's forecast waits (`ElasticPolicy._forecast_after`): per count of group
        # starts, the GPUs asked before each candidate; per (free GPUs, starts, offset) the waits
        self.asked: dict[int, list[int]] = {}
        self.forecasts: dict[tuple[int, int, int], tuple[int, list[int], list[tuple[int, int, Shape, float]], list[float]]] = {}

    def _build(self) -> list[Victim]:
        out = []
        for r in self._jobs:
            r_now = r.best_remaining(r.gpus)[0]  # inf without GPUs (no row entry for 0)
            usable = r.gpus > 0 and math.isfinite(r_now) and r_now > 0
            out.append(Victim(r, r_now, self.pol._cost(r), usable))
        if not self._ordered:
            out.sort(key=lambda v: (-(v.job.gpus > v.job.requested_gpus), -v.r_now, v.job.job_id))
        self._usable = [v for v in out if v.usable]  # the others are never moved to make room
        self._gpus = [(v.job.job_id, v.job.gpus) for v in self._usable]
        self._victims = out
        return out

    @property
    def victims(self) -> list[Victim]:
        """Every movable job as a `Victim`, in the make-room order."""
        return self._victims if self._victims is not None else self._build()

    @property
    def usable(self) -> list[Victim]:
        """The victims with GPUs and a finite, positive remaining run, in order."""
        if self._victims is None:
            self._build()
        return self._usable

    def bigger(self, g: int) -> list[Victim]:
        """The usable victims holding more than ``g`` GPUs, in their order (a group swap's victims)."""
        hit = self._bigger.get(g)
        if hit is None:
            hit = self._bigger[g] = [v for v in self.usable if v.job.gpus > g]
        return hit

    def gpus_left(self, used: set[str]) -> int:
        """GPUs held by victims not yet moved this slot (``used`` only grows within a slot, so its
        size keys the memo)."""
        hit = self._left.get(len(used))
        if hit is None:
            if self._victims is None:
                self._build()
            hit = self._left[len(used)] = sum(k for jid, k in self._gpus if jid not in used)
        return hit

    def fit(self, shape: Shape, free: Sequence[int]) -> Placement | None:
        """`fit_shape`, memoised; fewer free GPUs than the shape needs never fit."""
        key = (shape, tuple(free))
        if key in self._fits:
            return self._fits[key]
        pl = _FITS.get(key, _NONE)
        if pl is _NONE:
            pl = None
            if sum(free) >= shape[0]:
                nodes = [i for i, f in enumerate(free) if f]
                hit = fit_on(shape, nodes, [free[i] for i in nodes])
                pl = hit[1] if hit is not None else None
            if len(_FITS) >= _FITS_MAX:
                _FITS.clear()
            _FITS[key] = pl
        self._fits[key] = pl  # type: ignore[assignment]
        return pl  # type: ignore[return-value]

    def shrink(self, v: Victim, shape: Shape, avail: tuple[int, ...]) -> tuple[tuple[int, ...], tuple | None]:
        """``avail`` with the victim's GPUs released (``trial``), and the victim's shrink that lets
        ``shape`` fit there: (new (g, placement), added completion time, free after, why), or None.
        The largest allowed count below its current one that lets the job fit, within max_stretch
        of its run at the request (the core's no-sliver rule)."""
        r = v.job
        key = (r.job_id, shape, avail)
        hit = self._shrinks.get(key)
        if hit is not None:
            return hit
        trial_l = list(avail)
        for node, k in r.placement:
            trial_l[node] += k
        trial = tuple(trial_l)
        option = None
        r_now, c = v.r_now, v.cost
        req = max(1, r.requested_gpus)
        assert r.remaining_one_node is not None  # a movable view always carries its rows
        r_req, _ = r.best_remaining(min(req, len(r.remaining_one_node)))
        stretch = self.pol.max_stretch
        for g2 in range(r.gpus - 1, 0, -1):
            r2, spans = r.best_remaining(g2)
            if not math.isfinite(r2) or (g2 < req and r2 > stretch * r_req):
                continue
            pl2 = subset_placement(r.placement, g2, spans)
            if pl2 is None:
                continue
            t2 = list(trial)
            for node, k in pl2:
                t2[node] -= k
            if self.fit(shape, t2) is not None:
                option = ((g2, pl2), r2 + c - r_now, tuple(t2), f"run {r_now:.0f}s -> {r2:.0f}s + {c:.0f}s move")
                break
        self._shrinks[key] = hit = (trial, option)
        return hit


class Path:
    """The victims one waiting job's swap would move (`ElasticPolicy._victims`), in order: each
    step is (victim, its shrink (GPUs, placement) or None when suspended, a shrink's added
    completion time, a shrink's note); ``avail`` the free GPUs after them, ``place`` the job's
    placement there. A suspension costs the job's run plus the victim's move cost, so the walk is
    kept for one run; ``fixed``: no step chose between shrink and suspend, so the same walk holds
    for every job of the shape on those GPUs in the slot (`SlotMemo.paths`). The sums a swap's
    score reads are kept on it, each computed as the score would (same terms, same order)."""

    __slots__ = ("steps", "avail", "place", "fixed", "susp", "r_max", "_sums", "_by_t")

    def __init__(self, steps: list, avail: list[int], place: Placement, fixed: bool) -> None:
        self.steps = steps
        self.avail = avail
        self.place = place
        self.fixed = fixed
        self.susp = [v.job for v, new, _, _ in steps if new is None]
        self.r_max = max(v.r_now for v, _, _, _ in steps)  # the victims' GPUs come back by then anyway
        self._sums: dict[str, float] = {}
        self._by_t: dict[float, float] | None = None  # `cost` per run, for a walk that suspends

    def cost(self, t_j: float) -> float:
        """The moves' added completion time for a job that runs ``t_j``: sum of each victim's. A
        walk that suspends no one costs the same for every run: that sum is kept (same terms,
        same order)."""
        if not self.susp:
            hit = self._sums.get("cost")
            if hit is None:
                hit = self._sums["cost"] = sum(c for _, _, c, _ in self.steps)
            return hit
        if len(self.steps) == 1:  # one suspension: the sum of one term, 0.0 + it (as `sum` adds it)
            return 0.0 + (t_j + self.steps[0][0].cost)
        # a walk kept for the slot (`SlotMemo.paths`) is asked by every job of its shape: jobs of
        # the same run share the sum
        by_t = self._by_t
        if by_t is None:
            by_t = self._by_t = {}
        hit = by_t.get(t_j)
        if hit is None:
            hit = by_t[t_j] = sum(c if new is not None else t_j + v.cost for v, new, c, _ in self.steps)
        return hit

    def chosen(self, t_j: float) -> list:
        """The steps as ``Chosen`` entries (job, shrunk to | None, cost, why) for a job that runs ``t_j``."""
        out = []
        for v, new, c, why in self.steps:
            if new is None:
                c = t_j + v.cost
                why = f"waits ~{t_j:.0f}s + {v.cost:.0f}s move, {v.r_now:.0f}s left"
            out.append((v.job, new, c, why))
        return out

    def work(self, mean_work: float) -> float:
        """The suspended victims' credit in Q (each capped at the slot's mean work)."""
        hit = self._sums.get("work")
        if hit is None:
            hit = self._sums["work"] = sum(min(r.work_left, mean_work) for r in self.susp)
        return hit

    def waited(self, slot: float) -> float:
        """The suspended victims' waits (each plus a slot), what Z takes back."""
        hit = self._sums.get("waited")
        if hit is None:
            hit = self._sums["waited"] = sum(r.waited_s + slot for r in self.susp)
        return hit

    def given(self, behind) -> float:
        """The tenant credit the victims' tenants give up: per GPU taken, its tenant's ``behind``."""
        hit = self._sums.get("given")
        if hit is None:
            hit = self._sums["given"] = sum(behind(v.job.user) * (v.job.gpus - (new[0] if new is not None else 0))
                                            for v, new, _, _ in self.steps)
        return hit

    def fades(self, qt: Quiet) -> tuple[float, float]:
        """How fast the score's victim terms can move (`ElasticPolicy._quiet_swap`): the suspended
        victims' work times their fade rates, and the shrinks' added runs above the move cost times theirs."""
        wk = self._sums.get("wk")
        if wk is None:
            wk = self._sums["wk"] = sum(r.work_left * qt.fade(r) for r in self.susp)
            self._sums["cs"] = sum(max(0.0, c - v.cost) * qt.fade(v.job) for v, new, c, _ in self.steps if new is not None)
        return wk, self._sums["cs"]


def fit_on(shape: Shape, nodes: Sequence[int], counts: Sequence[int]) -> tuple[Placement, Placement] | None:
    """`fit_shape` on a few nodes (``nodes``, ascending, with ``counts`` free GPUs): the placement
    over positions in ``counts`` and the same over node ids, or None. The placement rule reads only
    free counts and breaks ties by lowest index, so on the nodes with a free GPU (and any others,
    in index order) it places as on the whole free vector, without a pass over every node of a
    large cluster."""
    sub = fit_shape(shape, counts)
    if sub is None:
        return None
    return sub, tuple((nodes[a], k) for a, k in sub)


# The group step's batches are placed on short count vectors (`trial_nodes`), by the same pure
# rule: kept across slots too (`fit_counts`).
_COUNT_FITS: dict[tuple[Shape, tuple[int, ...]], Placement | None] = {}


def fit_counts(shape: Shape, counts: tuple[int, ...]) -> Placement | None:
    """`fit_shape` on the free counts ``counts`` (placement over positions in it), memoised across
    slots: the placement rule reads only the counts."""
    key = (shape, counts)
    pl = _COUNT_FITS.get(key, _NONE)
    if pl is _NONE:
        if len(_COUNT_FITS) >= _FITS_MAX:
            _COUNT_FITS.clear()
        pl = _COUNT_FITS[key] = fit_shape(shape, counts)
    return pl  # type: ignore[return-value]


# The group step's per-victim preparation (`trial_nodes`) depends on the free vector and the
# victim's placement only, so it is kept across slots as placements are: a slot where only time
# moved has the same free vector and the same victims on the same GPUs, and asks the same ones.
_TRIALS: dict[tuple[int, ...], dict[Placement, tuple[list[int], tuple[int, ...], int]]] = {}
_TRIALS_MAX = 2_000  # free vectors; then it starts afresh
_last: list = [None, None]  # the last free vector asked and its entry: one call asks one vector many times


def trial_nodes(free: tuple[int, ...], placement: Placement) -> tuple[list[int], tuple[int, ...], int]:
    """A group swap's free counts with a victim on ``placement`` suspended: the nodes with a free
    GPU or one of the victim's (ascending), their counts then, and the total. The batch is placed
    on those nodes only (`fit_on`'s argument). A pure function of its arguments, memoised across
    slots (`_TRIALS`)."""
    if _last[0] is free:
        per = _last[1]
    else:
        per = _TRIALS.get(free)
        if per is None:
            if len(_TRIALS) >= _TRIALS_MAX:
                _TRIALS.clear()
            per = _TRIALS[free] = {}
        _last[0], _last[1] = free, per
    hit = per.get(placement)
    if hit is None:
        with_free = {i for i, f in enumerate(free) if f}
        nodes = sorted(with_free.union(node for node, _ in placement))
        at = {node: a for a, node in enumerate(nodes)}
        trial = [free[node] for node in nodes]
        for node, n in placement:
            trial[at[node]] += n
        hit = per[placement] = (nodes, tuple(trial), sum(free) + sum(n for _, n in placement))
    return hit


def candidate(w: WaitingJob) -> tuple[float, int, float, Shape] | None:
    """A waiting job as a swap candidate: (GPU-time at its request, GPUs, run, shape); None when no
    count is allowed. Depends on the job only (memoised per job across slots)."""
    g = nearest_allowed(w, w.requested_gpus)
    if g is None:
        return None
    t = min(w.run_time(g, False), w.run_time(g, True))
    return g * t, g, t, shape_of(w, g)


def arrival_rate(state: SlotState, window: float) -> float:
    """Jobs submitted per second over the last ``window`` seconds (0 when the state has no history)."""
    t = state.arrivals_t
    if t is None or len(t) == 0:
        return 0.0
    span = max(min(window, state.now - float(t[0])), state.slot_len)
    lo = int(np.searchsorted(t, state.now - span, side="left"))
    return (len(t) - lo) / span


class Releases:
    """The running jobs' predicted releases in time order, with their running GPU total, so that
    a wait forecast is a binary search: the make-room step asks it once per waiting candidate,
    and in a burst that is hundreds of candidates per slot."""

    def __init__(self, running: Sequence) -> None:
        ends = sorted((r.predicted_end if math.isfinite(r.predicted_end) else math.inf, r.gpus) for r in running)
        self.t = [e for e, _ in ends]
        self.cum = list(accumulate(k for _, k in ends))

    def wait(self, free_now: int, g: int, now: float) -> float:
        """Seconds until the releases give ``g`` GPUs on top of ``free_now`` (counts only, no shape):
        the first release after which they suffice (inf: none does)."""
        i = bisect_left(self.cum, g - free_now)
        return max(0.0, self.t[i] - now) if i < len(self.t) else math.inf


def subset_placement(placement: Placement, g: int, spans: bool) -> Placement | None:
    """``g`` of a job's GPUs kept on its own nodes, by the placement rule (one node, or k nodes x
    g/k GPUs); None when its nodes cannot hold such a layout."""
    own = [0] * (max(node for node, _ in placement) + 1)
    for node, k in placement:
        own[node] = k
    return equal_placement(own, g) if spans else one_node_placement(own, g)


class Quiet:
    """What keeps one slot's make-room step a no-op as time passes, recorded while it runs, so
    that `ElasticPolicy.decide` can say ``wake_at``. Between events (no arrival, end, start or
    move) only time moves: waits grow by d, Z by n*d (n waiting jobs), and every row value X of a
    running job (its remaining run on any count, its work left) stays within [X*(1 - d*k), X],
    k = 1 / (predicted end - now) (`share_left`: the predicted compute left falls to 0 at the
    predicted end, no faster than that). Each comparison the step made is kept as a margin that
    must stay positive, m0 - a*d - b*d^2 > 0 (a, b >= 0 bounding how fast it can close), or as a
    test of d (tenant credits, through `TenantBound`); ``cap`` bounds d outright. ``holds(d)``:
    none of them can flip within d, so the step decides the same (nothing) until now + d."""

    def __init__(self, cap: float, now: float) -> None:
        self.cap, self.now = cap, now
        self._fade: dict[str, float] = {}
        self.m: list[tuple[float, float, float]] = []
        self.tests: list = []
        self.credits: list[tuple[int, float, float, float]] = []  # (`credit`)
        self._credit_arr: np.ndarray | None = None
        self._credit_fixed: tuple[np.ndarray, np.ndarray, np.ndarray] = (np.empty(0, np.intp), np.empty(0, bool), np.empty(0))
        self._credit_per = None
        self._m: np.ndarray | None = None  # ``m`` as an array, made at the first `holds`
        self._swaps: list[tuple[float, float, float, float, int, int, int]] = []  # (`swap`)
        self._swap_arr: np.ndarray | None = None
        self._swap_cols = np.empty(0, np.intp)
        self._swap_v = 0.0
        self._swap_per = None

    def fail(self) -> None:
        """Something can change at once (a tie that time may break, a term not bounded)."""
        self.cap = 0.0

    def keep(self, m0: float, a: float, b: float = 0.0) -> None:
        """The margin m0 (must be > 0 now) closes by at most a*d + b*d^2 within d."""
        if not m0 > 0 or not math.isfinite(a) or not math.isfinite(b):
            if not (math.isinf(m0) and m0 > 0):
                self.fail()
            return
        if a > 0 or b > 0:
            self.m.append((m0, a, b))
            self._m = None

    def swap(self, s0: float, a: float, b: float, theta: float, n: int, g: int, col: int, V: float, per) -> None:
        """A swap scored <= 0 with a tenant term: it stays so within d while
        s0 + a*d + b*d^2 + V*(theta + n*d)*g*per(d)[col] < 0, ``per(d)`` the tenants' credit
        bounds (one function and one V per slot). Kept as rows and tested all at once."""
        self._swaps.append((s0, a, b, theta, n, g, col))
        self._swap_arr = None
        self._swap_v, self._swap_per = V, per

    def credit(self, col: int, g: int, t: float, m: float, per) -> None:
        """A candidate that did not search stays so within d while its tenant's credit per GPU
        (``per``, `ElasticPolicy._quiet_tenants`, tenant column ``col``) times the GPUs it repays
        (`elastic.repaying` of ``g`` at the largest owed, on its run ``t``) is at most ``m``, its
        run less its forecast wait. Kept as rows and tested all at once (one ``per`` a slot)."""
        self.credits.append((col, float(g), t, m))
        self._credit_arr = None
        self._credit_per = per

    def _credits_hold(self, d: float) -> bool:
        arr = self._credit_arr
        if arr is None:
            arr = self._credit_arr = np.asarray(self.credits, dtype=float).T.copy()
            t = arr[2]
            ok = (t > 0) & (t < np.inf)
            # what does not depend on d, made once: the tenant columns, the rows with a run
            # `repaying` counts, and the runs with the others set to 1 (their quotient is not used)
            self._credit_fixed = (arr[0].astype(np.intp), ok, np.where(ok, t, 1.0))
        _, g, _, m = arr
        cols, ok, t_ok = self._credit_fixed
        per = self._credit_per
        assert per is not None
        c = per.vector(d)[cols]
        owed = per.owed_hi(d)[cols]
        # `repaying`, row by row as in Python floats: min(g, owed / t) (min keeps g unless the
        # other is smaller), 0 unless 0 < t < inf (there owed / t is the same quotient as owed / 1.0
        # elsewhere is not read)
        x = owed / t_ok
        rep = np.where(ok, np.where(x < g, x, g), 0.0)
        return bool((c * rep <= m).all())

    def fade(self, r) -> float:
        """`fade_rate` of a running job, memoised for the slot."""
        hit = self._fade.get(r.job_id)
        if hit is None:
            hit = self._fade[r.job_id] = fade_rate(r, self.now)
        return hit

    def holds(self, d: float) -> bool:
        if not d < self.cap:
            return False
        if self.m:
            arr = self._m
            if arr is None:
                # the same floats as np.asarray(self.m), read flat (faster than a list of tuples)
                arr = self._m = np.fromiter(chain.from_iterable(self.m), float, 3 * len(self.m)).reshape(-1, 3)
            if bool((arr[:, 0] - arr[:, 1] * d - arr[:, 2] * d * d <= 0).any()):
                return False
        if self._swaps:
            sw = self._swap_arr
            if sw is None:
                sw = self._swap_arr = np.asarray(self._swaps, dtype=float).T.copy()
                self._swap_cols = sw[6].astype(np.intp)
            s0, a, b, theta, n, g, _ = sw
            assert self._swap_per is not None
            per = self._swap_per(d)[self._swap_cols]
            # the same operations in the same order as one row's test in Python floats: the same results
            if not bool((s0 + a * d + b * d * d + self._swap_v * (theta + n * d) * g * per < 0).all()):
                return False
        if self.credits and not self._credits_hold(d):
            return False
        return all(t(d) for t in self.tests)


def fade_rate(r, now: float) -> float:
    """How fast (relative, per second) a running job's predicted remaining values can shrink:
    1 / (predicted end - now) before its predicted end, 0 after it or without one (`Quiet`)."""
    pe = r.predicted_end
    return 1.0 / (pe - now) if math.isfinite(pe) and pe > now else 0.0
