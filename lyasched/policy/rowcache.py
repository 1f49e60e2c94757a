"""The waiting jobs' score rows as matrices kept across slots: a pure memo that Lyapunov's decision
and the per-type pass (`bytype`) both read; its own module so neither imports the other for it."""

from __future__ import annotations

import math
from itertools import repeat

import numpy as np

from lyasched.policy import adaptive
from lyasched.policy.state import WaitingJob


class RowCache:
    """The waiting jobs' rows as matrices, kept across slots.

    The simulator and the service hand the policy the same `WaitingJob` objects slot after
    slot; copying their rows into one matrix once per job (not once per slot) is what keeps
    a decision over thousands of waiting jobs cheap. Entries hold a reference to their
    object, so an id cannot be reused while cached. A pure memo: results are unchanged.
    """

    def __init__(self) -> None:
        self.stretch = math.nan  # the `cut` rows' max_stretch (nan: none yet)
        self.tenant_code: dict[str, int] = {}  # a job's user -> its code in ``tenant``
        self.tenant_names: list[str] = []  # code -> user
        self._reset(0, 0)

    def _reset(self, width: int, capacity: int) -> None:
        self.width = width
        self.index: dict[int, int] = {}
        self.keep: list[WaitingJob] = []
        # `cut`'s ``keys``: a caller's own row numbers for its jobs (bytype's `TypeMemo` rows, in the
        # generation ``ext_gen``) -> this cache's rows (-1: not yet known), so a slot's lookup is one
        # numpy gather, not a dict lookup per job
        self.ext = np.full(0, -1, dtype=np.intp)
        self.ext_gen: object = None
        self.one = np.empty((capacity, width))
        self.multi = np.empty((capacity, width))
        self.work = np.empty(capacity)
        self.submit = np.empty(capacity)
        self.best = np.empty(capacity)
        self.req = np.empty(capacity, dtype=np.intp)  # requested count, or the nearest allowed
        self.run_req = np.empty(capacity)  # run time there (one node when allowed)
        self.adaptive = np.zeros(capacity, dtype=bool)  # WaitingJob.adaptive
        self.tenant = np.zeros(capacity, dtype=np.intp)  # the job's user, as a code (``tenant_names``)
        self.n_adaptive = 0  # adaptive jobs among the cached ones (0: `waiting_adaptive` is None at once)
        self.sel = np.zeros(0, dtype=np.intp)  # the last `arrays` call's rows
        # the no-sliver rule's effect on each row (`LyapunovPolicy._restrict`, at ``stretch``): whether
        # it masks any count, and the best run once masked; both depend on the row alone
        self.slivers = np.zeros(capacity, dtype=bool)
        self.best_kept = np.empty(capacity)
        # ... the rows with it applied (inf where it masks), and over all counts their least GPU-time
        # and the count that gives it (what `_scores` reads for the shortest-first reference)
        self.one_kept = np.empty((capacity, width))
        self.multi_kept = np.empty((capacity, width))
        self.gpu_time = np.empty(capacity)
        self.need = np.empty(capacity, dtype=np.intp)

    def arrays(self, jobs: tuple[WaitingJob, ...], cols: int | None = None) -> tuple[np.ndarray, ...]:
        """(one-node rows, multi-node rows) cut to ``cols`` GPU counts, work, submit time, best run,
        requested count (nearest allowed), run time at the request."""
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width or len(self.index) > 4 * n + 4096:
            self._reset(width, max(1024, 2 * n))
        sel = self.sel = self._lookup(jobs)
        c = self.width if cols is None else min(cols, self.width)
        return (self.one[sel, :c], self.multi[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel])

    def cut(self, jobs: tuple[WaitingJob, ...], cols: int, stretch: float,
            keys: tuple[object, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
        """As `arrays`, with the rows cut to ``cols`` GPU counts before they are copied and the
        no-sliver rule at ``stretch`` applied to them (inf where it masks a count), and four more per
        job: whether that rule masks any of its counts, its best run once masked (what
        `LyapunovPolicy._restrict` computes over the whole rows), its least GPU-time over all counts
        once masked and the count giving it (`lyapunov.gpu_seconds`; valid when ``cols`` >= the width).
        ``keys`` (generation, numbers): the caller's own number for each job, unique to its object
        within that generation: the rows are found by them (`ext`)."""
        if stretch != self.stretch:
            self._reset(0, 0)
            self.stretch = stretch
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width or len(self.index) > 4 * n + 4096:
            self._reset(width, max(1024, 2 * n))
        if keys is not None:
            sel = self.sel = self._by_keys(jobs, *keys)
        else:
            sel = self.sel = self._lookup(jobs)
        c = min(cols, self.width)
        return (self.one_kept[sel, :c], self.multi_kept[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel], self.slivers[sel], self.best_kept[sel], self.gpu_time[sel],
                self.need[sel])

    def _lookup(self, jobs: tuple[WaitingJob, ...]) -> np.ndarray:
        """The rows of ``jobs`` (added for the jobs not seen before): no Python frame per job."""
        sel = np.fromiter(map(self.index.get, map(id, jobs), repeat(-1)), dtype=np.intp, count=len(jobs))
        for pos in np.flatnonzero(sel < 0).tolist():
            sel[pos] = self._add(jobs[pos])
        return sel

    def _by_keys(self, jobs: tuple[WaitingJob, ...], gen: object, ks: np.ndarray) -> np.ndarray:
        """The rows of ``jobs`` found by their keys ``ks`` (`cut`), added for the jobs not seen before."""
        if gen != self.ext_gen:
            self.ext = np.full(max(1024, 2 * len(ks)), -1, dtype=np.intp)
            self.ext_gen = gen
        top = int(ks.max()) + 1 if ks.size else 0
        if top > self.ext.size:
            self.ext = np.concatenate([self.ext, np.full(max(top - self.ext.size, self.ext.size), -1, dtype=np.intp)])
        sel = self.ext[ks]
        for p in np.flatnonzero(sel < 0).tolist():
            w = jobs[p]
            i = self.index.get(id(w))
            sel[p] = self.ext[ks[p]] = self._add(w) if i is None else i
        return sel

    def _add(self, w: WaitingJob) -> int:
        i = len(self.keep)
        if i >= self.one.shape[0]:
            grow = max(1024, i)
            self.one = np.vstack([self.one, np.empty((grow, self.width))])
            self.multi = np.vstack([self.multi, np.empty((grow, self.width))])
            self.work = np.concatenate([self.work, np.empty(grow)])
            self.submit = np.concatenate([self.submit, np.empty(grow)])
            self.best = np.concatenate([self.best, np.empty(grow)])
            self.req = np.concatenate([self.req, np.empty(grow, dtype=np.intp)])
            self.run_req = np.concatenate([self.run_req, np.empty(grow)])
            self.adaptive = np.concatenate([self.adaptive, np.zeros(grow, dtype=bool)])
            self.tenant = np.concatenate([self.tenant, np.zeros(grow, dtype=np.intp)])
            self.slivers = np.concatenate([self.slivers, np.zeros(grow, dtype=bool)])
            self.best_kept = np.concatenate([self.best_kept, np.empty(grow)])
            self.one_kept = np.vstack([self.one_kept, np.empty((grow, self.width))])
            self.multi_kept = np.vstack([self.multi_kept, np.empty((grow, self.width))])
            self.gpu_time = np.concatenate([self.gpu_time, np.empty(grow)])
            self.need = np.concatenate([self.need, np.empty(grow, dtype=np.intp)])
        self.one[i] = w.run_one_node
        self.multi[i] = w.run_multi_node
        self.work[i] = w.work
        self.submit[i] = w.submit_time
        self.best[i] = min(w.run_one_node.min(), w.run_multi_node.min())
        fm = np.fmin(w.run_one_node, w.run_multi_node)
        ok = np.flatnonzero(np.isfinite(fm)) + 1
        r = int(ok[np.lexsort((ok, np.abs(ok - w.requested_gpus)))[0]]) if ok.size else 1
        self.req[i] = r
        self.run_req[i] = fm[r - 1]
        self.adaptive[i] = w.adaptive
        code = self.tenant_code.get(w.user)
        if code is None:
            code = self.tenant_code[w.user] = len(self.tenant_names)
            self.tenant_names.append(w.user)
        self.tenant[i] = code
        self.n_adaptive += w.adaptive
        if self.stretch == self.stretch:  # `cut`'s per-row restriction, as `_scores` computes it on all rows
            gk = np.arange(1, self.width + 1)
            with np.errstate(invalid="ignore"):
                over = (gk < r) & (fm > self.stretch * self.run_req[i])
            self.slivers[i] = bool(over.any())
            one_k, multi_k = np.where(over, np.inf, w.run_one_node), np.where(over, np.inf, w.run_multi_node)
            self.best_kept[i] = np.fmin(one_k, multi_k).min()
            self.one_kept[i], self.multi_kept[i] = one_k, multi_k
            gt = gpu_seconds(one_k[None, :], multi_k[None, :])[0]
            self.need[i] = int(gt.argmin()) + 1
            self.gpu_time[i] = gt[self.need[i] - 1]
        self.keep.append(w)
        self.index[id(w)] = i
        return i

    def waiting_tenants(self) -> np.ndarray:
        """Each job of the last `arrays` / `cut` call's user, as a code (``tenant_names``)."""
        return self.tenant[self.sel]

    def waiting_adaptive(self) -> np.ndarray | None:
        """Which jobs of the last `arrays` call are adaptive; None when no cached job is (the usual case)."""
        return self.adaptive[self.sel] if self.n_adaptive else None


def gpu_seconds(one: np.ndarray, multi: np.ndarray) -> np.ndarray:
    """GPU-seconds of each job on g = 1, 2, ... GPUs (the faster placement; inf where neither is allowed)."""
    g = np.arange(1, one.shape[1] + 1, dtype=float)
    with np.errstate(invalid="ignore"):
        gt = np.minimum(one, multi)
        gt *= g[None, :]
    gt[~np.isfinite(gt)] = np.inf
    return gt
