"""Typed GPU requests survive every lyasched action, checked on command strings (no cluster): the
builders and parsers on strings, then the service's release, the fail-safe's release and a move
against the recorded-format fakes of test_service / test_mover, and lyasub against fake_slurm.py.

Cluster: node1, node2 with gpu:a100:4, node3 with gpu:t4:4 (the test clusters' layout)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from lyasched.live import failsafe as fs
from lyasched.live import gputypes
from lyasched.live import lease as leases
from lyasched.slurm import as_backend
from lyasched.slurm import query as q
from lyasched.slurm.commands import update_args
from lyasched.slurm.submit import SbatchOptions, sbatch_command
from lyasched.store import moves, records
from lyasched.summary import CostSummary
from slurm_views import NODE_LINE
from test_lyasub import BASE, Fake, fake, lyasub  # noqa: F401 - fake is a fixture
from test_mover import MoveAs, MovingSlurm, make, save_marker
from test_service import FakeJob, FakeSlurm, StartAs, service

T0 = 1_000_100.0
TYPES = {"node1": "a100", "node2": "a100", "node3": "t4"}


# ---------------------------------------------------------------- builders and parsers, on strings


def test_update_names_the_type_the_job_asked_for():
    assert update_args("7", 1, 2, ["node1"], "a100") == [
        "scontrol", "update", "JobId=7", "NumNodes=1-1", "NumTasks=1", "NumCPUs=1", "TresPerNode=gres:gpu:a100:2",
        "ReqNodeList=node1"]
    assert update_args("7", 2, 4, (), "t4")[6:] == ["TresPerNode=gres:gpu:t4:4", "ReqNodeList="]
    assert update_args("7", 1, 2)[6] == "TresPerNode=gres:gpu:2"  # a job of any type stays untyped
    for bad in ("a 100", "a100;x", "4", "a100:2"):
        with pytest.raises(ValueError):
            update_args("7", 1, 2, (), bad)


def test_sbatch_asks_for_the_typed_gres_and_keeps_the_constraint():
    argv = sbatch_command(SbatchOptions(gpus_per_node=2, gpu_type="a100", nodes=1, constraint="ib&nvlink"), "s.sh")
    assert "--gres=gpu:a100:2" in argv and "--constraint=ib&nvlink" in argv and "--gres=gpu:2" not in argv
    assert "--gres=gpu:2" in sbatch_command(SbatchOptions(gpus_per_node=2), "s.sh")
    with pytest.raises(ValueError):
        sbatch_command(SbatchOptions(gpus_per_node=2, gpu_type="a100:1"), "s.sh")


@pytest.mark.parametrize("tres, gpus, gtype", [
    ("gres:gpu:a100:2", 2, "a100"),
    ("gres/gpu:t4=4", 4, "t4"),
    ("gpu:a100:2(S:0-1)", 2, "a100"),
    ("cpu=1,gres/gpu=2,gres/gpu:a100=2", 2, "a100"),
    ("gres:gpu:2", 2, ""),
    ("gres/gpu=4", 4, ""),
    ("(null)", 0, ""),
])
def test_the_type_of_a_request_is_read_from_its_tres(tres, gpus, gtype):
    assert q.gpus_in_tres(tres) == gpus and q.gpu_type_in_tres(tres) == gtype


def test_squeue_and_scontrol_give_the_jobs_type():
    line = ("42|ann|1001|PENDING|JobHeldUser|0|2026-11-22T13:00:00|N/A|N/A|10:00|1|gres:gpu:a100:2||managed|"
            "lyasched:v1;id=abcdefgh|train")
    (job,) = q.parse_squeue(line + "\n")
    assert (job.gpus_per_node, job.gpu_type) == (2, "a100")
    (job,) = q.parse_show_job("JobId=43 JobName=x UserId=ann(1001) JobState=PENDING Reason=JobHeldUser "
                              "NumNodes=1 TresPerNode=gres:gpu:t4:1 Features=t4 Comment=(null)\n")
    assert (job.gpus_per_node, job.gpu_type) == (1, "t4")


def cost(uid: str, types: tuple[str, ...] = (), ck: bool = False, gmin: int = 2, gmax: int = 8) -> CostSummary:
    return CostSummary(uid=uid, sig="cnn:test", global_batch=64, iterations=200, min_gpus=gmin, max_gpus=gmax,
                       alpha=0.01, beta=0.002, params=1_000_000, checkpointable=ck, gpu_types=types)


def test_summary_records_the_allowed_types_and_old_summaries_are_unchanged():
    s = cost("uid-00000001", ("a100", "h100"))
    assert s.encode().endswith(";gt=a100,h100") and CostSummary.decode(s.encode()) == s
    old = cost("uid-00000001").encode()
    assert "gt=" not in old and CostSummary.decode(old).gpu_types == ()
    for bad in ("gt=", "gt=a100,a100", "gt=a1 00", "gt=12", "gt=" + ",".join(f"t{i}" for i in range(9))):
        with pytest.raises(ValueError):
            CostSummary.decode(old + ";" + bad)


# ---------------------------------------------------------------- the live service's actions


@dataclass
class TypedJob(FakeJob):
    gtype: str = ""

    def line(self) -> str:
        return super().line().replace(f"|gres:gpu:{self.gpn}|", f"|gres:gpu:{self.gtype}:{self.gpn}|" if self.gtype
                                      else f"|gres:gpu:{self.gpn}|")


def typed_nodes_of(slurm: FakeSlurm) -> None:
    """``scontrol show node`` of ``slurm`` names each node's GPU type in its Gres."""
    run = slurm.run

    def typed_run(args, *, idempotent=True, input=None):
        if list(args[:3]) == ["scontrol", "show", "node"]:
            slurm.calls.append(list(args))
            return "\n".join(NODE_LINE.format(name=n, total=f"{TYPES[n]}:{t}", used=u, state=s)
                             for n, t, u, s in slurm.nodes) + "\n"
        return run(args, idempotent=idempotent, input=input)

    slurm.run = typed_run  # type: ignore[method-assign]


