"""What the service learns from finished jobs and predicts waiting ones from.

`job_finished` (once per finished job, lyasched.live.sync): a job's step report refits its
model's profile (`job_ended`: reads the report from the job's working directory, writes the cost
table and the launcher's start-up sample), else its observed/predicted run time refines the
model's correction. `waiting_inputs` / `model_inputs`: the learned profile and the start-up term
a slot predicts from (lyasched.live.inputs), cached for a second; `submit_predictions`: the same
numbers as lyasub prints them. The fitting itself is pure: lyasched.costmodel.learn.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from lyasched.costmodel.cost import ClusterSpec, Profile
from lyasched.costmodel.learn import MAX_REPORT_BYTES, Run, parse_steps

if TYPE_CHECKING:
    from lyasched.store.jobrecord import JobRecord

log = logging.getLogger("lyasched.live.learning")


def job_ended(db: Any, rec: JobRecord, device: str, cluster: ClusterSpec | None, workdir: str | None,
              started: float | None = None) -> bool:
    """Learn from a finished job's step report, if it wrote one: record the run, refit the
    model's profile (cost table, provenance 'learned from N runs') and the start-up time of
    its launcher on this cluster. True when the job reported (the caller then skips the
    run-time correction, which is for jobs that never report)."""
    from lyasched.costmodel import startup
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

    from lyasched.costmodel import startup
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

    from lyasched.costmodel.cost import CostModel
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


def ran_on_type(row: dict, type_of: dict[str, str]) -> str:
    """The cost-table device key of the one GPU type of the nodes a job ran on (its record's
    ``nodes``), '' when they are untyped, mixed or unknown."""
    import json

    from lyasched.profile.signature import device_type

    try:
        nodes = json.loads(row.get("nodes") or "[]")
    except ValueError:
        return ""
    types = {type_of.get(str(n), "") for n in nodes} if isinstance(nodes, list) else set()
    return device_type(next(iter(types))) if len(types) == 1 and "" not in types else ""


def typed_inputs(db: Any, summary: Any, device: str, src_type: str, user: str | None = None,
                 table: Any = None) -> tuple[Profile | None, float]:
    """`model_inputs` on GPU type ``device`` for a job whose summary's profile is of ``src_type``:
    the model's learned profile there when its runs on that type reported; else (the types differ)
    a learned or measured profile of another type, or the summary's, predicted by the roofline
    (lyasched.live.typecost.type_profile); None when the summary itself is of ``device``."""
    from lyasched.live.typecost import type_profile

    learned, s = model_inputs(db, summary.sig, device, user)
    if learned is not None or not src_type or src_type == device:
        return learned, s
    p, _how = type_profile(db, summary.sig, device, summary.to_profile(), src_type, table, user)
    return p, s


def job_finished(db: Any, row: dict, slurm_state: str, observed: float | None, device: str,
                 cluster: ClusterSpec | None, workdir: Callable[[], str | None], src_type: str = "",
                 table: Any = None) -> None:
    """What a finished job teaches the cost table (the service calls it once per finished job):
    a COMPLETED job with a prediction and an observed run time creates its model's entry from
    its cost summary the first time; then its step report refits the profile (`job_ended`), or,
    when it wrote none, its observed/predicted ratio refines the correction. ``device``: the GPU
    type the job ran on; ``src_type``: the type its summary's profile is of (a first entry of
    another type is the roofline's prediction from it, lyasched.live.typecost). ``workdir``: where
    the job wrote its report, asked only when needed."""
    from lyasched.costmodel import startup
    from lyasched.store import costtable, records
    from lyasched.store.jobrecord import JobRecord
    from lyasched.summary import CostSummary

    pred = row.get("predicted")
    if slurm_state != "COMPLETED" or not observed or not pred or row.get("refined"):
        return
    try:
        if costtable.get(db, row["sig"], device) is None and row.get("summary"):
            from lyasched.live.typecost import on_type

            s = CostSummary.decode(row["summary"])
            p = on_type(s.to_profile(), s.profile_type or src_type, device, table)
            costtable.put(db, {
                "signature": s.sig, "device_type": device, "model": s.sig, "alpha": p.alpha, "beta": p.beta,
                "params": p.params, "bytes_per_param": p.bytes_per_param, "m0": p.mem_base,
                "m1": p.mem_per_sample, "source": "measured" if s.source == "m" and p.source != "estimated" else "estimated",
            })
        if not job_ended(db, JobRecord.from_row(row), device, cluster, workdir()):
            costtable.refine(db, row["sig"], device, *startup.steady(float(pred), float(observed), startup.seconds(db)))
        records.upsert_job(db, row["uid"], refined=1)
    except ValueError as e:
        log.warning("cost table refinement for %s skipped: %s", row["slurm_id"], e)


def type_predictions(db: Any, summary: Any, nodes: Any, config: Any, user: str | None = None,
                     device: str = "") -> dict[str, dict[int, float]]:
    """Predicted run time (s) of a job for each GPU type its nodes have (and it allows) and each GPU
    count it may run on there, as `lyastat JOB` shows them: per type, the model's learned profile
    there, else the roofline's prediction from a measured type or from its summary
    (`typed_inputs`); the type's memory (the roofline table's) limits the counts; the type's
    correction and the start-up term as the service adds them. ``nodes``: the GPU nodes
    (`NodeInfo`); ``device``: the key the summary's profile is of when it has no ``pt``. {} on
    untyped nodes."""
    from dataclasses import replace

    from lyasched.clusterview import cluster_view
    from lyasched.costmodel.cost import CostModel
    from lyasched.live.typecost import node_groups
    from lyasched.profile.signature import device_type
    from lyasched.security import bounded_correction
    from lyasched.store import costtable

    groups = node_groups(nodes)
    allowed = summary.gpu_types or tuple(t for t in groups if t)
    out: dict[str, dict[int, float]] = {}
    for t in allowed:
        typed = [n for n in nodes if n.gpu_type == t]
        if not t or not typed:
            continue
        view = cluster_view(typed, config, db)
        gt = config.gpu_types.get(t.lower())
        spec = replace(view.spec, gpu_mem=gt.memory) if gt is not None else view.spec
        key = device_type(t)
        profile, startup_s = typed_inputs(db, summary, key, summary.profile_type or device, user, config.gpu_types)
        profile = profile or summary.to_profile()
        entry = costtable.get(db, summary.sig, key)
        corr = bounded_correction(entry.correction if entry else None)
        cost = CostModel(spec)
        gpn = spec.gpus_per_node
        counts = cost.allowed_counts(profile, summary.global_batch, summary.min_gpus, summary.max_gpus)
        out[t] = {g: corr * cost.run_time(profile, summary.global_batch, summary.iterations, g, g > gpn) + startup_s
                  for g in counts}
    return out
