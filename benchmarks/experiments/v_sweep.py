"""Sweep the Lyapunov policy's V over a log range: avg JCT and avg/max wait per V.

    python benchmarks/experiments/v_sweep.py [--groups seed-small-bursty,seed-large-scattered] [--seeds 3] [--vmin 0.01 --vmax 1000 --points 11] [--json]

Each V is replayed on the same jobs (seeds 0..seeds-1); figures are means over seeds.
The same sweep from the CLI: lyasched replay -w GROUP --policies lyapunov --param V=... --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import seed_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--groups", default="seed-small-bursty,seed-large-scattered")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--vmin", type=float, default=0.01)
    ap.add_argument("--vmax", type=float, default=1000.0)
    ap.add_argument("--points", type=int, default=11)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    vs = np.logspace(np.log10(a.vmin), np.log10(a.vmax), a.points)
    out: dict = {}
    for g in a.groups.split(","):
        sims = [(s, Simulation(seed_workload(g, s).jobs, seed_workload(g, s).cluster, seed=s)) for s in range(a.seeds)]
        out[g] = []
        if not a.json:
            print(f"{g} (seeds 0..{a.seeds - 1})\n{'V':>10s} {'avg JCT s':>10s} {'avg wait s':>11s} {'max wait s':>11s}")
        for v in vs:
            ss = [summarize(sim.run(make_policy("lyapunov", V=float(v), seed=s), name="lyapunov")) for s, sim in sims]
            row = {"V": float(v), **{k: float(np.mean([x[k] for x in ss])) for k in ("avg_jct_s", "avg_wait_s", "max_wait_s")}}
            out[g].append(row)
            if not a.json:
                print(f"{v:10.3g} {row['avg_jct_s']:10.0f} {row['avg_wait_s']:11.0f} {row['max_wait_s']:11.0f}", flush=True)
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
