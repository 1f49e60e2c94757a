"""What keeps a slot over thousands of held jobs cheap must not change what it sees or decides:
cached policy rows equal freshly built ones and follow their inputs; the short path for unchanged
held jobs records what the full one does; the pyslurm worker's update-time probe skips the job
load only when the controller says nothing changed (benchmarks/experiments/slot_profile.py measures the cost)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from lyasched.config import Config
from lyasched.policy.state import SlotResult, SlotState
from lyasched.service import Service
from lyasched.slurm.pyslurm_worker import Worker
from lyasched.slurm.types import ClusterConfig, NodeInfo, SlurmJob
from lyasched.store import records
from lyasched.summary import CostSummary


def held(i: int, **kw) -> SlurmJob:
    s = CostSummary(uid=f"cost-test-{i:04d}", sig="model-a" if i % 2 else "model-b", global_batch=64,
                    iterations=100 + 13 * i, min_gpus=1, max_gpus=8, alpha=0.01, beta=0.001, params=1_000_000)
    base = dict(job_id=str(100 + i), user="alice", unix_uid=1001, state="PENDING", reason="JobHeldUser", priority=0,
                submit_time=1_000_000.0 + i, start_time=None, end_time=None, time_limit=3600.0, num_nodes=1,
                gpus_per_node=1, nodes=(), partition="gpu", comment=s.encode(), name=f"train{i}")
    return SlurmJob(**{**base, **kw})


@dataclass
class Typed:
    """A `Slurm` backend answering from lists the test changes between slots."""

    jobs_: list[SlurmJob]
    gpus: int = 4
    busy: int = 4
    name: str = "typed"

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(name=f"n{k}", state="MIXED", gpus_total=self.gpus, gpus_alloc=self.busy, partitions=("gpu",))
                for k in range(2)]

    def jobs(self, **kw) -> list[SlurmJob]:
        return list(self.jobs_)

    def config(self) -> ClusterConfig:
        return ClusterConfig(version="22.05.8", accounting=False, submit_plugins=("lua",))

    def close(self) -> None:
        pass

    def job(self, job_id):
        return None

    def work_dir(self, job_id):
        return None

    def accounting(self, job_ids):
        return []

    def resize(self, job_id, num_nodes, gpus_per_node, nodes=()) -> None:
        raise AssertionError("nothing starts in these tests")

    release = hold = cancel = resize

    def submit(self, opts, script=None) -> str:
        raise AssertionError("nothing is submitted")


@dataclass
class Capture:
    """A policy that starts nothing and keeps the states it was given."""

    states: list[SlotState] = field(default_factory=list)
    name: str = "capture"

    def decide(self, state: SlotState) -> SlotResult:
        self.states.append(state)
        return SlotResult(starts=())


def rows(state: SlotState) -> list[tuple]:
    return [(w.job_id, w.submit_time, w.work, tuple(w.run_one_node), tuple(w.run_multi_node), w.requested_gpus)
            for w in state.waiting]


def service(tmp_path, name: str, slurm: Typed, policy: Capture) -> Service:
    return Service(Config(slot_seconds=30), records.open_records(tmp_path / f"{name}.db"), slurm=slurm, policy=policy,
                   clock=lambda: 1_001_000.0)


def test_cached_rows_are_the_fresh_rows_and_follow_the_cluster(tmp_path):
    slurm, pol = Typed([held(i) for i in range(6)]), Capture()
    svc = service(tmp_path, "a", slurm, pol)
    for _ in range(3):
        assert not svc.run_slot().error
    first, last = pol.states[0], pol.states[-1]
    assert all(a is b for a, b in zip(first.waiting, last.waiting))  # kept, not rebuilt
    fresh = Capture()
    service(tmp_path, "b", Typed(list(slurm.jobs_)), fresh).run_slot()
    assert rows(last) == rows(fresh.states[0])
    slurm.gpus, slurm.busy = 8, 8  # another cluster: more GPU counts, every row anew
    svc.run_slot()
    again = pol.states[-1]
    assert all(len(w.run_one_node) == 16 for w in again.waiting)
    assert not any(a is b for a, b in zip(last.waiting, again.waiting))
    fresh = Capture()
    service(tmp_path, "c", Typed(list(slurm.jobs_), gpus=8, busy=8), fresh).run_slot()
    assert rows(again) == rows(fresh.states[0])


def test_rows_follow_a_changed_time_limit(tmp_path):
    """An admin's `scontrol update TimeLimit=` on a held job changes its row at the next slot."""
    slurm, pol = Typed([held(i) for i in range(3)]), Capture()
    svc = service(tmp_path, "a", slurm, pol)
    svc.run_slot()
    before = {w.job_id: w.work for w in pol.states[-1].waiting}
    slurm.jobs_[0] = replace(slurm.jobs_[0], time_limit=0.05)  # shorter than its predicted run
    svc.run_slot()
    after = {w.job_id: w.work for w in pol.states[-1].waiting}
    assert after[slurm.jobs_[0].job_id] < before[slurm.jobs_[0].job_id]
    fresh = Capture()
    service(tmp_path, "b", Typed(list(slurm.jobs_)), fresh).run_slot()
    assert rows(pol.states[-1]) == rows(fresh.states[0])


