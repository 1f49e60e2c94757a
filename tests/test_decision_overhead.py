"""benchmarks/decision_overhead.py on small sizes: the states it times are what it says."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from lyasched.policy.movable import MovableJob

REPO = Path(__file__).parent.parent
SCRIPT = REPO / "benchmarks" / "decision_overhead.py"


def _module():
    spec = importlib.util.spec_from_file_location("decision_overhead", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_running_jobs_fill_exactly_the_busy_gpus():
    mod = _module()
    for full in (False, True):
        st = mod.build(200, 16, 4, 16, 0, running=True, full=full)
        assert (sum(st.free) == 0) == full
        per_node = [0] * 16
        for r in st.running:
            assert isinstance(r, MovableJob) and r.preemptible and len(r.placement) == 1
            node, g = r.placement[0]
            assert g == r.gpus == r.requested_gpus
            per_node[node] += g
            assert 0 < r.work_left < r.remaining_one_node[0] * 10 and r.predicted_end > st.now
        assert [f + b for f, b in zip(st.free, per_node)] == [4] * 16
    assert mod.build(200, 16, 4, 16, 0).running == ()


def test_elastic_on_a_full_cluster_json():
    out = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "300", "--nodes", "16", "--repeats", "2",
                          "--policy", "elastic", "--running", "--full", "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    d = json.loads(out.stdout)
    assert d["policy"] == "elastic" and d["free_gpus"] == 0 and d["running"] > 0 and d["target_ms"] is None
    assert d["median_ms"] > 0


def test_param_reaches_the_policy_and_a_bad_one_is_one_line():
    out = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "200", "--nodes", "16", "--repeats", "2", "--policy", "elastic",
                          "--running", "--param", "elastic.max_searches=0", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["params"] == {"max_searches": 0}
    bad = subprocess.run([sys.executable, str(SCRIPT), "--policy", "elastic", "--param", "elastic.max_searches=x"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "max_searches" in bad.stderr


def test_against_another_tree_times_both_and_compares_decisions():
    out = subprocess.run([sys.executable, str(SCRIPT), "--jobs", "300", "--nodes", "16", "--repeats", "2",
                          "--against", str(REPO), "--rounds", "2", "--json"],
                         capture_output=True, text=True, timeout=300, check=True)
    d = json.loads(out.stdout)
    assert d["rounds"] == 2 and len(d["ratio_per_round"]) == 2 and d["ratio"] > 0
    assert d["same_decisions"] is True  # the same tree twice: the digest is deterministic
    assert set(d["median_ms"]) == {"this", "against"}
    bad = subprocess.run([sys.executable, str(SCRIPT), "--against", str(REPO / "docs")], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "no lyasched package" in bad.stderr


def test_the_digest_tells_different_decisions_apart():
    runs = [json.loads(subprocess.run([sys.executable, str(SCRIPT), "--jobs", "300", "--nodes", "16", "--repeats", "1",
                                       "--V", v, "--json"], capture_output=True, text=True, check=True).stdout)
            for v in ("5", "5", "0.01")]
    assert runs[0]["decisions_sha1"] == runs[1]["decisions_sha1"] != runs[2]["decisions_sha1"]
