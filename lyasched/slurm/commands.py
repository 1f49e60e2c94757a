"""The Slurm commands that change a job the service holds: their argv (the CLI backend runs them).

Pure functions, no process started (`SlurmCLI.run` does that); their queries are in
lyasched.slurm.query, lyasub's submission commands in lyasched.slurm.submit.
"""

from __future__ import annotations

from typing import Sequence

from lyasched.slurm.query import compress_hostlist
from lyasched.slurm.types import is_gpu_type


def update_args(job_id: str, num_nodes: int, gpus_per_node: int, nodes: Sequence[str] = (),
                gpu_type: str = "") -> list[str]:
    """`scontrol update` giving a held job its GPUs: ``gpus_per_node`` on each of ``num_nodes``
    nodes (optionally exactly ``nodes``), of type ``gpu_type`` when given, verified on 22.05
    (docs/test-cluster.md).

    ``TresPerNode`` replaces the job's whole GPU request: written untyped, it would drop the type
    the job asked for (``--gres=gpu:a100:2``) and let Slurm run it on any GPU, so a typed job is
    given its type back every time (``gres:gpu:a100:N``). The job's ``--constraint`` (Features) is
    not a field of this update: Slurm keeps it.

    ``NumNodes=N-N`` (a bare N cannot grow a one-node job), one task per node (the launch
    template runs one torchrun per node, one worker per GPU) and ``NumCPUs=N`` (slurmctld raises
    the CPU count when growing but never lowers it when shrinking). Slurm expresses GPUs per node
    as one number, hence equal per-node counts.
    """
    if num_nodes < 1 or gpus_per_node < 1:
        raise ValueError(f"need at least one node and one GPU per node, got {num_nodes}x{gpus_per_node}")
    if nodes and len(nodes) != num_nodes:
        raise ValueError(f"{len(nodes)} node names for {num_nodes} nodes")
    if gpu_type and not is_gpu_type(gpu_type):
        raise ValueError(f"bad GPU type {gpu_type!r}")
    return [
        "scontrol",
        "update",
        f"JobId={job_id}",
        f"NumNodes={num_nodes}-{num_nodes}",
        f"NumTasks={num_nodes}",
        f"NumCPUs={num_nodes}",
        f"TresPerNode=gres:gpu:{gpu_type}:{gpus_per_node}" if gpu_type else f"TresPerNode=gres:gpu:{gpus_per_node}",
        f"ReqNodeList={compress_hostlist(nodes)}" if nodes else "ReqNodeList=",
    ]


def comment_args(job_id: str, text: str) -> list[str]:
    """`scontrol update` of a held lyasched job's Comment (its cost summary): how the service hands an
    adaptive job the batch it chose (summary key ``cb=N``, lyasched/templates/launch.sbatch reads it).
    An Operator may set it (an AdminComment needs an Administrator); job_submit.lua refuses it to the
    job's owner. One word, no spaces."""
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"comment must be one word, got {text!r}")
    return ["scontrol", "update", f"JobId={job_id}", f"Comment={text}"]


def release_args(job_id: str) -> list[str]:
    return ["scontrol", "release", str(job_id)]


def hold_args(job_id: str) -> list[str]:
    return ["scontrol", "hold", str(job_id)]


# ------------------------------------------------------------ moves (docs/elastic.md)


def signal_args(job_id: str, signal: str) -> list[str]:
    """``scancel --signal=SIG JOBID``: the signal to every step of the job (not the batch shell,
    which only runs srun): slurmstepd delivers it to each process of the step, the training
    processes among them (launch.sbatch has torchrun ignore it)."""
    sig = signal.upper().removeprefix("SIG")
    if not sig.isalnum():
        raise ValueError(f"bad signal name {signal!r}")
    return ["scancel", f"--signal={sig}", str(job_id)]


def requeueable_args(job_id: str, allow: bool) -> list[str]:
    """``scontrol update Requeue=0|1``: job_submit.lua makes lyasched jobs non-requeueable (so
    their owners cannot requeue them); the service allows it for the time of a move only."""
    return ["scontrol", "update", f"JobId={job_id}", f"Requeue={1 if allow else 0}"]


def requeue_hold_args(job_id: str) -> list[str]:
    """``scontrol requeuehold``: the job ends (if still running) and waits again, held."""
    return ["scontrol", "requeuehold", str(job_id)]


def begin_now_args(job_id: str, delay_s: int = 10) -> list[str]:
    """``StartTime=now+10``: slurmctld gives a requeued job a begin time ~2 minutes ahead (seen on
    22.05: reason BeginTime after the release), for the nodes' revocation of the old run's job
    credential. Revocation covers credentials made up to the second it happened, so a relaunch
    in that same second is refused ("Job credential revoked", the job FAILED: seen on the native
    cluster with StartTime=now); a few seconds later is safe, not two minutes."""
    return ["scontrol", "update", f"JobId={job_id}", f"StartTime=now+{int(delay_s)}"]
