"""An adaptive job's per-epoch pieces (`goodput.PiecesLeft`) under the live service, against the
fake Slurm runners of test_service and test_mover: the service's builder (lyasched.live.inputs)
hands them to the policy as replay's builder does (`state.waiting_job`, the same job at the same
progress), for a waiting job and for a running one seen as `MovableJob`, and hesrpt weighs the job
by them (its shape over the work just ahead)."""

from __future__ import annotations

import numpy as np
import pytest

from lyasched.costmodel.cost import CostModel
from lyasched.costmodel.goodput import PiecesLeft
from lyasched.costmodel.jobspec import Job
from lyasched.live import adaptive
from lyasched.policy.allocation import AllocJob
from lyasched.policy.hesrpt import HesrptPolicy, _Weighted
from lyasched.policy.movable import MovableJob
from lyasched.policy.state import SlotResult, SlotState, waiting_job
from lyasched.store import adaptive as adaptive_store
from lyasched.store import records
from lyasched.summary import CostSummary
from test_live_adaptive import adaptive_summary
from test_mover import MovingSlurm, make
from test_service import FakeJob, FakeSlurm, service


class Spy(HesrptPolicy):
    """hesrpt, keeping what it was handed (the state) and what it weighed (its jobs after the shapes)."""

    def __init__(self) -> None:
        super().__init__()
        self.states: list[SlotState] = []
        self.seen: dict[str, _Weighted] = {}

    def decide(self, state: SlotState) -> SlotResult:
        self.states.append(state)
        return super().decide(state)

    def _allocate(self, jobs: list[AllocJob], cap: list[int], gpn: int) -> dict[str, int]:
        out = super()._allocate(jobs, cap, gpn)
        self.seen.update({j.job_id: j for j in jobs if isinstance(j, _Weighted)})
        return out


@pytest.fixture
def db():
    return records.open_records(":memory:")


def replay_pieces(svc, comment: str, phi: float, frac: float) -> PiecesLeft:
    """What replay's builder hands for the same job (summary, reported phi) at the same progress."""
    s = CostSummary.decode(comment)
    cost = CostModel(svc.inputs._last_cluster)
    job = Job("x", s.to_profile(), s.global_batch, s.iterations, min_gpus=s.min_gpus, max_gpus=s.max_gpus,
              adaptive=adaptive.adaptive_of(s, phi))
    p = waiting_job(job, cost, cost.cluster.total_gpus, frac).pieces
    assert p is not None
    return p


def assert_same(got: PiecesLeft | None, want: PiecesLeft) -> None:
    assert got is not None, "the builder dropped the job's pieces"
    assert got.fraction_done == pytest.approx(want.fraction_done) and got.scale == pytest.approx(want.scale)
    for a, b in ((got.table.one, want.table.one), (got.table.multi, want.table.multi)):
        assert a.shape == b.shape and np.array_equal(a, b)
    for g, spans in ((1, False), (4, False), (8, True)):
        assert got.ahead(g, spans, 300.0) == pytest.approx(want.ahead(g, spans, 300.0))


def test_a_waiting_adaptive_job_reaches_hesrpt_with_replays_pieces(db):
    """Reported phi 5000 at half its base steps: the waiting row's pieces are replay's for the same
    job at 0.5, and hesrpt weighs it by its shape (none without pieces)."""
    job = FakeJob("401", adaptive_summary("uid-00000401"))
    slurm = FakeSlurm(jobs=[job])
    adaptive_store.record_status(db, "uid-00000401", "401", {"batch": 512, "m0": 64, "phi": 5000.0, "base": 100.0}, 0.0)
    spy = Spy()
    svc = service(db, slurm, spy)
    svc.run_slot()
    [w] = spy.states[0].waiting
    assert w.adaptive
    assert_same(w.pieces, replay_pieces(svc, job.comment, 5000.0, 0.5))
    j = spy.seen["401"]
    assert j.pieces is w.pieces and j.shape and j.anchor in j.shape


def test_a_running_adaptive_job_reaches_hesrpt_with_replays_pieces(db, tmp_path):
    """A running checkpointable adaptive job, phi 5000 at a quarter of its base steps: its
    `MovableJob` carries replay's pieces at 0.25, and hesrpt weighs it by its shape at its count."""
    comment = CostSummary(uid="uid-00000001", sig="cnn:test", global_batch=64, iterations=200, min_gpus=1,
                          max_gpus=8, alpha=0.01, beta=0.002, params=1_000_000, checkpointable=True, max_batch=1024,
                          lr_rule="sqrt").encode()
    job = FakeJob("101", comment, state="RUNNING", reason="None", start=1_000_100.0 - 1000, nodes=("node1",), gpn=4)
    slurm = MovingSlurm(jobs=[job])
    slurm.nodes[0] = ("node1", 4, 4, "ALLOCATED")
    adaptive_store.record_status(db, "uid-00000001", "101", {"batch": 256, "m0": 64, "phi": 5000.0, "base": 50.0}, 0.0)
    spy = Spy()
    svc = make(db, slurm, spy, tmp_path)
    svc.run_slot()
    [r] = spy.states[0].running
    assert isinstance(r, MovableJob) and r.adaptive
    assert_same(r.pieces, replay_pieces(svc, comment, 5000.0, 0.25))
    j = spy.seen["101"]
    assert j.current == 4 and j.pieces is r.pieces and j.anchor == 4 and j.shape
