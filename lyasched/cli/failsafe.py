"""`lyasched failsafe`: when the service has stopped renewing its lease, release the waiting held
lyasched jobs to plain Slurm at what they asked for (lyasched.live.failsafe). Run by a systemd timer
on the controller host (slurm/lyasched-failsafe.timer); does nothing while the lease is fresh."""

from __future__ import annotations

import json
import logging
import sys

import click

from lyasched.cli.errors import BadInput
from lyasched.config import ConfigError, check_grace, lease_path, load_config


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="The service's TOML config (default: $LYASCHED_CONFIG, else /etc/lyasched/config.toml).")
@click.option("--lease", "lease_file", type=click.Path(dir_okay=False), default=None,
              help="Override [failsafe] lease (default: lease.json beside service.db).")
@click.option("--grace", type=float, default=None,
              help="Seconds without renewal before acting (overrides [failsafe] grace; default 5 slots, >= 60; "
                   "at least 2 slots and 60 s).")
@click.option("--json", "as_json", is_flag=True, help="Print what it found and did as JSON.")
def failsafe(config_path, lease_file, grace, as_json) -> None:
    """Release the held lyasched jobs to Slurm if the service's lease is stale (else do nothing).

    Runs as root or the Slurm operator account (it calls `scontrol update/release`). Each job it
    releases gets an AdminComment saying who and why; the log beside the lease lists them, and a
    service that comes back records them as started by the fail-safe. Exit 0 whatever it found;
    1 when Slurm or the lease cannot be read.
    """
    from pathlib import Path

    try:
        cfg = load_config(config_path)
        if grace is not None and not 0 < grace <= 7 * 86400:
            raise ConfigError(f"--grace must be > 0 and <= 604800, got {grace:g}")
        g = grace if grace is not None else cfg.failsafe_grace
        check_grace(g, cfg.slot_seconds, "--grace" if grace is not None else f"{cfg.source}: failsafe.grace")
    except ConfigError as e:
        raise BadInput(str(e)) from None
    path = Path(lease_file) if lease_file else lease_path(cfg)
    logging.basicConfig(stream=sys.stderr, level=getattr(logging, cfg.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from lyasched.live import failsafe as fs
    from lyasched.live.lease import LeaseError
    from lyasched.slurm import SlurmError
    from lyasched.slurm.backend import env_prefix
    from lyasched.slurm.cli import CliSlurm
    from lyasched.slurm.tools import SlurmCLI

    runner = SlurmCLI(timeout=cfg.slurm_timeout, prefix=tuple(env_prefix()))
    slurm = CliSlurm(runner)  # the CLI tools: the controller host has them; AdminComment is one scontrol call

    def annotate(job_id: str, text: str) -> None:
        runner.run(["scontrol", "update", f"JobId={job_id}", f"AdminComment={text}"])

    if not path.parent.is_dir():  # not "[Errno 2] ... lease.json.lock": the shared storage may be missing here
        raise click.ClickException(f"{path}: no directory {path.parent} for the service's lease on this host "
                                   "(is the storage it shares with the service host mounted? [failsafe] lease)")
    try:
        res = fs.run(slurm, annotate, path, g, users=cfg.users, partition=cfg.partition, gpu_mem=cfg.gpu_mem)
    except (LeaseError, OSError) as e:
        raise click.ClickException(str(e).splitlines()[0]) from None
    except SlurmError as e:
        raise click.ClickException(f"Slurm: {str(e).splitlines()[0]}") from None
    if as_json:
        click.echo(json.dumps(res.as_dict(), indent=2, default=str))
        return
    click.echo(res.why)
    for r in res.released:
        click.echo(f"released {r['job_id']} ({r['user']}): {r['nodes']}x{r['per_node']} GPUs")
    for r in res.skipped:
        click.echo(f"left held {r['job_id']} ({r['user']}): {r['why']}")
    for r in res.failed:
        click.echo(f"failed {r['job_id']} ({r['user']}): {r['why']}")
