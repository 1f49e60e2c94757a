"""Experiment: hesrpt with a change of count priced by the GPU-time it idles, not only by the job's
own delay (docs/experiments.md, "hesrpt at 0.5x: where the time goes").

Why. `hesrpt_decompose.py` at 0.5x (design workloads 1-4): restarts cost 0.034 of pollux's JCT
directly, and replaying with no restart cost at all gives 0.833 against 0.885, so restarts and
what the charge deters are worth 0.052. hesrpt charges a change ``move_charge`` move costs of the
job's own remaining time, weighted by its own heSRPT weight: the largest job (imagenet) has the
least weight, so changing it looks nearly free, and it is the one every arrival shrinks and every
finish grows (about 45 grows and 45 shrinks a job on the design set, against 6 under pollux),
while each of its relaunches idles its 32-64 GPUs for the move cost.

Design ``gpuprice``: a change of a running job's count to g also costs ``move_charge`` move costs
of g GPUs' time at the price of a GPU-second in the objective, lambda: the median over the running
jobs of the fall of their weighted remaining time per GPU of their next larger count, per second
of their remaining run (what one more GPU-second is worth where the search would put it). No
constant of its own.

    python benchmarks/experiments/hesrpt_restart.py --designs "hesrpt;gpuprice" [--loads 0.5,1.0,2.0]
        [--workloads 1-4] [--json]

Held out as hesrpt_place.py (fixed before any figure was seen): design set workloads 1-4 at 0.5x,
1.0x, 2.0x; held out workloads 5-8 at every load and the 1.5x load.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import math
import sys
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import hesrpt_place as HP  # noqa: E402

from lyasched.policy import make_policy  # noqa: E402
from lyasched.policy.allocation import AllocJob  # noqa: E402
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted  # noqa: E402


@dataclass
class _Priced(_Weighted):
    price: float = 0.0  # objective units per GPU a change of count relaunches

    def loss(self, g: int) -> float:
        out = super().loss(g)
        if self.current and g != self.current and math.isfinite(out):
            out += self.price * g
        return out


@dataclass
class GpuPrice(HesrptPolicy):
    """hesrpt, a change of count also charged the GPU-time its relaunch idles at the objective's
    price of a GPU."""

    def _make(self, job_id: str, submit: float, rem: dict[int, float]) -> AllocJob | None:
        if not rem:
            return None
        counts = sorted(rem)
        return _Priced(job_id, submit, counts, rem, max(rem[counts[0]] * counts[0], 1e-9))

    def _local(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        """The price, once hesrpt's `_allocate` has set the weights and shapes, then its search."""
        gains = []
        for j in jobs:
            if not (isinstance(j, _Priced) and j.current and not j.fixed):
                continue
            g = j.current
            nxt = next((c for c in j.counts if c > g), 0)
            if nxt:
                a, b = _Weighted.loss(j, g), _Weighted.loss(j, nxt)
                t = j.rem.get(g, 0.0)
                if math.isfinite(a) and math.isfinite(b) and a > b and t > 0:
                    gains.append((a - b) / (nxt - g) / t)  # per GPU-second of its remaining run
        lam = float(np.median(gains)) if gains else 0.0
        for j in jobs:
            if isinstance(j, _Priced) and j.current:
                # the move cost in seconds is the charge over move_charge (hesrpt: move_charge x cost)
                j.price = lam * j.charge
        return super()._local(jobs, cap, gpn)


_place_build = HP.build


def build(design: str):
    if design == "gpuprice":
        return GpuPrice()
    return _place_build(design)


if __name__ == "__main__":
    HP.build = build  # the same harness, these designs
    sys.exit(HP.main())
