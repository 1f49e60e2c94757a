"""Trust: how much longer a user's jobs run than they claim, applied to their next claims.

A job's predicted run time comes from its submitter's claim (the cost summary lyasub writes, or
a hand-written one), so a user who claims 1 s for 1000 s of work would jump the queue. The
`TrustBook` keeps, per user and per account, the ratio observed / predicted run time of their
finished jobs; `factor(user)` is the geometric mean of the last `window` ratios, never below 1
(no one is predicted shorter than they claimed) and acted on only when it is well above the
noise of honest predictions (`TrustParams`: z standard errors): honest users' ratios scatter
around 1 (a replay's estimate error, the cost model's), and acting on that noise would move
every schedule for nothing, while a claim of 1% is caught at the first finished job. A user with
no finished job of their own gets their account's
factor, so a fresh user name does not escape it. A running job that has already outrun its claim
beyond that noise (`Overruns`) is evidence before it finishes: its elapsed / predicted is a lower
bound on its ratio (`TrustBook.factors_with`). Pure: no clock, no I/O; the simulator feeds it
its finished jobs, the service its records' (lyasched.live.trust), and the one
`SlotStateBuilder` applies it (lyasched.policy.snapshot) to waiting jobs, running jobs' predicted
ends and a moving policy's remaining rows (`distrusted_movable`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from lyasched.policy.movable import MovableJob
from lyasched.policy.state import WaitingJob


@dataclass(frozen=True)
class TrustParams:
    """A factor from n ratios is acted on when its log is at least ``z`` standard errors of
    honest noise (``noise`` / sqrt(n)) above 0, and the factor at least ``threshold``: after
    one job from 3.3x, after 4 from 1.8x, from 9 on 1.5x. ``noise`` (sigma of log(observed /
    predicted) of honest jobs) is twice the replay's default estimate error (0.2)."""

    window: int = 20  # ratios kept per user / account (the latest)
    min_jobs: int = 1  # finished jobs before a user's (or account's) own factor is looked at
    noise: float = 0.4
    z: float = 3.0
    threshold: float = 1.5


