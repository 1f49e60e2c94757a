"""FixedOne: every job on one GPU, FIFO (the seed talk's baseline).

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

from lyasched.policy.common import (
    WaitingJob,
    _StrictFifo,
    allowed_counts,
)


class FixedOne(_StrictFifo):
    """Every job on one GPU, FIFO: the seed talk's baseline."""

    name = "fixed-1"

    def count(self, w: WaitingJob) -> int | None:
        counts = allowed_counts(w)
        return counts[0] if counts else None  # 1, unless memory forbids it

    def why(self, w: WaitingJob, g: int) -> str:
        return "fifo, 1 gpu" if g == 1 else f"fifo, 1 gpu not allowed, smallest allowed {g}"
