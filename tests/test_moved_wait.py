"""A moved job's wait (issue 13): the service counts it as the simulator does, submission to now
less every run so far (`lyasched.policy.movable.waited_so_far`), the earlier runs from the moves
table's ``run_started`` .. ``requeued_at``; an old database gets the column on open."""

from __future__ import annotations

import sqlite3

import pytest

from lyasched.costmodel.jobspec import Job
from lyasched.policy.movable import MovableJob, waited_so_far
from lyasched.policy.state import Capabilities, Decision, SlotResult, SlotState
from lyasched.sim import Simulation
from lyasched.sim.workloads import seed_workload
from lyasched.store import moves, records
from test_mover import MovingSlurm, ck_summary, make, save_marker
from test_service import FakeJob

# One history on both sides (seconds after the submission): first start at 120, resized at 300
# (running again at once), suspended at 600, started again at 900, seen by the policy at 1200.
# It waited 120 + (900 - 600) = 420 s; it held GPUs 120..600 and 900..1200.
START, RESIZE, SUSPEND, RESTART, VIEW = 120.0, 300.0, 600.0, 900.0, 1200.0
WAITED = START + (RESTART - SUSPEND)


def test_waited_so_far_leaves_out_every_run():
    assert waited_so_far(1200.0, 0.0, 480.0, 900.0) == WAITED
    assert waited_so_far(500.0, 100.0, 0.0, 400.0) == 300.0  # never moved: its start minus its submission
    assert waited_so_far(10.0, 0.0, 20.0, 5.0) == 0.0  # never negative


class _Seen(Exception):
    """Raised by `_SimScript` at VIEW: the replay need not go on to the job's end."""


class _SimScript:
    """The history above in the simulator (slots of 60 s); keeps what the policy saw at VIEW."""

    name = "script"
    capabilities = Capabilities(preemptive=True, moves=True)

    def __init__(self) -> None:
        self.seen: MovableJob | None = None

    def decide(self, st: SlotState) -> SlotResult:
        one = Decision("a", 1, ((0, 1),), 1.0, "script")
        if st.now in (START, RESTART):
            return SlotResult(starts=(one,))
        if st.now == RESIZE:
            return SlotResult(starts=(one,), preempt=("a",))
        if st.now == SUSPEND:
            return SlotResult(starts=(), preempt=("a",))
        if st.now == VIEW:
            (r,) = st.running
            assert isinstance(r, MovableJob)
            self.seen = r
            raise _Seen
        return SlotResult(starts=())


def _sim_view() -> MovableJob:
    w = seed_workload("seed-small-bursty", 0, n_jobs=1)
    job = Job("a", w.jobs[0].profile, 64, 10**8, requested_gpus=1, max_gpus=4, checkpointable=True)
    pol = _SimScript()
    with pytest.raises(_Seen):
        Simulation([job], w.cluster, seed=0, slot_len=60.0).run(pol)
    assert pol.seen is not None and pol.seen.start_time == RESTART
    return pol.seen


class _LiveScript:
    """The same moves in the service: at ``plan``'s times the job is resized onto node1 (a
    placement) or suspended (()); keeps every movable view of it."""

    name = "script"
    capabilities = Capabilities(preemptive=True, moves=True)

    def __init__(self, plan: dict[float, tuple[tuple[int, int], ...]]) -> None:
        self.plan = plan
        self.seen: dict[float, MovableJob] = {}

    def decide(self, st: SlotState) -> SlotResult:
        pre, starts = [], []
        for r in st.running:
            if isinstance(r, MovableJob) and r.preemptible:
                self.seen[st.now] = r
                if st.now in self.plan:
                    p = self.plan[st.now]
                    pre.append(r.job_id)
                    if p:
                        starts.append(Decision(r.job_id, sum(n for _, n in p), p, 1.0, "script"))
        return SlotResult(starts=tuple(starts), preempt=tuple(pre))


def test_a_job_moved_twice_waits_and_counts_its_moves_in_the_service_as_in_the_simulator(db, tmp_path):
    base = 1_000_000.0
    job = FakeJob("101", ck_summary("uid-00000001", it=100_000), submit=base, state="RUNNING", reason="None",
                  start=base + START, nodes=("node1",), gpn=1)
    slurm = MovingSlurm(jobs=[job])
    # the signal goes out 2 s before the checkpoint shows: the run ends at the requeue (RESIZE, SUSPEND)
    pol = _LiveScript({base + RESIZE - 2: ((0, 1),), base + SUSPEND - 2: ()})
    svc = make(db, slurm, pol, tmp_path, now=base + RESIZE - 2)
    clock = svc.clock_state

    def slot_at(t: float) -> None:
        clock["t"] = base + t
        svc.run_slot()

    slot_at(RESIZE - 2)  # signalled
    save_marker(tmp_path, step=10)
    slot_at(RESIZE)  # requeued, resized, released
    (m,) = moves.for_job(db, "uid-00000001")
    assert (m["state"], m["run_started"], m["requeued_at"]) == ("done", base + START, base + RESIZE)
    job.state, job.reason, job.start, job.nodes = "RUNNING", "None", base + RESIZE, ("node1",)
    slot_at(SUSPEND - 2)  # running again on its new GPUs; signalled for the suspension
    assert pol.seen[base + SUSPEND - 2].waited_s == pytest.approx(START)
    assert pol.seen[base + SUSPEND - 2].moves == 1  # the resize
    save_marker(tmp_path, step=20)
    slot_at(SUSPEND)  # requeued and held: waits for the policy
    assert records.get_job(db, "uid-00000001")["state"] == "waiting"
    job.state, job.reason, job.start, job.nodes = "RUNNING", "None", base + RESTART, ("node1",)
    slot_at(VIEW)
    live = pol.seen[base + VIEW].waited_s
    assert moves.history(db)["uid-00000001"].held_before == pytest.approx(SUSPEND - START)
    assert live == pytest.approx(WAITED)  # before: its current start minus its submission, 900 s
    sim = _sim_view()
    assert live == pytest.approx(sim.waited_s)
    assert pol.seen[base + VIEW].moves == sim.moves == 2  # the resize and the suspension (ElasticVariant.move_backoff)


