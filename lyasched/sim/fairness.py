"""Per-tenant figures of a replay: what each tenant got against what it was entitled to.

The tenant of a job is its ``user`` (a trace's ``user`` or ``cluster`` column). A job has
demand from its submission to its end: the GPUs it holds while running, the GPUs it asked for
while waiting. Entitlement is that demand water-filled by shares over the cluster at each
moment (`lyasched.policy.tenants`, the same ledger the simulator hands the policies), so a
tenant is entitled only while it has work waiting or running. docs/model.md, section 5.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from lyasched.policy.tenants import TenantLedger
from lyasched.sim.simulator import SimResult


def tenant_ledger(res: SimResult, shares: Mapping[str, float] | None = None) -> TenantLedger:
    """The run's events replayed through a ledger: every job's waits and segments, in time order."""
    total = res.cluster.total_gpus
    ev: list[tuple[float, int, str, float, float]] = []  # (time, order, tenant, d held, d asked)
    for r in res.records:
        k, req = r.job.user, float(min(r.job.requested_gpus, total))
        t0 = r.job.submit_time
        ev.append((t0, 1, k, 0.0, req))
        for s in r.segments:
            ev.append((s.start, 1, k, float(s.gpus), -req))
            ev.append((s.end, 0, k, -float(s.gpus), req))
        if r.segments:
            ev.append((r.end, 0, k, 0.0, -req))  # finished: the last segment's end asks for nothing
    ev.sort(key=lambda e: (e[0], e[1]))
    led = TenantLedger(capacity=float(total), shares=dict(shares or {}))
    for t, _, k, dh, da in ev:
        led.advance(t)
        if dh:
            led.hold(k, dh)
        if da:
            led.ask(k, da)
    return led


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