def test_rows_follow_a_learned_correction(tmp_path):
    from lyasched.store import costtable

    slurm, pol = Typed([held(i) for i in range(4)]), Capture()
    svc = service(tmp_path, "a", slurm, pol)
    svc.run_slot()
    before = {w.job_id: w.work for w in pol.states[-1].waiting}
    s = CostSummary.decode(slurm.jobs_[1].comment)
    p = s.to_profile()
    costtable.put(svc.db, {"signature": s.sig, "device_type": "gpu", "model": s.sig, "alpha": p.alpha,
                           "beta": p.beta, "params": p.params, "bytes_per_param": p.bytes_per_param,
                           "m0": p.mem_base, "m1": p.mem_per_sample, "source": "measured"})
    for _ in range(4):  # observed runs twice as long as predicted: the model's correction grows
        costtable.refine(svc.db, s.sig, "gpu", 100.0, 200.0)
    svc.run_slot()
    after = {w.job_id: w.work for w in pol.states[-1].waiting}
    changed = {j for j in before if not np.isclose(before[j], after[j])}
    assert changed == {j.job_id for j in slurm.jobs_ if CostSummary.decode(j.comment).sig == s.sig}
    fresh = Capture()
    service(tmp_path, "b", Typed(list(slurm.jobs_)), fresh)
    fdb = records.open_records(tmp_path / "b.db")
    costtable.put(fdb, {"signature": s.sig, "device_type": "gpu", "model": s.sig, "alpha": p.alpha,
                        "beta": p.beta, "params": p.params, "bytes_per_param": p.bytes_per_param,
                        "m0": p.mem_base, "m1": p.mem_per_sample, "source": "measured"})
    for _ in range(4):
        costtable.refine(fdb, s.sig, "gpu", 100.0, 200.0)
    svc_b = Service(Config(slot_seconds=30), fdb, slurm=Typed(list(slurm.jobs_)), policy=fresh, clock=lambda: 1_001_000.0)
    svc_b.run_slot()
    assert rows(pol.states[-1]) == rows(fresh.states[-1])


def test_unchanged_held_jobs_and_changed_ones_are_recorded_as_before(tmp_path):
    slurm, pol = Typed([held(i) for i in range(4)]), Capture()
    clock = [1_001_000.0]
    svc = Service(Config(slot_seconds=30), records.open_records(tmp_path / "a.db"), slurm=slurm, policy=pol,
                  clock=lambda: clock[0])
    svc.run_slot()
    clock[0] += 30
    slurm.jobs_[0] = replace(slurm.jobs_[0], name="renamed")  # a held job renamed by its owner
    slurm.jobs_[1] = replace(slurm.jobs_[1], state="RUNNING", reason="None", start_time=clock[0] - 5,
                             nodes=("n0",))  # started outside the service (an operator)
    slurm.jobs_[2] = replace(slurm.jobs_[2], reason="JobHeldAdmin")  # held again by an operator: still held
    rep = svc.run_slot()
    assert rep.waiting == 3 and rep.running == 1
    got = {r["slurm_id"]: r for r in records.list_jobs(svc.db)}
    assert got["100"]["name"] == "renamed" and got["100"]["state"] == "waiting"
    assert got["101"]["state"] == "running" and got["101"]["started"] == clock[0] - 5
    listed = records.listed_at(svc.db)
    assert all(records.last_seen(r, listed) == clock[0] for r in got.values())
    assert got["102"]["state"] == got["103"]["state"] == "waiting"
    # only the changed records were written: the unchanged held one keeps its column, the sync's time stands for it
    assert got["103"]["last_seen"] == clock[0] - 30 and got["100"]["last_seen"] == got["101"]["last_seen"] == clock[0]


