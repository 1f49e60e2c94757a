#!/usr/bin/env python3
"""Lyapunov's decide CPU and replay CPU on the first N Philly jobs, side by side over several trees
(prints figures; asserts nothing).

Each (tree, tenants on/off) replay runs in its own child process with that tree's lyasched package
(``PYTHONPATH=tree``), round by round in alternating order, so every tree sees the same machine
load. Per replay: CPU seconds in ``decide`` (process time around each call), CPU seconds of the
whole replay (after loading the trace), calls, average JCT. A tree whose simulator has no tenant
input (ccc6d68) runs its plain replay once, in the "without" column, and both of this tree's columns
are compared with it. Ratios are this tree's (the first) over each other's, medians over rounds.

    python benchmarks/experiments/decide_cpu.py --trees .,/work/main,/work/wt-ccc [--max-jobs 20000] [--rounds 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, sys, time, inspect
from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload
trace, max_jobs, load, tenants = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "1"
w = load_workload(trace, load=load, max_jobs=max_jobs)
kw = {}
if "tenant_input" in inspect.signature(Simulation.__init__).parameters:
    kw["tenant_input"] = tenants
elif tenants:
    print(json.dumps(None)); sys.exit(0)
sim = Simulation(w.jobs, w.cluster, seed=0, **kw)
pol = make_policy("lyapunov", seed=0)
orig, acc = pol.decide, [0.0, 0]
def decide(state):
    t = time.process_time()
    try:
        return orig(state)
    finally:
        acc[0] += time.process_time() - t
        acc[1] += 1
pol.decide = decide
c0 = time.process_time()
r = sim.run(pol, name="lyapunov")
import lyasched
from lyasched.sim.metrics import summarize
print(json.dumps({"decide_cpu_s": round(acc[0], 2), "replay_cpu_s": round(time.process_time() - c0, 2), "calls": acc[1],
                  "avg_jct_s": round(summarize(r)["avg_jct_s"]), "package": lyasched.__file__}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=".")
    ap.add_argument("--trace", default=None)
    ap.add_argument("--max-jobs", type=int, default=20000)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    trees = [os.path.abspath(t) for t in a.trees.split(",")]
    trace = a.trace or os.path.join(trees[0], "..", "shared", "data", "traces", "philly.csv")
    runs: dict = {t: {"with": [], "without": []} for t in trees}
    for rnd in range(a.rounds):
        order = trees if rnd % 2 == 0 else trees[::-1]
        for ten in ("with", "without"):
            for t in order:
                env = {**os.environ, "PYTHONPATH": t}
                out = subprocess.run([sys.executable, "-c", CHILD, trace, str(a.max_jobs), str(a.load),
                                      "1" if ten == "with" else "0"], env=env, capture_output=True, text=True, cwd=t)
                if out.returncode != 0:
                    print(f"{t}: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    sys.exit(1)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                runs[t][ten].append(got)
                print(f"round {rnd} {ten} tenants {t}: {got}", file=sys.stderr, flush=True)
    summary: dict = {}
    base = trees[0]
    for t in trees[1:]:
        for ten in ("with", "without"):
            other = runs[t][ten] if any(runs[t][ten]) else runs[t]["without"]
            pairs = [(x, y) for x, y in zip(runs[base][ten], other) if x and y]
            if pairs:
                summary[f"{t} {ten} tenants"] = {
                    unit: round(statistics.median(x[unit] / y[unit] for x, y in pairs), 3)
                    for unit in ("decide_cpu_s", "replay_cpu_s")}
    res = {"jobs": a.max_jobs, "load": a.load, "runs": runs, "ratio_first_over": summary}
    print(json.dumps(res, indent=None if a.json else 1))


if __name__ == "__main__":
    main()
