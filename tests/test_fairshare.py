"""The fairshare baseline: Slurm's classic fair-share factor and age, over backfill's EASY rule;
and the ledger's decayed usage it reads."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings

from lyasched.policy.backfill import Backfill
from lyasched.policy.fairshare import FairShare, fairshare_factors
from lyasched.policy.state import RunningJob
from lyasched.policy.tenants import TenantBook, TenantLedger, decayed
from test_baselines import slot, slot_states, started, wj

WEEK = 7 * 86400.0


def test_factor_is_two_to_the_minus_usage_over_shares():
    book = TenantBook({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 0.0}, {}, usage={"a": 300.0, "b": 100.0})
    f = fairshare_factors(book, ["a", "b", "c"])
    # three tenants of share 1: S = 1/3 each; U = 0.75, 0.25, 0
    assert f == pytest.approx([2 ** (-0.75 * 3), 2 ** (-0.25 * 3), 1.0])
    assert list(fairshare_factors(None, ["a", "b"])) == [1.0, 1.0]
    unequal = TenantBook({"a": 3.0, "b": 1.0}, {}, {}, usage={"a": 300.0, "b": 100.0})
    fa, fb = fairshare_factors(unequal, ["a", "b"])
    assert fa == pytest.approx(fb) == pytest.approx(0.5)  # each used exactly its share


def test_usage_decays_with_the_half_life_exactly_between_events():
    led = TenantLedger(capacity=4.0)
    led.apply([(0.0, "a", 2.0, 0.0), (WEEK, "a", -2.0, 0.0)])
    lam = math.log(2) / WEEK
    held_week = 2.0 * (1 - 0.5) / lam  # 2 GPUs for one half-life
    assert led.usage["a"] == pytest.approx(held_week)
    assert led.book(2 * WEEK).usage["a"] == pytest.approx(held_week / 2)
    # the book extrapolated is the ledger advanced, however often it is taken
    led2 = TenantLedger(capacity=4.0)
    led2.apply([(0.0, "a", 2.0, 0.0)])
    for t in (100.0, 5e4, 3e5, WEEK):
        led2.advance(t)
    assert led2.usage["a"] == pytest.approx(held_week, rel=1e-12)
    assert decayed(10.0, 0.0, WEEK, WEEK) == pytest.approx(5.0)
    assert decayed(0.0, 1.0, 100.0, math.inf) == 100.0


def _book(usage, users=("a", "b")):
    return TenantBook({}, {u: 0.0 for u in users}, {u: 0.0 for u in users}, usage=usage)


def test_the_tenant_that_used_less_goes_first_and_backfill_still_fills():
    # one node of 4: "a" has used the cluster, "b" has not. a1 (4 GPUs) was submitted first.
    a1 = dataclasses.replace(wj("a1", 0.0, requested=4, time_limit=3600.0), user="a")
    b1 = dataclasses.replace(wj("b1", 10.0, requested=4, time_limit=3600.0), user="b")
    state = dataclasses.replace(slot([a1, b1], free=(4, 0), now=1200.0), tenants=_book({"a": 1e6, "b": 0.0}))
    assert started(FairShare().decide(state)) == {"b1": 4}
    assert started(Backfill().decide(state)) == {"a1": 4}
    # b2 (all 8 GPUs) blocked behind a running job: the head, reserved; a short job of "a"
    # backfills, a long one does not
    b2 = dataclasses.replace(wj("b2", 10.0, requested=8, time_limit=3600.0), user="b")
    run = (RunningJob("r", 4, ((0, 4),), start_time=0.0, expected_end=2000.0),)
    short = dataclasses.replace(wj("a2", 0.0, requested=2, time_limit=600.0), user="a")
    long = dataclasses.replace(wj("a3", 0.0, requested=2, time_limit=9000.0), user="a")
    state = dataclasses.replace(slot([long, short, b2], free=(0, 4), running=run, now=1200.0),
                                tenants=_book({"a": 1e6, "b": 0.0}))
    res = FairShare().decide(state)
    assert res.info["head"] == "b2"
    assert started(res) == {"a2": 2}


def test_age_raises_an_old_job_over_a_fresher_tenant_only_past_the_fairshare_gap():
    old = dataclasses.replace(wj("old", 0.0, requested=4), user="a")
    new = dataclasses.replace(wj("new", WEEK - 600, requested=4), user="b")
    # a used slightly more than b: the factor gap (x 10000) is smaller than a week's age (1000)
    state = dataclasses.replace(slot([old, new], free=(4, 0), now=WEEK), tenants=_book({"a": 1.1, "b": 1.0}))
    assert started(FairShare().decide(state)) == {"old": 4}
    state = dataclasses.replace(state, tenants=_book({"a": 10.0, "b": 1.0}))
    assert started(FairShare().decide(state)) == {"new": 4}


@settings(max_examples=60, deadline=None)
@given(state=slot_states())
def test_without_tenants_it_decides_as_backfill(state):
    fs, bf = FairShare().decide(state), Backfill().decide(state)
    assert [(d.job_id, d.gpus, d.placement) for d in fs.starts] == [(d.job_id, d.gpus, d.placement) for d in bf.starts]


@settings(max_examples=60, deadline=None)
@given(state=slot_states())
def test_wake_at_promises_nothing_changes_before_it(state):
    users = ["a", "b", "c"]
    waiting = tuple(dataclasses.replace(w, user=users[i % 3]) for i, w in enumerate(state.waiting))
    running = tuple(dataclasses.replace(r, user=users[i % 2]) for i, r in enumerate(state.running))
    held = {u: float(sum(r.gpus for r in running if r.user == u)) for u in users}
    book = TenantBook({}, {u: 0.0 for u in users}, {u: 0.0 for u in users}, held=held,
                      usage={"a": 5e4, "b": 2e4, "c": 0.0})
    state = dataclasses.replace(state, waiting=waiting, running=running, tenants=book)
    res = FairShare().decide(state)
    if "wake_at" not in res.info:
        return
    wake = res.info["wake_at"]
    assert state.now < wake <= state.now + 300.0 or (wake == math.inf and not any(
        math.isfinite(w.best_run) for w in state.waiting))  # nothing waits that could ever run
    for frac in (0.3, 0.999):
        later = state.now + frac * ((wake if math.isfinite(wake) else state.now + 1e6) - state.now)
        res2 = FairShare().decide(dataclasses.replace(state, now=later, tenants=book.at(later - state.now)))
        assert not res2.starts, frac
