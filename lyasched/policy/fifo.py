"""Fifo: FIFO on the requested count, no skipping (Slurm without backfill).

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

from lyasched.policy.common import (
    WaitingJob,
    _StrictFifo,
    nearest_allowed,
)


class Fifo(_StrictFifo):
    """FIFO on the requested count, no skipping: Slurm without backfill."""

    name = "fifo"

    def count(self, w: WaitingJob) -> int | None:
        return nearest_allowed(w, w.requested_gpus)

    def why(self, w: WaitingJob, g: int) -> str:
        if g == w.requested_gpus:
            return f"fifo, requested {g}"
        return f"fifo, requested {w.requested_gpus} not allowed, nearest {g}"
