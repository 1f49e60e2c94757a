"""Tenants (issue 36): water-filled entitlement, the ledger, per-tenant figures, the tenant queue."""

import json
import math
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from lyasched.cli.replay import replay
from lyasched.costmodel.cost import ClusterSpec, CostModel, Link, Profile
from lyasched.costmodel.jobspec import Job
from lyasched.policy import make_policy
from lyasched.policy.state import RunningJob, SlotState, waiting_job
from lyasched.policy.tenants import TenantBook, TenantLedger, waterfill
from lyasched.sim import Simulation
from lyasched.sim.fairness import tenant_summary
from lyasched.sim.workloads import Tenant, load_workload, tenant_workload

RESNET = Profile("resnet", 0.02, 0.0015, 25_000_000, mem_base=2e9, mem_per_sample=80e6)


def test_waterfill_equal_and_capped():
    assert waterfill({"a": 10, "b": 10}, {}, 8) == {"a": 4.0, "b": 4.0}
    # a tenant asking for less than its part leaves the rest to the others
    out = waterfill({"a": 1, "b": 10, "c": 10}, {}, 9)
    assert out["a"] == 1.0 and out["b"] == pytest.approx(4.0) and out["c"] == pytest.approx(4.0)
    assert waterfill({"a": 0, "b": 3}, {}, 8) == {"a": 0.0, "b": 3.0}  # no demand, nothing; never above demand


def test_waterfill_shares():
    out = waterfill({"a": 100, "b": 100}, {"a": 3, "b": 1}, 8)
    assert out["a"] == pytest.approx(6.0) and out["b"] == pytest.approx(2.0)
    out = waterfill({"a": 1, "b": 100}, {"a": 3, "b": 1}, 8)  # a's unused part goes to b
    assert out["a"] == 1.0 and out["b"] == pytest.approx(7.0)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdef"), st.floats(0, 50), min_size=1),
       st.dictionaries(st.sampled_from("abcdef"), st.floats(0.1, 10)), st.floats(0, 100))
def test_waterfill_properties(demand, shares, cap):
    out = waterfill(demand, shares, cap)
    assert all(-1e-9 <= out[k] <= demand[k] + 1e-9 for k in demand)
    assert sum(out.values()) == pytest.approx(min(cap, sum(demand.values())), abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdefgh"), st.one_of(st.integers(0, 12).map(float), st.floats(0, 50)), min_size=1),
       st.one_of(st.integers(0, 40).map(float), st.floats(0, 100)))
def test_equal_shares_fill_is_the_weighted_fill_float_for_float(demand, cap):
    """The equal-share fill (every replay without given shares) is the general fill with every
    share 1, to the last bit and in the same key order, parts compared against included."""
    from lyasched.policy.tenants import _waterfill_equal, _waterfill_weighted

    fast = _waterfill_equal(demand, cap)
    slow = _waterfill_weighted(demand, {}, cap)
    assert [list(d.items()) for d in fast] == [list(d.items()) for d in slow]


@pytest.mark.parametrize("half_life", [None, math.inf])
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.sampled_from("abcd"), st.integers(-2, 3).map(float),
                          st.integers(-2, 3).map(float)), max_size=30))
def test_ledger_advance_equals_its_step_by_step_sums(half_life, events):
    """`advance` (one loop for held, received and usage) gives the sums of `TenantBook.at` from
    each event, float for float, with the default usage half-life and with none (no decay)."""
    led = TenantLedger(capacity=6.0) if half_life is None else TenantLedger(capacity=6.0, half_life=half_life)
    t = 0.0
    for dt, k, dh, da in events:
        t += dt
        before = led.book(t) if led.t > -math.inf else None
        led.apply([(t, k, dh, da)])
        if before is not None:  # `book` extrapolates as `advance` integrates
            after = led.book(t)
            assert after.received == {**before.received, **{x: after.received[x] for x in after.received if x not in before.received}}
            assert after.usage == {**before.usage, **{x: after.usage[x] for x in after.usage if x not in before.usage}}
            assert after.entitled == {**before.entitled, **{x: after.entitled[x] for x in after.entitled if x not in before.entitled}}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 50), st.sampled_from("abcd"), st.integers(-2, 3).map(float),
                          st.integers(-2, 3).map(float)), max_size=30), st.floats(0, 50))
