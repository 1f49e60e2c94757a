"""LyapunovPolicy.decide scores only the rows that may score > 0 (`lyapunov._live`): the same
decisions, Q, Z and wake-up times as scoring every row, untyped and typed, with and without
starts."""

from dataclasses import replace

import numpy as np

from lyasched.policy import lyapunov
from lyasched.policy.lyapunov import LyapunovPolicy

from test_decision_overhead import _module as _bench  # benchmarks/decision_overhead.py, loaded


class _Unpruned(LyapunovPolicy):
    """The same rule with every row scored: a `_values` of its own turns pruning off."""

    def _values(self, s_one, s_multi, arr):
        return s_one, s_multi


def _answer(res):
    return ([(d.job_id, d.gpus, d.placement, d.score, d.reason) for d in res.starts], res.preempt, res.q, res.z,
            sorted((k, repr(v)) for k, v in res.info.items()))


def _states(mod):
    for seed in (0, 1):
        st = mod.build(600, 64, 4, 16, seed, running=True)
        yield st
        yield mod.typed(st, 3, 4, 16)
        one = tuple(1 if i == 0 else 0 for i in range(len(st.free)))
        # one free GPU, jobs that ask for 4 and run best on more than one: at a large V nothing
        # starts and a wake-up time is answered
        slow = [replace(w, requested_gpus=4) for w in st.waiting if np.fmin(w.run_one_node, w.run_multi_node).argmin() > 0]
        big = replace(st, free=one, waiting=tuple(slow))
        yield big
        yield mod.typed(big, 3, 4, 16)


def test_pruned_rows_change_no_decision(monkeypatch):
    mod = _bench()
    fired = []
    real = lyapunov._live

    def spy(*a):
        out = real(*a)
        fired.append(out is not None)
        return out

    monkeypatch.setattr(lyapunov, "_live", spy)
    woke = 0
    for st in _states(mod):
        for V in (5.0, 1e6):
            for cross in (False, True):
                a, b = LyapunovPolicy(V=V, cross_type=cross), _Unpruned(V=V, cross_type=cross)
                for _ in range(2):  # the second call reads the row caches
                    ra, rb = a.decide(st), b.decide(st)
                    assert _answer(ra) == _answer(rb)
                woke += not ra.starts and np.isfinite(ra.info.get("wake_at", np.inf))
    assert any(fired), "no slot was pruned: the test checks nothing"
    assert woke, "no slot answered a wake-up time: the rescoring path is not checked"


def test_pruned_rows_score_at_most_zero_and_the_rest_are_equal():
    """The bound itself: a row left out scores <= 0 when scored; the rows scored are bit-equal."""
    mod = _bench()
    pruned = 0
    for st in _states(mod):
        if st.node_types:
            continue
        for V in (5.0, 1e6):
            pol = LyapunovPolicy(V=V)
            cols = sum(st.free)
            a1, a2, qa, za, arr = pol._scores(st, cols=cols, prune=True)
            b1, b2, qb, zb, _ = pol._scores(st, cols=cols)
            assert (qa, za) == (qb, zb)
            kept = arr.get("live", np.arange(len(st.waiting)))
            out = np.ones(len(st.waiting), dtype=bool)
            out[kept] = False
            assert np.array_equal(a1, b1[kept]) and np.array_equal(a2, b2[kept])
            assert not (b1[out] > 0).any() and not (b2[out] > 0).any()
            pruned += int(out.sum())
    assert pruned > 100


def test_shortest_first_reference_sorts_only_the_shortest():
    """`lyapunov._shortest_first` (a partial sort) against the whole stable sort, ties included."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(1, 60))
        t = rng.integers(1, 6, size=n).astype(float) * rng.choice([1.0, 0.5])
        need = rng.integers(1, 5, size=n)
        free = int(rng.integers(1, 80))
        order = np.argsort(t, kind="stable")
        reach = np.searchsorted(np.cumsum(need[order]), free)
        assert lyapunov._shortest_first(t, need, free) == float(t[order[min(int(reach), order.size - 1)]])
