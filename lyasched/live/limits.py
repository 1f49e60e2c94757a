"""The service's side of Slurm's GPU limits (lyasched.slurm.limits): read them, and keep the
policy from choosing a start Slurm would refuse.

Each slot, when ``[slurm] limits`` is on (``auto``: on when ``sacctmgr`` answers), `LimitsWatch`:

1. reads the QOS and association limits (every ``refresh`` seconds: sacctmgr asks slurmdbd) and
   every job's account and QOS (squeue, each slot);
2. `cap`: counts the GPUs each scope holds (every running job, anyone's, and lyasched's released
   jobs Slurm has not started yet), then gives the policy each waiting job only the GPU counts
   that fit: a job with no count left is not offered at all this slot, and its record says which
   limit (``lyastat JOB``: ``waiting: Slurm limit QOS gpu2 MaxTRESPerUser gres/gpu=2 (2 held)``);
3. `admit`: the slot's starts taken together (two jobs of one user may each fit, not both): a
   start over a limit is dropped (the job stays held, no GPUs kept for it).

A site without accounting (sacctmgr fails) gets one log line and no limits (``auto``).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from lyasched.policy.state import SlotResult, WaitingJob
from lyasched.slurm import SlurmError
from lyasched.slurm import limits as lim
from lyasched.slurm.types import SlurmJob

log = logging.getLogger("lyasched.limits")

REASON = "Slurm limit"  # a waiting record's reason starts with it while a limit keeps the job out
MODES = ("auto", "on", "off")


@dataclass
class View:
    limits: lim.Limits
    tenancy: Mapping[str, lim.Tenancy]
    usage: lim.Usage


class LimitsWatch:
    """``run(argv) -> stdout``: the Slurm backend's query runner (CLI tools, both backends);
    ``accounting()``: whether the controller has an accounting store (``auto`` asks it first: no
    store, no limits, and no sacctmgr call)."""

    def __init__(self, run: Callable[[list[str]], str], mode: str = "auto", refresh: float = 60.0,
                 accounting: Callable[[], bool] | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"[slurm] limits must be one of {', '.join(MODES)}, got {mode!r}")
        self.run, self.mode, self.refresh, self.accounting = run, mode, refresh, accounting
        self._limits: lim.Limits | None = None
        self._read_at = -math.inf
        self.off = mode == "off"

    def _read_limits(self, now: float) -> lim.Limits | None:
        if self._limits is not None and now - self._read_at < self.refresh:
            return self._limits
        try:
            qos = lim.parse_qos(self.run(lim.qos_command()))
            users, accounts = lim.parse_assoc(self.run(lim.assoc_command()))
        except (SlurmError, lim.LimitsParseError) as e:
            if self.mode == "auto" and self._limits is None:
                log.warning("Slurm limits not read (%s): no accounting here? limits off ([slurm] limits = "
                            "\"on\" to insist)", str(e).splitlines()[0][:200])
                self.off = True
                return None
            if self._limits is None:
                raise
            log.warning("Slurm limits not re-read (%s): using those read %.0f s ago", str(e).splitlines()[0][:200],
                        now - self._read_at)
            return self._limits
        self._limits, self._read_at = lim.Limits(qos, users, accounts), now
        return self._limits

    def view(self, jobs: Sequence[SlurmJob], released: set[str], now: float) -> View | None:
        """This slot's limits, tenancy and GPUs held; None when off or no GPU limit exists."""
        if self.off:
            return None
        if self.mode == "auto" and self._limits is None and self.accounting is not None and not self.accounting():
            log.info("no accounting store (AccountingStorageType none): Slurm's limits are not read")
            self.off = True
            return None
        limits = self._read_limits(now)
        if not limits:
            return None
        tenancy = lim.parse_tenancy(self.run(lim.tenancy_command()))
        usage = lim.Usage()
        for j in jobs:
            holds = j.state in {"RUNNING", "COMPLETING", "SUSPENDED"} or (j.pending and j.job_id in released)
            if holds and j.job_id in tenancy:
                usage.add(tenancy[j.job_id], j.num_nodes * max(j.gpus_per_node, 0))
        return View(limits, tenancy, usage)


def cap(waiting: Sequence[WaitingJob], view: View) -> tuple[list[WaitingJob], dict[str, str]]:
    """The waiting jobs as the policy may see them under the limits: GPU counts above a job's
    headroom removed (inf), jobs with none left out. Returns (jobs, {left-out job id: why})."""
    out: list[WaitingJob] = []
    out_why: dict[str, str] = {}
    for w in waiting:
        t = view.tenancy.get(w.job_id)
        room, why = lim.headroom(t, view.usage, view.limits) if t is not None else (None, "")
        if room is None or room >= len(w.run_one_node):
            out.append(w)
            continue
        one, multi = w.run_one_node.copy(), w.run_multi_node.copy()
        one[room:] = np.inf
        multi[room:] = np.inf
        if not (np.isfinite(one).any() or np.isfinite(multi).any()):
            out_why[w.job_id] = why
            continue
        out.append(replace(w, run_one_node=one, run_multi_node=multi))
    return out, out_why


def admit(result: SlotResult, view: View) -> tuple[SlotResult, dict[str, str]]:
    """The slot's starts that fit together (`lyasched.slurm.limits.admit`); the others dropped."""
    usage = lim.Usage()
    usage.held = dict(view.usage.held)
    ok, refused = lim.admit([(d.job_id, d.gpus) for d in result.starts], view.tenancy, usage, view.limits)
    if not refused:
        return result, {}
    keep = set(ok)
    return replace(result, starts=tuple(d for d in result.starts if d.job_id in keep)), refused
