"""benchmarks/whatif_speed.py at a small size: its synthetic history holds every kind of record
and the script reports its figure (no timing asserted here: the script prints it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "whatif_speed.py"


def test_small_synthetic_history_json(tmp_path):
    keep = tmp_path / "sacct.txt"
    r = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "3000", "--keep", str(keep), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    jobs = out["jobs"]
    assert jobs["gpu"] > 2000 and jobs["cpu_only"] > 0 and jobs["cancelled_before_start"] > 0
    assert jobs["requeued"] > 0 and jobs["still_running"] + jobs["pending"] > 0
    assert sum(jobs[k] for k in ("gpu", "cpu_only", "cancelled_before_start", "still_running", "pending",
                                 "never_started", "other_partition")) == jobs["total"] == 3000
    assert out["cluster"] == "64x8"  # inferred from the records: the generator's site
    assert out["parse_and_lyapunov_s"] > 0 and out["policies"]["lyapunov"]["decide_calls"] > 0
    text = keep.read_text()
    assert text.startswith("JobID|User|Account|") and "gres/gpu:a100=" in text and "|REQUEUED|" in text
