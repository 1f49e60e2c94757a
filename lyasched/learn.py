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
import re
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
MAX_RANKS = 1 << 16  # ranks and world sizes beyond this are not a real report
MAX_STEP_SECONDS = 86400.0  # one step longer than a day is not a step time


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
    user: str = ""  # who ran it: one user's reports count once however many jobs they ran

    @property
    def gpus(self) -> int:
        return sum(self.placement)


def read_steps(path: str | Path) -> StepReport | None:
    """Parse a step file (a tool's or a test's own; the service reads users' files through
    `lyasched.userfiles` and `parse_steps`); None when it holds no complete step."""
    return parse_steps(Path(path).read_bytes())


MAX_REPORT_BYTES = 16 << 20  # a longer report is parsed up to here (its first steps are as good as all)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")


def _name(v: Any) -> str:
    """A name a job reported (model, launcher, cluster), kept only when it is a short plain token."""
    s = str(v) if isinstance(v, (str, int)) else ""
    return s if _NAME.fullmatch(s) else ""


def _num(v: Any, default: float = 0.0) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return f if math.isfinite(f) else default


def parse_steps(data: bytes | str) -> StepReport | None:
    """`StepReport` of a report's text; None when it holds no complete step. Malformed lines are
    skipped, names that are not plain tokens dropped, numbers bounded: the text is the user's."""
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    meta: dict[int, dict] = {}
    steps: dict[int, dict[int, tuple[float, float]]] = {}
    for line in text.splitlines():
        f = line.split("\t")
        try:
            if f[0] == "M" and len(f) == 3:
                m = json.loads(f[2])
                if isinstance(m, dict) and 0 <= int(f[1]) < MAX_RANKS:
                    meta[int(f[1])] = m
            elif f[0] == "S" and len(f) == 5:
                rank, i = int(f[1]), int(f[2])
                begin, dur = float(f[3]), float(f[4])
                if math.isfinite(begin) and math.isfinite(dur) and 0 <= dur <= MAX_STEP_SECONDS \
                        and 0 <= rank < MAX_RANKS and 0 <= i:
                    steps.setdefault(rank, {})[i] = (begin, dur)
        except (ValueError, json.JSONDecodeError, RecursionError):
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
    world = len(steps)  # every rank reports (lyasched.steptimes): a claimed world of any other size is not believed
    nnodes = int(min(max(_num(m0.get("nnodes")) or 1, 1), world))
    gpn = int(min(max(_num(m0.get("gpus_per_node")) or max(1, world // nnodes), 1), MAX_RANKS))
    placement = (gpn,) * nnodes if gpn * nnodes == world else (world,)
    created = min((_num(m.get("t_created")) or first for m in meta.values()), default=first)
    return StepReport(placement, int(min(max(_num(m0.get("local_bsz")), 0), 1 << 24)),
                      float(statistics.median(slowest)), len(counted), len(steps), first, created,
                      _name(m0.get("launcher")), _name(m0.get("cluster")), _name(m0.get("model")))


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


TRUST_USERS = 3  # distinct users whose fits outvote any one of them
LEARN_BOUND = 3.0  # with fewer, the shared profile stays within this factor of the profiled one
BOUND_BATCHES = (1.0, float(1 << 16))  # compute is bounded at these per-GPU batches (and so between)


def refit_shared(base: Profile, cluster: ClusterSpec, runs: Sequence[Run]) -> tuple[Profile, list[str]]:
    """The profile every user's jobs of a model are predicted with, robust to any one user.

    Each user's runs are refitted on their own (`refit`); each parameter is the median over the
    users whose runs measured it (compute: users with 1-GPU runs; all-reduce: users with runs
    on that kind of link), so one user's reports, however many, are one vote. While fewer than
    `TRUST_USERS` users have reported, no vote is a majority of honest ones: the result is then
    kept within `LEARN_BOUND` of ``base`` (the profiled measurement), term by term: compute at
    `BOUND_BATCHES` (so every batch between) and each all-reduce factor. A user who lies thus
    moves others' predictions by at most that factor, and not beyond the honest users' range
    once they are outvoted."""
    by_user: dict[str, list[Run]] = {}
    for r in runs:
        by_user.setdefault(r.user, []).append(r)
    if not by_user:
        return base, []
    votes: dict[str, list[tuple[float, ...]]] = {"compute": [], "intra": [], "inter": []}
    why: list[str] = []
    for user_runs in by_user.values():
        prof, _ = refit(base, cluster, user_runs)
        if any(r.gpus == 1 and r.step_time > 0 for r in user_runs):
            votes["compute"].append((prof.step_time(BOUND_BATCHES[0]), prof.step_time(BOUND_BATCHES[1])))
        for kind, multi in (("intra", lambda r: len(r.placement) == 1), ("inter", lambda r: len(r.placement) > 1)):
            if any(r.gpus > 1 and multi(r) for r in user_runs):
                votes[kind].append((getattr(prof, f"comm_scale_{kind}"),))
    n = len(by_user)
    bound = LEARN_BOUND if n < TRUST_USERS else math.inf

    def pick(vals: list[tuple[float, ...]], i: int, ref: float) -> float:
        v = float(statistics.median(x[i] for x in vals))
        lo, hi = (ref / bound, ref * bound) if ref > 0 else (ref * bound, ref / bound)
        return min(max(v, lo), hi) if math.isfinite(bound) else v

    prof = base
    if votes["compute"]:
        (b1, b2), y = BOUND_BATCHES, [pick(votes["compute"], i, base.step_time(b)) for i, b in enumerate(BOUND_BATCHES)]
        beta = (y[1] - y[0]) / (b2 - b1)
        prof = replace(prof, alpha=y[0] - beta * b1, beta=beta)
        why.append(f"compute from {len(votes['compute'])} user(s)' 1-GPU runs")
    learned = {k: pick(votes[k], 0, getattr(base, f"comm_scale_{k}")) for k in ("intra", "inter") if votes[k]}
    for kind, k in learned.items():
        prof = replace(prof, **{f"comm_scale_{kind}": k})  # type: ignore[arg-type]  # a float field by name
        why.append(f"{kind}-node all-reduce x{k:.3g} of the ring model from {len(votes[kind])} user(s)' runs")
    if len(learned) == 1:  # as in `refit`: the unmeasured kind of link borrows the measured one's factor
        (kind, k), = learned.items()
        other = "inter" if kind == "intra" else "intra"
        prof = replace(prof, **{f"comm_scale_{other}": k})  # type: ignore[arg-type]  # a float field by name
        why.append(f"{other}-node all-reduce x{k:.3g} too (no {other}-node run yet)")
    if math.isfinite(bound):
        why.append(f"kept within x{bound:g} of the profile ({n} user(s) reported, {TRUST_USERS} outvote one)")
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

    from lyasched import userfiles

    if not workdir:
        return False
    job = f"job {rec.slurm_id}"
    owner = userfiles.uid_of(rec.user)
    if owner is None:
        userfiles.warn_once(job, "step report", f"the job's user {rec.user!r} is unknown here")
        return False
    try:
        got = userfiles.read_user_file(workdir, [".lyasched", f"steps-{rec.slurm_id}.tsv"], owner, MAX_REPORT_BYTES)
    except userfiles.UserFileError as e:
        if "No such file" not in str(e):  # a job that never reported is not worth a warning
            userfiles.warn_once(job, "step report", e)
        return False
    data = got.data[: got.data.rfind(b"\n") + 1] if got.truncated else got.data
    if got.truncated:
        userfiles.warn_once(job, "step report", f"longer than {MAX_REPORT_BYTES} bytes: its first part used")
    rep = parse_steps(data)
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
                        str(rec.slurm_id), rec.user or "")
    costtable.learn(db, rec.sig, device, Run(rep.placement, rep.local_bsz, rep.step_time, str(rec.slurm_id),
                                             rec.user or ""),
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


def waiting_inputs(db: Any, summary: Any, device: str, user: str | None = None) -> tuple[Profile, float]:
    """What the service predicts a waiting job of ``user`` from: the model's learned profile
    when its runs have reported (the user's own when they reported; else the job's own cost
    summary), and the start-up term (s). Cached for `CACHE_SECONDS` per model and user;
    learning in this process invalidates the cache."""
    learned, s = model_inputs(db, summary.sig, device, user)
    return learned or summary.to_profile(), s


def model_inputs(db: Any, sig: str, device: str, user: str | None = None) -> tuple[Profile | None, float]:
    """`waiting_inputs` of a model for ``user``'s jobs: the learned profile (None when the
    model's runs never reported) and the start-up term (s); the same for every job of the model
    and user (a slot asks once per model and user)."""
    import sqlite3
    import time

    from lyasched import startup
    from lyasched.store import costtable

    key = (id(db.conn), sig, device, user or "")
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
        hit = _CACHE[key] = (now, db.conn, costtable.learned_profile(db, sig, device, user), s)
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


def submit_predictions(db_path: Any, summary: Any, device: str, cost: Any, counts: Any,
                       user: str | None = None) -> dict[int, float]:
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
            profile, startup_s = waiting_inputs(db, summary, device, user)
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
