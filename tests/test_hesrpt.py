"""The hesrpt policy (lyasched.policy.hesrpt): heSRPT's shares, the smaller job favoured, restarts
charged as time, and whole replays (pollux's placement rules, reproducible)."""

from __future__ import annotations

import math

import pytest

from lyasched.policy import POLICIES, REFERENCES, capabilities_of, make_policy
from lyasched.policy.hesrpt import shares
from lyasched.policy.movable import MovableJob
from lyasched.policy.params import ParamError, check_param
from lyasched.sim import Simulation
from lyasched.sim.workloads import load_workload
from test_pollux import Checked, movable, rows, state, waiting


def power(size: float, p: float = 0.5) -> dict[int, float]:
    """Rows of a job of ``size`` seconds on one GPU that scales as g^p (counts pollux's rules allow)."""
    return {g: size / g**p for g in (1, 2, 3, 4, 8)}


def test_registered_moves_and_run_only_when_named():
    assert "hesrpt" in POLICIES and "hesrpt" in REFERENCES
    caps = capabilities_of("hesrpt")
    assert caps.moves and caps.preemptive and not caps.needs_true_runtimes


def test_shares_sum_to_one_and_favour_the_smallest():
    th = shares(5, 0.5)
    assert math.isclose(sum(th), 1.0) and th == sorted(th)  # largest job first: rising shares
    assert math.isclose(th[-1], 1 - (4 / 5) ** 2)
    assert all(math.isclose(x, 0.25) for x in shares(4, 0.0))  # p = 0: equal shares


@pytest.mark.parametrize("order", [(0.0, 1.0), (1.0, 0.0)])
def test_the_smaller_job_gets_more_gpus_whichever_came_first(order):
    """Two jobs that scale alike on 12 GPUs (3 nodes): the shorter takes two nodes, the longer one
    (pollux, whose inverse speed-ups tie here, gives the older job the two nodes)."""
    small = waiting("small", power(1000.0), n=12, submit=order[0])
    large = waiting("large", power(20000.0), n=12, submit=order[1])
    res = make_policy("hesrpt").decide(state([small, large], free=(4, 4, 4)))
    got = {d.job_id: d.gpus for d in res.starts}
    assert got == {"small": 8, "large": 4}


def running(jid: str, g: int, placement, times: dict[int, float]) -> MovableJob:
    one, multi = rows(times, 12, 4)
    return MovableJob(job_id=jid, gpus=g, placement=tuple(placement), start_time=0.0, expected_end=math.inf,
                      preemptible=True, predicted_end=times[g], requested_gpus=1, move_cost_s=30.0, waited_s=0.0,
                      remaining_one_node=one, remaining_multi_node=multi)


@pytest.mark.parametrize("name,kw,swapped", [("hesrpt", {}, True), ("hesrpt", {"p": 0.0}, False), ("pollux", {}, False)])
def test_the_shares_move_gpus_from_the_longer_job_to_the_shorter(name, kw, swapped):
    """The short job on 4 GPUs, the long one on 8: heSRPT's shares (3/4 and 1/4 at p = 0.5) swap
    them, moves charged; with p = 0 (equal shares: pollux's inverse speed-ups) and under pollux,
    both stay. (Sizes large enough that the swap saves more than its charged moves.)"""
    short = running("short", 4, [(0, 4)], power(10000.0))
    long = running("long", 8, [(1, 4), (2, 4)], power(200000.0))
    res = make_policy(name, **kw).decide(state([], [short, long], free=(0, 0, 0), now=5000.0))
    if swapped:
        assert set(res.preempt) == {"short", "long"}
        assert {d.job_id: d.gpus for d in res.starts} == {"short": 8, "long": 4}
    else:
        assert not res.preempt and not res.starts


def test_a_resize_must_save_more_than_its_charge():
    """A running job alone with 4 free GPUs grows 4 -> 8 when that saves more than the charged moves."""
    times = power(2000.0, 0.9)
    r = movable("r", 4, [(0, 4)], start=0.0, waited=0.0, moves=0, times=times)
    res = make_policy("hesrpt").decide(state([], [r], free=(0, 4), now=100.0))
    assert res.preempt == ("r",) and res.starts[0].gpus == 8
    saved = times[4] - times[8]  # about 265 s: charged 10 moves of 30 s it stays
    res = make_policy("hesrpt", move_charge=saved / 30.0 + 1).decide(state([], [r], free=(0, 4), now=100.0))
    assert not res.preempt and not res.starts


def test_bad_parameters_are_refused():
    assert check_param("hesrpt", "p", "0.3") == 0.3
    with pytest.raises(ParamError):
        check_param("hesrpt", "p", "1")
    with pytest.raises(ValueError):
        make_policy("hesrpt", p=1.0)


class CheckedHesrpt(Checked):
    name = "hesrpt"

    def __init__(self) -> None:
        self.inner = make_policy("hesrpt")
        self.capabilities = self.inner.capabilities
        self.calls = 0


