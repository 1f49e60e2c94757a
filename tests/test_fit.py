import pytest

from lyasched.costmodel.cost import Link, ring_allreduce_time
from lyasched.costmodel.fit import fit_linear, fit_link


def test_fit_linear_recovers_line():
    f = fit_linear([1, 2, 4, 8], [0.03, 0.05, 0.09, 0.17])
    assert f.intercept == pytest.approx(0.01)
    assert f.slope == pytest.approx(0.02)
    assert f.r2 == pytest.approx(1.0)


def test_fit_linear_clamps_negative_intercept():
    f = fit_linear([1, 2, 3], [0.5, 1.5, 2.5])
    assert f.intercept == 0.0 and f.slope > 0


def test_fit_link_recovers_ring_parameters():
    link = Link(bandwidth=5e9, latency=20e-6)
    sizes = [1e5, 1e6, 1e7, 1e8]
    times = [ring_allreduce_time(s, 4, link) for s in sizes]
    fitted, r2 = fit_link(sizes, times, ranks=4)
    assert fitted.bandwidth == pytest.approx(5e9, rel=1e-6)
    assert fitted.latency == pytest.approx(20e-6, rel=1e-6)
    assert r2 == pytest.approx(1.0)


def test_fit_rejects_empty():
    with pytest.raises(ValueError):
        fit_linear([], [])
