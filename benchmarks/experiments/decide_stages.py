#!/usr/bin/env python3
"""Where lyapunov's decide CPU goes, step by step, over one replay (prints figures; asserts nothing).

    python benchmarks/experiments/decide_stages.py [--trace PATH] [--max-jobs N] [--load 0.8] [--json]

Wraps lyapunov's steps (its methods, the module functions it calls, `RowCache`'s lookups and
`FreeGpus`' steps) with the thread's CPU clock, each wrapper adding about a microsecond a call, and
counts what a call could reuse from the previous one: whether the free GPUs per node are the same,
and how `RowCache._lookup` found the rows (the same tuple, the last one less its starts, or by id).
Times are inclusive (``_scores`` holds ``cut``, which holds ``_lookup``, which holds the adds).
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "..", "shared", "data", "traces", "philly.csv")


def stages(trace: str, max_jobs: int | None, load: float) -> dict:
    from lyasched.policy import lyapunov, make_policy, rowcache, state
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import load_workload

    cpu: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter[str] = collections.Counter()
    seen: collections.Counter[str] = collections.Counter()
    saved: list = []  # patched attributes, put back after the replay

    def wrap(owner: object, name: str, label: str) -> None:
        f = getattr(owner, name)
        saved.append((owner, name, f))

        @functools.wraps(f)
        def timed(*a, **k):
            t = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                cpu[label] += time.thread_time() - t
                calls[label] += 1
        setattr(owner, name, timed)

    L, R = lyapunov.LyapunovPolicy, rowcache.RowCache
    for n in ("decide", "_scores", "_tenant_credit", "_owed", "_fill", "_greedy", "_wake_at", "_wake_at_tenants", "_decision"):
        wrap(L, n, n)
    for n in ("cut", "_lookup", "_add_one", "_add_many", "left", "_compact"):
        wrap(R, n, "RowCache." + n)
    for n in ("_useful", "_knapsack", "_knapsack_small", "_shortest_first", "repaying_gpus"):
        wrap(lyapunov, n, n)
    for n in ("__init__", "copy", "take", "spread_mask"):
        wrap(state.FreeGpus, n, "FreeGpus." + n)

    last_free: list = [None]
    decide = L.decide

    def census(self, st):  # (outside the timed call)
        seen["same_free"] += st.free == last_free[0]
        last_free[0] = st.free
        rows = self._rows
        if st.waiting and not st.node_types:
            if rows._last is not None and rows._last[0] is st.waiting:
                seen["rows_same_tuple"] += 1
            elif rows._next is not None and len(rows._next[0]) <= len(st.waiting) \
                    and rowcache._begins_with(st.waiting, rows._next[0]):
                seen["rows_last_less_starts"] += 1
            else:
                seen["rows_by_id"] += 1
        return decide(self, st)
    L.decide = census  # type: ignore[method-assign]

    w = load_workload(trace, load=load, max_jobs=max_jobs)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    t0 = time.process_time()
    sim.run(make_policy("lyapunov"), name="lyapunov")
    total = time.process_time() - t0
    L.decide = decide  # type: ignore[method-assign]
    for owner, name, f in reversed(saved):
        setattr(owner, name, f)
    return {"jobs": len(w.jobs), "replay_cpu_s": round(total, 2), "decide_calls": calls["decide"],
            "steps": {k: {"cpu_s": round(v, 3), "calls": calls[k], "us_per_call": round(1e6 * v / max(1, calls[k]), 1)}
                      for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
            "reuse": dict(seen)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = stages(a.trace, a.max_jobs, a.load)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['jobs']} jobs, {out['decide_calls']} decide calls, replay {out['replay_cpu_s']} s CPU")
    for k, v in out["steps"].items():
        print(f"  {k:28s} {v['cpu_s']:8.3f} s {v['calls']:8d} calls {v['us_per_call']:8.1f} us")
    print("reuse:", out["reuse"])


if __name__ == "__main__":
    main()
