"""Experiment: a lower bound on every policy's average JCT under the simulator's model, beside
`pollux` and `hesrpt` (docs/hesrpt.md, "Measured"; docs/experiments.md, "How low the average JCT
can go").

    python benchmarks/experiments/pollux_bound.py [--json] [--loads 0.5,1.0] [--workloads 1-8]
        [--goodput-loads 0.5,1] [--policies pollux,hesrpt] [--no-goodput] [--no-pollux] [--capacity 120]

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
  (the simulator starts jobs only on slot boundaries, so this too holds for every policy here);
* ``capacity`` (``--capacity DT``): a bound that also counts the cluster's GPUs, a
  fluid relaxation solved as a linear program (`capacity_bound`), at DT-second intervals.

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
import math
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


def _groups(sim: Simulation, i: int) -> list[tuple[float, list[tuple[float, float]]]]:
    """Job i's pieces grouped by the count where each runs fastest: per group, the seconds of the
    isolated run it holds and its configurations' (rate, GPUs), rate in seconds of that run done per
    second (at most 1). Within a group the GPU need at a rate is at least the lower convex hull of
    its pieces' points (a piece's own hull is above it)."""
    j = sim.jobs[i]
    scale = j.iterations * float(sim.factors[i])
    if j.adaptive is not None:
        tab = sim._pieces(j)
        t = np.minimum(tab.one, tab.multi)  # [piece, count]
    else:
        row = sim._template(j)
        t = np.minimum(row.run_one_node, row.run_multi_node)[None, :]
    tau = t.min(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(np.isfinite(t), tau[:, None] / t, 0.0)
    best = t.argmin(axis=1)
    out = []
    for g0 in sorted(set(best.tolist())):
        ks = np.flatnonzero(best == g0)
        pts = [(0.0, 0.0)] + [(float(rate[k, g]), float(g + 1)) for k in ks for g in range(t.shape[1]) if rate[k, g] > 0]
        out.append((float(tau[ks].sum()) * scale, pts))
    return out


def _hull_lines(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lines (slope, intercept) of the lower convex hull of ``pts`` (rate, GPUs) from (0, 0)."""
    best: dict[float, float] = {}
    for x, y in pts:
        best[x] = min(y, best.get(x, math.inf))
    hull: list[tuple[float, float]] = []
    for x, y in sorted(best.items()):
        while len(hull) >= 2 and (hull[-1][0] - hull[-2][0]) * (y - hull[-2][1]) <= (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0]):
            hull.pop()
        hull.append((x, y))
    return [((y2 - y1) / (x2 - x1), y1 - (y2 - y1) / (x2 - x1) * x1) for (x1, y1), (x2, y2) in zip(hull, hull[1:])
            if x2 > x1]


