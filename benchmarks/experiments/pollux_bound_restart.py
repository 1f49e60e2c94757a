"""Experiment: the per-job bound of `pollux_bound.py` tightened by what every run in the simulator
pays: the wait to the first slot boundary and a restart for every change of configuration.

`pollux_bound.job_bounds` runs every piece of a job on its fastest configuration, switching count
for free. In the simulator every start after the job's first is charged its move cost (the
benchmark's 30 s), so a run that holds k configurations in turn pays at least k - 1 move costs.
Here each job's bound is the wait to the first slot boundary at or after its submission plus the
least, over sequences of configurations (GPU count, one node or several) assigned piece by piece,
of the pieces' times plus one move cost per change (a dynamic programme over the pieces). It is a
bound on every policy: any run's segments, each on one configuration, can be mapped to such a
sequence with no more changes and no more time (a piece split between configurations is counted
whole on the fastest of them). It lies between `pollux_bound.aligned` (changes free) and the
aligned best single configuration (no change).

    python benchmarks/experiments/pollux_bound_restart.py [--loads 0.5,1.0] [--workloads 1-8] [--json]

Prints per load the mean over the workloads of the bound's mean JCT over pollux's average JCT
(pollux's replayed here, as benchmarks/pollux_benchmark.py does), beside the free-switch bound,
its aligned form and the aligned best single configuration.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import pollux_bound as B  # noqa: E402
from pollux_benchmark import parse_range, workload_path  # noqa: E402

from lyasched.sim import Simulation  # noqa: E402


def _piece_configs(sim: Simulation, i: int) -> np.ndarray:
    """Job i's seconds per piece on each configuration [piece, config] (one node and several side by
    side; inf where not allowed), scaled to the job's true run."""
    j = sim.jobs[i]
    scale = j.iterations * float(sim.factors[i])
    if j.adaptive is not None:
        tab = sim._pieces(j)
        one, multi = tab.one, tab.multi
    else:
        row = sim._template(j)
        one, multi = np.asarray(row.run_one_node)[None, :], np.asarray(row.run_multi_node)[None, :]
    return np.concatenate([one, multi], axis=1) * scale


def switch_run(t: np.ndarray, cost: float) -> float:
    """Least time to run the pieces in order, piece k on any configuration c (t[k, c] seconds),
    each change of configuration between consecutive pieces costing ``cost`` seconds."""
    dp = t[0].copy()
    for k in range(1, len(t)):
        dp = np.minimum(dp, dp.min() + cost) + t[k]
    return float(dp.min())


def restart_bounds(sim: Simulation) -> np.ndarray:
    """Each job's least JCT in ``sim``: the wait to the first slot boundary plus `switch_run` at its
    move cost."""
    out = np.array([switch_run(_piece_configs(sim, i), float(sim.move_costs[i])) for i in range(len(sim.jobs))])
    return B.aligned(sim, out)


def one(args: tuple[str, str, int]) -> tuple[str, int, dict[str, float]]:
    from lyasched.policy import make_policy
    from lyasched.sim.pollux_trace import pollux_workload

    data, load, k = args
    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"), adaptive=True)
    sim = Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)
    b = B.job_bounds(sim)
    r = sim.run(make_policy("pollux"), name="pollux")
    return load, k, {
        "pollux_h": float(np.mean([x.jct for x in r.records])) / 3600.0,
        "bound_h": float(b.mean()) / 3600.0,
        "aligned_h": float(B.aligned(sim, b).mean()) / 3600.0,
        "restart_h": float(restart_bounds(sim).mean()) / 3600.0,
        "single_aligned_h": float(B.aligned(sim, sim.best_true_runs()).mean()) / 3600.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=B.DATA)
    ap.add_argument("--loads", default="0.5,1.0")
    ap.add_argument("--workloads", default="1-8")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    got: dict[str, dict[int, dict[str, float]]] = {ld: {} for ld in loads}
    with ProcessPoolExecutor(max(1, a.jobs)) as ex:
        for ld, k, f in ex.map(one, [(a.data, ld, k) for ld in loads for k in ks]):
            got[ld][k] = f
            print(f"{ld}x w{k}: " + ", ".join(f"{n} {v:.3f}" for n, v in f.items()), file=sys.stderr)
    out: dict[str, Any] = {}
    for ld in loads:
        pol = np.mean([got[ld][k]["pollux_h"] for k in ks])
        out[ld] = {n: float(np.mean([got[ld][k][n] for k in ks]) / pol)
                   for n in ("bound_h", "aligned_h", "restart_h", "single_aligned_h")}
        out[ld]["worst_restart"] = max(got[ld][k]["restart_h"] / got[ld][k]["pollux_h"] for k in ks)
        out[ld]["workloads"] = {str(k): got[ld][k] for k in ks}
    if a.json:
        print(json.dumps(out))
        return 0
    print(f"bounds over pollux's mean average JCT, workloads {a.workloads}")
    print(f"{'load':>5} {'bound':>8} {'aligned':>8} {'restart':>8} {'single':>8} {'worst(restart)':>15}")
    for ld in loads:
        o = out[ld]
        print(f"{ld:>5} {o['bound_h']:8.3f} {o['aligned_h']:8.3f} {o['restart_h']:8.3f} {o['single_aligned_h']:8.3f} "
              f"{o['worst_restart']:15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
