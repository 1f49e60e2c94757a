"""lyapunov's tenant wake-up search asks its test about many trial times in one numpy pass
(`quiet_for_many`, `TenantBound.per_gpu_many`). Each answer must be the one-time test's, and the
walk over them `quiet_for`'s: checked here against the one-d-at-a-time search written out plainly,
on random slots whose answers spread from 0 to the horizon, and against predicates that are not
monotone (where a walk that took the largest yes instead of `quiet_for`'s path would differ)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyasched.policy.lyapunov import (_WAKE_HORIZON, LyapunovPolicy, TenantBound, doubling_stop, quiet_for,
                                      quiet_for_many)
from lyasched.policy.state import RunningJob, SlotState, WaitingJob
from lyasched.policy.tenants import TenantBook

K, GPN, NODES = 8, 8, 4


@pytest.mark.parametrize("per", [1, 2, 3, 7, 15, 16, 64])
@pytest.mark.parametrize("seed", range(40))
def test_many_at_once_walks_as_quiet_for(seed: int, per: int) -> None:
    rng = np.random.default_rng(seed)
    step = float(rng.choice([1.0, 60.0, 0.37, 1e5, 2.0**25, 2.0**27]))
    if seed % 2:  # monotone: yes below a threshold anywhere from below the step to past the horizon
        cut = float(np.exp(rng.uniform(-2.0, math.log(2.0**27))))

        def holds(d: float) -> bool:
            return d < cut
    else:  # not monotone: an answer per trial time, drawn once
        seen: dict[float, bool] = {}
        p = float(rng.uniform(0.5, 0.97))

        def holds(d: float) -> bool:
            if d not in seen:
                seen[d] = bool(rng.random() < p)
            return seen[d]

    want = quiet_for(holds, step)
    asked: list[int] = []

    def holds_at(ds: np.ndarray) -> np.ndarray:
        asked.append(ds.size)
        assert ds.size <= max(per, 1) or ds.size == 15
        assert len(set(ds.tolist())) == ds.size  # no time asked twice in a call
        return np.array([holds(float(d)) for d in ds])

    assert quiet_for_many(holds_at, step, per) == want
    for _ in range(4):  # with guessed stops (right, wrong, out of range): the same D
        guess = tuple(int(g) for g in rng.integers(-2, 30, int(rng.integers(1, 4))))
        if rng.random() < 0.5:
            guess = (doubling_stop(want, step),) + guess
        assert quiet_for_many(holds_at, step, per, guess) == want


def test_many_at_once_reaches_every_outcome() -> None:
    """The cases above cover 0, the horizon and the halvings (not a vacuous comparison)."""
    outs = set()
    for cut in (0.5, 60.0 * 3.3, 1e6, 2.0**27):
        d = quiet_for_many(lambda ds, c=cut: ds < c, 60.0, 32)
        outs.add(0.0 if d == 0 else "top" if d * 2 > _WAKE_HORIZON else "mid")
    assert outs == {0.0, "top", "mid"}


def _book(rng: np.random.Generator, names: list[str]) -> TenantBook:
    return TenantBook(shares={}, received={u: float(rng.uniform(0, 1e6)) for u in names},
                      entitled={u: float(rng.uniform(0, 1e6)) * float(rng.random() < 0.9) for u in names},
                      held={u: float(rng.integers(0, 8)) for u in names},
                      rate={u: float(rng.uniform(0, 8)) * float(rng.random() < 0.8) for u in names})


@pytest.mark.parametrize("seed", range(10))
def test_bound_rows_are_the_book_moved_on(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [f"t{k}" for k in range(int(rng.integers(2, 16)))]
    book = _book(rng, names)
    users = [names[int(rng.integers(len(names)))] for _ in range(30)] + names[:2]
    slack, weight, gpus, slot = 0.05, 10.0, 32, 60.0
    bound = TenantBound(book, users, weight, slack, gpus, slot)
    ds = np.array([60.0 * 2.0**i for i in range(20)] + [float(rng.uniform(0, 1e7)) for _ in range(5)])
    ent, y1, floor, scale = bound._at_many(ds)
    per = bound.per_gpu_many(ds)
    for i, d in enumerate(ds.tolist()):
        later = book.at(d)
        e = [later.entitled.get(k, 0.0) for k in bound.names]
        y = [later.shortfall(k, slack, gpus * slot) for k in bound.names]
        assert ent[i].tolist() == e
        assert y1[i].tolist() == y
        least = min(min(bound.y0.tolist()), min(y))
        assert floor[i] == least
        sc = weight * (sum(e) / len(e)) / float(gpus * gpus)
        assert scale[i] == sc
        want = [sc * max(0.0, max(a, b) - least) for a, b in zip(bound.y0.tolist(), y)]
        assert per[i].tolist() == want
        assert bound.per_gpu(d).tolist() == want


def _wake_one_at_a_time(pol: LyapunovPolicy, state: SlotState, s_one: np.ndarray, s_multi: np.ndarray, arr: dict,
                        q: float, z: float) -> float:
    """`LyapunovPolicy._wake_at_tenants` testing one trial time at a time (as it was written before
    it asked about many at once), with the bound written out in Python floats per tenant."""
    users = [w.user for w in state.waiting]
    book = state.tenants
    assert book is not None
    n, k = len(state.waiting), s_one.shape[1]
    s = np.concatenate([s_one, s_multi], axis=1)
    ok = np.isfinite(s)
    if not ok.any():
        return math.inf
    vtheta = pol.V * (q + z)
    if vtheta <= 0:
        return float(state.now)
    g = np.concatenate([np.arange(1, k + 1), np.arange(1, k + 1)]).astype(float)
    tc = arr.get("tenant_credit")
    given = tc[:, None] * np.concatenate(arr["tenant_gpus"], axis=1) if tc is not None else 0.0
    base = np.where(ok, s - given, -1.0)
    gain = (pol.q_weight * q * arr["credit"] + z * pol._z_credit(arr["wait"], state.slot_len))[:, None]
    pen = np.where(ok, (gain - base) / vtheta, 0.0)
    b = z + n * (arr["wait"][:, None] + state.slot_len) - pol.V * n * pen
    total = max(1, sum(state.free) + sum(r.gpus for r in state.running))
    names = sorted(set(users))
    pad = total * state.slot_len
    y0 = [book.shortfall(u, pol.tenant_slack, pad) for u in names]
    col = {u: i for i, u in enumerate(names)}
    rows, cols = np.nonzero(ok)
    base_f, b_f, g_f = base[rows, cols], b[rows, cols], g[cols]
    who_f = np.array([col[users[r]] for r in rows.tolist()], dtype=np.intp)

    def per_gpu(d: float) -> np.ndarray:
        later = book.at(d)
        y1 = [later.shortfall(u, pol.tenant_slack, pad) for u in names]
        floor = min(min(y0), min(y1))
        ebar = sum(later.entitled.get(u, 0.0) for u in names) / len(names)
        scale = pol.tenant_weight * ebar / float(total * total)
        return np.array([scale * max(0.0, max(a, c) - floor) for a, c in zip(y0, y1)])

    def holds(d: float) -> bool:
        c = pol.V * (q + z + n * d) * per_gpu(d)
        top = np.maximum(base_f, base_f + b_f * d + n * d * d) + c[who_f] * g_f
        return not bool((top > 0).any())

    return state.now + quiet_for(holds, state.slot_len)


def _slot(seed: int) -> tuple:
    """A random slot where nothing started: its scores (<= 0 at a spread of scales, many not
    allowed, some turning positive within a slot, some never), the arrays the search reads, Q, Z."""
    rng = np.random.default_rng(seed)
    users = int(rng.integers(2, 7))
    names = [f"t{u}" for u in range(users)]
    n = int(rng.integers(2, 120))
    waiting = tuple(WaitingJob(job_id=str(i), submit_time=float(i), work=1e4, run_one_node=np.full(K, 1e4),
                               run_multi_node=np.full(K, 1e4), requested_gpus=1, user=names[(i * 7 + seed) % users])
                    for i in range(n))
    state = SlotState(now=5e5, slot_len=60.0, free=(1, 0, 0, 0), gpus_per_node=GPN, waiting=waiting,
                      running=(RunningJob("r", NODES * GPN - 1, ((0, 1),), 0.0, math.inf),), tenants=_book(rng, names))
    s = -(10.0 ** rng.uniform(2, 20)) * rng.uniform(0.5, 1.0, (n, 2 * K))
    s[rng.random((n, 2 * K)) < 0.6] = -np.inf
    arr = {"tenant_codes": None, "credit": rng.uniform(0, 1e4, n), "wait": rng.uniform(0, 1e5, n)}
    if seed % 3:  # a credit already in the scores
        arr["tenant_credit"] = rng.uniform(0, 1e-2, n)
        arr["tenant_gpus"] = (rng.uniform(0, K, (n, K)), rng.uniform(0, K, (n, K)))
    q, z = float(rng.uniform(0, 1e6)), float(rng.uniform(0, 1e7))
    return state, s[:, :K].copy(), s[:, K:].copy(), arr, q, z


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_tenant_wake_up_is_the_one_at_a_time_search(seed: int) -> None:
    pol = LyapunovPolicy()
    slot = _slot(seed)
    assert pol._wake_at_tenants(*slot) == _wake_one_at_a_time(pol, *slot)


def test_tenant_wake_up_cases_spread() -> None:
    """The random slots above end before a slot, in the halvings and at the horizon (not a vacuous
    comparison)."""
    seen = set()
    for seed in SEEDS:
        state, *rest = _slot(seed)
        d = LyapunovPolicy()._wake_at_tenants(state, *rest) - state.now
        seen.add("now" if d == 0 else "top" if 2 * d > _WAKE_HORIZON else "mid")
    assert seen == {"now", "mid", "top"}


@pytest.mark.parametrize("seed", range(20))
def test_bound_mean_entitlement_is_pythons_sum(seed: int) -> None:
    """`TenantBound._at_many`'s mean entitlement per trial time is Python's sum of the row over
    its length (np.cumsum there, left to right, before 3.12), and its floor Python's min, to the
    bit: many tenants of very different entitlements, where the order of the additions shows."""
    rng = np.random.default_rng(seed)
    names = [f"t{k}" for k in range(int(rng.integers(9, 40)))]
    book = TenantBook(shares={}, received={u: float(10.0 ** rng.uniform(0, 9)) for u in names},
                      entitled={u: float(10.0 ** rng.uniform(0, 9)) * float(rng.random() < 0.9) for u in names},
                      held={u: float(rng.integers(0, 8)) for u in names},
                      rate={u: float(rng.uniform(0, 8)) * float(rng.random() < 0.8) for u in names})
    bound = TenantBound(book, names, 10.0, 0.05, 32, 60.0)
    ds = np.array([60.0 * 2.0**i for i in range(22)] + [float(rng.uniform(0, 1e7)) for _ in range(15)])
    ent, y1, floor, scale = bound._at_many(ds)
    for i, row in enumerate(ent.tolist()):
        assert scale[i] == 10.0 * (sum(row) / len(row)) / float(32 * 32)
        assert floor[i] == min(bound._y0_least, min(y1[i].tolist()))


def test_tenant_wake_up_with_the_last_stop_guessed() -> None:
    """One policy over many slots (each search guesses where the last one stopped): each wake-up
    is the one-at-a-time search's, and guesses were right and wrong."""
    pol = LyapunovPolicy()
    right = wrong = 0
    for seed in list(SEEDS) * 2:
        slot = _slot(seed)
        before = pol._wake_guess
        got = pol._wake_at_tenants(*slot)
        assert got == _wake_one_at_a_time(pol, *slot)
        if before and pol._wake_guess:
            stop = pol._wake_guess[0]
            right += stop in before
            wrong += stop not in before
    assert right and wrong
