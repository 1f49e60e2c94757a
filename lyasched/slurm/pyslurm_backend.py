"""The pyslurm backend: Slurm's C API through PySlurm 22.5 (`make pyslurm`), no process per query
and no text to parse.

The calls run in one long-lived worker process (lyasched.slurm.pyslurm_worker): PySlurm holds the
GIL while libslurm waits on the controller, so only a separate process can be given up on. Each
call has the same timeout and retry rules as `SlurmCLI`: an idempotent call that fails or
times out (the worker is then killed and a fresh one started) is retried ``retries`` times with
backoff; `NoSuchJob` and `PermissionDenied` are answers, never retried; a submission is never
retried.

What PySlurm 22.5.3 cannot do is delegated to the CLI backend, for that call only
(docs/slurm-backends.md): ``resize`` (its JobSubmitDescription cannot change NumNodes of an
existing job), ``accounting`` (not verifiable without slurmdbd; ``sacct``), and a submission
with raw sbatch options (``SbatchOptions.extra``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from lyasched.slurm.errors import SlurmError, SlurmUnavailable, retryable, slurm_error
from lyasched.slurm.pyslurm_worker import read_frame, write_frame
from lyasched.slurm.types import AccountingRecord, ClusterConfig, NodeInfo, SlurmJob

log = logging.getLogger("lyasched.slurm")  # the logger the service quiets during an outage


def pyslurm_installed() -> str | None:
    """PySlurm's version if it is installed (without importing it: that needs a Slurm config)."""
    if importlib.util.find_spec("pyslurm") is None:
        return None
    try:
        return importlib.metadata.version("pyslurm")
    except Exception:  # noqa: BLE001
        return "unknown"


# What each call is called in errors and logs, and the fault-injection key (tests/reliability/flaky_slurm.py)
# of the CLI call it stands for.
CALLS = {
    "hello": "slurm_load_ctl_conf",
    "config": "slurm_load_ctl_conf",
    "nodes": "slurm_load_node",
    "jobs": "slurm_load_jobs",
    "jobs_delta": "slurm_load_jobs",
    "job": "slurm_load_job",
    "work_dir": "slurm_load_job",
    "release": "slurm_update_job",
    "hold": "slurm_update_job",
    "cancel": "slurm_kill_job",
    "submit": "slurm_submit_batch_job",
    "signal": "slurm_kill_job",
    "requeue_hold": "slurm_requeue",
}


