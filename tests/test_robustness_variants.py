"""benchmarks/experiments/robustness_variants.py: --noise-seeds averages each policy over simulator seeds."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent
SCRIPT = REPO / "benchmarks" / "experiments" / "robustness_variants.py"


def _run(tmp_path: Path, seeds: str) -> list[dict]:
    out = tmp_path / f"rows-{seeds.replace(',', '_')}.json"
    subprocess.run([sys.executable, str(SCRIPT), "--sets", "design", "--quick", "--match", "seed-large-bursty seed 0",
                    "--noise-seeds", seeds, "--json", str(out), "", "lyapunov.V=3"],
                   capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.read_text())


def test_noise_seeds_average_every_policy_over_the_seeds(tmp_path):
    one, other, both = _run(tmp_path, "0"), _run(tmp_path, "1"), _run(tmp_path, "0,1")
    assert [r["variant"] for r in both] == [r["variant"] for r in one] == [r["variant"] for r in other] == ["", "lyapunov.V=3"]
    for a, b, m in zip(one, other, both):
        assert m["noise_seeds"] == [0, 1] and a["name"] == b["name"] == m["name"]
        for k in ("lyapunov", "backfill", "optimus", "sjf-oracle", "tiresias"):
            assert abs(m[k] - (a[k] + b[k]) / 2) <= 1e-9 * m[k]
    assert one[0]["lyapunov"] != other[0]["lyapunov"]  # another seed is another draw


def test_bad_noise_seeds_is_one_line_and_exit_2():
    p = subprocess.run([sys.executable, str(SCRIPT), "--noise-seeds", "0,0", ""], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--noise-seeds" in p.stderr
