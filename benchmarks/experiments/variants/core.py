"""`LyapunovVariant`: the Lyapunov policy with its measured-but-not-adopted options (docs/model.md).

Every option is off by default (the shipped decision); each changes one extension point of
`LyapunovPolicy`:

* ``_restrict``: the arrival-history terms of `arrivals` (``max_load``, ``arrival_weight``, ``refill``);
* ``_credit``: ``q_credit`` work (uncapped), mean, or peaked (work up to the mean, mean^2/work above);
* ``_z_credit`` and ``_wake_at``: ``z_credit=slot`` (a start credited only the slot's growth of Z);
* ``_values``: ``rate`` size or held (the knapsack's values per GPU-second held, Smith's rule);
* ``_starts_first``: ``order=fill_first`` (the fill at the request before the knapsack);
* ``_values`` and ``decide``: ``spread=leftover`` (more GPUs than asked only from the GPUs left idle
  once every waiting job that fits has started at its request: `_grow_leftover`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from lyasched.policy.lyapunov import Fut, LyapunovPolicy
from lyasched.policy.state import Decision, FreeGpus, SlotResult, SlotState, apply
from variants import arrivals


@dataclass
class LyapunovVariant(LyapunovPolicy):
    """`LyapunovPolicy` plus its not-adopted options; with all of them off it decides identically."""

    q_credit: str = "capped"  # a start's actual-queue credit: its work capped at the mean work ("work": uncapped)
    max_load: float = math.inf  # beyond the request only while recent offered load / relative efficiency <= this, or the run ends within the horizon below (inf = off: see docs/model.md)
    spread_horizon: bool = True  # with max_load set, also exempt runs that end before the running jobs' last predicted end
    horizon_end: str = "latest"  # which of the running jobs' predicted ends bounds that exemption: "latest", "median" or "earliest"
    arrival_weight: float = 0.0  # weight of the delay a start's extra GPU-seconds impose on expected arrivals (0 = off)
    arrival_wait: str = "load"  # the share of the arrivals that wait: the recent load ("load") or Sakasegawa's M/M/c approximation ("erlang")
    arrival_norm: str = "off"  # the arrivals' share as charged ("off"), against the best run with it included ("run"), or less its value at the configuration with the least run + share ("share"; docs/model.md ninth pass)
    arrival_ref: str = "request"  # the arrivals' share charges GPU-seconds beyond the request's ("request") or the job's least ("efficient")
    z_credit: str = "wait"  # a start's virtual-queue credit: its wait so far plus the slot ("wait"), or the slot alone ("slot")
    rate: str = "none"  # slot values: the score ("none"), or per GPU-second held: the job's least ("size") or the configuration's ("held")
    refill: str = "off"  # spreads vs the expected refill of the free GPUs: "off", "mask" (only spreads the refill cannot reach) or "price" (see arrivals.refill_short)
    refill_rate: str = "recent"  # refill's arrival rates: over max(T(r), min_window) ("recent") or the whole history ("all")
    order: str = "score"  # "score": the knapsack first, then the fill; "fill_first": the fill at the request first, the knapsack on what is left
    spread: str = "score"  # "score": spreads compete in the knapsack; "leftover": only into GPUs no waiting job takes at its request (`_grow_leftover`)
    lock_free: float = 3600.0  # configurations that hold their GPUs at most this long (s) are exempt from max_load
    min_window: float = 3600.0  # shortest window of the arrival-rate estimates (s)

    def _restrict(self, state: SlotState, one: np.ndarray, multi: np.ndarray, best: np.ndarray, over: np.ndarray,
                  req: np.ndarray, run_req: np.ndarray, total_gpus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, Fut, dict]:
        return arrivals.restrict(self, state, one, multi, best, over, req, run_req, total_gpus)

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

    def _z_credit(self, wait: np.ndarray, slot: float) -> np.ndarray:
        """"wait": the shipped credit; "slot": only the slot's growth of Z a start stops (every job alike)."""
        if self.z_credit == "slot":
            return np.full(wait.shape, slot)
        return wait + slot

    def _wake_at(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float, z: float) -> float:
        """The shipped wake-up, linear in d with ``z_credit=slot``, and never past the moment the
        refill terms may change (``refill_still``, `arrivals.restrict`)."""
        if self.z_credit == "slot":
            t = self._wake_at_slot(state, s_one, s_multi, arr, q, z)
        else:
            t = super()._wake_at(state, s_one, s_multi, arr, q, z)
        return min(t, state.now + max(arr.get("refill_still", math.inf), 0.0))

    def _wake_at_slot(self, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict, q: float, z: float) -> float:
        """With the slot as the Z credit the scores grow as s(d) = s0 + d*n*(slot - V*p): linear in d."""
        terms = self._wake_terms(state, s_one, s_multi, arr, q, z)
        if isinstance(terms, float):
            return terms
        n, ok, s0, pen = terms
        rate = n * (state.slot_len - self.V * pen)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.where(s0 > 0, 0.0, np.where(rate > 0, -s0 / rate, np.inf))
        return state.now + float(np.where(ok, d, np.inf).min())

    def _starts_first(self, state: SlotState, arr: dict, free: FreeGpus, s_one: np.ndarray, s_multi: np.ndarray) -> list[Decision]:
        """``order=fill_first``: shortest-first at the request first; the scores get what is left."""
        if self.order != "fill_first":
            return []
        pre = self._fill(state, arr, free)
        if self._started:
            s_one[self._started] = -np.inf
            s_multi[self._started] = -np.inf
        return pre

    def _values(self, s_one: np.ndarray, s_multi: np.ndarray, arr: dict) -> tuple[np.ndarray, np.ndarray]:
        """``rate``: the scores as drift-plus-penalty per GPU-second held (Smith's rule; docs/model.md).

        A start is not preemptible: it holds g GPUs for T(c), GPU-time no other job gets. Over a
        frame in which the free GPUs are the constraint, the drift reduction bought per GPU-second
        is what decides which starts pay. Dividing by a positive number keeps every sign (so
        "start only with a positive score", the fill step and wake_at are unchanged):
        ``size`` divides by the job's least GPU-time (one constant per job: its configurations
        keep the score's order, only which jobs start changes); ``held`` by g*T(c) of the
        configuration itself.
        """
        if self.spread == "leftover":  # the knapsack at or below the request; _grow_leftover spreads afterwards
            self._unmasked: tuple[np.ndarray, np.ndarray] | None = (s_one, s_multi)
            k = s_one.shape[1]
            beyond = np.arange(1, k + 1)[None, :] > arr["req"][:, None]
            s_one, s_multi = np.where(beyond, -np.inf, s_one), np.where(beyond, -np.inf, s_multi)
        if self.rate == "none":
            return s_one, s_multi
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

    def decide(self, state: SlotState) -> SlotResult:
        """The shipped decision; with ``spread=leftover`` its starts then grow into the GPUs it left idle."""
        self._unmasked = None
        res = super().decide(state)
        if self.spread != "leftover" or not res.starts or self._unmasked is None:
            return res
        return replace(res, starts=self._grow_leftover(state, res.starts, *self._unmasked))

    def _grow_leftover(self, state: SlotState, starts: tuple[Decision, ...], s_one: np.ndarray,
                       s_multi: np.ndarray) -> tuple[Decision, ...]:
        """``spread=leftover``: GPUs still free after the slot's starts (the knapsack at or below each
        request, then the fill: no waiting job that fits at its request is left) go to those starts,
        one step at a time to the step that raises the drift-plus-penalty score most per extra GPU
        (Optimus' growth, with the Lyapunov score as the value); a step must raise the score, and
        above 0 (a fill start, at its request whatever its score, grows only to a positive one)."""
        free_list = list(state.free)
        for d in starts:
            apply(free_list, d.placement)
        if sum(free_list) == 0:
            return starts
        free = FreeGpus(tuple(free_list), state.gpus_per_node)
        index = {w.job_id: i for i, w in enumerate(state.waiting)}
        cur = list(starts)
        k = s_one.shape[1]
        gpn = state.gpus_per_node

        def score(j: int, g: int, pl_one: bool) -> float:
            v = s_one[j, g - 1] if pl_one else s_multi[j, g - 1]
            return float(v) if np.isfinite(v) else -math.inf

        while free.total > 0:
            best = None  # (gain per GPU, position, g, one node)
            for pos, d in enumerate(cur):
                j = index[d.job_id]
                now = max(score(j, d.gpus, len(d.placement) == 1), 0.0)  # a fill start (score <= 0) grows only to a positive score
                trial = FreeGpus(tuple(free.free), gpn)
                trial.give(d.placement)
                for g in range(d.gpus + 1, min(k, d.gpus + free.total) + 1):
                    for one in (True, False):
                        if one and g > gpn:
                            continue
                        s = score(j, g, one)
                        if not s > now or not trial.fits(g, one):
                            continue
                        gain = (s - now) / (g - d.gpus)
                        if best is None or gain > best[0]:
                            best = (gain, pos, g, one)
            if best is None:
                break
            _, pos, g, one = best
            d = cur[pos]
            free.give(d.placement)
            pl = free.take(g, one)
            assert pl is not None
            s = score(index[d.job_id], g, one)
            cur[pos] = Decision(job_id=d.job_id, gpus=g, placement=pl, score=s,
                                reason=f"{d.reason}; grown to {g} into idle GPUs (score {s:.3g})")
        return tuple(cur)