class PySlurm:
    """`Slurm` through PySlurm in a worker process. ``cli`` answers what PySlurm cannot."""

    name = "pyslurm"

    def __init__(self, timeout: float = 30.0, retries: int = 2, backoff: float = 1.0, prefix: Sequence[str] = (),
                 cli: Any | None = None, python: str = sys.executable) -> None:
        from lyasched.slurm.tools import SlurmCLI
        from lyasched.slurm.cli import CliSlurm

        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        # A prefix (a fault injector) runs the worker itself: `PREFIX pyslurm-worker`.
        self.command = [*prefix, "pyslurm-worker"] if prefix else [python, "-m", "lyasched.slurm.pyslurm_worker"]
        self.cli = cli if cli is not None else CliSlurm(SlurmCLI(timeout=timeout, retries=retries, prefix=tuple(prefix)))
        self.calls = 0
        self.starts = 0  # worker processes started (one more after each kill)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._config: ClusterConfig | None = None
        self._jobs_seen: dict[str, SlurmJob] = {}  # the last full job list, for jobs_delta
        self._jobs_token: str | None = None

    # ------------------------------------------------------------ the worker

    def _start(self) -> subprocess.Popen:
        self.starts += 1
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      close_fds=True)
        return self._proc

    def _kill(self) -> None:
        p, self._proc = self._proc, None
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            p.wait()
            for f in (p.stdin, p.stdout):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            p = self._proc
            if p is not None and p.poll() is None:
                try:
                    if p.stdin is not None:
                        p.stdin.close()
                    p.wait(timeout=2)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._kill()

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self._kill()
        except Exception:  # noqa: BLE001
            pass

    def _once(self, op: str, args: tuple) -> Any:
        what = [f"pyslurm {CALLS.get(op, op)}"]
        p = self._proc if self._proc is not None and self._proc.poll() is None else None
        if p is None:
            self._kill()
            p = self._start()
        assert p.stdin is not None and p.stdout is not None  # started with pipes (_start)
        try:
            write_frame(p.stdin, (op, args))
        except (BrokenPipeError, OSError) as e:
            self._kill()
            raise SlurmUnavailable(what, f"pyslurm worker gone ({e})") from None
        ready, _, _ = select.select([p.stdout], [], [], self.timeout)
        if not ready:
            self._kill()  # it may be stuck in libslurm: the next call starts a fresh one
            raise SlurmUnavailable(what, f"timed out after {self.timeout:g}s")
        try:
            answer = read_frame(p.stdout)
        except (EOFError, OSError) as e:
            rc = p.poll()
            self._kill()
            raise SlurmUnavailable(what, f"pyslurm worker exited (rc {rc}) {e or ''}".strip()) from None
        if answer[0] == "ok":
            return answer[1]
        _, kind, message = answer
        if kind in ("ValueError", "TypeError") and op == "submit":
            raise SlurmError(what, message)
        raise slurm_error(what, message or kind)

    def _call(self, op: str, *args: Any, idempotent: bool = True) -> Any:
        attempts = 1 + (self.retries if idempotent else 0)
        err: SlurmError | None = None
        for i in range(attempts):
            self.calls += 1
            with self._lock:
                try:
                    return self._once(op, args)
                except SlurmError as e:
                    err = e
            if not retryable(err):
                break
            if i + 1 < attempts:
                log.warning("%s failed (%s), retry %d/%d", err.cmd[0], err.detail[:200], i + 1, attempts - 1)
                time.sleep(self.backoff * (2**i))
        assert err is not None
        raise err

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def hello(self) -> dict[str, Any]:
        """Start the worker (importing pyslurm) and ask the versions: pyslurm's, libslurm's, and the
        controller's ("" when it does not answer within one timeout: no retries at start-up)."""
        out = dict(self._call("hello"))
        try:
            with self._lock:
                self._config = self._once("config", ())
            out["controller"] = self._config.version
        except SlurmError as e:
            out["controller"], out["controller_error"] = "", e.detail
        return out

    # ------------------------------------------------------------ Slurm

    def nodes(self) -> list[NodeInfo]:
        return self._call("nodes")

    def jobs(self, *, user: str | None = None, job_ids: Sequence[str] = (), lyasched_only: bool = True) -> list[SlurmJob]:
        if user is None and not job_ids and lyasched_only:
            return self._all_lyasched_jobs()
        return self._call("jobs", user, tuple(str(j) for j in job_ids), lyasched_only)

    def _all_lyasched_jobs(self, retry: bool = True) -> list[SlurmJob]:
        """The service's every-slot read: the worker sends only the jobs that changed since the
        answer this process kept (lyasched.slurm.pyslurm_worker.Worker.jobs_delta)."""
        token, order, changed = self._call("jobs_delta", self._jobs_token)
        old, new = self._jobs_seen, {}
        for i in order:
            t = changed.get(i)
            if t is not None:
                new[i] = SlurmJob(*t)
            elif i in old:
                new[i] = old[i]
            else:  # the worker's last answer is not the one kept here: ask for everything
                self._jobs_token, self._jobs_seen = None, {}
                if retry:
                    return self._all_lyasched_jobs(retry=False)
                raise SlurmError(["pyslurm slurm_load_jobs"], f"job {i} neither sent nor known")
        self._jobs_seen, self._jobs_token = new, token
        return list(new.values())

    def job(self, job_id: str) -> SlurmJob | None:
        return self._call("job", str(job_id))

    def work_dir(self, job_id: str) -> str | None:
        return self._call("work_dir", str(job_id))

    def config(self) -> ClusterConfig:
        if self._config is None:
            self._config = self._call("config")
        return self._config

    def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        return self.cli.accounting(job_ids)  # sacct (docs/slurm-backends.md)

    def history(self, since: str, until: str | None, partition: str | None, fields: Sequence[str]) -> str:
        return self.cli.history(since, until, partition, fields)  # sacct, as accounting

    def query(self, argv: Sequence[str]) -> str:
        return self.cli.query(argv)  # sacctmgr and squeue (lyasched.live.limits)

    def resize(self, job_id: str, num_nodes: int, gpus_per_node: int, nodes: Sequence[str] = (),
               gpu_type: str = "") -> None:
        self.cli.resize(job_id, num_nodes, gpus_per_node, nodes, gpu_type)  # scontrol update (NumNodes: see module doc)

    def release(self, job_id: str) -> None:
        self._call("release", str(job_id))

    def set_comment(self, job_id: str, text: str) -> None:
        self.cli.set_comment(job_id, text)  # scontrol update, as resize

    def hold(self, job_id: str) -> None:
        self._call("hold", str(job_id))

    def cancel(self, job_id: str) -> None:
        self._call("cancel", str(job_id))

    def submit(self, opts: Any, script: str | None = None) -> str:
        fields = submit_fields(opts)
        if fields is None:
            return self.cli.submit(opts, script)  # raw sbatch options: only sbatch understands them
        if script is not None:
            return self._call("submit", fields, str(script), idempotent=False)
        if not opts.wrap:
            raise ValueError("submit: no script and no wrap command")
        import tempfile

        with tempfile.NamedTemporaryFile("w", prefix="lyasched-wrap-", suffix=".sh") as f:
            f.write("#!/bin/sh\n# This script was created by lyasched (as sbatch --wrap does).\n" + opts.wrap + "\n")
            f.flush()
            return self._call("submit", fields, f.name, idempotent=False)

    # ------------------------------------------------------------ moves (docs/elastic.md)

    def signal(self, job_id: str, signal: str) -> None:
        self._call("signal", str(job_id), signal)  # a second USR1 only sets the flag again

    def set_requeue(self, job_id: str, allow: bool) -> None:
        self.cli.set_requeue(job_id, allow)  # scontrol update Requeue= (as resize: one field of an existing job)

    def requeue_hold(self, job_id: str) -> None:
        self._call("requeue_hold", str(job_id), idempotent=False)
        self.cli.begin_now(job_id)  # scontrol update StartTime=now (lyasched.slurm.commands.begin_now_args)


