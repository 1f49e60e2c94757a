"""Heterogeneous GPU clusters: average JCT of the type-aware policies against their unaware
references and a Gavel-style baseline, on Pollux applications (docs/results.md, "GPU types").

    python benchmarks/heterogeneous.py [--only design|heldout] [--workloads N] [--max-jobs N]
        [--fixed-batch] [--policies lyapunov,...] [--json]

Sets, fixed before any tuning (none was done: every policy runs at its defaults):

* design: Sia's cluster shape (16 A100 + 24 RTX 2080 Ti + 24 T4 = 64 GPUs, as 2x8 + 3x8 + 6x4
  nodes) with the Pollux artifact's workloads 1-4 (160 jobs each, sized for 64 GPUs);
* held-out: another shape (8 A100 + 16 V100 + 32 T4 = 56 GPUs, as 1x8 + 2x8 + 8x4) with
  workloads 5-8.

Each job's allowed types follow a fixed rule on its position in its workload: one in five may
run on A100 only, one in ten on T4 or RTX 2080 Ti (V100 on the held-out shape) only, the rest
anywhere; a job whose batch fits none of its types (memory) may run anywhere instead. Speeds per
type: the profiles were measured on T4s (the artifact's cluster); every other type is the
roofline's prediction from the datasheet (lyasched.costmodel.roofline), there being no per-type
measurements in the artifact (a ``placements-<type>.csv`` next to an application's would be used).
Jobs are adaptive (Pollux/Sia's setting) unless ``--fixed-batch``.

Targets: aware <= 0.75x unaware, <= 0.8x gavel, 0 type violations.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from lyasched.cli.nativeout import native_stdout_to_stderr
from lyasched.policy import make_policy
from lyasched.sim.hetero import TypedCluster, parse_cluster_spec
from lyasched.sim.pollux_trace import measured_types, pollux_workload
from lyasched.sim.simulator import Simulation

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "pollux")
SETS = {
    "design": ("a100:2x8,rtx2080ti:3x8,t4:6x4", (1, 2, 3, 4)),
    "heldout": ("a100:1x8,v100:2x8,t4:8x4", (5, 6, 7, 8)),
}
# gavel: fixed batch (its definition); gavel-adaptive: the same rule on the adaptive jobs (for reference)
POLICIES = ("lyapunov", "lyapunov-unaware", "elastic", "elastic-unaware", "gavel", "gavel-adaptive")
PAIRS = (("lyapunov", "lyapunov-unaware"), ("elastic", "elastic-unaware"))


def allowed_types(jobs, typed: TypedCluster, sim_probe) -> dict[str, tuple[str, ...]]:
    """The fixed rule of the module docstring; a job that fits none of its types runs anywhere."""
    fast, slow = typed.types[0], tuple(typed.types[1:])
    out = {}
    for k, j in enumerate(jobs):
        want = (fast,) if k % 5 == 0 else slow if k % 10 == 1 else ()
        if want and sim_probe(j, want):
            out[j.job_id] = want
    return out


def run_set(name: str, args) -> dict:
    spec, wls = SETS[name]
    typed = parse_cluster_spec(spec)
    assert isinstance(typed, TypedCluster)
    out: dict = {"cluster": spec, "workloads": {}}
    for k in wls[: args.workloads]:
        path = os.path.join(ROOT, "workloads", f"workload-{k}.csv")
        w = pollux_workload(path, os.path.join(ROOT, "traces"), typed.nodes, max(typed.node_gpus),
                            adaptive=not args.fixed_batch, max_jobs=args.max_jobs)
        # gavel runs each job at its user's batch (Gavel+TunedJobs: the row's batch and replicas)
        wf = pollux_workload(path, os.path.join(ROOT, "traces"), typed.nodes, max(typed.node_gpus),
                             adaptive=False, max_jobs=args.max_jobs)
        measured = measured_types(os.path.join(ROOT, "traces"), {j.profile.model for j in w.jobs}, typed.types)
        probe = Simulation(w.jobs[:1], w.cluster, typed=typed, measured=measured)
        fixed = {j.job_id: j for j in wf.jobs}
        gt = allowed_types(w.jobs, typed, lambda job, want: bool(_fits(probe, job, want))
                           and bool(_fits(probe, fixed[job.job_id], want)))
        sim = Simulation(w.jobs, w.cluster, typed=typed, gpu_types=gt, measured=measured, seed=args.seed)
        sim_fixed = Simulation(wf.jobs, wf.cluster, typed=typed, gpu_types=gt, measured=measured, seed=args.seed)
        row: dict = {"jobs": len(w.jobs), "typed_jobs": len(gt)}
        for p in args.policies:
            t0 = time.perf_counter()
            on = sim_fixed if p == "gavel" and not args.fixed_batch else sim
            r = on.run(make_policy(p.removesuffix("-adaptive")), name=p)
            row[p] = {"avg_jct_h": float(np.mean([x.jct for x in r.records])) / 3600, "type_violations": r.type_violations,
                      "wall_s": round(time.perf_counter() - t0, 1)}
            if not args.json:
                print(f"  {name} workload-{k} {p:18s} avg JCT {row[p]['avg_jct_h']:.3f} h  violations {r.type_violations}"
                      f"  ({row[p]['wall_s']} s)", file=sys.stderr)
        out["workloads"][f"workload-{k}"] = row
    rows = list(out["workloads"].values())
    mean = {p: float(np.mean([r[p]["avg_jct_h"] for r in rows])) for p in args.policies}
    out["mean_avg_jct_h"] = mean
    out["type_violations"] = int(sum(r[p]["type_violations"] for r in rows for p in args.policies))
    ratios = {}
    for a, u in PAIRS:
        if a in mean and u in mean:
            ratios[f"{a}/{u}"] = mean[a] / mean[u]
        if a in mean and "gavel" in mean:
            ratios[f"{a}/gavel"] = mean[a] / mean["gavel"]
    out["ratios"] = ratios
    out["targets"] = {k: (v <= (0.75 if "unaware" in k else 0.8)) for k, v in ratios.items()}
    return out


def _fits(sim: Simulation, job, want) -> list[str]:
    """The types of ``want`` whose memory holds the job at some count."""
    saved = sim.allowed
    sim.allowed = {job.job_id: tuple(want)}
    try:
        return list(sim._typed_templates(job))
    finally:
        sim.allowed = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=tuple(SETS), default=None)
    ap.add_argument("--workloads", type=int, default=4, help="workloads per set (at most 4)")
    ap.add_argument("--max-jobs", type=int, default=None, help="first N jobs of each workload")
    ap.add_argument("--fixed-batch", action="store_true")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    with native_stdout_to_stderr():  # (sia's solver prints with printf)
        res = {"adaptive": not args.fixed_batch, "max_jobs": args.max_jobs,
               "sets": {s: run_set(s, args) for s in SETS if args.only in (None, s)}}
    if args.json:
        print(json.dumps(res))
        return
    for s, r in res["sets"].items():
        print(f"{s} ({r['cluster']}): mean of average JCT over {len(r['workloads'])} workloads")
        for p, v in r["mean_avg_jct_h"].items():
            print(f"  {p:18s} {v:.3f} h")
        for k, v in r["ratios"].items():
            print(f"  {k:28s} {v:.3f}  ({'met' if r['targets'][k] else 'missed'}: <= {0.75 if 'unaware' in k else 0.8})")
        print(f"  type violations: {r['type_violations']}")


if __name__ == "__main__":
    main()
