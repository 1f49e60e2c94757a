"""The Slurm commands that change a job the service holds: their argv (the CLI backend runs them).

Pure functions, no process started (`SlurmCLI.run` does that); their queries are in
lyasched.slurm.query, lyasub's submission commands in lyasched.slurm.submit.
"""

from __future__ import annotations

from typing import Sequence

from lyasched.slurm.query import compress_hostlist


def update_args(job_id: str, num_nodes: int, gpus_per_node: int, nodes: Sequence[str] = ()) -> list[str]:
    """`scontrol update` giving a held job its GPUs: ``gpus_per_node`` on each of ``num_nodes``
    nodes (optionally exactly ``nodes``), verified on 22.05 (docs/test-cluster.md).

    ``NumNodes=N-N`` (a bare N cannot grow a one-node job), one task per node (the launch
    template runs one torchrun per node, one worker per GPU) and ``NumCPUs=N`` (slurmctld raises
    the CPU count when growing but never lowers it when shrinking). Slurm expresses GPUs per node
    as one number, hence equal per-node counts.
    """
    if num_nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need at least one node and one GPU per node, got {num_nodes}x{gpus_per_node}")
    if nodes and len(nodes) != num_nodes:
        raise ValueError(f"{len(nodes)} node names for {num_nodes} nodes")
    return [
        "scontrol",
        "update",
        f"JobId={job_id}",
        f"NumNodes={num_nodes}-{num_nodes}",
        f"NumTasks={num_nodes}",
        f"NumCPUs={num_nodes}",
        f"TresPerNode=gres:gpu:{gpus_per_node}",
        f"ReqNodeList={compress_hostlist(nodes)}" if nodes else "ReqNodeList=",
    ]


def release_args(job_id: str) -> list[str]:
    return ["scontrol", "release", str(job_id)]


def hold_args(job_id: str) -> list[str]:
    return ["scontrol", "hold", str(job_id)]
