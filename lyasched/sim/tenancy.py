"""Multi-tenant workloads: several tenants, each with its own synthetic job stream, on one cluster.

Each tenant's jobs come from a ``synth:`` spec (lyasched.sim.synth) generated on the shared
cluster, so its ``load`` is that tenant's offered load there: a heavy tenant is one with most of
the jobs and load, a bursty one uses ``arrival=bursts``, a tenant of large jobs a large
``max_req``. Jobs are renamed ``TENANT-ID`` and their ``user`` is the tenant. Shares (equal
unless given) go to the simulator and the fairness figures (lyasched.sim.fairness).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from lyasched.costmodel.cost import ClusterSpec
from lyasched.sim.synth import synth_workload
from lyasched.sim.workloads import Workload


@dataclass(frozen=True)
class Tenant:
    name: str
    spec: str  # a synth: spec; its nodes/gpn are replaced by the shared cluster's
    share: float = 1.0


def tenant_workload(name: str, tenants: Sequence[Tenant], *, nodes: int, gpus_per_node: int,
                    seed: int = 0) -> tuple[Workload, dict[str, float]]:
    """The tenants' jobs merged on a ``nodes`` x ``gpus_per_node`` cluster, and their shares.
    Tenant k's jobs are generated from seed ``seed * 1000 + k``: same seed, same jobs."""
    if len({t.name for t in tenants}) != len(tenants):
        raise ValueError("tenant names must differ")
    jobs, ends = [], {}
    for k, t in enumerate(tenants):
        w = synth_workload(t.spec, seed=seed * 1000 + k, nodes=nodes, gpus_per_node=gpus_per_node)
        for j in w.jobs:
            jid = f"{t.name}-{j.job_id}"
            jobs.append(replace(j, job_id=jid, user=t.name))
            if j.job_id in w.end_fraction:
                ends[jid] = w.end_fraction[j.job_id]
    cluster = ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node)
    desc = "; ".join(f"{t.name} (share {t.share:g}): {t.spec}" for t in tenants)
    shares = {t.name: float(t.share) for t in tenants}
    return Workload(name=name, jobs=tuple(jobs), cluster=cluster, description=desc, end_fraction=ends), shares
