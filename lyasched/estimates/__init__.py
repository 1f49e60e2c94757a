"""Run-time estimates for plain Slurm jobs (no profile), learned from the history of similar
jobs: per-user recent history matched on name/script/GPU count, capped at the time limit.
docs/estimates.md says how and why.
"""

from lyasched.estimates.estimator import RuntimeEstimator, outlived
from lyasched.estimates.model import Estimate, Finished, Request

__all__ = ["Estimate", "Finished", "Request", "RuntimeEstimator", "outlived"]
