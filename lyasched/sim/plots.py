"""PNG plots of a replay (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from lyasched.sim.simulator import SimResult

_MAX_POINTS = 4000  # per curve: keeps 82k-job plots small and fast


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _thin(x: np.ndarray, *ys: np.ndarray) -> tuple[np.ndarray, ...]:
    if len(x) <= _MAX_POINTS:
        return (x, *ys)
    idx = np.linspace(0, len(x) - 1, _MAX_POINTS).astype(int)
    return (x[idx], *(y[idx] for y in ys))


def jct_cdf(results: Sequence[SimResult], path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        jct = np.sort([rec.jct for rec in r.records]) / 3600.0
        y = np.arange(1, len(jct) + 1) / len(jct)
        x, y = _thin(jct, y)
        ax.step(x, y, where="post", label=r.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def queues(results: Sequence[SimResult], path: str) -> None:
    plt = _pyplot()
    fig, (aq, az) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for r in results:
        if len(r.slot_t) == 0:
            continue
        t, q, z = _thin((r.slot_t - r.first_submit) / 3600.0, r.slot_q / 3600.0, r.slot_z / 3600.0)
        aq.step(t, q, where="post", label=r.policy)
        az.step(t, z, where="post", label=r.policy)
    aq.set_ylabel("Q: waiting work (GPU-h)")
    az.set_ylabel("Z: waiting time (h)")
    az.set_xlabel("time (h)")
    aq.set_title("actual queue Q and virtual queue Z at each decision")
    for a in (aq, az):
        a.grid(alpha=0.3)
    aq.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def utilization(results: Sequence[SimResult], path: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        if len(r.util_t) == 0:
            continue
        t, b = _thin((r.util_t - r.first_submit) / 3600.0, r.util_busy / r.cluster.total_gpus)
        ax.step(t, b, where="post", label=r.policy, alpha=0.8)
    ax.set_xlabel("time (h)")
    ax.set_ylabel("busy GPUs / all GPUs")
    ax.set_ylim(0, 1.05)
    ax.set_title("GPU utilisation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(results: Sequence[SimResult], out_dir: str) -> list[str]:
    """Write jct_cdf.png, queues.png and utilization.png; return their paths."""
    paths = [os.path.join(out_dir, f) for f in ("jct_cdf.png", "queues.png", "utilization.png")]
    jct_cdf(results, paths[0])
    queues(results, paths[1])
    utilization(results, paths[2])
    return paths
