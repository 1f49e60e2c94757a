"""PNG plots of a replay (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import os
from typing import Sequence


from lyasched.plotting import cdf, finish, pyplot, thin
from lyasched.sim.simulator import SimResult


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def jct_cdf(results: Sequence[SimResult], path: str) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4.5))
    for r in results:
        x, y = cdf([rec.jct / 3600.0 for rec in r.records])
        ax.step(x, y, where="post", label=r.policy)
    ax.set_xscale("log")
    finish(ax, "JCT CDF", "job completion time (h)", "fraction of jobs")
    _save(fig, path)


def queues(results: Sequence[SimResult], path: str) -> None:
    fig, (aq, az) = pyplot().subplots(2, 1, figsize=(7, 6), sharex=True)
    for r in results:
        if len(r.slot_t) == 0:
            continue
        t, q, z = thin((r.slot_t - r.first_submit) / 3600.0, r.slot_q / 3600.0, r.slot_z / 3600.0)
        aq.step(t, q, where="post", label=r.policy)
        az.step(t, z, where="post", label=r.policy)
    aq.set_ylabel("Q: waiting work (GPU-h)")
    finish(aq, "waiting work Q and summed waits Z at each decision")
    finish(az, "", "time (h)", "Z: waits of the waiting jobs, summed (h)", legend=False)
    _save(fig, path)


def utilization(results: Sequence[SimResult], path: str) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for r in results:
        if len(r.util_t) == 0:
            continue
        t, b = thin((r.util_t - r.first_submit) / 3600.0, r.util_busy / r.cluster.total_gpus)
        ax.step(t, b, where="post", label=r.policy, alpha=0.8)
    ax.set_ylim(0, 1.05)
    finish(ax, "GPU utilisation", "time (h)", "busy GPUs / all GPUs")
    _save(fig, path)


def write_all(results: Sequence[SimResult], out_dir: str) -> list[str]:
    """Write jct_cdf.png, queues.png and utilization.png; return their paths."""
    paths = [os.path.join(out_dir, f) for f in ("jct_cdf.png", "queues.png", "utilization.png")]
    jct_cdf(results, paths[0])
    queues(results, paths[1])
    utilization(results, paths[2])
    return paths
