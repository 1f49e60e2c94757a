#!/usr/bin/env python3
"""The per-call floor of Lyapunov's ``decide`` on the whole Philly trace, in the shipped structure and
in one that keeps the waiting jobs as arrays across calls (issue 44's 0.5x target; a study, not a change).

    python benchmarks/experiments/decide_floor.py capture [--every 30] [--out /tmp/floor9/states.pkl]
    python benchmarks/experiments/decide_floor.py profile  [--states ...] [--json]
    python benchmarks/experiments/decide_floor.py compare  [--states ...] [--rounds 3] [--json]
    python benchmarks/experiments/decide_floor.py inreplay [--json]
    python benchmarks/experiments/decide_floor.py all --json     # the four in turn

With numba importable (a throwaway venv's numba and llvmlite on PYTHONPATH after the worktree; never
in the project), `compare` and `inreplay` also run `ArrayDecider` with its scoring compiled.

``capture``: the whole-trace replay (the trace's tenants, as `replay` runs it) with the policy's ``decide``
wrapped: CPU seconds of every call, and every ``--every``-th call's `SlotState` (its arrival arrays
dropped: lyapunov reads none) with the starts made, pickled in one dump (so the states share their
`WaitingJob` objects, as in the replay). ``profile``: per captured call, cProfile's Python calls and the
numpy calls (every ``np.*`` attribute called from lyapunov, rowcache and state, counted through a proxy),
and the CPU of a bare numpy ufunc call on arrays of these sizes. ``inreplay``: the whole-trace replay
with every call decided by the shipped ``decide`` and the prototypes, alternating, CPU per call and
agreement on every call. ``compare``: the shipped ``decide`` and
`ArrayDecider` (below) on every captured state, alternating, CPU per call, and whether they start the
same jobs on the same GPUs and nodes.

`ArrayDecider` is the different structure: the waiting jobs' quantities kept as columns across calls
(the shape `RowCache.pack` already has, but held in waiting order and updated by arrivals and starts,
not found again from a tuple of `WaitingJob` each call), with only the per-call scalars recomputed.
It covers the common path only: untyped slots, plain (not adaptive) jobs, the shipped extension
points; it does not compute ``wake_at`` (a call that starts nothing asks it in the shipped policy).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import statistics
import sys
import time
from dataclasses import replace

import numpy as np
import numpy as _numpy  # `_Counting` reads the real module while ``np`` here may be one

HERE = os.path.dirname(os.path.abspath(__file__))
PHILLY = os.path.join(HERE, "..", "..", "..", "shared", "data", "traces", "philly.csv")
STATES = "/tmp/floor9/states.pkl"


# ---------------------------------------------------------------------------------------------- capture

def capture(trace: str, every: int, out: str) -> dict:
    """The whole-trace replay with ``decide`` wrapped; every ``every``-th call's state pickled to ``out``."""
    from lyasched.policy import make_policy
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import load_workload

    w = load_workload(trace, load=0.8)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    pol = make_policy("lyapunov", seed=0)
    inner = pol.decide
    cpu: list[float] = []
    kept: list[tuple] = []

    def decide(state):
        c0 = time.process_time()
        res = inner(state)
        dt = time.process_time() - c0
        if len(cpu) % every == 0:
            starts = tuple((d.job_id, d.gpus, d.placement) for d in res.starts)
            kept.append((len(cpu), replace(state, arrivals_t=None, arrivals_cum_gpu_s=None), starts, dt,
                         res.info.get("solver")))
        cpu.append(dt)
        return res

    pol.decide = decide  # type: ignore[method-assign]
    c0 = time.process_time()
    sim.run(pol, name="lyapunov")
    replay_cpu = time.process_time() - c0
    with open(out, "wb") as f:
        pickle.dump({"states": kept, "cpu": cpu}, f, protocol=pickle.HIGHEST_PROTOCOL)
    a = np.array(cpu)
    sampled = np.array([k[3] for k in kept])
    return {"calls": len(cpu), "replay_cpu_s": round(replay_cpu, 2), "decide_cpu_s": round(float(a.sum()), 2),
            "decide_ms_mean": round(1e3 * float(a.mean()), 4), "decide_ms_median": round(1e3 * float(np.median(a)), 4),
            "sampled": len(kept), "sampled_ms_mean": round(1e3 * float(sampled.mean()), 4), "out": out}


