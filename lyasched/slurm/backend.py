"""The typed Slurm interface lyasched's callers use, and how a backend is chosen.

``backend = "auto" | "cli" | "pyslurm"`` ([slurm] in the config, ``--slurm-backend`` on
``lyasched serve``, ``$LYASCHED_SLURM_BACKEND`` for any tool): ``cli`` runs Slurm's tools;
``pyslurm`` calls libslurm through PySlurm (in a worker process, so a hanging controller can be
timed out); ``auto`` takes pyslurm when it imports and its major.minor version is the running
Slurm's, the CLI otherwise, and says why. docs/slurm-backends.md.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
from typing import Any, Protocol, Sequence, runtime_checkable

from lyasched.slurm.types import AccountingRecord, ClusterConfig, NodeInfo, SlurmJob

log = logging.getLogger("lyasched.slurm")

BACKENDS = ("auto", "cli", "pyslurm")
BACKEND_ENV = "LYASCHED_SLURM_BACKEND"
PREFIX_ENV = "LYASCHED_SLURM_PREFIX"


@runtime_checkable
class Slurm(Protocol):
    """What lyasched asks of Slurm. Errors are `SlurmError`s: `NoSuchJob`, `PermissionDenied`,
    `SlurmUnavailable` (after the retries an idempotent call gets), whichever backend answers."""

    name: str

    def nodes(self) -> list[NodeInfo]:
        """Every node with its GPUs (total, allocated to any job), state, partitions."""
        ...

    def jobs(self, *, user: str | None = None, job_ids: Sequence[str] = (),
             lyasched_only: bool = True) -> list[SlurmJob]:
        """Jobs Slurm still knows (any state), lyasched's only (comment tag) unless told otherwise."""
        ...

    def job(self, job_id: str) -> SlurmJob | None:
        """One job, any owner; None when Slurm does not know it (never existed, or purged)."""
        ...

    def work_dir(self, job_id: str) -> str | None:
        """The job's working directory (where it writes its reports); None when Slurm does not know it."""
        ...

    def config(self) -> ClusterConfig:
        """Controller version, accounting, submit plugins (asked once, then remembered)."""
        ...

    def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        """Allocation records from the accounting store (only meaningful when config().accounting)."""
        ...

    def resize(self, job_id: str, num_nodes: int, gpus_per_node: int, nodes: Sequence[str] = (),
               gpu_type: str = "") -> None:
        """Give a held job ``gpus_per_node`` GPUs on each of ``num_nodes`` nodes (exactly ``nodes`` if
        given), of type ``gpu_type`` when given (a typed job must get its type back: the update
        replaces its whole GPU request)."""
        ...

    def release(self, job_id: str) -> None: ...

    def hold(self, job_id: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...

    def submit(self, opts: Any, script: str | None = None) -> str:
        """Submit a batch job (`SbatchOptions`, the script's path or None with ``opts.wrap``); its id.
        Never retried (a retry could submit twice)."""
        ...

    def close(self) -> None: ...

@runtime_checkable
class SlurmMoves(Slurm, Protocol):
    """The calls a move of a running job needs (docs/elastic.md), on top of `Slurm`: both backends
    have them; the service asks for them only when its policy moves jobs (so a backend made for
    a non-moving service, e.g. a benchmark's in-memory one, stays a `Slurm`)."""

    def signal(self, job_id: str, signal: str) -> None:
        """Send ``signal`` ("USR1") to every step of a running job (its processes, not the batch shell)."""
        ...

    def set_requeue(self, job_id: str, allow: bool) -> None:
        """Make the job requeueable or not (job_submit.lua submits lyasched jobs non-requeueable)."""
        ...

    def requeue_hold(self, job_id: str) -> None:
        """End a running (or finished) job and put it back pending, held (``scontrol requeuehold``)."""
        ...


@runtime_checkable
class SlurmComment(Slurm, Protocol):
    """Set a held job's Comment (``scontrol update``): how the service hands an adaptive-batch job
    the batch it chose, as key ``cb`` of its cost summary (docs/lyasub.md); both backends have it,
    a test's in-memory one need not."""

    def set_comment(self, job_id: str, text: str) -> None:
        ...


@runtime_checkable
class SlurmHistory(Slurm, Protocol):
    """The accounting store's history over a time window (`lyasched whatif --since`), on top of
    `Slurm`: both backends have it (through sacct); a test's in-memory backend need not."""

    def history(self, since: str, until: str | None, partition: str | None, fields: Sequence[str]) -> str:
        """Every user's allocation records (one line per job, every run of a requeued one) from
        ``since`` (to ``until``, in ``partition``) as ``sacct --parsable2`` text with its header and
        the ``fields`` asked for: lyasched.slurm.sacct reads it as it reads a saved file."""
        ...


@runtime_checkable
class SlurmQuery(Slurm, Protocol):
    """Read-only queries by their command line (sacctmgr's limits, squeue's accounts and QOS:
    lyasched.live.limits), on top of `Slurm`: both backends run the CLI tools for them."""

    def query(self, argv: Sequence[str]) -> str:
        ...


class BackendChoiceError(ValueError):
    """The backend asked for cannot be used here (one line; `lyasched serve` exits 2)."""


def as_backend(slurm: Any) -> Slurm:
    """A `Slurm` from a backend, or from a CLI runner (anything with ``run(argv, idempotent=)``:
    a `SlurmCLI`, or a test's fake that answers in the tools' text formats)."""
    if isinstance(slurm, Slurm):
        return slurm
    if hasattr(slurm, "run"):
        from lyasched.slurm.cli import CliSlurm

        return CliSlurm(slurm)
    raise TypeError(f"not a Slurm backend nor a CLI runner: {slurm!r}")


def major_minor(version: str) -> tuple[int, int] | None:
    """``"22.05.8"`` (Slurm) and ``"22.5.3"`` (PySlurm) both give (22, 5)."""
    m = re.search(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def env_prefix() -> list[str]:
    """$LYASCHED_SLURM_PREFIX: a wrapper for the Slurm tools and the pyslurm worker (a fault
    injector in tests, e.g. tests/reliability/flaky_slurm.py), split like a shell would, never run by one."""
    return shlex.split(os.environ.get(PREFIX_ENV, ""))


def make_backend(choice: str = "auto", *, timeout: float = 30.0, retries: int = 2,
                 prefix: Sequence[str] = ()) -> tuple[Slurm, str]:
    """(backend, why it was chosen). BackendChoiceError when ``choice`` is "pyslurm" and pyslurm
    is missing, broken or of another Slurm release than the running one."""
    from lyasched.slurm.tools import SlurmCLI
    from lyasched.slurm.cli import CliSlurm

    if choice not in BACKENDS:
        raise BackendChoiceError(f"Slurm backend must be one of {', '.join(BACKENDS)}, got {choice!r}")
    cli = CliSlurm(SlurmCLI(timeout=timeout, retries=retries, prefix=tuple(prefix)))
    if choice == "cli":
        return cli, "configured"
    from lyasched.slurm.pyslurm_backend import PySlurm, pyslurm_installed

    installed = pyslurm_installed()
    if installed is None:
        why = "pyslurm is not installed (make pyslurm)"
        if choice == "pyslurm":
            raise BackendChoiceError(f"Slurm backend pyslurm: {why}")
        return cli, f"auto: {why}"
    backend = PySlurm(timeout=timeout, retries=retries, prefix=prefix, cli=cli)
    try:
        hello = backend.hello()
    except Exception as e:  # noqa: BLE001 - any failure to start it means: not usable here
        backend.close()
        why = f"pyslurm {installed} does not start: {str(e).splitlines()[0][:200] if str(e) else type(e).__name__}"
        if choice == "pyslurm":
            raise BackendChoiceError(f"Slurm backend pyslurm: {why}") from None
        return cli, f"auto: {why}"
    running, where = hello.get("controller") or "", "controller"
    if not running:
        running, where = hello.get("libslurm") or "", "libslurm (controller not answering)"
    ours, theirs = major_minor(hello.get("pyslurm", "")), major_minor(running)
    if ours is None or theirs is None or ours != theirs:
        backend.close()
        why = (f"pyslurm {hello.get('pyslurm')} does not match the running Slurm {running or 'unknown'} "
               f"({where}): major.minor must be equal")
        if choice == "pyslurm":
            raise BackendChoiceError(f"Slurm backend pyslurm: {why}")
        return cli, f"auto: {why}"
    how = "configured" if choice == "pyslurm" else "auto"
    return backend, f"{how}: pyslurm {hello['pyslurm']} matches Slurm {running} ({where})"


def backend_choice(configured: str = "auto", override: str | None = None) -> str:
    """The flag if given, else $LYASCHED_SLURM_BACKEND, else the config's ``[slurm] backend``."""
    return override or os.environ.get(BACKEND_ENV) or configured
