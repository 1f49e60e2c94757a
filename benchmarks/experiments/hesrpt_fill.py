"""Experiment: hesrpt with the GPUs it would leave idle handed to the jobs whose work just ahead
runs faster on more, at a lower restart charge (docs/experiments.md, "hesrpt: idle GPUs to the
jobs' own optimum").

Why. `pollux_bound.py` puts each job's least JCT (alone, every piece on its fastest count) at 0.50x
pollux's average at 0.5x load, where hesrpt is at 0.88x; under hesrpt at 0.5x on workload 1 about
8% of the cluster's GPU-time is idle while a running job's current piece would run at least 3%
faster on a larger count that packs: the grow is declined because a change of count is charged
``move_charge`` (8) moves. Here, after hesrpt's allocation, free GPUs go to the job whose weighted
loss falls most, a change charged ``fill`` moves instead (the move itself: 1; 0: free), while one
lowers it; with ``own``, the loss is the job's current piece time alone (its isolated optimum
now), unweighted.

    python benchmarks/experiments/hesrpt_fill.py --designs "hesrpt;fill:1;fill:0;own:1" [--loads 0.5,1.0,2.0]
        [--workloads 1-4]

Design set: workloads 1-4 at 0.5x, 1.0x, 2.0x; held out: workloads 5-8 and 1.5x (``--workloads
5-8 --loads 0.5,1.0,1.5,2.0``, run once a design is chosen). Prints per load the mean average JCT
over pollux's (mean of the workloads' averages over the mean of pollux's, as the benchmark does)
and the worst workload's ratio.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import parse_range  # noqa: E402

from lyasched.costmodel.goodput import piece_of  # noqa: E402
from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.allocation import AllocJob, packs  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux")


@dataclass
class Fill(HesrptPolicy):
    """hesrpt, then its idle GPUs grown into at ``fill`` moves per change (``own``: by the current
    piece's time alone)."""

    fill: float = 1.0
    own: bool = False

    def _allocate(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        alloc = super()._allocate(jobs, cap, gpn)
        by_id = {j.job_id: j for j in jobs}
        total = sum(cap)

        start = dict(alloc)

        def loss(j: AllocJob, g: int) -> float:
            """Seconds (``own``) or hesrpt's weighted seconds left on g, a change at ``fill`` moves."""
            unit = getattr(j, "move_unit", 0.0)
            changed = bool(j.current) and g != j.current
            if self.own:
                a = start[j.job_id]
                t = self._piece_time(j, g, gpn)
                ta = self._piece_time(j, a, gpn)
                left = j.rem[g] if not (math.isfinite(t) and math.isfinite(ta) and ta > 0) else j.rem[a] * t / ta
                return left + (self.fill * unit if changed else 0.0)
            lo = j.loss(g)
            if changed and isinstance(j, _Weighted):
                lo += j.w * (self.fill * unit - j.charge)
            return lo

        for _ in range(4 * len(alloc) + 8):
            free = total - sum(alloc.values())
            if free <= 0:
                break
            best: tuple[float, str, int] | None = None
            for jid, g in alloc.items():
                j = by_id[jid]
                if j.fixed:
                    continue
                lg = loss(j, g)
                for g2 in j.counts:
                    if g < g2 <= g + free:
                        gain = lg - loss(j, g2)
                        if gain > 1e-9 and (best is None or gain > best[0]):
                            a2 = dict(alloc)
                            a2[jid] = g2
                            if packs(a2, cap, gpn):
                                best = (gain, jid, g2)
            if best is None:
                break
            alloc[best[1]] = best[2]
        return alloc

    @staticmethod
    def _piece_time(j: AllocJob, g: int, gpn: int) -> float:
        """Seconds of the job's current piece on g GPUs (inf without pieces: then its rows)."""
        if not isinstance(j, _Weighted) or j.pieces is None:
            return math.inf
        tab = j.pieces.table
        return float((tab.multi if g > gpn else tab.one)[piece_of(j.pieces.fraction_done, tab.one.shape[0]), g - 1])

    def _running(self, r, gpn, now):  # type: ignore[no-untyped-def]
        j = super()._running(r, gpn, now)
        if isinstance(j, _Weighted):
            j.move_unit = j.charge / self.move_charge if self.move_charge > 0 else 0.0  # type: ignore[attr-defined]
        return j

    def _waiting(self, w, gpn):  # type: ignore[no-untyped-def]
        j = super()._waiting(w, gpn)
        if j is not None:
            j.move_unit = 0.0  # type: ignore[attr-defined]
        return j


def build(design: str):
    name, _, arg = design.partition(":")
    if name in ("pollux", "hesrpt"):
        return make_policy(name)
    if name in ("fill", "own"):
        return Fill(fill=float(arg or 1.0), own=name == "own")
    raise SystemExit(f"hesrpt_fill.py: unknown design {design!r}")


def one(args: tuple[str, str, int, str]) -> tuple[str, int, str, float, float, int]:
    data, load, k, design = args
    sys.path.insert(0, os.path.dirname(__file__))
    from pollux_bound import pollux_sim

    c = time.process_time()
    sim = pollux_sim(data, load, k)
    r = sim.run(build(design), name=design)
    jct = sum(x.jct for x in r.records) / len(r.records) / 3600.0
    return load, k, design, jct, time.process_time() - c, sum(x.preemptions for x in r.records)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--designs", default="hesrpt;fill:1")
    ap.add_argument("--loads", default="0.5,1.0,2.0")
    ap.add_argument("--workloads", default="1-4")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    designs = [d for d in a.designs.split(";") if d]
    for d in designs:
        build(d)
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res: dict[tuple[str, int, str], tuple[float, int]] = {}
    t0, cpu = time.perf_counter(), 0.0
    with ProcessPoolExecutor(max(1, a.jobs)) as ex:
        for ld, k, d, h, c, mv in ex.map(one, [(a.data, ld, k, d) for ld in loads for k in ks for d in ["pollux", *designs]]):
            res[ld, k, d] = (h, mv)
            cpu += c
    for d in designs:
        for ld in loads:
            mean = sum(res[ld, k, d][0] for k in ks) / sum(res[ld, k, "pollux"][0] for k in ks)
            worst = max(res[ld, k, d][0] / res[ld, k, "pollux"][0] for k in ks)
            mv = sum(res[ld, k, d][1] for k in ks)
            print(f"{d} load {ld} workloads {a.workloads}: {mean:.3f} of pollux, worst workload {worst:.3f}, moves {mv}")
    print(f"{time.perf_counter() - t0:.0f} s wall, {cpu:.0f} s CPU in the replays", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
