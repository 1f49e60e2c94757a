"""What the Lyapunov core (and so `elastic`) does for adaptive jobs alone (issue 35; docs/elastic.md,
"Adaptive jobs").

An adaptive job (`WaitingJob.adaptive`) chooses its batch with its GPUs, so its rows are at its
best batch per count, and a count above its request spread over several nodes often looks fast:
the larger batch amortises the all-reduce. While other jobs wait, the GPUs it spreads over are GPUs
they do not get, which its own rows do not show. The rule (one node while others wait): when two
or more jobs wait, an adaptive job's configurations across nodes above its request are out (and
out of its best run, as the no-sliver rule's are); on one node, and across nodes up to its request,
it is scored as any job. Once nothing waits the grow step may still spread it (priced by its rows
and the arrivals' expected wait), and swaps shrink it when jobs come. Pure: a function of the
slot's rows. A job that does not opt in is never touched.
"""

from __future__ import annotations

import numpy as np


def one_node_while_waiting(n_waiting: int, adaptive: np.ndarray, multi: np.ndarray, req: np.ndarray) -> np.ndarray | None:
    """The waiting jobs' multi-node rows (``multi``; ``adaptive`` their mask, ``req`` their requested
    counts) with the adaptive jobs' counts above their request out when two or more jobs wait; None
    when that changes nothing. A new array: the caller's is left as it is."""
    if n_waiting < 2 or not adaptive.any():
        return None
    g = np.arange(1, multi.shape[1] + 1)
    out = adaptive[:, None] & (g[None, :] > req[:, None])
    if not out.any():
        return None
    return np.where(out, np.inf, multi)
