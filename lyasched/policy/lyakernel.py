"""Lyapunov's slot scores on `RowCache.cut`'s rows in one compiled pass (numba), not some forty
small numpy steps: at a few hundred waiting jobs and a few free GPUs a slot's arithmetic is
microseconds, and each numpy call's fixed cost is what a decision spends.

`slot_scores` is the one implementation of the rule it computes (`LyapunovPolicy._scores`' shipped
path: gain, the shortest-first reference ``tau``, the penalty, the tenant credit's GPUs): the
same IEEE operations in the same order as the numpy steps, element by element, so the same bits
(no fast-math; ``error_model="numpy"``: x/0 is inf or NaN, as numpy's). ``cache=True``: compiled
once per install. Under ``NUMBA_DISABLE_JIT=1`` the same code runs interpreted.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def _tau(gpu_time: np.ndarray, need: np.ndarray, free: int) -> float:
    """`lyapunov._shortest_first` over the rows whose GPU-time is finite (0.0 when none is):
    walking them by (GPU-time, position), the GPU-time of the one at which the needs reach
    ``free`` (the last one's when they never do)."""
    n = gpu_time.shape[0]
    m = 0
    for i in range(n):
        if math.isfinite(gpu_time[i]):
            m += 1
    if m == 0:
        return 0.0
    acc = 0.0
    if free <= 32:  # at most ``free`` steps (each need >= 1): pick the next smallest each time
        pt, pi = -math.inf, -1
        t = 0.0
        for _ in range(m):
            bt, bi = math.inf, -1
            for i in range(n):
                ti = gpu_time[i]
                if not math.isfinite(ti):
                    continue
                if (ti > pt or (ti == pt and i > pi)) and (bi < 0 or ti < bt):
                    bt, bi = ti, i
            pt, pi = bt, bi
            t = bt
            acc += need[bi]
            if acc >= free:
                return t
        return t
    idx = np.empty(m, dtype=np.intp)
    k = 0
    for i in range(n):
        if math.isfinite(gpu_time[i]):
            idx[k] = i
            k += 1
    order = idx[np.argsort(gpu_time[idx], kind="mergesort")]
    for p in range(m):
        acc += need[order[p]]
        if acc >= free:
            return gpu_time[order[p]]
    return gpu_time[order[m - 1]]


@njit(cache=True, error_model="numpy")
def slot_scores(both: np.ndarray, work: np.ndarray, wait: np.ndarray, best: np.ndarray, q: float, z: float,
                free_now: int, total_gpus: int, q_weight: float, slot_len: float, externality: float, vtheta: float,
                relative: bool, gpu_time: np.ndarray, need: np.ndarray, no_multi: bool, credit_t: np.ndarray,
                owed: np.ndarray, with_credit: bool, check_live: bool
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """(scores one node | several side by side, gain, credit, tenant GPUs one node | several,
    pruned): `LyapunovPolicy._scores` on the cut rows ``both`` (one node, then several).
    ``pruned`` (with ``check_live``): fewer than 90% of the rows may score > 0 (`lyapunov._live`),
    and nothing else was computed: the caller takes the general path."""
    n = work.shape[0]
    c = both.shape[1] // 2
    mean = q / n
    qq = q_weight * q
    credit = np.empty(n)
    gain = np.empty(n)
    fb = np.empty(n)
    for i in range(n):
        w = work[i]
        cr = w if (w <= mean or w != w) else mean  # np.minimum(work, mean), NaN as numpy
        credit[i] = cr
        gain[i] = qq * cr + z * (wait[i] + slot_len)
        b = best[i]
        fb[i] = b if math.isfinite(b) else 0.0
    weight = np.empty(c)
    for j in range(c):
        bl = float(n - 1) - (float(free_now) - float(j + 1))
        weight[j] = externality * (bl if bl > 0.0 else 0.0)  # np.maximum(0.0, bl): no NaN here
    tau = 0.0
    if relative and n > 1 and free_now == 1:  # shortest-first hands the one GPU to the least GPU-time
        least = math.inf
        for i in range(n):
            if gpu_time[i] < least:
                least = gpu_time[i]
        if math.isfinite(least):
            tau = least
    elif relative and n > 1 and free_now > 0:
        tau = _tau(gpu_time, need, free_now)
    gpus = np.zeros((n, 2 * c))
    if check_live:  # `lyapunov._live`'s bound, the same steps
        live = 0
        for i in range(n):
            lb = gpu_time[i] - tau
            if lb < 0.0:
                lb = 0.0
            lb *= weight[0]
            lb /= total_gpus
            lb *= vtheta
            if not gain[i] - lb <= 0:
                live += 1
        if live < 0.9 * n:
            return np.empty((0, 0)), gain, credit, gpus, fb, True
    s = np.empty((n, 2 * c))
    cols = c if no_multi else 2 * c
    for i in range(n):
        for jj in range(2 * c):
            if jj >= cols:
                s[i, jj] = -math.inf
                continue
            j = jj % c
            g = float(j + 1)
            run = both[i, jj]
            imposed = g * run
            imposed -= tau
            if imposed < 0.0:  # np.maximum(imposed, 0.0): NaN and -0.0 stay
                imposed = 0.0
            imposed *= weight[j]
            imposed /= total_gpus
            pen = run - fb[i]
            pen += imposed
            pen *= vtheta
            sc = gain[i] - pen
            fin = math.isfinite(run)
            if not fin:
                sc = -math.inf
            if with_credit:  # `lyapunov.repaying_gpus`: g, at most owed / run; 0 where the run is not finite
                cap = owed[i] / run
                if not fin:
                    cap = 0.0
                gg = g if g < cap else cap  # np.minimum(g, cap): a NaN cap stays
                gpus[i, jj] = gg
                sc += credit_t[i] * gg
            s[i, jj] = sc
    return s, gain, credit, gpus, fb, False


@njit(cache=True, error_model="numpy")
def slot_choice(s_one: np.ndarray, s_multi: np.ndarray, max_one: int, spread: np.ndarray, no_multi: bool,
                capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """`LyapunovPolicy.decide`'s steps from the scores to the knapsack's jobs: the counts that
    cannot fit out (-inf, in place: more than ``max_one`` on one node; several nodes where
    ``spread`` says no), the best of the two scores per count, the jobs with one > 0, and among
    them those `lyapunov._useful` keeps: (best, cand, useful, exact). ``exact`` False: a tie at
    a top-m boundary (or a NaN) leaves numpy's choice of which tied job to keep, so the caller
    calls `_useful` itself (``useful`` is then empty)."""
    n, k = s_one.shape
    for i in range(n):
        for j in range(max_one, k):
            s_one[i, j] = -math.inf
        if not no_multi:
            for j in range(k):
                if not spread[j]:
                    s_multi[i, j] = -math.inf
    best = np.empty((n, k))
    is_cand = np.zeros(n, dtype=np.bool_)
    m_c = 0
    for i in range(n):
        top = -math.inf
        nan = False
        for j in range(k):
            a = s_one[i, j]
            if not no_multi:
                b = s_multi[i, j]
                a = a if (a >= b or a != a) else b  # np.maximum: a NaN wins
            best[i, j] = a
            if a != a:
                nan = True
            elif a > top:
                top = a
        if not nan and top > 0:
            is_cand[i] = True
            m_c += 1
    cand = np.empty(m_c, dtype=np.intp)
    p = 0
    for i in range(n):
        if is_cand[i]:
            cand[p] = i
            p += 1
    keep = np.zeros(m_c, dtype=np.bool_)
    col = np.empty(m_c)
    vm = 0.0
    for g in range(1, min(k, capacity) + 1):
        for p in range(m_c):
            col[p] = best[cand[p], g - 1]
            if col[p] != col[p]:
                return best, cand, cand[:0], False
        m = min(m_c, capacity - g + 1)
        if m < m_c:
            vm = np.sort(col)[m_c - m]  # the m-th largest
            if vm > 0:
                above = 0
                same = 0
                for p in range(m_c):
                    if col[p] > vm:
                        above += 1
                    elif col[p] == vm:
                        same += 1
                if above + same != m:  # tied jobs on both sides of the boundary
                    return best, cand, cand[:0], False
        for p in range(m_c):
            if col[p] > 0 and (m >= m_c or col[p] >= vm):
                keep[p] = True
    q = 0
    for p in range(m_c):
        if keep[p]:
            q += 1
    useful = np.empty(q, dtype=np.intp)
    q = 0
    for p in range(m_c):
        if keep[p]:
            useful[q] = cand[p]
            q += 1
    return best, cand, useful, True


@njit(cache=True, error_model="numpy")
def fill_order(req: np.ndarray, run_req: np.ndarray, limit: int, started: np.ndarray) -> np.ndarray:
    """`LyapunovPolicy._fill`'s candidates on `RowCache.cut`'s rows, in the order it tries them: the
    jobs not ``started`` whose request (at most ``limit`` GPUs) runs finitely, by GPU-time at the
    request (request x its run), the first of equal ones first (`_fill_order`'s lexsort)."""
    n = req.shape[0]
    has = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        has[i] = math.isfinite(run_req[i]) and req[i] <= limit
    for p in range(started.shape[0]):
        has[started[p]] = False
    m = 0
    for i in range(n):
        if has[i]:
            m += 1
    cand = np.empty(m, dtype=np.intp)
    key = np.empty(m)
    p = 0
    for i in range(n):
        if has[i]:
            cand[p] = i
            key[p] = req[i] * run_req[i]
            p += 1
    return cand[np.argsort(key, kind="mergesort")]
