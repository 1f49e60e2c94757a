"""The figures a what-if compares: the same definitions for what actually happened and for
each replayed policy, overall and per user / per account.

Per job: JCT = end - arrival, run = time holding GPUs, wait = JCT - run, and bounded slowdown
= max(1, JCT / max(run, 10 s)) (the 10 s floor keeps jobs that failed in a second from dominating
the mean; ASTRAEA-style fairness compares it per user).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lyasched.sim import SimResult
from lyasched.sim.fairness import Runs, ledger_of
from lyasched.whatif.history import HistoryJob

SLOWDOWN_FLOOR_S = 10.0


@dataclass
class Outcome:
    """Per-job arrays in the history's job order (index k = history job k)."""

    name: str
    jct: np.ndarray
    run: np.ndarray
    gpus: np.ndarray  # GPU count of the (last) run
    busy_gpu_s: float
    makespan: float
    total_gpus: int
    util_t: np.ndarray  # seconds since the first arrival
    util_busy: np.ndarray
    wall_s: float | None = None
    decide_s: float | None = None
    # per job: (arrival, GPUs asked, runs as (start, end, GPUs)): GPU-time received and entitled
    # per user / account (lyasched.sim.fairness); None = not known
    runs: list[tuple[float, float, Runs]] | None = None

    def shares(self, keys: Sequence[str]) -> tuple[dict[str, float], dict[str, float]] | None:
        """(received, entitled) GPU-seconds per key (user or account), equal shares; None without runs."""
        if self.runs is None:
            return None
        led = ledger_of(((k, t0, g, r) for k, (t0, g, r) in zip(keys, self.runs)), float(self.total_gpus))
        return led.received, led.entitled

    @property
    def wait(self) -> np.ndarray:
        return np.maximum(self.jct - self.run, 0.0)

    @property
    def slowdown(self) -> np.ndarray:
        return np.maximum(1.0, self.jct / np.maximum(self.run, SLOWDOWN_FLOOR_S))


def actual_outcome(hist: Sequence[HistoryJob], total_gpus: int) -> Outcome:
    """What happened: recorded arrivals, ends, runs (all runs of a requeued job) and GPUs."""
    t0 = min(j.arrival for j in hist)
    jct = np.array([j.jct for j in hist], dtype=float)
    run = np.array([j.used_s for j in hist], dtype=float)
    gpus = np.array([j.gpus for j in hist], dtype=int)
    ev_t, ev_d = [], []
    busy = 0.0
    for j in hist:
        for r in j.runs:
            ev_t += [r.start - t0, r.end - t0]
            ev_d += [r.gpus, -r.gpus]
            busy += (r.end - r.start) * r.gpus
    order = np.lexsort((np.asarray(ev_d), np.asarray(ev_t)))  # by time, ends first
    t = np.asarray(ev_t)[order]
    b = np.cumsum(np.asarray(ev_d)[order])
    keep = np.r_[t[1:] != t[:-1], True]  # last value at each time
    makespan = max(j.end for j in hist) - t0
    runs: list[tuple[float, float, Runs]] = [
        (j.arrival, float(j.gpus), [(r.start, r.end, float(r.gpus)) for r in j.runs]) for j in hist]
    return Outcome("actual", jct, run, gpus, busy, makespan, total_gpus, t[keep], b[keep], runs=runs)


def policy_outcome(res: SimResult, index: dict[str, int], n: int) -> Outcome:
    jct = np.empty(n)
    run = np.empty(n)
    gpus = np.empty(n, dtype=int)
    runs: list = [None] * n
    for r in res.records:
        k = index[r.job.job_id]
        jct[k], run[k], gpus[k] = r.jct, r.run_s, r.gpus
        runs[k] = (r.job.submit_time, float(r.job.requested_gpus), [(s.start, s.end, float(s.gpus)) for s in r.segments])
    t0 = res.first_submit
    return Outcome(res.policy, jct, run, gpus, res.busy_gpu_s, res.makespan, res.cluster.total_gpus,
                   np.asarray(res.util_t) - t0, np.asarray(res.util_busy), res.wall_s, res.decide_s,
                   runs=runs if all(x is not None for x in runs) else None)