def test_ledger_without_usage_keeps_the_same_sums(events, extra):
    """A ledger that keeps no usage (a replay whose policy reads none) gives the same received and
    entitled GPU-seconds, float for float and in the same order, and books whose usage is None."""
    full, bare = TenantLedger(capacity=6.0), TenantLedger(capacity=6.0, usage=None)
    t = 0.0
    for dt, k, dh, da in events:
        t += dt
        full.apply([(t, k, dh, da)])
        bare.apply([(t, k, dh, da)])
        a, b = full.book(t + extra), bare.book(t + extra)
        assert list(a.received.items()) == list(b.received.items())
        assert list(a.entitled.items()) == list(b.entitled.items())
        assert a.rate == b.rate and a.held == b.held and b.usage is None and b.at(extra).usage is None
    assert bare.usage is None


def test_replay_keeps_usage_only_for_a_policy_that_reads_it():
    """``Capabilities.reads_tenant_usage``: fairshare's books carry the decayed usage, lyapunov's none; and
    fairshare refuses a book without it rather than order by nothing."""
    from lyasched.policy.fairshare import fairshare_factors

    seen: dict[str, list] = {}
    for name in ("fairshare", "lyapunov"):
        pol = make_policy(name)
        inner = pol.decide

        def spy(state, inner=inner, name=name):
            seen.setdefault(name, []).append(state.tenants)
            return inner(state)

        pol.decide = spy
        Simulation(_jobs(["a", "b", "c"]), CL, estimate_error=0.0).run(pol, name=name)
    books = {k: [b for b in v if b is not None] for k, v in seen.items()}
    assert books["fairshare"] and all(b.usage is not None for b in books["fairshare"])
    assert books["lyapunov"] and all(b.usage is None for b in books["lyapunov"])
    with pytest.raises(ValueError, match="reads_tenant_usage"):
        fairshare_factors(books["lyapunov"][-1], ["a"])


def test_ledger_integrates():
    led = TenantLedger(capacity=4.0)
    led.advance(0.0)
    led.ask("a", 4)
    led.ask("b", 4)
    led.advance(10.0)  # both waiting: 2 GPUs each entitled
    led.ask("a", -4)
    led.hold("a", 4)  # a takes everything
    book = led.book(20.0)
    assert book.entitled == {"a": 40.0, "b": 40.0}
    assert book.received == {"a": 40.0, "b": 0.0}
    assert book.deficit("b") == 40.0 and book.deficit("a") == 0.0


def _jobs(users, n=12, iters=40_000, gap=5.0, gpus=1):
    return [Job(f"j{i:02d}", RESNET, 64, iters, submit_time=gap * i, min_gpus=1, max_gpus=2, requested_gpus=gpus,
                user=users[i % len(users)]) for i in range(n)]


CL = ClusterSpec(nodes=1, gpus_per_node=2, intra=Link(50e9, 1e-5), inter=Link(5e9, 5e-5))


def test_tenant_summary_accounts_every_gpu_second():
    sim = Simulation(_jobs(["a", "b", "c"]), CL, estimate_error=0.0)
    res = sim.run(make_policy("fifo"), name="fifo")
    tenants, fair = tenant_summary(res)
    assert set(tenants) == {"a", "b", "c"} and sum(t["jobs"] for t in tenants.values()) == 12
    assert sum(t["gpu_s"] for t in tenants.values()) == pytest.approx(res.busy_gpu_s)
    # entitlement never exceeds the cluster, and covers what was received while there was demand
    assert sum(t["entitled_gpu_s"] for t in tenants.values()) <= CL.total_gpus * res.makespan + 1e-6
    assert sum(t["entitled_gpu_s"] for t in tenants.values()) >= res.busy_gpu_s - 1e-6
    assert 0 < fair["worst_share_ratio"] <= 1.0 + 1e-9
    assert fair["worst_tenant_slowdown"] >= fair["best_tenant_slowdown"] >= 1.0 - 1e-9


