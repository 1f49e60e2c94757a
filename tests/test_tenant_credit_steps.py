"""Steps of lyapunov's tenant credit written for speed, checked against their plain forms:
the waiting tenants (`LyapunovPolicy._tenant_index`: in order of first appearance, the order in
which ``set(users)`` is built, for a `_tenants_behind` of an experiment; in code order for the
shipped one, which reads them in no order) and the GPUs a start's credit counts for
(`repaying_gpus`, 0 wherever the run is not finite, NaN included)."""

from __future__ import annotations

import numpy as np
import pytest

from lyasched.policy.lyapunov import LyapunovPolicy, repaying_gpus
from lyasched.policy.state import SlotState
from lyasched.policy.tenants import TenantBook


class _InOrder(LyapunovPolicy):
    """The shipped term, as an experiment that overrides it: its tenants in order of first appearance."""

    def _tenants_behind(self, state, users, total_gpus):  # type: ignore[no-untyped-def]
        return super()._tenants_behind(state, users, total_gpus)


@pytest.mark.parametrize("seed", range(30))
def test_tenant_index_is_first_appearance(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pol = LyapunovPolicy()
    names = [f"u{i}" for i in range(int(rng.integers(1, 40)))]
    pol._rows.tenant_names = names
    n = int(rng.integers(1, 3000))
    # skewed: a few tenants hold most jobs, some appear only late or not at all
    p = rng.dirichlet(np.full(len(names), 0.3))
    codes = rng.choice(len(names), size=n, p=p).astype(np.intp)
    order, got = pol._tenant_index(codes)
    assert order.tolist() == sorted(set(codes.tolist()))  # the shipped term: code order
    assert got == [names[c] for c in order.tolist()]
    assert pol._tenant_index(codes)[0] is order  # the same slot's second call: memoised
    exp = _InOrder()
    exp._rows.tenant_names = names
    order, got = exp._tenant_index(codes)
    want = list(dict.fromkeys(codes.tolist()))
    assert order.tolist() == want
    assert got == [names[c] for c in want]


@pytest.mark.parametrize("seed", range(40))
def test_tenant_credit_in_code_order_is_in_first_appearance_order(seed: int) -> None:
    """The credit and Y_k per waiting job, bit for bit, whichever order `_tenant_index` gives."""
    rng = np.random.default_rng(seed)
    names = [f"u{i}" for i in range(int(rng.integers(2, 30)))]
    ent = {k: float(rng.uniform(0, 1e7)) * (rng.random() < 0.9) for k in names}
    rec = {k: e * float(rng.uniform(0.3, 1.5)) for k, e in ent.items()}
    book = TenantBook({}, rec, ent)
    state = SlotState(now=1e6, slot_len=30.0, free=(0,), gpus_per_node=8, waiting=(), running=(), tenants=book)
    p = rng.dirichlet(np.full(len(names), 0.3))
    codes = rng.choice(len(names), size=int(rng.integers(1, 2000)), p=p).astype(np.intp)
    got = []
    for pol in (LyapunovPolicy(), _InOrder()):
        pol._rows.tenant_names = names
        credit = pol._tenant_credit(state, 3.7e5, 472, codes)
        owed = pol._owed(state, codes) if credit is not None else None
        got.append((None if credit is None else credit.tobytes(), None if owed is None else owed.tobytes()))
    assert got[0] == got[1]


@pytest.mark.parametrize("seed", range(10))
def test_repaying_gpus_is_the_masked_cap(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 400)), int(rng.integers(1, 17))
    run = rng.uniform(1.0, 1e5, (n, k))
    run[rng.random((n, k)) < 0.4] = np.inf
    run[rng.random((n, k)) < 0.05] = np.nan
    run[rng.random((n, k)) < 0.05] = 0.0
    owed = rng.uniform(0, 1e6, n) * (rng.random(n) < 0.8)
    g = np.arange(1, k + 1, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        cap = owed[:, None] / run
    cap[~np.isfinite(run)] = 0.0
    want = np.minimum(g[None, :], cap)
    assert repaying_gpus(g, owed, run).tobytes() == want.tobytes()



class _MethodBook(TenantBook):
    """A book whose shortfall is its method's call (as an experiment patching it would see)."""

    def shortfall(self, tenant: str, slack: float, pad: float) -> float:
        return super().shortfall(tenant, slack, pad)


@pytest.mark.parametrize("seed", range(40))
def test_tenants_behind_writes_out_the_shortfall(seed: int) -> None:
    """`_tenants_behind` through `TenantBook.shortfalls` (one loop): the credit, Y_k and the floor bit
    for bit as with the method called per tenant."""
    rng = np.random.default_rng(seed)
    names = [f"u{i}" for i in range(int(rng.integers(2, 30)))]
    ent = {k: float(rng.uniform(0, 1e7)) * (rng.random() < 0.8) for k in names}
    rec = {k: e * float(rng.uniform(0.3, 1.5)) + float(rng.uniform(0, 1e4)) for k, e in ent.items()}
    codes = rng.integers(0, len(names), size=int(rng.integers(1, 500))).astype(np.intp)
    got = []
    for cls in (TenantBook, _MethodBook):
        book = cls({}, rec, ent)
        state = SlotState(now=1e6, slot_len=30.0, free=(0,), gpus_per_node=8, waiting=(), running=(), tenants=book)
        pol = LyapunovPolicy()
        pol._rows.tenant_names = names
        credit = pol._tenant_credit(state, 3.7e5, 472, codes)
        owed = pol._owed(state, codes) if credit is not None else None
        got.append((None if credit is None else credit.tobytes(), None if owed is None else owed.tobytes(),
                    pol._tenant_floor, sorted(pol._tenant_y.items()) if credit is not None else None))
    assert got[0] == got[1]
