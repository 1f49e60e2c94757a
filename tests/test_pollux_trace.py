"""The Pollux-format reader (lyasched/sim/pollux_trace.py) on small hand-made files."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.costmodel import goodput as gp
from lyasched.costmodel.cost import CostModel
from lyasched.sim.hetero import parse_cluster_spec as parse_cluster
from lyasched.sim.pollux_trace import pollux_workload, read_application
from lyasched.sim.workloads import TraceError

PLACEMENTS = """placement,local_bsz,step_time,sync_time
1,8,0.10,0.0
1,16,0.18,0.0
1,32,0.34,0.0
2,8,0.13,0.02
2,16,0.21,0.02
11,8,0.20,0.08
11,16,0.28,0.08
"""
# progress, iteration, metric, grad_sqr, grad_var per epoch at global batches 8 and 32
VAL8 = "progress,iteration,metric,grad_sqr,grad_var\n100,100,0.5,2.0,1.0\n200,200,0.6,1.0,2.0\n300,300,0.7,0.5,4.0\n"
VAL32 = "progress,iteration,metric,grad_sqr,grad_var\n101,40,0.5,2.0,4.0\n205,80,0.6,1.0,8.0\n310,120,0.7,0.5,16.0\n"
WORKLOAD = "name,time,application,num_replicas,batch_size\ntoy-0,30,toy,2,16\ntoy-1,10,toy,1,32\n"


@pytest.fixture
def data(tmp_path):
    app = tmp_path / "traces" / "toy"
    app.mkdir(parents=True)
    (app / "placements.csv").write_text(PLACEMENTS)
    (app / "validation-8.csv").write_text(VAL8)
    (app / "validation-32.csv").write_text(VAL32)
    (tmp_path / "w.csv").write_text(WORKLOAD)
    read_application.cache_clear()
    return tmp_path


def test_adaptive_jobs(data):
    w = pollux_workload(str(data / "w.csv"), str(data / "traces"), nodes=2, gpus_per_node=2)
    assert [j.job_id for j in w.jobs] == ["toy-1", "toy-0"]  # by submit time
    j = w.jobs[1]
    assert (j.submit_time, j.requested_gpus, j.global_batch) == (30.0, 2, 8)  # M0: the smallest validated batch
    assert j.adaptive is not None and j.adaptive.max_batch == 32 and j.adaptive.pieces == 3  # one piece per epoch
    assert j.iterations == 300  # base steps: the smaller progress at the last epoch
    assert j.max_gpus == 4  # 32 / 8 (smallest per-GPU batch), capped by the cluster
    # phi per epoch at its middle: M0 x geometric mean over the batches of var / sqr
    phi = [8 * math.sqrt(1.0 / 2.0 * 4.0 / 2.0), 8 * math.sqrt(2.0 * 8.0), 8 * math.sqrt(8.0 * 32.0)]
    pts = j.adaptive.noise.points
    assert [p for _, p in pts] == pytest.approx(phi)
    assert [f for f, _ in pts] == pytest.approx([50 / 300, 150 / 300, 250 / 300])


def test_fixed_batch_steps_follow_the_gain(data):
    w = pollux_workload(str(data / "w.csv"), str(data / "traces"), nodes=2, gpus_per_node=2, adaptive=False)
    j = {x.job_id: x for x in w.jobs}["toy-0"]
    assert (j.global_batch, j.requested_gpus) == (16, 2)
    # batch 16 lies between 8 and 32: statistics interpolated at 1/3, scale 2
    steps = 0.0
    for e, (s8, v8, s32, v32) in enumerate([(2, 1, 2, 4), (1, 2, 1, 8), (0.5, 4, 0.5, 16)]):
        sqr, var = s8 + (s32 - s8) / 3, v8 + (v32 - v8) / 3
        steps += 100 / ((var + sqr) / (var / 2 + sqr))
    assert j.iterations == round(steps)
    assert j.adaptive is None  # 8 per GPU fits: no accumulation


def test_profile_carries_measured_sync(data):
    app = read_application(str(data / "traces" / "toy"))
    cost = CostModel(pollux_workload(str(data / "w.csv"), str(data / "traces"), 2, 2).cluster)
    assert cost.comm_time(app.profile, 2, False) == pytest.approx(0.02)
    assert cost.comm_time(app.profile, 2, True) == pytest.approx(0.08)
    assert app.profile.step_time(16) == pytest.approx(0.18, rel=0.05)


def test_pieces_per_job():
    from lyasched.costmodel.jobspec import Job

    prof = gp.Adaptive(max_batch=64, noise=gp.NoiseScale.parse("0:10;1:1000"), pieces=5)
    from lyasched.costmodel.cost import ClusterSpec, Profile

    cost = CostModel(ClusterSpec(1, 4))
    job = Job("a", Profile("m", 0.01, 0.001, 1000), 8, 500, adaptive=prof, max_gpus=4)
    times = gp.piece_times(cost, job, 2, False)
    assert len(times) == 5
    assert gp.run_time(cost, job, 2, False) == pytest.approx(sum(times))
    assert gp.progress_after(cost, job, 2, False, 0.0, sum(times[:2])) == pytest.approx(0.4)


@pytest.mark.parametrize("text, msg", [
    ("name,time,application,num_replicas\nx,1,toy,1\n", "needs columns"),
    ("name,time,application,num_replicas,batch_size\nx,1,nope,1,8\n", "w.csv:2: no profile for application 'nope'"),
    ("name,time,application,num_replicas,batch_size\nx,soon,toy,1,8\n", "w.csv:2: time, num_replicas"),
    ("name,time,application,num_replicas,batch_size\nx,1,toy,0,8\n", "w.csv:2: negative time or non-positive"),
    ("name,time,application,num_replicas,batch_size\n", "no jobs"),
])
def test_bad_workload(data, text, msg):
    (data / "w.csv").write_text(text)
    with pytest.raises(TraceError, match=msg):
        pollux_workload(str(data / "w.csv"), str(data / "traces"))


def test_bad_profile(data):
    (data / "traces" / "toy" / "validation-8.csv").write_text("progress,iteration,metric,grad_sqr,grad_var\n1,1,0.1,x,1\n")
    with pytest.raises(TraceError, match="validation-8.csv:2"):
        pollux_workload(str(data / "w.csv"), str(data / "traces"))


def test_parse_cluster():
    assert parse_cluster("16x4") == (16, 4)
    for bad in ("16", "0x4", "ax4", "4x"):
        with pytest.raises(ValueError):
            parse_cluster(bad)


def test_replay_cli(data):
    args = ["replay", "-w", str(data / "w.csv"), "--profiles", str(data / "traces"), "--cluster", "2x2",
            "-p", "pollux,elastic", "--slot", "60", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["jobs"] == 2 and out["cluster"]["total_gpus"] == 4
    assert set(out["policies"]) == {"pollux", "elastic"}
    r = CliRunner().invoke(main, [*args[:7], "-p", "tiresias", "--fixed-batch", "--json"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, [*args[:5], "--cluster", "2by2"])
    assert r.exit_code == 2 and "NODESxGPUS" in r.output
    r = CliRunner().invoke(main, ["replay", "-w", str(data / "w.csv"), "--fixed-batch"])
    assert r.exit_code == 2
    (data / "w.csv").write_text("name,time,application,num_replicas,batch_size\nx,1,nope,1,8\n")
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "no profile for application" in r.output
