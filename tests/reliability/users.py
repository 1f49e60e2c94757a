"""The unprivileged test users (made by ``slurm/cluster up``) and the one way to run a command as one.

tests/conftest.py takes its ``test_user``/``other_user`` fixtures and the native ``as_user`` from here,
so the tests and the reliability suites submit as the same user.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

TEST_USER = "lyatest"  # submits the jobs under test
OTHER_USER = "lyaother"  # a second user: must not be able to touch TEST_USER's jobs; owns "foreign" jobs
CLUSTER_STATE = Path(os.environ.get("LYASCHED_CLUSTER_STATE", "/var/lib/lyasched-cluster"))


def as_user_argv(user: str, *argv: str) -> list[str]:
    """The command line that runs ``argv`` as ``user`` on this host (``root``: ``argv`` itself), for
    ``as_user`` and for the long-running processes started with Popen."""
    return list(argv) if user == "root" else ["runuser", "-u", user, "--", *argv]


def as_user(user: str, *argv: str, check: bool = False, timeout: float = 60, cwd: str | os.PathLike | None = None,
            input: str | bytes | None = None, env: dict[str, str] | None = None,
            text: bool = True) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` on this host and capture its output (``user == "root"`` runs it directly).

    ``runuser`` keeps the environment (``env``, else ours), so PATH still finds sbatch and lyasub.
    ``text=False`` gives bytes (an argument or answer that is not UTF-8)."""
    return subprocess.run(as_user_argv(user, *argv), capture_output=True, text=text, check=check, timeout=timeout,
                          cwd=cwd, input=input, env=env)
