"""benchmarks/goodput.py: its workloads, the fixed-batch baseline's jobs and the --json shape."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))

import goodput as B  # noqa: E402

from lyasched.sim.synth import synth_workload  # noqa: E402
from lyasched.sim.workloads import seed_workload  # noqa: E402

ROOT = Path(__file__).parent.parent


def test_fixed_strips_only_the_opt_in():
    w = synth_workload("synth:adaptive,jobs=30", 2)
    fixed = B.fixed(w.jobs)
    assert any(j.adaptive is not None for j in w.jobs) and all(j.adaptive is None for j in fixed)
    assert [(j.job_id, j.global_batch, j.iterations, j.submit_time) for j in fixed] == \
           [(j.job_id, j.global_batch, j.iterations, j.submit_time) for j in w.jobs]
    # the same spec with no job adaptive: the baseline replays exactly today's workload
    assert fixed == synth_workload("synth:adaptive,jobs=30,adaptive=0", 2).jobs


def test_mix_adaptive_opts_in_a_share_and_changes_nothing_else():
    w = seed_workload("seed-small-scattered", 0)
    mixed = B.mix_adaptive(w.jobs, 0)
    share = sum(j.adaptive is not None for j in mixed) / len(mixed)
    assert 0.3 < share < 0.7
    assert B.fixed(mixed) == tuple(w.jobs)
    assert B.mix_adaptive(w.jobs, 0) == mixed and B.mix_adaptive(w.jobs, 1) != mixed


def test_heldout_and_design_sets_are_disjoint():
    design = {w["name"] for w in B.workloads(True, "design")}
    held = {w["name"] for w in B.workloads(True, "heldout")}
    assert design and held and not design & held
    assert all(w["set"] == "heldout" for w in B.workloads(True, "heldout"))


def test_run_one_gives_every_ratio_and_the_bound():
    w = B.family_row(B.FAMILY, 1.0, 0, "design", jobs=16)
    r = B.run_one(w)
    assert set(r["avg_jct_s"]) == {"goodput", "pollux", "elastic", "tiresias"}
    for k in B.RATIOS:
        assert r[k] == r["avg_jct_s"]["goodput"] / r["avg_jct_s"][k[3:]]
    # no policy beats the mean of each job's best run alone (the bound is that over the other's JCT)
    assert all(v >= r["bound_s"]["adaptive"] * (1 - 1e-9) for v in (r["avg_jct_s"]["goodput"], r["avg_jct_s"]["pollux"]))
    assert r["bound_s"]["adaptive"] <= r["bound_s"]["fixed"] * (1 + 1e-9)  # choosing the batch never slows a job alone


def test_a_replay_past_the_wall_limit_is_listed_without_figures():
    w = B.family_row(B.FAMILY, 1.0, 0, "design", jobs=8)
    r = B.run_one(w, wall_limit_s=0.0)
    assert r["timed_out"] == [label for label, _, _ in B.RUNS] and r["avg_jct_s"] == {}
    assert not any(k in r for k in B.RATIOS)
    ok = B.run_one(w, B.RUNS[:1] + B.RUNS[2:3])  # goodput and elastic only
    worst, med = B.summary([r, ok])
    assert set(worst) == set(med) == {"vs_elastic"} and worst["vs_elastic"] == ok["vs_elastic"]


def test_json_shape_on_a_tiny_run():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "goodput.py"), "--quick", "--only", "design",
                          "--loads", "1", "--family-only", "--jobs", "12", "--json"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert set(d) >= {"workloads", "worst", "median", "sets"}
    assert set(d["worst"]) == set(d["median"]) == {"vs_pollux", "vs_elastic", "vs_tiresias"}
    assert len(d["workloads"]) == 1 and d["workloads"][0]["family"] and d["workloads"][0]["jobs"] == 12
    assert "design/family/load 1" in d["sets"]
    assert "[1/1" in out.stderr  # progress on stderr


def test_bad_loads_are_one_line_errors():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "goodput.py"), "--loads", "x"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "--loads" in out.stderr and out.stderr.strip().count("\n") == 0


def test_the_wide_shape_is_held_out_in_rows_of_its_own_and_changes_only_adaptive_jobs_gpus():
    held = B.workloads(False, "heldout", family_only=True)
    wide = [w for w in held if w["wide"]]
    assert [w["load"] for w in wide] == list(B.LOADS) and not any(w["family"] for w in wide)
    assert not any(w["wide"] for w in B.workloads(False, "design"))
    # ad_nodes (default 1: today's workloads) lifts only the adaptive jobs' GPU cap, to 4 nodes
    a = synth_workload(B.FAMILY_WIDE + ",jobs=40", 7)
    b = synth_workload(B.FAMILY + ",jobs=40", 7)
    assert synth_workload(B.FAMILY + ",jobs=40,ad_nodes=1", 7).jobs == b.jobs
    for x, y in zip(a.jobs, b.jobs):
        want = max(y.max_gpus, 16) if y.adaptive is not None else y.max_gpus
        assert x.max_gpus == want and replace(x, max_gpus=y.max_gpus) == y
    assert any(x.max_gpus > y.max_gpus for x, y in zip(a.jobs, b.jobs))


def test_policy_names_the_goodput_run_and_a_bad_name_is_a_one_line_error():
    args = [sys.executable, str(ROOT / "benchmarks" / "goodput.py"), "--quick", "--only", "design", "--loads", "1",
            "--family-only", "--jobs", "12", "--json"]
    runs = {p: json.loads(subprocess.run([*args, "--policy", p], capture_output=True, text=True, timeout=600,
                                         cwd=ROOT).stdout)["workloads"][0]["avg_jct_s"] for p in ("fifo", "pollux")}
    assert runs["pollux"]["goodput"] == runs["pollux"]["pollux"] == runs["fifo"]["pollux"]
    assert runs["fifo"]["goodput"] != runs["fifo"]["pollux"]  # the goodput run is fifo's here
    out = subprocess.run([*args, "--policy", "nope"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 2 and "--policy" in out.stderr and out.stderr.strip().count("\n") == 0
