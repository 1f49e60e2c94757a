"""Experiment: a lower bound on every policy's average JCT under the simulator's model, beside
`pollux` and `hesrpt` (docs/hesrpt.md, "Measured"; docs/experiments.md, "How low the average JCT
can go").

    python benchmarks/experiments/pollux_bound.py [--json] [--loads 0.5,1.0] [--workloads 1-8]
        [--goodput-loads 0.5,1] [--policies pollux,hesrpt] [--no-goodput] [--no-pollux]

Each job's bound is the least JCT any policy could give it: alone on the cluster from its
submission, no wait, no restart, and every re-tuning piece (an adaptive job's epoch) on the GPU
count and placement (one node or several) where that piece runs fastest at its best batch, as the
simulator computes a run (its own piece table and rows: `Simulation._pieces`, `_template`,
`factors`; nothing of the model is re-implemented here). Any configuration the simulator accepts is
allowed (the counts the job's max GPUs, memory and the cluster allow), so the bound holds for every
policy, whatever its placement rule. The mean over a workload's jobs bounds every policy's average
JCT there. Also printed:

* ``single``: each job's best run on one configuration for its whole run (the simulator's
  `best_true_runs`, what goodput.py's ``bound_vs_pollux`` reads): not a bound when a job's
  fastest count changes between pieces, shown to say how much switching counts is worth;
* ``aligned``: the bound plus the wait to the first slot boundary at or after the submission
  (the simulator starts jobs only on slot boundaries, so this too holds for every policy here).

Workloads: Pollux's benchmark (the artifact's 8 workloads on 16 x 4 GPUs, replayed as
benchmarks/pollux_benchmark.py replays them: 60 s slot, 30 s restart, exact run times) and
benchmarks/goodput.py's held-out family rows (``synth:adaptive`` seeds 101-103 and its second
shape; ``wide`` rows apart), replayed as goodput.py does. ``--json`` prints {"pollux": {LOAD:
{"workloads": {K: {"bound_h", "single_h", "aligned_h", POLICY_h...}}, "mean": {...}, "ratios":
{...}}}, "goodput": {...}}: ratios are means over the workloads of each figure over pollux's
average JCT (the benchmark's figure is a mean of averages, so bound / pollux there is the mean
bound over the mean pollux); goodput rows per row, with their median and worst per load.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from pollux_benchmark import ARTIFACT_PARAMS, parse_range, workload_path  # noqa: E402

from lyasched.sim import Simulation  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux")


def job_bounds(sim: Simulation) -> np.ndarray:
    """Each job's least JCT under ``sim``'s model: every piece on its fastest configuration (GPU
    count, one node or several, the piece's best batch), from its submission, no wait or restart."""
    out = np.empty(len(sim.jobs))
    for i, j in enumerate(sim.jobs):
        if j.adaptive is not None:
            tab = sim._pieces(j)  # seconds per piece per count for one base step of work, best batch
            per_piece = np.minimum(tab.one, tab.multi).min(axis=1)
            unit = float(per_piece.sum())
        else:
            t = sim._template(j)  # one iteration's rows
            unit = float(min(t.run_one_node.min(), t.run_multi_node.min()))
        out[i] = unit * j.iterations * float(sim.factors[i])
    return out


def aligned(sim: Simulation, bounds: np.ndarray) -> np.ndarray:
    """The bounds plus each job's wait to the first slot boundary at or after its submission."""
    slot = sim.slot_len
    sub = np.array([j.submit_time for j in sim.jobs])
    return bounds + (np.ceil(sub / slot) * slot - sub)


def figures(sim: Simulation) -> dict[str, float]:
    b = job_bounds(sim)
    return {"bound_s": float(b.mean()), "single_s": float(np.mean(sim.best_true_runs())),
            "aligned_s": float(aligned(sim, b).mean())}


def pollux_sim(data: str, load: str, k: int) -> Simulation:
    """Workload k at ``load`` as pollux_benchmark.py replays it (adaptive jobs)."""
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"))
    return Simulation(w.jobs, w.cluster, slot_len=60.0, estimate_error=0.0, restart_overhead=30.0)


def pollux_one(args: tuple[str, str, int, tuple[str, ...]]) -> tuple[str, int, dict[str, Any], float]:
    """(load, workload, figures in seconds, CPU s): the bounds and each policy's average JCT, with
    per-job JCTs and bounds (for the gap analysis)."""
    from lyasched.policy import make_policy

    data, load, k, policies = args
    c = time.process_time()
    sim = pollux_sim(data, load, k)
    out: dict[str, Any] = figures(sim)
    b = job_bounds(sim)
    out["jobs"] = {j.job_id: {"app": j.profile.model, "bound_s": float(x)} for j, x in zip(sim.jobs, b)}
    for p in policies:
        r = sim.run(make_policy(p, **ARTIFACT_PARAMS.get(p, {})), name=p)
        out[f"{p}_s"] = float(np.mean([x.jct for x in r.records]))
        for x in r.records:
            out["jobs"][x.job.job_id][p] = x.jct
    return load, k, out, time.process_time() - c


def goodput_rows(loads: Sequence[float]) -> list[dict]:
    from goodput import workloads

    return [w for w in workloads(False, "heldout", loads, None, True)]


def goodput_one(args: tuple[dict, tuple[str, ...]]) -> tuple[dict, float]:
    """One goodput.py row: the bounds and each policy's average JCT, replayed as goodput.py does."""
    from lyasched.policy import make_policy

    w, policies = args
    c = time.process_time()
    sim = Simulation(tuple(w["jobs"]), w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"])
    out: dict[str, Any] = {"name": w["name"], "wide": w["wide"], "load": w["load"], **figures(sim)}
    for p in policies:
        r = sim.run(make_policy(p, seed=w["seed"]), name=p)
        out[f"{p}_s"] = float(np.mean([x.jct for x in r.records]))
    return out, time.process_time() - c


KEYS = ("bound", "aligned", "single")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--loads", default="0.5,1.0", help="Pollux benchmark loads")
    ap.add_argument("--workloads", default="1-8")
    ap.add_argument("--goodput-loads", default="0.5,1", help="goodput.py held-out family loads")
    ap.add_argument("--policies", default="pollux,hesrpt", help="the first is the reference")
    ap.add_argument("--no-pollux", action="store_true")
    ap.add_argument("--no-goodput", action="store_true")
    ap.add_argument("--jobs", type=int, default=2, help="parallel replays (processes)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    try:
        loads = [f"{float(x):.1f}" for x in a.loads.split(",") if x]
        gloads = [float(x) for x in a.goodput_loads.split(",") if x]
        ks = parse_range(a.workloads)
    except ValueError:
        print("pollux_bound.py: --loads and --goodput-loads are numbers, --workloads a range such as 1-8",
              file=sys.stderr)
        return 2
    from lyasched.policy import POLICIES

    pols = tuple(p for p in a.policies.split(",") if p)
    bad = [p for p in pols if p not in POLICIES]
    if bad or not pols:
        print(f"pollux_bound.py: unknown policy {bad}" if bad else "pollux_bound.py: no policy", file=sys.stderr)
        return 2
    missing = [workload_path(a.data, ld, k) for ld in loads for k in ks if not os.path.isfile(workload_path(a.data, ld, k))]
    if not a.no_pollux and missing:
        print(f"pollux_bound.py: no workload {missing[0]}", file=sys.stderr)
        return 2
    ref = pols[0]
    t0, cpu = time.perf_counter(), 0.0
    report: dict[str, Any] = {"policies": list(pols)}
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        if not a.no_pollux:
            res: dict[str, dict[int, dict]] = {ld: {} for ld in loads}
            for ld, k, out, c in ex.map(pollux_one, [(a.data, ld, k, pols) for ld in loads for k in ks]):
                res[ld][k] = out
                cpu += c
                print(f"{ld}x workload-{k}: bound {out['bound_s'] / 3600:.3f} h, "
                      + ", ".join(f"{p} {out[f'{p}_s'] / 3600:.3f} h" for p in pols) + f" ({c:.1f} s CPU)",
                      file=sys.stderr, flush=True)
            report["pollux"] = {}
            for ld in loads:
                names = [*KEYS, *pols]
                mean = {n: float(np.mean([res[ld][k][f"{n}_s"] for k in ks])) / 3600 for n in names}
                per_k = {f"workload-{k}": {f"{n}_h": res[ld][k][f"{n}_s"] / 3600 for n in names} for k in ks}
                report["pollux"][ld] = {
                    "mean_h": mean,
                    "ratios": {n: mean[n] / mean[ref] for n in names if n != ref},
                    "worst_workload": {n: max(res[ld][k][f"{n}_s"] / res[ld][k][f"{ref}_s"] for k in ks)
                                       for n in names if n != ref},
                    "workloads": per_k,
                }
            report["pollux_jobs"] = {ld: {f"workload-{k}": res[ld][k]["jobs"] for k in ks} for ld in loads}
        if not a.no_goodput and gloads:
            rows = []
            for out, c in ex.map(goodput_one, [(w, pols) for w in goodput_rows(gloads)]):
                cpu += c
                for n in (*KEYS, *pols):
                    if n != ref:
                        out[f"{n}_vs_{ref}"] = out[f"{n}_s"] / out[f"{ref}_s"]
                rows.append(out)
                print(f"{out['name']}: bound/{ref} {out[f'bound_vs_{ref}']:.3f}, "
                      + ", ".join(f"{p}/{ref} {out[f'{p}_vs_{ref}']:.3f}" for p in pols if p != ref)
                      + f" ({c:.1f} s CPU)", file=sys.stderr, flush=True)
            summ: dict[str, Any] = {}
            for ld in gloads:
                for kind, sel in (("family", False), ("wide", True)):
                    sub = [r for r in rows if r["load"] == ld and r["wide"] == sel]
                    if sub:
                        keys = [k for k in sub[0] if k.endswith(f"_vs_{ref}")]
                        summ[f"{kind}/load {ld:g}"] = {
                            "rows": len(sub),
                            "median": {k: float(np.median([r[k] for r in sub])) for k in keys},
                            "worst": {k: float(max(r[k] for r in sub)) for k in keys}}
            report["goodput"] = {"rows": rows, "summary": summ}
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    report["cpu_s"] = round(cpu, 1)
    if a.json:
        print(json.dumps(report))
        return 0
    for ld, d in report.get("pollux", {}).items():
        print(f"Pollux benchmark {ld}x (workloads {a.workloads}), mean average JCT (h): "
              + ", ".join(f"{n} {v:.3f}" for n, v in d["mean_h"].items()))
        print("  over " + ref + ": " + ", ".join(f"{n} {v:.3f} (worst workload {d['worst_workload'][n]:.3f})"
                                                for n, v in d["ratios"].items()))
    for name, d in report.get("goodput", {}).get("summary", {}).items():
        print(f"goodput.py held out {name} ({d['rows']} rows), median (worst) over {ref}: "
              + ", ".join(f"{k.split('_vs_')[0]} {d['median'][k]:.3f} ({d['worst'][k]:.3f})" for k in d["median"]))
    print(f"{report['wall_s']} s wall, {report['cpu_s']} s CPU in the replays", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
