"""lyasched.job.goodput: the noise-scale estimator recovers a known phi (1 process with
accumulation, 2 processes under DDP on gloo), the learning-rate rules, the per-job agent."""

from __future__ import annotations

import math
import socket

import pytest

torch = pytest.importorskip("torch")

from lyasched.job import goodput as gp  # noqa: E402

D = 64  # linear regression y = w*.x, x ~ N(0, I_D), at w = 0: |G|^2 = |w*|^2 = 1, tr(Sigma) = D + 1
TRUE_PHI = D + 1.0


def test_estimates_are_exact_on_expected_norms():
    g2, tr = 3.0, 450.0
    for b, m in ((8, 32), (16, 64), (1, 2)):
        got = gp.estimates(g2 + tr / b, b, g2 + tr / m, m)
        assert got == pytest.approx((g2, tr))
    with pytest.raises(ValueError):
        gp.estimates(1.0, 32, 1.0, 32)


def test_noise_scale_is_the_ratio_of_the_averages():
    ns = gp.NoiseScale(decay=0.5)
    assert ns.phi is None
    ns.update(*_norms(1.0, 10.0, 4, 8))  # phi 10
    ns.update(*_norms(3.0, 10.0, 4, 8))  # phi 10/3
    # EMA weights 0.5 and 0.25 (normalised): tr 10, |G|^2 (0.25*1 + 0.5*3)/0.75
    assert ns.phi == pytest.approx(10.0 / ((0.25 * 1 + 0.5 * 3) / 0.75))
    back = gp.NoiseScale()
    back.load_state_dict(ns.state_dict())
    assert back.phi == ns.phi


def _norms(g2: float, tr: float, b: int, m: int) -> tuple[float, int, float, int]:
    return g2 + tr / b, b, g2 + tr / m, m


def _regression_phi(rank: int, world: int, steps: int, micro: int, accum: int, seed: int) -> float | None:
    torch.manual_seed(0)
    model = torch.nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()
    wstar = torch.ones(1, D) / math.sqrt(D)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    noise = gp.GradientNoise(model, decay=0.995)
    g = torch.Generator().manual_seed(seed + rank)
    phi = None
    for _ in range(steps):
        for i in range(accum):
            with noise.micro_step(i, accum):
                x = torch.randn(micro, D, generator=g)
                (0.5 * ((model(x) - x @ wstar.T) ** 2).mean() / accum).backward()
        phi = noise.finish(micro, accum)
        model.zero_grad()
    return phi


def test_one_process_recovers_phi_from_accumulation():
    torch.set_num_threads(1)
    phi = _regression_phi(0, 1, 300, 64, 4, seed=11)
    assert phi is not None and phi == pytest.approx(TRUE_PHI, rel=0.2)


def test_one_process_without_accumulation_cannot_tell():
    assert _regression_phi(0, 1, 5, 64, 1, seed=11) is None


def _ddp_worker(rank: int, world: int, port: int, out) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        out.put((rank, _regression_phi(rank, world, 300, 128, 1, seed=21)))
    finally:
        dist.destroy_process_group()


def test_two_processes_recover_phi_from_local_and_reduced_gradients():
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=_ddp_worker, args=(r, 2, port, q)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    got = dict(q.get() for _ in procs)
    assert got[0] == got[1]  # every rank computes the same phi (the local norms are averaged)
    assert got[0] is not None and got[0] == pytest.approx(TRUE_PHI, rel=0.2)


def test_learning_rate_rules():
    assert gp.lr_factor("linear", None, 64, 256) == 4
    assert gp.lr_factor("sqrt", None, 64, 256) == 2
    # AdaScale's gain (phi/M0 + 1)/(phi/M + 1) is the base steps a step at M is worth
    for phi in (1.0, 100.0, 1e5):
        r = gp.lr_factor("adascale", phi, 64, 256)
        assert r == pytest.approx((phi / 64 + 1) / (phi / 256 + 1))
        assert r == pytest.approx(gp.gain(phi, 64, 256))
        assert 1 <= r <= 4
    with pytest.raises(ValueError, match="unknown learning-rate rule"):
        gp.lr_factor("cosine", 1.0, 64, 128)


def test_plan_accumulates_past_the_largest_local_batch():
    assert gp.plan_for(512, 4, 0) == gp.Plan(512, 128, 1)
    assert gp.plan_for(512, 4, 32) == gp.Plan(512, 32, 4)
    assert gp.plan_for(500, 4, 32) == gp.Plan(500, 25, 5)  # 5 micro-steps split 125 exactly
    assert gp.plan_for(4 * 127, 4, 32) == gp.Plan(496, 31, 4)  # 127 is prime: rounded down to world x accumulation
    assert gp.plan_for(2, 4, 0) == gp.Plan(4, 1, 1)


def _agent(**kw) -> gp.BatchAgent:
    base = dict(m0=64, max_batch=1024, world=4, rule="adascale", prior_alpha=0.05, prior_beta=0.001)
    base.update(kw)
    return gp.BatchAgent(**base)


