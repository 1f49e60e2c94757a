"""Lyapunov's shortcuts (`LyapunovPolicy.shortcuts`: several-node scores not computed when no spread
fits, one free GPU's reference time, the fill's cached column, the one-GPU knapsack, both placements scored in one pass) decide exactly as
the general path: both policies decide a run of random slots (jobs leaving and arriving, so their
row caches are reused), with and without tenants, and every answer is compared to the bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.state import RunningJob, SlotState, WaitingJob
from lyasched.policy.tenants import TenantBook

WIDTH, GPN, NODES = 16, 8, 4


class General(LyapunovPolicy):
    shortcuts = False


def _job(rng: np.random.Generator, i: int, users: int, adaptive: bool) -> WaitingJob:
    one = np.full(WIDTH, np.inf)
    multi = np.full(WIDTH, np.inf)
    base = rng.uniform(100.0, 50_000.0)
    allowed = rng.choice(np.arange(1, WIDTH + 1), size=int(rng.integers(1, 6)), replace=False)
    for g in allowed:
        t = base / g ** rng.uniform(0.2, 1.0) * rng.uniform(0.9, 1.4)  # some counts far slower: slivers
        if g <= GPN:
            one[g - 1] = t
        multi[g - 1] = t * rng.uniform(1.0, 1.3)
    if rng.random() < 0.5:  # many jobs can take one GPU (as on Philly)
        one[0] = base * rng.uniform(0.9, 1.1)
    return WaitingJob(job_id=str(i), submit_time=float(i * 7), work=base, run_one_node=one, run_multi_node=multi,
                      requested_gpus=int(rng.integers(1, WIDTH + 1)), user=f"t{rng.integers(users)}",
                      adaptive=adaptive and bool(i % 5 == 0))


def _key(res) -> tuple:
    starts = tuple((d.job_id, d.gpus, tuple(d.placement), d.score, d.reason) for d in res.starts)
    return starts, res.q, res.z, tuple(sorted((k, repr(v)) for k, v in (res.info or {}).items()))


@pytest.mark.parametrize("tenants", [False, True])
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_shortcuts_decide_as_the_general_path(seed: int, tenants: bool, adaptive: bool) -> None:
    rng = np.random.default_rng(seed)
    fast, slow = LyapunovPolicy(), General()
    users = int(rng.integers(2, 6))
    waiting: list[WaitingJob] = []
    nxt, now, short_cuts_met = 0, 1000.0, 0
    for _ in range(60):
        for _ in range(int(rng.poisson(3.0 if waiting else 20.0))):
            waiting.append(_job(rng, nxt, users, adaptive))
            nxt += 1
        if not waiting:
            continue
        # mostly a GPU or two free, on one node or scattered (as Philly's calls are), sometimes more
        free = [0] * NODES
        for _ in range(int(rng.choice([1, 1, 1, 2, 2, 3, 5, 12]))):
            free[int(rng.integers(NODES))] += 1
        free = [min(f, GPN) for f in free]
        running = (RunningJob("r", NODES * GPN - sum(free), ((0, 1),), 0.0, math.inf),)
        book = None
        if tenants:
            names = [f"t{k}" for k in range(users)]
            book = TenantBook(shares={}, received={u: float(rng.uniform(0, 1e6)) for u in names},
                              entitled={u: float(rng.uniform(0, 1e6)) for u in names},
                              held={u: float(rng.integers(0, 8)) for u in names},
                              rate={u: float(rng.uniform(0, 8)) for u in names})
        state = SlotState(now=now, slot_len=60.0, free=tuple(free), gpus_per_node=GPN, waiting=tuple(waiting),
                          running=running, tenants=book)
        a, b = fast.decide(state), slow.decide(state)
        assert _key(a) == _key(b)
        short_cuts_met += sum(free) == 1
        gone = {d.job_id for d in a.starts}
        waiting = [w for w in waiting if w.job_id not in gone]
        now += 60.0 * float(rng.integers(1, 30))
    assert short_cuts_met  # the one-GPU paths were taken


@pytest.mark.parametrize("seed", range(6))
def test_small_knapsack_is_the_numpy_one(seed: int) -> None:
    """`_knapsack_small` returns `_knapsack`'s answer on small tables, ties and -inf included (scores
    drawn from a few values, so equal sums and equal options are common)."""
    from lyasched.policy.lyapunov import _knapsack, _knapsack_small

    rng = np.random.default_rng(seed)
    for _ in range(300):
        n, k, cap = int(rng.integers(1, 9)), int(rng.integers(1, 9)), int(rng.integers(1, 9))
        pool = np.array([-np.inf, -1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0]) if rng.random() < 0.5 else None
        s = rng.choice(pool, size=(n, k)) if pool is not None else rng.normal(0.5, 1.0, size=(n, k))
        assert _knapsack_small(s, cap) == _knapsack(s, cap)


@pytest.mark.parametrize("seed", range(6))
def test_tenant_credit_on_both_placements_at_once(seed: int) -> None:
    """The tenant credit added to both placements' scores side by side (the shortcut that scores
    them in one pass) gives the scores and credited GPUs of the two tables taken one by one."""
    from lyasched.policy.state import FreeGpus

    rng = np.random.default_rng(seed)
    fast, slow = LyapunovPolicy(), General()
    users = int(rng.integers(2, 6))
    names = [f"t{k}" for k in range(users)]
    met = 0
    for step in range(40):
        waiting = tuple(_job(rng, 100 * step + i, users, False) for i in range(int(rng.integers(2, 60))))
        free = [0] * NODES
        for _ in range(int(rng.choice([2, 3, 5, 12]))):
            free[int(rng.integers(NODES))] += 1
        free = [min(f, GPN) for f in free]
        book = TenantBook(shares={}, received={u: float(rng.uniform(0, 1e6)) for u in names},
                          entitled={u: float(rng.uniform(0, 1e6)) for u in names})
        state = SlotState(now=1e4, slot_len=60.0, free=tuple(free), gpus_per_node=GPN, waiting=waiting,
                          running=(RunningJob("r", NODES * GPN - sum(free), ((0, 1),), 0.0, math.inf),), tenants=book)
        fg = FreeGpus(state.free, GPN)
        spread = fg.spread_mask(fg.total)
        a = fast._scores(state, cols=fg.total, prune=True, spread=spread)
        b = slow._scores(state, cols=fg.total, prune=True, spread=spread)
        if a[4]["no_multi"] or "tenant_gpus" not in a[4]:
            continue
        met += 1
        assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()
        for x, y in zip(a[4]["tenant_gpus"], b[4]["tenant_gpus"]):
            assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()
    assert met
