"""Plain jobs of managed partitions, live: their run time estimated from history (docs/managed.md).

job_submit.lua tags a plain GPU batch job of a managed partition with a summary that carries no
profile (``pl=1``: its GPU count, rigid). The service predicts it from the history of similar
jobs (`lyasched.estimates`): the finished plain jobs in its own records (read at start, then
each finished one as it ends) and, where accounting exists, the site's `sacct` history. The
policy then sees such a job exactly as the simulator and `whatif --managed` see a trace row: a
`Job` whose run time at its GPU count is the estimate (`plain_job`), capped at its time limit by
the same clamp as every job. Once running past its estimate, ``PlainJobs.expected_run`` says what
to show instead: what the history says of similar jobs that ran that long, capped at its limit.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Iterable

from lyasched.costmodel.cost import Profile
from lyasched.costmodel.jobspec import Job
from lyasched.estimates import Estimate, Finished, Request, RuntimeEstimator
from lyasched.estimates.sacct import finished_from_records
from lyasched.slurm import SlurmError
from lyasched.slurm.types import SlurmJob
from lyasched.summary import CostSummary
from lyasched.slurm.sacct import FIELDS, SacctError, parse_sacct

log = logging.getLogger("lyasched.live.plain")

PLAIN_SIG = "plain"  # the sig job_submit.lua writes: no cost-table entry is ever made for it
HISTORY_SINCE = "now-30days"  # how far back the site's accounting is read at start


def request_of(user: str, name: str, gpus: int, time_limit: float | None, partition: str = "",
               account: str = "", script: str = "") -> Request:
    limit = time_limit if time_limit is not None and math.isfinite(time_limit) and time_limit > 0 else None
    return Request(user=user or "", account=account or "", gpus=max(1, int(gpus)), name=name or "",
                   script=script, time_limit=limit, partition=partition or "")


def script_of(sig: str) -> str:
    """The script key job_submit.lua put in a plain job's sig (``plain:<16 hex>``); "" when none."""
    head, _, key = sig.partition(":")
    return key if head == PLAIN_SIG and len(key) == 16 else ""


def plain_job(job_id: str, s: CostSummary, estimate: Estimate, submit_time: float, user: str,
              time_limit: float | None) -> Job:
    """The job the policy sees: one step as long as the estimate, at its fixed GPU count, no
    gradient to exchange (one parameter), so its run time is the estimate on any placement."""
    profile = Profile(model=PLAIN_SIG, alpha=max(1.0, float(estimate.mean_s)), beta=0.0, params=1,
                      bytes_per_param=4, mem_base=0.0, mem_per_sample=0.0, source="estimated")
    return Job(job_id=job_id, profile=profile, global_batch=s.min_gpus, iterations=1, submit_time=submit_time,
               min_gpus=s.min_gpus, max_gpus=s.min_gpus, requested_gpus=s.min_gpus, time_limit=time_limit,
               user=user)


class PlainJobs:
    """The estimator the service keeps for plain jobs: rebuilt from the records at start; the
    site's accounting (``history``: a loader, called once, when the first plain job is estimated,
    so a site without managed partitions never pays for a long sacct) joins it then."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (),
                 history: Callable[[], list[Finished]] | None = None) -> None:
        self.past = sorted(filter(None, map(finished_from_row, rows)), key=_order)
        self.history = history
        self.estimator = RuntimeEstimator()
        self.estimator.observe_all(self.past)
        self.known = len(self.past)

    def estimate(self, job: SlurmJob, s: CostSummary, now: float) -> Estimate:
        self._read_history()
        return self.estimator.estimate(self.request(job, s), now)

    def expected_run(self, job: SlurmJob, s: CostSummary, predicted_s: float, now: float) -> float:
        """The run time to show the policy for a running plain job predicted at ``predicted_s``:
        past that, what its similar jobs that ran as long ran, capped at its time limit, never
        ending before now (`RuntimeEstimator.expected_run`, as `whatif --managed` replays it)."""
        start = job.start_time if job.start_time is not None else now
        self._read_history()
        return self.estimator.expected_run(self.request(job, s), predicted_s, max(0.0, now - start), now)

    def _read_history(self) -> None:
        if self.history is not None:
            load, self.history = self.history, None
            more = load()
            if more:  # in time order with what the records taught (the estimator learns in order)
                self.past = sorted([*self.past, *more], key=_order)
                self.estimator = RuntimeEstimator()
                self.estimator.observe_all(self.past)
                self.known = len(self.past)
                log.info("plain jobs: %d finished GPU jobs from sacct join the estimates", len(more))

    @staticmethod
    def request(job: SlurmJob, s: CostSummary) -> Request:
        return request_of(job.user, job.name, s.min_gpus, job.time_limit, job.partition,
                          job.extra.get("account", ""), script_of(s.sig))

    def finished(self, row: dict[str, Any]) -> None:
        """A plain job just ended: it teaches the estimates of the jobs after it."""
        f = finished_from_row(row)
        if f is not None:
            self.past.append(f)
            self.estimator.observe(f)
            self.known += 1


def _order(f: Finished) -> tuple[float, float]:
    return (f.end, f.submit)


def is_plain(summary_text: str | None) -> bool:
    if not summary_text:
        return False
    try:
        return CostSummary.decode(summary_text).plain
    except ValueError:
        return False


def finished_from_row(row: dict[str, Any]) -> Finished | None:
    """A finished plain job's record as the estimator learns it (None: not one, or not ended)."""
    if row.get("state") != "finished" or not is_plain(row.get("summary")):
        return None
    observed, started = row.get("observed"), row.get("started")
    if not observed or observed <= 0 or started is None:
        return None
    s = CostSummary.decode(row["summary"])
    limit = row.get("time_limit")
    req = request_of(row.get("user") or "", row.get("name") or "", s.min_gpus,
                     float(limit) if limit is not None else None, script=script_of(s.sig))
    submit = row.get("submit_time") or started
    return Finished(request=req, submit=float(submit), start=float(started), elapsed=float(observed),
                    state=row.get("slurm_state") or "COMPLETED")


def load(db: Any, slurm: Any = None) -> PlainJobs:
    """The estimator from the finished plain jobs in the records and, when Slurm keeps accounting,
    the GPU jobs of the last 30 days in `sacct` that the records do not have (any partition: a
    user's jobs elsewhere say how long their jobs run too), read when first needed."""
    rows = list(db.query("select * from jobs where state = 'finished' and summary like '%;pl=1%'"))
    known = {str(r["slurm_id"]) for r in rows}
    out = PlainJobs(rows, (lambda: accounting(slurm, known)) if slurm is not None else None)
    if out.known:
        log.info("plain jobs: %d finished ones in the records teach the estimates", out.known)
    return out


def accounting(slurm: Any, known_ids: set[str]) -> list[Finished]:
    """The finished GPU jobs `sacct` has since HISTORY_SINCE, less ``known_ids``; [] without
    accounting or when sacct fails (the records alone then teach the estimates)."""
    try:
        if not hasattr(slurm, "history") or not slurm.config().accounting:
            return []
        text = slurm.history(HISTORY_SINCE, None, None, (*FIELDS, "JobName"))
        recs = [r for r in parse_sacct(text, "sacct").records if r.job_id.split("_")[0] not in known_ids]
    except (SlurmError, SacctError, ValueError) as e:
        log.warning("plain jobs: the site's accounting not read (%s): estimates from the records only",
                    str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return []
    return finished_from_records(recs)