def _state(book):
    cm = CostModel(CL)
    ws = tuple(waiting_job(j, cm, 2) for j in [
        Job("a1", RESNET, 64, 40_000, submit_time=0.0, min_gpus=1, max_gpus=1, user="a"),
        Job("b1", RESNET, 64, 40_000, submit_time=0.0, min_gpus=1, max_gpus=1, user="b"),
    ])
    run = RunningJob("r", 1, ((0, 1),), 0.0, 1e5, predicted_end=1e5, user="a")
    return SlotState(now=600.0, slot_len=30.0, free=(1,), gpus_per_node=2, waiting=ws, running=(run,), tenants=book)


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_tenant_behind_goes_first(policy):
    """Two identical jobs, one free GPU: today the FIFO tie-break (a1) wins; the tenant behind wins
    with the tenant term, whichever it is."""
    today = make_policy(policy).decide(_state(None))
    assert [d.job_id for d in today.starts] == ["a1"]
    behind_b = TenantBook({}, {"a": 5e4, "b": 0.0}, {"a": 3e4, "b": 3e4})
    assert [d.job_id for d in make_policy(policy).decide(_state(behind_b)).starts] == ["b1"]
    behind_a = TenantBook({}, {"a": 0.0, "b": 5e4}, {"a": 3e4, "b": 3e4})
    assert [d.job_id for d in make_policy(policy).decide(_state(behind_a)).starts] == ["a1"]
    # even tenants, or the term off: today's decision, bit for bit
    even = TenantBook({}, {"a": 1e4, "b": 1e4}, {"a": 3e4, "b": 3e4})
    assert make_policy(policy).decide(_state(even)).starts == today.starts
    assert make_policy(policy, tenant_weight=0.0).decide(_state(behind_b)).starts == today.starts


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_small_tenant_far_behind_goes_first(policy):
    """The shortfall is read against each tenant's own entitlement: b, entitled to little and
    given nothing, goes before a, half behind a large entitlement (more GPU-seconds behind: the
    absolute form served a)."""
    book = TenantBook({}, {"a": 5e5, "b": 0.0}, {"a": 1e6, "b": 1e4})
    assert book.deficit("a") > book.deficit("b")
    assert [d.job_id for d in make_policy(policy).decide(_state(book)).starts] == ["b1"]


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_one_slot_of_shortfall_is_not_behind(policy):
    """A tenant short by less than one slot of the whole cluster (2 GPUs x 30 s here) beyond the
    slack is not behind: no decision could have served it sooner, so today's decision stands."""
    today = make_policy(policy).decide(_state(None))
    book = TenantBook({}, {"a": 1e4, "b": 0.0}, {"a": 1e4, "b": 50.0})
    assert make_policy(policy).decide(_state(book)).starts == today.starts
    book = TenantBook({}, {"a": 1e4, "b": 0.0}, {"a": 1e4, "b": 500.0})
    assert [d.job_id for d in make_policy(policy).decide(_state(book)).starts] == ["b1"]


def test_shortfall_per_entitlement():
    book = TenantBook({}, {"a": 600.0, "z": 0.0}, {"a": 1000.0})
    assert book.shortfall("a", 0.05, 0.0) == pytest.approx(0.35)
    assert book.shortfall("a", 0.05, 300.0) == pytest.approx(0.05)
    assert book.shortfall("a", 0.05, 400.0) == 0.0
    assert book.shortfall("z", 0.05, 0.0) == 0.0  # entitled to nothing


def _digest(res):
    return [(r.job.job_id, [(s.start, s.end, s.gpus) for s in r.segments]) for r in res.records], list(res.slot_q)


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_one_tenant_decides_as_today(policy):
    w = load_workload("seed-small-bursty", seed=1)
    one = [replace(j, user="everyone") for j in w.jobs]
    a = Simulation(one, w.cluster, seed=1).run(make_policy(policy), name=policy)
    b = Simulation(w.jobs, w.cluster, seed=1, tenant_input=False).run(make_policy(policy), name=policy)
    assert _digest(a) == _digest(b)


