"""The tenant credit orders, it does not widen: a benchmark run with the credit's GPUs per start
capped so that it cannot change a job's GPU count (tried, not adopted; docs/experiments.md,
"Tenant credit that orders but does not widen").

    python benchmarks/experiments/tenant_width.py --mode top|flat BENCH [BENCH's own arguments]

BENCH is a benchmark module under benchmarks/ (fairness, liars, symmetric_tenants,
decision_digest), run as it is with `LyapunovPolicy._scores` wrapped (so elastic too):
* ``top``: each job's credited GPUs (`repaying_gpus`) at most those of the configuration its score
  without the credit ranks first: wider counts gain no credit, so the count is that score's;
* ``flat``: every allowed configuration of a job gets the credit of its most-credited one: the
  job's order among others as wide as it can be, its count again the no-credit score's.
"""

from __future__ import annotations

import os
import runpy
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from lyasched.policy.lyapunov import LyapunovPolicy  # noqa: E402

_ORIG = LyapunovPolicy._scores


def capped(g_one: np.ndarray, g_multi: np.ndarray, s_one: np.ndarray, s_multi: np.ndarray, mode: str):
    """The credited GPUs under ``mode``, from today's and the scores without the credit."""
    both = np.concatenate((s_one, s_multi), axis=1)
    gs = np.concatenate((g_one, g_multi), axis=1)
    if mode == "top":
        cap = gs[np.arange(both.shape[0]), both.argmax(axis=1)]
        return np.minimum(g_one, cap[:, None]), np.minimum(g_multi, cap[:, None])
    top = np.where(np.isfinite(both), gs, 0.0).max(axis=1)[:, None]
    return np.where(np.isfinite(s_one), top, 0.0), np.where(np.isfinite(s_multi), top, 0.0)


def wrap(mode: str):
    def _scores(self, state, *a, **k):
        s_one, s_multi, q, z, arr = _ORIG(self, state, *a, **k)
        tc = arr.get("tenant_credit")
        if tc is None:
            return s_one, s_multi, q, z, arr
        g_one, g_multi = arr["tenant_gpus"]
        with np.errstate(invalid="ignore"):
            b_one, b_multi = s_one - tc[:, None] * g_one, s_multi - tc[:, None] * g_multi
            c_one, c_multi = capped(g_one, g_multi, b_one, b_multi, mode)
            s_one, s_multi = b_one + tc[:, None] * c_one, b_multi + tc[:, None] * c_multi
        s_one[~np.isfinite(b_one)] = -np.inf
        s_multi[~np.isfinite(b_multi)] = -np.inf
        return s_one, s_multi, q, z, {**arr, "tenant_gpus": (c_one, c_multi)}
    return _scores


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--mode" or args[1] not in ("top", "flat"):
        print("usage: tenant_width.py --mode top|flat BENCH [args]", file=sys.stderr)
        sys.exit(2)
    mode, bench, rest = args[1], args[2], args[3:]
    LyapunovPolicy._scores = wrap(mode)  # type: ignore[method-assign]
    sys.argv = [bench + ".py", *rest]
    runpy.run_path(os.path.join(HERE, "..", bench + ".py"), run_name="__main__")


if __name__ == "__main__":
    main()
