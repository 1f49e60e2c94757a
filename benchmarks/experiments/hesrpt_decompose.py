"""Experiment: where a policy's average JCT on Pollux's benchmark goes, against the per-job bound
(`pollux_bound.job_bounds`: each job alone, every piece on its fastest configuration, no wait, no
restart). Each job's JCT is split exactly into

* ``align``: submission to the next slot boundary (the simulator starts jobs only there);
* ``wait``: the rest of the time holding no GPUs (first start after the boundary, suspensions);
* ``restart``: relaunch time inside its segments (the move cost, no progress);
* ``count_full`` / ``count_idle``: computing on a count slower than the job's fastest for the work
  done, measured at the count's best placement; split by whether the cluster was full or had idle
  GPUs while it ran (idle: the re-plan cadence, the whole-node rule or the restart charge kept
  GPUs off it);
* ``placement``: the same count on a slower placement (several nodes where one would do);
* ``batch``: the residual (the simulator runs a job whose decision names no batch at its best
  batch per piece, so for hesrpt and pollux this is only the float residual);
* ``bound``: the work's time on its fastest configurations, which sums to the job's bound.

Figures are in units of pollux's average JCT on the same workload (so hesrpt's terms add up to
its ratio to pollux), summed over jobs, meaned over workloads, per application and in all.

    python benchmarks/experiments/hesrpt_decompose.py [--loads 0.5] [--workloads 1-8]
        [--policies hesrpt] [--json] [--slot 60] [--restart 30]

``--slot`` / ``--restart`` replay every policy but pollux (the unit, on the benchmark's 60 s and
30 s) at another slot length or restart overhead: probes of how much those levers could be worth,
not the benchmark. ``--policies`` also takes designs of hesrpt_place.py as ``place.NAME``.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import math
import sys
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from pollux_benchmark import parse_range, workload_path  # noqa: E402

TERMS = ("bound", "align", "wait", "restart", "count_full", "count_idle", "placement", "batch")
DATA = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "pollux")


def _tables(sim: Any, i: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Job i's seconds per piece per count, one node and several, and its scale (iterations x factor)."""
    j = sim.jobs[i]
    scale = j.iterations * float(sim.factors[i])
    if j.adaptive is not None:
        tab = sim._pieces(j)
        return tab.one, tab.multi, scale
    row = sim._template(j)
    return np.asarray(row.run_one_node)[None, :], np.asarray(row.run_multi_node)[None, :], scale


def _span(t: np.ndarray, a: float, b: float) -> float:
    """Seconds (table units) of progress [a, b] on per-piece times t (pieces of equal width)."""
    n = len(t)
    out = 0.0
    for k in range(max(0, int(a * n)), min(n, int(math.ceil(b * n - 1e-12)) or 1)):
        lo, hi = max(a, k / n), min(b, (k + 1) / n)
        if hi > lo:
            out += (hi - lo) * n * float(t[k])
    return out


def idle_share(util_t: np.ndarray, util_b: np.ndarray, total: int, s: float, e: float) -> float:
    """Share of [s, e] during which some GPU was idle."""
    if e <= s:
        return 0.0
    k = max(0, int(np.searchsorted(util_t, s, side="right")) - 1)
    idle = 0.0
    t = s
    while t < e and k < len(util_t):
        nxt = float(util_t[k + 1]) if k + 1 < len(util_t) else math.inf
        hi = min(e, nxt)
        if util_b[k] < total and hi > t:
            idle += hi - t
        t = hi
        k += 1
    return idle / (e - s)


def decompose(sim: Any, res: Any) -> list[dict[str, Any]]:
    """Per job, its JCT split into TERMS (seconds) plus its application and jct."""
    slot = sim.slot_len
    total = sim.cluster.total_gpus
    out = []
    for i, rec in enumerate(res.records):
        one, multi, scale = _tables(sim, i)
        best_at = np.minimum(one, multi)  # [piece, count]
        best = best_at.min(axis=1)
        sub = rec.job.submit_time
        aligned = math.ceil(sub / slot - 1e-12) * slot
        d: dict[str, Any] = dict.fromkeys(TERMS, 0.0)
        d["align"] = aligned - sub
        held = 0.0
        p = 0.0
        for s in rec.segments:
            el = s.end - s.start
            held += el
            oh = min(s.overhead, el)
            d["restart"] += oh
            comp = el - oh
            a, b = p, min(1.0, p + s.done)
            p = b
            g = s.gpus
            t_act = _span((multi if s.spans_nodes else one)[:, g - 1], a, b) * scale
            t_cnt = _span(best_at[:, g - 1], a, b) * scale
            t_best = _span(best, a, b) * scale
            d["bound"] += t_best
            lost = t_cnt - t_best
            f = idle_share(res.util_t, res.util_busy, total, s.start + oh, s.end)
            d["count_idle"] += f * lost
            d["count_full"] += (1 - f) * lost
            d["placement"] += t_act - t_cnt
            d["batch"] += comp - t_act
        d["wait"] = rec.jct - held - d["align"]
        d["jct"] = rec.jct
        d["app"] = app_of(rec.job)
        d["moves"] = float(rec.preemptions)
        d["gpu_h"] = rec.gpu_s / 3600.0
        out.append(d)
    return out


