"""THE cluster view: what the cost model sees of the Slurm cluster, built one way for lyasub,
`lyasched serve` and lyastat, so the prediction lyasub prints is the one the service decides with.

From Slurm's nodes (those with GPUs, in the partition if one is given) and the service config:

- nodes and GPUs per node: Slurm's (the largest per-node GPU count);
- GPU memory, links and the all-reduce shape: the config's ``[cluster]``, with the links
  replaced by the calibrated ones (`lyasched calibrate fit --db <service db>`) where the service
  database has them;
- the cost-table device key: ``LYASCHED_DEVICE_TYPE``, else ``[service] device``, else the fastest
  GPU type (by the roofline, `lyasched.live.typecost.fastest`) in the nodes' Slurm Gres
  (``gpu:a100:4``), else ``gpu``; always through
  `lyasched.profile.signature.device_type` (``"A100"`` and ``"NVIDIA A100-SXM4-40GB"`` are ``a100``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from lyasched.costmodel.cost import ClusterSpec
from lyasched.slurm.types import NodeInfo

if TYPE_CHECKING:
    import sqlite_utils

    from lyasched.config import Config

DEVICE_ENV = "LYASCHED_DEVICE_TYPE"
GENERIC_DEVICE = "gpu"  # cost-table device key when the cluster's GPUs are untyped in Slurm


@dataclass(frozen=True)
class ClusterView:
    spec: ClusterSpec
    device_type: str  # cost-table device key of the cluster's GPUs
    nodes: tuple[NodeInfo, ...] = ()  # the GPU nodes it was built from, in Slurm's order


def gpu_nodes(nodes: Sequence[NodeInfo], partition: str | None = None) -> list[NodeInfo]:
    """The nodes with GPUs (in ``partition`` when given)."""
    return [n for n in nodes if n.gpus_total > 0 and (not partition or partition in n.partitions)]


def device_key(config_device: str, nodes: Sequence[NodeInfo], env: Mapping[str, str] | None = None,
               table: Mapping | None = None) -> str:
    """The cost-table device key (see the module doc for the order); ``table``: the GPU types
    (`Config.gpu_types`, default the roofline's) that rank the nodes' types."""
    from lyasched.live.typecost import fastest

    env = os.environ if env is None else env
    chosen = env.get(DEVICE_ENV, "").strip() or config_device
    chosen = chosen or fastest((n.gpu_type for n in nodes), table) or GENERIC_DEVICE
    from lyasched.profile.signature import device_type

    return device_type(chosen)


def cluster_view(nodes: Sequence[NodeInfo], config: Config, links_db: sqlite_utils.Database | None = None,
                 env: Mapping[str, str] | None = None) -> ClusterView:
    """The view of ``nodes`` (already the GPU nodes of the partition: `gpu_nodes`) under ``config``;
    ``links_db``: the service database, whose calibrated links replace the config's."""
    if not nodes:
        raise ValueError("no nodes with GPUs")
    spec = ClusterSpec(nodes=len(nodes), gpus_per_node=max(n.gpus_total for n in nodes), gpu_mem=config.gpu_mem,
                       intra=config.intra, inter=config.inter, shape=config.shape)
    if links_db is not None:
        from lyasched.store.cluster import with_calibrated_links

        spec = with_calibrated_links(links_db, spec)
    return ClusterView(spec, device_key(config.device, nodes, env, config.gpu_types), tuple(nodes))


def open_links_db(path: str | os.PathLike) -> sqlite_utils.Database | None:
    """The service database read-only, for its calibrated links (lyasub, lyastat: users may read
    it); None when it does not exist or cannot be read (then the config's links hold)."""
    from lyasched.store.records import RecordsUnavailable, open_readonly

    try:
        return open_readonly(Path(path))
    except (RecordsUnavailable, OSError):
        return None
