"""The goodput model (lyasched.costmodel.goodput): parsing, efficiency, accumulation, best batch,
run time and progress over the re-tuning pieces, and the rows the policies see."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from lyasched.costmodel import goodput as gp
from lyasched.costmodel.cost import ClusterSpec, CostModel
from lyasched.costmodel.jobspec import Job
from lyasched.policy.state import waiting_job
from lyasched.sim.models import profile

COST = CostModel(ClusterSpec(nodes=4, gpus_per_node=4))
CURVE = gp.NoiseScale.parse("0:120;0.5:900;1:4000")


def adaptive_job(phi: str = "0:120;0.5:900;1:4000", m0: int = 128, top: int = 4096, model: str = "resnet50",
                 iterations: int = 5000) -> Job:
    return Job("a", profile(model), m0, iterations, max_gpus=16, adaptive=gp.Adaptive(top, gp.NoiseScale.parse(phi)))


def test_noise_scale_parse_format_interpolate():
    assert CURVE.points == ((0.0, 120.0), (0.5, 900.0), (1.0, 4000.0))
    assert CURVE.at(0.25) == pytest.approx(510.0)
    assert CURVE.at(-1) == 120.0 and CURVE.at(2) == 4000.0
    assert gp.NoiseScale.parse(CURVE.format()) == CURVE
    one = gp.NoiseScale.parse(" 500 ")
    assert one.at(0.0) == one.at(0.9) == 500.0 and one.format() == "500"


@pytest.mark.parametrize("text,needle", [
    ("", "empty"), ("abc", "cannot read"), ("0:1;0.5", "fraction:phi"), ("0.5:10;0.2:20", "increasing"),
    ("0:10;1.5:20", "increasing"), ("0:-3", "phi"), ("0", "phi"), ("0:nan", "phi"), ("0:x", "cannot read"),
])
def test_noise_scale_bad_text(text, needle):
    with pytest.raises(ValueError, match=needle) as e:
        gp.NoiseScale.parse(text)
    assert "\n" not in str(e.value)


def test_efficiency():
    assert gp.efficiency(100.0, 64, 64) == 1.0
    assert gp.base_steps_per_step(1e12, 64, 256) == pytest.approx(4.0)  # huge phi: a bigger batch is free
    assert gp.base_steps_per_step(1e-9, 64, 256) == pytest.approx(1.0)  # tiny phi: worth one base step
    assert 1.0 < gp.base_steps_per_step(64.0, 64, 256) < 4.0


def test_accumulation_when_the_batch_does_not_fit():
    p = profile("resnet50")
    fit = int((COST.cluster.gpu_mem - p.mem_base) // p.mem_per_sample)
    assert gp.accumulation(COST, p, fit, 1) == 1
    assert gp.accumulation(COST, p, fit + 1, 1) == 2
    assert gp.accumulation(COST, p, 4 * fit, 2) == 2
    # accumulating costs compute per sample but one all-reduce per step
    one = gp.step_time(COST, p, fit, 1, False)
    two = gp.step_time(COST, p, 2 * fit, 1, False)
    assert two == pytest.approx(2 * one)
    huge = replace(p, mem_base=COST.cluster.gpu_mem * 2)
    assert gp.accumulation(COST, huge, 8, 1) == 0 and math.isinf(gp.step_time(COST, huge, 8, 1, False))


def test_candidates_are_multiples_of_g_within_bounds():
    j = adaptive_job(m0=100, top=3000)
    for g in (1, 3, 4, 8, 16):
        c = gp.batch_candidates(COST, j, g)
        assert c == tuple(sorted(set(c))) and all(m % g == 0 and 100 <= m <= 3000 for m in c)
        assert c[0] == g * math.ceil(100 / g) and c[-1] == g * (3000 // g)
        assert len(c) <= 14
    fixed = Job("f", profile("resnet50"), 128, 10)
    assert gp.batch_candidates(COST, fixed, 3) == () and gp.batch_candidates(COST, fixed, 4) == (128,)


def test_best_batch_grows_with_phi_and_gpus():
    """A bigger noise scale never asks for a smaller batch; nor do more GPUs (same placement kind)."""
    phis = [50.0, 200.0, 800.0, 3200.0, 12800.0]
    for g in (1, 2, 4):
        got = [gp.best_batch(COST, adaptive_job(str(phi)), g, False) for phi in phis]
        assert got == sorted(got), (g, got)
    for phi in ("100", "3000"):
        per_g = [gp.best_batch(COST, adaptive_job(phi), g, False) for g in (1, 2, 4)]
        assert per_g == sorted(per_g)
    assert gp.best_batch(COST, adaptive_job("3000"), 4, False) > 128  # large phi, 4 GPUs: a bigger batch pays
    assert gp.best_batch(COST, adaptive_job("1"), 4, False) == 128  # tiny phi: the base batch


def test_best_batch_maximises_goodput_over_candidates():
    j = adaptive_job()
    for g, spans in ((2, False), (4, False), (8, True)):
        for f in (0.0, 0.4, 0.9):
            m = gp.best_batch(COST, j, g, spans, f)
            phi = gp.piece_phi(j, gp.piece_of(f))
            best = gp.goodput(COST, j, g, spans, m, phi)
            assert all(gp.goodput(COST, j, g, spans, c, phi) <= best * (1 + 1e-9) for c in gp.batch_candidates(COST, j, g))


def test_run_time_progress_roundtrip_and_adaptive_beats_fixed():
    j = adaptive_job()
    fixed = replace(j, adaptive=None)
    for g, spans in ((1, False), (4, False), (8, True)):
        full = gp.run_time(COST, j, g, spans)
        assert full == pytest.approx(j.run_time(COST, g, spans))
        assert full <= fixed.run_time(COST, g, spans) * (1 + 1e-9)  # the base batch is a candidate
        for f0 in (0.0, 0.13, 0.5):
            for share in (0.1, 0.5, 0.99):
                secs = share * gp.run_time(COST, j, g, spans, f0)
                f1 = gp.progress_after(COST, j, g, spans, f0, secs)
                assert gp.run_time(COST, j, g, spans, f0) - gp.run_time(COST, j, g, spans, f1) == pytest.approx(secs, rel=1e-9)
        assert gp.progress_after(COST, j, g, spans, 0.2, 10 * full) == 1.0
    assert gp.run_time(COST, j, 8, True) < 0.9 * fixed.run_time(COST, 8, True)  # rising phi: 8 GPUs gain from it


def test_first_batch_changes_only_the_first_piece():
    j = adaptive_job()
    best = gp.best_batch(COST, j, 4, False, 0.3)
    assert gp.run_time(COST, j, 4, False, 0.3, best) == pytest.approx(gp.run_time(COST, j, 4, False, 0.3))
    slow = gp.run_time(COST, j, 4, False, 0.3, 4096)
    assert slow > gp.run_time(COST, j, 4, False, 0.3)
    secs = 0.5 * slow
    f1 = gp.progress_after(COST, j, 4, False, 0.3, secs, 4096)
    assert slow - gp.run_time(COST, j, 4, False, f1) == pytest.approx(secs, rel=1e-9)


def test_waiting_job_rows_from_progress():
    j = adaptive_job()
    w0 = waiting_job(j, COST, 16)
    w = waiting_job(j, COST, 16, fraction_done=0.4)
    for g in range(1, 17):
        for spans in (False, True):
            a = w.run_time(g, spans)
            if g <= 4 and not spans or g > 1 and spans:
                assert a == pytest.approx(gp.run_time(COST, j, g, spans, 0.4))
                assert a < w0.run_time(g, spans)
            else:
                assert math.isinf(a)
    assert w.work == pytest.approx(0.6 * j.work())
    # a fixed-batch job is unchanged, and scaled by what is left
    fixed = Job("f", profile("resnet50"), 128, 1000, max_gpus=16)
    f0, f4 = waiting_job(fixed, COST, 16), waiting_job(fixed, COST, 16, fraction_done=0.4)
    np.testing.assert_allclose(f4.run_one_node, f0.run_one_node * 0.6)


def test_piece_table_rows_equal_run_time():
    j = adaptive_job()
    t = gp.piece_table(COST, j, 16)
    for f in (0.0, 0.05, 0.125, 0.6, 0.999):
        one, multi = t.rows(f)
        for g in (1, 3, 4):
            assert one[g - 1] == pytest.approx(gp.run_time(COST, j, g, False, f))
        for g in (2, 8, 16):
            assert multi[g - 1] == pytest.approx(gp.run_time(COST, j, g, True, f))
    done_one, _ = t.rows(1.0)
    assert done_one[0] == 0.0 and math.isinf(done_one[5])


def test_job_with_no_count_that_fits():
    huge = replace(profile("resnet50"), mem_base=COST.cluster.gpu_mem * 2)
    j = Job("h", huge, 64, 10, adaptive=gp.Adaptive(256, CURVE))
    assert j.allowed_counts(COST) == []
    assert np.isinf(waiting_job(j, COST, 8).run_one_node).all()