def resizes(slurm: FakeSlurm) -> list[dict]:
    return [dict(a.split("=", 1) for a in c[2:]) for c in slurm.actions("update") if any("TresPerNode" in a for a in c)]


def test_release_puts_a_typed_job_on_its_type_even_where_the_policy_placed_it_elsewhere(db):
    slurm = FakeSlurm(jobs=[TypedJob("101", cost("uid-00000001", ("a100",)).encode(), gpn=2, gtype="a100"),
                            TypedJob("102", cost("uid-00000002").encode(), gpn=2)])
    typed_nodes_of(slurm)
    svc = service(db, slurm, StartAs({"101": ((2, 2),), "102": ((2, 2),)}))  # both on node3 (t4)
    svc.run_slot()
    (typed, anyt) = resizes(slurm)
    assert (typed["JobId"], typed["TresPerNode"]) == ("101", "gres:gpu:a100:2")
    assert typed["ReqNodeList"] in ("node1", "node2")  # an a100 node, not the t4 the policy chose
    assert (anyt["JobId"], anyt["TresPerNode"], anyt["ReqNodeList"]) == ("102", "gres:gpu:2", "node3")  # any type


def test_a_typed_job_with_no_room_on_its_type_waits(db):
    slurm = FakeSlurm(nodes=[("node1", 4, 4, "ALLOCATED"), ("node2", 4, 4, "ALLOCATED"), ("node3", 4, 0, "IDLE")],
                      jobs=[TypedJob("101", cost("uid-00000001", ("a100",)).encode(), gpn=2, gtype="a100")])
    typed_nodes_of(slurm)
    svc = service(db, slurm, StartAs({"101": ((2, 2),)}))
    svc.run_slot()
    assert resizes(slurm) == [] and slurm.actions("release") == []
    assert "of its GPU type (a100)" in records.get_job(db, "uid-00000001")["reason"]


