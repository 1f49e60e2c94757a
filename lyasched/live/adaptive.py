"""The service's side of an adaptive-batch job (lyasub --adaptive-batch, docs/service.md "Adaptive
batch"): read what the running job reports (batch, phi, base steps: the ``.adaptive.json``
sidecar of its step report, lyasched.job.steptimes), keep it per job (lyasched.store.adaptive),
give the policy the job as `Job.adaptive` with that phi and progress (lyasched.live.inputs), and
hand the job the batch the policy chose at its (re)start: key ``cb=N`` of the cost summary in the
job's Comment, which launch.sbatch reads (lyasched.live.starter, lyasched.live.mover).

phi is the job's latest smoothed estimate, taken as constant for the rest of the run (it usually
grows: the cautious side); a job that has not reported one yet is given `PRIOR_PHI`, which makes
its base batch its best (a fixed-batch job until it measures).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import replace
from typing import Any

from lyasched.costmodel.goodput import Adaptive, NoiseScale, best_batch
from lyasched.costmodel.jobspec import Job
from lyasched.slurm.types import HOLDING_STATES
from lyasched.store import adaptive as store
from lyasched.summary import CostSummary

log = logging.getLogger("lyasched.live")

MAX_STATUS_BYTES = 4096
READ_EVERY_S = 60.0  # a running job's report is read at most this often
PRIOR_PHI = 1e-6  # no estimate yet: no batch beyond M0 is worth its cost
_MAX = {"batch": 1 << 20, "local": 1 << 20, "accum": 1 << 20, "m0": 1 << 20, "step": 1 << 40}


def parse_status(raw: bytes) -> dict | None:
    """The sidecar's known keys, typed and bounded; None for anything else (the text is the user's)."""
    try:
        m = json.loads(raw.decode())
        out: dict[str, Any] = {}
        for k, hi in _MAX.items():
            v = int(m[k]) if k in ("batch", "m0") else int(m.get(k, 0) or 0)
            if not 0 <= v <= hi:
                return None
            out[k] = v
        for k in ("phi", "eff", "base", "lr", "time"):
            v = m.get(k)
            f = float(v) if v is not None else None
            out[k] = f if f is not None and math.isfinite(f) and 0 <= f < 1e15 else None
        if out["batch"] < 1 or out["m0"] < 1:
            return None
        return out
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, AttributeError, RecursionError):
        return None


def sidecar_parts(slurm_id: str) -> list[str]:
    """Where the job's sidecar is under its working directory (launch.sbatch's LYASCHED_STEPS_FILE)."""
    return [".lyasched", f"steps-{slurm_id}.adaptive.json"]


class Watch:
    """Reads running adaptive jobs' reports into the records (at most every `READ_EVERY_S` per job)."""

    def __init__(self, read_every: float = READ_EVERY_S) -> None:
        self.read_every = read_every
        self._last: dict[str, float] = {}

    def observe(self, db: Any, slurm: Any, seen: dict, now: float, decode: Any) -> int:
        """``seen``: uid -> (SlurmJob, record row); ``decode``: comment -> (summary or None, why).
        Returns how many reports were read."""
        from lyasched import userfiles
        from lyasched.live.learning import workdir_of

        n = 0
        for uid, (job, row) in seen.items():
            if row is None or job.state not in HOLDING_STATES:  # `SlurmJob.running`, without a call per held job
                continue
            s = decode(job.comment)[0]
            if s is None or not s.adaptive:
                continue
            if now - self._last.get(job.job_id, -math.inf) < self.read_every:
                continue
            self._last[job.job_id] = now
            owner = userfiles.uid_of(job.user)
            workdir = workdir_of(slurm, job.job_id) if owner is not None else None
            if workdir is None or owner is None:
                continue
            try:
                got = userfiles.read_user_file(workdir, sidecar_parts(job.job_id), owner, MAX_STATUS_BYTES)
            except userfiles.UserFileError as e:
                if "No such file" not in str(e) and "does not exist" not in str(e):
                    userfiles.warn_once(job.job_id, "adaptive report", e)
                continue
            status = parse_status(got.data) if not got.truncated else None
            if status is not None:
                store.record_status(db, uid, job.job_id, status, now)
                n += 1
        if len(self._last) > 10_000:
            self._last.clear()
        return n


def job_state(db: Any, uid: str) -> tuple[float | None, float]:
    """(phi, base steps done) from the job's records (None, 0 without a report)."""
    row = store.get(db, uid)
    if row is None:
        return None, 0.0
    return row.get("phi"), float(row.get("base") or 0.0)


def adaptive_of(s: CostSummary, phi: float | None) -> Adaptive:
    """The policy's view of an adaptive job: its max batch and a constant noise scale."""
    return Adaptive(max_batch=s.max_batch, noise=NoiseScale.constant(phi if phi and phi > 0 else PRIOR_PHI))


def fraction_done(s: CostSummary, base: float) -> float:
    """Share of its base steps done (kept below 1: a job still running has something left)."""
    return min(max(base / max(1, s.iterations), 0.0), 0.99)


def chosen_batch(job: Job, d: Any, cost: Any, fraction: float) -> int:
    """The batch to hand a job started by decision ``d``: the policy's (``Decision.batch``), else
    the best for its GPUs at its progress (lyasched.costmodel.goodput.best_batch)."""
    if getattr(d, "batch", None):
        return int(d.batch)
    return best_batch(cost, job, d.gpus, len(d.placement) > 1, fraction)


def hand_batch(db: Any, slurm: Any, uid: str, job_id: str, batch: int, now: float | None = None,
               comment: str = "") -> bool:
    """Write the batch into the held job's cost summary (its Comment, key ``cb``) before its release
    and record it; False when Slurm or the backend cannot (failed, or ``comment`` is no adaptive
    summary): the job then starts at the batch it had and re-tunes itself, rather than stay held.
    A Comment, not an AdminComment: a Slurm Operator (the service's usual account) may set it."""
    from lyasched.slurm import SlurmError
    from lyasched.slurm.backend import SlurmComment

    if batch < 1:
        return False
    try:
        s = CostSummary.decode(comment)
    except ValueError:
        s = None
    if s is None or not s.adaptive:
        log.warning("job %s: no adaptive cost summary in its comment: batch %d not handed", job_id, batch)
        return False
    batch = min(int(batch), s.max_batch)
    if not isinstance(slurm, SlurmComment):
        log.warning("job %s: this Slurm backend cannot set a comment: it starts at the batch it had", job_id)
        return False
    try:
        slurm.set_comment(job_id, replace(s, chosen_batch=batch).encode())
    except SlurmError as e:
        log.warning("job %s: batch %d not handed (%s): it starts at the batch it had", job_id, batch,
                    str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
        return False
    store.record_chosen(db, uid, job_id, batch, time.time() if now is None else now)
    return True


def batch_on(ctx: Any, job_id: str, d: Any, placement: Any) -> int | None:
    """The batch to hand an adaptive job started (or moved) onto ``placement`` by ``d``
    (`chosen_batch`), on the type of those nodes when typed (``ctx.adaptive[job_id]``'s per-type
    models, filled by lyasched.live.inputs); None for another job."""
    ad = ctx.adaptive.get(job_id)
    if ad is None or ctx.cost is None:
        return None
    job, cost = ad[0], ctx.cost
    types = {ctx.types[n] for n, _ in placement if 0 <= n < len(ctx.types)}
    if len(ad) > 2 and len(types) == 1 and (hit := ad[2].get(next(iter(types)))) is not None:
        cost, job = hit
    return chosen_batch(job, d, cost, ad[1])
