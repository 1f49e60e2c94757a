"""benchmarks/experiments/elastic_bands.py: the per-band figures and the bound on removing short jobs' waits,
fed records by hand, and the script end to end on a small seed group."""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks" / "experiments"))

import elastic_bands as B  # noqa: E402


@dataclass
class Rec:
    best_true_run: float
    wait: float
    run_s: float

    @property
    def jct(self) -> float:
        return self.wait + self.run_s


RECS = [Rec(300, 100, 300), Rec(1200, 900, 1500), Rec(7200, 0, 8000), Rec(50000, 20000, 60000)]


def test_bands_split_by_best_run_with_shares_of_the_total():
    b = B.bands(RECS)
    assert [v["jobs"] for v in b.values()] == [1, 1, 1, 1]
    assert b["10-60m"] == {"jobs": 1, "wait_s": 900, "run_s": 1500, "jct_share": pytest.approx(2400 / 90800)}
    assert sum(v["jct_share"] for v in b.values()) == pytest.approx(1.0)


def test_the_bound_removes_only_the_waits_of_jobs_under_the_cut():
    assert B.without_short_waits(RECS, 36000) == pytest.approx((300 + 1500 + 8000 + 80000) / 4)
    assert B.without_short_waits(RECS, 600) == pytest.approx((300 + 2400 + 8000 + 80000) / 4)
    assert B.without_short_waits(RECS, 1e9) == pytest.approx(sum(r.run_s for r in RECS) / 4)


def test_script_on_a_seed_group_prints_json(capsys):
    assert B.main(["--sets", "design", "--match", "seed-small-bursty seed 0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (w,) = out["workloads"]
    assert set(w["policies"]) == {"tiresias", "elastic"} and 0 < w["bound"] <= w["ratio"]
    assert sum(v["jobs"] for v in w["policies"]["elastic"]["bands"].values()) > 0


def test_bad_arguments_exit_2():
    with pytest.raises(SystemExit) as e:
        B.main(["--policies", "elastic"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        B.main(["--sets", "design", "--match", "no such workload"])
    assert e.value.code == 2


def test_in_target_reads_the_load_off_each_kind_of_name():
    import elastic_sweep as S
    assert S.in_target("philly[75000:+3000] load 1.2") and not S.in_target("philly[75000:+3000] load 0.6")
    assert S.in_target("synth:mixed160,load=0.9 seed 83") and not S.in_target("synth:mixed160,load=0.5 seed 72")
    assert not S.in_target("no load here")
    assert "heldout8" in S.SETS


def test_run_draws_averages_each_policy_over_the_simulator_draws():
    """elastic_sweep.run_draws: one draw is run_one itself; several average each policy's JCT
    (ratios between the means) and keep each draw's ratios; bad --noise-seeds are one line."""
    import elastic_sweep as S

    from lyasched.sim.synth import synth_workload

    sw = synth_workload("synth:jobs=40,nodes=4,one_gpu=0.5,max_req=8,load=1.0", 3)
    w = dict(name=sw.name, set="t", jobs=sw.jobs, cluster=sw.cluster, end_fraction=sw.end_fraction, seed=3)
    one = S.run_one(w, {})
    same = S.run_draws(w, {}, (0,))
    assert (same["avg_jct_s"], same["vs_lyapunov"], same["vs_tiresias"]) == (one["avg_jct_s"], one["vs_lyapunov"], one["vs_tiresias"])
    other = S.run_one({**w, "sim_seed": 3 + S.NOISE_STRIDE}, {})
    two = S.run_draws(w, {}, (0, 1))
    for p in S.POLICIES:
        assert two["avg_jct_s"][p] == pytest.approx((one["avg_jct_s"][p] + other["avg_jct_s"][p]) / 2)
    assert two["vs_lyapunov"] == pytest.approx(two["avg_jct_s"]["elastic"] / two["avg_jct_s"]["lyapunov"])
    assert two["draws_vs_tiresias"] == [one["vs_tiresias"], other["vs_tiresias"]]
    assert one["avg_jct_s"] != other["avg_jct_s"]  # the draw changes the estimates' errors
    import robustness as R

    assert R.noise_seeds("0,2") == [0, 2]
    for bad in ("", "1,1", "-1", "x"):
        with pytest.raises(ValueError, match="--noise-seeds"):
            R.noise_seeds(bad)


def test_reference_adds_srpt_oracle_side_by_side():
    """elastic_sweep --reference: the oracles in the same run, the better one's ratio to tiresias per
    workload and over draws, and the summary's count of workloads where even it reaches 0.90x tiresias."""
    import elastic_sweep as S

    from lyasched.sim.synth import synth_workload

    sw = synth_workload("synth:jobs=40,nodes=4,one_gpu=0.5,max_req=8,load=1.0", 3)
    w = dict(name=sw.name + " load 1.0", set="t", jobs=sw.jobs, cluster=sw.cluster, end_fraction=sw.end_fraction, seed=3)
    plain, ref = S.run_one(w, {}), S.run_one(w, {}, reference=True)
    assert "ref_vs_tiresias" not in plain and set(ref["avg_jct_s"]) == {*S.POLICIES, "srpt-oracle", "sjf-oracle"}
    assert ref["vs_tiresias"] == plain["vs_tiresias"]  # the other policies' runs are untouched
    jct = ref["avg_jct_s"]
    assert ref["srpt-oracle_vs_tiresias"] == jct["srpt-oracle"] / jct["tiresias"]
    assert ref["ref_vs_tiresias"] == min(jct["srpt-oracle"], jct["sjf-oracle"]) / jct["tiresias"]
    two = S.run_draws(w, {}, (0, 1), reference=True)
    jct = two["avg_jct_s"]
    assert two["ref_vs_tiresias"] == pytest.approx(min(jct["srpt-oracle"], jct["sjf-oracle"]) / jct["tiresias"])
    rows = [dict(ref, vs_tiresias=0.95, ref_vs_tiresias=0.85), dict(ref, vs_tiresias=0.85, ref_vs_tiresias=0.95),
            dict(ref, vs_tiresias=0.80, ref_vs_tiresias=0.80)]
    assert S.summary(rows)["reference"] == {"worst": 0.95, "median": 0.85, "reaches_0.90": 2,
                                            "elastic_misses_where_reached": 1}
    assert "reference" not in S.summary([plain])


def test_match_keeps_only_named_workloads_and_refuses_none(monkeypatch, capsys):
    import elastic_sweep as S

    monkeypatch.setattr(sys, "argv", ["elastic_sweep.py", "--only", "design", "--match", "no such workload"])
    with pytest.raises(SystemExit) as e:
        S.main()
    assert e.value.code == 2 and "no workload of the set matches" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["elastic_sweep.py", "--only", "design", "--match", "seed-small-bursty seed 0|nope",
                                      "--json"])
    S.main()
    out = json.loads(capsys.readouterr().out)
    assert [w["name"] for w in out["workloads"]] == ["seed-small-bursty seed 0"]
