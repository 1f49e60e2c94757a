"""benchmarks/experiments/philly_order.py on a small window of the shared Philly trace."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
SCRIPT = REPO / "benchmarks" / "experiments" / "philly_order.py"
TRACE = REPO.parent / "shared" / "data" / "traces" / "philly.csv"


@pytest.mark.skipif(not TRACE.exists(), reason="no shared Philly trace")
def test_ratios_per_seed_and_the_slot_comparison(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT), "--trace", str(TRACE), "--windows", "40000@1.0", "--jobs", "200",
                        "--seeds", "2", "--diff", "--json"], capture_output=True, text=True, timeout=600, check=True)
    (row,) = json.loads(p.stdout)
    assert row["window"] == "philly[40000:+200] load 1.0" and [s["seed"] for s in row["seeds"]] == [0, 1]
    assert all(s["lyapunov_vs_oracle"] > 0 and s["sjf_estimate_vs_oracle"] > 0 for s in row["seeds"])
    d = row["diff"]
    assert 0 <= d["slots_differing"] <= d["slots"] and d["short_jobs"] <= 200
    assert d["only_lyapunov"] + d["only_sjf_estimate"] >= d["slots_differing"]  # a differing slot starts someone the other does not


def test_bad_windows_and_params_are_one_line_and_exit_2():
    for extra in (["--windows", "4x"], ["--param", "lyapunov.V=abc"], ["--seeds", "0"]):
        p = subprocess.run([sys.executable, str(SCRIPT), "--trace", str(TRACE), *extra], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and p.stderr.startswith("error:")
