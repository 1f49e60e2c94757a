"""Experiment: the designs tried for beating the pollux baseline on Pollux's own benchmark, side by
side with the one shipped (`hesrpt`, lyasched/policy/hesrpt.py).

    python benchmarks/experiments/hesrpt_designs.py [--designs srpt:0.5,rank,hesrpt:p=0.3,two]
        [--loads 0.5,1.0,2.0] [--workloads 1-4]

Designs (each is pollux's search, placement and decisions with another objective):

* ``srpt:B``: weight ``(3600 / size) ** (1 + B)`` on each job's remaining time (size: remaining
  GPU-seconds on its smallest count), a change of count charged 2 moves, smallest first;
* ``rank``: weight = the job's rank by size from the largest (1 .. M) on its remaining time;
* ``hesrpt[:p=P,move_charge=K]``: the shipped policy with those parameters (since measured here,
  its sizes are read at the fair share and a change costs 8 moves: hesrpt_lowload.py's ``ref:1,2``
  is the policy these figures were taken with);
* ``two``: hesrpt, but each slot also a search from nothing (smallest first, then free GPUs by
  marginal gain), keeping whichever allocation admits more jobs, then has the lower objective.

Designs are separated by commas, or by semicolons when one has two parameters
(``"hesrpt:p=0.5,move_charge=4;two"``). Design set: workloads 1-4 at 0.5x, 1.0x, 2.0x; held out: workloads 5-8 and the 1.5x load. Prints each
design's mean average JCT per load over pollux's, and its worst workload.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, set_weights  # noqa: E402


class Weighted(HesrptPolicy):
    """Remaining time weighted by size (``beta``) or by rank (``beta`` None)."""

    def __init__(self, beta: float | None) -> None:
        super().__init__(move_charge=2.0)  # hesrpt's charge when these were measured
        self.beta = beta

    def _allocate(self, jobs, cap, gpn):
        if self.beta is None:
            for i, j in enumerate(sorted(jobs, key=lambda j: (-j.base, j.job_id))):
                j.w = i + 1.0
        else:
            for j in jobs:
                j.w = (3600.0 / j.base) ** (1.0 + self.beta)
        return self._local(jobs, cap, gpn)


class Two(HesrptPolicy):
    """hesrpt (as it was: sizes on one GPU, 2 moves) with a second search from nothing each slot;
    the better allocation is kept."""

    def __init__(self) -> None:
        super().__init__(move_charge=2.0)

    def _allocate(self, jobs, cap, gpn):
        set_weights(jobs, self.p)
        a = self._local(jobs, cap, gpn)
        submit = {j.job_id: j.submit for j in jobs}
        for j in jobs:  # _greedy admits oldest first: smallest first here
            j.submit = j.base
        b = self._greedy(jobs, cap, gpn)
        for j in jobs:
            j.submit = submit[j.job_id]
        by_id = {j.job_id: j for j in jobs}

        def score(al):
            return (-len(al), sum(by_id[k].loss(g) for k, g in al.items()))

        return b if score(b) < score(a) else a


def build(design: str):
    name, _, arg = design.partition(":")
    if name == "pollux":
        return make_policy("pollux")
    if name == "srpt":
        return Weighted(float(arg))
    if name == "rank":
        return Weighted(None)
    if name == "two":
        return Two()
    if name == "hesrpt":
        kw = {k: float(v) for k, v in (kv.split("=") for kv in arg.split(",") if kv)}
        return make_policy("hesrpt", **kw)
    raise SystemExit(f"hesrpt_designs.py: unknown design {design!r}")


def one(args):
    data, load, k, design = args
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    return load, k, design, summarize(sim.run(build(design)))["avg_jct_s"] / 3600.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux"))
    ap.add_argument("--designs", default="srpt:0.5,srpt:1,rank,hesrpt,two")
    ap.add_argument("--loads", default="0.5,1.0,2.0")
    ap.add_argument("--workloads", default="1-4")
    a = ap.parse_args()
    designs = [d for d in a.designs.split(";" if ";" in a.designs else ",") if d]
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res = {}
    with ProcessPoolExecutor(2) as ex:
        for ld, k, d, h in ex.map(one, [(a.data, ld, k, d) for ld in loads for k in ks for d in ["pollux", *designs]]):
            res[ld, k, d] = h
    for d in designs:
        for ld in loads:
            mean = sum(res[ld, k, d] for k in ks) / sum(res[ld, k, "pollux"] for k in ks)
            worst = max(res[ld, k, d] / res[ld, k, "pollux"] for k in ks)
            print(f"{d} load {ld}: mean {mean:.3f} of pollux, worst workload {worst:.3f}")


if __name__ == "__main__":
    main()