@dataclass
class TrustBook:
    """Observed / predicted run-time ratios of finished jobs, per user and per account."""

    params: TrustParams = field(default_factory=TrustParams)
    _user: dict[str, deque] = field(default_factory=dict)
    _account: dict[str, deque] = field(default_factory=dict)
    _account_of: dict[str, str] = field(default_factory=dict)
    version: int = 0  # bumped when a factor may have changed (the builder's memo key)
    # `factors` kept up to date: the factors not 1, the users whose factor may have moved since
    # (None: all, as at first), and each account's users (an account's ratios move theirs)
    _nonunit: dict[str, float] = field(default_factory=dict, repr=False, compare=False)
    _dirty: set[str] | None = field(default=None, repr=False, compare=False)
    _members: dict[str, set[str]] = field(default_factory=dict, repr=False, compare=False)

    def _moved(self, user: str, account: str | None = None) -> None:
        """The user's factor (and with ``account``, that account's users') may have moved."""
        if self._dirty is not None:
            self._dirty.add(user)
            if account:
                self._dirty.update(self._members.get(account, ()))

    def _join(self, user: str, account: str) -> None:
        old = self._account_of.get(user)
        if old is not None and old != account:
            self._members.get(old, set()).discard(user)
        self._members.setdefault(account, set()).add(user)
        self._account_of[user] = account

    def observe(self, user: str, predicted_s: float, observed_s: float, account: str = "") -> None:
        """One finished run: the run time it was predicted with (the claim, before any trust
        factor) and the time it ran. Runs with no finite positive prediction are ignored."""
        if not (predicted_s > 0 and math.isfinite(predicted_s) and observed_s >= 0 and math.isfinite(observed_s)):
            return
        r = math.log(max(observed_s, 1e-9) / predicted_s)
        q = self._user.get(user)
        if q is None:  # (not setdefault: a replay observes every finished job, a deque made each time)
            q = self._user[user] = deque(maxlen=self.params.window)
        q.append(r)
        if account:
            self._join(user, account)
            a = self._account.get(account)
            if a is None:
                a = self._account[account] = deque(maxlen=self.params.window)
            a.append(r)
        self._moved(user, account)
        self.version += 1

    def note_account(self, user: str, account: str) -> None:
        """The account of a user not yet seen finishing (so a fresh user gets its account's factor)."""
        if account and self._account_of.get(user) != account:
            self._join(user, account)
            self._moved(user)
            self.version += 1

    def _ratios(self, user: str) -> deque | None:
        """The user's own ratios, else their account's (None: neither has ``min_jobs``)."""
        for r in (self._user.get(user), self._account.get(self._account_of.get(user, ""))):
            if r is not None and len(r) >= self.params.min_jobs:
                return r
        return None

    def raw(self, user: str) -> float:
        """The user's observed / predicted factor (their own, else their account's; 1 if neither
        has enough jobs), before the floor at 1 and the noise threshold."""
        r = self._ratios(user)
        return 1.0 if r is None else math.exp(sum(r) / len(r))

    def bar(self, n: int) -> float:
        """The least factor acted on after n ratios."""
        p = self.params
        return max(p.threshold, math.exp(p.z * p.noise / math.sqrt(max(n, 1))))

    def factor(self, user: str) -> float:
        """The factor applied to the user's predictions: >= 1, and 1 unless above the noise."""
        r = self._ratios(user)
        if r is None:
            return 1.0
        f = math.exp(sum(r) / len(r))
        return f if f >= self.bar(len(r)) else 1.0

    def factors(self) -> dict[str, float]:
        """Every known user whose factor is not 1, in name order. Kept as ratios arrive: only the
        users whose own or account's ratios moved are looked at again (the same `factor` values)."""
        dirty = self._dirty
        if dirty is None:  # first call: every known user (the members index from what is known)
            self._members.clear()
            for u, a in self._account_of.items():
                self._members.setdefault(a, set()).add(u)
            self._nonunit.clear()
            dirty = set(self._user) | set(self._account_of)
        nonunit = self._nonunit
        for u in dirty:
            f = self.factor(u)
            if f != 1.0:
                nonunit[u] = f
            else:
                nonunit.pop(u, None)
        self._dirty = set()
        return {u: nonunit[u] for u in sorted(nonunit)}

    def factors_with(self, overruns: Iterable[tuple[str, float]]) -> dict[str, float]:
        """`factors` with running jobs' evidence: ``overruns`` are (user, log of elapsed / predicted)
        of running jobs that have outrun their claim (`Overruns`), each a lower bound on the ratio
        the job will finish with. A user's factor is the larger of `factor` and the geometric mean
        of their ratios (their own, else their account's, as `factor`) with those lower bounds,
        acted on past the same noise bar at that count: a job claimed at 1 s that has run 600 s
        counts against the user's waiting jobs before it ends, and honest users' runs, within
        the noise of their claims, never reach it."""
        out = self.factors()
        logs: dict[str, list[float]] = {}
        for user, lr in overruns:
            logs.setdefault(user, []).append(lr)
        if not logs:
            return out
        for u, lb in logs.items():
            r = [*(self._ratios(u) or ()), *lb]
            f = math.exp(sum(r) / len(r))
            if f >= self.bar(len(r)) and f > out.get(u, 1.0):
                out[u] = f
        return {u: out[u] for u in sorted(out)}


class Overruns:
    """The running jobs that have outrun their predicted run time beyond the noise of one honest
    job (elapsed at least `TrustBook.bar` (1) x predicted, 3.3x), kept as the running set changes:
    each job's due time (start + bar x predicted) in a heap, so a slot looks only at the jobs
    that came due. ``update`` takes the slot's running jobs (objects with ``user``,
    ``start_time``, ``predicted_run``: `lyasched.policy.snapshot.RunningObs`, from Slurm or the
    simulator alike) and the time; it answers (user, log of elapsed / predicted) per overrun.

    ``told`` fixes, for the object's life, who finds the running jobs not in the last call's:
    False (the default), ``update`` does, from the ids of the whole set; True, the caller gives
    them as ``fresh`` whenever the set changes (`lyasched.policy.snapshot.SlotStateBuilder` knows
    them from its views), and the set's ids are taken only when a job comes due or the heap is
    pruned. The two answer alike; a call in the other mode raises ValueError (a finding call
    after a told one would push every running job into the heap again)."""

    def __init__(self, params: TrustParams | None = None, *, told: bool = False) -> None:
        self.bar = TrustBook(params or TrustParams()).bar(1)
        self.told = told
        self._last: Sequence[Any] | None = None
        self._alive: set[int] | None = set()  # ids of the last running set's jobs (None: not taken yet, `_ids`)
        self._heap: list[tuple[float, int, Any]] = []  # (due time, sequence, job)
        self._due: dict[int, Any] = {}  # id -> running job past its due time
        self._seq = 0

    def update(self, running: Sequence[Any], now: float,
               fresh: Sequence[Any] | None = None) -> tuple[tuple[str, float], ...]:
        """``fresh``: the jobs of ``running`` not in the last call's, in their order; given by a
        ``told`` object's caller whenever ``running`` is not the last call's object, never to the
        other kind."""
        if fresh is not None and not self.told:
            raise ValueError("Overruns: `fresh` given to an Overruns that finds new jobs itself (make it with told=True)")
        if running is not self._last:
            ended = True
            if fresh is None and self.told:
                raise ValueError("Overruns: a told Overruns needs `fresh` whenever the running set changes")
            if fresh is None:
                cur = set(map(id, running))
                fresh = in_order(running, cur.difference(self._alive or ()))
                ended = self._alive is None or len(self._alive) > len(cur) - len(fresh)
                self._alive = cur
            else:
                self._alive = None  # (`_ids`)
            for o in fresh:
                p = o.predicted_run
                if p > 0 and math.isfinite(p):  # nan / unknown: no claim to outrun
                    self._seq += 1
                    heapq.heappush(self._heap, (o.start_time + self.bar * p, self._seq, o))
            self._last = running
            if self._due and ended:  # those that ended are not due any more
                alive = self._ids()
                for k in [k for k in self._due if k not in alive]:
                    del self._due[k]
            if len(self._heap) > 4 * len(running) + 64:  # drop the jobs gone
                alive = self._ids()
                self._heap = [e for e in self._heap if id(e[2]) in alive]
                heapq.heapify(self._heap)
        heap = self._heap
        while heap and heap[0][0] <= now:
            o = heapq.heappop(heap)[2]
            if id(o) in self._ids():
                self._due[id(o)] = o
        return tuple((o.user, math.log(max(now - o.start_time, 0.0) / o.predicted_run))
                     for o in self._due.values() if now > o.start_time)

    def _ids(self) -> set[int]:
        """The ids of the last running set's jobs (held alive: in the heap or ``_due``)."""
        if self._alive is None:
            self._alive = set(map(id, self._last or ()))
        return self._alive


