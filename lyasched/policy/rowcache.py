"""The waiting jobs' score rows as matrices kept across slots: a pure memo that Lyapunov's decision
and the per-type pass (`bytype`) both read; its own module so neither imports the other for it."""

from __future__ import annotations

import math

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

    def arrays(self, jobs: tuple[WaitingJob, ...], cols: int | None = None) -> tuple[np.ndarray, ...]:
        """(one-node rows, multi-node rows) cut to ``cols`` GPU counts, work, submit time, best run,
        requested count (nearest allowed), run time at the request."""
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width or len(self.index) > 4 * n + 4096:
            self._reset(width, max(1024, 2 * n))
        idx: list[int | None] = list(map(self.index.get, map(id, jobs)))  # no Python frame per job
        if None in idx:
            for pos, w in enumerate(jobs):
                if idx[pos] is None:
                    idx[pos] = self._add(w)
        sel = self.sel = np.fromiter(idx, dtype=np.intp, count=n)
        c = self.width if cols is None else min(cols, self.width)
        return (self.one[sel, :c], self.multi[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel])

    def cut(self, jobs: tuple[WaitingJob, ...], cols: int, stretch: float) -> tuple[np.ndarray, ...]:
        """As `arrays`, with the rows cut to ``cols`` GPU counts before they are copied, and two more
        per job: whether the no-sliver rule at ``stretch`` masks any of its counts, and its best run
        once masked (what `LyapunovPolicy._restrict` computes over the whole rows)."""
        if stretch != self.stretch:
            self._reset(0, 0)
            self.stretch = stretch
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width or len(self.index) > 4 * n + 4096:
            self._reset(width, max(1024, 2 * n))
        idx: list[int | None] = list(map(self.index.get, map(id, jobs)))
        if None in idx:
            for pos, w in enumerate(jobs):
                if idx[pos] is None:
                    idx[pos] = self._add(w)
        sel = self.sel = np.fromiter(idx, dtype=np.intp, count=n)
        c = min(cols, self.width)
        return (self.one[sel, :c], self.multi[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel], self.slivers[sel], self.best_kept[sel])

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
            self.best_kept[i] = np.fmin(np.where(over, np.inf, w.run_one_node), np.where(over, np.inf, w.run_multi_node)).min()
        self.keep.append(w)
        self.index[id(w)] = i
        return i

    def waiting_tenants(self) -> np.ndarray:
        """Each job of the last `arrays` / `cut` call's user, as a code (``tenant_names``)."""
        return self.tenant[self.sel]

    def waiting_adaptive(self) -> np.ndarray | None:
        """Which jobs of the last `arrays` call are adaptive; None when no cached job is (the usual case)."""
        return self.adaptive[self.sel] if self.n_adaptive else None
