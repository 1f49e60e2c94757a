"""`lyasched replay` through click's CliRunner."""

from __future__ import annotations

import csv
import json
import os

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.policy import POLICIES, REFERENCES

TRACE = "submit_time,duration,num_gpus\n" + "".join(f"{i * 120},{600 + 300 * (i % 7)},{[1, 1, 2, 4][i % 4]}\n" for i in range(40))
KEYS = {"avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_wait_s", "max_wait_s", "makespan_s", "avg_slowdown", "p99_slowdown", "gpu_util", "jobs"}


def run(*args):
    return CliRunner().invoke(main, ["replay", *args])


@pytest.fixture
def trace(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text(TRACE)
    return str(p)


def test_json_shape(trace):
    r = run("--workload", trace, "--policies", "fifo,fixed-1", "--nodes", "2", "--gpus-per-node", "2", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    out = json.loads(r.stdout)  # exactly one JSON object
    assert out["workload"] == "trace.csv"
    assert set(out["policies"]) == {"fifo", "fixed-1"}
    for s in out["policies"].values():
        assert KEYS <= set(s) and s["jobs"] == 40
        assert s["avg_jct_s"] >= out["lower_bound"]["avg_jct_s"]
        assert 0 < s["gpu_util"] <= 1
        assert s["avg_slowdown"] >= 1
        assert s["p99_slowdown"] >= 1
    assert out["cluster"]["total_gpus"] == 4


def test_default_policies_all_and_table(trace):
    r = run("--workload", trace, "--nodes", "2", "--gpus-per-node", "2")
    assert r.exit_code == 0, r.output + r.stderr
    for name in POLICIES:
        assert (f"\n{name} " in r.stdout) == (name not in REFERENCES), name
    assert "lower bound" in r.stdout
    # a reference runs when named
    r = run("--workload", trace, "--nodes", "2", "--gpus-per-node", "2", "--policies", "srpt-oracle,tiresias")
    assert r.exit_code == 0 and "\nsrpt-oracle " in r.stdout, r.output + r.stderr


def test_out_dir_files(tmp_path):
    out = tmp_path / "out"
    r = run("-w", "seed-small-scattered", "--policies", "fixed-1,tiresias", "--out", str(out), "--seed", "3")
    assert r.exit_code == 0, r.output + r.stderr
    names = set(os.listdir(out))
    assert {"jobs_fixed-1.csv", "jobs_tiresias.csv", "summary.json", "jct_cdf.png", "queues.png", "utilization.png"} <= names
    rows = list(csv.DictReader(open(out / "jobs_fixed-1.csv")))
    assert len(rows) == json.load(open(out / "summary.json"))["policies"]["fixed-1"]["jobs"]
    assert all(float(x["jct_s"]) >= float(x["best_true_run_s"]) - 1e-3 for x in rows)
    for png in ("jct_cdf.png", "queues.png", "utilization.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_param_reaches_policy_and_changes_result():
    base = ["-w", "seed-small-bursty", "--policies", "lyapunov", "--json", "--max-jobs", "60"]
    a = json.loads(run(*base).stdout)
    b = run(*base, "--param", "lyapunov.V=100")
    assert b.exit_code == 0, b.output + b.stderr
    b = json.loads(b.stdout)
    assert b["params"] == {"lyapunov": {"V": 100}}
    assert a["policies"]["lyapunov"] != b["policies"]["lyapunov"]


def test_same_seed_same_output():
    args = ["-w", "seed-large-bursty", "--policies", "random,fifo", "--json", "--seed", "5", "--max-jobs", "50"]
    a, b = json.loads(run(*args).stdout), json.loads(run(*args).stdout)
    for p in ("random", "fifo"):
        for k in ("wall_s", "decide_s"):  # timings
            a["policies"][p].pop(k), b["policies"][p].pop(k)
    assert a == b


def test_trace_window_and_load(trace):
    r = run("-w", trace, "--policies", "fifo", "--start", "600", "--end", "2400", "--load", "0.5", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    out = json.loads(r.stdout)
    assert out["policies"]["fifo"]["jobs"] == 15  # submits 600..2280 every 120 s
    r = run("-w", trace, "--policies", "fifo", "--max-jobs", "7", "--json")
    assert json.loads(r.stdout)["policies"]["fifo"]["jobs"] == 7


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--policies", "fifo,nosuch"], "unknown policy nosuch"),
        (["--param", "fifo.V=3"], "has no parameter"),
        (["--param", "nokey=3"], "no replayed policy"),
        (["--param", "V"], "KEY=VALUE"),
        (["--policies", "lyapunov", "--param", "lyapunov.V=abc"], "lyapunov.V=abc: must be a number"),
        (["--policies", "lyapunov", "--param", "V=-1"], "must be a number in [0,"),
        (["--policies", "lyapunov", "--param", "V=nan"], "must be a number"),
        (["--policies", "lyapunov", "--param", "lyapunov.exact_limit=2.5"], "must be an integer"),
        (["--policies", "tiresias", "--param", "thresholds=10,5"], "ascending"),
        (["--policies", "optimus", "--param", "gain=fast"], "one of absolute, relative"),
        (["--end", "10", "--start", "20"], "--end"),
        (["--slot", "0"], "--slot"),
    ],
)
def test_bad_options_one_line(trace, args, needle):
    r = run("-w", trace, "--nodes", "2", "--policies", "fifo", *args) if "--policies" not in args else run("-w", trace, "--nodes", "2", *args)
    assert r.exit_code == 2
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_synthetic_workload_and_efficiency_columns():
    r = run("-w", "synth:jobs=40,nodes=2,cancel=0.3,fail=0.2", "--policies", "lyapunov,backfill", "--json")
    assert r.exit_code == 0, r.output + r.stderr
    out = json.loads(r.stdout)
    assert out["workload"].startswith("synth:") and out["jobs"] == 40
    for s in out["policies"].values():
        assert s["gpu_s_vs_best"] >= 1.0 - 1e-9
        assert 0 <= s["idle_fit_frac"] <= s["idle_wait_frac"] <= 1
        assert 0 <= s["fewer_gpus"] <= 1 and 0 <= s["more_gpus"] <= 1
    assert out["policies"]["backfill"]["fewer_gpus"] == out["policies"]["backfill"]["more_gpus"] == 0
    bad = run("-w", "synth:jobs=abc", "--policies", "fifo")
    assert bad.exit_code != 0 and "jobs='abc'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        (None, "no such file"),
        ("a,b\n1,2\n", "missing column"),
        ("submit_time,duration,num_gpus\n1,2,1\n3,4\n", "truncated"),
        ("submit_time,duration,num_gpus\n1,x,1\n", "bad duration"),
        ("submit_time,duration,num_gpus\n1,-2,1\n", "negative duration"),
    ],
)
def test_bad_trace_one_line_error(tmp_path, text, needle):
    p = tmp_path / "bad.csv"
    if text is not None:
        p.write_text(text)
    r = run("-w", str(p), "--policies", "fifo", "--out", str(tmp_path / "o"))
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("Error:")
    assert not (tmp_path / "o").exists()  # nothing half-done