def capacity_bound(sim: Simulation, dt: float = 300.0) -> float:
    """A bound on every policy's average JCT that also counts the cluster's GPUs (a fluid
    relaxation, solved as a linear program). Job j's isolated best run T_j (`job_bounds`) is split
    into groups of pieces (`_groups`); in each ``dt`` interval from its submission it does work w
    of each group (seconds of T_j, at most the interval's length in all: no faster than alone),
    holding at least the group's lower convex hull of GPUs at that rate (no placement rule, no
    restart, pieces in any order), and the jobs together hold at most the cluster's GPUs in every
    interval but the last, which is open-ended and uncapped. With M_j the mean time of its work
    (each interval's work counted at the interval's start or the submission, whichever is later:
    no later than it is done), C_j >= M_j + T_j / 2 (at rate at most 1 the work ends no earlier)
    and C_j >= r_j + T_j; the LP minimises the sum of the C_j."""
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix

    T = job_bounds(sim)
    n = len(sim.jobs)
    sub = np.array([j.submit_time for j in sim.jobs])
    t0 = math.floor(sub.min() / dt) * dt
    horizon = float((sub + T).max()) + 3600.0
    n_t = int(math.ceil((horizon - t0) / dt)) + 1  # the last one open-ended
    groups = [_groups(sim, i) for i in range(n)]
    # columns: (job, group, interval); per column a work variable w and a GPU variable G (x dt)
    cols_meta: list[tuple[int, int, int]] = []
    for i in range(n):
        k0 = int((sub[i] - t0) // dt)
        for gi in range(len(groups[i])):
            for k in range(k0, n_t):
                cols_meta.append((i, gi, k))
    nc = len(cols_meta)
    nv = 2 * nc + n
    c_obj = np.zeros(nv)
    c_obj[2 * nc:] = 1.0
    bounds: list[tuple[float, float | None]] = [(0.0, None)] * (2 * nc) + [(float(sub[i] + T[i]), None) for i in range(n)]
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    rhs: list[float] = []
    r = 0
    eq_r: list[int] = []
    eq_c: list[int] = []
    eq_b: list[float] = []
    eq_index: dict[tuple[int, int], int] = {}
    rate_rows: dict[tuple[int, int], int] = {}
    cap_rows: dict[int, int] = {}
    lines = [[_hull_lines(p) for _, p in gs] for gs in groups]
    m_terms: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for c, (i, gi, k) in enumerate(cols_meta):
        lo = t0 + k * dt
        room = (lo + dt - max(lo, float(sub[i]))) if k < n_t - 1 else float(T[i])
        key = (i, gi)
        if key not in eq_index:
            eq_index[key] = len(eq_b)
            eq_b.append(groups[i][gi][0])
        eq_r.append(eq_index[key])
        eq_c.append(c)
        m_terms[i].append((c, max(lo, float(sub[i])) / T[i]))
        rk = (i, k)
        if rk not in rate_rows:
            rate_rows[rk] = r
            rhs.append(room)
            r += 1
        rows.append(rate_rows[rk])
        cols.append(c)
        vals.append(1.0)
        if k < n_t - 1:
            for a, b in lines[i][gi]:  # G dt >= a w + b dt
                rows += [r, r]
                cols += [c, nc + c]
                vals += [a, -1.0]
                rhs.append(-b * dt)
                r += 1
            if k not in cap_rows:
                cap_rows[k] = r
                rhs.append(float(sim.cluster.total_gpus) * dt)
                r += 1
            rows.append(cap_rows[k])
            cols.append(nc + c)
            vals.append(1.0)
    for i in range(n):  # M_j - C_j <= -T_j / 2
        for c, coef in m_terms[i]:
            rows.append(r)
            cols.append(c)
            vals.append(coef)
        rows.append(r)
        cols.append(2 * nc + i)
        vals.append(-1.0)
        rhs.append(-float(T[i]) / 2)
        r += 1
    A_ub = coo_matrix((vals, (rows, cols)), shape=(r, nv)).tocsr()
    A_eq = coo_matrix(([1.0] * len(eq_c), (eq_r, eq_c)), shape=(len(eq_b), nv)).tocsr()
    res = linprog(c_obj, A_ub=A_ub, b_ub=np.array(rhs), A_eq=A_eq, b_eq=np.array(eq_b), bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"capacity_bound: the LP did not solve: {res.message}")
    return float((res.fun - sub.sum()) / n)


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


def pollux_one(args: tuple[str, str, int, tuple[str, ...], float]) -> tuple[str, int, dict[str, Any], float]:
    """(load, workload, figures in seconds, CPU s): the bounds and each policy's average JCT, with
    per-job JCTs and bounds (for the gap analysis); ``capacity`` > 0: also `capacity_bound` at
    that interval."""
    from lyasched.policy import make_policy

    data, load, k, policies, capacity = args
    c = time.process_time()
    sim = pollux_sim(data, load, k)
    out: dict[str, Any] = figures(sim)
    if capacity > 0:
        out["capacity_s"] = capacity_bound(sim, capacity)
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


def goodput_one(args: tuple[dict, tuple[str, ...], float]) -> tuple[dict, float]:
    """One goodput.py row: the bounds and each policy's average JCT, replayed as goodput.py does."""
    from lyasched.policy import make_policy

    w, policies, capacity = args
    c = time.process_time()
    sim = Simulation(tuple(w["jobs"]), w["cluster"], seed=w["seed"], end_fraction=w["end_fraction"])
    out: dict[str, Any] = {"name": w["name"], "wide": w["wide"], "load": w["load"], **figures(sim)}
    if capacity > 0:
        out["capacity_s"] = capacity_bound(sim, capacity)
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
    ap.add_argument("--capacity", type=float, default=0.0,
                    help="also the LP bound that counts the cluster's GPUs, at this interval (s)")
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
    if not a.capacity >= 0:
        print("pollux_bound.py: --capacity is an interval in seconds (0: off)", file=sys.stderr)
        return 2
    if not a.no_pollux and missing:
        print(f"pollux_bound.py: no workload {missing[0]}", file=sys.stderr)
        return 2
    ref = pols[0]
    t0, cpu = time.perf_counter(), 0.0
    report: dict[str, Any] = {"policies": list(pols)}
    with ProcessPoolExecutor(max_workers=max(1, a.jobs)) as ex:
        if not a.no_pollux:
            res: dict[str, dict[int, dict]] = {ld: {} for ld in loads}
            for ld, k, out, c in ex.map(pollux_one, [(a.data, ld, k, pols, a.capacity) for ld in loads for k in ks]):
                res[ld][k] = out
                cpu += c
                print(f"{ld}x workload-{k}: bound {out['bound_s'] / 3600:.3f} h, "
                      + (f"capacity {out['capacity_s'] / 3600:.3f} h, " if "capacity_s" in out else "")
                      + ", ".join(f"{p} {out[f'{p}_s'] / 3600:.3f} h" for p in pols) + f" ({c:.1f} s CPU)",
                      file=sys.stderr, flush=True)
            report["pollux"] = {}
            for ld in loads:
                names = [*KEYS, *(["capacity"] if a.capacity > 0 else []), *pols]
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
            for out, c in ex.map(goodput_one, [(w, pols, a.capacity) for w in goodput_rows(gloads)]):
                cpu += c
                for n in (*KEYS, *(["capacity"] if a.capacity > 0 else []), *pols):
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
