"""When the service stops (lyasched.live.lease, lyasched.live.failsafe): the lease, the fail-safe's
release of held jobs to plain Slurm, a service that comes back, and fencing of a stale service.
Unit tests against the fake Slurm runner of tests/test_service.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.cli import main
from lyasched.config import Config, ConfigError, from_mapping, lease_path
from lyasched.live import failsafe as fs
from lyasched.live import lease as leases
from lyasched.live.lease import Lease, LeaseKeeper
from lyasched.policy import make_policy
from lyasched.service import Service
from lyasched.slurm import SlurmError, as_backend
from lyasched.store import records
from lyasched.summary import CostSummary
from test_service import FakeJob, FakeSlurm, StartAs, summary

T0 = 1_000_100.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def fresh_lease(path: Path, renewed_at: float, slot: float = 2.0, epoch: int = 1, holder: str = "svc-host:1") -> None:
    leases.write(path, Lease(holder, epoch, renewed_at, slot))


def run_failsafe(slurm: FakeSlurm, path: Path, now: float, grace: float | None = None, **kw) -> fs.Result:
    def annotate(job_id: str, text: str) -> None:
        slurm.run(["scontrol", "update", f"JobId={job_id}", f"AdminComment={text}"])

    return fs.run(as_backend(slurm), annotate, path, grace, clock=lambda: now, holder="failsafe@ctl:9", **kw)


def queue() -> list[FakeJob]:
    return [
        FakeJob("101", summary("uid-00000101", gmin=2)),                       # held: 1x2
        FakeJob("102", summary("uid-00000102", gmin=6, gmax=8)),               # 6 does not divide 64: 8 = 2x4
        FakeJob("103", summary("uid-00000103"), state="RUNNING", reason="None", start=T0 - 50, nodes=("node1",)),
        FakeJob("104", "plain job, not lyasched"),                             # held, but not ours
        FakeJob("105", summary("uid-00000105"), reason="Resources"),           # released already (pending)
        FakeJob("106", summary("uid-00000106", gmin=3, b=48), user="bob"),      # held: 1x3
    ]


def updates(slurm: FakeSlurm) -> list[dict]:
    return [dict(a.split("=", 1) for a in c[2:]) for c in slurm.actions("update")]


# ---------------------------------------------------------------- request


def test_request_is_the_smallest_runnable_count_laid_out_as_submitted():
    def s(gmin, gmax=16, b=64, m1=0.0):
        return CostSummary(uid="uid-00000001", sig="cnn:test", global_batch=b, iterations=10, min_gpus=gmin,
                           max_gpus=gmax, alpha=0.01, beta=0.002, params=1000, mem_per_sample=m1)

    assert fs.request_of(s(1), 4, 3, 32e9) == (1, 1)
    assert fs.request_of(s(3), 4, 3, 32e9) == (1, 4)  # 3 does not divide 64
    assert fs.request_of(s(8), 4, 3, 32e9) == (2, 4)
    assert fs.request_of(s(6, b=48), 4, 3, 32e9) == (2, 3)
    assert fs.request_of(s(1, m1=1e9), 4, 3, 32e9) == (1, 2)  # 64 samples need 64 GB: 2 GPUs of 32
    assert fs.request_of(s(16), 4, 3, 32e9) is None  # more than the cluster
    assert fs.request_of(s(2, b=2), 1, 3, 32e9) == (2, 1)  # one GPU per node
    assert fs.request_of(s(5, gmax=7, b=35), 4, 3, 32e9) is None  # 5 and 7: prime, over a node
    assert fs.default_grace(2) == 60 and fs.default_grace(30) == 150


# ---------------------------------------------------------------- the fail-safe alone


def test_fresh_lease_failsafe_does_nothing(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 59)
    slurm = FakeSlurm(jobs=queue())
    res = run_failsafe(slurm, path, T0)
    assert res.action == "none" and "lease fresh" in res.why and res.grace == 60
    assert slurm.calls == []  # not even a read of Slurm
    assert leases.read(path) == Lease("svc-host:1", 1, T0 - 59, 2.0)
    assert not leases.log_path(path).exists()


def test_no_lease_failsafe_does_nothing(tmp_path):
    slurm = FakeSlurm(jobs=queue())
    res = run_failsafe(slurm, tmp_path / "lease.json", T0)
    assert res.action == "no-lease" and slurm.calls == []


def test_stale_lease_releases_exactly_the_waiting_held_jobs_at_their_request(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 61, epoch=4)
    slurm = FakeSlurm(jobs=queue())
    res = run_failsafe(slurm, path, T0)
    assert res.action == "released" and res.epoch == 5 and "did not renew its lease for 61s" in res.why
    assert [e["job_id"] for e in res.released] == ["101", "102", "106"]
    assert [c[2] for c in slurm.actions("release")] == ["101", "102", "106"]
    sized = [u for u in updates(slurm) if "TresPerNode" in u]
    assert sized == [
        {"JobId": "101", "NumNodes": "1-1", "NumTasks": "1", "NumCPUs": "1", "TresPerNode": "gres:gpu:2", "ReqNodeList": ""},
        {"JobId": "102", "NumNodes": "2-2", "NumTasks": "2", "NumCPUs": "2", "TresPerNode": "gres:gpu:4", "ReqNodeList": ""},
        {"JobId": "106", "NumNodes": "1-1", "NumTasks": "1", "NumCPUs": "1", "TresPerNode": "gres:gpu:3", "ReqNodeList": ""},
    ]
    # who and why, in the job itself, before it is changed
    notes = [u for u in updates(slurm) if "AdminComment" in u]
    assert [n["JobId"] for n in notes] == ["101", "102", "106"]
    assert all(n["AdminComment"].startswith(fs.ADMIN_TAG) and "failsafe@ctl:9 (epoch 5)" in n["AdminComment"]
               and "svc-host:1 (epoch 4) did not renew" in n["AdminComment"] for n in notes)
    first = [i for i, c in enumerate(slurm.calls) if c[:3] == ["scontrol", "update", "JobId=101"]]
    assert "AdminComment" in slurm.calls[first[0]][3] and first[0] < slurm.calls.index(["scontrol", "release", "101"])
    # the lease is the fail-safe's now (a newer epoch fences the old service), with its marker
    cur = leases.read(path)
    assert cur.role == leases.FAILSAFE and cur.epoch == 5 and cur.holder == "failsafe@ctl:9"
    assert cur.failsafe["released"] == ["101", "102", "106"] and cur.failsafe["service_epoch"] == 4
    logged = leases.read_log(leases.log_path(path))
    assert [(e["job_id"], e["gpus"], e["user"], e["epoch"]) for e in logged] == [
        ("101", 2, "alice", 5), ("102", 8, "alice", 5), ("106", 3, "bob", 5)]


def test_failsafe_keeps_releasing_new_jobs_while_it_holds_the_lease(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 100)
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))])
    run_failsafe(slurm, path, T0)
    slurm.jobs.append(FakeJob("107", summary("uid-00000107")))  # submitted meanwhile: held by the plugin
    res = run_failsafe(slurm, path, T0 + 60)
    assert [e["job_id"] for e in res.released] == ["107"] and res.epoch == 2
    assert [c[2] for c in slurm.actions("release")] == ["101", "107"]  # none twice
    assert leases.read(path).failsafe["released"] == ["101", "107"]


def test_failsafe_respects_users_and_grace_override(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 100)
    slurm = FakeSlurm(jobs=queue())
    assert run_failsafe(slurm, path, T0, grace=120).action == "none"
    res = run_failsafe(slurm, path, T0, grace=90, users=("bob",))
    assert [e["job_id"] for e in res.released] == ["106"]


def test_failed_release_is_reported_and_the_job_stays_held(tmp_path):
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 100)
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))], fail_on="release")
    res = run_failsafe(slurm, path, T0)
    assert res.released == [] and [f["job_id"] for f in res.failed] == ["101"]
    assert leases.read_log(leases.log_path(path)) == []


def test_refused_admin_comment_does_not_stop_the_release(tmp_path):
    """Slurm lets only an Administrator set AdminComment (the docker cluster's service account is an
    Operator): the job is released anyway and the log says the note is missing and why."""
    path = tmp_path / "lease.json"
    fresh_lease(path, renewed_at=T0 - 100)
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101", gmin=2))])

    def annotate(job_id: str, text: str) -> None:
        raise SlurmError(["scontrol", "update"], "Access/permission denied for job " + job_id, 1)

    res = fs.run(as_backend(slurm), annotate, path, None, clock=lambda: T0, holder="failsafe@ctl:9")
    assert [e["job_id"] for e in res.released] == ["101"] and not res.failed
    assert ["scontrol", "release", "101"] in slurm.calls
    (entry,) = leases.read_log(leases.log_path(path))
    assert entry["admin_comment"] is False and "permission denied" in entry["admin_comment_error"]
    assert entry["by"] == "failsafe@ctl:9" and "did not renew" in entry["why"]


# ---------------------------------------------------------------- the service comes back


def service(db, slurm, path: Path, clock: Clock, policy=None, take_now=True, **cfg) -> Service:
    keeper = LeaseKeeper(path, 2.0, take_now=take_now, clock=clock)
    return Service(Config(slot_seconds=2, **cfg), db, slurm=slurm, policy=policy or make_policy("lyapunov"),
                   clock=clock, lease=keeper)


def test_service_renews_its_lease_every_slot(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    svc = service(records.open_records(":memory:"), FakeSlurm(), path, clock)
    svc.run_slot()
    first = leases.read(path)
    assert first.epoch == 1 and first.role == leases.SERVICE and first.renewed_at == T0 and first.slot_seconds == 2
    clock.t += 2
    svc.run_slot()
    assert leases.read(path) == Lease(first.holder, 1, T0 + 2, 2.0)


def test_service_back_records_the_failsafe_releases_and_takes_over_the_rest(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    db = records.open_records(":memory:")
    jobs = [FakeJob("101", summary("uid-00000101", gmin=2), submit=T0 - 90),
            FakeJob("102", summary("uid-00000102"), submit=T0 - 80)]
    slurm = FakeSlurm(jobs=jobs)
    svc = service(db, slurm, path, clock, StartAs({}), release_grace=10)
    svc.run_slot()  # records both, starts none
    assert {r["state"] for r in records.list_jobs(db)} == {"waiting"}
    # the service dies; after the grace the fail-safe releases both
    clock.t += 100
    run_failsafe(slurm, path, clock.t)
    assert [c[2] for c in slurm.actions("release")] == ["101", "102"]
    jobs[0].state, jobs[0].reason, jobs[0].start, jobs[0].nodes, jobs[0].gpn = "RUNNING", "None", clock.t + 1, ("node1",), 2
    jobs.append(FakeJob("108", summary("uid-00000108"), submit=clock.t + 5))  # submitted after the fail-safe ran
    # a new service run (same db, new holder): takes the lease with a newer epoch
    clock.t += 30
    n_calls = len(slurm.calls)
    svc2 = service(db, slurm, path, clock, StartAs({"108": ((2, 1),)}), release_grace=10)
    rep = svc2.run_slot()
    assert rep.error == ""
    cur = leases.read(path)
    assert cur.role == leases.SERVICE and cur.epoch == 3 and cur.holder == svc2.lease.holder
    new = slurm.calls[n_calls:]
    assert [c for c in new if c[:2] == ["scontrol", "release"]] == [["scontrol", "release", "108"]]
    r101, r102 = records.get_job(db, "uid-00000101"), records.get_job(db, "uid-00000102")
    assert r101["state"] == "running" and r101["gpus"] == 2
    assert r102["state"] == "released" and r102["reason"].startswith(fs.REASON) and r102["released_at"] == T0 + 100
    decs = {d["slurm_id"]: d for d in db.query("select * from decisions where action = 'failsafe'")}
    assert set(decs) == {"101", "102"} and decs["102"]["gpus"] == 1 and "epoch 2" in decs["102"]["reason"]
    # later slots, past release_grace: 102 is left to Slurm (never held again, never released again);
    # no second fail-safe decision
    jobs[2].state, jobs[2].reason, jobs[2].start, jobs[2].nodes = "RUNNING", "None", clock.t + 1, ("node3",)
    for _ in range(3):
        clock.t += 20
        svc2.run_slot()
    assert [c for c in slurm.calls[n_calls:] if c[:2] in (["scontrol", "release"], ["scontrol", "hold"])] == [
        ["scontrol", "release", "108"]]
    assert len(list(db.query("select * from decisions where action = 'failsafe'"))) == 2
    assert records.get_job(db, "uid-00000102")["state"] == "released"
    # a third service run adopts nothing again
    svc3 = service(db, slurm, path, clock, StartAs({}), release_grace=10)
    clock.t += 2
    svc3.run_slot()
    assert len(list(db.query("select * from decisions where action = 'failsafe'"))) == 2
    # every job released once, in all
    rel = [c[2] for c in slurm.actions("release")]
    assert sorted(rel) == ["101", "102", "108"]


# ---------------------------------------------------------------- fencing, standby


def test_stale_service_with_an_old_epoch_does_not_act(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    db_a, db_b = records.open_records(":memory:"), records.open_records(":memory:")
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))])
    a = service(db_a, slurm, path, clock, StartAs({}))
    a.run_slot()
    b = service(db_b, slurm, path, clock, StartAs({}))  # a new active elsewhere: takes the lease
    clock.t += 2
    b.run_slot()
    assert leases.read(path).epoch == 2
    a.policy = StartAs({"101": ((0, 1),)})
    n = len(slurm.calls)
    rep = a.run_slot()  # A wakes up: a newer epoch, renewed just now -> standby, no Slurm call, nothing recorded
    assert rep.error.startswith("standby: lease held by") and rep.slot_id is None
    assert slurm.calls[n:] == [] and records.slot_count(db_a) == 1
    assert leases.read(path).epoch == 2 and a.lease.epoch is None


def test_lease_lost_during_a_slot_fences_its_actions(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))])
    other = LeaseKeeper(path, 2.0, clock=clock, holder="other:2")

    class TakeWhileDeciding(StartAs):
        def decide(self, state):
            other.hold()  # another service takes the lease between this slot's start and its actions
            return super().decide(state)

    svc = service(records.open_records(":memory:"), slurm, path, clock, TakeWhileDeciding({"101": ((0, 1),)}))
    rep = svc.run_slot()
    assert rep.error.startswith("fenced, not acting") and "other:2" in rep.error
    assert slurm.actions("update") == [] and slurm.actions("release") == []


def test_standby_takes_over_after_two_slots_and_the_old_active_stops(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101"))])
    a = service(records.open_records(":memory:"), slurm, path, clock, StartAs({}))
    b = service(records.open_records(":memory:"), slurm, path, clock, StartAs({}), take_now=False)
    a.run_slot()
    clock.t += 2
    assert b.run_slot().error.startswith("standby")  # A renewed 2 s ago
    clock.t += 2  # A silent for 4 s = 2 slots: not yet
    assert b.run_slot().error.startswith("standby")
    clock.t += 0.5
    assert b.run_slot().error == "" and leases.read(path).epoch == 2 and leases.read(path).holder == b.lease.holder
    clock.t += 1
    assert a.run_slot().error.startswith("standby")  # the old active wakes up: newer epoch, live: it stands by


def test_failsafe_then_stale_service_wakes_up_takes_back_before_acting(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    db = records.open_records(":memory:")
    jobs = [FakeJob("101", summary("uid-00000101"))]
    slurm = FakeSlurm(jobs=jobs)
    a = service(db, slurm, path, clock, StartAs({}), release_grace=10)
    a.run_slot()
    clock.t += 200  # A hung (not dead); the fail-safe released its jobs
    run_failsafe(slurm, path, clock.t)
    jobs.append(FakeJob("102", summary("uid-00000102")))
    a.policy = StartAs({"101": ((0, 1),), "102": ((1, 1),)})
    clock.t += 1
    rep = a.run_slot()  # it takes the lease back (epoch 3), records 101 as the fail-safe's, starts only 102
    assert rep.error == "" and leases.read(path).epoch == 3
    assert [c[2] for c in slurm.actions("release")] == ["101", "102"]
    assert records.get_job(db, "uid-00000101")["reason"].startswith(fs.REASON)


# ---------------------------------------------------------------- config, command


def test_config_failsafe_section(tmp_path):
    cfg = from_mapping({"service": {"db": "/x/y/l.db"}})
    assert lease_path(cfg) == Path("/x/y/lease.json") and cfg.failsafe_grace is None
    cfg = from_mapping({"failsafe": {"lease": "shared/lease.json", "grace": 90, "takeover_slots": 3}},
                       base_dir=tmp_path)
    assert lease_path(cfg) == tmp_path / "shared/lease.json" and cfg.failsafe_grace == 90
    assert cfg.failsafe_takeover_slots == 3
    for bad, msg in [({"grace": 0}, "failsafe.grace must be > 0"), ({"takeover_slots": 4}, "takeover_slots must be <= 3"),
                     ({"lease": ""}, "failsafe.lease must be"), ({"x": 1}, "unknown key failsafe.x")]:
        with pytest.raises(ConfigError, match=msg):
            from_mapping({"failsafe": bad})


def test_failsafe_command_fresh_and_missing_lease(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\ndb = "{tmp_path / "l.db"}"\n')
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["action"] == "no-lease"
    fresh_lease(tmp_path / "lease.json", renewed_at=__import__("time").time(), slot=30)
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg)])
    assert r.exit_code == 0 and r.output.startswith("lease fresh") and "grace 150s" in r.output
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg), "--grace", "-1"])
    assert r.exit_code == 2 and "--grace must be > 0" in r.output


def test_service_back_within_release_grace_leaves_a_pending_failsafe_job_alone(tmp_path):
    path, clock = tmp_path / "lease.json", Clock()
    db = records.open_records(":memory:")
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101", gmin=2))])
    service(db, slurm, path, clock, StartAs({}), release_grace=60).run_slot()
    clock.t += 70
    run_failsafe(slurm, path, clock.t)  # released; Slurm has not started it (reason Resources)
    clock.t += 5
    svc = service(db, slurm, path, clock, StartAs({"101": ((0, 1),)}), release_grace=60)
    for i in range(3):
        rep = svc.run_slot()
        # within the grace it counts as released (running, to the policy); after it, it is left to Slurm
        assert rep.error == "" and rep.running == (1 if i < 2 else 0) and rep.waiting == 0
        clock.t += 40  # past the release grace (from the fail-safe's release) at the third slot
    assert slurm.actions("hold") == [] and [c[2] for c in slurm.actions("release")] == ["101"]
    assert records.get_job(db, "uid-00000101")["state"] == "released"


@pytest.mark.parametrize("slot,grace,ok", [(30, 59, False), (30, 60, True), (40, 79, False), (40, 80, True),
                                           (2, 1, False)])
def test_failsafe_refuses_a_grace_below_two_slots_or_60s(tmp_path, slot, grace, ok):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\nslot_seconds = {slot}\ndb = "{tmp_path / "l.db"}"\n')
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg), "--grace", str(grace)])
    assert (r.exit_code == 0) is ok, r.output
    if not ok:
        assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
        assert f"--grace must be at least {max(60, 2 * slot)} s" in r.output and f"got {grace}" in r.output
    cfg.write_text(f'[service]\nslot_seconds = {slot}\ndb = "{tmp_path / "l.db"}"\n[failsafe]\ngrace = {grace}\n')
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg)])
    assert (r.exit_code == 0) is ok, r.output
    if not ok:
        assert r.exit_code == 2 and "failsafe.grace must be at least" in r.output


def test_serve_refuses_a_grace_below_two_slots_or_60s(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\nslot_seconds = 30\ndb = "{tmp_path / "l.db"}"\n[failsafe]\ngrace = 45\n')
    r = CliRunner().invoke(main, ["serve", "--config", str(cfg), "--once"])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "failsafe.grace must be at least 60 s" in r.output and not (tmp_path / "l.db").exists()
    # a longer slot given on the command line raises the floor of the same config
    cfg.write_text(f'[service]\nslot_seconds = 30\ndb = "{tmp_path / "l.db"}"\n[failsafe]\ngrace = 90\n')
    r = CliRunner().invoke(main, ["serve", "--config", str(cfg), "--once", "--slot-seconds", "60"])
    assert r.exit_code == 2 and "at least 120 s (2 slots of 60 s" in r.output


def test_failsafe_without_the_lease_directory_is_one_line(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[service]\ndb = "{tmp_path / "l.db"}"\n[failsafe]\nlease = "{tmp_path / "gone" / "lease.json"}"\n')
    r = CliRunner().invoke(main, ["failsafe", "--config", str(cfg)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
    assert "Errno" not in r.output and f"no directory {tmp_path / 'gone'} for the service's lease" in r.output


def test_release_request_is_laid_out_on_the_nodes_of_the_jobs_constraint():
    """A job's --constraint (summary key ft) stays on it in Slurm: the fail-safe's shape must fit the
    nodes with those features, or the released job would pend forever (BadConstraints)."""
    from lyasched.slurm.types import NodeInfo

    nodes = [NodeInfo("node1", "IDLE", 4, 0, gpu_type="a100", features=("a100",)),
             NodeInfo("node2", "IDLE", 4, 0, gpu_type="a100", features=("a100",)),
             NodeInfo("node3", "IDLE", 4, 0, gpu_type="t4", features=("t4",))]

    def s(gmin, constraint="", b=64):
        return CostSummary(uid="uid-00000001", sig="cnn:test", global_batch=b, iterations=10, min_gpus=gmin,
                           max_gpus=16, alpha=0.01, beta=0.002, params=1000, constraint=constraint)

    assert fs.typed_request(s(8), (), nodes, 32e9) == (2, 4, "")
    assert fs.typed_request(s(8, "t4"), (), nodes, 32e9) is None  # one t4 node of 4 GPUs
    assert fs.typed_request(s(2, "t4"), (), nodes, 32e9) == (1, 2, "")
    assert fs.typed_request(s(6, "a100", b=48), (), nodes, 32e9) == (2, 3, "")
    # a type it allows but its constraint excludes is passed over for the next
    assert fs.typed_request(s(2, "t4"), ("a100", "t4"), nodes, 32e9) == (1, 2, "t4")
    assert fs.typed_request(s(2, "a100|t4"), ("a100", "t4"), nodes, 32e9) == (1, 2, "a100")
