"""Replay figures: per-policy summaries, the no-waiting lower bound, per-job CSV rows."""

from __future__ import annotations

import csv
from typing import IO

import numpy as np

from lyasched.sim.simulator import SimResult


def summarize(res: SimResult) -> dict:
    """The `--json` figures of one policy. slowdown = (wait + run) / run = JCT / run."""
    recs = res.records
    jct = np.array([r.jct for r in recs])
    wait = np.array([r.wait for r in recs])
    run = np.array([r.run_s for r in recs])
    slowdown = jct / np.maximum(run, 1e-9)
    makespan = res.makespan
    cap = res.cluster.total_gpus * makespan
    return {
        "avg_jct_s": float(jct.mean()),
        "p50_jct_s": float(np.percentile(jct, 50)),
        "p99_jct_s": float(np.percentile(jct, 99)),
        "avg_wait_s": float(wait.mean()),
        "max_wait_s": float(wait.max()),
        "makespan_s": float(makespan),
        "avg_slowdown": float(slowdown.mean()),
        "p99_slowdown": float(np.percentile(slowdown, 99)),
        "gpu_util": float(res.busy_gpu_s / cap) if cap > 0 else 0.0,
        "jobs": len(recs),
        "preemptions": int(sum(r.preemptions for r in recs)),  # checkpoints: suspensions and resizes
        "resizes": int(sum(r.resizes for r in recs)),  # relaunched at once on another GPU count (elastic)
        "decide_calls": res.decide_calls,
        "wall_s": round(res.wall_s, 3),
        "decide_s": round(res.decide_s, 3),
        **efficiency(res),
    }


def efficiency(res: SimResult) -> dict:
    """How well a policy spends GPUs (issue 8).

    ``gpu_s_per_job``: mean GPU-seconds a job held; ``gpu_s_vs_best``: total GPU-seconds over the
    total of each job's fewest (its most GPU-efficient configuration, true run times);
    ``idle_fit_frac``: GPU-seconds left idle while a waiting job would have fitted at its
    requested count in the free GPUs (counted over all nodes), over GPUs x makespan;
    ``idle_wait_frac``: GPU-seconds idle while any job waited, same scale; ``fewer_gpus`` /
    ``more_gpus``: share of jobs first started on fewer / more GPUs than they asked for.
    """
    recs = res.records
    gpu_s = np.array([r.gpu_s for r in recs])
    best = np.array([r.best_gpu_s for r in recs])
    req = np.array([r.job.requested_gpus for r in recs])
    first = np.array([r.segments[0].gpus if r.segments else r.gpus for r in recs])
    total = res.cluster.total_gpus
    fit, wait_any = _idle_while_waiting(res)
    cap = total * res.makespan
    return {
        "gpu_s_per_job": float(gpu_s.mean()),
        "gpu_s_vs_best": float(gpu_s.sum() / best.sum()) if best.sum() > 0 else 1.0,
        "idle_fit_frac": float(fit / cap) if cap > 0 else 0.0,
        "idle_wait_frac": float(wait_any / cap) if cap > 0 else 0.0,
        "fewer_gpus": float(np.mean(first < req)),
        "more_gpus": float(np.mean(first > req)),
    }


def _idle_while_waiting(res: SimResult) -> tuple[float, float]:
    """(idle GPU-s while a waiting job fits at its request, idle GPU-s while any job waits)."""
    total = res.cluster.total_gpus
    ev: list[tuple[float, int, int]] = []  # (time, +1 starts waiting / -1 stops, request)
    for r in res.records:
        g = min(r.job.requested_gpus, total)
        t0 = r.job.submit_time
        for seg in r.segments:
            if seg.start > t0:
                ev.append((t0, 1, g))
                ev.append((seg.start, -1, g))
            t0 = seg.end
    busy_t = res.util_t.tolist()
    busy_b = res.util_busy.tolist()
    times = sorted({*(e[0] for e in ev), *busy_t})
    ev.sort()
    counts: dict[int, int] = {}
    fit = wait_any = 0.0
    k = b = 0
    busy = 0
    for a, nxt in zip(times, times[1:]):
        while k < len(ev) and ev[k][0] <= a:
            _, d, g = ev[k]
            counts[g] = counts.get(g, 0) + d
            k += 1
        while b < len(busy_t) and busy_t[b] <= a:
            busy = busy_b[b]
            b += 1
        idle = total - busy
        if idle <= 0:
            continue
        waiting = [g for g, c in counts.items() if c > 0]
        if waiting:
            wait_any += idle * (nxt - a)
            if min(waiting) <= idle:
                fit += idle * (nxt - a)
    return fit, wait_any


def lower_bound(best_true_runs: np.ndarray) -> dict:
    """Mean of each job's best true run time with no waiting: no policy can beat it."""
    return {"avg_jct_s": float(np.mean(best_true_runs))}


CSV_FIELDS = (
    "job_id", "model", "batch", "iterations", "requested_gpus", "submit_s", "start_s", "end_s",
    "jct_s", "wait_s", "run_s", "gpus", "spans_nodes", "preemptions", "best_true_run_s", "true_factor",
)


def write_jobs_csv(res: SimResult, f: IO[str]) -> None:
    w = csv.writer(f)
    w.writerow(CSV_FIELDS)
    for r in res.records:
        j = r.job
        w.writerow([
            j.job_id, j.profile.model, j.global_batch, j.iterations, j.requested_gpus,
            f"{j.submit_time:.3f}", f"{r.first_start:.3f}", f"{r.end:.3f}", f"{r.jct:.3f}",
            f"{r.wait:.3f}", f"{r.run_s:.3f}", r.gpus, int(r.spans_nodes), r.preemptions,
            f"{r.best_true_run:.3f}", f"{r.factor:.5f}",
        ])
