"""RandomGpus: FIFO on a GPU count drawn per job from its allowed counts.

docs/baselines.md describes the rule, its parameters and where it departs from the system it imitates.
"""

from __future__ import annotations

import hashlib

from lyasched.policy.common import (
    WaitingJob,
    _StrictFifo,
    allowed_counts,
)


def _hash_index(seed: int, job_id: str, n: int) -> int:
    """Uniform index in [0, n) from (seed, job_id): stable across processes (unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x00{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


class RandomGpus(_StrictFifo):
    """FIFO on a GPU count drawn uniformly from the job's allowed counts, once per job."""

    name = "random"

    def count(self, w: WaitingJob) -> int | None:
        counts = allowed_counts(w)
        return counts[_hash_index(self.seed, w.job_id, len(counts))] if counts else None

    def why(self, w: WaitingJob, g: int) -> str:
        return f"fifo, random count {g}"