def test_a_typed_plain_job_of_a_managed_partition_is_placed_on_its_type_and_released_as_submitted(db):
    plain = "lyasched:v1;id=pl-0000000001;sig=plain;b=2;it=1;gmin=2;gmax=2;a=0.0;bt=0.0;p=1;bpp=4;m0=0.0;m1=0.0;src=e;pl=1"
    slurm = FakeSlurm(jobs=[TypedJob("101", plain, gpn=2, gtype="a100")])
    typed_nodes_of(slurm)
    svc = service(db, slurm, StartAs({"101": ((2, 2),)}))
    svc.run_slot()
    assert resizes(slurm) == []  # its own request (gres:gpu:a100:2) is kept whole
    assert slurm.actions("release") == [["scontrol", "release", "101"]]
    assert json.loads(records.get_job(db, "pl-0000000001")["nodes"])[0] in ("node1", "node2")


def test_the_failsafe_releases_a_typed_job_with_its_type(tmp_path):
    path = tmp_path / "lease.json"
    leases.write(path, leases.Lease("svc-host:1", 1, T0 - 61, 2.0))
    slurm = FakeSlurm(jobs=[TypedJob("101", cost("uid-00000001", ("t4",)).encode(), gpn=2, gtype="t4"),
                            TypedJob("102", cost("uid-00000002", ("h100", "a100"), gmin=8).encode(), gpn=4,
                                     gtype="h100"),
                            TypedJob("103", cost("uid-00000003").encode(), gpn=2)])
    typed_nodes_of(slurm)
    res = fs.run(as_backend(slurm), lambda j, t: None, path, None, clock=lambda: T0, holder="fs@ctl:1")
    assert [e["job_id"] for e in res.released] == ["101", "102", "103"]
    got = {u["JobId"]: (u["NumNodes"], u["TresPerNode"]) for u in resizes(slurm)}
    assert got == {"101": ("1-1", "gres:gpu:t4:2"),
                   "102": ("2-2", "gres:gpu:a100:4"),  # no h100 node: its next type, 8 GPUs over the two a100 nodes
                   "103": ("1-1", "gres:gpu:2")}


def test_an_elastic_move_keeps_a_typed_job_on_its_type(db, tmp_path):
    summary = cost("uid-00000001", ("a100",), ck=True, gmin=1).encode()
    slurm = MovingSlurm(nodes=[("node1", 4, 2, "MIXED"), ("node2", 4, 0, "IDLE"), ("node3", 4, 0, "IDLE")],
                        jobs=[TypedJob("101", summary, state="RUNNING", reason="None", start=T0 - 1000,
                                       nodes=("node1",), gpn=2, gtype="a100")])
    typed_nodes_of(slurm)
    svc = make(db, slurm, MoveAs({"101": ((2, 4),)}), tmp_path)  # grow to 4 GPUs on node3 (t4)
    svc.run_slot()
    (m,) = moves.for_job(db, "uid-00000001")
    assert {n for n, _ in json.loads(m["to_placement"])} <= {"node1", "node2"}
    save_marker(tmp_path, step=41)
    svc.clock_state["t"] += 2
    svc.run_slot()
    (u,) = resizes(slurm)
    assert u["TresPerNode"] == "gres:gpu:a100:4" and u["ReqNodeList"] in ("node1", "node2")
    assert slurm.actions("release") == [["scontrol", "release", "101"]]


