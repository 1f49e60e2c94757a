"""Reading accounting and nodes from the Slurm the command runs on, through the one Slurm interface
(lyasched.slurm.backend: ``config()``, ``history()``, ``nodes()``), as the service and lyasub do."""

from __future__ import annotations

from lyasched.slurm import SlurmCLI, SlurmError
from lyasched.slurm.backend import SlurmHistory
from lyasched.slurm.cli import CliSlurm
from lyasched.whatif.cluster import SiteCluster, cluster_from_nodes
from lyasched.slurm.sacct import FIELDS

# sacct prints times as SLURM_TIME_FORMAT says; "standard" is the ISO form the parser reads.
ENV = {"SLURM_TIME_FORMAT": "standard"}
ACCOUNTING_OFF = "Slurm accounting storage is disabled"


class AccountingOff(RuntimeError):
    """This cluster keeps no accounting (no slurmdbd): there is no history to read."""


def check_accounting(slurm: SlurmHistory) -> None:
    """Raise AccountingOff when `scontrol show config` says AccountingStorageType is none."""
    if not slurm.config().accounting:
        raise AccountingOff("accounting is off on this cluster (AccountingStorageType is none in scontrol show config): "
                            "sacct has no history; run where slurmdbd keeps accounting, or give --sacct FILE")


def read_sacct(slurm: SlurmHistory, since: str, until: str | None, partition: str | None) -> str:
    """The history's sacct text, with the fields of `sacct.FIELDS`, after checking accounting is on."""
    check_accounting(slurm)
    try:
        return slurm.history(since, until, partition, FIELDS)
    except SlurmError as e:
        if ACCOUNTING_OFF in str(e):
            raise AccountingOff(f"sacct: {ACCOUNTING_OFF}") from None
        raise


def read_cluster(slurm: SlurmHistory, partition: str | None) -> SiteCluster | None:
    """The GPU nodes Slurm lists (None when it lists none)."""
    return cluster_from_nodes(slurm.nodes(), partition)


def make_backend() -> SlurmHistory:
    """The CLI backend (accounting is sacct through either backend), with sacct's standard time
    format, a long timeout for a long history and one retry."""
    return CliSlurm(SlurmCLI(timeout=600.0, retries=1, env=dict(ENV)))


def node_backend() -> SlurmHistory:
    """For `scontrol show node` alone (a saved history read on a Slurm host): a short timeout."""
    return CliSlurm(SlurmCLI(timeout=30.0, retries=0, env=dict(ENV)))
