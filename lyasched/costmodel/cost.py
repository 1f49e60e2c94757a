"""Cost model: how long one training job runs on g GPUs.

Run time on g GPUs = iterations x (t(B/g) + comm(g)), with t(b) = alpha + beta*max(0, b - knee)
the fitted per-iteration compute time at per-GPU batch b (knee = 0: a straight line), and comm(g) a ring all-reduce of
the gradients over the slowest link the g GPUs use. docs/model.md derives every term.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from lyasched.costmodel.commshape import CommShape


@dataclass(frozen=True)
class Profile:
    """What one-GPU profiling tells us about a model (units: seconds, samples, bytes)."""

    model: str
    alpha: float  # fixed per-iteration time (s): kernel launches, optimizer step
    beta: float  # per-sample time (s/sample), beyond the knee
    params: int  # number of trainable parameters
    bytes_per_param: int = 4  # gradient element size (fp32 = 4)
    mem_base: float = 0.0  # peak memory at batch 0 (bytes): weights, grads, optimizer state
    mem_per_sample: float = 0.0  # extra peak memory per sample (bytes): activations
    source: str = "measured"  # "measured" or "estimated"
    # Factors on the ring all-reduce time learned from this model's own runs (lyasched.costmodel.learn):
    # 1 = the ring model as calibrated for the cluster.
    comm_scale_intra: float = 1.0
    comm_scale_inter: float = 1.0
    # Per-GPU batch up to which a step takes alpha whatever the batch (a GPU not yet busy:
    # lyasched.costmodel.batchshape); 0 = the straight line t(b) = alpha + beta*b.
    knee: float = 0.0

    def step_time(self, local_batch: float) -> float:
        """Compute time of one training step at per-GPU batch ``local_batch``: flat up to the
        knee, then linear (`lyasched.costmodel.batchshape`)."""
        return self.alpha + self.beta * max(0.0, local_batch - self.knee)

    @property
    def grad_bytes(self) -> float:
        return float(self.params * self.bytes_per_param)

    def memory(self, local_batch: float) -> float:
        return self.mem_base + self.mem_per_sample * local_batch


@dataclass(frozen=True)
class Link:
    """One kind of interconnect: ring all-reduce uses bandwidth (bytes/s) and per-step latency (s)."""

    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster parameters the cost model and the simulator need."""

    nodes: int
    gpus_per_node: int
    gpu_mem: float = 32e9  # bytes per GPU
    intra: Link = field(default_factory=lambda: Link(bandwidth=100e9, latency=10e-6))  # NVLink-class
    inter: Link = field(default_factory=lambda: Link(bandwidth=10e9, latency=50e-6))  # 100 Gb/s-class
    # Optional cluster-level growth/overlap/contention terms (lyasched.costmodel.commshape, fitted across
    # applications by lyasched.costmodel.calibration.leave_one_app_out); None = the plain ring model.
    shape: "CommShape | None" = None

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def gpu_counts(self, max_gpus: int | None = None) -> tuple[int, ...]:
        """Every GPU count the cluster can ever give one job (capped by ``max_gpus``)."""
        top = self.total_gpus if max_gpus is None else min(self.total_gpus, max_gpus)
        return tuple(range(1, top + 1))


def balanced(g: int, nodes: int) -> tuple[int, ...]:
    """g GPUs spread as evenly as possible over ``nodes`` nodes (at most g)."""
    nodes = max(1, min(nodes, g))
    q, r = divmod(g, nodes)
    return tuple(q + 1 if i < r else q for i in range(nodes))


def ring_allreduce_time(nbytes: float, g: int, link: Link) -> float:
    """Ring all-reduce of ``nbytes`` over ``g`` ranks: 2(g-1) steps of nbytes/g each."""
    if g <= 1:
        return 0.0
    return 2.0 * (g - 1) / g * nbytes / link.bandwidth + 2.0 * (g - 1) * link.latency


class CostModel:
    """Predicts per-iteration and whole-job run times on a given cluster."""

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster

    def comm_time(self, profile: Profile, g: int, spans_nodes: bool) -> float:
        link = self.cluster.inter if spans_nodes else self.cluster.intra
        scale = profile.comm_scale_inter if spans_nodes else profile.comm_scale_intra
        return scale * ring_allreduce_time(profile.grad_bytes, g, link)

    def iter_time(self, profile: Profile, global_batch: int, g: int, spans_nodes: bool = False) -> float:
        shape = self.cluster.shape
        if shape is not None and g > 1:
            # v = this model's 2-GPU one-node all-reduce time; the shape scales it to (g, nodes)
            gpn = max(1, self.cluster.gpus_per_node)
            nodes = max(2, -(-g // gpn)) if spans_nodes else 1
            placement = balanced(g, nodes)
            v = self.comm_time(profile, 2, False)
            if spans_nodes and profile.comm_scale_intra > 0:  # a learned inter factor, relative to the intra one
                v *= profile.comm_scale_inter / profile.comm_scale_intra
            return shape.step_time(profile.step_time(global_batch / g), v, placement, profile.grad_bytes)
        return profile.step_time(global_batch / g) + self.comm_time(profile, g, spans_nodes)

    def iter_time_placement(
        self,
        profile: Profile,
        local_batch: float,
        placement: Sequence[int],
        overlap: float = 1.0,
        slowdown: float = 1.0,
    ) -> float:
        """Per-iteration time for an explicit placement (GPUs used on each node).

        Every replica computes ``local_batch`` samples; the ring all-reduce runs over the
        slowest link used (intra when one node, inter otherwise). ``overlap`` is the
        exponent gamma of (compute^gamma + comm^gamma)^(1/gamma): 1 = no overlap of the
        all-reduce with the backward pass (= iter_time), large = full overlap.
        ``slowdown`` scales compute whenever more than one GPU is used (host/PCIe
        contention). docs/calibration.md fits both from measured placements.
        """
        g = int(sum(placement))
        if g < 1:
            raise ValueError("a placement needs at least one GPU")
        compute = profile.step_time(local_batch)
        if g == 1:
            return compute
        comm = self.comm_time(profile, g, len(placement) > 1)
        compute *= slowdown
        if comm <= 0.0:
            return compute
        return (compute**overlap + comm**overlap) ** (1.0 / overlap)

    def allowed(self, profile: Profile, global_batch: int, g: int) -> bool:
        """g is allowed when it divides B, B/g >= 1 and B/g fits in one GPU's memory."""
        if g < 1 or g > self.cluster.total_gpus or global_batch % g != 0:
            return False
        local = global_batch // g
        return local >= 1 and profile.memory(local) <= self.cluster.gpu_mem

    def allowed_counts(self, profile: Profile, global_batch: int, lo: int = 1, hi: int | None = None) -> list[int]:
        hi = self.cluster.total_gpus if hi is None else min(hi, self.cluster.total_gpus)
        return [g for g in range(max(1, lo), hi + 1) if self.allowed(profile, global_batch, g)]

    def run_time(self, profile: Profile, global_batch: int, iterations: int, g: int, spans_nodes: bool = False) -> float:
        return iterations * self.iter_time(profile, global_batch, g, spans_nodes)

    def best_run_time(self, profile: Profile, global_batch: int, iterations: int, counts: Iterable[int]) -> float:
        """Shortest run time over ``counts``, packing on one node whenever g fits on one."""
        gpn = self.cluster.gpus_per_node
        return min(self.run_time(profile, global_batch, iterations, g, g > gpn) for g in counts)