@pytest.mark.parametrize("spec", ["synth:adaptive,jobs=40", "synth:mixed160,jobs=40"])
def test_replays_follow_the_rules_finish_and_repeat(spec):
    w = load_workload(spec, seed=1)
    sim = Simulation(w.jobs, w.cluster, seed=1)
    pol = CheckedHesrpt()
    res = sim.run(pol)
    assert pol.calls > 0 and all(math.isfinite(r.end) for r in res.records)
    again = sim.run(make_policy("hesrpt"))
    assert [(r.end, r.preemptions) for r in again.records] == [(r.end, r.preemptions) for r in res.records]


def two_pieces(first: dict[int, float], rest: dict[int, float], n: int = 8):
    """A piece table of two equal pieces: the first takes ``first[g]`` seconds on g GPUs, the second
    ``rest[g]`` (one node up to 4 GPUs, several above)."""
    import numpy as np

    from lyasched.costmodel.goodput import PieceTable

    one, multi = np.full((2, n), math.inf), np.full((2, n), math.inf)
    for k, times in enumerate((first, rest)):
        for g, t in times.items():
            (one if g <= 4 else multi)[k, g - 1] = t

    def suffix(t):
        out = np.zeros((3, n))
        out[:2] = np.cumsum(t[::-1], axis=0)[::-1]
        return out

    return PieceTable(one, multi, suffix(one), suffix(multi))


@pytest.mark.parametrize("horizon_s,gpus", [(360.0, 1), (0.0, 8)])
def test_an_adaptive_job_is_weighed_by_its_work_ahead(horizon_s, gpus):
    """An adaptive job whose first half does not scale (its noise scale is small) and whose second
    half scales linearly: its rows (the whole run) gain from 8 GPUs, the work just ahead does not,
    so it starts on one GPU (the others stay free for the next arrival); with ``horizon_s`` 0
    (the rows), it takes 8."""
    from dataclasses import replace

    from lyasched.costmodel.goodput import PiecesLeft

    table = two_pieces({g: 3600.0 * (1 + 0.001 * g) for g in (1, 2, 3, 4, 8)}, {g: 3600.0 / g for g in (1, 2, 3, 4, 8)})
    one, multi = table.rows(0.0)
    w = replace(waiting("a", {1: 1.0}), run_one_node=one, run_multi_node=multi, adaptive=True,
                pieces=PiecesLeft(table, 0.0))
    res = make_policy("hesrpt", horizon_s=horizon_s).decide(state([w], free=(4, 4)))
    assert [d.gpus for d in res.starts] == [gpus]


def test_the_simulator_hands_pieces_that_match_the_rows():
    """Every adaptive job the replay shows hesrpt carries its pieces ahead, and all of them take
    what its rows say (a waiting job's rows add one relaunch to every count)."""
    import numpy as np

    seen = {"waiting": 0, "running": 0}

    class Looking(Checked):
        name = "hesrpt"

        def __init__(self) -> None:
            self.inner = make_policy("hesrpt")
            self.capabilities = self.inner.capabilities
            self.calls = 0

        def decide(self, state):
            for kind, jobs in (("waiting", state.waiting), ("running", state.running)):
                for j in jobs:
                    if not j.adaptive:
                        continue
                    assert j.pieces is not None
                    one, multi = j.pieces.time_to(1.0)
                    rows = (j.run_one_node, j.run_multi_node) if kind == "waiting" else (j.remaining_one_node, j.remaining_multi_node)
                    for got, want in zip((one, multi), rows):
                        ok = np.isfinite(want)
                        extra = want[ok] - got[ok]
                        assert np.allclose(extra, extra[0] if extra.size else 0.0, rtol=0, atol=1e-6 * max(1.0, float(want[ok].max(initial=0))))
                        assert kind == "waiting" or np.allclose(extra, 0.0, atol=1e-6 * max(1.0, float(want[ok].max(initial=0))))
                    seen[kind] += 1
            return super().decide(state)

    w = load_workload("synth:adaptive,jobs=30", seed=2)
    Simulation(w.jobs, w.cluster, seed=2).run(Looking())
    assert seen["waiting"] > 0 and seen["running"] > 0


@pytest.mark.parametrize("ending_s,submit,waits", [(20.0, 990.0, True), (200.0, 990.0, False), (20.0, 960.0, False)])
def test_an_arrival_waits_a_slot_for_the_gpus_of_a_job_ending_in_it(ending_s, submit, waits):
    """No GPU free; one running job ends within the 30 s slot: a 1-GPU arrival waits for its GPUs
    and nothing restarts. When it ends later, or the arrival has already waited a slot (the job
    overran its prediction), the arrival shrinks a running job as pollux does."""
    big = running("big", 4, [(0, 4)], power(20000.0))
    ending = running("ending", 4, [(1, 4)], power(2.0 * ending_s))  # ending_s on its 4 GPUs
    tiny = waiting("tiny", {1: 60.0}, submit=submit)
    res = make_policy("hesrpt").decide(state([tiny], [big, ending], free=(0, 0), now=1000.0))
    if waits:
        assert not res.preempt and not res.starts
    else:
        assert len(res.preempt) == 1 and "tiny" in {d.job_id for d in res.starts}
    ctl = make_policy("pollux").decide(state([tiny], [big, ending], free=(0, 0), now=1000.0))
    assert "tiny" in {d.job_id for d in ctl.starts}  # pollux's admission takes GPUs at once either way
