"""Fairshare: Slurm's multifactor priority (classic fair-share factor and age) with EASY backfill.

What a site runs today when it shares GPUs between users: the reference the tenant-aware
policies are measured against (benchmarks/fairness.py). docs/baselines.md gives the formula, the
weights and where it departs from Slurm.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

from lyasched.policy.backfill import Backfill
from lyasched.policy.common import Queue, SlotState
from lyasched.policy.state import Capabilities
from lyasched.policy.tenants import TenantBook

DAY = 86400.0


def usage_before(book: TenantBook, dt: float) -> dict[str, float]:
    """Each tenant's decayed usage ``dt`` seconds before the book, had it held its GPUs now
    throughout (`lyasched.policy.tenants.decayed` run backwards)."""
    lam = math.log(2.0) / book.half_life
    e = math.exp(lam * dt)
    if book.usage is None:
        raise ValueError("the tenant book keeps no usage: a policy that reads it declares Capabilities.reads_tenant_usage")
    return {k: max(0.0, u * e - book.held.get(k, 0.0) * (e - 1.0) / lam) for k, u in book.usage.items()}


def fairshare_factors(book: TenantBook | None, tenants: Sequence[str], usage: Mapping[str, float] | None = None) -> np.ndarray:
    """Slurm's classic fair-share factor F = 2^(-U/S) of each of ``tenants``, every tenant an
    association directly under root: U its decayed usage (``usage``, else the book's) over all
    tenants' (0 when none has any), S its share over all tenants' shares (a missing share is 1).
    The tenants counted are those in the book and those asked about. No book: 1 for all (the
    factor then orders nothing)."""
    if book is None:
        return np.ones(len(tenants))
    use = book.usage if usage is None else usage
    if use is None:
        raise ValueError("the tenant book keeps no usage: a policy that reads it declares Capabilities.reads_tenant_usage")
    names = set(book.shares) | set(book.received) | set(use) | set(tenants)
    total_share = math.fsum(max(float(book.shares.get(k, 1.0)), 0.0) for k in names)  # a set: fsum, not its order
    total_use = sum(use.values())
    out = np.empty(len(tenants))
    for i, k in enumerate(tenants):
        s = max(float(book.shares.get(k, 1.0)), 0.0) / total_share if total_share > 0 else 0.0
        u = use.get(k, 0.0) / total_use if total_use > 0 else 0.0
        out[i] = 0.0 if s <= 0 else 2.0 ** (-u / s)
    return out


class FairShare(Backfill):
    """Jobs ordered by Slurm's multifactor priority, then EASY backfill on that order.

    priority = weight_fairshare x 2^(-U/S) + weight_age x min(wait, max_age) / max_age, ties by
    submit order. U is the tenant's GPU-seconds held, decayed with a 7-day half-life
    (`TenantBook.usage`), over all tenants'. The backfill (head, shadow time, extra GPUs) is
    `Backfill`'s, on this order instead of submit order.
    """

    name = "fairshare"
    capabilities = Capabilities(reads_tenant_usage=True)  # its factor reads `TenantBook.usage`
    order_name = "priority"

    def __init__(
        self,
        seed: int = 0,
        weight_fairshare: float = 10000.0,
        weight_age: float = 1000.0,
        max_age_s: float = 7 * DAY,
        calc_period_s: float = 300.0,
    ) -> None:
        super().__init__(seed)
        if weight_fairshare < 0 or weight_age < 0 or max_age_s <= 0 or calc_period_s <= 0:
            raise ValueError("weights must be >= 0, max_age_s and calc_period_s > 0")
        self.weight_fairshare = float(weight_fairshare)
        self.weight_age = float(weight_age)
        self.max_age_s = float(max_age_s)
        self.calc_period_s = float(calc_period_s)
        self._codes: dict[str, int] = {}
        self._names: list[str] = []
        self._queue = Queue(shape=lambda w: self._job(w)[1], limit=lambda w: w.time_limit,
                            tenant=lambda w: self._code(w.user))

    def _code(self, user: str) -> int:
        c = self._codes.get(user)
        if c is None:
            c = self._codes[user] = len(self._names)
            self._names.append(user)
        return c

    def calc_time(self, now: float) -> float:
        """The last priority calculation at or before ``now`` (every ``calc_period_s``, as Slurm's
        PriorityCalcPeriod): priorities hold still between two, so a slot that started nothing
        can say when deciding again could change anything (``wake_at``)."""
        return math.floor(now / self.calc_period_s) * self.calc_period_s

    def priorities(self, state: SlotState, queue: Queue) -> np.ndarray:
        """Each waiting job's priority (positions as in ``state.waiting``), as of `calc_time`."""
        tc = self.calc_time(state.now)
        codes = queue.cols["tenant"].astype(np.intp)
        book = state.tenants
        fs = fairshare_factors(book, self._names, usage_before(book, state.now - tc) if book is not None else None)
        age = np.minimum(np.maximum(tc - queue.submit, 0.0), self.max_age_s) / self.max_age_s
        return self.weight_fairshare * fs[codes] + self.weight_age * age

    def _order(self, state: SlotState, queue: Queue) -> Sequence[int]:
        fifo = np.asarray(queue.fifo(), dtype=np.intp)
        if not len(fifo):
            return []
        prio = self.priorities(state, queue)
        return fifo[np.argsort(-prio[fifo], kind="stable")].tolist()

    def _wake_at(self, state: SlotState) -> float:  # type: ignore[override]
        """As backfill's, but no later than the next priority calculation (age grows, usage decays)."""
        return min(Backfill._wake_at(state), self.calc_time(state.now) + self.calc_period_s)

