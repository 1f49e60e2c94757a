"""The service's tenant ledger: what `replay` gives the policy (``SlotState.tenants``), kept live.

The simulator keeps a `TenantLedger` (lyasched.policy.tenants) from its own events: a job asks
for its requested GPUs from its submission until it starts, holds its GPUs while it runs, and
asks again if it is put back to wait. The service sees the same events through its slots: a job
first seen waiting asks from its Slurm submit time, a job seen running holds from its start
time, a job gone from the running set frees its GPUs at the slot that notices. The events are
applied in time order, as the simulator applies its own, and the policy gets the same frozen
`TenantBook` at each slot, so what `replay` measures is what `serve` does.

A tenant is the job's user (the simulator's too). Shares are ``[tenants] shares`` of the config;
without them, where Slurm keeps accounting, the fair-share tree admins already set (`sshare`,
read every minute by `SharesWatch`); else equal. At start the ledger is rebuilt from the service's records (every job's
submission, start, end and GPUs), so a restart does not forget who received what. Like the
simulator, the policy gets no tenant input until two tenants have been seen.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from lyasched.policy.snapshot import RunningObs
from lyasched.policy.state import WaitingJob
from lyasched.policy.tenants import TenantBook, TenantLedger
from lyasched.slurm import SlurmError
from lyasched.slurm.shares import SharesParseError, parse_sshare, sshare_command

log = logging.getLogger("lyasched.live.tenants")

META_KEY = "tenants"  # the records' meta row with the last slot's book (`lyastat --tenants`)

Event = tuple[float, int, str, float, float]  # (time, order: frees before takes, tenant, d held, d asked)


class LiveTenants:
    def __init__(self, shares: Mapping[str, float] | None = None) -> None:
        self.shares = {k: float(v) for k, v in (shares or {}).items()}
        self.ledger: TenantLedger | None = None
        self.asking: dict[str, tuple[str, float]] = {}  # Slurm id -> (tenant, GPUs asked)
        self.holding: dict[str, tuple[str, float]] = {}  # Slurm id -> (tenant, GPUs held)

    def set_shares(self, shares: Mapping[str, float]) -> None:
        """New shares (Slurm's fair-share tree changed): entitlements accrue at them from now on."""
        self.shares = {k: float(v) for k, v in shares.items()}
        if self.ledger is not None:
            self.ledger.shares = dict(self.shares)

    def _apply(self, events: list[Event]) -> None:
        assert self.ledger is not None
        self.ledger.apply((t, k, dh, da) for t, _, k, dh, da in sorted(events, key=lambda e: (e[0], e[1])))

    def rebuild(self, rows: Iterable[Mapping[str, Any]], capacity: float) -> None:
        """The ledger of the records' past: finished jobs' whole lives (the live ones are taken
        up by the first `book`, from what Slurm shows then)."""
        self.ledger = TenantLedger(capacity=float(capacity), shares=dict(self.shares))
        ev: list[Event] = []
        for r in rows:
            user, t0, g = str(r.get("user") or ""), r.get("submit_time"), r.get("gpus")
            start, end = r.get("started"), r.get("ended")
            if r.get("state") != "finished" or not user or t0 is None or not g or start is None or end is None:
                continue
            req = float(min(g, capacity))
            ev += [(float(t0), 1, user, 0.0, req), (float(start), 1, user, float(g), -req),
                   (float(end), 0, user, -float(g), 0.0)]
        self._apply(ev)

    def book(self, now: float, capacity: float, waiting: Sequence[WaitingJob],
             running: Sequence[RunningObs]) -> TenantBook | None:
        """This slot's book (None until two tenants have been seen): the events since the last
        slot applied at their times, then the ledger at ``now``."""
        if self.ledger is None:
            self.ledger = TenantLedger(capacity=float(capacity), shares=dict(self.shares))
        ev: list[Event] = []
        wait = {w.job_id: w for w in waiting}
        run = {r.job_id: r for r in running}
        for jid, r in run.items():
            if jid in self.holding:
                continue
            asked = self.asking.pop(jid, None)
            start = r.start_time if math.isfinite(r.start_time) else now
            ev.append((start, 1, r.user, float(r.gpus), -asked[1] if asked else 0.0))
            self.holding[jid] = (r.user, float(r.gpus))
        for jid in [j for j in self.holding if j not in run]:  # finished, or put back to wait
            k, g = self.holding.pop(jid)
            ev.append((now, 0, k, -g, 0.0))
        # a long queue is mostly the same jobs slot after slot: the new and the gone are found by set
        # operations on the keys, then taken in the dicts' order, as a walk over every job would
        new = wait.keys() - self.asking.keys() - self.holding.keys()
        for jid, w in (wait.items() if new else ()):
            if jid in new:
                req = float(min(w.requested_gpus, capacity))
                ev.append((w.submit_time, 1, w.user, 0.0, req))
                self.asking[jid] = (w.user, req)
        gone = self.asking.keys() - wait.keys() - run.keys()
        for jid in [j for j in self.asking if j in gone] if gone else ():  # cancelled while waiting
            k, req = self.asking.pop(jid)
            ev.append((now, 0, k, 0.0, -req))
        self._apply(ev)
        book = self.ledger.book(now)
        return book if len([k for k in book.received if k]) >= 2 else None


def finished_rows(db: Any) -> list[dict]:
    """The records `LiveTenants.rebuild` reads: finished jobs only, its columns only, in
    `records.list_jobs`'s order (a long held queue's rows, predictions included, are not read)."""
    sql = ("select user, submit_time, gpus, started, ended, state from jobs where state = 'finished' "
           "order by submit_time, cast(slurm_id as integer)")
    return list(db.query(sql))


class SharesWatch:
    """Slurm's fair-share tree as the tenants' shares: ``run(argv) -> stdout`` (the backend's
    query runner), read at most every ``refresh`` seconds; ``accounting()`` asked first (no
    store, no sshare call). A failed read keeps the shares read before (equal if none)."""

    def __init__(self, run: Callable[[list[str]], str], accounting: Callable[[], bool], refresh: float = 60.0) -> None:
        self.run, self.accounting, self.refresh = run, accounting, refresh
        self.shares: dict[str, float] | None = None
        self._read_at = -math.inf
        self.off = False

    def read(self, now: float) -> dict[str, float] | None:
        """The users' shares, or None (off, or never read)."""
        if self.off or now - self._read_at < self.refresh:
            return self.shares
        self._read_at = now
        if self.shares is None and not self.accounting():
            log.info("no accounting store: Slurm's fair-share tree is not read (tenants' shares equal)")
            self.off = True
            return None
        try:
            got = parse_sshare(self.run(sshare_command()))
        except (SlurmError, SharesParseError) as e:
            log.warning("Slurm's fair-share tree not read (%s): %s", str(e).splitlines()[0][:200] if str(e) else e,
                        "shares as before" if self.shares is not None else "tenants' shares equal")
            return self.shares
        if got != self.shares:
            log.info("tenants' shares from Slurm's fair-share tree: %s",
                     ", ".join(f"{k}={v:.3g}" for k, v in sorted(got.items())))
        self.shares = got
        return got


def book_json(book: TenantBook, now: float) -> str:
    """The book as `lyastat --tenants` reads it from the records."""
    names = sorted(set(book.received) | set(book.entitled))
    return json.dumps({"time": now, "tenants": {k: {
        "share": float(book.shares.get(k, 1.0)), "entitled_gpu_s": round(book.entitled.get(k, 0.0), 3),
        "received_gpu_s": round(book.received.get(k, 0.0), 3)} for k in names}})
