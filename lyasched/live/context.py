"""What one slot of the live service carries from reading Slurm to recording the slot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from lyasched.costmodel.cost import ClusterSpec, CostModel

if TYPE_CHECKING:
    from lyasched.live.report import SlotReport


@dataclass
class SlotContext:
    """One slot's scratch: made at its start, dropped at its end (nothing of it outlives the slot
    except what is written to the records)."""

    now: float
    report: "SlotReport"
    device: str = "gpu"  # cost-table device key: the config's, else the nodes' GPU type
    cluster: ClusterSpec | None = None
    cost: CostModel | None = None
    names: list[str] = field(default_factory=list)  # node names, index = node index in placements
    types: list[str] = field(default_factory=list)  # each node's GPU type (Slurm's Gres, '' untyped), same index
    gpus: list[int] = field(default_factory=list)  # each node's GPUs (free or not), same index
    features: list[frozenset[str]] = field(default_factory=list)  # each node's Slurm Features, same index
    type_costs: Mapping[str, CostModel] = field(default_factory=dict)  # typed nodes: each type's cost model (PolicyInputs.type_costs)
    gpu_types: Mapping[str, Any] | None = None  # the roofline's GPU types (Config.gpu_types; None: the built-in table)
    free: list[int] = field(default_factory=list)  # free GPUs per node, as the slot goes
    decisions: list[dict] = field(default_factory=list)  # decision rows recorded with the slot
    decision_ids: list[int] = field(default_factory=list)  # decisions already written (starts), slot set later
    corrections: dict[tuple[str, str], float] = field(default_factory=dict)  # (sig, device): one cost-table read per slot
    models: dict[tuple[str, ...], tuple] = field(default_factory=dict)  # (sig, user, device, summary's type) -> (correction, learned profile, start-up s), once per slot
    limit_why: dict[str, str] = field(default_factory=dict)  # Slurm id -> the Slurm limit keeping it out (lyasched.live.limits)
    rows_used: set[tuple] = field(default_factory=set)  # waiting-row cache keys read this slot
    adaptive: dict[str, tuple] = field(default_factory=dict)  # Slurm id -> (Job, fraction done) of adaptive-batch jobs (lyasched.live.adaptive)
    type_memo: dict[tuple, Any] = field(default_factory=dict)  # per-slot answers about the node types (per_type, device keys, profile types)
    # (sig, user, summary's type, summary's types, request's type) -> a waiting job's model inputs (PolicyInputs.waiting)
    waiting_models: dict[tuple, tuple] = field(default_factory=dict)

    @property
    def index(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}

    @property
    def per_type(self) -> bool:
        """Whether costs are kept per GPU type: the nodes are typed and the cluster's device key is one
        of their types (an admin's ``[service] device`` or ``LYASCHED_DEVICE_TYPE`` keys them all as one)."""
        from lyasched.profile.signature import device_type

        key = ("per_type", self.device, id(self.types), len(self.types))  # asked once per waiting job: once per slot
        hit = self.type_memo.get(key)
        if hit is None:
            hit = self.type_memo[key] = self.device in {device_type(t) for t in self.types if t}
        return hit

    @property
    def type_of(self) -> dict[str, str]:
        """Node name -> its GPU type."""
        return dict(zip(self.names, self.types))
