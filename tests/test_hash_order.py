"""The tenant terms sum over sets of tenant names, whose order follows PYTHONHASHSEED: a replay
run twice (or the service restarted) must not see other bits. Each case runs in fresh
interpreters under several hash seeds and compares the printed floats exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
from types import SimpleNamespace
from lyasched.policy.fairshare import fairshare_factors
from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.tenants import TenantBook

names = [f"tenant-{i}" for i in range(24)]
# magnitudes 1e-3 .. 1e9: a plain float sum over them depends on the order it walks
ent = {k: (i * 7919 % 97 + 0.1) * 10.0 ** (i % 13 - 3) for i, k in enumerate(names)}
rec = {k: v * (0.3 + (i % 5) * 0.2) for i, (k, v) in enumerate(ent.items())}
shares = {k: 1.0 + (i % 7) / 3.0 for i, k in enumerate(names)}
usage = {k: v * 1.7 for k, v in rec.items()}
book = TenantBook(shares, rec, ent, usage=usage)
pol = LyapunovPolicy()
out = pol._tenants_behind(SimpleNamespace(tenants=book, slot_len=60.0), names, 64)
print(repr(sorted(out.items())))
print(repr(list(fairshare_factors(book, names))))
"""


def _run(seed: int) -> str:
    env = dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


def test_tenant_terms_do_not_depend_on_the_hash_seed() -> None:
    outs = {_run(seed) for seed in (0, 1, 2, 3, 4, 5, 6, 7)}
    assert len(outs) == 1, f"{len(outs)} different results over 8 hash seeds"