class FakeProbe:
    def __init__(self, answers: list) -> None:
        self.answers, self.asked = list(answers), []

    def since(self, t: int):
        self.asked.append(t)
        return self.answers.pop(0)


class FakeJobs:
    def __init__(self, jobs: list) -> None:
        self.jobs, self.loads = jobs, 0

    def load(self, preload_passwd_info: bool = False) -> dict:
        self.loads += 1
        return {int(j.id): j for j in self.jobs}


@dataclass
class PsJob:
    """The PySlurm Job properties the worker reads."""

    id: int
    comment: str
    state: str = "PENDING"
    user_name: str = "alice"
    user_id: int = 1001
    state_reason: str = "JobHeldUser"
    priority: int = 0
    submit_time: int = 1_000_000
    start_time: int = 0
    end_time: int = 0
    time_limit: int = 60
    num_nodes: int = 1
    gres_per_node: dict = field(default_factory=lambda: {"gpu": 1})
    allocated_nodes: str = ""
    partition: str = "gpu"
    name: str = "train"


def worker(jobs: list, probe: FakeProbe) -> tuple[Worker, FakeJobs]:
    w = Worker.__new__(Worker)
    fake = FakeJobs(jobs)
    w.ps = type("ps", (), {"Jobs": fake})
    w._sent, w._order, w._final, w._token, w._seq, w._as_of = {}, [], {}, None, 0, 0
    w._probe, w._direct, w._use_probe = probe, None, True
    return w, fake


def test_worker_skips_the_job_load_only_when_the_controller_says_unchanged():
    jobs = [PsJob(100 + i, held(i).comment) for i in range(3)]
    probe = FakeProbe([50, None, 60, None])
    w, fake = worker(jobs, probe)
    t1, order1, ch1 = w.jobs_delta(None)
    assert fake.loads == 1 and order1 == ["100", "101", "102"] and set(ch1) == set(order1)
    t2, order2, ch2 = w.jobs_delta(t1)  # unchanged: no load, nothing resent
    assert fake.loads == 1 and order2 == order1 and ch2 == {} and t2 != t1
    jobs[1].state_reason = "JobHeldAdmin"
    t3, order3, ch3 = w.jobs_delta(t2)  # changed: a full load, only the changed job sent
    assert fake.loads == 2 and order3 == order1 and set(ch3) == {"101"} and ch3["101"][4] == "JobHeldAdmin"
    _, order4, ch4 = w.jobs_delta("someone else's token")  # unchanged, but the caller holds another answer: all
    assert fake.loads == 2 and order4 == order1 and set(ch4) == set(order1) and ch4["101"] == ch3["101"]
    assert probe.asked == [0, 50, 50, 60]  # always the time of the answer the worker holds


class FakeLib:
    """libslurm's two string functions the direct read calls."""

    @staticmethod
    def slurm_job_state_string(s: int) -> bytes:
        return {0: b"PENDING", 1: b"RUNNING", 3: b"COMPLETED", 4: b"CANCELLED"}[s]

    @staticmethod
    def slurm_job_reason_string(r: int) -> bytes:
        return {0: b"None", 1: b"JobHeldUser"}[r]


def job_records(jobs: list[dict]):
    """A job_info_msg_t in this process's memory, laid out as libslurm 22.05 hands it over."""
    import ctypes as ct

    from lyasched.slurm import libslurm_jobs as lj

    arr = (lj.JobInfo * len(jobs))()
    for rec, fields in zip(arr, jobs):
        for k, v in fields.items():
            setattr(rec, k, v)
    msg = lj.JobInfoMsg(last_update=123, record_count=len(jobs), job_array=ct.addressof(arr))
    return ct.pointer(msg), arr


