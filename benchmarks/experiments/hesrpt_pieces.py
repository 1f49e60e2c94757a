"""Experiment: which scaling shape `hesrpt` (lyasched/policy/hesrpt.py) should weigh a GPU count by,
for an adaptive job whose noise scale grows (docs/experiments.md, "hesrpt: the scaling of the work
ahead"). ``span:0.1`` was adopted as hesrpt's ``horizon_s`` (360 s; the builders now hand the
policy each adaptive job's pieces ahead); these probes read the piece tables from the workload
themselves, against hesrpt with ``horizon_s=0`` (``rows``).

    python benchmarks/experiments/hesrpt_pieces.py --designs "rows;piece;span:0.1" [--loads 0.5,1.0,2.0]
        [--workloads 1-4]

hesrpt's loss on g GPUs is ``w * remaining(g)``: the time left if the job ran on g to its end. An
adaptive job re-tunes its batch each piece (an epoch, here) and scales better as its noise scale
grows, so that row credits a long job now with the scaling of its last epochs, though the
allocation is re-chosen long before then. Designs (each hesrpt with its loss on another shape,
anchored so that the loss at the job's current count, or its fair-share count when waiting, is
unchanged):

* ``rows``: hesrpt weighing every job by its whole remaining rows (``horizon_s=0``);
* ``piece[:H]``: the current piece's time per count (for jobs with more than H hours left; the
  others keep their rows);
* ``span:H``: the time on each count for the next H hours of work at the anchor count (the whole
  rows when less is left): short jobs keep their rows, long ones weigh the epochs ahead;
* ``lag``: what the policy could do alone, without the builder: the shape of the work done
  between two decisions (the difference of a running job's rows then and now);
* ``horizon:H``: rows unchanged, a change of count charged ``max(1, remaining / H)`` times more
  (fewer moves for long jobs).

``piece`` and ``span`` read each job's piece table from the workload (what a builder change would
hand the policy); they are probes, not policies. Prints, per design and load, the mean of the
per-workload ratios to ``pollux``, the worst workload, and per application the mean JCT (h) under
pollux -> the design, with moves per job.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.costmodel import goodput  # noqa: E402
from lyasched.policy.allocation import AllocJob  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted, set_weights  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux")


@dataclass
class _Shaped(_Weighted):
    shape: dict = field(default_factory=dict)  # count -> relative time of the work weighed
    anchor: int = 0  # the count whose loss stays the row's
    frac: float = -1.0  # progress (share of base steps) when the piece table is known
    table: object = None
    iters: int = 0
    long_s: float = 0.0  # piece: only jobs with more than this left

    def loss(self, g: int) -> float:
        s = self.shape
        if not s or g not in s or self.anchor not in s or self.rem.get(self.anchor, 0.0) < self.long_s:
            return super().loss(g)
        r = self.rem[self.anchor] * s[g] / s[self.anchor]
        if self.current and g != self.current:
            if self.fixed:
                return math.inf
            r += self.charge
        return self.w * r


def _span(table, f: float, f2: float, g: int, gpn: int, iters: int) -> float:
    """Seconds on g GPUs from progress f to f2 (a unit piece table times iterations)."""
    t = table.one if g <= gpn else table.multi
    n, out, x = t.shape[0], 0.0, f
    while x < f2 - 1e-12:
        k = goodput.piece_of(x, n)
        end = min(f2, (k + 1) / n)
        out += (end - x) * n * t[k, g - 1]
        x = end
    return out * iters


def _advance(table, f: float, g: int, secs: float, gpn: int, iters: int) -> float:
    """Progress after ``secs`` seconds on g GPUs from f."""
    t = table.one if g <= gpn else table.multi
    n, x = t.shape[0], f
    while x < 1.0 - 1e-12:
        k = goodput.piece_of(x, n)
        end = (k + 1) / n
        need = (end - x) * n * t[k, g - 1] * iters
        if need >= secs:
            return x + secs / (n * t[k, g - 1] * iters)
        secs -= need
        x = end
    return 1.0


@dataclass
class Shaped(HesrptPolicy):
    """hesrpt whose loss weighs another shape (``mode``: piece, span, lag)."""

    horizon_s: float = 0.0  # the shipped rule off: this class computes its own shapes
    mode: str = "piece"
    hours: float = 0.0
    tables: dict = field(default_factory=dict)  # job -> (unit piece table, iterations): the probe's oracle
    gpn: int = 4
    memo: dict = field(default_factory=dict)  # lag: job -> last rows, last shape

    def _make(self, job_id: str, submit: float, rem: dict[int, float]) -> AllocJob | None:
        if not rem:
            return None
        counts = sorted(rem)
        j = _Shaped(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))
        if self.mode == "lag":
            prev, shape = self.memo.get(job_id, (None, {}))
            if prev is not None:
                d = {g: prev[g] - rem[g] for g in counts if g in prev}
                if len(d) == len(counts) and all(v > 1e-6 for v in d.values()):
                    shape = d
            self.memo[job_id] = (dict(rem), shape)
            j.shape = shape
            return j
        hit = self.tables.get(job_id)
        if hit is None:
            return j
        table, iters = hit
        g0 = counts[0]

        def left(f: float) -> float:
            return float((table.rows(f)[0] if g0 <= self.gpn else table.rows(f)[1])[g0 - 1]) * iters

        if not (0 < left(0.0) < math.inf):
            return j
        lo, hi = 0.0, 1.0  # the progress whose rows give this remaining time (rows fall with progress)
        for _ in range(30):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if left(mid) > rem[g0] else (lo, mid)
        j.frac, j.table, j.iters = lo, table, iters
        if self.mode == "piece":
            k = goodput.piece_of(lo, table.one.shape[0])
            sh = {g: float((table.one if g <= self.gpn else table.multi)[k, g - 1]) for g in counts}
            j.shape = {g: v for g, v in sh.items() if 0 < v < math.inf}
            j.long_s = self.hours * 3600.0
        return j

    def _running(self, r, gpn, now):
        j = super()._running(r, gpn, now)
        if isinstance(j, _Shaped):
            j.anchor = j.current
        return j

    def _allocate(self, jobs, cap, gpn):
        fair = max(1, sum(cap) // max(1, len(jobs)))
        for j in jobs:
            if not isinstance(j, _Shaped):
                continue
            if not j.anchor:
                j.anchor = max((c for c in j.counts if c <= fair), default=j.counts[0])
            if self.mode == "span" and j.table is not None and j.anchor in j.rem:
                f2 = _advance(j.table, j.frac, j.anchor, self.hours * 3600.0, gpn, j.iters)
                sh = {g: _span(j.table, j.frac, f2, g, gpn, j.iters) for g in j.counts}
                j.shape = {g: v for g, v in sh.items() if 0 < v < math.inf}
        set_weights(jobs, self.p, fair=fair)
        return self._local(jobs, cap, gpn)


@dataclass
class Horizon(HesrptPolicy):
    """hesrpt (rows) with a change of count charged ``max(1, remaining / horizon)`` times more."""

    horizon_s: float = 0.0
    horizon: float = 1800.0

    def _running(self, r, gpn, now):
        j = super()._running(r, gpn, now)
        if isinstance(j, _Weighted) and j.current in j.rem:
            j.charge *= max(1.0, j.rem[j.current] / self.horizon)
        return j


def build(design: str, w):
    from lyasched.costmodel.cost import CostModel
    from lyasched.policy import make_policy

    name, _, arg = design.partition(":")
    if name in ("pollux", "rows"):
        return make_policy("pollux") if name == "pollux" else make_policy("hesrpt", horizon_s=0.0)
    if name == "horizon":
        return Horizon(horizon=float(arg) * 3600.0)
    if name == "lag":
        return Shaped(mode="lag")
    if name not in ("piece", "span"):
        raise SystemExit(f"unknown design {design!r}")
    cost = CostModel(w.cluster)
    tables = {j.job_id: (goodput.piece_table(cost, replace(j, iterations=1, job_id="", submit_time=0.0,
                                                            time_limit=None, user=""), w.cluster.total_gpus),
                         j.iterations) for j in w.jobs if j.adaptive is not None}
    return Shaped(mode=name, hours=float(arg or 0.0), tables=tables, gpn=w.cluster.gpus_per_node)


def one(args):
    data, load, k, design = args
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    r = sim.run(build(design, w))
    jobs = [(x.job.job_id, x.job.profile.model, x.jct, x.preemptions) for x in r.records]
    return load, k, design, summarize(r)["avg_jct_s"], jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--designs", default="rows;span:0.1")
    ap.add_argument("--loads", default="0.5,1.0,2.0")
    ap.add_argument("--workloads", default="1-4")
    a = ap.parse_args()
    designs = [d for d in a.designs.split(";") if d]
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res = {}
    tasks = [(a.data, ld, k, d) for ld in loads for k in ks for d in ["pollux", *designs]]
    with ProcessPoolExecutor(2) as ex:
        for ld, k, d, h, jobs in ex.map(one, tasks):
            res[ld, k, d] = (h, jobs)
    for d in designs:
        for ld in loads:
            rat = [res[ld, k, d][0] / res[ld, k, "pollux"][0] for k in ks]
            agg: dict[str, list[float]] = defaultdict(lambda: [0.0] * 4)
            for k in ks:
                base = {j[0]: j for j in res[ld, k, "pollux"][1]}
                for jid, app, jct, mv in res[ld, k, d][1]:
                    x = agg[app]
                    x[0] += 1
                    x[1] += base[jid][2]
                    x[2] += jct
                    x[3] += mv
            apps = " ".join(f"{app} {x[1] / x[0] / 3600:.2f}->{x[2] / x[0] / 3600:.2f} ({x[3] / x[0]:.0f})"
                            for app, x in sorted(agg.items()))
            print(f"{d} load {ld}: mean ratio {sum(rat) / len(rat):.3f}, worst workload {max(rat):.3f}; {apps}")


if __name__ == "__main__":
    main()