def in_order(items: Sequence[Any], ids: set[int]) -> list[Any]:
    """The items whose id() is in ``ids``, in their order in ``items``, each once: walked from the
    end, where a running set's new jobs usually are (a replay appends its starts), and stopped
    when all are found."""
    want, out = set(ids), []
    for o in reversed(items):
        if not want:
            break
        if id(o) in want:
            want.discard(id(o))
            out.append(o)
    out.reverse()
    return out


def known_scale(known_over_claim: float, params: TrustParams | None = None) -> float:
    """A claim far below what is already known of the job (its model's shared profile, the FLOP
    estimate): ``known_over_claim`` = that estimate / the claim. Far below is beyond honest noise
    after one job (`TrustBook.bar(1)`, 3.3x); the claim is then replaced by the estimate (the
    scale returned), else kept (1)."""
    b = TrustBook(params or TrustParams()).bar(1)
    return known_over_claim if known_over_claim >= b and math.isfinite(known_over_claim) else 1.0


def scaled_row(row: np.ndarray, factor: float, time_limit: float) -> np.ndarray:
    """A row of predicted run times times ``factor``, at most the time limit, never below the
    row itself (a claim already above the limit stays as claimed)."""
    out = row * factor
    if math.isfinite(time_limit):
        out = np.minimum(out, time_limit)
    return np.maximum(out, row)


def distrusted(w: WaitingJob, factor: float) -> WaitingJob:
    """A waiting job as predicted with its user's trust factor (``factor`` >= 1)."""
    if factor <= 1.0:
        return w
    one = scaled_row(w.run_one_node, factor, w.time_limit)
    multi = scaled_row(w.run_multi_node, factor, w.time_limit)
    best0, best1 = w.best_run, float(min(one.min(), multi.min()))
    scale = best1 / best0 if best0 > 0 and math.isfinite(best0) and math.isfinite(best1) else factor
    return replace(w, run_one_node=one, run_multi_node=multi, work=w.work * scale)


def distrusted_movable(m: MovableJob, factor: float, time_left: float = math.inf) -> MovableJob:
    """A running job as a moving policy sees it (`MovableJob`), its remaining rows and work as
    predicted with ``factor`` (>= 1): at most ``time_left`` (to its time limit), never below the
    rows themselves."""
    if factor <= 1.0 or m.remaining_one_node is None or m.remaining_multi_node is None:
        return m
    one = scaled_row(m.remaining_one_node, factor, time_left)
    multi = scaled_row(m.remaining_multi_node, factor, time_left)
    b0 = float(min(m.remaining_one_node.min(), m.remaining_multi_node.min()))
    b1 = float(min(one.min(), multi.min()))
    scale = b1 / b0 if b0 > 0 and math.isfinite(b0) and math.isfinite(b1) else factor
    return replace(m, remaining_one_node=one, remaining_multi_node=multi, work_left=m.work_left * scale)
