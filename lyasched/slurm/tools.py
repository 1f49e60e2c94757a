"""`SlurmCLI`: the only place a Slurm tool's process starts (argv lists, never a shell), with
timeouts and retries of idempotent calls."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Sequence

from lyasched.slurm.errors import SlurmError, SlurmUnavailable, retryable, slurm_error

log = logging.getLogger("lyasched.slurm")


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
