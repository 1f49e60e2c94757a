"""The slot logic (lyasched.service) against a fake Slurm runner that serves squeue/scontrol
output in the recorded 22.05 formats and records every argv it would run; and config validation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from lyasched.config import Config, ConfigError, from_mapping, load_config
from lyasched.policy import make_policy
from lyasched.policy.state import Decision, SlotResult, SlotState
from lyasched.policy.placement import equal_placement, fit_placement
from lyasched.service import Service
from lyasched.slurm import SlurmError
from lyasched.slurm import query as q
from lyasched.store import records
from lyasched.summary import CostSummary
from slurm_views import NODE_LINE



def ts(epoch: float) -> str:
    return q.format_time(epoch)


@dataclass
class FakeJob:
    job_id: str
    comment: str
    user: str = "alice"
    state: str = "PENDING"
    reason: str = "JobHeldUser"
    submit: float = 1_000_000.0
    start: float | None = None
    end: float | None = None
    limit: str = "10:00"
    nodes: tuple[str, ...] = ()
    gpn: int = 1
    name: str = "train"

    def line(self) -> str:
        return "|".join([
            self.job_id, self.user, "1001", self.state, self.reason, "0" if self.reason.startswith("JobHeld") else "100",
            ts(self.submit), ts(self.start) if self.start else "N/A", ts(self.end) if self.end else "N/A",
            self.limit, str(max(1, len(self.nodes))), f"gres:gpu:{self.gpn}", ",".join(self.nodes), "gpu",
            self.comment, self.name,
        ])


@dataclass
class FakeSlurm:
    """Answers squeue / scontrol show node like Slurm 22.05; records updates, releases, holds."""

    nodes: list[tuple[str, int, int, str]] = field(
        default_factory=lambda: [("node1", 4, 0, "IDLE"), ("node2", 4, 0, "IDLE"), ("node3", 4, 0, "IDLE")]
    )
    jobs: list[FakeJob] = field(default_factory=list)
    calls: list[list[str]] = field(default_factory=list)
    fail_on: str = ""

    def run(self, args, *, idempotent=True, input=None):
        args = list(args)
        self.calls.append(args)
        if self.fail_on and self.fail_on in args:
            raise SlurmError(args, "slurm_load_jobs error: Unable to contact slurm controller")
        if args[:3] == ["scontrol", "show", "node"]:
            return "\n".join(NODE_LINE.format(name=n, total=t, used=u, state=s) for n, t, u, s in self.nodes) + "\n"
        if args[0] == "squeue":
            return "".join(j.line() + "\n" for j in self.jobs)
        if args[:2] == ["scontrol", "show"] and args[2] == "config":
            return "AccountingStorageType   = accounting_storage/none\n"
        if args[:2] == ["scontrol", "update"]:
            return ""
        if args[:2] in (["scontrol", "release"], ["scontrol", "hold"]):
            for j in self.jobs:  # like slurmctld: a released job waits for resources, a held one is admin-held
                if j.job_id == args[2]:
                    j.reason = "Resources" if args[1] == "release" else "JobHeldAdmin"
            return ""
        raise AssertionError(f"unexpected Slurm command {args}")

    def actions(self, verb: str) -> list[list[str]]:
        return [c for c in self.calls if c[:2] == ["scontrol", verb]]


def summary(uid: str, gmin: int = 1, gmax: int = 8, b: int = 64, it: int = 200) -> str:
    return CostSummary(uid=uid, sig="cnn:test", global_batch=b, iterations=it, min_gpus=gmin, max_gpus=gmax,
                       alpha=0.01, beta=0.002, params=1_000_000).encode()


class StartAs:
    """A tiny policy: start the listed jobs with the given placements (in order)."""

    name = "scripted"

    def __init__(self, plan: dict[str, tuple[tuple[int, int], ...]]):
        self.plan = plan
        self.states: list[SlotState] = []

    def decide(self, state: SlotState) -> SlotResult:
        self.states.append(state)
        starts = [Decision(j.job_id, sum(n for _, n in self.plan[j.job_id]), self.plan[j.job_id], 1.0, "scripted")
                  for j in state.waiting if j.job_id in self.plan]
        return SlotResult(starts=tuple(starts), q=sum(j.work for j in state.waiting), z=1.0)


@pytest.fixture
def db():
    return records.open_records(":memory:")


def service(db, slurm, policy=None, now=1_000_100.0, **cfg) -> Service:
    clock = {"t": now}
    svc = Service(Config(slot_seconds=2, **cfg), db, slurm=slurm, policy=policy or make_policy("lyapunov"),
                  clock=lambda: clock["t"])
    svc.clock_state = clock  # type: ignore[attr-defined]
    return svc


def test_held_job_is_resized_then_released_and_recorded(db):
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000001"))])
    svc = service(db, slurm, StartAs({"101": ((1, 2),)}))
    rep = svc.run_slot()
    assert slurm.actions("update") == [[
        "scontrol", "update", "JobId=101", "NumNodes=1-1", "NumTasks=1", "NumCPUs=1", "TresPerNode=gres:gpu:2",
        "ReqNodeList=node2"]]
    assert slurm.actions("release") == [["scontrol", "release", "101"]]
    assert slurm.calls.index(slurm.actions("update")[0]) < slurm.calls.index(slurm.actions("release")[0])
    row = records.get_job(db, "uid-00000001")
    assert row["state"] == "released" and row["gpus"] == 2 and json.loads(row["nodes"]) == ["node2"]
    assert row["predicted"] == pytest.approx(200 * (0.01 + 0.002 * 32) + 200 * 2 * (1 / 2) * 4e6 / 100e9 * 1
                                             + 200 * 2 * 1 * 10e-6, rel=1e-6)
    assert len(json.loads(row["pred_one"])) == 12 and row["summary"].startswith(q.TAG)
    (dec,) = records.decisions_for(db, "uid-00000001")
    assert dec["action"] == "start" and dec["gpus"] == 2 and dec["slot"] == rep.slot_id
    slot = records.last_slot(db)
    assert slot["waiting"] == 1 and slot["free_gpus"] == 12 and slot["duration"] >= 0
    assert json.loads(slot["decisions"])[0]["slurm_id"] == "101"


def test_policy_sees_the_slurm_state(db):
    slurm = FakeSlurm(
        nodes=[("node1", 4, 3, "MIXED"), ("node2", 4, 0, "IDLE+DRAIN"), ("node3", 4, 1, "MIXED")],
        jobs=[FakeJob("7", summary("uid-00000007", it=100_000), submit=1_000_000.0),
              FakeJob("8", summary("uid-00000008", gmin=2), submit=1_000_050.0, limit="UNLIMITED"),
              FakeJob("9", summary("uid-00000009"), state="RUNNING", reason="None", start=1_000_090.0,
                      nodes=("node3",), gpn=1)],
    )
    pol = StartAs({})
    service(db, slurm, pol).run_slot()
    (st,) = pol.states
    assert st.free == (1, 0, 3)  # busy GPUs (any job) and the drained node are not free
    assert st.gpus_per_node == 4 and st.slot_len == 2 and st.now == 1_000_100.0
    assert [w.job_id for w in st.waiting] == ["7", "8"]
    assert st.waiting[0].submit_time == pytest.approx(1_000_000.0) and st.waiting[0].user == "alice"
    # 100k iterations predict ~2760 s on one GPU: no prediction may exceed the 10-minute limit
    row = st.waiting[0].run_one_node
    assert st.waiting[0].time_limit == 600 and row[0] == 600 and row[np.isfinite(row)].max() <= 600
    assert np.isinf(row[2])  # 3 GPUs do not divide B=64: still not allowed after clamping
    assert st.waiting[1].run_one_node[0] == float("inf")  # below gmin: not allowed
    (r,) = st.running
    assert r.job_id == "9" and r.placement == ((2, 1),)


def test_never_over_allocates_busy_gpus(db):
    # Another user's plain job holds 3 GPUs on every node: 3 free GPUs in all, one per node.
    slurm = FakeSlurm(nodes=[(f"node{i}", 4, 3, "MIXED") for i in (1, 2, 3)],
                      jobs=[FakeJob(str(100 + i), summary(f"uid-0000010{i}", gmin=g, gmax=g), submit=1_000_000.0 + i)
                            for i, g in enumerate([4, 2, 3, 1])])
    svc = service(db, slurm)
    for _ in range(3):
        svc.run_slot()
        svc.clock_state["t"] += 2
    granted = {}
    for u in slurm.actions("update"):
        kv = dict(a.split("=", 1) for a in u[2:])
        nodes = kv["ReqNodeList"].split(",")
        per = int(kv["TresPerNode"].rsplit(":", 1)[1])
        for n in nodes:
            granted[n] = granted.get(n, 0) + per
    assert granted and all(v <= 1 for v in granted.values())
    started = {u[2] for u in slurm.actions("update")}
    assert "JobId=100" not in started  # wants 4 GPUs: more than the 3 free


def test_released_jobs_keep_their_gpus_until_grace_then_are_held_again(db):
    job = FakeJob("5", summary("uid-00000005", gmin=4, gmax=4))
    slurm = FakeSlurm(jobs=[job, FakeJob("6", summary("uid-00000006", gmin=4, gmax=4), submit=1_000_001.0)])
    svc = service(db, slurm, StartAs({"5": ((0, 4),)}), release_grace=10)
    svc.run_slot()
    assert [u[2] for u in slurm.actions("update")] == ["JobId=5"]
    # Slurm has not started it yet (GPUs taken by someone else meanwhile): it is pending, unheld.
    job.reason = "Resources"
    slurm.nodes[0] = ("node1", 4, 4, "ALLOCATED")
    pol = StartAs({})
    svc.policy = pol
    svc.clock_state["t"] += 5
    svc.run_slot()
    assert slurm.actions("hold") == []
    assert pol.states[-1].running[0].job_id == "5"  # still counted as holding its GPUs
    assert [w.job_id for w in pol.states[-1].waiting] == ["6"]
    svc.clock_state["t"] += 10
    svc.run_slot()
    assert slurm.actions("hold") == [["scontrol", "hold", "5"]]
    row = records.get_job(db, "uid-00000005")
    assert row["state"] == "waiting" and "held again" in row["reason"]
    assert [d["action"] for d in records.decisions_for(db, "uid-00000005")] == ["start", "hold"]
    job.reason = "JobHeldAdmin"
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert "5" in [w.job_id for w in pol.states[-1].waiting]  # reconsidered


def test_unequal_multi_node_placement_is_made_expressible(db):
    slurm = FakeSlurm(nodes=[("node1", 4, 1, "MIXED"), ("node2", 4, 0, "IDLE"), ("node3", 4, 2, "MIXED")],
                      jobs=[FakeJob("11", summary("uid-00000011"))])
    svc = service(db, slurm, StartAs({"11": ((0, 3), (1, 3))}))  # 6 GPUs as 3+3 fits: kept
    svc.run_slot()
    assert slurm.actions("update")[-1][-2:] == ["TresPerNode=gres:gpu:3", "ReqNodeList=node1,node2"]

    slurm2 = FakeSlurm(jobs=[FakeJob("12", summary("uid-00000012"))])
    svc2 = service(records.open_records(":memory:"), slurm2, StartAs({"12": ((0, 4), (1, 2))}))  # 4+2: not one TresPerNode
    svc2.run_slot()
    kv = dict(a.split("=", 1) for a in slurm2.actions("update")[-1][2:])
    assert kv["NumNodes"] == "2-2" and kv["TresPerNode"] == "gres:gpu:3" and kv["ReqNodeList"] == "node1,node2"


def test_fit_placement_and_equal_placement():
    assert equal_placement([4, 4, 4], 8) == ((0, 4), (1, 4))
    assert equal_placement([4, 1, 4], 6, prefer=[2]) == ((0, 3), (2, 3))
    assert equal_placement([3, 3, 3], 9) == ((0, 3), (1, 3), (2, 3))
    assert equal_placement([4, 4, 0], 7) is None  # 7 is prime: no k >= 2 splits it
    assert fit_placement(2, ((1, 2),), [4, 1, 4]) == ((0, 2),)
    assert fit_placement(4, ((0, 2), (2, 2)), [4, 1, 4]) == ((0, 2), (2, 2))  # expressible: kept
    assert fit_placement(2, ((1, 2),), [4, 1, 2]) == ((2, 2),)  # node 2 lacks room: best fit elsewhere
    assert fit_placement(5, ((0, 5),), [4, 4, 4]) is None


def test_finished_job_gets_observed_time_and_lyasched_ignores_plain_and_invalid_jobs(db):
    run = FakeJob("21", summary("uid-00000021"))
    bad = FakeJob("22", "lyasched:v1;id=uid-00000022;sig=x")  # missing keys (a plugin-less cluster)
    slurm = FakeSlurm(jobs=[run, bad])
    svc = service(db, slurm, StartAs({"21": ((0, 1),), "22": ((1, 1),)}))
    svc.run_slot()
    assert [u[2] for u in slurm.actions("update")] == ["JobId=21"]
    assert records.get_job(db, "slurm-22")["state"] == "invalid"
    run.state, run.reason, run.start, run.nodes = "RUNNING", "None", 1_000_101.0, ("node1",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    assert records.get_job(db, "uid-00000021")["state"] == "running"
    run.state, run.end = "COMPLETED", 1_000_113.0
    svc.clock_state["t"] += 20
    rep = svc.run_slot()
    row = records.get_job(db, "uid-00000021")
    assert rep.finished == ["21"] and row["state"] == "finished" and row["observed"] == pytest.approx(12.0)
    assert row["predicted"] > 0 and row["slurm_state"] == "COMPLETED"
    # Gone from squeue (MinJobAge) with no accounting: nothing changes for finished jobs.
    slurm.jobs = []
    svc.run_slot()
    assert records.get_job(db, "uid-00000021")["observed"] == pytest.approx(12.0)


def test_jobs_already_finished_when_first_seen_are_not_recorded(db):
    slurm = FakeSlurm(jobs=[FakeJob("91", summary("uid-00000091"), state="COMPLETED", reason="None",
                                    start=1_000_010.0, end=1_000_020.0, nodes=("node1",))])
    service(db, slurm, StartAs({})).run_slot()
    assert records.get_job(db, "uid-00000091") is None and records.list_jobs(db) == []


def test_running_job_that_vanishes_without_accounting_is_marked_vanished(db):
    job = FakeJob("31", summary("uid-00000031"), state="RUNNING", reason="None", start=1_000_050.0, nodes=("node1",))
    slurm = FakeSlurm(jobs=[job])
    svc = service(db, slurm, StartAs({}))
    svc.run_slot()
    slurm.jobs = []
    svc.run_slot()
    assert records.get_job(db, "uid-00000031")["state"] == "vanished"
    assert ["scontrol", "show", "config"] in slurm.calls  # accounting detected once...
    svc.run_slot()
    assert slurm.calls.count(["scontrol", "show", "config"]) == 1


def test_vanished_job_is_completed_from_sacct_when_accounting_exists(db):
    class WithAccounting(FakeSlurm):
        def run(self, args, *, idempotent=True, input=None):
            if list(args[:3]) == ["scontrol", "show", "config"]:
                self.calls.append(list(args))
                return "AccountingStorageType   = accounting_storage/slurmdbd\n"
            if args[0] == "sacct":
                self.calls.append(list(args))
                return (f"32|alice|COMPLETED|{ts(1_000_000)}|{ts(1_000_050)}|{ts(1_000_095)}|45|1|billing=1,gres/gpu=1\n"
                        f"32.batch||COMPLETED|{ts(1_000_050)}|{ts(1_000_050)}|{ts(1_000_095)}|45|1|\n")
            return super().run(args, idempotent=idempotent, input=input)

    job = FakeJob("32", summary("uid-00000032"))
    slurm = WithAccounting(jobs=[job])
    svc = service(db, slurm, StartAs({"32": ((0, 1),)}))
    svc.run_slot()
    slurm.jobs = []  # gone from squeue before the service saw it end
    rep = svc.run_slot()
    sacct = [c for c in slurm.calls if c[0] == "sacct"]
    assert sacct and sacct[0][-1] == "32"
    row = records.get_job(db, "uid-00000032")
    assert rep.finished == ["32"] and row["state"] == "finished" and row["observed"] == 45.0
    assert row["slurm_state"] == "COMPLETED" and "sacct" in row["reason"]


def test_slurm_failure_is_recorded_not_raised(db):
    slurm = FakeSlurm(jobs=[FakeJob("41", summary("uid-00000041"))], fail_on="squeue")
    rep = service(db, slurm).run_slot()
    assert "Unable to contact" in rep.error
    assert records.last_slot(db)["error"] == rep.error
    assert slurm.actions("release") == []


def test_failed_update_leaves_job_held(db):
    slurm = FakeSlurm(jobs=[FakeJob("51", summary("uid-00000051"))], fail_on="JobId=51")
    service(db, slurm, StartAs({"51": ((0, 1),)})).run_slot()
    assert slurm.actions("release") == []
    assert records.get_job(db, "uid-00000051")["state"] == "waiting"
    assert [d["action"] for d in records.decisions_for(db, "uid-00000051")] == ["failed"]


def test_users_filter_and_duplicate_uids(db):
    slurm = FakeSlurm(jobs=[FakeJob("61", summary("uid-00000061"), user="bob"),
                            FakeJob("62", summary("uid-00000062")),
                            FakeJob("63", summary("uid-00000062"), submit=1_000_010.0)])
    pol = StartAs({})
    service(db, slurm, pol, users=("alice",)).run_slot()
    assert [w.job_id for w in pol.states[0].waiting] == ["63"]  # bob filtered; newest job of a shared uid


def test_lyapunov_policy_runs_a_big_job_across_two_nodes(db):
    big = summary("uid-00000071", gmin=8, gmax=8, b=256, it=100)
    slurm = FakeSlurm(jobs=[FakeJob("71", big)])
    rep = service(db, slurm).run_slot()
    (s,) = rep.started
    assert s["gpus"] == 8 and len(s["nodes"]) == 2 and s["per_node"] == 4


def test_stop_request_leaves_jobs_held(db):
    slurm = FakeSlurm(jobs=[FakeJob("81", summary("uid-00000081"))])
    svc = service(db, slurm, StartAs({"81": ((0, 1),)}))
    svc.stop_requested.set()
    svc.run_slot()
    assert slurm.actions("update") == [] and records.get_job(db, "uid-00000081")["state"] == "waiting"


# ---------------------------------------------------------------- config


def test_config_defaults_and_full_file(tmp_path, monkeypatch):
    monkeypatch.delenv("LYASCHED_CONFIG", raising=False)
    monkeypatch.setattr("lyasched.config.DEFAULT_PATH", tmp_path / "absent.toml")
    assert load_config() == Config()  # no file at the default path: the defaults
    p = tmp_path / "c.toml"
    p.write_text(
        '[service]\nslot_seconds = 3\ndb = "state/l.db"\nrelease_grace = 0\nusers = ["a", "b"]\nlog_level = "debug"\n'
        '[policy]\nname = "fifo"\n[policy.params]\nseed = 3\n'
        "[cluster]\ngpu_mem = 16e9\nintra = { bandwidth = 50e9 }\ninter = { bandwidth = 1e9, latency = 1e-4 }\n"
    )
    c = load_config(p)
    assert (c.slot_seconds, c.release_grace, c.users, c.log_level, c.policy, dict(c.params)) == (
        3.0, 0.0, ("a", "b"), "DEBUG", "fifo", {"seed": 3})
    assert c.db == tmp_path / "state" / "l.db"
    assert c.intra.bandwidth == 50e9 and c.intra.latency == Config().intra.latency and c.inter.latency == 1e-4


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"service": {"slot_seconds": 0}}, "service.slot_seconds must be > 0"),
        ({"service": {"slot_seconds": "fast"}}, "service.slot_seconds must be a number"),
        ({"service": {"slots": 3}}, "unknown key service.slots"),
        ({"policy": {"name": "magic"}}, "policy.name must be one of"),
        ({"cluster": {"inter": {"bandwidth": -1}}}, "cluster.inter.bandwidth must be > 0"),
        ({"cluster": {"intra": {"speed": 1}}}, "unknown key cluster.intra.speed"),
        ({"services": {}}, "unknown table [services]"),
        ({"service": {"users": "alice"}}, "service.users must be a list"),
        ({"service": {"log_level": "LOUD"}}, "service.log_level must be one of"),
    ],
)
def test_config_errors_are_one_line(doc, message):
    with pytest.raises(ConfigError) as e:
        from_mapping(doc, source="x.toml")
    assert message in str(e.value) and "\n" not in str(e.value) and str(e.value).startswith("x.toml: ")


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[service\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(bad)


def test_serve_once_with_bad_config_exits_with_one_line(tmp_path):
    from click.testing import CliRunner

    from lyasched.cli import main

    p = tmp_path / "c.toml"
    p.write_text("[service]\nslot_seconds = -1\n")
    r = CliRunner().invoke(main, ["serve", "--config", str(p), "--once"])
    assert r.exit_code == 2 and "service.slot_seconds must be > 0" in r.output
    assert not (tmp_path / "lyasched.db").exists()


def test_observed_run_times_correct_later_predictions_of_the_same_model(db):
    """A job that ran 4x longer than predicted creates the model's cost-table entry and moves its
    correction up (bounded); the next job of that model is predicted longer than the first was."""
    from lyasched.store import costtable

    first = FakeJob("31", summary("uid-00000031"))
    slurm = FakeSlurm(jobs=[first])
    svc = service(db, slurm, StartAs({"31": ((0, 1),), "32": ((0, 1),)}))
    svc.run_slot()
    pred1 = records.get_job(db, "uid-00000031")["predicted"]
    first.state, first.reason, first.start, first.nodes = "RUNNING", "None", 1_000_101.0, ("node1",)
    svc.clock_state["t"] += 2
    svc.run_slot()
    first.state, first.end = "COMPLETED", 1_000_101.0 + 4 * pred1
    svc.clock_state["t"] += 4 * pred1 + 2
    svc.run_slot()
    entry = costtable.get(db, "cnn:test", "gpu")
    assert entry is not None and entry.observations == 1
    assert 1.0 < entry.correction <= 2.0
    second = FakeJob("32", summary("uid-00000032"), submit=svc.clock_state["t"])
    slurm.jobs.append(second)
    svc.clock_state["t"] += 2
    svc.run_slot()
    pred2 = records.get_job(db, "uid-00000032")["predicted"]
    assert pred2 == pytest.approx(pred1 * entry.correction, rel=1e-6)
    # rows are kept only for jobs still waiting: the finished first job's are gone
    assert not any(k[0] == "uid-00000031" for k in svc.inputs.rows)


def test_a_skipped_decision_records_its_placement_by_node_name(db):
    """A placement Slurm cannot express (7 GPUs as 4+3) is skipped, and its decision row names the
    nodes as every other placement in the records does (it used to keep the policy's index pairs)."""
    from lyasched.store.jobrecord import decisions

    slurm = FakeSlurm(nodes=[("node1", 4, 0, "IDLE"), ("node2", 4, 1, "MIXED")], jobs=[FakeJob("13", summary("uid-00000013"))])
    svc = service(db, slurm, StartAs({"13": ((0, 4), (1, 3))}))
    svc.run_slot()
    assert not slurm.actions("update") and not slurm.actions("release")
    (d,) = [d for d in decisions(db, "uid-00000013") if d.action == "skip"]
    assert json.loads(d.to_row()["placement"]) == [["node1", 4], ["node2", 3]]
