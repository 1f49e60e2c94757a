"""Shared fixtures. Real-cluster tests carry ``@pytest.mark.slurm`` and run only with LYASCHED_SLURM=1
against the cluster started by ``slurm/cluster up`` (docs/test-cluster.md); tests never start or
stop it themselves, it is shared."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

TEST_USER = "lyatest"
OTHER_USER = "lyaother"
CLUSTER_STATE = Path(os.environ.get("LYASCHED_CLUSTER_STATE", "/var/lib/lyasched-cluster"))


def slurm_enabled() -> bool:
    return os.environ.get("LYASCHED_SLURM") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if slurm_enabled():
        return
    skip = pytest.mark.skip(reason="needs the Slurm test cluster: slurm/cluster up, then LYASCHED_SLURM=1")
    for item in items:
        if "slurm" in item.keywords:
            item.add_marker(skip)


def run_as(user: str, *argv: str, check: bool = False, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` (runuser keeps the environment, so PATH still finds sbatch)."""
    cmd = list(argv) if user == "root" else ["runuser", "-u", user, "--", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def test_user() -> str:
    """The unprivileged user that submits jobs in tests (created by slurm/cluster up)."""
    if slurm_enabled() and subprocess.run(["id", TEST_USER], capture_output=True).returncode != 0:
        pytest.fail(f"user {TEST_USER} missing: run slurm/cluster up first")
    return TEST_USER


@pytest.fixture(scope="session")
def other_user() -> str:
    """A second unprivileged user (must not be able to touch test_user's jobs)."""
    if slurm_enabled() and subprocess.run(["id", OTHER_USER], capture_output=True).returncode != 0:
        pytest.fail(f"user {OTHER_USER} missing: run slurm/cluster up first")
    return OTHER_USER


@pytest.fixture
def as_user() -> Callable[..., subprocess.CompletedProcess]:
    """``as_user(user, *argv, check=False, timeout=60)`` -> CompletedProcess (user "root" runs directly)."""
    return run_as


@pytest.fixture(scope="session")
def cluster_python() -> str:
    """Interpreter job scripts should call (has torch and lyasched; runnable by the test users)."""
    link = CLUSTER_STATE / "python"
    return str(link) if link.exists() else shutil.which("python3") or "python3"


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A fresh directory the test users can write job output into."""
    d = Path(tempfile.mkdtemp(prefix="lyasched-job-", dir="/tmp"))
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def slurm_jobs() -> Iterator[list[str]]:
    """Append every submitted Slurm job id; all are cancelled at teardown."""
    jobs: list[str] = []
    yield jobs
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)


FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"})


def job_state(job_id: str) -> str:
    """Current state of a job from squeue ("" if unknown); finished jobs stay listed for MinJobAge."""
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
                         capture_output=True, text=True, timeout=30).stdout.strip()
    return out.splitlines()[0] if out else ""


def wait_for_job(job_id: str, states: frozenset[str] = FINAL_STATES, timeout: float = 60) -> str:
    """Poll ``squeue`` until the job reaches one of ``states``; returns the state (fails on timeout)."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = job_state(job_id)
        if state in states:
            return state
        time.sleep(0.5)
    pytest.fail(f"job {job_id} still {state or 'unknown'} after {timeout}s")


@pytest.fixture
def wait_job() -> Callable[..., str]:
    """``wait_job(job_id, states=FINAL_STATES, timeout=60)`` -> the state reached."""
    return wait_for_job


@pytest.fixture(params=["cli", "pyslurm"])
def slurm_backend(request: pytest.FixtureRequest) -> str:
    """The Slurm backend an edge test uses (lyasched.slurm.backend): every such test runs with both;
    pyslurm is skipped where it is not installed (`make pyslurm`)."""
    import importlib.util

    if request.param == "pyslurm" and importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (make pyslurm)")
    return request.param
