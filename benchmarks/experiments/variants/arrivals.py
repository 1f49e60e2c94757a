"""Variant terms that read the arrival history (docs/model.md: "spreading under sustained
load", "the arrivals' share of the penalty", "the refill of the free GPUs"); measured, not
adopted. `restrict` is `LyapunovVariant._restrict`: the shipped no-sliver mask plus

* ``max_load`` (inf: off): more GPUs than asked only while the recent offered load over the
  configuration's efficiency relative to the request stays at most max_load, unless the run
  holds its GPUs at most ``lock_free`` s or (``spread_horizon``) ends before the running jobs'
  ``horizon_end`` (latest, median, earliest) predicted end;
* ``refill`` (off): ``mask`` drops the spreads the expected refill of the free GPUs cannot
  reach, ``price`` charges the arrivals they leave short (rates: ``refill_rate``);
* ``arrival_weight`` (0: off): the expected arrivals' share of the delay a spread imposes; its forms
  ``arrival_ref`` (GPU-seconds beyond the request's or the job's least), ``arrival_norm`` (charged
  as is, against the best run with the share included, or less its value at the configuration of
  least run + share) and ``arrival_wait`` (the recent load or an M/M/c P(wait)), issue 8 ninth pass.

Without an arrival history on the state each term is off (the guard: never beyond the request).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from lyasched.policy.lyapunov import Fut, LyapunovPolicy, gpu_seconds
from lyasched.policy.state import SlotState

if TYPE_CHECKING:
    from variants.core import LyapunovVariant


def restrict(pol: LyapunovVariant, state: SlotState, one: np.ndarray, multi: np.ndarray, best: np.ndarray,
             over: np.ndarray, req: np.ndarray, run_req: np.ndarray,
             total_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Fut, dict]:
    """The shipped `_restrict` with the load guard, the refill terms and the arrivals' share added;
    notes: ``refill_still``, seconds during which the refill terms cannot change (wake_at is capped there)."""
    gk = np.arange(1, one.shape[1] + 1)
    if math.isfinite(pol.max_load):
        # Stability: a configuration beyond the request burns GPU-seconds the arrivals will need.
        with np.errstate(invalid="ignore"):
            fm = np.fmin(one, multi)
            rho = offered_load(pol, state, run_req, total_gpus)
            guard = (gk[None, :] > req[:, None]) & (rho[:, None] * gk[None, :] * fm > pol.max_load * req[:, None] * run_req[:, None])
            h = pol.lock_free
            if pol.spread_horizon:  # exempt too: runs that end before the running jobs' last predicted end
                h = max(h, horizon(pol, state))
            guard &= fm > h
        over = guard | over
    short_one = short_multi = None
    refill_still = math.inf
    if pol.refill != "off":
        r1 = refill_short(pol, state, one, req, run_req)
        r2 = refill_short(pol, state, multi, req, run_req)
        if r1 is not None and r2 is not None:
            (short_one, still_one), (short_multi, still_multi) = r1, r2
            refill_still = min(still_one, still_multi)
        if short_one is not None and short_multi is not None and pol.refill == "mask":
            # only spreads that leave no expected arrival short (short is 0 at or below the request)
            one = np.where(short_one > 0, np.inf, one)
            multi = np.where(short_multi > 0, np.inf, multi)
            best = np.fmin(one, multi).min(axis=1)
            short_one = short_multi = None
    one, multi, best, _, _ = LyapunovPolicy._restrict(pol, state, one, multi, best, over, req, run_req, total_gpus)
    fut_one = fut_multi = None
    if short_one is not None and short_multi is not None:  # refill=price: the arrivals the spread leaves short
        rr = (req * run_req)[:, None]
        gg = gk[None, :].astype(float)
        with np.errstate(invalid="ignore"):
            fut_one = np.where(np.isfinite(one), pol.externality * short_one * np.maximum(0.0, gg * one - rr) / total_gpus, 0.0)
            fut_multi = np.where(np.isfinite(multi), pol.externality * short_multi * np.maximum(0.0, gg * multi - rr) / total_gpus, 0.0)
    if pol.arrival_weight > 0:
        fut = future_rate(pol, state, run_req, total_gpus)
        if fut is not None:  # the arrivals' share of the penalty, per configuration (see future_rate)
            rr = (req * run_req)[:, None]
            if pol.arrival_ref == "efficient":  # beyond the job's least GPU-seconds over its allowed configurations
                least = gpu_seconds(one, multi).min(axis=1)  # what `_scores` calls gpu_time
                rr = np.where(np.isfinite(least), least, 0.0)[:, None]
            gg = gk[None, :].astype(float)
            with np.errstate(invalid="ignore"):
                a_one = np.where(np.isfinite(one), fut[:, None] * one * np.maximum(0.0, gg * one - rr), 0.0)
                a_multi = np.where(np.isfinite(multi), fut[:, None] * multi * np.maximum(0.0, gg * multi - rr), 0.0)
            if pol.arrival_norm != "off":
                with np.errstate(invalid="ignore"):
                    t1 = np.where(np.isfinite(one), one + a_one, np.inf)
                    t2 = np.where(np.isfinite(multi), multi + a_multi, np.inf)
                    if pol.arrival_norm == "run":  # charged against the job's best run with the share included
                        m = np.minimum(t1.min(axis=1), t2.min(axis=1))
                        shift = np.where(np.isfinite(m) & np.isfinite(best), m - best, 0.0)[:, None]
                    else:  # "share": less the share at the configuration of least run + share, so that
                        # configuration pays the shipped extra run (the order of the starts is kept)
                        tot = np.concatenate([t1, t2], axis=1)
                        c = tot.argmin(axis=1)
                        m = tot[np.arange(len(c)), c]
                        at = np.concatenate([a_one, a_multi], axis=1)[np.arange(len(c)), c]
                        shift = np.where(np.isfinite(m), at, 0.0)[:, None]
                a_one, a_multi = a_one - shift, a_multi - shift
            fut_one = a_one if fut_one is None else fut_one + a_one
            fut_multi = a_multi if fut_multi is None else fut_multi + a_multi
    terms = None if fut_one is None or fut_multi is None else (fut_one, fut_multi)
    return one, multi, best, terms, {"refill_still": refill_still}


def refill_short(pol: LyapunovVariant, state: SlotState, run: np.ndarray, req: np.ndarray, run_req: np.ndarray) -> tuple[np.ndarray, float] | None:
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
    if pol.refill_rate == "all":  # the long-run rates over the whole history (bursts included)
        span = max(last - float(t[0]), pol.min_window)
        lam = np.full(len(req), len(t) / span)
        gpus_busy = np.full(len(req), float(cum[-1]) / span)
    else:
        win = np.maximum(np.where(np.isfinite(run_req), run_req, pol.min_window), pol.min_window)
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


def horizon(pol: LyapunovVariant, state: SlotState) -> float:
    """Seconds until the running jobs' latest (median, earliest) predicted end; 0 with none known."""
    ends = sorted(r.predicted_end - state.now for r in state.running if math.isfinite(r.predicted_end))
    if not ends:
        return 0.0
    if pol.horizon_end == "earliest":
        return ends[0]
    if pol.horizon_end == "median":
        return ends[(len(ends) - 1) // 2]
    return ends[-1]


def future_rate(pol: LyapunovVariant, state: SlotState, run_req: np.ndarray, total_gpus: int) -> np.ndarray | None:
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
    win = np.maximum(np.where(np.isfinite(run_req), run_req, pol.min_window), pol.min_window)
    lo = np.searchsorted(t, last - win, side="right")
    count = len(t) - lo
    before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
    lam = count / win
    rho = np.minimum(1.0, (float(cum[-1]) - before) / win / max(1, total_gpus))
    if pol.arrival_wait == "erlang":
        # P(wait) in an M/M/c queue, Sakasegawa's approximation rho^(sqrt(2(c+1)) - 1): far below rho
        # on a large, lightly loaded cluster, 1 at full load. c: job slots, the GPUs over the mean
        # GPU count of the jobs waiting and running now.
        counts = [w.requested_gpus for w in state.waiting] + [r.gpus for r in state.running]
        mean_count = float(np.mean(counts)) if counts else 1.0
        c = max(1.0, total_gpus / max(1.0, mean_count))
        rho = rho ** (math.sqrt(2.0 * (c + 1.0)) - 1.0)
    return pol.arrival_weight * lam * rho / max(1, total_gpus)


def offered_load(pol: LyapunovVariant, state: SlotState, runs: np.ndarray, total_gpus: int) -> np.ndarray:
    """Recent offered load per job: requested GPU-seconds submitted in the last
    max(its run at the request, min_window) seconds, over that window, over the GPUs.
    inf when the state carries no arrival history."""
    t, cum = state.arrivals_t, state.arrivals_cum_gpu_s
    n = len(runs)
    if t is None or cum is None or len(t) == 0:
        return np.full(n, np.inf)
    win = np.maximum(np.where(np.isfinite(runs), runs, pol.min_window), pol.min_window)
    span = np.maximum(np.minimum(win, state.now - float(t[0])), state.slot_len)
    lo = np.searchsorted(t, state.now - span, side="left")
    before = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
    return (float(cum[-1]) - before) / span / max(1, total_gpus)