def in_replay(trace: str) -> dict:
    """The whole-trace replay, every call decided by the shipped ``decide`` (whose answer the replay
    carries out) and by `ArrayDecider` (numpy, and with numba when installed), alternating which runs
    first; each timed in CPU seconds, each prototype's starts compared with the shipped ones. The
    prototype's columns are loaded from the state before it is timed (untimed: the upkeep a holder
    of the columns would do at arrivals and starts instead is measured by `compare`)."""
    from lyasched.policy import make_policy
    from lyasched.sim import Simulation
    from lyasched.sim.workloads import load_workload

    w = load_workload(trace, load=0.8)
    sim = Simulation(w.jobs, w.cluster, seed=0)
    pol = make_policy("lyapunov", seed=0)
    inner = pol.decide
    protos = {"proto": ArrayDecider()}
    kernel = _numba_kernel()
    if kernel is not None:
        protos["proto_numba"] = ArrayDecider()
        protos["proto_numba"].kernel = kernel
    t = {"shipped": 0.0, **{k: 0.0 for k in protos}}
    agree = {k: 0 for k in protos}
    differ: dict[str, list] = {k: [] for k in protos}
    calls = [0]

    def decide(state):
        i = calls[0]
        calls[0] += 1
        plain = bool(state.waiting) and not state.node_types
        got = {}
        if plain:
            for p in protos.values():
                p.load(state.waiting)
        args = (state.now, state.slot_len, state.free, state.gpus_per_node, _total_gpus(state), state.tenants)
        order = ["shipped", *protos] if i % 2 == 0 else [*protos, "shipped"]
        for k in order:
            if k == "shipped":
                c0 = time.process_time()
                res = inner(state)
                t[k] += time.process_time() - c0
            elif plain:
                p = protos[k]
                c0 = time.process_time()
                got[k] = p.decide(*args)
                t[k] += time.process_time() - c0
        starts = tuple((d.job_id, d.gpus, d.placement) for d in res.starts)
        for k, v in got.items():
            if tuple((protos[k].ids[j], gg, pl) for j, gg, pl in v) == starts:
                agree[k] += 1
            else:
                differ[k].append(i)
        return res

    pol.decide = decide  # type: ignore[method-assign]
    sim.run(pol, name="lyapunov")
    n = calls[0]
    return {"calls": n, "cpu_s": {k: round(v, 2) for k, v in t.items()},
            "ms_per_call": {k: round(1e3 * v / n, 4) for k, v in t.items()},
            "agree": agree, "differ": {k: len(v) for k, v in differ.items()},
            "differ_first": {k: v[:5] for k, v in differ.items()}}


def load_states(path: str) -> tuple[list[tuple], list[float]]:
    with open(path, "rb") as f:
        d = pickle.load(f)
    return d["states"], d["cpu"]


# ---------------------------------------------------------------------------------------------- profile

class _Counting:
    """``np`` for a module, counting each call of a numpy function or ufunc by name (types, constants
    and errstate pass through); operators and indexing on arrays are not calls and not counted."""

    def __init__(self, counts: dict) -> None:
        self._counts = counts

    def __getattr__(self, name: str):
        a = getattr(_numpy, name)
        if isinstance(a, type) or not callable(a) or name == "errstate":
            return a
        return _Counted(a, name, self._counts)


class _Counted:
    """A numpy callable counted per call; a ufunc's methods (``np.minimum.accumulate``) too."""

    def __init__(self, a, name: str, counts: dict) -> None:
        self._a, self._name, self._counts = a, name, counts

    def __call__(self, *args, **kw):
        self._counts[self._name] = self._counts.get(self._name, 0) + 1
        return self._a(*args, **kw)

    def __getattr__(self, attr: str):
        return _Counted(getattr(self._a, attr), f"{self._name}.{attr}", self._counts)