def test_direct_read_gives_the_pyslurm_fields_and_skips_what_it_need_not_read():
    import math
    import os
    import pwd

    from lyasched.slurm import libslurm_jobs as lj

    me = pwd.getpwuid(os.getuid()).pw_name
    tagged = held(0).comment.encode()
    base = dict(user_id=os.getuid(), job_state=0, state_reason=1, priority=0, submit_time=1_000_000, time_limit=60,
                num_nodes=1, partition=b"gpu", name=b"train", tres_per_node=b"gres:gpu:2", comment=tagged)
    jobs = [dict(base, job_id=100),
            dict(base, job_id=101, comment=b"someone else's job"),
            dict(base, job_id=102, job_state=1, state_reason=0, start_time=1_000_100, nodes=b"n[1-2]", num_nodes=2),
            dict(base, job_id=103, job_state=4, state_reason=0, start_time=0, end_time=1_000_200,
                 state_desc=b"None", time_limit=0xFFFFFFFF, name=b"None"),
            dict(base, job_id=104, comment=None)]
    msg, keep = job_records(jobs)
    r = lj.LibslurmJobs.__new__(lj.LibslurmJobs)
    r.lib, r._states, r._reasons, r._gres, r._hosts, r._texts = FakeLib(), {}, {}, {}, {}, {}
    final: dict = {}
    rows = r.rows(msg, final)
    assert [t[0] for t in rows] == ["100", "102", "103"]  # Slurm's order, lyasched's jobs only
    assert rows[0] == ("100", me, os.getuid(), "PENDING", "JobHeldUser", 0, 1_000_000.0, None, None, 3600.0, 1, 2,
                       (), "gpu", tagged.decode(), "train", {}, "")  # extra, gpu_type (untyped gres)
    assert rows[1][3:5] == ("RUNNING", "None") and rows[1][7] == 1_000_100.0 and rows[1][12] == ("n1", "n2")
    assert rows[1][10] == 2 and rows[1][8] is None  # a running job's end time is a projection: not an end
    assert rows[2][3:5] == ("CANCELLED", "None") and rows[2][7] is None and rows[2][8] == 1_000_200.0
    assert rows[2][9] == math.inf and rows[2][15] == ""
    assert list(final) == [103]  # finished: kept, and not read again
    keep[3].name = b"renamed"  # (a finished job never changes: this only shows it was not read)
    assert r.rows(msg, final)[2][15] == ""
    keep[3].submit_time = 1_000_050  # the id reused by another job (controller state lost): read anew
    assert r.rows(msg, final)[2][15] == "renamed"


_DIRECT_PROBE = r"""
import json, sys
from lyasched.slurm.pyslurm_worker import Worker
w = Worker()
token, order, changed = w.jobs_delta(None)
print(json.dumps({"direct": w._direct is not None, "checked": w._direct_checked,
                  "rows": [changed[i] for i in order]}))
"""


