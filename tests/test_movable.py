"""The one estimate of a running job's remaining share and the one MovableJob builder that replay
(lyasched.sim.moves) and serve (lyasched.live.inputs) both use."""

import math

import numpy as np
import pytest

from lyasched.policy.movable import movable_job, share_left
from lyasched.policy.state import RunningJob


def test_share_left_follows_the_prediction_and_never_goes_below_zero():
    assert share_left(1.0, 600.0, 1000.0) == pytest.approx(0.6)
    assert share_left(0.5, 600.0, 1000.0) == pytest.approx(0.3)  # half was saved by an earlier checkpoint
    assert share_left(0.5, 1500.0, 1000.0) == 0.5  # still relaunching: nothing of this run done yet
    assert share_left(1.0, -50.0, 1000.0) == 0.0  # past its prediction: counted as done
    assert share_left(0.7, 10.0, math.nan) == 0.7  # no prediction: nothing known done in this run
    assert share_left(0.7, 10.0, 0.0) == 0.0


def test_movable_job_scales_the_rows_and_keeps_disallowed_counts_disallowed():
    base = RunningJob(job_id="7", gpus=2, placement=((0, 2),), start_time=100.0, expected_end=900.0,
                      predicted_end=900.0)
    one = np.array([800.0, 420.0, math.inf, 230.0])
    multi = np.array([math.inf, 500.0, math.inf, 260.0])
    for scale in (0.25, 0.0):
        m = movable_job(base, one=one, multi=multi, work=800.0, scale=scale, requested=9, move_cost=math.nan,
                        waited=30.0, checkpointable=True)
        assert m.job_id == "7" and m.gpus == 2 and m.preemptible and m.waited_s == 30.0
        assert m.requested_gpus == 4  # clamped to the counts the rows have
        assert m.work_left == pytest.approx(800.0 * scale)
        assert np.array_equal(np.isinf(m.remaining_one_node), np.isinf(one))
        assert np.allclose(m.remaining_one_node[np.isfinite(one)], one[np.isfinite(one)] * scale)
        assert m.remaining(3, False) == math.inf and m.remaining(2, True) == pytest.approx(500.0 * scale)
