"""Where typed lyapunov loses to the Gavel-style baseline on benchmarks/heterogeneous.py
(docs/experiments.md, "lyapunov against gavel on GPU types").

    python benchmarks/experiments/gavel_gap.py [--set design|heldout] [--workloads 5,6]
        [--policies lyapunov,gavel] [--json]

Each policy on the benchmark's own simulation (gavel on the fixed-batch jobs, the others on the
adaptive ones; the same allowed-types rule and seed). Per workload and policy:

* average JCT = wait (no GPUs) + run (holding GPUs); checkpoints per job;
* per job class (``fast``: may run on the fastest type only; ``slow``: on the slower types only;
  ``any``): jobs, mean wait, mean run, mean JCT (h);
* each type's share of the GPU-seconds and its busy fraction over the makespan; the GPU-hours the
  fastest type stood idle while a job that allows it waited (``fast_idle_gpu_h``);
* the ``any`` jobs: how many ran (first segment) on each type, and their mean GPUs there;
* ``gavel-keep``: gavel whose rounds never preempt; ``--off-fast JOB,...``: those jobs kept off the
  fastest type (a counterfactual: the held-out imagenet-18 of workload 6);
* the largest single holds of the fastest type: (job, app, class, GPUs, hours held, the hour it started).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from heterogeneous import ROOT, SETS, _fits, allowed_types  # noqa: E402

from lyasched.cli.nativeout import native_stdout_to_stderr  # noqa: E402
from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.gavel import Gavel  # noqa: E402
from lyasched.policy.state import SlotResult, SlotState  # noqa: E402
from lyasched.sim.hetero import TypedCluster, parse_cluster_spec  # noqa: E402
from lyasched.sim.pollux_trace import measured_types, pollux_workload  # noqa: E402
from lyasched.sim.simulator import Simulation  # noqa: E402

EXTRA: dict = {}  # name -> factory of a variant policy (registered by callers)


@dataclass
class GavelKeep(Gavel):
    """gavel whose rounds never preempt (a running job keeps its GPUs to its end): how much of
    gavel's gain is its preemption."""

    name: str = "gavel-keep"

    def decide(self, state: SlotState) -> SlotResult:
        return super().decide(replace(state, running=tuple(replace(r, preemptible=False) for r in state.running)))


EXTRA["gavel-keep"] = GavelKeep


def build(set_name: str, k: int, seed: int = 0, off_fast: tuple[str, ...] = ()) -> tuple[Simulation, Simulation, TypedCluster, dict]:
    """The benchmark's adaptive and fixed-batch simulations of workload k, and the allowed types
    (``off_fast``: jobs kept off the fastest type, a counterfactual)."""
    spec, _ = SETS[set_name]
    typed = parse_cluster_spec(spec)
    assert isinstance(typed, TypedCluster)
    path = os.path.join(ROOT, "workloads", f"workload-{k}.csv")
    traces = os.path.join(ROOT, "traces")
    w = pollux_workload(path, traces, typed.nodes, max(typed.node_gpus), adaptive=True)
    wf = pollux_workload(path, traces, typed.nodes, max(typed.node_gpus), adaptive=False)
    measured = measured_types(traces, {j.profile.model for j in w.jobs}, typed.types)
    probe = Simulation(w.jobs[:1], w.cluster, typed=typed, measured=measured)
    fixed = {j.job_id: j for j in wf.jobs}
    gt = allowed_types(w.jobs, typed, lambda job, want: bool(_fits(probe, job, want))
                       and bool(_fits(probe, fixed[job.job_id], want)))
    for jid in off_fast:
        gt[jid] = tuple(typed.types[1:])
    sim = Simulation(w.jobs, w.cluster, typed=typed, gpu_types=gt, measured=measured, seed=seed)
    simf = Simulation(wf.jobs, wf.cluster, typed=typed, gpu_types=gt, measured=measured, seed=seed)
    return sim, simf, typed, gt


