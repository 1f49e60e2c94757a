"""The synthetic workload family (lyasched.sim.synth): reproducible, knobs do what they say."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from lyasched.costmodel.cost import CostModel
from lyasched.policy import make_policy
from lyasched.sim import Simulation
from lyasched.sim.synth import PRESETS, parse_spec, synth_workload
from lyasched.sim.workloads import TraceError, load_workload


def test_same_seed_same_jobs_other_seed_other_jobs():
    a, b, c = (synth_workload("synth:jobs=50,cancel=0.2", s) for s in (3, 3, 4))
    assert a.jobs == b.jobs and a.end_fraction == b.end_fraction
    assert a.jobs != c.jobs


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_presets_match_the_issue_shapes(preset):
    w = synth_workload(f"synth:{preset},jobs=200", 0)
    req = np.array([j.requested_gpus for j in w.jobs])
    if preset == "production":
        assert (req == 1).mean() > 0.9 and w.cluster.gpus_per_node == 8
    else:
        assert w.cluster.nodes == 16 and w.cluster.gpus_per_node == 4 and req.max() >= 16
        assert len({j.profile.model.split("/")[0] for j in w.jobs}) >= 8  # vision, language, speech, recsys


def test_knobs():
    n = 400
    one = synth_workload(f"synth:jobs={n},one_gpu=1", 0)
    assert all(j.requested_gpus == 1 for j in one.jobs)
    big = synth_workload(f"synth:jobs={n},one_gpu=0,max_req=8", 0)
    assert {j.requested_gpus for j in big.jobs} <= {2, 4, 8}
    ends = synth_workload(f"synth:jobs={n},cancel=0.3,fail=0.2", 0).end_fraction
    assert 0.4 < len(ends) / n < 0.6 and all(0 < f <= 0.6 for f in ends.values())
    # the offered load sets the arrival span: twice the load, about half the span
    cost = lambda w: max(j.submit_time for j in w.jobs)  # noqa: E731
    lo, hi = synth_workload(f"synth:jobs={n},load=0.5", 1), synth_workload(f"synth:jobs={n},load=1.0", 1)
    assert 1.8 < cost(lo) / cost(hi) < 2.2
    # bursts: most gaps tiny; constant durations: little spread
    b = np.diff([j.submit_time for j in synth_workload(f"synth:jobs={n},arrival=bursts,bursts=2", 0).jobs])
    assert np.median(b) < 10
    w = synth_workload(f"synth:jobs={n},dur=const", 0)
    cm = CostModel(w.cluster)
    d = np.array([j.run_time(cm, j.requested_gpus, j.requested_gpus > w.cluster.gpus_per_node) for j in w.jobs])
    assert d.std() / d.mean() < 0.3


def test_models_that_scale_badly_gain_less_from_more_gpus():
    def eff(mix):
        w = synth_workload(f"synth:jobs=60,models={mix},one_gpu=1", 0)
        cm = CostModel(w.cluster)
        return np.mean([j.run_time(cm, 1) / (4 * j.run_time(cm, 4)) for j in w.jobs if 4 in j.allowed_counts(cm)])
    assert eff("good") > eff("bad")


@pytest.mark.parametrize("spec,needle", [
    ("synth:jobs=abc", "not an integer"), ("synth:dur=weird", "choose from"), ("synth:nosuch=1", "unknown knob"),
    ("synth:load=0", "out of range"), ("synth:cancel=0.8,fail=0.5", "at most 1"), ("synth:bogus", "preset"),
    ("synth:adaptive=1.5", "out of range"), ("synth:phi=spiky", "choose from"), ("synth:max_mult=0.5", "out of range"),
])
def test_bad_specs(spec, needle):
    with pytest.raises(ValueError, match=needle):
        parse_spec(spec)
    with pytest.raises(TraceError):
        load_workload(spec)


def test_early_endings_shorten_true_runs_only():
    w = load_workload("synth:jobs=30,fail=0.5", seed=2)
    sim = Simulation(w.jobs, w.cluster, seed=2, estimate_error=0.0, end_fraction=w.end_fraction)
    plain = Simulation(w.jobs, w.cluster, seed=2, estimate_error=0.0)
    for i, j in enumerate(sim.jobs):
        f = w.end_fraction.get(j.job_id, 1.0)
        assert sim.factors[i] == pytest.approx(f)
        assert sim.predicted(i).work == plain.predicted(i).work  # policies see the estimate, not the ending


def test_adaptive_knob_opts_jobs_in_and_changes_nothing_else():
    base = synth_workload("synth:mixed160", 4)
    mixed = synth_workload("synth:mixed160,adaptive=0.5", 4)
    assert [replace(j, adaptive=None) for j in mixed.jobs] == list(base.jobs)
    assert all(j.adaptive is None for j in base.jobs)
    opted = [j for j in mixed.jobs if j.adaptive is not None]
    assert 0.3 < len(opted) / len(mixed.jobs) < 0.7
    for j in opted:
        assert j.adaptive.max_batch == 32 * j.global_batch
        phi0 = j.adaptive.noise.at(0.0)
        assert 0.25 * j.global_batch <= phi0 <= 8 * j.global_batch
    shapes = {len(j.adaptive.noise.points) for j in opted}
    assert shapes == {1, 2, 3}  # flat, rising, late


@pytest.mark.parametrize("shape,rise", [("rising", 8.0), ("flat", 1.0), ("late", 10.0)])
def test_phi_shapes(shape, rise):
    w = synth_workload(f"synth:jobs=60,adaptive=1,phi={shape},max_mult=8", 0)
    for j in w.jobs:
        n = j.adaptive.noise
        assert n.at(1.0) == pytest.approx(rise * n.at(0.0))
        assert j.adaptive.max_batch == 8 * j.global_batch
        if shape == "late":
            assert n.at(0.5) == n.at(0.0)


def test_adaptive_preset_replays_with_pollux():
    w = load_workload("synth:adaptive,jobs=30", seed=0)
    assert sum(j.adaptive is not None for j in w.jobs) >= 15
    res = Simulation(w.jobs, w.cluster, seed=0).run(make_policy("pollux"))
    assert all(np.isfinite(r.end) for r in res.records)
