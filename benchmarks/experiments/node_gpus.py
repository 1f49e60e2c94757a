#!/usr/bin/env python3
"""Issue 34, mixed placements: `benchmarks/cost_accuracy.py` under three forms of the per-node term
`CommShape.d_node_gpus` (docs/calibration.md "Mixed placements", docs/experiments.md).

    python benchmarks/experiments/node_gpus.py none|max|mean|hier [cost_accuracy.py arguments ...]

none: the term pinned at 0 (the model before it); max: the inter-node all-reduce times
(1 + d*log2 k), k the fullest node's GPUs (kept); mean: the same with k = g/n, the mean GPUs per
node (measured, not kept); hier: a hierarchical all-reduce, the fullest node's intra-node phase
ADDED to the inter-node one, v*d*log2(k) (measured, not kept). The term is fitted with the rest of
the cluster's shape on the other applications, as cost_accuracy.py always does.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import lyasched.costmodel.commshape as cs  # noqa: E402


def hierarchical() -> None:
    """Replace the multiplicative per-node factor by an additive intra-node phase (in units of v)."""
    orig_vec, orig_factor = cs._vec_step, cs.CommShape.comm_factor

    def vec(shape_x, compute, v, g, n, k, *args, **kw):  # type: ignore[no-untyped-def]
        x = np.array(shape_x, float)
        dk = x[-1]
        x[-1] = 0.0
        base = orig_vec(x, compute, v, g, n, k, *args, **kw)
        if dk == 0.0:
            return base
        gamma, s_multi, sigma = x[0], x[1], x[2]
        parallel = args[0] if args else kw.get("parallel", np.inf)
        over = np.maximum(1.0, k / parallel)
        c = compute * (1.0 + s_multi + sigma * (k - 1.0)) * over
        # recover comm from base = (c^gamma + comm^gamma)^(1/gamma) on multi-node rows, add the phase
        comm = np.maximum(base**gamma - c**gamma, 1e-36) ** (1.0 / gamma)
        comm = np.where(n > 1, comm + v * dk * np.log2(np.maximum(k, 1.0)), comm)
        out = (c**gamma + comm**gamma) ** (1.0 / gamma)
        return np.where(g > 1, out, compute)

    def factor(self, g, nodes, grad_bytes=None, per_node_max=0):  # type: ignore[no-untyped-def]
        import dataclasses
        plain = orig_factor(dataclasses.replace(self, d_node_gpus=0.0), g, nodes, grad_bytes, per_node_max)
        if g <= 1 or nodes <= 1:
            return plain
        return plain + self.d_node_gpus * float(np.log2(max(1, per_node_max or -(-g // nodes))))

    cs._vec_step = vec  # type: ignore[assignment]
    cs.CommShape.comm_factor = factor  # type: ignore[method-assign]
    import lyasched.costmodel.online as online
    online._vec_step = vec  # type: ignore[attr-defined]


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("none", "max", "mean", "hier"):
        sys.exit("usage: node_gpus.py none|max|mean|hier [cost_accuracy.py arguments ...]")
    form = sys.argv[1]
    if form == "none":
        cs._BOUNDS["d_node_gpus"] = (0.0, 1e-12)
    elif form == "mean":
        cs._node_gpus = lambda kmax, g, n: np.maximum(1.0, g / np.maximum(n, 1.0))  # type: ignore[assignment]
    elif form == "hier":
        hierarchical()
    sys.argv = [str(REPO / "benchmarks" / "cost_accuracy.py")] + sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
