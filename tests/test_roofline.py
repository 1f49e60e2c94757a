"""The roofline's GPU types: ratios, memory fit, the admin's table."""

import math

import pytest

from lyasched.costmodel.cost import Profile
from lyasched.costmodel.roofline import (KNOWN_TYPES, fits, largest_batch, lookup, parse_types, profile_on,
                                         speed_ratio)

T4, A100, RTX = KNOWN_TYPES["t4"], KNOWN_TYPES["a100"], KNOWN_TYPES["rtx2080ti"]


def test_compute_bound_work_scales_with_peaks_and_memory_bound_with_bandwidth():
    assert speed_ratio(A100, T4, intensity=1e6) == pytest.approx(312 / 65)
    assert speed_ratio(A100, T4, intensity=0.5) == pytest.approx(1555 / 320)
    # the RTX 2080 Ti has twice a T4's bandwidth and less peak: faster on memory-bound work only
    assert speed_ratio(T4, RTX, intensity=0.5) < 1 < speed_ratio(T4, RTX, intensity=1e6)


def test_ratio_is_symmetric_and_identity_on_same_type():
    for i in (1.0, 100.0, 1000.0):
        assert speed_ratio(T4, A100, i) * speed_ratio(A100, T4, i) == pytest.approx(1.0)
        assert speed_ratio(T4, T4, i) == 1.0
    with pytest.raises(ValueError):
        speed_ratio(T4, A100, 0.0)


def test_profile_on_scales_times_not_memory():
    p = Profile("m", alpha=0.02, beta=0.001, params=10**7, mem_base=2 * 2**30, mem_per_sample=100 * 2**20)
    q = profile_on(p, T4, A100)
    assert q.alpha == pytest.approx(0.02 * 320 / 1555)
    assert q.beta < p.beta and q.source == "estimated"
    assert (q.mem_base, q.mem_per_sample) == (p.mem_base, p.mem_per_sample)
    assert profile_on(p, T4, T4) is p


def test_memory_fit_and_largest_batch():
    p = Profile("m", alpha=0.0, beta=0.0, params=1, mem_base=1 * 2**30, mem_per_sample=2**30)
    assert largest_batch(p, RTX) == pytest.approx(10.0)
    assert fits(p, RTX, 10) and not fits(p, RTX, 11)
    assert largest_batch(Profile("m", 0, 0, 1), RTX) == math.inf
    assert largest_batch(Profile("m", 0, 0, 1, mem_base=100 * 2**30), RTX) == 0.0


def test_admin_table_adds_and_overrides_and_refuses_bad_entries():
    types = parse_types({"MI250": {"tflops": 362, "bandwidth": 3277, "memory_gib": 128}, "t4": {"memory_gib": 15}})
    assert types["mi250"].tflops == 362 and types["t4"].memory_gib == 15 and types["t4"].tflops == 65
    assert lookup("A100", types).name == "a100"
    for bad, msg in [({"x": {"tflops": 1}}, "needs"), ({"t4": {"speed": 1}}, "unknown key"),
                     ({"t4": {"tflops": -1}}, "positive"), ({"t4": 3}, "table")]:
        with pytest.raises(ValueError, match=msg):
            parse_types(bad)
    with pytest.raises(ValueError, match="unknown GPU type 'b200'"):
        lookup("b200")
