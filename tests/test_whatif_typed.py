"""`lyasched whatif` on typed sacct histories (AllocTRES=...,gres/gpu:a100=4) replayed on the site's
typed nodes (lyasched.whatif.typed): each job runs as long as recorded on the type it had, only on
the type its request named, and never on a type it did not allow."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.slurm.sacct import parse_sacct
from lyasched.whatif.history import build_history
from lyasched.whatif.managed import build_managed_simulations, history_estimates
from lyasched.whatif.replay import replay_history
from lyasched.whatif.typed import TypedHistoryError, typed_site

HEAD = "JobID|User|Account|Partition|Submit|Eligible|Start|End|ElapsedRaw|State|NNodes|NodeList|AllocTRES|ReqTRES|Timelimit"
# recorded lines of a site with 2 nodes of 4 A100s (gpu[01-02]) and 1 node of 4 T4s (gpu03)
LINES = [
    # asked for a100 by name (ReqTRES typed): may run on a100 only
    "11|alice|ml|gpu|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T09:00:00|3600|COMPLETED|1|gpu01|"
    "billing=4,cpu=4,gres/gpu:a100=4,gres/gpu=4,node=1|billing=4,cpu=4,gres/gpu:a100=4,gres/gpu=4,node=1|04:00:00",
    "11.batch||ml||2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T08:00:00|2026-10-01T09:00:00|3600|COMPLETED|1|gpu01|"
    "cpu=4,gres/gpu:a100=4,gres/gpu=4,node=1||",
    # asked for any GPU, got t4s
    "12|bob|ml|gpu|2026-10-01T08:01:00|2026-10-01T08:01:00|2026-10-01T08:01:00|2026-10-01T08:41:00|2400|COMPLETED|1|gpu03|"
    "billing=2,cpu=2,gres/gpu:t4=2,gres/gpu=2,node=1|billing=2,cpu=2,gres/gpu=2,node=1|02:00:00",
    # asked for t4 by name
    "13|bob|ml|gpu|2026-10-01T08:02:00|2026-10-01T08:02:00|2026-10-01T08:30:00|2026-10-01T09:00:00|1800|COMPLETED|1|gpu03|"
    "billing=4,cpu=4,gres/gpu:t4=4,gres/gpu=4,node=1|billing=4,cpu=4,gres/gpu:t4=4,gres/gpu=4,node=1|01:00:00",
    # 8 a100s over both a100 nodes, asked for any
    "14|carol|phys|gpu|2026-10-01T08:03:00|2026-10-01T08:03:00|2026-10-01T09:00:00|2026-10-01T11:00:00|7200|TIMEOUT|2|gpu[01-02]|"
    "billing=8,cpu=8,gres/gpu:a100=8,gres/gpu=8,node=2|billing=8,cpu=8,gres/gpu=8,node=2|02:00:00",
    "15|alice|ml|gpu|2026-10-01T08:10:00|2026-10-01T08:10:00|2026-10-01T08:10:00|2026-10-01T08:20:00|600|FAILED|1|gpu02|"
    "billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu:a100=1,gres/gpu=1,node=1|00:30:00",
]
SITE = "a100:2x4,t4:1x4"


def history(lines=LINES):
    return build_history(parse_sacct("\n".join([HEAD, *lines]) + "\n").records)


def test_the_recorded_type_and_the_asked_type_are_read_from_sacct():
    h = history()
    assert [(j.job_id, j.gpu_types, j.asked_type, j.gpus) for j in h.jobs] == [
        ("11", "a100", "a100", 4), ("12", "t4", "", 2), ("13", "t4", "t4", 4), ("14", "a100", "", 8), ("15", "a100", "a100", 1)]
    site = typed_site(h.jobs, SITE)
    assert site.ran_on == ("a100", "t4", "t4", "a100", "a100")
    assert site.allowed == {"t0": ("a100",), "t2": ("t4",), "t4": ("a100",)}


@pytest.mark.parametrize("policy", ["fifo", "lyapunov"])
def test_rigid_typed_replay_runs_each_job_as_recorded_on_its_type(policy):
    """With exact estimates, a job that lands on the type it had runs as long as it did; a job
    that asked for a type runs on it; no type violation."""
    h = history()
    site = typed_site(h.jobs, SITE)
    rep = replay_history(h.jobs, site.spec, [policy], {}, slot=30.0, estimate_error=0.0, seed=0, rigid=True, typed=site)
    (res,) = rep.results
    assert res.type_violations == 0 and len(res.records) == len(h.jobs)
    for rec in res.records:
        k = rep.index[rec.job.job_id]
        j = h.jobs[k]
        assert rec.gpus == j.gpus
        if j.asked_type:
            assert rec.gpu_type == j.asked_type, j.job_id
        if rec.gpu_type == site.ran_on[k]:
            assert rec.run_s == pytest.approx(j.work_s, rel=0.01, abs=2.0), j.job_id


def test_an_untyped_request_may_move_to_a_faster_type_and_runs_faster_there():
    """Job 12 got 2 t4s without asking for a type: alone on the site, lyapunov gives it a100s,
    where it runs faster than recorded (the roofline's a100/t4 speed)."""
    h = history([LINES[2]])
    site = typed_site(h.jobs, SITE)
    rep = replay_history(h.jobs, site.spec, ["lyapunov"], {}, slot=30.0, estimate_error=0.0, seed=0, rigid=True, typed=site)
    (rec,) = rep.results[0].records
    assert rec.gpu_type == "a100" and rec.run_s < 0.9 * h.jobs[0].work_s


def test_managed_typed_replay_predicts_and_runs_on_the_recorded_type():
    h = history()
    site = typed_site(h.jobs, SITE)
    sim, sim_est, index = build_managed_simulations(h.jobs, site.spec, history_estimates(h.jobs), slot=30.0, seed=0,
                                                    typed=site)
    res = sim.run(__import__("lyasched.policy", fromlist=["make_policy"]).make_policy("fifo"), name="fifo")
    assert res.type_violations == 0
    for rec in res.records:
        k = index[rec.job.job_id]
        if rec.gpu_type == site.ran_on[k]:
            assert rec.run_s == pytest.approx(max(h.jobs[k].work_s, 1.0), rel=0.01, abs=2.0)


@pytest.mark.parametrize("spec, fragment", [
    ("a100:2x4", "job 12 ran on GPU type t4, which no node of a100:2x4 has"),
    ("a100:1x4,t4:1x4", "job 14 used 8 a100 GPUs; a100:1x4,t4:1x4 has 4"),
])
def test_a_history_the_typed_cluster_cannot_hold_is_refused(spec, fragment):
    with pytest.raises(TypedHistoryError, match=fragment):
        typed_site(history().jobs, spec)


def _file(tmp_path, lines=LINES):
    p = tmp_path / "sacct.txt"
    p.write_text("\n".join([HEAD, *lines]) + "\n")
    return str(p)


def test_whatif_cli_replays_on_the_given_typed_cluster(tmp_path):
    r = CliRunner().invoke(main, ["whatif", "--sacct", _file(tmp_path), "--cluster", SITE, "-p", "fifo,lyapunov", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert "cluster a100:2x4,t4:1x4 (12 GPUs)" in r.stderr
    assert s["cluster"]["gpu_types"] == SITE and s["cluster"]["total_gpus"] == 12
    assert s["policies"]["fifo"]["jobs"] == 5
    r = CliRunner().invoke(main, ["whatif", "--sacct", _file(tmp_path), "--cluster", SITE, "-p", "fifo"])
    assert r.exit_code == 0 and "cluster: a100:2x4,t4:1x4 (12 GPUs, given: --cluster)" in r.stdout, r.output
    assert set(s["policies"]) >= {"fifo", "lyapunov"}


@pytest.mark.parametrize("args, fragment", [
    (("--cluster", "a100:2y4"), "--cluster"),
    (("--cluster", "b300:1x4"), "unknown GPU type"),
    (("--cluster", "3x4"), "expected typed node groups"),
    (("--cluster", "a100:2x4"), "job 12 ran on GPU type t4"),
    (("--cluster", SITE, "--nodes", "3"), "either --cluster or --nodes"),
])
def test_whatif_cli_bad_cluster_is_one_line_exit_2(tmp_path, args, fragment):
    out = tmp_path / "report"
    r = CliRunner().invoke(main, ["whatif", "--sacct", _file(tmp_path), *args, "--out", str(out)])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if not ln.startswith("whatif: ")]
    assert len(errors) == 1 and fragment in errors[0], r.stderr
    assert not out.exists()


def test_replay_reads_a_constraint_column_and_keeps_each_job_on_nodes_of_its_features(tmp_path):
    """A trace's ``constraint`` column narrows a job to the types with a node of its features (a replay
    node's Features are its type, as on the test clusters), the rule serve's input uses
    (`featured_types`): lyapunov would put an untyped 2-GPU job on the a100s, its constraint keeps it
    on the t4s; a bad or unmeetable constraint is one line."""
    from lyasched.policy.placement import featured_types, parse_constraint
    from lyasched.sim.hetero import parse_cluster_spec

    cl = parse_cluster_spec("a100:1x8,t4:2x4", base="v100")
    assert featured_types(cl.node_types, cl.node_features, parse_constraint("t4|h100")) == {"t4"}
    assert featured_types(cl.node_types, cl.node_features, ()) == {"a100", "t4"}
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,duration,num_gpus,constraint\n0,3600,2,t4\n10,1800,2,\n20,600,1,a100|t4\n")
    args = ["replay", "-w", str(trace), "--cluster", "a100:1x8,t4:2x4", "-p", "lyapunov", "--json"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["policies"]["lyapunov"]["type_violations"] == 0
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import load_workload
    from lyasched.policy import make_policy

    w = load_workload(str(trace), nodes=3, gpus_per_node=8)
    assert w.constraints == {"t0": "t4", "t2": "a100|t4"}
    sim = Simulation(w.jobs, w.cluster, typed=cl, constraints=w.constraints)
    res = sim.run(make_policy("lyapunov"), name="lyapunov")
    got = {rec.job.job_id: rec.gpu_type for rec in res.records}
    assert got["t0"] == "t4" and got["t1"] == "a100"  # the unconstrained one takes the faster a100s
    for bad, fragment in (("a100&", "are supported"), ("h100", "no node of a100:1x8,t4:2x4 has the features")):
        trace.write_text(f"submit_time,duration,num_gpus,constraint\n0,3600,2,{bad}\n")
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and fragment in r.output, r.output  # as a trace's unknown GPU type
