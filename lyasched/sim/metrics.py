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
    makespan = res.makespan
    cap = res.cluster.total_gpus * makespan
    return {
        "avg_jct_s": float(jct.mean()),
        "p50_jct_s": float(np.percentile(jct, 50)),
        "p99_jct_s": float(np.percentile(jct, 99)),
        "avg_wait_s": float(wait.mean()),
        "max_wait_s": float(wait.max()),
        "makespan_s": float(makespan),
        "avg_slowdown": float(np.mean(jct / np.maximum(run, 1e-9))),
        "gpu_util": float(res.busy_gpu_s / cap) if cap > 0 else 0.0,
        "jobs": len(recs),
        "preemptions": int(sum(r.preemptions for r in recs)),
        "decide_calls": res.decide_calls,
        "wall_s": round(res.wall_s, 3),
        "decide_s": round(res.decide_s, 3),
    }


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
