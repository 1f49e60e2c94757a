"""THE placement shape outside the policy core: GPUs per *named* node, with its codecs.

A policy places a job as index tuples ``((node index, gpus), ...)`` over the slot's node order
(`lyasched.policy.state.Placement`); everything after the decision (records, decisions, Slurm
commands, lyastat) uses `NodePlacement`, which converts from and to each form it meets:

- index tuples and the slot's node names: `from_indices` / `to_indices`;
- the records' JSON text ``[[node, gpus], ...]``: `to_json` / `from_json`;
- what Slurm shows of a running job (node list + GPUs on each): `from_slurm`, and `nodes`,
  `per_node` (Slurm's TresPerNode: one count for every node, None when they differ);
- a hostlist (``node[1-3]``, ReqNodeList=): `hostlist` / `from_hostlist`.

A record's ``nodes`` column (the node names alone, JSON ``["node1", "node2"]``) is written and read
by `nodes_to_json` / `nodes_from_json`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class NodePlacement:
    """GPUs on each named node of one job, in order (no node twice, every count >= 1)."""

    parts: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        names = [n for n, _ in self.parts]
        if len(set(names)) != len(names):
            raise ValueError(f"a node twice in a placement: {names}")
        if any(g < 1 for _, g in self.parts):
            raise ValueError(f"a node with no GPUs in a placement: {list(self.parts)}")

    # ------------------------------------------------------------ from / to the other forms

    @classmethod
    def from_indices(cls, placement: Sequence[tuple[int, int]], names: Sequence[str]) -> NodePlacement:
        """A policy's index tuples over the slot's node order ``names``."""
        return cls(tuple((names[i], int(g)) for i, g in placement))

    def to_indices(self, index: Mapping[str, int]) -> tuple[tuple[int, int], ...]:
        """Index tuples over a slot's node order (``index``: node name -> position); nodes the slot
        does not know (drained, left the partition) are left out."""
        return tuple((index[n], g) for n, g in self.parts if n in index)

    @classmethod
    def from_slurm(cls, nodes: Sequence[str], gpus_per_node: int) -> NodePlacement:
        """What Slurm shows of a running job: its node list and the GPUs on each (TresPerNode)."""
        return cls(tuple((n, int(gpus_per_node)) for n in nodes)) if gpus_per_node > 0 else cls()

    def to_json(self) -> str:
        """The records' text form: ``[["node1", 2], ["node2", 2]]``."""
        return json.dumps([[n, g] for n, g in self.parts])

    @classmethod
    def from_json(cls, text: str | None) -> NodePlacement:
        """The records' text form back (an empty or missing column: no placement)."""
        if not text:
            return cls()
        return cls(tuple((str(n), int(g)) for n, g in json.loads(text)))

    def hostlist(self) -> str:
        """Its nodes as a Slurm hostlist (``node[1,3]``), for ReqNodeList=."""
        from lyasched.slurm.query import compress_hostlist

        return compress_hostlist(self.nodes)

    @classmethod
    def from_hostlist(cls, hostlist: str, gpus_per_node: int) -> NodePlacement:
        from lyasched.slurm.query import expand_hostlist

        return cls.from_slurm(expand_hostlist(hostlist), gpus_per_node)

    # ------------------------------------------------------------ views

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.parts)

    @property
    def gpus(self) -> int:
        return sum(g for _, g in self.parts)

    @property
    def per_node(self) -> int | None:
        """GPUs per node when every node has the same count (what Slurm can express), else None."""
        counts = {g for _, g in self.parts}
        return counts.pop() if len(counts) == 1 else None

    def __bool__(self) -> bool:
        return bool(self.parts)

    def __str__(self) -> str:
        return ",".join(f"{n}:{g}" for n, g in self.parts) or "-"


def nodes_to_json(nodes: Iterable[str]) -> str:
    """The records' ``nodes`` column: the node names as a JSON list (``["node1", "node2"]``)."""
    return json.dumps(list(nodes))


def nodes_from_json(text: str | None) -> tuple[str, ...]:
    """`nodes_to_json` back (an empty or missing column: no nodes)."""
    return tuple(str(n) for n in json.loads(text)) if text else ()
