"""The local test cluster itself (slurm/cluster up): nodes, fake GPUs, multi-node jobs, torchrun."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

NODES = ["node1", "node2", "node3"]


def submit(as_user, user: str, *args: str) -> str:
    proc = as_user(user, "sbatch", "--parsable", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


GPU_TYPES = {"node1": "a100", "node2": "a100", "node3": "t4"}  # two GPU types, each also a node feature


def test_three_nodes_up_with_four_typed_gpus_each():
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %G %f %t"], capture_output=True, text=True,
                         check=True).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert sorted(rows) == NODES
    for node, (gres, features, state) in rows.items():
        assert gres.split("(")[0] == f"gpu:{GPU_TYPES[node]}:4", node
        assert features == GPU_TYPES[node], node
        assert state in {"idle", "mix", "alloc", "comp", "plnd"}, f"{node} is {state}"  # others may run jobs


def test_gpu_job_runs_as_user_and_sees_its_gpus(as_user, test_user, job_dir, slurm_jobs, wait_job):
    out = job_dir / "gpu.out"
    job = submit(as_user, test_user, "--gres=gpu:2", "-o", str(out),
                 "--wrap", "echo user=$(id -un) cvd=$CUDA_VISIBLE_DEVICES n=$SLURM_GPUS_ON_NODE")
    slurm_jobs.append(job)
    assert wait_job(job) == "COMPLETED"
    fields = dict(kv.split("=", 1) for kv in out.read_text().split())
    assert fields["user"] == test_user
    gpus = fields["cvd"].split(",")
    assert len(gpus) == 2 and len(set(gpus)) == 2
    assert fields["n"] == "2"


def test_two_node_job_runs_a_step_on_both_nodes(as_user, test_user, job_dir, slurm_jobs, wait_job):
    out = job_dir / "two.out"
    job = submit(as_user, test_user, "-N2", "--ntasks-per-node=1", "--gres=gpu:1", "-o", str(out),
                 "--wrap", 'srun -N2 -n2 bash -c "echo \\$SLURMD_NODENAME \\$SLURM_PROCID \\$CUDA_VISIBLE_DEVICES"')
    slurm_jobs.append(job)
    assert wait_job(job) == "COMPLETED", out.read_text() if out.exists() else ""
    lines = [line.split() for line in out.read_text().splitlines() if line.strip()]
    assert len(lines) == 2
    assert len({node for node, _, _ in lines}) == 2
    assert {node for node, _, _ in lines} <= set(NODES)
    assert sorted(rank for _, rank, _ in lines) == ["0", "1"]
    assert all(len(cvd.split(",")) == 1 for _, _, cvd in lines)


ALLREDUCE = """
import os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
x = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(x)
print(f"rank={dist.get_rank()} world={dist.get_world_size()} node={os.environ['SLURMD_NODENAME']} sum={x.item():g}", flush=True)
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_torchrun_gloo_across_two_nodes(as_user, test_user, job_dir, slurm_jobs, wait_job, cluster_python):
    script = job_dir / "allreduce.py"
    script.write_text(ALLREDUCE)
    out = job_dir / "torchrun.out"
    launch = (f'srun -N2 -n2 --ntasks-per-node=1 bash -c "{cluster_python} -m torch.distributed.run '
              f'--nnodes=2 --nproc_per_node=1 --node_rank=\\$SLURM_NODEID '
              f'--master_addr=node1 --master_port={free_port()} {script}"')
    job = submit(as_user, test_user, "-N2", "--ntasks-per-node=1", "--gres=gpu:1", "-o", str(out), "--wrap", launch)
    slurm_jobs.append(job)
    state = wait_job(job, timeout=180)
    text = out.read_text() if out.exists() else ""
    assert state == "COMPLETED", text
    results = sorted(line for line in text.splitlines() if line.startswith("rank="))
    assert len(results) == 2, text
    assert all("world=2" in r and "sum=3" in r for r in results), text
    assert len({r.split("node=")[1].split()[0] for r in results}) == 2, text
