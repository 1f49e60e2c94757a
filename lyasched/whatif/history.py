"""From accounting records to the GPU jobs a what-if replays, with every record accounted for.

Rules (docs/whatif.md explains why):
* job steps are already dropped by the parser (the allocation line carries the job);
* lines sharing a JobID whose earlier runs ended REQUEUED (or PREEMPTED/NODE_FAIL/BOOT_FAIL, as
  ``sacct --duplicates`` shows the runs of a requeued job) are one job: it arrives when its
  first run became eligible, its replayed work is its last run, its GPU time is every run;
  other repeated JobIDs (job ids reset) stay separate jobs;
* a job that never got an allocation is ``cancelled_before_start`` when CANCELLED,
  ``pending`` when still waiting, ``never_started`` otherwise;
* a started job with no end yet is ``still_running``; a finished one without GPUs ``cpu_only``;
* every finished GPU job is replayed with its recorded run, whatever its final state
  (FAILED, TIMEOUT, CANCELLED after start, ...): it held the GPUs that long.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from lyasched.slurm.sacct import SacctRecord

REQUEUE_STATES = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL"})


@dataclass(frozen=True)
class Run:
    """One stretch a job held its allocation (a requeued job has several)."""

    start: float
    end: float
    gpus: int
    nnodes: int
    nodelist: str


@dataclass(frozen=True)
class HistoryJob:
    """A finished GPU job as it actually ran."""

    job_id: str
    user: str
    account: str
    partition: str
    state: str  # final state of the last run
    arrival: float  # when it could first have run: Eligible (Submit if unknown) of its first run
    end: float  # end of the last run
    work_s: float  # elapsed of the last run: what the replay runs
    used_s: float  # elapsed summed over all runs
    gpus: int  # GPUs of the last run
    time_limit: float | None
    runs: tuple[Run, ...]
    line: int  # sacct line of the last run
    # the GPU type its last run had (AllocTRES gres/gpu:a100=4, else ReqTRES), "" untyped: the types
    # the job allows as the simulator's workload column names them (comma-separated; one here, as
    # the records say which type it held, not which others it would have taken)
    gpu_types: str = ""
    # the GPU type its request named (ReqTRES), "" when it named none: the only type a typed replay
    # lets it run on (a job that named none may run on any)
    asked_type: str = ""

    @property
    def requeues(self) -> int:
        return len(self.runs) - 1

    @property
    def jct(self) -> float:
        return self.end - self.arrival


@dataclass
class History:
    jobs: list[HistoryJob]
    counts: dict[str, int]
    final_states: dict[str, int]
    gpu_types: dict[str, int] = field(default_factory=dict)
    # replayed jobs whose record has no value for Eligible (first run), NodeList (any run) or
    # Timelimit (last run): what stood in for it is in the report (lyasched.whatif.assume)
    unrecorded: dict[str, int] = field(default_factory=dict)

    @property
    def t0(self) -> float:
        return min(j.arrival for j in self.jobs)


def _instances(records: Iterable[SacctRecord]) -> list[list[SacctRecord]]:
    """Group lines into jobs: requeue runs merged, reused ids kept apart, file order kept."""
    by_id: dict[str, list[SacctRecord]] = {}
    for r in records:
        by_id.setdefault(r.job_id, []).append(r)
    out: list[list[SacctRecord]] = []
    for recs in by_id.values():
        if len(recs) == 1:
            out.append(recs)
            continue
        recs = sorted(recs, key=lambda r: (r.submit, r.start if r.start is not None else float("inf"), r.line))
        cur = [recs[0]]
        for r in recs[1:]:
            if cur[-1].state in REQUEUE_STATES:
                cur.append(r)
            else:
                out.append(cur)
                cur = [r]
        out.append(cur)
    return out


def _ran(r: SacctRecord) -> bool:
    return r.start is not None and (r.has_alloc or r.elapsed > 0)


def build_history(records: Sequence[SacctRecord], partition: str | None = None) -> History:
    """Classify every record; return the finished GPU jobs and the counts of all the others."""
    counts: Counter[str] = Counter(records=len(records))
    states: Counter[str] = Counter()
    types: Counter[str] = Counter()
    unrecorded: Counter[str] = Counter()
    jobs: list[HistoryJob] = []
    seen_ids: Counter[str] = Counter()
    groups = _instances(records)
    counts["total"] = len(groups)
    for group in groups:
        last = group[-1]
        if partition is not None and partition not in last.partition.split(","):
            counts["other_partition"] += 1
            continue
        runs = [r for r in group if _ran(r)]
        if len(group) > 1:
            counts["requeued"] += 1
        if not _ran(last):
            if last.state == "CANCELLED":
                counts["cancelled_before_start"] += 1
            elif last.end is None or last.state == "PENDING":
                counts["pending"] += 1
            else:
                counts["never_started"] += 1
            continue
        if last.end is None:
            counts["still_running"] += 1
            continue
        if last.alloc_gpus == 0:
            counts["cpu_only"] += 1
            continue
        seen_ids[last.job_id] += 1
        jid = last.job_id if seen_ids[last.job_id] == 1 else f"{last.job_id}#{seen_ids[last.job_id]}"
        first = group[0]
        arrival = max(first.submit, first.eligible if first.eligible is not None else first.submit)
        first_start = min(r.start for r in runs)  # type: ignore[type-var]
        arrival = min(arrival, first_start)  # type: ignore[type-var, assignment]
        runs_t = tuple(
            Run(r.start, r.end if r.end is not None else r.start + r.elapsed, r.alloc_gpus, r.nnodes, r.nodelist)  # type: ignore[arg-type, operator]
            for r in runs
        )
        jobs.append(
            HistoryJob(
                job_id=jid,
                user=last.user or "(unknown)",
                account=last.account or "(none)",
                partition=last.partition,
                state=last.state,
                arrival=arrival,
                end=last.end,
                work_s=last.elapsed,
                used_s=sum(r.elapsed for r in runs),
                gpus=last.alloc_gpus,
                time_limit=last.time_limit,
                runs=runs_t,
                line=last.line,
                gpu_types=last.gpu_type,
                asked_type=last.req_gpu_type,
            )
        )
        states[last.state] += 1
        unrecorded.update({"Eligible"} & first.unrecorded)
        unrecorded.update({"Timelimit"} & last.unrecorded)
        if any("NodeList" in r.unrecorded for r in runs):
            unrecorded["NodeList"] += 1
        if last.gpu_type:
            types[last.gpu_type] += 1
    counts["gpu"] = len(jobs)
    for k in ("cpu_only", "cancelled_before_start", "still_running", "pending", "never_started", "requeued", "other_partition"):
        counts.setdefault(k, 0)
    return History(jobs=jobs, counts=dict(counts), final_states=dict(states), gpu_types=dict(types),
                   unrecorded={k: unrecorded[k] for k in ("Eligible", "NodeList", "Timelimit")})