def profile(path: str) -> dict:
    """Per captured call: Python function calls, numpy method calls (cProfile), numpy function and ufunc
    calls (`_Counting`), and the CPU of bare numpy steps on arrays of the calls' sizes."""
    import cProfile
    import pstats

    import lyasched.policy.lyapunov as ly
    import lyasched.policy.rowcache as rc
    import lyasched.policy.state as st

    states, _ = load_states(path)
    pol = ly.LyapunovPolicy()
    pr = cProfile.Profile()
    pr.enable()
    for _, s, *_ in states:
        pol.decide(s)
    pr.disable()
    m = len(states)
    ps = pstats.Stats(pr)
    py_calls = c_calls = np_methods = 0
    for (fn, _, name), (cc, nc, *_rest) in ps.stats.items():  # type: ignore[attr-defined]
        if fn == "~":
            c_calls += nc
            if "numpy" in name:
                np_methods += nc
        else:
            py_calls += nc
    counts: dict = {}
    saved = ly.np, rc.np, st.np
    ly.np = rc.np = st.np = _Counting(counts)  # type: ignore[assignment]
    try:
        pol = ly.LyapunovPolicy()
        for _, s, *_ in states:
            pol.decide(s)
    finally:
        ly.np, rc.np, st.np = saved
    np_funcs = sum(counts.values())
    top = sorted(counts.items(), key=lambda kv: -kv[1])[:12]
    # the same counts for `ArrayDecider.decide` (numpy; its columns loaded outside the count)
    proto, inputs = ArrayDecider(), []
    for _, s, *_ in states:
        proto.load(s.waiting)
        inputs.append(((proto.P, proto.codes, proto.n, proto.n_masked, proto.fb_plain, proto.fb_kept),
                       (s.now, s.slot_len, s.free, s.gpus_per_node, _total_gpus(s), s.tenants)))
    pr = cProfile.Profile()
    pr.enable()
    for arrs, args in inputs:
        proto.P, proto.codes, proto.n, proto.n_masked, proto.fb_plain, proto.fb_kept = arrs
        proto.decide(*args)
    pr.disable()
    p_py = p_np_methods = 0
    for (fn, _, name), (cc, nc, *_rest) in pstats.Stats(pr).stats.items():  # type: ignore[attr-defined]
        if fn != "~":
            p_py += nc
        elif "numpy" in name:
            p_np_methods += nc
    p_counts: dict = {}
    here = sys.modules[__name__]
    saved2 = here.np
    ly.np = st.np = here.np = _Counting(p_counts)  # type: ignore[assignment]
    try:
        for arrs, args in inputs:
            proto.P, proto.codes, proto.n, proto.n_masked, proto.fb_plain, proto.fb_kept = arrs
            proto.decide(*args)
    finally:
        ly.np, st.np, here.np = saved[0], saved[2], saved2
    n = int(np.median([len(s.waiting) for _, s, *_ in states]))
    return {"states": m, "median_waiting": n,
            "python_calls_per_call": round(py_calls / m, 1), "c_calls_per_call": round(c_calls / m, 1),
            "numpy_methods_per_call": round(np_methods / m, 1), "numpy_funcs_per_call": round(np_funcs / m, 1),
            "top_numpy_funcs_per_call": {k: round(v / m, 1) for k, v in top},
            "proto_python_calls_per_call": round(p_py / m, 1), "proto_numpy_methods_per_call": round(p_np_methods / m, 1),
            "proto_numpy_funcs_per_call": round(sum(p_counts.values()) / m, 1), "bare_us": bare_costs(n)}


def _per_call_us(f, reps: int = 20000) -> float:
    c0 = time.process_time()
    for _ in range(reps):
        f()
    return round(1e6 * (time.process_time() - c0) / reps, 3)


def bare_costs(n: int, c: int = 2) -> dict:
    """CPU microseconds of single numpy steps on arrays of a median call's sizes (n jobs, c counts),
    and of a Python function call, for the floor of a structure that takes so many of them."""
    a, b, o = np.random.rand(n), np.random.rand(n), np.empty(n)
    A, B = np.random.rand(n, 2 * c), np.random.rand(n, 2 * c)
    idx = np.arange(0, n, 2)

    def nop(x):
        return x
    return {"ufunc_out_1d": _per_call_us(lambda: np.subtract(a, b, out=o)),
            "ufunc_new_1d": _per_call_us(lambda: np.subtract(a, b)),
            "ufunc_2d": _per_call_us(lambda: np.subtract(A, B, out=A)),
            "operator_1d": _per_call_us(lambda: a - b),
            "sum_1d": _per_call_us(lambda: a.sum()),
            "fancy_index": _per_call_us(lambda: a[idx]),
            "flatnonzero": _per_call_us(lambda: np.flatnonzero(a > 0.5)),
            "python_call": _per_call_us(lambda: nop(a)),
            "lambda_loop_overhead": _per_call_us(lambda: None)}


# ---------------------------------------------------------------------------------------------- prototype

_PACK = 7  # RowCache.pack's per-job quantities before its four per-count blocks