def test_tenant_workload_is_reproducible_and_labelled():
    ts = [Tenant("x", "synth:jobs=30,load=0.5", 2.0), Tenant("y", "synth:jobs=20,load=0.3,arrival=bursts")]
    w1, shares = tenant_workload("t", ts, nodes=2, gpus_per_node=4, seed=3)
    w2, _ = tenant_workload("t", ts, nodes=2, gpus_per_node=4, seed=3)
    assert w1.jobs == w2.jobs and shares == {"x": 2.0, "y": 1.0}
    assert {j.user for j in w1.jobs} == {"x", "y"} and len({j.job_id for j in w1.jobs}) == 50
    with pytest.raises(ValueError):
        tenant_workload("t", [ts[0], ts[0]], nodes=2, gpus_per_node=4)


def test_shares_must_be_positive():
    with pytest.raises(ValueError):
        Simulation(_jobs(["a", "b"]), CL, shares={"a": 0.0})


def test_replay_json_reports_tenants():
    r = CliRunner().invoke(replay, ["-w", "seed-small-scattered", "-p", "fifo,lyapunov", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    for name, pol in out["policies"].items():
        assert set(pol["fairness"]) >= {"worst_share_ratio", "worst_tenant_slowdown"}
        t = pol["tenants"]
        assert sum(v["jobs"] for v in t.values()) == out["jobs"]
        assert all(set(v) == {"jobs", "avg_jct_s", "avg_slowdown", "gpu_s", "entitled_gpu_s"} for v in t.values())
        assert min(v["gpu_s"] / v["entitled_gpu_s"] for v in t.values()) == pytest.approx(pol["fairness"]["worst_share_ratio"])
        assert math.isfinite(pol["fairness"]["worst_tenant_slowdown"])


def test_whatif_reports_users_gpu_time():
    from pathlib import Path

    from lyasched.cli import main

    sacct = str(Path(__file__).parent / "data" / "sacct_awkward.txt")
    r = CliRunner().invoke(main, ["whatif", "--sacct", sacct, "-p", "fifo", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    for m in (s["actual"], s["policies"]["fifo"]):
        assert 0 < m["worst_user_share_ratio"] <= 1.0 + 1e-9
    for fig in [u["actual"] for u in s["users"].values()] + [u["policies"]["fifo"] for u in s["users"].values()]:
        assert fig["gpu_s"] >= 0 and fig["entitled_gpu_s"] > 0
    got = sum(u["policies"]["fifo"]["gpu_s"] for u in s["users"].values())
    assert got > 0
    ratios = [u["actual"]["gpu_s"] / u["actual"]["entitled_gpu_s"] for u in s["users"].values()]
    assert min(ratios) == pytest.approx(s["actual"]["worst_user_share_ratio"])


def _fill_state(book):
    """One free GPU, two 1-GPU jobs: b1 long (its tenant b behind), a1 short (a ahead)."""
    cm = CostModel(CL)
    ws = tuple(waiting_job(j, cm, 2) for j in [
        Job("b1", RESNET, 64, 4_000_000, submit_time=0.0, min_gpus=1, max_gpus=1, user="b"),
        Job("a1", RESNET, 64, 4_000, submit_time=0.0, min_gpus=1, max_gpus=1, user="a"),
    ])
    run = RunningJob("r", 1, ((0, 1),), 0.0, 1e5, predicted_end=1e5, user="a")
    return SlotState(now=600.0, slot_len=30.0, free=(1,), gpus_per_node=2, waiting=ws, running=(run,), tenants=book)


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_fill_stays_shortest_first_with_tenants_behind(policy):
    """The fill step (GPUs the scores left free) starts the shortest job whatever its tenant: a
    long job of a tenant behind does not go ahead of a short one (ordering the fill by tenant
    first cost up to 3x the average JCT on Philly windows). The scores are turned off here
    (`_values` all negative), so the fill alone decides."""
    pol = make_policy(policy)
    pol._values = lambda s_one, s_multi, arr: (-abs(s_one) - 1.0, -abs(s_multi) - 1.0)
    behind_b = TenantBook({}, {"a": 5e4, "b": 0.0}, {"a": 3e4, "b": 3e4})
    res = pol.decide(_fill_state(behind_b))
    assert [(d.job_id, d.reason) for d in res.starts] == [("a1", "fill: score 0, run 464s (+0s over best 464s)")]


def test_wake_at_with_tenants_when_nothing_fits():
    """With tenants behind the policy does not skip slots (a credit grows with time), except when
    no configuration of any waiting job fits the free GPUs: then nothing can start before the
    cluster changes, whatever the credit, and the slot says so (wake_at inf)."""
    cm = CostModel(CL)
    ws = tuple(waiting_job(j, cm, 2) for j in [
        Job("a1", RESNET, 64, 40_000, submit_time=0.0, min_gpus=2, max_gpus=2, requested_gpus=2, user="a"),
        Job("b1", RESNET, 64, 40_000, submit_time=0.0, min_gpus=2, max_gpus=2, requested_gpus=2, user="b"),
    ])
    run = RunningJob("r", 1, ((0, 1),), 0.0, 1e5, predicted_end=1e5, user="a")
    book = TenantBook({}, {"a": 5e4, "b": 0.0}, {"a": 3e4, "b": 3e4})
    state = SlotState(now=600.0, slot_len=30.0, free=(1,), gpus_per_node=2, waiting=ws, running=(run,), tenants=book)
    res = make_policy("lyapunov").decide(state)
    assert res.starts == () and res.info.get("wake_at") == math.inf


def test_credit_counts_only_the_gpus_that_repay():
    """A start's tenant credit counts for g GPUs at most, and at most owed / run: the GPUs whose
    GPU-time over the run repays what the tenant is owed (beyond that it puts the tenant ahead)."""
    import numpy as np

    from lyasched.policy.lyapunov import repaying_gpus
    g = np.arange(1.0, 5.0)
    run = np.array([[1000.0, 600.0, 400.0, 300.0], [1000.0, 600.0, 400.0, math.inf]])
    out = repaying_gpus(g, np.array([1000.0, 1e9]), run)
    assert out[0] == pytest.approx([1.0, 1000 / 600, 2.5, 1000 / 300])
    assert list(out[1]) == [1.0, 2.0, 3.0, 0.0]


@pytest.mark.parametrize("policy", ["lyapunov", "elastic"])
def test_tenant_owed_little_is_credited_little(policy):
    """b owed a few GPU-seconds beyond the slack and the pad: its job's credit counts for the GPUs
    that repay them, far less than one GPU of a run of hours; owed far more, the whole GPU."""
    pol = make_policy(policy)
    st = _state(TenantBook({}, {"a": 1e4, "b": 0.0}, {"a": 1e4, "b": 500.0}))
    *_, arr = pol._scores(st)
    b = [w.job_id for w in st.waiting].index("b1")
    owed = 500.0 - 0.05 * 500.0 - 2 * 30.0
    assert arr["tenant_gpus"][0][b, 0] == pytest.approx(owed / arr["one"][b, 0])
    assert arr["tenant_gpus"][0][b, 0] < 0.2
    far = _state(TenantBook({}, {"a": 1e4, "b": 0.0}, {"a": 1e4, "b": 1e9}))
    *_, arr = pol._scores(far)
    assert arr["tenant_gpus"][0][b, 0] == 1.0


@pytest.mark.parametrize("seed", range(200))
def test_equal_shares_fill_many_tenants(seed):
    """`test_equal_shares_fill_is_the_weighted_fill_float_for_float` with up to 40 tenants (a
    replay's 15 virtual clusters, and more), integer GPU demands or any, zero demands among them."""
    import numpy as np

    from lyasched.policy.tenants import _waterfill_equal, _waterfill_weighted

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    if seed % 2:
        vals = rng.integers(0, 64, n).astype(float)
    else:
        vals = rng.uniform(0, 50, n) * (rng.random(n) < 0.8)
    demand = {f"vc{i}": float(v) for i, v in zip(rng.permutation(n), vals)}
    cap = float(rng.integers(0, 500)) if seed % 3 else float(rng.uniform(0, 500))
    fast = _waterfill_equal(demand, cap)
    slow = _waterfill_weighted(demand, {}, cap)
    assert [list(d.items()) for d in fast] == [list(d.items()) for d in slow]
