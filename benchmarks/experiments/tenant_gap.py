"""What the tenant queue costs lyapunov's average JCT on one fairness.py workload: the same
simulation with the tenant input off and on, the JCT gap split by tenant and by job class.

    python benchmarks/experiments/tenant_gap.py [--names 'philly[62000'] [--only heldout] [--policy lyapunov] [--param K=V ...]

Per workload: average JCT off / on / fairshare's; then per tenant (its jobs, share of the cluster
it was entitled to, received / entitled on and off) its jobs' summed JCT change over the number
of jobs (its part of the average's change, seconds), and the same by job class (GPUs asked and
run-time bucket). The largest single-job changes are listed with their wait off and on.
``--cap JOB=G`` (repeatable) shows job JOB to the policy with no count above G, in both runs:
the counterfactual of one start's width.
"""

from __future__ import annotations

import os
import sys

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import collections

from dataclasses import replace

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fairness  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.params import parse_params  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.fairness import tenant_summary  # noqa: E402


def bucket(run: float) -> str:
    for lim, name in ((600, "<10m"), (3600, "10m-1h"), (6 * 3600, "1-6h"), (24 * 3600, "6-24h")):
        if run < lim:
            return name
    return ">24h"


def capped(policy, caps: dict[str, int]):
    """``policy`` shown each job of ``caps`` with its counts above the cap not allowed (inf)."""
    if not caps:
        return policy
    inner = policy.decide

    def decide(state):
        ws = []
        for w in state.waiting:
            g = caps.get(w.job_id)
            if g is not None:
                one, multi = w.run_one_node.copy(), w.run_multi_node.copy()
                one[g:] = np.inf
                multi[g:] = np.inf
                w = replace(w, run_one_node=one, run_multi_node=multi)
            ws.append(w)
        return inner(replace(state, waiting=tuple(ws)))

    policy.decide = decide
    return policy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--names", default="philly[62000")
    ap.add_argument("--only", default=None)
    ap.add_argument("--policy", default="lyapunov")
    ap.add_argument("--param", action="append", default=[])
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--cap", action="append", default=[], metavar="JOB=G")
    a = ap.parse_args()
    caps = {k: int(v) for k, _, v in (c.partition("=") for c in a.cap)}
    params = parse_params(a.param, [a.policy]).get(a.policy, {}) if a.param else {}
    for w in fairness.workloads(False, a.only):
        if not any(w["name"].startswith(n) for n in a.names.split(",")):
            continue
        kw = dict(seed=w["seed"], end_fraction=w["end_fraction"], shares=w["shares"])
        res = {}
        for m, on in (("off", False), ("on", True)):
            sim = Simulation(w["jobs"], w["cluster"], tenant_input=on, **kw)
            res[m] = sim.run(capped(make_policy(a.policy, seed=w["seed"], **params), caps), name=a.policy)
        fs = Simulation(w["jobs"], w["cluster"], **kw).run(make_policy("fairshare", seed=w["seed"]), name="fairshare")
        n = len(w["jobs"])
        jo = {r.job.job_id: r for r in res["off"].records}
        jn = {r.job.job_id: r for r in res["on"].records}
        avg = {m: float(np.mean([r.jct for r in res[m].records])) for m in res}
        favg = float(np.mean([r.jct for r in fs.records]))
        print(f"== {w['name']} ({n} jobs, {w['cluster'].nodes}x{w['cluster'].gpus_per_node}) {a.policy}: "
              f"JCT off {avg['off']:.0f}, on {avg['on']:.0f} ({avg['on'] / avg['off']:.3f}x); fairshare {favg:.0f}; "
              f"off / fairshare {avg['off'] / favg:.3f}, on / fairshare {avg['on'] / favg:.3f}")
        shares = {}
        for m in res:
            tens, _ = tenant_summary(res[m], w["shares"])
            shares[m] = {k: v["gpu_s"] / v["entitled_gpu_s"] if v["entitled_gpu_s"] > 0 else float("nan")
                         for k, v in tens.items()}
        print("  worst share off {:.3f}, on {:.3f}".format(*(min(v for v in shares[m].values() if v == v) for m in ("off", "on"))))
        by_t: dict[str, list[float]] = collections.defaultdict(list)
        by_c: dict[str, list[float]] = collections.defaultdict(list)
        for jid, r in jo.items():
            d = jn[jid].jct - r.jct
            by_t[r.job.user].append(d)
            by_c[f"{r.gpus:>2} GPUs {bucket(r.run_s)}"].append(d)
        print("  tenant   jobs  part of avg change (s)  share off -> on")
        for t, ds in sorted(by_t.items(), key=lambda kv: -abs(sum(kv[1]))):
            print(f"  {t:8s} {len(ds):5d} {sum(ds) / n:+10.0f}   {shares['off'].get(t, float('nan')):.3f}"
                  f" -> {shares['on'].get(t, float('nan')):.3f}")
        print("  class            jobs  part of avg change (s)")
        for c, ds in sorted(by_c.items(), key=lambda kv: -abs(sum(kv[1]))):
            print(f"  {c:16s} {len(ds):5d} {sum(ds) / n:+10.0f}")
        moved = sorted(jo, key=lambda j: -abs(jn[j].jct - jo[j].jct))[: a.top]
        for j in moved:
            r, q = jo[j], jn[j]
            print(f"    {j} {r.job.user} {r.gpus} GPUs run {r.run_s:.0f}: wait {r.wait:.0f} -> {q.wait:.0f}")


if __name__ == "__main__":
    main()
