"""GPU types in replay: typed --cluster, the gpu_types column, per-type profiles
(placements-<type>.csv, else the roofline), type violations counted (0 expected)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.policy import POLICIES, make_policy
from lyasched.policy.state import Capabilities, Decision, SlotResult
from lyasched.sim.hetero import TypedCluster, parse_allowed, parse_cluster_spec
from lyasched.sim.pollux_trace import measured_types, pollux_workload, read_application
from lyasched.sim.simulator import Simulation
from lyasched.sim.workloads import TraceError
from tests.test_pollux_trace import PLACEMENTS, VAL8, VAL32

CLUSTER = "a100:1x4,t4:2x2"  # node 0: 4 A100s; nodes 1, 2: 2 T4s each
WORKLOAD = ("name,time,application,num_replicas,batch_size,gpu_types\n"
            "a-0,0,toy,1,16,a100\nt-1,5,toy,1,16,t4\nany-2,10,toy,2,16,\nany-3,20,toy,1,8,\"a100,t4\"\n"
            "a-4,30,toy,2,16,A100\nany-5,40,toy,1,16,\n")


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


def sim_of(data, adaptive: bool = False, **kw) -> Simulation:
    typed = parse_cluster_spec(CLUSTER)
    assert isinstance(typed, TypedCluster)
    w = pollux_workload(str(data / "w.csv"), str(data / "traces"), typed.nodes, max(typed.node_gpus), adaptive=adaptive)
    measured = measured_types(str(data / "traces"), {"toy"}, typed.types)
    return Simulation(w.jobs, w.cluster, typed=typed, gpu_types=w.gpu_types, measured=measured, slot_len=30.0, **kw)


def test_parse_cluster_spec():
    c = parse_cluster_spec("a100:2x8,rtx2080ti:3x8,t4:6x4")
    assert isinstance(c, TypedCluster) and c.total_gpus == 64 and c.nodes == 11
    assert c.node_types[:3] == ("a100", "a100", "rtx2080ti") and c.node_gpus[-1] == 4
    assert parse_cluster_spec("16x4") == (16, 4)
    for bad in ("a100:2x8,t4:6y4", "a100:0x8", "rtx:3x8", "a100:2x8,a100:1x4", ":2x8", "16"):
        with pytest.raises(ValueError):
            parse_cluster_spec(bad)
    assert parse_allowed("A100, t4") == ("a100", "t4") and parse_allowed("") == ()
    with pytest.raises(ValueError):
        parse_allowed("a100,b200")


def test_workload_reads_gpu_types(data):
    w = pollux_workload(str(data / "w.csv"), str(data / "traces"), 3, 4)
    assert w.gpu_types == {"a-0": ("a100",), "t-1": ("t4",), "any-3": ("a100", "t4"), "a-4": ("a100",)}
    (data / "bad.csv").write_text("name,time,application,num_replicas,batch_size,gpu_types\nx,1,toy,1,8,h900\n")
    with pytest.raises(TraceError, match="unknown GPU type"):
        pollux_workload(str(data / "bad.csv"), str(data / "traces"), 3, 4)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("name", list(POLICIES))
def test_no_job_runs_on_a_type_it_does_not_allow(data, name, adaptive):
    sim = sim_of(data, adaptive=adaptive)
    r = sim.run(make_policy(name))
    assert r.type_violations == 0
    assert all(np.isfinite(x.end) for x in r.records)
    for x in r.records:
        allowed = sim.allowed.get(x.job.job_id)
        if allowed:
            assert set(x.gpu_type.split("+")) <= set(allowed), (x.job.job_id, x.gpu_type)


class Misplace:
    """Starts every waiting job on node 0 (A100s), whatever it allows: a policy that breaks types."""

    name = "misplace"
    capabilities = Capabilities()

    def decide(self, state):
        free = state.free[0]
        out = []
        for w in state.waiting:
            if free >= 1:
                out.append(Decision(w.job_id, 1, ((0, 1),)))
                free -= 1
        return SlotResult(starts=tuple(out))


def test_violations_are_counted_and_the_refit_prevents_them(data):
    (data / "w.csv").write_text("name,time,application,num_replicas,batch_size,gpu_types\n"
                                "t-0,0,toy,1,8,t4\na-1,0,toy,1,8,a100\n")
    assert sim_of(data, refit=False).run(Misplace()).type_violations == 1
    r = sim_of(data).run(Misplace())  # fitted to a T4 node, as the service does
    assert r.type_violations == 0 and {x.job.job_id: x.gpu_type for x in r.records} == {"t-0": "t4", "a-1": "a100"}


def test_speed_is_the_type_landed_on_slowest_when_spanning(data):
    (data / "w.csv").write_text("name,time,application,num_replicas,batch_size\nx,0,toy,4,32\n")
    sim = sim_of(data, estimate_error=0.0)

    class Place:
        name, capabilities = "place", Capabilities()

        def __init__(self, pl):
            self.pl = pl

        def decide(self, state):
            return SlotResult(starts=tuple(Decision(w.job_id, 4, self.pl) for w in state.waiting))

    i = 0
    a100 = sim.run(Place(((0, 4),))).records[0]
    mixed = sim.run(Place(((1, 2), (2, 2)))).records[0]  # all T4, across nodes
    span = sim.run(Place(((0, 2), (1, 2)))).records[0]  # A100 + T4: the T4's speed
    assert a100.gpu_type == "a100" and span.gpu_type == "a100+t4"
    t4_spread = sim._true_unit(i, "t4", 4, True)
    assert span.run_s == pytest.approx(mixed.run_s) and span.run_s > 1.5 * a100.run_s
    assert t4_spread > sim._true_unit(i, "a100", 4, True)


def test_measured_type_profile_is_used(data):
    app = data / "traces" / "toy"
    slow = "\n".join([PLACEMENTS.splitlines()[0]] + [",".join(r.split(",")[:2] + [str(float(r.split(",")[2]) * 3), r.split(",")[3]])
                                                  for r in PLACEMENTS.splitlines()[1:]]) + "\n"
    (app / "placements-a100.csv").write_text(slow)  # "measured" 3x slower on A100: overrides the roofline
    m = measured_types(str(data / "traces"), {"toy"}, ("a100", "t4"))
    assert set(m) == {("toy", "a100")}
    base = read_application(str(app)).profile
    assert m[("toy", "a100")].beta == pytest.approx(3 * base.beta, rel=0.05)
    sim = sim_of(data)
    j = next(x for x in sim.jobs if x.job_id == "any-2")
    a100, t4 = sim._typed_templates(j)["a100"], sim._typed_templates(j)["t4"]
    assert a100.best_run > t4.best_run


def test_replay_cli_typed(data):
    base = ["replay", "-w", str(data / "w.csv"), "--profiles", str(data / "traces"), "--slot", "60"]
    r = CliRunner().invoke(main, [*base, "--cluster", CLUSTER, "-p", "lyapunov,gavel", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["cluster"]["gpu_types"] == CLUSTER and out["cluster"]["total_gpus"] == 8
    assert all(p["type_violations"] == 0 for p in out["policies"].values())
    for bad in ("a100:1x4,t4:2y2", "b300:1x4"):
        r = CliRunner().invoke(main, [*base, "--cluster", bad, "-p", "lyapunov"])
        assert r.exit_code == 2 and "--cluster" in r.output
        assert len([ln for ln in r.output.splitlines() if ln.startswith("Error")]) == 1
    # a workload that limits types needs a typed cluster
    r = CliRunner().invoke(main, [*base, "--cluster", "3x4", "-p", "lyapunov"])
    assert r.exit_code == 1 and "gpu_types" in r.output


def test_csv_trace_with_gpu_types(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text('submit_time,duration,num_gpus,gpu_types\n0,3600,2,a100\n10,1800,4,\n20,7200,1,"t4,v100"\n30,600,8,\n')
    args = ["replay", "-w", str(trace), "--cluster", "a100:1x8,v100:1x8,t4:2x4", "-p", "lyapunov,elastic-unaware,gavel", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["cluster"]["total_gpus"] == 24
    assert all(p["type_violations"] == 0 for p in out["policies"].values())
    trace.write_text("submit_time,duration,num_gpus,gpu_types\n0,3600,2,a1000\n")
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1 and "line 2" in r.output and "unknown GPU type" in r.output
