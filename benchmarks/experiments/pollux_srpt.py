"""Experiment: the pollux baseline's search with short jobs weighted up (SRPT-like), on Pollux's
own benchmark. A job's inverse speed-up ``rem(g) / base`` is multiplied by ``(3600 / base) ** beta``
(base: its remaining time on its smallest count x that count), so GPUs go to jobs near their end.

    python benchmarks/experiments/pollux_srpt.py --beta 0.5,1 [--loads 0.5,1.0,2.0] [--workloads 1-4]

Design set: workloads 1-4 at 0.5x, 1.0x, 2.0x; held out: workloads 5-8 and the 1.5x load.
Prints each beta's mean average JCT per load over pollux's (beta 0), and the worst workload.
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.policy.pollux import PolluxPolicy  # noqa: E402


class Weighted(PolluxPolicy):
    def __init__(self, beta: float) -> None:
        super().__init__()
        self.beta = beta

    def _make(self, job_id, submit, rem):
        j = super()._make(job_id, submit, rem)
        if j is not None and self.beta:
            j.base = j.base * (j.base / 3600.0) ** self.beta
        return j


def one(args):
    data, load, k, beta = args
    from lyasched.sim import Simulation
    from lyasched.sim.metrics import summarize
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    return load, k, beta, summarize(sim.run(Weighted(beta)))["avg_jct_s"] / 3600.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux"))
    ap.add_argument("--beta", default="0.5,1")
    ap.add_argument("--loads", default="0.5,1.0,2.0")
    ap.add_argument("--workloads", default="1-4")
    a = ap.parse_args()
    betas = [0.0] + [float(b) for b in a.beta.split(",")]
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    res = {}
    with ProcessPoolExecutor(2) as ex:
        for ld, k, b, h in ex.map(one, [(a.data, ld, k, b) for ld in loads for k in ks for b in betas]):
            res[ld, k, b] = h
    for b in betas[1:]:
        for ld in loads:
            mean = sum(res[ld, k, b] for k in ks) / sum(res[ld, k, 0.0] for k in ks)
            worst = max(res[ld, k, b] / res[ld, k, 0.0] for k in ks)
            print(f"beta {b:g} load {ld}: mean {mean:.3f} of pollux, worst workload {worst:.3f}")


if __name__ == "__main__":
    main()
