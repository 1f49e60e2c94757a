"""The cluster a what-if replays on: given, read from `scontrol show node`, or inferred from
the records. The replay's cluster is homogeneous (nodes x GPUs per node); from scontrol it also
carries the site's typed node groups (`typed_cluster_spec`) for a typed replay."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from lyasched.costmodel.cost import ClusterSpec
from lyasched.slurm import SlurmError
from lyasched.slurm.query import NodeInfo
from lyasched.store.placement import NodePlacement
from lyasched.whatif.history import HistoryJob


@dataclass(frozen=True)
class SiteCluster:
    spec: ClusterSpec
    source: str  # "options", "scontrol" or "records"
    how: str  # one sentence: where nodes and GPUs per node came from
    typed: str = ""  # the nodes' typed groups in the simulator's --cluster grammar (a100:2x4,t4:1x4); "" untyped/unknown


class ClusterUnknown(ValueError):
    """The records name no nodes and neither the options nor scontrol say what the cluster is."""


def _peak(events: list[tuple[float, int]]) -> int:
    """Highest running sum of (time, +/-n) events; ends sort before starts at equal times."""
    events.sort()
    cur = peak = 0
    for _, d in events:
        cur += d
        peak = max(peak, cur)
    return peak


def infer_cluster(jobs: Sequence[HistoryJob]) -> SiteCluster:
    """Nodes = distinct nodes that ran a GPU job; GPUs per node = the most GPUs ever in use at
    once on one node (a job on N nodes counts ceil(GPUs / N) on each). Without node names
    (anonymised records): GPUs per node = the largest per-node share of any job and nodes =
    enough for the peak of GPUs in use at once. Always enough for the largest job."""
    per_node: dict[str, list[tuple[float, int]]] = defaultdict(list)
    total: list[tuple[float, int]] = []
    share_max = 1
    biggest = 1
    for j in jobs:
        biggest = max(biggest, j.gpus)
        for r in j.runs:
            share = math.ceil(r.gpus / max(1, r.nnodes))
            share_max = max(share_max, share)
            total += [(r.start, r.gpus), (r.end, -r.gpus)]
            ran_on = NodePlacement.from_hostlist(r.nodelist, share) if r.nodelist and r.nodelist != "None assigned" \
                else NodePlacement()
            for name, g in ran_on.parts:
                per_node[name] += [(r.start, g), (r.end, -g)]
    peak_total = _peak(total)
    if per_node:
        gpn = max(_peak(ev) for ev in per_node.values())
        nodes = len(per_node)
        how = (f"inferred from the records: {nodes} nodes ran GPU jobs, at most {gpn} GPUs were in use "
               "at once on one node")
    else:
        gpn = share_max
        nodes = math.ceil(peak_total / gpn)
        how = (f"inferred from the records (no node names): at most {gpn} GPUs per node in one job, "
               f"{peak_total} GPUs in use at once")
    nodes = max(nodes, math.ceil(peak_total / gpn), math.ceil(biggest / gpn), 1)
    return SiteCluster(ClusterSpec(nodes=nodes, gpus_per_node=gpn), "records", how)


def cluster_from_nodes(nodes: Sequence[NodeInfo], partition: str | None = None) -> SiteCluster | None:
    """GPU nodes of `scontrol show node` (of ``partition`` if given): GPUs per node = the most
    on one node, nodes = enough for all their GPUs. None when no node has a GPU."""
    gpu_nodes = [n for n in nodes if n.gpus_total > 0 and (partition is None or partition in n.partitions)]
    if not gpu_nodes:
        return None
    gpn = max(n.gpus_total for n in gpu_nodes)
    total = sum(n.gpus_total for n in gpu_nodes)
    count = math.ceil(total / gpn)
    how = f"from scontrol show node: {len(gpu_nodes)} GPU nodes, {total} GPUs"
    if count != len(gpu_nodes):
        how += f" (uneven: replayed as {count} x {gpn})"
    return SiteCluster(ClusterSpec(nodes=count, gpus_per_node=gpn), "scontrol", how,
                       typed_cluster_spec(gpu_nodes))


def typed_cluster_spec(nodes: Sequence[NodeInfo], partition: str | None = None) -> str:
    """The site's GPU nodes (of ``partition`` if given) as typed node groups in the simulator's
    ``--cluster`` grammar, ``TYPE:NODESxGPUS`` comma-separated in Slurm's order of first appearance
    (``a100:2x4,t4:1x4``); nodes of one type with different GPU counts are separate groups, untyped
    nodes of a typed site are type ``gpu``. "" when no node names a type (the plain spec holds)."""
    gpu_nodes = [n for n in nodes if n.gpus_total > 0 and (partition is None or partition in n.partitions)]
    if not any(n.gpu_type for n in gpu_nodes):
        return ""
    groups: dict[tuple[str, int], int] = {}
    for n in gpu_nodes:
        key = (n.gpu_type or "gpu", n.gpus_total)
        groups[key] = groups.get(key, 0) + 1
    return ",".join(f"{t}:{count}x{g}" for (t, g), count in groups.items())


def given_cluster(nodes: int, gpus_per_node: int) -> SiteCluster:
    return SiteCluster(ClusterSpec(nodes=nodes, gpus_per_node=gpus_per_node), "options",
                       f"given: --nodes {nodes} --gpus-per-node {gpus_per_node}")


def has_node_names(jobs: Sequence[HistoryJob]) -> bool:
    """Whether any run of any job names the nodes it ran on (sacct's NodeList)."""
    return any(r.nodelist and r.nodelist != "None assigned" for j in jobs for r in j.runs)


def choose_cluster(
    jobs: Sequence[HistoryJob],
    nodes: int | None,
    gpus_per_node: int | None,
    scontrol: Callable[[], SiteCluster | None] | None,
    say: Callable[[str], None] = lambda s: None,
    source: str = "sacct",
) -> SiteCluster:
    """The replay cluster: ``--nodes``/``--gpus-per-node`` first; what neither gives comes from
    ``scontrol`` (a call reading `scontrol show node`, None where there is no Slurm to ask) or,
    when the records name the nodes jobs ran on, from the records. Records without any node name
    (no NodeList) say too little about the cluster: then the options or scontrol must, else
    ClusterUnknown names the options to give."""
    named = has_node_names(jobs)
    site = infer_cluster(jobs) if named else None
    if scontrol is not None and (nodes is None or gpus_per_node is None):
        try:
            site = scontrol() or site
        except (SlurmError, ValueError, OSError) as e:  # scontrol failing: fall back, and say so
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            say(f"scontrol show node failed ({first}); "
                + ("cluster inferred from the records" if named else "no NodeList in the records either"))
    if site is None and (nodes is None or gpus_per_node is None):
        lack = " and ".join(o for o, v in (("--nodes", nodes), ("--gpus-per-node", gpus_per_node)) if v is None)
        raise ClusterUnknown(f"{source}: the records name no node a job ran on (no NodeList), so the cluster's size "
                             f"is unknown: give {lack}" + (" (or run where scontrol show node works)"
                                                           if scontrol is None else ""))
    if nodes is None and gpus_per_node is None:
        return site  # type: ignore[return-value]
    given = given_cluster(nodes or site.spec.nodes, gpus_per_node or site.spec.gpus_per_node)  # type: ignore[union-attr]
    if site is not None and (nodes is None or gpus_per_node is None):
        opt = f"--nodes {nodes}" if nodes else f"--gpus-per-node {gpus_per_node}"
        given = replace(given, how=f"{opt} given; the rest {site.how}")
    return given
