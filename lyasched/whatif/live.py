"""Reading accounting and nodes from the Slurm the command runs on, through `SlurmCLI`."""

from __future__ import annotations

from lyasched.slurm import SlurmCLI, SlurmError
from lyasched.slurm.query import accounting_enabled, config_args, node_args, parse_nodes
from lyasched.whatif.cluster import SiteCluster, cluster_from_nodes
from lyasched.whatif.sacct import SACCT_FORMAT

# sacct prints times as SLURM_TIME_FORMAT says; "standard" is the ISO form the parser reads.
ENV = {"SLURM_TIME_FORMAT": "standard"}
ACCOUNTING_OFF = "Slurm accounting storage is disabled"


class AccountingOff(RuntimeError):
    """This cluster keeps no accounting (no slurmdbd): there is no history to read."""


def sacct_args(since: str, until: str | None = None, partition: str | None = None) -> list[str]:
    """The one sacct call of `lyasched whatif --since`: allocations only (no steps), every
    user, every run of requeued jobs (--duplicates), the fields of `sacct.FIELDS`."""
    args = ["sacct", "--parsable2", "--allusers", "--allocations", "--duplicates",
            f"--format={SACCT_FORMAT}", f"--starttime={since}"]
    if until:
        args.append(f"--endtime={until}")
    if partition:
        args.append(f"--partition={partition}")
    return args


def check_accounting(cli: SlurmCLI) -> None:
    """Raise AccountingOff when `scontrol show config` says AccountingStorageType is none."""
    if not accounting_enabled(cli.run(config_args())):
        raise AccountingOff("accounting is off on this cluster (AccountingStorageType is none in scontrol show config): "
                            "sacct has no history; run where slurmdbd keeps accounting, or give --sacct FILE")


def read_sacct(cli: SlurmCLI, since: str, until: str | None, partition: str | None) -> str:
    check_accounting(cli)
    try:
        return cli.run(sacct_args(since, until, partition))
    except SlurmError as e:
        if ACCOUNTING_OFF in str(e):
            raise AccountingOff(f"sacct: {ACCOUNTING_OFF}") from None
        raise


def read_cluster(cli: SlurmCLI, partition: str | None) -> SiteCluster | None:
    """The GPU nodes `scontrol show node` lists (None when it lists none)."""
    return cluster_from_nodes(parse_nodes(cli.run(node_args())), partition)


def make_cli() -> SlurmCLI:
    return SlurmCLI(timeout=600.0, retries=1, env=dict(ENV))
