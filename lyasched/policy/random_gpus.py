"""RandomGpus: FIFO on a GPU count drawn per job from its allowed counts that the cluster can hold.

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import hashlib

from lyasched.policy.common import (
    WaitingJob,
    _StrictFifo,
    allowed_counts,
    fit,
)
from lyasched.policy.state import SlotResult, SlotState


def _hash_index(seed: int, job_id: str, n: int) -> int:
    """Uniform index in [0, n) from (seed, job_id): stable across processes (unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x00{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


class RandomGpus(_StrictFifo):
    """FIFO on a GPU count drawn uniformly, once per job, from the job's allowed counts that fit
    the whole cluster when it is empty (a count no layout can hold would block the queue forever)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self._empty: tuple[int, ...] = ()  # the cluster's GPUs per node, all free (its shape)

    def decide(self, state: SlotState) -> SlotResult:
        # the free vector's length and the nodes' size give the cluster's shape; a count drawn
        # is memoised per job, so the shape is that of the job's first slot (fixed in a replay)
        self._empty = (state.gpus_per_node,) * len(state.free)
        return super().decide(state)

    def count(self, w: WaitingJob) -> int | None:
        counts = allowed_counts(w)
        if self._empty:  # the cluster is known (a slot was decided): only counts it can hold
            counts = [g for g in counts if fit(w, g, self._empty) is not None]
        return counts[_hash_index(self.seed, w.job_id, len(counts))] if counts else None

    def why(self, w: WaitingJob, g: int) -> str:
        return f"fifo, random count {g}"
