"""The shape of one GPU's step time in the per-GPU batch: flat, then linear (pure, no torch).

A GPU under-used by a small batch takes about the same time per step whatever the batch (kernel
launches, the optimizer step, host work), and grows linearly once the device is busy. The
profiler's sweep (1, 2, 4, ... 1024 on a GPU) shows exactly that (benchmarks/gpu_profiles.py on
benchmarks/data/gpu/h200.json): a straight line through all of it follows the large batches and
misses the flat part by up to a third. So

    t(b) = alpha + beta * max(0, b - knee)

alpha is the flat step time, beta the time per sample once the device is busy, knee the batch
where it becomes busy; knee = 0 is the old straight line t(b) = alpha + beta*b. The fit minimises
relative errors (every batch counts alike, not only the slow large ones) and takes a knee only
where the sweep supports it: six batch sizes or more, two at or below the knee and two above;
else the least-squares line the profiler always fitted. A CPU runs busy from batch 1: its short
sweeps (four to six batches) get the line unless a knee really fits better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lyasched.costmodel.fit import fit_linear

MIN_SIDE = 2  # batches needed on each side of a knee for it to be believed
MIN_LEVELS = 6  # batch sizes a sweep needs before a knee is tried (3 parameters, 3 left over)


@dataclass(frozen=True)
class BatchFit:
    """A fitted t(b) = alpha + beta*max(0, b - knee) and its relative residuals."""

    alpha: float
    beta: float
    knee: float
    median_abs_rel_err: float
    n: int

    def step_time(self, b: float) -> float:
        return self.alpha + self.beta * max(0.0, b - self.knee)


def _wls(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """t = a + s*x minimising relative errors (weights 1/t), with a >= 0 and s >= 0: a negative
    fixed time or per-sample time is noise and would predict negative times."""
    w = 1.0 / t
    flat = float(np.sum(w) / np.sum(w * w))  # the best constant in relative error
    if np.ptp(x) == 0:
        return flat, 0.0
    a, s = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T * w[:, None], t * w, rcond=None)[0]
    if s < 0:
        return flat, 0.0
    if a < 0:
        xw = x * w
        return 0.0, float(xw @ (t * w) / (xw @ xw))
    return float(a), float(s)


def fit_batch_shape(batches: Sequence[float], seconds: Sequence[float]) -> BatchFit:
    """Flat-then-linear t(b) from a sweep of (batch, step time); see the module doc."""
    b = np.asarray(batches, dtype=float)
    t = np.asarray(seconds, dtype=float)
    keep = np.isfinite(b) & np.isfinite(t) & (t > 0) & (b > 0)
    b, t = b[keep], t[keep]
    if b.size == 0:
        raise ValueError("fit_batch_shape needs at least one positive (batch, time) point")
    levels = sorted(set(b.tolist()))
    knees = [0.0] + [k for i, k in enumerate(levels)
                     if len(levels) >= MIN_LEVELS and i + 1 >= MIN_SIDE and len(levels) - 1 - i >= MIN_SIDE]
    best = (np.inf, 0.0, 0.0, 0.0)
    for knee in knees:
        if knee == 0.0:  # no knee: the least-squares line the profiler always fitted
            line = fit_linear(b, t)
            a, s = line.intercept, line.slope
        else:
            a, s = _wls(np.maximum(0.0, b - knee), t)
        sse = float((((a + s * np.maximum(0.0, b - knee)) / t - 1.0) ** 2).sum())
        if sse < best[0] - 1e-12:
            best = (sse, a, s, knee)
    _, a, s, knee = best
    err = np.abs((a + s * np.maximum(0.0, b - knee)) / t - 1.0)
    return BatchFit(a, s, knee, float(np.median(err)), int(b.size))


def leave_one_batch_out(batches: Sequence[float], seconds: Sequence[float]) -> list[float]:
    """Relative error at every batch of the fit to the other batches (pred/measured - 1)."""
    out = []
    for i in range(len(batches)):
        f = fit_batch_shape(list(batches[:i]) + list(batches[i + 1:]), list(seconds[:i]) + list(seconds[i + 1:]))
        out.append(f.step_time(batches[i]) / seconds[i] - 1.0)
    return out
