"""Pure sbatch/squeue/scontrol/scancel command builders and output parsers for submission.

Nothing here starts a process (that is `SlurmCLI.run`): every function maps arguments to an
argv list or parses a tool's output, so tests feed them strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from lyasched.slurm.types import ACTIVE_STATES, is_gpu_type

_JOB_ID_RE = re.compile(r"[0-9]+(_[0-9]+)?\Z")


@dataclass
class SbatchOptions:
    """The sbatch options lyasched passes; None means "leave it to Slurm's defaults"."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    mem: str | None = None
    cpus_per_gpu: int | None = None
    job_name: str | None = None
    output: str | None = None
    error: str | None = None
    constraint: str | None = None
    comment: str | None = None
    gpus_per_node: int | None = None  # --gres=gpu:N
    gpu_type: str | None = None  # with gpus_per_node: --gres=gpu:TYPE:N
    nodes: int | None = None
    hold: bool = False
    chdir: str | None = None
    ntasks: int | None = None
    wrap: str | None = None  # the job is this shell command (sbatch --wrap), not a script
    extra: Sequence[str] = field(default_factory=tuple)  # already-formed sbatch options (CLI backend only)


def sbatch_command(opts: SbatchOptions, script: str | None = None) -> list[str]:
    """argv for ``sbatch --parsable`` with ``opts``; the script is a path, or None for stdin.

    Every option is one ``--name=value`` element, so no value can be taken for another option.
    """
    argv = ["sbatch", "--parsable"]
    pairs: list[tuple[str, object]] = [
        ("partition", opts.partition),
        ("account", opts.account),
        ("qos", opts.qos),
        ("time", opts.time),
        ("mem", opts.mem),
        ("cpus-per-gpu", opts.cpus_per_gpu),
        ("job-name", opts.job_name),
        ("output", opts.output),
        ("error", opts.error),
        ("constraint", opts.constraint),
        ("comment", opts.comment),
        ("nodes", opts.nodes),
        ("chdir", opts.chdir),
    ]
    for name, value in pairs:
        if value is not None:
            argv.append(f"--{name}={value}")
    if opts.gpus_per_node is not None:
        if opts.gpu_type and not is_gpu_type(opts.gpu_type):
            raise ValueError(f"bad GPU type {opts.gpu_type!r}")
        typed = f"{opts.gpu_type}:" if opts.gpu_type else ""
        argv.append(f"--gres=gpu:{typed}{opts.gpus_per_node}")
    if opts.hold:
        argv.append("--hold")
    argv.extend(opts.extra)
    if opts.ntasks is not None:
        argv.append(f"--ntasks={opts.ntasks}")
    if opts.wrap is not None:
        argv.append(f"--wrap={opts.wrap}")
    if script is not None:
        argv.append(script)
    return argv


def parse_parsable(out: str) -> tuple[str, str | None]:
    """``sbatch --parsable`` output -> (job id, cluster or None): "123" or "123;cluster"."""
    lines = [ln.strip() for ln in out.strip().splitlines() if ln.strip()]
    if not lines:
        raise ValueError("sbatch printed no job id")
    job, sep, cluster = lines[-1].partition(";")
    if not _JOB_ID_RE.match(job):
        raise ValueError(f"sbatch printed {lines[-1]!r}, not a job id")
    return job, (cluster or None) if sep else None


def squeue_comments_command(user: str) -> list[str]:
    """argv listing ``user``'s active jobs as ``id|state|comment`` lines (comment last: it may hold '|')."""
    return ["squeue", "--noheader", f"--user={user}", "--format=%i|%T|%k"]


def find_job_by_uid(out: str, uid: str) -> str | None:
    """The active job whose lyasched comment carries ``id=<uid>``, from `squeue_comments_command` output."""
    needle = f"id={uid}"
    for line in out.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3:
            continue
        job, state, comment = parts
        if state not in ACTIVE_STATES or not comment.startswith("lyasched:"):
            continue
        if needle in comment.split(";"):
            return job
    return None


def scontrol_show_job_command(job_id: str) -> list[str]:
    return ["scontrol", "--oneliner", "show", "job", job_id]


def parse_scontrol_show(out: str) -> dict[str, str]:
    """``scontrol -o show job`` output -> {key: value}. Values may contain spaces only for the
    last keys (Comment, Command, ...), so a token without '=' continues the previous value."""
    fields: dict[str, str] = {}
    last: str | None = None
    for token in out.strip().split(" "):
        key, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9_:/]*", key):
            fields[key] = value
            last = key
        elif last is not None:
            fields[last] += " " + token
    return fields


def job_state(fields: dict[str, str]) -> str:
    """Base state of a job (``JobState=CANCELLED`` may read ``CANCELLED by 0`` in some versions)."""
    return fields.get("JobState", "").split(" ")[0].split("+")[0]


def scancel_command(job_id: str) -> list[str]:
    return ["scancel", job_id]


def has_lua_submit_plugin(config_out: str) -> bool:
    """Whether ``scontrol show config`` lists the job_submit/lua plugin (which holds lyasched jobs)."""
    for line in config_out.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "JobSubmitPlugins":
            return any(p.strip() in ("lua", "job_submit/lua") for p in value.split(","))
    return False
