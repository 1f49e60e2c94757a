"""Cluster simulator, workloads and replay metrics behind `lyasched replay`."""

from lyasched.sim.simulator import (  # noqa: F401
    DEFAULT_ESTIMATE_ERROR,
    DEFAULT_RESTART_OVERHEAD,
    DEFAULT_SLOT,
    InvalidDecision,
    Unfinished,
    WallTimeExceeded,
    JobRecord,
    SimResult,
    Simulation,
    true_factors,
)

__all__ = [
    "DEFAULT_ESTIMATE_ERROR",
    "DEFAULT_RESTART_OVERHEAD",
    "DEFAULT_SLOT",
    "InvalidDecision",
    "JobRecord",
    "SimResult",
    "Simulation",
    "Unfinished",
    "WallTimeExceeded",
    "true_factors",
]