class ArrayDecider:
    """The waiting jobs as columns kept across calls, in waiting order: `RowCache.pack`'s quantities
    (work, submit, best, request, run at the request, whether the no-sliver rule masks a count, the
    best once masked; per count c the least GPU-time over the first c and its count; the masked rows,
    one node then several), the tenant code, each job's finite best both ways and the number of
    waiting jobs the rule masks. A replay or the service would append a column at an arrival and drop
    one at a start (`arrive`, `start`); `load` fills them from a state's waiting tuple (the study's
    way to reach a captured state). `decide` is `LyapunovPolicy.decide`'s common path on them: the same
    numpy steps on the same operands, so the same bits, in a (counts, jobs) layout that needs no gather."""

    def __init__(self, V: float = 5.0, stretch: float = 3.0, tenant_weight: float = 10.0, slack: float = 0.05,
                 exact_limit: int = 50_000) -> None:
        from lyasched.policy.rowcache import RowCache
        self.V, self.stretch, self.tenant_weight, self.slack, self.exact_limit = V, stretch, tenant_weight, slack, exact_limit
        self.rc = RowCache()  # only to compute a new job's column (what `arrive` would do)
        self.n, self.w = 0, 0
        self.ids: list[str] = []
        self.kernel = None  # `_numba_kernel()` for the compiled scoring
        self.marks: list[float] | None = None  # perf_counter at each section's end (`sections`), when a list


    def load(self, jobs: tuple) -> None:
        rc = self.rc
        w = len(jobs[0].run_one_node)
        rc.cut(jobs, w, self.stretch)
        sel = rc.sel
        self.P = np.ascontiguousarray(rc.pack[:, sel])
        self.codes = rc.tenant[sel].copy()
        self.names = rc.tenant_names
        self.n, self.w = len(jobs), w
        self.ids = [j.job_id for j in jobs]
        self.gf = np.arange(1.0, w + 1.0)
        self.n_masked = int(self.P[5].sum())
        fb, fk = self.P[2], self.P[6]
        self.fb_plain = np.where(np.isfinite(fb), fb, 0.0)
        self.fb_kept = np.where(np.isfinite(fk), fk, 0.0)
        self._both: dict[int, np.ndarray] = {}

    def decide(self, now: float, slot: float, free_t: tuple, gpn: int, total_gpus: int, book) -> list[tuple[int, int, tuple]]:
        from lyasched.policy.lyapunov import _SMALL_DP, _knapsack, _knapsack_small, _live, _shortest_first, _useful
        from lyasched.policy.state import FreeGpus

        n, w, P = self.n, self.w, self.P
        marks = self.marks
        if marks is not None:
            marks.append(time.perf_counter())
        free = FreeGpus(free_t, gpn)
        F = free.total
        if marks is not None:
            marks.append(time.perf_counter())
        if n == 0 or F == 0:
            return []
        c = min(F, w)
        work = P[0]
        wait = now - P[1]
        np.maximum(wait, 0.0, out=wait)
        q = float(work.sum())
        z = float(wait.sum())
        theta = q + z
        fb = self.fb_kept if self.n_masked else self.fb_plain
        gain = np.minimum(work, q / n)
        gain *= q
        zt = wait + slot
        zt *= z
        gain += zt
        g = self.gf[:c]
        blocked = np.maximum(0.0, (n - 1) - (F - g))
        gpu_time, need = P[_PACK + c - 1], P[_PACK + w + c - 1]
        tau = 0.0
        if n > 1 and F == 1:
            least = float(gpu_time.min())
            if math.isfinite(least):
                tau = least
        elif n > 1:
            ok = np.isfinite(gpu_time)
            if ok.all():
                tau = _shortest_first(gpu_time, need, F)
            elif ok.any():
                tau = _shortest_first(gpu_time[ok], need[ok], F)
        vtheta = self.V * theta
        if marks is not None:
            marks.append(time.perf_counter())
        spread = free.spread_mask(F)
        no_multi = not spread[:c].any()
        ct = owed = None
        if book is not None and self.tenant_weight > 0:
            codes = self.codes[:n]
            present = np.flatnonzero(np.bincount(codes)).tolist()
            if len(present) >= 2:
                names = [self.names[k] for k in present]
                pad = total_gpus * slot
                y = [book.shortfall(k, self.slack, pad) for k in names]
                floor = min(y)
                if max(y) - floor > 0:
                    ent = book.entitled
                    ebar = math.fsum(ent.get(k, 0.0) for k in names) / len(names)
                    scale = self.tenant_weight * ebar / (total_gpus * total_gpus)
                    per_c = np.zeros(len(self.names))
                    per_o = np.zeros(len(self.names))
                    per_c[present] = [vtheta * (scale * (v - floor)) for v in y]
                    per_o[present] = [v * ent.get(k, 0.0) for k, v in zip(names, y)]
                    ct, owed = per_c[codes], per_o[codes]
        if marks is not None:
            marks.append(time.perf_counter())
        live = None
        if ct is None and vtheta >= 0 and n > 1:
            live = _live(gain, gpu_time, tau, float(blocked[0]), total_gpus, vtheta)
        base = _PACK + 2 * w
        one, multi = P[base:base + c], P[base + w:base + w + c]

        def score(run: np.ndarray, gc: np.ndarray, wc: np.ndarray, fb: np.ndarray, gn: np.ndarray) -> np.ndarray:
            with np.errstate(invalid="ignore"):
                imposed = gc * run
                imposed -= tau
                np.maximum(imposed, 0.0, out=imposed)
                imposed *= wc
                imposed /= total_gpus
                pen = run - fb
                pen += imposed
                pen *= vtheta
                s = np.subtract(gn, pen, out=pen)
                s[~np.isfinite(run)] = -np.inf
            return s

        gc, wc = g[:, None], blocked[:, None]
        if self.kernel is not None:  # the scores, masks and best in one compiled pass (`_numba_kernel`)
            s_one, s_multi, best = np.empty((c, n)), np.empty((c, n)), np.empty((c, n))
            top = np.empty(n)
            self.kernel(one, multi, fb, gain, g, blocked, tau, float(total_gpus), vtheta, no_multi, ct is not None,
                        gain if ct is None else ct, gain if owed is None else owed, free.max_on_one_node(), spread,
                        gpu_time, ct is None and vtheta >= 0 and n > 1, s_one, s_multi, best, top)
            cand = np.flatnonzero(top > 0)
            live = None
            if marks is not None:
                marks.append(time.perf_counter())
            return self._choose(s_one, s_multi, best, cand, free, F, c, n, gpn, one, multi, live)
        if live is not None:
            s_one = score(one[:, live], gc, wc, fb[live], gain[live])
            s_multi = np.full(s_one.shape, -np.inf) if no_multi else score(multi[:, live], gc, wc, fb[live], gain[live])
        elif no_multi:
            s_one = score(one, gc, wc, fb, gain)
            s_multi = np.full(s_one.shape, -np.inf)
        else:
            rows = self._both.get(c)
            if rows is None:
                rows = self._both[c] = np.r_[base:base + c, base + w:base + w + c]
                self._g2 = {}
            both = P[rows]
            g2 = np.concatenate((g, g))[:, None]
            s_both = score(both, g2, np.concatenate((blocked, blocked))[:, None], fb, gain)
            s_one, s_multi = s_both[:c], s_both[c:]
        if ct is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                cap = np.where(np.isfinite(one), owed / one, 0.0)
                g_one = np.minimum(gc, cap, out=cap)
                s_one += ct * g_one
                if not no_multi:
                    cap = np.where(np.isfinite(multi), owed / multi, 0.0)
                    s_multi += ct * np.minimum(gc, cap, out=cap)
        m1 = free.max_on_one_node()
        if m1 < c:
            s_one[m1:] = -np.inf
        if not no_multi:
            s_multi[~spread[:c]] = -np.inf
        best = s_one if no_multi else np.maximum(s_one, s_multi)
        cand = np.flatnonzero((best[0] if c == 1 else best.max(axis=0)) > 0)
        if marks is not None:
            marks.append(time.perf_counter())
        return self._choose(s_one, s_multi, best, cand, free, F, c, n, gpn, one, multi, live)

    def _choose(self, s_one, s_multi, best, cand, free, F, c, n, gpn, one, multi, live) -> list:
        """The knapsack (or greedy) over the scores, then the fill: `LyapunovPolicy.decide`'s steps."""
        from lyasched.policy.lyapunov import _SMALL_DP, _knapsack, _knapsack_small, _useful
        bt, s1, s2 = best.T, s_one.T, s_multi.T
        started: list[tuple[int, int, tuple]] = []
        chosen = None
        cand_dp = _useful(bt, cand, F)
        if cand_dp.size and cand_dp.size * F * c <= self.exact_limit:
            cand = cand_dp
            if F == 1:
                chosen = [(0, 1)]
            elif cand.size * (F + 1) * min(c, F) <= _SMALL_DP:
                chosen = _knapsack_small(bt[cand], F)
            else:
                chosen = _knapsack(bt[cand], F)
            if chosen is not None:
                chosen = [(int(cand[i]), gg) for i, gg in chosen]
        greedy = chosen is None
        if chosen is not None:
            trial = free.copy()
            placed: list | None = []
            for j, gg in sorted(chosen, key=lambda t: (-t[1], t[0])):
                v1 = s1[j, gg - 1]
                pl = trial.take(gg, True) if math.isfinite(v1) and v1 > 0 and trial.fits(gg, True) else None
                if pl is None and s2[j, gg - 1] > 0:
                    pl = trial.take(gg, False)
                if pl is None:
                    placed = None
                    break
                placed.append((j, gg, pl))
            if placed is not None:
                free = trial
                started = [(j if live is None else int(live[j]), gg, pl) for j, gg, pl in placed]
            else:
                greedy = True
        if greedy:
            started = self._greedy(s1, s2, cand, free, bt, live, c)
        if self.marks is not None:
            self.marks.append(time.perf_counter())
        if free.total > 0 and len(started) < n:
            started += self._fill(free, started, one, multi, c, gpn)
        if self.marks is not None:
            self.marks.append(time.perf_counter())
        return started

    def _greedy(self, s1, s2, cand, free, bt, live, k) -> list:
        """`LyapunovPolicy._greedy` on the (jobs, counts) views."""
        g = self.gf[:k]
        prio = (bt[cand] / g[None, :]).max(axis=1)
        order = cand[np.lexsort((cand, -prio))]
        out: list = []
        for lo in range(0, order.size, 256):
            if free.total == 0:
                break
            block = order[lo: lo + 256]
            rows = np.concatenate([s1[block], s2[block]], axis=1)
            ranks = np.argsort(-rows, axis=1, kind="stable")
            for j, row, rank in zip(block, rows, ranks):
                if free.total == 0:
                    break
                for idx in rank:
                    if not row[idx] > 0:
                        break
                    one_node = idx < k
                    gg = int(idx % k) + 1
                    if not free.fits(gg, one_node):
                        continue
                    pl = free.take(gg, one_node)
                    if pl is not None:
                        out.append((int(j if live is None else live[j]), gg, pl))
                        break
        return out

    def _fill(self, free, started, one, multi, k, gpn) -> list:
        """`LyapunovPolicy._fill` on the columns: each waiting job at its request, least GPU-time first."""
        P = self.P
        req, run_req = P[3], P[4]
        has = np.isfinite(run_req) & (req <= min(k, free.total))
        has[[j for j, _, _ in started]] = False
        cand = np.flatnonzero(has)
        key = req[cand] * run_req[cand]
        out: list = []

        def attempt(j: int) -> None:
            g = int(req[j])
            if free.total < g:
                return
            pl = None
            if g <= gpn and math.isfinite(one[g - 1, j]) and free.fits(g, True):
                pl = free.take(g, True)
            elif g <= k and math.isfinite(multi[g - 1, j]) and free.fits(g, False):
                pl = free.take(g, False)
            if pl is not None:
                out.append((j, g, pl))

        if free.total == 1 and cand.size:
            attempt(int(cand[int(np.argmin(key))]))
            if free.total == 0:
                return out
        for j in cand[np.lexsort((cand, key))].tolist():
            attempt(j)
            if free.total == 0:
                break
        return out

    # the per-event upkeep a replay or the service would do instead of `load`
    def arrive(self, col: np.ndarray, code: int) -> None:
        """One job's column appended (grown by doubling in a real holder; here, room is assumed)."""
        n = self.n
        self.P[:, n] = col
        self.codes[n] = code
        self.n = n + 1

    def start(self, j: int) -> None:
        """The job at position j removed, the order of the others kept."""
        n = self.n
        self.P[:, j:n - 1] = self.P[:, j + 1:n]
        self.codes[j:n - 1] = self.codes[j + 1:n]
        self.n = n - 1


