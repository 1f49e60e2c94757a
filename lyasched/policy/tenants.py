"""Tenants: who is entitled to how much GPU-time, and how far each is behind (docs/fairness.md).

A tenant (a user, or an account when known) has a share (equal unless given). At each moment
the cluster's GPUs are split among the tenants with demand (GPUs held + GPUs asked by waiting
jobs) in proportion to their shares, water-filled: a tenant asking for less than its part gets
what it asks and leaves the rest to the others. Integrated over time this is the GPU-time a
tenant was *entitled* to; the GPU-time it held is what it *received*.

`TenantLedger` keeps both as demand changes; the simulator keeps one per replay, the live
service can keep one from its records. A `TenantBook` is its frozen copy at one slot: what a
policy reads (``SlotState.tenants``), so the policy itself stays pure and memoryless. The
measurement (`lyasched.sim.fairness`) replays a finished run's events through the same ledger.

The ledger also keeps each tenant's GPU-seconds held with a half-life decay (``usage``), the
usage Slurm's fair-share factor reads (PriorityDecayHalfLife, 7 days by default): the
``fairshare`` baseline orders jobs by it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

USAGE_HALF_LIFE_S = 7 * 86400.0  # Slurm's PriorityDecayHalfLife default (7-00:00:00)


def decayed(u: float, g: float, dt: float, half_life: float) -> float:
    """Decayed usage ``u`` after ``dt`` seconds holding ``g`` GPUs: u d + g (1 - d) / lambda, with
    d = 2^(-dt/half_life) (exact for g constant over dt, so the sum does not depend on how often
    it is taken)."""
    if dt <= 0:
        return u
    if not math.isfinite(half_life):
        return u + g * dt
    lam = math.log(2.0) / half_life
    d = math.exp(-lam * dt)
    return u * d + g * (-math.expm1(-lam * dt)) / lam


def decay_all(usage: Mapping[str, float], held: Mapping[str, float], dt: float, half_life: float) -> dict[str, float]:
    """`decayed` for every tenant of ``usage`` (holding ``held``) over the same ``dt``: the same
    values, its two exponentials taken once."""
    if dt <= 0:
        return dict(usage)
    if not math.isfinite(half_life):
        return {k: u + held.get(k, 0.0) * dt for k, u in usage.items()}
    lam = math.log(2.0) / half_life
    d = math.exp(-lam * dt)
    e = -math.expm1(-lam * dt)
    return {k: u * d + held.get(k, 0.0) * e / lam for k, u in usage.items()}


def waterfill(demand: Mapping[str, float], shares: Mapping[str, float], capacity: float) -> dict[str, float]:
    """Each tenant's part of ``capacity``: proportional to its share, capped at its demand, the
    capped tenants' rest re-split among the others (max-min fair by weight). Tenants with no
    demand get nothing; a share missing from ``shares`` is 1."""
    return waterfill_levels(demand, shares, capacity)[0]


def waterfill_levels(demand: Mapping[str, float], shares: Mapping[str, float],
                     capacity: float) -> tuple[dict[str, float], dict[str, float]]:
    """`waterfill`, and per tenant never capped (it got the rest's share, or nothing when the rest
    ran out) the largest part it was compared against: while every other demand stays, such a
    tenant's demand may move anywhere above that and the fill is the same, float for float (each
    round's sums and comparisons read only the others' demands), so a ledger need not redo it."""
    if not shares or all(v == 1.0 for v in shares.values()):
        return _waterfill_equal(demand, capacity)
    return _waterfill_weighted(demand, shares, capacity)


def _waterfill_weighted(demand: Mapping[str, float], shares: Mapping[str, float],
                        capacity: float) -> tuple[dict[str, float], dict[str, float]]:
    """`waterfill_levels` for any shares."""
    active = {k: d for k, d in demand.items() if d > 0}
    out = {k: 0.0 for k in demand}
    above: dict[str, float] = {}
    left = float(capacity)
    while active and left > 1e-12:
        w = {k: max(float(shares.get(k, 1.0)), 0.0) for k in active}
        tot = sum(w.values())
        if tot <= 0:
            break
        part = {k: left * w[k] / tot for k in active}
        for k, p in part.items():
            if p > above.get(k, -math.inf):
                above[k] = p
        capped = {k: d for k, d in active.items() if d <= part[k]}
        if not capped:
            for k in active:
                out[k] += part[k]
            break
        for k, d in capped.items():
            out[k] += d
            left -= d
            del active[k]
    return out, {k: above.get(k, 0.0) for k in active}


def _waterfill_equal(demand: Mapping[str, float], capacity: float) -> tuple[dict[str, float], dict[str, float]]:
    """`waterfill_levels` when every share is 1 (a replay's tenants, unless given shares): the
    same steps, float for float, with each round's part (``left * 1.0 / n``, the weights summing
    to n exactly) taken once instead of per tenant, the capped found and taken off in one pass (in
    the same order), and the parts compared against kept as one running maximum: a tenant never
    capped was in every round, so its largest part is the largest of all rounds."""
    ks = [k for k, d in demand.items() if d > 0]
    out = dict.fromkeys(demand, 0.0)
    top = -math.inf
    left = float(capacity)
    while ks and left > 1e-12:
        p = left * 1.0 / float(len(ks))
        if p > top:
            top = p
        keep = []
        for k in ks:
            d = demand[k]
            if d <= p:
                out[k] += d
                left -= d
            else:
                keep.append(k)
        if len(keep) == len(ks):  # none capped
            for k in ks:
                out[k] += p
            break
        ks = keep
    return out, dict.fromkeys(ks, top if top > -math.inf else 0.0)


@dataclass(frozen=True)
class TenantBook:
    """Per tenant at one moment: share, GPU-seconds received and entitled so far (all tenants
    seen), and the GPUs it holds and is entitled to now. What a policy reads; ``None`` in
    ``SlotState.tenants`` means no tenant input. The two rates let a policy tell how the book
    moves while nothing arrives, starts or ends (`at`), so it can say when deciding again could
    change anything (``wake_at``)."""

    shares: Mapping[str, float]
    received: Mapping[str, float]
    entitled: Mapping[str, float]
    held: Mapping[str, float] = field(default_factory=dict)  # GPUs held now: received grows at this rate
    rate: Mapping[str, float] = field(default_factory=dict)  # GPUs entitled now (water-filled): entitled's rate
    # GPU-seconds held, decayed with ``half_life``; None when the ledger keeps none (`TenantLedger.usage`)
    usage: Mapping[str, float] | None = field(default_factory=dict)
    half_life: float = USAGE_HALF_LIFE_S

    def at(self, dt: float) -> TenantBook:
        """The book ``dt`` seconds on, if demand does not change meanwhile."""
        rec = dict(self.received)
        ent = dict(self.entitled)
        for k, g in self.held.items():
            if g:
                rec[k] = rec.get(k, 0.0) + g * dt
        for k, e in self.rate.items():
            if e:
                ent[k] = ent.get(k, 0.0) + e * dt
        use = None if self.usage is None else decay_all(self.usage, self.held, dt, self.half_life)
        return TenantBook(self.shares, rec, ent, self.held, self.rate, use, self.half_life)

    def deficit(self, tenant: str) -> float:
        """GPU-seconds the tenant is behind its entitlement (negative: ahead)."""
        return self.entitled.get(tenant, 0.0) - self.received.get(tenant, 0.0)

    def shortfall(self, tenant: str, slack: float, pad: float) -> float:
        """The tenant's virtual queue per GPU-second it is entitled to (docs/model.md, section 5):
        max(0, deficit - slack x entitled - pad) / entitled, 0 when entitled to nothing. ``pad``
        (GPU-seconds) is what no decision could have given it sooner (a slot of the whole cluster),
        so a tenant entitled to little is not behind for having waited one slot."""
        e = self.entitled.get(tenant, 0.0)
        if e <= 0:
            return 0.0
        return max(0.0, self.deficit(tenant) - slack * e - pad) / e

    def shortfalls(self, tenants: Iterable[str], slack: float, pad: float) -> dict[str, float]:
        """`shortfall` of each tenant, in one loop (a policy asks for every waiting tenant each
        slot, where a method call per tenant was a third of the cost): the same operations, so
        the same values; a subclass that redefines `shortfall` or `deficit` gets its own."""
        if type(self).shortfall is not TenantBook.shortfall or type(self).deficit is not TenantBook.deficit:
            return {k: self.shortfall(k, slack, pad) for k in tenants}
        ent, rec = self.entitled, self.received
        out: dict[str, float] = {}
        for k in tenants:
            e = ent.get(k, 0.0)
            out[k] = 0.0 if e <= 0 else max(0.0, (e - rec.get(k, 0.0)) - slack * e - pad) / e
        return out


@dataclass
class TenantLedger:
    """Received and entitled GPU-seconds per tenant, integrated as demand changes.

    Call `advance(t)` before each change at time t (times never go back; an earlier t is
    taken as the last one), then `hold` / `ask` with signed GPU counts."""

    capacity: float
    shares: dict[str, float] = field(default_factory=dict)
    t: float = -math.inf
    held: dict[str, float] = field(default_factory=dict)
    asked: dict[str, float] = field(default_factory=dict)
    received: dict[str, float] = field(default_factory=dict)
    entitled: dict[str, float] = field(default_factory=dict)
    # GPU-seconds held, decayed (module docstring); None: not kept, for a reader that reads none
    # (a replay whose policy does not declare ``reads_tenant_usage``): its decay is a third of a step
    usage: dict[str, float] | None = field(default_factory=dict)
    half_life: float = USAGE_HALF_LIFE_S
    _rate: dict[str, float] | None = None  # entitlement rate until demand changes
    # the last fill: (demand, its rate, `waterfill_levels`' parts, the shares and capacity it read)
    _rate_of: tuple | None = None
    _names: dict[str, None] = field(default_factory=dict)  # tenants seen, in order (the demand's keys)
    _moved: set[str] = field(default_factory=set)  # tenants whose demand moved since the last fill

    def rates(self) -> dict[str, float]:
        """Each tenant's entitled GPUs now (water-filled over the demand), kept until demand changes.

        Not filled again when the only demands that moved since the last fill stayed above every
        part their tenant was compared against in it (`waterfill_levels`): the fill would be the
        same, float for float."""
        rate = self._rate
        if rate is None:
            last = self._rate_of
            if last is not None and self._same_fill(last):
                rate = self._rate = last[1]
            else:
                held, asked, names = self.held, self.asked, self._names
                if len(names) < len(held) or len(names) < len(asked):  # given at construction
                    names.update(dict.fromkeys(held))
                    names.update(dict.fromkeys(asked))
                demand = {k: held.get(k, 0.0) + asked.get(k, 0.0) for k in names}
                rate, above = waterfill_levels(demand, self.shares, self.capacity)
                self._rate = rate
                self._rate_of = (demand, rate, above, dict(self.shares), self.capacity)
                self._moved.clear()
        return rate

    def _same_fill(self, last: tuple) -> bool:
        """Whether the last fill holds for the demand now (`rates`)."""
        d0, _, above, shares, capacity = last
        if len(d0) != len(self._names) or capacity != self.capacity or shares != self.shares:
            return False
        held, asked = self.held, self.asked
        for k in self._moved:
            d = held.get(k, 0.0) + asked.get(k, 0.0)
            if d != d0[k]:
                a = above.get(k)
                if a is None or not d > a:
                    return False
        return True

    def advance(self, t: float) -> None:
        if not math.isfinite(self.t):
            self.t = t
            return
        dt = t - self.t
        if dt <= 0:
            return
        rate = self._rate
        if rate is None:
            rate = self.rates()
        held, received, entitled, usage = self.held, self.received, self.entitled, self.usage
        if usage is None:  # not kept
            for k, g in held.items():
                if g:
                    received[k] = received.get(k, 0.0) + g * dt
        else:
            self._decay(dt)
        for k, r in rate.items():
            if r:
                entitled[k] = entitled.get(k, 0.0) + r * dt
        self.t = t

    def _decay(self, dt: float) -> None:
        """`advance`'s step of ``received`` and ``usage`` (kept) over ``dt`` at the GPUs held."""
        held, received, usage = self.held, self.received, self.usage
        assert usage is not None
        if math.isfinite(self.half_life):
            lam = math.log(2.0) / self.half_life
            d = math.exp(-lam * dt)
            e = -math.expm1(-lam * dt)
        else:  # no decay (`decay_all`): u * 1.0 + g * dt / 1.0 is u + g * dt, float for float
            lam, d, e = 1.0, 1.0, dt
        if usage.keys() == held.keys():  # one loop for both (as `apply` keeps them)
            for k, g in held.items():
                if g:
                    received[k] = received.get(k, 0.0) + g * dt
                usage[k] = usage[k] * d + g * e / lam
        else:
            for k, g in held.items():
                if g:
                    received[k] = received.get(k, 0.0) + g * dt
            for k, u in usage.items():
                usage[k] = u * d + held.get(k, 0.0) * e / lam

    def hold(self, tenant: str, gpus: float) -> None:
        self.held[tenant] = self.held.get(tenant, 0.0) + gpus
        self._names.setdefault(tenant)
        self._moved.add(tenant)
        self.received.setdefault(tenant, 0.0)
        self.entitled.setdefault(tenant, 0.0)
        if self.usage is not None:
            self.usage.setdefault(tenant, 0.0)
        self._rate = None

    def ask(self, tenant: str, gpus: float) -> None:
        self.asked[tenant] = self.asked.get(tenant, 0.0) + gpus
        self._names.setdefault(tenant)
        self._moved.add(tenant)
        self.received.setdefault(tenant, 0.0)
        self.entitled.setdefault(tenant, 0.0)
        self._rate = None

    def apply(self, events: Iterable[tuple[float, str, float, float]]) -> None:
        """Events (time, tenant, change in GPUs held, change in GPUs asked), in time order: the
        one way the simulator, the measurement and the service feed a ledger."""
        # `hold` and `ask` written out (the same steps, in the same order): a replay feeds
        # hundreds of thousands of events, one method call each was a third of the cost
        held, asked, names, moved = self.held, self.asked, self._names, self._moved
        received, entitled, usage = self.received, self.entitled, self.usage
        for t, k, dh, da in events:
            if t != self.t:  # at the same time `advance` moves nothing
                self.advance(t)
            if dh:
                held[k] = held.get(k, 0.0) + dh
            if da:
                asked[k] = asked.get(k, 0.0) + da
            if dh or da:  # what `hold` and `ask` register (usage only for a hold)
                if k not in names:
                    names[k] = None
                moved.add(k)
                if k not in received:
                    received[k] = 0.0
                if k not in entitled:
                    entitled[k] = 0.0
                if dh and usage is not None and k not in usage:
                    usage[k] = 0.0
                self._rate = None

    def book(self, t: float) -> TenantBook:
        """The ledger at time t, frozen for a policy. It is extrapolated from the last change,
        not advanced there: the ledger's sums move only at events, so the book at t is the same
        however often (or seldom) books are taken in between (a replay that skips slots decides
        as one that asks every slot). The same values as ``TenantBook.at`` from the last change."""
        held, rate = dict(self.held), dict(self.rates())
        dt = t - self.t if math.isfinite(self.t) else 0.0
        rec, ent = dict(self.received), dict(self.entitled)
        if dt > 0:
            for k, g in held.items():
                if g:
                    rec[k] = rec.get(k, 0.0) + g * dt
            for k, e in rate.items():
                if e:
                    ent[k] = ent.get(k, 0.0) + e * dt
            use = None if self.usage is None else decay_all(self.usage, held, dt, self.half_life)
        else:
            use = None if self.usage is None else dict(self.usage)
        return TenantBook(dict(self.shares), rec, ent, held, rate, use, self.half_life)
