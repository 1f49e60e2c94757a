"""`lyasched calibrate`: measure all-reduce links and store them as cluster parameters.

    lyasched calibrate run --nproc 2 --out intra.json        # intra-node, via torchrun here
    lyasched calibrate run --sbatch --nodes 2 --out inter.json  # print the Slurm job for an admin
    lyasched calibrate fit intra.json inter.json [--db PATH]
    lyasched calibrate show [--json]
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import click

from lyasched.costmodel.calibration import LinkFit, fit_bench_result, load_bench_result
from lyasched.store import open_db
from lyasched.store.cluster import cluster_link_rows, save_cluster_links

db_option = click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None,
                         help="SQLite database (default $LYASCHED_DB or ~/.local/share/lyasched/lyasched.db)")


def torchrun_command(nproc: int, out: str, sizes: str | None, warmup: int, repeats: int, python: str = sys.executable,
                     nnodes: int = 1) -> list[str]:
    """The torchrun invocation of the benchmark (standalone rendezvous on one node)."""
    cmd = [python, "-m", "torch.distributed.run"]
    if nnodes == 1:
        cmd += ["--standalone"]
    cmd += ["--nproc-per-node", str(nproc), "-m", "lyasched.job.allreduce_bench", "--out", out,
            "--warmup", str(warmup), "--repeats", str(repeats)]
    if sizes:
        cmd += ["--sizes", sizes]
    return cmd


def sbatch_script(nodes: int, gpus_per_node: int, out: str, partition: str | None = None,
                  time_limit: str = "00:10:00", bench_args: tuple[str, ...] = ()) -> str:
    """Batch script an admin submits with `sbatch` to measure the link over ``nodes`` nodes
    (1 node: intra-node link; 2 nodes, one task each: inter-node link)."""
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=lyasched-calibrate-{nodes}n",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        f"#SBATCH --time={time_limit}",
        "#SBATCH --exclusive",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    lines += [
        "set -euo pipefail",
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
        f"srun torchrun --nnodes {nodes} --nproc-per-node {gpus_per_node} \\",
        "  --rdzv-id $SLURM_JOB_ID --rdzv-backend c10d --rdzv-endpoint $head:29500 \\",
        f"  -m lyasched.job.allreduce_bench --out {shlex.quote(out)}" + "".join(f" {shlex.quote(a)}" for a in bench_args),
        "",
    ]
    return "\n".join(lines)


@click.group()
def calibrate() -> None:
    """Measure all-reduce bandwidth/latency and store them as the cluster's links."""


@calibrate.command("run")
@click.option("--nproc", type=click.IntRange(min=2), default=2, show_default=True, help="ranks (GPUs or CPU processes)")
@click.option("--local/--sbatch", "local", default=True, show_default=True,
              help="run here via torchrun (intra-node), or print the Slurm batch script for an admin")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True, help="nodes (--sbatch only)")
@click.option("--partition", default=None, help="Slurm partition (--sbatch only)")
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="result JSON (default allreduce-<kind>.json)")
@click.option("--sizes", default=None, help="message sizes, e.g. 4K,64K,1M,16M (default 4K..64M)")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--timeout", type=click.FloatRange(min=1), default=600, show_default=True, help="seconds")
@click.option("--store", is_flag=True, help="fit the result and store it in --db right away")
@db_option
def run_cmd(nproc, local, nodes, partition, out, sizes, warmup, repeats, timeout, store, db_path) -> None:
    """Run the all-reduce benchmark on this node (or print the sbatch job)."""
    if sizes:
        from lyasched.job.allreduce_bench import parse_sizes  # validate before starting anything

        try:
            parse_sizes(sizes)
        except ValueError as e:
            raise click.ClickException(str(e)) from None
    if not local:
        out = out or f"allreduce-{'inter' if nodes > 1 else 'intra'}.json"
        extra = ("--warmup", str(warmup), "--repeats", str(repeats)) + (("--sizes", sizes) if sizes else ())
        click.echo(sbatch_script(nodes, nproc, out, partition, bench_args=extra), nl=False)
        return
    if nodes != 1:
        raise click.UsageError("--local runs on this one node; use --sbatch --nodes N for more nodes")
    out = out or "allreduce-intra.json"
    cmd = torchrun_command(nproc, out, sizes, warmup, repeats)
    click.echo(f"running {nproc} ranks: {shlex.join(cmd)}", err=True)
    try:
        # the benchmark's per-size progress lines go straight to our stderr
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise click.ClickException(f"benchmark did not finish within {timeout:g} s") from None
    if proc.returncode != 0 or not Path(out).exists():
        raise click.ClickException(f"benchmark failed (exit {proc.returncode}); see the messages above")
    click.echo(f"wrote {out}")
    if store:
        _fit_and_store([out], db_path, as_json=False)


def _fit_and_store(results, db_path, as_json: bool) -> list[LinkFit]:
    fits: list[LinkFit] = []
    for path in results:  # validate and fit everything before storing anything
        try:
            fit = fit_bench_result(load_bench_result(path), source=str(path))
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        if not math.isfinite(fit.link.bandwidth):
            raise click.ClickException(f"{path}: time does not grow with message size; cannot fit a bandwidth")
        fits.append(fit)
    kinds = [f.kind for f in fits]
    if len(set(kinds)) != len(kinds):
        raise click.ClickException(f"two results measure the same link kind ({', '.join(kinds)}); give one per kind")
    db = open_db(db_path)
    save_cluster_links(db, [dict(kind=f.kind, link=f.link, r2=f.r2, world_size=f.world_size, backend=f.backend,
                                 hosts=f.hosts, source=f.source) for f in fits])
    if as_json:
        click.echo(json.dumps([_fit_dict(f) for f in fits], indent=2))
    else:
        for f in fits:
            click.echo(f"{f.kind}: bandwidth {f.link.bandwidth / 1e9:.3f} GB/s, latency {f.link.latency * 1e6:.1f} us "
                       f"(R^2 {f.r2:.3f}, {f.world_size} ranks, {f.backend}) from {f.source}")
    return fits


def _fit_dict(f: LinkFit) -> dict:
    return {"kind": f.kind, "bandwidth": f.link.bandwidth, "latency": f.link.latency, "r2": f.r2,
            "world_size": f.world_size, "backend": f.backend, "hosts": list(f.hosts), "source": f.source}


@calibrate.command("fit")
@click.argument("results", nargs=-1, required=True, type=click.Path(dir_okay=False))
@db_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def fit_cmd(results, db_path, as_json) -> None:
    """Fit Link(bandwidth, latency) per RESULT.json and store it (intra or inter)."""
    if len(results) > 2:
        raise click.UsageError("give at most two results: one intra-node, one inter-node")
    _fit_and_store(results, db_path, as_json)


@calibrate.command("show")
@db_option
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def show_cmd(db_path, as_json) -> None:
    """Show the calibrated links (what the service and replay use)."""
    rows = cluster_link_rows(open_db(db_path))
    if as_json:
        click.echo(json.dumps({r["kind"]: {k: v for k, v in r.items() if k != "kind"} for r in rows}, indent=2))
        return
    if not rows:
        click.echo("no calibrated links; the cost model uses ClusterSpec's defaults (run `lyasched calibrate run`)")
        return
    for r in rows:
        click.echo(f"{r['kind']:5s}  {r['bandwidth'] / 1e9:9.3f} GB/s  {r['latency'] * 1e6:9.1f} us  "
                   f"R^2 {r['r2']:.3f}  {r['world_size']} ranks {r['backend']} on {r['hosts']}  ({r['fitted_at']})")
