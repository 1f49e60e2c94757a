"""Slurm's GPU limits (lyasched.slurm.limits, lyasched.live.limits): parsed from sacctmgr/squeue
text as Slurm 22.05 prints it, counted per scope, and a service that never releases a job a
limit would keep pending (the real-cluster test: tests/test_docker_limits.py)."""

from __future__ import annotations

import pytest

from lyasched.config import ConfigError, from_mapping
from lyasched.live.limits import REASON, LimitsWatch
from lyasched.service import Service
from lyasched.slurm import SlurmError
from lyasched.slurm import limits as lim
from lyasched.store import records
from test_service import FakeJob, FakeSlurm, StartAs, db, service, summary  # noqa: F401 (db: a fixture)

QOS = "normal|||\ngpu2|gres/gpu=2||\nteam|cpu=64|gres/gpu:a100=3,gres/gpu:v100=1|gres/gpu=6\n"
ASSOC = "root|||\nroot|root||\nresearch||gres/gpu=5|\nresearch|alice||gres/gpu=4\nresearch|bob|gres/gpu=1|\n"


def test_parsers_read_sacctmgr_and_squeue_text():
    q = lim.parse_qos(QOS)
    assert q["normal"] == lim.QosLimits() and q["gpu2"] == lim.QosLimits(per_user=2)
    assert q["team"] == lim.QosLimits(per_user=None, per_account=4, total=6)  # typed GPUs summed, CPU ignored
    users, accounts = lim.parse_assoc(ASSOC)
    assert accounts["research"] == lim.AssocLimits(total=5) and accounts["root"] == lim.AssocLimits()
    assert users[("research", "alice")] == lim.AssocLimits(per_job=4)
    assert users[("research", "bob")] == lim.AssocLimits(total=1)
    t = lim.parse_tenancy("101|alice|research|gpu2\n102|bob|research|normal\n")
    assert t["101"] == lim.Tenancy("alice", "research", "gpu2")
    assert lim.gpus_of_tres("") is None and lim.gpus_of_tres("cpu=2,gres/gpu=0") == 0
    with pytest.raises(lim.LimitsParseError, match="expected 4"):
        lim.parse_qos("garbage line\n")


def test_headroom_is_the_tightest_limit_and_admit_takes_starts_together():
    users, accounts = lim.parse_assoc(ASSOC)
    limits = lim.Limits(lim.parse_qos(QOS), users, accounts)
    alice = lim.Tenancy("alice", "research", "gpu2")
    usage = lim.Usage()
    assert lim.headroom(alice, usage, limits)[0] == 2
    usage.add(alice, 1)
    room, why = lim.headroom(alice, usage, limits)
    assert room == 1 and why == "QOS gpu2 MaxTRESPerUser gres/gpu=2 (1 held)"
    bob = lim.Tenancy("bob", "research", "normal")
    assert lim.headroom(bob, usage, limits) == (1, "association bob@research GrpTRES gres/gpu=1 (0 held)")
    usage.add(bob, 1)
    assert lim.headroom(bob, usage, limits)[0] == 0
    carol = lim.Tenancy("carol", "other", "normal")
    assert lim.headroom(carol, usage, limits) == (None, "")  # no limit applies
    # the account's GrpTRES (5) counts every user of it: alice 1 + bob 1 held
    eve = lim.Tenancy("eve", "research", "normal")
    assert lim.headroom(eve, usage, limits)[0] == 3
    ok, refused = lim.admit([("1", 1), ("2", 1), ("3", 2)], {"1": alice, "2": alice, "3": eve}, usage, limits)
    assert ok == ["1", "3"] and set(refused) == {"2"} and "MaxTRESPerUser" in refused["2"]
    assert not lim.Limits(qos={"normal": lim.QosLimits()})  # no GPU limit at all: nothing to do


class Limited(FakeSlurm):
    """A FakeSlurm with sacctmgr (QOS ``gpu2``: 2 GPUs per user) and squeue's account/QOS view."""

    accounting = True
    qos_of: dict = {}

    def run(self, args, *, idempotent=True, input=None):
        args = list(args)
        if args[0] == "sacctmgr":
            self.calls.append(args)
            if not self.accounting:
                raise SlurmError(args, "sacctmgr: error: Problem talking to the database: Connection refused")
            return "normal|||\ngpu2|gres/gpu=2||\n" if "qos" in args else "research|||\nresearch|alice||\n"
        if args[0] == "squeue" and lim.TENANCY_FORMAT in args:
            self.calls.append(args)
            return "".join(f"{j.job_id}|{j.user}|research|{self.qos_of.get(j.job_id, 'gpu2')}\n" for j in self.jobs)
        return super().run(args, idempotent=idempotent, input=input)


