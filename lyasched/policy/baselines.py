"""The baseline policies, one module each; this module re-exports them for older imports.

`fixed_one`, `random_gpus`, `fifo`, `backfill`, `sjf_oracle`, `optimus`, `tiresias`; their
shared pieces (allowed counts, fitting, the FIFO queue memo, the strict-FIFO loop) are in
`lyasched.policy.common`.
"""

from __future__ import annotations

from lyasched.policy.backfill import Backfill
from lyasched.policy.common import allowed_counts, fit, nearest_allowed
from lyasched.policy.fifo import Fifo
from lyasched.policy.fixed_one import FixedOne
from lyasched.policy.optimus import Optimus
from lyasched.policy.random_gpus import RandomGpus
from lyasched.policy.sjf_oracle import SjfOracle
from lyasched.policy.tiresias import Tiresias

__all__ = [
    "FixedOne",
    "RandomGpus",
    "Fifo",
    "Backfill",
    "SjfOracle",
    "Optimus",
    "Tiresias",
    "allowed_counts",
    "fit",
    "nearest_allowed",
]