def test_fit_typed_never_mixes_types_and_release_type_refuses_a_mix():
    types = ["a100", "a100", "t4"]
    # the policy's mixed placement (an a100 and the t4 node) becomes two a100 nodes, its shape kept
    assert gputypes.fit_typed(4, ((0, 2), (2, 2)), [2, 2, 4], types, ("a100", "t4")) == ((0, 2), (1, 2))
    assert gputypes.fit_typed(4, ((2, 4),), [2, 2, 4], types, ("a100", "t4")) == ((2, 4),)  # its own t4: kept
    assert gputypes.fit_typed(4, ((2, 4),), [2, 4, 4], types, ("a100",)) == ((1, 4),)
    # one node stays one node (its predicted run time holds): no a100 node has 4 free
    assert gputypes.fit_typed(4, ((2, 4),), [2, 2, 4], types, ("a100",)) is None
    assert gputypes.release_type((), ["node1", "node3"], TYPES) == ""
    with pytest.raises(ValueError):
        gputypes.release_type(("a100", "t4"), ["node1", "node3"], TYPES)


@pytest.fixture
def db():
    return records.open_records(":memory:")


# ---------------------------------------------------------------- lyasub


def test_lyasub_passes_the_typed_gres_and_records_the_types(fake: Fake, monkeypatch):
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    r = lyasub(*BASE, "--no-profile", "--gpu-type", "a100", "--constraint", "a100", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    (argv,) = fake.training_sbatches()
    assert "--gres=gpu:a100:1" in argv and "--constraint=a100" in argv
    out = json.loads(r.stdout)
    assert out["gpu_types"] == ["a100"] and out["comment"].endswith(";gt=a100;pt=a100;ft=a100") and out["max_gpus"] == 8  # 2 a100 nodes


@pytest.mark.parametrize("types, env, fragment", [
    ("h100", "a100,a100,t4", "no node of the cluster has GPU type 'h100' (GPU types there: a100, t4)"),
    ("a100,h100", "a100,a100,t4", "has GPU type 'h100'"),
    ("a100", "", "its GPUs are untyped in Slurm"),
    ("a100,,t4", "a100,a100,t4", "'' is not a GPU type name"),
    ("a100:4", "a100,a100,t4", "'a100:4' is not a GPU type name"),
    ("a100,a100", "a100,a100,t4", "given twice"),
])
def test_lyasub_refuses_a_type_no_node_has_and_submits_nothing(fake: Fake, monkeypatch, types, env, fragment):
    monkeypatch.setenv("FAKE_GPU_TYPES", env)
    r = lyasub(*BASE, "--no-profile", "--gpu-type", types, "--", "train.py")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("lyasub: error: --gpu-type") and fragment in line
    assert fake.calls("sbatch") == []


@pytest.mark.parametrize("args", [("--min-gpus", "12"), ("--min-gpus", "12", "--gpu-type", "a100,t4")])
def test_lyasub_refuses_a_job_larger_than_every_type_it_allows(fake: Fake, monkeypatch, args):
    """12 GPUs fit the 3 nodes (a100, a100, t4) only by mixing types, which a job never does: it
    would wait forever, so it is refused before anything runs."""
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    r = lyasub(*BASE, "--no-profile", *args, "--", "train.py")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("lyasub: error: the job can never be placed: a job runs on one GPU type") and "(12)" in line
    assert "a100 2 nodes x 4 GPUs, t4 1 node x 4 GPUs" in line
    assert fake.calls("sbatch") == []
    r = lyasub(*BASE, "--no-profile", "--min-gpus", "8", "--json", "--", "train.py")  # two a100 nodes hold 8
    assert r.exit_code == 0, r.stderr


def test_lyasub_limits_the_job_to_the_nodes_its_constraint_names(fake: Fake, monkeypatch):
    """The fake nodes' Features are their types: --constraint t4 is the t4 node only (4 GPUs), and
    the summary records it (ft, / for |) for the service and the plugin."""
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    r = lyasub(*BASE, "--no-profile", "--constraint", "t4", "--json", "--", "train.py")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["max_gpus"] == 4 and out["comment"].endswith(";ft=t4")
    r = lyasub(*BASE, "--no-profile", "--constraint", "a100|t4", "--json", "--", "train.py")
    assert r.exit_code == 0 and json.loads(r.stdout)["comment"].endswith(";ft=a100/t4") and json.loads(r.stdout)["max_gpus"] == 12


@pytest.mark.parametrize("constraint, fragment", [
    ("ib", "--constraint ib: no GPU node of the cluster has these features (features there: a100, t4)"),
    ("[a100|t4]", "only node feature names (A-Z a-z 0-9 _ . -) joined by & (all) and | (any) are supported"),
    ("a100*2", "are supported"),
    ("a100&", "are supported"),
])
def test_lyasub_refuses_a_constraint_it_cannot_place_and_submits_nothing(fake: Fake, monkeypatch, constraint, fragment):
    monkeypatch.setenv("FAKE_GPU_TYPES", "a100,a100,t4")
    r = lyasub(*BASE, "--no-profile", "--constraint", constraint, "--", "train.py")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("lyasub: error: --constraint") and fragment in line
    assert fake.calls("sbatch") == []


def featured_nodes_of(slurm: FakeSlurm, features: dict[str, str]) -> None:
    """``scontrol show node`` of ``slurm`` (typed) also names each node's Features."""
    typed_nodes_of(slurm)
    run = slurm.run

    def featured_run(args, *, idempotent=True, input=None):
        out = run(args, idempotent=idempotent, input=input)
        if list(args[:3]) == ["scontrol", "show", "node"]:
            out = "\n".join(ln.replace("ActiveFeatures=(null)", f"ActiveFeatures={features[ln.split()[0][9:]]}")
                            for ln in out.splitlines() if ln) + "\n"
        return out

    slurm.run = featured_run  # type: ignore[method-assign]


def test_release_puts_a_constrained_job_on_nodes_with_its_features(db):
    """An untyped job with --constraint ib (summary ft): the policy chose node1, which lacks ib; the
    release re-places it on node3, the one node with ib; with ib busy it waits, saying why."""
    feats = {"node1": "a100", "node2": "a100", "node3": "t4,ib"}
    job = replace(cost("uid-00000001"), constraint="ib|nvlink").encode()
    slurm = FakeSlurm(jobs=[TypedJob("101", job, gpn=2)])
    featured_nodes_of(slurm, feats)
    svc = service(db, slurm, StartAs({"101": ((0, 2),)}))
    svc.run_slot()
    (u,) = resizes(slurm)
    assert (u["JobId"], u["ReqNodeList"], u["TresPerNode"]) == ("101", "node3", "gres:gpu:2")
    slurm = FakeSlurm(nodes=[("node1", 4, 0, "IDLE"), ("node2", 4, 0, "IDLE"), ("node3", 4, 4, "ALLOCATED")],
                      jobs=[TypedJob("102", replace(cost("uid-00000002"), constraint="ib").encode(), gpn=2)])
    featured_nodes_of(slurm, feats)
    db2 = records.open_records(":memory:")
    service(db2, slurm, StartAs({"102": ((0, 2),)})).run_slot()
    assert resizes(slurm) == [] and slurm.actions("release") == []
    assert "on the nodes its --constraint allows" in records.get_job(db2, "uid-00000002")["reason"]


def test_the_constraint_rule():
    from lyasched.policy.placement import constrained, parse_constraint, satisfies

    c = parse_constraint("a100&ib|h100")
    assert c == (frozenset({"a100", "ib"}), frozenset({"h100"}))
    assert satisfies(frozenset({"a100", "ib", "x"}), c) and satisfies(frozenset({"h100"}), c)
    assert not satisfies(frozenset({"a100"}), c) and satisfies(frozenset(), ())
    assert constrained([4, 4, 4], [frozenset({"a100"}), frozenset({"h100"})], c) == [0, 4, 0]  # no entry: no features
    assert constrained([4, 4], [], ()) == [4, 4]
    for bad in ("", None):
        assert parse_constraint(bad) == ()
    for bad in ("[a|b]", "a*2", "a,b", "a&", "|a", "!a", "a b", "a" * 300):
        with pytest.raises(ValueError):
            parse_constraint(bad)
