"""Average JCT per policy on the four seed groups (several seeds) and a Philly window.

    python benchmarks/replay_quality.py [--seeds 5] [--philly-offset 20000] [--philly-jobs 2000]
        [--policies P1,P2,...] [--json]

Policies (default): every non-preemptive one plus tiresias (preemptive, shown for reference);
``--policies`` names others (e.g. elastic, srpt-oracle: a reference run only on the seed groups,
slow on the Philly window; its cell there is null). Prints mean avg-JCT over seeds per group and
lyapunov's improvement over fixed-1, random and the best other non-preemptive baseline
(positive = lyapunov is faster; the ones among the policies run).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from lyasched.policy import POLICIES, REFERENCES, capabilities_of, make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import lower_bound, summarize
from lyasched.sim.workloads import SEED_GROUPS, read_trace, select_rows, size_cluster, seed_workload, trace_jobs

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "shared", "data", "traces", "philly.csv")
PREEMPTIVE = [p for p in POLICIES if capabilities_of(p).preemptive]
NON_PREEMPTIVE = [p for p in POLICIES if p not in PREEMPTIVE]
REFERENCE = ["tiresias"]


def improvement(res: dict[str, float | None]) -> dict:
    """lyapunov's improvement (%) over fixed-1, random and the best other non-preemptive policy run
    (None where that policy or lyapunov was not run)."""
    ly = res.get("lyapunov")
    pct = lambda b: None if ly is None or b is None else 100.0 * (b - ly) / b  # noqa: E731
    others = {p: v for p, v in res.items() if p not in ("lyapunov", *PREEMPTIVE) and v is not None}
    best = min(others, key=others.__getitem__) if others else None
    return {"vs_fixed-1_pct": pct(res.get("fixed-1")), "vs_random_pct": pct(res.get("random")),
            "best_other": best, "vs_best_other_pct": pct(others[best]) if best else None}


def _pct(x: float | None) -> str:
    return "     n/a" if x is None else f"{x:+7.1f}%"


def run_group(jobs, cluster, seed: int, policies: list[str]) -> tuple[dict[str, dict], float]:
    sim = Simulation(jobs, cluster, seed=seed)
    return {p: summarize(sim.run(make_policy(p, seed=seed), name=p)) for p in policies}, lower_bound(sim.best_true_runs())["avg_jct_s"]


def _progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--groups", default=",".join(SEED_GROUPS))
    ap.add_argument("--philly-offset", type=int, default=20000, help="first job (by submit time) of the Philly window")
    ap.add_argument("--philly-jobs", type=int, default=2000, help="0 = skip the Philly window")
    ap.add_argument("--policies", default=None, help="comma-separated policies (default: the non-preemptive ones and tiresias)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    policies = [p for p in a.policies.split(",") if p] if a.policies else NON_PREEMPTIVE + REFERENCE
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        ap.exit(2, f"replay_quality.py: --policies: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(POLICIES)}\n")
    report: dict = {"policies": policies, "seeds": a.seeds, "groups": {}}
    say = (lambda *x: None) if a.json else print
    say(f"avg JCT (s), mean over seeds 0..{a.seeds - 1}; lyapunov improvement: + = faster")
    say(f"{'group':22s} " + " ".join(f"{p:>10s}" for p in policies) + f" {'lower-bd':>9s}  vs fixed-1  vs random  vs best other")
    rows = []
    for g in a.groups.split(","):
        per = {p: [] for p in policies}
        lbs = []
        for s in range(a.seeds):
            _progress(f"replay_quality: {g} seed {s}")
            w = seed_workload(g, s)
            res, lb = run_group(w.jobs, w.cluster, s, policies)
            for p in policies:
                per[p].append(res[p]["avg_jct_s"])
            lbs.append(lb)
        rows.append((g, {p: float(np.mean(v)) for p, v in per.items()}, float(np.mean(lbs))))
    if a.philly_jobs:
        allrows = select_rows(read_trace(PHILLY))
        win = allrows[a.philly_offset: a.philly_offset + a.philly_jobs]
        cluster = size_cluster(win, 0.8)
        _progress(f"replay_quality: philly[{a.philly_offset}:+{len(win)}]")
        res, lb = run_group(trace_jobs(win, cluster), cluster, 0, [p for p in policies if p not in REFERENCES])
        rows.append((f"philly[{a.philly_offset}:+{len(win)}] {cluster.nodes}x{cluster.gpus_per_node}",
                     {p: res[p]["avg_jct_s"] if p in res else None for p in policies}, lb))
    for g, m, lb in rows:
        imp = improvement(m)
        report["groups"][g] = {"avg_jct_s": m, "lower_bound_s": lb, **imp}
        say(f"{g:22s} " + " ".join("       n/a" if m[p] is None else f"{m[p]:10.0f}" for p in policies) + f" {lb:9.0f}  "
            f"{_pct(imp['vs_fixed-1_pct'])}  {_pct(imp['vs_random_pct'])}  {_pct(imp['vs_best_other_pct'])} ({imp['best_other']})")
    if a.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
