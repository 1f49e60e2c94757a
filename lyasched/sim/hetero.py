"""Typed clusters for replay: node groups of GPU types (docs/simulator.md, "GPU types").

``--cluster a100:2x8,rtx2080ti:3x8,t4:6x4`` is 2 nodes of 8 A100s, 3 of 8 RTX 2080 Tis and 6 of 4
T4s, nodes numbered in that order. A plain ``16x4`` stays an untyped cluster. A job's allowed
types come from a workload's ``gpu_types`` column (comma-separated; empty = any), the same
grammar as ``lyasub --gpu-type``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from lyasched.costmodel.cost import ClusterSpec
from lyasched.costmodel.roofline import GpuType, lookup


@dataclass(frozen=True)
class NodeGroup:
    gpu_type: str
    nodes: int
    gpus_per_node: int


@dataclass(frozen=True)
class TypedCluster:
    """Node groups, each of one GPU type; ``base`` is the type the jobs' profiles were measured on
    (the Pollux artifact's: T4) and the one a heterogeneity-unaware policy sees every GPU as."""

    groups: tuple[NodeGroup, ...]
    base: str = "t4"

    @property
    def node_types(self) -> tuple[str, ...]:
        return tuple(g.gpu_type for g in self.groups for _ in range(g.nodes))

    @property
    def node_features(self) -> tuple[frozenset[str], ...]:
        """Each node's Slurm Features, what a job's constraint names: its GPU type (as on the test clusters)."""
        return tuple(frozenset({t}) for t in self.node_types)

    @property
    def node_gpus(self) -> tuple[int, ...]:
        return tuple(g.gpus_per_node for g in self.groups for _ in range(g.nodes))

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.gpu_type for g in self.groups))

    @property
    def nodes(self) -> int:
        return sum(g.nodes for g in self.groups)

    @property
    def total_gpus(self) -> int:
        return sum(g.nodes * g.gpus_per_node for g in self.groups)

    def spec(self, base: ClusterSpec, gpu_type: str | None = None, types: Mapping[str, GpuType] | None = None) -> ClusterSpec:
        """``base``'s links on this cluster's nodes of ``gpu_type`` (None: all its nodes as one
        type, the base type's speed) with that type's memory per GPU, relative to the base type's."""
        groups = [g for g in self.groups if gpu_type is None or g.gpu_type == gpu_type]
        t = lookup(gpu_type or self.base, types)
        # ``base.gpu_mem`` is the base type's memory as the profiles count it (the Pollux profiles
        # scale memory to their largest batch): the others scale by their datasheet memory
        # scale by their datasheet memory; all nodes as one type: the largest memory of any (an
        # unaware policy sees every batch that fits somewhere; the replay fits its starts to types
        # that hold them)
        ref = lookup(self.base, types)
        mem = t.memory if gpu_type else max(lookup(x, types).memory for x in self.types)
        return replace(base, nodes=sum(g.nodes for g in groups), gpus_per_node=max(g.gpus_per_node for g in groups),
                       gpu_mem=base.gpu_mem * mem / ref.memory)

    def describe(self) -> str:
        return ",".join(f"{g.gpu_type}:{g.nodes}x{g.gpus_per_node}" for g in self.groups)


def parse_cluster_spec(text: str, types: Mapping[str, GpuType] | None = None, base: str = "t4") -> TypedCluster | tuple[int, int]:
    """``NODESxGPUS`` -> (nodes, gpus per node); ``TYPE:NODESxGPUS,...`` -> a `TypedCluster`.
    ValueError (one line) on a typo, an unknown type or a type named twice."""
    text = text.strip().lower()

    def shape(part: str) -> tuple[int, int]:
        a, sep, b = part.partition("x")
        try:
            n, g = int(a), int(b)
        except ValueError:
            n = g = 0
        if not sep or n < 1 or g < 1:
            raise ValueError(f"--cluster {text!r}: expected NODESxGPUS or TYPE:NODESxGPUS,..., e.g. 16x4 or a100:2x8,t4:6x4")
        return n, g

    if ":" not in text:
        return shape(text)
    groups: list[NodeGroup] = []
    for part in text.split(","):
        name, sep, rest = part.strip().partition(":")
        if not sep or not name:
            raise ValueError(f"--cluster {text!r}: expected TYPE:NODESxGPUS in {part!r}")
        try:
            t = lookup(name, types).name
        except ValueError as e:
            raise ValueError(f"--cluster: {e}") from None
        if any(g.gpu_type == t for g in groups):
            raise ValueError(f"--cluster {text!r}: type {t} named twice")
        groups.append(NodeGroup(t, *shape(rest.strip())))
    return TypedCluster(tuple(groups), base=lookup(base, types).name)


def parse_allowed(text: str, types: Mapping[str, GpuType] | None = None) -> tuple[str, ...]:
    """A ``gpu_types`` cell: comma-separated type names (known ones), () for an empty cell."""
    out = []
    for part in (text or "").split(","):
        if part.strip():
            out.append(lookup(part, types).name)
    return tuple(dict.fromkeys(out))
