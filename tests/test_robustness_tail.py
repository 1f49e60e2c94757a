"""benchmarks/robustness.py: what lyapunov's misses against the oracle bought in the tail."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import robustness as R  # noqa: E402


def _row(vs_oracle: float, wait: tuple[float, float], sd: tuple[float, float]) -> dict:
    return {"vs_oracle": vs_oracle, "max_wait_s": {"lyapunov": wait[0], "sjf-oracle": wait[1]},
            "p99_slowdown": {"lyapunov": sd[0], "sjf-oracle": sd[1]}}


def test_tail_trade_counts_only_the_oracle_misses():
    rows = [_row(1.20, (50.0, 100.0), (30.0, 10.0)),  # a miss that bounded the longest wait
            _row(1.10, (300.0, 100.0), (5.0, 10.0)),  # a miss with a longer wait
            _row(1.00, (1.0, 100.0), (1.0, 10.0))]  # met: not counted
    t = R.tail_trade(rows)
    assert t["oracle_misses"] == 2 and t["max_wait_lower"] == 1 and t["p99_slowdown_lower"] == 1
    assert t["median_max_wait_vs_oracle"] == 1.75 and t["median_p99_slowdown_vs_oracle"] == 1.75
    assert R.tail_trade(rows, over=1.5)["oracle_misses"] == 0


def test_run_one_reports_the_tail_per_policy():
    w = R.seed_round("design", [0])[0]
    r = R.run_one(w, R.POLICIES)
    for p in R.POLICIES:
        assert r["max_wait_s"][p] >= 0 and r["p99_slowdown"][p] >= 1
