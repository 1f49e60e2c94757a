"""Elastic's moves across GPU types (lyasched.policy.typemoves): a running checkpointable job moves
onto another type's free GPUs when its time left there plus its move cost beats staying."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from test_hetero_policy import job, state, typed_waiting, types_of

from lyasched.policy import make_policy
from lyasched.policy.elastic import ElasticPolicy
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import RunningJob


def _moved(policy: ElasticPolicy, allowed: tuple[str, ...] = (), since: float = 700.0):
    """Job w waits once (the policy sees its rows on each type), then runs on 4 T4s of node 2,
    ``since`` seconds after its start, with node 3 held by a plain job and both A100 nodes free."""
    w = typed_waiting(job(0, req=4), allowed)
    policy.decide(state([w], free=(0, 0, 4, 4)))
    t4 = w.by_type["t4"]
    now = 600.0 + since
    r = MovableJob(w.job_id, 4, ((2, 4),), 600.0, np_inf(), preemptible=True, predicted_end=now + 0.9 * t4.best_run,
                   requested_gpus=4, remaining_one_node=np.asarray(t4.run_one_node) * 0.9,
                   remaining_multi_node=np.asarray(t4.run_multi_node) * 0.9)
    other = RunningJob("plain", 4, ((3, 4),), 600.0, np_inf(), predicted_end=now + 1e6)
    st = replace(state([], free=(4, 4, 0, 0), now=now), running=(r, other))
    return policy.decide(st)


def np_inf() -> float:
    return float("inf")


def test_a_running_job_moves_onto_a_faster_types_free_gpus():
    res = _moved(make_policy("elastic"))
    assert res.preempt == ("j0",)
    (d,) = res.starts
    assert d.job_id == "j0" and types_of(d) == {"a100"} and len(d.placement) == 1


@pytest.mark.parametrize("case", ["t4 only", "within the move interval", "off"])
def test_no_move_across_types_where_it_may_not(case):
    policy = make_policy("elastic")
    if case == "off":
        policy.type_moves = False
    res = _moved(policy, allowed=("t4",) if case == "t4 only" else (), since=100.0 if "interval" in case else 700.0)
    assert not res.preempt and not [d for d in res.starts if d.job_id == "j0"]