def _numba_kernel():
    """The scoring of `ArrayDecider.decide` (scores, their masks, best per count, best per job) as one
    numba loop, each element's operations those of the numpy steps in their order (np.maximum's and
    np.minimum's NaN and signed-zero rules written out); a job whose `_live` bound is <= 0 is -inf
    throughout (it can never start: the choice reads only its sign). None without numba."""
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(cache=False, nogil=True)
    def kernel(one, multi, fb, gain, g, blocked, tau, G, vtheta, no_multi, has_ct, ct, owed, m1, spread, gpu_time,
               prune, s_one, s_multi, best, top):
        c, n = one.shape
        ninf = -np.inf
        w0 = blocked[0]
        for j in range(n):
            if prune:
                lb = gpu_time[j] - tau
                if not (lb >= 0.0 or lb != lb):
                    lb = 0.0
                lb = lb * w0
                lb = lb / G
                lb = lb * vtheta
                if gain[j] - lb <= 0.0:
                    for i in range(c):
                        s_one[i, j] = ninf
                        s_multi[i, j] = ninf
                        best[i, j] = ninf
                    top[j] = ninf
                    continue
            t = ninf
            for i in range(c):
                gi, wi = g[i], blocked[i]
                for side in range(2):
                    run = one[i, j] if side == 0 else multi[i, j]
                    if side == 1 and (no_multi or not spread[i]):
                        v = ninf
                    elif not (run - run == 0.0):  # not finite
                        v = ninf
                    elif side == 0 and i >= m1:
                        v = ninf
                    else:
                        imp = gi * run
                        imp = imp - tau
                        if not (imp >= 0.0 or imp != imp):
                            imp = 0.0
                        imp = imp * wi
                        imp = imp / G
                        pen = run - fb[j]
                        pen = pen + imp
                        pen = pen * vtheta
                        v = gain[j] - pen
                        if has_ct:
                            cap = owed[j] / run
                            gx = gi if (gi <= cap or gi != gi) else cap
                            v = v + ct[j] * gx
                    if side == 0:
                        s_one[i, j] = v
                    else:
                        s_multi[i, j] = v
                b = s_one[i, j]
                m = s_multi[i, j]
                if not (b >= m or b != b):
                    b = m
                best[i, j] = b
                if not (t >= b or t != t):
                    t = b
            top[j] = t
    return kernel