def test_agent_takes_the_chosen_batch_and_grows_with_phi():
    env = {gp.ENV_BASE: "64", gp.ENV_BATCH: "256", gp.ENV_MAX: "1024", gp.ENV_RULE: "sqrt",
           gp.ENV_ALPHA: "0.05", gp.ENV_BETA: "0.001"}
    a = gp.BatchAgent.from_env(4, env)
    assert (a.m0, a.batch, a.max_batch, a.rule) == (64, 256, 1024, "sqrt")
    assert a.best(None) == 256  # no estimate yet: keep the service's batch
    picks = [a.best(phi) for phi in (1.0, 100.0, 1000.0, 1e5)]
    assert picks == sorted(picks) and picks[0] < picks[-1]
    assert picks[-1] == 1024  # huge noise scale: the largest batch is almost free in efficiency
    assert all(c % 4 == 0 for c in a.candidates())


def test_agent_measured_step_times_override_the_prior():
    a = _agent(prior_alpha=0.0, prior_beta=1.0)  # prior: no fixed cost, a bigger batch is never cheaper per sample
    assert a.best(1000.0) == 64
    # the job measures a big fixed cost per step: larger batches amortise it
    a.record(gp.Plan(64, 16, 1), 1.0)
    a.record(gp.Plan(128, 32, 1), 1.01)
    assert a.micro_time(64) == pytest.approx(1.03)
    assert a.best(1000.0) > 64


def test_agent_prior_is_flat_up_to_the_knee():
    env = {gp.ENV_BASE: "64", gp.ENV_MAX: "1024", gp.ENV_ALPHA: "0.05", gp.ENV_BETA: "0.001", gp.ENV_KNEE: "64"}
    a = gp.BatchAgent.from_env(4, env, measure=False)
    assert a.prior_knee == 64.0
    assert a.micro_time(16) == a.micro_time(64) == pytest.approx(0.05)  # flat: a bigger micro-batch costs nothing
    assert a.micro_time(128) == pytest.approx(0.05 + 0.001 * 64)
    # at a large phi the straight line favours the largest batch (its fixed cost amortised); with the knee,
    # past 64 per GPU the time grows faster than the batch (0.05 < 0.001 x 64): the knee's batch is best
    line = _agent(prior_alpha=0.05, prior_beta=0.001, measure=False)
    assert line.best(1e5) == 1024 and a.best(1e5) == 4 * 64


def test_agent_without_measuring_keeps_to_the_prior():
    a = _agent(prior_alpha=0.0, prior_beta=1.0, measure=False)
    a.record(gp.Plan(64, 16, 1), 1.0)
    a.record(gp.Plan(128, 32, 1), 1.01)
    assert a.times == {} and a.best(1000.0) == 64


def test_agent_progress_in_base_steps_and_state_round_trip():
    a = _agent(retune_every=2)
    plan = a.plan()
    assert a.step_done(plan, 0.1, None) is False
    assert a.progress == 1.0  # at M0 a step is one base step
    changed = a.step_done(plan, 0.1, 5000.0)
    assert changed and a.batch > 64
    p2 = a.plan()
    a.step_done(p2, 0.2, 5000.0)
    assert a.progress == pytest.approx(2.0 + gp.gain(5000.0, 64, p2.batch))
    b = _agent(batch=128)
    b.load_state_dict(a.state_dict())
    assert (b.progress, b.steps, b.schedule, b.batch) == (a.progress, a.steps, a.schedule, 128)
    b.load_state_dict(a.state_dict(), keep_batch=False)
    assert b.batch == a.batch


def test_schedule_text_round_trips_exactly():
    a = _agent(retune_every=1)
    for phi in (None, 300.0, 3000.0):
        a.step_done(a.plan(), 0.1, phi)
    back = gp.read_schedule(gp.format_schedule(a.schedule))
    assert back == {s: (b, lr, g) for s, b, lr, g in a.schedule}
    with pytest.raises(ValueError, match="line 2"):
        gp.read_schedule("0 64 1.0 1.0\nbad\n")


def test_bad_agent_settings_are_refused():
    with pytest.raises(ValueError, match="learning-rate rule"):
        _agent(rule="cubic")
    with pytest.raises(ValueError, match="max batch"):
        _agent(max_batch=32)


def test_the_noise_scale_keeps_its_last_positive_estimate_when_the_averages_dip():
    from lyasched.job.goodput import NoiseScale

    ns = NoiseScale(decay=0.5)
    assert ns.phi is None
    ns.g2, ns.tr, ns.weight, ns.count = 2.0, 200.0, 0.5, 1
    ns.last = 100.0
    assert ns.phi == 100.0
    ns.g2 = -1.0  # |G|^2's average below zero: the true gradient lost in its noise
    assert ns.phi == 100.0  # the last positive ratio stands: not back to "unknown"
    back = NoiseScale(decay=0.5)
    back.load_state_dict(ns.state_dict())
    assert back.phi == 100.0