def _groups(keys: Sequence[str]) -> tuple[list[str], np.ndarray]:
    names, inv = np.unique(np.asarray(keys, dtype=object).astype(str), return_inverse=True)
    return [str(x) for x in names], inv


def _group_mean(values: np.ndarray, inv: np.ndarray, m: int) -> np.ndarray:
    return np.bincount(inv, weights=values, minlength=m) / np.maximum(np.bincount(inv, minlength=m), 1)


def summary(o: Outcome, recorded_gpus: np.ndarray, users: Sequence[str]) -> dict:
    """The overall figures of one outcome (actual or a policy)."""
    jct, wait, sd = o.jct, o.wait, o.slowdown
    names, inv = _groups(users)
    per_user_sd = _group_mean(sd, inv, len(names))
    cap = o.total_gpus * o.makespan
    out = {
        "jobs": int(len(jct)),
        "avg_jct_s": float(jct.mean()),
        "p50_jct_s": float(np.percentile(jct, 50)),
        "p95_jct_s": float(np.percentile(jct, 95)),
        "avg_wait_s": float(wait.mean()),
        "p95_wait_s": float(np.percentile(wait, 95)),
        "max_wait_s": float(wait.max()),
        "avg_slowdown": float(sd.mean()),
        "worst_user_slowdown": float(per_user_sd.max()),
        **_worst_share(o, users),
        "gpu_util": float(o.busy_gpu_s / cap) if cap > 0 else 0.0,
        "makespan_s": float(o.makespan),
        "other_gpu_count": int(np.count_nonzero(o.gpus != recorded_gpus)),
    }
    if o.wall_s is not None:
        out["wall_s"] = round(o.wall_s, 3)
        out["decide_s"] = round(o.decide_s or 0.0, 3)
    return out


def _worst_share(o: Outcome, users: Sequence[str]) -> dict:
    """The lowest GPU-time received / entitled over users (docs/model.md, section 5), when known."""
    sh = o.shares(users)
    if sh is None:
        return {}
    got, due = sh
    ratios = [got.get(k, 0.0) / e for k, e in due.items() if e > 0]
    return {"worst_user_share_ratio": float(min(ratios))} if ratios else {}


def by_group(keys: Sequence[str], outcomes: Sequence[Outcome], gpu_s: np.ndarray) -> dict[str, dict]:
    """Per user (or account): jobs, recorded GPU-hours, and avg JCT / wait / slowdown per outcome,
    with the GPU-seconds received and entitled to (equal shares) where the outcome's runs are known."""
    names, inv = _groups(keys)
    m = len(names)
    counts = np.bincount(inv, minlength=m)
    hours = np.bincount(inv, weights=gpu_s, minlength=m) / 3600.0
    cols = {}
    shares = {}
    for o in outcomes:
        cols[o.name] = (_group_mean(o.jct, inv, m), _group_mean(o.wait, inv, m), _group_mean(o.slowdown, inv, m))
        shares[o.name] = o.shares([str(k) for k in keys])
    out: dict[str, dict] = {}
    for i, name in enumerate(names):
        row: dict = {"jobs": int(counts[i]), "gpu_hours": round(float(hours[i]), 3)}
        for o in outcomes:
            jct, wait, sd = cols[o.name]
            fig = {"avg_jct_s": float(jct[i]), "avg_wait_s": float(wait[i]), "avg_slowdown": float(sd[i])}
            pair = shares[o.name]
            if pair is not None:
                got, due = pair
                fig["gpu_s"], fig["entitled_gpu_s"] = float(got.get(name, 0.0)), float(due.get(name, 0.0))
            if o.name == "actual":
                row["actual"] = fig
            else:
                row.setdefault("policies", {})[o.name] = fig
        out[name] = row
    return out