def _total_gpus(s) -> int:
    return max(1, sum(s.free) + sum(r.gpus for r in s.running))


def compare(path: str, rounds: int) -> dict:
    """Shipped ``decide`` and `ArrayDecider.decide` on every captured state, alternating per state, CPU
    per call; the starts compared (job, GPUs, placement, in order)."""
    from lyasched.policy.lyapunov import LyapunovPolicy

    states, cpu = load_states(path)
    plain = [s for _, s, *_ in states if s.waiting and not s.node_types and not any(j.adaptive for j in s.waiting)]
    proto = ArrayDecider()
    agree, differ, examples = 0, 0, []
    inputs = []
    for idx, s, starts, _, _ in states:
        if not s.waiting or s.node_types:
            continue
        proto.load(s.waiting)
        got = proto.decide(s.now, s.slot_len, s.free, s.gpus_per_node, _total_gpus(s), s.tenants)
        mine = tuple((proto.ids[j], gg, pl) for j, gg, pl in got)
        if mine == starts:
            agree += 1
        else:
            differ += 1
            if len(examples) < 5:
                examples.append({"call": idx, "shipped": repr(starts), "proto": repr(mine)})
        inputs.append((s, (proto.P, proto.codes, proto.n, proto.ids, proto.n_masked, proto.fb_plain, proto.fb_kept),
                       (s.now, s.slot_len, s.free, s.gpus_per_node, _total_gpus(s), s.tenants)))
    kernel = _numba_kernel()
    fast = ArrayDecider()
    fast.kernel = kernel
    agree_nb = differ_nb = 0
    if kernel is not None:
        for (s, arrs, args), (idx, _, starts, _, _) in zip(inputs, [t for t in states if t[1].waiting and not t[1].node_types]):
            fast.load(s.waiting)
            mine = tuple((fast.ids[j], gg, pl) for j, gg, pl in fast.decide(*args))
            if mine == starts:
                agree_nb += 1
            else:
                differ_nb += 1
                if len(examples) < 10:
                    examples.append({"call": idx, "numba": True, "shipped": repr(starts), "proto": repr(mine)})
        fast.names = proto.names  # the timing below hands it `proto`'s columns and tenant codes
    per: dict[str, list[float]] = {"shipped_seq": [], "shipped_again": [], "proto": []}
    if kernel is not None:
        per["proto_numba"] = []
    for r in range(rounds):
        pol = LyapunovPolicy()
        t = {k: 0.0 for k in per}
        for i, (s, arrs, args) in enumerate(inputs):
            proto.P, proto.codes, proto.n, proto.ids, proto.n_masked, proto.fb_plain, proto.fb_kept = arrs
            for which in (("shipped", "proto") if (i + r) % 2 == 0 else ("proto", "shipped")):
                if which == "shipped":
                    c0 = time.process_time()
                    pol.decide(s)
                    c1 = time.process_time()
                    pol.decide(s)  # again: the RowCache finds this very tuple (its best case)
                    c2 = time.process_time()
                    t["shipped_seq"] += c1 - c0
                    t["shipped_again"] += c2 - c1
                else:
                    c0 = time.process_time()
                    proto.decide(*args)
                    c1 = time.process_time()
                    t["proto"] += c1 - c0
                    if kernel is not None:
                        fast.P, fast.codes, fast.n, fast.ids, fast.n_masked, fast.fb_plain, fast.fb_kept = arrs
                        c1 = time.process_time()
                        fast.decide(*args)
                        t["proto_numba"] += time.process_time() - c1
        for k in per:
            per[k].append(1e3 * t[k] / len(inputs))
    # upkeep per event at the median waiting count: append one column, drop one
    n = int(np.median([len(s.waiting) for s in plain]))
    s0 = min(plain, key=lambda s: abs(len(s.waiting) - n))
    proto.load(s0.waiting)
    P = np.empty((proto.P.shape[0], proto.n + 1))
    P[:, :proto.n] = proto.P
    proto.P, proto.codes = P, np.concatenate((proto.codes, [0]))
    col = P[:, 0].copy()
    up = _per_call_us(lambda: (proto.arrive(col, 0), proto.start(proto.n // 2)), 20000)
    # a slimmer holder: only the per-job scalars moved in order (10 rows), the per-count blocks in a
    # pool of job-major rows that never move, gathered per call for the slot's c counts (one take)
    slim = ArrayDecider()
    slim.P, slim.codes, slim.n = np.random.rand(10, n + 1), np.zeros(n + 1, dtype=np.intp), n
    col10 = slim.P[:, 0].copy()
    up_slim = _per_call_us(lambda: (slim.arrive(col10, 0), slim.start(slim.n // 2)), 20000)
    w = proto.w
    pool = np.random.rand(4 * n, 4 * w)
    slots = np.random.choice(4 * n, n, replace=False)
    cols = np.r_[0:2, w:w + 2, 2 * w:2 * w + 2, 3 * w:3 * w + 2]  # c = 2: least, first, one, multi
    gather = _per_call_us(lambda: pool.take(slots[:, None] * (4 * w) + cols[None, :]), 20000)
    # where a prototype call goes: perf_counter marks per section (calls that reach the choice)
    sections = {}
    for name, p in (("proto", proto), ("proto_numba", fast)):
        if name == "proto_numba" and kernel is None:
            continue
        parts = np.zeros(6)
        m = 0
        for r in range(rounds):
            for s, arrs, args in inputs:
                p.P, p.codes, p.n, p.ids, p.n_masked, p.fb_plain, p.fb_kept = arrs
                p.marks = []
                p.decide(*args)
                if len(p.marks) == 7:
                    parts += np.diff(p.marks)
                    m += 1
        p.marks = None
        sections[name] = {k: round(1e6 * v / max(1, m), 1) for k, v in
                          zip(("free_gpus", "vectors_tau", "tenants", "scores", "choice", "fill"), parts)}
    # the wake-up rule's share of a call that starts nothing (the prototype leaves it out): the shipped
    # decide on those captured states, each asked twice (the second timed), with it and without
    idle = [s for s, _, _ in inputs if s.waiting and not any(st[2] for st in states if st[1] is s)]
    wake: dict[str, list[float]] = {"with": [], "without": []}
    for r in range(rounds):
        for which in (("with", "without") if r % 2 == 0 else ("without", "with")):
            pol = LyapunovPolicy()
            if which == "without":
                pol._wake_at = pol._wake_at_tenants = lambda *a, **k: 0.0  # type: ignore[method-assign]
            tt = 0.0
            for s in idle:
                pol.decide(s)
                c0 = time.process_time()
                pol.decide(s)
                tt += time.process_time() - c0
            wake[which].append(1e3 * tt / max(1, len(idle)))
    a = np.array(cpu)
    sampled = np.array([st[3] for st in states])
    med = {k: round(statistics.median(v), 4) for k, v in per.items()}
    return {"states": len(inputs), "agree": agree, "differ": differ, "differ_examples": examples,
            "numba": kernel is not None, "agree_numba": agree_nb, "differ_numba": differ_nb,
            "in_replay_ms_mean_all_calls": round(1e3 * float(a.mean()), 4),
            "in_replay_ms_mean_sampled": round(1e3 * float(sampled.mean()), 4),
            "in_replay_ms_median_sampled": round(1e3 * float(np.median(sampled)), 4),
            "captured_ms_per_call": med, "rounds": {k: [round(x, 4) for x in v] for k, v in per.items()},
            "sections_us": sections, "idle_states": len(idle), "idle_ms_per_call_with_wake": round(statistics.median(wake["with"]), 4),
            "idle_ms_per_call_without_wake": round(statistics.median(wake["without"]), 4),
            "upkeep_us_per_arrival_plus_start": up, "upkeep_us_slim": up_slim, "gather_us_slim_per_call": gather,
            "median_waiting": n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["capture", "profile", "compare", "inreplay", "all"])
    ap.add_argument("--trace", default=PHILLY)
    ap.add_argument("--every", type=int, default=30)
    ap.add_argument("--states", default=STATES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.states), exist_ok=True)
    out: dict = {"load_avg": os.getloadavg()}
    if a.what in ("capture", "all"):
        out["capture"] = capture(a.trace, a.every, a.states)
    if a.what in ("profile", "all"):
        out["profile"] = profile(a.states)
    if a.what in ("inreplay", "all"):
        out["in_replay"] = in_replay(a.trace)
    if a.what in ("compare", "all"):
        out["compare"] = compare(a.states, a.rounds)
    print(json.dumps(out, indent=1) if a.json else out)


if __name__ == "__main__":
    main()
