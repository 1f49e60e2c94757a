"""What the tenant queue costs: lyapunov (or elastic) with the tenants' GPU-time in the state
against the same policy without tenant input, side by side on the same simulation, on the
multi-tenant workloads of benchmarks/robustness.py and benchmarks/fairness.py (docs/fairness.md).

    python benchmarks/experiments/tenant_cost.py SETS [--policy lyapunov|elastic] [--forms shipped,tenant-first] [--param KEY=VALUE] [--skip PREFIX,...]

SETS, comma-separated: ``philly12000`` (rows 12,000-15,000 of the trace at loads 0.8, 1.0, 1.2:
design), ``fair`` (benchmarks/fairness.py --quick, design), ``rob`` (benchmarks/robustness.py
--quick, design), ``seeds`` (the four seed groups at seeds 0-4, the full sweep's design seeds); held out: ``philly40000`` (rows 40,000-43,000 at 0.6, 1.0, 1.2), ``fairh``,
``robheldout``, ``robheldout2``. Every workload of these has two or more tenants (the seed
groups' and synthetic workloads' users user0..7, Philly's virtual clusters).

FORMS: ``shipped`` (lyasched's policy); ``tenant-first``: the same with the fill step ordered by
the tenant's credit first, then shortest first (the order shipped before; lyapunov only). The
other forms of docs/experiments.md are patches (benchmarks/experiments/tenant_patches/, against
7edfdf2's lyasched/policy/lyapunov.py). Per workload: the JCT ratio to "today" (no tenant
input) and the worst tenant share (received / entitled GPU-time), today's then each form's;
then per form the geometric mean and worst ratio, how many workloads exceed 1.10, and on how
many the worst share fell.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import fairness  # noqa: E402
import robustness  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.policy.params import ParamError, parse_params  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.fairness import tenant_summary  # noqa: E402
from lyasched.sim.metrics import summarize  # noqa: E402
from lyasched.sim.workloads import read_trace, select_rows  # noqa: E402

WINDOWS = {"philly12000": (12000, (0.8, 1.0, 1.2)), "philly40000": (40000, (0.6, 1.0, 1.2))}


class TenantFirst(LyapunovPolicy):
    """The fill step ordered by the tenant's credit first (the order shipped before)."""

    def _fill_order(self, arr: dict, cand: np.ndarray, key: np.ndarray) -> np.ndarray:
        tc = arr.get("tenant_credit")
        return np.lexsort((cand, key)) if tc is None else np.lexsort((cand, key, -tc[cand]))


def workloads(sets: list[str]) -> list[dict]:
    out: list[dict] = []
    rows = select_rows(read_trace(robustness.PHILLY)) if any(s in WINDOWS for s in sets) else []
    for s in sets:
        if s in WINDOWS:
            off, loads = WINDOWS[s]
            out += [robustness.philly_window(rows, off, 3000, load, s) for load in loads]
        elif s in ("fair", "fairh"):
            out += fairness.workloads(True, "design" if s == "fair" else "heldout")
        elif s == "seeds":
            out += robustness.seed_round("design", range(5))
        elif s == "rob":
            out += robustness.workloads(True, "design")
        elif s.startswith("rob"):
            out += robustness.workloads(True, s[3:])
        else:
            raise SystemExit(f"tenant_cost.py: unknown set {s!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets")
    ap.add_argument("--policy", default="lyapunov", choices=("lyapunov", "elastic"))
    ap.add_argument("--forms", default="shipped")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--skip", default="", help="leave out workloads whose name starts with one of these (comma-separated)")
    a = ap.parse_args()
    try:
        params = parse_params(a.param, [a.policy]).get(a.policy, {})
    except ParamError as e:
        ap.exit(2, f"tenant_cost.py: --param: {e}\n")
    forms = a.forms.split(",")
    if "tenant-first" in forms and a.policy != "lyapunov":
        ap.exit(2, "tenant_cost.py: the tenant-first form is lyapunov's\n")
    ratios: dict[str, list[tuple[float, float]]] = {f: [] for f in forms}
    skip = tuple(x for x in a.skip.split(",") if x)
    for w in workloads(a.sets.split(",")):
        if skip and w["name"].startswith(skip):
            continue
        kw = dict(seed=w["seed"], end_fraction=w["end_fraction"], shares=w.get("shares") or {})
        line, base = [], None
        t0 = time.perf_counter()
        for f in ["today", *forms]:
            pol = TenantFirst(**params) if f == "tenant-first" else make_policy(a.policy, seed=w["seed"], **params)
            res = Simulation(w["jobs"], w["cluster"], tenant_input=f != "today", **kw).run(pol, name=a.policy)
            j = summarize(res)["avg_jct_s"]
            sh = tenant_summary(res, kw["shares"])[1]["worst_share_ratio"]
            if base is None:
                base = (j, sh)
                line.append(f"today {j:.0f} / {sh:.3f}")
            else:
                ratios[f].append((j / base[0], sh - base[1]))
                line.append(f"{f} {j / base[0]:.3f} / {sh:.3f}")
        print(f"{w['name'][:48]} [{w['set']}] ({time.perf_counter() - t0:.0f} s): " + " | ".join(line), flush=True)
    for f, r in ratios.items():
        x = np.array(r)
        if x.size:
            print(f"{f}: JCT vs today geomean {math.exp(np.log(x[:, 0]).mean()):.3f} worst {x[:, 0].max():.3f}, "
                  f"{int((x[:, 0] > 1.10).sum())} of {len(x)} above 1.10; worst share lower on {int((x[:, 1] < -5e-4).sum())} "
                  f"(largest fall {-min(0.0, x[:, 1].min()):.3f})")


if __name__ == "__main__":
    main()
