"""What the tenant queue costs when tenants are symmetric: lyapunov's average JCT with the tenant
queue over without it, and over optimus's, on the four seed groups at seeds 0-4 (users
user0..7, equal shares, statistically alike). Target: at most 1.02 x without it.

    python benchmarks/experiments/symmetric_tenants.py      # one JSON line per workload, then summaries
"""

from __future__ import annotations

import json
import math

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import load_workload

GROUPS = ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty")


def main() -> None:
    rows = []
    for g in GROUPS:
        for seed in range(5):
            w = load_workload(g, seed=seed)
            r: dict = {"name": f"{g}@{seed}"}
            for key, pol, tenants in (("today", "lyapunov", False), ("tenant", "lyapunov", True), ("optimus", "optimus", True)):
                sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=tenants)
                r[key] = summarize(sim.run(make_policy(pol, seed=seed), name=pol))["avg_jct_s"]
            r["tenant_vs_today"] = r["tenant"] / r["today"]
            r["tenant_vs_optimus"] = r["tenant"] / r["optimus"]
            r["today_vs_optimus"] = r["today"] / r["optimus"]
            print(json.dumps(r), flush=True)
            rows.append(r)
    for k in ("tenant_vs_today", "tenant_vs_optimus", "today_vs_optimus"):
        vals = [r[k] for r in rows]
        gm = math.exp(sum(map(math.log, vals)) / len(vals))
        print(f"{k}: geometric mean {gm:.3f}, max {max(vals):.3f}, over 1.02: {sum(v > 1.02 for v in vals)} of {len(vals)}")


if __name__ == "__main__":
    main()
