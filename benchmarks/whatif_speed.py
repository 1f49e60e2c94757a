"""Speed of `lyasched whatif` on a synthetic 100,000-job accounting history. Target: parse +
replay under lyapunov <= 60 s.

    python benchmarks/whatif_speed.py [--jobs 100000] [--policies lyapunov] [--keep FILE] [--json]

The history is made up but shaped like a real one: a 64 x 8-GPU site, Poisson arrivals at
an offered load of 1.0 (requested GPU-seconds / capacity over the arrival span; with the
heavy tail the recorded utilisation is about 0.65 and the average wait about 25 min),
lognormal run times (median 20 min, capped at 3 days), GPU counts 1/2/4/8/16/32 (a
Philly-like mix), ~8% CPU-only jobs, ~3% cancelled before start, ~1% requeued
once, a few still running at the end, typed gres on half the GPU jobs, 200 users in 20
accounts. What actually happened is decided by a greedy first-fit scheduler (whole nodes for
jobs over 8 GPUs, roughly what Slurm's backfill does); the result is written as `sacct
--parsable2 --allocations --duplicates --format=<lyasched.slurm.sacct.FIELDS>` text.
Generating it is not timed. Timed, in-process, exactly the `lyasched whatif --sacct FILE`
path: parse, build the history, infer the cluster, replay under each policy, summarise.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime

import numpy as np

from lyasched.whatif.cluster import infer_cluster
from lyasched.whatif.history import build_history
from lyasched.whatif.metrics import actual_outcome, policy_outcome
from lyasched.whatif.replay import replay_history
from lyasched.whatif.report import build_summary
from lyasched.slurm.sacct import FIELDS, parse_sacct

NODES, GPN = 64, 8
T0 = datetime(2026, 9, 1).timestamp()
SIZES = (1, 2, 4, 8, 16, 32)
SIZE_P = (0.62, 0.14, 0.11, 0.09, 0.03, 0.01)


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t).isoformat(timespec="seconds")


def synthetic_history(n: int, seed: int = 0, load: float = 1.0) -> str:
    """sacct --parsable2 text of n jobs on a 64 x 8 GPU site (see the module docstring)."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice(SIZES, size=n, p=SIZE_P)
    cpu_only = rng.random(n) < 0.08
    gpus[cpu_only] = 0
    run = np.minimum(np.exp(rng.normal(np.log(1200), 1.6, n)), 3 * 86400).round()
    cancel = rng.random(n) < 0.03
    requeue = (rng.random(n) < 0.01) & ~cancel & ~cpu_only
    demand = float(np.sum(run[~cancel] * np.maximum(gpus[~cancel], 0)))
    span = demand / (load * NODES * GPN)
    arrivals = T0 + np.sort(rng.uniform(0, span, n)).round()
    users = rng.integers(0, 200, n)
    typed = rng.random(n) < 0.5
    limits = np.ceil(run * rng.uniform(1.5, 4, n) / 60) * 60

    free = [GPN] * NODES
    ends: list[tuple[float, int, tuple[int, ...], int]] = []  # (end, job, nodes, gpus per node)
    waiting: list[int] = []
    start = np.full(n, np.nan)
    placed: dict[int, tuple[int, ...]] = {}
    first_run: dict[int, tuple[float, float, tuple[int, ...]]] = {}

    def place(g: int) -> tuple[tuple[int, ...], int] | None:
        if g <= GPN:
            best = min((f, k) for k, f in enumerate(free) if f >= g) if max(free) >= g else None
            return ((best[1],), g) if best else None
        need = -(-g // GPN)
        whole = [k for k, f in enumerate(free) if f == GPN]
        return (tuple(whole[:need]), GPN) if len(whole) >= need else None

    def try_start(now: float) -> None:
        keep = []
        total = sum(free)
        for j in waiting:
            g = max(int(gpus[j]), 0)
            p = place(g) if g and g <= total else (((), 0) if g == 0 else None)
            if p is None:
                keep.append(j)
                continue
            nodes, per = p
            for k in nodes:
                free[k] -= per
            total -= per * len(nodes)
            start[j] = now
            placed[j] = nodes
            heapq.heappush(ends, (now + run[j], j, nodes, per))
        waiting[:] = keep

    i = 0
    while i < n or ends:
        t_arr = arrivals[i] if i < n else np.inf
        t_end = ends[0][0] if ends else np.inf
        now = min(t_arr, t_end)
        while ends and ends[0][0] <= now:
            e, j, nodes, per = heapq.heappop(ends)
            for k in nodes:
                free[k] += per
            if requeue[j] and j not in first_run:  # requeued once after its first run: queues again
                first_run[j] = (start[j], e, nodes)
                waiting.insert(0, j)
        while i < n and arrivals[i] <= now:
            if not cancel[i]:
                waiting.append(i)
            i += 1
        if waiting:
            try_start(now)
        if i >= n and not ends and waiting:
            break

    head = "|".join(FIELDS)
    lines = [head]
    cutoff = np.nanmax(start + run) - 3600
    for j in range(n):
        uid = f"user{users[j]:03d}"
        acct = f"acct{users[j] % 20:02d}"
        part = "gpu" if gpus[j] else "cpu"
        sub = _ts(arrivals[j])
        limit = f"{int(limits[j] // 3600):02d}:{int(limits[j] % 3600 // 60):02d}:00"
        g = int(gpus[j])
        nn = max(1, -(-g // GPN))
        tres_req = f"billing={max(g, 1) * 4},cpu={max(g, 1) * 4}" + (f",gres/gpu={g}" if g else "") + f",mem=16G,node={nn}"
        if cancel[j]:
            lines.append(f"{j + 1}|{uid}|{acct}|{part}|{sub}|{sub}|None|{_ts(arrivals[j] + 600)}|0|CANCELLED by {users[j]}|"
                         f"{nn}|None assigned||{tres_req}|{limit}")
            continue
        gres = (f",gres/gpu:a100={g}" if typed[j] else "") + f",gres/gpu={g}" if g else ""
        alloc = f"billing={max(g, 1) * 4},cpu={max(g, 1) * 4}{gres},mem=16G,node={nn}"
        nodes = ",".join(f"gpu{k + 1:03d}" for k in placed[j]) if g else "cpu001"
        if j in first_run:
            s0, e0, n0 = first_run[j]
            nl0 = ",".join(f"gpu{k + 1:03d}" for k in n0)
            lines.append(f"{j + 1}|{uid}|{acct}|{part}|{sub}|{sub}|{_ts(s0)}|{_ts(e0)}|{int(e0 - s0)}|REQUEUED|{nn}|{nl0}|"
                         f"{alloc}|{tres_req}|{limit}")
            sub = _ts(e0 + 1)
        s = start[j]
        end = s + run[j]
        if s >= cutoff:  # accounting was read an hour before the last job ended: not started yet
            lines.append(f"{j + 1}|{uid}|{acct}|{part}|{sub}|{sub}|Unknown|Unknown|0|PENDING|{nn}|None assigned||"
                         f"{tres_req}|{limit}")
            continue
        if end > cutoff:  # ... or still running
            lines.append(f"{j + 1}|{uid}|{acct}|{part}|{sub}|{sub}|{_ts(s)}|Unknown|{int(cutoff - s)}|"
                         f"RUNNING|{nn}|{nodes}|{alloc}|{tres_req}|{limit}")
            continue
        state = "COMPLETED" if run[j] < limits[j] else "TIMEOUT"
        lines.append(f"{j + 1}|{uid}|{acct}|{part}|{sub}|{sub}|{_ts(s)}|{_ts(end)}|{int(run[j])}|{state}|{nn}|{nodes}|"
                     f"{alloc}|{tres_req}|{limit}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--policies", default="lyapunov")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=60.0, help="seconds for parse + replay under the first policy")
    ap.add_argument("--keep", default=None, help="also write the synthetic sacct text here")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    print("command:", " ".join([os.path.basename(sys.executable), *sys.argv]), file=sys.stderr)
    g0 = time.perf_counter()
    text = synthetic_history(a.jobs, a.seed)
    gen = time.perf_counter() - g0
    path = a.keep or os.path.join(tempfile.mkdtemp(prefix="whatif-bench-"), "sacct.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"generated {a.jobs} jobs ({len(text) / 1e6:.1f} MB of sacct text) in {gen:.1f} s (not timed): {path}",
          file=sys.stderr)

    steps: dict[str, float] = {}
    cpu0 = time.process_time()
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    with open(path, encoding="utf-8") as f:
        parsed = parse_sacct(f.read(), path)
    steps["parse_s"] = time.perf_counter() - t
    t = time.perf_counter()
    hist = build_history(parsed.records)
    site = infer_cluster(hist.jobs)
    steps["history_s"] = time.perf_counter() - t
    t = time.perf_counter()
    names = a.policies.split(",")
    rep = replay_history(hist.jobs, site.spec, names, {}, slot=30.0, estimate_error=0.2, seed=a.seed,
                         say=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    steps["replay_s"] = time.perf_counter() - t
    t = time.perf_counter()
    outs = [actual_outcome(hist.jobs, site.spec.total_gpus)]
    outs += [policy_outcome(r, rep.index, len(hist.jobs)) for r in rep.results]
    s = build_summary(path, hist, parsed.steps, site, outs, slot=30.0, estimate_error=0.2, seed=a.seed, params={})
    steps["summary_s"] = time.perf_counter() - t
    cpu = time.process_time() - cpu0  # this process's CPU time: what the work costs without the neighbours
    total = sum(steps.values())
    first = rep.results[0]
    figure = steps["parse_s"] + steps["history_s"] + (steps["replay_s"] - sum(r.wall_s for r in rep.results[1:])) + steps["summary_s"]
    out = {
        "jobs_generated": a.jobs,
        "records": s["jobs"]["records"],
        "gpu_jobs_replayed": s["jobs"]["gpu"],
        "jobs": s["jobs"],
        "cluster": f"{site.spec.nodes}x{site.spec.gpus_per_node}",
        "cluster_how": site.how,
        **{k: round(v, 2) for k, v in steps.items()},
        "policies": {r.policy: {"wall_s": round(r.wall_s, 2), "decide_s": round(r.decide_s, 2),
                                "decide_calls": r.decide_calls,
                                "avg_jct_s": round(s["policies"][r.policy]["avg_jct_s"], 1)} for r in rep.results},
        "actual_avg_jct_s": round(s["actual"]["avg_jct_s"], 1),
        f"parse_and_{first.policy}_s": round(figure, 2),
        "target_s": a.target,
        "met": figure <= a.target,
        "total_s": round(total, 2),
        "cpu_s": round(cpu, 2),
        "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus",
    }
    if a.json:
        print(json.dumps(out))
        return
    print(f"{out['records']} sacct records -> {out['gpu_jobs_replayed']} GPU jobs on {out['cluster']} GPUs ({site.how})")
    print(f"parse {steps['parse_s']:.1f} s, history + cluster {steps['history_s']:.1f} s, "
          f"replay {steps['replay_s']:.1f} s, summary {steps['summary_s']:.1f} s")
    for name, p in out["policies"].items():
        print(f"  {name}: {p['wall_s']:.1f} s (policy.decide {p['decide_s']:.1f} s in {p['decide_calls']} calls), "
              f"avg JCT {p['avg_jct_s']:.0f} s (actual {out['actual_avg_jct_s']:.0f} s)")
    print(f"parse + replay under {first.policy}: {figure:.1f} s (target {a.target:g} s: {'met' if out['met'] else 'MISSED'})")
    print(f"process CPU time {cpu:.1f} s for all of it; 1-min load average {load0:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end ({os.cpu_count()} cpus): wall time above CPU time is waiting for a core")


if __name__ == "__main__":
    main()
