"""The waiting jobs' score rows as matrices kept across slots: a pure memo that Lyapunov's decision
and the per-type pass (`bytype`) both read; its own module so neither imports the other for it."""

from __future__ import annotations

import math
from itertools import compress, repeat

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
        self._g = np.arange(1.0, width + 1.0)  # the GPU counts of a row, 1.0 .. width
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
        # `_lookup`'s last (jobs, their rows), and the jobs and rows its next call most likely begins
        # with (the same jobs, less those `left` says started): checked object by object, never trusted
        self._last: tuple[tuple[WaitingJob, ...], np.ndarray] | None = None
        self._next: tuple[tuple[WaitingJob, ...], np.ndarray] | None = None
        # what `cut` reads, one row per quantity and one column per cached job, so that a slot's rows
        # come out of one gather (`cut`) with each quantity's values contiguous (`_PACK` names the rows):
        # per job its work, submit time, best run, requested count (nearest allowed), run time there;
        # the no-sliver rule's effect (`LyapunovPolicy._restrict`, at ``stretch``): whether it masks
        # any count (1.0) and the best run once masked, both depending on the row alone; over the first
        # c counts (row c - 1 of each block), with the rule applied, the least GPU-time and the first
        # count that gives it (what `_scores` computes on rows cut to c counts); and the rows with the
        # rule applied (inf where it masks), one node then several. Its own capacity, allocated as the
        # rows come (`_pack_room`): each of its rows is a stretch of memory, so spare columns would be
        # touched, and paid for, in every row
        self.pack = np.empty((_PACK + 4 * width, 0))
        self._cut_at: dict[int, tuple[int, np.ndarray]] = {}  # cols -> (capacity, flat offsets of its rows)

    def arrays(self, jobs: tuple[WaitingJob, ...], cols: int | None = None) -> tuple[np.ndarray, ...]:
        """(one-node rows, multi-node rows) cut to ``cols`` GPU counts, work, submit time, best run,
        requested count (nearest allowed), run time at the request."""
        self._room(jobs)
        sel = self.sel = self._lookup(jobs)
        c = self.width if cols is None else min(cols, self.width)
        return (self.one[sel, :c], self.multi[sel, :c], self.work[sel], self.submit[sel], self.best[sel],
                self.req[sel], self.run_req[sel])

    def cut(self, jobs: tuple[WaitingJob, ...], cols: int, stretch: float,
            keys: tuple[object, np.ndarray] | None = None) -> tuple[np.ndarray, ...]:
        """As `arrays`, with the rows cut to ``cols`` GPU counts before they are copied and the
        no-sliver rule at ``stretch`` applied to them (inf where it masks a count), and four more per
        job: whether that rule masks any of its counts, its best run once masked (what
        `LyapunovPolicy._restrict` computes over the whole rows), its least GPU-time over the first
        ``cols`` counts once masked and the first count giving it (`lyapunov.gpu_seconds`).
        ``keys`` (generation, numbers): the caller's own number for each job, unique to its object
        within that generation: the rows are found by them (`ext`). Last, the two cut blocks side by
        side (one node, then several: one array, for a caller that treats them alike)."""
        if stretch != self.stretch:
            self._reset(0, 0)
            self.stretch = stretch
        self._room(jobs)
        if keys is not None:
            sel = self.sel = self._by_keys(jobs, *keys)
        else:
            sel = self.sel = self._lookup(jobs)
        c = min(cols, self.width)
        cap = self.pack.shape[1]
        at = self._cut_at.get(c)
        if at is None or at[0] != cap:
            w = self.width
            rows = np.r_[0:_PACK, _PACK + c - 1, _PACK + w + c - 1, _PACK + 2 * w:_PACK + 2 * w + c,
                         _PACK + 3 * w:_PACK + 3 * w + c]
            at = self._cut_at[c] = (cap, (rows * cap)[:, None])
        g = self.pack.take(at[1] + sel)  # one gather: (quantities, jobs)
        return (g[_PACK + 2:_PACK + 2 + c].T, g[_PACK + 2 + c:].T, g[0], g[1], g[2], g[3], g[4], g[5], g[6],
                g[_PACK], g[_PACK + 1], g[_PACK + 2:].T)

    def _room(self, jobs: tuple[WaitingJob, ...]) -> None:
        """Start afresh for a new row width; keep only ``jobs``' rows once the rows of jobs gone
        (started, or replaced by a new view) outnumber the waiting jobs by `_SLACK` (`_compact`)."""
        n = len(jobs)
        width = len(jobs[0].run_one_node)
        if width != self.width:
            self._reset(width, max(1024, 2 * n))
        elif len(self.index) > 2 * n + _SLACK:
            self._compact(jobs)

    def _compact(self, jobs: tuple[WaitingJob, ...]) -> None:
        """Keep the rows of ``jobs`` only, moved to the front in the order they were added: their
        values are copied, not computed again, the arrays keep their capacity (no regrowth), and
        the waiting jobs' columns of ``pack`` end up close together (a slot's gather reads less
        memory). Row numbers change, so every map to them (``index``, ``ext``, `_lookup`'s memos)
        is rebuilt or dropped."""
        rows = np.fromiter(map(self.index.get, map(id, jobs), repeat(-1)), dtype=np.intp, count=len(jobs))
        rows = np.unique(rows[rows >= 0])  # ascending: the order they were added in
        m = rows.size
        for name in ("one", "multi", "work", "submit", "best", "req", "run_req", "adaptive", "tenant"):
            a = getattr(self, name)
            a[:m] = a[rows]
        if self.stretch == self.stretch:  # `pack` holds a column per row only once `cut` set a stretch
            self.pack[:, :m] = self.pack[:, rows]
        keep = self.keep
        self.keep = [keep[r] for r in rows.tolist()]
        self.index = dict(zip(map(id, self.keep), range(m)))
        self.n_adaptive = int(self.adaptive[:m].sum())
        self.ext = np.full(0, -1, dtype=np.intp)
        self.ext_gen = None
        self.sel = np.zeros(0, dtype=np.intp)
        self._last = self._next = None

    def _lookup(self, jobs: tuple[WaitingJob, ...]) -> np.ndarray:
        """The rows of ``jobs`` (added for the jobs not seen before): no Python frame per job. A caller
        hands the same tuple again, or the last one less the jobs that started (`left`) and then the
        new ones: those rows are reused once each job is checked to be the object expected
        (`_begins_with`, at C speed); only the jobs after them are looked up by id."""
        last = self._last
        if last is not None and last[0] is jobs:
            return last[1]
        nxt = self._next
        n = len(jobs)
        k = 0
        sel = np.empty(n, dtype=np.intp)
        if nxt is not None and len(nxt[0]) <= n and _begins_with(jobs, nxt[0]):
            k = len(nxt[0])
            sel[:k] = nxt[1]
        if k < n:
            rest = jobs[k:]
            got = np.fromiter(map(self.index.get, map(id, rest), repeat(-1)), dtype=np.intp, count=n - k)
            miss = np.flatnonzero(got < 0)
            if miss.size == 1:
                got[miss] = self._add_one(rest[int(miss[0])])
            elif miss.size:
                got[miss] = self._add_many([rest[p] for p in miss.tolist()])
            sel[k:] = got
        self._last = self._next = (jobs, sel)
        return sel

    def left(self, jobs: tuple[WaitingJob, ...], started: list[int]) -> None:
        """The jobs at positions ``started`` of ``jobs`` (the last `cut` / `arrays` call's) start now:
        the next call's jobs are likely the others, in order, then new ones (`_lookup` checks)."""
        last = self._last
        if last is not None and last[0] is jobs and started:
            if len(started) == 1:  # the usual slot: one start
                p = started[0]
                rows = last[1]
                self._next = (jobs[:p] + jobs[p + 1:], np.concatenate((rows[:p], rows[p + 1:])))
                return
            keep = np.ones(len(jobs), dtype=bool)
            keep[started] = False
            self._next = (tuple(compress(jobs, keep.tolist())), last[1][keep])

    def _by_keys(self, jobs: tuple[WaitingJob, ...], gen: object, ks: np.ndarray) -> np.ndarray:
        """The rows of ``jobs`` found by their keys ``ks`` (`cut`), added for the jobs not seen before."""
        if gen != self.ext_gen:
            self.ext = np.full(max(1024, 2 * len(ks)), -1, dtype=np.intp)
            self.ext_gen = gen
        top = int(ks.max()) + 1 if ks.size else 0
        if top > self.ext.size:
            self.ext = np.concatenate([self.ext, np.full(max(top - self.ext.size, self.ext.size), -1, dtype=np.intp)])
        sel = self.ext[ks]
        miss = np.flatnonzero(sel < 0)
        if miss.size:
            ws = [jobs[p] for p in miss.tolist()]
            got = np.fromiter(map(self.index.get, map(id, ws), repeat(-1)), dtype=np.intp, count=len(ws))
            new = np.flatnonzero(got < 0)
            if new.size:
                got[new] = self._add_many([ws[p] for p in new.tolist()])
            sel[miss] = got
            self.ext[ks[miss]] = got
        return sel

    def _grow(self, need: int) -> None:
        """Room for ``need`` rows in every array (each at least doubles, so growth is amortised)."""
        grow = max(1024, self.one.shape[0], need - self.one.shape[0])
        for name in ("one", "multi"):
            a = getattr(self, name)
            setattr(self, name, np.vstack([a, np.empty((grow, self.width))]))
        for name in ("work", "submit", "best", "run_req"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.empty(grow)]))
        for name in ("req", "tenant"):
            a = getattr(self, name)
            setattr(self, name, np.concatenate([a, np.zeros(grow, dtype=np.intp)]))
        self.adaptive = np.concatenate([self.adaptive, np.zeros(grow, dtype=bool)])

    def _pack_room(self, need: int) -> None:
        """Room for ``need`` columns in ``pack``: the first rows at once with an eighth to spare (the
        service's first slot adds every held job), then doubling, so growth stays amortised."""
        cap = self.pack.shape[1]
        if need > cap == 0:  # (not stacked: a copy would touch every page of the new columns)
            self.pack = np.empty((self.pack.shape[0], need + max(1024, need // 8)))
        elif need > cap:
            self.pack = np.hstack([self.pack, np.empty((self.pack.shape[0], max(cap, need - cap)))])

    def _add_one(self, w: WaitingJob) -> int:
        """`_add_many` for one job, in fewer numpy steps (the usual slot has one or two new jobs):
        the same values (the request's own count when allowed is the nearest one; a row no rule
        masks is kept as it is)."""
        i = len(self.keep)
        if i >= self.one.shape[0]:
            self._grow(i + 1)
        one, multi = w.run_one_node, w.run_multi_node
        self.one[i] = one
        self.multi[i] = multi
        self.work[i] = w.work
        self.submit[i] = w.submit_time
        self.best[i] = min(one.min(), multi.min())
        fm = np.fmin(one, multi)
        r = w.requested_gpus
        if 1 <= r <= self.width and math.isfinite(fm[r - 1]):
            run_req = fm[r - 1]
        else:
            ok = np.flatnonzero(np.isfinite(fm)) + 1
            r = int(ok[np.lexsort((ok, np.abs(ok - w.requested_gpus)))[0]]) if ok.size else 1
            run_req = fm[r - 1]
        self.req[i] = r
        self.run_req[i] = run_req
        self.adaptive[i] = w.adaptive
        self.n_adaptive += w.adaptive
        code = self.tenant_code.get(w.user)
        if code is None:
            code = self.tenant_code[w.user] = len(self.tenant_names)
            self.tenant_names.append(w.user)
        self.tenant[i] = code
        if self.stretch == self.stretch:  # `cut`'s per-row restriction, as `_scores` computes it on all rows
            self._pack_room(i + 1)
            g = self._g
            with np.errstate(invalid="ignore"):  # (one for the block: entering one costs about 2 us)
                masks = r > 1 and bool((fm[:r - 1] > self.stretch * self.run_req[i]).any())
                if masks:
                    over = (g < r) & (fm > self.stretch * self.run_req[i])
                    one, multi = np.where(over, np.inf, one), np.where(over, np.inf, multi)
                    fm = np.fmin(one, multi)
                gt = np.minimum(one, multi)  # `gpu_seconds` of this row
                gt *= g
            gt[~np.isfinite(gt)] = np.inf
            w_ = self.width
            col = self.pack[:, i]
            col[:_PACK] = (w.work, w.submit_time, self.best[i], r, run_req, masks, fm.min())
            # `_prefix_least_cols` on this row, written into its column
            least = np.minimum.accumulate(gt, out=col[_PACK:_PACK + w_])
            new = np.empty(w_, dtype=bool)
            new[0] = True
            np.less(gt[1:], least[:-1], out=new[1:])
            np.maximum.accumulate(np.where(new, g, 0.0), out=col[_PACK + w_:_PACK + 2 * w_])
            col[_PACK + 2 * w_:_PACK + 3 * w_], col[_PACK + 3 * w_:] = one, multi
        self.keep.append(w)
        self.index[id(w)] = i
        return i

    def _add_many(self, ws: list[WaitingJob]) -> np.ndarray:
        """Rows for the new jobs ``ws``, all at once: each row's values are what one job alone would
        get (the same elementwise operations, and row-wise minima, which do not depend on order)."""
        m = len(ws)
        i0 = len(self.keep)
        if i0 + m > self.one.shape[0]:
            self._grow(i0 + m)
        rows = slice(i0, i0 + m)
        one = np.array([w.run_one_node for w in ws], dtype=float).reshape(m, self.width)
        multi = np.array([w.run_multi_node for w in ws], dtype=float).reshape(m, self.width)
        self.one[rows] = one
        self.multi[rows] = multi
        self.work[rows] = [w.work for w in ws]
        self.submit[rows] = [w.submit_time for w in ws]
        lo1, lo2 = one.min(axis=1), multi.min(axis=1)
        self.best[rows] = np.where(lo2 < lo1, lo2, lo1)  # min(lo1, lo2), as Python takes it
        fm = np.fmin(one, multi)
        gk = np.arange(1, self.width + 1)
        asked = np.array([w.requested_gpus for w in ws], dtype=np.intp)
        # the allowed count nearest the request, the smaller on a tie (argmin: the first); 1 if none
        fin = np.isfinite(fm)
        dist = np.where(fin, np.abs(gk[None, :] - asked[:, None]), _FAR)
        r = dist.argmin(axis=1) + 1
        r[~fin.any(axis=1)] = 1
        self.req[rows] = r
        run_req = fm[np.arange(m), r - 1]
        self.run_req[rows] = run_req
        ad = [w.adaptive for w in ws]
        self.adaptive[rows] = ad
        self.n_adaptive += sum(ad)
        codes = self.tenant_code
        for w in ws:
            if w.user not in codes:
                codes[w.user] = len(self.tenant_names)
                self.tenant_names.append(w.user)
        self.tenant[rows] = [codes[w.user] for w in ws]
        if self.stretch == self.stretch:  # `cut`'s per-row restriction, as `_scores` computes it on all rows
            with np.errstate(invalid="ignore"):
                over = (gk[None, :] < r[:, None]) & (fm > self.stretch * run_req[:, None])
            one_k, multi_k = np.where(over, np.inf, one), np.where(over, np.inf, multi)
            w_ = self.width
            self._pack_room(i0 + m)
            block = self.pack[:, rows]  # (a view: written in place)
            block[0], block[1], block[2], block[3], block[4] = self.work[rows], self.submit[rows], self.best[rows], r, run_req
            block[5] = over.any(axis=1)
            block[6] = np.fmin(one_k, multi_k).min(axis=1)
            one_t, multi_t = block[_PACK + 2 * w_:_PACK + 3 * w_], block[_PACK + 3 * w_:]
            for j in range(0, m, _TILE):  # the rows into the packed columns, a tile at a time (cache-sized)
                one_t[:, j:j + _TILE] = one_k[j:j + _TILE].T
                multi_t[:, j:j + _TILE] = multi_k[j:j + _TILE].T
            _prefix_least_cols(one_t, multi_t, block[_PACK:_PACK + w_], block[_PACK + w_:_PACK + 2 * w_])
        self.keep.extend(ws)
        out = np.arange(i0, i0 + m, dtype=np.intp)
        self.index.update(zip(map(id, ws), out.tolist()))
        return out

    def waiting_tenants(self) -> np.ndarray:
        """Each job of the last `arrays` / `cut` call's user, as a code (``tenant_names``)."""
        return self.tenant[self.sel]

    def waiting_adaptive(self) -> np.ndarray | None:
        """Which jobs of the last `arrays` call are adaptive; None when no cached job is (the usual case)."""
        return self.adaptive[self.sel] if self.n_adaptive else None


def _begins_with(jobs: tuple[WaitingJob, ...], head: tuple[WaitingJob, ...]) -> bool:
    """Whether ``jobs`` begins with the jobs ``head``, each the same object or one equal to it.
    Tuple equality compares its items by identity first (in C, a few ns each; checking them with
    ``operator.is_`` costs a call per job), and only a pair that is not the same object by
    `WaitingJob`'s equality, over every field a row is computed from (``by_type`` and ``pieces``,
    which no row reads, aside): two such jobs have the same row. A pair whose run-time rows are
    different arrays makes that equality ambiguous (numpy's ValueError): not the same, then."""
    try:
        return jobs[:len(head)] == head
    except ValueError:
        return False


_PACK = 7  # `RowCache.pack`'s rows before its four per-count blocks
_FAR = np.iinfo(np.intp).max  # `_add_many`: the distance to a count that is not allowed
_SLACK = 1024  # rows of jobs gone kept beyond the waiting jobs' count before `RowCache._compact`


_TILE = 256  # jobs per tile of `_add_many`'s transposed copy


def _prefix_least_cols(one: np.ndarray, multi: np.ndarray, least: np.ndarray, first: np.ndarray) -> None:
    """Per job (one per column: the packed layout, count c is row c - 1 of each block) and per c,
    the least of its first c GPU-times (`gpu_seconds`) and the first count giving it (min and
    argmin + 1 over the first c counts; no NaN: `gpu_seconds` makes them inf), written into
    ``least`` and ``first``. `RowCache._add_one` takes the same elementwise steps and running
    minima along one row, so the same values."""
    g = np.arange(1, one.shape[0] + 1, dtype=float)[:, None]
    with np.errstate(invalid="ignore"):
        gt = np.minimum(one, multi)
        gt *= g
    gt[~np.isfinite(gt)] = np.inf
    np.minimum.accumulate(gt, axis=0, out=least)
    new = np.empty(gt.shape, dtype=bool)
    new[0] = True
    np.less(gt[1:], least[:-1], out=new[1:])
    np.maximum.accumulate(np.where(new, g, 0.0), axis=0, out=first)


def gpu_seconds(one: np.ndarray, multi: np.ndarray) -> np.ndarray:
    """GPU-seconds of each job on g = 1, 2, ... GPUs (the faster placement; inf where neither is allowed)."""
    g = np.arange(1, one.shape[1] + 1, dtype=float)
    with np.errstate(invalid="ignore"):
        gt = np.minimum(one, multi)
        gt *= g[None, :]
    gt[~np.isfinite(gt)] = np.inf
    return gt
