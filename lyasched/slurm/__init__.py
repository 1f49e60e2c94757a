"""The one way lyasched talks to Slurm: its command-line tools, never a shell.

Command builders and output parsers live in submodules (`submit`, `query`) as pure
functions tested by feeding strings; `SlurmCLI.run` is the only place a process starts.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Sequence

log = logging.getLogger("lyasched.slurm")


class SlurmError(RuntimeError):
    """A Slurm command failed (after retries, if it was safe to retry)."""

    def __init__(self, cmd: Sequence[str], message: str, returncode: int | None = None) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        super().__init__(f"{cmd[0]} failed: {message.strip() or 'no output'}")


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
        last = ""
        rc: int | None = None
        for i in range(attempts):
            self.calls += 1
            try:
                import os

                env = {**os.environ, **self.env} if self.env else None
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout, input=input, env=env)
            except subprocess.TimeoutExpired:
                last, rc = f"timed out after {self.timeout:g}s", None
            else:
                if p.returncode == 0:
                    return p.stdout
                last, rc = (p.stderr or p.stdout), p.returncode
            if i + 1 < attempts:
                log.warning("%s failed (%s), retry %d/%d", args[0], last.strip()[:200], i + 1, attempts - 1)
                time.sleep(self.backoff * (2**i))
        raise SlurmError(list(args), last, rc)  # named after the Slurm tool, not a prefix wrapper
