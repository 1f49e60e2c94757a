"""Elastic replayed with and without skipping its inert slots, side by side in one run (issue 13).

    python benchmarks/experiments/elastic_skip.py [--workload SPEC] [--max-jobs N] [--load L] [--seed S] [--json]

With jobs waiting, elastic used to be asked every slot. It now lets the simulator skip the slots
in which its make-room step is inert (no waiting candidate fits or has a forecast wait above its
own run: docs/elastic.md). This replays the same workload twice, once as shipped and once with
the make-room step never reporting inert (asked every slot, as before), and prints the calls, the
wall times, their ratio and whether every job started, ended and moved identically (it must).
WORKLOAD is anything `lyasched replay --workload` takes (default: the shared Philly trace).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from lyasched.policy.elastic import ElasticPolicy
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "..", "shared", "data", "traces", "philly.csv")


class EverySlot(ElasticPolicy):
    """Elastic whose make-room step never reports inert: asked every slot while jobs wait."""

    def _make_room(self, *args: Any, **kw: Any) -> Any:
        return (*super()._make_room(*args, **kw)[:5], False)


def outcomes(res: Any) -> list[tuple]:
    return [(r.job.job_id, r.first_start, r.end, r.gpus, r.preemptions, r.resizes) for r in res.records]


def compare(sim: Simulation) -> dict:
    out: dict = {}
    runs = {}
    for name, pol in (("skipping", ElasticPolicy()), ("every_slot", EverySlot())):
        t = time.perf_counter()
        res = sim.run(pol, name="elastic")
        out[name] = {"calls": res.decide_calls, "wall_s": time.perf_counter() - t}
        runs[name] = res
    out["wall_ratio"] = out["skipping"]["wall_s"] / out["every_slot"]["wall_s"]
    out["calls_ratio"] = out["skipping"]["calls"] / out["every_slot"]["calls"]
    out["identical"] = outcomes(runs["skipping"]) == outcomes(runs["every_slot"])
    out["checkpoints"] = sum(r.preemptions for r in runs["skipping"].records)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=PHILLY)
    ap.add_argument("--max-jobs", type=int, default=1000)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        w = load_workload(a.workload, load=a.load, max_jobs=a.max_jobs, seed=a.seed)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = {"workload": w.name, "jobs": len(w.jobs), **compare(Simulation(w.jobs, w.cluster, seed=a.seed))}
    if a.json:
        print(json.dumps(res))
    else:
        s, e = res["skipping"], res["every_slot"]
        print(f"{res['workload']} ({res['jobs']} jobs): elastic skipping inert slots {s['calls']} calls, "
              f"{s['wall_s']:.1f} s; asked every slot {e['calls']} calls, {e['wall_s']:.1f} s; "
              f"wall ratio {res['wall_ratio']:.3f}, calls ratio {res['calls_ratio']:.3f}; "
              f"{res['checkpoints']} checkpoints; outcomes identical: {res['identical']}")
    return 0 if res["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
