"""The command-line backend: Slurm's tools (squeue, scontrol, sbatch, scancel, sacct) run by
`SlurmCLI`, their text parsed by lyasched.slurm.query / lyasched.slurm.submit.

Works with any Slurm whose tools print the 22.05 formats (20.x to 24.x); one process per call.
"""

from __future__ import annotations

from typing import Any, Sequence

from lyasched.slurm.errors import NoSuchJob
from lyasched.slurm.tools import SlurmCLI
from lyasched.slurm import commands
from lyasched.slurm import query as q
from lyasched.slurm import submit as sub
from lyasched.slurm.types import AccountingRecord, ClusterConfig, NodeInfo, SlurmJob


class CliSlurm:
    """`Slurm` through the CLI tools. ``runner`` is anything with ``run(argv, idempotent=...)``:
    a `SlurmCLI` (timeout, retries, an optional wrapper prefix) or a fake in tests."""

    name = "cli"

    def __init__(self, runner: Any | None = None) -> None:
        self.runner = runner if runner is not None else SlurmCLI()
        self._config: ClusterConfig | None = None
        self._lines: dict[str, SlurmJob | None] = {}  # the every-slot listing's lines, parsed (query.parse_squeue)
        self.memo = True  # False: every line parsed anew (benchmarks/slot_duration.py --backend cli-nomemo)

    def _run(self, argv: Sequence[str], idempotent: bool = True) -> str:
        return self.runner.run(list(argv), idempotent=idempotent)

    def query(self, argv: Sequence[str]) -> str:
        """A read-only Slurm query's output (sacctmgr, squeue: lyasched.live.limits)."""
        return self._run(argv)

    # ------------------------------------------------------------ reading

    def nodes(self) -> list[NodeInfo]:
        return q.parse_nodes(self._run(q.node_args()))

    def jobs(self, *, user: str | None = None, job_ids: Sequence[str] = (), lyasched_only: bool = True) -> list[SlurmJob]:
        try:
            out = self._run(q.squeue_args(user=user, job_ids=job_ids))
        except NoSuchJob:  # squeue --jobs with only unknown ids fails instead of listing nothing
            if job_ids:
                return []
            raise
        every = user is None and not job_ids and lyasched_only and self.memo  # the service's every-slot read
        return q.parse_squeue(out, lyasched_only=lyasched_only, memo=self._lines if every else None)

    def job(self, job_id: str) -> SlurmJob | None:
        listed = [j for j in self.jobs(job_ids=[job_id], lyasched_only=False) if j.job_id == str(job_id)]
        if listed:
            return listed[0]
        try:  # not listed by squeue (e.g. a hidden partition): scontrol still knows it until MinJobAge
            shown = q.parse_show_job(self._run(q.show_job_args(job_id)))
        except NoSuchJob:
            return None
        return shown[0] if shown else None

    def work_dir(self, job_id: str) -> str | None:
        try:
            shown = q.parse_show_job(self._run(q.show_job_args(job_id)))
        except NoSuchJob:
            return None
        return next((j.extra.get("WorkDir") for j in shown if j.extra.get("WorkDir")), None)

    def config(self) -> ClusterConfig:
        if self._config is None:
            self._config = q.parse_config(self._run(q.config_args()))
        return self._config

    def accounting(self, job_ids: Sequence[str]) -> list[AccountingRecord]:
        if not job_ids:
            return []
        return q.parse_sacct(self._run(q.sacct_args(job_ids)))

    def history(self, since: str, until: str | None, partition: str | None, fields: Sequence[str]) -> str:
        return self._run(q.history_args(since, until, partition, fields))

    # ------------------------------------------------------------ changing jobs

    def resize(self, job_id: str, num_nodes: int, gpus_per_node: int, nodes: Sequence[str] = (),
               gpu_type: str = "") -> None:
        self._run(commands.update_args(job_id, num_nodes, gpus_per_node, nodes, gpu_type))

    def release(self, job_id: str) -> None:
        self._run(commands.release_args(job_id))

    def set_comment(self, job_id: str, text: str) -> None:
        self._run(commands.comment_args(job_id, text))

    def hold(self, job_id: str) -> None:
        self._run(commands.hold_args(job_id))

    def cancel(self, job_id: str) -> None:
        # scancel (22.05) exits 0 and prints nothing for a job it does not know (the error shows
        # only with -v): ask first, so that a missing job is NoSuchJob here as through pyslurm.
        if self.job(job_id) is None:
            raise NoSuchJob(["scancel"], f"Kill job error on job id {job_id}: Invalid job id specified")
        self._run(sub.scancel_command(str(job_id)))

    def submit(self, opts: sub.SbatchOptions, script: str | None = None) -> str:
        """``sbatch --parsable`` (never retried: a retry could submit twice); the job id.
        ValueError when sbatch printed no job id (it may still have submitted one)."""
        out = self._run(sub.sbatch_command(opts, script), idempotent=False)
        return sub.parse_parsable(out)[0]

    def close(self) -> None:
        pass

    # ------------------------------------------------------------ moves (docs/elastic.md)

    def signal(self, job_id: str, signal: str) -> None:
        self._run(commands.signal_args(job_id, signal))  # a second USR1 only sets the flag again

    def set_requeue(self, job_id: str, allow: bool) -> None:
        self._run(commands.requeueable_args(job_id, allow))

    def requeue_hold(self, job_id: str) -> None:
        self._run(commands.requeue_hold_args(job_id), idempotent=False)
        self.begin_now(job_id)

    def begin_now(self, job_id: str) -> None:
        """No begin time 2 min ahead for a requeued job (commands.begin_now_args)."""
        self._run(commands.begin_now_args(job_id))
