"""What lyasched reads from Slurm, whichever backend read it (lyasched.slurm.backend).

Plain values, no I/O: the CLI backend builds them from tool output (lyasched.slurm.query), the
pyslurm backend from the C API's records; the service, lyasub and lyastat only see these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lyasched.summary import PREFIX as TAG  # a lyasched job's comment starts with its cost summary's prefix
from lyasched.summary import is_gpu_type  # noqa: F401 - the GPU type grammar, shared with the summary's key gt

# Slurm's job states, in two disjoint sets (and subsets of them below): the one place lyasched
# classifies them (squeue's long names). ACTIVE: the job is still in the queue and may (still, or
# again) hold GPUs, so a job with our uid in one of them is the one we submitted and resubmitting
# would duplicate it.
# TERMINAL: the job is done; it never runs again without a new submission.
# SPECIAL_EXIT is ACTIVE: Slurm requeues a job whose launch failed with the site's special exit
# code (EpilogSlurmctld) and holds it there until someone releases or cancels it; lyasched neither
# releases it (the hold is not the service's) nor records it finished (docs/service.md).
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "RESIZING", "REQUEUED", "REQUEUE_HOLD",
     "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
)
TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
     "DEADLINE", "REVOKED"}
)
# Active states in which the job holds its nodes' GPUs (`SlurmJob.running`): started and not yet let go.
HOLDING_STATES = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})
# Terminal states after which a job really ran (CANCELLED may mean "cancelled while pending").
RAN_STATES = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "DEADLINE"})
# A node in any of these states gives no GPUs to new jobs (they are flags in "IDLE+DRAIN" etc.).
UNUSABLE_NODE_FLAGS = frozenset(
    {
        "DOWN",
        "DRAIN",
        "DRAINED",
        "DRAINING",
        "FAIL",
        "FAILING",
        "MAINT",
        "NO_RESPOND",
        "NOT_RESPONDING",
        "POWER_DOWN",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWERING_UP",
        "REBOOT_ISSUED",
        "REBOOT_REQUESTED",
        "FUTURE",
        "UNKNOWN",
        "RESERVED",
        "INVAL",
        "PLANNED",
    }
)
# A hold set by job_submit.lua at submission reads JobHeldUser (Slurm names the hold after the
# submitter), one set by the operator (`scontrol hold`) JobHeldAdmin. The plugin refuses every
# hold/release by non-privileged users, so on a lyasched job both are the service's to release.
# `scontrol requeuehold` (a move, lyasched.live.mover) leaves the reason as its description
# (squeue %r: "job requeued in held state"; scontrol show job: underscores), priority 0.
SERVICE_HOLD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser", "job requeued in held state",
                                  "job_requeued_in_held_state"})



class ParseError(ValueError):
    """Slurm printed (or returned) something lyasched does not understand."""


@dataclass(frozen=True)
class NodeInfo:
    """One node's GPUs as Slurm reports them."""

    name: str
    state: str
    gpus_total: int
    gpus_alloc: int
    partitions: tuple[str, ...] = ()
    reason: str = ""
    gpu_type: str = ""  # "a100" in Gres=gpu:a100:4; "" when untyped
    features: tuple[str, ...] = ()  # its Slurm Features (ActiveFeatures), what a job's --constraint names

    @property
    def usable(self) -> bool:
        flags = set(re.split(r"[+]", self.state.rstrip("*~#!%$@^-")))
        return not (flags & UNUSABLE_NODE_FLAGS) and not self.state.endswith("*")

    @property
    def gpus_free(self) -> int:
        """Free GPUs for a new job: 0 on a drained/down node; GPUs of any job count as busy."""
        if not self.usable:
            return 0
        return max(0, self.gpus_total - self.gpus_alloc)


@dataclass(frozen=True)
class SlurmJob:
    """One Slurm job as `squeue` or `scontrol show job` reports it."""

    job_id: str
    user: str
    unix_uid: int | None  # the submitter's Unix uid (a record's ``uid`` is the lyasched job id)
    state: str
    reason: str
    priority: int
    submit_time: float | None
    start_time: float | None
    end_time: float | None
    time_limit: float
    num_nodes: int
    gpus_per_node: int
    nodes: tuple[str, ...]
    partition: str
    comment: str
    name: str
    extra: dict[str, str] = field(default_factory=dict, compare=False)
    gpu_type: str = ""  # the GPU type the job's request names ("a100" in gres:gpu:a100:2); "" when untyped

    @property
    def is_lyasched(self) -> bool:
        return self.comment.startswith(TAG)

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    @property
    def held_by_service(self) -> bool:
        """Pending and held by an operator/plugin hold (not one the user placed themselves)."""
        return self.pending and self.reason in SERVICE_HOLD_REASONS

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def running(self) -> bool:
        return self.state in HOLDING_STATES

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * max(1, self.num_nodes)

    @property
    def run_seconds(self) -> float | None:
        """Observed wall-clock run time, once the job has both a start and an end."""
        if self.start_time is None or self.end_time is None:
            return None
        return max(0.0, self.end_time - self.start_time)


@dataclass(frozen=True)
class AccountingRecord:
    job_id: str
    state: str
    start_time: float | None
    end_time: float | None
    elapsed: float | None


@dataclass(frozen=True)
class ClusterConfig:
    """The few controller settings lyasched needs (`scontrol show config`)."""

    version: str  # the running controller's version, e.g. "22.05.8"
    accounting: bool  # an accounting store (slurmdbd) is configured: `accounting()` can answer
    submit_plugins: tuple[str, ...]  # JobSubmitPlugins, e.g. ("lua",)

    @property
    def has_lua_submit_plugin(self) -> bool:
        """The lyasched job_submit.lua plugin (which holds lyasched jobs) may be configured."""
        return any(p in ("lua", "job_submit/lua") for p in self.submit_plugins)