@pytest.mark.slurm
def test_direct_job_read_is_used_on_the_cluster_and_reads_what_squeue_prints(slurm_jobs):
    """On the real cluster (libslurm 22.05) the worker reads jobs from libslurm's records, its
    check against PySlurm passes, and held, running and finished lyasched jobs read as the CLI's."""
    import importlib.util
    import json
    import subprocess
    import sys
    import time

    from reliability.users import TEST_USER, as_user

    from lyasched.slurm.cli import CliSlurm
    from lyasched.slurm.types import SlurmJob
    from lyasched.summary import new_uid

    if importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (make pyslurm)")
    from conftest import CLUSTER_KIND

    if CLUSTER_KIND == "docker":
        pytest.skip("calls this host's sbatch through runuser and its libslurm (the docker image has no pyslurm wheel)")

    def sbatch(*args: str) -> str:
        s = CostSummary(uid=new_uid(), sig="cnn:test", global_batch=8, iterations=100, min_gpus=1, max_gpus=2,
                        alpha=0.01, beta=0.002, params=1_000_000).encode()
        r = as_user(TEST_USER, "sbatch", "--parsable", "-o", "/dev/null", "-t", "5", "-N1", "--gres=gpu:1",
                    f"--comment={s}", *args, timeout=60, cwd="/tmp")
        assert r.returncode == 0, r.stderr
        slurm_jobs.append(r.stdout.strip().split(";")[0])
        return slurm_jobs[-1]

    ids = [sbatch("--job-name", f"direct{i}", "--wrap", "sleep 60") for i in range(3)]
    subprocess.run(["scontrol", "release", ids[1]], capture_output=True, timeout=30)  # runs (or waits for GPUs)
    subprocess.run(["scancel", ids[2]], capture_output=True, timeout=30)  # finished: CANCELLED
    deadline = time.monotonic() + 60  # both reads below must see the same states
    while subprocess.run(["squeue", "-h", "-j", ids[1], "-o", "%T"], capture_output=True, text=True,
                         timeout=30).stdout.strip() != "RUNNING":
        assert time.monotonic() < deadline, "the released job did not start"
        time.sleep(0.5)
    r = subprocess.run([sys.executable, "-c", _DIRECT_PROBE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["direct"] and got["checked"], r.stderr
    mine = {t[0]: SlurmJob(*(tuple(v) if isinstance(v, list) else v for v in t)) for t in got["rows"]
            if t[0] in ids}
    cli = {j.job_id: j for j in CliSlurm().jobs(job_ids=ids)}
    assert set(mine) == set(ids) and mine == cli
    assert mine[ids[2]].state == "CANCELLED" and mine[ids[0]].held_by_service


def test_squeue_lines_parsed_once_give_what_parsing_anew_gives():
    """The CLI's every-slot listing memoised by line: same jobs as a fresh parse, after changes too."""
    from pathlib import Path

    from lyasched.slurm import query as q

    text = (Path(__file__).parent / "data" / "squeue.txt").read_text()
    lines = text.splitlines()
    memo: dict = {}
    assert q.parse_squeue(text, memo=memo) == q.parse_squeue(text)
    again = q.parse_squeue(text, memo=memo)
    assert again == q.parse_squeue(text) and all(a is b for a, b in zip(again, q.parse_squeue(text, memo=memo)))
    tagged = next(i for i, ln in enumerate(lines) if "|lyasched:v1;" in ln)
    changed = lines[:tagged] + [lines[tagged].replace("JobHeldUser", "Resources")] + lines[tagged + 1:]
    changed = "\n".join(changed[1:]) + "\n"  # one line gone, one changed
    assert q.parse_squeue(changed, memo=memo) == q.parse_squeue(changed)
    assert set(memo) == {ln for ln in changed.splitlines() if ln.strip()}  # only the last listing's lines are kept


def test_a_held_job_that_vanishes_keeps_the_last_slot_that_listed_it_even_after_a_crash_mid_sync(tmp_path):
    """Unchanged held records are not written each slot (records.LISTED_AT stands for their
    last_seen); a job Slurm stops listing is recorded as last seen at the last slot that listed it,
    also when a slot died between the listed jobs' transaction and the vanished check."""
    slurm = Typed([held(i) for i in range(3)])
    clock = [1_001_000.0]
    svc = Service(Config(slot_seconds=30), records.open_records(tmp_path / "a.db"), slurm=slurm, policy=Capture(),
                  clock=lambda: clock[0])
    svc.run_slot()
    clock[0] += 30
    svc.run_slot()  # the last slot that lists job 102
    last_listed = clock[0]
    assert records.get_job(svc.db, "cost-test-0002")["last_seen"] == clock[0] - 30  # not rewritten
    clock[0] += 30
    del slurm.jobs_[2]
    real, svc.sync.vanished = svc.sync.vanished, lambda seen, ctx: (_ for _ in ()).throw(SystemExit("killed"))
    with pytest.raises(SystemExit):  # the service killed after the listed jobs' commit
        svc.run_slot()
    svc.sync.vanished = real
    clock[0] += 30
    svc.run_slot()
    row = records.get_job(svc.db, "cost-test-0002")
    assert row["state"] == "vanished" and row["last_seen"] == last_listed
    listed = records.listed_at(svc.db)
    assert listed == clock[0]
    assert all(records.last_seen(r, listed) == clock[0] for r in records.list_jobs(svc.db) if r["state"] == "waiting")


def test_jobs_rev_moves_on_every_change_the_sync_reads_and_only_those(tmp_path):
    db = records.open_records(tmp_path / "r.db")
    rev = records.jobs_rev(db)
    assert rev is not None
    records.upsert_job(db, "u1", slurm_id="1", state="waiting")  # insert
    assert records.jobs_rev(db) == rev + 1
    records.upsert_job(db, "u1", reason="waiting: no room", pred_one="[1.0]", work=3.0)  # not read by the sync
    assert records.jobs_rev(db) == rev + 1
    records.upsert_job(db, "u1", state="released", released_at=5.0)  # from another connection alike
    other = records.open_records(tmp_path / "r.db")
    records.upsert_job(other, "u1", name="renamed")
    assert records.jobs_rev(db) == rev + 3
    db.execute("DELETE FROM jobs WHERE uid = 'u1'")
    assert records.jobs_rev(db) == rev + 4


def test_the_sync_memo_records_what_reading_every_row_records(tmp_path):
    """Random changes to Slurm's jobs and to the records (by another connection, as the starter, an
    older service or an operator's tool would) over many slots: a service keeping its memo of quiet
    rows and one reading every row each slot leave equal records and give the policy equal input."""
    import random

    rng = random.Random(7)
    jobs = [held(i) for i in range(40)]
    clock = [1_001_000.0]
    svcs, pols = [], []
    for name in ("memo", "fresh"):
        pol = Capture()
        svcs.append(Service(Config(slot_seconds=30, release_grace=1e9), records.open_records(tmp_path / f"{name}.db"),
                            slurm=Typed(jobs), policy=pol, clock=lambda: clock[0]))
        pols.append(pol)
    memo, fresh = svcs
    hits = 0
    nxt = 40
    for _ in range(60):
        for _ in range(rng.randrange(4)):
            k = rng.randrange(len(jobs))
            j = jobs[k]
            what = rng.choice(["rename", "start", "end", "release", "hold", "cancel", "new", "record", "record-other",
                               "purge"])
            if what == "rename":
                jobs[k] = replace(j, name=f"n{rng.randrange(3)}")
            elif what == "start" and j.pending:
                jobs[k] = replace(j, state="RUNNING", reason="None", start_time=clock[0] - 1, nodes=("n0",))
            elif what == "end" and j.running:
                jobs[k] = replace(j, state="COMPLETED", reason="None", end_time=clock[0] - 1)
            elif what == "release" and j.pending:
                jobs[k] = replace(j, reason="Resources")
            elif what == "hold" and j.pending:
                jobs[k] = replace(j, reason="JobHeldUser")
            elif what == "cancel" and not j.finished:
                jobs[k] = replace(j, state="CANCELLED", reason="None", end_time=clock[0] - 1)
            elif what == "purge" and len(jobs) > 5:  # MinJobAge passed, or the controller lost it: vanished
                del jobs[k]
            elif what == "new":
                jobs.append(held(nxt))
                nxt += 1
            elif what.startswith("record"):  # a record changed outside the sync
                uid = f"cost-test-{int(j.job_id) - 100:04d}"
                field = rng.choice([{"state": "released", "released_at": clock[0]}, {"name": "outside"},
                                    {"reason": "waiting: outside"}, {"slurm_state": "RUNNING"}])
                for s in svcs:
                    db = s.db if what == "record" else records.open_records(s.db.conn.execute(
                        "PRAGMA database_list").fetchone()[2])
                    if records.get_job(db, uid) is not None:
                        records.upsert_job(db, uid, **field)
        for s in svcs:
            s.slurm.jobs_ = list(jobs)  # type: ignore[attr-defined]
        fresh.sync._memo_rev = None  # reads every row
        hits += memo.sync._memo_rev is not None and memo.sync._memo_rev == records.jobs_rev(memo.db)
        ra, rb = memo.run_slot(), fresh.run_slot()
        assert not ra.error and not rb.error, (ra.error, rb.error)
        assert records.list_jobs(memo.db) == records.list_jobs(fresh.db)
        assert records.listed_at(memo.db) == records.listed_at(fresh.db)
        assert rows(pols[0].states[-1]) == rows(pols[1].states[-1])
        clock[0] += 30
    assert hits > 10  # the memo was used
    assert any(r["state"] == "vanished" for r in records.list_jobs(memo.db))


def test_a_record_changed_between_the_sync_read_and_its_write_is_read_again(tmp_path, monkeypatch):
    from lyasched.live import step as step_mod

    slurm = Typed([held(i) for i in range(3)])
    clock = [1_001_000.0]
    path = tmp_path / "a.db"
    svc = Service(Config(slot_seconds=30, release_grace=1e9), records.open_records(path), slurm=slurm,
                  policy=Capture(), clock=lambda: clock[0])
    svc.run_slot()
    real = step_mod.apply

    def racing(db, steps, now, listed_at=None):  # another process writes after the rows were read
        records.upsert_job(records.open_records(path), "cost-test-0001", state="released", released_at=clock[0])
        return real(db, steps, now, listed_at)

    monkeypatch.setattr(step_mod, "apply", racing)
    clock[0] += 30
    svc.run_slot()
    monkeypatch.setattr(step_mod, "apply", real)
    clock[0] += 30
    svc.run_slot()  # Slurm still lists it held: the record follows (held by an operator), not the memo
    row = records.get_job(svc.db, "cost-test-0001")
    assert row["state"] == "waiting" and row["reason"] == "held (by an operator)"
