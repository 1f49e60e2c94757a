"""Learning a model's profile from the step times its jobs report (`lyasched.steptimes`).

Pure parts: `read_steps` parses a job's step file into a `StepReport` (per-step time of the
slowest rank, placement, local batch, when the first step began); `refit` turns a base
`Profile` and the runs seen so far into a learned one:

- compute: from the 1-GPU runs (a linear fit when two batch sizes were seen, else the base
  t(b) scaled by the median observed/predicted ratio);
- all-reduce: per link kind (one node = intra, several = inter), a factor on the cost
  model's ring all-reduce time, least squares over the multi-GPU runs of that kind of
  (observed step - compute), so the policy's iter_time = compute + comm reproduces them.

`job_ended` is the service's entry point (I/O: reads the file, writes the cost table).
docs/profiling.md ("Learning from every run").
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from lyasched.cost import ClusterSpec, CostModel, Profile, ring_allreduce_time
from lyasched.fit import fit_linear

if TYPE_CHECKING:
    from lyasched.store.jobrecord import JobRecord

log = logging.getLogger("lyasched.learn")

WARMUP_STEPS = 2  # first steps of a rank left out (allocator, caches, DDP bucket rebuild)


@dataclass(frozen=True)
class StepReport:
    """One job's reported steps, reduced to what the cost model needs."""

    placement: tuple[int, ...]  # GPUs (ranks) per node
    local_bsz: int
    step_time: float  # median over steps of the slowest rank's step time (s)
    steps: int  # steps counted (after warm-up)
    ranks: int  # ranks that reported
    first_begin: float  # unix time the first step began (earliest rank)
    created: float  # unix time the first rank's reporter was created (script start)
    launcher: str
    cluster: str
    model: str = ""  # the model name the job was submitted with (lyasub --model), if it said


@dataclass(frozen=True)
class Run:
    """One observed placement of a model: what `refit` learns from."""

    placement: tuple[int, ...]
    local_bsz: float
    step_time: float
    job_id: str = ""

    @property
    def gpus(self) -> int:
        return sum(self.placement)


