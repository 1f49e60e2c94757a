"""The service's tenant ledger (lyasched.live.tenants): the simulator's events seen through slots,
rebuilt from the records at start, and handed to the policy (``SlotState.tenants``) once two
tenants have been seen, as `replay` hands it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lyasched.live.tenants import LiveTenants
from lyasched.policy.snapshot import RunningObs
from lyasched.policy.state import WaitingJob
from lyasched.store import records
from test_service import FakeJob, FakeSlurm, StartAs, db, service, summary  # noqa: F401 (db: a fixture)


def waiting(job_id: str, user: str, t: float, gpus: int = 2) -> WaitingJob:
    return WaitingJob(job_id, t, 100.0, np.ones(4), np.ones(4), requested_gpus=gpus, user=user)


def running(job_id: str, user: str, t: float, gpus: int = 2) -> RunningObs:
    return RunningObs(job_id, ((0, gpus),), t, user=user)


def test_ledger_follows_slots_like_the_simulator_events():
    lt = LiveTenants()
    assert lt.book(0.0, 4, [waiting("2", "bob", 0.0)], [running("1", "alice", 0.0)]) is not None
    book = lt.book(10.0, 4, [waiting("2", "bob", 0.0)], [running("1", "alice", 0.0)])
    # demand: alice holds 2, bob asks 2 of 4: each entitled 2 GPUs, alice received 2 x 10 s
    assert book.received == {"alice": 20.0, "bob": 0.0} and book.entitled == {"alice": 20.0, "bob": 20.0}
    assert book.deficit("bob") == 20.0
    # bob's job started at t=12 (seen at the slot at 14), alice's ended (seen at 14)
    book = lt.book(14.0, 4, [], [running("2", "bob", 12.0)])
    assert book.received["bob"] == pytest.approx(4.0) and book.received["alice"] == pytest.approx(28.0)
    assert book.entitled["bob"] == pytest.approx(28.0)  # asked 2 until 12, then held 2: still entitled 2/s
    assert book.entitled["alice"] == pytest.approx(28.0)  # alice held 2 until the slot that saw her end


def test_one_tenant_gives_no_tenant_input_and_shares_weigh():
    lt = LiveTenants()
    assert lt.book(0.0, 4, [waiting("1", "alice", 0.0)], []) is None
    lt = LiveTenants({"alice": 3.0})
    lt.book(0.0, 4, [waiting("1", "alice", 0.0, 4), waiting("2", "bob", 0.0, 4)], [])
    book = lt.book(10.0, 4, [waiting("1", "alice", 0.0, 4), waiting("2", "bob", 0.0, 4)], [])
    assert book.entitled == {"alice": pytest.approx(30.0), "bob": pytest.approx(10.0)} and book.shares == {"alice": 3.0}


def test_rebuilt_from_the_records_past():
    rows = [{"user": "alice", "state": "finished", "submit_time": 0.0, "started": 0.0, "ended": 10.0, "gpus": 2},
            {"user": "bob", "state": "finished", "submit_time": 0.0, "started": 10.0, "ended": 20.0, "gpus": 2},
            {"user": "carol", "state": "waiting", "submit_time": 5.0, "started": None, "ended": None, "gpus": None}]
    lt = LiveTenants()
    lt.rebuild(rows, 4)
    book = lt.book(20.0, 4, [], [])
    assert book.received == {"alice": 20.0, "bob": 20.0}
    assert book.entitled == {"alice": pytest.approx(20.0), "bob": pytest.approx(40.0)}  # bob asked 0-10, held 10-20


def test_the_service_hands_the_policy_its_tenants(db):
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101")),
                            FakeJob("102", summary("uid-00000102"), user="bob", state="RUNNING", reason="None",
                                    start=1_000_000.0, nodes=("node1",), gpn=2)])
    policy = StartAs({})
    svc = service(db, slurm, policy)
    svc.run_slot()
    t = policy.states[-1].tenants
    assert t is not None and set(t.received) == {"alice", "bob"}
    assert t.received["bob"] > 0 and t.entitled["alice"] > 0
    one = FakeSlurm(jobs=[FakeJob("201", summary("uid-00000201"))])
    p1 = StartAs({})
    service(records.open_records(":memory:"), one, p1).run_slot()
    assert p1.states[-1].tenants is None  # one tenant: decided exactly as without tenants
    assert not math.isnan(t.deficit("alice"))


def test_lyastat_tenants_shows_the_last_book(db, tmp_path):
    from click.testing import CliRunner

    from lyasched.cli.lyastat import main

    path = tmp_path / "service.db"
    fdb = records.open_records(path)
    slurm = FakeSlurm(jobs=[FakeJob("101", summary("uid-00000101")),
                            FakeJob("102", summary("uid-00000102"), user="bob", state="RUNNING", reason="None",
                                    start=1_000_000.0, nodes=("node1",), gpn=2)])
    service(fdb, slurm, StartAs({})).run_slot()
    r = CliRunner().invoke(main, ["--db", str(path), "--tenants", "--json"])
    assert r.exit_code == 0, r.output
    import json

    got = json.loads(r.output)["tenants"]["tenants"]
    assert set(got) == {"alice", "bob"} and got["bob"]["received_gpu_s"] > 0 and got["alice"]["share"] == 1.0
    text = CliRunner().invoke(main, ["--db", str(path), "--tenants"]).output
    assert "TENANT" in text and "alice" in text and "bob" in text
