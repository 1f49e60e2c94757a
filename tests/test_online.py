"""A job's own throughput model from its reported placements (lyasched.costmodel.online)."""

from __future__ import annotations

import pytest

from lyasched.costmodel.calibration import AppData, PlacementRow
from lyasched.costmodel.commshape import CommShape
from lyasched.costmodel.cost import Profile
from lyasched.costmodel.online import fit_job, neighbour_order, online_protocol

CLUSTER = CommShape(gamma=2.0, s_multi=0.05, sigma=0.02, inter_ratio=5.0, d_intra=0.1, d_inter=0.02, d_nodes=0.1)
PROF = Profile("job", alpha=0.02, beta=5e-4, params=1, bytes_per_param=1)
BATCHES = (16, 32, 64, 128, 256)
PLACEMENTS = [(2,), (4,), (1, 1), (2, 2), (2, 2, 2), (2, 2, 2, 2), (4, 4), (4, 4, 4, 4), (1, 2), (3, 3, 3)]


def rows(shape: CommShape, v: float, placements=PLACEMENTS, cscale: float = 1.0) -> list[PlacementRow]:
    out = [PlacementRow((1,), b, PROF.step_time(b)) for b in BATCHES]
    for p in placements:
        out += [PlacementRow(p, b, shape.step_time(PROF.step_time(b) * cscale, v, p)) for b in BATCHES]
    return out


def test_a_job_like_its_cluster_is_fitted_exactly_from_one_placement():
    data = rows(CLUSTER, 0.05)
    job = fit_job(PROF, CLUSTER, [r for r in data if r.placement == (2, 2, 2, 2)])
    assert job.v == pytest.approx(0.05, rel=1e-3)
    assert max(abs(job.step_time(r.placement, r.local_bsz) / r.step_time - 1) for r in data) < 1e-3


def test_two_placements_teach_the_job_its_own_inter_node_cost():
    # this job's all-reduce across nodes costs twice what the cluster's ratio says, and its
    # multi-GPU compute is 20% slower: one multi-node placement cannot tell the two apart from v
    own = CommShape(**{**CLUSTER.to_dict(), "inter_ratio": 10.0})
    data = rows(own, 0.05, cscale=1.2)
    unseen = [r for r in data if r.placement not in {(2, 2, 2, 2), (2,)} and r.gpus > 1]

    def worst(seen: set) -> float:
        job = fit_job(PROF, CLUSTER, [r for r in data if r.placement in seen])
        return max(abs(job.step_time(r.placement, r.local_bsz) / r.step_time - 1) for r in unseen)

    one, two = worst({(2, 2, 2, 2)}), worst({(2, 2, 2, 2), (2,)})
    # a maximum a posteriori fit: the prior still pulls (the ratio is 2x the cluster's, one prior
    # sd), so not exact, but an order of magnitude closer
    assert one > 0.5 and two < 0.08 and two < one / 10


def test_a_job_run_on_one_gpu_per_node_learns_its_per_node_growth():
    # this job's multi-node all-reduce grows with the fullest node's GPUs (d_node_gpus = 0.4) where
    # the cluster's does not: runs on 2222 alone cannot show it, runs on 1111 and 4444 as well do
    own = CommShape(**{**CLUSTER.to_dict(), "d_node_gpus": 0.4})
    data = rows(own, 0.05, PLACEMENTS + [(1, 1, 1, 1), (1, 1, 1), (1, 1, 2, 4)])
    unseen = [r for r in data if r.placement in {(1, 1, 1), (1, 1, 2, 4), (4, 4)}]

    def fitted(seen: set) -> tuple[float, float]:
        job = fit_job(PROF, CLUSTER, [r for r in data if r.placement in seen])
        return job.shape.d_node_gpus, max(abs(job.step_time(r.placement, r.local_bsz) / r.step_time - 1) for r in unseen)

    d_one, err_one = fitted({(2, 2, 2, 2)})
    d_three, err_three = fitted({(2, 2, 2, 2), (1, 1, 1, 1), (4, 4, 4, 4)})
    assert d_one == pytest.approx(0.0, abs=1e-3)  # one fullest-node size seen: the prior holds
    # a maximum a posteriori fit: 0.4 is four prior sds from the cluster's 0, three placements pull
    # it most of the way in the prediction, not all of the way in the parameter
    assert d_three > 0.1 and err_three < err_one / 2


def test_the_prior_holds_what_the_data_cannot_identify():
    data = rows(CLUSTER, 0.05)
    job = fit_job(PROF, CLUSTER, [r for r in data if r.placement == (2, 2)])
    assert job.shape.d_nodes == pytest.approx(CLUSTER.d_nodes, abs=1e-3)  # no second node count seen
    with pytest.raises(ValueError):
        fit_job(PROF, CLUSTER, [r for r in data if r.gpus == 1])
    with pytest.raises(ValueError):
        fit_job(PROF, CLUSTER, data, fit="everything")


def test_neighbours_come_in_lyasched_placements_and_new_counts_first():
    order = neighbour_order((2, 2, 2, 2), [(2, 2, 2, 2), (1, 1, 2, 2, 2), (2, 2, 2), (1, 1, 3, 3), (4, 4), (3, 3, 3, 3)])
    assert order[0] == (2, 2, 2, 2)
    assert set(order[1:4]) == {(2, 2, 2), (3, 3, 3, 3), (4, 4)}  # same GPUs on every node first
    assert order[4:] == [(1, 1, 2, 2, 2), (1, 1, 3, 3)]
    assert neighbour_order((9,), [(2,)]) == [(2,)]  # a request never measured is not invented


def test_online_protocol_predicts_only_unseen_placements():
    apps = [AppData("a", "c", rows(CLUSTER, 0.05)), AppData("b", "c", rows(CLUSTER, 0.2)),
            AppData("c", "c", rows(CLUSTER, 0.1))]
    reps = online_protocol(apps, ks=(1, 2))
    multi = len(PLACEMENTS) * len(BATCHES)
    for r in reps:
        assert r.order[0] == "2222" and len(r.order) == len(PLACEMENTS)
        assert len(r.errors[1]) == multi - len(BATCHES) and len(r.errors[2]) == multi - 2 * len(BATCHES)
        assert {p for p, _ in r.residuals[2]} == set(PLACEMENTS) - {(2, 2, 2, 2), tuple(int(c) for c in r.order[1])}
        assert max(r.errors[2]) < 0.02  # the cluster's shape is every app's: refitted from the other two
