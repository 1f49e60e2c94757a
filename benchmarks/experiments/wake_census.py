"""Census of a replay's decide calls: which acted, what woke each, and what the calls cost.

    python benchmarks/experiments/wake_census.py [--trace PATH] [--max-jobs N] [--load 0.8]
                                                 [--policy lyapunov] [--json]

Wraps the policy's ``decide`` (nothing else changes: the replay is the one `replay` runs) and
classifies every call by what changed since the previous one: a job arrived, a job ended, neither
after a call that acted (the simulator asks the next slot then), neither after a call that
returned ``info["wake_at"]`` (the wake-up was reached), or neither with no ``wake_at``. Each class is
split by whether the call started or preempted anything, with its count and decide seconds; the
calls that follow an idle call are further split by whether that call's ``wake_at`` was infinite
(nothing fitted) or finite. It is the ceiling of any rule that skips calls: only idle calls can be
skipped, and only those after an idle call could have been foreseen by the policy's previous
answer (after a call that acted, the policy has not seen the state it left).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "..", "shared", "data", "traces", "philly.csv")


def census(trace: str, max_jobs: int | None, load: float, policy: str) -> dict:
    from lyasched.policy import make_policy
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import load_workload

    w = load_workload(trace, load=load, max_jobs=max_jobs)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    pol = make_policy(policy, seed=0)
    inner = pol.decide
    log: list[tuple] = []

    def decide(state):
        c0 = time.perf_counter()
        res = inner(state)
        dt = time.perf_counter() - c0
        info = res.info if isinstance(res.info, dict) else {}
        log.append((state.now, frozenset(j.job_id for j in state.waiting), frozenset(r.job_id for r in state.running),
                    {d.job_id for d in res.starts}, bool(res.starts or res.preempt), info.get("wake_at"), dt))
        return res

    pol.decide = decide  # type: ignore[method-assign]
    r = sim.run(pol, name=policy)
    by: dict[str, dict] = collections.defaultdict(lambda: {"calls": 0, "decide_s": 0.0})
    after_idle: dict[str, dict] = collections.defaultdict(lambda: {"calls": 0, "decide_s": 0.0})
    prev = None
    for now, wait, run, started, acted, wake, dt in log:
        if prev is None:
            cause = "first"
        else:
            _, pwait, prun, pstarted, pacted, pwake, _ = prev
            arrived = bool(wait - (pwait - pstarted))
            ended = bool((prun | pstarted) - run)
            cause = "+".join(x for x, on in (("arrival", arrived), ("end", ended)) if on) or (
                "after a call that acted" if pacted else "no wake_at" if pwake is None
                else "wake_at reached" if now >= pwake else "other")
            if not pacted:
                key = f"{cause}, previous wake_at {'inf' if pwake == float('inf') else 'finite'}, {'acted' if acted else 'idle'}"
                after_idle[key]["calls"] += 1
                after_idle[key]["decide_s"] += dt
        row = by[f"{cause}, {'acted' if acted else 'idle'}"]
        row["calls"] += 1
        row["decide_s"] += dt
        prev = (now, wait, run, started, acted, wake, dt)
    idle = [x for x in log if not x[4]]
    rnd = {k: {"calls": v["calls"], "decide_s": round(v["decide_s"], 2)} for k, v in by.items()}
    return {"jobs": len(w.jobs), "cluster": f"{w.cluster.nodes}x{w.cluster.gpus_per_node}", "policy": policy,
            "calls": r.decide_calls, "idle_calls": len(idle), "idle_decide_s": round(sum(x[6] for x in idle), 2),
            "decide_s": round(r.decide_s, 2), "wall_s": round(r.wall_s, 2),
            "by_cause": dict(sorted(rnd.items(), key=lambda kv: -kv[1]["calls"])),
            "after_idle": {k: {"calls": v["calls"], "decide_s": round(v["decide_s"], 2)} for k, v in sorted(after_idle.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--max-jobs", type=int, default=None)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--policy", default="lyapunov")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    c0 = time.process_time()
    out = census(a.trace, a.max_jobs, a.load, a.policy)
    out["cpu_s"] = round(time.process_time() - c0, 1)
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['jobs']} jobs on {out['cluster']} GPUs, {a.policy}: {out['calls']} calls, {out['idle_calls']} idle "
          f"({out['idle_decide_s']} of {out['decide_s']} s decide); wall {out['wall_s']} s, CPU {out['cpu_s']} s")
    for k, v in out["by_cause"].items():
        print(f"  {k:45s} {v['calls']:7d} calls {v['decide_s']:7.2f} s")
    print("calls after an idle call:")
    for k, v in out["after_idle"].items():
        print(f"  {k:60s} {v['calls']:7d} calls {v['decide_s']:7.2f} s")


if __name__ == "__main__":
    main()
