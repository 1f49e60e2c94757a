import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "profile_accuracy.py"


def test_rejects_bad_process_counts():
    r = subprocess.run([sys.executable, str(SCRIPT), "--procs", "1,3", "--global-batch", "32"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "[3]" in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), "--models", "nosuch"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown model" in r.stderr


@pytest.mark.slow
def test_profile_calibrate_predict_measure_smoke(tmp_path):
    """The whole chain on the smallest model: profile, gloo calibration, DDP on 2 processes."""
    r = subprocess.run([sys.executable, str(SCRIPT), "--models", "mlp", "--procs", "2", "--global-batch", "16",
                        "--iters", "3", "--warmup", "1", "--rounds", "1", "--json"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    (row,) = doc["rows"]
    assert row["model"] == "mlp" and row["g"] == 2 and row["local_batch"] == 8
    assert row["comm_s"] > 0 and row["measured_s"] > 0
    # the prediction is the documented formula over the fitted pieces
    assert row["predicted_s"] == pytest.approx(row["cpu_share"] * row["compute_s"] + row["comm_s"])
    assert row["abs_rel_err"] == pytest.approx(abs(row["predicted_s"] / row["measured_s"] - 1))
    assert doc["overall"]["rows"] == 1 and doc["links"]["2"]["bandwidth"] > 0
