"""Seed-group generators, the model library and CSV trace loading."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lyasched.costmodel.cost import CostModel
from lyasched.sim.models import MODELS, profile
from lyasched.sim.workloads import (
    SEED_GROUPS,
    TraceError,
    load_workload,
    read_trace,
    seed_workload,
    select_rows,
    size_cluster,
    trace_jobs,
)


def test_model_library_has_real_parameter_counts():
    assert MODELS["resnet50"].params == 25_557_032
    assert MODELS["vgg16"].params == 138_357_544
    p, q = profile("resnet50", "imagenet"), profile("resnet50", "cifar10")
    assert p.beta > q.beta and p.params == q.params and p.source == "estimated"
    with pytest.raises(ValueError):
        profile("gpt5")


@pytest.mark.parametrize("name", sorted(SEED_GROUPS))
def test_seed_groups_reproducible_and_runnable(name):
    a, b, c = seed_workload(name, 1), seed_workload(name, 1), seed_workload(name, 2)
    assert a.jobs == b.jobs
    assert a.jobs != c.jobs
    cost = CostModel(a.cluster)
    for j in a.jobs:
        assert j.global_batch & (j.global_batch - 1) == 0  # power of two
        assert j.min_gpus == 1 and j.max_gpus <= a.cluster.total_gpus
        allowed = j.allowed_counts(cost)
        assert j.requested_gpus in allowed
        est = j.run_time(cost, j.requested_gpus, j.requested_gpus > a.cluster.gpus_per_node)
        assert j.time_limit >= 1.5 * est
    subs = [j.submit_time for j in a.jobs]
    assert subs == sorted(subs) and subs[0] == 0.0


def _stats(name, seeds=range(3)):
    big, span, gaps = [], [], []
    for s in seeds:
        w = seed_workload(name, s)
        big.append(np.mean([j.profile.model.endswith("/imagenet") for j in w.jobs]))
        t = np.array([j.submit_time for j in w.jobs])
        span.append(t[-1] - t[0])
        d = np.diff(t)
        gaps.append(np.mean(d < 60.0))  # share of arrivals within a minute of the previous one
    return np.mean(big), np.mean(span), np.mean(gaps)


def test_groups_differ_as_described():
    ss, sb, ls, lb = (_stats(n) for n in ("seed-small-scattered", "seed-small-bursty", "seed-large-scattered", "seed-large-bursty"))
    assert ss[0] < 0.3 and sb[0] < 0.3 and ls[0] > 0.7 and lb[0] > 0.7  # mostly small / mostly large data
    assert sb[2] > ss[2] + 0.3 and lb[2] > ls[2] + 0.3  # bursty: arrivals bunched
    assert lb[1] < 3600 < ls[1]  # many large jobs within a short time


def test_default_clusters_are_contended():
    for name in SEED_GROUPS:
        w = seed_workload(name, 0)
        cost = CostModel(w.cluster)
        gpn = w.cluster.gpus_per_node
        demand = sum(j.requested_gpus * j.run_time(cost, j.requested_gpus, j.requested_gpus > gpn) for j in w.jobs)
        span = w.jobs[-1].submit_time - w.jobs[0].submit_time
        assert demand / (span * w.cluster.total_gpus) > 0.6


# --- traces ------------------------------------------------------------------------------

GOOD = "submit_time,duration,num_gpus,extra\n100,3600,1,x\n50,600,2,y\n400,60,8,z\n200,7200,4,w\n"


def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_read_trace_submit_time(tmp_path):
    rows = read_trace(write(tmp_path, GOOD))
    assert [(r.submit, r.duration, r.gpus) for r in rows][:2] == [(100.0, 3600.0, 1), (50.0, 600.0, 2)]


def test_read_trace_timestamp_dates(tmp_path):
    text = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,a\n2017-10-09 07:02:55,10,2,20,b\n"
    rows = read_trace(write(tmp_path, text))
    assert rows[1].submit - rows[0].submit == 60.0
    assert rows[0].group == "a"


@pytest.mark.parametrize(
    "text,msg",
    [
        ("start,duration,num_gpus\n1,2,3\n", "missing column"),
        ("submit_time,duration\n1,2\n", "missing column"),
        ("submit_time,duration,num_gpus\n1,2,1\n5,7\n", "line 3: truncated"),
        ("submit_time,duration,num_gpus\n1,abc,1\n", "bad duration"),
        ("submit_time,duration,num_gpus\nyesterday,1,1\n", "bad submit_time"),
        ("submit_time,duration,num_gpus\n1,-5,1\n", "negative duration"),
        ("submit_time,duration,num_gpus\n1,5,1.5\n", "num_gpus"),
        ("submit_time,duration,num_gpus\n1,5,0\n", "num_gpus"),
        ("submit_time,duration,num_gpus\n", "no jobs"),
        ("", "missing column"),
    ],
)
def test_bad_traces(tmp_path, text, msg):
    with pytest.raises(TraceError, match=msg) as e:
        read_trace(write(tmp_path, text))
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such file"):
        read_trace(str(tmp_path / "nope.csv"))


def test_select_window_and_max_jobs(tmp_path):
    rows = read_trace(write(tmp_path, GOOD))
    assert [r.submit for r in select_rows(rows)] == [50, 100, 200, 400]
    assert [r.submit for r in select_rows(rows, max_jobs=2)] == [50, 100]
    assert [r.submit for r in select_rows(rows, start=50, end=350)] == [100, 200]  # [t0+50, t0+350)
    assert [r.submit for r in select_rows(rows, start=50, max_jobs=1)] == [100]
    with pytest.raises(TraceError, match="empty"):
        select_rows(rows, start=1e6)


def test_trace_jobs_match_durations(tmp_path):
    rows = select_rows(read_trace(write(tmp_path, GOOD)))
    cluster = size_cluster(rows, 0.8, gpus_per_node=4)
    jobs = trace_jobs(rows, cluster, seed=3)
    cost = CostModel(cluster)
    assert jobs[0].submit_time == 0.0 and [j.submit_time for j in jobs] == [0, 50, 150, 350]
    for r, j in zip(rows, jobs):
        assert j.requested_gpus == r.gpus and j.max_gpus == max(r.gpus, 4) and j.min_gpus == 1
        got = j.run_time(cost, r.gpus, r.gpus > 4)
        it = got / j.iterations
        assert abs(got - r.duration) <= it / 2 + 1e-6 or j.iterations == 1
        assert r.gpus in j.allowed_counts(cost)
    # deterministic and independent of the window
    again = trace_jobs(rows[1:], cluster, seed=3)
    assert [j.profile for j in again] == [j.profile for j in jobs[1:]]


def test_size_cluster_for_load(tmp_path):
    rows = select_rows(read_trace(write(tmp_path, GOOD)))
    demand = 3600 * 1 + 600 * 2 + 60 * 8 + 7200 * 4
    span = 7200  # longest job: the arrival span (350 s) is shorter
    c = size_cluster(rows, 0.5, gpus_per_node=4)
    assert c.nodes == math.ceil(demand / (span * 0.5) / 4)
    assert size_cluster(rows, 100.0, gpus_per_node=4).nodes == 2  # at least the largest job (8 GPUs)


def test_load_workload_trace_and_builtin(tmp_path):
    w = load_workload(write(tmp_path, GOOD), nodes=3, gpus_per_node=4, max_jobs=3)
    assert len(w.jobs) == 3 and w.cluster.nodes == 3
    with pytest.raises(TraceError, match="more than"):
        load_workload(write(tmp_path, GOOD), nodes=1, gpus_per_node=4)
    with pytest.raises(TraceError, match="unknown workload"):
        load_workload("seed-medium")
    b = load_workload("seed-large-bursty", seed=2)
    assert b.cluster == seed_workload("seed-large-bursty", 2).cluster
    small = load_workload("seed-large-bursty", seed=2, nodes=1, gpus_per_node=4)
    assert all(j.max_gpus <= 4 and j.requested_gpus <= 4 for j in small.jobs)


PHILLY = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces" / "philly.csv"


@pytest.mark.skipif(not PHILLY.exists(), reason="../shared/data/traces/philly.csv not present")
def test_philly_head_loads():
    rows = select_rows(read_trace(str(PHILLY)), max_jobs=500)
    assert len(rows) == 500
    cluster = size_cluster(rows, 0.8)
    jobs = trace_jobs(rows, cluster)
    assert len({j.profile.model for j in jobs}) == len(MODELS)


ADAPTIVE = ("submit_time,duration,num_gpus,max_batch,noise_scale\n"
            "0,3600,1,,\n10,600,2,4096,0:120;0.5:900;1:4000\n20,60,4,2048,500\n")


def test_trace_adaptive_columns(tmp_path):
    from lyasched.costmodel.goodput import NoiseScale

    rows = read_trace(write(tmp_path, ADAPTIVE))
    assert rows[0].adaptive is None
    assert rows[1].adaptive.max_batch == 4096 and rows[1].adaptive.noise == NoiseScale.parse("0:120;0.5:900;1:4000")
    assert rows[2].adaptive.noise.at(0.7) == 500.0
    cluster = size_cluster(rows, 0.8, gpus_per_node=4)
    jobs = trace_jobs(rows, cluster)
    assert [j.adaptive is not None for j in jobs] == [False, True, True]
    plain = trace_jobs(read_trace(write(tmp_path, GOOD, "plain.csv")), cluster)
    assert all(j.adaptive is None for j in plain)
    # a job that opts in keeps its batch as M0 and its iterations (base steps) as solved at the request
    cost = CostModel(cluster)
    j = jobs[1]
    fixed = replace(j, adaptive=None).run_time(cost, 2, False)
    assert abs(fixed - 600) <= fixed / j.iterations / 2 + 1e-6
    assert j.run_time(cost, 2, False) <= fixed * (1 + 1e-9)


@pytest.mark.parametrize("row,msg", [
    ("1,5,1,64,\n", "go together"), ("1,5,1,,300\n", "go together"), ("1,5,1,abc,300\n", "bad max_batch"),
    ("1,5,1,0,300\n", "positive integer"), ("1,5,1,64,0.5:3;0.1:4\n", "increasing"), ("1,5,1,64,0:-1\n", "phi"),
])
def test_trace_adaptive_bad_rows(tmp_path, row, msg):
    with pytest.raises(TraceError, match=msg) as e:
        read_trace(write(tmp_path, "submit_time,duration,num_gpus,max_batch,noise_scale\n" + row))
    assert "\n" not in str(e.value) and "line 2" in str(e.value)
