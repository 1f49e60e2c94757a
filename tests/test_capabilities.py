"""Policy capabilities: declared once, read by the simulator, the service and docs/baselines.md."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from lyasched.config import Config
from lyasched.policy import POLICIES, Decision, SlotResult, capabilities, capabilities_of, make_policy
from lyasched.policy.placement import EQUAL_PER_NODE, equal_placement, fit_placement, violation
from lyasched.policy.snapshot import ArrivalHistory, expected_end
from lyasched.policy.state import Capabilities, FreeGpus
from lyasched.service import Service, UnsupportedPolicy, cannot_serve

DOCS = Path(__file__).resolve().parents[1] / "docs" / "baselines.md"


def _docs_table() -> dict[str, dict[str, str]]:
    lines = DOCS.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| policy | preemptive"))
    head = [c.strip() for c in lines[start].strip("|").split("|")]
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = dict(zip(head, cells))
    return out


# docs/baselines.md's column for each field of Capabilities (a new flag needs a column)
COLUMNS = {"preemptive": "preemptive", "moves": "moves", "needs_true_runtimes": "needs true run times",
           "time_invariant": "time-invariant", "placement": "placement",
           "reads_tenant_usage": "reads tenant usage"}


def test_docs_table_matches_the_declared_capabilities():
    table = _docs_table()
    assert set(table) == set(POLICIES)
    assert set(COLUMNS) == {f.name for f in dataclasses.fields(Capabilities)}
    yes = {"yes": True, "no": False}
    for name, row in table.items():
        caps = capabilities_of(name)
        for field, column in COLUMNS.items():
            value = getattr(caps, field)
            assert (yes[row[column]] if isinstance(value, bool) else row[column]) == value, (name, column)
        assert yes[row["serve"]] == (cannot_serve(caps) == ""), name


def test_a_policy_without_a_declaration_gets_the_safe_defaults():
    class Bare:
        name = "bare"

        def decide(self, state):
            return SlotResult(starts=())

    assert capabilities(Bare()) == Capabilities(False, False, False, EQUAL_PER_NODE)
    assert capabilities(make_policy("lyapunov")) == Capabilities()


@pytest.mark.parametrize("name", ["tiresias", "sjf-oracle"])
def test_serve_refuses_a_policy_it_cannot_carry_out(name, tmp_path):
    from lyasched.cli.serve import serve

    res = CliRunner().invoke(serve, ["--policy", name, "--once", "--db", str(tmp_path / "x.db")])
    assert res.exit_code == 2
    assert res.output.strip().count("\n") == 0
    assert res.output.startswith(f"Error: policy {name!r} cannot run under serve: ")
    assert not (tmp_path / "x.db").exists()  # refused before anything was created


class _NoSlurm:
    """A CLI runner that must never be called (the policy is refused before any Slurm call)."""

    def run(self, args, *, idempotent=True, input=None):
        raise AssertionError(f"unexpected Slurm call {args}")


def test_service_refuses_a_preemptive_policy_object(tmp_path):
    import sqlite_utils

    with pytest.raises(UnsupportedPolicy, match="preempts"):
        Service(Config(), sqlite_utils.Database(tmp_path / "x.db"), slurm=_NoSlurm(), policy=make_policy("tiresias"))


def test_free_gpus_places_exactly_as_the_rule():
    import random

    rng = random.Random(3)
    for _ in range(3000):
        n, gpn = rng.randint(1, 7), rng.choice([2, 4, 8])
        free = [rng.randint(0, gpn) for _ in range(n)]
        g = rng.randint(1, n * gpn)
        pool = FreeGpus(tuple(free), gpn)
        got = pool.take(g, one_node=False)
        assert got == equal_placement(free, g)
        if got is not None:
            assert not violation(got, g, free)
            assert len({c for _, c in got}) == 1


def test_free_gpus_keeps_to_the_rule_over_a_sequence_of_takes_and_gives():
    """The pool's per-count node lists are kept up by every take and give: each placement in a
    long run of them is the rule's on the free counts as they are then."""
    import random

    from lyasched.policy.placement import one_node_placement

    rng = random.Random(5)
    for _ in range(300):
        n, gpn = rng.randint(1, 9), rng.choice([2, 4, 8])
        free = [rng.randint(0, gpn) for _ in range(n)]
        pool = FreeGpus(tuple(free), gpn)
        held: list[tuple[tuple[int, int], ...]] = []
        for _ in range(40):
            if held and rng.random() < 0.3:
                pl = held.pop(rng.randrange(len(held)))
                pool.give(pl)
                for node, c in pl:
                    free[node] += c
            else:
                g, one = rng.randint(1, gpn * 2), rng.random() < 0.5
                want = one_node_placement(free, g) if one else equal_placement(free, g)
                assert pool.fits(g, one) == (want is not None and (one or g > max(free)))
                got = pool.take(g, one)
                assert got == want
                if got is not None:
                    held.append(got)
                    for node, c in got:
                        free[node] -= c
            assert pool.free == free and pool.total == sum(free)
            assert pool.max_on_one_node() == max(free)


