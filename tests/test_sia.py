"""The Sia baseline (lyasched.policy.sia): its integer program over (type, count) configurations,
p = -0.5 fairness, restart penalty, types, and the fallback when the solver gives no solution."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest

import lyasched.policy.sia as sia_mod
from lyasched.policy import make_policy
from lyasched.policy.movable import MovableJob
from lyasched.policy.params import ParamError, check_param
from lyasched.policy.state import SlotState, WaitingJob

INF = math.inf
ROW = 8  # GPU counts the rows cover


def rows(times: dict[int, float], gpn: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """One-node and multi-node rows from {count: remaining seconds}."""
    one, multi = np.full(ROW, INF), np.full(ROW, INF)
    for g, t in times.items():
        (one if g <= gpn else multi)[g - 1] = t
    return one, multi


def waiting(jid: str, by: dict[str, dict[int, float]] | dict[int, float], submit: float = 0.0) -> WaitingJob:
    """A waiting job: ``by`` is {type: {count: seconds}} (typed) or {count: seconds} (untyped)."""
    if by and isinstance(next(iter(by.values())), dict):
        views = {t: WaitingJob(jid, submit, 1.0, *rows(ts)) for t, ts in by.items()}
        return WaitingJob(jid, submit, 1.0, *rows(next(iter(by.values()))), by_type=views)
    return WaitingJob(jid, submit, 1.0, *rows(by))  # type: ignore[arg-type]


def running(jid: str, g: int, placement, times: dict[int, float], *, start: float, moves: int = 0,
            cost: float = 30.0) -> MovableJob:
    one, multi = rows(times)
    return MovableJob(job_id=jid, gpus=g, placement=tuple(placement), start_time=start, expected_end=INF,
                      preemptible=True, predicted_end=start + times[g], requested_gpus=g, move_cost_s=cost,
                      waited_s=0.0, moves=moves, remaining_one_node=one, remaining_multi_node=multi)


def state(ws=(), rs=(), free=(4, 4), node_types=("fast", "slow"), now=6000.0) -> SlotState:
    return SlotState(now=now, slot_len=30.0, free=tuple(free), gpus_per_node=4, waiting=tuple(ws),
                     running=tuple(rs), node_types=tuple(node_types))


def types_of(d, node_types) -> set[str]:
    return {node_types[n] for n, _ in d.placement}


def test_the_fast_type_goes_to_the_job_that_gains_most():
    # 4 fast + 4 slow GPUs, two jobs that run on 4 GPUs only: a gains 4x on fast, b 1.2x
    a = waiting("a", {"fast": {4: 250.0}, "slow": {4: 1000.0}})
    b = waiting("b", {"fast": {4: 833.0}, "slow": {4: 1000.0}})
    for order in ([a, b], [b, a]):
        res = make_policy("sia").decide(state(order))
        got = {d.job_id: types_of(d, ("fast", "slow")) for d in res.starts}
        assert got == {"a": {"fast"}, "b": {"slow"}}, got


def test_never_mixes_types_and_respects_allowed_types():
    nt = ("fast", "fast", "slow", "slow")
    ws = []
    for i in range(7):
        both = {"fast": {g: 400.0 / g for g in (1, 2, 4, 8)}, "slow": {g: 1000.0 / g for g in (1, 2, 4, 8)}}
        allowed = ("slow",) if i % 3 == 0 else ("fast",) if i % 3 == 1 else ("fast", "slow")
        ws.append(waiting(f"j{i}", {t: both[t] for t in allowed}, submit=float(i)))
    res = make_policy("sia").decide(state(ws, free=(4, 4, 4, 4), node_types=nt))
    assert len(res.starts) >= 4
    used = [0, 0, 0, 0]
    for d in res.starts:
        w = next(w for w in ws if w.job_id == d.job_id)
        assert len(types_of(d, nt)) == 1 and types_of(d, nt) <= set(w.by_type), d
        for n, k in d.placement:
            used[n] += k
    assert all(u <= 4 for u in used)


def _p_mean_split(p: float) -> dict[str, int]:
    # one node of 4 GPUs and one of 2: a scales well (G 1, 2, 3 on 1, 2, 4 GPUs), b poorly (1, 1.2, 2)
    a = waiting("a", {1: 1000.0, 2: 500.0, 4: 1000.0 / 3})
    b = waiting("b", {1: 1000.0, 2: 1000.0 / 1.2, 4: 500.0})
    res = make_policy("sia", p=p).decide(SlotState(now=6000.0, slot_len=30.0, free=(4, 2), gpus_per_node=4,
                                                   waiting=(a, b)))
    return {d.job_id: d.gpus for d in res.starts}


def test_p_minus_half_trades_throughput_for_the_worse_off_job():
    # summed speed-up (throughput) would give a the 4 GPUs (3 + 1.2 > 2 + 2); the p = -0.5 mean
    # gives them to b, equalising the two (2^-0.5 * 2 = 1.414 < 3^-0.5 + 1.2^-0.5 = 1.490)
    g = {"a": (1.0, 2.0, 3.0), "b": (1.0, 1.2, 2.0)}
    best = min(((x, y) for x, y in itertools.product((0, 1, 2), repeat=2) if (x, y) in ((2, 1), (1, 2))),
               key=lambda xy: g["a"][xy[0]] ** -0.5 + g["b"][xy[1]] ** -0.5)
    assert best == (1, 2)  # the brute-force p-mean optimum: a on 2, b on 4
    assert _p_mean_split(-0.5) == {"a": 2, "b": 4}
    assert max(g["a"][2] + g["b"][1], g["a"][1] + g["b"][2]) == g["a"][2] + g["b"][1]  # throughput's choice differs


def test_restart_penalty_keeps_a_running_job_when_the_gain_is_small():
    nt = ("fast", "slow")
    small = {1: 1100.0, 2: 1000.0, 4: 950.0}  # 4 GPUs save 5%
    big = {1: 4000.0, 2: 2000.0, 4: 1000.0}  # 4 GPUs halve it
    # age 100 s, restarted once (d = 30 s): factor (100 - 30) / (100 + 30) = 0.54
    young = running("r", 2, [(0, 2)], small, start=5900.0, moves=1)
    res = make_policy("sia").decide(state(rs=[young], free=(2, 0), node_types=nt))
    assert not res.preempt and not res.starts
    # the same small gain without the penalty (a fresh job's restart factor is 1) does move it
    res = make_policy("sia", move_cost=0.0).decide(state(rs=[running("r", 2, [(0, 2)], small, start=5900.0, cost=0.0)],
                                                         free=(2, 0), node_types=nt))
    assert res.preempt == ("r",) and res.starts[0].gpus == 4
    # a large gain on an old job grows it despite the penalty
    old = running("r", 2, [(0, 2)], big, start=0.0, moves=1)
    res = make_policy("sia").decide(state(rs=[old], free=(2, 0), node_types=nt))
    assert res.preempt == ("r",) and res.starts[0].gpus == 4 and res.starts[0].placement == ((0, 4),)


def test_a_running_job_moves_to_the_faster_type_it_was_seen_on():
    nt = ("fast", "slow")
    pol = make_policy("sia")
    w = waiting("r", {"fast": {4: 250.0}, "slow": {4: 1000.0}})
    first = pol.decide(state([w], free=(0, 4), node_types=nt, now=600.0))  # the fast node is busy (not ours)
    assert [(d.job_id, types_of(d, nt)) for d in first.starts] == [("r", {"slow"})]
    # an hour later, half done on slow, the fast node is free: the job moves there
    r = running("r", 4, [(1, 4)], {4: 500.0}, start=600.0)
    res = pol.decide(state(rs=[r], free=(4, 0), node_types=nt, now=4200.0))
    assert res.preempt == ("r",) and [types_of(d, nt) for d in res.starts] == [{"fast"}]


def test_solver_failure_keeps_the_current_allocation(monkeypatch):
    nt = ("fast", "slow")
    r = running("r", 2, [(0, 2)], {1: 4000.0, 2: 2000.0, 4: 1000.0}, start=0.0)
    w = waiting("w", {"fast": {1: 100.0}, "slow": {1: 300.0}})
    ok = make_policy("sia").decide(state([w], [r], free=(2, 4), node_types=nt))
    assert ok.starts  # a solution changes the allocation
    monkeypatch.setattr(sia_mod, "milp", lambda *a, **k: SimpleNamespace(x=None, status=1, message="time limit reached"))
    res = make_policy("sia").decide(state([w], [r], free=(2, 4), node_types=nt))
    assert not res.starts and not res.preempt and "fallback" in res.info["sia"]

    # stopped by its time limit with a best-so-far that drops the running job: worse than keeping it
    monkeypatch.setattr(sia_mod, "milp", lambda c, **k: SimpleNamespace(x=np.zeros(len(c)), status=1, message="time limit reached"))
    res = make_policy("sia").decide(state([w], [r], free=(2, 4), node_types=nt))
    assert not res.starts and not res.preempt and "no better" in res.info["sia"]

    def boom(*a, **k):
        raise ValueError("bad program")

    monkeypatch.setattr(sia_mod, "milp", boom)
    res = make_policy("sia").decide(state([w], [r], free=(2, 4), node_types=nt))
    assert not res.starts and not res.preempt and "bad program" in res.info["sia"]


def test_decides_once_a_round():
    w = waiting("w", {"fast": {1: 100.0}, "slow": {1: 300.0}})
    assert make_policy("sia").decide(state([w], now=6000.0)).starts  # 6000 s starts a 60 s round
    assert not make_policy("sia").decide(state([w], now=6030.0)).starts


@pytest.mark.parametrize("key,value", [("p", "0"), ("p", "0.5"), ("lambda_n", "1"), ("round_s", "0")])
def test_bad_parameters_are_refused(key, value):
    with pytest.raises(ParamError):
        check_param("sia", key, value)
    assert check_param("sia", "p", "-1") == -1.0
