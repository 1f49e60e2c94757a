"""The site's accounting as the estimator's history: sacct records -> `Finished` jobs.

Reuses `lyasched.slurm.sacct`'s parser (the same records `lyasched whatif` reads); JobName is
read when the recording has it (``--format=...,JobName``), else the name keys are skipped. Every
run that held an allocation and ended counts, whatever its final state (a FAILED or TIMEOUT
run is what the user's jobs do too); a requeued job's earlier runs count as runs of their own.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from lyasched.estimates.model import Finished, Request
from lyasched.whatif.history import HistoryJob
from lyasched.slurm.sacct import SacctRecord, parse_sacct


def request_of(rec: SacctRecord, gpus: int | None = None) -> Request:
    """What the job asked for, as a plain job's request (no script key: sacct has none)."""
    return Request(user=rec.user, account=rec.account, gpus=rec.alloc_gpus if gpus is None else gpus,
                   name=rec.name, time_limit=rec.time_limit, partition=rec.partition)


def request_of_job(job: HistoryJob, name: str = "") -> Request:
    """A replayed history job (`lyasched.whatif.history`: requeued runs merged) as a request."""
    return Request(user=job.user, account=job.account, gpus=job.gpus, name=name, time_limit=job.time_limit,
                   partition=job.partition)


def finished_of_job(job: HistoryJob, name: str = "") -> Finished:
    """A history job as a finished one: its last run (the one that ended it), submitted at its arrival."""
    return Finished(request_of_job(job, name), submit=job.arrival, start=job.end - job.work_s, elapsed=job.work_s,
                    state=job.state)


def names_by_line(records: Iterable[SacctRecord]) -> Mapping[int, str]:
    """JobName by sacct line (HistoryJob.line names its last run's line); empty names left out."""
    return {r.line: r.name for r in records if r.name}


def finished_from_records(records: Iterable[SacctRecord], gpu_only: bool = True) -> list[Finished]:
    """The runs that started and ended (GPU ones only unless ``gpu_only`` is False), by end time."""
    out = []
    for r in records:
        if r.start is None or r.end is None or not r.has_alloc:
            continue
        if gpu_only and r.alloc_gpus <= 0:
            continue
        out.append(Finished(request=request_of(r), submit=r.submit, start=r.start, elapsed=r.elapsed, state=r.state))
    out.sort(key=lambda f: (f.end, f.submit))
    return out


def finished_from_sacct(text: str, source: str = "sacct", gpu_only: bool = True) -> list[Finished]:
    """Parse sacct --parsable2 text (SacctError on a bad value) and keep the finished runs."""
    return finished_from_records(parse_sacct(text, source).records, gpu_only=gpu_only)
