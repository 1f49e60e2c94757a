"""Experiment: what was tried to take `hesrpt` (lyasched/policy/hesrpt.py) from 0.94x to 0.85x the
`pollux` baseline at 0.5x load on Pollux's benchmark; none was adopted (docs/experiments.md,
"hesrpt at low load"). Design set: workloads 1-4 at 0.5x, 1.0x, 2.0x; held out: workloads 5-8
and the 1.5x load (not run here).

    python benchmarks/experiments/hesrpt_lowload.py --designs "ref:1,2;settle:10;price:0.3;reserve:4"
        [--loads 0.5,1.0,2.0] [--workloads 1-4]
    python benchmarks/experiments/hesrpt_lowload.py --where "ref:1,2" --loads 0.5   # per application

Designs (``;`` between them), each hesrpt with one change:

* ``hesrpt[:K=V,...]``, ``pollux``: the shipped policies with those parameters; ``ref:1,2`` is
  hesrpt as it was when the others were measured (sizes on one GPU, 2 moves per change), and every
  design below except ``ref`` is a change to that one;
* ``settle:N``: a running job whose current run began less than N move costs ago keeps its count
  (only an arrival's admission may shrink it), so runs are not cut short by re-sharing;
* ``price:K``: weights scaled to a mean of 1, plus a price of K x N / G per GPU-second a job will
  hold (N jobs, G GPUs): capacity a job takes delays the others;
* ``reserve:R``: the search grows jobs into all but R GPUs of one node (unless a waiting job would
  be left out), so a small arrival finds free GPUs instead of shrinking a running job;
* probes: ``ref:G[,MC]`` (sizes read at G GPUs, ``fair``: at the fair share G / jobs; ``MC`` moves per change), ``sticky:H`` (ranks with
  hysteresis), ``floor:E`` (no count below parallel efficiency E), ``flow:REF`` (a change
  charged at a weight common to all jobs: mean, median or max), ``exact`` (the same objective
  minimised exactly by a knapsack over the GPU total instead of the local search), ``mixed:A``
  (pollux's weight A / size added to heSRPT's).

``--where NAME`` prints, per application, the mean JCT, moves and GPU-hours of ``pollux`` and of
design NAME, and each application's share of the difference in total JCT.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted, set_weights, shares  # noqa: E402
from lyasched.policy.movable import MovableJob  # noqa: E402
from lyasched.policy.allocation import packs as _packs  # noqa: E402


class _Old(HesrptPolicy):
    """hesrpt as it was when these designs were measured: sizes on one GPU (its smallest count)."""

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        return self._local(jobs, cap, gpn)


@dataclass
class _Young(_Weighted):
    young: bool = False

    def loss(self, g: int) -> float:
        if self.young and self.current and g != self.current:
            return math.inf
        return super().loss(g)


@dataclass
class Settle(_Old):
    settle: float = 10.0

    def _make(self, job_id, submit, rem):
        if not rem:
            return None
        counts = sorted(rem)
        return _Young(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))

    def _running(self, r, gpn, now):
        j = super()._running(r, gpn, now)
        if isinstance(j, _Young) and isinstance(r, MovableJob):
            j.young = now - r.start_time < self.settle * r.cost(self.move_cost)
        return j


@dataclass
class RefSize(HesrptPolicy):
    """heSRPT weights with each job's size read at a reference count: s = rem(g_ref) * g_ref^p, so
    the x^p model matches the job's row where it runs, not at its smallest count."""

    gref: int = 16

    def _allocate(self, jobs, cap, gpn):
        size = {}
        ref = self.gref if self.gref > 0 else max(1, sum(cap) // max(1, len(jobs)))  # 0: the fair share
        for j in jobs:
            g = max((c for c in j.counts if c <= ref), default=j.counts[0])
            size[j.job_id] = max(j.rem[g] * g ** self.p, 1e-9)
        order = sorted(jobs, key=lambda j: (-size[j.job_id], j.job_id))
        for j, th in zip(order, shares(len(order), self.p)):
            j.w = 3600.0 * th ** (1.0 + self.p) / size[j.job_id]
        return self._local(jobs, cap, gpn)


@dataclass
class Sticky(HesrptPolicy):
    """heSRPT weights ranked with hysteresis: a job's size for the ranking is shrunk by
    ``h`` x its current share of the GPUs, so jobs of near-equal size keep their order."""

    h: float = 0.25

    def _allocate(self, jobs, cap, gpn):
        total = max(1, sum(cap))
        key = {j.job_id: j.base * (1.0 - self.h * j.current / total) for j in jobs}
        order = sorted(jobs, key=lambda j: (-key[j.job_id], j.job_id))
        for j, th in zip(order, shares(len(order), self.p)):
            j.w = 3600.0 * th ** (1.0 + self.p) / j.base
        return self._local(jobs, cap, gpn)


@dataclass
class _Capped(_Weighted):
    cap: int = 1 << 30

    def loss(self, g: int) -> float:
        if g > self.cap and g != self.current:
            return math.inf
        return super().loss(g)


@dataclass
class Floor(_Old):
    """hesrpt with an efficiency floor: no job grows past the largest count where its parallel
    efficiency (GPU-seconds on its smallest count over those on g) is at least ``eff``."""

    eff: float = 0.5

    def _make(self, job_id, submit, rem):
        if not rem:
            return None
        counts = sorted(rem)
        base = max(rem[counts[0]] * counts[0], 1e-9)
        ok = [g for g in counts if base / max(rem[g] * g, 1e-9) >= self.eff]
        return _Capped(job_id, submit, counts, rem, base, cap=max(ok, default=counts[0]))


@dataclass
class _FlowCharged(_Weighted):
    cw: float = 0.0  # the weight a change of count is charged at (common to all jobs)

    def loss(self, g: int) -> float:
        r = self.rem.get(g, math.inf)
        if self.current and g != self.current:
            if self.fixed:
                return math.inf
            return self.w * r + self.cw * self.charge
        return self.w * r


@dataclass
class FlowCharge(HesrptPolicy):
    """hesrpt, a change of count charged at a weight common to all jobs (``ref``: the mean or
    median of the slot's weights) instead of the moving job's own: a move delays its job as many
    seconds whatever its rank, so it costs the mean JCT alike."""

    ref: str = "mean"

    def _make(self, job_id, submit, rem):
        if not rem:
            return None
        counts = sorted(rem)
        return _FlowCharged(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        ws = sorted(j.w for j in jobs)
        if ws:
            cw = sum(ws) / len(ws) if self.ref == "mean" else ws[len(ws) // 2] if self.ref == "median" else ws[-1]
            for j in jobs:
                j.cw = cw
        return self._local(jobs, cap, gpn)


@dataclass
class _Priced(_Weighted):
    price: float = 0.0  # weight per GPU-second a job holds (the others' wait for capacity)

    def loss(self, g: int) -> float:
        return super().loss(g) + self.price * g * self.rem.get(g, math.inf)


@dataclass
class Price(HesrptPolicy):
    """hesrpt plus a price on the GPU-seconds a job will hold: weights scaled to a mean of 1 (each
    job's JCT counts once on average), and a GPU-second costs ``kappa`` x N / G (N jobs, G GPUs:
    taking capacity delays the others, who drain at G GPU-seconds per second)."""

    kappa: float = 0.3

    def _make(self, job_id, submit, rem):
        if not rem:
            return None
        counts = sorted(rem)
        return _Priced(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        if jobs:
            mean = sum(j.w for j in jobs) / len(jobs)
            price = self.kappa * len(jobs) / max(1, sum(cap))
            for j in jobs:
                j.w /= mean
                j.price = price
        return self._local(jobs, cap, gpn)


@dataclass
class Reserve(HesrptPolicy):
    """hesrpt that keeps ``reserve`` GPUs of one node out of the growth: the search runs on the
    cluster less those GPUs, unless the running jobs already use them or a waiting job would then
    be left out; arrivals take the reserve without shrinking a running job (two moves each)."""

    reserve: int = 4

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        small = list(cap)
        for i in range(len(small) - 1, -1, -1):
            if small[i] >= self.reserve:
                small[i] -= self.reserve
                break
        else:
            return self._local(jobs, cap, gpn)
        a = self._local(jobs, small, gpn)
        if len(a) == len(jobs) and _packs({j.job_id: j.current for j in jobs if j.current}, small, gpn):
            return a
        return self._local(jobs, cap, gpn)


@dataclass
class Mixed(HesrptPolicy):
    """heSRPT's weight plus ``alpha`` x pollux's (1 / size, the p = -1 fitness): a floor under the
    largest jobs' weights, whose heSRPT shares vanish as more jobs arrive."""

    alpha: float = 0.05

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        for j in jobs:
            j.w += 3600.0 * self.alpha / j.base
        return self._local(jobs, cap, gpn)


class Exact(HesrptPolicy):
    """hesrpt's objective minimised exactly over the jobs its search admitted: a knapsack over the
    GPU total (each job at least its smallest count), kept when it packs and is lower."""

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        a = self._local(jobs, cap, gpn)
        by = {j.job_id: j for j in jobs}
        total = sum(cap)
        dp = np.full(total + 1, math.inf)
        dp[0] = 0.0
        choice = []
        for jid in a:
            j = by[jid]
            new = np.full(total + 1, math.inf)
            arg = np.zeros(total + 1, dtype=int)
            for c in ([a[jid]] if j.fixed else j.counts):
                loss = j.loss(c)
                if c > total or not math.isfinite(loss):
                    continue
                cand = np.full(total + 1, math.inf)
                cand[c:] = dp[:total + 1 - c] + loss
                better = cand < new
                new[better], arg[better] = cand[better], c
            dp = new
            choice.append((jid, arg))
        t = int(np.argmin(dp))
        if not math.isfinite(dp[t]):
            return a
        b = {}
        for jid, arg in reversed(choice):
            b[jid] = int(arg[t])
            t -= b[jid]
        if _packs(b, cap, gpn) and sum(by[k].loss(g) for k, g in b.items()) < sum(by[k].loss(g) for k, g in a.items()):
            return b
        return a


OLD_MOVE_CHARGE = 2.0  # hesrpt's move charge when these designs were measured


def build(design: str):
    name, _, arg = design.partition(":")
    kw = {k: float(v) for k, v in (kv.split("=") for kv in arg.split(",") if "=" in kv)}
    if name in ("pollux", "hesrpt"):
        return make_policy(name, **kw)
    if name == "ref":
        g, _, mc = arg.partition(",")
        return RefSize(gref=0 if g == "fair" else int(g), move_charge=float(mc or 2.0))
    pol = _variant(name, arg)
    if pol is None:
        raise SystemExit(f"unknown design {design!r}")
    pol.move_charge = OLD_MOVE_CHARGE  # each a change to hesrpt as it was (sizes on one GPU, 2 moves)
    return pol


def _variant(name: str, arg: str):
    if name == "sticky":
        return Sticky(h=float(arg))
    if name == "floor":
        return Floor(eff=float(arg))
    if name == "flow":
        return FlowCharge(ref=arg.partition(",")[0])
    if name == "price":
        return Price(kappa=float(arg))
    if name == "reserve":
        return Reserve(reserve=int(arg))
    if name == "mixed":
        return Mixed(alpha=float(arg))
    if name == "exact":
        return Exact()
    if name == "settle":
        return Settle(settle=float(arg))
    return None


def one(args):
    data, load, k, design = args
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    r = sim.run(build(design))
    s = summarize(r)
    jobs = [(x.job.job_id, x.job.profile.model, x.jct, x.preemptions, x.gpu_s) for x in r.records]
    return load, k, design, s["avg_jct_s"] / 3600.0, s["preemptions"], jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux"))
    ap.add_argument("--designs", default="hesrpt;settle:10")
    ap.add_argument("--loads", default="0.5,1.0,2.0")
    ap.add_argument("--workloads", default="1-4")
    ap.add_argument("--where", default="", help="a design: per-application breakdown against pollux")
    a = ap.parse_args()
    designs = [d for d in (a.where or a.designs).split(";") if d]
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res = {}
    with ProcessPoolExecutor(2) as ex:
        for ld, k, d, h, mv, jobs in ex.map(one, [(a.data, ld, k, d) for ld in loads for k in ks for d in ["pollux", *designs]]):
            res[ld, k, d] = (h, mv, jobs)
    if a.where:
        for ld in loads:
            where(ld, [res[ld, k, "pollux"][2] for k in ks], [res[ld, k, designs[0]][2] for k in ks], designs[0])
        return
    for d in designs:
        for ld in loads:
            mean = sum(res[ld, k, d][0] for k in ks) / sum(res[ld, k, "pollux"][0] for k in ks)
            worst = max(res[ld, k, d][0] / res[ld, k, "pollux"][0] for k in ks)
            mv = sum(res[ld, k, d][1] for k in ks)
            print(f"{d} load {ld}: mean {mean:.3f} of pollux, worst workload {worst:.3f}, moves {mv}")


def where(load: str, base: list, new: list, name: str) -> None:
    """Per application: jobs, mean JCT (h), moves per job and GPU-hours per job under pollux and
    the design, and the application's share of the change in total JCT."""
    agg: dict[str, list[float]] = defaultdict(lambda: [0.0] * 7)
    total = 0.0
    for b, n in zip(base, new):
        other = {j[0]: j for j in n}
        for jid, app, jct, mv, gs in b:
            o = other[jid]
            x = agg[app]
            for i, v in enumerate((1, jct, o[2], mv, o[3], gs, o[4])):
                x[i] += v
            total += jct
    print(f"load {load}: {name} vs pollux, per application (JCT h, moves/job, GPU-h/job; share of total change)")
    for app, x in sorted(agg.items()):
        c = x[0]
        print(f"  {app:12s} {int(c):4d} jobs  JCT {x[1] / c / 3600:6.3f} -> {x[2] / c / 3600:6.3f}  moves {x[3] / c:5.1f} -> "
              f"{x[4] / c:5.1f}  GPU-h {x[5] / c / 3600:7.2f} -> {x[6] / c / 3600:7.2f}  {(x[2] - x[1]) / total:+.3f}")


if __name__ == "__main__":
    main()
