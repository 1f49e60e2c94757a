"""Per-tenant figures of a replay: what each tenant got against what it was entitled to.

The tenant of a job is its ``user`` (a trace's ``user`` or ``cluster`` column). A job has
demand from its submission to its end: the GPUs it holds while running, the GPUs it asked for
while waiting. Entitlement is that demand water-filled by shares over the cluster at each
moment (`lyasched.policy.tenants`, the same ledger the simulator hands the policies), so a
tenant is entitled only while it has work waiting or running. docs/model.md, section 5.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from lyasched.policy.tenants import TenantLedger
from lyasched.sim.simulator import SimResult


Runs = Sequence[tuple[float, float, float]]  # (start, end, GPUs) of each run of a job


def ledger_of(jobs: Iterable[tuple[str, float, float, Runs]], capacity: float,
              shares: Mapping[str, float] | None = None) -> TenantLedger:
    """Jobs (tenant, arrival, GPUs asked, runs in order) replayed through a ledger, in time order:
    a job asks from its arrival until its first run and between runs, holds during each, and asks
    for nothing after its last (a replay's records, or what a cluster's accounting recorded)."""
    ev: list[tuple[float, int, str, float, float]] = []  # (time, order, tenant, d held, d asked)
    for k, t0, req, runs in jobs:
        req = float(min(req, capacity))
        ev.append((t0, 1, k, 0.0, req))
        for start, end, g in runs:
            ev.append((start, 1, k, float(g), -req))
            ev.append((end, 0, k, -float(g), req))
        if runs:
            ev.append((runs[-1][1], 0, k, 0.0, -req))  # finished: the last run's end asks for nothing
    ev.sort(key=lambda e: (e[0], e[1]))
    led = TenantLedger(capacity=float(capacity), shares=dict(shares or {}))
    led.apply((t, k, dh, da) for t, _, k, dh, da in ev)
    return led


def tenant_ledger(res: SimResult, shares: Mapping[str, float] | None = None) -> TenantLedger:
    """The replay's jobs (tenant = user) through `ledger_of`."""
    jobs = ((r.job.user, r.job.submit_time, r.job.requested_gpus, [(s.start, s.end, s.gpus) for s in r.segments])
            for r in res.records)
    return ledger_of(jobs, float(res.cluster.total_gpus), shares)


def tenant_summary(res: SimResult, shares: Mapping[str, float] | None = None) -> tuple[dict, dict]:
    """(``tenants``, ``fairness``) of `replay --json`.

    tenants: {name: jobs, avg_jct_s, avg_slowdown (JCT over the job's best true run), gpu_s
    (received), entitled_gpu_s}; fairness: worst_share_ratio (the lowest received / entitled
    over tenants entitled to anything) and its tenant, worst / best tenant average slowdown.
    """
    led = tenant_ledger(res, shares)
    groups: dict[str, list] = {}
    for r in res.records:
        groups.setdefault(r.job.user, []).append(r)
    tenants: dict[str, dict] = {}
    for k in sorted(groups):
        recs = groups[k]
        jct = np.array([r.jct for r in recs])
        sd = jct / np.maximum(np.array([r.best_true_run for r in recs]), 1e-9)
        tenants[k] = {
            "jobs": len(recs),
            "avg_jct_s": float(jct.mean()),
            "avg_slowdown": float(sd.mean()),
            "gpu_s": float(led.received.get(k, 0.0)),
            "entitled_gpu_s": float(led.entitled.get(k, 0.0)),
        }
    ratios = {k: v["gpu_s"] / v["entitled_gpu_s"] for k, v in tenants.items() if v["entitled_gpu_s"] > 0}
    worst = min(ratios, key=lambda k: (ratios[k], k)) if ratios else ""
    sds = [v["avg_slowdown"] for v in tenants.values()]
    fairness = {
        "tenants": len(tenants),
        "worst_share_ratio": float(ratios[worst]) if worst else 1.0,
        "worst_share_tenant": worst,
        "worst_tenant_slowdown": float(max(sds)),
        "best_tenant_slowdown": float(min(sds)),
    }
    return tenants, fairness
