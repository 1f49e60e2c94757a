"""Slurm's failures as exceptions, sorted by Slurm's own error strings (the tools print them,
libslurm returns them alike): which are worth a retry and which are not."""

from __future__ import annotations

import re
from typing import Sequence


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
