"""Run-time estimates of plain jobs (lyasched.estimates): the key hierarchy, only the past,
the cap at the time limit, the spread, the state round trip, the sacct loader."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lyasched.estimates import Estimate, Finished, Request, RuntimeEstimator
from lyasched.estimates.estimator import EstimatorParams, keys_of
from lyasched.estimates.sacct import finished_from_sacct
from lyasched.slurm.sacct import parse_sacct

DATA = Path(__file__).parent / "data"


def done(user: str, run: float, end: float, *, name: str = "", gpus: int = 1, account: str = "acc",
         limit: float | None = 86400.0, script: str = "", submit: float | None = None) -> Finished:
    req = Request(user=user, account=account, gpus=gpus, name=name, script=script, time_limit=limit)
    start = end - run
    return Finished(request=req, submit=start if submit is None else submit, start=start, elapsed=run)


def test_nothing_known_gives_the_limit_then_the_default():
    est = RuntimeEstimator(EstimatorParams(default_s=1234.0))
    e = est.estimate(Request(user="u", time_limit=7200.0), now=0.0)
    assert (e.mean_s, e.source, e.n) == (7200.0, "limit", 0)
    e = est.estimate(Request(user="u"), now=0.0)
    assert (e.mean_s, e.source) == (1234.0, "default")


def test_average_of_the_last_two_similar_jobs():
    est = RuntimeEstimator()
    for run, end in ((100.0, 1000.0), (300.0, 2000.0), (500.0, 3000.0)):
        est.observe(done("u", run, end, name="train"))
    e = est.estimate(Request(user="u", account="acc", gpus=1, name="train", time_limit=86400.0), now=5000.0)
    assert e.source == "user+name+gpus" and e.n == 2 and e.mean_s == pytest.approx(400.0)


def test_hierarchy_falls_back_key_by_key():
    est = RuntimeEstimator()
    est.observe(done("u", 100.0, 1000.0, name="a", gpus=4, account="lab"))
    est.observe(done("v", 900.0, 1100.0, name="x", gpus=2, account="lab"))
    now = 2000.0

    def src(**kw) -> Estimate:
        base = dict(user="u", account="lab", gpus=4, name="a", time_limit=86400.0)
        return est.estimate(Request(**{**base, **kw}), now)

    assert src().source == "user+name+gpus"
    assert src(gpus=8).source == "user+name" and src(gpus=8).mean_s == 100.0
    assert src(name="b").source == "user+gpus"
    assert src(name="b", gpus=8).source == "user"
    e = src(user="w")
    assert e.source == "account" and e.mean_s == pytest.approx(500.0)  # the account's two: u's and v's
    assert src(user="w", account="other").source == "limit"
    # an unknown name or script skips the keys built on it
    assert [k[0] for k in keys_of(Request(user="u", gpus=1))] == ["user+gpus", "user"]
    est.observe(done("u", 50.0, 1500.0, name="a", gpus=4, account="lab", script="h1"))
    assert src(script="h1").source == "user+script+gpus" and src(script="h1").mean_s == 50.0


def test_only_jobs_that_ended_before_now():
    est = RuntimeEstimator()
    est.observe(done("u", 100.0, 1000.0))
    est.observe(done("u", 5000.0, 9000.0))
    req = Request(user="u", account="acc", time_limit=86400.0)
    assert est.estimate(req, now=999.0).source == "limit"
    e = est.estimate(req, now=1001.0)
    assert (e.mean_s, e.n) == (100.0, 1)
    assert est.estimate(req, now=9000.0).mean_s == 100.0  # ended at 9000: not before 9000
    assert est.estimate(req, now=9000.5).mean_s == pytest.approx(2550.0)


def test_out_of_order_observations_are_sorted_in():
    a, b = RuntimeEstimator(), RuntimeEstimator()
    jobs = [done("u", 100.0 * k, 1000.0 * k) for k in range(1, 6)]
    for j in jobs:
        a.observe(j)
    for j in reversed(jobs):
        b.observe(j)
    req = Request(user="u", account="acc", time_limit=86400.0)
    for now in (1500.0, 3500.0, 10_000.0):
        assert a.estimate(req, now).mean_s == b.estimate(req, now).mean_s


def test_never_beyond_the_time_limit():
    est = RuntimeEstimator()
    est.observe(done("u", 10_000.0, 20_000.0))
    e = est.estimate(Request(user="u", account="acc", time_limit=3600.0), now=30_000.0)
    assert e.mean_s == 3600.0 and e.source == "user+gpus"
    assert est.estimate(Request(user="u", account="acc", time_limit=None), 30_000.0).mean_s == 10_000.0


def test_spread_measures_the_past_errors():
    steady, erratic = RuntimeEstimator(), RuntimeEstimator()
    t = 0.0
    for k in range(20):
        t += 10_000.0
        steady.observe(done("u", 1000.0, t, submit=t - 1000.0))
        erratic.observe(done("u", 1000.0 * (8.0 if k % 2 else 1.0), t, submit=t - 8000.0))
    req = Request(user="u", account="acc", time_limit=86400.0)
    s, e = steady.estimate(req, t + 1), erratic.estimate(req, t + 1)
    assert s.spread == pytest.approx(0.0, abs=1e-9)
    # predicted 4500 each time, ran 1000 or 8000: |log| about 1.5 and 0.58
    assert 0.9 < e.spread < 1.3
    # the limit's spread: how far run times were from the limits
    lim = steady.estimate(Request(user="new", account="x", time_limit=86400.0), t + 1)
    assert lim.source == "limit" and lim.spread == pytest.approx(math.log(86400.0 / 1000.0))


def test_state_round_trip_is_json_and_equal():
    est = RuntimeEstimator()
    for k in range(1, 40):
        est.observe(done(f"u{k % 3}", 60.0 * k, 1000.0 * k, name=f"n{k % 5}", gpus=1 + k % 2, account=f"a{k % 2}"))
    again = RuntimeEstimator.from_state(json.loads(json.dumps(est.state())))
    assert again.state() == est.state()
    for k in range(8):
        req = Request(user=f"u{k % 4}", account=f"a{k % 3}", gpus=1 + k % 3, name=f"n{k}", time_limit=5000.0)
        for now in (500.0, 20_000.0, 50_000.0):
            assert again.estimate(req, now) == est.estimate(req, now)
    with pytest.raises(ValueError):
        RuntimeEstimator.from_state({"version": 99})
    with pytest.raises(ValueError):
        RuntimeEstimator.from_state({"version": 1, "params": {}, "tracks": [[["user", "u"], [[1, 2, 3]], []]], "pooled": {}})


def test_keep_bounds_the_state():
    est = RuntimeEstimator(EstimatorParams(keep=4))
    for k in range(1, 30):
        est.observe(done("u", 10.0 * k, 100.0 * k))
    for key, runs, errs in est.state()["tracks"]:
        assert len(runs) <= 4 and len(errs) <= 4


def test_sacct_jobname_is_read_and_old_recordings_still_parse():
    p = parse_sacct((DATA / "sacct_parsable_elapsed.txt").read_text(), "p1")
    assert {r.name for r in p.records if r.job_id == "2001"} == {"train resnet"}
    old = parse_sacct((DATA / "sacct_awkward.txt").read_text(), "old")
    assert old.records and all(r.name == "" for r in old.records)
    assert "JobName" not in old.missing


def test_loader_keeps_finished_gpu_runs_in_end_order():
    fin = finished_from_sacct((DATA / "sacct_awkward.txt").read_text(), "old")
    assert fin and all(f.request.gpus > 0 for f in fin)
    assert [f.end for f in fin] == sorted(f.end for f in fin)
    alice = [f for f in fin if f.request.user == "alice"]
    assert alice and alice[0].request.time_limit == 4 * 3600
    est = RuntimeEstimator()
    est.observe_all(fin)
    last = max(f.end for f in fin) + 1
    e = est.estimate(Request(user="alice", account="ml", gpus=alice[0].request.gpus, time_limit=1e6), last)
    assert e.source.startswith("user") and e.mean_s > 0


def test_outlived_grows_but_never_past_the_limit():
    from lyasched.estimates import outlived

    assert outlived(600.0, 100.0, 3600.0) == 600.0
    assert outlived(600.0, 700.0, 3600.0) == 1400.0
    assert outlived(600.0, 3000.0, 3600.0) == 3600.0
    assert outlived(600.0, 5000.0, None) == 10_000.0
    # what similar jobs that ran that long ran, when it is longer than the run so far
    assert outlived(600.0, 700.0, 3600.0, conditional_s=2000.0) == 2000.0
    assert outlived(600.0, 700.0, 3600.0, conditional_s=9000.0) == 3600.0
    assert outlived(600.0, 700.0, 3600.0, conditional_s=650.0) == 1400.0
    # never ending now or in the past: past its limit (Slurm about to end it) min_left_s more
    for elapsed in (3600.0, 4000.0):
        assert outlived(600.0, elapsed, 3600.0, min_left_s=30.0) == elapsed + 30.0
    assert outlived(600.0, 3590.0, 3600.0, conditional_s=5000.0, min_left_s=30.0) == 3620.0


def test_expected_run_reads_the_similar_jobs_that_ran_that_long_before_now():
    est = RuntimeEstimator(EstimatorParams(min_left_s=10.0))
    runs = ((100.0, 1000.0), (120.0, 2000.0), (900.0, 3000.0), (110.0, 4000.0), (1100.0, 5000.0), (5000.0, 9000.0))
    for run, end in runs:
        est.observe(done("u", run, end, name="train"))
    req = Request(user="u", account="acc", gpus=1, name="train", time_limit=86400.0)
    e = est.estimate(req, now=6000.0)
    assert e.mean_s == pytest.approx(605.0)  # (1100 + 110) / 2
    assert est.expected_run(req, e.mean_s, 300.0, 6000.0) == e.mean_s  # not reached yet
    # past it: the last two that ran longer than 700 s and ended before now (900, 1100), not 5000
    assert est.expected_run(req, e.mean_s, 700.0, 6000.0) == pytest.approx(1000.0)
    assert est.expected_run(req, e.mean_s, 700.0, 9500.0) == pytest.approx(3050.0)  # 1100, 5000
    # none of them ran 1200 s: the less specific keys are asked, then twice the run so far
    est.observe(done("u", 4000.0, 5500.0, name="other"))
    assert est.expected_run(req, e.mean_s, 1200.0, 6000.0) == pytest.approx(4000.0)  # user+gpus
    assert est.expected_run(req, e.mean_s, 4500.0, 6000.0) == pytest.approx(9000.0)
    # capped at the limit; never zero or negative time left
    capped = Request(user="u", account="acc", gpus=1, name="train", time_limit=2000.0)
    assert est.expected_run(capped, e.mean_s, 1200.0, 6000.0) == 2000.0
    assert est.expected_run(capped, e.mean_s, 2500.0, 6000.0) == 2510.0