OLD_MOVES = """CREATE TABLE moves (id INTEGER PRIMARY KEY, uid TEXT, slurm_id TEXT, kind TEXT, reason TEXT,
created FLOAT, from_gpus INTEGER, from_placement TEXT, to_gpus INTEGER, to_placement TEXT, per_node INTEGER,
predicted FLOAT, ckpt_dir TEXT, ckpt_before INTEGER, ckpt_step INTEGER, step TEXT, state TEXT,
signalled_at FLOAT, checkpointed_at FLOAT, requeued_at FLOAT, released_at FLOAT, restarted_at FLOAT,
cost_s FLOAT, resolved FLOAT, resolution TEXT)"""


def test_a_database_from_before_run_started_gets_the_column_filled_where_the_history_says_it(tmp_path):
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute(OLD_MOVES)
    rows = [  # uid, kind, state, requeued_at, restarted_at
        (1, "u1", "shrink", "done", 1100.0, 1110.0),  # its first run's start is unknown
        (2, "u1", "grow", "failed", None, None),  # left running: ended no run
        (3, "u1", "suspend", "done", 1500.0, None),  # the run the shrink relaunched: began at 1110
        (4, "u2", "suspend", "done", 2000.0, None),
    ]
    con.executemany("INSERT INTO moves (id, uid, kind, state, requeued_at, restarted_at) VALUES (?,?,?,?,?,?)", rows)
    con.commit()
    con.close()
    db = records.open_records(path)
    got = {r["id"]: r["run_started"] for r in db.query("select id, run_started from moves")}
    assert got == {1: None, 2: None, 3: 1110.0, 4: None}
    assert {u: h.held_before for u, h in moves.history(db).items()} == {"u1": pytest.approx(390.0), "u2": 0.0}  # unknown starts count no time held
    assert db.execute("select value from meta where key = 'schema_version'").fetchone()[0] == str(records.SCHEMA_VERSION)
    records.open_records(path)  # opened again: nothing changes
    assert {r["id"]: r["run_started"] for r in db.query("select id, run_started from moves")} == got
    # and the mover writes it from now on
    mid = moves.open_move(db, uid="u2", slurm_id="7", kind="suspend", run_started=2500.0)
    moves.mark(db, mid, state="done", requeued_at=2600.0)
    assert moves.history(db)["u2"].held_before == pytest.approx(100.0)
    # completed moves per job, as the simulator counts checkpoints: failed moves ended no run
    assert {u: h.done for u, h in moves.history(db).items()} == {"u1": 2, "u2": 2}


def test_history_gives_each_job_its_own_mean_move_cost_and_none_without_a_measured_one():
    db = records.open_records(":memory:")
    for uid, state, cost in (("a", "done", 40.0), ("a", "failed", None), ("a", "done", 60.0), ("b", "done", None)):
        mid = moves.open_move(db, uid=uid, slurm_id="1", kind="suspend", run_started=100.0)
        moves.mark(db, mid, state=state, requeued_at=150.0 if state == "done" else None, cost_s=cost)
    h = moves.history(db)
    assert (h["a"].cost_s, h["a"].done, h["a"].held_before) == (pytest.approx(50.0), 2, pytest.approx(100.0))
    assert (h["b"].cost_s, h["b"].done) == (None, 1)
    assert h["a"].last_done is not None and h["a"].last_done["cost_s"] == 60.0
    assert "c" not in h


@pytest.fixture
def db():
    return records.open_records(":memory:")


def test_history_for_some_uids_reads_only_theirs_and_matches_the_whole_table():
    """The service asks for its running jobs' histories only: the same figures as the whole read."""
    db = records.open_records(":memory:")
    for k in range(40):
        uid = f"u{k % 7}"
        mid = moves.open_move(db, uid=uid, slurm_id=str(k), kind="suspend", run_started=100.0 * k)
        done = k % 3 != 0
        moves.mark(db, mid, state="done" if done else "failed", requeued_at=100.0 * k + 30 + k if done else None,
                   cost_s=float(k) if k % 2 else None)
    whole = moves.history(db)
    some = moves.history(db, ["u1", "u4", "nobody", "u1"])
    assert set(whole) == {f"u{i}" for i in range(7)} and set(some) == {"u1", "u4"}
    assert all(some[u] == whole[u] for u in some)
    assert moves.history(db, []) == {}
