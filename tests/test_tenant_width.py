"""The tenant credit orders starts, it does not widen them (`lyapunov.orders_only`)."""

import numpy as np
import pytest

import lyasched.policy.lyapunov as lyapunov
from lyasched.policy import make_policy
from lyasched.policy.state import RunningJob, SlotState, WaitingJob
from lyasched.policy.tenants import TenantBook


def _row(runs: dict[int, float]) -> np.ndarray:
    row = np.full(8, np.inf)
    for g, run in runs.items():
        row[g - 1] = run
    return row


def _state(book: TenantBook | None) -> SlotState:
    """One free node of 8 GPUs; tenant b's long job asks for 8 (about 1.8 x faster on 8 than on 4),
    eight short 1-GPU jobs of tenant a wait with it."""
    wide = WaitingJob("w", 0.0, 9e5, _row({4: 225_289.0, 5: 200_000.0, 6: 170_000.0, 7: 145_000.0, 8: 126_137.0}),
                      np.full(8, np.inf), requested_gpus=8, user="b")
    small = [WaitingJob(f"s{i}", 0.0, 3000.0, _row({1: 3000.0}), np.full(8, np.inf), user="a") for i in range(8)]
    run = RunningJob("r", 8, ((1, 8),), 0.0, 1e6, predicted_end=1e6, user="a")
    return SlotState(now=40_000.0, slot_len=30.0, free=(8, 0), gpus_per_node=8, waiting=(wide, *small),
                     running=(run,), tenants=book)


BEHIND = TenantBook({}, {"a": 5e8, "b": 0.0}, {"a": 3e8, "b": 3e8})  # b has received none of its entitlement


def _width(policy: str, book: TenantBook | None) -> int | None:
    got = [d.gpus for d in make_policy(policy).decide(_state(book)).starts if d.job_id == "w"]
    return got[0] if got else None


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_credit_starts_the_job_on_the_count_its_own_score_prefers(policy):
    """Without the credit w's score prefers 4 GPUs (the shrink: 8 would leave short jobs waiting)
    but is negative, so w waits; with b behind, the credit starts w, on 4 GPUs, not on all 8 it
    asked for (a credit per GPU made it 8)."""
    pol = make_policy(policy)
    s_one, s_multi, *_ = pol._scores(_state(None), cols=8)
    assert int(np.argmax(s_one[0])) + 1 == 4 and s_one[0].max() < 0
    assert _width(policy, None) is None
    assert _width(policy, BEHIND) == 4


def test_credit_is_capped_at_the_preferred_count():
    """The cap keeps each job's credit at its preferred count: there, the credit is what it was."""
    pol = make_policy("lyapunov")
    *_, arr = pol._scores(_state(BEHIND), cols=8)
    g_one = arr["tenant_gpus"][0]
    assert list(g_one[0]) == [0.0, 0.0, 0.0, 4.0, 4.0, 4.0, 4.0, 4.0]
    assert (g_one[1:] == 0.0).all()  # a is not behind: no credit to cap


def test_orders_only_caps_at_the_top_configuration():
    s_one = np.array([[1.0, 3.0, 2.0], [-np.inf, -np.inf, -np.inf]])
    s_multi = np.array([[-np.inf, 0.5, 4.0], [-np.inf, -np.inf, -np.inf]])
    g_one = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    g_multi = np.array([[0.0, 2.0, 2.5], [0.0, 0.0, 0.0]])
    lyapunov.orders_only(s_one, s_multi, g_one, g_multi)
    assert list(g_one[0]) == [1.0, 2.0, 2.5] and list(g_multi[0]) == [0.0, 2.0, 2.5]
    assert (g_one[1] == 0.0).all()
