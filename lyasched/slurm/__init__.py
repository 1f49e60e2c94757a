"""The one way lyasched talks to Slurm: a typed interface (`Slurm`, lyasched.slurm.backend) with two
backends, the command-line tools (lyasched.slurm.cli, never a shell) and pyslurm
(lyasched.slurm.pyslurm_backend). docs/slurm-backends.md compares them.

Callers ask for what they need (``nodes()``, ``jobs()``, ``hold(id)``, ...) and get the values of
lyasched.slurm.types; the CLI backend's argv builders and parsers (``query``, ``submit``) are its
own business. `SlurmCLI.run` is the only place a Slurm tool's process starts.
"""

from __future__ import annotations

from lyasched.slurm.backend import BackendChoiceError, Slurm, as_backend, make_backend
from lyasched.slurm.errors import NoSuchJob, PermissionDenied, SlurmError, SlurmUnavailable, retryable, slurm_error
from lyasched.slurm.tools import SlurmCLI

__all__ = [
    "BackendChoiceError", "NoSuchJob", "PermissionDenied", "Slurm", "SlurmCLI", "SlurmError", "SlurmUnavailable",
    "as_backend", "make_backend", "retryable", "slurm_error",
]
