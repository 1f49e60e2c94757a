"""The flat-then-linear step time in the per-GPU batch (lyasched.costmodel.batchshape)."""

from __future__ import annotations

import pytest

from lyasched.costmodel.batchshape import MIN_LEVELS, fit_batch_shape, leave_one_batch_out
from lyasched.costmodel.cost import Profile
from lyasched.costmodel.fit import fit_linear
from lyasched.profile.result import ProfileResult

SWEEP = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def hinge(b: float, flat: float = 3e-3, beta: float = 1.2e-5, knee: float = 128) -> float:
    return flat + beta * max(0.0, b - knee)


def test_recovers_a_flat_then_linear_sweep():
    f = fit_batch_shape(SWEEP, [hinge(b) for b in SWEEP])
    assert f.knee == 128 and f.alpha == pytest.approx(3e-3) and f.beta == pytest.approx(1.2e-5)
    assert f.median_abs_rel_err == pytest.approx(0.0, abs=1e-9)
    # the straight line misses the flat part; the shape predicts held-out batches
    line = fit_linear(SWEEP, [hinge(b) for b in SWEEP])
    assert max(abs((line.intercept + line.slope * b) / hinge(b) - 1) for b in SWEEP) > 0.1
    loo = leave_one_batch_out(SWEEP, [hinge(b) for b in SWEEP])
    # every batch but the knee itself is predicted from the others (the knee is taken at a measured
    # batch: without 128 the nearest are 64 and 256)
    assert max(abs(e) for b, e in zip(SWEEP, loo) if b != 128) < 1e-6 and abs(loo[SWEEP.index(128)]) > 0.05


def test_a_straight_sweep_keeps_the_least_squares_line():
    t = [2e-3 + 5e-5 * b for b in SWEEP]
    f, line = fit_batch_shape(SWEEP, t), fit_linear(SWEEP, t)
    assert f.knee == 0 and (f.alpha, f.beta) == pytest.approx((line.intercept, line.slope))


def test_short_sweeps_get_the_line_whatever_they_look_like():
    b = SWEEP[:MIN_LEVELS - 1]
    t = [hinge(x, knee=4) for x in b]
    f, line = fit_batch_shape(b, t), fit_linear(b, t)
    assert f.knee == 0 and (f.alpha, f.beta) == (line.intercept, line.slope)


def test_profile_step_time_is_flat_up_to_the_knee():
    p = Profile("m", alpha=3e-3, beta=1e-5, params=1, knee=100)
    assert p.step_time(1) == p.step_time(100) == 3e-3 and p.step_time(300) == pytest.approx(5e-3)
    assert Profile("m", alpha=3e-3, beta=1e-5, params=1).step_time(300) == pytest.approx(6e-3)  # no knee: the line


def test_profile_result_uses_the_shape_of_its_sweep():
    t = [hinge(b) for b in SWEEP]
    line = fit_linear(SWEEP, t)
    r = ProfileResult(model="m", signature="s", device_type="h200", device_name="H200", params=10, bytes_per_param=4,
                      alpha=line.intercept, beta=line.slope, r2=line.r2, m0=0.0, m1=0.0, batches=SWEEP, step_times=t)
    p = r.to_profile()
    assert p.knee == 128 and p.step_time(4) == pytest.approx(hinge(4)) and p.step_time(1024) == pytest.approx(hinge(1024))
    assert (r.alpha, r.beta) == (line.intercept, line.slope)  # what summaries carry is unchanged