def test_the_rule_refuses_unequal_spreads_and_replaces_them():
    assert "unequal" in violation(((0, 4), (1, 2)), 6, [4, 4, 4])
    assert fit_placement(6, ((0, 4), (1, 2)), [4, 4, 4]) == ((0, 3), (1, 3))
    assert fit_placement(7, ((0, 4), (1, 3)), [4, 4, 4]) is None  # 7 GPUs cannot span nodes evenly
    assert FreeGpus((4, 2), 4).take(6, one_node=False) is None  # was 4+2 before the rule was shared
    assert not FreeGpus((4, 2), 4).fits(6, one_node=False)


def test_a_one_node_start_is_refused_for_each_reason_the_rule_gives():
    free = [4, 0, 2]
    assert violation(((0, 4),), 4, free) == "" and violation(((2, 1),), 1, free) == ""
    assert "does not hold" in violation(((0, 2),), 3, free)
    assert "bad placement entry" in violation(((3, 1),), 1, free)
    assert "bad placement entry" in violation(((-1, 1),), 1, free)
    assert "bad placement entry" in violation(((0, 0),), 0, free)
    assert "has 0 free GPUs" in violation(((1, 1),), 1, free)
    assert "has 2 free GPUs" in violation(((2, 3),), 3, free)
    assert violation((), 1, free) == "empty placement"


def test_simulator_rejects_a_placement_slurm_cannot_express():
    from lyasched.sim import InvalidDecision, Simulation
    from lyasched.sim.workloads import seed_workload

    class Uneven:
        name = "uneven"

        def decide(self, state):
            w = state.waiting[0]
            return SlotResult(starts=(Decision(w.job_id, 6, ((0, 4), (1, 2))),))

    w = seed_workload("seed-small-bursty", seed=1, n_jobs=5)
    with pytest.raises(InvalidDecision, match="unequal GPUs per node|not an allowed"):
        Simulation(w.jobs, w.cluster, seed=1).run(Uneven())


def test_expected_end_is_the_bound_a_job_cannot_overrun():
    assert expected_end(100.0, 50.0, 3600.0, 30.0) == 3700.0  # the time limit, not the (lower) prediction
    assert expected_end(100.0, 5000.0, 3600.0, 30.0) == 5100.0  # a prediction beyond the limit (simulator only)
    assert expected_end(100.0, 50.0, math.inf, 30.0) == 150.0
    assert expected_end(100.0, math.nan, 3600.0, 30.0) == 3700.0
    assert expected_end(100.0, math.nan, math.inf, 30.0) == 130.0


def test_arrival_history_is_sorted_by_time_then_key():
    h = ArrivalHistory()
    for key, t, g in [("b", 5.0, 1.0), ("a", 5.0, 2.0), ("c", 1.0, 4.0), ("a", 9.0, 8.0)]:
        h.add(key, t, g)
    t, cum = h.arrays()
    assert t.tolist() == [1.0, 5.0, 5.0]
    assert cum.tolist() == [4.0, 6.0, 7.0]  # c, a, b; the second "a" is ignored


def test_spread_mask_says_which_counts_the_rule_can_spread():
    import random

    rng = random.Random(4)
    for _ in range(2000):
        n, gpn = rng.randint(1, 7), rng.choice([2, 4, 8])
        free = [rng.randint(0, gpn) for _ in range(n)]
        pool = FreeGpus(tuple(free), gpn)
        k = n * gpn + 2
        assert pool.spread_mask(k).tolist() == [equal_placement(free, g) is not None for g in range(1, k + 1)]


class _NoMoves:
    """A `Slurm` backend without the calls a move needs (signal, requeue): never called here."""

    name = "nomoves"

    def __getattr__(self, attr):
        if attr in ("signal", "set_requeue", "requeue_hold"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            raise AssertionError(f"unexpected Slurm call {attr}{args}")

        return call


def test_service_refuses_a_moving_policy_on_a_backend_that_cannot_move(tmp_path):
    import sqlite_utils
    with pytest.raises(UnsupportedPolicy, match="^policy 'elastic' moves jobs, and the Slurm backend 'nomoves' cannot"):
        Service(Config(), sqlite_utils.Database(tmp_path / "x.db"), slurm=_NoMoves(), policy=make_policy("elastic"))