def submit_fields(opts: Any) -> dict[str, Any] | None:
    """`SbatchOptions` as PySlurm JobSubmitDescription fields; None if it has raw ``extra`` options."""
    if getattr(opts, "extra", ()):
        return None
    f: dict[str, Any] = {}
    pairs = {
        "partitions": opts.partition, "account": opts.account, "qos": opts.qos, "time_limit": opts.time,
        "memory_per_node": opts.mem, "cpus_per_gpu": opts.cpus_per_gpu, "name": opts.job_name,
        "standard_output": opts.output, "standard_error": opts.error, "constraints": opts.constraint,
        "comment": opts.comment, "nodes": opts.nodes, "working_directory": opts.chdir, "ntasks": opts.ntasks,
    }
    f.update({k: v for k, v in pairs.items() if v is not None})
    if isinstance(f.get("time_limit"), str) and f["time_limit"].isdigit():
        f["time_limit"] = int(f["time_limit"])  # minutes: PySlurm passes a digit string through as is
    if opts.gpus_per_node is not None:
        gt = getattr(opts, "gpu_type", None)
        f["gres_per_node"] = f"gpu:{gt}:{opts.gpus_per_node}" if gt else f"gpu:{opts.gpus_per_node}"
    if opts.hold:
        f["priority"] = 0  # what sbatch --hold sends
    return f
