"""lyapunov parameter variants side by side on the robustness sweep's workloads.

    python benchmarks/robustness_variants.py --sets design,heldout5 [--match TEXT] [--quick]
        [--cache FILE] [--json FILE] VARIANT [VARIANT ...]

A VARIANT is ``;``-separated ``lyapunov.KEY=VALUE`` items ("" = the defaults), e.g.
``"lyapunov.arrival_weight=1"``. The baselines run once per workload (kept in ``--cache``
when given), lyapunov once per variant; per workload it prints lyapunov's ratio to the best
estimating baseline / to sjf-oracle for each variant, then each variant's worst and median
ratios (to backfill, best estimating, sjf-oracle, tiresias). Same workloads, simulator and
ratios as benchmarks/robustness.py; used for issue 8's third pass (docs/model.md).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import robustness as R  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.params import ParamError, parse_params  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.metrics import summarize  # noqa: E402

SETS = ("design", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="+", metavar="VARIANT")
    ap.add_argument("--sets", default="design", help="comma-separated: " + ", ".join(SETS))
    ap.add_argument("--match", default="", help="only workloads whose name contains one of these |-separated texts")
    ap.add_argument("--quick", action="store_true", help="the --quick sizes of robustness.py")
    ap.add_argument("--trace", default=R.PHILLY)
    ap.add_argument("--cache", default=None, help="pickle of the baselines' avg JCT per workload, reused across runs")
    ap.add_argument("--json", default=None, help="write every (variant, workload) row here")
    a = ap.parse_args()
    sets = a.sets.split(",")
    if any(s not in SETS for s in sets):
        ap.exit(2, f"robustness_variants.py: --sets: each of {', '.join(SETS)}\n")
    try:
        params = [parse_params([x for x in v.split(";") if x], ["lyapunov"]).get("lyapunov", {}) for v in a.variants]
    except ParamError as e:
        ap.exit(2, f"robustness_variants.py: {e}\n")
    ws = [w for s in sets for w in R.workloads(a.quick, s, a.trace)
          if not a.match or any(m in w["name"] for m in a.match.split("|"))]
    cache = pickle.load(open(a.cache, "rb")) if a.cache and os.path.exists(a.cache) else {}
    ratios: list[list[tuple[float, ...]]] = [[] for _ in a.variants]
    rows = []
    for k, w in enumerate(ws):
        key = (w["name"], w["set"], a.quick)
        sim = Simulation(w["jobs"], w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"])
        if key not in cache:
            cache[key] = {p: summarize(sim.run(make_policy(p, seed=w["seed"]), name=p))["avg_jct_s"] for p in R.POLICIES if p != "lyapunov"}
            if a.cache:
                with open(a.cache, "wb") as f:
                    pickle.dump(cache, f)
        b = cache[key]
        best = min(R.ESTIMATING, key=lambda p: b[p])
        line = f"{w['name'][:60]:60s} {w['set']:8s}"
        for i, (v, prm) in enumerate(zip(a.variants, params)):
            ly = summarize(sim.run(make_policy("lyapunov", seed=w["seed"], **prm), name="lyapunov"))["avg_jct_s"]
            r = (ly / b["backfill"], ly / b[best], ly / b["sjf-oracle"], ly / b["tiresias"])
            ratios[i].append(r)
            rows.append(dict(variant=v, name=w["name"], set=w["set"], lyapunov=ly, best_estimating=best, **b))
            line += f" | {r[1]:.3f}/{r[2]:.3f}"
        print(line + f"  ({best})", flush=True)
        print(f"[{k + 1}/{len(ws)}]", file=sys.stderr)
    for v, rs in zip(a.variants, ratios):
        x = np.array(rs)
        print(f"[{v or 'defaults'}] worst " + " ".join(f"{n} {x[:, i].max():.3f}" for i, n in enumerate(R.RATIOS))
              + " | median " + " ".join(f"{n} {np.median(x[:, i]):.3f}" for i, n in enumerate(R.RATIOS)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