def run_one(args: tuple[str, str, int, str, float, float]) -> tuple[str, int, str, list[dict[str, Any]], float]:
    data, load, k, name, slot, restart = args
    from lyasched.sim import Simulation
    from lyasched.sim.pollux_trace import pollux_workload

    w = pollux_workload(workload_path(data, load, k), os.path.join(data, "traces"), adaptive=True)
    # pollux, the unit, always on the benchmark's settings; the others on --slot / --restart (probes)
    slot, restart = (60.0, 30.0) if name == "pollux" else (slot, restart)
    sim = Simulation(w.jobs, w.cluster, slot_len=slot, estimate_error=0.0, restart_overhead=restart)
    pol = _build(name)
    r = sim.run(pol, name=name)
    rows = decompose(sim, r)
    for row, j in zip(rows, sim.jobs):
        row["app"] = app_of(j)
    busy = float(r.busy_gpu_s)
    return load, k, name, rows, busy


def _build(name: str) -> Any:
    """A registered policy (``hesrpt:move_charge=4``) or a design of another experiment
    (``place.equal``: hesrpt_place.py's ``equal``)."""
    from lyasched.policy import make_policy

    mod, dot, design = name.partition(".")
    if dot and mod in ("place", "restart"):
        return __import__(f"hesrpt_{mod}").build(design)
    return make_policy(name.partition(":")[0], **_params(name))


def _params(name: str) -> dict[str, Any]:
    """``hesrpt:move_charge=4,horizon_s=0`` -> {"move_charge": 4.0, ...}."""
    _, _, rest = name.partition(":")
    out: dict[str, Any] = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        out[k] = float(v)
    return out


def app_of(job: Any) -> str:
    """The application a Pollux job runs (its profile's name)."""
    prof = getattr(job, "profile", None)
    for attr in ("name", "model", "app"):
        v = getattr(prof, attr, None)
        if isinstance(v, str) and v:
            return v
    return str(getattr(job, "job_id", "?"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--loads", default="0.5")
    ap.add_argument("--workloads", default="1-8")
    ap.add_argument("--policies", default="pollux,hesrpt")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--slot", type=float, default=60.0, help="slot length of the non-pollux replays (probe)")
    ap.add_argument("--restart", type=float, default=30.0, help="restart overhead of the non-pollux replays (probe)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    loads = [f"{float(x):.1f}" for x in a.loads.split(",")]
    ks = parse_range(a.workloads)
    names = [n for n in a.policies.split(";" if ";" in a.policies else ",") if n]
    if "pollux" not in names:
        names = ["pollux", *names]
    tasks = [(a.data, ld, k, n, a.slot, a.restart) for ld in loads for k in ks for n in names]
    got: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    with ProcessPoolExecutor(max_workers=a.jobs) as ex:
        for ld, k, n, rows, _ in ex.map(run_one, tasks):
            got[(ld, k, n)] = rows
            print(f"{ld}x w{k} {n}: {np.mean([r['jct'] for r in rows]) / 3600:.3f} h", file=sys.stderr)
    out: dict[str, Any] = {}
    for ld in loads:
        out[ld] = {}
        for n in names:
            per_app: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for k in ks:
                ref = sum(r["jct"] for r in got[(ld, k, "pollux")])
                for r in got[(ld, k, n)]:
                    for t in (*TERMS, "jct"):
                        per_app[r["app"]][t] += r[t] / ref / len(ks)
                        per_app["all"][t] += r[t] / ref / len(ks)
                    for app in (r["app"], "all"):
                        per_app[app]["moves"] += r["moves"]
                        per_app[app]["jobs"] += 1
                        per_app[app]["gpu_h"] += r["gpu_h"]
            out[ld][n] = {app: dict(v) for app, v in per_app.items()}
    if a.json:
        print(json.dumps(out))
        return 0
    for ld in loads:
        for n in names:
            print(f"\n{ld}x {n}: terms in units of pollux's total JCT (mean over workloads {a.workloads})")
            heads = ["app", "jct", *TERMS, "moves/job", "gpu_h/job"]
            print("  ".join(f"{h:>10}" for h in heads))
            for app, v in sorted(out[ld][n].items(), key=lambda kv: -kv[1]["jct"]):
                jobs = max(1.0, v.get("jobs", 0.0))
                print("  ".join([f"{app:>10}", *(f"{v[t]:10.4f}" for t in ("jct", *TERMS)),
                                 f"{v.get('moves', 0) / jobs:10.1f}", f"{v.get('gpu_h', 0) / jobs:10.2f}"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
