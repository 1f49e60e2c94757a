"""Scheduling policies: the Lyapunov policy and the baselines, all behind one `Policy` protocol.

`make_policy(name, **params)` is how the simulator and the service get one by name.
A policy class may set ``needs_true_runtimes = True`` (an oracle): the simulator then
builds its `WaitingJob` rows from true rather than estimated run times.
"""

from __future__ import annotations

import importlib
from typing import Any

from lyasched.policy.state import (  # noqa: F401  (re-exported)
    Decision,
    Policy,
    RunningJob,
    SlotResult,
    SlotState,
    WaitingJob,
    waiting_job,
)

POLICIES: dict[str, str] = {
    "lyapunov": "lyasched.policy.lyapunov:LyapunovPolicy",
    "fixed-1": "lyasched.policy.fixed_one:FixedOne",
    "random": "lyasched.policy.random_gpus:RandomGpus",
    "fifo": "lyasched.policy.fifo:Fifo",
    "backfill": "lyasched.policy.backfill:Backfill",
    "sjf-oracle": "lyasched.policy.sjf_oracle:SjfOracle",
    "optimus": "lyasched.policy.optimus:Optimus",
    "tiresias": "lyasched.policy.tiresias:Tiresias",
    "elastic": "lyasched.policy.elastic:ElasticPolicy",
}

PREEMPTIVE = frozenset({"tiresias", "elastic"})


def make_policy(name: str, **params: Any) -> Policy:
    """Build a policy by name; every policy accepts ``seed`` (ignored where unused)."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    mod, cls = POLICIES[name].split(":")
    return getattr(importlib.import_module(mod), cls)(**params)
