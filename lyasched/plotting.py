"""What the replay's PNG plots and the what-if report's SVG plots share: a headless pyplot,
curves thinned to a few thousand points (82k-job traces stay small), empirical CDF points and
the common finish of an axis."""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_POINTS = 4000  # per curve


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display); SVG text kept as text."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"
    import matplotlib.pyplot as plt

    return plt


def thin(x: np.ndarray, *ys: np.ndarray) -> tuple[np.ndarray, ...]:
    """At most MAX_POINTS evenly spaced points of each curve (the same indices for all)."""
    if len(x) <= MAX_POINTS:
        return (x, *ys)
    idx = np.linspace(0, len(x) - 1, MAX_POINTS).astype(int)
    return (x[idx], *(y[idx] for y in ys))


def cdf(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values and their empirical CDF, thinned."""
    x = np.sort(np.asarray(values, dtype=float))
    y = np.arange(1, len(x) + 1) / max(len(x), 1)
    x, y = thin(x, y)
    return x, y


def finish(ax: Any, title: str, xlabel: str | None = None, ylabel: str | None = None,
           legend: bool = True) -> None:
    """Labels, title, a light grid and a small legend: the look every plot here shares."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=8)
