"""benchmarks/experiments/elastic_skip.py: elastic with and without skipping inert slots, side by side."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, str(REPO / "benchmarks" / "experiments" / "elastic_skip.py")]


def test_same_outcomes_fewer_calls_on_a_seed_workload():
    out = subprocess.run(BENCH + ["--workload", "seed-large-bursty", "--max-jobs", "120", "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["identical"] is True and doc["checkpoints"] > 0
    assert doc["skipping"]["calls"] < doc["every_slot"]["calls"]


def test_a_bad_workload_is_one_line_and_exit_2():
    bad = subprocess.run(BENCH + ["--workload", "no-such-workload"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
