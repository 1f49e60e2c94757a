"""The type dimension of a typed slot (lyasched.policy.bytype): a job takes a slower type only
when its run there beats waiting for its fastest type's backlog."""

from __future__ import annotations

from dataclasses import replace

import pytest

from test_hetero_policy import job, state, typed_waiting, types_of

from lyasched.policy import make_policy
from lyasched.policy.bytype import decide_by_type
from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.state import RunningJob


def _a100_busy_until(end: float, now: float = 600.0) -> tuple[RunningJob, ...]:
    """Both a100 nodes (0, 1) held by one job whose predicted end is ``end``."""
    return (RunningJob("r", 8, ((0, 4), (1, 4)), 0.0, end + 10_000.0, predicted_end=end),)


def _slot(a100_left):
    """One job that allows a100 and t4, the T4s free, the A100s busy for ``a100_left(fast, slow)``
    seconds more (its best runs there)."""
    w = typed_waiting(job(0, req=2))
    fast, slow = w.by_type["a100"].best_run, w.by_type["t4"].best_run
    assert slow > 2 * fast  # the roofline: T4 much slower
    st = replace(state([w], free=(0, 0, 4, 4)), running=_a100_busy_until(600.0 + a100_left(fast, slow)))
    return w, st


@pytest.mark.parametrize("name", ["lyapunov", "elastic"])
def test_a_job_waits_for_its_fast_type_when_that_finishes_sooner(name):
    w, st = _slot(lambda fast, slow: 0.1 * (slow - fast))  # the A100s free up soon
    assert not make_policy(name).decide(st).starts
    # without the rule it takes the free T4s
    res = decide_by_type(LyapunovPolicy(), st, LyapunovPolicy.decide, backlog=False)
    assert [types_of(d) for d in res.starts] == [{"t4"}]


@pytest.mark.parametrize("name", ["lyapunov", "elastic"])
def test_a_job_takes_a_slower_type_when_its_fast_type_is_swamped(name):
    w, st = _slot(lambda fast, slow: 10 * slow)  # the A100s are held far longer than the T4 run
    res = make_policy(name).decide(st)
    assert [types_of(d) for d in res.starts] == [{"t4"}]


def test_the_unaware_reference_ignores_the_rule():
    w, st = _slot(lambda fast, slow: 0.1 * (slow - fast))
    assert make_policy("lyapunov-unaware").decide(st).starts


@pytest.mark.parametrize("name", ["lyapunov", "elastic"])
def test_rows_carried_across_slots_decide_as_fresh_ones(name):
    """The memo's rows kept from slot to slot (the last jobs less those started, then new ones;
    checked object by object, so a reordered or rebuilt list is looked up again) and the walk's
    kept type order and nodes: each slot decides as a fresh policy does, on interleaved types."""
    nt = ("t4", "a100", "t4", "a100")
    kept = make_policy(name)
    waiting = [typed_waiting(job(i, req=1 + i % 3, iters=5_000 + 700 * i), ("a100",) if i % 4 == 0 else ())
               for i in range(12)]
    nxt = 12
    for slot in range(8):
        st = replace(state(waiting, free=(2, 3, 4, 1), now=600.0 + 30 * slot), node_types=nt)
        got, want = kept.decide(st), make_policy(name).decide(st)
        assert [(d.job_id, d.gpus, d.placement) for d in got.starts] == \
            [(d.job_id, d.gpus, d.placement) for d in want.starts]
        assert (got.q, got.z) == (want.q, want.z)
        assert all(types_of(d, nt) <= set(d_w.by_type) for d in got.starts
                   for d_w in waiting if d_w.job_id == d.job_id)
        gone = {d.job_id for d in got.starts}
        waiting = [w for w in waiting if w.job_id not in gone]
        waiting += [typed_waiting(job(nxt + k, req=1 + k, iters=4_000 + 900 * k)) for k in range(2)]
        nxt += 2
        if slot % 3 == 2:  # another order: the kept rows no longer line up
            waiting.reverse()
        if slot == 4:  # the same job, rebuilt: a new object, looked up anew
            waiting[0] = typed_waiting(job(int(waiting[0].job_id[1:]), iters=3_000))
