"""What the tenant queue costs when tenants are symmetric: on the four seed groups at seeds 0-4
(users user0..7, equal shares, statistically alike), each policy's average JCT with the tenant
queue over the same policy without tenant input (target: at most 1.02 on every case).

    python benchmarks/symmetric_tenants.py [--policies lyapunov,elastic] [--seeds 0-4] [--band 0.98,0.99,1.01,1.02] [--json]

Beside it, the replay's own sensitivity, so a ratio can be read against it: ``noise`` is the same
policy, still without tenant input, with V 1% higher (a change that says nothing about tenants),
and the noise band is the range of the same ratio over each ``--band`` factor of V (no tenant
input; '' = none). Two figures per policy, both printed: the target as set (``tenant_within_2pct``:
tenant ratio at most 1.02) and the same read against the band (``tenant_within_band``: at most
1.02 or at most the band's top, whichever is higher): a case whose schedule moves more than 2%
when V moves by 1-2% measures the divergence of two nearly equal schedules, not a cost of the
tenant term. ``--json`` prints {"cases": [...], "summary": {policy: {...}}}; progress on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import load_workload

GROUPS = ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty")
TARGET = 1.02
NOISE_V = 1.01  # the reference perturbation: V x 1.01, no tenant input
BAND = "0.98,0.99,1.01,1.02"  # V factors of the noise band (no tenant input)


def avg_jct(w, seed: int, policy: str, tenants: bool, v_scale: float = 1.0) -> float:
    sim = Simulation(w.jobs, w.cluster, seed=seed, end_fraction=w.end_fraction, tenant_input=tenants)
    pol = make_policy(policy, seed=seed)
    if v_scale != 1.0:
        pol.V *= v_scale  # type: ignore[attr-defined]
    return float(summarize(sim.run(pol, name=policy))["avg_jct_s"])


def seeds_arg(s: str) -> list[int]:
    lo, _, hi = s.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def gmean(v: list[float]) -> float:
    return math.exp(sum(map(math.log, v)) / len(v)) if v else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="lyapunov,elastic")
    ap.add_argument("--seeds", default="0-4", help="LO-HI (inclusive)")
    ap.add_argument("--band", default=BAND, help="V factors of the noise band, comma-separated ('' = none)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        seeds = seeds_arg(a.seeds)
    except ValueError:
        print(f"Error: --seeds {a.seeds!r}: expected LO-HI", file=sys.stderr)
        sys.exit(2)
    try:
        band = [float(v) for v in a.band.split(",") if v.strip()]
    except ValueError:
        print(f"Error: --band {a.band!r}: expected comma-separated numbers", file=sys.stderr)
        sys.exit(2)
    if any(not (v > 0) for v in band):
        print(f"Error: --band {a.band!r}: factors must be positive", file=sys.stderr)
        sys.exit(2)
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    cases = []
    for g in GROUPS:
        for seed in seeds:
            w = load_workload(g, seed=seed)
            for p in policies:
                today = avg_jct(w, seed, p, False)
                tenant = avg_jct(w, seed, p, True)
                moved = {f: avg_jct(w, seed, p, False, f) / today for f in sorted({NOISE_V, *band})}
                ratios = [moved[f] for f in band] or [1.0]
                c = {"workload": g, "seed": seed, "policy": p, "today_jct_s": today, "tenant_jct_s": tenant,
                     "tenant_vs_today": tenant / today, "noise_vs_today": moved[NOISE_V],
                     "noise_band": [min(ratios), max(ratios)], "band_v": band}
                c["tenant_within_band"] = c["tenant_vs_today"] <= max(TARGET, c["noise_band"][1])
                print(f"{g}@{seed} {p}: tenant/today {c['tenant_vs_today']:.3f}, noise {c['noise_vs_today']:.3f},"
                      f" band {c['noise_band'][0]:.3f}-{c['noise_band'][1]:.3f}", file=sys.stderr, flush=True)
                cases.append(c)
    summary = {}
    for p in policies:
        t = [c["tenant_vs_today"] for c in cases if c["policy"] == p]
        n = [c["noise_vs_today"] for c in cases if c["policy"] == p]
        summary[p] = {"cases": len(t), "tenant_within_2pct": sum(v <= TARGET for v in t),
                      "tenant_within_band": sum(c["tenant_within_band"] for c in cases if c["policy"] == p),
                      "band_wider_than_2pct": sum(c["noise_band"][1] > TARGET or c["noise_band"][0] < 2 - TARGET
                                                  for c in cases if c["policy"] == p),
                      "tenant_gmean": gmean(t), "tenant_max": max(t),
                      "noise_within_2pct": sum(abs(v - 1) <= TARGET - 1 for v in n), "noise_max_dev": max(abs(v - 1) for v in n)}
    if a.json:
        print(json.dumps({"cases": cases, "summary": summary}))
        return
    print(f"{'case':26s} " + " ".join(f"{p + ' tenant':>16s} {p + ' noise':>15s} {'band':>11s}" for p in policies))
    for g in GROUPS:
        for seed in seeds:
            row = {c["policy"]: c for c in cases if c["workload"] == g and c["seed"] == seed}
            print(f"{g + '@' + str(seed):26s} " + " ".join(
                f"{row[p]['tenant_vs_today']:16.3f} {row[p]['noise_vs_today']:15.3f}"
                f" {row[p]['noise_band'][0]:5.3f}-{row[p]['noise_band'][1]:5.3f}" for p in policies))
    for p, s in summary.items():
        print(f"{p}: tenant within 2% on {s['tenant_within_2pct']} of {s['cases']} (geometric mean {s['tenant_gmean']:.3f},"
              f" max {s['tenant_max']:.3f}); noise (V x {NOISE_V}) within 2% on {s['noise_within_2pct']},"
              f" largest move {s['noise_max_dev']:.3f}; tenant within 2% or the band (V x {a.band}) on"
              f" {s['tenant_within_band']} of {s['cases']}; band wider than 2% on {s['band_wider_than_2pct']}")


if __name__ == "__main__":
    main()
