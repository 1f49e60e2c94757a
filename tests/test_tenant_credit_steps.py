"""Two steps of lyapunov's tenant credit written for speed, checked against their plain forms:
the waiting tenants in order of first appearance (`LyapunovPolicy._tenant_index`: the order in
which ``set(users)`` is built, which the credit's float sums walk) and the GPUs a start's credit
counts for (`repaying_gpus`, 0 wherever the run is not finite, NaN included)."""

from __future__ import annotations

import numpy as np
import pytest

from lyasched.policy.lyapunov import LyapunovPolicy, repaying_gpus


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
    want = list(dict.fromkeys(codes.tolist()))
    assert order.tolist() == want
    assert got == [names[c] for c in want]
    assert pol._tenant_index(codes)[0] is order  # the same slot's second call: memoised


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
