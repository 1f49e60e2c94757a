"""Lyapunov's compiled steps (`lyasched.policy.lyakernel`) decide exactly as its numpy steps: both
policies decide runs of random slots whose jobs tie (copies of one job, submitted together) and
whose rows hold inf (scores -inf), every answer compared to the bit; and the kernels give the same
answers compiled and interpreted (``NUMBA_DISABLE_JIT=1``, in a child process)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lyasched.policy import lyakernel
from lyasched.policy import lyapunov as lya
from lyasched.policy.lyapunov import LyapunovPolicy
from lyasched.policy.state import RunningJob, SlotState, WaitingJob
from lyasched.policy.tenants import TenantBook

WIDTH, GPN, NODES = 16, 8, 6


class NumpySteps(LyapunovPolicy):
    compiled = False


def _job(rng: np.random.Generator, i: int, users: int, submit: float) -> WaitingJob:
    one = np.full(WIDTH, np.inf)
    multi = np.full(WIDTH, np.inf)
    base = float(rng.choice([600.0, 3600.0, rng.uniform(100.0, 50_000.0)]))  # equal runs: ties
    for g in rng.choice(np.arange(1, WIDTH + 1), size=int(rng.integers(1, 6)), replace=False):
        t = base / g ** float(rng.choice([0.5, 1.0, rng.uniform(0.2, 1.0)]))
        if g <= GPN:
            one[g - 1] = t
        multi[g - 1] = t * float(rng.choice([1.0, 1.2]))
    if rng.random() < 0.5:
        one[0] = base
    return WaitingJob(job_id=str(i), submit_time=submit, work=base, run_one_node=one, run_multi_node=multi,
                      requested_gpus=int(rng.choice([1, 1, 2, 4, 8, int(rng.integers(1, WIDTH + 1))])),
                      user=f"t{rng.integers(users)}")


def _key(res) -> list:
    starts = [(d.job_id, d.gpus, [list(p) for p in d.placement], d.score.hex(), d.reason) for d in res.starts]
    info = sorted((k, float(v).hex() if isinstance(v, float) else repr(v)) for k, v in (res.info or {}).items())
    return [starts, res.q.hex(), res.z.hex(), info]


def decisions(seed: int, tenants: bool, cls: type = LyapunovPolicy, slots: int = 50) -> list:
    """One policy's answers over a run of random slots (jobs leave and arrive, so caches are reused)."""
    rng = np.random.default_rng(seed)
    pol = cls()
    users = int(rng.integers(2, 5))
    waiting: list[WaitingJob] = []
    nxt, now, out = 0, 1000.0, []
    for _ in range(slots):
        for _ in range(int(rng.poisson(3.0 if waiting else 20.0))):
            job = _job(rng, nxt, users, now - float(rng.choice([0.0, 600.0])))
            copies = int(rng.choice([1, 1, 2, 3]))  # the same job several times: every score ties
            for c in range(copies):
                waiting.append(WaitingJob(**{**job.__dict__, "job_id": f"{nxt}.{c}"}) if c else job)
            nxt += 1
        if not waiting:
            continue
        free = [0] * NODES
        for _ in range(int(rng.choice([1, 1, 2, 3, 5, 12, 40]))):
            free[int(rng.integers(NODES))] += 1
        free = [min(f, GPN) for f in free]
        running = (RunningJob("r", NODES * GPN - sum(free), ((0, 1),), 0.0, math.inf),)
        book = None
        if tenants:
            names = [f"t{k}" for k in range(users)]
            book = TenantBook(shares={}, received={u: float(rng.uniform(0, 1e6)) for u in names},
                              entitled={u: float(rng.uniform(0, 1e6)) for u in names},
                              held={u: float(rng.integers(0, 8)) for u in names},
                              rate={u: float(rng.uniform(0, 8)) for u in names})
        state = SlotState(now=now, slot_len=60.0, free=tuple(free), gpus_per_node=GPN, waiting=tuple(waiting),
                          running=running, tenants=book)
        res = pol.decide(state)
        out.append(_key(res))
        gone = {d.job_id for d in res.starts}
        waiting = [w for w in waiting if w.job_id not in gone]
        now += 60.0
    return out


@pytest.mark.parametrize("tenants", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_compiled_steps_decide_as_numpy_steps(seed: int, tenants: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    used = {"scores": 0, "choice": 0, "fill": 0}

    def count(name: str, f):
        def g(*a):
            used[name] += 1
            return f(*a)
        return g

    monkeypatch.setattr(lya, "slot_scores", count("scores", lyakernel.slot_scores))
    monkeypatch.setattr(lya, "slot_choice", count("choice", lyakernel.slot_choice))
    monkeypatch.setattr(lya, "fill_order", count("fill", lyakernel.fill_order))
    got = decisions(seed, tenants)
    assert used["scores"] and used["choice"] and used["fill"]  # the compiled steps ran
    used_before = dict(used)
    assert got == decisions(seed, tenants, NumpySteps)
    assert used == used_before  # ... and the reference did not run them


def test_slot_choice_on_tables_with_ties_and_inf() -> None:
    """`slot_choice` on random score tables (ties, -inf) against decide's numpy steps and `_useful`."""
    rng = np.random.default_rng(7)
    ambiguous = 0
    for _ in range(300):
        n, k = int(rng.integers(1, 30)), int(rng.integers(1, 9))
        vals = np.array([-np.inf, -1.0, 0.0, 1.0, 2.0, 2.0, 5.0])
        s_one = rng.choice(vals, size=(n, k)) if rng.random() < 0.5 else rng.normal(size=(n, k))
        s_multi = rng.choice(vals, size=(n, k))
        max_one = int(rng.integers(0, k + 1))
        spread = rng.random(k) < 0.5
        no_multi = bool(rng.random() < 0.3)
        if no_multi:
            s_multi[:] = -np.inf
        capacity = int(rng.integers(1, 12))
        a1, a2 = s_one.copy(), s_multi.copy()
        best, cand, useful, exact = lyakernel.slot_choice(a1, a2, max_one, spread, no_multi, capacity)
        b1, b2 = s_one.copy(), s_multi.copy()
        b1[:, np.arange(1, k + 1) > max_one] = -np.inf
        if not no_multi:
            b2[:, ~spread] = -np.inf
        ref_best = np.maximum(b1, b2)
        ref_cand = np.flatnonzero(ref_best.max(axis=1) > 0)
        assert np.array_equal(a1, b1) and np.array_equal(a2, b2) and np.array_equal(best, ref_best)
        assert np.array_equal(cand, ref_cand)
        if exact:
            assert np.array_equal(useful, lya._useful(ref_best, ref_cand, capacity))
        else:
            ambiguous += 1
    assert 0 < ambiguous < 300  # both outcomes met


def test_kernels_interpreted_as_compiled() -> None:
    """The same runs with ``NUMBA_DISABLE_JIT=1`` (the kernels as plain Python) and without, each in a
    child process with one hash seed (the tenants' set order, and so a float sum, follows it)."""
    here = Path(__file__).resolve().parent
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_lyakernel as t; "
            "print(json.dumps([t.decisions(s, ten, slots=25) for s in (0, 1) for ten in (False, True)]))")
    runs = []
    for off in ("1", "0"):
        env = {**os.environ, "NUMBA_DISABLE_JIT": off, "PYTHONHASHSEED": "0"}
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(here)], env=env, capture_output=True,
                             text=True, check=True)
        runs.append(json.loads(out.stdout))
    assert runs[0] == runs[1]
