"""One user claims a fraction of their jobs' true run times: does lying pay, and what does the
trust factor (lyasched.estimates.trust) cost the honest users?

    python benchmarks/liars.py [--policies lyapunov] [--claim 0.01] [--philly-rows 12000:15000] [--groups G,...] [--seeds 0] [--json]

Per workload (the four seed groups at seed 0, or at each of ``--seeds``, and a Philly window sized for load 0.8) and
policy, five replays: honest (no liar) without and with trust, and with the liar (every job of
one user predicted at ``--claim`` x its prediction; their true run times unchanged) without
trust, with the trust factor only (as for a model nobody profiled: ``Simulation.known`` empty),
and with it and claims far below their model's profile replaced (``+known``). The liar is the user with the median job count among those
with at least 20 jobs (ties: the first by name), chosen by rule, not by result. Printed side by side:

* ``liar wait``: the liar's average wait over their jobs after their first 10 finished ones;
  ``honest wait``: the other users' average wait (target: liar wait >= honest wait with trust);
* ``liar if honest``: the same user's wait (same jobs) in the replay where they tell the truth;
* ``honest JCT / no liar``: the honest users' average JCT over theirs in the honest replay
  with the same trust setting (target: within 5% with trust);
* ``honest, trust / no trust``: the trust factor's cost when nobody lies (1.000: unchanged).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import collections
import json
import math

import numpy as np

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload, read_trace, select_rows, size_cluster, trace_jobs

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "shared", "data", "traces", "philly.csv")
SEED_GROUPS = ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty")
FIRST = 10  # the liar's first finished jobs, left out of their wait
# (liar, trust factor, known claims replaced) replayed, and the modes printed
CONFIGS = ((False, False, False), (False, True, True), (True, False, False), (True, True, False), (True, True, True))
MODES = (("no_trust", False, False), ("trust", True, False), ("trust_known", True, True))


def workloads(philly_rows: str, groups: tuple[str, ...] = SEED_GROUPS,
              seeds: tuple[int, ...] = (0,)) -> list[tuple[str, list, object, int]]:
    out = []
    for g in groups:
        for seed in seeds:
            w = load_workload(g, seed=seed)
            out.append((g if seeds == (0,) else f"{g}@{seed}", list(w.jobs), w.cluster, seed))
    if philly_rows and os.path.exists(PHILLY):
        lo, hi = (int(x) for x in philly_rows.split(":"))
        win = select_rows(read_trace(PHILLY))[lo:hi]
        cl = size_cluster(win, 0.8)
        out.append((f"philly[{lo}:{hi}] load 0.8", trace_jobs(win, cl), cl, 0))
    return out


def median_user(jobs: list) -> str:
    """The user with the median job count among those with at least 2 x FIRST jobs (all users if
    none has): a liar with jobs left to count after their first FIRST."""
    counts = sorted(collections.Counter(j.user for j in jobs).items(), key=lambda kv: (kv[1], kv[0]))
    counts = [kv for kv in counts if kv[1] >= 2 * FIRST] or counts
    return counts[(len(counts) - 1) // 2][0]


def figures(result, liar: str) -> dict:
    recs = result.records
    honest = [r for r in recs if r.job.user != liar]
    lied = sorted((r for r in recs if r.job.user == liar), key=lambda r: r.end)[FIRST:]
    return {
        "liar_wait": float(np.mean([r.wait for r in lied])) if lied else math.nan,
        "liar_jobs_counted": len(lied),
        "honest_wait": float(np.mean([r.wait for r in honest])),
        "honest_jct": float(np.mean([r.jct for r in honest])),
    }


def run(policies: list[str], claim: float, philly_rows: str, groups: tuple[str, ...] = SEED_GROUPS,
        seeds: tuple[int, ...] = (0,)) -> list[dict]:
    rows = []
    for name, jobs, cl, seed in workloads(philly_rows, groups, seeds):
        liar = median_user(jobs)
        for p in policies:
            fig = {}
            for lie, trust, known in CONFIGS:
                sim = Simulation(jobs, cl, seed=seed, trust=trust, liars={liar: claim} if lie else None)
                if not known:
                    sim.known = {}  # a model nobody profiled: only the trust factor
                fig[(lie, trust, known)] = figures(sim.run(make_policy(p, seed=seed), name=p), liar)
            row = {"workload": name, "policy": p, "liar": liar, "claim": claim,
                   "liar_jobs": sum(j.user == liar for j in jobs), "jobs": len(jobs)}
            for k, trust, known in MODES:
                lf, hf = fig[(True, trust, known)], fig[(False, trust, trust)]
                row[k] = {**lf, "honest_jct_vs_no_liar": lf["honest_jct"] / hf["honest_jct"],
                          "liar_wait_when_honest": hf["liar_wait"]}
            row["honest_trust_vs_no_trust"] = fig[(False, True, True)]["honest_jct"] / fig[(False, False, False)]["honest_jct"]
            rows.append(row)
    return rows


LABEL = {"no_trust": "off", "trust": "on", "trust_known": "+known"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="lyapunov")
    ap.add_argument("--claim", type=float, default=0.01, help="the liar's claim multiplier")
    ap.add_argument("--philly-rows", default="12000:15000", help="LO:HI rows of the Philly trace ('' = none)")
    ap.add_argument("--groups", default=",".join(SEED_GROUPS), help="seed groups to run, comma-separated ('' = none)")
    ap.add_argument("--seeds", default="0", help="the seed groups' seeds, comma-separated (default 0)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        seeds = tuple(int(x) for x in a.seeds.split(",") if x.strip())
    except ValueError:
        ap.error("--seeds: comma-separated integers")
    if not (a.claim > 0):
        ap.error("--claim must be > 0")
    groups = tuple(g for g in a.groups.split(",") if g)
    if set(groups) - set(SEED_GROUPS):
        ap.error(f"--groups: one of {', '.join(SEED_GROUPS)}")
    rows = run([p.strip() for p in a.policies.split(",") if p.strip()], a.claim, a.philly_rows, groups, seeds or (0,))
    if a.json:
        print(json.dumps(rows))
        return
    print(f"liar claims {a.claim:g} x; wait over the liar's jobs after their first {FIRST} finished")
    print("trust: off; on (a fresh model: the trust factor only); +known (claims far below the model's profile replaced)")
    print(f"{'workload':32s} {'policy':9s} {'liar':8s} {'trust':6s} {'liar wait':>10s} {'honest wait':>11s}"
          f" {'liar/honest':>11s} {'liar if honest':>14s} {'honest JCT/no liar':>18s} {'honest trust/no':>15s}")
    for r in rows:
        for k, _, _ in MODES:
            f = r[k]
            ratio = f["liar_wait"] / f["honest_wait"] if f["honest_wait"] > 0 else math.nan
            print(f"{r['workload']:32s} {r['policy']:9s} {r['liar']:8s} {LABEL[k]:6s}"
                  f" {f['liar_wait']:10.0f} {f['honest_wait']:11.0f} {ratio:11.2f} {f['liar_wait_when_honest']:14.0f}"
                  f" {f['honest_jct_vs_no_liar']:18.3f}"
                  f" {r['honest_trust_vs_no_trust'] if k == 'trust_known' else math.nan:15.3f}")
    for k, _, _ in MODES:  # the targets, counted over the cases
        f = [r[k] for r in rows]
        print(f"trust {LABEL[k]}: liar wait >= honest wait on {sum(x['liar_wait'] >= x['honest_wait'] for x in f)}"
              f" of {len(f)}; honest JCT within 5% of no liar on"
              f" {sum(abs(x['honest_jct_vs_no_liar'] - 1.0) <= 0.05 for x in f)} of {len(f)}")


if __name__ == "__main__":
    main()