def test_unknown_builtin():
    r = run("-w", "seed-medium", "--policies", "fifo")
    assert r.exit_code != 0 and "unknown workload" in r.stderr


def test_a_policy_leaving_jobs_unfinished_is_reported_not_fatal(tmp_path):
    """A 7-GPU request on two 4-GPU nodes: no layout holds it (one node, or k nodes x 7/k GPUs),
    so fifo blocks its queue on it for ever. fifo is reported as failed with the count (table and
    JSON), random's results are still there (it draws only counts the cluster can hold), exit 3."""
    p = tmp_path / "t.csv"
    p.write_text(TRACE.splitlines()[0] + "\n" + "".join(TRACE.splitlines(True)[1:11]) + "1300,600,7\n")
    args = ["-w", str(p), "-p", "random,fifo", "--nodes", "2", "--gpus-per-node", "4"]
    r = run(*args, "--json")
    assert r.exit_code == 3, r.output
    out = json.loads(r.stdout)
    assert out["policies"]["fifo"] == {"failed": True, "unfinished": 1,
                                       "error": "fifo: 1 of 11 jobs never finish (nothing runs or arrives, "
                                                "and the policy starts nothing)"}
    assert out["policies"]["random"]["avg_jct_s"] > 0 and out["policies"]["random"]["jobs"] == 11
    t = run(*args)
    assert t.exit_code == 3
    assert "FAILED: 1 of 11 jobs never finish" in t.stdout and "\nrandom " in t.stdout
    assert "Error: fifo: 1 of 11 jobs never finish" in t.stderr


def test_random_draws_only_counts_the_cluster_can_hold():
    """synth:adaptive on 4-GPU nodes: jobs may run on counts such as 7 that no layout holds;
    random draws among the others, so every job finishes."""
    r = run("-w", "synth:adaptive,load=1", "-p", "random", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["policies"]["random"]["jobs"] == 160