def analyse(sim: Simulation, typed: TypedCluster, gt: dict, name: str) -> dict:
    landed: dict[int, list[str]] = defaultdict(list)
    orig = sim._landing

    def hook(i: int, placement: Any, g: int, spans: bool) -> tuple[str, str]:
        out = orig(i, placement, g, spans)
        landed[i].append(out[0])
        return out
    sim._landing = hook  # type: ignore[method-assign]
    try:
        pol = EXTRA[name]() if name in EXTRA else make_policy(name)
        res = sim.run(pol, name=name)
    finally:
        del sim._landing
    h = 3600.0
    fast = typed.types[0]
    recs = res.records
    cls = ["fast" if gt.get(r.job.job_id) == (fast,) else "slow" if r.job.job_id in gt else "any" for r in recs]
    jct = np.array([r.jct for r in recs]) / h
    run = np.array([r.run_s for r in recs]) / h
    wait = jct - run
    out: dict = {"avg_jct_h": float(jct.mean()), "wait_h": float(wait.mean()), "run_h": float(run.mean()),
                 "checkpoints_per_job": float(np.mean([r.preemptions for r in recs])),
                 "type_violations": res.type_violations, "classes": {}}
    for c in ("fast", "slow", "any"):
        m = np.array([x == c for x in cls])
        if m.any():
            out["classes"][c] = {"jobs": int(m.sum()), "wait_h": float(wait[m].mean()), "run_h": float(run[m].mean()),
                                 "jct_h": float(jct[m].mean())}
    span = res.makespan
    cap = {g.gpu_type: g.nodes * g.gpus_per_node for g in typed.groups}
    per_type = {t: 0.0 for t in typed.types}
    holds = []
    # timeline of the fastest type's busy GPUs and of waiting jobs that allow it
    ev: list[tuple[float, int, int]] = []  # (time, d_busy_fast, d_waiting_fast_allowing)
    for i, r in enumerate(recs):
        segs = r.segments
        for s, t in zip(segs, landed[i]):
            per_type[t] += (s.end - s.start) * s.gpus
            if t == fast:
                ev += [(s.start, s.gpus, 0), (s.end, -s.gpus, 0)]
                holds.append((s.gpus * (s.end - s.start) / h, r.job.job_id, r.job.profile.model, cls[i], s.gpus,
                              round((s.end - s.start) / h, 2), round((s.start - res.first_submit) / h, 2)))
        if cls[i] != "slow":  # it allows the fast type: waiting between submit and each segment
            t0 = r.job.submit_time
            for s in segs:
                if s.start > t0:
                    ev += [(t0, 0, 1), (s.start, 0, -1)]
                t0 = s.end
    ev.sort(key=lambda e: (e[0], -e[1]))
    busy = waiting = 0
    idle_wait = 0.0
    prev = ev[0][0] if ev else 0.0
    for when, db, dw in ev:
        if waiting > 0:
            idle_wait += (cap[fast] - busy) * (when - prev)
        busy += db
        waiting += dw
        prev = when
    out["type_gpu_share"] = {t: v / max(1e-9, sum(per_type.values())) for t, v in per_type.items()}
    out["type_busy"] = {t: per_type[t] / (cap[t] * span) for t in typed.types}
    out["fast_idle_gpu_h"] = idle_wait / h
    first: Counter[str] = Counter()
    gpus_on: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(recs):
        if cls[i] == "any" and landed[i]:
            first[landed[i][0]] += 1
            gpus_on[landed[i][0]].append(r.segments[0].gpus)
    out["any_first_type"] = dict(first)
    out["any_gpus_on"] = {t: float(np.mean(v)) for t, v in gpus_on.items()}
    out["top_fast_holds"] = sorted(holds, reverse=True)[:5]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=tuple(SETS), default="heldout")
    ap.add_argument("--workloads", default=None)
    ap.add_argument("--policies", default="lyapunov,gavel")
    ap.add_argument("--off-fast", default="", help="comma-separated job ids kept off the fastest type (counterfactual)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    off = tuple(x for x in args.off_fast.split(",") if x)
    wls = [int(x) for x in args.workloads.split(",")] if args.workloads else list(SETS[args.set][1])
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    out: dict = {"set": args.set, "workloads": {}}
    with native_stdout_to_stderr():
        for k in wls:
            row = {}
            for p in names:
                sim, simf, typed, gt = build(args.set, k, off_fast=off)
                row[p] = a = analyse(simf if p.startswith("gavel") else sim, typed, gt, p)
                if not args.json:
                    cl = "  ".join(f"{c}[{v['jobs']}] w{v['wait_h']:.2f} r{v['run_h']:.2f}" for c, v in a["classes"].items())
                    print(f"w{k} {p:9s} jct {a['avg_jct_h']:.3f} = wait {a['wait_h']:.3f} + run {a['run_h']:.3f}"
                          f" ckpt/job {a['checkpoints_per_job']:.2f} | {cl} | busy "
                          f"{' '.join(f'{t}:{v:.2f}' for t, v in a['type_busy'].items())} fast-idle-while-waiting "
                          f"{a['fast_idle_gpu_h']:.1f} GPU-h | any on {a['any_first_type']} gpus {({t: round(v, 1) for t, v in a['any_gpus_on'].items()})}",
                          file=sys.stderr)
                    for x in a["top_fast_holds"][:3]:
                        print(f"      hold {x[0]:.1f} GPU-h: {x[1]} {x[2]} {x[3]} {x[4]} GPUs {x[5]} h from {x[6]} h", file=sys.stderr)
            out["workloads"][f"workload-{k}"] = row
    rows = list(out["workloads"].values())
    out["mean"] = {p: {key: float(np.mean([r[p][key] for r in rows])) for key in ("avg_jct_h", "wait_h", "run_h", "checkpoints_per_job", "fast_idle_gpu_h")} for p in names}
    if args.json:
        print(json.dumps(out))
        return
    for p, m in out["mean"].items():
        print(f"{p:10s} " + "  ".join(f"{key} {v:.3f}" for key, v in m.items()))


if __name__ == "__main__":
    main()
