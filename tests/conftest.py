"""Shared fixtures. Real-cluster tests carry ``@pytest.mark.slurm`` and run only with LYASCHED_SLURM=1
against a running test cluster (docs/test-cluster.md); tests never start or stop it themselves.

``LYASCHED_CLUSTER`` picks which: ``native`` (default: ``slurm/cluster up``, daemons on this host,
commands run locally through ``runuser``) or ``docker`` (``docker/cluster up``: commands run on the
login container as the given user; the Slurm commands a test calls itself as root, ``squeue`` say,
reach the login container through docker/bin, put first in PATH). The ``cluster`` fixture hides the
difference; tests marked ``docker`` need the docker cluster (faults, accounting, several hosts)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest
from reliability.users import CLUSTER_STATE, OTHER_USER, TEST_USER, as_user_argv, as_user as run_as_here

from lyasched.slurm.types import TERMINAL_STATES

CLUSTER_KIND = os.environ.get("LYASCHED_CLUSTER", "native")
REPO = Path(__file__).resolve().parents[1]
DOCKER_STATE = Path(os.environ.get("LYASCHED_DOCKER_STATE", "/var/lib/lyasched-docker"))
DOCKER_PREFIX = "lyasched-"
if CLUSTER_KIND not in ("native", "docker"):
    raise pytest.UsageError(f"LYASCHED_CLUSTER={CLUSTER_KIND!r}: expected native or docker")
if CLUSTER_KIND == "docker":  # the test process's own Slurm commands (as root) go to the login container
    os.environ["PATH"] = f"{REPO / 'docker' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def slurm_enabled() -> bool:
    return os.environ.get("LYASCHED_SLURM") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "docker: needs the docker test cluster (LYASCHED_CLUSTER=docker)")


# slurm-marked tests that drive the native cluster's host directly (tests/reliability/ calls
# `runuser`, start the service with the host's Python, stop slurmctld by its host pid): the docker
# cluster has its own versions of these (tests/test_docker_*.py). Node id prefix -> why.
NATIVE_ONLY = {
    "tests/test_unit_slurm.py": "slurm/unit-sandbox mounts in this host's namespaces (the docker svc host has no "
                                "unit installed)",
    "tests/test_faults.py": "reliability.faults stops this host's slurmctld by pid (docker: test_docker_faults.py)",
    "tests/test_load.py::test_burst": "reliability.load runs lyasub and the service on this host",
    "tests/test_load.py::test_one_slot": "reliability.load runs lyasub and the service on this host",
    "tests/test_slurm_backends.py": "the backend parity/error tests call this host's sbatch through runuser and "
                                    "read its /etc/slurm/slurm.conf; the docker image has no pyslurm wheel",
    "tests/test_bad_input.py::test_plugin_refuses": "reliability.badinput runs sbatch through this host's "
                                                    "runuser (docker: test_job_submit.py covers the plugin)",
}

# Failures that only the docker cluster's real accounting shows, in code this change does not own:
# marked xfail(strict) so the suite reports them and turns red once they are fixed (then drop them).
DOCKER_KNOWN_FAILURES: dict[str, str] = {}
# Flaky on the docker cluster for a reason not yet found: marked xfail without strict (test id prefix -> why).
DOCKER_FLAKY: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs the Slurm test cluster: slurm/cluster up, then LYASCHED_SLURM=1")
    skip_docker = pytest.mark.skip(reason="needs the docker test cluster: docker/cluster up, then "
                                          "LYASCHED_SLURM=1 LYASCHED_CLUSTER=docker (make test-docker)")
    for item in items:
        # Markers, not keywords: a directory named "docker" (this worktree) is a keyword of every test.
        slurm, docker = item.get_closest_marker("slurm"), item.get_closest_marker("docker")
        if slurm and not slurm_enabled():
            item.add_marker(skip)
        elif docker and not (slurm_enabled() and CLUSTER_KIND == "docker"):
            item.add_marker(skip_docker)
        elif slurm and CLUSTER_KIND == "docker":
            why = next((w for prefix, w in NATIVE_ONLY.items() if item.nodeid.startswith(prefix)), None)
            if why:
                item.add_marker(pytest.mark.skip(reason=f"native cluster only: {why}"))
            known = next((w for prefix, w in DOCKER_KNOWN_FAILURES.items() if item.nodeid.startswith(prefix)), None)
            if known:
                item.add_marker(pytest.mark.xfail(strict=True, reason=known))
            flaky = next((w for prefix, w in DOCKER_FLAKY.items() if item.nodeid.startswith(prefix)), None)
            if flaky:
                item.add_marker(pytest.mark.xfail(strict=False, reason=flaky))


class ClusterProcess:
    """A long-running command started in a container (``lyasched serve``): the subset of Popen the
    tests use. Signals go to the process inside the container (``docker exec`` does not forward them)."""

    def __init__(self, container: str, user: str, argv: list[str], cwd: str | None, stdout, stderr) -> None:
        self.container = container
        self.pidfile = f"/tmp/lyasched-proc-{os.getpid()}-{id(self)}.pid"
        script = f'echo $$ > {self.pidfile}; exec "$@"'
        cmd = ["docker", "exec", "-u", user, *(["-w", cwd] if cwd else []), container, "bash", "-c", script, "-",
               *argv]
        self.proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL)
        self.args = argv

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout=timeout)

    def send_signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            subprocess.run(["docker", "exec", self.container, "bash", "-c",
                            f"[ -s {self.pidfile} ] && kill -{int(sig)} $(cat {self.pidfile})"],
                           capture_output=True, timeout=30)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self.proc.kill()


class Cluster:
    """Where the real-cluster tests run their commands: ``native`` (this host) or ``docker``."""

    kind = "native"
    service_user = "root"  # the account `lyasched serve` runs as in tests
    service_uid: int | None = None  # set when it is not root: directories it writes are chowned to it

    def run(self, user: str, *argv: str, check: bool = False, timeout: float = 60, cwd=None,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` as ``user`` (runuser keeps the environment, so PATH still finds sbatch)."""
        return run_as_here(user, *argv, check=check, timeout=timeout, cwd=cwd, input=input)

    def popen(self, user: str, *argv: str, cwd=None, stdout=None, stderr=None, env=None):
        """Start a long-running command as ``user`` (the service); Popen-like. ``env``: its environment
        (native; in a container the command gets the container's own)."""
        return subprocess.Popen(as_user_argv(user, *argv), cwd=cwd, stdout=stdout, stderr=stderr, env=env)

    def which(self, name: str) -> str:
        """Path (or name) of one of lyasched's commands as the cluster's users call it (next to this
        interpreter: the test users' PATH may not have it)."""
        here = Path(sys.executable).with_name(name)
        return str(here) if here.exists() else shutil.which(name) or name

    @property
    def python(self) -> str:
        """Interpreter job scripts should call (has torch and lyasched; runnable by the test users)."""
        link = CLUSTER_STATE / "python"
        return str(link) if link.exists() else shutil.which("python3") or "python3"

    @property
    def job_root(self) -> Path:
        """Where job directories go: seen at the same path by the test, the users' commands and the jobs."""
        return Path("/tmp")


