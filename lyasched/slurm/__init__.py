"""The one way lyasched talks to Slurm: a typed interface (`Slurm`, lyasched.slurm.backend) with two
backends, the command-line tools (lyasched.slurm.cli, never a shell) and pyslurm
(lyasched.slurm.pyslurm_backend). docs/slurm-backends.md compares them.

Callers ask for what they need (``nodes()``, ``jobs()``, ``hold(id)``, ...) and get the values of
lyasched.slurm.types; the CLI backend's argv builders and parsers (``query``, ``submit``) are its
own business. `SlurmCLI.run` is the only place a Slurm tool's process starts.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Sequence

log = logging.getLogger("lyasched.slurm")


class SlurmError(RuntimeError):
    """A Slurm call failed (after retries, if it was safe to retry)."""

    def __init__(self, cmd: Sequence[str], message: str, returncode: int | None = None) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.detail = message.strip()
        super().__init__(f"{cmd[0]} failed: {message.strip() or 'no output'}")


class SlurmUnavailable(SlurmError):
    """The controller did not answer (down, unreachable, or the call timed out): retried, then raised."""


class NoSuchJob(SlurmError):
    """Slurm does not know the job (never existed, or purged after MinJobAge): never retried."""


class PermissionDenied(SlurmError):
    """Slurm refused the call for this user (e.g. hold/release by a non-operator): never retried."""


# Slurm's own error strings (slurm_strerror), which the tools print and libslurm returns alike.
_KINDS: tuple[tuple[type[SlurmError], re.Pattern[str]], ...] = (
    (NoSuchJob, re.compile(r"Invalid job id|Job ID \S+ not found|Unknown job", re.I)),
    (PermissionDenied, re.compile(r"Access/permission denied|Permission denied|access denied|not authorized|"
                                  r"User not found|Only (?:root|the operator)", re.I)),
    (SlurmUnavailable, re.compile(r"Unable to contact slurm controller|Socket timed out|timed out after|"
                                  r"Connection refused|Zero Bytes were transmitted|Communication connection failure|"
                                  r"Slurm backend .* unavailable|Transport endpoint|Connection reset", re.I)),
)


def slurm_error(cmd: Sequence[str], message: str, returncode: int | None = None) -> SlurmError:
    """The SlurmError subclass that ``message`` (Slurm's error text) describes."""
    for cls, pattern in _KINDS:
        if pattern.search(message or ""):
            return cls(cmd, message, returncode)
    return SlurmError(cmd, message, returncode)


def retryable(e: SlurmError) -> bool:
    """A missing job or a refusal gives the same answer next time; anything else may not."""
    return not isinstance(e, (NoSuchJob, PermissionDenied))


@dataclass
class SlurmCLI:
    """Runs Slurm CLI tools with a timeout; retries only calls marked idempotent.

    ``prefix`` lets tests or admins run the tools through a wrapper (e.g. a fault injector)
    and ``env`` adds variables such as SLURM_CONF.
    """

    timeout: float = 30.0
    retries: int = 2
    backoff: float = 1.0
    prefix: Sequence[str] = ()
    env: dict[str, str] | None = None
    calls: int = field(default=0, init=False)

    def run(self, args: Sequence[str], *, idempotent: bool = True, input: str | None = None) -> str:
        cmd = [*self.prefix, *args]
        if not self.prefix and shutil.which(cmd[0]) is None:
            raise SlurmError(cmd, "command not found (is slurm-client installed and on PATH?)")
        attempts = 1 + (self.retries if idempotent else 0)
        err: SlurmError | None = None
        for i in range(attempts):
            self.calls += 1
            try:
                env = {**os.environ, **self.env} if self.env else None
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, input=input, env=env)
            except subprocess.TimeoutExpired:
                err = SlurmUnavailable(list(args), f"timed out after {self.timeout:g}s")
            else:
                if p.returncode == 0:
                    return p.stdout
                # named after the Slurm tool, not a prefix wrapper
                err = slurm_error(list(args), p.stderr or p.stdout, p.returncode)
            if not retryable(err):
                break
            if i + 1 < attempts:
                log.warning("%s failed (%s), retry %d/%d", args[0], err.detail[:200], i + 1, attempts - 1)
                time.sleep(self.backoff * (2**i))
        assert err is not None
        raise err


from lyasched.slurm.backend import BackendChoiceError, Slurm, as_backend, make_backend  # noqa: E402

__all__ = [
    "BackendChoiceError", "NoSuchJob", "PermissionDenied", "Slurm", "SlurmCLI", "SlurmError", "SlurmUnavailable",
    "as_backend", "make_backend", "retryable", "slurm_error",
]
