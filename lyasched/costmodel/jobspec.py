"""A training job as the scheduler sees it."""

from __future__ import annotations

from dataclasses import dataclass

from lyasched.costmodel.cost import CostModel, Profile
from lyasched.costmodel.goodput import Adaptive


@dataclass(frozen=True)
class Job:
    """One data-parallel training job: a model profile, a global batch and a length."""

    job_id: str
    profile: Profile
    global_batch: int
    iterations: int
    submit_time: float = 0.0
    min_gpus: int = 1
    max_gpus: int = 8
    requested_gpus: int = 1  # what the user asked for: what fifo/backfill give it
    time_limit: float | None = None  # user's wall-clock limit (s), used by backfill
    user: str = ""
    # elastic moves (docs/elastic.md): only a checkpointable job is ever shrunk, grown or suspended;
    # move_cost_s is its checkpoint + relaunch time (None: the scheduler's default)
    checkpointable: bool = False
    move_cost_s: float | None = None
    # goodput (lyasched.costmodel.goodput): the scheduler picks the batch per GPU count from
    # global_batch (M0) up to adaptive.max_batch, and iterations are base steps; None = fixed batch
    adaptive: Adaptive | None = None

    def allowed_counts(self, cost: CostModel) -> list[int]:
        if self.adaptive is not None:
            from lyasched.costmodel import goodput

            return goodput.allowed_counts(cost, self)
        return cost.allowed_counts(self.profile, self.global_batch, self.min_gpus, self.max_gpus)

    def work(self) -> float:
        """Estimated compute time on one GPU at the full batch: the job's size in the actual queue Q."""
        return self.iterations * self.profile.step_time(self.global_batch)

    def run_time(self, cost: CostModel, g: int, spans_nodes: bool = False) -> float:
        """Run time on g GPUs from the start (an adaptive job: at its best batch, re-tuned as it goes)."""
        if self.adaptive is not None:
            from lyasched.costmodel import goodput

            return goodput.run_time(cost, self, g, spans_nodes)
        return cost.run_time(self.profile, self.global_batch, self.iterations, g, spans_nodes)