class DockerCluster(Cluster):
    """docker/cluster: commands run in the login container (the service in svc, as its account)."""

    kind = "docker"
    service_user = "lyasched"
    service_uid = 2990  # docker/cluster SVC_UID
    login = DOCKER_PREFIX + "login"
    service_host = DOCKER_PREFIX + "svc"

    def run(self, user: str, *argv: str, check: bool = False, timeout: float = 60, cwd=None,
            input: str | None = None, container: str | None = None) -> subprocess.CompletedProcess:
        if cwd is None and user != "root":  # like a login shell: start in the (shared) home directory
            cwd = f"/home/{user}"
        cmd = ["docker", "exec", *(["-i"] if input is not None else []), "-u", user,
               *(["-w", str(cwd)] if cwd else []), container or self.login, *map(str, argv)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
        proc.args = list(argv)
        if check and proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, shlex.join(map(str, argv)), proc.stdout, proc.stderr)
        return proc

    def popen(self, user: str, *argv: str, cwd=None, stdout=None, stderr=None, env=None):
        host = self.service_host if user == self.service_user else self.login
        return ClusterProcess(host, user, [str(a) for a in argv], str(cwd) if cwd else None, stdout, stderr)

    def which(self, name: str) -> str:
        return name  # on PATH in every container (/opt/lyasched/venv/bin)

    @property
    def python(self) -> str:
        return "/opt/lyasched/venv/bin/python"

    @property
    def job_root(self) -> Path:
        return DOCKER_STATE / "shared" / "jobs"

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        """The docker CLI itself (fault injection)."""
        return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


CLUSTER: Cluster = DockerCluster() if CLUSTER_KIND == "docker" else Cluster()


def run_as(user: str, *argv: str, check: bool = False, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """Run ``argv`` as ``user`` on the test cluster (user "root" is the privileged side)."""
    return CLUSTER.run(user, *argv, check=check, timeout=timeout, **kw)


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """The test cluster: ``run(user, *argv)``, ``popen(user, *argv)``, ``which(cmd)``, ``python``, ``kind``."""
    return CLUSTER


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
    return CLUSTER.python


@pytest.fixture
def job_dir() -> Iterator[Path]:
    """A fresh directory the test users can write job output into."""
    d = Path(tempfile.mkdtemp(prefix="lyasched-job-", dir=CLUSTER.job_root))
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


FINAL_STATES = TERMINAL_STATES  # lyasched.slurm.types: the one classification of Slurm job states


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

    if request.param == "pyslurm" and CLUSTER.kind == "docker":
        pytest.skip("the docker cluster's venv has no pyslurm (docker/cluster installs pyproject's requirements)")
    if request.param == "pyslurm" and importlib.util.find_spec("pyslurm") is None:
        pytest.skip("pyslurm is not installed (make pyslurm)")
    return request.param


@pytest.fixture(autouse=True)
def _fake_users_own_this_process_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake Slurm's users (alice, bob, ...) have no account on this host; the files their
    "jobs" write here are this test process's. The service reads a job's files only as its
    user's (lyasched.userfiles), so such a user is taken to be this process's uid. Real users
    (the cluster's lyatest and lyaother) resolve as they do in production."""
    from lyasched import userfiles

    real = userfiles.uid_of
    monkeypatch.setattr(userfiles, "uid_of", lambda user: real(user) if real(user) is not None or not user
                        else os.getuid())
