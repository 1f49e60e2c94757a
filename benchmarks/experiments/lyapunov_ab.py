#!/usr/bin/env python3
"""Same-state A/B of lyapunov's decide: this tree's against a reference tree's (prints figures; asserts nothing).

One replay of the first ``--max-jobs`` Philly jobs; at every decide call both policies (this
tree's, and the reference tree's lyapunov.py + rowcache.py loaded as separate modules) decide on
the same `SlotState`, in alternating order, each keeping its own caches across calls. Counts the
calls whose starts (job, GPUs, placement, score), Q, Z, solver or wake-up time differ, and sums
each side's CPU time. ``--dist`` prints how the calls spread over waiting jobs and free GPUs.

    python benchmarks/experiments/lyapunov_ab.py [--ref /work/main] [--max-jobs 20000] [--no-tenants] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402
from lyasched.sim import Simulation  # noqa: E402
from lyasched.sim.workloads import load_workload  # noqa: E402


def load_reference(tree: Path) -> type:
    """The reference tree's LyapunovPolicy, its rowcache module loaded beside this tree's."""
    mods = {}
    for name in ("rowcache", "lyapunov"):
        src = (tree / "lyasched" / "policy" / f"{name}.py").read_text()
        src = src.replace("from lyasched.policy.rowcache import", "from _ref_rowcache import")
        mod = types.ModuleType(f"_ref_{name}")
        mod.__file__ = str(tree / "lyasched" / "policy" / f"{name}.py")
        sys.modules[f"_ref_{name}"] = mod
        exec(compile(src, mod.__file__, "exec"), mod.__dict__)
        mods[name] = mod
    return mods["lyapunov"].LyapunovPolicy


def key(res) -> tuple:
    starts = tuple((d.job_id, d.gpus, tuple(d.placement), d.score) for d in res.starts)
    info = res.info or {}
    return starts, res.q, res.z, info.get("solver"), info.get("wake_at")


def bucket(v: int) -> int:
    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        if v <= b:
            return b
    return 10**9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default="/work/main")
    ap.add_argument("--trace", default=str(ROOT.parent / "shared" / "data" / "traces" / "philly.csv"))
    ap.add_argument("--max-jobs", type=int, default=20000)
    ap.add_argument("--no-tenants", action="store_true")
    ap.add_argument("--dist", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ref_cls = load_reference(Path(a.ref))
    w = load_workload(a.trace, load=1.0, max_jobs=a.max_jobs)
    sim = Simulation(w.jobs, w.cluster, seed=0, tenant_input=not a.no_tenants)
    new, ref = LyapunovPolicy(), ref_cls()
    cpu = {"new": 0.0, "ref": 0.0}
    calls = mism = 0
    first: list = []
    dist: collections.Counter = collections.Counter()

    class Both:
        name = "lyapunov"

        def __getattr__(self, attr):
            return getattr(new, attr)

        def decide(self, state):
            nonlocal calls, mism
            order = (("new", new), ("ref", ref)) if calls % 2 == 0 else (("ref", ref), ("new", new))
            out = {}
            for tag, pol in order:
                t = time.process_time()
                out[tag] = pol.decide(state)
                cpu[tag] += time.process_time() - t
            calls += 1
            dist[(bucket(len(state.waiting)), bucket(sum(state.free)))] += 1
            if key(out["new"]) != key(out["ref"]):
                mism += 1
                if len(first) < 3:
                    first.append({"call": calls, "new": repr(key(out["new"]))[:400], "ref": repr(key(out["ref"]))[:400]})
            return out["new"]

    t0 = time.process_time()
    sim.run(Both(), name="lyapunov")
    res: dict = {"jobs": len(w.jobs), "tenants": not a.no_tenants, "calls": calls, "mismatches": mism,
           "decide_cpu_new_s": round(cpu["new"], 2), "decide_cpu_ref_s": round(cpu["ref"], 2),
           "ratio": round(cpu["new"] / cpu["ref"], 3) if cpu["ref"] else None,
           "replay_cpu_s": round(time.process_time() - t0, 1), "first_mismatches": first}
    if a.dist:
        res["dist_waiting_free"] = {f"{n}/{f}": c for (n, f), c in sorted(dist.items())}
    print(json.dumps(res, indent=None if a.json else 1))


if __name__ == "__main__":
    main()
