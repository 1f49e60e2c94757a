"""A what-if on the site's typed nodes (docs/whatif.md, "GPU types").

The replay runs on the simulator's typed cluster (`lyasched.sim.hetero.TypedCluster`: the node
groups of ``scontrol show node``, or ``--cluster``). Truth stays the record: a job runs exactly as
long as it did on the GPU type its last run had (sacct's ``AllocTRES=...,gres/gpu:a100=4``) and
its recorded count; on another type it runs at that type's speed by the roofline
(`lyasched.costmodel.roofline`). The simulator's profiles are the model library's V100 figures,
so each job's iterations are solved on its recorded type (`on_recorded_type`), not on the base
type. A job whose request named a type (``ReqTRES``) runs on that type only; one that named none
may run on any. A record without a type on a typed site is taken to have run on the type with the
most GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.jobspec import Job
from lyasched.costmodel.roofline import lookup
from lyasched.sim import Simulation
from lyasched.sim.hetero import TypedCluster, parse_cluster_spec
from lyasched.whatif.history import HistoryJob

BASE = "v100"  # the type the model library's profiles were measured on (lyasched.sim.models)


class TypedHistoryError(ValueError):
    """A recorded job that the typed cluster cannot hold as it ran (one line)."""


@dataclass(frozen=True)
class TypedSite:
    cluster: TypedCluster
    ran_on: tuple[str, ...]  # per history job: the type its last run had (the cluster's name for it)
    allowed: dict[str, tuple[str, ...]]  # replay job id (t<k>) -> the one type its request named

    @property
    def spec(self) -> ClusterSpec:
        """The replay's plain cluster (what the trace's profiles are solved on before the types)."""
        return ClusterSpec(nodes=self.cluster.nodes, gpus_per_node=max(self.cluster.node_gpus))

    def gpus_per_node(self, gpu_type: str) -> int:
        return max(g.gpus_per_node for g in self.cluster.groups if g.gpu_type == gpu_type)


def typed_site(hist: Sequence[HistoryJob], spec: str) -> TypedSite:
    """The typed replay of ``hist`` on ``spec`` (``a100:2x4,t4:1x4``); ValueError (one line) on a
    typo or unknown type in ``spec``, `TypedHistoryError` when a job's recorded type is on no node
    of it or its recorded count does not fit that type's nodes."""
    cl = parse_cluster_spec(spec, base=BASE)
    if not isinstance(cl, TypedCluster):
        raise ValueError(f"--cluster {spec!r}: expected typed node groups TYPE:NODESxGPUS,..., e.g. a100:2x8,t4:6x4")
    per_type = {t: sum(g.nodes * g.gpus_per_node for g in cl.groups if g.gpu_type == t) for t in cl.types}
    default = max(cl.types, key=lambda t: per_type[t])
    ran: list[str] = []
    allowed: dict[str, tuple[str, ...]] = {}
    for k, j in enumerate(hist):
        name = j.gpu_types.split(",")[0].strip()
        try:
            t = lookup(name).name if name else default
            asked = lookup(j.asked_type).name if j.asked_type else ""
        except ValueError as e:
            raise TypedHistoryError(f"job {j.job_id}: {e}") from None
        for x in {t, asked} - {""}:
            if x not in per_type:
                raise TypedHistoryError(f"job {j.job_id} ran on GPU type {x}, which no node of {cl.describe()} has")
        if j.gpus > per_type[t]:
            raise TypedHistoryError(f"job {j.job_id} used {j.gpus} {t} GPUs; {cl.describe()} has {per_type[t]}")
        ran.append(t)
        if asked:
            allowed[f"t{k}"] = (asked,)
    return TypedSite(cl, tuple(ran), allowed)


def simulation(jobs: Sequence[Job], site: TypedSite, **kw) -> Simulation:
    """The typed Simulation of ``jobs`` (the trace's jobs, replay ids t<k>)."""
    return Simulation(list(jobs), site.spec, typed=site.cluster, gpu_types=site.allowed, **kw)


def unit_on(sim: Simulation, i: int, gpu_type: str, gpus_per_node: int) -> float:
    """Job i's true seconds per iteration (before its factor) on its requested count of ``gpu_type``,
    packed on one node when it fits (as the trace's rows are solved)."""
    j = sim.jobs[i]
    g = j.requested_gpus
    return sim.true_left(i, g, g > gpus_per_node, 1.0, None, gpu_type) / (float(sim.factors[i]) * j.iterations)


def on_recorded_type(sim: Simulation, site: TypedSite, index: Mapping[str, int], target: Mapping[str, float]) -> list[Job]:
    """``sim``'s jobs with iterations solved so that each runs ``target[job id]`` seconds (before
    its factor) on its recorded count of its recorded type."""
    out = []
    for i, j in enumerate(sim.jobs):
        t = site.ran_on[index[j.job_id]]
        unit = unit_on(sim, i, t, site.gpus_per_node(t))
        if not (math.isfinite(unit) and unit > 0):
            raise TypedHistoryError(f"job {j.job_id}: its recorded {j.requested_gpus} {t} GPUs cannot hold its "
                                    "replayed profile's batch")
        out.append(replace(j, iterations=max(1, int(round(target[j.job_id] / unit)))))
    return out
