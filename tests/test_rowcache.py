"""RowCache kept across calls gives the rows a fresh cache computes for the same jobs: with the
previous call's rows reused (jobs leaving, new ones after them), one new job or many at once; and
the least GPU-time it keeps per cut is the one the cut rows give."""

from __future__ import annotations

import numpy as np

from lyasched.policy.rowcache import RowCache, gpu_seconds
from lyasched.policy.state import WaitingJob

WIDTH = 16


def _job(rng: np.random.Generator, i: int) -> WaitingJob:
    one = np.full(WIDTH, np.inf)
    multi = np.full(WIDTH, np.inf)
    base = rng.uniform(100.0, 5000.0)
    allowed = rng.choice(np.arange(1, WIDTH + 1), size=int(rng.integers(1, 6)), replace=False)
    for g in allowed:
        t = base / g ** rng.uniform(0.2, 1.0) * rng.uniform(0.9, 1.4)  # some counts far slower: slivers
        if g <= 8:
            one[g - 1] = t
        multi[g - 1] = t * rng.uniform(1.0, 1.3)
    return WaitingJob(job_id=str(i), submit_time=float(i), work=base, run_one_node=one, run_multi_node=multi,
                      requested_gpus=int(rng.integers(1, WIDTH + 2)), user=f"t{i % 5}", adaptive=bool(i % 7 == 0))


def _same(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_kept_cache_matches_fresh_one() -> None:
    rng = np.random.default_rng(3)
    kept = RowCache()
    waiting: list[WaitingJob] = []
    nxt = 0
    for step in range(120):
        arrive = int(rng.choice([0, 1, 1, 2, 40])) if step else 30  # one at a time, or a batch
        waiting += [_job(rng, nxt + k) for k in range(arrive)]
        nxt += arrive
        if not waiting:
            continue
        jobs = tuple(waiting)
        cols = int(rng.integers(1, WIDTH + 3))
        got = kept.cut(jobs, cols, 3.0)
        fresh = RowCache()
        _same(got, fresh.cut(jobs, cols, 3.0))
        gt = gpu_seconds(got[0], got[1])  # the least GPU-time on the cut rows, and its first count
        np.testing.assert_array_equal(got[9], gt.min(axis=1))
        np.testing.assert_array_equal(got[10], gt.argmin(axis=1) + 1)
        assert [kept.tenant_names[c] for c in kept.waiting_tenants()] == [w.user for w in jobs]  # codes: per cache
        ad_kept, ad_fresh = kept.waiting_adaptive(), fresh.waiting_adaptive()
        assert (ad_kept is None) == (ad_fresh is None)
        if ad_kept is not None and ad_fresh is not None:
            np.testing.assert_array_equal(ad_kept, ad_fresh)
        _same(kept.cut(jobs, cols, 3.0), got)  # the same tuple again
        # some start (as the policy reports them), or leave unannounced (the service's cancellations)
        gone = sorted(set(rng.integers(0, len(jobs), size=int(rng.integers(0, 4))).tolist()))
        if step % 3:
            kept.left(jobs, gone)
        if step % 11 == 5 and waiting:
            gone = sorted(set(gone) | {len(waiting) // 2})
        waiting = [w for p, w in enumerate(waiting) if p not in set(gone)]


def test_compacted_cache_matches_fresh_one() -> None:
    """Many jobs pass through a short queue, so the cache drops the rows of jobs gone (`_compact`)
    again and again while a few jobs wait throughout: what it returns, by identity and by a caller's
    keys alike, stays what a fresh cache computes. A row map not rebuilt after a compaction (``index``, ``ext``, `_lookup`'s
    memos) would hand back another job's row."""
    rng = np.random.default_rng(8)
    kept = RowCache()
    waiting: list[WaitingJob] = []
    key_of: dict[int, int] = {}  # the caller's own number per job object (bytype's `TypeMemo` rows)
    nxt = compactions = 0
    seen_before = 0
    for step in range(300):
        arrive = int(rng.choice([2, 9, 12]))
        for k in range(arrive):
            w = _job(rng, nxt + k)
            key_of[id(w)] = nxt + k
            waiting.append(w)
        nxt += arrive
        jobs = tuple(waiting)
        cols = int(rng.integers(1, WIDTH + 3))
        by_keys = step % 5 == 0  # (and by identity the other steps, so `_lookup` meets its memo of the last)
        keys = (0, np.array([key_of[id(w)] for w in jobs], dtype=np.intp)) if by_keys else None
        got = kept.cut(jobs, cols, 3.0, keys)
        if len(kept.index) < seen_before:
            compactions += 1
        seen_before = len(kept.index)
        _same(got, RowCache().cut(jobs, cols, 3.0))
        assert [kept.tenant_names[c] for c in kept.waiting_tenants()] == [w.user for w in jobs]
        ad = kept.waiting_adaptive()
        assert ad is not None
        np.testing.assert_array_equal(ad, [w.adaptive for w in jobs])
        # the queue stays short: most of it starts (announced, so `_lookup` expects the rest next),
        # but one job in 40 waits throughout, its row moved by each compaction and its old one reused
        gone = sorted(set(rng.integers(0, len(jobs), size=max(0, len(jobs) - 12 + int(rng.integers(0, 4)))).tolist())
                      - {p for p, w in enumerate(jobs) if key_of[id(w)] % 40 == 1})
        kept.left(jobs, gone)
        waiting = [w for p, w in enumerate(waiting) if p not in set(gone)]
    assert compactions >= 2  # (the slack is 1,024 rows: the test passes through its compaction)


def test_a_new_view_of_a_job_gets_its_own_rows() -> None:
    """A job handed again as a new object with other rows (as the trust step re-views a job whose
    estimate it scales) where the cache expects the old one: its rows are the new object's. A
    new object equal in every field a row reads may keep the old rows, which are the same."""
    from dataclasses import replace

    rng = np.random.default_rng(5)
    for trial in range(40):
        kept = RowCache()
        jobs = tuple(_job(rng, i) for i in range(int(rng.integers(2, 30))))
        kept.cut(jobs, WIDTH, 3.0)
        p = int(rng.integers(0, len(jobs)))
        kept.left(jobs, [p])
        rest = list(jobs[:p] + jobs[p + 1:])
        q = int(rng.integers(0, len(rest))) if rest else 0
        if rest:
            f = float(rng.uniform(1.1, 3.0)) if trial % 3 else 1.0
            w = rest[q]
            rest[q] = replace(w, run_one_node=w.run_one_node * f, run_multi_node=w.run_multi_node * f,
                              work=w.work * f if trial % 2 else w.work)
        now = tuple(rest) + (_job(rng, 100 + trial),)
        _same(kept.cut(now, WIDTH, 3.0), RowCache().cut(now, WIDTH, 3.0))