def limited_service(db, slurm, plan, mode="auto") -> Service:
    svc = service(db, slurm, StartAs(plan))
    svc.limits = LimitsWatch(lambda argv: slurm.run(argv), mode)
    return svc


def test_service_never_releases_a_job_over_a_qos_limit(db):
    slurm = Limited(jobs=[FakeJob("101", summary("uid-00000101", gmin=2, gmax=2, b=8)),
                          FakeJob("102", summary("uid-00000102", gmin=1, gmax=4, b=8)),
                          FakeJob("103", summary("uid-00000103", gmin=1, gmax=1, b=8), user="bob")])
    slurm.qos_of = {"103": "normal"}
    policy_plan = {"101": ((0, 2),), "102": ((1, 1),), "103": ((2, 1),)}
    svc = limited_service(db, slurm, policy_plan)
    svc.run_slot()
    released = [c[2] for c in slurm.actions("release")]
    assert released == ["101", "103"]  # 102 would be alice's 3rd GPU: kept held, no GPU kept for it
    seen = svc.policy.states[-1]
    w102 = next(w for w in seen.waiting if w.job_id == "102")
    assert all(v == float("inf") for v in w102.run_one_node[2:])  # the policy was offered at most 2 GPUs for it
    rows = {r["slurm_id"]: r for r in records.list_jobs(db)}
    assert rows["102"]["state"] == "waiting"
    # refused when the slot's starts were taken together: 101's two GPUs came first
    assert rows["102"]["reason"] == f"{REASON}: QOS gpu2 MaxTRESPerUser gres/gpu=2 (2 held)"

    # 101 runs on 2 GPUs: alice has none left, 102 is not offered at all, and says so
    slurm.jobs[0].state, slurm.jobs[0].reason, slurm.jobs[0].nodes, slurm.jobs[0].gpn = "RUNNING", "None", ("node1",), 2
    slurm.jobs[0].start = svc.clock_state["t"]  # type: ignore[attr-defined]
    svc.clock_state["t"] += 2  # type: ignore[attr-defined]
    decided = len(svc.policy.states)
    svc.run_slot()
    assert len(svc.policy.states) == decided  # nothing left to offer: the policy is not even asked
    assert [c[2] for c in slurm.actions("release")] == ["101", "103"]
    row = {r["slurm_id"]: r for r in records.list_jobs(db)}["102"]
    assert row["reason"] == f"{REASON}: QOS gpu2 MaxTRESPerUser gres/gpu=2 (2 held)"

    # 101 done: 102 goes, and its limit reason is gone
    slurm.jobs[0].state, slurm.jobs[0].reason = "COMPLETED", "None"
    slurm.jobs[0].end = svc.clock_state["t"]  # type: ignore[attr-defined]
    svc.clock_state["t"] += 2  # type: ignore[attr-defined]
    svc.run_slot()
    assert [c[2] for c in slurm.actions("release")] == ["101", "103", "102"]
    assert not str({r["slurm_id"]: r for r in records.list_jobs(db)}["102"]["reason"] or "").startswith(REASON)


def test_no_accounting_turns_limits_off_in_auto_and_fails_in_on(db):
    slurm = Limited(jobs=[FakeJob("101", summary("uid-00000101", gmin=1, gmax=1, b=8))])
    slurm.accounting = False
    svc = limited_service(db, slurm, {"101": ((0, 1),)})
    svc.run_slot()
    assert [c[2] for c in slurm.actions("release")] == ["101"]  # scheduled as without limits
    n = sum(c[0] == "sacctmgr" for c in slurm.calls)
    svc.run_slot()
    assert sum(c[0] == "sacctmgr" for c in slurm.calls) == n  # asked once, then off
    strict = limited_service(records.open_records(":memory:"), slurm, {"101": ((0, 1),)}, mode="on")
    rep = strict.run_slot()
    assert rep.error and "sacctmgr" in rep.error  # "on": a slot that cannot read the limits does not act


def test_limits_config():
    assert from_mapping({}).slurm_limits == "auto"
    assert from_mapping({"slurm": {"limits": "off"}}).slurm_limits == "off"
    with pytest.raises(ConfigError, match="slurm.limits must be one of auto, on, off"):
        from_mapping({"slurm": {"limits": "yes"}})
