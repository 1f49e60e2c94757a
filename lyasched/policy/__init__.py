"""Scheduling policies: the Lyapunov policy and the baselines, all behind one `Policy` protocol.

`make_policy(name, **params)` is how the simulator and the service get one by name. What a
policy needs from whoever carries out its decisions (preemption, true run times, a clock, a
placement rule) it declares as ``capabilities`` (`Capabilities`, state.py); the simulator, the
service and docs/baselines.md (checked by tests/test_capabilities.py) all read those flags.
"""

from __future__ import annotations

import importlib
from typing import Any

from lyasched.policy.state import (  # noqa: F401  (re-exported)
    Capabilities,
    Decision,
    Policy,
    RunningJob,
    SlotResult,
    SlotState,
    WaitingJob,
    capabilities,
    waiting_job,
)

POLICIES: dict[str, str] = {
    "lyapunov": "lyasched.policy.lyapunov:LyapunovPolicy",
    "fixed-1": "lyasched.policy.fixed_one:FixedOne",
    "random": "lyasched.policy.random_gpus:RandomGpus",
    "fifo": "lyasched.policy.fifo:Fifo",
    "backfill": "lyasched.policy.backfill:Backfill",
    "fairshare": "lyasched.policy.fairshare:FairShare",
    "sjf-oracle": "lyasched.policy.sjf_oracle:SjfOracle",
    "srpt-oracle": "lyasched.policy.srpt_oracle:SrptOracle",
    "optimus": "lyasched.policy.optimus:Optimus",
    "tiresias": "lyasched.policy.tiresias:Tiresias",
    "elastic": "lyasched.policy.elastic:ElasticPolicy",
    "pollux": "lyasched.policy.pollux:PolluxPolicy",
    "lyapunov-unaware": "lyasched.policy.lyapunov:LyapunovUnaware",
    "elastic-unaware": "lyasched.policy.elastic:ElasticUnaware",
    "gavel": "lyasched.policy.gavel:Gavel",
    "hesrpt": "lyasched.policy.hesrpt:HesrptPolicy",
    "sia": "lyasched.policy.sia:SiaPolicy",
}


# registered, but run only when named (replay and whatif leave them out of their default set): a
# reference for the benchmarks, slow on long traces, and no more than that (pollux: the peer of
# issue 35's adaptive workloads, re-planning every job each slot; hesrpt: pollux's search, so as slow)
# lyapunov-unaware, elastic-unaware, gavel and sia: references for GPU types (benchmarks/heterogeneous.py)
REFERENCES: tuple[str, ...] = ("srpt-oracle", "pollux", "hesrpt", "lyapunov-unaware", "elastic-unaware", "gavel", "sia")
DEFAULT_POLICIES: tuple[str, ...] = tuple(p for p in POLICIES if p not in REFERENCES)


def policy_class(name: str) -> type:
    """The class registered under ``name`` (ValueError if none)."""
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return _load(POLICIES[name])


def _load(path: str) -> type:
    mod, cls = path.split(":")
    return getattr(importlib.import_module(mod), cls)


def capabilities_of(name: str) -> Capabilities:
    """The capabilities the policy registered under ``name`` declares (without building one)."""
    return capabilities(policy_class(name))


def make_policy(name: str, **params: Any) -> Policy:
    """Build a policy by name; every policy accepts ``seed`` (ignored where unused)."""
    return policy_class(name)(**params)
