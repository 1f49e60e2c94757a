"""Least-squares fits used by profiling and calibration (pure functions, no torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from lyasched.costmodel.cost import Link


@dataclass(frozen=True)
class LinearFit:
    intercept: float
    slope: float
    r2: float
    n: int


def fit_linear(xs: Sequence[float], ys: Sequence[float], nonneg: bool = True) -> LinearFit:
    """Ordinary least squares y = intercept + slope*x; with ``nonneg`` both are clamped at 0
    (a negative fixed cost or per-sample cost is noise, and would predict negative times)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("fit_linear needs equally long, non-empty inputs")
    if x.size == 1 or np.ptp(x) == 0:
        intercept, slope = float(y.mean()), 0.0
    else:
        slope, intercept = (float(v) for v in np.polyfit(x, y, 1))
    if nonneg:
        if slope < 0:
            slope, intercept = 0.0, float(y.mean())
        if intercept < 0:
            intercept = 0.0
            slope = float((x @ y) / (x @ x)) if (x @ x) > 0 else 0.0
    pred = intercept + slope * x
    ss_res = float(((y - pred) ** 2).sum())
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else (1.0 if ss_res == 0 else 0.0)
    return LinearFit(intercept, slope, r2, int(x.size))


def fit_link(message_bytes: Sequence[float], seconds: Sequence[float], ranks: int) -> tuple[Link, float]:
    """Fit a Link (bandwidth, latency) from ring all-reduce timings on ``ranks`` ranks.

    The ring model is t = 2(g-1)/g * bytes / bw + 2(g-1) * lat, linear in bytes.
    Returns the link and the fit's R^2.
    """
    if ranks < 2:
        raise ValueError("a link can only be fitted from all-reduces over 2 or more ranks")
    g = ranks
    f = fit_linear(message_bytes, seconds)
    bw = (2.0 * (g - 1) / g) / f.slope if f.slope > 0 else float("inf")
    lat = f.intercept / (2.0 * (g - 1))
    return Link(bandwidth=bw, latency=lat), f.r2