def read_steps(path: str | Path) -> StepReport | None:
    """Parse a step file; None when it holds no complete step. Malformed lines are skipped."""
    meta: dict[int, dict] = {}
    steps: dict[int, dict[int, tuple[float, float]]] = {}
    with Path(path).open(errors="replace") as fh:
        for line in fh:
            f = line.rstrip("\n").split("\t")
            try:
                if f[0] == "M" and len(f) == 3:
                    meta[int(f[1])] = json.loads(f[2])
                elif f[0] == "S" and len(f) == 5:
                    begin, dur = float(f[3]), float(f[4])
                    if math.isfinite(begin) and math.isfinite(dur) and dur >= 0:
                        steps.setdefault(int(f[1]), {})[int(f[2])] = (begin, dur)
            except (ValueError, json.JSONDecodeError):
                continue
    if not steps:
        return None
    first = min(b for per in steps.values() for b, _ in per.values())
    common = set.intersection(*(set(per) for per in steps.values()))
    counted = sorted(i for i in common if i >= WARMUP_STEPS) or sorted(common)
    if not counted:
        return None
    slowest = [max(per[i][1] for per in steps.values()) for i in counted]
    m0 = meta.get(0) or next(iter(meta.values()), {})
    world = int(m0.get("world") or len(steps))
    nnodes = max(1, int(m0.get("nnodes") or 1))
    gpn = int(m0.get("gpus_per_node") or max(1, world // nnodes))
    placement = (gpn,) * nnodes if gpn * nnodes == world else (world,)
    created = min((float(m.get("t_created") or first) for m in meta.values()), default=first)
    return StepReport(placement, int(m0.get("local_bsz") or 0), float(statistics.median(slowest)), len(counted),
                      len(steps), first, created, str(m0.get("launcher") or ""), str(m0.get("cluster") or ""),
                      str(m0.get("model") or ""))


def _comm_unit(base: Profile, cluster: ClusterSpec, placement: Sequence[int]) -> float:
    g = int(sum(placement))
    link = cluster.inter if len(placement) > 1 else cluster.intra
    return ring_allreduce_time(base.grad_bytes, g, link)


def refit(base: Profile, cluster: ClusterSpec, runs: Sequence[Run]) -> tuple[Profile, list[str]]:
    """The learned profile and one line per change, saying why (see the module doc)."""
    why: list[str] = []
    prof = base
    single = [r for r in runs if r.gpus == 1 and r.step_time > 0]
    batches = {r.local_bsz for r in single}
    if len(batches) >= 2:
        f = fit_linear([r.local_bsz for r in single], [r.step_time for r in single])
        prof = replace(prof, alpha=f.intercept, beta=f.slope)
        why.append(f"compute refitted on {len(single)} 1-GPU run(s) at {len(batches)} batch sizes")
    elif single:
        ratios = [r.step_time / base.step_time(r.local_bsz) for r in single if base.step_time(r.local_bsz) > 0]
        if ratios:
            c = float(statistics.median(ratios))
            prof = replace(prof, alpha=base.alpha * c, beta=base.beta * c)
            why.append(f"compute x{c:.3f} from {len(single)} 1-GPU run(s)")
    learned: dict[str, float] = {}
    for kind, pick in (("intra", lambda r: len(r.placement) == 1), ("inter", lambda r: len(r.placement) > 1)):
        multi = [r for r in runs if r.gpus > 1 and pick(r) and r.step_time > 0]
        pairs = [(_comm_unit(base, cluster, r.placement), r.step_time - prof.step_time(r.local_bsz)) for r in multi]
        pairs = [(u, e) for u, e in pairs if u > 0]
        if not pairs:
            continue
        # least squares of extra = k * unit, relative to each run's step time
        num = sum(u * e / r.step_time**2 for (u, e), r in zip(pairs, multi))
        den = sum(u * u / r.step_time**2 for (u, _), r in zip(pairs, multi))
        k = max(0.0, num / den) if den > 0 else 1.0
        prof = replace(prof, **{f"comm_scale_{kind}": k})  # type: ignore[arg-type]  # a float field by name
        learned[kind] = k
        gs = sorted({r.gpus for r in multi})
        why.append(f"{kind}-node all-reduce x{k:.3g} of the ring model from {len(multi)} run(s) on "
                   f"{'/'.join(map(str, gs))} GPUs")
    # A kind of link with no run borrows the other's factor: what the model's all-reduce costs
    # relative to the ring model on one kind is the best guess for the other, and learning must
    # never make the unmeasured kind look cheaper than before relative to the measured one.
    if len(learned) == 1:
        (kind, k), = learned.items()
        other = "inter" if kind == "intra" else "intra"
        prof = replace(prof, **{f"comm_scale_{other}": k})  # type: ignore[arg-type]  # a float field by name
        why.append(f"{other}-node all-reduce x{k:.3g} too (no {other}-node run yet)")
    return prof, why


def predict_step(profile: Profile, cluster: ClusterSpec, placement: Sequence[int], local_bsz: float) -> float:
    """The policy's per-iteration time (compute + comm) of ``placement`` at ``local_bsz``."""
    g = int(sum(placement))
    return CostModel(cluster).iter_time(profile, int(round(local_bsz * g)), g, len(placement) > 1) if g > 1 \
        else profile.step_time(local_bsz)


# ---------------------------------------------------------------- service entry point


def steps_path(workdir: str, job_id: str) -> Path:
    """Where lyasched's launch script points ``LYASCHED_STEPS_FILE`` (templates/launch.sbatch)."""
    return Path(workdir) / ".lyasched" / f"steps-{job_id}.tsv"


def job_ended(db: Any, rec: JobRecord, device: str, cluster: ClusterSpec | None, workdir: str | None,
              started: float | None = None) -> bool:
    """Learn from a finished job's step report, if it wrote one: record the run, refit the
    model's profile (cost table, provenance 'learned from N runs') and the start-up time of
    its launcher on this cluster. True when the job reported (the caller then skips the
    run-time correction, which is for jobs that never report)."""
    from lyasched import startup
    from lyasched.store import costtable

    if not workdir:
        return False
    path = steps_path(workdir, str(rec.slurm_id))
    try:
        rep = read_steps(path)
    except OSError:
        return False
    if rep is None:
        return False
    if rec.sig is None:
        return False
    entry = costtable.get(db, rec.sig, device)
    if entry is None:
        return False
    cluster = cluster or ClusterSpec(nodes=1, gpus_per_node=1)
    start = started if started else rec.started
    if start and rep.first_begin >= start:
        startup.observe(db, rep.cluster or "default", rep.launcher or "unknown", rep.first_begin - float(start),
                        str(rec.slurm_id))
    costtable.learn(db, rec.sig, device, Run(rep.placement, rep.local_bsz, rep.step_time, str(rec.slurm_id)),
                    cluster, model=rep.model)
    invalidate()
    log.info("job %s: learned from %d steps on %s (median %.4f s/step)", rec.slurm_id, rep.steps,
             "".join(map(str, rep.placement)), rep.step_time)
    return True


# (id(conn), sig, device) -> (time, conn, learned profile, start-up s). The entry holds the
# connection itself, so its id cannot be reused by another database while the entry lives.
_CACHE: dict[tuple, tuple[float, Any, Profile | None, float]] = {}
CACHE_SECONDS = 1.0  # a slot reads every waiting job's inputs: one cost-table read per model per second


def invalidate() -> None:
    """Forget cached inputs (after this process learned a profile or a start-up sample)."""
    _CACHE.clear()


def waiting_inputs(db: Any, summary: Any, device: str) -> tuple[Profile, float]:
    """What the service predicts a waiting job from: the model's learned profile when its
    runs have reported (else the job's own cost summary), and the start-up term (s). Cached
    for `CACHE_SECONDS` per model; learning in this process invalidates the cache."""
    learned, s = model_inputs(db, summary.sig, device)
    return learned or summary.to_profile(), s


def model_inputs(db: Any, sig: str, device: str) -> tuple[Profile | None, float]:
    """`waiting_inputs` of a model: its learned profile (None when its runs never reported)
    and the start-up term (s); the same for every job of the model (a slot asks once per model)."""
    import sqlite3
    import time

    from lyasched import startup
    from lyasched.store import costtable

    key = (id(db.conn), sig, device)
    now = time.monotonic()
    hit = _CACHE.get(key)
    if hit is None or now - hit[0] > CACHE_SECONDS:
        try:
            s = startup.seconds(db)
        except sqlite3.OperationalError:
            s = 0.0
        if len(_CACHE) > 256:  # drop expired entries (and the connections they hold)
            for k in [k for k, v in _CACHE.items() if now - v[0] > CACHE_SECONDS]:
                del _CACHE[k]
        hit = _CACHE[key] = (now, db.conn, costtable.learned_profile(db, sig, device), s)
    return hit[2], hit[3]


def workdir_of(slurm: Any, job_id: str) -> str | None:
    """The job's working directory (its step file lives there), from the Slurm interface
    (``scontrol show job``, or pyslurm); None when Slurm no longer knows the job."""
    from lyasched.slurm import as_backend

    try:  # the Slurm interface (lyasched.slurm.backend): scontrol show job, or pyslurm
        return as_backend(slurm).work_dir(job_id)
    except Exception as e:  # noqa: BLE001 -- any failure means: no report to learn from
        log.info("job %s: no working directory from Slurm (%s)", job_id, str(e).splitlines()[0][:200] if str(e) else e)
        return None


def submit_predictions(db_path: Any, summary: Any, device: str, cost: Any, counts: Any) -> dict[int, float]:
    """Predicted run time (s) per GPU count as lyasub prints it, from what the service decides
    with: `waiting_inputs` (the learned profile when the model's runs have reported, else the
    summary's; the start-up term), the calibrated links (`with_calibrated_links`) and the
    model's bounded run-time correction (on the iterations, not the start-up). Not capped at
    the time limit (the service caps there). No readable database: the summary alone."""
    import sqlite3
    from pathlib import Path

    from lyasched.cost import CostModel
    from lyasched.security import bounded_correction
    from lyasched.store import costtable, open_db
    from lyasched.store.cluster import with_calibrated_links

    p = Path(db_path)
    profile, startup_s, corr = summary.to_profile(), 0.0, 1.0
    if p.exists():
        try:
            db = open_db(p)
            profile, startup_s = waiting_inputs(db, summary, device)
            cost = CostModel(with_calibrated_links(db, cost.cluster))
            entry = costtable.get(db, summary.sig, device)
            corr = bounded_correction(entry.correction if entry else None)
        except sqlite3.Error:
            pass
    gpn = cost.cluster.gpus_per_node
    return {g: corr * cost.run_time(profile, summary.global_batch, summary.iterations, g, g > gpn) + startup_s
            for g in counts}


def job_finished(db: Any, row: dict, slurm_state: str, observed: float | None, device: str,
                 cluster: ClusterSpec | None, workdir: Callable[[], str | None]) -> None:
    """What a finished job teaches the cost table (the service calls it once per finished job):
    a COMPLETED job with a prediction and an observed run time creates its model's entry from
    its cost summary the first time; then its step report refits the profile (`job_ended`), or,
    when it wrote none, its observed/predicted ratio refines the correction. ``workdir``: where
    the job wrote its report, asked only when needed."""
    from lyasched import startup
    from lyasched.store import costtable, records
    from lyasched.store.jobrecord import JobRecord
    from lyasched.summary import CostSummary

    pred = row.get("predicted")
    if slurm_state != "COMPLETED" or not observed or not pred or row.get("refined"):
        return
    try:
        if costtable.get(db, row["sig"], device) is None and row.get("summary"):
            s = CostSummary.decode(row["summary"])
            p = s.to_profile()
            costtable.put(db, {
                "signature": s.sig, "device_type": device, "model": s.sig, "alpha": p.alpha, "beta": p.beta,
                "params": p.params, "bytes_per_param": p.bytes_per_param, "m0": p.mem_base,
                "m1": p.mem_per_sample, "source": "measured" if s.source == "m" else "estimated",
            })
        if not job_ended(db, JobRecord.from_row(row), device, cluster, workdir()):
            costtable.refine(db, row["sig"], device, *startup.steady(float(pred), float(observed), startup.seconds(db)))
        records.upsert_job(db, row["uid"], refined=1)
    except ValueError as e:
        log.warning("cost table refinement for %s skipped: %s", row["slurm_id"], e)
