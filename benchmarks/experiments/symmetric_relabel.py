"""How far the tenant queue's cost on one symmetric workload is a draw: the same jobs with their
users re-drawn at random among the same eight (users stay statistically alike, shares equal), the
JCT with the tenant queue over the JCT without tenant input (which the labels do not change), per
draw (docs/experiments.md, "Tenant credit past a confidence bound").

    python benchmarks/experiments/symmetric_relabel.py CASES [--draws 8]
    CASES: comma-separated group@seed:policy; draw 0 is the workload's own labels
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import load_workload


def jct(jobs, w, seed: int, policy: str, tenants: bool) -> float:
    sim = Simulation(jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=tenants)
    return float(summarize(sim.run(make_policy(policy, seed=seed), name=policy))["avg_jct_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases")
    ap.add_argument("--draws", type=int, default=8)
    a = ap.parse_args()
    for c in a.cases.split(","):
        gs, _, p = c.partition(":")
        g, _, s = gs.partition("@")
        seed = int(s)
        w = load_workload(g, seed=seed)
        users = sorted({j.user for j in w.jobs})
        today = jct(w.jobs, w, seed, p, False)
        ratios = []
        for d in range(a.draws):
            rng = random.Random(1000 + d)
            jobs = w.jobs if d == 0 else [dataclasses.replace(j, user=rng.choice(users)) for j in w.jobs]
            ratios.append(jct(jobs, w, seed, p, True) / today)
        print(json.dumps({"case": c, "ratios": [round(r, 4) for r in ratios], "min": min(ratios), "max": max(ratios),
                          "over_1.02": sum(r > 1.02 for r in ratios)}), flush=True)


if __name__ == "__main__":
    main()
