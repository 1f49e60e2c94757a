"""The Lyapunov drift-plus-penalty policy (docs/model.md derives it).

Two queues, both read off the state so the policy keeps no memory (a restarted service
decides exactly as before):

* actual queue  Q = sum of the estimated compute time (``work``) of waiting jobs;
* virtual queue Z = sum of the waiting times of waiting jobs: it grows by one slot for
  every postponed job and drops by a job's whole wait when it starts.

Starting job j in configuration c (g GPUs, one node or several) instead of postponing it
lowers the drift bound by  Q*e_j + Z*(w_j + slot)  and costs the penalty  V*Theta*p_j(c),
with Theta = Q + Z making V dimensionless. The penalty is the increase in total job
completion time the decision causes: the job's own extra run time over its best
configuration plus the delay its GPU-seconds impose on the other waiting jobs. Doing
nothing scores 0; a job starts only with a positive score. The slot's choice is a
multiple-choice knapsack over free GPUs per node: solved exactly by dynamic programming
over the total free GPUs when that is cheap (and the optimum places), greedily by score per
GPU otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lyasched.policy.state import Decision, FreeGpus, Placement, SlotResult, SlotState, WaitingJob


class RowCache:
    """The waiting jobs' rows as matrices, kept across slots.

    The simulator and the service hand the policy the same `WaitingJob` objects slot after
    slot; copying their rows into one matrix once per job (not once per slot) is what keeps
    a decision over thousands of waiting jobs cheap. Entries hold a reference to their
    object, so an id cannot be reused while cached. A pure memo: results are unchanged.
    """

    def __init__(self) -> None:
        self._reset(0, 0)

    def _reset(self, width: int, capacity: int) -> None:
        self.width = width
        self.index: dict[int, int] = {}
        self.keep: list[WaitingJob] = []
        self.one = np.empty((capacity, width))
        self.multi = np.empty((capacity, width))
        self.work = np.empty(capacity)
        self.submit = np.empty(capacity)
        self.best = np.empty(capacity)
        self.req = np.empty(capacity, dtype=np.intp)  # requested count, or the nearest allowed
        self.run_req = np.empty(capacity)  # run time there (one node when allowed)

    def arrays(self, jobs: tuple[WaitingJob, ...], cols: int | None = None) -> tuple[np.ndarray, ...]:
        """(one-node rows, multi-node rows) cut to ``cols`` GPU counts, work, submit time, best run,
        requested count (nearest allowed), run time at the request."""
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width or len(self.index) > 4 * n + 4096:
            self._reset(width, max(1024, 2 * n))
        get = self.index.get
        idx = [get(k, -1) for k in map(id, jobs)]
        if -1 in idx:
            for pos, w in enumerate(jobs):
                if idx[pos] == -1:
                    idx[pos] = self._add(w)
        sel = np.fromiter(idx, dtype=np.intp, count=n)
        c = self.width if cols is None else min(cols, self.width)
        return (self.one[sel, :c], self.multi[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel])

    def _add(self, w: WaitingJob) -> int:
        i = len(self.keep)
        if i >= self.one.shape[0]:
            grow = max(1024, i)
            self.one = np.vstack([self.one, np.empty((grow, self.width))])
            self.multi = np.vstack([self.multi, np.empty((grow, self.width))])
            self.work = np.concatenate([self.work, np.empty(grow)])
            self.submit = np.concatenate([self.submit, np.empty(grow)])
            self.best = np.concatenate([self.best, np.empty(grow)])
            self.req = np.concatenate([self.req, np.empty(grow, dtype=np.intp)])
            self.run_req = np.concatenate([self.run_req, np.empty(grow)])
        self.one[i] = w.run_one_node
        self.multi[i] = w.run_multi_node
        self.work[i] = w.work
        self.submit[i] = w.submit_time
        self.best[i] = min(w.run_one_node.min(), w.run_multi_node.min())
        fm = np.fmin(w.run_one_node, w.run_multi_node)
        ok = np.flatnonzero(np.isfinite(fm)) + 1
        r = int(ok[np.lexsort((ok, np.abs(ok - w.requested_gpus)))[0]]) if ok.size else 1
        self.req[i] = r
        self.run_req[i] = fm[r - 1]
        self.keep.append(w)
        self.index[id(w)] = i
        return i


@dataclass
class LyapunovPolicy:
    """Drift-plus-penalty over (Q, Z); V trades completion time against queue growth."""

    V: float = 5.0  # chosen on the design workloads of benchmarks/robustness.py (with the fill step)
    externality: float = 1.0  # weight of the delay a start imposes on other waiting jobs
    q_weight: float = 1.0  # weight of the actual queue's drift term (1 = the textbook bound)
    q_credit: str = "capped"  # a start's actual-queue credit: its work capped at the mean work ("work": uncapped)
    relative: bool = True  # externality relative to the job shortest-first would start instead
    max_load: float = math.inf  # beyond the request only while recent offered load / relative efficiency <= this, or the run ends within the horizon below (inf = off: see docs/model.md)
    max_stretch: float = 3.0  # never fewer GPUs than asked if that more than multiplies the run time by this
    spread_horizon: bool = True  # with max_load set, also exempt runs that end before the running jobs' last predicted end
    horizon_end: str = "latest"  # which of the running jobs' predicted ends bounds that exemption: "latest", "median" or "earliest"
    arrival_weight: float = 0.0  # weight of the delay a start's extra GPU-seconds impose on expected arrivals (0 = off)
    z_credit: str = "wait"  # a start's virtual-queue credit: its wait so far plus the slot ("wait"), or the slot alone ("slot")
    rate: str = "none"  # slot values: the score ("none"), or per GPU-second held: the job's least ("size") or the configuration's ("held")
    refill: str = "off"  # spreads vs the expected refill of the free GPUs: "off", "mask" (only spreads the refill cannot reach) or "price" (see _refill_short)
    refill_rate: str = "recent"  # refill's arrival rates: over max(T(r), min_window) ("recent") or the whole history ("all")
    order: str = "score"  # "score": the knapsack first, then the fill; "fill_first": the fill at the request first, the knapsack on what is left
    lock_free: float = 3600.0  # configurations that hold their GPUs at most this long (s) are exempt
    min_window: float = 3600.0  # shortest window of the offered-load estimate (s)
    exact_limit: int = 50_000  # solve exactly when jobs x free GPUs x options is at most this
    seed: int = 0  # unused: the policy is deterministic
    name: str = "lyapunov"

    def __post_init__(self) -> None:
        self._started: list[int] = []  # scratch for one decide() call
        self._best = np.zeros(0)
        self._rows = RowCache()

    def _scores(self, state: SlotState, cols: int | None = None) -> tuple[np.ndarray, np.ndarray, float, float, dict]:
        """Score of starting each waiting job on k+1 GPUs on one node / several nodes.

        Only the first ``cols`` GPU counts are scored (more than the free GPUs can never start).
        """
        jobs = state.waiting
        n = len(jobs)
        one, multi, work, submit, best, req, run_req = self._rows.arrays(jobs)  # all counts: best needs them
        wait = state.now - submit
        np.maximum(wait, 0.0, out=wait)
        q = float(work.sum())
        z = float(wait.sum())
        theta = q + z
        total_gpus = max(1, sum(state.free) + sum(r.gpus for r in state.running))
        # Stability: a configuration beyond the request burns GPU-seconds the arrivals will need;
        # allowed only while the recent offered load divided by its efficiency relative to the
        # request stays at most max_load (no arrival history on the state: never beyond the request).
        # Masked configurations are out of the job's best too, so the allowed ones are not all
        # charged against a configuration it may not take.
        gk = np.arange(1, one.shape[1] + 1)
        with np.errstate(invalid="ignore"):
            fm = np.fmin(one, multi)
            if math.isfinite(self.max_load):
                rho = self._offered_load(state, run_req, total_gpus)
                over = (gk[None, :] > req[:, None]) & (rho[:, None] * gk[None, :] * fm > self.max_load * req[:, None] * run_req[:, None])
                h = self.lock_free
                if self.spread_horizon:  # exempt too: runs that end before the running jobs' last predicted end
                    h = max(h, self._horizon(state))
                over &= fm > h
            else:
                over = np.zeros(fm.shape, dtype=bool)
            # no slivers: fewer GPUs than asked only while the run stays within max_stretch of the request's
            over |= (gk[None, :] < req[:, None]) & (fm > self.max_stretch * run_req[:, None])
        short_one = short_multi = None
        refill_still = math.inf  # seconds during which the refill terms cannot change (wake_at is capped by it)
        if self.refill != "off":
            r1 = self._refill_short(state, one, req, run_req)
            r2 = self._refill_short(state, multi, req, run_req)
            if r1 is not None and r2 is not None:
                (short_one, still_one), (short_multi, still_multi) = r1, r2
                refill_still = min(still_one, still_multi)
            if short_one is not None and short_multi is not None and self.refill == "mask":
                # only spreads that leave no expected arrival short (short is 0 at or below the request)
                one = np.where(short_one > 0, np.inf, one)
                multi = np.where(short_multi > 0, np.inf, multi)
                best = np.fmin(one, multi).min(axis=1)
                short_one = short_multi = None
        if over.any():
            one = np.where(over, np.inf, one)
            multi = np.where(over, np.inf, multi)
            best = np.fmin(one, multi).min(axis=1)
        fut_one = fut_multi = None
        if short_one is not None and short_multi is not None:  # refill=price: the arrivals the spread leaves short
            rr = (req * run_req)[:, None]
            gg = gk[None, :].astype(float)
            with np.errstate(invalid="ignore"):
                fut_one = np.where(np.isfinite(one), self.externality * short_one * np.maximum(0.0, gg * one - rr) / total_gpus, 0.0)
                fut_multi = np.where(np.isfinite(multi), self.externality * short_multi * np.maximum(0.0, gg * multi - rr) / total_gpus, 0.0)
        if self.arrival_weight > 0:
            fut = self._future_rate(state, run_req, total_gpus)
            if fut is not None:  # the arrivals' share of the penalty, per configuration (see _future_rate)
                rr = (req * run_req)[:, None]
                gg = gk[None, :].astype(float)
                with np.errstate(invalid="ignore"):
                    a_one = np.where(np.isfinite(one), fut[:, None] * one * np.maximum(0.0, gg * one - rr), 0.0)
                    a_multi = np.where(np.isfinite(multi), fut[:, None] * multi * np.maximum(0.0, gg * multi - rr), 0.0)
                fut_one = a_one if fut_one is None else fut_one + a_one
                fut_multi = a_multi if fut_multi is None else fut_multi + a_multi
        if cols is not None and cols < one.shape[1]:  # more GPUs than are free can never start
            one, multi = one[:, :cols], multi[:, :cols]
            if fut_one is not None:
                assert fut_multi is not None  # set together with fut_one
                fut_one, fut_multi = fut_one[:, :cols], fut_multi[:, :cols]
        finite_best = np.where(np.isfinite(best), best, 0.0)
        credit = self._credit(work, q / n)
        gain = self.q_weight * q * credit + z * self._z_credit(wait, state.slot_len)  # drift reduction of starting the job now
        free_now = sum(state.free)
        g = np.arange(1, one.shape[1] + 1, dtype=float)
        # Other waiting jobs left without even one GPU if this job takes g of the free ones:
        # each of them is delayed, roughly by the GPU-seconds this job holds shared over the cluster.
        blocked = np.maximum(0.0, (n - 1) - (free_now - g))
        # ... relative to the job that would otherwise take those GPUs: the F-th smallest
        # GPU-time among the waiting jobs (F = free GPUs) is what shortest-first would start last.
        with np.errstate(invalid="ignore"):
            gt = np.minimum(one, multi) * g[None, :]
        gt = np.where(np.isfinite(gt), gt, np.inf)
        gpu_time = gt.min(axis=1)
        tau = 0.0
        if self.relative and n > 1 and free_now > 0:
            ok = np.isfinite(gpu_time)
            if ok.any():
                # shortest-first by GPU-time, each job on its most GPU-efficient count
                need = gt[ok].argmin(axis=1) + 1
                order = np.argsort(gpu_time[ok], kind="stable")
                reach = np.searchsorted(np.cumsum(need[order]), free_now)
                tau = float(gpu_time[ok][order[min(int(reach), order.size - 1)]])

        def score(run: np.ndarray, fut: np.ndarray | None) -> np.ndarray:
            with np.errstate(invalid="ignore"):
                return _score(run, fut)

        def _score(run: np.ndarray, fut: np.ndarray | None) -> np.ndarray:
            extra = run - finite_best[:, None]
            imposed = self.externality * blocked[None, :] * np.maximum(0.0, g[None, :] * run - tau) / total_gpus
            pen = extra + imposed if fut is None else extra + imposed + fut
            s = gain[:, None] - self.V * theta * pen
            return np.where(np.isfinite(run), s, -np.inf)

        s_one, s_multi = score(one, fut_one), score(multi, fut_multi)
        extra = {"req": req, "run_req": run_req, "one": one, "multi": multi, "credit": credit, "gpu_time": gpu_time,
                 "refill_still": refill_still}
        return s_one, s_multi, q, z, {"work": work, "wait": wait, "best": best, **extra}

    def _refill_short(self, state: SlotState, run: np.ndarray, req: np.ndarray, run_req: np.ndarray) -> tuple[np.ndarray, float] | None:
        """Per job and GPU count g > request: the arrivals expected to find no GPU at the end of the
        run because of it (0 at or below the request), and the seconds for which that stays so
        with no event (a running job's predicted end entering a run's frame changes it; wake_at
        is capped there so it stays exact); None without arrival history.

        Fluid frame of one start (docs/model.md, "the refill of the free GPUs"): at the end of a run
        of length T the GPUs wanted are the other waiting jobs' requests D - r, this job's g and the
        arrivals still running, A(T) = min(lambda*T, rho*G) (rho*G: requested GPU-seconds per second);
        the GPUs there are the F free now plus R(T), those the running jobs release by then (their
        predicted ends). The arrivals left short are min(A(T), max(0, wanted - there)). At the
        request the same shortfall would happen without the spread, so only g > r counts. lambda and
        rho come off the arrival history over max(T(r), min_window) seconds ending at the newest
        arrival (or over the whole history: ``refill_rate``), so they do not move between arrivals.
        """
        t, cum = state.arrivals_t, state.arrivals_cum_gpu_s
        if t is None or cum is None or len(t) == 0:
            return None
        last = float(t[-1])
        if self.refill_rate == "all":  # the long-run rates over the whole history (bursts included)
            span = max(last - float(t[0]), self.min_window)
            lam = np.full(len(req), len(t) / span)
            gpus_busy = np.full(len(req), float(cum[-1]) / span)
        else:
            win = np.maximum(np.where(np.isfinite(run_req), run_req, self.min_window), self.min_window)
            lo = np.searchsorted(t, last - win, side="right")
            before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
            lam = (len(t) - lo) / win
            gpus_busy = (float(cum[-1]) - before) / win  # rho * G
        ends = sorted((r.predicted_end - state.now, r.gpus) for r in state.running if math.isfinite(r.predicted_end))
        e = np.array([x for x, _ in ends], dtype=float)
        rel = np.cumsum([0.0] + [float(gp) for _, gp in ends])
        free = float(sum(state.free))
        demand = float(req.sum())
        k = run.shape[1]
        g = np.arange(1, k + 1, dtype=float)[None, :]
        with np.errstate(invalid="ignore"):
            T = np.where(np.isfinite(run), run, 0.0)
            arr = np.minimum(lam[:, None] * T, gpus_busy[:, None])
            released = rel[np.searchsorted(e, T, side="right")] if e.size else np.zeros_like(T)
            wanted = (demand - req[:, None]) + g + arr
            short = np.minimum(arr, np.maximum(0.0, wanted - free - released))
        use = (g > req[:, None]) & np.isfinite(run)
        short = np.where(use, short, 0.0)
        use &= short > 0  # a shortfall only shrinks as ends come nearer: only positive ones can change
        still = math.inf
        if e.size and use.any():  # the next predicted end after T enters the frame after e_next - T
            nxt = np.searchsorted(e, T[use], side="right")
            ok = nxt < e.size
            if ok.any():
                still = float((e[nxt[ok]] - T[use][ok]).min())
        return short, still

    def _horizon(self, state: SlotState) -> float:
        """Seconds until the running jobs' latest (median, earliest) predicted end; 0 with none known."""
        ends = sorted(r.predicted_end - state.now for r in state.running if math.isfinite(r.predicted_end))
        if not ends:
            return 0.0
        if self.horizon_end == "earliest":
            return ends[0]
        if self.horizon_end == "median":
            return ends[(len(ends) - 1) // 2]
        return ends[-1]

    def _z_credit(self, wait: np.ndarray, slot: float) -> np.ndarray:
        """A start's credit in the virtual-queue term. "wait": the textbook one-slot drift, the job's
        whole wait (sunk) plus the slot; "slot": only the slot's growth it stops (every job alike)."""
        if self.z_credit == "slot":
            return np.full(wait.shape, slot)
        return wait + slot

    def _credit(self, work: np.ndarray, mean: float) -> np.ndarray:
        """A start's credit in the actual-queue term (at most its work, so the drift bound holds)."""
        if self.q_credit == "work":
            return work
        if self.q_credit == "mean":
            return np.full(work.shape, mean)
        if self.q_credit == "peaked":  # above the mean, the longer the less: shortest-first among long jobs
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(work <= mean, work, mean * mean / np.maximum(work, 1e-300))
        return np.minimum(work, mean)

    def _future_rate(self, state: SlotState, run_req: np.ndarray, total_gpus: int) -> np.ndarray | None:
        """Per job, the weight of the arrivals' share of a configuration's penalty (1/s).

        A start is not preemptible: the GPU-seconds a configuration burns beyond the request's,
        X = max(0, g*T(g) - r*T(r)), are taken from the cluster for the whole run T(g), and the
        jobs that arrive meanwhile meet a cluster that much smaller. Expected arrivals during
        the run: lambda*T(g), each delayed by about X/G when it has to wait, which it does with
        probability about rho (capped at 1). The share is arrival_weight * lambda * rho / G
        times T(g) * X. lambda (jobs/s) and rho (requested GPU-seconds per second over the
        GPUs) are read off the arrival history over the window of max(T(r), min_window)
        seconds ending at the newest arrival: between two arrivals the estimate does not move,
        so skipping idle slots (wake_at) stays exact. None without arrival history.
        """
        t, cum = state.arrivals_t, state.arrivals_cum_gpu_s
        if t is None or cum is None or len(t) == 0:
            return None
        last = float(t[-1])
        win = np.maximum(np.where(np.isfinite(run_req), run_req, self.min_window), self.min_window)
        lo = np.searchsorted(t, last - win, side="right")
        count = len(t) - lo
        before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
        lam = count / win
        rho = np.minimum(1.0, (float(cum[-1]) - before) / win / max(1, total_gpus))
        return self.arrival_weight * lam * rho / max(1, total_gpus)

    def _offered_load(self, state: SlotState, horizon: np.ndarray, total_gpus: int) -> np.ndarray:
        """Recent offered load per job: requested GPU-seconds submitted in the last
        max(its run at the request, min_window) seconds, over that window, over the GPUs.
        inf when the state carries no arrival history."""
        t, cum = state.arrivals_t, state.arrivals_cum_gpu_s
        n = len(horizon)
        if t is None or cum is None or len(t) == 0:
            return np.full(n, np.inf)
        win = np.maximum(np.where(np.isfinite(horizon), horizon, self.min_window), self.min_window)
        span = np.maximum(np.minimum(win, state.now - float(t[0])), state.slot_len)
        lo = np.searchsorted(t, state.now - span, side="left")
        before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
        return (float(cum[-1]) - before) / span / max(1, total_gpus)

    def decide(self, state: SlotState) -> SlotResult:
        if not state.waiting:
            return SlotResult(starts=(), q=0.0, z=0.0)
        free = FreeGpus(state.free, state.gpus_per_node)
        if free.total == 0:
            q = sum(j.work for j in state.waiting)
            z = sum(max(0.0, state.now - j.submit_time) for j in state.waiting)
            return SlotResult(starts=(), q=q, z=z, info={"solver": "none"})
        s_one, s_multi, q, z, arr = self._scores(state, cols=free.total)
        self._best, self._started = arr["best"], []
        pre: list[Decision] = []
        if self.order == "fill_first":  # shortest-first at the request first; the scores get what is left
            pre = self._fill(state, arr, free)
            if self._started:
                s_one[self._started] = -np.inf
                s_multi[self._started] = -np.inf
        k = s_one.shape[1]
        # Configurations that can never fit this slot are out.
        gcol = np.arange(1, k + 1)
        s_one = np.where(gcol[None, :] <= free.max_on_one_node(), s_one, -np.inf)
        s_multi = np.where(free.spread_mask(k)[None, :], s_multi, -np.inf)  # equal GPUs per node (placement.py)
        raw_one, raw_multi = s_one, s_multi  # the drift-plus-penalty scores: their sign decides, and wake_at reads them
        if self.rate != "none":
            s_one, s_multi = self._per_gpu_second(s_one, s_multi, arr)
        best = np.maximum(s_one, s_multi)
        cand = np.flatnonzero(best.max(axis=1) > 0)
        solver = "greedy"
        chosen: list[tuple[int, int]] | None = None
        cand_dp = _useful(best, cand, free.total)
        if cand_dp.size and cand_dp.size * free.total * k <= self.exact_limit:
            cand = cand_dp
            chosen = _knapsack(best[cand], free.total)
            if chosen is not None:
                chosen = [(int(cand[i]), g) for i, g in chosen]
                solver = "exact"
        starts: list[Decision] = []
        if chosen is not None:
            trial = FreeGpus(tuple(free.free), state.gpus_per_node)
            placed: list[tuple[int, int, tuple[tuple[int, int], ...]]] | None = []
            for j, g in sorted(chosen, key=lambda t: (-t[1], t[0])):
                one_ok = np.isfinite(s_one[j, g - 1]) and s_one[j, g - 1] > 0
                pl = trial.take(g, True) if one_ok and trial.fits(g, True) else None
                if pl is None and s_multi[j, g - 1] > 0:
                    pl = trial.take(g, False)
                if pl is None:
                    placed = None
                    break
                assert placed is not None
                placed.append((j, g, pl))
            if placed is not None:
                free = trial
                for j, g, pl in placed:
                    sc = s_one[j, g - 1] if len(pl) == 1 else s_multi[j, g - 1]
                    starts.append(self._decision(state, j, g, pl, float(sc), solver))
            else:
                solver = "greedy"
        if solver == "greedy":
            starts = self._greedy(state, s_one, s_multi, cand, free)
        starts = pre + starts
        if free.total > 0 and len(starts) < len(state.waiting):
            starts += self._fill(state, arr, free)
        idx = list(self._started)
        q_after = q - float(arr["work"][idx].sum())
        z_after = z - float(arr["wait"][idx].sum())
        self._started = []
        info = {"solver": solver, "Q": q, "Z": z}
        if not starts and cand.size == 0:
            info["wake_at"] = min(self._wake_at(state, raw_one, raw_multi, arr, q, z), state.now + max(arr["refill_still"], 0.0))
        return SlotResult(starts=tuple(starts), q=q_after, z=z_after, info=info)

    def _per_gpu_second(self, s_one: np.ndarray, s_multi: np.ndarray, arr: dict) -> tuple[np.ndarray, np.ndarray]:
        """The scores as drift-plus-penalty per GPU-second held (Smith's rule; docs/model.md, ``rate``).

        A start is not preemptible: it holds g GPUs for T(c), GPU-time no other job gets. Over a
        frame in which the free GPUs are the constraint, the drift reduction bought per GPU-second
        is what decides which starts pay. Dividing by a positive number keeps every sign (so
        "start only with a positive score", the fill step and wake_at are unchanged):
        ``size`` divides by the job's least GPU-time (one constant per job: its configurations
        keep the score's order, only which jobs start changes); ``held`` by g*T(c) of the
        configuration itself.
        """
        k = s_one.shape[1]
        if self.rate == "size":
            d = np.maximum(arr["gpu_time"], 1e-9)[:, None]
            d_one = d_multi = np.broadcast_to(d, s_one.shape)
        else:
            g = np.arange(1, k + 1, dtype=float)[None, :]
            d_one, d_multi = g * arr["one"][:, :k], g * arr["multi"][:, :k]
        with np.errstate(invalid="ignore", divide="ignore"):
            one = np.where(np.isfinite(s_one) & np.isfinite(d_one), s_one / np.maximum(d_one, 1e-9), -np.inf)
            multi = np.where(np.isfinite(s_multi) & np.isfinite(d_multi), s_multi / np.maximum(d_multi, 1e-9), -np.inf)
        return one, multi

    def _fill(self, state: SlotState, arr: dict, free: FreeGpus) -> list[Decision]:
        """Work conservation: GPUs the scores left free go to waiting jobs that fit at their request.

        Shortest estimated GPU-time at the request first. Fewer GPUs than asked stay the scores'
        choice (bounded by ``max_stretch``): filling only ever gives a job what it asked for.
        """
        req, run_req, one, multi = arr["req"], arr["run_req"], arr["one"], arr["multi"]
        n = len(req)
        left = np.ones(n, dtype=bool)
        left[self._started] = False
        k = one.shape[1]
        gk = np.arange(1, k + 1)
        with np.errstate(invalid="ignore"):
            fm = np.fmin(one, multi)
            ok = np.isfinite(fm) & (gk[None, :] == req[:, None])
        ok[~left] = False
        has = ok.any(axis=1)
        gmin = np.where(has, ok.argmax(axis=1) + 1, k + 1)
        key = req * run_req
        cand = np.flatnonzero(has & (gmin <= free.total))
        out: list[Decision] = []
        gpn = state.gpus_per_node
        for j in cand[np.lexsort((cand, key[cand]))]:
            if free.total < gmin[j]:
                continue
            for g_np in np.flatnonzero(ok[j]) + 1:  # the request
                g = int(g_np)
                pl = None
                if g <= gpn and np.isfinite(one[j, g - 1]) and free.fits(g, True):
                    pl = free.take(g, True)
                elif g <= multi.shape[1] and np.isfinite(multi[j, g - 1]) and free.fits(g, False):
                    pl = free.take(g, False)
                if pl is not None:
                    out.append(self._decision(state, int(j), g, pl, 0.0, "fill"))
                    break
            if free.total == 0:
                break
        return out

    def _wake_at(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float, z: float) -> float:
        """Earliest time a configuration that fits now gets a positive score, if nothing else changes.

        With no arrival, completion or start, only the waits grow: after d seconds Z = Z0 + n*d and
        w_j = w_j0 + d, so every score is the quadratic s(d) = s0 + d*(Z0 + n*(w_j0 + slot) - V*n*p)
        + n*d^2 (p, the penalty, is fixed). A caller may skip slots until then (the simulator does);
        deciding again earlier would give the same empty answer. inf when no configuration fits.
        """
        n = len(state.waiting)
        vtheta = self.V * (q + z)
        s = np.concatenate([s_one, s_multi], axis=1)
        ok = np.isfinite(s)
        if not ok.any():
            return math.inf
        if vtheta <= 0:
            return state.now
        gain = (self.q_weight * q * arr["credit"] + z * self._z_credit(arr["wait"], state.slot_len))[:, None]
        s0 = np.where(ok, s, -1.0)
        pen = np.where(ok, (gain - s0) / vtheta, 0.0)
        if self.z_credit == "slot":  # s(d) = s0 + d*n*(slot - V*p): linear in d
            rate = n * (state.slot_len - self.V * pen)
            with np.errstate(divide="ignore", invalid="ignore"):
                d = np.where(s0 > 0, 0.0, np.where(rate > 0, -s0 / rate, np.inf))
            return state.now + float(np.where(ok, d, np.inf).min())
        b = z + n * (arr["wait"][:, None] + state.slot_len) - self.V * n * pen
        disc = np.maximum(b * b - 4.0 * n * s0, 0.0)
        d = (-b + np.sqrt(disc)) / (2.0 * n)
        return state.now + float(np.where(ok, np.maximum(d, 0.0), np.inf).min())

    def _greedy(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, cand: np.ndarray, free: FreeGpus) -> list[Decision]:
        """Jobs by best score per GPU; each takes its highest-scoring configuration that fits now."""
        k = s_one.shape[1]
        g = np.arange(1, k + 1, dtype=float)
        dens = np.maximum(s_one, s_multi)[cand] / g[None, :]
        prio = dens.max(axis=1)
        order = cand[np.lexsort((cand, -prio))]
        out: list[Decision] = []
        for j in order:
            if free.total == 0:
                break
            row = np.concatenate([s_one[j], s_multi[j]])
            for idx in np.argsort(-row, kind="stable"):
                sc = row[idx]
                if not sc > 0:
                    break
                one_node = idx < k
                gg = int(idx % k) + 1
                if not free.fits(gg, one_node):
                    continue
                pl = free.take(gg, one_node)
                if pl is not None:
                    out.append(self._decision(state, int(j), gg, pl, float(sc), "greedy"))
                    break
        return out

    def _decision(self, state: SlotState, j: int, g: int, pl: Placement, score: float, solver: str) -> Decision:
        job = state.waiting[j]
        self._started.append(j)
        run = job.run_time(g, len(pl) > 1)
        best = float(self._best[j])
        why = f"{solver}: score {score:.3g}, run {run:.0f}s (+{run - best:.0f}s over best {best:.0f}s)"
        return Decision(job_id=job.job_id, gpus=g, placement=pl, score=score, reason=why)


def _useful(best: np.ndarray, cand: np.ndarray, capacity: int) -> np.ndarray:
    """The jobs that can appear in an optimal knapsack solution.

    If an optimum gives job j g GPUs, the other chosen jobs are at most capacity - g, so
    if j is not among the capacity - g + 1 best jobs at g, one of those is unchosen and
    swapping it in for j loses nothing. Keeping the top capacity - g + 1 per GPU count g
    therefore keeps the optimum, and the DP runs over O(capacity x counts) jobs, not all.
    """
    if cand.size == 0:
        return cand
    sub = best[cand]
    keep: set[int] = set()
    for g in range(1, min(sub.shape[1], capacity) + 1):
        col = sub[:, g - 1]
        m = min(col.size, capacity - g + 1)
        top = np.argpartition(-col, m - 1)[:m] if m < col.size else np.arange(col.size)
        keep.update(int(i) for i in top if col[i] > 0)
    return cand[np.array(sorted(keep), dtype=int)]


def _knapsack(scores: np.ndarray, capacity: int) -> list[tuple[int, int]] | None:
    """Multiple-choice knapsack: at most one GPU count per job, total GPUs <= capacity.

    ``scores[i, g-1]`` is job i's value on g GPUs (-inf or <= 0: not worth it). Returns the
    optimal [(job, g)] by dynamic programming over capacity, O(jobs x capacity x counts).
    """
    n, k = scores.shape
    kk = min(k, capacity)
    best = np.zeros(capacity + 1)
    choice = np.zeros((n, capacity + 1), dtype=np.int32)  # 0 = skip, else g
    # shift[g-1, c] indexes best[c - g] in a copy of best padded with kk leading -inf
    shift = kk + np.arange(capacity + 1)[None, :] - np.arange(1, kk + 1)[:, None]
    padded = np.full(kk + capacity + 1, -math.inf)
    for i in range(n):
        vals = scores[i, :kk]
        gs = np.flatnonzero(vals > 0)
        if gs.size == 0:
            continue
        padded[kk:] = best
        cand = padded[shift[gs]] + vals[gs][:, None]  # (options, capacity+1)
        top = cand.argmax(axis=0)
        topv = cand[top, np.arange(capacity + 1)]
        better = topv > best
        choice[i] = np.where(better, gs[top] + 1, 0)
        best = np.where(better, topv, best)
    c = int(np.argmax(best))
    out = []
    for i in range(n - 1, -1, -1):
        g = int(choice[i, c])
        if g:
            out.append((i, g))
            c -= g
    return out
