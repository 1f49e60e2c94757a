"""Wall time of a full Philly replay (82,247 jobs) per policy. Target: <= 60 s per policy.

    python benchmarks/replay_speed.py [--policies fifo,lyapunov] [--max-jobs N] [--limit 120] [--json]

Each policy runs on the same jobs and cluster (sized for load 0.8, 8 GPUs/node, as
`lyasched replay --workload ../shared/data/traces/philly.csv` does); a policy still running
after --limit seconds is stopped and reported as '> limit'. Prints one line per policy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from lyasched.policy import POLICIES, make_policy
from lyasched.sim import Simulation, WallTimeExceeded
from lyasched.sim.metrics import summarize
from lyasched.sim.workloads import load_workload

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "shared", "data", "traces", "philly.csv")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--limit", type=float, default=120.0, help="stop a policy after this many seconds")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    t0 = time.perf_counter()
    w = load_workload(a.trace, load=a.load, max_jobs=a.max_jobs)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    setup = time.perf_counter() - t0
    out = {"jobs": len(w.jobs), "cluster": f"{w.cluster.nodes}x{w.cluster.gpus_per_node}", "setup_s": round(setup, 2),
           "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus", "policies": {}}
    if not a.json:
        print(f"{len(w.jobs)} jobs on {out['cluster']} GPUs; load+setup {setup:.1f} s (once, shared by all policies)")
    for name in a.policies.split(","):
        try:
            r = sim.run(make_policy(name, seed=0), name=name, wall_limit_s=a.limit)
            s = summarize(r)
            row = {"wall_s": round(r.wall_s, 1), "decide_s": round(r.decide_s, 1), "finished": True,
                   "decide_calls": r.decide_calls, "avg_jct_s": round(s["avg_jct_s"])}
            line = (f"{name:11s} {r.wall_s:7.1f} s  (policy.decide {r.decide_s:.1f} s in {r.decide_calls} calls, "
                    f"simulator {r.wall_s - r.decide_s:.1f} s; avg JCT {s['avg_jct_s']:.0f} s)")
        except WallTimeExceeded as e:
            row = {"wall_s": round(e.wall, 1), "decide_s": round(e.decide_s, 1), "finished": False, "jobs_done": e.done}
            line = (f"{name:11s}  > {a.limit:.0f} s  (stopped with {e.done}/{e.total} jobs finished; "
                    f"policy.decide {e.decide_s:.1f} s of it)")
        out["policies"][name] = row
        if not a.json:
            print(line, flush=True)
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
