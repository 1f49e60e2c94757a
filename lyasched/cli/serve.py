"""`lyasched serve`: run the scheduling service (one slot every `slot_seconds`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from lyasched.cli.errors import BadInput
# a policy's native solver (sia's HiGHS) printf's to descriptor 1: while slots run it is stderr, as
# the logs are, so stdout carries only what serve prints (the --once report)
from lyasched.cli.nativeout import native_stdout_to_stderr
from lyasched.config import ConfigError, check_grace, check_port, load_config

log = logging.getLogger("lyasched.serve")


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="TOML config (default: $LYASCHED_CONFIG, else /etc/lyasched/config.toml, else built-in defaults).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False), default=None, help="Override service.db.")
@click.option("--slot-seconds", type=float, default=None, help="Override service.slot_seconds.")
@click.option("--policy", "policy_name", default=None, help="Override policy.name.")
@click.option("--users", default=None, help="Override service.users: schedule only these users' jobs (comma-separated).")
@click.option("--slurm-backend", type=click.Choice(["auto", "cli", "pyslurm"]), default=None,
              help="Override slurm.backend: Slurm's CLI tools, pyslurm, or pyslurm when it matches the running "
                   "Slurm (auto). docs/slurm-backends.md.")
@click.option("--once", is_flag=True, help="Run a single slot, print what it did, exit.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the slot report as JSON.")
@click.option("--standby", is_flag=True, help="Wait as a standby: act only once the lease ([failsafe] lease) has not "
              "been renewed for [failsafe] takeover_slots slots (docs/service.md, When the service stops).")
@click.option("--metrics-port", type=int, default=None,
              help="Serve Prometheus metrics on this port (0: any free one; overrides [metrics] port; default off).")
@click.option("--metrics-address", default=None, help="Bind address of the metrics (overrides [metrics] address; "
              "default 127.0.0.1).")
def serve(config_path, db_path, slot_seconds, policy_name, users, slurm_backend, once, as_json,
          metrics_port, metrics_address, standby=False) -> None:
    """Schedule held lyasched jobs: each slot read Slurm, run the policy, resize and release jobs.

    Runs as the Slurm operator account (it calls `scontrol update/release/hold`). Logs go to
    stderr; SIGTERM/SIGINT finish the current slot's Slurm updates for the job in hand and stop.
    """
    try:
        cfg = load_config(config_path)
        over: dict[str, Any] = {}
        if db_path:
            over["db"] = Path(db_path)
        if slot_seconds is not None:
            if not slot_seconds > 0:
                raise ConfigError(f"--slot-seconds must be > 0, got {slot_seconds:g}")
            over["slot_seconds"] = slot_seconds
        if users is not None:
            over["users"] = tuple(u for u in users.split(",") if u)
        if policy_name:
            from lyasched.policy import POLICIES

            if policy_name not in POLICIES:
                raise ConfigError(f"--policy must be one of {', '.join(POLICIES)}, got {policy_name!r}")
            over["policy"] = policy_name
            over["params"] = {} if policy_name != cfg.policy else cfg.params
        if metrics_port is not None:
            over["metrics_port"] = check_port(metrics_port, "--metrics-port")
        if metrics_address is not None:
            if not metrics_address:
                raise ConfigError("--metrics-address must not be empty")
            over["metrics_address"] = metrics_address
        cfg = dataclasses.replace(cfg, **over)
        check_grace(cfg.failsafe_grace, cfg.slot_seconds, f"{cfg.source}: failsafe.grace")
    except ConfigError as e:  # bad input: one line, exit 2 (as lyasub, lyastat and replay)
        raise BadInput(str(e)) from None

    from lyasched.policy import capabilities_of
    from lyasched.service import cannot_serve

    if why := cannot_serve(capabilities_of(cfg.policy)):  # declared by the policy (Capabilities)
        raise BadInput(f"policy {cfg.policy!r} cannot run under serve: {why}")
    from lyasched.security import check_permissions, service_paths  # config/db writable only by us (issue 5)

    if bad := check_permissions(service_paths(cfg.source, cfg.db)):
        raise BadInput(f"refusing to start: {bad[0]} (docs/reliability.md, Security)")
    logging.basicConfig(
        stream=sys.stderr, level=getattr(logging, cfg.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from lyasched.service import Service, UnsupportedPolicy
    from lyasched.slurm.backend import BackendChoiceError, backend_choice, env_prefix, make_backend
    from lyasched.store import records
    from lyasched.store.records import open_records

    if cfg.log_level != "DEBUG":
        # no "Running job" line every slot, nor a "skipped: maximum number of running instances" line
        # per slot while slots overrun (an outage with timeouts): slot durations are in the records
        logging.getLogger("apscheduler").setLevel(logging.ERROR)
    from lyasched.store.schema import DatabaseUnusable

    try:
        open_records(cfg.db).conn.close()  # create it (0644) now: a bad path fails here, with one line
    except DatabaseUnusable as e:  # damaged, unreadable, or newer: its one line; decide nothing from it
        raise click.ClickException(str(e)) from None
    except Exception as e:  # noqa: BLE001 - any failure to open the db is fatal, with one line
        raise click.ClickException(f"{cfg.db}: cannot open the service database: {e}") from None
    # $LYASCHED_SLURM_PREFIX (backend.env_prefix): the Slurm tools and the pyslurm worker run through a
    # wrapper (a fault injector in tests, e.g. tests/reliability/flaky_slurm.py; or a site's own), as for lyasub and lyastat.
    choice = backend_choice(cfg.slurm_backend, slurm_backend)
    try:
        slurm, why = make_backend(choice, timeout=cfg.slurm_timeout, prefix=env_prefix())
    except BackendChoiceError as e:
        raise BadInput(str(e)) from None
    log.info("Slurm backend: %s (%s)", slurm.name, why)
    keeper = lease_keeper(cfg, standby)  # lyasched.live.lease: renewed every slot; fences a stale service
    try:
        service = Service(cfg, lambda: open_records(cfg.db), slurm=slurm, lease=keeper, limits=limits_watch(cfg, slurm),
                          shares=shares_watch(cfg, slurm))
    except UnsupportedPolicy as e:  # a policy the chosen backend cannot carry out (moves without signal/requeue)
        raise BadInput(str(e)) from None
    except (ValueError, TypeError, ImportError) as e:
        raise BadInput(f"policy {cfg.policy!r}: {e}") from None
    left = records.open_intents(service.db)
    if left:
        log.warning("%d start(s) left open by a previous run (jobs %s): reconciled with Slurm in the first slot",
                    len(left), ", ".join(i["slurm_id"] for i in left))

    if once:
        with native_stdout_to_stderr():  # the report is printed after the slot, on a clean stdout
            report = service.run_slot()
        if as_json:
            click.echo(json.dumps(dataclasses.asdict(report), indent=2, default=str))
        else:
            click.echo(report.line())
        if report.error:
            sys.exit(1)
        return

    log.info(
        "lyasched serve: policy %s %s, slot %gs, grace %gs, db %s (config %s)",
        cfg.policy, dict(cfg.params), cfg.slot_seconds, cfg.release_grace, cfg.db, cfg.source,
    )
    from lyasched.live.loop import run_forever

    metrics = start_metrics(service, cfg)
    try:
        with native_stdout_to_stderr():
            run_forever(service, cfg.slot_seconds)
    finally:
        if metrics is not None:
            metrics.stop()
    log.info("lyasched serve: stopped")


def start_metrics(service: Any, cfg: Any) -> Any:
    """The service's Prometheus metrics (lyasched.live.metrics), fed by its slot hook and served on
    ``cfg.metrics_address:cfg.metrics_port``; None when off. A port that cannot be bound: exit 1."""
    if cfg.metrics_port is None:
        return None
    from lyasched.live.metrics import ServiceMetrics, service_role

    metrics = ServiceMetrics()
    metrics.follow_role(lambda: service_role(service))  # active while it holds the lease, else standby
    try:
        metrics.start(cfg.metrics_port, cfg.metrics_address)
    except OSError as e:
        raise click.ClickException(f"metrics: cannot listen on {cfg.metrics_address}:{cfg.metrics_port}: {e}") from None
    service.slot_hooks.append(metrics.observe_slot)
    return metrics


def limits_watch(cfg: Any, slurm: Any) -> Any:
    """Slurm's GPU limits read each slot (``[slurm] limits``; lyasched.live.limits); None when off."""
    from lyasched.live.limits import LimitsWatch
    from lyasched.slurm.backend import SlurmQuery

    if cfg.slurm_limits == "off" or not isinstance(slurm, SlurmQuery):
        return None
    return LimitsWatch(slurm.query, cfg.slurm_limits, accounting=lambda: slurm.config().accounting)


def shares_watch(cfg: Any, slurm: Any) -> Any:
    """Slurm's fair-share tree as the tenants' shares (lyasched.live.tenants.SharesWatch); None
    when ``[tenants] shares`` gives them, or the backend cannot query."""
    from lyasched.live.tenants import SharesWatch
    from lyasched.slurm.backend import SlurmQuery

    if cfg.tenant_shares or not isinstance(slurm, SlurmQuery):
        return None
    return SharesWatch(slurm.query, accounting=lambda: slurm.config().accounting)


def lease_keeper(cfg: Any, standby: bool) -> Any:
    """The service's hold on its lease ([failsafe] lease, default beside the db): taken at the first
    slot (``--standby``: once it is stale), renewed every slot. A directory it cannot write: exit 1."""
    import os

    from lyasched.config import lease_path
    from lyasched.live.lease import LeaseKeeper

    path = lease_path(cfg)
    if not os.access(path.parent, os.W_OK):
        raise click.ClickException(f"{path}: cannot write the service's lease in {path.parent}")
    return LeaseKeeper(path, cfg.slot_seconds, take_now=not standby, takeover_slots=cfg.failsafe_takeover_slots)
