"""benchmarks/profile_repeatability.py: two measurements of the same profiles compared row by row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import profile_repeatability as rep  # noqa: E402

HEAD = "# measured by a test; cores=2 threads_per_rank=1\nplacement,local_bsz,step_time,sync_time\n"


def write(root: Path, app: str, rows: list[tuple[str, float, float]]) -> None:
    (root / app).mkdir(parents=True, exist_ok=True)
    (root / app / "placements.csv").write_text(HEAD + "".join(f"{p},{b},{t},0.0\n" for p, b, t in rows))


def test_rows_are_matched_on_placement_and_batch_and_split_by_gpus(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "m", [("1", 2, 0.010), ("1", 4, 0.020), ("2", 2, 0.030), ("3", 2, 0.040)])
    write(b, "m", [("1", 2, 0.011), ("1", 4, 0.020), ("2", 2, 0.024), ("4", 2, 0.050)])  # 4 x 2: not in a
    write(b, "only-b", [("1", 2, 0.010)])
    res = rep.compare(a, b)
    assert list(res["apps"]) == ["m"]
    one, multi = res["apps"]["m"]["one_gpu"], res["apps"]["m"]["multi_gpu"]
    assert one["rows"] == 2 and one["median_abs_rel_err"] == pytest.approx(0.05)
    assert multi["rows"] == 1 and multi["median_abs_rel_err"] == pytest.approx(0.2)
    assert res["overall"]["multi_gpu"]["rows"] == 1


def test_cli_json_and_a_clear_error_when_nothing_is_shared(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write(a, "m", [("1", 2, 0.010), ("2", 2, 0.020)])
    write(b, "m", [("1", 2, 0.012), ("2", 2, 0.020)])
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_repeatability.py"), str(a), str(b), "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["apps"]["m"]["one_gpu"]["median_abs_rel_err"] == pytest.approx(0.2)
    assert doc["apps"]["m"]["multi_gpu"]["median_abs_rel_err"] == pytest.approx(0.0)
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_repeatability.py"), str(a), str(tmp_path / "none")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: no <app>/placements.csv in both")
    write(tmp_path / "c", "m", [("8", 64, 0.5)])
    bad = subprocess.run([sys.executable, str(REPO / "benchmarks" / "profile_repeatability.py"), str(a), str(tmp_path / "c")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "share no row" in bad.stderr


def test_the_two_days_of_this_machine_measured_the_same_rows():
    """The data sets in the repo: the second day measured every row of the first (same apps, placements, batches)."""
    res = rep.compare(REPO / "benchmarks" / "data" / "profiles", REPO / "benchmarks" / "data" / "profiles-rerun")
    assert len(res["apps"]) == 9
    assert all(r["multi_gpu"]["rows"] == 12 and r["one_gpu"]["rows"] == 4 for r in res["apps"].values())
