"""Time one decision of every baseline policy on the same slot as decision_overhead.py
(10,000 waiting jobs on 1,024 nodes x 4 GPUs, a third free), with the busy GPUs held by running jobs.

    python benchmarks/baselines_overhead.py [--jobs 10000] [--nodes 1024] [--repeats 5] [--json]

There is no separate target for baselines; the Lyapunov policy's is <= 50 ms median. The figures
say whether a baseline would dominate a trace replay's wall time.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import dataclasses
import json
import statistics
import time

import numpy as np
from decision_overhead import build  # same directory: the Lyapunov benchmark's slot

from lyasched.policy import POLICIES, make_policy
from lyasched.policy.state import RunningJob, SlotState


def with_running(state: SlotState, seed: int) -> SlotState:
    """Fill each node's busy GPUs with one running job (random start, time limit, attained service)."""
    rng = np.random.default_rng(seed)
    running = []
    for node, f in enumerate(state.free):
        busy = state.gpus_per_node - f
        if busy:
            start = state.now - float(rng.uniform(0, 20_000))
            running.append(RunningJob(
                job_id=f"r{node}", gpus=busy, placement=((node, busy),), start_time=start,
                expected_end=start + float(rng.uniform(1_000, 40_000)),
                attained=float(rng.uniform(0, 50_000)), preemptible=True))
    # deterministic per-job time limits for backfill: 2x the best predicted run time
    waiting = tuple(dataclasses.replace(w, time_limit=2 * w.best_run) for w in state.waiting)
    return dataclasses.replace(state, waiting=waiting, running=tuple(running))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--gpus-per-node", type=int, default=4)
    ap.add_argument("--max-gpus", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    state = with_running(build(a.jobs, a.nodes, a.gpus_per_node, a.max_gpus, 0), 1)
    rows = []
    for name in (n for n in POLICIES if n != "lyapunov"):
        pol = make_policy(name, seed=0)
        times, res = [], None
        for _ in range(a.repeats):
            t = time.perf_counter()
            res = pol.decide(state)
            times.append(time.perf_counter() - t)
        rows.append({"policy": name, "median_ms": statistics.median(times) * 1e3, "started": len(res.starts),
                     "gpus_started": sum(d.gpus for d in res.starts), "preempted": len(res.preempt)})
    if a.json:
        print(json.dumps({"jobs": a.jobs, "nodes": a.nodes, "free_gpus": sum(state.free), "policies": rows}))
        return
    print(f"{a.jobs} waiting jobs, {a.nodes}x{a.gpus_per_node} GPUs, {sum(state.free)} free, "
          f"{len(state.running)} running; median of {a.repeats}")
    for r in rows:
        print(f"  {r['policy']:<11} {r['median_ms']:8.1f} ms   started {r['started']:5d} jobs "
              f"({r['gpus_started']} GPUs), preempted {r['preempted']}")


if __name__ == "__main__":
    main()
